"""Baselines stored from an earlier batch (RefereeConfig.cached_baselines): a round divides by them, and times
one baseline as a spot check. Which one is drawn at random among those that need no torch.compile (the compile
of a compiled baseline is most of what storing saves), so no candidate knows which will be checked; beyond the
drift bound every baseline is timed again, as without stored figures, for the rest of the batch. The bound is half
the rounds' (SHAKY_DRIFT): a stored figure can be off today's by at most that much and still stand, and every
speedup divided by it would be off as much, so it is kept tighter than the noise a round may show."""

from __future__ import annotations

import secrets

from evaluator.wire.records import SHAKY_DRIFT, TimingStats

STORED_DRIFT = SHAKY_DRIFT / 2  # 10%: how far a spot check may be from the stored figure


def spot_checked(names: list[str]) -> str:
    """The baseline a round re-times: one of those without torch.compile, else any."""
    cheap = [n for n in names if not n.startswith("compile")] or list(names)
    return cheap[secrets.randbelow(len(cheap))]


def spot_check(name: str, measured: TimingStats, stored: TimingStats, note: str) -> tuple[bool, str]:
    """(whether the stored figures stand, what the verdicts say of them)."""
    moved = measured.median_ms / stored.median_ms - 1 if stored.median_ms > 0 else float("inf")
    said = (f"stored figures ({note}); `{name}` re-timed in this round at {measured.median_ms:.4g} ms against "
            f"{stored.median_ms:.4g} stored ({moved:+.0%}, bound {STORED_DRIFT:.0%})")
    if abs(moved) <= STORED_DRIFT:
        return True, said
    return False, f"{said}: beyond the bound, so every baseline is timed in this batch from this round on"
