"""The exchange: shared memory through which tensors travel between the referee and an executor.

The referee creates it (an anonymous memfd, sized for the problem) and hands its descriptor to the
executor it starts; both map it. Commands and replies carry `TensorSlot`s (where a tensor's bytes
lie); the bytes themselves are copied in and out here. The protocol is strictly turn by turn: the
referee writes what a command needs, the executor reads it, then writes what its reply ships from
offset 0; the referee copies it out before its next command.

`read` validates a slot against the mapping (bounds, dtype, size) and returns a fresh tensor on the
device asked for, never a view of the shared memory: whatever the executor writes there later
changes nothing the referee holds.
"""

from __future__ import annotations

import fcntl
import math
import mmap
import os
import threading
import time
from collections.abc import Callable

import torch

from evaluator.wire.protocol import TensorSlot

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool,
}
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}
ALIGN = 256


def _file_of(fd: int) -> tuple[int, int] | None:
    try:
        stat = os.fstat(fd)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


class ExchangeError(ValueError):
    """A slot that does not fit the exchange or does not describe its bytes."""


def dtype_name(dtype: torch.dtype) -> str | None:
    return DTYPE_NAMES.get(dtype)


def nbytes_of(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def capacity_for(*groups: int) -> int:
    """Room for tensors of these byte sizes, one after another (each aligned)."""
    return max(ALIGN, sum(_align(n) for n in groups) + ALIGN)


def sealed_memfd(name: str, size: int) -> int:
    """A memfd of `size` bytes that no one can shrink or grow (its seals sealed too): the executor holds its descriptor,
    and a candidate that truncated it would kill the referee with SIGBUS at its next touch of the mapping (an attacker's
    review)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    return fd


class Exchange:
    """One shared mapping (see the module's docstring)."""

    def __init__(self, fd: int, size: int):
        self.fd, self.size = fd, size
        self.map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.bytes = torch.frombuffer(self.map, dtype=torch.uint8)
        self.pinned = False
        self.file = _file_of(fd)  # what the descriptor named when mapped (ExchangePool checks it before reuse)

    def pin(self) -> bool:
        """Page-lock the mapping for the GPU (cudaHostRegister): copies between it and the device then
        run at the bus's speed, not through pageable staging (at kernelbench a checked call moves half a
        GB each way). Each side pins its own mapping; without CUDA, or when the driver refuses (locked-
        memory limits), copies stay pageable. KH_PIN_EXCHANGE=0 turns it off."""
        if self.pinned or os.environ.get("KH_PIN_EXCHANGE") == "0" or not torch.cuda.is_available():
            return self.pinned
        try:
            # The pages allocated through the file first, which takes no lock of this process's memory
            # map; registering them then holds that lock (every mmap of another thread waits) for less.
            os.posix_fallocate(self.fd, 0, self.size)
            code = torch.cuda.cudart().cudaHostRegister(self.bytes.data_ptr(), self.size, 0)  # lets go of the GIL
            self.pinned = int(code) == 0
        except Exception:
            self.pinned = False
        return self.pinned

    @classmethod
    def create(cls, size: int) -> Exchange:
        """A new exchange of `size` bytes (the referee's side); its `fd` is inheritable by none."""
        return cls(sealed_memfd("kernelharness-exchange", size), size)

    @classmethod
    def attach(cls, fd: int) -> Exchange:
        """The executor's side: map the descriptor it was handed."""
        os.set_inheritable(fd, False)
        return cls(fd, os.fstat(fd).st_size)

    def unpin(self) -> bool:
        """Undo `pin` (from any thread); whether the mapping is pageable again."""
        if self.pinned:
            try:
                self.pinned = int(torch.cuda.cudart().cudaHostUnregister(self.bytes.data_ptr())) != 0
            except Exception:
                pass
        return not self.pinned

    def close(self) -> None:
        self.unpin()
        del self.bytes
        try:
            self.map.close()
        except BufferError:  # a view still alive somewhere: the mapping goes with the process
            pass
        try:
            os.close(self.fd)
        except OSError:
            pass

    # -- writing ------------------------------------------------------------------------------------

    def fits(self, tensors: list[tuple[str, torch.Tensor]], start: int = 0) -> bool:
        return start + sum(_align(nbytes_of(t)) for _, t in tensors) <= self.size

    def write(self, tensors: list[tuple[str, torch.Tensor]], start: int = 0) -> list[TensorSlot]:
        """Copy each (name, tensor) in, one after another from `start`; their slots. Raises
        ExchangeError when they do not fit or a dtype cannot travel."""
        slots, offset = [], start
        for name, tensor in tensors:
            slot = self._put(name, tensor, offset)
            slots.append(slot)
            offset = _align(offset + slot.nbytes)
        return slots

    def write_each(self, tensors: list[tuple[str, torch.Tensor]]) -> tuple[list[TensorSlot], list[str]]:
        """Copy each (name, tensor) in that fits and can travel, one after another as `write` lays them out (as
        `capacity_for` counts them); their slots, and why each of the others was not shipped."""
        slots, problems, offset = [], [], 0
        for name, tensor in tensors:
            try:
                slot = self._put(name, tensor, offset)
            except ExchangeError as err:
                problems.append(f"{name} could not be shipped: {err}")
                continue
            slots.append(slot)
            offset = _align(offset + slot.nbytes)
        return slots, problems

    def _put(self, name: str, tensor: torch.Tensor, offset: int) -> TensorSlot:
        dtype = dtype_name(tensor.dtype)
        if dtype is None:
            raise ExchangeError(f"{name}: dtype {tensor.dtype} cannot travel")
        n = nbytes_of(tensor)
        if offset + n > self.size:
            raise ExchangeError(f"{name}: {n} bytes at {offset} do not fit the exchange's {self.size}")
        if n:
            source = tensor.detach().contiguous().reshape(-1)
            if source.dtype == torch.bool:
                source = source.to(torch.uint8)
            self.bytes[offset:offset + n].copy_(source.view(torch.uint8))
        return TensorSlot(name=name, dtype=dtype, shape=list(tensor.shape), offset=offset, nbytes=n)

    # -- reading ------------------------------------------------------------------------------------

    def check(self, slot: TensorSlot) -> torch.dtype:
        """The slot's dtype, once its fields are consistent and it lies inside the mapping."""
        return checked_dtype(slot, self.size, "the exchange")

    def read(self, slot: TensorSlot, device: str | torch.device = "cpu") -> torch.Tensor:
        """A fresh tensor holding the slot's bytes, on `device`."""
        return tensor_of(self.bytes[slot.offset:slot.offset + slot.nbytes], self.check(slot), slot, device)


# No dimension of a tensor that travels is larger: a slot's shape is the executor's word, and an empty tensor's
# dimensions multiply to nothing, so one of 2^63 passed the size checks and overflowed torch's view of it.
MAX_DIM = 1 << 48


def checked_dtype(slot: TensorSlot, size: int, where: str) -> torch.dtype:
    """The dtype of a slot in `where` (an exchange or a stage of `size` bytes), once its fields are consistent and it
    lies inside: an ExchangeError says which field is not."""
    dtype = DTYPES.get(slot.dtype)
    if dtype is None:
        raise ExchangeError(f"{slot.name}: unknown dtype {slot.dtype!r}")
    if any(d < 0 or d > MAX_DIM for d in slot.shape) or len(slot.shape) > 16:
        raise ExchangeError(f"{slot.name}: bad shape {slot.shape}")
    itemsize = torch.empty((), dtype=dtype).element_size()
    if math.prod(slot.shape) * itemsize != slot.nbytes:
        raise ExchangeError(f"{slot.name}: {slot.nbytes} bytes for shape {slot.shape} of {slot.dtype}")
    if slot.offset % ALIGN:
        raise ExchangeError(f"{slot.name}: offset {slot.offset} is not a multiple of {ALIGN}")
    if slot.offset < 0 or slot.offset + slot.nbytes > size:
        raise ExchangeError(f"{slot.name}: bytes {slot.offset}..{slot.offset + slot.nbytes} lie outside "
                            f"{where} ({size} bytes)")
    return dtype


def tensor_of(raw: torch.Tensor, dtype: torch.dtype, slot: TensorSlot, device: str | torch.device) -> torch.Tensor:
    """A fresh tensor of the slot's dtype and shape, on `device`, from its bytes (`raw`, uint8, checked): a bool read
    through uint8, so that no byte but 0 and 1 reaches a comparison."""
    if dtype == torch.bool:
        value = raw.clone().to(torch.bool)
    else:
        value = raw.view(dtype) if slot.nbytes else torch.empty(0, dtype=dtype, device=raw.device)
    return value.reshape(slot.shape).to(device, copy=True)


# Exchanges from this size up are kept for later executors (ExchangePool), and a start waits (at most REUSE_WAIT_S) for
# the exchange of an executor being closed rather than make a fresh one: on an H200 a fresh 19 GB exchange cost 2.1 s to
# allocate and 8.7-9.2 s to page-lock the first time (the pages moved as they were locked), against 2.4 s to lock the
# same pages again, and a closing executor's exchange comes back in about a second. A smaller one is made fresh, in
# tenths of a second in the background: nothing of an earlier executor's is handed on where it saves little.
KEEP_BYTES = 2 << 30
REUSE_WAIT_S = 10.0


class ExchangePool:
    """The referee's large exchanges (KEEP_BYTES up), kept from one executor for a later one: their pages stay
    allocated, and where they were moved to be page-locked, so a later executor's start skips both.

    An exchange comes back only through `release`, once every process of the executor that mapped it has ended for
    certain: it joined its cgroup, its containment was complete (no `unsandboxed` flag: nothing of it could leave the
    group or hand the descriptor on), and the group is empty and removed (ExecutorProcess._reap). Two live executors never share
    one: each is kept once, and its file is checked before it is handed on. On a GPU it is handed on only while the
    device is idle (`ready`): no kernel of a dead executor's context still in flight can write it. It comes back unpinned
    and zeroed: both sides lock it again (the referee's locked pages are always its mapping's), and nothing of one
    candidate's reaches the next."""

    def __init__(self, keep: int = 2, ready: Callable[[], bool] | None = None):
        self.keep = keep  # idle exchanges kept at most (host memory)
        self.ready = ready  # whether a kept exchange may be handed on now (the device idle); None: always
        self.idle: list[Exchange] = []
        self.closing = 0  # exchanges whose executors are being closed (`expect`), not yet released
        self.closed = False
        self.cond = threading.Condition()

    def take(self, size: int) -> Exchange:
        """A kept exchange of `size` bytes, else a fresh one (waiting for one being released where that is cheaper)."""
        if size < KEEP_BYTES:
            return Exchange.create(size)
        deadline = time.monotonic() + REUSE_WAIT_S
        with self.cond:
            while not any(e.size == size for e in self.idle) and self.closing:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.closing = 0  # what was expected did not come in time: later starts do not wait for it
                    break
                self.cond.wait(left)
            kept = [e for e in self.idle if e.size == size]
            self.idle = [e for e in self.idle if e.size != size]
        found = None
        for exchange in kept:
            if found is None and _still_itself(exchange):
                found = exchange
            else:
                _discard(exchange)
        if found is not None and (self.ready is None or self.ready()):
            return found
        if found is not None:
            _discard(found)
        return Exchange.create(size)

    def expect(self) -> None:
        """An executor with an exchange is being closed: `release` follows."""
        with self.cond:
            self.closing += 1

    def release(self, exchange: Exchange, reusable: bool) -> None:
        """An expected exchange back, its executor ended (`reusable`: every process of it, for certain); else closed."""
        exchange.unpin()
        keep = reusable and exchange.size >= KEEP_BYTES and exchange.pinned is False and _still_itself(exchange)
        if keep:  # before any timing (the referee waits for its closes); the next start waits for it (seconds at most)
            exchange.bytes.zero_()
        with self.cond:
            self.closing = max(0, self.closing - 1)
            already = any(e is exchange for e in self.idle)  # released twice: kept once, never closed under a taker
            kept = keep and not already and not self.closed and len(self.idle) < self.keep
            if kept:
                self.idle.append(exchange)
            self.cond.notify_all()
        if not kept and not already:
            _discard(exchange)

    def close(self) -> None:
        with self.cond:
            self.closed, idle, self.idle = True, self.idle, []
            self.cond.notify_all()
        for exchange in idle:
            _discard(exchange)


def _still_itself(exchange: Exchange) -> bool:
    """Whether its descriptor still names the file it mapped (a number closed twice elsewhere can name another)."""
    return exchange.file is not None and _file_of(exchange.fd) == exchange.file


def _discard(exchange: Exchange) -> None:
    """Closed; where its descriptor's number names another file now, that file is left open (not ours)."""
    if not _still_itself(exchange):
        exchange.fd = -1
    exchange.close()
