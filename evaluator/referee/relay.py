"""The referee's side of windows handed off call by call through the exchange (evaluator.wire.handoff): calls back to
back, as a loop makes them, that can rank, since no call can read a later call's inputs.

The clock runs from the first GO to the last COMMIT. Between calls the referee copies the call's output region into
its own memory, then writes the next call's inputs: host copies of a few hundred KB at the sizes where windows hold
several calls, with no pipe turn and no work of the referee's on the device (on an H100 a handoff through a shared
page cost about 10 us, against 1.5-2.7 ms for a window of one call: docs/timing.md). The calibrator's windows beside
them are handed off the same way, so a window's cost (its handoffs and copies) is taken off like for like.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import math
import os
import statistics
import time
from collections.abc import Callable

import torch

from evaluator.referee import clock, tuning
from evaluator.wire import handoff
from evaluator.wire.exchange import ALIGN, DTYPES, Exchange, dtype_name
from evaluator.wire.protocol import Handoff, Reply
from evaluator.wire.stage import Stage

_perf_counter = time.perf_counter
_memmove = ctypes.memmove
# A call's inputs, output and buffers, at most, for windows handed off through host memory: beyond, the host copies
# between calls (and their spread) outweigh a call short enough to need a window of several, and the windows keep one
# call each. None on a GPU, where every call is handed off on the device: through host memory the events of a `small`
# call (1.3 MB) spread by 70-170 us on an H100, on the device by 8-26 (docs/timing.md), and since eager is timed as a
# candidate (evaluator.referee.twin), its windows are the same as the candidates' there too.
HANDOFF_BYTES = {"cuda": 0, "cpu": 16 << 20}
# On a GPU, calls are handed off on the device (`device_window`): each call's inputs and output region in the
# executor's stage (device memory both map), copied by the referee's own stream, GO written and COMMIT waited for on the
# device (on an H100 a call's cost 50 us bare, 0.67 ms with 256 MiB each way, spreading by 2-8 us: tools/experiments/device_handoff.py,
# against 1.5-2.7 ms and 0.1-0.5 ms for a window of one call). A window's input sets and the captures of its calls
# hold at most DEVICE_WINDOW_BYTES (at `kernelbench`, 512 MiB a call: windows of 3; their float64 replays take as much
# again), so a call's bytes at most half.
DEVICE_WINDOW_BYTES = 2 << 30
# Calls a handed-off window holds at most (each call's output region is kept until the window is compared, and each
# call is replayed in float64 after it): its figure's spread falls as the square root of its calls. The CPU's calls
# are milliseconds already, and its windows are what CI's suite waits for.
HANDOFF_CALLS = {"cuda": 32, "cpu": 8}
# Calls of a ranked series of handed-off windows, at most (and at least the timer's fewest windows): each window costs
# its calibrator's beside it, a hold each way and a float64 replay of every call, so at `small` on an H200 200 windows
# of 32 calls took 6.5-11.6 s of a candidate's time phase.
HANDOFF_SERIES_CALLS = 1024
# Handed-off windows run before the ranked ones (their first handoffs, and the calibrator's, find nothing warm).
HANDOFF_WARMUP = 2
# A baseline's window of calls back to back (`baseline_calls`) lasts about this long, as a candidate's does (K so that
# a window is about 20 times its cost, 1.5-4 ms on a GPU), with at least 2 calls: a call of 50 ms with few bytes gets
# windows of 2, not of HANDOFF_CALLS (a round of five baselines would take minutes).
BASELINE_WINDOW_MS = 40.0
_tokens = itertools.count(1)
# On the CPU the referee sleeps this long between looks at COMMIT while a call runs, rather than spinning: a spinning
# referee (yielding or not) held one of a 2-core machine's cores from the call's threads, so calls ran up to twice as
# long as alone and spread with the scheduler. Waking costs tens of microseconds, a small share of a CPU call, and
# it is the same in the calibrator's windows beside. HARNESS_CPU_NAP_US=0 spins, for measuring.
CPU_NAP_S = float(os.environ.get("HARNESS_CPU_NAP_US", "50")) * 1e-6


def exchange_room(layout, device: str) -> int:
    """Bytes of the exchange a handed-off window needs, where a call's bytes allow one (else 0): at least its plan's
    size (`plan_for`: its output region is the stage's span less the span's ALIGN of slack)."""
    calls_bytes = layout.stride + layout.span
    return handoff.HEADER + calls_bytes if calls_bytes - ALIGN <= HANDOFF_BYTES[device] else 0


def plan_for(referee) -> handoff.Plan | None:
    """Where a call's inputs, output and buffers lie when windows are handed off: in the exchange (at most
    HANDOFF_BYTES), else on a GPU in the executor's stage (at most half DEVICE_WINDOW_BYTES: `on_device`);
    None where they cannot be (outputs of a type the exchange cannot carry, larger calls, an exchange too small, or no
    stream memory operations for windows on the device)."""
    if referee.output_dtype not in DTYPES:
        return None
    buffers = [(name, list(value.shape), dtype_name(value.dtype)) for name, value in referee.baseline_model.named_buffers()]
    if any(dtype is None for _, _, dtype in buffers):
        return None
    made = functools.partial(handoff.Plan.make, list(referee.layout.inputs), (referee.output_shape, referee.output_dtype),
                             buffers)
    plan = made()
    call_bytes = plan.in_span + plan.out_span
    if call_bytes <= HANDOFF_BYTES[referee.device]:
        return plan if plan.size <= referee.exchange_bytes else None
    if (referee.device != "cuda" or 2 * call_bytes > DEVICE_WINDOW_BYTES or plan.size > referee.layout.size
            or handoff.stream_ops() is None):
        return None
    return made(on_device=True)


def window_calls(plan: handoff.Plan, calls: int, device: str) -> int:
    """Calls a handed-off window holds, `calls` wanted: at most HANDOFF_CALLS, and on the device at most what
    DEVICE_WINDOW_BYTES holds (at least 2)."""
    calls = min(calls, HANDOFF_CALLS[device])
    if plan.on_device:
        calls = min(calls, max(2, DEVICE_WINDOW_BYTES // (plan.in_span + plan.out_span)))
    return calls


def baseline_calls(reference_ms: float, device: str, plan: handoff.Plan | None = None) -> int:
    """Calls a baseline's handed-off window holds: about BASELINE_WINDOW_MS of the reference's calls, 2 to HANDOFF_CALLS
    (and on the device, to what `window_calls` allows)."""
    calls = min(HANDOFF_CALLS[device], max(2, math.ceil(BASELINE_WINDOW_MS / max(reference_ms, 1e-3))))
    return window_calls(plan, calls, device) if plan is not None else calls


class CopiedCalls:
    """A baseline's calls made as a handed-off window makes a candidate's (evaluator.executor.forward.
    handed_off_forwards), so that a speedup at the sizes where windows are handed off compares like with like: each
    call's inputs copied from host memory (page-locked on a GPU, as the exchange is) into fresh tensors on the device,
    its output and buffers copied out behind it into host memory, both inside the call's time; on the device
    (`on_device`), calls back to back on inputs where they lie, nothing copied. `load` puts a window's input sets in
    place, outside the time; `call` makes the next call."""

    def __init__(self, device: str, on_device: bool = False):
        self.cuda = device == "cuda"
        self.on_device = on_device  # as windows on the device: calls back to back on inputs where they lie, nothing
        # copied: a candidate there can write its output where the executor copies it to and skip that copy (an
        # attacker's review), so its copy out is not charged to the baselines; an honest candidate's figure holds it
        self.sets: list[list] = []
        self.hosts: list[dict[int, torch.Tensor]] = []  # each set's tensor inputs in host memory
        self.outs: dict[str, torch.Tensor] = {}          # where each call's output and buffers are copied out
        self.buffers: list[tuple[str, torch.Tensor]] | None = None  # the model's buffers (updated in place)
        self.next = 0

    def load(self, input_sets: list[list]) -> None:
        self.sets, self.next = input_sets, 0
        if self.on_device:  # a candidate's inputs lie in its stage: its call reads them there, no copy in
            return
        while len(self.hosts) < len(input_sets):
            self.hosts.append({})
        for host, inputs in zip(self.hosts, input_sets):
            for position, value in enumerate(inputs):
                if isinstance(value, torch.Tensor):
                    place = host.get(position)
                    if place is None or place.shape != value.shape or place.dtype != value.dtype:
                        place = host[position] = torch.empty(value.shape, dtype=value.dtype, pin_memory=self.cuda)
                    place.copy_(value)
        if self.cuda:
            torch.cuda.synchronize()

    def call(self, model: torch.nn.Module):
        index = self.next
        self.next += 1
        inputs = self.sets[index]
        if self.on_device:  # inputs where they lie, and no copy out (see the class's docstring)
            return model(*inputs)
        host = self.hosts[index]
        given = [(host[i].to("cuda", non_blocking=True) if self.cuda else host[i].clone()) if i in host else value
                 for i, value in enumerate(inputs)]
        out = model(*given)
        if self.buffers is None:  # looked up once: the referee's own module keeps its buffers (an executor walks a
            self.buffers = [(f"state.{name}", value) for name, value in model.named_buffers()]  # candidate's each call)
        for name, value in [("output", out), *self.buffers]:
            if not isinstance(value, torch.Tensor):
                continue
            place = self.outs.get(name)
            if place is None or place.shape != value.shape or place.dtype != value.dtype:
                place = self.outs[name] = torch.empty(value.shape, dtype=value.dtype, pin_memory=self.cuda)
            place.copy_(value.detach(), non_blocking=self.cuda)
        return out


@tuning.costed("windows")
def window(request: Callable[..., Reply], exchange: Exchange, plan: handoff.Plan, input_sets: list[list], train: bool,
           device: str, pace_ms: float = 0.0, stage: Stage | None = None,
           give_up: Callable[[], None] | None = None) -> clock.Clocked:
    """One handed-off window of len(input_sets) calls (see the module's docstring). `request(command, during=...)`
    sends the command, runs `during(deadline, answered)` and returns the reply. A window that did not end (the
    executor answered first, or its deadline passed) comes back with the reply's error, or one of its own."""
    if plan.on_device:
        return device_window(request, exchange, stage, plan, input_sets, train, pace_ms, give_up)
    calls = len(input_sets)
    packed = plan.pack(input_sets)  # in host memory before the clock starts, as the capture
    capture = clock.capture_buffer((calls, plan.out_span), "cpu")
    page, raw = exchange.map, exchange.bytes
    inbox = raw[handoff.HEADER:handoff.HEADER + plan.in_span]
    outbox = raw[plan.out_offset:plan.out_offset + plan.out_span]
    for word in (handoff.READY, handoff.GO, handoff.COMMIT):
        handoff.write(page, word, 0)
    token, times = next(_tokens), {}
    yielding = device != "cuda"
    nap_s = CPU_NAP_S if yielding else 0.0

    # one thread's memcpy, not torch's copy (which may wake a pool of threads for a few hundred KB, unevenly)
    inbox_at, outbox_at, in_span, out_span = inbox.data_ptr(), outbox.data_ptr(), plan.in_span, plan.out_span
    packed_at, capture_at = packed.data_ptr(), capture.data_ptr()
    stamps = []

    def relay(deadline: float, answered: Callable[[], bool]) -> None:
        try:
            handoff.wait_for(page, handoff.READY, token, deadline, answered, yielding)
            times["started"] = now = _perf_counter()
            for k in range(calls):
                _memmove(inbox_at, packed_at + k * in_span, in_span)
                handoff.write(page, handoff.GO, k + 1)
                went = _perf_counter()
                handoff.wait_for(page, handoff.COMMIT, k + 1, deadline, answered, yielding, nap_s)
                committed = _perf_counter()
                _memmove(capture_at + k * out_span, outbox_at, out_span)  # what the call left, before the next inputs
                stamps.append((now, went, committed, now := _perf_counter()))
            times["ended"] = now
        except handoff.Late:
            pass  # the reply says why, or the deadline ends the executor

    command = Handoff(id=0, train=train, calls=calls, token=token, inputs=list(plan.inputs), outputs=list(plan.outputs),
                      pace_ms=pace_ms)
    reply = request(command, during=relay)
    if "ended" not in times and not reply.error:
        reply = reply.model_copy(update={"error": "the executor answered before its calls had all committed",
                                         "error_kind": "internal"})
    if reply.error:
        return clock.Clocked(0.0, reply, None, 0, None, calls=calls)
    # the median ms of each call's steps, for tuning alone: inputs written, GO to COMMIT, output region copied
    steps = tuple(statistics.median((s[i + 1] - s[i]) * 1e3 for s in stamps) for i in range(3))
    return clock.Clocked((times["ended"] - times["started"]) * 1e3, reply, None, 0, None, steps, calls,
                         staged=plan.unpack(capture), handed_off=True)


# ------------------------------------------------------------------------------------------ on the device

# Once every call of a window has run, how long the referee waits for its own stream's last copy after the
# executor's reply before it gives the window up.
_AFTER_REPLY_S = 5.0
# The referee's host waits out a window on the device asleep between looks at its end: the window is its stream's
# events, so when the host sees the end does not move it, and a referee spinning through it took a core the lane's
# executor launches from (calls bound by their launches, as eager's at `small`, read slower and spread beside a
# spinning process: docs/timing.md). The variable: for tuning alone.
POLL_SLEEP_S = float(os.environ.get("KH_POLL_SLEEP_US", "50")) * 1e-6


def device_window(request: Callable[..., Reply], exchange: Exchange, stage: Stage, plan: handoff.Plan,
                  input_sets: list[list], train: bool, pace_ms: float = 0.0,
                  give_up: Callable[[], None] | None = None) -> clock.Clocked:
    """`window` for calls too large for host copies: the regions lie in the executor's stage on the device (the plan's
    offsets from its start; nothing else lies there during the window but what windows before left), and the referee's
    own stream writes call k's inputs there, then GO=k (cuStreamWriteValue64 on the exchange's page-locked header),
    waits for COMMIT>=k (cuStreamWaitValue64) and copies call k's output region into memory of its own; the executor's
    calls are queued behind their GOs as on the host. No host turn between calls: the window is the referee's device
    events around that stream, its cost two context switches and the two copies a call (taken off by the calibrator's
    windows, handed off the same way). Call k+1's inputs exist in no memory the executor can reach before call k's
    commit, and what is compared of call k is what the region held when the referee's copy ran, after its commit: work
    of the candidate's that could still change it ran before that copy, inside the window. A window that does not end
    (its executor late, or writing the words itself) ends its executor (`give_up`) before the stream's waits are let
    go: nothing can write the words after that (an attacker's review: a thread rewriting COMMIT=0 kept the referee's
    stream, and the whole batch, waiting)."""
    calls = len(input_sets)
    if not exchange.pinned:  # the referee's own mapping: its stream cannot wait on pageable memory
        return clock.Clocked(0.0, Reply(id=0, error="the referee's exchange is not page-locked", error_kind="room"),
                             None, 0, None, calls=calls)
    stream = _stream()
    room = stage.bytes
    packed = plan.pack(input_sets, device="cuda")
    capture = clock.capture_buffer((calls, plan.out_span), "cuda")
    inbox = room[handoff.HEADER:handoff.HEADER + plan.in_span]
    outbox = room[plan.out_offset:plan.out_offset + plan.out_span]
    page, page_at = exchange.map, exchange.bytes.data_ptr()
    for word in (handoff.READY, handoff.GO, handoff.COMMIT):
        handoff.write(page, word, 0)
    torch.cuda.synchronize()  # the packed inputs in place before the window
    wait, write = handoff.stream_ops()
    token, times = next(_tokens), {}
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def relay(deadline: float, answered: Callable[[], bool]) -> None:
        try:
            handoff.wait_for(page, handoff.READY, token, deadline, answered)
        except handoff.Late:
            return
        times["queued"] = True
        with torch.cuda.stream(stream):
            begin.record()
            for k in range(calls):
                inbox.copy_(packed[k], non_blocking=True)
                if (write(stream.cuda_stream, page_at + handoff.GO, k + 1, 0) != 0
                        or wait(stream.cuda_stream, page_at + handoff.COMMIT, k + 1, 0) != 0):
                    times["refused"] = True
                    if give_up is not None:  # its queued calls wait for GOs that will not come: no answer to wait for
                        give_up()
                    return
                capture[k].copy_(outbox, non_blocking=True)
            end.record()
        replied_at = None
        while not end.query():
            now = time.monotonic()
            if replied_at is None and answered():
                replied_at = now
            if now > deadline or (replied_at is not None and now - replied_at > _AFTER_REPLY_S):
                return
            if POLL_SLEEP_S:
                time.sleep(POLL_SLEEP_S)
        times["ms"] = begin.elapsed_time(end)

    command = Handoff(id=0, train=train, calls=calls, token=token, inputs=list(plan.inputs), outputs=list(plan.outputs),
                      pace_ms=pace_ms, on_device=True)
    try:
        reply = request(command, during=relay)
    finally:
        if times.get("queued") and "ms" not in times:
            if give_up is not None:
                give_up()
            _release(stream, page)
    if times.get("refused") and not reply.error:
        reply = reply.model_copy(update={"error": "the referee's stream refused a wait or a write on the exchange's "
                                                  "header", "error_kind": "internal"})
    if "ms" not in times and not reply.error:
        reply = reply.model_copy(update={"error": "the executor answered before its calls had all committed",
                                         "error_kind": "internal"})
    if reply.error:
        return clock.Clocked(0.0, reply, None, 0, None, calls=calls)
    if not torch.equal(inbox, packed[-1]):  # the last call's inputs, as the referee wrote them (earlier calls' are
        reply.problems.append(f"call {calls} of the window changed its inputs in place")  # overwritten by then)
    return clock.Clocked(times["ms"], reply, None, 0, None, (), calls, staged=plan.unpack(capture), handed_off=True)


# How long the referee waits for its stream's waits to let go once the window's executor has ended.
_RELEASE_S = 10.0


class StreamStuck(RuntimeError):
    """The referee's stream still waits on a word no one can write any more: every later synchronize of its device
    would wait for ever, so the referee ends once it has answered (its lane starts another: evaluator.referee.__main__)."""


def _release(stream, page) -> None:
    """The referee's stream let go of the waits a window left it on (the words written past any call's number, again
    until it has drained; its executor has ended, so nothing writes them back); StreamStuck after _RELEASE_S."""
    drained = torch.cuda.Event()
    drained.record(stream)
    until = time.monotonic() + _RELEASE_S
    while not drained.query():
        handoff.write(page, handoff.COMMIT, 1 << 62)
        handoff.write(page, handoff.GO, 1 << 62)
        if time.monotonic() > until:
            raise StreamStuck(f"the referee's stream still waited {_RELEASE_S:g} s after the window's executor ended")
        time.sleep(0.001)


@functools.cache
def _stream() -> torch.cuda.Stream:
    """The referee's stream for windows on the device, made once."""
    return torch.cuda.Stream()
