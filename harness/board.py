"""The leaderboard as data: boards built from the result store, and the metrics over them.

Pure functions of what the store holds (no printing; `harness.render` and `harness.report`
draw them). Reading rules (what makes a ranking honest):

- Rows from different GPUs are never mixed: one board per `environment.device_name` (the
  store's key column when a verdict has no environment, e.g. a parse error).
- A speedup is the one the referee computed (`Verdict.speedup`): the candidate timed in its
  executor, the baseline by the referee in a round of the same batch on the same GPU, with the
  same timing loop (`Verdict.baseline_source` names the round). Nothing here divides numbers
  from two evaluations.
- Ranked: candidates whose verdict is `correct`, that pass the chosen tolerance tier
  (`--tier`, default `loose`), carry no `reject` flag nor an `implausible` flag, and were
  judged by this harness's rules (`Verdict.judge`, see evaluator.wire.identity: a verdict from an
  older evaluator or an edited problem is `stale` until it is judged again); ordered by
  speedup vs `eager` (fastest first; those without an eager speedup last, by runtime).
  Everything else is listed below, grouped by outcome (harness.outcomes), with its reason.
- Reference rows sit beside the ranking: each baseline (median of its medians over the same
  evaluations, and its speedup vs `eager` etc. computed inside each evaluation, then the
  median), and the golden kernels (runs of mode `golden`).

Summary metrics per model x prompt variant (and overall, golden kernels excluded):
outcome counts, `fast_p` (KernelBench: the share of ALL samples that are correct and faster
than p times the baseline), the geometric mean and the best speedup over correct samples,
and what the requests cost (from the generations table, harness.spend): requests, tokens
(prompt, completion, reasoning), tokens per sample and per correct candidate (correct@tier),
request latency, and with prices (`[prices.MODEL]` in harness.toml, else those stored with the
run) the cost and the cost per correct candidate. Every request counts: a sample's own and the
extra requests that salvaged its reply when the token limit cut it off (harness.salvage); each
row of a candidate carries its own sample's spend, and what salvage did (`salvage`). A sample is a
requested generation: samples whose request failed (`no_reply`) or that were not evaluated
(`not_evaluated`) count in the denominator too.

Refinement turns (`harness run --turns T`): a candidate of turn t >= 2 refines its `parent`
(sample `0/2/3`: sample 0, refined at turn 2, then at turn 3); the first-turn sample it
descends from is its chain. When a board holds a candidate of turn > 1, and only then, its
rows show the turn and the parent, and each model x variant with such candidates gets: one
summary row per turn (the same metrics over the samples asked for at that turn: fast_p's
denominator is that turn's requests), one row per chain (its best ranked candidate by the
leaderboard's order, whether it was rescued: its first-turn candidate is not ranked but a
later one is, and the tokens and request latency of all its turns), and the count of chains
and rescued chains in its summary row. Every turn's candidates are also ordinary samples of
the run's summary row (whose fast_p is over all of them).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from evaluator.wire.identity import Judge
from evaluator.wire.records import Flag, FlagPolicy, Status, Verdict
from harness.config import TokenPrices
from harness.outcomes import Outcome
from harness.records import Candidate, Generation, Run, Salvage, SalvageOutcome
from harness.spend import Prices, Spend
from harness.store import NO_MODEL, Store, VerdictRow
from harness.text import short_text

TIERS = ("strict", "loose")
SPEEDUP_BASELINES = ("eager", "compile", "eager_tf32", "compile_tf32")  # the columns, in this order
FAST_P = (0.0, 1.0, 1.5, 2.0)
FAST_P_BASELINES = ("eager", "compile")

# Whether a verdict was judged by the current rules: (verdict) -> None when it was, else why not.
StalenessCheck = Callable[[Verdict], "str | None"]
# Anything with a `candidate_id: str` and a `verdict: Verdict | None` (e.g. pipeline.SampleOutcome).
Judged = TypeVar("Judged")


# -- pure metrics ---------------------------------------------------------------------------------

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
        return Outcome.of(verdict.status), short_text(verdict.error) or None
    blocking = [f for f in verdict.flags if f.policy == FlagPolicy.reject or is_implausible(f)]
    if blocking or verdict.status == Status.rejected:  # rejected statically (never run), or correct and rejected
        return Outcome.rejected, ("; ".join(f"{f.name}: {short_text(f.reason, 80)}" for f in blocking)
                                  or short_text(verdict.error) or None)
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
    return Outcome.correct, None


# -- the entries ----------------------------------------------------------------------------------

@dataclass
class Entry:
    """One row of a board: a candidate, a golden kernel or a baseline."""

    kind: str                     # candidate | golden | baseline
    name: str                     # run/sample, golden/..., baseline/<name>
    gpu: str
    problem: str
    size: str
    status: str                   # the verdict's status (`no_reply`, `not_evaluated` without one; `baseline`)
    outcome: Outcome
    reason: str | None = None
    run_id: str | None = None
    sample: str | None = None
    candidate_id: str | None = None
    model: str | None = None
    variant: str | None = None
    rank: int | None = None
    tiers: list[str] = field(default_factory=list)
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    runtime_ms: float | None = None
    speedup: dict[str, float] = field(default_factory=dict)
    flags: list[Flag] = field(default_factory=list)
    evaluations: int | None = None  # baselines: how many evaluations the medians are over
    verdict: Verdict | None = None
    verdict_key: str | None = None
    source_sha256: str | None = None
    created: str | None = None
    turn: int = 1                 # refinement turn that produced it (1: the first reply)
    parent: str | None = None     # id of the candidate it refines (turns >= 2)
    spend: Spend | None = None    # its sample's requests (salvage included); None for golden kernels, baselines
    salvage: Salvage | None = None  # what was done about its reply, cut off by the token limit

    @property
    def salvage_text(self) -> str | None:
        """`truncated -> salvaged by continue after 2 extra requests`, or None."""
        if self.salvage is None:
            return None
        before = self.salvage.before.reason.value if self.salvage.before.reason else "cut off"
        return f"{before} → {self.salvage.note}"

    @property
    def salvage_short(self) -> str | None:
        """`salvaged (continue ×2)`: how salvage ended, by which strategy, in how many extra requests."""
        if self.salvage is None:
            return None
        outcome = self.salvage.outcome.value.replace("_", " ").replace("no code", "ended without code")
        return f"{outcome} ({self.salvage.strategy.value} ×{self.salvage.requests})"

    @property
    def chain(self) -> str | None:
        """The first-turn sample its chain of turns starts from (`0` for `0/2/3`; its own sample on turn 1)."""
        if self.sample is None or self.turn == 1:
            return self.sample
        return self.sample.split("/", 1)[0]

    @property
    def parent_sample(self) -> str | None:
        """The parent's sample within the run (`0/2`), or its id when it is in another run."""
        if self.parent is None:
            return None
        prefix = f"{self.run_id}/"
        return self.parent[len(prefix):] if self.run_id and self.parent.startswith(prefix) else self.parent

    @property
    def section(self) -> str:
        if self.kind in ("golden", "baseline"):
            return "reference"
        return "ranked" if self.rank is not None else "unranked"

    @property
    def shown_status(self) -> str:
        """The status column: the board's own outcome where it overrides the verdict's status."""
        return self.outcome.value if self.outcome in (Outcome.below_tier, Outcome.rejected, Outcome.stale) \
            else self.status

    def to_dict(self, turns: bool = False) -> dict[str, Any]:
        """The row as JSON; `turns` adds its turn, parent and chain (boards with refinement turns)."""
        lineage = {"turn": self.turn, "parent": self.parent, "chain": self.chain} if turns else {}
        return {
            "section": self.section, "rank": self.rank, "kind": self.kind, "candidate": self.name, "gpu": self.gpu,
            **lineage,
            "run_id": self.run_id, "sample": self.sample, "candidate_id": self.candidate_id, "model": self.model,
            "variant": self.variant, "problem": self.problem, "size": self.size, "status": self.status,
            "outcome": self.outcome.value, "tiers": self.tiers, "max_abs_err": self.max_abs_err,
            "max_rel_err": self.max_rel_err, "runtime_ms": self.runtime_ms,
            **{f"speedup_{b}": self.speedup.get(b) for b in SPEEDUP_BASELINES},
            "speedup": dict(self.speedup),
            "flags": [f.model_dump(mode="json") for f in self.flags], "reason": self.reason,
            "evaluations": self.evaluations, "verdict_key": self.verdict_key, "source_sha256": self.source_sha256,
            "created": self.created, "spend": self.spend.to_dict() if self.spend is not None else None,
            "salvage": self.salvage.model_dump(mode="json") if self.salvage is not None else None,
        }


