"""`harness report`: one self-contained HTML file out of the result store.

Everything is inline: the stylesheet, the charts (matplotlib, Agg backend, PNG as base64
`data:` URIs), the highlighted sources (pygments with inline styles). No script, no external
stylesheet, font or image: the file opens straight from disk and asks the network for nothing.

Per GPU (rows from different GPUs are never mixed): the summary metrics, the leaderboard
(reference rows, ranked candidates, the rest grouped by outcome; the same rows as
`harness leaderboard`), a speedup chart per problem and size (a bar per timed candidate, the
baselines and golden kernels as vertical lines), a chart of outcomes per model x variant, and
a detail section per candidate: the correctness numbers, timings, flags, the error and log
tails, and the source.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from harness.leaderboard import (
    OUTCOME_ORDER,
    SUMMARY_OUTCOME_COLUMNS,
    Board,
    Entry,
    Filters,
    board_groups,
    board_title,
    build_boards,
    candidate_source,
    default_store_path,
    display_columns,
    entry_cells,
    fmt_err,
    fmt_ms,
    fmt_speedup,
    speed_columns,
    summary_cells,
)
from harness.records import utc_now
from harness.store import Store, StoreError, open_store

OUTCOME_COLORS = {
    "correct": "#2e7d32", "below_tier": "#f9a825", "rejected": "#c62828", "compiled": "#00838f",
    "incorrect": "#ef6c00", "runtime_error": "#d32f2f", "compile_error": "#ad1457", "timeout": "#6a1b9a",
    "crashed": "#4527a0", "parse_error": "#795548", "no_reply": "#616161", "not_evaluated": "#bdbdbd",
}
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


def _e(text: object) -> str:
    return html.escape("" if text is None else str(text), quote=True)


# -- charts ---------------------------------------------------------------------------------------

def _png(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # the Agg backend, no global pyplot state
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


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
        fig = _figure(9.5, 1.6 + 0.32 * max(len(bars), 1))
        ax = fig.add_subplot(1, 1, 1)
        if bars:
            names = [e.name if len(e.name) <= 48 else "…" + e.name[-47:] for e in bars]
            colors = [OUTCOME_COLORS.get(e.outcome, "#9e9e9e") for e in bars]
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
            if e.kind == "baseline":
                name = e.name.split("/", 1)[1]
                ax.axvline(value, color=BASELINE_COLORS.get(name, "#9e9e9e"), linestyle="--", linewidth=1.2,
                           label=f"{name} {value:.2f}×")
            else:
                ax.axvline(value, color="#6a1b9a", linestyle=":", linewidth=1.4, label=f"{e.name} {value:.2f}×")
        values = [e.speedup["eager"] for e in bars + lines]
        ax.set_xlim(0, max(values) * 1.18 if values else 1)
        ax.set_xlabel("speedup vs eager fp32 (same evaluation, same GPU)", fontsize=8)
        ax.set_title(f"{key[0]} / {key[1]} on {board.gpu}", fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
        handles, _ = ax.get_legend_handles_labels()
        if bars:
            from matplotlib.patches import Patch

            shown = [o for o in OUTCOME_ORDER if any(e.outcome == o for e in bars)]
            handles += [Patch(color=OUTCOME_COLORS.get(o, "#9e9e9e"), label=o) for o in shown]
        if handles:
            ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        charts.append((f"Speedup vs eager: {key[0]} / {key[1]}", _png(fig)))
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
    fig = _figure(9.5, 1.4 + 0.45 * len(labels))
    ax = fig.add_subplot(1, 1, 1)
    left = [0] * len(labels)
    for outcome in OUTCOME_ORDER:
        widths = [groups[g].get(outcome, 0) for g in labels]
        if not any(widths):
            continue
        ax.barh(range(len(labels)), widths, left=left, color=OUTCOME_COLORS.get(outcome, "#9e9e9e"), height=0.6,
                label=outcome)
        for i, w in enumerate(widths):
            if w:
                ax.text(left[i] + w / 2, i, str(w), ha="center", va="center", fontsize=8, color="white")
        left = [a + b for a, b in zip(left, widths)]
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel("samples", fontsize=8)
    ax.set_title(f"Outcomes on {board.gpu} (tier {board.tier})", fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _png(fig)


# -- html pieces ----------------------------------------------------------------------------------

def _anchor(board_index: int, entry_index: int) -> str:
    return f"c{board_index}-{entry_index}"


def _summary_html(board: Board) -> str:
    outcome_cols = ("model", "variant", *SUMMARY_OUTCOME_COLUMNS)
    speed_cols = ("model", "variant", *speed_columns())
    parts = []
    for caption, cols in ((f"Outcomes (correct@tier: correct at {board.tier} and not rejected)", outcome_cols),
                          ("Speed (fast_p: share of ALL samples correct@tier with speedup &gt; p; geomean and best "
                           "over correct@tier samples)", speed_cols)):
        rows = []
        for s in board.summary:
            cells = summary_cells(s)
            cls = "summary-row" + (" summary-all" if s.model == "all" else "") + (" row-reference" if s.reference else "")
            rows.append(f'<tr class="{cls}">' + "".join(
                f'<td class="{"num" if c not in ("model", "variant") else ""}">{_e(cells[c])}</td>' for c in cols)
                + "</tr>")
        parts.append(f'<table class="summary"><caption class="note">{caption}</caption><thead><tr>'
                     + "".join(f"<th>{_e(c)}</th>" for c in cols) + "</tr></thead><tbody>" + "".join(rows)
                     + "</tbody></table>")
    return "\n".join(parts)


def _leaderboard_html(board: Board, board_index: int, anchors: dict[int, str]) -> str:
    cols = display_columns(board)
    groups = board_groups(board)
    rows = []
    for e in board.rows:
        cells = entry_cells(e)
        cls = f"row-{e.section}" + (" row-candidate" if e.kind == "candidate" else f" row-{e.kind}")
        tds = []
        for col in cols:
            value = col.text(cells)
            if col.header == "candidate" and id(e) in anchors:
                content = f'<a href="#{anchors[id(e)]}">{_e(value)}</a>'
            else:
                content = _e(value)
            if col.header == "status":
                color = OUTCOME_COLORS.get(e.outcome, "#424242")
                tds.append(f'<td class="status" style="color:{color}">{content}</td>')
            elif col.numeric:
                tds.append(f'<td class="num">{content}</td>')
            elif col.header in ("reason", "candidate"):
                tds.append(f'<td class="{"cand" if col.header == "candidate" else "reason"}">{content}</td>')
            else:
                tds.append(f"<td>{content}</td>")
        rows.append(f'<tr class="{cls}" data-outcome="{_e(e.outcome)}">' + "".join(tds) + "</tr>")
    caption = (f"<caption class='note'>{_e(groups[0])}; columns of baselines never timed on this GPU are left "
               f"out</caption>" if len(groups) == 1 else "")
    return (f'<div class="scroll"><table class="leaderboard" id="leaderboard-{board_index}">{caption}<thead><tr>'
            + "".join(f"<th>{_e(c.header)}</th>" for c in cols) + "</tr></thead><tbody>" + "\n".join(rows)
            + "</tbody></table></div>")


def highlight_source(source: str) -> str:
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    return highlight(source, PythonLexer(), HtmlFormatter(noclasses=True, linenos="inline", style="default"))


def _kv_table(rows: Sequence[tuple[str, str]], cls: str = "kv") -> str:
    return (f'<table class="{cls}"><tbody>' + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
            + "</tbody></table>")


def _detail_html(e: Entry, anchor: str, source: str | None) -> str:
    v = e.verdict
    head = [("status", e.status + (f" ({e.outcome})" if e.outcome != e.status else "")),
            ("model / variant", f"{e.model} / {e.variant}"), ("problem / size", f"{e.problem} / {e.size}"),
            ("GPU", e.gpu)]
    if e.rank is not None:
        head.insert(0, ("rank", str(e.rank)))
    if e.reason:
        head.append(("reason", e.reason))
    if v is not None:
        head += [("candidate file", v.candidate), ("source sha256", v.source_sha256[:16] + "…"),
                 ("evaluator", v.evaluator_version)]
        if v.environment is not None:
            env = v.environment
            head.append(("environment", f"torch {env.torch_version}, CUDA {env.cuda_version or '-'}, driver "
                                        f"{env.driver or '-'}, SM clock {env.sm_clock_mhz or '-'} MHz, {env.hostname}"))
    parts = [f'<section class="detail" id="{anchor}"><h3>{_e(e.name)}</h3>', _kv_table(head)]
    if v is not None and v.correctness is not None:
        c = v.correctness
        modes = [c.main] + ([c.eval_mode] if c.eval_mode is not None else [])
        rows = []
        for m in modes:
            tiers = ", ".join(f"{t} {'pass' if ok else 'FAIL'}" for t, ok in m.tiers.items())
            rows.append(f"<tr><td>{_e(m.mode)}</td><td class='num'>{m.trials}</td><td>{_e(tiers)}</td>"
                        f"<td class='num'>{fmt_err(m.max_abs_err)}</td><td class='num'>{fmt_err(m.max_rel_err)}</td>"
                        f"<td>{_e(m.failure or '')}</td></tr>")
        parts.append("<h4>Correctness</h4><table class='correctness'><thead><tr><th>mode</th><th>trials</th>"
                     "<th>tiers</th><th>max abs err</th><th>max rel err</th><th>failure</th></tr></thead><tbody>"
                     + "".join(rows) + "</tbody></table>")
        tensors = "".join(f"<tr><td>{_e(t.name)}</td><td class='num'>{fmt_err(t.max_abs_err)}</td>"
                          f"<td class='num'>{fmt_err(t.max_rel_err)}</td></tr>" for t in c.main.tensors)
        if tensors:
            parts.append("<table class='tensors'><thead><tr><th>tensor (main mode)</th><th>max abs err</th>"
                         "<th>max rel err</th></tr></thead><tbody>" + tensors + "</tbody></table>")
        parts.append(f"<p class='note'>distributions {_e(', '.join(c.distributions))}; seeds "
                     f"{_e(', '.join(map(str, c.seeds)))}; buffers checked {_e(', '.join(c.buffers_checked))}</p>")
    if v is not None and (v.timing is not None or v.baselines):
        rows = []
        timings = ([("candidate", v.timing)] if v.timing is not None else []) + list(v.baselines.items())
        for name, t in timings:
            ratio = "" if name == "candidate" else fmt_speedup(v.speedup.get(name))
            rows.append(f"<tr><td>{_e(name)}</td><td class='num'>{fmt_ms(t.median_ms)}</td>"
                        f"<td class='num'>{fmt_ms(t.iqr_ms)}</td><td class='num'>{fmt_ms(t.min_ms)}</td>"
                        f"<td class='num'>{t.reps}</td><td class='num'>{_e(ratio)}</td></tr>")
        parts.append("<h4>Timing (ms, one evaluation)</h4><table class='timing'><thead><tr><th>callable</th>"
                     "<th>median</th><th>IQR</th><th>min</th><th>reps</th><th>candidate speedup vs it</th></tr>"
                     "</thead><tbody>" + "".join(rows) + "</tbody></table>")
    if e.flags:
        parts.append("<h4>Flags</h4><ul>" + "".join(
            f"<li><b>{_e(f.name)}</b> ({_e(f.policy.value)}): {_e(f.reason)}</li>" for f in e.flags) + "</ul>")
    error = v.error if v is not None else e.reason
    if error:
        parts.append(f"<h4>Error</h4><pre class='log'>{_e(error[-6000:])}</pre>")
    if v is not None:
        for name, tail, total in (("stdout", v.stdout_tail, v.stdout_bytes), ("stderr", v.stderr_tail, v.stderr_bytes)):
            if tail.strip():
                parts.append(f"<h4>{name} tail ({total} bytes in all)</h4><pre class='log'>{_e(tail[-4000:])}</pre>")
        if v.log_dir:
            parts.append(f"<p class='note'>logs: <code>{_e(v.log_dir)}</code></p>")
    if source:
        parts.append("<h4>Source</h4><div class='source'>" + highlight_source(source) + "</div>")
    else:
        parts.append("<p class='note'>source not available (no usable code, or the file is gone)</p>")
    parts.append("</section>")
    return "\n".join(parts)


def render_report(boards: Sequence[Board], store: Store | None = None, *, store_path: str = "",
                  filters: Filters | None = None, tier: str = "loose") -> str:
    """The whole HTML document. `store` supplies candidate sources (optional)."""
    import harness

    filters = filters or Filters()
    gpus = ", ".join(b.gpu for b in boards) or "none"
    body = [f"<h1>kernelharness report</h1><p class='meta'>GPU: <b>{_e(gpus)}</b> · tier <b>{_e(tier)}</b> · "
            f"store <code>{_e(store_path)}</code> · filters {_e(filters.to_dict() or 'none')} · generated "
            f"{_e(utc_now())} by kernelharness {_e(harness.__version__)}</p>",
            "<p class='note'>Ranked: verdict <i>correct</i>, passing the chosen tolerance tier, no <i>reject</i> or "
            "<i>implausible</i> flag; ordered by speedup vs eager fp32. Every speedup is a ratio measured in one "
            "evaluation (candidate and baseline in the same worker process on the same GPU); rows from different "
            "GPUs are never mixed. Reference rows: each baseline (median of its per-evaluation medians; its speedup "
            "columns are ratios within each evaluation, then the median) and the golden kernels.</p>"]
    if not boards:
        body.append("<p><b>No verdicts in the store match.</b></p>")
    for bi, board in enumerate(boards):
        body.append(f"<h2 id='gpu-{bi}'>{_e(board_title(board))}</h2>")
        body.append(f"<p class='meta'>GPU: <b class='gpu-name'>{_e(board.gpu)}</b> · "
                    f"{len(board.candidates)} candidate(s), {len(board.ranked)} ranked</p>")
        body.append("<h3>Summary</h3>" + _summary_html(board))
        anchors: dict[int, str] = {}
        detailed = [e for e in board.rows if e.kind != "baseline"]
        for ei, e in enumerate(detailed):
            anchors[id(e)] = _anchor(bi, ei)
        body.append("<h3>Leaderboard</h3>" + _leaderboard_html(board, bi, anchors))
        body.append("<h3>Charts</h3>")
        for caption, uri in speedup_charts(board):
            body.append(f"<figure class='chart speedup-chart'><img alt='{_e(caption)}' src='{uri}'>"
                        f"<figcaption class='note'>{_e(caption)}; bars coloured by outcome; dashed lines: baselines; "
                        f"dotted: golden kernels</figcaption></figure>")
        uri = outcome_chart(board)
        if uri:
            body.append(f"<figure class='chart outcome-chart'><img alt='Outcomes by status' src='{uri}'>"
                        f"<figcaption class='note'>Samples by outcome per model / variant</figcaption></figure>")
        body.append("<h3>Candidates</h3>")
        for e in detailed:
            source = candidate_source(store, e) if store is not None else None
            body.append(_detail_html(e, anchors[id(e)], source))
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<title>kernelharness report: {_e(gpus)}</title><style>{CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def report_command(*, store: Path | None, filters: Filters, tier: str = "loose", out: Path = Path("report.html"),
                   console: Console | None = None) -> int:
    """`harness report`: write the HTML file. Returns the exit code (0, or 2 for a bad option or store)."""
    from harness.leaderboard import TIERS

    console = console or Console()
    err = Console(stderr=True)
    if tier not in TIERS:
        err.print(f"[red]error:[/] --tier must be one of {', '.join(TIERS)}, not {tier!r}")
        return 2
    path = store or default_store_path()
    if not Path(path).is_file():
        err.print(f"[red]error:[/] no result store at {path} (run `harness run` or `harness eval` first, or pass --store)")
        return 2
    try:
        with open_store(path) as db:
            boards = build_boards(db, filters, tier)
            document = render_report(boards, db, store_path=str(path), filters=filters, tier=tier)
    except StoreError as error:
        err.print(f"[red]error:[/] {error}")
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(document, encoding="utf-8")
    count = sum(len(b.candidates) for b in boards)
    console.print(f"wrote {out} ({count} candidate(s) on {len(boards)} GPU(s): "
                  f"{', '.join(b.gpu for b in boards) or 'none'})")
    return 0
