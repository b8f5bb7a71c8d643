"""Comparing a candidate with the reference.

The referee compares in its own process, which never runs candidate code. The executor uses a
few of these functions too (snapshots, memory sharing, module registries, the fill of
uninitialised memory), and there they are bound when it imports this module, before it imports
the candidate, so a candidate that patches `torch.allclose` or `Tensor.sub` afterwards does not
change them. Tensor methods are bound too
(`Tensor.to`, `Tensor.clone`, `Tensor.item`, ...) and called as plain functions, and every
comparison runs under `guarded()`: no torch-function subclass or mode, no Python dispatch
mode, so a lazy tensor subclass or a mode pushed at import cannot see or steer it.
"""

from __future__ import annotations

import contextlib
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
_div = torch.div
_le = torch.le
_eq = torch.eq
_sum = torch.sum
_logical_or = torch.logical_or
_logical_and = torch.logical_and
_logical_not = torch.logical_not
_isnan = torch.isnan
_randn = torch.randn
_rand = torch.rand
_empty = torch.empty
_full = torch.full
_float64 = torch.float64
_to = torch.Tensor.to
_detach = torch.Tensor.detach
_clone = torch.Tensor.clone
_copy_ = torch.Tensor.copy_
_item = torch.Tensor.item
_numel = torch.Tensor.numel
_size = torch.Tensor.size
_view = torch.Tensor.view
_narrow = torch.narrow
_is_floating_point = torch.Tensor.is_floating_point
_untyped_storage = torch.Tensor.untyped_storage
_storage_ptr = torch.UntypedStorage.data_ptr
_storage_nbytes = torch.UntypedStorage.nbytes
_tolist = torch.Tensor.tolist
_DisableTorchFunction = torch._C.DisableTorchFunction
_DisableTorchDispatch = torch._C._DisableTorchDispatch
_Parameter = torch.nn.Parameter
_object_getattribute = object.__getattribute__
_dict_items = dict.items  # a dict's own entries, whatever methods a subclass overrides
# The deterministic-algorithms switches, straight from torch._C (torch.use_deterministic_algorithms
# also imports torch._inductor's config, which is not wanted in the middle of a check).
_get_deterministic = torch._C._get_deterministic_algorithms
_get_deterministic_warn_only = torch._C._get_deterministic_algorithms_warn_only
_set_deterministic = torch._C._set_deterministic_algorithms
_get_fill_uninitialized = torch._C._get_deterministic_fill_uninitialized_memory
_set_fill_uninitialized = torch._C._set_deterministic_fill_uninitialized_memory


@contextlib.contextmanager
def guarded():
    """No `__torch_function__` (subclasses and modes) and no Python dispatch (modes, subclasses)."""
    with _DisableTorchFunction(), _DisableTorchDispatch():
        yield


def fill_settings() -> tuple[bool, bool, bool]:
    """(deterministic algorithms, warn only, fill uninitialised memory) as they are now."""
    return _get_deterministic(), _get_deterministic_warn_only(), _get_fill_uninitialized()


@contextlib.contextmanager
def uninitialized_memory_filled():
    """Uninitialised memory filled with NaN (integers: their largest value) while inside: every
    `torch.empty`, `empty_like`, `new_empty` and `at::empty` in a C++/CUDA extension. That is what
    `torch.use_deterministic_algorithms(True, warn_only=True)` with
    `torch.utils.deterministic.fill_uninitialized_memory = True` does; warn-only, so an op without a
    deterministic implementation warns instead of raising. The settings are restored on exit."""
    before = fill_settings()
    _set_deterministic(True, warn_only=True)
    _set_fill_uninitialized(True)
    try:
        yield
    finally:
        deterministic, warn_only, fill = before
        _set_deterministic(deterministic, warn_only=warn_only)
        _set_fill_uninitialized(fill)


def is_plain_tensor(value) -> bool:
    """A real `torch.Tensor` (or an `nn.Parameter`, which is one): never a subclass that can run code."""
    return type(value) is _Tensor or type(value) is _Parameter


