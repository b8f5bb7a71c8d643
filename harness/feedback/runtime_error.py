"""Feedback on a candidate that raised, ran past its time limit or crashed: the phase and the message, a
traceback cut to the candidate's own frames and the last exception, and for a dead process the last lines
it wrote to stderr."""

from __future__ import annotations

from evaluator.wire.problem import ProblemSpec
from evaluator.wire.records import Status, Verdict
from harness.feedback.errors import PHASE_WORDS, summarize_error
from harness.feedback.public import public_text

STDERR_LINES, STDERR_CHARS = 15, 1500


def _tail_lines(text: str, count: int, limit: int) -> str:
    """The last `count` non-blank lines of `text` as the model may read them, the end kept within `limit`."""
    kept = [line for line in public_text(text).splitlines() if line.strip()][-count:]
    joined = "\n".join(kept)
    return joined if len(joined) <= limit else "…" + joined[-(limit - 1):]


def runtime_error_part(verdict: Verdict, source: str | None, problem: ProblemSpec) -> dict:
    """The `failure` part (statuses runtime_error, timeout and crashed)."""
    phase = verdict.phase.value if verdict.phase else None
    crashed = verdict.status in (Status.crashed, Status.timeout)
    return {"phase": phase, "phase_words": PHASE_WORDS.get(phase, ""),
            "summary": summarize_error(verdict.error, source, problem).model_dump(),
            "stderr": _tail_lines(verdict.stderr_tail, STDERR_LINES, STDERR_CHARS) if crashed else ""}
