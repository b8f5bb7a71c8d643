"""Feedback on an incorrect candidate: which tensors were off and by how much, in which mode and on which
input distribution, against the published tolerance tiers, and the shape, NaN or input problems the checks
saw. `mode_check` also gives a correct candidate's eval-mode line."""

from __future__ import annotations

import math

from evaluator.wire.problem import ProblemSpec
from evaluator.wire.records import ModeCheck, Verdict
from harness.feedback.errors import PHASE_WORDS, compact_error, summarize_error

DISTRIBUTION_WORDS = {"randn": "standard normal, N(0, 1)", "rand": "uniform on [0, 1)"}


def mode_check(check: ModeCheck | None, problem: ProblemSpec, source: str | None) -> dict | None:
    """One mode's (or one distribution's) trials: tiers passed, worst errors, what failed."""
    if check is None:
        return None
    tensors = [t for t in check.tensors if t.name == "output" or t.max_abs_err is None or t.max_abs_err > 0]
    tensors.sort(key=lambda t: (t.name != "output", -(t.max_abs_err if t.max_abs_err is not None else math.inf)))
    return {
        "mode": check.mode, "trials": check.trials,
        "passed": [name for name in problem.tolerances if check.tiers.get(name)],
        "failed": [name for name in problem.tolerances if not check.tiers.get(name)],
        "max_abs": check.max_abs_err, "max_rel": check.max_rel_err,
        "failure": compact_error(check.failure, source, problem) or None,
        "tensors": [{"name": t.name, "max_abs": t.max_abs_err, "max_rel": t.max_rel_err} for t in tensors],
    }


def incorrect_part(verdict: Verdict, source: str | None, problem: ProblemSpec) -> dict:
    """The `incorrect` part: what was seen, and the checks' errors when it failed the checks themselves."""
    correctness = verdict.correctness
    phase = verdict.phase.value if verdict.phase else None
    main = correctness.main if correctness is not None else None
    # failed in the checks themselves (else it passed them and failed later: when timed, or unwritten output)
    checks_failed = main is not None and not any(main.tiers.values())
    distributions = []
    for name in (correctness.distributions if correctness is not None else []):
        check = correctness.by_distribution.get(name)
        distributions.append({"name": name, "words": DISTRIBUTION_WORDS.get(name, ""),
                              "check": mode_check(check, problem, source)})
    return {
        "phase": phase, "phase_words": PHASE_WORDS.get(phase, ""),
        "message": summarize_error(verdict.error, source, problem).model_dump(),
        "checks_failed": checks_failed,
        "main": mode_check(main, problem, source) if checks_failed else None,
        "distributions": distributions if checks_failed else [],
    }
