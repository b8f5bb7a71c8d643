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
import threading
import time
import traceback
from dataclasses import dataclass, field

from evaluator.referee import device_share, phases, replay
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

# Where a round follows an earlier one, its twin is judged before its baselines are timed (Referee.baseline_round), to
# overlap the replay the candidate before left for later; KH_DEFER_REPLAY=candidates (and =0, where nothing is left for
# later) judges it after them, its compared calls replayed at once (for measuring what the overlaps save).
FIRST = replay.DEFER not in ("0", "candidates")

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


def judge_twin(referee, process, round_: int, again: bool = False, defer: bool = False) -> tuple:
    """(its executor, its judgement: phases.Judgement): the twin judged as a candidate, in `process` (one started ahead)
    or a fresh one; with `defer`, its compared calls may be left for later (replay.Later) as a candidate's are."""
    fresh = process is None
    if fresh:
        process = referee.executor_for(referee.twin)
    try:
        if fresh:
            process.start()
        keys = referee.keys.derive("twin", round_, "again") if again else referee.keys.derive("twin", round_)
        session = referee.session_for(referee.twin, process, keys)
        session.defer_replay = defer and replay.DEFER != "candidates"
        session.eager_beside = False  # eager itself: nothing to pair it with
        return process, phases.begin(session, compile_only=False)
    except BaseException:
        if fresh:  # one given is its caller's to close
            referee.close_later(process)
        raise


@dataclass
class Run:
    """The twin's judgement in a round: its verdict, or its judgement with compared calls left for later (`verdict`
    None), or why it failed (`why`); its executor closed or closing (the referee's `closing`: `closed`)."""

    judgement: phases.Judgement | None = None
    verdict: Verdict | None = None
    why: str | None = None
    costs: dict = field(default_factory=dict)  # its phases' steps, for the profile
    closed: threading.Event | None = None
    seconds: float = 0.0


def run(referee, index: int, defer: bool) -> Run:
    """The twin of round `index` judged as a candidate (once more from a fresh executor where the one started ahead
    came out other than `correct`); its executor closed in the background at once, as a judged candidate's is. A
    stream stuck on the device is raised (the lane starts another referee); any other failure is the round's eager
    failed, saying why."""
    started = time.perf_counter()
    request = referee.twin
    process = referee.waiting.pop((request.path, request.digest), None)
    ran = Run()
    try:
        started_ahead = process is not None
        process, judgement = judge_twin(referee, process, index, defer=defer)
        # made now unless compared calls are left for later (its phases then all passed); else once they are over
        verdict = judgement.verdict() if judgement.rest is None else None
        if started_ahead and verdict is not None and verdict.status != Status.correct:
            # its executor started beside a candidate (Referee.judge), which could crowd it out of the device as it
            # started: judged once more from an executor of its own, started once that candidate's is gone
            referee.close_later(process)
            process = None
            device_share.executors_closed(referee)  # the executors judged before, this one's too
            said = f"the twin started ahead was {verdict.status.value}: {verdict.error}"[:400]
            print(f"round {index}: {said}; judged again from a fresh executor", file=sys.stderr)
            profile_log({"event": "twin_again", "round": index, "first": said})
            process, judgement = judge_twin(referee, None, index, again=True, defer=defer)
            verdict = judgement.verdict() if judgement.rest is None else None
        ran.judgement, ran.verdict = judgement, verdict
    except Exception as err:  # noqa: BLE001 - the referee's own executor: recorded with the round, the batch goes on
        if isinstance(err, StreamStuck):  # its device would hang every later synchronize: the lane starts another
            if process is not None:
                referee.close_later(process)
            raise
        traceback.print_exc()
        ran.why = failure(err)
    if process is not None:
        ran.closed = referee.close_later(process)
    ran.costs = tuning.take_spent()  # its phases' steps (the main thread's: none of a thread's are counted)
    ran.seconds = time.perf_counter() - started
    return ran


def failure(err: BaseException) -> str:
    """Why the round's eager failed where judging its twin raised."""
    return f"the reference judged as a candidate failed: {type(err).__name__}: {err}"[:400]


