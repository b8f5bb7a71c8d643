"""`harness leaderboard`: the result store as ranked tables, one per GPU, with their yardsticks.

Reading rules (what makes a ranking honest):

- Rows from different GPUs are never mixed: one board per `environment.device_name` (the
  store's key column when a verdict has no environment, e.g. a parse error).
- A speedup is the one the worker measured: candidate and baseline timed in the same process
  on the same GPU (`Verdict.speedup`). Nothing here divides numbers from two evaluations.
- Ranked: candidates whose verdict is `correct`, that pass the chosen tolerance tier
  (`--tier`, default `loose`) and carry no `reject` flag nor an `implausible` flag; ordered by
  speedup vs `eager` (fastest first; those without an eager speedup last, by runtime).
  Everything else is listed below, grouped by outcome, with its reason.
- Reference rows sit beside the ranking: each baseline (median of its medians over the same
  evaluations, and its speedup vs `eager` etc. computed inside each evaluation, then the
  median), and the golden kernels (`candidates/golden/`, or a golden run).

Summary metrics per model x prompt variant (and overall, golden kernels excluded):
outcome counts, `fast_p` (KernelBench: the share of ALL samples that are correct and faster
than p times the baseline), the geometric mean and the best speedup over correct samples,
and the tokens and request latency spent (from the generations table). A sample is a
requested generation: samples whose request failed (`no_reply`) or that were not evaluated
(`not_evaluated`) count in the denominator too.

This module also records `harness eval` verdicts in the store (`record_eval_verdicts`): run
`eval` (or `golden` for files under `candidates/golden/`), model `-`, variant `-`.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from evaluator.records import Flag, FlagPolicy, Status, Verdict
from harness.records import Candidate, ParseReason, ParseResult, Run
from harness.store import Store, StoreError, VerdictRow, open_store, verdict_key
from harness.tables import STATUS_STYLE, short_text

TIERS = ("strict", "loose")
SPEEDUP_BASELINES = ("eager", "compile", "eager_tf32", "compile_tf32")  # the columns, in this order
FAST_P = (0.0, 1.0, 1.5, 2.0)
FAST_P_BASELINES = ("eager", "compile")
EVAL_RUN, GOLDEN_RUN = "eval", "golden"
NO_MODEL = "-"
FORMATS = ("table", "json", "csv", "md")

# How the unranked rows are grouped, in this order.
OUTCOME_ORDER = (
    "correct", "below_tier", "rejected", "compiled", "incorrect", "runtime_error", "compile_error", "timeout",
    "crashed", "parse_error", "no_reply", "not_evaluated",
)
OUTCOME_STYLE = {**STATUS_STYLE, "below_tier": "yellow", "rejected": "red"}
COUNTED_STATUSES = ("parse_error", "compile_error", "runtime_error", "timeout", "crashed", "incorrect", "correct")


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
    return flag.name == "implausible" or flag.name.startswith("implausible")


def classify(verdict: Verdict, tier: str) -> tuple[str, str | None]:
    """(outcome, reason): `correct` only when rankable at `tier`; `below_tier` when the verdict is
    correct at a looser tier only; `rejected` for a reject or implausible flag; else the status."""
    if verdict.status != Status.correct:
        return verdict.status.value, short_text(verdict.error) or None
    blocking = [f for f in verdict.flags if f.policy == FlagPolicy.reject or is_implausible(f)]
    if blocking:
        return "rejected", "; ".join(f"{f.name}: {short_text(f.reason, 80)}" for f in blocking)
    tiers = verdict.correctness.tiers if verdict.correctness else {}
    if not tiers.get(tier, False):
        passed = [t for t, ok in tiers.items() if ok]
        err = verdict.correctness.max_abs_err if verdict.correctness else None
        detail = f" (max abs err {err:.2e})" if err is not None else ""
        return "below_tier", (f"passes {', '.join(passed) or 'no tier'}, not {tier}{detail}"
                              if tier in tiers else f"no tier {tier!r} in this verdict")
    return "correct", None


# -- the entries ----------------------------------------------------------------------------------

@dataclass
class Entry:
    """One row of a board: a candidate, a golden kernel or a baseline."""

    kind: str                     # candidate | golden | baseline
    name: str                     # run/sample, golden/..., baseline/<name>
    gpu: str
    problem: str
    size: str
    status: str                   # the verdict's status (no_reply / not_evaluated without one; `baseline`)
    outcome: str                  # see OUTCOME_ORDER (`reference` for baselines)
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

    @property
    def section(self) -> str:
        if self.kind in ("golden", "baseline"):
            return "reference"
        return "ranked" if self.rank is not None else "unranked"

    def to_dict(self) -> dict[str, Any]:
        return {
            "section": self.section, "rank": self.rank, "kind": self.kind, "candidate": self.name, "gpu": self.gpu,
            "run_id": self.run_id, "sample": self.sample, "candidate_id": self.candidate_id, "model": self.model,
            "variant": self.variant, "problem": self.problem, "size": self.size, "status": self.status,
            "outcome": self.outcome, "tiers": self.tiers, "max_abs_err": self.max_abs_err,
            "max_rel_err": self.max_rel_err, "runtime_ms": self.runtime_ms,
            **{f"speedup_{b}": self.speedup.get(b) for b in SPEEDUP_BASELINES},
            "speedup": dict(self.speedup),
            "flags": [f.model_dump(mode="json") for f in self.flags], "reason": self.reason,
            "evaluations": self.evaluations, "verdict_key": self.verdict_key, "source_sha256": self.source_sha256,
            "created": self.created,
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
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    latency_s: float = 0.0
    reference: bool = False            # golden kernels: not part of `all`

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "variant": self.variant, "samples": self.samples, "counts": self.counts,
            "correct_at_tier": self.ranked, "below_tier": self.below_tier, "rejected": self.rejected,
            "fast_p": self.fast_p, "geomean_speedup": self.geomean, "best_speedup": self.best,
            "requests": self.requests, "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens, "total_tokens": self.total_tokens,
            "latency_s": round(self.latency_s, 3), "reference": self.reference,
        }


@dataclass
class Board:
    """Everything measured on one GPU."""

    gpu: str
    tier: str
    references: list[Entry] = field(default_factory=list)   # baselines, then golden kernels
    ranked: list[Entry] = field(default_factory=list)
    unranked: list[Entry] = field(default_factory=list)
    summary: list[SummaryRow] = field(default_factory=list)

    @property
    def candidates(self) -> list[Entry]:
        return self.ranked + self.unranked

    @property
    def rows(self) -> list[Entry]:
        return self.references + self.ranked + self.unranked

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "tier": self.tier, "rows": [e.to_dict() for e in self.rows],
                "summary": [s.to_dict() for s in self.summary]}


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


# -- reading the store ----------------------------------------------------------------------------

def _row_gpu(row: VerdictRow) -> str:
    env = row.verdict.environment
    return env.device_name if env is not None and env.device_name else row.device_name


def _is_golden(row: VerdictRow, run: Run | None) -> bool:
    return row.run_id == GOLDEN_RUN or (run is not None and run.mode == "golden" and row.run_id != EVAL_RUN)


def entry_from_row(row: VerdictRow, run: Run | None, tier: str) -> Entry:
    v = row.verdict
    golden = _is_golden(row, run)
    outcome, reason = classify(v, tier)
    variant = row.variant if row.variant is not None else (NO_MODEL if golden or row.run_id == EVAL_RUN else None)
    name = f"{row.run_id}/{row.sample}"
    if golden and row.run_id != GOLDEN_RUN:
        name = f"golden/{row.sample}"
    return Entry(
        kind="golden" if golden else "candidate", name=name, gpu=_row_gpu(row), problem=row.problem, size=row.size,
        status=v.status.value, outcome=outcome, reason=reason, run_id=row.run_id, sample=row.sample,
        candidate_id=row.candidate_id, model=row.model or NO_MODEL, variant=variant or NO_MODEL,
        tiers=[t for t, ok in (v.correctness.tiers.items() if v.correctness else []) if ok],
        max_abs_err=v.correctness.max_abs_err if v.correctness else None,
        max_rel_err=v.correctness.max_rel_err if v.correctness else None,
        runtime_ms=v.runtime_ms, speedup=dict(v.speedup), flags=list(v.flags), verdict=v,
        verdict_key=row.verdict_key, source_sha256=row.source_sha256, created=row.created,
    )


def _run_problem(run: Run) -> str:
    return Path(str(run.config.get("problem", ""))).name


def _run_matches(run: Run, f: Filters) -> bool:
    cfg = run.config
    return ((f.run is None or run.id == f.run) and (f.model is None or cfg.get("model") == f.model)
            and (f.variant is None or cfg.get("variant") == f.variant)
            and (f.problem is None or _run_problem(run) == f.problem or cfg.get("problem") == f.problem)
            and (f.size is None or cfg.get("size") == f.size) and (f.gpu is None or run.device_name == f.gpu))


def missing_sample_entries(store: Store, run: Run, judged: set[str]) -> list[Entry]:
    """Samples of a generate run without a verdict: failed requests and unevaluated candidates."""
    samples = int(run.config.get("samples") or 0)
    generations = {g.sample_index: g for g in store.list_generations(run.id)}
    candidates = {c.id: c for c in store.list_candidates(run.id)}
    entries = []
    for index in sorted(set(range(samples)) | set(generations)):
        cid = f"{run.id}/{index}"
        if cid in judged:
            continue
        gen = generations.get(index)
        if cid in candidates:
            outcome, reason = "not_evaluated", "parsed, never evaluated (--no-eval, or the run stopped)"
        elif gen is not None and gen.completion.error is not None:
            outcome = "no_reply"
            reason = f"{gen.completion.error.kind.value}: {short_text(gen.completion.error.message, 80)}"
        else:
            outcome, reason = "no_reply", "no reply stored (request not made, or a replay file missing)"
        entries.append(Entry(
            kind="candidate", name=cid, gpu=run.device_name, problem=_run_problem(run),
            size=str(run.config.get("size") or ""), status=outcome, outcome=outcome, reason=reason, run_id=run.id,
            sample=str(index), candidate_id=cid, model=run.config.get("model") or NO_MODEL,
            variant=run.config.get("variant") or NO_MODEL))
    return entries


def baseline_entries(entries: Sequence[Entry], gpu: str) -> list[Entry]:
    """One reference row per baseline per (problem, size): medians over the evaluations that
    timed it (each evaluation counted once), speedups computed inside each evaluation."""
    by_group: dict[tuple[str, str], dict[str, Verdict]] = {}
    for e in entries:
        if e.verdict is not None and e.verdict.baselines and e.verdict_key:
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
                             status="baseline", outcome="reference", runtime_ms=ms, speedup=speedup,
                             evaluations=len(timed), model=NO_MODEL, variant=NO_MODEL,
                             reason=f"median over {len(timed)} evaluation(s)"))
    return out


def _rank_key(e: Entry) -> tuple:
    s = e.speedup.get("eager")
    return (s is None, -(s or 0.0), e.runtime_ms if e.runtime_ms is not None else math.inf, e.name)


def _outcome_key(e: Entry) -> tuple:
    order = OUTCOME_ORDER.index(e.outcome) if e.outcome in OUTCOME_ORDER else len(OUTCOME_ORDER)
    return (order, e.name)


def timed_baselines(entries: Iterable[Entry]) -> set[str]:
    """Baselines timed in any of these entries' evaluations."""
    return {b for e in entries if e.verdict is not None for b in e.verdict.baselines}


