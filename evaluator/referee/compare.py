"""Comparing a candidate's tensors with the float64 reference, in the referee's own process (which never
runs candidate code): allclose semantics per tolerance tier, the worst errors of a mode's trials.

Every torch function it uses is bound in evaluator.wire.tensors (before anything else is imported) and
every comparison runs under `guarded()`: no torch-function subclass or mode, no Python dispatch mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from evaluator.wire.records import ModeCheck, TensorError
from evaluator.wire.tensors import (
    _abs, _add, _all, _amax, _clamp_min, _detach, _div, _equal, _float64, _is_floating_point, _isfinite, _item,
    _le, _logical_not, _mul, _numel, _pin_memory, _reshape, _sub, _sum, _Tensor, _to, _tolist, chunks, guarded,
    is_plain_tensor, same_values)

COMPARE_CHUNK = 1 << 25  # elements compared at once: 256 MiB of float64 a temporary
# outputs subtracted from the float64 reference without a float64 copy first (torch promotes no float8 type)
SUBTRACTED_AS_THEY_ARE = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def onto(chunk: _Tensor, on: torch.device) -> _Tensor:
    """A chunk moved `on` a device as it is (same dtype: a conversion is the device's work after, not the host's:
    fp32 to float64 on 4 host cores ran at 1.2 GB/s, on the GPU at 5 GB/s, H100). From host memory to a GPU it
    goes through page-locked memory (torch's caching host allocator, reused chunk after chunk), at about twice a
    pageable copy's speed; where the driver refuses page-locked memory (CUDA's error, a RuntimeError), as it is."""
    if chunk.device.type == "cpu" and on.type == "cuda":
        try:
            pinned = _pin_memory(chunk)
        except RuntimeError:
            return _to(chunk, on)
        return _to(pinned, on, non_blocking=True)
    return _to(chunk, on)


def largest_magnitude(expected: _Tensor, on: torch.device) -> float:
    """The largest absolute value of a (float64) tensor, chunk by chunk `on` a device: no whole-size temporary."""
    largest = 0.0
    for wanted in chunks(_reshape(expected, (-1,)), COMPARE_CHUNK):
        largest = max(largest, float(_item(_amax(_abs(onto(wanted, on))))))
    return largest


@dataclass
class TensorCompare:
    """Error of one tensor against its float64 reference."""

    max_abs: float
    max_rel: float
    tiers: dict[str, bool]
    failure: str | None = None


def compare_tensor(name: str, actual, expected: _Tensor, tolerances: dict, rel_floor: float, *,
                   dtype: torch.dtype | None = None, device: torch.device | str | None = None,
                   on: torch.device | str | None = None) -> TensorCompare:
    """`actual` against the float64 `expected`, with allclose semantics per tier, chunk by chunk `on` a device
    (default: expected's; the referee's GPU where the float64 reference lives in host memory). With `dtype` or
    `device`, `actual` must also have them (the output must be what the reference returns)."""
    failed = {tier: False for tier in tolerances}
    if not is_plain_tensor(actual):
        kind = type(actual).__name__
        return TensorCompare(float("inf"), float("inf"), failed, f"{name}: expected a plain torch.Tensor, got {kind}")
    with guarded():
        if tuple(actual.shape) != tuple(expected.shape):
            return TensorCompare(float("inf"), float("inf"), failed,
                                 f"{name}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
        if dtype is not None and actual.dtype != dtype:
            return TensorCompare(float("inf"), float("inf"), failed, f"{name}: dtype {actual.dtype}, expected {dtype}")
        if device is not None and actual.device.type != torch.device(device).type:
            return TensorCompare(float("inf"), float("inf"), failed,
                                 f"{name}: on {actual.device.type}, expected on {torch.device(device).type}")
        on = expected.device if on is None else torch.device(on)
        if not _is_floating_point(expected):
            same = _equal(_to(actual, expected.device, expected.dtype), expected)
            return TensorCompare(0.0 if same else float("inf"), 0.0 if same else float("inf"),
                                 {tier: same for tier in tolerances},
                                 None if same else _int_mismatch(name, actual, expected))
        # in chunks: a whole float64 copy and its temporaries were five times the expected output (a 6.4 GB fp32
        # output took over 60 GB of the GPU), the same maxima and tiers chunk by chunk
        flat_actual, flat_expected = _reshape(_detach(actual), (-1,)), _reshape(expected, (-1,))
        # the one pass subtracts in the reference's dtype: float64 alone (a reference of another keeps the old way)
        fast = (_compare_finite(name, flat_actual, flat_expected, tolerances, rel_floor, on)
                if expected.dtype == _float64 else None)
        return fast if fast is not None else _compare_each(name, flat_actual, flat_expected, tolerances, rel_floor, on)


def _errors(piece: _Tensor, wanted: _Tensor, on: torch.device) -> tuple[_Tensor, _Tensor]:
    """One chunk's |got - want| and |want| in float64 `on` a device. An fp16, bf16 or fp32 `got` is subtracted as it is:
    the subtraction converts it to float64 element by element (exactly, as a whole float64 copy would), without that
    copy on a GPU; any other is converted first."""
    got, want = onto(piece, on), onto(wanted, on)
    if got.dtype not in SUBTRACTED_AS_THEY_ARE:
        got = _to(got, _float64)
    return _abs(_sub(got, want)), _abs(want)


def _needs_bound(passed: bool, largest: float, atol: float, tol) -> bool:
    """Whether a tier still standing needs its bound computed on a chunk whose largest difference is `largest`: where no
    difference passes its absolute room none passes `|want| * rtol + atol` (never negative nor NaN for a finite rtol of
    0 or more and a finite |want|: rounding is monotone), so it holds without the bound; NaN and infinite differences
    always take it."""
    return passed and not (largest <= atol and math.isfinite(atol) and 0 <= tol.rtol < math.inf)


def _within(diff: _Tensor, ref_abs: _Tensor, atol: float, tol) -> bool:
    """allclose's bound over a chunk: every |got - want| <= |want| * rtol + atol."""
    return bool(_item(_all(_le(diff, _add(_mul(ref_abs, tol.rtol), atol)))))


