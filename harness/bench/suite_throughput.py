"""`harness bench --throughput N --problems SUITE`: how fast the evaluator judges a suite, problem after problem.

Each problem of the suite gets N distinct copies of its control (the reference itself as `ModelNew`, at the size the
problem is judged at; each copy differs by a comment, so each is a candidate of its own and none needs a build).
Two passes, each over every problem in turn with an evaluator of its own, as `harness eval --problems` judges: cold
(nothing stored: every problem's baselines timed, its `torch.compile` and the twin's first round included) and warm
(the baselines the cold pass stored, read back). Printed per pass: candidates a minute over the suite, the median
seconds from a problem's start to its first verdict (its set-up and one candidate), GPU busy, and the five largest
costs of a judged candidate by the referees' own profiles (harness.bench.costs). Nothing is recorded in the user's
store.

Eight KernelBench problems with eight copies each take a device call (10 minutes) a pass: with `work` (a folder kept)
and `only`, one pass runs, `cold` then `warm` on the same folder in the next call, as `harness bench --throughput` splits
one problem's run (harness.bench.throughput: a warm part needs a finished cold part of the same suite, sizes and count).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
from collections import Counter
from pathlib import Path

from rich.console import Console

from evaluator.parent.park_next import ParkedAhead
from evaluator.parent.sandbox import CandidateFile, EvalOptions
from evaluator.wire.problem import load_problem
from harness.bench.costs import largest_costs
from harness.bench.golden import control_candidate
from harness.bench.throughput import (WorkError, distinct_copies, referee_profile, run_pass, start_work,
                                      throughput_table, write_record)
from harness.core.store import Store
from harness.problems.suite import Suite, SuiteError, check_sizes, load_suite

__all__ = ["SuiteError", "WorkError", "bench_suite", "run_suite_throughput"]


def bench_suite(count: int, problems: Path, size: str | None, *, device: str | None, jobs: int | None,
                out: Path | None, console: Console, work: Path | None = None, only: str | None = None) -> dict:
    """`harness bench --throughput N --problems PATH`: the suite at each problem's own size, or `size` (SuiteError
    where a problem lacks it); `work` and `only`, one pass of a split run (the module's docstring)."""
    from evaluator.parent.lanes import resolve_device

    suite = load_suite(problems)
    sizes = check_sizes(suite, size, resolve_device(device))
    return run_suite_throughput(count, suite, sizes, device=device, jobs=jobs, out=out, console=console, work=work,
                                only=only)


def suite_copies(suite: Suite, sizes: dict[str, str], count: int, folder: Path) -> dict[str, list[CandidateFile]]:
    """Per problem (by name), `count` distinct copies of its control at its size."""
    copies = {}
    for index, entry in enumerate(suite.problems):
        where = folder / f"p{index:03d}"
        where.mkdir(parents=True, exist_ok=True)
        control = control_candidate(load_problem(entry.location), where, sizes[entry.name])
        files = distinct_copies(control.path.read_text(), count, where / "copies")
        copies[entry.name] = [CandidateFile(name=f"throughput/{entry.name}/{i:03d}", path=f.path)
                              for i, f in enumerate(files)]
    return copies


def run_suite_throughput(count: int, suite: Suite, sizes: dict[str, str], *, device: str | None = None,
                         jobs: int | None = None, out: Path | None = None, console: Console | None = None,
                         work: Path | None = None, only: str | None = None) -> dict:
    """The cold pass, then the warm one, or the one `only` names on the kept folder `work` (see the module's
    docstring); the report, also written to `out`."""
    if only not in (None, "cold", "warm") or (only and work is None):
        raise WorkError("--only is cold or warm, with --work (the folder the two parts share)")
    console = console or Console()
    what = {"suite": suite.name, "problems": [str(e.location) for e in suite.problems], "sizes": sizes, "count": count}
    kept = work is not None
    work = start_work(work.absolute(), what, only) if kept else Path(tempfile.mkdtemp(prefix="kh-suite-throughput-"))
    report: dict = {"suite": suite.name, "count": count, "sizes": sizes, "passes": {}}
    store = Store(work / "results.sqlite")  # the bench's own (EvalOptions.store protects it from candidates)
    profiles = Path(os.environ.get("KH_REFEREE_PROFILE") or work / "profile")
    try:
        copies = suite_copies(suite, sizes, count, work / "copies")
        for number, name in enumerate(("cold", "warm")):
            if only not in (None, name):
                continue
            problems, settings = {}, []
            for entry in suite.problems:
                extra = {k: v for k, v in (("jobs", jobs), ("backend", entry.backend), ("precision", entry.precision))
                         if v}
                settings.append(EvalOptions(problem=entry.location, size=sizes[entry.name], device=device,
                                            cache_dir=work / "cache", log_root=work / "logs", store=store.path, **extra))
            with ParkedAhead() as referees_ahead:
                for index, (entry, options) in enumerate(zip(suite.problems, settings)):
                    if index + 1 < len(settings):  # the next problem's referees' imports made meanwhile, as `eval`
                        with referee_profile(profiles / f"pass{number}" / f"p{index + 1:03d}"):  # does, its environment
                            referees_ahead.park(settings[index + 1])
                    profile = profiles / f"pass{number}" / f"p{index:03d}"
                    problems[entry.name] = result = run_pass(copies[entry.name], options, store, profile=profile)
                    referees_ahead.batch_done()
                    console.print(f"{name} {entry.name}: {result['candidates']} in {result['wall_s']:.1f} s, first "
                                  f"verdict after {nan_for(result['first_s']):.1f} s (set-up "
                                  f"{nan_for(result['setup_s']):.1f} s); {result['statuses']}")
                    for why in result["round_warnings"]:  # stored figures dropped: that problem's set-up, rounds slower
                        console.print(f"  [yellow]{why}[/]")
            report["passes"][name] = summary = suite_pass(problems, profiles / f"pass{number}")
            if kept and name == "cold":
                write_record(work, what, "done")  # its stored baselines are there for a warm part
            console.print(f"{name}: {summary['candidates']} in {summary['wall_s']:.1f} s = {summary['per_minute']:.2f}/min;"
                          f" first verdict after {summary['first_median_s']:.1f} s, set-up {summary['setup_median_s']:.1f}"
                          f" s, the longest {summary['setup_max_s']:.1f} s (of problems)")
            for cost in summary["costs"]:
                console.print(f"  {cost['per_judged']:6.2f} s a judged candidate: {cost['what']}")
            if out:
                out.write_text(json.dumps(report, indent=2, default=str))
    finally:
        store.close()
        if not kept:
            shutil.rmtree(work, ignore_errors=True)
    console.print(throughput_table(report["passes"]))
    return report


def nan_for(value: float | None) -> float:
    return float("nan") if value is None else value


def suite_pass(problems: dict[str, dict], profile: Path) -> dict:
    """One pass's figures over the suite's problems (each `run_pass`'s)."""
    runs = list(problems.values())
    wall_s = sum(r["wall_s"] for r in runs)
    candidates = sum(r["candidates"] for r in runs)
    phases: dict[str, list[float]] = {}
    for r in runs:
        for phase, seconds in r["phase_median_s"].items():
            phases.setdefault(phase, []).append(seconds)
    busy: dict[int, list[float]] = {}
    for r in runs:
        for gpu, fraction in r["gpu_busy"].items():
            busy.setdefault(gpu, []).append(fraction * r["wall_s"])
    statuses: Counter = Counter()
    for r in runs:
        statuses.update(r["statuses"])
    firsts = [r["first_s"] for r in runs if r["first_s"] is not None]
    setups = [r["setup_s"] for r in runs if r["setup_s"] is not None]
    return {
        "candidates": candidates, "wall_s": wall_s, "per_minute": 60 * candidates / wall_s if wall_s else 0.0,
        "statuses": dict(statuses), "phase_median_s": {k: statistics.median(v) for k, v in phases.items()},
        "gpu_busy": {gpu: sum(v) / wall_s for gpu, v in busy.items()} if wall_s else {},
        "median_ms": statistics.median([r["median_ms"] for r in runs]),
        "first_median_s": statistics.median(firsts) if firsts else float("nan"),
        "first_s": {name: r["first_s"] for name, r in problems.items()},
        "setup_median_s": statistics.median(setups) if setups else float("nan"),
        "setup_max_s": max(setups) if setups else float("nan"),
        "setup_s": {name: r["setup_s"] for name, r in problems.items()},
        "costs": [c.__dict__ for c in largest_costs(sorted(profile.rglob("*.jsonl")))],
    }