@dataclass
class SummaryRow:
    """Metrics of one model x variant (or `all`) on one GPU."""

    model: str
    variant: str
    samples: int
    counts: dict[str, int]            # by verdict status, plus no_reply / not_evaluated
    ranked: int                       # correct at the tier, not rejected: the `correct` of fast_p
    below_tier: int
    rejected: int
    fast_p: dict[str, dict[str, float | None]]   # baseline -> "fast_<p>" -> share
    geomean: dict[str, float | None]             # baseline -> geometric mean over ranked samples
    best: dict[str, float | None]                # baseline -> best speedup among ranked samples
    spend: Spend = field(default_factory=Spend)  # the requests of its runs' samples (salvage included)
    reference: bool = False            # golden kernels: not part of `all`
    turn: int | None = None            # a row of one refinement turn's samples (None: all turns)
    chains: int | None = None          # chains of refinement turns (None: no candidate of turn > 1)
    rescued: int | None = None         # chains whose first turn is not ranked and a later turn is
    cut_off: int = 0                   # samples whose reply the token limit cut off without usable code...
    salvaged: int = 0                  # ...and of those, salvaged into a usable one

    requests = property(lambda self: self.spend.requests)
    prompt_tokens = property(lambda self: self.spend.prompt_tokens)
    completion_tokens = property(lambda self: self.spend.completion_tokens)
    total_tokens = property(lambda self: self.spend.total_tokens)
    latency_s = property(lambda self: self.spend.latency_s)

    @property
    def tokens_per_sample(self) -> float | None:
        return self.spend.tokens_per(self.samples)

    @property
    def tokens_per_correct(self) -> float | None:
        """Tokens spent per candidate correct at the tier (None when none is)."""
        return self.spend.tokens_per(self.ranked)

    @property
    def cost_per_correct(self) -> float | None:
        return self.spend.cost_per(self.ranked)

    def to_dict(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"turn": self.turn} if self.turn is not None else {}
        if self.chains is not None:
            extra.update(chains=self.chains, rescued_chains=self.rescued)
        return {
            "model": self.model, "variant": self.variant, **extra, "samples": self.samples, "counts": self.counts,
            "correct_at_tier": self.ranked, "below_tier": self.below_tier, "rejected": self.rejected,
            "fast_p": self.fast_p, "geomean_speedup": self.geomean, "best_speedup": self.best,
            "requests": self.requests, "salvage_requests": self.spend.salvage_requests,
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
            "reasoning_tokens": self.spend.reasoning_tokens, "total_tokens": self.total_tokens,
            "tokens_per_sample": self.tokens_per_sample, "tokens_per_correct": self.tokens_per_correct,
            "cost_usd": self.spend.cost, "cost_per_correct_usd": self.cost_per_correct,
            "cut_off": self.cut_off, "salvaged": self.salvaged,
            "latency_s": round(self.latency_s, 3), "reference": self.reference,
        }


