"""The physical floor and the clock's resolution under a ranked figure: a figure per call the referee's clock cannot
resolve, or one under what the device can do, is never a number that ranks (evaluator.referee.time_phase)."""

from __future__ import annotations

from evaluator.referee import clock
from evaluator.referee.session import Built, Session
from evaluator.referee.timing import physical_floor_ms, quantile
from evaluator.referee.view import RefereeView
from evaluator.wire.records import Flag, FlagPolicy, TimingStats


def resolution_ms(cost: clock.WindowCost | None, calls: int) -> float:
    """What the referee's clock resolves of one call: the spread (IQR) of the window's cost, over the calls a
    window holds."""
    if cost is None or not cost.costs:
        return 0.0
    return (quantile(list(cost.costs), 0.75) - quantile(list(cost.costs), 0.25)) / calls


def floor_of(referee: RefereeView, built: Built) -> tuple[float | None, str]:
    read = referee.input_nbytes + sum(p.numel() * p.element_size() for p in built.reference.parameters())
    return physical_floor_ms(referee.problem.flop_count(referee.size), read, referee.device,
                             referee.environment.device_name)


def check_floor(session: Session, built: Built, timing: TimingStats, cost: clock.WindowCost | None,
                calls: int) -> tuple[float | None, bool]:
    """(the physical floor, whether the figure stands as a number). A figure per call at or under what the
    referee's clock resolves here (the spread of the window's cost over the calls a window holds: a window of
    as many calls as the stage allows did not make it longer) is `shaky_timing` and shown as no number; one
    under the physical floor is the same where the clock's resolution reaches the floor, else `implausible`
    (reject): the timing cannot be real. (On an H100 at `small`, windows of one call once came out no dearer
    than their cost: a median of 0, printed as 0.0000 ms and 111128x eager on a CPU.)"""
    referee = session.referee
    floor, how = floor_of(referee, built)
    resolution = resolution_ms(cost, calls)
    per_call = (f"{timing.median_ms * 1e3:.4g} us per call" if timing.median_ms > 0 else
                "a figure per call at or under zero (the window no longer than its cost)")
    resolves = (f"the window's cost ({cost.cost_ms * 1e3:.4g} us) spreads by {resolution * calls * 1e3:.4g} us, "
                f"{resolution * 1e3:.4g} us a call over {calls} call(s) a window") if cost is not None else "uncalibrated"
    if timing.median_ms <= resolution:
        session.add([Flag(name="shaky_timing", reason=(
            f"{per_call}, within what the referee's clock resolves here ({resolves}): too short a call to time; "
            "no figure is given, not ranked"))])
        return floor, False
    if floor is None or timing.median_ms >= floor:
        return floor, True
    below = f"median {per_call} is below the physical floor {floor * 1e3:.4g} us ({how})"
    if timing.median_ms + resolution >= floor:
        session.add([Flag(name="shaky_timing", reason=(
            f"{below}, within what the referee's clock resolves here ({resolves}): too short a call to time; no "
            "figure is given, not ranked"))])
        return floor, False
    session.add([Flag(name="implausible", policy=FlagPolicy.reject, reason=f"{below}: the timing cannot be real")])
    return floor, True
