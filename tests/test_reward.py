"""The reward a training loop learns from (harness.core.reward) and the speedup intervals it rises with
(harness.core.intervals): every property the policy promises, each held by a test. Pure: no evaluation runs."""

from __future__ import annotations

import random

import pytest

from evaluator.referee.timing import summarize
from evaluator.wire.records import Correctness, Flag, FlagPolicy, ModeCheck, Status, Verdict
from harness.core.intervals import speedup_interval, verdict_interval
from harness.core.judged import judged
from harness.core.reward import FAILURES, RewardPolicy, reward


def times(median: float, spread: float, n: int = 40, seed: int = 0) -> list[float]:
    draw = random.Random(seed)
    return [median * (1 + spread * (draw.random() - 0.5)) for _ in range(n)]


def verdict(status: Status = Status.correct, candidate_ms: float = 1.0, eager_ms: float = 2.0, spread: float = 0.02,
            tiers: dict | None = None, flags: list[Flag] = (), samples: bool = True) -> Verdict:
    timing = summarize(times(candidate_ms, spread, seed=1), 3)
    eager = summarize(times(eager_ms, spread, seed=2), 3)
    if not samples:
        timing, eager = timing.model_copy(update={"samples_ms": []}), eager.model_copy(update={"samples_ms": []})
    correct = status == Status.correct
    check = ModeCheck(mode="train", trials=4, tiers=tiers or {"strict": correct, "loose": correct})
    return Verdict(candidate="c", problem="p", size="small", device="cpu", status=status, source_sha256="0" * 64,
                   error=None if correct else "why", runtime_ms=timing.median_ms if correct else None,
                   timing=timing if correct else None, baselines={"eager": eager} if correct else {},
                   speedup={"eager": eager.median_ms / timing.median_ms} if correct else {},
                   correctness=Correctness(tiers=check.tiers, main=check, distributions=["randn"], seeds=[1],
                                           buffers_checked=[]),
                   flags=list(flags))


FAILED = [Status.parse_error, Status.compile_error, Status.runtime_error, Status.timeout, Status.crashed,
          Status.incorrect, Status.rejected]


def test_the_interval_holds_the_point_estimate_and_narrows_with_less_noise():
    calm = speedup_interval(summarize(times(1.0, 0.02, seed=1), 3), summarize(times(2.0, 0.02, seed=2), 3))
    noisy = speedup_interval(summarize(times(1.0, 0.6, seed=1), 3), summarize(times(2.0, 0.6, seed=2), 3))
    assert calm[0] < 2.0 < calm[1] and noisy[0] < calm[0] and noisy[1] > calm[1]
    assert speedup_interval(summarize(times(1.0, 0.02, seed=1), 3), summarize(times(2.0, 0.02, seed=2), 3)) == calm
    assert speedup_interval(summarize([1.0, 1.1], 3), summarize(times(2.0, 0.02), 3)) is None  # too few figures
    assert speedup_interval(summarize([-0.01, 0.02, 0.01], 3), summarize(times(2.0, 0.02), 3)) is None
    # a baseline timed beside the candidate's windows (BaselineSource.paired): the pairs resampled together, so a move
    # both windows of a pair share (a CPU's memory, second to second) narrows the interval instead of widening it
    moving = [1.0 + 0.5 * (k % 3) for k in range(12)]
    ours, theirs = summarize([m * 1.0 for m in moving], 3), summarize([m * 2.0 * (1.01 if k % 2 else 0.99)
                                                                         for k, m in enumerate(moving)], 3)
    apart, together = speedup_interval(ours, theirs), speedup_interval(ours, theirs, paired=True)
    assert together[0] > 1.9 and together[1] < 2.1 and apart[1] - apart[0] > 4 * (together[1] - together[0])


def test_a_control_read_faster_in_one_round_is_not_significantly_faster_across_both():
    """A control as fast as eager, read 1.02x against its round's eager with an interval whose lower end is over 1,
    is not significantly faster once eager's median in the round after it is known 2% away, either way: each end
    moves out by ROUND_MOVE_ALLOWANCE times the move; a candidate twice as fast still is significantly faster; a
    steady eager leaves the interval as its figures make it; the reward of a verdict read before the next round has
    the figures' interval."""
    import math

    from evaluator.wire.records import BaselineSource
    from harness.core.intervals import ROUND_MOVE_ALLOWANCE

    def control(next_ms: float | None, candidate_ms: float = 0.98) -> Verdict:
        one = verdict(candidate_ms=candidate_ms, eager_ms=1.0, spread=0.01)
        after = {"eager": next_ms} if next_ms is not None else {}
        return one.model_copy(update={"baseline_source": BaselineSource(
            batch="b", round=0, measured_at=0.0, after_candidates=0, next_round_ms=after)})

    alone = verdict_interval(control(None), "eager")
    assert alone[0] > 1.0  # the figures alone: significantly faster
    median = control(None).baselines["eager"].median_ms
    for moved in (0.98, 1.02):
        across = verdict_interval(control(median * moved), "eager")
        allowance = math.exp(ROUND_MOVE_ALLOWANCE * abs(math.log(moved)))
        assert across[0] < 1.0 < across[1]
        assert across == pytest.approx((alone[0] / allowance, alone[1] * allowance))
    assert verdict_interval(control(median), "eager") == alone
    assert verdict_interval(control(median * 0.98, candidate_ms=0.5), "eager")[0] > 1.8
    assert reward(control(None)).speedup_low == alone[0]
    assert reward(control(median * 0.98)).speedup_low == verdict_interval(control(median * 0.98), "eager")[0]


