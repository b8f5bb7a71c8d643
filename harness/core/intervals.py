"""A speedup's 95% interval, from the per-call figures of the candidate and of its baseline (`TimingStats.samples_ms`):
a percentile bootstrap of the ratio of their medians, each side resampled on its own (its windows are the units).
One function for every reader: the reward (harness.core.reward), the verdicts the library and the service return,
the boards.

Once the batch is over, a verdict also holds its baselines' medians in the round after it
(`BaselineSource.next_round_ms`), and its interval is widened by how far they moved. The per-call figures
show only how a median varies within one series; what moves between series (the device's clocks, one executor's
memory against another's) they cannot show, and at calls of tens of microseconds it is the larger error: on an H200
the reference judged as a candidate read 1.16x eager at fp16 matmul, [1.08-1.29] from its figures alone, and 1.09x
at fp32 LayerNorm, [1.08-1.09]. Eager is judged
in each round by an executor of its own, so the move between two rounds measures that error where it happens, and
each end of the interval moves out by a 95% allowance made from it (ROUND_MOVE_ALLOWANCE). A verdict read before its
batch's next round (a warm Judge's reward) has the figures' interval alone.

The seed is the figures' own (a hash of them), so the same verdict always gets the same interval."""

from __future__ import annotations

import hashlib
import math

import numpy as np

from evaluator.wire.records import TimingStats, Verdict

LEVEL = 0.95
DRAWS = 2000
MIN_SAMPLES = 3  # fewer figures than this on either side: no interval


def _figures(stats: TimingStats | None) -> np.ndarray | None:
    """A side's per-call figures, or None where they are too few (or any at or under zero: a median so close to the
    clock's floor is no number to divide by)."""
    figures = np.asarray(stats.samples_ms if stats is not None else [], float)
    return figures if len(figures) >= MIN_SAMPLES and not (figures <= 0).any() else None


def _medians(draw: np.random.Generator, figures: np.ndarray) -> np.ndarray:
    """DRAWS medians of the figures resampled with replacement."""
    return np.median(draw.choice(figures, (DRAWS, len(figures))), axis=1)


def _ends(values: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


def _seeded(*sides: np.ndarray) -> np.random.Generator:
    """A generator seeded by the figures themselves: the same verdict, the same interval."""
    digest = hashlib.sha256(b"".join(side.tobytes() for side in sides)).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def speedup_interval(candidate: TimingStats | None, baseline: TimingStats | None,
                     level: float = LEVEL, paired: bool = False) -> tuple[float, float] | None:
    """(low, high) of baseline median / candidate median at `level`, or None where either side has too few figures.
    `paired`: the baseline was timed beside the candidate's windows, a window of its after each of the candidate's
    (`BaselineSource.paired`): the pairs are resampled together, so what moved both windows of a pair alike (a CPU's
    memory) moves both medians of a draw alike."""
    ours, theirs = _figures(candidate), _figures(baseline)
    if ours is None or theirs is None:
        return None
    draw = _seeded(ours, theirs)
    if paired and len(ours) == len(theirs):
        pick = draw.integers(0, len(ours), (DRAWS, len(ours)))
        return _ends(np.median(theirs[pick], axis=1) / np.median(ours[pick], axis=1), level)
    ours_medians = _medians(draw, ours)
    return _ends(_medians(draw, theirs) / ours_medians, level)


def median_interval(stats: TimingStats | None, level: float = LEVEL) -> tuple[float, float] | None:
    """(low, high) of a series' median per call at `level`, or None where it has too few figures."""
    figures = _figures(stats)
    return _ends(_medians(_seeded(figures), figures), level) if figures is not None else None


# The move of eager's median from one round to the next is one draw of the difference between two executors' figures
# of the same code, |X - Y| with X and Y each N(0, s^2) about the truth: its mean is 2s/sqrt(pi). A candidate's figure
# against eager's differs by N(0, 2s^2) on that account, whose 95% half-width 1.96 * sqrt(2) * s is about 2.46 times
# that mean. So each end moves out by 2.46 times the move (in logs), both ways.
ROUND_MOVE_ALLOWANCE = 1.96 * math.sqrt(2) * math.sqrt(math.pi) / 2


def across_rounds(interval: tuple[float, float], baseline: TimingStats | None,
                  next_ms: float | None) -> tuple[float, float]:
    """`interval` widened, both ways, by what the baseline's move to the next round (`next_ms`) says of the error
    between one executor's figure and another's (ROUND_MOVE_ALLOWANCE)."""
    if baseline is None or next_ms is None or not baseline.median_ms or next_ms <= 0:
        return interval
    allowance = math.exp(ROUND_MOVE_ALLOWANCE * abs(math.log(next_ms / baseline.median_ms)))
    low, high = interval
    return low / allowance, high * allowance


def verdict_interval(verdict: Verdict, name: str) -> tuple[float, float] | None:
    """The 95% interval of the verdict's speedup over baseline `name`, across both rounds where the round after it
    is known; None where it has no speedup over `name` or too few figures."""
    if name not in verdict.speedup:
        return None
    baseline = verdict.baselines.get(name)
    paired = verdict.baseline_source is not None and name in verdict.baseline_source.paired
    interval = speedup_interval(verdict.timing, baseline, paired=paired)
    if interval is None:
        return None
    next_ms = verdict.baseline_source.next_round_ms.get(name) if verdict.baseline_source is not None else None
    return across_rounds(interval, baseline, next_ms)


def verdict_intervals(verdict: Verdict) -> dict[str, tuple[float, float]]:
    """Each baseline the verdict's speedups divide by, with its speedup's interval (those that have one)."""
    return {name: interval for name in verdict.speedup if (interval := verdict_interval(verdict, name)) is not None}
