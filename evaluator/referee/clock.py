"""The referee's clock around one call in an executor (a window), what the window itself costs, and
the executor's reported times checked against it.

A window, all of it on the referee's clock (time.perf_counter in the referee, which no candidate
reaches):

    (the device idle)  the inputs copied into the stage  ->  L2 flushed  ->  `go`: the executor runs forward on them,
    waits for the device  ->  `put` at a place chosen now: the executor stages the output and the
    buffers  ->  the referee copies that part of the stage into its own memory, waits for the device.

So the inputs do not exist anywhere the candidate can read before the window starts, and what the
referee compares is what the stage held before the window ended: nothing done before or after the
window can stand in for work inside it. A call's time is its window less what a window costs around
a call that does real work, measured with the calibrator (a trusted executor that runs the same code
around a forward whose device time it reports truthfully: `window_cost`), one of its windows beside each
of the candidate's, so that both run in the same pattern and the same minute (the pattern matters: on an
H100 at `kernelbench` its windows cost 2.44 ms each alternated with a candidate's, 1.98 ms back to back
in a round). During the calibrator's window the candidate's processes are stopped, and it starts only
once the device has no work of theirs left (`device_idle`), so a candidate cannot make it dearer and its
own calls cheaper. That is the ranked figure.

The executor also reports each forward's time (device events on a GPU, its host clock on the CPU).
That is testimony: `cross_check` holds it against the referee's figures quantile by quantile, and a
report the referee's clock contradicts is `timing_mismatch` (reject); it never enters a ranking.
"""

from __future__ import annotations

import contextlib
import gc
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from evaluator.referee import tuning
from evaluator.wire.exchange import ExchangeError
from evaluator.wire.protocol import Go, Put, Reply, TensorSlot
from evaluator.wire.records import QuantileCheck, TimingCheck
from evaluator.wire.stage import Layout, Stage
from evaluator.referee.timing import quantile

_perf_counter = time.perf_counter
# The quantiles at which reports are checked: the tenth of the calls that are slowest is left out (on an
# H100 an honest candidate's top tenth at `kernelbench` once read 2.6 ms above its events: a few windows
# in thirty stretched by the host), and nothing ranks on reports, so a lie there moves no ranked figure.
QUANTILES = (0.1, 0.25, 0.5, 0.75)
# How far the referee's figure for a quantile may exceed the reported one (ratio, then ms) before the
# reports are rejected, beyond how far the calibrator's own window costs spread at that quantile (the
# noise every window carries: at the median, none). On H100s (2026-11-27) an honest candidate's window
# less its device events cost up to 0.5 ms more than the calibrator's beside it: the golden TF32 kernel
# (1.8 ms) read 9-27% above its events at `kernelbench`, and a ratio of 1.1 rejected it in three of nine
# evaluations. Reports never rank, so what the ratio lets through (calls reported up to a quarter too
# fast) moves nothing; reports twice too fast fail, and twenty times (0.013 ms for 0.42 at `small`) at
# the median. The CPU (a loaded 2-core machine in CI) is given more.
TIMING_SLACK = {"cuda": (1.3, 0.25), "cpu": (2.0, 2.0)}
# A reported time may exceed the whole window it happened in by no more than this (ms): clock grain.
REPORT_GRAIN_MS = 0.05
CALIBRATION_WINDOWS = 30
# How long the referee waits, with the candidate's processes stopped, for the device to have no work of
# theirs left before and after a calibrator window beside its call (evaluator.referee.time_phase.idle).
IDLE_WAIT_S = 2.0
# A device is idle when two tiny kernels of the referee's in a row each finish within this (ms): work of
# another process on it makes the second wait for its time slice.
IDLE_PROBE_MS = 0.1


def device_idle(probe: torch.Tensor, limit_s: float) -> float | None:
    """Seconds waited until the device runs the referee's tiny kernels at once (no other context has work
    on it), or None when it still does after `limit_s`. On the CPU, at once."""
    if probe.device.type != "cuda":
        return 0.0
    started = _perf_counter()
    quick = 0
    while quick < 2:
        begun = _perf_counter()
        probe.add_(1)
        torch.cuda.synchronize()
        ended = _perf_counter()
        quick = quick + 1 if (ended - begun) * 1e3 < IDLE_PROBE_MS else 0
        if ended - started > limit_s:
            return None
    return _perf_counter() - started


