"""Eager timed as a candidate is: the reference itself judged as a candidate in every baseline round (its
twin), its figure the `eager` every speedup divides by.

Why: the referee times its own baselines in its own process, calls back to back on tensors in place, while a
candidate's calls are timed through an executor's windows ((window - cost) / K). Where calls are bound by their
launches the two loops differ, and the reference judged as a candidate read 1.27x the referee's eager through
host memory and 1.41x on the device at `small` on an H100, 2.5-4.8x at 8x16->16 on a CPU (docs/timing.md): a
speedup over the referee's own eager was in part the judge's own error. The twin is the reference's `Model`
unchanged, in an executor like any candidate's (the same containment, checks, windows, calibrator and clock), so
a candidate as fast as the reference reads 1x by construction. The referee's own eager is kept beside it, on the
round's record (`BaselineRound.in_referee`), for the bias of the baselines still timed in the referee (TF32 and
torch.compile, whose twins are not built: a compiled one would compile in each round's executor, where the referee
compiles once a batch, and was not tried)."""

from __future__ import annotations

import dataclasses
import hashlib
import sys
import traceback

from evaluator.referee import phases
from evaluator.referee.relay import StreamStuck
from evaluator.referee.session import release_cached
from evaluator.referee import tuning
from evaluator.referee.tuning import profile_log
from evaluator.referee.view import Round
from evaluator.wire.protocol import JudgeRequest
from evaluator.wire.records import Status, TimingStats, Verdict

NAME = "reference twin"
TIMED = "eager"  # the baseline the twin's figure stands for
PATH = "<reference twin>"  # its key among the executors started ahead: no file (its source: reference_as_candidate)

# A twin verdict with one of these has no figure to divide by (the clock disagreed with its own times, or saw
# a time under the physical floor, or could not take off what a window costs).
UNTIMED_FLAGS = ("timing_mismatch", "implausible", "uncalibrated")


def request(made: bytes) -> JudgeRequest:
    return JudgeRequest(name=NAME, path=PATH, digest=hashlib.sha256(made).hexdigest())


def figure(verdict: Verdict) -> tuple[TimingStats | None, str | None]:
    """(the twin's figure, None) where it stands as eager's; else (None, why not)."""
    said = "the reference judged as a candidate (eager timed the candidates' way)"
    if verdict.status != Status.correct:
        return None, f"{said} was {verdict.status.value}: {verdict.error}"[:400]
    untimed = [f for f in verdict.flags if f.name in UNTIMED_FLAGS]
    if untimed:
        return None, f"{said} was flagged `{untimed[0].name}`: {untimed[0].reason}"[:400]
    if verdict.runtime_ms is None or verdict.timing is None:
        shaky = next((f.reason for f in verdict.flags if f.name == "shaky_timing"), "no figure")
        return None, f"{said} has no figure: {shaky}"[:400]
    return verdict.timing, None


def judge_twin(referee, process, round_: int, again: bool = False) -> tuple:
    """(its executor, its verdict): the twin judged as a candidate, in `process` (one started ahead) or a fresh one."""
    if process is None:
        process = referee.executor_for(referee.twin)
        process.start()
    keys = referee.keys.derive("twin", round_, "again") if again else referee.keys.derive("twin", round_)
    return process, phases.judge(referee.session_for(referee.twin, process, keys), compile_only=False)


def judged_round(referee, timed: Round, previous: Round | None) -> Round:
    """The round `timed` (evaluator.referee.referee.Referee's, just timed) with eager's figure the twin's, judged as a
    candidate against it; the referee's own eager kept on its record (`in_referee`). Where the twin has no figure,
    eager failed in this round (no speedup over it, `baseline_failed` saying why): the referee's own loop never stands
    in for it. Its drift is the twin's against the last round's twin."""
    request = referee.twin
    process = referee.waiting.pop((request.path, request.digest), None)
    own = timed.baselines.get(TIMED)  # the referee's own loop's eager, kept on the round's record
    baselines = {k: v for k, v in timed.baselines.items() if k != TIMED}
    failed = {k: v for k, v in timed.failed.items() if k != TIMED}
    # until the twin has a figure, the round has no eager: nothing that escapes here leaves the referee's own in its place
    referee.current_round = dataclasses.replace(
        timed, baselines=dict(baselines), failed={**failed, TIMED: "the reference judged as a candidate did not finish"})
    try:
        started_ahead = process is not None
        process, verdict = judge_twin(referee, process, timed.source.round)
        if started_ahead and verdict.status != Status.correct:
            # its executor started beside a candidate (Referee.judge), which could crowd it out of the device as it
            # started: judged once more from an executor of its own, started with no candidate beside it
            referee.close_later(process)
            process = None
            said = f"the twin started ahead was {verdict.status.value}: {verdict.error}"[:400]
            print(f"round {timed.source.round}: {said}; judged again from a fresh executor", file=sys.stderr)
            profile_log({"event": "twin_again", "round": timed.source.round, "first": said})
            process, verdict = judge_twin(referee, None, timed.source.round, again=True)
        stats, why = figure(verdict)
        profile_log({"event": "twin", "round": timed.source.round, "phases": verdict.phase_seconds,
                     "ms": verdict.runtime_ms, "in_referee_ms": own.median_ms if own else None,
                     "events_ms": verdict.timing_check.reported_median_ms if verdict.timing_check else None,
                     "costs": tuning.take_spent()})
    except Exception as err:  # noqa: BLE001 - the referee's own executor: recorded with the round, the batch goes on
        if isinstance(err, StreamStuck):  # its device would hang every later synchronize: the lane starts another
            raise
        traceback.print_exc()
        stats, why = None, f"the reference judged as a candidate failed: {type(err).__name__}: {err}"[:400]
    finally:
        if process is not None:
            referee.close_later(process)
    moved = {k: v for k, v in timed.moved.items() if k != TIMED}
    before = previous.baselines.get(TIMED) if previous is not None else None
    if stats is not None:
        baselines[TIMED] = stats
        if before is not None and before.median_ms > 0:
            moved[TIMED] = stats.median_ms / before.median_ms - 1
    else:
        failed[TIMED] = why
    referee.rounds[-1] = referee.rounds[-1].model_copy(update={
        "baselines": {k: v.model_dump() for k, v in baselines.items()}, "failed": failed,
        "in_referee": {TIMED: own.model_dump() if own is not None else None}})  # the mark of a twin's round
    referee.current_round = dataclasses.replace(timed, baselines=baselines, failed=failed, moved=moved)
    release_cached(referee.device)
    return referee.current_round
