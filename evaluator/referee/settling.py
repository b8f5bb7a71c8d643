"""A verdict completed with what its executor showed: the containment reports it sent before any
candidate code existed (`contained`), its capped output and exit (`settle`), and how its import failed
(`import_error_kind`). Used by the referee for every candidate and by the parent for builds; and a judged
candidate's reply, made on the referee's reply thread (`reply`).
"""

from __future__ import annotations

import base64
import threading
import time

from evaluator.referee import launch
from evaluator.referee.process import ExecutorProcess
from evaluator.referee.session import Session, release_cached
from evaluator.referee.tuning import PROFILE_DIR, profile_log
from evaluator.wire.protocol import VERDICT_TAIL_CHARS, ExecutorMessage, JudgeReply, JudgeRequest
from evaluator.wire.records import Containment, Flag, Verdict


def import_error_kind(process: ExecutorProcess) -> str | None:
    """How its import failed, as it said (`build`, `import`, ...; testimony, used only to choose who tries next)."""
    reply = next((m.reply for m in process.messages if m.reply is not None and m.reply.id == 0), None)
    return reply.error_kind if reply is not None else None


def contained(verdict: Verdict, messages: list[ExecutorMessage]) -> Verdict:
    """The verdict with the containment reports sent before the first phase message (so before any
    candidate code existed: the launcher's, written before the executor started, then the executor's
    own), judged against what was asked for: every mechanism. An `unsandboxed` flag (flag, not
    reject) names what was not contained."""
    record, missing = launch.assess_messages(messages)
    verdict.containment = Containment.model_validate(record)
    if missing:
        verdict.flags.append(Flag(name="unsandboxed", reason=launch.unsandboxed_reason(record, missing)))
    return verdict


def settle(verdict: Verdict, process: ExecutorProcess, returncode: int | None, tail_chars: int) -> Verdict:
    """The verdict completed with what the process itself showed: its containment, the tails of its
    stdout and stderr (and `output_capped` when they were cut), an unclean exit after a correct
    judgement, the total seconds."""
    verdict = contained(verdict, process.messages)
    for stream, name in ((process.stdout, "stdout"), (process.stderr, "stderr")):
        if stream.capped:
            verdict.flags.append(Flag(name="output_capped", reason=f"{name}: {stream.total} bytes, only the last "
                                                                    f"{stream.cap} kept"))
    if returncode not in (0, None) and verdict.status.value == "correct":
        verdict.flags.append(Flag(name="unclean_exit", reason=f"the executor {launch.exit_description(returncode)} after it "
                                                              "was judged"))
    verdict.phase_seconds.setdefault("total", round(time.monotonic() - process.started, 3))
    return verdict.model_copy(update=dict(
        stdout_tail=process.stdout.tail().decode("utf-8", "replace")[-tail_chars:],
        stderr_tail=process.stderr.tail().decode("utf-8", "replace")[-tail_chars:],
        stdout_bytes=process.stdout.total, stderr_bytes=process.stderr.total))


def reply(request: JudgeRequest, process: ExecutorProcess, session: Session, judgement, steps: dict[str, float],
          costs: dict[str, float], closed: threading.Event) -> JudgeReply:
    """A judged candidate's reply, made on the referee's reply thread while the next candidate starts: its executor's
    exit waited for (it exits by itself after `finish`) and the executor closed, then the compared calls left for
    later replayed (evaluator.referee.replay.Later, in phases.Judgement.verdict), the verdict settled with what the
    executor showed. `closed` is set once all of it is over: the next exclusive turn waits for it (Referee.exclusive)."""
    returncode = None
    try:
        try:
            if judgement.outcome is None:
                returncode = process.wait_exit(1)
            steps["exit"] = time.perf_counter()
        finally:
            # before the later replay: nothing of the candidate's beside it (a process holding the device's memory
            # could make it fail as the referee's own), and its exchange handed on while the device is idle
            process.close(wait_s=1)
        verdict = judgement.verdict()
        if judgement.later_s is not None:
            costs["replay_later"] = round(judgement.later_s, 4)
            release_cached(session.device)  # its copies: the next executor's memory, not the referee's cache
    finally:
        closed.set()
    steps["close"] = time.perf_counter()
    verdict = settle(verdict, process, returncode, VERDICT_TAIL_CHARS)
    if PROFILE_DIR:  # where each candidate's seconds went
        startup = next((m.reply.startup for m in process.messages if m.reply is not None and m.reply.id == 0), {})
        marks = list(steps.items())
        profile_log({"event": "candidate", "name": request.name, "phases": verdict.phase_seconds,
                     "executor": session.command_seconds,
                     "startup": {k: v - process.launched_at for k, v in startup.items()}, "costs": costs,
                     "checked": session.checked_ms,
                     "referee": {name: round(t - marks[i][1], 3) for i, (name, t) in enumerate(marks[1:])}})
    return JudgeReply(verdict=verdict, stdout=base64.b64encode(process.stdout.tail()).decode(),
                      stderr=base64.b64encode(process.stderr.tail()).decode())
