"""Windows of calls handed off one by one through the exchange: calls back to back that can rank (issue 33).

A window of K calls on the referee's clock, with no pipe turn, no referee work on the device and no context switch
between its calls. The exchange (shared host memory) starts with a header of three words:

    READY   the executor: the window's token, once it waits for the first call's inputs
    GO      the referee: k, once call k's inputs lie in the exchange's input region
    COMMIT  the executor: k, once call k's output and the buffers as it left them lie in the output region

The referee writes call k+1's inputs only after it has copied call k's output region into its own memory. So no
call can read a later call's inputs (a window's calls cannot be batched, nor overlapped on streams), and what the
referee compares of call k is what the exchange held at its commit: bytes written later change nothing it holds.
Both sides spin on the words (a blocked reader wakes tens of microseconds late, unevenly). Everything the executor
writes here is the candidate's to forge; a word written out of turn only makes the referee copy bytes early, which
are then compared as the call's.
"""

from __future__ import annotations

import math
import os
import struct
import time
from dataclasses import dataclass

import torch

from evaluator.wire.exchange import DTYPES, ExchangeError
from evaluator.wire.protocol import TensorSlot
from evaluator.wire.stage import aligned

HEADER = 256  # bytes before the input region: the words below, each an int64
READY, GO, COMMIT = 0, 8, 16
_WORD = struct.Struct("<q")


def write(buffer, word: int, value: int) -> None:
    _WORD.pack_into(buffer, word, value)


class Late(Exception):
    """A word did not come in time (or the other side answered on its channel instead)."""


def wait_for(buffer, word: int, value: int, deadline: float, stop=None, yielding: bool = False,
             nap_s: float = 0.0) -> None:
    """Spin until `word` holds at least `value` (time.monotonic() `deadline`; `stop()` true: give up). `yielding`
    gives the core back at each turn (a CPU device: the other side's work needs it); `nap_s` sleeps that long at
    each turn instead, so that the waiter takes no core at all while the other side works."""
    unpack, turns = _WORD.unpack_from, 0
    while unpack(buffer, word)[0] < value:
        turns += 1
        if nap_s:
            time.sleep(nap_s)
        elif yielding:
            os.sched_yield()
        if (nap_s or turns & 1023 == 0) and (time.monotonic() > deadline or (stop is not None and stop())):
            if unpack(buffer, word)[0] >= value:  # it came meanwhile (with the reply right behind it): not late
                return
            raise Late(f"word {word} stayed under {value}")


@dataclass(frozen=True)
class Plan:
    """Where one call's inputs and its output and buffers lie in the exchange during a handed-off window."""

    inputs: tuple[TensorSlot, ...]   # `input.N`, from HEADER
    outputs: tuple[TensorSlot, ...]  # `output`, then `state.NAME` for each buffer, after the inputs
    in_span: int
    out_span: int
    on_device: bool = False  # the regions lie in the executor's stage on the device (relay.device_window), at these
    # offsets from its start; the words stay in the exchange

    @property
    def out_offset(self) -> int:
        return HEADER + self.in_span

    @property
    def size(self) -> int:
        """Bytes of the exchange a window needs."""
        return HEADER + self.in_span + self.out_span

    @classmethod
    def make(cls, input_slots: list[TensorSlot], output: tuple[list[int], str],
             buffers: list[tuple[str, list[int], str]], on_device: bool = False) -> Plan:
        """`input_slots`: one input set's slots as the stage lays them out (offsets from 0); `output` and `buffers`:
        (shape, dtype name), (name, shape, dtype name) of what each call leaves."""
        inputs, end = [], HEADER
        for slot in input_slots:
            inputs.append(slot.model_copy(update={"offset": HEADER + slot.offset, "in_stage": on_device}))
            end = max(end, aligned(HEADER + slot.offset + max(slot.nbytes, 1)))
        in_span = end - HEADER
        outputs, offset = [], end
        for name, shape, dtype in [("output", *output), *((f"state.{n}", s, d) for n, s, d in buffers)]:
            nbytes = math.prod(shape) * torch.empty((), dtype=DTYPES[dtype]).element_size()
            outputs.append(TensorSlot(name=name, dtype=dtype, shape=list(shape), offset=offset, nbytes=nbytes,
                                      in_stage=on_device))
            offset = aligned(offset + max(nbytes, 1))
        return cls(inputs=tuple(inputs), outputs=tuple(outputs), in_span=in_span, out_span=offset - end,
                   on_device=on_device)

    def pack(self, input_sets: list[list], device: str = "cpu") -> torch.Tensor:
        """Each set's tensor inputs as the input region's bytes (uint8, a row a set, in host memory, or on the device
        for a plan on the device): written into the region inside the window with one copy each."""
        packed = torch.zeros(len(input_sets), self.in_span, dtype=torch.uint8, device=device)
        for row, inputs in zip(packed, input_sets):
            for slot in self.inputs:
                value = inputs[int(slot.name.removeprefix("input."))]
                start = slot.offset - HEADER
                row[start:start + slot.nbytes].copy_(value.detach().contiguous().reshape(-1).view(torch.uint8))
        return packed

    def unpack(self, capture: torch.Tensor) -> dict[str, torch.Tensor]:
        """The output region of each call, as the referee copied it at the call's commit (`capture`, uint8, a row a
        call): `outputs` and `states.NAME`, a row a call, as staged tensors are read."""
        calls, tensors = capture.shape[0], {}
        for slot in self.outputs:
            start = slot.offset - self.out_offset
            if start < 0 or start + slot.nbytes > capture.shape[1]:
                raise ExchangeError(f"{slot.name} lies outside the output region")
            raw = capture[:, start:start + slot.nbytes].contiguous()
            name = "outputs" if slot.name == "output" else "states." + slot.name.removeprefix("state.")
            tensors[name] = raw.view(DTYPES[slot.dtype]).view(calls, *slot.shape)
        return tensors


_STREAM_OPS: list = []  # [(wait, write)] once looked for, [None] where the driver has none


def stream_ops():
    """The driver's cuStreamWaitValue64 and cuStreamWriteValue64, or None where it has none."""
    if not _STREAM_OPS:
        try:
            import ctypes

            driver = ctypes.CDLL("libcuda.so.1")
            wait, write = driver.cuStreamWaitValue64_v2, driver.cuStreamWriteValue64_v2
            for op in (wait, write):
                op.argtypes, op.restype = (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint), ctypes.c_int
            _STREAM_OPS.append((wait, write))
        except (OSError, AttributeError):
            _STREAM_OPS.append(None)
    return _STREAM_OPS[0]


def refuse_stream_ops() -> None:
    """The driver refused a first queued wait: none are tried again in this process."""
    stream_ops()
    _STREAM_OPS[0] = None


def view(exchange_bytes: torch.Tensor, slot: TensorSlot) -> torch.Tensor:
    """A slot of the exchange as its tensor (a view: writes go to the exchange)."""
    raw = exchange_bytes[slot.offset:slot.offset + slot.nbytes]
    return raw.view(DTYPES[slot.dtype]).view(slot.shape) if slot.nbytes else torch.empty(
        slot.shape, dtype=DTYPES[slot.dtype])