def _compare_finite(name: str, flat_actual: _Tensor, flat_expected: _Tensor, tolerances: dict, rel_floor: float,
                    on: torch.device) -> TensorCompare | None:
    """compare_tensor's verdict in one pass over each chunk where every difference is finite (so is every value of
    both), else None (_compare_each then says which values are not). Each chunk is read once: its largest difference
    shows whether it has NaN or infinite values, its largest |want| is the scaled tiers' scale, and a scaled tier is
    decided once every chunk has given its largest |want| (a chunk before the last taken again if it needs its bound:
    rare, for an output wrong by more than the tier's absolute room). The same operations on the same values as
    _compare_each: the same maxima and tiers, with fewer passes over memory (a quarter less time at `kernelbench` on an
    H200; where the reference lies in host memory, one copy of each chunk to the GPU rather than two)."""
    scaled = [tier for tier, tol in tolerances.items() if tol.scaled]
    tiers = {tier: True for tier in tolerances}
    max_abs = max_rel = scale = 0.0
    largests: list[float] = []
    pieces = list(zip(chunks(flat_actual, COMPARE_CHUNK), chunks(flat_expected, COMPARE_CHUNK)))
    for piece, wanted in pieces:
        diff = ref_abs = None  # the chunk before's freed before this one's are made
        diff, ref_abs = _errors(piece, wanted, on)
        largest = float(_item(_amax(diff)))
        if not math.isfinite(largest):
            return None
        max_abs = max(max_abs, largest)
        max_rel = max(max_rel, float(_item(_amax(_div(diff, _clamp_min(ref_abs, rel_floor))))))
        if scaled:
            scale = max(scale, float(_item(_amax(ref_abs))))
        largests.append(largest)
        for tier, tol in tolerances.items():
            if tier not in scaled and _needs_bound(tiers[tier], largest, atol := tol.atol_for(name), tol):
                tiers[tier] = _within(diff, ref_abs, atol, tol)
    atols = {tier: tolerances[tier].atol_for(name, scale) for tier in scaled}
    # the last chunk first, while its tensors are at hand; then each chunk before that needs its bound, taken again
    # once the last's are freed (at most one chunk's tensors at a time)
    for index in [len(pieces) - 1, *range(len(pieces) - 1)] if pieces else []:
        bounded = [t for t in scaled if _needs_bound(tiers[t], largests[index], atols[t], tolerances[t])]
        if bounded:
            if index != len(pieces) - 1:
                diff = ref_abs = None
                diff, ref_abs = _errors(*pieces[index], on)
            for tier in bounded:
                tiers[tier] = _within(diff, ref_abs, atols[tier], tolerances[tier])
    return TensorCompare(max_abs, max_rel, tiers)


