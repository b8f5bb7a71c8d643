"""The stream hold before a checked call: its inputs reach the candidate behind a sleep on the current stream.

On CUDA each floating input is NaN until the sleep (`Construct.stream_delay_ms`) has passed on the current stream;
the real values are copied in behind it. Work that honours stream order (the current stream, or a side stream that
waits on it) reads the real values; a side stream that does not wait reads NaN, and the call is wrong.
"""

from __future__ import annotations

import torch


class StagingOutOfMemory(RuntimeError):
    """The device's memory ran out as a call's inputs were staged, before the candidate was called."""


def sleep_cycles(delay_ms: float, device: str) -> int:
    """The cycles of `torch.cuda._sleep` that take `delay_ms` on this GPU (0 off a GPU)."""
    if device != "cuda" or delay_ms <= 0:
        return 0
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    torch.cuda._sleep(1_000_000)
    end.record()
    end.synchronize()
    return int(delay_ms * 1_000_000 / max(begin.elapsed_time(end), 1e-3))


def inputs_behind_hold(given: list, cycles: int, device: str) -> list:
    """Fresh copies of `given` (the stage's first input set: views of it, and plain values) for one checked call, the
    candidate's own memory: on CUDA each floating one NaN until `cycles` of sleep have passed, its values queued behind
    them; on the CPU plain copies."""
    try:
        inputs = [torch.empty_like(x) if isinstance(x, torch.Tensor) else x for x in given]
    except torch.OutOfMemoryError as err:
        raise StagingOutOfMemory(str(err)) from None
    held = []
    for x, source in zip(inputs, given):
        if not isinstance(x, torch.Tensor):
            continue
        if device == "cuda" and x.is_floating_point():
            x.fill_(float("nan"))
            held.append((x, source))
        else:
            x.copy_(source)
    if held:
        torch.cuda.synchronize()
        if cycles:
            torch.cuda._sleep(cycles)
        for x, source in held:
            x.copy_(source)  # still queued behind the sleep when the candidate is called
    return inputs
