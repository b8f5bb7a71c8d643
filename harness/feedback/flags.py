"""Feedback on the integrity flags: each one the model can act on, with its reason; those that reject
say why the candidate cannot be ranked (or, rejected statically, why it was not run)."""

from __future__ import annotations

from evaluator.wire.problem import ProblemSpec
from evaluator.wire.records import FlagPolicy, Verdict
from harness.feedback.errors import compact_error

# Flags about the machine or the referee, not the candidate: nothing for the model to act on.
UNTOLD_FLAGS = {"unsandboxed", "baseline_failed", "shaky_timing"}


def flags_part(verdict: Verdict, source: str | None, problem: ProblemSpec) -> dict[str, list[dict]]:
    """The `flags` part: the flags told, those that reject apart from the others."""
    told = [{"name": f.name, "reason": compact_error(f.reason, source, problem) or "(how it was seen is not shown)",
             "reject": f.policy == FlagPolicy.reject}
            for f in verdict.flags if f.name not in UNTOLD_FLAGS]
    return {"reject": [f for f in told if f["reject"]], "other": [f for f in told if not f["reject"]]}