def summarize(entries: Sequence[Entry], model: str, variant: str, runs: Sequence[Run] = (),
              generations: dict[str, list] | None = None, reference: bool = False,
              timed: set[str] | None = None) -> SummaryRow:
    """Summary metrics over candidate entries (see the module docstring). `timed`: the
    baselines timed on this GPU (fast_p vs a baseline never timed there is None, not 0)."""
    counts: dict[str, int] = {}
    for e in entries:
        counts[e.status] = counts.get(e.status, 0) + 1
    for status in COUNTED_STATUSES:
        counts.setdefault(status, 0)
    fast: dict[str, dict[str, float | None]] = {}
    geo: dict[str, float | None] = {}
    best: dict[str, float | None] = {}
    ranked = [e for e in entries if e.outcome == "correct"]
    for b in FAST_P_BASELINES:
        measured = b in (timed if timed is not None else timed_baselines(entries))
        pairs = [(e.outcome == "correct", e.speedup.get(b)) for e in entries]
        fast[b] = {f"fast_{p:g}": (fast_p(pairs, p) if measured else None) for p in FAST_P}
        values = [e.speedup[b] for e in ranked if b in e.speedup]
        geo[b] = geomean(values)
        best[b] = max(values) if values else None
    row = SummaryRow(model=model, variant=variant, samples=len(entries), counts=counts, ranked=len(ranked),
                     below_tier=sum(e.outcome == "below_tier" for e in entries),
                     rejected=sum(e.outcome == "rejected" for e in entries), fast_p=fast, geomean=geo, best=best,
                     reference=reference)
    for run in runs:
        for g in (generations or {}).get(run.id, []):
            usage = g.completion.usage
            row.requests += g.completion.attempts
            row.prompt_tokens += usage.prompt_tokens or 0
            row.completion_tokens += usage.completion_tokens or 0
            row.total_tokens += usage.total_tokens or ((usage.prompt_tokens or 0) + (usage.completion_tokens or 0))
            row.latency_s += g.completion.latency_s
    return row


