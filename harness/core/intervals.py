"""A speedup's 95% interval, from the per-call figures of the candidate and of its baseline (`TimingStats.samples_ms`):
a percentile bootstrap of the ratio of their medians, each side resampled on its own (its windows are the units).
One function for every reader: the reward (harness.core.reward), the verdicts the library and the service return,
the boards.

The seed is the figures' own (a hash of them), so the same verdict always gets the same interval."""

from __future__ import annotations

import hashlib

import numpy as np

from evaluator.wire.records import TimingStats, Verdict

LEVEL = 0.95
DRAWS = 2000
MIN_SAMPLES = 3  # fewer figures than this on either side: no interval


def speedup_interval(candidate: TimingStats | None, baseline: TimingStats | None,
                     level: float = LEVEL) -> tuple[float, float] | None:
    """(low, high) of baseline median / candidate median at `level`, or None where either side has too few figures
    (or any figure at or under zero: a median so close to the clock's floor is no number to divide by)."""
    if candidate is None or baseline is None:
        return None
    ours, theirs = np.asarray(candidate.samples_ms, float), np.asarray(baseline.samples_ms, float)
    if len(ours) < MIN_SAMPLES or len(theirs) < MIN_SAMPLES or (ours <= 0).any() or (theirs <= 0).any():
        return None
    seed = int.from_bytes(hashlib.sha256(ours.tobytes() + theirs.tobytes()).digest()[:8], "little")
    draw = np.random.default_rng(seed)
    ours_medians = np.median(draw.choice(ours, (DRAWS, len(ours))), axis=1)
    theirs_medians = np.median(draw.choice(theirs, (DRAWS, len(theirs))), axis=1)
    ratios = theirs_medians / ours_medians
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(low), float(high)


def verdict_intervals(verdict: Verdict) -> dict[str, tuple[float, float]]:
    """Each baseline the verdict's speedups divide by, with its speedup's interval (those that have one)."""
    found = {}
    for name in verdict.speedup:
        interval = speedup_interval(verdict.timing, verdict.baselines.get(name))
        if interval is not None:
            found[name] = interval
    return found