@dataclass
class ChainRow:
    """One chain of refinement turns: a run's first-turn sample and every candidate refined from it."""

    run_id: str
    chain: str                        # the first-turn sample (`0`)
    model: str
    variant: str
    entries: list[Entry]              # by turn, then name
    best: Entry | None                # the best ranked candidate (the leaderboard's order); None when none is
    spend: Spend = field(default_factory=Spend)   # the requests of all its turns (salvage included)

    requests = property(lambda self: self.spend.requests)
    prompt_tokens = property(lambda self: self.spend.prompt_tokens)
    completion_tokens = property(lambda self: self.spend.completion_tokens)
    total_tokens = property(lambda self: self.spend.total_tokens)
    latency_s = property(lambda self: self.spend.latency_s)

    @property
    def first(self) -> Entry | None:
        """The first turn's candidate."""
        return next((e for e in self.entries if e.turn == 1), None)

    @property
    def turns(self) -> int:
        """The last turn asked for."""
        return max(e.turn for e in self.entries)

    @property
    def rescued(self) -> bool:
        """Its first turn is not ranked, a later one is."""
        first = self.first
        return self.best is not None and (first is None or first.outcome != Outcome.correct)

    def to_dict(self) -> dict[str, Any]:
        first, best = self.first, self.best
        return {
            "run_id": self.run_id, "chain": self.chain, "model": self.model, "variant": self.variant,
            "samples": len(self.entries), "turns": self.turns, "first_outcome": first.outcome.value if first else None,
            "best": best.name if best else None, "best_turn": best.turn if best else None,
            "best_speedup": dict(best.speedup) if best else None, "rescued": self.rescued,
            "candidates": [e.name for e in self.entries], "requests": self.requests,
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens, "cost_usd": self.spend.cost, "latency_s": round(self.latency_s, 3),
        }


