"""What an executor reports about one clocked call: its device events and host clock around the forward,
the same measurement the referee's `Timer` makes of a baseline. The candidate's testimony, which the
referee checks against its own clock around the call and never ranks (evaluator.referee.clock).

The clock, `Event.record`, `Event.elapsed_time` and `synchronize` are bound when this module is
imported, before any candidate exists, so patching them afterwards changes nothing here.
"""

from __future__ import annotations

import statistics
import time

import torch

from evaluator.wire import handoff
from evaluator.wire import tensors as cmp

_perf_counter = time.perf_counter
_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event
_record = torch.cuda.Event.record
_elapsed_time = torch.cuda.Event.elapsed_time


def timed_forwards(model, input_sets: list[list], device: str, after_each) -> tuple[list, list[float], list[float]]:
    """(each call's (output, what `after_each()` returned), device-event ms of each call (CUDA), host ms of each
    call) of one forward on each input set, back to back as a loop makes them: nothing is waited for between
    calls, `after_each()` right after each (the executor's copies of the buffers, queued behind the call), one
    device-wide synchronize at the end. On CUDA each call's host ms is the whole's over the calls."""
    outs, marks, hosts = [], [], []
    cuda = device == "cuda"
    started = _perf_counter()
    for inputs in input_sets:
        begun = _perf_counter()
        if cuda:
            begin, end = _Event(enable_timing=True), _Event(enable_timing=True)
            _record(begin)
        out = model(*inputs)
        if cuda:
            _record(end)
            marks.append((begin, end))
        else:
            hosts.append((_perf_counter() - begun) * 1e3)
        outs.append((out, after_each()))
    if cuda:
        _synchronize()
        whole = (_perf_counter() - started) * 1e3
        return outs, [_elapsed_time(b, e) for b, e in marks], [whole / len(input_sets)] * len(input_sets)
    return outs, [], hosts


def handed_off_forwards(model, exchange, command, values: dict, positions: int, device: str, buffers,
                        describe, stage=None) -> tuple[list, list[float], list[float], list[str], list[float], bool]:
    """The calls of a handed-off window (protocol.Handoff, evaluator.wire.handoff): (what each returned, as `describe`
    puts it; device-event ms of each call (CUDA); host ms of each call; problems; the median ms of each call's steps,
    `Reply.steps_ms`; whether the calls were queued on the device). Each call waits for the referee's GO, reads its
    inputs out of the exchange onto the device, runs forward, writes its output and `buffers()` (the tensors named
    `state.NAME`) into the exchange, waits for the device and commits. A call's reported time runs from before its
    inputs are read to after what it left is written: the copies are the call's, as the calibrator's are, so a
    candidate that overlaps them with its work gains nothing on the cost taken off (an attacker's review). On a GPU
    the calls are queued ahead where the driver allows (`_queued_forwards`). Raises handoff.Late when a GO does not
    come in time."""
    cuda = device == "cuda"
    page, raw = exchange.map, exchange.bytes
    ops = handoff.stream_ops() if cuda and getattr(exchange, "pinned", False) else None
    # on the device: the regions lie in the stage (its inputs handed to forward as they lie there, no copy in)
    room = _room(command, ops, stage) if command.on_device else raw
    ins = [(int(s.name.removeprefix("input.")), handoff.view(room, s)) for s in command.inputs]
    outs = [(s.name, handoff.view(room, s)) for s in command.outputs]
    if ops is not None:
        queued = _queued_forwards(model, page, raw.data_ptr(), ins, outs, command, values, positions, buffers,
                                  describe, ops)
        if queued is not None:
            return (*queued, True)
        if command.on_device:
            raise RoomRefused("the driver refused a queued wait (cuStreamWaitValue64)")
    infos, events, hosts, problems, stamps, last = [], [], [], [], [], (None, None)
    deadline = time.monotonic() + command.wait_s
    handoff.write(page, handoff.READY, command.token)
    for k in range(1, command.calls + 1):
        waited = _perf_counter()
        handoff.wait_for(page, handoff.GO, k, deadline, yielding=not cuda)
        begun = _perf_counter()
        if cuda:
            begin, end = _Event(enable_timing=True), _Event(enable_timing=True)
            _record(begin)
        given = {position: (value.to(device, non_blocking=True) if cuda else value.clone()) for position, value in ins}
        inputs = [given[i] if i in given else values.get(i) for i in range(positions)]
        given_at = _perf_counter()
        out = model(*inputs)
        returned = _perf_counter()
        last = _described(out, last, describe)
        infos.append(last[1])
        _write_out(out, buffers, outs, k, problems, cuda)
        if cuda:
            _record(end)
        written = _perf_counter()
        if cuda:
            _synchronize()  # the whole device: work on a side stream is in what is committed
        synced = _perf_counter()
        handoff.write(page, handoff.COMMIT, k)
        if cuda:
            events.append(_elapsed_time(begin, end))
        hosts.append((synced - begun) * 1e3)
        stamps.append((waited, begun, given_at, returned, written, synced))
    steps = [statistics.median((s[i + 1] - s[i]) * 1e3 for s in stamps) for i in range(5)] if stamps else []
    return infos, events, hosts, problems, steps, False


class RoomRefused(Exception):
    """A window on the device cannot be had here: the referee falls back to windows of one call."""


