"""Reading tensors safely, on either side: plain tensors only, their memory, a module's registries, the
fill of uninitialised memory, and the torch functions comparisons use (evaluator.referee.compare).

In the executor these are bound when it imports this module, before it imports the candidate, so a
candidate that patches `torch.allclose` or `Tensor.sub` afterwards does not change them. Tensor methods are bound too
(`Tensor.to`, `Tensor.clone`, `Tensor.item`, ...) and called as plain functions, and every
comparison runs under `guarded()`: no torch-function subclass or mode, no Python dispatch
mode, so a lazy tensor subclass or a mode pushed at import cannot see or steer it.
"""

from __future__ import annotations

import contextlib

import torch


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
_pin_memory = torch.Tensor.pin_memory
_item = torch.Tensor.item
_numel = torch.Tensor.numel
_size = torch.Tensor.size
_view = torch.Tensor.view
_reshape = torch.Tensor.reshape
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


def chunks(flat: _Tensor, size: int):
    """A 1-D tensor's consecutive pieces of at most `size` elements (views): how the judge copies and compares
    tensors too large to convert whole."""
    count = _numel(flat)
    for start in range(0, count, size):
        yield _narrow(flat, 0, start, min(size, count - start))


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


