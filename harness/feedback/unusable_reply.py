"""Feedback on a reply with no usable code: why it could not be used (`feedback/unusable_reply.j2` adds
what a usable answer holds)."""

from __future__ import annotations

from evaluator.wire.records import Status, Verdict
from harness.core.records import ParseReason, ParseResult
from harness.feedback.public import public_text

PARSE_EXPLANATIONS = {
    ParseReason.truncated: "the reply was cut off before its code block was complete",
    ParseReason.no_code: "the reply holds no fenced code block",
    ParseReason.no_model_new: "no code block in the reply defines a top-level `class ModelNew`",
    ParseReason.syntax_error: "the code block that defines `ModelNew` is not valid Python",
}


def unusable_reply_part(parse: ParseResult | None, verdict: Verdict | None) -> dict | None:
    """The `parse` part: the reason a reply (or the harness's verdict on it) gives, or None when the code was usable."""
    if parse is not None and not parse.ok:
        return {"reason": parse.reason.value if parse.reason else "no_code",
                "explanation": PARSE_EXPLANATIONS.get(parse.reason, "the reply held no usable code"),
                "detail": parse.detail, "line": parse.line}
    if verdict is not None and verdict.status == Status.parse_error:
        return {"reason": "no_model_new" if "ModelNew" in (verdict.error or "") else "syntax_error",
                "explanation": "the code could not be used as a candidate", "detail": public_text(verdict.error),
                "line": None}
    return None