def _compare_each(name: str, flat_actual: _Tensor, flat_expected: _Tensor, tolerances: dict, rel_floor: float,
                  on: torch.device) -> TensorCompare:
    """compare_tensor's verdict with every value checked for NaN and infinity first: the count of those an output has
    is its failure. Where no difference is NaN or infinite, _compare_finite's verdict, in more passes."""
    # the expected tensor's largest magnitude, where a tier's bound is relative to it (`matched`)
    scale = largest_magnitude(flat_expected, on) if any(tol.scaled for tol in tolerances.values()) else 0.0
    bad = 0
    max_abs = max_rel = 0.0
    tiers = {tier: True for tier in tolerances}
    for piece, wanted in zip(chunks(flat_actual, COMPARE_CHUNK), chunks(flat_expected, COMPARE_CHUNK)):
        got = _to(onto(piece, on), _float64)
        want = onto(wanted, on)
        finite = _isfinite(got)
        if not bool(_item(_all(finite))):
            bad += int(_item(_sum(_logical_not(finite))))
            continue
        diff = _abs(_sub(got, want))
        ref_abs = _abs(want)
        largest = float(_item(_amax(diff)))
        max_abs = max(max_abs, largest)
        max_rel = max(max_rel, float(_item(_amax(_div(diff, _clamp_min(ref_abs, rel_floor))))))
        if not math.isfinite(largest):  # the reference is infinite or NaN where the output is finite: no tier
            tiers = {tier: False for tier in tolerances}  # holds it (allclose), whatever inf * rtol would allow
        for tier, tol in tolerances.items():
            atol = tol.atol_for(name, scale)
            if _needs_bound(tiers[tier], largest, atol, tol):
                tiers[tier] = _within(diff, ref_abs, atol, tol)
    if bad:
        return TensorCompare(float("inf"), float("inf"), {tier: False for tier in tolerances},
                             f"{name}: {bad} NaN/Inf values")
    return TensorCompare(max_abs, max_rel, tiers)


def same_values_on(fresh: _Tensor, kept: _Tensor, on: torch.device | str) -> bool:
    """tensors.same_values of two tensors that may lie on different devices, chunk by chunk `on` one (a 6.4 GB
    input kept in host memory is compared on the GPU it was drawn on, never copied whole)."""
    if fresh.device == kept.device:
        return same_values(fresh, kept)
    with guarded():
        if tuple(fresh.shape) != tuple(kept.shape) or fresh.dtype != kept.dtype:
            return False
        on = torch.device(on)
        return all(same_values(onto(a, on), onto(b, on)) for a, b in zip(chunks(_reshape(fresh, (-1,)), COMPARE_CHUNK),
                                                                          chunks(_reshape(kept, (-1,)), COMPARE_CHUNK)))


@dataclass
class ModeAccumulator:
    """Worst errors and tier results over the trials of one mode."""

    mode: str
    tolerances: dict
    trials: int = 0
    failure: str | None = None
    tiers: dict[str, bool] = field(default_factory=dict)
    worst: dict[str, tuple[float, float]] = field(default_factory=dict)
    failed: dict[str, set[str]] = field(default_factory=dict)  # tensor name -> the tiers it failed

    def __post_init__(self):
        self.tiers = {tier: True for tier in self.tolerances}

    def fail(self, reason: str) -> None:
        if self.failure is None:
            self.failure = reason
        self.tiers = {tier: False for tier in self.tolerances}

    def add(self, name: str, result: TensorCompare) -> None:
        old_abs, old_rel = self.worst.get(name, (0.0, 0.0))
        self.worst[name] = (max(old_abs, result.max_abs), max(old_rel, result.max_rel))
        if result.failure:
            self.fail(result.failure)
        for tier, passed in result.tiers.items():
            self.tiers[tier] = self.tiers[tier] and passed
            if not passed:
                self.failed.setdefault(name, set()).add(tier)

    def merge(self, other: ModeAccumulator) -> None:
        """Take in `other`'s trials (same mode and tiers), as if they had been added here."""
        self.trials += other.trials
        if other.failure is not None and self.failure is None:
            self.failure = other.failure
        self.tiers = {tier: passed and other.tiers.get(tier, False) for tier, passed in self.tiers.items()}
        for name, (abs_err, rel_err) in other.worst.items():
            old_abs, old_rel = self.worst.get(name, (0.0, 0.0))
            self.worst[name] = (max(old_abs, abs_err), max(old_rel, rel_err))
        for name, tiers in other.failed.items():
            self.failed.setdefault(name, set()).update(tiers)

    def record(self) -> ModeCheck:
        # Infinity marks "not comparable" (wrong shape, NaN); JSON has no Infinity, so it becomes null.
        worst = {n: (_finite(a), _finite(r)) for n, (a, r) in self.worst.items()}
        known = [v for v in worst.values() if v[0] is not None]
        return ModeCheck(
            mode=self.mode, trials=self.trials, failure=self.failure, tiers=dict(self.tiers),
            max_abs_err=None if len(known) < len(worst) else max((a for a, _ in known), default=None),
            max_rel_err=None if len(known) < len(worst) else max((r for _, r in known), default=None),
            tensors=[TensorError(name=n, max_abs_err=a, max_rel_err=r) for n, (a, r) in worst.items()],
        )

    @property
    def passed(self) -> bool:
        return self.failure is None and any(self.tiers.values())


def _finite(value: float) -> float | None:
    return value if value == value and value not in (float("inf"), float("-inf")) else None


def _int_mismatch(name: str, actual: _Tensor, expected: _Tensor) -> str:
    if _numel(actual) <= 4:
        return f"{name}: {_tolist(actual)}, expected {_tolist(expected)}"
    return f"{name}: integer values differ from the reference"
