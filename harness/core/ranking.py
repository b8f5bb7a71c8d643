"""The leaderboard's rule: which verdicts are ranked, and in what order. Pure: nothing is read from a store.

- A speedup is the one the referee computed (`Verdict.speedup`): the candidate timed in its
  executor, the baseline by the referee in a round of the same batch on the same GPU, with the
  same timing loop (`Verdict.baseline_source` names the round). Nothing here divides numbers
  from two evaluations.
- Ranked: candidates whose verdict is `correct`, that pass the chosen tolerance tier
  (`--tier`, default `loose`), carry no `reject` flag nor an `implausible` or `shaky_timing` flag, and were
  judged by this harness's rules (`Verdict.judge`, see evaluator.wire.identity and harness.core.staleness: a
  verdict from an older evaluator or an edited problem is `stale` until it is judged again); ordered by
  speedup vs `eager` (fastest first; those without an eager speedup last, by runtime).
  Everything else is listed below, grouped by outcome (harness.core.outcomes), with its reason.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TypeVar

from evaluator.wire.records import Judge
from evaluator.wire.records import Flag, FlagPolicy, Status, Verdict
from harness.core.outcomes import Outcome
from harness.core.staleness import StalenessCheck
from harness.core.text import short_text

TIERS = ("strict", "loose")
SHAKY_FLAG = "shaky_timing"  # the referee's: a series or a baseline beyond the published bounds

# Anything with a `candidate_id: str` and a `verdict: Verdict | None` (e.g. harness.results.run_summary.SampleOutcome).
Judged = TypeVar("Judged")


def is_implausible(flag: Flag) -> bool:
    return flag.name.startswith("implausible")


def classify(verdict: Verdict, tier: str, stale: str | None = None) -> tuple[Outcome, str | None]:
    """(outcome, reason): `correct` only when rankable at `tier`; `stale` when `stale` says why the
    verdict's rules are not the current ones; `below_tier` when it is correct at a looser tier
    only; `rejected` for a reject or implausible flag (a correct verdict's, or the status `rejected`
    of one the static checks kept from running), the reason naming the flags; else the status."""
    if stale is not None:
        return Outcome.stale, stale
    if verdict.status not in (Status.correct, Status.rejected):
        return Outcome.of(verdict.status), short_text(verdict.error, None) or None
    blocking = [f for f in verdict.flags if f.policy == FlagPolicy.reject or is_implausible(f)]
    if blocking or verdict.status == Status.rejected:  # rejected statically (never run), or correct and rejected
        # whole: JSON, CSV and the report carry it as it is; the terminal's table cuts it (harness.results.render)
        return Outcome.rejected, ("; ".join(f"{f.name}: {short_text(f.reason, None)}" for f in blocking)
                                  or short_text(verdict.error, None) or None)
    tiers = verdict.correctness.tiers if verdict.correctness else {}
    passes = tiers.get(tier)
    if passes is None and tier in TIERS:  # the problem has no such tier: a stricter one it passes counts
        passes = any(tiers.get(t, False) for t in TIERS[:TIERS.index(tier)])
    if not passes:
        passed = [t for t, ok in tiers.items() if ok]
        err = verdict.correctness.max_abs_err if verdict.correctness else None
        detail = f" (max abs err {err:.2e})" if err is not None else ""
        return Outcome.below_tier, (f"passes {', '.join(passed) or 'no tier'}, not {tier}{detail}"
                                    if tier in tiers else f"no tier {tier!r} in this verdict, nor a stricter one passed")
    shaky = [f for f in verdict.flags if f.name == SHAKY_FLAG]
    if shaky:  # correct, but its speedup is not a number to rank (evaluator.referee.phases.shaky_timing)
        return Outcome.shaky, short_text(shaky[0].reason, None)
    return Outcome.correct, None


def speed_order(eager: float | None, runtime_ms: float | None, name: str) -> tuple:
    """The leaderboard's order as a sort key: fastest vs eager first, those without an eager speedup last
    (by runtime), then by name."""
    return (eager is None, -(eager or 0.0), runtime_ms if runtime_ms is not None else math.inf, name)


def rank_key(verdict: Verdict, name: str = "") -> tuple:
    """The leaderboard's order among rankable verdicts, as a sort key (smaller is better): speedup
    vs eager (fastest first; none last, by runtime), then `name` (the board uses the candidate's
    name, `<run-id>/<sample>`, which is its id in a generate run)."""
    return speed_order(verdict.speedup.get("eager"), verdict.runtime_ms, name)


def ranked(verdicts: Mapping[str, Verdict], tier: str = "loose", staleness: StalenessCheck | None = None) -> list[str]:
    """The leaderboard's rule over `verdicts` (name -> verdict, e.g. a run's candidate ids): the names
    of those it would rank at `tier` (correct at the tier, no reject or implausible flag, and current
    under `staleness` when given), best first. Pure: nothing is read from a store."""
    rankable = [name for name, v in verdicts.items()
                if classify(v, tier, staleness(v) if staleness is not None else None)[0] == Outcome.correct]
    return sorted(rankable, key=lambda name: rank_key(verdicts[name], name))


def ranked_outcomes(outcomes: Iterable[Judged], judge: Judge | None = None, tier: str = "loose") -> list[Judged]:
    """`ranked` over objects with a `candidate_id` and a `verdict` (None: not judged), such as the
    pipeline's sample outcomes: those the leaderboard would rank at `tier`, best first. With
    `judge`, a verdict judged by other rules is not ranked (it is stale)."""
    by_id = {o.candidate_id: o for o in outcomes if o.verdict is not None}
    staleness = None if judge is None else (lambda v: None if v.judge == judge else "judged by other rules")
    return [by_id[cid] for cid in ranked({cid: o.verdict for cid, o in by_id.items()}, tier, staleness)]