def build_boards(store: Store, filters: Filters | None = None, tier: str = "loose") -> list[Board]:
    """The boards (one per GPU) of everything in `store` that passes `filters`."""
    f = filters or Filters()
    rows = store.list_verdicts(run=f.run, model=f.model, problem=f.problem, size=f.size, variant=f.variant)
    runs = {r.id: r for r in store.list_runs()}
    entries = [entry_from_row(r, runs.get(r.run_id), tier) for r in rows]
    judged = {r.candidate_id for r in rows}
    gen_runs = [run for run in runs.values() if run.mode == "generate" and _run_matches(run, f)]
    for run in gen_runs:
        entries += missing_sample_entries(store, run, judged)
    if f.gpu is not None:
        entries = [e for e in entries if e.gpu == f.gpu]
    generations = {run.id: store.list_generations(run.id) for run in gen_runs}
    boards = []
    for gpu in sorted({e.gpu for e in entries}):
        mine = [e for e in entries if e.gpu == gpu]
        board = Board(gpu=gpu, tier=tier)
        golden = sorted((e for e in mine if e.kind == "golden"), key=lambda e: (_outcome_key(e)[0], _rank_key(e)))
        board.references = baseline_entries(mine, gpu) + golden
        cands = [e for e in mine if e.kind == "candidate"]
        board.ranked = sorted((e for e in cands if e.outcome == "correct"), key=_rank_key)
        for i, e in enumerate(board.ranked, 1):
            e.rank = i
        board.unranked = sorted((e for e in cands if e.outcome != "correct"), key=_outcome_key)
        # summaries: per model x variant, then overall, then the golden kernels as a reference group
        groups: dict[tuple[str, str], list[Entry]] = {}
        for e in cands:
            groups.setdefault((e.model or NO_MODEL, e.variant or NO_MODEL), []).append(e)
        board_runs = [run for run in gen_runs if run.device_name == gpu]
        timed = timed_baselines(mine)
        for (model, variant), members in sorted(groups.items()):
            members_runs = [run for run in board_runs if (run.config.get("model") or NO_MODEL) == model
                            and (run.config.get("variant") or NO_MODEL) == variant]
            board.summary.append(summarize(members, model, variant, members_runs, generations, timed=timed))
        if cands:
            board.summary.append(summarize(cands, "all", "all", board_runs, generations, timed=timed))
        if golden:
            board.summary.append(summarize(golden, "golden", NO_MODEL, reference=True, timed=timed))
        boards.append(board)
    return boards


