"""What a verdict is judged in and against: the backend a candidate is written in, the precision it runs at, and the
tolerance tiers (`strict`, `loose`, and `matched`, measured by the referee: evaluator.referee.matched).

Nothing here imports torch.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field


class Tolerance(BaseModel):
    """One tolerance tier, `torch.allclose` semantics against a float64 reference."""

    model_config = ConfigDict(extra="forbid")
    atol: float = Field(description="Absolute tolerance.")
    rtol: float = Field(description="Relative tolerance.")

    def atol_for(self, tensor: str, scale: float = 0.0) -> float:
        """The absolute tolerance of one compared tensor (`output`, `bn.running_mean`) whose largest magnitude in this
        comparison is `scale`: the same for every tensor here."""
        return self.atol

    @property
    def scaled(self) -> bool:
        """Whether `atol_for` needs the compared tensor's largest magnitude."""
        return False


class MatchedTolerance(Tolerance):
    """The `matched` tier (evaluator.referee.matched): per tensor, MATCHED_FACTOR times eager's own largest error at the
    problem's precision over the tensor's largest magnitude, measured on fresh draws of each input distribution; the
    bound of a comparison is that ratio times the compared tensor's own largest magnitude (so a distribution of larger
    outputs lends no room to one of smaller), plus `rtol`, a few of the dtype's epsilon relative to each element.
    `atol` is the output's ratio."""

    by_tensor: dict[str, float] = Field(default_factory=dict, description="Tensor name -> its bound over its magnitude.")

    def atol_for(self, tensor: str, scale: float = 0.0) -> float:
        return self.by_tensor.get(tensor, 0.0) * scale

    @property
    def scaled(self) -> bool:
        return True


# strict: KernelBench's fp32 tolerance today; loose: KernelBench v0, and KernelBench's (torchbench's) for fp16/bf16.
DEFAULT_TOLERANCES = {"strict": Tolerance(atol=1e-4, rtol=1e-4), "loose": Tolerance(atol=1e-2, rtol=1e-2)}
MATCHED_TIER = "matched"
# The multiple of eager's own error a `matched` candidate may have. Eager's error is measured on a few draws, a
# candidate's over every compared call (some fifty): the largest of more draws is a little larger, and a kernel that sums
# in another order (a split reduction, another GEMM tiling) is as accurate as eager without matching it bit for bit.
MATCHED_FACTOR = 4.0
MATCHED_ULPS = 2.0  # `matched`'s room relative to each element, in the dtype's epsilon: two roundings more than eager
# What a problem may be written in, and at which precision it is judged (KernelBench's `backend` and `precision`).
Backend = Literal["cuda", "triton", "cpp"]
Precision = Literal["fp32", "fp16", "bf16"]
BACKENDS: tuple[str, ...] = get_args(Backend)
PRECISIONS: tuple[str, ...] = get_args(Precision)
PRECISION_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}  # each precision's torch dtype, by name
DEVICE_BACKENDS = {"cuda": ("cuda", "triton"), "cpu": ("cpp",)}  # the backends whose kernels each device runs
DEFAULT_BACKEND = {"cuda": "cuda", "cpu": "cpp"}
# A tier tighter than this cannot be passed at half precision (bf16's unit roundoff is 3.9e-3): kept for fp32 alone.
HALF_PRECISION_FLOOR = 1e-2


def resolve_backend(device: str, *choices: str | None, compile_only: bool = False) -> str:
    """The first backend given among `choices` (a run's, then the problem's), else the device's default; ValueError for
    one whose kernels `device` cannot run (CUDA C++ built on a CPU machine without running: `compile_only`)."""
    backend = next((c for c in choices if c), DEFAULT_BACKEND.get(device, "cuda"))
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: {', '.join(BACKENDS[:-1])} or {BACKENDS[-1]}")
    if backend not in DEVICE_BACKENDS.get(device, ()) and not (compile_only and backend == "cuda"):
        runs_on = "a GPU" if backend in DEVICE_BACKENDS["cuda"] else "the CPU"
        raise ValueError(f"backend {backend!r} runs on {runs_on}, not on {device!r}")
    return backend


def keyed_backend(backend: str, device: str) -> str | None:
    """What a verdict's key says of its backend (evaluator.wire.identity.verdict_key): None for the device's default."""
    return None if backend == DEFAULT_BACKEND.get(device) else backend


def tolerances_for(tolerances: dict[str, Tolerance], precision: str) -> dict[str, Tolerance]:
    """The tiers a problem's verdicts carry at `precision` (before `matched`, which the referee measures and adds): its
    own at fp32; at fp16 and bf16 those at least HALF_PRECISION_FLOOR in both bounds, else KernelBench's `loose`."""
    if precision == "fp32":
        return dict(tolerances)
    kept = {name: tol for name, tol in tolerances.items()
            if tol.atol >= HALF_PRECISION_FLOOR and tol.rtol >= HALF_PRECISION_FLOOR}
    return kept or {"loose": DEFAULT_TOLERANCES["loose"].model_copy()}
