"""Timing callables the same way for the candidate and its baselines.

CUDA: an L2 flush before each call, CUDA events around it on the current stream, then a
device-wide synchronize; the host clock is read around the call and the synchronize too, so
work hidden on a side stream (which the events do not see) still shows up. CPU: the host
clock only.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from evaluator.records import TimingStats

_perf_counter = time.perf_counter  # bound before any candidate is imported


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(times_ms: list[float], warmup: int) -> TimingStats:
    return TimingStats(
        median_ms=statistics.median(times_ms), mean_ms=statistics.fmean(times_ms), min_ms=min(times_ms),
        max_ms=max(times_ms), iqr_ms=_quantile(times_ms, 0.75) - _quantile(times_ms, 0.25),
        reps=len(times_ms), warmup=warmup,
    )


class Timer:
    """Times callables with one method, so candidate and baselines are measured alike."""

    def __init__(self, device: str, budget_s: float = 2.0, min_reps: int = 10, max_reps: int = 200, warmup: int = 3):
        self.device = device
        self.budget_s, self.min_reps, self.max_reps, self.warmup = budget_s, min_reps, max_reps, warmup
        self.flush_buffer = None
        if device == "cuda":
            l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 64 << 20)
            self.flush_buffer = torch.empty(max(2 * l2, 64 << 20) // 4, dtype=torch.float32, device="cuda")

    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def _one(self, fn: Callable[[], object]) -> tuple[float, float]:
        """(device-event ms, host-clock ms) of one call; equal on the CPU."""
        if self.device != "cuda":
            start = _perf_counter()
            fn()
            wall = (_perf_counter() - start) * 1e3
            return wall, wall
        self.flush_buffer.zero_()
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start = _perf_counter()
        begin.record()
        fn()
        end.record()
        torch.cuda.synchronize()  # device-wide: side-stream work finishes inside the host-clock window
        wall = (_perf_counter() - start) * 1e3
        return begin.elapsed_time(end), wall

    def time(self, fn: Callable[[], object]) -> tuple[TimingStats, TimingStats]:
        """(event-timed stats, host-clock stats) over a number of calls fitted to the budget."""
        for _ in range(self.warmup):
            fn()
        self._sync()
        estimate = max(self._one(fn)[1], 1e-3)
        reps = int(min(self.max_reps, max(self.min_reps, self.budget_s * 1e3 / estimate)))
        events, walls = [], []
        for _ in range(reps):
            e, w = self._one(fn)
            events.append(e)
            walls.append(w)
        return summarize(events, self.warmup + 1), summarize(walls, self.warmup + 1)