# -- rendering ------------------------------------------------------------------------------------

def fmt_speedup(value: float | None) -> str:
    return f"{value:.2f}×" if value is not None else "-"


def fmt_ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4f}" if value < 10 else f"{value:.2f}"


def fmt_err(value: float | None) -> str:
    return f"{value:.2e}" if value is not None else "-"


def fmt_share(value: float | None) -> str:
    return f"{100 * value:.0f}%" if value is not None else "-"


def fmt_flags(flags: Sequence[Flag]) -> str:
    names: list[str] = []
    for flag in flags:
        label = flag.name + ("!" if flag.policy == FlagPolicy.reject else "")
        if label not in names:
            names.append(label)
    return ", ".join(names)


COLUMNS = ("rank", "candidate", "model", "variant", "problem/size", "status", "tiers", "max abs err", "ms",
           "× eager", "× compile", "× eager_tf32", "× compile_tf32", "flags", "reason")


def entry_cells(e: Entry) -> list[str]:
    """The table cells of one row, as plain text (shared by table, md and the HTML report)."""
    rank = str(e.rank) if e.rank is not None else ("ref" if e.section == "reference" else "-")
    status = e.outcome if e.outcome in ("below_tier", "rejected") else e.status
    return [rank, e.name, e.model or NO_MODEL, e.variant or NO_MODEL, f"{e.problem}/{e.size}", status,
            ",".join(e.tiers) or "-", fmt_err(e.max_abs_err), fmt_ms(e.runtime_ms),
            *[fmt_speedup(e.speedup.get(b)) for b in SPEEDUP_BASELINES], fmt_flags(e.flags), e.reason or ""]