@dataclass
class Clocked:
    """One window of `calls` calls back to back: the referee's ms around it, the executor's replies, and the
    stage's span copied out (each call's output and buffers, one after another)."""

    ms: float
    go: Reply
    put: Reply | None
    offset: int
    capture: torch.Tensor | None  # uint8, the referee's own copy of [offset, offset + calls * span)
    steps: tuple[float, ...] = ()  # ms of its steps: inputs staged (device waited for), go, put, copied out
    calls: int = 1
    staged: dict[str, torch.Tensor] | None = None  # a handed-off window's (evaluator.referee.relay): what each call left
    handed_off: bool = False  # a window handed off call by call that ended (its calls all committed)

    @property
    def reported_ms(self) -> float | None:
        """What the executor said its forwards took, all together: its device events, or its host clock (CPU)."""
        times = self.go.events_ms or self.go.host_ms
        return sum(times) if len(times) == self.calls else None

    @property
    def per_call_ms(self) -> float:
        """The window's ms over its calls (before the window's own cost is taken off)."""
        return self.ms / self.calls

    def tensor(self, slot: TensorSlot, layout: Layout, stage: Stage) -> torch.Tensor:
        """A staged tensor, read from the capture (never from the stage, which the executor can still
        write): it must lie inside the span the referee asked for."""
        dtype = stage.check(slot)
        start, span = slot.offset - self.offset, self.calls * layout.span
        if start < 0 or start + slot.nbytes > span or self.capture is None:
            raise ExchangeError(f"{slot.name}: bytes {slot.offset}..{slot.offset + slot.nbytes} lie outside the "
                                f"span the referee asked for ({self.offset}..{self.offset + span})")
        raw = self.capture[start:start + slot.nbytes]
        return (raw.view(dtype) if slot.nbytes else torch.empty(0, dtype=dtype, device=raw.device)).view(slot.shape)


def capture_buffer(shape: tuple[int, ...], device: torch.device | str) -> torch.Tensor:
    """Memory for the referee's copy of what calls left, made before the clock starts: a fresh device allocation
    takes tenths of a ms, and fresh host memory faults its pages in on first touch (2.5 ms for 16 MiB on a 2-core
    CPU), which would land in the window's copy, in some windows and not others (kept copies are always fresh)."""
    if torch.device(device).type == "cuda":
        return torch.empty(shape, dtype=torch.uint8, device=device)
    return torch.zeros(shape, dtype=torch.uint8)  # written, so every page is in


@tuning.costed("windows")
def window(request: Callable[[object], Reply], stage: Stage, layout: Layout, input_sets: list[list], train: bool,
           flush: Callable[[], None], place: float, pace_ms: float = 0.0) -> Clocked:
    """One window of len(input_sets) calls back to back (see the module's docstring): every set written into
    the stage, then one `go` for all the calls. `request` sends a command and returns its reply (it raises
    when the executor is gone); `place` in [0, 1) picks where in the region the outputs go."""
    sync = torch.cuda.synchronize if stage.device == "cuda" else (lambda: None)
    calls = len(input_sets)
    capture = capture_buffer((calls * layout.span,), stage.bytes.device)
    # the inputs were drawn on the device just before, asynchronously: drawn inside the window, they would be the
    # candidate's time and not the calibrator's, whose inputs are drawn earlier (fp32 47_Sum at KernelBench's size:
    # the stage written in 7.1 ms against the calibrator's 4.2, the control's figure 2.4 times its device events)
    sync()
    started = _perf_counter()
    for index, inputs in enumerate(input_sets):
        for slot in layout.slots(index):
            stage.view(slot).copy_(inputs[int(slot.name.removeprefix("input."))])
    flush()
    sync()
    staged = _perf_counter()
    go = request(Go(id=0, train=train, calls=calls, pace_ms=pace_ms))
    if go.error:
        return Clocked((_perf_counter() - started) * 1e3, go, None, 0, None, calls=calls)
    went = _perf_counter()
    offset = layout.place(place)
    put = request(Put(id=0, offset=offset))
    was_put = _perf_counter()
    capture.copy_(stage.bytes[offset:offset + calls * layout.span])
    sync()
    ended = _perf_counter()
    steps = tuple((b - a) * 1e3 for a, b in ((started, staged), (staged, went), (went, was_put), (was_put, ended)))
    return Clocked((ended - started) * 1e3, go, put, offset, capture, steps, calls)