@dataclass
class Board:
    """Everything measured on one GPU for one problem at one size: speedups of different problems or
    sizes are never ranked or summarized together."""

    gpu: str
    tier: str
    problem: str = ""
    size: str = ""
    references: list[Entry] = field(default_factory=list)   # baselines, then golden kernels
    ranked: list[Entry] = field(default_factory=list)
    unranked: list[Entry] = field(default_factory=list)
    summary: list[SummaryRow] = field(default_factory=list)
    turns: list[SummaryRow] = field(default_factory=list)    # per model x variant x turn, where turns > 1 exist
    chains: list[ChainRow] = field(default_factory=list)     # the chains of runs with turns > 1

    @property
    def candidates(self) -> list[Entry]:
        return self.ranked + self.unranked

    @property
    def scope(self) -> str:
        """What the board's figures are of: `GPU, problem/size`."""
        return f"{self.gpu}, {self.problem}/{self.size}" if self.problem else self.gpu

    @property
    def multi_turn(self) -> bool:
        """Some candidate comes from a refinement turn: the board shows turns, parents and chains."""
        return any(e.turn > 1 for e in self.candidates)

    @property
    def salvaging(self) -> bool:
        """Some candidate's reply was cut off by the token limit and salvage was tried: the board says how it went."""
        return any(e.salvage is not None for e in self.candidates)

    @property
    def spent(self) -> bool:
        """Some candidate's requests are known (a generate run's): the rows show their tokens."""
        return any(e.spend is not None for e in self.candidates)

    @property
    def priced(self) -> bool:
        """Some summary row has a cost: the summary shows it."""
        return any(s.spend.cost is not None for s in self.summary)

    @property
    def rows(self) -> list[Entry]:
        return self.references + self.ranked + self.unranked

    @property
    def groups(self) -> list[str]:
        """The problem/size pairs on the board."""
        return sorted({f"{e.problem}/{e.size}" for e in self.rows})

    @property
    def title(self) -> str:
        return f"Leaderboard on {self.scope} (ranked by speedup vs eager; tier {self.tier})"

    def to_dict(self) -> dict[str, Any]:
        turns = self.multi_turn
        out = {"gpu": self.gpu, "problem": self.problem, "size": self.size, "tier": self.tier, "rows": [e.to_dict(turns) for e in self.rows],
               "summary": [s.to_dict() for s in self.summary]}
        if turns:
            out.update(turns=[s.to_dict() for s in self.turns], chains=[c.to_dict() for c in self.chains])
        return out


@dataclass
class Filters:
    run: str | None = None
    model: str | None = None
    problem: str | None = None
    size: str | None = None
    variant: str | None = None
    gpu: str | None = None

    def to_dict(self) -> dict[str, str]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


# -- from store rows to entries -------------------------------------------------------------------

def _row_gpu(row: VerdictRow) -> str:
    env = row.verdict.environment
    return env.device_name if env is not None and env.device_name else row.device_name


