"""The stage: memory the referee and one executor both map, where a clocked call happens.

A clocked call (evaluator.referee.phases `window`) reads its inputs from the stage and leaves its output and
buffers there, at a place the referee names only once the call has returned. The referee writes the
inputs in and copies the output and buffers out inside its own clock, so nothing of the call can be
done before its inputs exist or after the referee has taken what it compares.

Its layout, fixed for a batch: `sets` sets of inputs, one slot per tensor input in each (`input.N`, set k
`stride` bytes after set 0), for a window of up to `sets` calls back to back (set k is call k's); then
the region, room for each call's output and buffers one after another and some slack more (a call's room, at
most PLACE_SLACK: at least 2^18 places); the referee picks where in the region the outputs go after the calls
returned, so a candidate cannot write there ahead of time.

On the CPU the stage is host memory (a memfd both processes map). On a GPU it is device memory: a
CUDA virtual-memory allocation the referee makes and exports as a file descriptor, which the executor
inherits and maps into its own context (CUDA's older IPC handles cannot cross the executor's PID
namespace; a descriptor can). Neither side ever hands out a tensor that views it: `view` validates a
slot against the mapping.
"""

from __future__ import annotations

import ctypes
import functools
import math
import mmap
import os
from dataclasses import dataclass

import torch

from evaluator.wire.exchange import ALIGN, DTYPES, ExchangeError, checked_dtype, dtype_name, sealed_memfd, tensor_of
from evaluator.wire.protocol import TensorSlot


# The most the outputs' place may move by (bytes). A whole call's room more was a third of a 6.4 GB problem's stage.
PLACE_SLACK = 64 << 20


def aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def place_slack(span: int) -> int:
    """How far the outputs' place may move in a region of calls of `span` bytes: a call's room, at most PLACE_SLACK."""
    return min(span, PLACE_SLACK)