def board_title(board: Board) -> str:
    return f"Leaderboard on {board.gpu} (ranked by speedup vs eager; tier {board.tier})"


@dataclass
class Column:
    """One displayed column of a board: a header, and how to get its text from entry_cells()."""

    header: str
    index: int | None          # entry_cells() index; None = model / variant together
    numeric: bool = False

    def text(self, cells: Sequence[str]) -> str:
        return f"{cells[2]} / {cells[3]}" if self.index is None else cells[self.index]


def display_columns(board: Board) -> list[Column]:
    """The compact columns of a board, for the terminal and the HTML report: model and variant
    share a column, problem/size is left out when the board has only one (the title names it),
    and speedup columns of baselines never timed on this GPU (e.g. torch.compile in a CPU run)
    are left out. json/csv/md keep every column."""
    timed = {b for e in board.rows for b in e.speedup}
    cols = [Column("rank", 0, True), Column("candidate", 1), Column("model / variant", None)]
    if len(board_groups(board)) > 1:
        cols.append(Column("problem/size", 4))
    cols += [Column("status", 5), Column("tiers", 6), Column("max abs err", 7, True), Column("ms", 8, True)]
    cols += [Column(f"× {b}", 9 + k, True) for k, b in enumerate(SPEEDUP_BASELINES) if b == "eager" or b in timed]
    return cols + [Column("flags", 13), Column("reason", 14)]


def board_groups(board: Board) -> list[str]:
    """The problem/size pairs on a board."""
    return sorted({f"{e.problem}/{e.size}" for e in board.rows})


def leaderboard_table(board: Board) -> Table:
    """The rich table of a board (see display_columns)."""
    groups = board_groups(board)
    title = board_title(board) + (f" · {groups[0]}" if len(groups) == 1 else "")
    cols = display_columns(board)
    table = Table(title=title, title_justify="left", show_lines=False)
    for col in cols:
        table.add_column("max err" if col.header == "max abs err" else col.header, overflow="fold",
                         justify="right" if col.numeric else "left",
                         no_wrap=col.header in ("candidate", "status"), min_width=30 if col.header == "reason" else None)
    sections = [s for s in (board.references, board.ranked, board.unranked) if s]
    for i, section in enumerate(sections):
        for j, e in enumerate(section):
            cells = entry_cells(e)
            row = []
            for col in cols:
                value = col.text(cells)
                if col.header == "reason" and len(value) > 120:
                    value = value[:119] + "…"
                text = Text(value)
                if col.header == "status" and e.outcome in OUTCOME_STYLE:
                    text.stylize(OUTCOME_STYLE[e.outcome])
                row.append(text)
            row_style = "dim" if e.kind == "baseline" else ("italic" if e.kind == "golden" else None)
            table.add_row(*row, style=row_style, end_section=(j == len(section) - 1 and i < len(sections) - 1))
    return table


