"""Compile a Triton candidate's kernels for a named GPU target (e.g. sm_90) on a machine without a GPU.

The candidate's `ModelNew.forward` runs once on CPU tensors while every Triton launch is intercepted: instead of
running, each launch is typed the way Triton's own launcher would type it and compiled ahead of time with
`triton.compile(ASTSource(...), target=GPUTarget("cuda", arch, 32))` (Triton bundles ptxas, so the cubin is built
too). Nothing executes on a device, so the forward's outputs are garbage and ignored; what matters is that every
kernel, and every autotune config, compiles for the target. Works with Triton >= 3.4.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
import triton
from triton._utils import canonicalize_dtype  # torch dtype -> "fp32", "bf16", ... (Triton 3.4 to 3.8)
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import CUDAOptions
from triton.compiler import ASTSource
from triton.runtime.autotuner import Autotuner
from triton.runtime.jit import JITFunction

from evaluator.wire.exchange import DTYPES as EXCHANGE_DTYPES
from evaluator.wire.problem import import_file
from evaluator.wire.tiers import PRECISION_DTYPES

DTYPES = {precision: EXCHANGE_DTYPES[name] for precision, name in PRECISION_DTYPES.items()}
_loaded = itertools.count()


class TritonCompileError(RuntimeError):
    """A kernel the candidate launched does not compile for the target."""

    def __init__(self, kernel: str, message: str):
        self.kernel, self.message = kernel, message
        super().__init__(f"Triton kernel {kernel!r} failed to compile: {message}")


class NoTritonLaunchError(RuntimeError):
    """ModelNew.forward returned without launching any Triton kernel."""


@dataclass(frozen=True)
class CompiledRecord:
    """One kernel (or one autotune config of it) compiled for the target."""
    kernel: str
    arch: int  # the compute capability compiled for (90: sm_90)
    signature: str  # "x_ptr: *fp32, n: i32, BLOCK_SIZE: constexpr", in parameter order
    constexprs: dict
    num_warps: int
    num_stages: int
    asm: tuple[str, ...]  # the compiled stages present: ttir, ttgir, llir, ptx, cubin
    cubin_bytes: int
    options: dict = field(default_factory=dict)  # launch options passed (num_warps=..., num_stages=..., ...)


def _arg_type(param, value) -> str:
    """The Triton type of one launch argument, as Triton's launcher specializes it ("constexpr" for a constant)."""
    if param.is_constexpr or value is None or isinstance(value, (bool, str, JITFunction, triton.language.constexpr,
                                                                  triton.language.dtype)):
        return "constexpr"  # bools too: taken as compile-time flags here
    annotated = param.annotation_type if isinstance(param.annotation_type, str) and param.annotation_type else None
    if isinstance(value, int):
        if annotated:
            return annotated
        if value == 1 and not param.do_not_specialize:
            return "constexpr"  # Triton specializes an int equal to 1 into a constant
        if -2**31 <= value < 2**31:
            return "i32"
        return "u64" if 2**63 <= value < 2**64 else "i64"
    if isinstance(value, float):
        return annotated or "fp32"
    if hasattr(value, "data_ptr"):  # a tensor (or Triton's MockTensor): a pointer to its element type
        return "*" + canonicalize_dtype(value.dtype)
    raise TypeError(f"argument {param.name!r} of type {type(value).__name__} is not supported by triton_target")


def _aligned(param, value) -> bool:
    """Whether Triton would mark the argument divisible by 16 (`tt.divisibility`), which changes the generated code."""
    if param.do_not_specialize or param.do_not_specialize_on_alignment:
        return False
    if hasattr(value, "data_ptr"):
        return value.data_ptr() % 16 == 0
    return isinstance(value, int) and not isinstance(value, bool) and value % 16 == 0


