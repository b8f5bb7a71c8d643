"""What an executor reports about one clocked call: its device events and host clock around the forward,
the same measurement the referee's `Timer` makes of a baseline. The candidate's testimony, which the
referee checks against its own clock around the call and never ranks (evaluator.referee.clock).

The clock, `Event.record`, `Event.elapsed_time` and `synchronize` are bound when this module is
imported, before any candidate exists, so patching them afterwards changes nothing here.
"""

from __future__ import annotations

import time

import torch

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
