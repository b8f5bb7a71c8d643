"""A reward for every verdict: graded, defined for every status, honest about the speedup's uncertainty. Pure.

    reward = correct + speed * term(low)          a verdict correct at the tier with no reject flag, shaky or not
    reward = failures[outcome]                    anything else (parse_error, compile_error, runtime_error, timeout,
                                                  crashed, incorrect, below_tier, rejected, ...), each below `correct`

`low` is the lower end of the speedup's 95% interval over `baseline` (harness.core.intervals), never the point
estimate: noise cannot be rewarded, and a shaky verdict's wide interval lowers its reward instead of zeroing it. A
shaky verdict's `low` counts at most 1x: its interval is from within a round, and the flag says the timing moved
beyond that (on a 2-core CPU, two with eager spread by 59-73% had lower ends over 1), so it never earns as faster.
Where there is no interval (the clock could not resolve a call, too few figures, no baseline) the term is 0: the
credit for correctness alone. `term` is `log`: (clamp(log(low) / log(cap), -1, 1) + 1) / 2, so 1x earns half the
speed weight, `cap` times faster all of it, `cap` times slower none; or `linear`: min(low / cap, 1).

With the defaults: parse 0.0, compile 0.05, runtime/timeout/crash 0.1, incorrect or below the tier 0.15, rejected
(a reject flag: a hack) 0.0; correct 0.3 to 1.0 (0.65 at 1x eager). A policy whose failures are not all below its
`correct` credit is refused."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from evaluator.wire.records import Verdict
from harness.core.intervals import verdict_interval
from harness.core.outcomes import Outcome
from harness.core.ranking import classify

FAILURES = {"parse_error": 0.0, "rejected": 0.0, "compile_error": 0.05, "runtime_error": 0.1, "timeout": 0.1,
            "crashed": 0.1, "incorrect": 0.15, "below_tier": 0.15}


class RewardPolicy(BaseModel):
    """How a verdict becomes a reward (see the module's docstring)."""

    model_config = ConfigDict(extra="forbid")
    baseline: str = Field("eager", description="The baseline the speedup is over (`eager`, `compile`, ...).")
    tier: str = Field("loose", description="The tolerance tier a verdict must pass to count as correct.")
    correct: float = Field(0.3, description="Credit for a correct verdict, whether or not its timing is shaky.")
    speed: float = Field(0.7, ge=0, description="Weight of the speedup term above that credit.")
    term: Literal["log", "linear"] = Field("log", description="How the interval's lower end is scaled.")
    cap: float = Field(16.0, gt=1, description="The speedup that earns the whole speed weight.")
    failures: dict[str, float] = Field(default_factory=lambda: dict(FAILURES), description=(
        "Reward by outcome for everything not correct (an outcome not named: 0)."))

    @model_validator(mode="after")
    def _failures_below_correct(self) -> RewardPolicy:
        above = {k: v for k, v in self.failures.items() if v >= self.correct}
        if above:
            raise ValueError(f"failures must be below the credit for a correct verdict ({self.correct}): {above}")
        return self

    def speed_term(self, low: float | None) -> float:
        """0 to 1 from the interval's lower end (0 without one)."""
        if low is None or not low > 0:
            return 0.0
        if self.term == "linear":
            return min(low / self.cap, 1.0)
        return (max(-1.0, min(1.0, math.log(low) / math.log(self.cap))) + 1) / 2


class Reward(BaseModel):
    """A verdict's reward under a policy, with what it was made of."""

    value: float = Field(description="The reward.")
    outcome: str = Field(description="The verdict's outcome at the policy's tier (harness.core.outcomes).")
    speedup_low: float | None = Field(None, description="The lower end of the speedup's 95% interval it rose with.")


def reward(verdict: Verdict, policy: RewardPolicy | None = None) -> Reward:
    policy = policy or RewardPolicy()
    outcome, _ = classify(verdict, policy.tier)
    if outcome not in (Outcome.correct, Outcome.shaky):
        return Reward(value=policy.failures.get(outcome.value, 0.0), outcome=outcome.value)
    interval = verdict_interval(verdict, policy.baseline)
    low = interval[0] if interval is not None else None
    if low is not None and outcome == Outcome.shaky:
        low = min(low, 1.0)
    return Reward(value=policy.correct + policy.speed * policy.speed_term(low), outcome=outcome.value, speedup_low=low)
