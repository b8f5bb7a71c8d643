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
from evaluator.referee.view import RefereeView
from evaluator.wire import tensors as cmp
from evaluator.wire.exchange import ExchangeError
from evaluator.wire.protocol import Reply, SendState
from evaluator.wire.records import Flag, FlagPolicy, Phase, Status, TimingStats
from evaluator.referee.session import Built, Checked, Judged, Session, Timed
from evaluator.referee.check_phase import compare_output, describe_regression, regressed, trial


# What the referee keeps of the clocked calls (each one's output and buffers, copied out of the stage
# inside its window) until it has compared them: it bounds how many calls a series has (at kernelbench,
# 256 MiB outputs: 4 warm-up calls and 19 timed ones).
KEEP_BYTES = {"cuda": 6 << 30, "cpu": 512 << 20}

# ------------------------------------------------------------------------------------------ time

def time_phase(session: Session, checked: Checked, built: Built) -> Timed:
    """Warm-up calls, then timed calls, every one clocked by the referee (evaluator.referee.clock: its inputs
    written into the stage and its output and buffers copied out inside the window), each followed by a
    window of the calibrator on the same inputs, with the candidate's processes stopped and the device
    idle: what a window costs, measured in the same pattern and the same minute. Then every clocked
    call's output and buffers against the float64 reference replaying the same calls, the reported times
    against the referee's, the physical floor, and one more checked call."""
    session.enter(Phase.time)
    referee = session.referee
    timer = referee.timer
    calls: list[tuple[int, clock.Clocked]] = []  # (seed of its inputs, its window)
    costs: list[clock.Clocked] = []              # the calibrator's windows beside them
    warm = timer.warmup + 1
    with clock.collector_paused():
        clocked_calls(session, warm, calls, costs)
        fit = KEEP_BYTES[referee.device] // referee.layout.span
        estimate = calls[-1][1].ms - (costs[-1].ms - (costs[-1].reported_ms or 0.0) if costs else 0.0)
        reps = timer.reps_for(max(estimate, 1e-3), cap=max(1, fit - warm))
        clocked_calls(session, reps, calls, costs)
    sm_clock = referee.sm_clock()
    cost = clock.window_cost(costs[warm:]) if len(costs) == len(calls) else None
    if cost is None and referee.current_round is not None:  # the calibrator failed beside it: the round's
        cost = referee.current_round.window_cost
    if cost is None:
        session.add([Flag(name="uncalibrated", reason=(
            f"the calibrator could not measure what a clocked window costs ({referee.calibrator.error}): the "
            "times are whole windows, longer than the calls"))])
    cost_ms = cost.cost_ms if cost is not None else 0.0
    series = [c for _, c in calls[warm:]]
    referee.profile_windows(session.name, series, costs[warm:])
    timing = summarize(clock.referee_times(series, cost_ms), warm)
    check = clock.cross_check(series, cost, referee.device)
    if not check.agrees:
        session.add([Flag(name="timing_mismatch", policy=FlagPolicy.reject, reason=clock.mismatch_reason(check))])
    replayed = compare_clocked(session, checked, calls)
    compare_state_after_timing(session, checked, replayed, len(calls))
    floor_ms = check_floor(session, built, timing, cost)
    recheck(session, checked, replayed)
    return Timed(timing=timing, check=check, floor_ms=floor_ms, sm_clock_mhz=sm_clock)


def clocked_calls(session: Session, count: int, calls: list, costs: list) -> None:
    """`count` more clocked calls, each on fresh inputs drawn here (outside the window) from a seed of its
    own; after each window, the inputs it was given must be as the referee wrote them. Each is followed
    by one of the calibrator's windows on the same inputs (the pattern a window's cost depends on), run
    with the candidate's processes stopped and only once the device has no work of theirs left, so that
    nothing the candidate does can make the calibrator's windows, and so a window's cost, dearer."""
    referee = session.referee
    train = referee.problem.mode == "train"
    stage = session.link.stage
    for _ in range(count):
        seed = session.seed()
        inputs = referee.draw(referee.problem.distributions[0], seed)
        # the calibrator stopped through the candidate's window as the candidate is through the calibrator's:
        # each window then starts with its executor just continued, the pattern a window's cost depends on
        with held(referee.calibrator.link):
            clocked = clock.window(session.request, stage, referee.layout, inputs, train, referee.timer.flush,
                                   session.rng.random())
        if clocked.go.error:
            raise Judged(Status.runtime_error, Phase.time, clocked.go.error)
        changed = clock.inputs_changed(stage, referee.layout, inputs)
        if changed:
            raise Judged(Status.incorrect, Phase.time, f"the candidate modified its input(s) {changed} in place "
                                                       f"(clocked call {len(calls) + 1})")
        calls.append((seed, clocked))
        with held(session.link):
            idle(session, f"after clocked call {len(calls)} had returned")
            beside = referee.calibrator.window(inputs)
            idle(session, f"through the calibrator's window after clocked call {len(calls)}")
            ran = session.link.ran_while_held() if hasattr(session.link, "ran_while_held") else []
            if ran:
                raise Judged(Status.runtime_error, Phase.time, (
                    f"its processes {ran} ran while they were held around the calibrator's window after clocked "
                    f"call {len(calls)} (something continued them, a timer's SIGCONT say): that window's cost, "
                    "subtracted from every call, cannot be trusted"))
        if beside is not None:
            costs.append(beside)


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


