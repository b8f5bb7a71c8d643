"""The time phase: clocked calls on the referee's clock, each beside a calibrator window, then every
clocked call's output and buffers against the replayed float64 reference (evaluator.referee.phases
runs it; evaluator.referee.clock is the clock).
"""

from __future__ import annotations

import contextlib
import copy

import torch

from evaluator.referee import clock, compare, holding
from evaluator.referee import inputs as draws
from evaluator.referee.timing import physical_floor_ms, quantile, summarize
from evaluator.wire import tensors as cmp
from evaluator.wire.exchange import ExchangeError
from evaluator.wire.protocol import Reply, SendState
from evaluator.wire.records import Flag, FlagPolicy, Phase, Status, TimingStats
from evaluator.referee.session import Built, Checked, Judged, Session, Timed
from evaluator.referee.check_phase import compare_output, describe_regression, trial


# Bytes of the stage the referee copies out of a series of clocked calls (each call's output and buffers,
# copied inside its window, compared as soon as the call is over and then freed): it bounds how many calls
# a series has (at kernelbench, 256 MiB outputs: 4 warm-up calls and 19 timed ones).
SERIES_BYTES = {"cuda": 6 << 30, "cpu": 512 << 20}

# ------------------------------------------------------------------------------------------ time

def time_phase(session: Session, checked: Checked, built: Built) -> Timed:
    """Warm-up calls, then timed calls, every one clocked by the referee (evaluator.referee.clock: its inputs
    written into the stage and its output and buffers copied out inside the window), each followed by a
    window of the calibrator on the same inputs, with the candidate's processes held and the device
    idle: what a window costs, measured in the same pattern and the same minute. Every clocked call's
    output and buffers are compared, in every tier, with the float64 reference replaying the same call as
    soon as the call is over; then the reported times against the referee's, the physical floor, the
    whole state and one more checked call. A tier is claimed only where every one of these passes it
    (`Timed.later`); one that passes none is `incorrect`."""
    session.enter(Phase.time)
    referee = session.referee
    timer = referee.timer
    series = Series(session, checked)
    warm = timer.warmup + 1
    with clock.collector_paused():
        series.run(warm)
        fit = SERIES_BYTES[referee.device] // referee.layout.span
        last, beside = series.calls[-1], series.costs[-1] if series.costs else None
        estimate = last.ms - (beside.ms - (beside.reported_ms or 0.0) if beside is not None else 0.0)
        series.run(timer.reps_for(max(estimate, 1e-3), cap=max(1, fit - warm)))
    calls, costs = series.calls, series.costs
    sm_clock = referee.sm_clock()
    cost = clock.window_cost(costs[warm:]) if len(costs) == len(calls) else None
    if cost is None and referee.current_round is not None:  # the calibrator failed beside it: the round's
        cost = referee.current_round.window_cost
    if cost is None:
        session.add([Flag(name="uncalibrated", reason=(
            f"the calibrator could not measure what a clocked window costs ({referee.calibrator.error}): the "
            "times are whole windows, longer than the calls"))])
    cost_ms = cost.cost_ms if cost is not None else 0.0
    timed = calls[warm:]
    referee.profile_windows(session.name, timed, costs[warm:])
    timing = summarize(clock.referee_times(timed, cost_ms), warm)
    check = clock.cross_check(timed, cost, referee.device)
    check.hold = getattr(session.link, "hold_mechanism", None)
    check.builds = referee.config.builds
    if not check.agrees:
        session.add([Flag(name="timing_mismatch", policy=FlagPolicy.reject, reason=clock.mismatch_reason(check))])
    compare_state_after_timing(session, series.replay, len(calls), series.later)
    floor_ms = check_floor(session, built, timing, cost)
    recheck(session, series.replay, series.later)
    return Timed(timing=timing, check=check, floor_ms=floor_ms, sm_clock_mhz=sm_clock, later=series.later)


