"""Feedback: the next user turn of a refinement conversation, built from what the evaluator saw.

    feedback_context(problem, source=..., parse=..., verdict=..., hardware=...) -> dict     pure
    render_feedback(problem, source=..., parse=..., verdict=..., hardware=...) -> Message   one user message

The conversation's previous assistant message is the model's reply, so the message never repeats
the previous source; it points at lines of it. What it holds, each part only when it applies, one
module (and one template under `prompts/feedback/`) per kind; `prompts/feedback.j2`, or a user's own
through `--feedback-template`, picks the part and decides the words:

- a reply with no usable code: harness.feedback.unusable_reply;
- a compile error: harness.feedback.compile_error;
- a runtime error, timeout or crash: harness.feedback.runtime_error;
- incorrect: harness.feedback.incorrect;
- correct, and how fast: harness.feedback.correct;
- the integrity flags and their reasons (a rejected candidate is told why it was not run):
  harness.feedback.flags.

What it never says (seeds, how the checks work, hidden tolerances): harness.feedback.public, which
every text taken from the verdict goes through.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from evaluator.wire.problem import ProblemSpec
from evaluator.wire.records import Verdict
from harness.core.records import Hardware, Message, ParseResult
from harness.feedback.compile_error import compile_error_part
from harness.feedback.correct import correct_part
from harness.feedback.flags import flags_part
from harness.feedback.incorrect import DISTRIBUTION_WORDS, incorrect_part
from harness.feedback.public import published_tiers
from harness.feedback.runtime_error import runtime_error_part
from harness.feedback.unusable_reply import unusable_reply_part
from harness.generation.prompts import make_environment, render_template
from harness.problems.interface import reference_interface


def feedback_context(problem: ProblemSpec, *, source: str | None, parse: ParseResult | None,
                     verdict: Verdict | None, hardware: Hardware | None) -> dict:
    """What `feedback.j2` is rendered with: every key always present, a part None (or empty) when it
    does not apply. Pure: reads only its arguments (and the problem's reference source)."""
    if parse is None and verdict is None:
        raise ValueError("feedback needs the reply's parse result or the candidate's verdict")
    parsed = unusable_reply_part(parse, verdict)
    usable = parsed is None and verdict is not None
    status = verdict.status.value if usable else None
    interface = reference_interface(problem)
    return {
        "problem": {
            "name": problem.name, "title": problem.title, "mode": problem.mode,
            "distributions": [{"name": d, "words": DISTRIBUTION_WORDS.get(d, "")} for d in problem.distributions],
            "tiers": published_tiers(problem), "signature": interface["signature"],
            "attributes": interface["attributes"],
        },
        "hardware": hardware.model_dump() if hardware is not None else None,
        "status": status,
        "parse": parsed,
        "compile": compile_error_part(verdict, source, problem) if status == "compile_error" else None,
        "failure": runtime_error_part(verdict, source, problem) if status in ("runtime_error", "timeout", "crashed") else None,
        "incorrect": incorrect_part(verdict, source, problem) if status == "incorrect" else None,
        "correct": correct_part(verdict, problem, hardware) if status == "correct" else None,
        "flags": flags_part(verdict, source, problem) if usable else {"reject": [], "other": []},
    }


def _significant(value: float | None, digits: int = 3) -> str:
    """A number people read: `digits` significant digits, no exponent between 1e-4 and 1e7."""
    if value is None:
        return "-"
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    if not 1e-4 <= abs(value) < 1e7:
        return f"{value:.{digits - 1}e}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.{0 if value >= 0.1 else 1}f}%"


def render_feedback(problem: ProblemSpec, *, source: str | None, parse: ParseResult | None,
                    verdict: Verdict | None, hardware: Hardware | None, template: str = "feedback",
                    templates: Path | None = None) -> Message:
    """The feedback turn as one user message, rendered from `template` (`feedback` is `feedback.j2`;
    a `templates` folder is searched first). Raises harness.generation.prompts.PromptError for a template that
    is missing, broken or uses a variable not given."""
    context = feedback_context(problem, source=source, parse=parse, verdict=verdict, hardware=hardware)
    env = make_environment(templates)
    env.filters["sig"] = _significant
    env.filters["percent"] = _percent
    name = template if template.endswith(".j2") else f"{template}.j2"
    text = re.sub(r"\n{3,}", "\n\n", render_template(env, name, context))  # parts left out leave blank lines behind
    return Message(role="user", content=text)