SUMMARY_OUTCOME_COLUMNS = ("samples", "parse_error", "compile_error", "runtime_error", "timeout", "crashed",
                           "incorrect", "correct", "correct@tier", "not judged", "tokens", "latency s")


def summary_cells(s: SummaryRow) -> dict[str, str]:
    cells = {
        "model": s.model + (" (reference)" if s.reference else ""), "variant": s.variant, "samples": str(s.samples),
        **{k: str(s.counts.get(k, 0)) for k in COUNTED_STATUSES},
        # not judged: the request failed (no_reply) or the candidate was never evaluated
        "correct@tier": str(s.ranked), "not judged": str(s.counts.get("no_reply", 0) + s.counts.get("not_evaluated", 0)),
        "tokens": f"{s.total_tokens:,}" if s.requests else "-",
        "latency s": f"{s.latency_s:.1f}" if s.requests else "-",
    }
    for b in FAST_P_BASELINES:
        for p in FAST_P:
            cells[f"fast_{p:g} {b}"] = fmt_share(s.fast_p[b][f"fast_{p:g}"])
        cells[f"geomean {b}"] = fmt_speedup(s.geomean[b])
        cells[f"best {b}"] = fmt_speedup(s.best[b])
    return cells


def speed_columns() -> list[str]:
    out = []
    for b in FAST_P_BASELINES:
        out += [f"fast_{p:g} {b}" for p in FAST_P] + [f"geomean {b}", f"best {b}"]
    return out


def summary_tables(board: Board) -> list[Table]:
    outcomes = Table(title=f"Outcomes on {board.gpu} (correct@tier: correct at {board.tier}, not rejected)",
                     title_justify="left")
    for c in ("model", "variant", *SUMMARY_OUTCOME_COLUMNS):
        outcomes.add_column(c, justify="left" if c in ("model", "variant") else "right")
    speed = Table(title=f"Speed on {board.gpu} (fast_p: share of all samples correct@tier with speedup > p)",
                  title_justify="left")
    for c in ("model", "variant", *speed_columns()):
        speed.add_column(c, justify="left" if c in ("model", "variant") else "right")
    for s in board.summary:
        cells = summary_cells(s)
        style = "bold" if s.model == "all" else ("dim" if s.reference else None)
        outcomes.add_row(*[Text(cells[c]) for c in ("model", "variant", *SUMMARY_OUTCOME_COLUMNS)], style=style)
        speed.add_row(*[Text(cells[c]) for c in ("model", "variant", *speed_columns())], style=style)
    return [outcomes, speed]


def print_tables(boards: Sequence[Board], console: Console) -> None:
    for board in boards:
        console.print(leaderboard_table(board))
        for table in summary_tables(board):
            console.print(table)
        console.print()


def to_json(boards: Sequence[Board], filters: Filters, tier: str, store_path: str | None = None) -> str:
    return json.dumps({"tier": tier, "filters": filters.to_dict(), "store": store_path,
                       "boards": [b.to_dict() for b in boards]}, indent=2)


CSV_FIELDS = ("gpu", "section", "rank", "kind", "candidate", "model", "variant", "problem", "size", "status",
              "outcome", "tiers", "max_abs_err", "max_rel_err", "runtime_ms", *[f"speedup_{b}" for b in SPEEDUP_BASELINES],
              "flags", "reason", "run_id", "sample", "evaluations")


