"""A KernelBench run judged again: KernelBench's own verdicts (`eval_results.json`, as its
scripts/eval_from_generations.py writes it: for each problem id, a list of `{sample_id, compiled, correctness,
metadata, runtime, runtime_stats}`) beside ours for every sample, and where the two differ, worst first. Pure.

Disagreements, in this order:
1. KernelBench's `correct` where ours is not (`incorrect`, `rejected`, `runtime_error`, `crashed`, `timeout`...):
   a number KernelBench published that this judge does not stand behind;
2. ours `correct` where KernelBench's is not;
3. runtimes that differ beyond both intervals: KernelBench's mean +- 1.96 standard errors (`runtime_stats`) against
   ours, the 95% interval of our median (harness.core.intervals, the candidate's own per-call figures). Two machines
   time differently: read this one only for a run judged on the machine KernelBench ran on.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from evaluator.wire.records import Verdict
from harness.core.intervals import median_interval
from harness.core.ranking import classify

KINDS = ("kernelbench_only_correct", "ours_only_correct", "runtime")


class KernelBenchSample(BaseModel):
    """One sample's line in KernelBench's `eval_results.json`."""

    problem_id: int = Field(description="KernelBench's problem id (the `19` of `19_ReLU`).")
    sample_id: int = Field(description="The sample's number.")
    compiled: bool | None = Field(None, description="Whether KernelBench compiled it.")
    correctness: bool | None = Field(None, description="Whether KernelBench found it correct.")
    runtime_ms: float | None = Field(None, description="KernelBench's runtime (its mean, ms; -1 there: none).")
    runtime_interval: tuple[float, float] | None = Field(None, description="Mean +- 1.96 standard errors, ms.")


class Disagreement(BaseModel):
    """A sample where KernelBench's verdict and ours differ."""

    kind: str = Field(description="One of KINDS, worst first.")
    file: str = Field(description="The sample's file, as the command named it.")
    problem: str = Field(description="The problem it was judged against.")
    kernelbench: str = Field(description="KernelBench's verdict: correct, incorrect or not compiled, and its runtime.")
    ours: str = Field(description="Ours: the outcome, and the runtime with its interval.")
    detail: str = Field("", description="What differs, for people.")


def read_eval_results(path: Path) -> dict[tuple[int, int], KernelBenchSample]:
    """KernelBench's verdicts by (problem id, sample id). Raises ValueError on a file of another shape."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not KernelBench's eval_results.json (a mapping of problem ids to samples)")
    found = {}
    for problem_id, samples in data.items():
        for entry in samples if isinstance(samples, list) else [samples]:
            sample = _sample(int(problem_id), entry)
            found[(sample.problem_id, sample.sample_id)] = sample
    return found


def _sample(problem_id: int, entry: dict[str, Any]) -> KernelBenchSample:
    runtime = entry.get("runtime")
    runtime = float(runtime) if isinstance(runtime, (int, float)) and runtime >= 0 else None
    stats = entry.get("runtime_stats") or {}
    interval = None
    if runtime is not None and isinstance(stats.get("std"), (int, float)) and stats.get("num_trials"):
        half = 1.96 * float(stats["std"]) / math.sqrt(float(stats["num_trials"]))
        interval = (runtime - half, runtime + half)
    return KernelBenchSample(problem_id=problem_id, sample_id=int(entry.get("sample_id", 0)),
                             compiled=entry.get("compiled"), correctness=entry.get("correctness"),
                             runtime_ms=runtime, runtime_interval=interval)


def describe_kernelbench(sample: KernelBenchSample | None) -> str:
    if sample is None:
        return "no line"
    state = "correct" if sample.correctness else ("incorrect" if sample.compiled else "not compiled")
    return state + (f", {sample.runtime_ms:.4g} ms" if sample.runtime_ms is not None else "")


def describe_ours(verdict: Verdict | None, tier: str) -> str:
    if verdict is None:
        return "not judged"
    outcome, _ = classify(verdict, tier)
    interval = median_interval(verdict.timing)
    timing = (f", {verdict.runtime_ms:.4g} ms" + (f" ({interval[0]:.4g}-{interval[1]:.4g})" if interval else "")
              if verdict.runtime_ms is not None else "")
    return outcome.value + timing


def disagreements(pairs: list[tuple[str, str, KernelBenchSample | None, Verdict | None]],
                  tier: str = "loose") -> list[Disagreement]:
    """From (file, problem, KernelBench's sample, our verdict) for every sample, the disagreements worst first."""
    found = []
    for file, problem, theirs, ours in pairs:
        if theirs is None or ours is None:
            continue
        outcome, why = classify(ours, tier)
        correct = outcome.value in ("correct", "shaky")  # a correct verdict whose timing is shaky is still correct
        row = dict(file=file, problem=problem, kernelbench=describe_kernelbench(theirs), ours=describe_ours(ours, tier))
        if theirs.correctness and not correct:
            found.append(Disagreement(kind=KINDS[0], detail=why or ours.error or "", **row))
        elif correct and theirs.correctness is False:
            found.append(Disagreement(kind=KINDS[1], detail="KernelBench found it incorrect or could not build it",
                                      **row))
        elif (correct and theirs.runtime_interval is not None
              and (interval := median_interval(ours.timing)) is not None):
            low, high = theirs.runtime_interval
            if interval[1] < low or interval[0] > high:
                found.append(Disagreement(kind=KINDS[2], detail=(
                    f"runtimes apart beyond both intervals: KernelBench {low:.4g}-{high:.4g} ms, ours "
                    f"{interval[0]:.4g}-{interval[1]:.4g} ms"), **row))
    return sorted(found, key=lambda d: KINDS.index(d.kind))
