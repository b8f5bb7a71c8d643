"""Feedback on a correct candidate: the tiers it passes, its time, the speedup over each baseline, the gap
to the fastest baseline and to the problem's ceilings (cuBLAS's GEMM alone for gemm_scale_bn), the kernels
one forward launches with their device times, and the roofline (achieved TFLOP/s and bandwidth against the
GPU's peaks)."""

from __future__ import annotations

from evaluator.wire.problem import ProblemSpec
from evaluator.wire.records import Verdict
from harness.core.records import Hardware
from harness.core.text import cut_text
from harness.feedback.incorrect import mode_check
from harness.feedback.public import published_tiers

MAX_KERNEL_ROWS = 16           # kernel launches listed one by one; the rest summed
KERNEL_NAME_CHARS = 120
BASELINE_WORDS = {
    "eager": "PyTorch eager, fp32",
    "eager_tf32": "PyTorch eager, TF32 allowed",
    "compile": "torch.compile, fp32",
    "compile_tf32": "torch.compile, TF32 allowed",
}


def _baseline_words(name: str, problem: ProblemSpec) -> str:
    """What a baseline is: `eager` is PyTorch eager in fp32, `part:gemm` the reference's `gemm` alone."""
    if name in BASELINE_WORDS:
        return BASELINE_WORDS[name]
    if name.startswith("part:"):
        part = name.removeprefix("part:").removesuffix("_tf32")
        layer = problem.rules.layers.get(part)
        what = f"the reference's `{part}`" + (f" ({layer})" if layer else "") + " alone"
        return what + (", TF32 allowed" if name.endswith("_tf32") else ", fp32")
    return name


def _kernels(verdict: Verdict) -> dict | None:
    """The kernels (or extension calls) one forward launches, with their device times when profiled."""
    if not verdict.kernels:
        return None
    times = verdict.kernel_times_us if len(verdict.kernel_times_us) == len(verdict.kernels) else []
    total = sum(times) if times else None
    own = set(verdict.custom_kernels)
    rows = []
    for index, name in enumerate(verdict.kernels[:MAX_KERNEL_ROWS]):
        us = times[index] if times else None
        rows.append({"index": index + 1, "name": cut_text(name, KERNEL_NAME_CHARS), "us": us,
                     "share": us / total if us is not None and total else None, "own": name in own})
    rest = verdict.kernels[MAX_KERNEL_ROWS:]
    count = max(verdict.kernel_count or 0, len(verdict.kernels))
    runtime_us = verdict.runtime_ms * 1e3 if verdict.runtime_ms else None
    return {"rows": rows, "count": count, "more": count - len(rows),
            "more_us": sum(times[MAX_KERNEL_ROWS:]) if times and rest else None, "total_us": total,
            "timed": bool(times), "own": sorted(own), "gpu": verdict.device == "cuda",
            "outside_us": runtime_us - total if runtime_us is not None and total is not None and runtime_us > total
            else None}


def _roofline(verdict: Verdict) -> dict | None:
    """The roofline, with the arithmetic intensity and the side of the TF32 ridge point it falls on."""
    roof = verdict.roofline
    if roof is None:
        return None
    intensity = roof.flops / roof.min_bytes if roof.flops and roof.min_bytes else None
    ridge = roof.peak_tf32_tflops / roof.peak_bandwidth_tbs if roof.peak_bandwidth_tbs else None
    return {**roof.model_dump(), "intensity": intensity, "ridge_tf32": ridge,
            "bound": None if intensity is None or ridge is None else ("compute" if intensity >= ridge else "memory")}


def correct_part(verdict: Verdict, problem: ProblemSpec, hardware: Hardware | None) -> dict:
    """The `correct` part: tiers, times, baselines, ceilings, kernels and roofline."""
    correctness = verdict.correctness
    ceilings = [c for c in problem.bench.ceilings if c in verdict.baselines]
    runtime = verdict.runtime_ms
    names = [n for n in dict.fromkeys([*verdict.baselines, *verdict.speedup]) if n not in ceilings]
    baselines = sorted(
        ({"name": name, "words": _baseline_words(name, problem),
          "ms": verdict.baselines[name].median_ms if name in verdict.baselines else None,
          "speedup": verdict.speedup.get(name)} for name in names),
        key=lambda b: (b["ms"] is None, b["ms"] or 0.0))
    timed = [b for b in baselines if b["ms"]]
    fastest = dict(timed[0], ratio=runtime / timed[0]["ms"]) if timed and runtime else None
    return {
        "runtime_ms": runtime, "iqr_ms": verdict.timing.iqr_ms if verdict.timing else None,
        "reps": verdict.timing.reps if verdict.timing else None,
        "tiers": published_tiers(problem, correctness.tiers if correctness else {}, verdict.precision),
        "strictest": min((name for name in problem.tolerances if correctness and correctness.tiers.get(name)),
                         key=lambda name: (problem.tolerances[name].atol, problem.tolerances[name].rtol), default=None),
        "max_abs": correctness.max_abs_err if correctness else None,
        "max_rel": correctness.max_rel_err if correctness else None,
        "eval_mode": mode_check(correctness.eval_mode, problem, None) if correctness else None,
        "baselines": baselines, "fastest": fastest,
        "ceilings": [{"name": c, "words": _baseline_words(c, problem), "ms": verdict.baselines[c].median_ms,
                      "ratio": runtime / verdict.baselines[c].median_ms if runtime else None} for c in ceilings],
        "kernels": _kernels(verdict), "roofline": _roofline(verdict), "autotuned": list(verdict.autotuned),
        "device_name": verdict.environment.device_name if verdict.environment else hardware.name if hardware else None,
    }
