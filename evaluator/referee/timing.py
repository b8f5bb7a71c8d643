"""Timing in the referee: the baselines (`Timer`), the statistics of a series, the physical floor.

`Timer` (the referee's, for the baselines, which it trusts): an L2 flush before each call, CUDA events
around it on the current stream, then a device-wide synchronize; the host clock is read around the
call and the synchronize too. CPU: the host clock only.

Every function the timing uses (the host clock, `Event.record`, `Event.elapsed_time`,
`synchronize`) is bound when this module is imported, before any candidate, so patching
them afterwards changes nothing here. Optional `before`/`after` hooks run outside the timed
window: they give every call fresh inputs and keep outputs for the referee to compare.

`physical_floor_ms` gives the time under which one forward cannot run on a device: its FLOPs
at the device's tensor-core peak, or the bytes it must read at its memory bandwidth. `roofline`
puts a forward's time against the same peaks (achieved TFLOP/s and bandwidth, and their fractions).
"""

from __future__ import annotations

import copy
import math
import os
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from evaluator.wire.records import Roofline, TimingStats

_perf_counter = time.perf_counter  # bound before any candidate is imported
_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event
_record = torch.cuda.Event.record
_elapsed_time = torch.cuda.Event.elapsed_time
_zero_ = torch.Tensor.zero_


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


MAX_SAMPLES = 256  # per-call figures a TimingStats keeps (a series has at most the timer's max_reps, 200)


def summarize(times_ms: list[float], warmup: int) -> TimingStats:
    step = max(1, math.ceil(len(times_ms) / MAX_SAMPLES))
    return TimingStats(
        median_ms=statistics.median(times_ms), mean_ms=statistics.fmean(times_ms), min_ms=min(times_ms),
        max_ms=max(times_ms), iqr_ms=quantile(times_ms, 0.75) - quantile(times_ms, 0.25),
        reps=len(times_ms), warmup=warmup, samples_ms=[round(t, 6) for t in times_ms[::step]],
    )


@dataclass(frozen=True)
class Call:
    """Which call a hook is about: `index` counts the calls of one warm-up or series; `timed` is the
    position among the timed calls of a series (None for warm-up), `reps` their number."""

    index: int
    timed: int | None = None
    reps: int | None = None


Hook = Callable[..., None]


