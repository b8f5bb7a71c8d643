"""`harness report`: one self-contained HTML file out of the result store.

Everything is inline: the stylesheet, the charts (matplotlib, Agg backend, PNG as base64
`data:` URIs), the highlighted sources (pygments with inline styles). No script, no external
stylesheet, font or image: the file opens straight from disk and asks the network for nothing.

Per GPU (rows from different GPUs are never mixed): the summary metrics, the leaderboard
(reference rows, ranked candidates, the rest grouped by outcome; the same rows and columns
as `harness leaderboard`), a speedup chart per problem and size (a bar per timed candidate,
the baselines and golden kernels as vertical lines), a chart of outcomes per model x
variant, and a detail section per candidate: the correctness numbers, timings, flags, the
error and log tails, and the source. A board with refinement turns (a candidate of turn > 1)
also gets the turn and parent columns, the per-turn and per-chain tables (see harness.results.summaries)
and a chart of speedup against turn per problem and size, one line per chain. The page is
`templates/report.html.j2` (Jinja2, autoescaped); this module computes what it shows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from harness.core.outcomes import Outcome
from harness.core.records import utc_now
from harness.core.store import Store
from harness.core.text import fmt_call_ms, fmt_cost, fmt_err, fmt_ms, fmt_speedup
from harness.results.board import Board, ChainRow, Entry, Filters, SummaryRow
from harness.results.columns import (
    CHAINS_CAPTION,
    SPEED_VIEW,
    TURN_VIEW,
    TURNS_CAPTION,
    Column,
    chain_view,
    compact_view,
    outcome_view,
    summary_view,
)
from harness.results.plots import data_uri, figure, suite_figures
from harness.results.suite_board import SuiteBoard, stats_rows, suite_columns

from evaluator.wire.records import SPEEDUP_RULE

TEMPLATES = Path(__file__).resolve().parent / "templates"
BASELINE_COLORS = {"eager": "#424242", "compile": "#1565c0", "eager_tf32": "#757575", "compile_tf32": "#42a5f5"}

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px; color: #212121;
       background: #fff; }
h1 { font-size: 1.6em; margin-bottom: 4px; }
h2 { font-size: 1.3em; border-bottom: 2px solid #e0e0e0; padding-bottom: 4px; margin-top: 32px; }
h3 { font-size: 1.1em; margin-top: 24px; }
.meta { color: #616161; font-size: 0.9em; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 0.85em; }
th, td { border: 1px solid #e0e0e0; padding: 3px 6px; vertical-align: top; }
th { background: #f5f5f5; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.row-reference td { background: #f3f6fb; font-style: italic; }
tr.row-unranked td { color: #555; }
.status { font-weight: 600; }
.reason { min-width: 220px; max-width: 420px; }
td.cand { min-width: 180px; max-width: 320px; overflow-wrap: anywhere; }
.scroll { overflow-x: auto; }
table.leaderboard { font-size: 0.8em; }
.chart { margin: 8px 0 16px; }
.chart img { max-width: 100%; border: 1px solid #eee; }
.detail { border: 1px solid #e0e0e0; border-radius: 6px; padding: 8px 14px; margin: 14px 0; }
.detail h3 { margin-top: 4px; }
pre.log { background: #fafafa; border: 1px solid #eee; padding: 6px; max-height: 320px; overflow: auto;
          white-space: pre-wrap; font-size: 0.8em; }
.source { max-height: 520px; overflow: auto; border: 1px solid #eee; font-size: 0.8em; }
.source pre { margin: 0; }
.note { color: #616161; font-size: 0.85em; }
code { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; }
"""


# -- charts ---------------------------------------------------------------------------------------

def reference_line(draw, entry: Entry, value: float, width: float) -> None:
    """A reference's speedup across a chart (`draw`: the axes' axvline or axhline): a baseline dashed in
    its colour, a golden kernel dotted and a little heavier."""
    if entry.kind == "baseline":
        name = entry.name.split("/", 1)[1]
        draw(value, color=BASELINE_COLORS.get(name, "#9e9e9e"), linestyle="--", linewidth=width,
             label=f"{name} {value:.2f}×")
    else:
        draw(value, color="#6a1b9a", linestyle=":", linewidth=width + 0.2, label=f"{entry.name} {value:.2f}×")