class Series:
    """A candidate's clocked calls, each beside a calibrator window and compared as soon as it is over."""

    def __init__(self, session: Session, checked: Checked):
        self.session, self.checked = session, checked
        referee = session.referee
        self.train = referee.problem.mode == "train"
        # the float64 reference from its state after the checks, replaying every clocked call in order
        self.replay = copy.deepcopy(checked.reference64).train(self.train)
        self.later = compare.ModeAccumulator(referee.problem.mode, referee.tolerances)
        self.calls: list[clock.Clocked] = []
        self.costs: list[clock.Clocked] = []  # the calibrator's windows beside them

    def run(self, count: int) -> None:
        """`count` more clocked calls, each on fresh inputs drawn here (outside the window) from a seed of
        its own; after each window, the inputs it was given must be as the referee wrote them. Each is
        followed by one of the calibrator's windows on the same inputs (the pattern a window's cost depends
        on), run with the candidate's processes held and only once the device has no work of theirs left,
        so that nothing the candidate does can make the calibrator's windows, and so a window's cost, dearer.
        Then the call's output and buffers, as its window copied them, against the replayed reference."""
        session = self.session
        referee = session.referee
        stage = session.link.stage
        for _ in range(count):
            inputs = referee.draw(referee.problem.distributions[0], session.seed())
            # the calibrator held through the candidate's window as the candidate is through the calibrator's:
            # each window then starts with its executor just continued, the pattern a window's cost depends on
            with held(referee.calibrator.link):
                clocked = clock.window(session.request, stage, referee.layout, inputs, self.train,
                                       referee.timer.flush, session.keys.next_unit("place"))
            if clocked.go.error:
                raise Judged(Status.runtime_error, Phase.time, clocked.go.error)
            number = len(self.calls) + 1
            changed = clock.inputs_changed(stage, referee.layout, inputs)
            if changed:
                raise Judged(Status.incorrect, Phase.time, f"the candidate modified its input(s) {changed} in place "
                                                           f"(clocked call {number})")
            self.calls.append(clocked)
            with held(session.link):
                idle(session, f"after clocked call {number} had returned")
                beside = referee.calibrator.window(inputs)
                idle(session, f"through the calibrator's window after clocked call {number}")
                ran = session.link.ran_while_held() if hasattr(session.link, "ran_while_held") else []
                if ran:
                    raise Judged(Status.runtime_error, Phase.time, (
                        f"its processes {ran} ran while they were held around the calibrator's window after "
                        f"clocked call {number} (something woke them): that window's cost, subtracted from every "
                        "call, cannot be trusted"))
            if beside is not None:
                self.costs.append(beside)
            self.compare(clocked, inputs, f"clocked call {number}")

    def compare(self, clocked: clock.Clocked, inputs: list, label: str) -> None:
        """One clocked call's output and buffers (the referee's copy, made inside its window) against the
        float64 reference replaying the same call, in every tier; its copy is freed after."""
        session, referee = self.session, self.session.referee
        with torch.no_grad(), cmp.guarded():
            expected = self.replay(*draws.as_float64(inputs))
        staged, problems = staged_tensors(session, clocked)
        acc = compare.ModeAccumulator(referee.problem.mode, referee.tolerances)
        acc.trials = 1
        for problem in clocked.go.problems + problems:
            acc.fail(problem)
        acc.add("output", compare_output(clocked.put.output, staged.get("output"), expected, referee,
                                         referee.tolerances))
        for name, value in self.replay.named_buffers():
            acc.add(name, compare.compare_tensor(name, staged.get(f"state.{name}"), value, referee.tolerances,
                                                 referee.rel_floor))
        clocked.capture = None
        if not acc.passed:
            buffers = acc.failure is None and "output" not in acc.failed
            raise Judged(Status.incorrect, Phase.time, f"{'buffers wrong after' if buffers else 'wrong on'} {label}: "
                                                       f"{describe_regression(acc, self.checked.correctness)}")
        self.later.merge(acc)


def idle(session: Session, when: str) -> None:
    """The device has no work of any other process left (its processes held, the candidate can add none).
    Executors started ahead may have queued work at import: when the device stays busy they are stopped
    for good (started again in their turn) before the candidate is blamed."""
    waited = session.referee.device_idle(clock.IDLE_WAIT_S)
    if waited is None and session.referee.close_waiting():
        waited = session.referee.device_idle(clock.IDLE_WAIT_S)
    if waited is None:
        raise Judged(Status.runtime_error, Phase.time, (
            f"device work kept running {when}, for {clock.IDLE_WAIT_S:g} s with the candidate's processes "
            "stopped: work left queued could make the calibrator's windows, and so a window's cost, dearer"))


@contextlib.contextmanager
def held(link):
    """The candidate's processes stopped (SIGSTOP): nothing of theirs can start on the device meanwhile,
    or take a core or this process's time (its output is not read meanwhile)."""
    hold, release = getattr(link, "hold", None), getattr(link, "release", None)
    if hold is not None:
        try:
            hold()
        except holding.NotHeld as err:
            raise Judged(Status.runtime_error, Phase.time, f"the executor could not be held still around the "
                                                           f"calibrator's window: {err}") from None
    try:
        yield
    finally:
        if release is not None:
            release()


def staged_tensors(session: Session, clocked: clock.Clocked) -> tuple[dict[str, torch.Tensor], list[str]]:
    """What a clocked call staged, read from the referee's copy of it, and what could not be read."""
    tensors, problems = {}, list(clocked.put.problems) if clocked.put is not None else []
    referee = session.referee
    for slot in clocked.put.tensors if clocked.put is not None else []:
        try:
            tensors[slot.name] = clocked.tensor(slot, referee.layout, session.link.stage)
        except ExchangeError as err:
            problems.append(f"the executor staged an unreadable tensor ({err})")
    return tensors, problems


