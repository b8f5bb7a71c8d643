"""`harness bench --judge-cost N`: what a warm `harness.Judge` costs a training loop, call by call.

A Judge is entered, then given N sources in turn (by default the correct PyTorch candidate of the fixtures, each
made distinct by a comment so that nothing is answered from a cache), then closed. For each call: its wall time, the
verdict's own phases (`phase_seconds`: the executor's import, its checks and its timed calls, as the referee
counted them) and the overhead, the wall time less those phases (the executor's start and end, a baseline round
where one falls due, the harness's own steps). Printed as a table with the machine; nothing is stored.
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
            phases = sum(verdict.phase_seconds.values())
            rows.append({"wall_s": wall, "phases_s": phases, "overhead_s": wall - phases, "status": verdict.status.value,
                         "reward": verdict.reward, "phase_seconds": verdict.phase_seconds})
    finally:
        closing = time.perf_counter()
        judge.close()
        closed = time.perf_counter()
    return {"enter_s": entered - started, "calls": rows, "close_s": closed - closing}


def print_cost(result: dict, console: Console) -> None:
    table = Table(title=f"a warm Judge, call by call ({platform.processor() or platform.machine()} x{os.cpu_count()})")
    for column in ("call", "wall s", "its phases s", "overhead s", "phases", "status", "reward"):
        table.add_column(column, justify="right" if column.endswith("s") or column in ("call", "reward") else "left")
    for number, row in enumerate(result["calls"]):
        phases = " ".join(f"{k} {v:.2f}" for k, v in row["phase_seconds"].items())
        table.add_row(str(number), f"{row['wall_s']:.2f}", f"{row['phases_s']:.2f}", f"{row['overhead_s']:.2f}", phases,
                      row["status"], f"{row['reward']:.3f}")
    console.print(table)
    later = result["calls"][1:]
    if later:
        wall = statistics.median(r["wall_s"] for r in later)
        own = statistics.median(r["phases_s"] for r in later)
        console.print(f"enter {result['enter_s']:.2f} s, first call {result['calls'][0]['wall_s']:.2f} s, then median "
                      f"{wall:.2f} s a call ({own:.2f} s its phases, overhead {wall - own:.2f} s: "
                      f"{(wall - own) / own if own else float('nan'):.2f}x its own), close {result['close_s']:.2f} s")