def speedup_charts(board: Board) -> list[tuple[str, str]]:
    """(caption, data URI) per problem/size of `board`: a horizontal bar per timed candidate
    (speedup vs eager), the baselines and golden kernels as vertical lines."""
    groups: dict[tuple[str, str], list[Entry]] = {}
    for e in board.candidates:
        if e.speedup.get("eager") is not None:
            groups.setdefault((e.problem, e.size), []).append(e)
    refs = {}
    for e in board.references:
        if e.speedup.get("eager") is not None:
            refs.setdefault((e.problem, e.size), []).append(e)
    charts = []
    for key in sorted(set(groups) | set(refs)):
        bars = sorted(groups.get(key, []), key=lambda e: e.speedup["eager"])
        lines = refs.get(key, [])
        fig = figure(9.5, 1.6 + 0.32 * max(len(bars), 1))
        ax = fig.add_subplot(1, 1, 1)
        if bars:
            names = [e.name if len(e.name) <= 48 else "…" + e.name[-47:] for e in bars]
            colors = [e.outcome.color for e in bars]
            ax.barh(range(len(bars)), [e.speedup["eager"] for e in bars], color=colors, height=0.6)
            ax.set_yticks(range(len(bars)))
            ax.set_yticklabels(names, fontsize=8)
            for i, e in enumerate(bars):
                ax.text(e.speedup["eager"], i, f" {e.speedup['eager']:.2f}×", va="center", fontsize=7)
        else:
            ax.set_yticks([])
            ax.text(0.5, 0.5, "no timed candidate", transform=ax.transAxes, ha="center", va="center", fontsize=9)
        for e in lines:
            value = e.speedup["eager"]
            reference_line(ax.axvline, e, value, 1.2)
        values = [e.speedup["eager"] for e in bars + lines]
        ax.set_xlim(0, max(values) * 1.18 if values else 1)
        ax.set_xlabel("speedup vs eager fp32 (same evaluation, same GPU)", fontsize=8)
        ax.set_title(f"{key[0]} / {key[1]} on {board.scope}", fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
        handles, _ = ax.get_legend_handles_labels()
        if bars:
            from matplotlib.patches import Patch

            shown = [o for o in Outcome if any(e.outcome == o for e in bars)]
            handles += [Patch(color=o.color, label=o.value) for o in shown]
        if handles:
            ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        charts.append((f"Speedup vs eager: {key[0]} / {key[1]}", data_uri(fig)))
    return charts


def _chain_label(chain: ChainRow, runs: int) -> str:
    label = chain.chain if runs == 1 else f"{chain.run_id}/{chain.chain}"
    return f"chain {label}" if len(label) <= 40 else "chain …" + label[-39:]


def turn_charts(board: Board) -> list[tuple[str, str]]:
    """(caption, data URI) per problem/size with refinement turns: speedup vs eager against turn, one
    colour per chain, a line from each candidate to the one it refines. Ranked candidates are dots at
    their speedup; the others (failed, incorrect, below the tier, rejected) crosses at 0, since only a
    ranked speedup is one to read; the chain's best is ringed. Baselines and golden kernels as
    horizontal lines."""
    from matplotlib import colormaps
    from matplotlib.lines import Line2D

    groups: dict[tuple[str, str], list[ChainRow]] = {}
    for chain in board.chains:
        groups.setdefault((chain.entries[0].problem, chain.entries[0].size), []).append(chain)
    palette = colormaps["tab10" if max((len(c) for c in groups.values()), default=0) <= 10 else "tab20"].colors
    charts = []
    for key in sorted(groups):
        chains = groups[key]
        runs = len({c.run_id for c in chains})
        last_turn = max(c.turns for c in chains)
        fig = figure(9.5, 4.2)
        ax = fig.add_subplot(1, 1, 1)
        top = 0.0
        for i, chain in enumerate(chains):
            color = palette[i % len(palette)]
            # a small sideways offset per chain, so chains on the same points stay apart
            dx = (i - (len(chains) - 1) / 2) * min(0.3 / max(len(chains), 1), 0.05)
            at = {e.candidate_id: (e.turn + dx, e.speedup["eager"] if e.outcome == Outcome.correct
                                   and e.speedup.get("eager") is not None else 0.0) for e in chain.entries}
            ranked_ids = {e.candidate_id for e in chain.entries if e.outcome == Outcome.correct}
            for e in chain.entries:
                if e.parent in at:
                    (x0, y0), (x1, y1) = at[e.parent], at[e.candidate_id]
                    # dotted to or from a candidate that is not ranked: no speedup to read there
                    both = e.parent in ranked_ids and e.candidate_id in ranked_ids
                    ax.plot([x0, x1], [y0, y1], color=color, linewidth=1.3, alpha=0.85, zorder=2,
                            linestyle="-" if both else ":")
            good = [at[e.candidate_id] for e in chain.entries if e.outcome == Outcome.correct]
            bad = [at[e.candidate_id] for e in chain.entries if e.outcome != Outcome.correct]
            if good:
                ax.scatter(*zip(*good), color=color, s=30, zorder=3)
            if bad:
                ax.scatter(*zip(*bad), color=color, marker="x", s=34, zorder=3)
            if chain.best is not None:
                ax.scatter(*at[chain.best.candidate_id], s=130, facecolors="none", edgecolors=color, linewidths=1.6,
                           zorder=3)
            top = max([top] + [y for _, y in good])
            ax.plot([], [], color=color, marker="o", linewidth=1.3,
                    label=_chain_label(chain, runs) + (" (rescued)" if chain.rescued else ""))
        for e in board.references:
            value = e.speedup.get("eager")
            if value is None or (e.problem, e.size) != key:
                continue
            top = max(top, value)
            reference_line(ax.axhline, e, value, 1.0)
        ax.set_xticks(range(1, last_turn + 1))
        ax.set_xlim(0.6, last_turn + 0.4)
        ax.set_ylim(-0.05 * (top or 1.0), (top or 1.0) * 1.15)
        ax.set_xlabel("turn", fontsize=8)
        ax.set_ylabel("speedup vs eager fp32 (ranked only)", fontsize=8)
        ax.set_title(f"{key[0]} / {key[1]} on {board.scope}: speedup by turn", fontsize=9)
        ax.tick_params(labelsize=8)
        handles, _ = ax.get_legend_handles_labels()
        if len(chains) > 16:  # too many chains to name: keep the markers' and lines' legend only
            handles = [h for h in handles if not h.get_label().startswith("chain ")]
        handles += [Line2D([], [], color="#616161", marker="o", linestyle="", label="ranked"),
                    Line2D([], [], color="#616161", marker="x", linestyle="", label="not ranked (at 0)"),
                    Line2D([], [], color="#616161", marker="o", markerfacecolor="none", markersize=10, linestyle="",
                           label="best of its chain")]
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        charts.append((f"Speedup vs eager by turn: {key[0]} / {key[1]}", data_uri(fig)))
    return charts


def outcome_chart(board: Board) -> str | None:
    """Data URI of a stacked horizontal bar per model x variant: samples by outcome."""
    groups: dict[str, dict[str, int]] = {}
    for e in board.candidates + [r for r in board.references if r.kind == "golden"]:
        label = "golden" if e.kind == "golden" else f"{e.model} / {e.variant}"
        counts = groups.setdefault(label, {})
        counts[e.outcome] = counts.get(e.outcome, 0) + 1
    if not groups:
        return None
    labels = sorted(groups, key=lambda g: (g == "golden", g))
    fig = figure(9.5, 1.4 + 0.45 * len(labels))
    ax = fig.add_subplot(1, 1, 1)
    left = [0] * len(labels)
    for outcome in Outcome:
        widths = [groups[g].get(outcome, 0) for g in labels]
        if not any(widths):
            continue
        ax.barh(range(len(labels)), widths, left=left, color=outcome.color, height=0.6,
                label=outcome.value)
        for i, w in enumerate(widths):
            if w:
                ax.text(left[i] + w / 2, i, str(w), ha="center", va="center", fontsize=8, color="white")
        left = [a + b for a, b in zip(left, widths)]
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel("samples", fontsize=8)
    ax.set_title(f"Outcomes on {board.scope} (tier {board.tier})", fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return data_uri(fig)


# -- what the page shows -------------------------------------------------------------------------

def highlight_source(source: str) -> str:
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    return highlight(source, PythonLexer(), HtmlFormatter(noclasses=True, linenos="inline", style="default"))


def candidate_source(store: Store, entry: Entry) -> str | None:
    """The candidate's source: from the store's candidates table, else from the verdict's
    candidate path when that file still holds the judged source."""
    paths: list[str] = []
    if entry.candidate_id:
        candidate = store.get_candidate(entry.candidate_id)
        if candidate is not None and candidate.source:
            return candidate.source
        if candidate is not None and candidate.path:
            paths.append(candidate.path)
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


def detail_head(e: Entry) -> list[tuple[str, str]]:
    """The key/value rows at the top of a candidate's detail section."""
    v = e.verdict
    head = [("status", e.status + (f" ({e.outcome})" if e.outcome != e.status else "")),
            ("model / variant", f"{e.model} / {e.variant}"), ("problem / size", f"{e.problem} / {e.size}"),
            ("GPU", e.gpu)]
    if e.rank is not None:
        head.insert(0, ("rank", str(e.rank)))
    if e.turn > 1:
        head.insert(1 if e.rank is not None else 0, ("turn", f"{e.turn}, refines {e.parent_sample or '-'}"))
    if e.reason:
        head.append(("reason", e.reason))
    if e.salvage is not None:
        head.append(("reply", e.salvage_text or ""))
    if e.spend is not None:
        spend = e.spend
        requests = f"{spend.requests}" + (f" ({spend.salvage_requests} salvaging its cut-off reply)"
                                          if spend.salvage_requests else "")
        tokens = f"{spend.total_tokens:,} (prompt {spend.prompt_tokens:,}, completion {spend.completion_tokens:,}"
        tokens += f", reasoning {spend.reasoning_tokens:,})" if spend.reasoning_tokens else ")"
        head += [("requests", requests), ("tokens", tokens)]
        if spend.cost is not None:
            head.append(("cost", fmt_cost(spend.cost)))
    if v is not None:
        head += [("candidate file", v.candidate), ("source sha256", v.source_sha256[:16] + "…"),
                 ("evaluator", v.evaluator_version),
                 ("judged by", f"evaluator {v.judge.evaluator_sha256[:12]}, problem {v.judge.problem_sha256[:12]} "
                               f"(fingerprint {v.judge.short})" if v.judge else "not recorded (stored before fingerprints)")]
        if v.environment is not None:
            env = v.environment
            head.append(("environment", f"torch {env.torch_version}, CUDA {env.cuda_version or '-'}, driver "
                                        f"{env.driver or '-'}, SM clock {env.sm_clock_mhz or '-'} MHz, {env.hostname}"))
    return head


@dataclass
class RowView:
    entry: Entry
    anchor: str | None = None            # candidates and golden kernels have a detail section
    head: list[tuple[str, str]] | None = None
    timings: list | None = None
    source_html: str | None = None


@dataclass
class SummaryView:
    caption: str
    columns: list[Column]
    rows: Sequence[SummaryRow | ChainRow]
    row_class: Callable[[SummaryRow | ChainRow], str]
    css: str = "summary"


def _summary_row_class(s: SummaryRow) -> str:
    return "summary-row" + (" summary-all" if s.model == "all" else "") + (" row-reference" if s.reference else "")


@dataclass
class BoardView:
    board: Board
    columns: list[Column]
    rows: list[RowView]
    summaries: list[SummaryView]
    speedup_charts: list[tuple[str, str]]
    outcome_chart: str | None
    turn_charts: list[tuple[str, str]]


def board_view(board: Board, index: int, store: Store | None, charts: bool = True) -> BoardView:
    """One board's tables, and unless `charts` is off (a suite's report: its pictures are the suite's, not one
    near-empty chart a problem), its charts."""
    rows = []
    for e in board.rows:
        row = RowView(entry=e)
        if e.kind != "baseline":
            row.anchor = f"c{index}-{sum(1 for r in rows if r.anchor)}"
            row.head = detail_head(e)
            v = e.verdict
            if v is not None:
                row.timings = ([("candidate", v.timing)] if v.timing is not None else []) + list(v.baselines.items())
            source = candidate_source(store, e) if store is not None else None
            row.source_html = highlight_source(source) if source else None
        rows.append(row)
    summaries = [
        SummaryView(f"Outcomes (correct@tier: correct at {board.tier} and not rejected)", outcome_view(board),
                    board.summary, _summary_row_class),
        SummaryView("Speed (fast_p: share of ALL samples correct@tier with speedup > p; geomean and best over "
                    "correct@tier samples)", summary_view(SPEED_VIEW), board.summary, _summary_row_class),
    ]
    if board.multi_turn:
        summaries += [
            SummaryView(f"Turns. {TURNS_CAPTION}", summary_view(TURN_VIEW), board.turns, lambda s: "turn-row",
                        "summary turns"),
            SummaryView(f"Chains. {CHAINS_CAPTION}", chain_view(board), board.chains,
                        lambda c: "chain-row" + (" chain-rescued" if c.rescued else ""), "summary chains"),
        ]
    return BoardView(board=board, columns=compact_view(board), rows=rows, summaries=summaries,
                     speedup_charts=speedup_charts(board) if charts else [],
                     outcome_chart=outcome_chart(board) if charts else None,
                     turn_charts=turn_charts(board) if charts else [])


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html", "j2"]),
                      undefined=StrictUndefined, keep_trailing_newline=True)
    env.globals.update(fmt_err=fmt_err, fmt_ms=fmt_ms, fmt_call_ms=fmt_call_ms, fmt_speedup=fmt_speedup)
    return env


def suite_views(suite: SuiteBoard) -> list[SummaryView]:
    """A suite board's two tables (harness.results.suite_board): each problem's best candidate, then fast_p over them."""
    problem_columns, stats_columns = suite_columns(suite)
    return [SummaryView(f"Each problem's best candidate (tier {suite.tier})", problem_columns, suite.rows,
                        lambda r: "summary-row", "summary suite"),
            SummaryView("fast_p: share of the problems attempted whose best candidate is correct and faster than the "
                        "baseline by more than p; geomean over the problems with a correct candidate", stats_columns,
                        stats_rows(suite), lambda s: "summary-row" + (" summary-all" if s[0] == "all" else ""),
                        "summary suite")]


def render_report(boards: Sequence[Board], store: Store | None = None, *, store_path: str = "",
                  filters: Filters | None = None, tier: str = "loose", suites: Sequence[SuiteBoard] = ()) -> str:
    """The whole HTML document. `store` supplies candidate sources (optional); `suites`, the summary across
    problems, comes first where the boards hold several problems."""
    import harness

    filters = filters or Filters()
    return _environment().get_template("report.html.j2").render(
        gpus=", ".join(b.gpu for b in boards) or "none", tier=tier, store_path=store_path,
        filters=filters.to_dict() or "none", generated=utc_now(), version=harness.__version__, css=CSS,
        boards=[board_view(b, i, store, charts=not suites) for i, b in enumerate(boards)], speedup_rule=SPEEDUP_RULE,
        suites=[(s, suite_views(s), [(caption, data_uri(fig)) for _, caption, fig in suite_figures(s)]) for s in suites])