@contextlib.contextmanager
def collector_paused():
    """No garbage collection in between (a full pass over the referee's heap takes milliseconds, inside
    whichever window it falls in); reference counting still frees what the windows let go of."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def inputs_changed(stage: Stage, layout: Layout, input_sets: list[list]) -> list[tuple[int, int]]:
    """(call, position) of the staged inputs that no longer hold what the referee wrote (read after the window)."""
    changed = []
    for index, inputs in enumerate(input_sets):
        for slot in layout.slots(index):
            position = int(slot.name.removeprefix("input."))
            if not torch.equal(stage.view(slot), inputs[position]):
                changed.append((index, position))
    return changed


@dataclass(frozen=True)
class WindowCost:
    """What a window adds to a call's device time on the executor's path, from the calibrator."""

    cost_ms: float          # median of (window - reported device time)
    window_ms: float        # median window
    device_ms: float        # median device time of the calibrator's forward
    windows: int
    costs: tuple[float, ...] = ()  # each window's cost

    def spread(self, q: float) -> float:
        """How far the costs' `q` quantile lies above their median (0 at and below it)."""
        return max(0.0, quantile(list(self.costs), q) - self.cost_ms) if self.costs else 0.0


def window_cost(clocked: list[Clocked]) -> WindowCost | None:
    """From the calibrator's windows (whose reports are true: it is the referee's own code, no candidate)."""
    pairs = [(c.ms, c.reported_ms) for c in clocked
             if c.reported_ms is not None and (c.put is not None or c.handed_off)]
    if not pairs:
        return None
    costs = tuple(w - r for w, r in pairs)
    return WindowCost(cost_ms=statistics.median(costs), window_ms=statistics.median(w for w, _ in pairs),
                      device_ms=statistics.median(r for _, r in pairs), windows=len(pairs), costs=costs)


def referee_times(clocked: list[Clocked], cost_ms: float) -> list[float]:
    """Each window's time per call by the referee's clock: the window less the window's cost, over its calls
    (at or below zero where the cost's error is as large as the calls: see evaluator.referee.floor.check_floor)."""
    return [(c.ms - cost_ms) / c.calls for c in clocked]


def cross_check(clocked: list[Clocked], cost: WindowCost | None, device: str) -> TimingCheck:
    """The reported times against the referee's, per call: at every quantile of QUANTILES the referee's within
    TIMING_SLACK of the report, beyond the calibrator's own spread there (both spread over a window's
    calls); and no window's calls reported longer than the whole window."""
    cost_ms = cost.cost_ms if cost is not None else 0.0
    calls = clocked[0].calls if clocked else 1
    referee = referee_times(clocked, cost_ms)
    reported = [c.reported_ms / c.calls if c.reported_ms is not None else None for c in clocked]
    ratio, slack = TIMING_SLACK[device]
    rows, longer = [], []
    if all(r is not None and math.isfinite(r) and r >= 0 for r in reported):
        for q in QUANTILES:
            ours, theirs = quantile(referee, q), quantile(reported, q)
            # the slack is a call's (reports and windows part on what a call does outside its events: launches
            # the device overtakes), the calibrator's spread a window's, shared by its calls
            limit = ratio * theirs + slack + (cost.spread(q) if cost is not None else 0.0) / calls
            rows.append(QuantileCheck(q=q, referee_ms=round(ours, 5), reported_ms=round(theirs, 5),
                                      limit_ms=round(limit, 5), agrees=ours <= limit))
        longer = [i for i, c in enumerate(clocked) if c.reported_ms > c.ms + REPORT_GRAIN_MS]
    median = next((row for row in rows if row.q == 0.5), None)
    return TimingCheck(
        wall_ms=round(sum(c.ms for c in clocked), 4), calls=sum(c.calls for c in clocked), calls_per_window=calls,
        overhead_ms=round(cost_ms, 5),
        referee_ms=round(statistics.median(referee), 5),
        reported_mean_ms=round(statistics.fmean(reported), 5) if rows else -1.0,
        reported_median_ms=median.reported_ms if median else None,
        reported_iqr_ms=round(quantile(reported, 0.75) - quantile(reported, 0.25), 5) if rows else None,
        limit_ms=median.limit_ms if median else 0.0,
        agrees=bool(rows) and all(row.agrees for row in rows) and not longer,
        quantiles=rows, longer_than_window=longer[:16])


def mismatch_reason(check: TimingCheck) -> str:
    """Why the reports do not stand, for the `timing_mismatch` flag."""
    if not check.quantiles:
        return "the executor reported no usable time for its calls"
    if check.longer_than_window:
        return (f"the executor reported the calls of windows {check.longer_than_window[:8]} as longer than the "
                "referee's whole window around them")
    worst = max(check.quantiles, key=lambda row: row.referee_ms - row.limit_ms)
    return (f"the reported times do not account for the referee's clock: at the {worst.q:.0%} quantile of "
            f"{check.calls} clocked calls the referee measured {worst.referee_ms:.4g} ms a call (its windows less "
            f"a window's own {check.overhead_ms:.4g} ms, over {check.calls_per_window} call(s) each), against a reported {worst.reported_ms:.4g} ms (at "
            f"most {worst.limit_ms:.4g} ms would stand)")
