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


def timed_forward(model, inputs: list, device: str) -> tuple[object, float | None, float]:
    """(output, device-event ms or None on the CPU, host ms) of one forward, to a device-wide synchronize."""
    if device != "cuda":
        start = _perf_counter()
        out = model(*inputs)
        return out, None, (_perf_counter() - start) * 1e3
    begin, end = _Event(enable_timing=True), _Event(enable_timing=True)
    start = _perf_counter()
    _record(begin)
    out = model(*inputs)
    _record(end)
    _synchronize()
    return out, _elapsed_time(begin, end), (_perf_counter() - start) * 1e3
