"""Triton's JIT work in the executor, counted: compiles (an in-memory cache miss: a new kernel or a new
specialization, whether its binary then comes from the disk cache or the compiler) and autotune benchmarks (one per
config tried). Every reply carries the count (`Reply.jit_events`); the referee flags `jit_in_clock` where it grew
during the ranked windows (evaluator.referee.time_phase): that work belongs in the warm-up, and a figure with it
inside is not the kernel's.

Installed by the executor before the candidate is imported, at the class level, so every kernel the candidate
defines is counted. The candidate shares this interpreter and could undo it; the static checks refuse the names that
reach it (`triton_escape`, `monkeypatch`), and a candidate hiding a compile inside the clock only hides its own cost.
"""

from __future__ import annotations

import weakref

# What the executor's guard keeps (evaluator.executor.guard): a candidate putting Triton's own methods back is seen.
WATCHED = ["triton.runtime.jit.JITFunction", "triton.runtime.autotuner.Autotuner"]
_events = 0
_installed = False
_tuners: weakref.WeakSet = weakref.WeakSet()


def install() -> bool:
    """Count from now on; False where Triton cannot be imported (then `events()` is None)."""
    global _installed
    if _installed:
        return True
    try:
        from triton.runtime import autotuner, jit
    except Exception:  # no Triton here: nothing of it to watch
        return False
    if hasattr(jit.JITFunction, "_do_compile"):
        compile_ = jit.JITFunction._do_compile

        def _do_compile(self, *args, **kwargs):
            _count()
            return compile_(self, *args, **kwargs)

        jit.JITFunction._do_compile = _do_compile
    else:  # an older Triton: each JITFunction takes the module's `compile` as it is made
        compile_function = jit.compile

        def counted_compile(*args, **kwargs):
            _count()
            return compile_function(*args, **kwargs)

        jit.compile = counted_compile
    if hasattr(autotuner.Autotuner, "_bench"):
        bench = autotuner.Autotuner._bench

        def _bench(self, *args, **kwargs):
            _tuners.add(self)
            _count()
            return bench(self, *args, **kwargs)

        autotuner.Autotuner._bench = _bench
    _installed = True
    return True


def _count() -> None:
    global _events
    _events += 1


def events() -> int | None:
    return _events if _installed else None


def autotuned() -> list[str]:
    """Each autotuned kernel's chosen configuration per tuning key: `matmul_kernel: BLOCK_M=128, ..., num_warps=4`. Only
    Triton's own Config objects, read field by field: a candidate's subclass (its own `__str__`) is never called here."""
    try:
        from triton import Config
    except Exception:
        return []
    chosen = []
    for tuner in list(_tuners):
        try:
            fn = getattr(tuner, "base_fn", None) or getattr(tuner, "fn", None)
            name = fn.__name__ if type(getattr(fn, "__name__", None)) is str else "kernel"
            cache = tuner.__dict__.get("cache")
            for config in (list(cache.values()) if type(cache) is dict else []):
                if type(config) is not Config:
                    continue
                fields = {k: v for k, v in dict(config.__dict__.get("kwargs") or {}).items()
                          if type(k) is str and type(v) in (int, float, bool, str)}
                fields |= {k: config.__dict__[k] for k in ("num_warps", "num_stages")
                           if type(config.__dict__.get(k)) is int}
                chosen.append(f"{name}: " + ", ".join(f"{k}={v}" for k, v in fields.items())[:300])
        except Exception:  # a tuner the candidate made strange: nothing to name, never the profile's failure
            continue
    return sorted(set(chosen))[:32]


def compile_error_at(err: BaseException | None, source: str) -> str | None:
    """Where Triton's compile error (in `err`'s chain) lies in the candidate's own file: `line 23 of the candidate: x =
    tl.load(ptr + offs) (in kernel `add_kernel`): <Triton's message>`; None where there is no such error or its kernel
    is not found in `source`. Triton numbers lines from the kernel's `def`; the feedback needs the file's."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if type(err).__name__ == "CompilationError" or hasattr(err, "src") and hasattr(err, "node"):
            src, node = getattr(err, "src", None), getattr(err, "node", None)
            if isinstance(src, str) and hasattr(node, "lineno"):
                lines = source.splitlines()
                head = next((line.strip() for line in src.splitlines() if line.strip().startswith("def ")), None)
                start = next((i for i, line in enumerate(lines) if head and line.strip() == head), None)
                if start is not None:
                    first = next(i for i, line in enumerate(src.splitlines()) if line.strip() == head)
                    number = start + node.lineno - first  # 1-based: the def's line plus the node's offset from it
                    text = lines[number - 1].strip() if 0 < number <= len(lines) else ""
                    kernel = head.removeprefix("def ").split("(")[0]
                    message = getattr(err, "error_message", None) or ""
                    return f"Triton could not compile kernel `{kernel}`: line {number} of the candidate: {text}\n{message}"
        err = err.__cause__ or err.__context__
    return None
