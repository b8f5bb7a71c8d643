"""What is compared once a candidate's windows are over, outside any window: the whole state after the clocked calls
and one more checked call, each against the float64 reference replayed through those calls (evaluator.referee.replay),
and the profiled call's output (`spot`). Each is its verdict where it passes no tier; what passes goes into the
series' later accumulator, so a tier is claimed only where every one passes it (evaluator.referee.time_phase)."""

from __future__ import annotations

import copy

import torch

from evaluator.referee import compare
from evaluator.referee import inputs as draws
from evaluator.referee.check_phase import compare_output, describe_regression, said_first, trial
from evaluator.referee.session import Checked, Judged, Session
from evaluator.wire import tensors as cmp
from evaluator.wire.protocol import Reply, SendState
from evaluator.wire.records import Phase, Status


def spot(session: Session, checked: Checked, after: torch.nn.Module | None, reply: Reply, inputs: list,
         label: str) -> compare.ModeAccumulator:
    """An output shipped through the exchange (the profiled call's) against the float64 reference on the
    same inputs, from its state `after` the calls before (else after the checks), in every tier: one that passes
    none is `incorrect`."""
    referee = session.referee
    reference64 = copy.deepcopy(after if after is not None else checked.reference64).train(referee.problem.mode == "train")
    shipped, unreadable = session.shipment(reply)
    with torch.no_grad(), cmp.guarded():
        expected = reference64(*draws.as_float64(inputs, referee.judge_device))
    acc = compare.ModeAccumulator(referee.problem.mode, referee.tolerances)
    acc.trials = 1
    for problem in reply.problems:
        acc.fail(problem)
    said_first(acc, reply, shipped, expected, referee, unreadable)
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
        acc.add(name, compare.compare_tensor(name, shipped.get(f"state.{name}"), value, referee.tolerances, referee.rel_floor,
                                             on=referee.device))
    if not acc.passed:
        raise Judged(Status.incorrect, Phase.time, (
            f"buffers wrong after {calls} timed calls (warm-up included; against the float64 reference's state "
            f"after the last of them, evaluator.referee.replay): {describe_regression(acc, None)}"))
    later.merge(acc)


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