def to_csv(boards: Sequence[Board]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for board in boards:
        for e in board.rows:
            row = e.to_dict()
            row["tiers"] = ",".join(e.tiers)
            row["flags"] = fmt_flags(e.flags)
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buffer.getvalue()


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def md_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(_md_escape(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def to_markdown(boards: Sequence[Board]) -> str:
    parts = []
    for board in boards:
        parts.append(f"## {board_title(board)}\n")
        parts.append(md_table(COLUMNS, (entry_cells(e) for e in board.rows)) + "\n")
        parts.append(f"### Outcomes on {board.gpu}\n")
        parts.append(md_table(("model", "variant", *SUMMARY_OUTCOME_COLUMNS),
                              ([summary_cells(s)[c] for c in ("model", "variant", *SUMMARY_OUTCOME_COLUMNS)]
                               for s in board.summary)) + "\n")
        parts.append(f"### Speed on {board.gpu}\n")
        parts.append(md_table(("model", "variant", *speed_columns()),
                              ([summary_cells(s)[c] for c in ("model", "variant", *speed_columns())]
                               for s in board.summary)) + "\n")
    return "\n".join(parts)


# -- the command ----------------------------------------------------------------------------------

def default_store_path() -> Path:
    """The store `harness run` uses: harness.toml / HARNESS_STORE / `.harness/results.sqlite`."""
    from harness.config import DEFAULT_STORE, ConfigError, resolve_config

    try:
        return resolve_config({}).store
    except ConfigError:
        return Path(os.environ.get("HARNESS_STORE") or DEFAULT_STORE)


def load_boards(store_path: Path, filters: Filters, tier: str) -> list[Board]:
    """Open an existing store (never creating one) and build its boards. Raises StoreError."""
    if str(store_path) != ":memory:" and not Path(store_path).is_file():
        raise StoreError(f"no result store at {store_path} (run `harness run` or `harness eval` first, or pass --store)")
    with open_store(store_path) as store:
        return build_boards(store, filters, tier)


def leaderboard_command(*, store: Path | None, filters: Filters, tier: str = "loose", fmt: str = "table",
                        console: Console | None = None, out: io.TextIOBase | None = None) -> int:
    """`harness leaderboard`. Returns the exit code (0, or 2 for a bad option or store)."""
    import sys

    console = console or Console()
    err = Console(stderr=True)
    if tier not in TIERS:
        err.print(f"[red]error:[/] --tier must be one of {', '.join(TIERS)}, not {tier!r}")
        return 2
    if fmt not in FORMATS:
        err.print(f"[red]error:[/] --format must be one of {', '.join(FORMATS)}, not {fmt!r}")
        return 2
    path = store or default_store_path()
    try:
        boards = load_boards(path, filters, tier)
    except StoreError as error:
        err.print(f"[red]error:[/] {error}")
        return 2
    out = out or sys.stdout
    if fmt == "table":
        if not boards:
            console.print(f"[yellow]no verdicts in {path}{' matching the filters' if filters.to_dict() else ''}[/]")
            return 0
        print_tables(boards, console)
        console.print(f"[dim]store {path}[/]")
    elif fmt == "json":
        out.write(to_json(boards, filters, tier, str(path)) + "\n")
    elif fmt == "csv":
        out.write(to_csv(boards))
    else:
        out.write(to_markdown(boards) if boards else "_no verdicts_\n")
    out.flush()
    return 0


# -- `harness eval` into the store ---------------------------------------------------------------

def is_golden_path(path: Path) -> bool:
    """True for a file under `candidates/golden/` (the project's, or any such folder)."""
    resolved = path.resolve()
    try:
        from evaluator.assets import asset_dir

        if resolved.is_relative_to((asset_dir("candidates") / "golden").resolve()):
            return True
    except FileNotFoundError:
        pass
    parts = resolved.parts
    return any(parts[i] == "candidates" and parts[i + 1] == "golden" for i in range(len(parts) - 1))


def eval_sample_name(path: Path, golden: bool, cwd: Path | None = None) -> str:
    """How a `harness eval` file is named in its run: a golden file's path under golden/ without
    `.py`; another file's path relative to the working folder (absolute when outside it)."""
    resolved = path.resolve()
    if golden:
        parts = resolved.parts
        for i in range(len(parts) - 2, -1, -1):
            if parts[i] == "candidates" and parts[i + 1] == "golden":
                return str(Path(*parts[i + 2:]).with_suffix(""))
        return resolved.stem
    try:
        return str(resolved.relative_to((cwd or Path.cwd()).resolve()))
    except ValueError:
        return str(resolved)


def _parse_reason(error: str | None) -> ParseReason | None:
    text = error or ""
    if text.startswith("syntax error"):
        return ParseReason.syntax_error
    if "ModelNew" in text:
        return ParseReason.no_model_new
    return None


def record_eval_verdicts(store_path: Path | None, files: Sequence[Any], verdicts: Sequence[Verdict], *,
                         problem: str, size: str, device: str, compile_only: bool = False,
                         console: Console | None = None) -> int:
    """Store `harness eval` verdicts: one run per kind (`eval`, or `golden` for files under
    candidates/golden/), model and variant `-`, the candidate source when the file still holds
    it. `files` are the evaluated `CandidateFile`s (or paths), in the verdicts' order. Returns
    the number stored; a store that cannot be opened is reported, not raised."""
    from harness.pipeline import device_name_for, versions
    from harness.prompts import detect_hardware

    console = console or Console(stderr=True)
    path = store_path or default_store_path()
    hardware = detect_hardware() if device == "cuda" else None
    fallback_gpu = device_name_for(device, hardware)
    try:
        store = open_store(path)
    except StoreError as err:
        console.print(f"[red]error:[/] verdicts not stored: {err}")
        return 0
    stored = 0
    with store:
        runs_written: set[str] = set()
        for file, verdict in zip(files, verdicts):
            file_path = Path(getattr(file, "path", file))
            golden = is_golden_path(file_path)
            run_id = GOLDEN_RUN if golden else EVAL_RUN
            gpu = verdict.environment.device_name if verdict.environment else fallback_gpu
            if run_id not in runs_written:
                run = Run(id=run_id, mode="golden",
                          config={"problem": problem, "size": size, "device": device, "model": NO_MODEL,
                                  "variant": NO_MODEL, "compile_only": compile_only, "command": "harness eval"},
                          versions=versions(), hardware=hardware, device_name=gpu)
                store.put_run(run)
                with store.db:  # the run's listing columns: model and variant `-` (put_run says `golden`)
                    store.db.execute("UPDATE runs SET model = ?, variant = ? WHERE id = ?", (NO_MODEL, NO_MODEL, run_id))
                runs_written.add(run_id)
            sample = eval_sample_name(file_path, golden)
            scope = hashlib.sha256(json.dumps([verdict.problem, verdict.size, gpu, compile_only]).encode()).hexdigest()
            source = None
            try:
                data = file_path.read_bytes()
                if hashlib.sha256(data).hexdigest() == verdict.source_sha256:
                    source = data.decode("utf-8")
            except (OSError, UnicodeDecodeError):
                pass
            parsed = verdict.status != Status.parse_error
            candidate = Candidate(
                id=f"{run_id}/{sample}@{scope[:8]}", run_id=run_id, sample=sample, problem=verdict.problem,
                source=source, source_sha256=verdict.source_sha256 or None,
                parse=ParseResult(source=source) if parsed else ParseResult(reason=_parse_reason(verdict.error),
                                                                            detail=verdict.error),
                path=str(file_path.resolve()))
            key = verdict_key(verdict.source_sha256, verdict.problem, verdict.size, gpu, compile_only=compile_only)
            store.put_candidate(candidate)
            store.put_verdict(key, verdict, device_name=gpu, run_id=run_id, model=NO_MODEL, variant=NO_MODEL,
                              candidate_id=candidate.id)
            stored += 1
    console.print(f"[dim]stored {stored} verdict(s) in {path}[/]")
    return stored


def candidate_source(store: Store, entry: Entry) -> str | None:
    """The candidate's source: from the store's candidates table, else from the verdict's
    candidate path when that file still holds the judged source."""
    if entry.candidate_id:
        candidate = store.get_candidate(entry.candidate_id)
        if candidate is not None and candidate.source:
            return candidate.source
        paths = [candidate.path] if candidate is not None and candidate.path else []
    else:
        paths = []
    if entry.verdict is not None:
        paths.append(entry.verdict.candidate)
    for p in paths:
        try:
            data = Path(p).read_bytes()
        except OSError:
            continue
        if entry.source_sha256 and hashlib.sha256(data).hexdigest() == entry.source_sha256:
            return data.decode("utf-8", "replace")
    return None
