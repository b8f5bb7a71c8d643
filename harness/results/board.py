"""The leaderboard as data: its rows (`Entry`), the summary rows over them (`SummaryRow`, `ChainRow`),
and the boards that hold them (`Board`).

No printing and no reading: `harness.results.leaderboard` builds boards from the result store, `harness.results.render`
and `harness.results.report` draw them. Which rows are ranked, and in what order, is `harness.core.ranking`; the
metrics of the summary rows are `harness.results.summaries`.

- One board per GPU (`environment.device_name`), problem and size: rows from different GPUs are never
  mixed, and speedups of different problems or sizes are never ranked or summarized together.
- Reference rows sit beside the ranking: each baseline (median of its medians over the same
  evaluations, and its speedup vs `eager` etc. computed inside each evaluation, then the
  median), and the golden kernels (runs of mode `golden`).
- Refinement turns (`harness run --turns T`): a candidate of turn t >= 2 refines its `parent`
  (sample `0/2/3`: sample 0, refined at turn 2, then at turn 3); the first-turn sample it
  descends from is its chain. When a board holds a candidate of turn > 1, and only then, its
  rows show the turn and the parent, and it has turn and chain rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evaluator.wire.records import Flag, Verdict
from harness.core.outcomes import Outcome
from harness.core.ranking import speed_order
from harness.core.records import Salvage
from harness.generation.spend import Spend

SPEEDUP_BASELINES = ("eager", "compile", "eager_tf32", "compile_tf32")  # the columns, in this order
FAST_P = (0.0, 1.0, 1.5, 2.0)
FAST_P_BASELINES = ("eager", "compile")


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

    def speedup_interval(self, baseline: str) -> tuple[float, float] | None:
        """The 95% interval of its speedup over `baseline` (harness.core.intervals), where its verdict has one."""
        if self.verdict is None or baseline not in self.speedup:
            return None
        from harness.core.intervals import verdict_interval

        return verdict_interval(self.verdict, baseline)

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
    def rank_key(self) -> tuple:
        """Its place in the leaderboard's order (harness.core.ranking.speed_order), as a sort key."""
        return speed_order(self.speedup.get("eager"), self.runtime_ms, self.name)

    @property
    def shown_status(self) -> str:
        """The status column: the board's own outcome where it overrides the verdict's status."""
        return self.outcome.value if self.outcome in (Outcome.below_tier, Outcome.shaky, Outcome.rejected, Outcome.stale) \
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
    def size_values(self) -> str:
        """What a scaled size made of the problem's sizes (`features=1, dim=4`), from its verdicts; empty for a preset."""
        values = next((e.verdict.size_values for e in self.candidates if e.verdict is not None and e.verdict.size_values),
                      {})
        return ", ".join(f"{k}={v}" for k, v in values.items())

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
    """What of the store the boards show (`harness leaderboard --run ... --gpu ...`): None shows all."""

    run: str | None = None
    model: str | None = None
    problem: str | None = None
    size: str | None = None
    variant: str | None = None
    gpu: str | None = None

    def to_dict(self) -> dict[str, str]:
        return {k: v for k, v in self.__dict__.items() if v is not None}