def sanity_tolerances(referee: RefereeView) -> dict:
    """The loosest tier widened by half: what every clocked call's output and buffers must meet."""
    name, loosest = max(referee.tolerances.items(), key=lambda kv: (kv[1].atol, kv[1].rtol))
    return {name: type(loosest)(atol=1.5 * loosest.atol, rtol=1.5 * loosest.rtol)}


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


def compare_clocked(session: Session, checked: Checked, calls: list) -> torch.nn.Module:
    """Every clocked call (warm-up included), in order, against a copy of the float64 reference replaying
    the same calls on the same inputs from its state after the checks: each output and each call's buffers
    within the loosest tier widened by half; the last call's output and one chosen now at random in every
    tier the checks passed. A candidate that behaves only while it is checked, or only on some calls, or
    leaves its running statistics for later, fails here. Returns the replayed reference."""
    referee = session.referee
    train = referee.problem.mode == "train"
    replay = copy.deepcopy(checked.reference64).train(train)
    sanity = sanity_tolerances(referee)
    full = {len(calls) - 1, session.rng.randrange(len(calls))}
    for index, (seed, clocked) in enumerate(calls):
        label = f"clocked call {index + 1} of {len(calls)}"
        with torch.no_grad(), cmp.guarded():
            expected = replay(*draws.as_float64(referee.draw(referee.problem.distributions[0], seed)))
        staged, problems = staged_tensors(session, clocked)
        acc = compare.ModeAccumulator(referee.problem.mode, sanity)
        for problem in clocked.go.problems + problems:
            acc.fail(problem)
        acc.add("output", compare_output(clocked.put.output, staged.get("output"), expected, referee, sanity))
        for name, value in replay.named_buffers():
            acc.add(name, compare.compare_tensor(name, staged.get(f"state.{name}"), value, sanity, referee.rel_floor))
        if acc.passed and index in full:
            every = compare.ModeAccumulator(referee.problem.mode, referee.tolerances)
            every.add("output", compare_output(clocked.put.output, staged.get("output"), expected, referee,
                                               referee.tolerances))
            if regressed(every, checked.correctness):
                acc = every
        if not acc.passed or acc.tolerances is referee.tolerances:
            buffers = acc.failure is None and "output" not in acc.failed
            raise Judged(Status.incorrect, Phase.time, f"{'buffers wrong after' if buffers else 'wrong on'} {label}: "
                                                       f"{describe_regression(acc, checked.correctness)}")
        calls[index] = (seed, None)  # compared: its copy is freed
    return replay


def spot(session: Session, checked: Checked, reply: Reply, inputs: list, label: str) -> None:
    """An output shipped through the exchange (the profiled call's) against the float64 reference on the
    same inputs: within the loosest tier widened by half, and in every tier the checks passed."""
    referee = session.referee
    reference64 = copy.deepcopy(checked.reference64).train(referee.problem.mode == "train")
    shipped, unreadable = session.shipment(reply)
    with torch.no_grad(), cmp.guarded():
        expected = reference64(*draws.as_float64(inputs))
    for tolerances in (sanity_tolerances(referee), referee.tolerances):
        acc = compare.ModeAccumulator(referee.problem.mode, tolerances)
        for problem in reply.problems + unreadable:
            acc.fail(problem)
        acc.add("output", compare_output(reply.output, shipped.get("output"), expected, referee, tolerances))
        if not acc.passed or (tolerances is referee.tolerances and regressed(acc, checked.correctness)):
            raise Judged(Status.incorrect, Phase.time, f"wrong on {label}: {describe_regression(acc, checked.correctness)}")


def compare_state_after_timing(session: Session, checked: Checked, replayed: torch.nn.Module, calls: int) -> None:
    """Every parameter and buffer of the candidate after the clocked calls (shipped now, outside any window)
    against the replayed reference, in every tier the checks passed: a weight edited, or buffers that
    differ from what the last clocked call staged."""
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
    if regressed(acc, checked.correctness):
        raise Judged(Status.incorrect, Phase.time, (
            f"buffers wrong after {calls} timed calls (warm-up included; the reference replayed the same "
            f"calls on the same inputs): {describe_regression(acc, checked.correctness)}"))


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


def recheck(session: Session, checked: Checked, replayed: torch.nn.Module) -> None:
    """A candidate that degrades after many calls (or caches) is caught here: one more checked call on
    fresh inputs, its output and buffers against the reference replayed through the timed calls."""
    referee = session.referee
    acc = compare.ModeAccumulator(referee.problem.mode, referee.tolerances)
    trial(session, replayed, referee.problem.distributions[-1], session.seed(),
          train=referee.problem.mode == "train", acc=acc)
    if regressed(acc, checked.correctness):
        raise Judged(Status.incorrect, Phase.time,
                     f"wrong on fresh inputs after the timing loop: {describe_regression(acc, checked.correctness)}")
