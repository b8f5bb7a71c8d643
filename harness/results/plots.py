"""A suite's pictures, one set per suite board (not one chart per problem), as KernelBench's papers draw them:

- fast_p against p, from 0 to 4, both definitions: KernelBench's (the point estimate over p) and the significant
  one (the lower end of the 95% interval over p), over eager;
- each problem's best speedup over eager with its 95% interval;
- each best candidate's per-call times beside eager's (a box each): the one picture that explains `shaky`.

matplotlib's Agg backend, no global pyplot state. `suite_figures` gives (name, caption, figure); the report inlines
them as PNG, `harness report --plots DIR` writes them as PNG files.
"""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

from harness.results.suite_board import SuiteBoard

P_STEPS = [i / 20 for i in range(81)]  # 0 to 4


def figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # the Agg backend, no global pyplot state
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return buffer.getvalue()


def data_uri(fig) -> str:
    return "data:image/png;base64," + base64.b64encode(png(fig)).decode("ascii")


def fast_p_curve(suite: SuiteBoard, significant: bool, baseline: str = "eager") -> list[float]:
    """The share of the suite's problems at each p of P_STEPS (both definitions as harness.results.suite_board)."""
    rows = suite.rows
    if not rows:
        return [0.0 for _ in P_STEPS]
    return [sum(r.faster(baseline, p, significant) for r in rows) / len(rows) for p in P_STEPS]


def suite_figures(suite: SuiteBoard) -> list[tuple[str, str, object]]:
    """(file name, caption, matplotlib figure) for one suite board."""
    where = f"{suite.name + ' ' if suite.name else ''}on {suite.where}"
    out = []
    fig = figure(6.5, 3.6)
    ax = fig.add_subplot(1, 1, 1)
    ax.step(P_STEPS, fast_p_curve(suite, False), where="post", label="KernelBench's (point estimate > p)")
    ax.step(P_STEPS, fast_p_curve(suite, True), where="post", linestyle="--", label="significant (95% lower end > p)")
    ax.set_xlabel("p (speedup over eager)", fontsize=8)
    ax.set_ylabel("fast_p (share of the problems)", fontsize=8)
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"fast_p against p: suite {where}", fontsize=9)
    ax.legend(fontsize=7)
    out.append(("fast_p", "fast_p against p, both definitions", fig))

    rows = [r for r in suite.rows if r.point("eager") is not None]
    fig = figure(8.0, 1.4 + 0.35 * max(len(rows), 1))
    ax = fig.add_subplot(1, 1, 1)
    if rows:
        points = [r.point("eager") for r in rows]
        low = [p - (r.interval("eager") or (p, p))[0] for r, p in zip(rows, points)]
        high = [(r.interval("eager") or (p, p))[1] - p for r, p in zip(rows, points)]
        ax.barh(range(len(rows)), points, xerr=[low, high], color=[r.outcome.color for r in rows], height=0.6,
                capsize=3)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([r.problem for r in rows], fontsize=8)
        ax.axvline(1.0, color="#424242", linestyle=":", linewidth=1)
    else:
        ax.text(0.5, 0.5, "no correct candidate", transform=ax.transAxes, ha="center", va="center", fontsize=9)
    ax.set_xlabel("best candidate's speedup over eager, with its 95% interval", fontsize=8)
    ax.set_title(f"Each problem's best: suite {where}", fontsize=9)
    out.append(("best_speedups", "each problem's best speedup over eager with its 95% interval", fig))

    boxes, labels = [], []
    for r in suite.rows:
        verdict = r.best.verdict if r.best is not None else None
        eager = verdict.baselines.get("eager") if verdict is not None else None
        if verdict is None or verdict.timing is None or not verdict.timing.samples_ms or eager is None or not eager.samples_ms:
            continue
        boxes += [verdict.timing.samples_ms, eager.samples_ms]
        labels += [f"{r.problem}: candidate", f"{r.problem}: eager"]
    fig = figure(8.0, 1.4 + 0.3 * max(len(boxes), 1))
    ax = fig.add_subplot(1, 1, 1)
    if boxes:
        ax.boxplot(boxes, vert=False, widths=0.6)
        ax.set_yticks(range(1, len(boxes) + 1))
        ax.set_yticklabels(labels, fontsize=7)
        ax.set_xscale("log")
    else:
        ax.text(0.5, 0.5, "no per-call figures", transform=ax.transAxes, ha="center", va="center", fontsize=9)
    ax.set_xlabel("ms per call, each timed window (log scale)", fontsize=8)
    ax.set_title(f"Per-call times beside eager's: suite {where}", fontsize=9)
    out.append(("per_call_times", "each best candidate's per-call times beside eager's: the spread `shaky` is about",
                fig))
    return out


def write_plots(suites: list[SuiteBoard], folder: Path) -> list[Path]:
    """Every suite board's figures as PNG files in `folder`; the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for index, suite in enumerate(suites):
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{suite.name or 'suite'}_{suite.where}")
        for name, _, fig in suite_figures(suite):
            path = folder / f"{stem}_{name}.png"
            path.write_bytes(png(fig))
            written.append(path)
    return written