@dataclass(frozen=True)
class Layout:
    """Where things lie in a stage: the input slots of each set, then the region."""

    inputs: tuple[TensorSlot, ...]  # set 0's slots
    span: int           # room for one call's output and buffers, each aligned
    region: int         # first byte of the region (sets * span + slack bytes)
    sets: int = 1       # input sets: the most calls one window can hold
    stride: int = 0     # bytes from one input set to the next

    @property
    def slack(self) -> int:
        return place_slack(self.span)

    @property
    def size(self) -> int:
        return self.region + self.sets * self.span + self.slack

    @classmethod
    def plan(cls, inputs: list[tuple[int, list[int], str]], output_nbytes: int, buffer_nbytes: list[int],
             budget: int | None = None, most: int = 1) -> Layout:
        """`inputs`: (position, shape, dtype name) of each tensor input. As many input sets as fit in `budget`
        bytes (at least one, at most `most`)."""
        slots, offset = [], 0
        for position, shape, dtype in inputs:
            nbytes = math.prod(shape) * torch.empty((), dtype=DTYPES[dtype]).element_size()
            slots.append(TensorSlot(name=f"input.{position}", dtype=dtype, shape=list(shape), offset=offset,
                                    nbytes=nbytes, in_stage=True))
            offset = aligned(offset + max(nbytes, 1))
        span = aligned(max(output_nbytes, 1)) + sum(aligned(max(n, 1)) for n in buffer_nbytes) + ALIGN
        stride = max(offset, ALIGN)
        sets = max(1, min(most, (budget - place_slack(span)) // (stride + span))) if budget else 1
        return cls(inputs=tuple(slots), span=span, region=sets * stride, sets=sets, stride=stride)

    def slots(self, index: int) -> list[TensorSlot]:
        """Input set `index`'s slots (call `index` of a window reads them)."""
        if not 0 <= index < self.sets:
            raise ExchangeError(f"input set {index} of {self.sets}")
        return [s.model_copy(update={"offset": s.offset + index * self.stride}) for s in self.inputs]

    def place(self, fraction: float) -> int:
        """The region's offset for `fraction` in [0, 1): one of its slack / ALIGN + 1 aligned places."""
        places = self.slack // ALIGN + 1
        return self.region + min(places - 1, int(fraction * places)) * ALIGN


class Stage:
    """One stage's mapping in this process (see the module's docstring)."""

    def __init__(self, fd: int, size: int, device: str, memory: torch.Tensor, release):
        self.fd, self.size, self.device = fd, size, device
        self.bytes = memory  # uint8, `size` long, on `device`
        self._release = release

    # -- making and mapping ------------------------------------------------------------------------

    @classmethod
    def create(cls, size: int, device: str) -> Stage:
        """A new stage (the referee's side); its descriptor is inheritable by none."""
        if device == "cuda":
            return _cuda_stage(size, None)
        return _host_stage(sealed_memfd("kernelharness-stage", size), size)

    @classmethod
    def attach(cls, fd: int, size: int, device: str) -> Stage:
        """The executor's side: map the descriptor it inherited (`size`: what the referee made)."""
        os.set_inheritable(fd, False)
        if device == "cuda":
            return _cuda_stage(size, fd)
        return _host_stage(fd, size)

    def close(self) -> None:
        memory, self.bytes = self.bytes, None
        del memory
        if self._release is not None:
            self._release()
            self._release = None

    # -- slots ---------------------------------------------------------------------------------------

    def check(self, slot: TensorSlot) -> torch.dtype:
        """The slot's dtype, once its fields agree and it lies inside the stage."""
        return checked_dtype(slot, self.size, "the stage")

    def view(self, slot: TensorSlot) -> torch.Tensor:
        """The slot's bytes as a tensor of its dtype and shape: a view of the shared memory."""
        dtype = self.check(slot)
        raw = self.bytes[slot.offset:slot.offset + slot.nbytes]
        return (raw.view(dtype) if slot.nbytes else torch.empty(0, dtype=dtype, device=self.device)).view(slot.shape)

    def read(self, slot: TensorSlot, device: str | torch.device) -> torch.Tensor:
        """A fresh tensor holding the slot's bytes, on `device` (what the other side may still write never is)."""
        return tensor_of(self.bytes[slot.offset:slot.offset + slot.nbytes], self.check(slot), slot, device)

    def put(self, name: str, tensors: list[torch.Tensor], offset: int) -> TensorSlot:
        """Copy `tensors` (of one shape and dtype) in at `offset`, one after another, as one tensor of shape
        (len(tensors), *shape); its slot. One copy for all of them where they lie on the stage's device.
        Raises ExchangeError when they cannot be staged."""
        first = tensors[0]
        dtype = dtype_name(first.dtype)
        if dtype is None:
            raise ExchangeError(f"{name}: dtype {first.dtype} cannot be staged")
        if any(t.dtype != first.dtype or t.shape != first.shape for t in tensors):
            raise ExchangeError(f"{name}: the calls' tensors differ in shape or dtype")
        slot = TensorSlot(name=name, dtype=dtype, shape=[len(tensors), *first.shape], offset=offset,
                          nbytes=len(tensors) * first.numel() * first.element_size(), in_stage=True)
        view = self.view(slot)
        if all(t.device == view.device for t in tensors):
            torch.stack([t.detach() for t in tensors], out=view)
        else:
            for row, tensor in zip(view, tensors):
                row.copy_(tensor.detach())
        return slot

    def write(self, name: str, tensor: torch.Tensor, offset: int) -> TensorSlot:
        """Copy one tensor in at `offset`, in its own shape (a checked call's output); its slot. Queued on the
        device's current stream where the stage is device memory: wait for it before saying where it lies. Raises
        ExchangeError when it cannot be staged."""
        dtype = dtype_name(tensor.dtype)
        if dtype is None:
            raise ExchangeError(f"{name}: dtype {tensor.dtype} cannot be staged")
        slot = TensorSlot(name=name, dtype=dtype, shape=list(tensor.shape), offset=offset,
                          nbytes=tensor.numel() * tensor.element_size(), in_stage=True)
        self.view(slot).copy_(tensor.detach())
        return slot


# ------------------------------------------------------------------------------------------ host memory

def _host_stage(fd: int, size: int) -> Stage:
    mapping = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    memory = torch.frombuffer(mapping, dtype=torch.uint8)

    def release() -> None:
        try:
            mapping.close()
        except BufferError:  # a view still alive somewhere: the mapping goes with the process
            pass
        os.close(fd)

    return Stage(fd, size, "cpu", memory, release)


# ------------------------------------------------------------------------------------------ device memory

class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_PINNED, _POSIX_FD, _ON_DEVICE, _READ_WRITE = 1, 1, 1, 3


class CudaError(RuntimeError):
    pass


@functools.cache
def _driver() -> ctypes.CDLL:
    """The CUDA driver through ctypes: its virtual-memory calls have no binding in torch."""
    driver = ctypes.CDLL("libcuda.so.1")
    u64, size_t, vp = ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p
    signatures = {
        "cuMemGetAllocationGranularity": [ctypes.POINTER(size_t), ctypes.POINTER(_AllocationProp), ctypes.c_int],
        "cuMemCreate": [ctypes.POINTER(u64), size_t, ctypes.POINTER(_AllocationProp), ctypes.c_ulonglong],
        "cuMemExportToShareableHandle": [vp, u64, ctypes.c_int, ctypes.c_ulonglong],
        "cuMemImportFromShareableHandle": [ctypes.POINTER(u64), vp, ctypes.c_int],
        "cuMemAddressReserve": [ctypes.POINTER(u64), size_t, size_t, u64, ctypes.c_ulonglong],
        "cuMemMap": [u64, size_t, size_t, u64, ctypes.c_ulonglong],
        "cuMemSetAccess": [u64, size_t, ctypes.POINTER(_AccessDesc), size_t],
        "cuMemUnmap": [u64, size_t],
        "cuMemAddressFree": [u64, size_t],
        "cuMemRelease": [u64],
        "cuCtxGetCurrent": [ctypes.POINTER(vp)],
        "cuCtxSetCurrent": [vp],
        "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int],
        "cuDevicePrimaryCtxRetain": [ctypes.POINTER(vp), ctypes.c_int],
    }
    for name, argtypes in signatures.items():
        getattr(driver, name).argtypes = argtypes
        getattr(driver, name).restype = ctypes.c_int
    return driver


def _call(name: str, *args) -> None:
    code = getattr(_driver(), name)(*args)
    if code != 0:
        raise CudaError(f"{name} failed with CUDA error {code}")


def _device_ordinal() -> int:
    """The driver's ordinal of torch's current device, with torch's (primary) context current in this
    thread, which the virtual-memory calls act in."""
    torch.cuda.init()
    ordinal = ctypes.c_int()
    _call("cuDeviceGet", ctypes.byref(ordinal), torch.cuda.current_device())
    current = ctypes.c_void_p()
    _call("cuCtxGetCurrent", ctypes.byref(current))
    if not current.value:
        context = ctypes.c_void_p()
        _call("cuDevicePrimaryCtxRetain", ctypes.byref(context), ordinal)
        _call("cuCtxSetCurrent", context)
    return ordinal.value


class _DeviceMemory:
    """A mapped range seen by torch (`__cuda_array_interface__`) without torch owning it."""

    def __init__(self, pointer: int, size: int):
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (pointer, False),
                                         "version": 3, "strides": None}


def _cuda_stage(size: int, fd: int | None) -> Stage:
    """Create (no `fd`) or import (`fd`, of `size` bytes) a device allocation shared by descriptor, and map
    it here."""
    ordinal = _device_ordinal()
    prop = _AllocationProp(type=_PINNED, requestedHandleTypes=_POSIX_FD, location=_Location(_ON_DEVICE, ordinal))
    handle = ctypes.c_uint64()
    if fd is None:
        granularity = ctypes.c_size_t()
        _call("cuMemGetAllocationGranularity", ctypes.byref(granularity), ctypes.byref(prop), 0)
        size = -(-size // granularity.value) * granularity.value
        _call("cuMemCreate", ctypes.byref(handle), size, ctypes.byref(prop), 0)
        exported = ctypes.c_int(-1)
        try:
            _call("cuMemExportToShareableHandle", ctypes.byref(exported), handle, _POSIX_FD, 0)
        except CudaError:
            _call("cuMemRelease", handle)
            raise
        fd = exported.value
        os.set_inheritable(fd, False)
    else:
        _call("cuMemImportFromShareableHandle", ctypes.byref(handle), ctypes.c_void_p(fd), _POSIX_FD)
    pointer = ctypes.c_uint64()
    mapped = False
    try:
        _call("cuMemAddressReserve", ctypes.byref(pointer), size, 0, 0, 0)
        _call("cuMemMap", pointer, size, 0, handle, 0)
        mapped = True
        access = _AccessDesc(location=_Location(_ON_DEVICE, ordinal), flags=_READ_WRITE)
        _call("cuMemSetAccess", pointer, size, ctypes.byref(access), 1)
    except CudaError:
        if mapped:
            _driver().cuMemUnmap(pointer, size)
        if pointer.value:
            _driver().cuMemAddressFree(pointer, size)
        _driver().cuMemRelease(handle)
        raise
    memory = torch.as_tensor(_DeviceMemory(pointer.value, size), device="cuda")

    def release() -> None:  # from any thread (the referee closes an executor on its reply thread)
        _device_ordinal()
        torch.cuda.synchronize()
        driver = _driver()
        driver.cuMemUnmap(pointer, size)
        driver.cuMemAddressFree(pointer, size)
        driver.cuMemRelease(handle)
        try:
            os.close(fd)
        except OSError:
            pass

    return Stage(fd, size, "cuda", memory, release)