class Timer:
    """Times callables with one set of methods, so a candidate (in its executor) and the baselines
    (in the referee) are measured alike: `untimed` warm-up calls, one timed call to size the series
    (`reps_for`), then `series` of timed calls. `time` does all three (the referee's baselines)."""

    def __init__(self, device: str, budget_s: float = 2.0, min_reps: int = 10, max_reps: int = 200, warmup: int = 3):
        self.device = device
        self.budget_s, self.min_reps, self.max_reps, self.warmup = budget_s, min_reps, max_reps, warmup
        self.flush_buffer = None
        if device == "cuda":
            l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 64 << 20)
            self.flush_buffer = torch.empty(max(2 * l2, 64 << 20) // 4, dtype=torch.float32, device="cuda")

    def _sync(self) -> None:
        if self.device == "cuda":
            _synchronize()

    def flush(self) -> None:
        """Evict the L2 (CUDA): what a call reads then comes from memory, as it would in a real model."""
        if self.flush_buffer is not None:
            _zero_(self.flush_buffer)

    def one(self, fn: Callable[[], object], call: Call, before: Hook | None = None,
            after: Hook | None = None, calls: int = 1) -> tuple[float, float]:
        """(device-event ms, host-clock ms) per call of `calls` calls back to back (one for every timing made
        now), as a candidate's window makes them (evaluator.executor.forward.timed_forwards): the L2 flushed
        before the first, nothing waited for between them, device events around each, one device-wide
        synchronize after the last; equal on the CPU. Hooks are not timed: `before` once, `after` after each
        call (on CUDA, before the device has finished it)."""
        if before is not None:
            before(call)
        if self.device != "cuda":
            walls = 0.0
            for _ in range(calls):
                start = _perf_counter()
                result = fn()
                walls += _perf_counter() - start
                if after is not None:
                    after(call, result)
            return walls * 1e3 / calls, walls * 1e3 / calls
        _zero_(self.flush_buffer)
        _synchronize()
        marks = []
        start = _perf_counter()
        for _ in range(calls):
            begin, end = _Event(enable_timing=True), _Event(enable_timing=True)
            _record(begin)
            result = fn()
            _record(end)
            marks.append((begin, end))
            if after is not None:
                after(call, result)
        _synchronize()  # device-wide: side-stream work finishes inside the host-clock window
        wall = (_perf_counter() - start) * 1e3
        return sum(_elapsed_time(b, e) for b, e in marks) / calls, wall / calls

    def untimed(self, fn: Callable[[], object], count: int, before: Hook | None = None,
                after: Hook | None = None) -> None:
        """`count` warm-up calls (hooks around each), then a synchronize."""
        for index in range(count):
            if before is not None:
                before(Call(index))
            result = fn()
            if after is not None:
                after(Call(index), result)
            del result
        self._sync()

    def reps_for(self, estimate_ms: float, cap: int | None = None) -> int:
        """Timed calls for the budget, given one call's time: at least `min_reps`, at most `max_reps`
        (and `cap`, when smaller, but never below `min_reps`)."""
        most = self.max_reps if cap is None else max(self.min_reps, min(self.max_reps, cap))
        return int(min(most, max(self.min_reps, self.budget_s * 1e3 / max(estimate_ms, 1e-3))))

    def series(self, fn: Callable[[], object], reps: int, before: Hook | None = None,
               after: Hook | None = None, target_rel: float | None = None, calls: int = 1) -> tuple[list[float], list[float]]:
        """(event ms, host ms) per call of `reps` timed windows of `calls` calls (`one`); `before(call)` runs
        before each (before the L2 flush), `after(call, result)` after each call (after the synchronize):
        neither is timed. With
        `target_rel` (the referee's own baselines), it stops sooner once the median is known well
        enough: the half-width of its distribution-free 95% interval under `target_rel` of it, looked
        at every `min_reps` calls from the second round of them on."""
        events, walls = [], []
        for rep in range(reps):
            e, w = self.one(fn, Call(rep, rep, reps), before, after, calls)
            events.append(e)
            walls.append(w)
            done = rep + 1
            if (target_rel is not None and done >= 2 * self.min_reps and done % self.min_reps == 0
                    and median_half_width(events) < target_rel * statistics.median(events)):
                break
        return events, walls

    def time(self, fn: Callable[[], object], before: Hook | None = None,
             after: Hook | None = None) -> tuple[TimingStats, TimingStats]:
        """(event-timed stats, host-clock stats): warm-up, one call to size the series, the series."""
        self.untimed(fn, self.warmup, before, after)
        estimate = max(self.one(fn, Call(self.warmup), before, after)[1], 1e-3)
        events, walls = self.series(fn, self.reps_for(estimate), before, after)
        return summarize(events, self.warmup + 1), summarize(walls, self.warmup + 1)


def median_half_width(values: list[float]) -> float:
    """Half the width of the median's distribution-free 95% confidence interval (order statistics
    n/2 -+ 0.98 sqrt(n))."""
    ordered = sorted(values)
    n = len(ordered)
    spread = 0.98 * math.sqrt(n)
    low, high = max(0, math.floor(n / 2 - spread)), min(n - 1, math.ceil(n / 2 + spread))
    return (ordered[high] - ordered[low]) / 2


# ----------------------------------------------------------------------------- physical floor

@dataclass(frozen=True)
class Peak:
    """Peak rates of one device (dense, no sparsity)."""

    name: str
    tensor_tflops: float   # fastest dense tensor-core rate a loose-tier fp32 result can use (fp16/bf16)
    tf32_tflops: float     # dense TF32 tensor-core rate, for the record
    fp32_tflops: float     # plain fp32 FMA rate, for the record
    bandwidth_tbs: float   # memory bandwidth, TB/s


# Matched against the device name in this order (first match wins), case-insensitive.
# fp16/bf16 is the floor's FLOP rate, not TF32: an fp32 problem's loose tier (1e-2) can be met
# with fp16 inputs and fp32 accumulation, which runs at twice the TF32 rate, and the floor must
# never reject an honest kernel.
GPU_PEAKS: list[tuple[str, Peak]] = [
    (r"GB200", Peak("GB200", 2500, 1250, 80, 8.0)),
    (r"B200", Peak("B200", 2250, 1100, 75, 8.0)),
    (r"B100", Peak("B100", 1750, 875, 60, 8.0)),
    (r"H100.*PCIe", Peak("H100 PCIe", 756, 378, 51, 2.0)),
    (r"H100.*NVL", Peak("H100 NVL", 835, 418, 60, 3.9)),
    (r"GH200", Peak("GH200", 989, 495, 67, 4.9)),
    (r"H200", Peak("H200", 989, 495, 67, 4.8)),
    (r"H100|H800", Peak("H100 SXM", 989, 495, 67, 3.35)),
    (r"H20\b", Peak("H20", 148, 74, 44, 4.0)),
    (r"A100.*(80GB|SXM4-80)", Peak("A100 80GB", 312, 156, 19.5, 2.04)),
    (r"A100|A800", Peak("A100", 312, 156, 19.5, 2.04)),
    (r"L40S", Peak("L40S", 362, 183, 91.6, 0.864)),
    (r"RTX 4090", Peak("RTX 4090", 330, 165, 82.6, 1.01)),
    (r"A10G|\bA10\b", Peak("A10", 125, 62.5, 31.2, 0.6)),
    (r"L4\b", Peak("L4", 121, 60, 30, 0.3)),
]
# An unknown GPU gets the largest known peaks: a generous (low) floor.
UNKNOWN_GPU = Peak("unknown GPU (largest known peaks)", max(p.tensor_tflops for _, p in GPU_PEAKS),
                   max(p.tf32_tflops for _, p in GPU_PEAKS), max(p.fp32_tflops for _, p in GPU_PEAKS),
                   max(p.bandwidth_tbs for _, p in GPU_PEAKS))
# The CPU: every core at 5 GHz doing 1024 FLOP a cycle (an AMX tile unit's bf16 rate), far above
# any real fp32 rate. CPU inputs sit in caches between calls (no flush), so no bandwidth floor.
CPU_FLOP_PER_CYCLE_CORE = 1024
CPU_GHZ = 5.0


def device_peak(device: str, device_name: str) -> Peak:
    if device == "cpu":
        cores = os.cpu_count() or 1
        tflops = cores * CPU_GHZ * CPU_FLOP_PER_CYCLE_CORE / 1e3
        return Peak(f"CPU x{cores} (generous)", tflops, tflops, tflops, float("inf"))
    for pattern, peak in GPU_PEAKS:
        if re.search(pattern, device_name, re.IGNORECASE):
            return peak
    return UNKNOWN_GPU


def physical_floor_ms(flops: float | None, bytes_read: float | None, device: str,
                      device_name: str) -> tuple[float | None, str]:
    """(floor in ms, how it was derived): the larger of FLOPs / tensor-core peak and bytes that
    must be read / bandwidth. None when the problem gives neither."""
    peak = device_peak(device, device_name)
    parts = []
    floor = None
    if flops:
        compute = flops / (peak.tensor_tflops * 1e12) * 1e3
        parts.append(f"{flops / 1e9:.3g} GFLOP at {peak.tensor_tflops:g} TFLOP/s = {compute * 1e3:.3g} us")
        floor = compute
    if bytes_read and peak.bandwidth_tbs != float("inf"):
        memory = bytes_read / (peak.bandwidth_tbs * 1e12) * 1e3
        parts.append(f"{bytes_read / 1e6:.3g} MB read at {peak.bandwidth_tbs:g} TB/s = {memory * 1e3:.3g} us")
        floor = memory if floor is None else max(floor, memory)
    return floor, f"{peak.name}: " + "; ".join(parts)


def roofline(flops: float | None, min_bytes: int, median_ms: float, device: str, device_name: str) -> Roofline:
    """A forward of `flops` FLOPs that must move `min_bytes` bytes, done in `median_ms`, against the
    device's peaks (`device_peak`)."""
    peak = device_peak(device, device_name)
    seconds = median_ms * 1e-3
    tflops = flops / seconds / 1e12 if flops and seconds > 0 else None
    bandwidth = min_bytes / seconds / 1e12 if seconds > 0 else 0.0
    known_bandwidth = peak.bandwidth_tbs if math.isfinite(peak.bandwidth_tbs) else None

    def fraction(achieved: float | None, of: float | None) -> float | None:
        return achieved / of if achieved is not None and of else None

    return Roofline(peaks=peak.name, flops=flops or None, min_bytes=min_bytes, tflops=tflops, bandwidth_tbs=bandwidth,
                    peak_fp32_tflops=peak.fp32_tflops, peak_tf32_tflops=peak.tf32_tflops,
                    peak_tensor_tflops=peak.tensor_tflops, peak_bandwidth_tbs=known_bandwidth,
                    fraction_fp32=fraction(tflops, peak.fp32_tflops), fraction_tf32=fraction(tflops, peak.tf32_tflops),
                    fraction_tensor=fraction(tflops, peak.tensor_tflops),
                    fraction_bandwidth=fraction(bandwidth, known_bandwidth))


def launched_kernels(model: torch.nn.Module, inputs: list) -> list[str]:
    """What one forward of `model` launches (the CUDA profiler), in order: the reference's are names no candidate gets
    credit for."""
    try:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        reference = copy.deepcopy(model)
        torch.cuda.synchronize()
        with torch.no_grad(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            reference(*inputs)
            torch.cuda.synchronize()
        return [e.name for e in prof.events() if e.device_type == DeviceType.CUDA]
    except Exception:
        return []
