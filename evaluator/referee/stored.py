"""Baselines stored from an earlier batch (RefereeConfig.cached_baselines): a round divides by them, and times
one baseline as a spot check. Which one is drawn at random among those that need no torch.compile (the compile
of a compiled baseline is most of what storing saves), so no candidate knows which will be checked; beyond the
drift bound every baseline is timed again in that round, and the round's figures stand in for the stored ones for the
rest of the batch, spot-checked alike (`adopt_round`). The bound is half the rounds' (SHAKY_DRIFT): a stored figure
can be off today's by at most that much and still stand, and every speedup divided by it would be off as much, so it
is kept tighter than the noise a round may show."""

from __future__ import annotations

import secrets

from evaluator.referee import baselines, twin
from evaluator.wire.records import SHAKY_DRIFT, SHAKY_SPREAD, TimingStats

STORED_DRIFT = SHAKY_DRIFT / 2  # 10%: how far a spot check may be from the stored figure


def spot_checked(names: list[str], first_round: bool = False) -> list[str]:
    """The baselines a round re-times: one of those without torch.compile (else any); on a batch's first round
    one compiled baseline too, so that no stored compile figure stands unchecked (it costs that one compile)."""
    cheap = [n for n in names if not n.startswith("compile")] or list(names)
    chosen = [cheap[secrets.randbelow(len(cheap))]]
    compiled = [n for n in names if n.startswith("compile") and n not in chosen]
    if first_round and compiled:
        chosen.append(compiled[secrets.randbelow(len(compiled))])
    return chosen


def spot_check(name: str, measured: TimingStats, stored: TimingStats, note: str) -> tuple[bool, str]:
    """(whether the stored figures stand, what the verdicts say of them): within the drift bound, and the spot
    check itself within the spread bound (a noisy re-timing proves nothing either way)."""
    moved = measured.median_ms / stored.median_ms - 1 if stored.median_ms > 0 else float("inf")
    spread = measured.iqr_ms / measured.median_ms if measured.median_ms > 0 else float("inf")
    said = (f"stored figures ({note}); `{name}` re-timed in this round at {measured.median_ms:.4g} ms against "
            f"{stored.median_ms:.4g} stored ({moved:+.0%}, bound {STORED_DRIFT:.0%})")
    if abs(moved) <= STORED_DRIFT and spread <= SHAKY_SPREAD:
        return True, said
    why = "beyond the bound" if abs(moved) > STORED_DRIFT else f"its spread {spread:.0%} beyond {SHAKY_SPREAD:.0%}"
    return False, f"{said}: {why}, so every baseline is timed again in this round"


def standing_names(referee) -> list[str] | None:
    """The baselines whose stored figures a round of `referee` would divide by (all but the twin's); None where every
    baseline is to be timed: nothing stored for one of them, or the figures dropped (`referee.cache_dropped`)."""
    stored, config = referee.config.cached_baselines, referee.config
    # eager judged as a candidate is timed in every round, never read (evaluator.referee.twin)
    names = [n for n in config.baselines if referee.twin is None or n != twin.TIMED]
    if not stored or referee.cache_dropped or not names or not set(names) <= set(stored):
        return None
    if any(stored[name].handed_off != referee.handed_off for name in names):
        referee.cache_dropped = referee.cached_said = "stored figures dropped: timed otherwise than this batch's calls"
        return None
    return names


def planned(referee) -> list[str] | None:
    """The coming round's spot checks (spot_checked), drawn once, in the referee, and kept until that round times
    them (stored_figures); None where stored figures would not stand in for it. Drawn before the round so that a
    batch's first round warms and compiles only these, before its exclusive turn (warm_spot_checks)."""
    names = standing_names(referee)
    if names is None:
        referee.spot_plan = None
    elif referee.spot_plan is None:
        referee.spot_plan = spot_checked(names, first_round=not referee.rounds)
    return referee.spot_plan


