"""Boards and verdicts as text: rich tables for the terminal, JSON, CSV and markdown.

Every cell comes from `harness.results.columns`; every colour from `harness.core.outcomes`. The HTML
report is `harness.results.report`.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from evaluator.wire.records import FlagPolicy, Status, Verdict
from harness.core.outcomes import Outcome
from harness.core.ranking import classify
from harness.core.text import fmt_cost, fmt_flags, fmt_tokens, short_text
from harness.results.board import Board, Filters
from harness.results.columns import (
    CHAINS_CAPTION,
    SPEED_VIEW,
    TURN_VIEW,
    TURNS_CAPTION,
    Column,
    chain_view,
    compact_view,
    csv_view,
    full_view,
    outcome_view,
    summary_view,
)
from harness.results.suite_board import SuiteBoard, stats_rows, suite_columns, suite_json

if TYPE_CHECKING:
    from harness.results.run_summary import RunSummary
    from harness.generation.spend import Spend

FORMATS = ("table", "json", "csv", "md")


# -- boards ---------------------------------------------------------------------------------------

# Left out, in this order, while a board is wider than the terminal (it would be cropped on the right): the
# details first, then what only some boards have, then every speedup but the one it is ranked by.
NARROW_DROPS = ("max_abs_err", "tiers", "model_variant", "eager_ms", "reason", "flags", "salvage_short", "tokens", "parent",
                "turn", "problem_size", "speedup_compile", "speedup_eager_tf32", "speedup_compile_tf32")
DETAILS = 6      # the first NARROW_DROPS go before a name is folded; the others only when folding is not enough
NAME_WIDTH = 24  # the candidate's name is folded at this width, at least, where the board is still too wide


def readable_width(board: Board, cols: Sequence[Column]) -> int:
    """How wide a board's table must be for every column to stay readable: unbroken columns (numbers, the
    candidate, the status) as wide as their longest cell, text columns folded at 12 (the reason at 30)."""
    width = 1
    for col in cols:
        longest = max([len(col.short_header or col.header)] + [len(col.text(e)) for e in board.rows])
        unbroken = col.numeric or col.key in ("candidate", "status")
        width += 3 + (longest if unbroken else min(longest, 30 if col.key == "reason" else 12))
    return width


def folded_width(board: Board, cols: Sequence[Column]) -> int:
    """readable_width with the candidate's name folded at NAME_WIDTH."""
    name = next((c for c in cols if c.key == "candidate"), None)
    longest = max([len(name.header)] + [len(name.text(e)) for e in board.rows]) if name else 0
    return readable_width(board, cols) - max(0, longest - NAME_WIDTH)


def fitted_columns(board: Board, console: Console) -> tuple[list[Column], list[Column]]:
    """The compact columns that stay readable in `console`'s width, and those left out for it."""
    cols, dropped = compact_view(board), []
    for key in NARROW_DROPS:
        fits = readable_width if key in NARROW_DROPS[:DETAILS] else folded_width
        if fits(board, cols) <= console.width:
            break
        dropped += [c for c in cols if c.key == key]
        cols = [c for c in cols if c.key != key]
    return cols, dropped


def leaderboard_table(board: Board, columns: Sequence[Column] | None = None, width: int | None = None) -> Table:
    """The rich table of a board (the compact columns, or `columns`). Numbers and statuses are never
    broken; where even the columns left do not fit `width`, the candidate's name is folded instead."""
    cols = list(columns) if columns is not None else compact_view(board)
    fold_names = width is not None and readable_width(board, cols) > width
    title = board.title
    table = Table(title=title, title_justify="left", show_lines=False)
    for col in cols:
        whole = col.numeric or col.key == "status" or (col.key == "candidate" and not fold_names)
        longest = max([len(col.text(e)) for e in board.rows] + [1])
        table.add_column(col.short_header or col.header, overflow="fold", justify="right" if col.numeric else "left",
                         no_wrap=whole, min_width=30 if col.key == "reason" else (
                             longest if whole else (min(longest, NAME_WIDTH) if col.key == "candidate" else None)))
    sections = [s for s in (board.references, board.ranked, board.unranked) if s]
    for i, section in enumerate(sections):
        for j, e in enumerate(section):
            row = []
            for col in cols:
                value = col.text(e)
                if col.key == "reason" and len(value) > 120:
                    value = value[:119] + "…"
                text = Text(value)
                if col.key == "status" and e.outcome != Outcome.reference:
                    text.stylize(e.outcome.style)
                row.append(text)
            row_style = "dim" if e.kind == "baseline" else ("italic" if e.kind == "golden" else None)
            table.add_row(*row, style=row_style, end_section=(j == len(section) - 1 and i < len(sections) - 1))
    return table


