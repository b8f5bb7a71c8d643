"""The one verdict type the library, the service, its client and `harness eval --json` hand out: the evaluator's
verdict plus what the leaderboard makes of it (`ranked`, `outcome`, `why`), its reward (harness.core.reward) and
its speedups' 95% intervals (harness.core.intervals). Pure."""

from __future__ import annotations

from pydantic import Field

from evaluator.wire.records import Verdict
from harness.core.intervals import verdict_intervals
from harness.core.ranking import classify
from harness.core.reward import RewardPolicy, reward


class JudgedVerdict(Verdict):
    """A verdict, whether it ranks, its reward and its speedups' intervals."""

    ranked: bool = Field(description="Correct at the judge's tier, its timing trusted, no reject flag: a number to use.")
    outcome: str = Field(description="What the leaderboard calls it (harness.core.outcomes): correct, shaky, incorrect...")
    why: str | None = Field(None, description="Why it does not rank (None when it does).")
    reward: float = Field(0.0, description="The reward under the judge's policy (harness.core.reward), for every status.")
    speedup_interval: dict[str, tuple[float, float]] = Field(default_factory=dict, description=(
        "Baseline name -> the 95% interval of the speedup over it, from the per-call figures of both sides "
        "(harness.core.intervals); absent where either side has too few figures."))


def judged(verdict: Verdict, policy: RewardPolicy | None = None) -> JudgedVerdict:
    """`verdict` with its ranking at the policy's tier, its reward and its intervals."""
    policy = policy or RewardPolicy()
    outcome, why = classify(verdict, policy.tier)
    ranked = outcome.value == "correct"
    fields = verdict.model_dump()
    for extra in JudgedVerdict.model_fields.keys() - Verdict.model_fields.keys():
        fields.pop(extra, None)  # a JudgedVerdict judged again: its own figures anew
    return JudgedVerdict(**fields, ranked=ranked, outcome=outcome.value, why=None if ranked else why,
                         reward=reward(verdict, policy).value, speedup_interval=verdict_intervals(verdict))
