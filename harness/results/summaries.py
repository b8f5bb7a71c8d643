"""The summary rows of a board: metrics per model x prompt variant (and overall, golden kernels
excluded), per refinement turn, and per chain of turns.

Summary metrics per model x prompt variant: outcome counts, `fast_p` (KernelBench: the share of ALL
samples that are correct and faster than p times the baseline), the geometric mean and the best speedup
over correct samples, and what the requests cost (from the generations table, harness.generation.spend): requests,
tokens (prompt, completion, reasoning), tokens per sample and per correct candidate (correct@tier),
request latency, and with prices (`[prices.MODEL]` in harness.toml, else those stored with the run) the
cost and the cost per correct candidate. Every request counts: a sample's own and the extra requests that
salvaged its reply when the token limit cut it off (harness.generation.salvage). A sample is a requested generation:
samples whose request failed (`no_reply`) or that were not evaluated (`not_evaluated`) count in the
denominator too.

Refinement turns: each model x variant with a candidate of turn > 1 gets one summary row per turn (the
same metrics over the samples asked for at that turn: fast_p's denominator is that turn's requests), one
row per chain (its best ranked candidate by the leaderboard's order, whether it was rescued: its
first-turn candidate is not ranked but a later one is, and the tokens and request latency of all its
turns), and the count of chains and rescued chains in its summary row. Every turn's candidates are also
ordinary samples of the run's summary row (whose fast_p is over all of them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from harness.core.outcomes import Outcome
from harness.core.records import Generation, Run, SalvageOutcome
from harness.generation.sample_paths import sample_path_key
from harness.generation.spend import Prices
from harness.results.board import FAST_P, FAST_P_BASELINES, ChainRow, Entry, SummaryRow


def fast_p(samples: Sequence[tuple[bool, float | None]], p: float) -> float | None:
    """KernelBench's fast_p: the share of ALL `samples` (correct, speedup) that are correct and
    have speedup > p. None for no samples."""
    if not samples:
        return None
    return sum(1 for ok, s in samples if ok and s is not None and s > p) / len(samples)


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of positive values (None for none)."""
    values = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def timed_baselines(entries: Iterable[Entry]) -> set[str]:
    """Baselines timed in any of these entries' evaluations."""
    return {b for e in entries if e.verdict is not None for b in e.verdict.baselines}


def summarize(entries: Sequence[Entry], model: str, variant: str, runs: Sequence[Run] = (),
              generations: dict[str, list] | None = None, reference: bool = False,
              timed: set[str] | None = None, prices: Mapping[str, Prices] | None = None) -> SummaryRow:
    """Summary metrics over candidate entries (see the module docstring). `timed`: the
    baselines timed on this GPU (fast_p vs a baseline never timed there is None, not 0).
    `generations` and `prices` are by run id: what each run asked for, and its prices."""
    counts: dict[str, int] = {}
    for e in entries:
        counts[e.status] = counts.get(e.status, 0) + 1
    for outcome in Outcome:
        if outcome.counted:
            counts.setdefault(outcome.value, 0)
    fast: dict[str, dict[str, float | None]] = {}
    geo: dict[str, float | None] = {}
    best: dict[str, float | None] = {}
    ranked = [e for e in entries if e.outcome == Outcome.correct]
    for b in FAST_P_BASELINES:
        measured = b in (timed if timed is not None else timed_baselines(entries))
        pairs = [(e.outcome == Outcome.correct, e.speedup.get(b)) for e in entries]
        fast[b] = {f"fast_{p:g}": (fast_p(pairs, p) if measured else None) for p in FAST_P}
        values = [e.speedup[b] for e in ranked if b in e.speedup]
        geo[b] = geomean(values)
        best[b] = max(values) if values else None
    row = SummaryRow(model=model, variant=variant, samples=len(entries), counts=counts, ranked=len(ranked),
                     below_tier=sum(e.outcome == Outcome.below_tier for e in entries),
                     rejected=sum(e.outcome == Outcome.rejected for e in entries), fast_p=fast, geomean=geo,
                     best=best, reference=reference,
                     cut_off=sum(e.salvage is not None for e in entries),
                     salvaged=sum(e.salvage is not None and e.salvage.outcome == SalvageOutcome.salvaged
                                  for e in entries))
    for run in runs:
        add_spend(row, (generations or {}).get(run.id, []), (prices or {}).get(run.id))
    return row


def add_spend(row: SummaryRow | ChainRow, generations: Iterable[Generation], prices: Prices | None = None) -> None:
    """Add the requests, tokens, request latency and cost of `generations` to `row`."""
    row.spend.add_all(generations, prices)


def chain_rows(entries: Sequence[Entry], model: str, variant: str,
               generations: dict[str, list[Generation]] | None = None,
               prices: Mapping[str, Prices] | None = None) -> list[ChainRow]:
    """One row per chain of the runs among `entries` that have a candidate of turn > 1: its
    candidates, its best ranked one, and what its requests (every turn's) cost."""
    multi = {e.run_id for e in entries if e.turn > 1}
    by_chain: dict[tuple[str, str], list[Entry]] = {}
    for e in entries:
        if e.run_id in multi and e.chain is not None:
            by_chain.setdefault((e.run_id, e.chain), []).append(e)
    rows = []
    for (run_id, chain), members in sorted(by_chain.items(), key=lambda kv: (kv[0][0], sample_path_key(kv[0][1]))):
        members.sort(key=lambda e: (e.turn, sample_path_key(e.sample or "")))
        good = [e for e in members if e.outcome == Outcome.correct]
        row = ChainRow(run_id=run_id, chain=chain, model=model, variant=variant, entries=members,
                       best=min(good, key=lambda e: e.rank_key) if good else None)
        add_spend(row, (g for g in (generations or {}).get(run_id, []) if str(g.sample_index) == chain),
                  (prices or {}).get(run_id))
        rows.append(row)
    return rows


def turn_rows(entries: Sequence[Entry], model: str, variant: str, runs: Sequence[Run],
              generations: dict[str, list[Generation]] | None, timed: set[str] | None,
              prices: Mapping[str, Prices] | None = None) -> list[SummaryRow]:
    """One summary row per turn of `entries` (when some is of turn > 1): the metrics over the samples
    asked for at that turn (fast_p's denominator), the tokens and latency of that turn's requests."""
    turns = sorted({e.turn for e in entries})
    if not turns or turns[-1] == 1:
        return []
    rows = []
    for turn in turns:
        of_turn = {run_id: [g for g in gens if g.turn == turn] for run_id, gens in (generations or {}).items()}
        row = summarize([e for e in entries if e.turn == turn], model, variant, runs, of_turn, timed=timed,
                        prices=prices)
        row.turn = turn
        rows.append(row)
    return rows