def same_values(a: _Tensor, b: _Tensor) -> bool:
    """Bitwise-equal values, NaN equal to NaN (shape and dtype must match)."""
    with guarded():
        if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype or a.device != b.device:
            return False
        if _equal(a, b):
            return True
        return bool(_item(_all(_logical_or(_eq(a, b), _logical_and(_isnan(a), _isnan(b))))))


def storage_range(t: _Tensor) -> tuple[int, int]:
    """[start, end) bytes of the memory behind `t` (its whole storage: views included)."""
    with guarded():
        storage = _untyped_storage(t)
        start = _storage_ptr(storage)
        return start, start + _storage_nbytes(storage)


def shares_memory(a: _Tensor, b: _Tensor) -> bool:
    """Whether the storages behind `a` and `b` overlap: views, slices, `as_strided` and
    tensors built over the same memory by an extension (`from_blob`) all count."""
    a0, a1 = storage_range(a)
    b0, b1 = storage_range(b)
    return a0 < b1 and b0 < a1 and a1 > a0 and b1 > b0


def snapshot(value):
    """A private copy of a plain tensor (what a consumer sees at this moment); None otherwise."""
    if not is_plain_tensor(value):
        return None
    with guarded():
        return _clone(_detach(value))


@dataclass
class TensorCompare:
    """Error of one tensor against its float64 reference."""

    max_abs: float
    max_rel: float
    tiers: dict[str, bool]
    failure: str | None = None


def compare_tensor(name: str, actual, expected: _Tensor, tolerances: dict, rel_floor: float, *,
                   dtype: torch.dtype | None = None, device: torch.device | str | None = None) -> TensorCompare:
    """`actual` against the float64 `expected`, with allclose semantics per tier. With `dtype` or
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
        if not _is_floating_point(expected):
            same = _equal(_to(actual, expected.device, expected.dtype), expected)
            return TensorCompare(0.0 if same else float("inf"), 0.0 if same else float("inf"),
                                 {tier: same for tier in tolerances},
                                 None if same else _int_mismatch(name, actual, expected))
        got = _to(_detach(actual), expected.device, _float64)
        finite = _isfinite(got)
        if not bool(_item(_all(finite))):
            bad = int(_item(_sum(_logical_not(finite))))
            return TensorCompare(float("inf"), float("inf"), failed, f"{name}: {bad} NaN/Inf values")
        diff = _abs(_sub(got, expected))
        ref_abs = _abs(expected)
        empty = _numel(diff) == 0
        max_abs = 0.0 if empty else float(_item(_amax(diff)))
        max_rel = 0.0 if empty else float(_item(_amax(_div(diff, _clamp_min(ref_abs, rel_floor)))))
        tiers = {}
        for tier, tol in tolerances.items():
            tiers[tier] = bool(_item(_all(_le(diff, _add(_mul(ref_abs, tol.rtol), tol.atol)))))
    return TensorCompare(max_abs, max_rel, tiers)


def _registry(own: dict, name: str) -> list[tuple]:
    """The entries a module registry holds, read from the dict itself: a dict subclass installed as
    a registry (`_buffers` whose `__getitem__`, `items` or `__iter__` settles deferred work first)
    runs none of its own code here. A registry that is no dict at all is read as empty, so what it
    holds counts as missing."""
    registry = own.get(name)
    if registry is None or not issubclass(type(registry), dict):
        return []
    return list(_dict_items(registry))


def module_tensors(module: torch.nn.Module, prefix: str = "") -> dict[str, _Tensor]:
    """Parameters and buffers by state-dict name, read from the modules' own registries (not through
    `state_dict()`, `named_buffers()` or attribute access, which a candidate can override, nor through
    methods of the registries themselves)."""
    found: dict[str, _Tensor] = {}
    own = _object_getattribute(module, "__dict__")
    for registry in ("_parameters", "_buffers"):
        for name, value in _registry(own, registry):
            if value is not None:
                found[prefix + name] = value
    for name, child in _registry(own, "_modules"):
        if child is not None:
            found.update(module_tensors(child, f"{prefix}{name}."))
    return found


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