def entry_from_row(row: VerdictRow, run: Run | None, tier: str, staleness: StalenessCheck | None = None,
                   candidate: Candidate | None = None) -> Entry:
    """The board row of a judged candidate; `candidate` (its record) gives its turn and parent."""
    v = row.verdict
    golden = run is not None and run.mode == "golden"
    outcome, reason = classify(v, tier, staleness(v) if staleness is not None else None)
    return Entry(
        kind="golden" if golden else "candidate", name=f"golden/{row.sample}" if golden else f"{row.run_id}/{row.sample}",
        gpu=_row_gpu(row), problem=row.problem, size=row.size, status=v.status.value, outcome=outcome, reason=reason,
        run_id=row.run_id, sample=row.sample, candidate_id=row.candidate_id, model=row.model or NO_MODEL,
        variant=row.variant or NO_MODEL,
        tiers=[t for t, ok in (v.correctness.tiers.items() if v.correctness else []) if ok],
        max_abs_err=v.correctness.max_abs_err if v.correctness else None,
        max_rel_err=v.correctness.max_rel_err if v.correctness else None,
        runtime_ms=v.runtime_ms, speedup=dict(v.speedup), flags=list(v.flags), verdict=v,
        verdict_key=row.verdict_key, source_sha256=row.source_sha256, created=row.created,
        turn=candidate.turn if candidate is not None else 1, parent=candidate.parent if candidate is not None else None,
        salvage=candidate.salvage if candidate is not None else None,
    )


def _run_problem(run: Run) -> str:
    return Path(str(run.config.get("problem", ""))).name


def _run_matches(run: Run, f: Filters) -> bool:
    cfg = run.config
    return ((f.run is None or run.id == f.run) and (f.model is None or cfg.get("model") == f.model)
            and (f.variant is None or cfg.get("variant") == f.variant)
            and (f.problem is None or _run_problem(run) == f.problem or cfg.get("problem") == f.problem)
            and (f.size is None or cfg.get("size") == f.size) and (f.gpu is None or run.device_name == f.gpu))


