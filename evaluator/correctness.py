"""Comparing a candidate with the reference.

The functions used for the comparison are bound here, when the worker imports this module
and before it imports the candidate, so a candidate that patches `torch.allclose` or
`Tensor.sub` afterwards does not change how it is judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from evaluator.records import ModeCheck, TensorError

_Tensor = torch.Tensor
_abs = torch.abs
_amax = torch.amax
_isfinite = torch.isfinite
_all = torch.all
_equal = torch.equal
_clamp_min = torch.clamp_min
_sub = torch.sub
_mul = torch.mul
_add = torch.add
_le = torch.le
_logical_or = torch.logical_or
_isnan = torch.isnan


def make_inputs(templates: list, distribution: str, generator: torch.Generator, device: str) -> list:
    """Fresh inputs shaped like the reference's `get_inputs()`, drawn from `distribution`."""
    fresh = []
    for item in templates:
        if isinstance(item, _Tensor) and item.is_floating_point():
            if distribution == "randn":
                t = torch.randn(item.shape, generator=generator, dtype=item.dtype)
            elif distribution == "rand":
                t = torch.rand(item.shape, generator=generator, dtype=item.dtype)
            else:
                raise ValueError(f"unknown input distribution {distribution!r}")
            fresh.append(t.to(device))
        elif isinstance(item, _Tensor):
            fresh.append(item.to(device))
        else:
            fresh.append(item)
    return fresh


def clone_inputs(inputs: list) -> list:
    return [x.clone() if isinstance(x, _Tensor) else x for x in inputs]


def changed_inputs(before: list, after: list) -> list[int]:
    """Positions of tensor inputs whose values changed (NaN-aware bitwise comparison)."""
    changed = []
    for i, (a, b) in enumerate(zip(before, after)):
        if isinstance(a, _Tensor):
            same = a.shape == b.shape and a.dtype == b.dtype and (
                _equal(a, b) or bool(_all(_logical_or(a == b, _isnan(a) & _isnan(b))))
            )
            if not same:
                changed.append(i)
    return changed


@dataclass
class TensorCompare:
    """Error of one tensor against its float64 reference."""

    max_abs: float
    max_rel: float
    tiers: dict[str, bool]
    failure: str | None = None


def compare_tensor(name: str, actual, expected: _Tensor, tolerances: dict, rel_floor: float) -> TensorCompare:
    """`actual` against the float64 `expected`, with allclose semantics per tier."""
    failed = {tier: False for tier in tolerances}
    if type(actual) is not _Tensor:
        kind = type(actual).__name__
        return TensorCompare(float("inf"), float("inf"), failed, f"{name}: expected a plain torch.Tensor, got {kind}")
    if tuple(actual.shape) != tuple(expected.shape):
        return TensorCompare(float("inf"), float("inf"), failed,
                             f"{name}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    if not expected.is_floating_point():
        same = _equal(actual.to(expected.device, expected.dtype), expected)
        return TensorCompare(0.0 if same else float("inf"), 0.0 if same else float("inf"),
                             {tier: same for tier in tolerances},
                             None if same else _int_mismatch(name, actual, expected))
    got = actual.detach().to(expected.device, torch.float64)
    finite = _isfinite(got)
    if not bool(_all(finite)):
        bad = int((~finite).sum())
        return TensorCompare(float("inf"), float("inf"), failed, f"{name}: {bad} NaN/Inf values")
    diff = _abs(_sub(got, expected))
    ref_abs = _abs(expected)
    max_abs = float(_amax(diff)) if diff.numel() else 0.0
    max_rel = float(_amax(diff / _clamp_min(ref_abs, rel_floor))) if diff.numel() else 0.0
    tiers = {}
    for tier, tol in tolerances.items():
        tiers[tier] = bool(_all(_le(diff, _add(_mul(ref_abs, tol.rtol), tol.atol))))
    return TensorCompare(max_abs, max_rel, tiers)


@dataclass
class ModeAccumulator:
    """Worst errors and tier results over the trials of one mode."""

    mode: str
    tolerances: dict
    trials: int = 0
    failure: str | None = None
    tiers: dict[str, bool] = field(default_factory=dict)
    worst: dict[str, tuple[float, float]] = field(default_factory=dict)

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
    if actual.numel() <= 4:
        return f"{name}: {actual.tolist()}, expected {expected.tolist()}"
    return f"{name}: integer values differ from the reference"
