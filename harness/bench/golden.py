"""`harness bench`: the golden kernels against every baseline, per size preset, in one run.

Each candidate is evaluated by the ordinary evaluator (a fresh executor, correctness first),
with the problem's ceiling baselines (`[bench] ceilings` in its problem.toml; for gemm_scale_bn
`part:gemm_tf32`, the reference's `gemm` sub-module alone, cuBLAS with TF32: what a fused
kernel's GEMM cannot beat by much). Ratios compare numbers measured in the same batch on the
same GPU: the candidate by its executor, eager by the reference judged as a candidate in each round
(evaluator.referee.twin), the other baselines by the batch's referee. Every size's batch holds a control, the
reference itself judged once more (`control_candidate`): its speedup over eager is the judge's own error there. The
problem's `[[bench.targets]]` are judged at its `[bench] size`. The table goes to the terminal and, with every number,
to JSON.
"""

from __future__ import annotations

import fnmatch
import json
import operator
import platform
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from evaluator.wire.assets import golden_files
from evaluator.wire.problem import DEFAULT_PROBLEM, BenchTarget, ProblemSpec, load_problem, reference_as_candidate
from evaluator.wire.records import Status, Verdict
from evaluator.parent.lanes import resolve_device
from evaluator.parent.sandbox import CandidateFile, EvalOptions, Evaluator, default_baselines

_OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


def bench_baselines(spec: ProblemSpec, device: str = "cuda") -> list[str]:
    """The device's usual baselines, then (CUDA) the problem's ceilings (what every evaluation there times)."""
    return default_baselines(spec, device)


class BenchError(ValueError):
    """A bench that would measure nothing (the golden kernels, CUDA, on the CPU)."""


def golden_candidates() -> list[CandidateFile]:
    return [CandidateFile(name=f"golden/{p.stem}", path=p) for p in golden_files()]


CONTROL = "control/reference"


def control_candidate(spec: ProblemSpec, folder: Path, size: str | None = None) -> CandidateFile:
    """The problem's reference itself as a candidate, as eager's twin is judged (reference_as_candidate: its source,
    `size`'s values where given, then `ModelNew` = its `Model`), judged in every bench batch: its speedup
    over eager is the judge's own error on like-for-like calls at that size (docs/timing.md: 1.27x at `small` on an
    H100 against the referee's own loop; against eager judged as a candidate, 1.000x at `kernelbench` and 0.999x at
    `wide` on an H200)."""
    path = folder / "control_reference.py"
    path.write_bytes(reference_as_candidate(spec.reference_path.read_text(), spec.size_values(size) if size else {}))
    return CandidateFile(name=CONTROL, path=path)


def control_line(size: str, rows: dict) -> str | None:
    """What the control row says of the batch's speedups."""
    row = rows.get(CONTROL)
    if row is None:
        return None
    if row["status"] != Status.correct.value or row["speedup"].get("eager") is None:
        return f"control at {size}: the reference itself was {row['status']}, no speedup ({row['error'] or 'not ranked'})"
    shaky = any(f["name"] == "shaky_timing" for f in row["flags"])
    return (f"control at {size}: the reference itself reads {row['speedup']['eager']:.2f}x eager (the judge's own error "
            f"on like-for-like calls{'; shaky, not ranked' if shaky else ''})")


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


def bench_table(size: str, rows: dict, ceilings: list[str] = ()) -> Table:
    """One size's table; a `÷ NAME` column per ceiling (the candidate's time over the ceiling's)."""
    table = Table(title=f"size {size}")
    columns = ["row", "status", "median ms", "TFLOP/s", "× eager", "× control", "× compile_tf32",
               *(f"÷ {c.removeprefix('part:')}" for c in ceilings), "kernels"]
    for column in columns:
        table.add_column(column, justify="left" if column in ("row", "status") else "right")
    fmt = lambda x, spec: "-" if x is None else format(x, spec)  # noqa: E731
    baseline_source = next((r for r in rows.values() if r["baselines_ms"]), None)
    for name, r in rows.items():
        ratios = [fmt(ceiling_ratio(r, c), ".3f") for c in ceilings]
        table.add_row(name, r["status"], fmt(r["median_ms"], ".3f"), fmt(r["tflops"], ".1f"),
                      fmt(r["speedup"].get("eager"), ".2f"), fmt(r.get("speedup_over_control"), ".2f"),
                      fmt(r["speedup"].get("compile_tf32"), ".2f"), *ratios, str(len(r["kernels"])) if r["kernels"] else "-")
    if baseline_source:
        eager = baseline_source["baselines_ms"].get("eager")
        for name, ms in baseline_source["baselines_ms"].items():
            table.add_row(f"[dim]baseline {name}[/]", "", fmt(ms, ".3f"), fmt(baseline_source["baselines_tflops"][name], ".1f"),
                          fmt(eager / ms if eager else None, ".2f"), "", "", *([""] * len(ceilings)), "")
    return table