def sample_path_key(sample: str) -> tuple:
    """Orders sample paths numerically: `2` < `10`, `0` < `0/2` < `0/2/3` < `1`."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in sample.split("/"))


def generation_path(generation: Generation) -> str:
    """The sample path a generation (a sample's own request or one salvaging its reply) belongs to."""
    return generation.lineage if generation.turn > 1 and generation.lineage else str(generation.sample_index)


def run_prices(run: Run, prices: Prices | None = None) -> dict[str, TokenPrices]:
    """The prices a run's requests are counted at: those stored with the run (its config's `prices`), the
    ones given (the current config's) over them."""
    out: dict[str, TokenPrices] = {}
    for model, value in (run.config.get("prices") or {}).items():
        try:
            out[model] = TokenPrices.model_validate(value)
        except ValueError:
            continue  # a run stored with prices this harness cannot read: not counted at them
    out.update(prices or {})
    return out


def _turn_of_path(path: str) -> int:
    # `0/2/3` was asked for at turn 3 (its last step), `0` at turn 1
    last = path.rsplit("/", 1)[-1]
    return int(last) if "/" in path and last.isdigit() else 1


def missing_sample_entries(store: Store, run: Run, judged: set[str]) -> list[Entry]:
    """Samples of a generate run without a verdict: failed requests and unevaluated candidates,
    of every turn (a later turn's sample is the path its generation's `lineage` names)."""
    samples = int(run.config.get("samples") or 0)
    generations: dict[str, Generation] = {}
    for g in sorted(store.list_generations(run.id), key=lambda g: g.created):  # the newest of a path wins
        if g.salvage_of is None:  # (a salvage request is not a sample of its own)
            generations[generation_path(g)] = g
    candidates = {c.id: c for c in store.list_candidates(run.id)}
    refined = {c.sample for c in candidates.values() if c.turn > 1}
    entries = []
    for path in sorted({str(i) for i in range(samples)} | set(generations) | refined, key=sample_path_key):
        cid = f"{run.id}/{path}"
        if cid in judged:
            continue
        gen = generations.get(path)
        candidate = candidates.get(cid)
        turn = candidate.turn if candidate else gen.turn if gen else _turn_of_path(path)
        parent = candidate.parent if candidate else (f"{run.id}/{path.rsplit('/', 1)[0]}" if "/" in path else None)
        if cid in candidates:
            outcome, reason = Outcome.not_evaluated, "parsed, never evaluated (--no-eval, or the run stopped)"
        elif gen is not None and gen.completion.error is not None:
            outcome = Outcome.no_reply
            reason = f"{gen.completion.error.kind.value}: {short_text(gen.completion.error.message, 80)}"
        else:
            outcome, reason = Outcome.no_reply, "no reply stored (request not made, or a replay file missing)"
        entries.append(Entry(
            kind="candidate", name=cid, gpu=run.device_name, problem=_run_problem(run),
            size=str(run.config.get("size") or ""), status=outcome.value, outcome=outcome, reason=reason,
            run_id=run.id, sample=path, candidate_id=cid, model=run.config.get("model") or NO_MODEL,
            variant=run.config.get("variant") or NO_MODEL, turn=turn, parent=parent,
            salvage=candidate.salvage if candidate is not None else None))
    return entries


def baseline_entries(entries: Sequence[Entry], gpu: str) -> list[Entry]:
    """One reference row per baseline per (problem, size): medians over the evaluations that
    timed it (each evaluation counted once), speedups computed inside each evaluation. Stale
    verdicts are left out: their baselines were timed under other rules."""
    by_group: dict[tuple[str, str], dict[str, Verdict]] = {}
    for e in entries:
        if e.verdict is not None and e.verdict.baselines and e.verdict_key and e.outcome != Outcome.stale:
            by_group.setdefault((e.problem, e.size), {})[e.verdict_key] = e.verdict
    out = []
    for (problem, size), verdicts in sorted(by_group.items()):
        names = sorted({b for v in verdicts.values() for b in v.baselines},
                       key=lambda b: (SPEEDUP_BASELINES.index(b) if b in SPEEDUP_BASELINES else 99, b))
        for name in names:
            timed = [v for v in verdicts.values() if name in v.baselines]
            ms = statistics.median(v.baselines[name].median_ms for v in timed)
            speedup = {}
            for other in names:
                ratios = [v.baselines[other].median_ms / v.baselines[name].median_ms for v in timed
                          if other in v.baselines and v.baselines[name].median_ms > 0]
                if ratios:
                    speedup[other] = statistics.median(ratios)
            out.append(Entry(kind="baseline", name=f"baseline/{name}", gpu=gpu, problem=problem, size=size,
                             status="baseline", outcome=Outcome.reference, runtime_ms=ms, speedup=speedup,
                             evaluations=len(timed), model=NO_MODEL, variant=NO_MODEL,
                             reason=f"median over {len(timed)} evaluation(s)"))
    return out


def _speed_order(eager: float | None, runtime_ms: float | None, name: str) -> tuple:
    # fastest vs eager first, those without an eager speedup last (by runtime), then by name
    return (eager is None, -(eager or 0.0), runtime_ms if runtime_ms is not None else math.inf, name)


def _rank_key(e: Entry) -> tuple:
    return _speed_order(e.speedup.get("eager"), e.runtime_ms, e.name)


def rank_key(verdict: Verdict, name: str = "") -> tuple:
    """The leaderboard's order among rankable verdicts, as a sort key (smaller is better): speedup
    vs eager (fastest first; none last, by runtime), then `name` (the board uses the candidate's
    name, `<run-id>/<sample>`, which is its id in a generate run)."""
    return _speed_order(verdict.speedup.get("eager"), verdict.runtime_ms, name)


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


def _outcome_key(e: Entry) -> tuple:
    return (e.outcome.order, e.name)


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
                       best=min(good, key=_rank_key) if good else None)
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