def warm_spot_checks(referee) -> None:
    """Before a batch's first round takes its exclusive turn, where stored figures stand: the baselines its spot checks
    will time run untimed (Referee.warm_baselines), a compiled one first (its torch.compile, seconds, overlaps the
    calibrator's start and the twin's import, where it sat in the turn with every executor held), the others after, so
    that each is still fresh when timed; no other baseline runs before the round. A compiled one with a candidate's
    executor alive beside it compiles in the turn as before (baselines.may_compile). Where each series warms the
    device's clocks itself (baselines.CLOCK_WARM_S, a GPU's), the warm-up's calls alone, as before any later round's
    spot check: their first calls and the compile, not FIRST_ROUND_WARM_S of calls (a second of a batch's first
    verdict on an H200, a spot check of each kind)."""
    if referee.rounds:
        return
    compiles = baselines.may_compile(referee)
    checks = sorted(planned(referee) or [], key=lambda name: not name.startswith("compile"))
    warmed = [name for name in checks if compiles or not name.startswith("compile")]
    if warmed:
        referee.warm_baselines(only=warmed, seconds=0.0 if baselines.CLOCK_WARM_S[referee.device] else None)


def stored_figures(referee) -> dict[str, TimingStats] | None:
    """The stored figures (RefereeConfig.cached_baselines) where they stand for `referee` (evaluator.referee.referee
    .Referee): its spot checks (`planned`) each within the bounds. None: every baseline is to be timed (once a spot
    check failed, until a round timed whole stands in: `referee.cache_dropped` says why)."""
    import torch

    stored, config = referee.config.cached_baselines, referee.config
    checks, referee.spot_plan = planned(referee), None
    if checks is None:
        return None
    said: list[str] = []
    for name in checks:
        try:
            referee.run_untimed(name, calls=referee.timer.warmup, seconds=referee.warm_seconds(name) if not referee.rounds else 0.0)
            measured = referee.time_baseline(name)
        except Exception as err:
            referee.cache_dropped = referee.cached_said = f"stored figures dropped: `{name}` failed ({err})"[:300]
            return None
        finally:
            torch.set_float32_matmul_precision("highest")
        stands, line = spot_check(name, measured, stored[name], config.cached_note)
        said.append(line if not said else line.split("; ", 1)[1])
        if not stands:
            referee.cache_dropped = referee.cached_said = "; ".join(said)
            referee.spot_check_read = {name: measured}  # what `adopt_round` holds the round's own figure to
            return None
    referee.cached_said = "; ".join(said)
    return {n: stored[n] for n in standing_names(referee)}


def adopt_round(referee, baselines: dict[str, TimingStats], failed: dict, busy: str | None, index: int) -> None:
    """After a round that timed every baseline because a spot check dropped the stored figures: its figures stand in
    for them in later rounds of the batch, spot-checked as stored ones are. A GPU's clocks follow its recent work (a
    TF32 GEMM read 1.36-1.60 ms on one H200 by how long it had idled: docs/results.md), so a batch whose work differs
    from the one that stored the figures can find them off; timing every baseline in every later round (seconds a
    round, not tenths) would read today's figures no better than one full round checked each round. Only a round
    timed whole on an idle device stands in, each baseline within the spread bound, and the spot-checked one within
    STORED_DRIFT of what its spot check read moments before (else the device moved within the round: every later
    round times every baseline, as before)."""
    if (not referee.cache_dropped or failed or busy or not baselines
            or any(s.median_ms <= 0 or s.iqr_ms / s.median_ms > SHAKY_SPREAD for s in baselines.values())):
        return
    if any(name not in baselines or abs(baselines[name].median_ms / spot.median_ms - 1) > STORED_DRIFT
           for name, spot in referee.spot_check_read.items()):
        return
    referee.config.cached_baselines = dict(baselines)
    referee.config.cached_note = f"timed in this batch's round {index}, after the stored ones were dropped"
    referee.cache_dropped = None
