"""`harness bench`: the golden kernels against every baseline, per size preset, in one run.

Each candidate is evaluated by the ordinary evaluator (fresh worker, correctness first), with
the extra ceiling baseline `part:gemm_tf32` (the reference's `gemm` sub-module alone, cuBLAS
with TF32: what a fused kernel's GEMM cannot beat by much). Ratios compare numbers measured
in the same worker process. The table goes to the terminal and, with every number, to JSON.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

from rich.console import Console
from rich.table import Table

from evaluator.assets import golden_files
from evaluator.problem import load_problem
from evaluator.records import Status, Verdict
from evaluator.sandbox import CandidateFile, EvalOptions, Evaluator

BENCH_BASELINES = ["eager", "eager_tf32", "compile", "compile_tf32", "part:gemm_tf32"]


def golden_candidates() -> list[CandidateFile]:
    return [CandidateFile(name=f"golden/{p.stem}", path=p) for p in golden_files()]


def tflops(flops: float | None, ms: float | None) -> float | None:
    return flops / (ms * 1e-3) / 1e12 if flops and ms else None


def bench_rows(verdicts: list[Verdict], flops: float | None) -> dict:
    """JSON-ready numbers for one size: each candidate, and the baselines each was timed against."""
    rows = {}
    for v in verdicts:
        rows[v.candidate] = {
            "status": v.status.value, "error": v.error,
            "tiers": v.correctness.tiers if v.correctness else {},
            "max_abs_err": v.correctness.max_abs_err if v.correctness else None,
            "eval_mode_tiers": v.correctness.eval_mode.tiers if v.correctness and v.correctness.eval_mode else {},
            "median_ms": v.runtime_ms, "iqr_ms": v.timing.iqr_ms if v.timing else None,
            "tflops": tflops(flops, v.runtime_ms),
            "baselines_ms": {k: b.median_ms for k, b in v.baselines.items()},
            "baselines_tflops": {k: tflops(flops, b.median_ms) for k, b in v.baselines.items()},
            "speedup": v.speedup,
            "kernels": getattr(v, "kernels", None),
            "flags": [f.model_dump(mode="json") for f in v.flags],
            "gpu": v.environment.device_name if v.environment else None,
        }
    return rows


def bench_table(size: str, rows: dict) -> Table:
    table = Table(title=f"size {size}")
    for column in ("row", "status", "median ms", "TFLOP/s", "× eager", "× compile_tf32", "÷ gemm_tf32", "kernels"):
        table.add_column(column, justify="left" if column in ("row", "status") else "right")
    fmt = lambda x, spec: "-" if x is None else format(x, spec)  # noqa: E731
    baseline_source = next((r for r in rows.values() if r["baselines_ms"]), None)
    for name, r in rows.items():
        gemm = r["baselines_ms"].get("part:gemm_tf32")
        table.add_row(name, r["status"], fmt(r["median_ms"], ".3f"), fmt(r["tflops"], ".1f"),
                      fmt(r["speedup"].get("eager"), ".2f"), fmt(r["speedup"].get("compile_tf32"), ".2f"),
                      fmt(r["median_ms"] / gemm if gemm and r["median_ms"] else None, ".3f"),
                      str(len(r["kernels"])) if r["kernels"] else "-")
    if baseline_source:
        eager = baseline_source["baselines_ms"].get("eager")
        for name, ms in baseline_source["baselines_ms"].items():
            table.add_row(f"[dim]baseline {name}[/]", "", fmt(ms, ".3f"), fmt(baseline_source["baselines_tflops"][name], ".1f"),
                          fmt(eager / ms if eager else None, ".2f"), "", "", "")
    return table


def target_lines(rows: dict) -> list[str]:
    """The golden targets of the kernelbench preset, judged from the measured numbers."""
    lines = []
    for name, r in rows.items():
        if r["status"] != Status.correct.value:
            lines.append(f"{name}: not correct ({r['error']}), no target can be met")
            continue
        s = r["speedup"]
        gemm_ratio = r["median_ms"] / r["baselines_ms"]["part:gemm_tf32"] if "part:gemm_tf32" in r["baselines_ms"] else None
        if "strict" in name:
            checks = [("strict tier", r["tiers"].get("strict", False)), (">= 2x eager fp32", s.get("eager", 0) >= 2)]
        else:
            checks = [(">= 5x eager fp32", s.get("eager", 0) >= 5), ("faster than compile TF32", s.get("compile_tf32", 0) > 1),
                      ("<= 1.15x cuBLAS TF32 addmm", gemm_ratio is not None and gemm_ratio <= 1.15)]
        lines.append(f"{name}: " + ", ".join(f"{label} {'MET' if ok else 'missed'}" for label, ok in checks))
    return lines


def run_bench(sizes: list[str], problem: str = "gemm_scale_bn", candidates: list[CandidateFile] | None = None,
              device: str | None = None, out: Path | None = None, console: Console | None = None,
              store: Path | None = None, record: bool = True) -> dict:
    console = console or Console()
    candidates = candidates or golden_candidates()
    spec = load_problem(problem)
    report = {"problem": spec.name, "python": platform.python_version(), "sizes": {}}
    for size in sizes:
        options = EvalOptions(problem=problem, size=size, device=device, baselines=BENCH_BASELINES, jobs=len(candidates))
        evaluator = Evaluator(options)
        verdicts = list(evaluator.evaluate_all(candidates))
        if record:  # the leaderboard's golden reference rows come from here
            from harness.leaderboard import record_eval_verdicts

            record_eval_verdicts(store, candidates, verdicts, problem=spec.name, size=evaluator.size,
                                 device=evaluator.device, console=console)
        rows = bench_rows(verdicts, spec.flop_count(size))
        report["sizes"][size] = rows
        report.setdefault("gpu", next((r["gpu"] for r in rows.values() if r["gpu"]), None))
        console.print(bench_table(size, rows))
        if size == "kernelbench":
            report["targets"] = target_lines(rows)
        if out:  # after every size: a long benchmark cut short keeps what it measured
            out.write_text(json.dumps(report, indent=2))
    for line in report.get("targets", []):
        console.print(line)
    if out:
        console.print(f"[dim]wrote {out}[/]")
    return report