def spot(session: Session, checked: Checked, reply: Reply, inputs: list, label: str) -> compare.ModeAccumulator:
    """An output shipped through the exchange (the profiled call's) against the float64 reference on the
    same inputs, in every tier: one that passes none is `incorrect`."""
    referee = session.referee
    reference64 = copy.deepcopy(checked.reference64).train(referee.problem.mode == "train")
    shipped, unreadable = session.shipment(reply)
    with torch.no_grad(), cmp.guarded():
        expected = reference64(*draws.as_float64(inputs))
    acc = compare.ModeAccumulator(referee.problem.mode, referee.tolerances)
    acc.trials = 1
    for problem in reply.problems + unreadable:
        acc.fail(problem)
    acc.add("output", compare_output(reply.output, shipped.get("output"), expected, referee, referee.tolerances))
    if not acc.passed:
        raise Judged(Status.incorrect, Phase.time, f"wrong on {label}: {describe_regression(acc, checked.correctness)}")
    return acc


def compare_state_after_timing(session: Session, replayed: torch.nn.Module, calls: int,
                               later: compare.ModeAccumulator) -> None:
    """Every parameter and buffer of the candidate after the clocked calls (shipped now, outside any window)
    against the replayed reference, in every tier (into `later`): a weight edited, or buffers that differ
    from what the last clocked call staged."""
    referee = session.referee
    reply = session.request(SendState(id=0))
    if reply.error:
        raise Judged(Status.crashed, Phase.time, reply.error)
    shipped, unreadable = session.shipment(reply)
    acc = compare.ModeAccumulator(referee.problem.mode, referee.tolerances)
    for problem in reply.problems + unreadable:
        acc.fail(problem)
    for name, value in replayed.state_dict().items():
        acc.add(name, compare.compare_tensor(name, shipped.get(f"state.{name}"), value, referee.tolerances, referee.rel_floor))
    if not acc.passed:
        raise Judged(Status.incorrect, Phase.time, (
            f"buffers wrong after {calls} timed calls (warm-up included; the reference replayed the same "
            f"calls on the same inputs): {describe_regression(acc, None)}"))
    later.merge(acc)


def check_floor(session: Session, built: Built, timing: TimingStats, cost: clock.WindowCost | None) -> float | None:
    """A runtime below what the device can physically do: `implausible` (reject), unless the window's cost
    is known no better than that: the median is window less cost, so when the calibrator's costs spread
    (their IQR) by more than the median lies under the floor, the call is too short for the referee's
    clock to tell, and the verdict is `shaky_timing` (not ranked) instead. (On an H100 at `small`, the
    golden TF32 kernel's windows once came out cheaper than the cost beside them: a median of 0.)"""
    referee = session.referee
    read = referee.input_nbytes + sum(p.numel() * p.element_size() for p in built.reference.parameters())
    floor, how = physical_floor_ms(referee.problem.flop_count(referee.size), read, referee.device,
                                   referee.environment.device_name)
    if floor is None or timing.median_ms >= floor:
        return floor
    below = (f"median {timing.median_ms * 1e3:.4g} us per call is below the physical floor "
             f"{floor * 1e3:.4g} us ({how})")
    resolution = quantile(list(cost.costs), 0.75) - quantile(list(cost.costs), 0.25) \
        if cost is not None and cost.costs else 0.0
    if timing.median_ms + resolution >= floor:
        session.add([Flag(name="shaky_timing", reason=(
            f"{below}, within what the referee's clock resolves here (the window's cost, "
            f"{cost.cost_ms * 1e3:.4g} us, spreads by {resolution * 1e3:.4g} us): too short a call to time; "
            "not ranked"))])
    else:
        session.add([Flag(name="implausible", policy=FlagPolicy.reject, reason=f"{below}: the timing cannot be real")])
    return floor


def recheck(session: Session, replayed: torch.nn.Module, later: compare.ModeAccumulator) -> None:
    """A candidate that degrades after many calls (or caches) is caught here: one more checked call on
    fresh inputs, its output and buffers against the reference replayed through the timed calls (into
    `later`)."""
    referee = session.referee
    acc = compare.ModeAccumulator(referee.problem.mode, referee.tolerances)
    trial(session, replayed, referee.problem.distributions[-1], session.seed(),
          train=referee.problem.mode == "train", acc=acc)
    if not acc.passed:
        raise Judged(Status.incorrect, Phase.time,
                     f"wrong on fresh inputs after the timing loop: {describe_regression(acc, None)}")
    later.merge(acc)