def test_every_failure_is_below_any_correct_verdict_shaky_or_slow():
    lowest_correct = min(reward(verdict(candidate_ms=c, spread=s)).value for c in (1.0, 50.0, 1000.0) for s in (0.02, 1.5))
    lowest_correct = min(lowest_correct, reward(verdict(samples=False)).value)  # no interval: correctness alone
    for status in FAILED:
        assert reward(verdict(status)).value < lowest_correct, status
    assert reward(verdict(tiers={"strict": False, "loose": True}), RewardPolicy(tier="strict")).value < lowest_correct
    assert reward(verdict(flags=[Flag(name="timing_mismatch", reason="x", policy=FlagPolicy.reject)])).value < lowest_correct


def test_a_shaky_correct_verdict_earns_credit_and_noise_lowers_it_never_zeroes_it():
    shaky = [Flag(name="shaky_timing", reason="IQR 60% of the median")]
    clean, noisy = reward(verdict()), reward(verdict(spread=1.2, flags=shaky))
    assert noisy.outcome == "shaky" and RewardPolicy().correct <= noisy.value < clean.value
    assert noisy.speedup_low < clean.speedup_low < 2.0  # the lower end, never the point estimate


def test_a_shaky_verdict_whose_interval_says_faster_earns_no_more_than_1x():
    """A shaky verdict's interval is from within its round; the flag says its timing moved beyond that. Twice as fast
    by tight figures, flagged shaky: its lower end counts as 1x, no more; a shaky one slower than eager still earns
    less than one at 1x."""
    shaky = [Flag(name="shaky_timing", reason="baseline `eager` moved 45% from one round to the next")]
    fast = reward(verdict(flags=shaky))
    assert fast.outcome == "shaky" and fast.speedup_low == 1.0
    assert fast.value == pytest.approx(reward(verdict(eager_ms=1.0, spread=0.0)).value)  # a ranked 1x
    assert reward(verdict(candidate_ms=4.0, flags=shaky)).value < fast.value < reward(verdict()).value


def test_the_reward_rises_with_the_lower_end_and_never_with_the_point_estimate_alone():
    slow, even, fast = (reward(verdict(candidate_ms=c)).value for c in (8.0, 2.0, 0.25))
    assert slow < even < fast
    # the same median, wider spread: a lower end lower, so less reward
    assert reward(verdict(spread=0.8)).value < reward(verdict(spread=0.02)).value
    linear = RewardPolicy(term="linear", cap=4.0)
    assert reward(verdict(candidate_ms=8.0), linear).value < reward(verdict(candidate_ms=0.25), linear).value


def test_a_reject_flag_or_a_tier_below_never_beats_a_clean_verdict_with_the_same_times():
    clean = reward(verdict()).value
    rejected = reward(verdict(flags=[Flag(name="concurrency", reason="x", policy=FlagPolicy.reject)])).value
    below = reward(verdict(tiers={"strict": False, "loose": True}), RewardPolicy(tier="strict")).value
    assert rejected < clean and below < reward(verdict(), RewardPolicy(tier="strict")).value


def test_a_policy_whose_failures_are_not_below_its_credit_is_refused():
    with pytest.raises(ValueError, match="below the credit"):
        RewardPolicy(correct=0.1, failures={**FAILURES, "incorrect": 0.2})
    assert RewardPolicy(baseline="compile").baseline == "compile"


def test_the_library_verdict_carries_the_reward_and_the_intervals():
    out = judged(verdict())
    assert out.ranked and out.reward == reward(verdict()).value
    low, high = out.speedup_interval["eager"]
    assert low < out.speedup["eager"] < high
    assert judged(verdict(Status.compile_error)).reward == FAILURES["compile_error"]
    assert judged(out).reward == out.reward  # judged again: the same