class _Recorder:
    """Receives the intercepted launches and compiles each distinct one once."""

    def __init__(self, target: GPUTarget):
        self.target = target
        self.records: list[CompiledRecord] = []
        self.seen: set[str] = set()
        self.failure: Exception | None = None  # the first launch that failed, even if the candidate caught it

    def launch(self, fn: JITFunction, args: tuple, kwargs: dict) -> None:
        name = fn.__name__
        # kernel parameters by name, the rest (num_warps, num_stages, num_ctas, maxnreg, ...) are compile options
        options = {k: v for k, v in kwargs.items() if k not in fn.arg_names and v is not None}
        unknown = sorted(set(options) - set(CUDAOptions.__dataclass_fields__))
        if unknown:  # Triton's launcher refuses them too (KeyError), so the candidate would fail on the GPU
            raise TritonCompileError(name, f"launch keyword(s) {unknown} are neither parameters nor options")
        try:
            bound = fn.signature.bind(*args, **{k: v for k, v in kwargs.items() if k in fn.arg_names})
        except TypeError as e:
            raise TritonCompileError(name, f"the launch's arguments do not fit its parameters: {e}") from None
        bound.apply_defaults()
        signature, constexprs, attrs = {}, {}, {}
        for param in fn.params:
            value = bound.arguments[param.name]
            signature[param.name] = _arg_type(param, value)
            if signature[param.name] == "constexpr":
                constexprs[param.name] = value
            elif _aligned(param, value):
                attrs[(param.num,)] = [["tt.divisibility", 16]]
        key = repr((fn.cache_key, signature, constexprs, sorted(attrs), sorted(options.items())))
        if key in self.seen:  # the same kernel launched again with the same specialization (e.g. once per layer)
            return
        self.seen.add(key)
        try:
            compiled = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=self.target, options=options)
        except Exception as e:  # CompilationError (front end), MLIR pass failures, PTXASError, ...
            raise TritonCompileError(name, str(e).strip() or type(e).__name__) from e
        cubin = compiled.asm.get("cubin", b"")
        self.records.append(CompiledRecord(
            kernel=name, arch=compiled.metadata.target.arch,
            signature=", ".join(f"{k}: {v}" for k, v in signature.items()),
            constexprs={k: getattr(v, "value", v) for k, v in constexprs.items()},
            num_warps=compiled.metadata.num_warps, num_stages=compiled.metadata.num_stages,
            asm=tuple(compiled.asm.keys()), cubin_bytes=len(cubin), options=options))


@contextlib.contextmanager
def intercept_launches(recorder: _Recorder):
    """Route every Triton launch in the block to `recorder` instead of a device; restores Triton afterwards.

    `kernel[grid](...)` (KernelInterface.__getitem__) and `kernel.warmup(...)` both end in `JITFunction.run`, so
    patching it catches every plain launch. `Autotuner.run` is replaced to launch every config, unbenchmarked.
    `Heuristics.run` is left as it is: it only fills in its meta-parameters and calls the wrapped kernel's `run`,
    which is patched whichever way autotune and heuristics are stacked."""

    def jit_run(fn, *args, grid=None, warmup=False, **kwargs):
        try:
            recorder.launch(fn, args, kwargs)
        except Exception as e:
            recorder.failure = recorder.failure or e  # kept: a candidate may catch it and fall back to torch
            raise

    def autotune_run(tuner, *args, **kwargs):
        for config in tuner.configs:  # every config, even those prune_configs_by would drop
            meta = config.all_kwargs()
            if config.pre_hook is not None:  # may set what compiling needs (e.g. a tensor descriptor's block shape)
                config.pre_hook({**dict(zip(tuner.arg_names, args)), **kwargs, **meta})
            tuner.fn.run(*args, **kwargs, **meta)

    saved = [(JITFunction, JITFunction.__dict__["run"]), (Autotuner, Autotuner.__dict__["run"])]
    JITFunction.run, Autotuner.run = jit_run, autotune_run
    try:
        yield recorder
    finally:
        for cls, original in saved:
            cls.run = original


def compile_for_target(candidate_path: str | Path, reference_path: str | Path, *, arch: int = 90,
                       dtype: str = "fp32", sizes: dict | None = None) -> list[CompiledRecord]:
    """Compile every Triton kernel (every autotune config) that the candidate's ModelNew.forward launches, for
    `GPUTarget("cuda", arch, 32)`, without a GPU. Raises TritonCompileError when one does not compile and
    NoTritonLaunchError when the forward launches none."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, not {dtype!r}")
    if triton.knobs.runtime.interpret:  # @triton.jit would then build interpreter functions, never compiled
        raise RuntimeError("TRITON_INTERPRET is set: unset it to compile for a target")
    torch_dtype = DTYPES[dtype]
    run = next(_loaded)
    names = (f"_triton_target_reference_{run}", f"_triton_target_candidate_{run}")
    recorder = _Recorder(GPUTarget("cuda", arch, 32))
    try:
        reference = import_file(Path(reference_path), names[0])
        for name, value in (sizes or {}).items():  # a size preset, as the referee sets it
            if not hasattr(reference, name):
                raise KeyError(f"the reference defines no size {name!r}")
            setattr(reference, name, value)
        candidate = import_file(Path(candidate_path), names[1])
        model = candidate.ModelNew(*reference.get_init_inputs()).to(torch_dtype)
        inputs = [x.to(torch_dtype) if torch.is_tensor(x) and x.is_floating_point() else x
                  for x in reference.get_inputs()]
        with torch.no_grad(), intercept_launches(recorder):
            try:
                model(*inputs)  # outputs are garbage (no kernel ran): ignored
            except Exception:
                if recorder.failure is None:  # else the candidate re-raised our error as its own: report ours
                    raise
    finally:
        for name in names:
            sys.modules.pop(name, None)
    if recorder.failure is not None:
        raise recorder.failure
    if not recorder.records:
        raise NoTritonLaunchError(f"{Path(candidate_path).name}: ModelNew.forward launched no Triton kernel")
    return recorder.records