def _room(command, ops, stage) -> torch.Tensor:
    """The stage's memory, where a window on the device lays its regions out: such windows need the calls queued (the
    referee's stream writes each GO and waits for each COMMIT on the device) and a stage on the device."""
    if ops is None:
        raise RoomRefused("no stream memory operations, or the exchange is not page-locked")
    memory = getattr(stage, "bytes", None)
    needed = max(s.offset + s.nbytes for s in [*command.inputs, *command.outputs])
    if memory is None or memory.device.type != "cuda" or memory.numel() < needed:
        raise RoomRefused("no stage on the device large enough")
    return memory


def _described(out, last: tuple, describe) -> tuple:
    """(the output's kind, its description): described once while a plain tensor's kind stays the same (a record each
    call took 10 us of its host path)."""
    kind = (type(out), out.dtype, tuple(out.shape), out.device) if cmp.is_plain_tensor(out) else None
    return last if kind is not None and kind == last[0] else (kind, describe(out))


def _write_out(out, buffers, outs, k: int, problems: list[str], cuda: bool) -> None:
    """Call k's output and its buffers as it left them into the exchange's output region: on a GPU queued behind the
    call on the current stream (a buffer held in host memory copied at once, as forward left it, then queued),
    converted to the reference's dtype where it differs (as other windows compare them)."""
    left = {"output": out, **{f"state.{name}": value for name, value in buffers().items()}}
    for name, place in outs:
        value = left.get(name)
        if not cmp.is_plain_tensor(value) or value.numel() != place.numel():
            problems.append(f"call {k} of the window: {name} is not a plain tensor of {list(place.shape)} "
                            "(not written)")
            continue
        value = value.detach()
        if cuda and value.device.type != "cuda":
            value = value.to("cuda")  # its value now, on the host's time line, not when the device gets here
        place.copy_(value.reshape(place.shape), non_blocking=cuda)


def _queued_forwards(model, page, page_at: int, ins, outs, command, values: dict, positions: int, buffers, describe,
                     ops, _wait_all=torch.cuda.synchronize):  # bound here: a candidate rebinding the module's names
    # cannot make the window's end wait for nothing (its reports would then read unfinished events)
    """`handed_off_forwards` on a GPU with every call queued ahead on one stream, as a loop makes its calls: each call's
    inputs copied onto the device behind a wait on the device for its GO (cuStreamWaitValue64 on the exchange's pinned
    header), its output and buffers copied out behind it, then COMMIT written by the device (cuStreamWriteValue64, with
    a memory barrier: what was copied is there first). A call's launches overlap the calls before it, so its figure is
    not its host path's, and no call can read a later call's inputs: they reach the device only behind its GO, which
    the referee writes once it has copied what the call before committed. None (nothing queued) where the driver
    refuses the first wait: the calls then go one by one from the host."""
    stream = torch.cuda.current_stream()
    marks, infos, problems, stamps = [], [], [], []
    try:  # READY once the first wait is queued: where the driver refuses it, the referee has queued nothing
        _queue_calls(model, page_at, ins, outs, command, values, positions, buffers, describe, ops, stream, marks, infos,
                     problems, stamps, lambda: handoff.write(page, handoff.READY, command.token))
    except _Refused:
        return None
    except BaseException:
        handoff.write(page, handoff.GO, 1 << 62)  # no queued wait is left waiting for a GO that will not come
        raise
    _wait_all()
    events = [_elapsed_time(b, e) for b, e in marks]
    # the host's steps, for tuning: queueing the inputs and calling forward, then queueing what it left
    steps = [0.0, statistics.median((s[1] - s[0]) * 1e3 for s in stamps), 0.0,
             statistics.median((s[2] - s[1]) * 1e3 for s in stamps), 0.0]
    return infos, events, list(events), problems, steps


class _Refused(Exception):
    """The driver refused the first queued wait: nothing is queued."""


def _queue_calls(model, page_at, ins, outs, command, values, positions, buffers, describe, ops, stream, marks, infos,
                 problems, stamps, ready) -> None:
    wait, write = ops
    handle, last = stream.cuda_stream, (None, None)
    for k in range(1, command.calls + 1):
        begun = _perf_counter()
        with torch.cuda.stream(stream):
            if wait(handle, page_at + handoff.GO, k, 0) != 0:  # CU_STREAM_WAIT_VALUE_GEQ
                if k == 1:
                    handoff.refuse_stream_ops()
                    raise _Refused
                raise RuntimeError(f"cuStreamWaitValue64 refused call {k}")
            if k == 1:
                ready()
            begin, end = _Event(enable_timing=True), _Event(enable_timing=True)
            _record(begin)  # the copy in and the copies out are the call's (see handed_off_forwards)
            given = {position: value.to("cuda", non_blocking=True) for position, value in ins}
            inputs = [given[i] if i in given else values.get(i) for i in range(positions)]
        out = model(*inputs)
        returned = _perf_counter()
        with torch.cuda.stream(stream):  # whatever stream forward left current
            last = _described(out, last, describe)
            infos.append(last[1])
            _write_out(out, buffers, outs, k, problems, True)
            _record(end)
            if write(handle, page_at + handoff.COMMIT, k, 0) != 0:
                raise RuntimeError(f"cuStreamWriteValue64 refused call {k}")
        marks.append((begin, end))
        stamps.append((begun, returned, _perf_counter()))