def _summary_table(title: str, columns: list[Column], rows: Sequence[object], width: int | None = None) -> Table:
    """One row per summary; where that is wider than `width`, turned on its side (one row per column)."""
    cells = [[c.text(s) for c in columns] for s in rows]
    wide = 1 + sum(3 + max([len(c.header)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns))
    table = Table(title=title, title_justify="left")
    if width is not None and wide > width and rows:
        table.add_column("", no_wrap=True, min_width=max(len(c.header) for c in columns))
        for i in range(len(rows)):
            table.add_column(justify="right", overflow="fold")
        for i, c in enumerate(columns):
            table.add_row(c.header, *[row[i] for row in cells])
        return table
    for c in columns:
        table.add_column(c.header, justify="right" if c.numeric else "left")
    for s, row in zip(rows, cells):
        style = "bold" if getattr(s, "model", None) == "all" else ("dim" if getattr(s, "reference", False) else None)
        table.add_row(*[Text(cell) for cell in row], style=style)
    return table


def summary_tables(board: Board, width: int | None = None) -> list[Table]:
    tables = [
        _summary_table(f"Outcomes on {board.scope} (correct@tier: correct at {board.tier}, not rejected)",
                       outcome_view(board), board.summary, width),
        _summary_table(f"Speed on {board.scope} (fast_p: share of all samples correct@tier with speedup > p)",
                       summary_view(SPEED_VIEW), board.summary, width),
    ]
    if board.multi_turn:
        tables += [_summary_table(f"Turns on {board.scope}. {TURNS_CAPTION}", summary_view(TURN_VIEW), board.turns,
                                  width),
                   _summary_table(f"Chains on {board.scope}. {CHAINS_CAPTION}", chain_view(board), board.chains,
                                  width)]
    return tables


# Under every board whose rows carry a flag that rejects.
FLAG_LEGEND = ("flags: `name!` rejects (the candidate is not ranked), `name` is for information; "
               "`harness show RUN/SAMPLE` gives every reason whole")


def print_tables(boards: Sequence[Board], console: Console) -> None:
    for board in boards:
        columns, dropped = fitted_columns(board, console)
        console.print(leaderboard_table(board, columns, console.width))
        if dropped:
            console.print(f"[dim]left out to fit {console.width} columns: "
                          f"{', '.join(c.header for c in dropped)} (`--format md` or `json` has them all)[/]",
                          highlight=False)
        if any(f.policy == FlagPolicy.reject for e in board.rows if e.verdict is not None for f in e.verdict.flags):
            console.print(f"[dim]{FLAG_LEGEND}[/]", highlight=False)
        for table in summary_tables(board, console.width):
            console.print(table)
        console.print()


def to_json(boards: Sequence[Board], filters: Filters, tier: str, store_path: str | None = None,
            suites: Sequence[SuiteBoard] = ()) -> str:
    """The boards, and `suite`: the summary across problems (harness.results.suite_board; `suites` too where the
    problems were judged on several GPUs)."""
    document = {"tier": tier, "filters": filters.to_dict(), "store": store_path, "suite": suite_json(suites),
                "boards": [b.to_dict() for b in boards]}
    if len(suites) > 1:
        document["suites"] = [s.to_dict() for s in suites]
    return json.dumps(document, indent=2)


def to_csv(boards: Sequence[Board], suites: Sequence[SuiteBoard] = ()) -> str:
    """The boards' rows; then, where the scope holds several problems, a blank line and each suite's problem
    rows and summary rows, each block under its own header line."""
    columns = csv_view(boards)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([c.key for c in columns])
    for board in boards:
        for e in board.rows:
            writer.writerow(["" if (value := c.value(e)) is None else value for c in columns])
    problem_columns, stats_columns = suite_columns()
    for suite in suites:
        for cols, rows in ((problem_columns, suite.rows), (stats_columns, stats_rows(suite))):
            writer.writerow([])
            writer.writerow(["gpu"] + [c.key for c in cols])
            for row in rows:
                writer.writerow([suite.gpu] + ["" if (value := c.value(row)) is None else value for c in cols])
    return buffer.getvalue()


def suite_tables(suite: SuiteBoard) -> list[Table]:
    """The suite board for the terminal: one row per problem, then fast_p and geomean over them."""
    problem_columns, stats_columns = suite_columns(suite)
    name = f"suite {suite.name} " if suite.name else "suite "
    tables = []
    for title, cols, rows in (
            (f"{name}on {suite.where}: each problem's best candidate (tier {suite.tier})", problem_columns, suite.rows),
            (f"{name}on {suite.where}: fast_p = share of the problems attempted whose best candidate is correct and "
             "faster than the baseline by more than p (KernelBench's: its point estimate; (95%): the lower end of its "
             "interval); fast_0: correct, shaky timing included", stats_columns, stats_rows(suite))):
        table = Table(title=title, title_justify="left")
        for c in cols:
            table.add_column(c.header, justify="right" if c.numeric else "left")
        for row in rows:
            table.add_row(*[Text(c.text(row)) for c in cols])
        tables.append(table)
    return tables


def suite_markdown(suites: Sequence[SuiteBoard]) -> str:
    parts = []
    for suite in suites:
        problem_columns, stats_columns = suite_columns(suite)
        parts.append(f"## Suite {suite.name or ''} on {suite.where} (tier {suite.tier})\n")
        parts.append(md_table(problem_columns, suite.rows) + "\n")
        parts.append(md_table(stats_columns, stats_rows(suite)) + "\n")
    return "\n".join(parts)


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def md_table(columns: Sequence[Column], rows: Iterable[object]) -> str:
    lines = ["| " + " | ".join(_md_escape(c.header) for c in columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(_md_escape(c.text(row)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def to_markdown(boards: Sequence[Board]) -> str:
    parts = []
    for board in boards:
        parts.append(f"## {board.title}\n")
        parts.append(md_table(full_view(board), board.rows) + "\n")
        parts.append(f"### Outcomes on {board.scope}\n")
        parts.append(md_table(outcome_view(board), board.summary) + "\n")
        parts.append(f"### Speed on {board.scope}\n")
        parts.append(md_table(summary_view(SPEED_VIEW), board.summary) + "\n")
        if board.multi_turn:
            parts.append(f"### Turns on {board.scope}\n\n{TURNS_CAPTION}\n")
            parts.append(md_table(summary_view(TURN_VIEW), board.turns) + "\n")
            parts.append(f"### Chains on {board.scope}\n\n{CHAINS_CAPTION}\n")
            parts.append(md_table(chain_view(board), board.chains) + "\n")
    return "\n".join(parts)


# -- verdicts and runs ----------------------------------------------------------------------------

def status_text(verdict: Verdict, tier: str = "loose") -> str:
    """A verdict's status as every table shows it: with what the leaderboard makes of a correct one where that
    differs (`correct, shaky`: not ranked), in the outcome's style."""
    outcome, _ = classify(verdict, tier)
    if outcome == Outcome.of(verdict.status):
        return outcome.styled()
    return outcome.styled(f"{verdict.status.value}, {outcome.value}")


def verdict_table(verdicts: Sequence[Verdict], title: str | None = None) -> Table:
    """`harness eval`'s table: one row per verdict."""
    baselines = sorted({name for v in verdicts for name in v.speedup})
    gpu = next((v.environment.device_name for v in verdicts if v.environment), None)
    table = Table(title=title or (f"Verdicts on {gpu}" if gpu else "Verdicts"), show_lines=False)
    for column in ("candidate", "status", "tiers", "max abs err", "ms"):
        table.add_column(column, justify="right" if column in ("max abs err", "ms") else "left")
    for name in baselines:
        table.add_column(f"× {name}", justify="right")
    table.add_column("flags")
    table.add_column("error")
    for v in verdicts:
        tiers = ",".join(t for t, ok in (v.correctness.tiers.items() if v.correctness else []) if ok)
        err = v.correctness.max_abs_err if v.correctness else None
        row = [
            v.candidate, status_text(v), tiers or "-",
            f"{err:.2e}" if err is not None else "-", f"{v.runtime_ms:.4f}" if v.runtime_ms else "-",
        ]
        row += [f"{v.speedup[b]:.2f}" if b in v.speedup else "-" for b in baselines]
        row.append(fmt_flags(v.flags))
        row.append(short_text(_error_at_candidate(v) or v.error, 90))
        table.add_row(*row)
    return table


def _error_at_candidate(v: Verdict) -> str | None:
    """A build's errors at the candidate file's own lines (not the main.cpp or cuda.cu load_inline made of it)."""
    if v.status != Status.compile_error or not Path(v.candidate).is_file():
        return None
    from harness.feedback.compile_error import at_candidate_lines

    return at_candidate_lines(v.error, Path(v.candidate).read_text(errors="replace"))


def run_table(summary: RunSummary, title: str | None = None) -> Table:
    """`harness run`'s table: samples best first, with status, error, runtime, speedup per baseline, the
    tokens of each sample's requests, and (when a reply was cut off by the token limit) what salvage did."""
    outcomes = summary.ranked_outcomes()
    baselines = sorted({b for o in outcomes if o.verdict is not None for b in o.verdict.speedup})
    salvaged = any(o.salvage is not None for o in outcomes)
    table = Table(title=title, title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("sample")
    table.add_column("status")
    if salvaged:
        table.add_column("reply", overflow="fold", max_width=60)
    table.add_column("error", overflow="fold", max_width=80)
    table.add_column("ms", justify="right")
    for name in baselines:
        table.add_column(f"× {name}", justify="right")
    table.add_column("tokens", justify="right")
    for rank, o in enumerate(outcomes, 1):
        status = status_text(o.verdict) if o.verdict is not None else o.status.styled()
        if o.reused_verdict:  # judged by an earlier command (a reply read from the store is not said here)
            status += " [dim](stored)[/]"
        ms = f"{o.verdict.runtime_ms:.4f}" if o.verdict is not None and o.verdict.runtime_ms is not None else "-"
        row = [str(rank), o.sample, status]
        if salvaged:
            record = o.salvage.record if o.salvage is not None else None
            before = record.before.reason.value if record is not None and record.before.reason else "cut off"
            row.append(f"{before} → {record.note}" if record is not None else "")
        row += [short_text(o.error, 80), ms]
        row += [f"{o.verdict.speedup[b]:.2f}" if o.verdict is not None and b in o.verdict.speedup else "-"
                for b in baselines]
        tokens = sum(g.completion.usage.total_tokens or 0 for g in o.generations)
        row.append(fmt_tokens(tokens) if o.generations else "-")
        table.add_row(*row)
    return table


def spend_line(spend: Spend, samples: int, correct: int) -> str:
    """One line of what a run's requests cost: tokens (prompt, completion, reasoning), requests (salvage
    among them), per sample and per correct candidate, and the cost when the model has prices."""
    parts = [f"{spend.prompt_tokens:,} prompt", f"{spend.completion_tokens:,} completion"]
    if spend.reasoning_tokens:
        parts.append(f"{spend.reasoning_tokens:,} of them reasoning")
    salvage = f", {spend.salvage_requests} of them salvaging cut-off replies" if spend.salvage_requests else ""
    line = (f"tokens: {spend.total_tokens:,} ({', '.join(parts)}) over {spend.requests} request(s){salvage}; "
            f"{fmt_tokens(spend.tokens_per(samples))} per sample, {fmt_tokens(spend.tokens_per(correct))} per correct "
            f"candidate ({correct} of {samples})")
    if spend.cost is not None:
        line += f"; cost {fmt_cost(spend.cost)}, {fmt_cost(spend.cost_per(correct))} per correct candidate"
    return line
