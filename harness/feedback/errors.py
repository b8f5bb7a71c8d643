"""Error messages as a kernel engineer reads them: what raised, where in their own code, and why.

A verdict's message (`public_text` first) is cut to its headline, the traceback frames that run in the
candidate's file (with that line of its source) and the last exception; `compact_error` makes that one
line, for flag reasons and failed checks. `PHASE_WORDS` says when, in the evaluation, it happened.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from evaluator.wire.problem import ProblemSpec
from harness.core.text import cut_text
from harness.feedback.public import public_text

MESSAGE_CHARS = 1200           # an error message that is no traceback
EXCEPTION_CHARS = 800          # the last exception of a traceback
PHASE_WORDS = {
    "parse": "before it ran",
    "compile": "while it was imported and its extensions were built",
    "init": "while `ModelNew` was constructed and given the reference's weights",
    "check": "during the correctness checks",
    "time": "while it was timed",
}


class Frame(BaseModel):
    """A frame of a traceback that runs in the candidate's own file."""

    model_config = ConfigDict(extra="forbid")
    line: int = Field(description="1-based line of the candidate's source.")
    function: str = Field(description="The function it is in.")
    code: str = Field(description="That line, stripped.")


class ErrorSummary(BaseModel):
    """An error message cut to what a kernel engineer reads: what raised, where in their code, and why."""

    model_config = ConfigDict(extra="forbid")
    headline: str = Field(description="What failed (the text before the traceback, or the whole message).")
    frames: list[Frame] = Field(default_factory=list, description="The candidate's own frames, outermost first.")
    exception: str = Field("", description="The last exception, trimmed; empty when the message is no traceback.")


_TRACEBACK = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>.+)$')
_CANDIDATE_FILE = re.compile(r"(^|/)candidate_[0-9a-f]+\.py$")  # the executor's copy (evaluator.referee.process)


def summarize_error(text: str | None, source: str | None, problem: ProblemSpec | None = None) -> ErrorSummary:
    """A message (`public_text` first) with its traceback cut to the candidate's own frames and the
    last exception."""
    text = public_text(text, problem)
    if _TRACEBACK not in text:
        return ErrorSummary(headline=cut_text(text, MESSAGE_CHARS))
    headline = text[:text.index(_TRACEBACK)].strip().rstrip(":").strip()
    lines = text.splitlines()
    source_lines = source.splitlines() if source else []
    frames, seen = [], set()
    for index, line in enumerate(lines):
        match = _FRAME.match(line)
        if not match or not _CANDIDATE_FILE.search(match["file"]):
            continue
        number = int(match["line"])
        if number in seen:
            continue
        seen.add(number)
        if 0 < number <= len(source_lines):
            code = source_lines[number - 1].strip()
        else:
            code = lines[index + 1].strip() if index + 1 < len(lines) else ""
        frames.append(Frame(line=number, function=match["function"].strip(), code=code))
    last = text.rindex(_TRACEBACK) + len(_TRACEBACK)
    tail = text[last:].splitlines()
    start = next((i for i, line in enumerate(tail) if line and not line[0].isspace()), len(tail))
    exception = "\n".join(tail[start:])
    exception = re.split(r"\nException raised from |\n(?:The above exception|During handling of the above)",
                         exception)[0]
    return ErrorSummary(headline=cut_text(headline, MESSAGE_CHARS), frames=frames,
                        exception=cut_text(exception.strip(), EXCEPTION_CHARS))


def compact_error(text: str | None, source: str | None, problem: ProblemSpec | None = None) -> str:
    """`summarize_error` as one text (for flag reasons that carry a traceback)."""
    summary = summarize_error(text, source, problem)
    parts = [summary.headline] if summary.headline else []
    parts += [f"(line {f.line} of your code, in {f.function}: `{f.code}`)" for f in summary.frames]
    if summary.exception:
        parts.append(summary.exception)
    return " ".join(parts)