def over_control(rows: dict, name: str) -> float | None:
    """The control's median over the row's: its speedup over eager timed the way it is (both in executors, through
    the same windows), like for like where the referee's own eager is not (docs/timing.md)."""
    control, row = rows.get(CONTROL), rows[name]
    if not control or control["status"] != Status.correct.value or not control["median_ms"] or not row["median_ms"]:
        return None
    return control["median_ms"] / row["median_ms"]


def ceiling_ratio(row: dict, baseline: str) -> float | None:
    """The candidate's median over `baseline`'s (below 1: faster than it)."""
    ms = row["baselines_ms"].get(baseline)
    return row["median_ms"] / ms if ms and row["median_ms"] else None


def target_met(row: dict, target: BenchTarget) -> bool:
    if target.metric == "tier":
        return bool(row["tiers"].get(target.tier, False))
    value = row["speedup"].get(target.baseline) if target.metric == "speedup" else ceiling_ratio(row, target.baseline)
    return value is not None and _OPS[target.op](value, target.threshold)


def applies(target: BenchTarget, candidate: str) -> bool:
    return fnmatch.fnmatchcase(candidate, target.candidates) and not (
        target.excluding and fnmatch.fnmatchcase(candidate, target.excluding))


def target_lines(rows: dict, targets: list[BenchTarget]) -> list[str]:
    """The problem's targets, judged from one size's measured numbers: a line per candidate that
    any target applies to."""
    lines = []
    for name, r in rows.items():
        mine = [t for t in targets if applies(t, name)]
        if not mine:
            continue
        if r["status"] != Status.correct.value:
            lines.append(f"{name}: not correct ({r['error']}), no target can be met")
            continue
        lines.append(f"{name}: " + ", ".join(f"{t.label} {'MET' if target_met(r, t) else 'missed'}" for t in mine))
    return lines


def run_bench(sizes: list[str] | None, problem: str = DEFAULT_PROBLEM, candidates: list[CandidateFile] | None = None,
              device: str | None = None, out: Path | None = None, console: Console | None = None,
              store: Path | None = None, record: bool = True) -> dict:
    console = console or Console()
    device = resolve_device(device)
    if device == "cpu" and not candidates:  # CUDA kernels, never run here: a table of blanks
        raise BenchError("bench on the CPU: the golden kernels are CUDA and are not run here; give CPU candidates "
                         "(plain PyTorch or C++ ModelNew files) as FILES, with --sizes small")
    candidates = candidates or golden_candidates()
    spec = load_problem(problem)
    sizes = sizes or list(spec.sizes)  # none named: every size the problem has (a KernelBench file: `default`)
    target_size = spec.bench.size or spec.default_size
    report = {"problem": spec.name, "python": platform.python_version(), "sizes": {}}
    if store is None:
        from harness.core.config import default_store_path

        store = default_store_path()  # where the verdicts go, and unreadable from every executor either way
    with tempfile.TemporaryDirectory(prefix="kh-control-") as controls:  # the control's source, for the batch's life
        for size in sizes:
            control = control_candidate(spec, Path(controls), size)
            options = EvalOptions(problem=str(spec.location), size=size, device=device,
                                  baselines=bench_baselines(spec, device), jobs=len(candidates), store=store)
            evaluator = Evaluator(options)
            # said before the builds and baseline rounds (minutes), and as each verdict comes
            console.print(f"[dim]{spec.name}, size {size}, device {evaluator.device}: {len(candidates)} candidate(s) and "
                          f"the control, baselines {', '.join(evaluator.baselines)}[/]", highlight=False)
            verdicts = []
            for verdict in evaluator.evaluate_all([*candidates, control]):
                verdicts.append(verdict)
                console.print(f"[dim]{verdict.candidate}: {verdict.status.value}[/]", highlight=False)
            if record:  # the leaderboard's golden reference rows come from here (the control: no one's candidate)
                from harness.runs.eval_records import record_eval_verdicts

                judged = {v.candidate: v for v in verdicts}
                files = [c for c in candidates if c.name in judged]
                record_eval_verdicts(store, evaluator, files, [judged[c.name] for c in files], console=console)
            rows = bench_rows(verdicts, spec.flop_count(size))
            for name, row in rows.items():
                row["speedup_over_control"] = over_control(rows, name)
            report["sizes"][size] = rows
            report.setdefault("gpu", next((r["gpu"] for r in rows.values() if r["gpu"]), None))
            console.print(bench_table(size, rows, spec.bench.ceilings))
            said = control_line(size, rows)
            if said:
                console.print(said, highlight=False)
                report.setdefault("control", {})[size] = said
            if size == target_size and spec.bench.targets:
                report["targets"] = target_lines(rows, spec.bench.targets)
            if out:  # after every size: a long benchmark cut short keeps what it measured
                out.write_text(json.dumps(report, indent=2))
    for line in report.get("targets", []):
        console.print(line)
    if out:
        console.print(f"[dim]wrote {out}[/]")
    return report
