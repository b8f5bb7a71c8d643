"""What a Triton candidate may and may not do, read from its source (no torch, no triton imported here).

Allowed, because it is the candidate's own kernel code and its results are checked like any other:
`@triton.jit` kernels, `@triton.autotune` and `@triton.heuristics` on them (autotuning runs in the warm-up calls;
one inside the clock is the referee's `jit_in_clock`), `tl.inline_asm_elementwise` (inline PTX, as CUDA C++ may
hold `asm`), `tl.extra` device libraries.

Refused (`triton_escape`, reject): timing inside the candidate (`triton.testing`: `do_bench` would run the kernel
outside the calls that are judged, and a candidate that times itself can tell a clocked call from a checked one),
Triton's runtime machinery (`triton.runtime.driver`, `triton.runtime.cache`, `triton.knobs`, `triton.compiler`,
`triton.tools`: loading binaries out of sight, cache entries under another kernel's key, the launch hooks the
executor watches compiles with). Writes to anything of Triton's are `monkeypatch` already (evaluator.checks.
python_names.WRITE_RULES).

Under the `triton` backend a source with no `@triton.jit` kernel is `no_custom_kernel`; the referee also asks that
one of them runs (evaluator.referee.phases.profile_phase).
"""

from __future__ import annotations

import ast

# Dotted names a Triton candidate may not use (and what lies below them), with why.
TRITON_REFUSED = {
    "triton.testing": "times kernels itself",
    "triton.runtime.driver": "drives the GPU driver's interface directly",
    "triton.runtime.cache": "reaches Triton's compile cache",
    "triton.knobs": "changes Triton's settings, hooks or cache",
    "triton.compiler": "compiles or loads kernels outside the JIT",
    "triton.compile": "compiles or loads kernels outside the JIT",
    "triton.tools": "loads or links compiled kernels",
    "triton.runtime.jit.JITFunction": "reaches the JIT's own machinery",
}


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _is_jit(decorator: ast.AST) -> bool:
    """`@triton.jit`, `@jit`, `@triton.jit(...)`."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = _dotted(target)
    return name is not None and name.rsplit(".", 1)[-1] == "jit"


def triton_kernel_names(source: str) -> list[str]:
    """The names of the source's `@triton.jit` functions (at any depth), in order; [] when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return []
    return [node.name for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(map(_is_jit, node.decorator_list))]


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> the dotted name it was imported as (`tr` -> `triton`, `do_bench` -> `triton.testing.do_bench`)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def triton_findings(source: str) -> list[tuple[int, str]]:
    """(line, reason) for each refused Triton name the source uses, by its imports and dotted names."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return []
    aliases = _aliases(tree)
    found: list[tuple[int, str]] = []
    inner = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}  # judged as the whole chain

    def judge(full: str, line: int) -> None:
        for refused, why in TRITON_REFUSED.items():
            if full == refused or full.startswith(refused + "."):
                found.append((line, f"uses {full} ({why})"))
                return

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                judge(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                judge(f"{node.module}.{alias.name}", node.lineno)
        elif (isinstance(node, ast.Call) and _dotted(node.func) in ("getattr", "builtins.getattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            base = _dotted(node.args[0])  # getattr(triton, "knobs"): the name it spells
            if base is not None:
                head, _, rest = base.partition(".")
                full = ".".join(p for p in (aliases.get(head, head), rest) if p)
                judge(f"{full}.{node.args[1].value}", node.lineno)
        elif isinstance(node, ast.Attribute) and id(node) not in inner:
            name = _dotted(node)
            if name is not None:
                head, _, rest = name.partition(".")
                judge(f"{aliases.get(head, head)}.{rest}" if rest else aliases.get(head, head), node.lineno)
    return sorted(set(found))
