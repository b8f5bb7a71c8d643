"""`harness bench --build-cost`: where one candidate's build spends its CPU time.

The candidate (default: the throughput fixture, tests/fixtures/replays/cuda/0.md) is built once by
`load_inline` into a fresh folder with one compiler at a time (MAX_JOBS=1), so each translation unit's
wall time in ninja's log is its CPU time. Then each step is run again from torch's own ninja file, on
its own, under `/usr/bin/time`-like accounting (the children's CPU seconds):
- the binding `main.cpp` as torch compiles it, then with the harness's precompiled header
  (evaluator.referee.headers; made first when missing, and its cost printed);
- the `.cu` through nvcc with `--time`, which splits it by stage: the host preprocessor, the front end
  (`cudafe++`), the device compiler (`cicc`), `ptxas`, `fatbinary` and the host compiler;
- the link.
Printed as a table, with the machine; nothing is stored.
"""

from __future__ import annotations

import csv
import os
import platform
import re
import resource
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], cwd: Path, env: dict | None = None) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall s, CPU s of the command and its children, result)."""
    cpu, wall = _children_cpu(), time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    return time.perf_counter() - wall, _children_cpu() - cpu, done


def ninja_commands(folder: Path) -> dict[str, str]:
    """Each build statement's command line, as ninja would run it (`ninja -t commands`)."""
    lines = subprocess.run(["ninja", "-t", "commands"], cwd=folder, capture_output=True, text=True).stdout.splitlines()
    commands = {}
    for line in lines:
        output = re.search(r" -o (\S+)", line)
        if output:
            commands[Path(output[1]).name] = line
    return commands


def run_build_cost(source_text: str | None = None, console: Console | None = None) -> dict:
    from harness.bench.throughput import default_source
    from evaluator.parent.sandbox import default_cache_dir
    from evaluator.parent.referee_side import headers, scrubbed_environment

    console = console or Console()
    source = source_text or default_source()
    work = Path(tempfile.mkdtemp(prefix="kh-build-cost-"))
    rows: list[tuple[str, float, float, str]] = []
    try:
        module = work / "candidate.py"
        module.write_text(source)
        cuda = headers.uses_cuda(source)
        # an executor's variables (CUDA_HOME, pip's CUDA headers, the architecture), one compiler at a time
        env = {**scrubbed_environment(work / "ext", "cuda" if cuda else "cpu"), "MAX_JOBS": "1"}
        env.pop("CPATH", None)
        console.print("[dim]building the candidate once (one compiler at a time)...[/]")
        wall, cpu, done = timed(["python3", "-c", f"import runpy; runpy.run_path({str(module)!r})"], work, env)
        if done.returncode != 0:
            raise RuntimeError(f"the candidate did not build: {done.stderr[-2000:]}")
        [folder] = [p.parent for p in (work / "ext").rglob("build.ninja")]
        rows.append(("whole build (import torch, load_inline, load)", wall, cpu, "MAX_JOBS=1"))
        commands = ninja_commands(folder)
        for name, command in commands.items():
            argv = shlex.split(command)
            if name.endswith(".cuda.o") or name.endswith(".cu.o"):
                timing = work / "nvcc-time.csv"
                wall, cpu, done = timed([*argv, f"--time={timing}"], folder, env)
                rows.append((f"{name} (nvcc)", wall, cpu, "exit " + str(done.returncode)))
                for stage, ms in nvcc_stages(timing).items():
                    rows.append((f"  {stage}", ms / 1000, float("nan"), "nvcc --time"))
            elif name.endswith(".o"):
                wall, cpu, done = timed(argv, folder, env)
                rows.append((f"{name} (c++)", wall, cpu, "as torch compiles it"))
                sets = sorted(headers.flag_sets(source))
                made_s = time.perf_counter()
                header = headers.build(default_cache_dir(), "cuda" if cuda else "cpu", sets[0] if sets else (), cuda)
                if header is None:
                    rows.append(("  with the precompiled header", float("nan"), float("nan"), "could not be made"))
                    continue
                made_s = time.perf_counter() - made_s
                wall, cpu, done = timed(argv, folder, {**env, "CPATH": str(header.parents[2])})
                rows.append(("  with the precompiled header", wall, cpu,
                             f"header made in {made_s:.1f} s" if made_s > 1 else "header already made"))
            else:
                wall, cpu, done = timed(argv, folder, env)
                rows.append((f"{name} (link)", wall, cpu, ""))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    machine = f"{platform.node()}: {os.cpu_count()} cores, {platform.processor() or platform.machine()}"
    table = Table(title=f"one build's cost ({machine})")
    for column in ("step", "wall s", "CPU s", "note"):
        table.add_column(column, justify="right" if column.endswith(" s") else "left")
    for step, wall, cpu, note in rows:
        table.add_row(step, f"{wall:.1f}", "-" if cpu != cpu else f"{cpu:.1f}", note)
    console.print(table)
    return {"machine": machine, "rows": [dict(step=s, wall_s=w, cpu_s=c, note=n) for s, w, c, n in rows]}


def nvcc_stages(path: Path) -> dict[str, float]:
    """Milliseconds per stage from nvcc's `--time` CSV (source, phase, inputs, output, arch, tool, metric,
    unit; a phase run twice, host and device preprocessing, keeps its two rows apart by name)."""
    stages: dict[str, float] = {}
    try:
        with open(path, newline="") as handle:
            for row in csv.reader(handle):
                if len(row) < 8 or row[7].strip() != "ms":
                    continue
                try:
                    stages[row[1].strip()] = stages.get(row[1].strip(), 0.0) + float(row[6])
                except ValueError:
                    continue
    except OSError:
        pass
    return stages
