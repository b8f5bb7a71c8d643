"""Whether a verdict was judged by the rules of this harness: a verdict judged by an older evaluator or
an edited problem is `stale` (shown, never ranked) until it is judged again."""

from __future__ import annotations

from collections.abc import Callable

from evaluator.wire.records import Verdict

# Whether a verdict was judged by the current rules: (verdict) -> None when it was, else why not.
StalenessCheck = Callable[[Verdict], "str | None"]


def current_rules() -> StalenessCheck:
    """The staleness check of this harness: a verdict is current when its judge's evaluator hash
    is this evaluator's and its problem hash is that of the problem as it is now (when the
    problem can still be found), and its measuring knobs (identity.JUDGE_KNOBS) are the ones set here. Torch and CUDA
    versions are measurement context, shown but not judged here: a store read on another machine is not stale for that."""
    from evaluator.wire.identity import evaluator_sha256, judge_knobs, problem_sha256
    from evaluator.wire.problem import load_problem

    mine, knobs = evaluator_sha256(), judge_knobs()
    problems: dict[str, str | None] = {}

    def problem_hash(name: str) -> str | None:
        if name not in problems:
            try:
                problems[name] = problem_sha256(load_problem(name))
            except (FileNotFoundError, ValueError, OSError):
                problems[name] = None  # not findable from here: its hash cannot be compared
        return problems[name]

    def check(verdict: Verdict) -> str | None:
        judge = verdict.judge
        if judge is None:
            return (f"judged before verdicts carried their rules (evaluator {verdict.evaluator_version}): "
                    f"judge it again to rank it")
        if judge.evaluator_sha256 != mine:
            return (f"judged by evaluator {judge.evaluator_sha256[:12]}, this one is {mine[:12]}: "
                    f"judge it again to rank it")
        if judge.knobs != knobs:
            return (f"judged with the measuring knobs {judge.knobs or 'none'}, here {knobs or 'none'}: judge it again "
                    "to rank it")
        current = problem_hash(verdict.problem)
        if current is not None and judge.problem_sha256 != current:
            return f"problem {verdict.problem} changed since it was judged: judge it again to rank it"
        return None

    return check
