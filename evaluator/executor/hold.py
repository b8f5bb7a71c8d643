"""The stream hold before a checked call: its inputs reach the candidate behind a wait on the current stream.

On CUDA each floating input is NaN until the hold (`Construct.stream_delay_ms`) has passed on the current stream;
the real values are copied in behind it. Work that honours stream order (the current stream, or a side stream that
waits on it) reads the real values; a side stream that does not wait reads NaN, and the call is wrong.

The hold is a host function on the stream (`cuLaunchHostFunc`) that sleeps, not a spinning kernel: the stream waits
and no kernel runs, so the referee's float64 work beside the call keeps the GPU. Two contexts on one GPU time-slice,
and a spinning kernel cost a referee's float64 matmuls beside it about half their rate on an H200, a host function
about 4% (`tools/experiments/hold_beside.py`). The host function is libc's `usleep`, its one argument the
microseconds: a C function, so the driver's thread never waits for this interpreter's lock (a Python callback would
deadlock against a forward that synchronizes while holding it).

A side stream's first kernel may be loaded lazily (CUDA_MODULE_LOADING=LAZY), and loading a module can wait for the
whole device, the hold included: a racing side stream can then read the real values on the call where its kernels
first load, and is caught on the checked calls after it.
"""

from __future__ import annotations

import ctypes

import torch


class StagingOutOfMemory(RuntimeError):
    """The device's memory ran out as a call's inputs were staged, before the candidate was called."""


# The driver's cuLaunchHostFunc and libc's usleep, looked up by `prepare` before the candidate is imported, so that
# what the candidate does to ctypes never reaches them (the guard watches these names and StreamHold's).
_LAUNCH = None
_USLEEP = None


def prepare() -> str | None:
    """Look up the hold's driver call and queue a 1 us hold on the current stream, waited for: None, or why no hold
    can be made on this GPU (the executor then says so, before the candidate exists: the harness's failure, not the
    candidate's). Called once CUDA is initialised."""
    global _LAUNCH, _USLEEP
    try:
        launch = ctypes.CDLL("libcuda.so.1").cuLaunchHostFunc
        launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        launch.restype = ctypes.c_int
        _LAUNCH, _USLEEP = launch, ctypes.cast(ctypes.CDLL("libc.so.6").usleep, ctypes.c_void_p).value
        torch.cuda.synchronize()  # the runtime's primary context made and current on this thread, for the driver's call
        StreamHold(0.001, "cuda").queue()
        torch.cuda.synchronize()
    except Exception as err:
        _LAUNCH = _USLEEP = None
        return f"the stream hold cannot be made on this GPU: {type(err).__name__}: {err}"
    return None


class StreamHold:
    """Holds a CUDA stream for `delay_ms` with a host function that sleeps; no hold off a GPU or at 0 ms."""

    def __init__(self, delay_ms: float, device: str):
        self.micros = int(delay_ms * 1000) if device == "cuda" and delay_ms > 0 else 0
        if self.micros and _LAUNCH is None:
            raise RuntimeError("the stream hold was not prepared before the candidate was imported "
                               "(evaluator.executor.hold.prepare)")

    def queue(self) -> None:
        """The hold, queued on the current stream: work queued after it starts once it has passed. Called right
        after a device synchronize on this thread, so the runtime's context is current for the driver's call."""
        if not self.micros:
            return
        rc = _LAUNCH(torch.cuda.current_stream().cuda_stream, _USLEEP, self.micros)
        if rc != 0:
            raise RuntimeError(f"cuLaunchHostFunc failed with CUresult {rc}: the stream hold was not queued")


def inputs_behind_hold(given: list, hold: StreamHold, device: str) -> list:
    """Fresh copies of `given` (the stage's first input set: views of it, and plain values) for one checked call, the
    candidate's own memory: on CUDA each floating one NaN until `hold` has passed, its values queued behind it; on the
    CPU plain copies."""
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
        hold.queue()
        for x, source in held:
            x.copy_(source)  # still queued behind the hold when the candidate is called
    return inputs
