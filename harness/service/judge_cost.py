"""`harness bench --judge-cost N`: what a warm `harness.Judge` costs a training loop, call by call.

A Judge is entered, then given N sources in turn (by default the correct PyTorch candidate of the fixtures, each
made distinct by a comment so that nothing is answered from a cache), then closed. For each call: its wall time, the
verdict's phases (`phase_seconds`: import, checks, the time phase, as the referee counted them), the candidate's own
clocked calls (`timing_check.wall_ms`: its windows by the referee's clock) and the overhead, the wall time less those
calls (the calibrator's windows beside them, the float64 replays, the checks, the executor's start and end, a
baseline round where one falls due). Printed as a table with the machine; nothing is stored.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

DEFAULT_SOURCE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "candidates" / "cpu" / "torch_ops_correct.py"


def measure(problem: str, size: str | None, device: str | None, calls: int, source: str | None = None) -> dict:
    """{enter_s, calls: [{wall_s, phases_s, overhead_s, status, reward}], close_s}."""
    from harness.service.judge import Judge

    text = source if source is not None else DEFAULT_SOURCE.read_text()
    started = time.perf_counter()
    judge = Judge(problem=problem, size=size, device=device).__enter__()
    entered = time.perf_counter()
    rows = []
    try:
        for number in range(calls):
            begin = time.perf_counter()
            verdict = judge.evaluate(f"{text}\n# call {number}\n")
            wall = time.perf_counter() - begin
            phases = verdict.phase_seconds.get("total", sum(verdict.phase_seconds.values()))
            own = verdict.timing_check.wall_ms / 1e3 if verdict.timing_check is not None else 0.0
            rows.append({"wall_s": wall, "phases_s": phases, "own_s": own, "overhead_s": wall - own,
                         "status": verdict.status.value, "reward": verdict.reward,
                         "phase_seconds": {k: v for k, v in verdict.phase_seconds.items() if k != "total"}})
    finally:
        closing = time.perf_counter()
        judge.close()
        closed = time.perf_counter()
    return {"enter_s": entered - started, "calls": rows, "close_s": closed - closing}


def print_cost(result: dict, console: Console) -> None:
    table = Table(title=f"a warm Judge, call by call ({platform.processor() or platform.machine()} x{os.cpu_count()})")
    for column in ("call", "wall s", "phases s", "its calls s", "overhead s", "phases", "status", "reward"):
        table.add_column(column, justify="left" if column in ("phases", "status") else "right")
    for number, row in enumerate(result["calls"]):
        phases = " ".join(f"{k} {v:.2f}" for k, v in row["phase_seconds"].items())
        table.add_row(str(number), f"{row['wall_s']:.2f}", f"{row['phases_s']:.2f}", f"{row['own_s']:.2f}",
                      f"{row['overhead_s']:.2f}", phases, row["status"], f"{row['reward']:.3f}")
    console.print(table)
    later = result["calls"][1:]
    if later:
        wall = statistics.median(r["wall_s"] for r in later)
        phases = statistics.median(r["phases_s"] for r in later)
        own = statistics.median(r["own_s"] for r in later)
        console.print(f"enter {result['enter_s']:.2f} s, first call {result['calls'][0]['wall_s']:.2f} s, then median "
                      f"{wall:.2f} s a call ({phases:.2f} s in the verdict's phases; its clocked calls {own:.2f} s, "
                      f"overhead {wall - own:.2f} s: {(wall - own) / own if own else float('nan'):.1f}x its calls), "
                      f"close {result['close_s']:.2f} s")
