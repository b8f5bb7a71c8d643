"""The columns of a board, defined once: how each is read from an entry (or a summary row) and
printed. The renderers (terminal, markdown, CSV, HTML) only pick which columns, in which order.

- `ENTRY_COLUMNS`: one `Column` per field of a board row, by key.
- `FULL_VIEW` (markdown), `CSV_VIEW` (raw values) and `compact_view(board)` (terminal and
  HTML: model and variant share a column, problem/size only when the board has several,
  speedup columns only for baselines timed on the board's GPU) are lists of those keys.
  `full_view(board)` and `csv_view(boards)` add the turn and parent (`TURN_KEYS`, and the chain
  in CSV) when a board holds a candidate of a refinement turn > 1; so does `compact_view`. What
  salvage did about a reply cut off by the token limit (`salvage`) is a column wherever a board
  has such a candidate; each row's tokens (its sample's requests, salvage included) wherever a
  board has a generate run's candidate (CSV: every count, always).
- `SUMMARY_COLUMNS`, `OUTCOME_VIEW`, `SPEED_VIEW`: the same for the summary rows;
  `outcome_view(board)` adds the chain counts, the salvaged replies and the cost where the board has
  them; `TURN_VIEW` is the per-turn summary rows'.
- `CHAIN_COLUMNS` and `chain_view(board)`: the rows of chains of refinement turns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.core.store import NO_MODEL
from harness.core.text import fmt_call_ms, fmt_cost, fmt_err, fmt_flags, fmt_ms, fmt_share, fmt_speedup, fmt_tokens
from harness.results.board import FAST_P, FAST_P_BASELINES, SPEEDUP_BASELINES, Board, ChainRow, Entry, SummaryRow


@dataclass(frozen=True)
class Column:
    """One column: `text` prints it for people, `raw` gives the value for CSV (default: `text`)."""

    key: str
    header: str
    text: Callable[[Any], str]
    raw: Callable[[Any], Any] | None = None
    numeric: bool = False
    short_header: str | None = None  # the terminal's narrower header

    def value(self, row: Any) -> Any:
        return (self.raw or self.text)(row)


def _rank(e: Entry) -> str:
    return str(e.rank) if e.rank is not None else ("ref" if e.section == "reference" else "-")


def _eager_ms(e: Entry) -> float | None:
    stats = e.verdict.baselines.get("eager") if e.verdict is not None else None
    return stats.median_ms if stats is not None else None


def _speedup_column(baseline: str) -> Column:
    return Column(f"speedup_{baseline}", f"× {baseline}", lambda e: fmt_speedup(e.speedup.get(baseline)),
                  raw=lambda e: e.speedup.get(baseline), numeric=True)


_ENTRY_COLUMNS = [
    Column("gpu", "gpu", lambda e: e.gpu),
    Column("section", "section", lambda e: e.section),
    Column("rank", "rank", _rank, raw=lambda e: e.rank, numeric=True),
    Column("kind", "kind", lambda e: e.kind),
    Column("candidate", "candidate", lambda e: e.name),
    Column("model", "model", lambda e: e.model or NO_MODEL, raw=lambda e: e.model),
    Column("variant", "variant", lambda e: e.variant or NO_MODEL, raw=lambda e: e.variant),
    Column("model_variant", "model / variant", lambda e: f"{e.model or NO_MODEL} / {e.variant or NO_MODEL}"),
    Column("problem", "problem", lambda e: e.problem),
    Column("size", "size", lambda e: e.size),
    Column("problem_size", "problem/size", lambda e: f"{e.problem}/{e.size}"),
    Column("status", "status", lambda e: e.shown_status, raw=lambda e: e.status),
    Column("outcome", "outcome", lambda e: e.outcome.value),
    Column("tiers", "tiers", lambda e: ",".join(e.tiers) or "-", raw=lambda e: ",".join(e.tiers)),
    Column("max_abs_err", "max abs err", lambda e: fmt_err(e.max_abs_err), raw=lambda e: e.max_abs_err,
           numeric=True, short_header="max err"),
    Column("max_rel_err", "max rel err", lambda e: fmt_err(e.max_rel_err), raw=lambda e: e.max_rel_err, numeric=True),
    Column("runtime_ms", "ms", lambda e: fmt_call_ms(e.runtime_ms), raw=lambda e: e.runtime_ms, numeric=True),
    # the eager time this row's speedups divide by: its own batch's, not the baseline row's median of every batch
    Column("eager_ms", "its eager ms", lambda e: fmt_ms(_eager_ms(e)), raw=_eager_ms, numeric=True,
           short_header="eager ms"),
    *[_speedup_column(b) for b in SPEEDUP_BASELINES],
    Column("flags", "flags", lambda e: fmt_flags(e.flags)),
    Column("reason", "reason", lambda e: e.reason or ""),
    Column("run_id", "run", lambda e: e.run_id or "", raw=lambda e: e.run_id),
    Column("sample", "sample", lambda e: e.sample or "", raw=lambda e: e.sample),
    Column("evaluations", "evaluations", lambda e: str(e.evaluations or ""), raw=lambda e: e.evaluations,
           numeric=True),
    # refinement turns: shown only on boards with a candidate of turn > 1
    Column("turn", "turn", lambda e: str(e.turn) if e.kind == "candidate" else "",
           raw=lambda e: e.turn if e.kind == "candidate" else None, numeric=True),
    Column("parent", "parent", lambda e: e.parent_sample or ("-" if e.kind == "candidate" else ""),
           raw=lambda e: e.parent),
    Column("chain", "chain", lambda e: e.chain or "" if e.kind == "candidate" else "",
           raw=lambda e: e.chain if e.kind == "candidate" else None),
    # what its sample's requests cost (its own and those salvaging its reply), and what salvage did
    Column("tokens", "tokens", lambda e: fmt_tokens(e.spend.total_tokens) if e.spend else "",
           raw=lambda e: e.spend.total_tokens if e.spend else None, numeric=True),
    Column("requests", "requests", lambda e: str(e.spend.requests) if e.spend else "",
           raw=lambda e: e.spend.requests if e.spend else None, numeric=True),
    Column("salvage_requests", "salvage requests", lambda e: str(e.spend.salvage_requests) if e.spend else "",
           raw=lambda e: e.spend.salvage_requests if e.spend else None, numeric=True),
    Column("prompt_tokens", "prompt tokens", lambda e: fmt_tokens(e.spend.prompt_tokens) if e.spend else "",
           raw=lambda e: e.spend.prompt_tokens if e.spend else None, numeric=True),
    Column("completion_tokens", "completion tokens", lambda e: fmt_tokens(e.spend.completion_tokens) if e.spend else "",
           raw=lambda e: e.spend.completion_tokens if e.spend else None, numeric=True),
    Column("reasoning_tokens", "reasoning tokens", lambda e: fmt_tokens(e.spend.reasoning_tokens) if e.spend else "",
           raw=lambda e: e.spend.reasoning_tokens if e.spend else None, numeric=True),
    Column("cost", "cost", lambda e: fmt_cost(e.spend.cost) if e.spend else "",
           raw=lambda e: e.spend.cost if e.spend else None, numeric=True),
    Column("salvage", "salvage", lambda e: e.salvage_text or "", raw=lambda e: e.salvage_text),
    Column("salvage_short", "salvage", lambda e: e.salvage_short or "", raw=lambda e: e.salvage_short),
]
ENTRY_COLUMNS: dict[str, Column] = {c.key: c for c in _ENTRY_COLUMNS}

SPEEDUP_KEYS = tuple(f"speedup_{b}" for b in SPEEDUP_BASELINES)
FULL_VIEW = ("rank", "candidate", "model", "variant", "problem_size", "status", "tiers", "max_abs_err", "runtime_ms",
             "eager_ms", *SPEEDUP_KEYS, "flags", "reason", "tokens")
CSV_VIEW = ("gpu", "section", "rank", "kind", "candidate", "model", "variant", "problem", "size", "status", "outcome",
            "tiers", "max_abs_err", "max_rel_err", "runtime_ms", *SPEEDUP_KEYS, "flags", "reason", "run_id", "sample",
            "evaluations", "requests", "salvage_requests", "prompt_tokens", "completion_tokens", "reasoning_tokens",
            "tokens", "cost", "eager_ms")


TURN_KEYS = ("turn", "parent")   # after the candidate, on boards with refinement turns


def _with_turns(keys: Sequence[str], board: Board) -> list[str]:
    keys = list(keys)
    if board.multi_turn:
        at = keys.index("candidate") + 1
        keys[at:at] = TURN_KEYS
    return keys


def _with_salvage(keys: list[str], board: Board, key: str = "salvage") -> list[str]:
    # before the reason: the salvage note says how the reply that reason is about came to be
    if board.salvaging:
        at = keys.index("reason") if "reason" in keys else len(keys)
        keys[at:at] = [key]
    return keys


def compact_view(board: Board) -> list[Column]:
    """The columns the terminal and the HTML report show for `board` (see the module docstring)."""
    timed = {b for e in board.rows for b in e.speedup}
    keys = _with_turns(["rank", "candidate", "model_variant"], board)
    keys += ["problem_size"] if len(board.groups) > 1 else []
    keys += ["status", "tiers", "max_abs_err", "runtime_ms", "eager_ms"]
    keys += [f"speedup_{b}" for b in SPEEDUP_BASELINES if b == "eager" or b in timed]
    keys += ["tokens"] if board.spent else []
    return [ENTRY_COLUMNS[k] for k in _with_salvage(keys + ["flags", "reason"], board, "salvage_short")]


def view(keys: Sequence[str]) -> list[Column]:
    return [ENTRY_COLUMNS[k] for k in keys]


def full_view(board: Board) -> list[Column]:
    """The markdown's columns for `board`: FULL_VIEW, with the turn and parent when it has turns, and the
    salvage note when a reply was salvaged."""
    return view(_with_salvage(_with_turns(FULL_VIEW, board), board))


def csv_view(boards: Sequence[Board]) -> list[Column]:
    """The CSV's columns: CSV_VIEW, then turn, parent and chain when a board has turns, and the salvage
    note when a reply was salvaged (at the end, so the other columns keep their places)."""
    return view(CSV_VIEW + (("turn", "parent", "chain") if any(b.multi_turn for b in boards) else ())
                + (("salvage",) if any(b.salvaging for b in boards) else ()))


# -- summary rows ---------------------------------------------------------------------------------

# The verdict statuses counted per summary row, worst first (the outcome type's order is best first).
# `rejected`: kept from running by a static check (a correct verdict with a reject flag counts as correct
# here, and is not in correct@tier).
COUNTED_COLUMNS = ("parse_error", "compile_error", "runtime_error", "timeout", "crashed", "rejected", "incorrect",
                   "correct")


def _count(status: str) -> Column:
    return Column(status, status, lambda s: str(s.counts.get(status, 0)), numeric=True)


def _fast(baseline: str, p: float) -> Column:
    key = f"fast_{p:g}"
    return Column(f"{key} {baseline}", f"{key} {baseline}", lambda s: fmt_share(s.fast_p[baseline][key]), numeric=True)


def _speed_columns(baseline: str) -> list[Column]:
    return [*[_fast(baseline, p) for p in FAST_P],
            Column(f"geomean {baseline}", f"geomean {baseline}", lambda s: fmt_speedup(s.geomean[baseline]), numeric=True),
            Column(f"best {baseline}", f"best {baseline}", lambda s: fmt_speedup(s.best[baseline]), numeric=True)]


def _not_judged(s: SummaryRow) -> str:
    # the request failed (no_reply) or the candidate was never evaluated
    return str(s.counts.get("no_reply", 0) + s.counts.get("not_evaluated", 0))


_SUMMARY_COLUMNS = [
    Column("model", "model", lambda s: s.model + (" (reference)" if s.reference else "")),
    Column("variant", "variant", lambda s: s.variant),
    Column("samples", "samples", lambda s: str(s.samples), numeric=True),
    *[_count(status) for status in COUNTED_COLUMNS],
    Column("correct@tier", "correct@tier", lambda s: str(s.ranked), numeric=True),
    Column("not judged", "not judged", _not_judged, numeric=True),
    Column("tokens", "tokens", lambda s: f"{s.total_tokens:,}" if s.requests else "-", numeric=True),
    Column("tokens/sample", "tokens/sample", lambda s: fmt_tokens(s.tokens_per_sample) if s.requests else "-",
           numeric=True),
    Column("tokens/correct", "tokens/correct", lambda s: fmt_tokens(s.tokens_per_correct) if s.requests else "-",
           numeric=True),
    Column("cost", "cost", lambda s: fmt_cost(s.spend.cost), numeric=True),
    Column("cost/correct", "cost/correct", lambda s: fmt_cost(s.cost_per_correct), numeric=True),
    Column("salvaged", "salvaged", lambda s: f"{s.salvaged}/{s.cut_off}" if s.cut_off else "-", numeric=True),
    Column("latency s", "latency s", lambda s: f"{s.latency_s:.1f}" if s.requests else "-", numeric=True),
    *[c for b in FAST_P_BASELINES for c in _speed_columns(b)],
    # refinement turns
    Column("turn", "turn", lambda s: str(s.turn) if s.turn is not None else "all", numeric=True),
    Column("chains", "chains", lambda s: str(s.chains) if s.chains is not None else "-", numeric=True),
    Column("rescued", "rescued", lambda s: str(s.rescued) if s.rescued is not None else "-", numeric=True),
]
SUMMARY_COLUMNS: dict[str, Column] = {c.key: c for c in _SUMMARY_COLUMNS}
OUTCOME_VIEW = ("model", "variant", "samples", *COUNTED_COLUMNS, "correct@tier", "not judged", "tokens",
                "tokens/sample", "tokens/correct", "latency s")
SPEED_VIEW = ("model", "variant", *[c.key for b in FAST_P_BASELINES for c in _speed_columns(b)])
# one row per model x variant x turn: `samples` are those asked for at that turn (fast_p's denominator)
TURN_VIEW = ("model", "variant", "turn", "samples", "correct@tier", "not judged", "tokens", "tokens/correct",
             "latency s",
             *[c.key for b in FAST_P_BASELINES for c in _speed_columns(b)])

# What the tables of refinement turns hold (terminal, markdown and HTML).
TURNS_CAPTION = ("One row per refinement turn: the samples asked for at that turn, and fast_p over them "
                 "(correct@tier with speedup > p).")
CHAINS_CAPTION = ("One row per chain (a first-turn sample and the candidates refined from it): its best ranked "
                  "candidate; rescued when its first turn is not ranked and a later one is; tokens and request "
                  "latency of all its turns.")


def summary_view(keys: Sequence[str]) -> list[Column]:
    return [SUMMARY_COLUMNS[k] for k in keys]


def outcome_view(board: Board) -> list[Column]:
    """The outcome summary's columns: OUTCOME_VIEW with the cost (and per correct candidate) when some row
    has prices and the salvaged replies (of those cut off) when some were, then chains and rescued chains
    when the board has turns."""
    keys = list(OUTCOME_VIEW)
    at = keys.index("latency s")
    keys[at:at] = (["cost", "cost/correct"] if board.priced else []) + (["salvaged"] if board.salvaging else [])
    return summary_view(keys + (["chains", "rescued"] if board.multi_turn else []))


# -- chains of refinement turns -------------------------------------------------------------------

def _best_speedup(baseline: str) -> Column:
    return Column(f"best_speedup_{baseline}", f"best × {baseline}",
                  lambda c: fmt_speedup(c.best.speedup.get(baseline) if c.best else None),
                  raw=lambda c: c.best.speedup.get(baseline) if c.best else None, numeric=True)


def _first_outcome(c: ChainRow) -> str:
    first = c.first
    return first.shown_status if first is not None else "-"


_CHAIN_COLUMNS = [
    Column("run", "run", lambda c: c.run_id),
    Column("chain", "chain", lambda c: c.chain),
    Column("model_variant", "model / variant", lambda c: f"{c.model} / {c.variant}"),
    Column("samples", "samples", lambda c: str(len(c.entries)), numeric=True),
    Column("turns", "turns", lambda c: str(c.turns), numeric=True),
    Column("turn 1", "turn 1", _first_outcome),
    Column("best", "best", lambda c: c.best.sample or c.best.name if c.best else "-",
           raw=lambda c: c.best.name if c.best else None),
    Column("best turn", "best turn", lambda c: str(c.best.turn) if c.best else "-",
           raw=lambda c: c.best.turn if c.best else None, numeric=True),
    Column("best rank", "best rank", lambda c: str(c.best.rank) if c.best and c.best.rank else "-",
           raw=lambda c: c.best.rank if c.best else None, numeric=True),
    *[_best_speedup(b) for b in SPEEDUP_BASELINES],
    Column("rescued", "rescued", lambda c: "yes" if c.rescued else "", raw=lambda c: c.rescued),
    Column("tokens", "tokens", lambda c: f"{c.total_tokens:,}" if c.requests else "-", numeric=True),
    Column("latency s", "latency s", lambda c: f"{c.latency_s:.1f}" if c.requests else "-", numeric=True),
]
CHAIN_COLUMNS: dict[str, Column] = {c.key: c for c in _CHAIN_COLUMNS}


def chain_view(board: Board) -> list[Column]:
    """The chains' columns: the best candidate's speedup vs each baseline timed on the board's GPU."""
    timed = {b for e in board.rows for b in e.speedup}
    keys = ["run", "chain", "model_variant", "samples", "turns", "turn 1", "best", "best turn", "best rank"]
    keys += [f"best_speedup_{b}" for b in SPEEDUP_BASELINES if b == "eager" or b in timed]
    return [CHAIN_COLUMNS[k] for k in keys + ["rescued", "tokens", "latency s"]]
