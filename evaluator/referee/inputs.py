"""Inputs: what the forward takes (`InputSpec`s, from the reference's `get_inputs()`) and fresh draws.

`draw(specs, distribution, seed, device)` is the one way inputs are made, in the referee alone: it draws
the inputs of every checked call (shipped through the exchange) and of every clocked call (written into
the stage inside the call's window), from seeds no executor can derive (evaluator.referee.keys), and
draws them again to replay a call on the float64 reference. On CUDA the draw runs on the device (torch's
Philox generator), so a fresh 256 MB input costs a fraction of a millisecond; every call gets an
independent draw.

The functions used are bound when this module is imported, before any candidate exists."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from evaluator.wire.exchange import DTYPES, dtype_name
from evaluator.wire.protocol import InputSpec
from evaluator.wire.tensors import _copy_, _empty, _numel, _reshape, chunks

_randn = torch.randn
_rand = torch.rand
_Generator = torch.Generator
_manual_seed = torch.Generator.manual_seed
_Tensor = torch.Tensor
_clone = torch.Tensor.clone
_to = torch.Tensor.to
_is_floating_point = torch.Tensor.is_floating_point
_float64 = torch.float64
_device = torch.device
_is_contiguous = torch.Tensor.is_contiguous

# Elements converted at once on the way to host memory: 256 MiB of float64 a temporary on the GPU.
HOST_CHUNK = 1 << 25

SEED_STEP = 0x9E3779B97F4A7C15  # the golden-ratio increment: consecutive calls get unrelated seeds
SEED_MASK = (1 << 63) - 1
DISTRIBUTIONS = ("randn", "rand")


def call_seed(seed: int, index: int) -> int:
    """The seed of call `index` of a series drawn from `seed`."""
    return (seed + (index + 1) * SEED_STEP) & SEED_MASK


PLAIN = (bool, int, float, complex, str, type(None))  # values read as they are, never made on a device


def templates_of(get_inputs: Callable[[], list]) -> list:
    """What `get_inputs()` returns, made on the meta device where that is all the referee reads: a floating tensor's
    shape and dtype alone (every one is drawn afresh, `draw`), beside plain values. KernelBench's problems fill their
    inputs with CPU random numbers, 8-11 s at 19_ReLU's 6.4 GB a call, only for the shapes to be read. Made for real
    where the meta call fails (a value read from a tensor, a copy to a device) or yields anything else: a tensor whose
    values are used (integers, indices) or a container that could hold one."""
    try:
        with _device("meta"):
            made = get_inputs()
    except Exception:
        return get_inputs()
    shapes_only = isinstance(made, (list, tuple)) and all(drawn_afresh(x) or isinstance(x, PLAIN) for x in made)
    return list(made) if shapes_only else get_inputs()


def drawn_afresh(item: Any) -> bool:
    """Whether an item of `get_inputs()` is drawn afresh for every call (a floating tensor of a dtype the exchange
    carries): only its shape and dtype are read."""
    return isinstance(item, _Tensor) and item.is_floating_point() and dtype_name(item.dtype) is not None


def input_specs(templates: list, precision: torch.dtype = torch.float32
                ) -> tuple[list[InputSpec], dict[int, torch.Tensor], dict[int, Any]]:
    """(specs, fixed tensors by position, other values by position) of `get_inputs()`'s result. At a precision other
    than fp32, every floating input is drawn in it (KernelBench casts every floating input to the precision)."""
    specs, fixed, values = [], {}, {}
    for position, item in enumerate(templates):
        if drawn_afresh(item):
            dtype = item.dtype if precision == torch.float32 else precision
            specs.append(InputSpec(kind="random", shape=list(item.shape), dtype=dtype_name(dtype)))
        elif isinstance(item, _Tensor):
            specs.append(InputSpec(kind="tensor"))
            fixed[position] = item
        else:
            specs.append(InputSpec(kind="value"))
            values[position] = item
    return specs, fixed, values


def draw(specs: list[InputSpec], distribution: str, seed: int, device: str,
         fixed: dict[int, torch.Tensor] | None = None, values: dict[int, Any] | None = None) -> list:
    """Fresh inputs: each `random` spec drawn from `distribution` with a generator seeded `seed` on
    `device`; fixed tensors cloned onto it, values as they are."""
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"unknown input distribution {distribution!r}")
    generator = _Generator(device=device)
    _manual_seed(generator, seed)
    sample = _randn if distribution == "randn" else _rand
    out = []
    for position, spec in enumerate(specs):
        if spec.kind == "random":
            out.append(sample(spec.shape, generator=generator, dtype=DTYPES[spec.dtype], device=device))
        elif spec.kind == "tensor":
            out.append(_to(_clone((fixed or {})[position]), device))
        else:
            out.append((values or {}).get(position))
    return out


def as_float64(inputs: list, device: str) -> list:
    """The inputs for the float64 reference on `device` (the referee's judge_device): every floating tensor in
    float64, every tensor there."""
    return [(to_float64(x, device) if _is_floating_point(x) else _to(x, device)) if isinstance(x, _Tensor) else x
            for x in inputs]


def to_float64(x: torch.Tensor, device: str) -> torch.Tensor:
    """`x` in float64 on `device`. From a GPU to host memory, converted on the GPU a chunk at a time into one tensor
    of page-locked host memory. torch's own `.to("cpu", float64)` converts the whole tensor on the GPU first (a
    float64 copy there, 12.8 GB at 19_ReLU's size, where the judge moved to host memory for want of room) and writes
    fresh pageable memory: 1.4 GB/s on an H100's host, and still 2.2 GB/s chunk by chunk (23_Softmax's judgement
    spent 151 of its 237 s there). Page-locked memory comes from torch's caching host allocator, so the next call's
    inputs reuse it rather than fault in fresh pages; where it cannot be had, pageable memory. A tensor that is not
    contiguous keeps torch's own copy (and its strides)."""
    if (x.device.type != "cuda" or _device(device).type != "cpu" or _numel(x) <= HOST_CHUNK
            or not _is_contiguous(x)):
        return _to(x, device, _float64)
    try:
        out = _empty(tuple(x.shape), dtype=_float64, device="cpu", pin_memory=True)
    except RuntimeError:  # the driver refused (locked-memory limits, the host's memory): CUDA's error, a RuntimeError
        out = _empty(tuple(x.shape), dtype=_float64, device="cpu")
    for piece, into in zip(chunks(_reshape(x, (-1,)), HOST_CHUNK), chunks(_reshape(out, (-1,)), HOST_CHUNK)):
        _copy_(into, _to(piece, _float64))
    return out


def tensor_sizes(specs: list[InputSpec], fixed: dict[int, torch.Tensor]) -> list[int]:
    """Bytes of each tensor input of one set, in order."""
    sizes = []
    for position, spec in enumerate(specs):
        if spec.kind == "random":
            sizes.append(torch.empty((), dtype=DTYPES[spec.dtype]).element_size() * int(torch.Size(spec.shape).numel()))
        elif spec.kind == "tensor":
            t = fixed[position]
            sizes.append(t.numel() * t.element_size())
    return sizes