def build_boards(store: Store, filters: Filters | None = None, tier: str = "loose",
                 staleness: StalenessCheck | None = None, prices: Prices | None = None) -> list[Board]:
    """The boards (one per GPU, problem and size) of everything in `store` that passes `filters`. `staleness`
    tells which verdicts were judged by other rules than the current ones (see
    `current_rules`); None trusts every verdict. `prices` (by model, USD per million tokens)
    over those stored with each run give the cost (harness.spend)."""
    f = filters or Filters()
    rows = store.list_verdicts(run=f.run, model=f.model, problem=f.problem, size=f.size, variant=f.variant)
    runs = {r.id: r for r in store.list_runs()}
    records = {c.id: c for run_id in sorted({r.run_id for r in rows}) for c in store.list_candidates(run_id)}
    entries = [entry_from_row(r, runs.get(r.run_id), tier, staleness, records.get(r.candidate_id)) for r in rows]
    judged = {r.candidate_id for r in rows}
    gen_runs = [run for run in runs.values() if run.mode == "generate" and _run_matches(run, f)]
    for run in gen_runs:
        entries += missing_sample_entries(store, run, judged)
    if f.gpu is not None:
        entries = [e for e in entries if e.gpu == f.gpu]
    generations = {run.id: store.list_generations(run.id) for run in gen_runs}
    costs = {run.id: run_prices(run, prices) for run in gen_runs}
    # each sample's own spend: its requests, salvage included (a run's samples are its paths)
    by_path: dict[tuple[str, str], list[Generation]] = {}
    for run_id, gens in generations.items():
        for g in gens:
            by_path.setdefault((run_id, generation_path(g)), []).append(g)
    for e in entries:
        if e.kind == "candidate" and e.run_id in generations and e.sample is not None:
            e.spend = Spend().add_all(by_path.get((e.run_id, e.sample), []), costs[e.run_id])
    boards = []
    for gpu, problem, size in sorted({(e.gpu, e.problem, e.size) for e in entries}):
        mine = [e for e in entries if (e.gpu, e.problem, e.size) == (gpu, problem, size)]
        board = Board(gpu=gpu, tier=tier, problem=problem, size=size)
        golden = sorted(once_per_judge(e for e in mine if e.kind == "golden"),
                        key=lambda e: (e.outcome.order, _rank_key(e)))
        board.references = baseline_entries(mine, gpu) + golden
        cands = [e for e in mine if e.kind == "candidate"]
        board.ranked = sorted((e for e in cands if e.outcome == Outcome.correct), key=_rank_key)
        for i, e in enumerate(board.ranked, 1):
            e.rank = i
        board.unranked = sorted((e for e in cands if e.outcome != Outcome.correct), key=_outcome_key)
        # summaries: per model x variant, then overall, then the golden kernels as a reference group
        groups: dict[tuple[str, str], list[Entry]] = {}
        for e in cands:
            groups.setdefault((e.model or NO_MODEL, e.variant or NO_MODEL), []).append(e)
        board_runs = [run for run in gen_runs if run.device_name == gpu and _run_problem(run) == problem
                      and str(run.config.get("size") or "") == size]
        timed = timed_baselines(mine)
        for (model, variant), members in sorted(groups.items()):
            members_runs = [run for run in board_runs if (run.config.get("model") or NO_MODEL) == model
                            and (run.config.get("variant") or NO_MODEL) == variant]
            row = summarize(members, model, variant, members_runs, generations, timed=timed, prices=costs)
            chains = chain_rows(members, model, variant, generations, costs)
            if chains:
                row.chains, row.rescued = len(chains), sum(c.rescued for c in chains)
                board.chains += chains
                board.turns += turn_rows(members, model, variant, members_runs, generations, timed, costs)
            board.summary.append(row)
        if cands:
            overall = summarize(cands, "all", "all", board_runs, generations, timed=timed, prices=costs)
            if board.chains:
                overall.chains, overall.rescued = len(board.chains), sum(c.rescued for c in board.chains)
            board.summary.append(overall)
        if golden:
            board.summary.append(summarize(golden, "golden", NO_MODEL, reference=True, timed=timed))
        boards.append(board)
    return boards


def once_per_judge(golden: Iterable[Entry]) -> list[Entry]:
    """Each golden kernel once per judge (the same file judged by `eval`, `bench` and `run` is one row):
    the newest verdict of each (name, source, judge)."""
    newest: dict[tuple, Entry] = {}
    for e in golden:
        judge = e.verdict.judge.model_dump_json() if e.verdict is not None and e.verdict.judge is not None else None
        key = (e.name, e.source_sha256, judge)
        if key not in newest or (e.created or "") > (newest[key].created or ""):
            newest[key] = e
    return list(newest.values())


def current_rules() -> StalenessCheck:
    """The staleness check of this harness: a verdict is current when its judge's evaluator hash
    is this evaluator's and its problem hash is that of the problem as it is now (when the
    problem can still be found). Torch and CUDA versions are measurement context, shown but not
    judged here: a store read on another machine is not stale for that."""
    from evaluator.wire.identity import evaluator_sha256, problem_sha256
    from evaluator.wire.problem import load_problem

    mine = evaluator_sha256()
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
        current = problem_hash(verdict.problem)
        if current is not None and judge.problem_sha256 != current:
            return f"problem {verdict.problem} changed since it was judged: judge it again to rank it"
        return None

    return check
