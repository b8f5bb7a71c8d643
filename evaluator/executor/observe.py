"""What one forward does, observed for the referee's `profile` command: the GPU kernels it launched (the CUDA
profiler) or its calls into the candidate's own extension modules (CPU). The candidate's testimony, like every
report of the executor's."""

from __future__ import annotations

import sys

import torch

from evaluator.wire import kernels


def cuda_kernels(model, inputs: list) -> tuple[list[str], list[float], object]:
    """(kernel names in launch order, each one's device time in µs, the output)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        out = model(*inputs)
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    events.sort(key=lambda e: e.time_range.start)
    launched = [e for e in events if not e.name.startswith(("Memcpy", "Memset"))]
    return [e.name for e in launched], [float(e.time_range.elapsed_us()) for e in launched], out


def cpu_extension_calls(model, inputs: list) -> tuple[list[str], object]:
    modules = kernels.extension_calls(kernels.candidate_libraries(), sys.modules)
    calls: list[str] = []

    def observe(frame, event, arg):
        if event == "c_call" and getattr(arg, "__module__", None) in modules:
            calls.append(f"{arg.__module__}.{getattr(arg, '__name__', '?')}")

    with torch.no_grad():
        sys.setprofile(observe)
        try:
            out = model(*inputs)
        finally:
            sys.setprofile(None)
    return calls, out