def judged_round(referee, timed: Round, previous: Round | None, defer: bool = False, ran: Run | None = None) -> Round:
    """The round `timed` (evaluator.referee.referee.Referee's, just timed) with eager's figure the twin's, judged as a
    candidate (`ran`, where it was judged before the round's baselines were timed: Referee.baseline_round; else now);
    the referee's own eager kept on its record (`in_referee`). Where the twin has no figure, eager failed in this round
    (no speedup over it, `baseline_failed` saying why): the referee's own loop never stands in for it. Its drift is the
    twin's against the last round's twin.

    With `defer` (a candidate follows: Referee.judge), the twin's compared calls left for later are replayed beside
    that candidate's start and checks, as a candidate's are beside the next one's, once its executor is closed, and
    the round has no eager until they are over (on a thread of its own); the next exclusive turn waits for them (the
    referee's `closing`), so no window is timed, and no verdict with a figure made, while the round's eager is not yet
    known."""
    own = timed.baselines.get(TIMED)  # the referee's own loop's eager, kept on the round's record
    # until the twin has a figure, the round has no eager: nothing that escapes here leaves the referee's own in its place
    referee.current_round = dataclasses.replace(
        timed, baselines={k: v for k, v in timed.baselines.items() if k != TIMED},
        failed={**timed.failed, TIMED: "the reference judged as a candidate did not finish"})
    ran = ran or run(referee, timed.source.round, defer)
    if ran.judgement is None or ran.verdict is not None:
        return settle_round(referee, timed, previous, own, ran.verdict, ran.why, ran.costs)
    ranked = ran.judgement.results["timed"].timing  # its phases passed: for the next candidate's run limit only
    pending = "the reference judged as a candidate: its compared calls not yet replayed"
    referee.current_round = dataclasses.replace(referee.current_round, eager_unsettled=ranked,
                                                failed={**referee.current_round.failed, TIMED: pending})
    referee.closing.append(settled := threading.Event())
    threading.Thread(target=_settle_later, args=(referee, ran, timed, previous, own, settled), daemon=True,
                     name="twin's later replay").start()
    return referee.current_round


def _settle_later(referee, ran: Run, timed: Round, previous: Round | None, own, settled: threading.Event) -> None:
    """Once the twin's executor is closed, its compared calls left for later replayed (nothing of its executor's
    beside them, as for a candidate: evaluator.referee.settling.reply), then the round settled; `settled` set whatever
    happens."""
    try:
        try:
            if ran.closed is not None:
                ran.closed.wait()
            verdict = ran.judgement.verdict()
            settle_round(referee, timed, previous, own, verdict, None,
                         {**ran.costs, "replay_later": round(ran.judgement.later_s, 4)})
            crowded = verdict.status == Status.crashed
        except Exception as err:  # noqa: BLE001 - recorded with the round (eager failed), the batch goes on
            traceback.print_exc()
            settle_round(referee, timed, previous, own, None, failure(err), ran.costs)
            crowded = True
        if crowded:
            # the referee's own failure (its memory, beside the next candidate's own code, which can crowd it out):
            # that candidate divides by this round, with no eager; the ones after it by a round of their own
            referee.round_due = True
    finally:
        settled.set()


def settle_round(referee, timed: Round, previous: Round | None, own, verdict: Verdict | None, why: str | None,
                 costs: dict) -> Round:
    """The round with the twin's figure as eager's, from its `verdict`, or eager failed saying `why`."""
    stats = None
    if verdict is not None:
        stats, why = figure(verdict)
        profile_log({"event": "twin", "round": timed.source.round, "phases": verdict.phase_seconds,
                     "ms": verdict.runtime_ms, "in_referee_ms": own.median_ms if own else None,
                     "events_ms": verdict.timing_check.reported_median_ms if verdict.timing_check else None,
                     "costs": costs})
    baselines = {k: v for k, v in timed.baselines.items() if k != TIMED}
    failed = {k: v for k, v in timed.failed.items() if k != TIMED}
    moved = {k: v for k, v in timed.moved.items() if k != TIMED}
    before = previous.baselines.get(TIMED) if previous is not None else None
    if stats is not None:
        baselines[TIMED] = stats
        if before is not None and before.median_ms > 0:
            moved[TIMED] = stats.median_ms / before.median_ms - 1
    else:
        failed[TIMED] = why
    index = next(i for i, r in enumerate(referee.rounds) if r.index == timed.source.round)
    referee.rounds[index] = referee.rounds[index].model_copy(update={
        "baselines": {k: v.model_dump() for k, v in baselines.items()}, "failed": failed,
        "in_referee": {TIMED: own.model_dump() if own is not None else None}})  # the mark of a twin's round
    referee.current_round = dataclasses.replace(timed, baselines=baselines, failed=failed, moved=moved)
    release_cached(referee.device)
    return referee.current_round
