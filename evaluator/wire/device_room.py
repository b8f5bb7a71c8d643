"""Device memory the referee lends one executor for windows handed off on the device (evaluator.referee.relay): its
inputs region and output region, as a handed-off window's plan lays them out (evaluator.wire.handoff.Plan).

The referee allocates it with the driver (cuMemAlloc: an allocation of its own, so the handle exposes nothing else of
the referee's) and hands its CUDA IPC handle to the executor, which maps it. Everything in it is the candidate's to
read and write at any time: the referee writes call k's inputs there only once call k-1 has committed, and copies
call k's output region into memory of its own at call k's commit, so bytes written there at other times change nothing
it compares (as with the exchange's regions on the host).
"""

from __future__ import annotations

import ctypes

import torch

_DRIVER: list = []


class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]


class DeviceRoomError(RuntimeError):
    """The driver refused: windows on the device cannot be had here."""


def _driver():
    if not _DRIVER:
        lib = ctypes.CDLL("libcuda.so.1")
        u64, size = ctypes.c_uint64, ctypes.c_size_t
        for name, args in (("cuMemAlloc_v2", (ctypes.POINTER(u64), size)), ("cuMemFree_v2", (u64,)),
                           ("cuIpcGetMemHandle", (ctypes.POINTER(_IpcHandle), u64)),
                           ("cuIpcOpenMemHandle_v2", (ctypes.POINTER(u64), _IpcHandle, ctypes.c_uint)),
                           ("cuIpcCloseMemHandle", (u64,))):
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        _DRIVER.append(lib)
    return _DRIVER[0]


def _check(code: int, what: str) -> None:
    if code != 0:
        raise DeviceRoomError(f"{what} failed (CUresult {code})")


class _Interface:
    """A raw device allocation as torch reads one (__cuda_array_interface__): no copy, no ownership."""

    def __init__(self, address: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (address, False),
                                         "version": 2, "strides": None}


def _tensor(address: int, nbytes: int) -> torch.Tensor:
    return torch.as_tensor(_Interface(address, nbytes), device="cuda")


class LentRoom:
    """The referee's side: `nbytes` of device memory and the handle the executor maps it with."""

    def __init__(self, nbytes: int):
        torch.cuda.synchronize()  # the primary context current on this thread, for the driver's calls
        lib, address = _driver(), ctypes.c_uint64(0)
        _check(lib.cuMemAlloc_v2(ctypes.byref(address), max(nbytes, 1)), "cuMemAlloc")
        self.address, self.nbytes = address.value, nbytes
        handle = _IpcHandle()
        try:
            _check(lib.cuIpcGetMemHandle(ctypes.byref(handle), self.address), "cuIpcGetMemHandle")
        except DeviceRoomError:
            self.free()
            raise
        self.handle = ctypes.string_at(ctypes.addressof(handle), 64).hex()
        self.bytes = _tensor(self.address, nbytes)

    def free(self) -> None:
        if self.address:
            torch.cuda.synchronize()
            self.bytes = None
            _driver().cuMemFree_v2(self.address)
            self.address = 0


_OPENED: dict[str, torch.Tensor] = {}  # the executor's side: mapped once per handle, for the process's life


def borrowed(handle: str, nbytes: int) -> torch.Tensor:
    """The executor's side: the room the referee lent (uint8, on the device), mapped once."""
    room = _OPENED.get(handle)
    if room is None or room.numel() < nbytes:
        torch.cuda.synchronize()
        raw = _IpcHandle()
        ctypes.memmove(ctypes.addressof(raw), bytes.fromhex(handle)[:64].ljust(64, b"\0"), 64)
        address = ctypes.c_uint64(0)
        _check(_driver().cuIpcOpenMemHandle_v2(ctypes.byref(address), raw, 1), "cuIpcOpenMemHandle")  # lazy peer
        room = _OPENED[handle] = _tensor(address.value, nbytes)
    return room
