"""The wire format: what crosses from the worker to the harness and into the store.

Every record is a pydantic model with a docstring per field; `extra="forbid"` so a record
read back with an unknown field fails loudly instead of being silently half-read.
"""

from __future__ import annotations

import hashlib
import json
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1
# The package's version, for people. Verdicts are keyed by `Verdict.judge` (hashes of the
# evaluator's sources and the problem), never by this string.
EVALUATOR_VERSION = "0.1.0"


# How a speedup is measured, in the words the report prints and the README states (a test holds them to
# the same text).
SPEEDUP_RULE = (
    "A speedup divides a baseline's median time by the candidate's, both measured by the referee on the same GPU in "
    "the same batch: the candidate's by the referee's clock around each call, less what that clock's window costs "
    "(measured by its calibrator beside each window), never by anything the candidate's process reports. Eager is the "
    "reference itself judged as a candidate in every baseline round, through the same checks and windows (on the CPU, "
    "eager's windows alternate with the candidate's own, on the same inputs, and give its eager); the other "
    "baselines (TF32, torch.compile, the ceilings) are timed by device events in the referee's own process, so where "
    "calls are bound by their launches a speedup over those can read high, and where a GPU candidate's calls are "
    "handed off on the device it holds its copy out and theirs none, so it can read low by that copy.")


class Hardware(BaseModel):
    """The GPU the prompt describes and the verdicts are keyed by."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="Device name, e.g. `NVIDIA H100 80GB HBM3`.")
    sm_count: int | None = Field(None, description="Streaming multiprocessors.")
    capability: str | None = Field(None, description="Compute capability, e.g. `9.0`.")
    memory_gib: float | None = Field(None, description="Device memory in GiB.")


class Judge(BaseModel):
    """What judged a verdict. Two verdicts with the same fingerprint were judged by the same rules."""

    model_config = ConfigDict(extra="forbid")
    evaluator_sha256: str = Field(description="SHA-256 over the evaluator package's sources (names and bytes).")
    problem_sha256: str = Field(description="SHA-256 over the problem's definition files (spec and reference).")
    torch_version: str = Field(description="torch.__version__ of the judging interpreter.")
    cuda_version: str | None = Field(description="torch.version.cuda (None for a CPU-only torch).")
    knobs: dict[str, str] = Field(default_factory=dict, description=(
        "The referee's measuring knobs set where it judged (evaluator.wire.identity.JUDGE_KNOBS), each another rule "
        "for the timing: empty with none set."))

    @property
    def fingerprint(self) -> str:
        dumped = self.model_dump(mode="json")
        if not dumped["knobs"]:  # none set: the fingerprint judges had before knobs were named
            del dumped["knobs"]
        return json_digest(dumped)

    @property
    def short(self) -> str:
        """Twelve hex digits of the fingerprint, for people."""
        return self.fingerprint[:12]


def json_digest(obj: Any) -> str:
    """SHA-256 of `obj` as canonical JSON (sorted keys, no spaces): the store's keys are made with it."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Status(str, Enum):
    """The outcome of one candidate. Only `correct` candidates are timed. A candidate whose static
    checks give a `reject` flag is `rejected` without its code ever running (phase `parse`), unless
    `EvalOptions.run_rejected` asks for it to run (contained, like any other)."""

    parse_error = "parse_error"        # no usable ModelNew source (syntax error, no class, ...)
    compile_error = "compile_error"    # importing the candidate (which builds its extensions) failed
    runtime_error = "runtime_error"    # constructing or calling ModelNew raised
    timeout = "timeout"                # a phase ran past its limit; the process group was killed
    crashed = "crashed"                # the worker died without a verdict (signal, os._exit, ...)
    incorrect = "incorrect"            # ran, but outputs, buffers or inputs were wrong
    correct = "correct"                # passed the loosest tier in the problem's mode
    compiled = "compiled"              # --compile-only: built, not run
    not_built = "not_built"            # CUDA source for the CPU with a torch that has no CUDA: cannot even be built
    rejected = "rejected"              # a static check's reject flag: never run (unless --run-rejected)


class Phase(str, Enum):
    """Where in the worker something happened."""

    parse = "parse"
    compile = "compile"
    init = "init"
    check = "check"
    time = "time"


class FlagPolicy(str, Enum):
    reject = "reject"  # the candidate cannot be ranked
    flag = "flag"      # shown beside the result


class Flag(Record):
    """Something noteworthy about a candidate, found by a static or dynamic check."""

    name: str = Field(description="Short machine name, e.g. `torch_fallback`.")
    reason: str = Field(description="What was seen, for people.")
    policy: FlagPolicy = Field(FlagPolicy.flag, description="`reject` makes the verdict unrankable.")


class TensorError(Record):
    """Worst-case error of one compared tensor against the float64 reference."""

    name: str = Field(description="`output` or a buffer name such as `bn.running_var`.")
    max_abs_err: float | None = Field(description="max |candidate - reference|; null when not comparable.")
    max_rel_err: float | None = Field(
        description="max |candidate - reference| / max(|reference|, smallest atol), per element; null when not comparable.")


class ModeCheck(Record):
    """The result of all trials in one module mode."""

    mode: Literal["train", "eval"] = Field(description="Module mode of these trials.")
    trials: int = Field(description="Number of forward calls compared.")
    max_abs_err: float | None = Field(None, description="Worst absolute error over outputs and buffers.")
    max_rel_err: float | None = Field(None, description="Worst relative error over outputs and buffers.")
    tiers: dict[str, bool] = Field(default_factory=dict, description="Tolerance tier name -> passed.")
    tensors: list[TensorError] = Field(default_factory=list, description="Worst error per compared tensor.")
    failure: str | None = Field(None, description="First hard failure (shape, NaN, input changed, ...).")


class Correctness(Record):
    """How the candidate compared with the reference."""

    tiers: dict[str, bool] = Field(description=(
        "Tier -> passed, in the problem's main mode: by every checked call and, once timed, by every call after "
        "the checks too (`later`)."))
    max_abs_err: float | None = Field(None, description="Worst absolute error in the main mode.")
    max_rel_err: float | None = Field(None, description="Worst relative error in the main mode.")
    main: ModeCheck = Field(description="Trials in the problem's mode (train for BatchNorm problems).")
    eval_mode: ModeCheck | None = Field(None, description="The extra check in eval mode, reported apart.")
    distributions: list[str] = Field(description="Input distributions used.")
    seeds: list[int] = Field(description="Seeds of the trials, to reproduce them.")
    check_key: str | None = Field(None, description=(
        "The candidate's own key (hex), from which every seed of its checks and clocked calls derives "
        "(evaluator.referee.keys.Keys); drawn from the batch's secret, never from a pinned seed."))
    buffers_checked: list[str] = Field(description="State-dict entries compared after the calls.")
    later: ModeCheck | None = Field(None, description=(
        "Every call compared after the checks, in every tier: each clocked call's output and buffers (as its "
        "window copied them), the whole state after them, one fresh checked call and the profiled call. "
        "`tiers` above claims only the tiers these passed too; null where the candidate was not timed."))
    by_distribution: dict[str, ModeCheck] = Field(default_factory=dict, description=(
        "Input distribution -> the main mode's trials on inputs drawn from it (which distribution failed); "
        "empty on verdicts made before it was recorded."))
    matched_bounds: dict[str, float] = Field(default_factory=dict, description=(
        "The `matched` tier's bound on each tensor, over the compared tensor's largest magnitude: MATCHED_FACTOR times "
        "eager's own largest error over its largest magnitude at the problem's precision, measured by the referee "
        "(evaluator.referee.matched); empty on verdicts made before it existed."))


class TimingStats(Record):
    """Per-call times of one callable, in milliseconds."""

    median_ms: float = Field(description="Median time of one call.")
    mean_ms: float = Field(description="Mean time of one call.")
    min_ms: float = Field(description="Fastest call.")
    max_ms: float = Field(description="Slowest call.")
    iqr_ms: float = Field(description="Interquartile range, a robust spread.")
    reps: int = Field(description="Timed windows: calls, where a window holds one (`handed_off`: K calls each).")
    warmup: int = Field(description="Untimed calls before them.")
    samples_ms: list[float] = Field(default_factory=list, description=(
        "Each timed window's figure per call, in order (at most MAX_SAMPLES, evenly taken): what a speedup's "
        "interval is drawn from (harness.core.intervals). Empty on verdicts made before they were kept."))
    handed_off: bool = Field(False, description=(
        "Calls timed back to back as handed-off windows make them (candidates' and baselines' alike where a call's "
        "bytes allow: evaluator.referee.relay): through host memory each call's copy of its inputs in and of its "
        "output and buffers out in its time; on the device a candidate's copy out alone, a baseline's nothing. Else a "
        "call at a time, its inputs already in place."))


class Environment(Record):
    """Where the verdict was produced."""

    device: str = Field(description="`cuda` or `cpu`.")
    device_name: str = Field(description="GPU name (or the CPU's), part of every ranking key.")
    capability: str | None = Field(None, description="CUDA compute capability, e.g. `9.0`.")
    sm_count: int | None = Field(None, description="Multiprocessors.")
    torch_version: str = Field(description="torch.__version__ in the worker.")
    cuda_version: str | None = Field(None, description="torch.version.cuda.")
    driver: str | None = Field(None, description="NVIDIA driver version, when readable.")
    sm_clock_mhz: int | None = Field(None, description="SM clock read just after the candidate's timed calls, when readable.")
    python: str = Field(description="Python version of the worker.")
    hostname: str = Field(description="Machine name.")
    gpu: str | None = Field(None, description=(
        "Which GPU of the machine judged it (its CUDA_VISIBLE_DEVICES entry: the lane's); None on the CPU."))


class Mechanism(Record):
    """One kernel mechanism the launcher applied to the worker (see evaluator.executor.lockdown)."""

    name: str = Field(description=(
        "`pid_namespace`, `user_namespace`, `net_namespace`, `landlock` (filesystem), `landlock_net` (TCP), "
        "`landlock_scope` (signals, abstract unix sockets) or `seccomp` (syscalls: sockets, ptrace, setsid, ...)."))
    state: Literal["verified", "applied", "missing"] = Field(description=(
        "`verified`: in force, and a probe it must refuse was refused; `applied`: in force, the probe was "
        "inconclusive; `missing`: not in force (`detail` says why)."))
    detail: str = Field("", description="What it does here, or why it is missing.")


class Containment(Record):
    """How the worker and every process it started were confined, from before the worker started
    to its exit: as the launcher reported it, judged by the parent, which asked for every mechanism."""

    mechanisms: list[Mechanism] = Field(default_factory=list, description="Every mechanism asked for, with its state.")
    missing: list[str] = Field(default_factory=list, description=(
        "Requirements no working mechanism covered (`files`, `sockets`, `processes`, `ptrace`, `signals`); "
        "any one makes the verdict carry the `unsandboxed` flag."))
    writable: list[str] = Field(default_factory=list, description=(
        "The folders it could write under (its own folder, holding HOME, TMPDIR and caches, and its build folder)."))


class QuantileCheck(Record):
    """One quantile of the clocked calls: the referee's figure against the executor's report."""

    q: float = Field(description="The quantile (0.5: the median).")
    referee_ms: float = Field(description="The referee's: its window around each call, less the window's own cost.")
    reported_ms: float = Field(description="The executor's report (device events on a GPU, its host clock on the CPU).")
    limit_ms: float = Field(description="The most referee_ms may be for the report to stand.")
    agrees: bool = Field(description="referee_ms <= limit_ms.")


class TimingCheck(Record):
    """The candidate's reported per-call times against the referee's own clock (evaluator.referee.clock). The
    referee clocks every timed call itself, from before it writes the call's inputs to after it has
    copied out the call's output; less what such a window costs around a call (measured on trusted work,
    `overhead_ms`), that is the call's time, and what ranks. The executor's reports must agree with it
    at every quantile, or they are `timing_mismatch` (reject)."""

    wall_ms: float = Field(description="The referee's clock summed over the clocked calls' windows.")
    calls: int = Field(description="Clocked calls timed (warm-up not included).")
    calls_per_window: int = Field(1, description=(
        "Calls in each timed window (each figure is a window less its cost, over them): 1, or K where calls are "
        "handed off back to back (evaluator.referee.relay). The windows of calls back to back that follow the series "
        "are compared, never timed."))
    overhead_ms: float = Field(description=(
        "What one window costs beyond its calls' device time: the median over the calibrator's windows (a "
        "trusted executor, the same code and path), one run beside each of the candidate's, on the same inputs, "
        "or over those of the baseline round (no candidate alive) when that is less; subtracted from every "
        "window. 0 when the calibrator failed (flag `uncalibrated`)."))
    referee_ms: float = Field(description="The median of the referee's per-call times (one a window).")
    reported_mean_ms: float = Field(description="The mean of the per-call times the executor reported (-1: none usable).")
    reported_median_ms: float | None = Field(None, description="Their median (per call, one a window).")
    reported_iqr_ms: float | None = Field(None, description="Their interquartile range (per call, one a window).")
    limit_ms: float = Field(description="At the median: the most referee_ms may be for the reports to stand.")
    agrees: bool = Field(description="Every quantile agrees and no call was reported longer than its window.")
    quantiles: list[QuantileCheck] = Field(default_factory=list, description=(
        "Each checked quantile; empty on verdicts made when only the mean was checked."))
    clocked_calls: int | None = Field(None, description=(
        "Every clocked call the candidate made (warm-up and the windows back to back included): each one's output "
        "and buffers were copied out inside its window, and its output's shape, dtype and device checked."))
    compared_calls: int | None = Field(None, description=(
        "Of `clocked_calls`, how many the float64 reference replayed and compared in every tier: a sample drawn from "
        "a secret seed once the windows were closed (evaluator.referee.replay), every call where there were few."))
    compared_ranked: int | None = Field(None, description=(
        "Of `compared_calls`, how many were ranked calls: the detection bound is on these (a candidate wrong on a "
        "fraction q of its ranked calls escapes with probability at most (1 - q) ** compared_ranked); fewer than 16 "
        "where the ranked calls were fewer, or where the kept copies outgrew the memory plan (flag "
        "`few_ranked_compared`). Null on verdicts made before it was recorded."))
    longer_than_window: list[int] = Field(default_factory=list, description=(
        "Calls the executor reported as longer than the referee's whole window around them (at most 16)."))
    hold: str | None = Field(None, description=(
        "How the candidate's processes were held around the calibrator's windows: `cgroup_freezer` (its cgroup "
        "frozen; its tasks and the CPU time charged to it read before and after) or `sigstop` (every process "
        "stopped, every thread's run time read before and after); null on verdicts made before it was recorded."))
    void_windows: list[str] = Field(default_factory=list, description=(
        "Windows timed again because something held beside them (the builds, executors started ahead) ran or died "
        "inside them or inside the calibrator's window beside them, each with what: never ranked. Past "
        "MAX_VOID_WINDOWS the rest are kept and the verdict is `shaky_timing`."))
    retimed: str | None = Field(None, description=(
        "Why the ranked series was timed again with the referee's own count of calls a window (its windows, of fewer "
        "calls for a candidate slower in its warm-up than the reference, came out shorter than the reference's calls "
        "in a window of that count); null where it was not."))
    builds: str | None = Field(None, description=(
        "How builds were kept away from the clock while it was timed: on cores apart from the lane's, frozen "
        "whenever anything is timed, or neither (niced only), as the parent set it up."))


class Roofline(Record):
    """One forward's median time against the device's peaks (evaluator.referee.timing.device_peak): the problem's
    FLOPs and the fewest bytes a forward must move, per second, and as fractions of the peaks. Computed by
    the referee from its own numbers (the problem, the reference, the median time it accepted)."""

    peaks: str = Field(description=(
        "Whose peaks: an entry of evaluator.referee.timing.GPU_PEAKS (`H100 SXM`), the largest known ones for an "
        "unknown GPU, or the CPU's generous bound."))
    flops: float | None = Field(description="FLOPs of one forward (the problem's `flops` at this size); null when "
                                            "the problem gives none.")
    min_bytes: int = Field(description=(
        "Bytes one forward must move at least: its inputs and the reference's parameters and buffers read "
        "once, its output written once."))
    tflops: float | None = Field(description="Achieved TFLOP/s: flops / the median time; null without flops.")
    bandwidth_tbs: float = Field(description="Achieved TB/s: min_bytes / the median time.")
    peak_fp32_tflops: float = Field(description="The device's plain fp32 (FMA) rate, TFLOP/s.")
    peak_tf32_tflops: float = Field(description="Its dense TF32 tensor-core rate, TFLOP/s.")
    peak_tensor_tflops: float = Field(description="Its dense fp16/bf16 tensor-core rate, TFLOP/s.")
    peak_bandwidth_tbs: float | None = Field(description="Its memory bandwidth, TB/s; null where unknown (the CPU).")
    fraction_fp32: float | None = Field(description="tflops / peak_fp32_tflops.")
    fraction_tf32: float | None = Field(description="tflops / peak_tf32_tflops.")
    fraction_tensor: float | None = Field(description="tflops / peak_tensor_tflops.")
    fraction_bandwidth: float | None = Field(description="bandwidth_tbs / peak_bandwidth_tbs.")


# The published bounds past which a speedup is not ranked (flag `shaky_timing`): a series whose
# interquartile range is over a fifth of its median, or a baseline whose median moved by more than a
# fifth from one of the referee's rounds to the next (the round before the verdict, or the one after
# it: then the harness flags it once the batch is over).
SHAKY_SPREAD = 0.2
SHAKY_DRIFT = 0.2


def bounds_flag(spread: float, drift: float) -> list[Flag]:
    """A verdict judged with bounds other than the published ones says so (`own_bounds`), so a ranking on a
    shared machine's looser bounds never reads as one on the published bounds."""
    if (spread, drift) == (SHAKY_SPREAD, SHAKY_DRIFT):
        return []
    return [Flag(name="own_bounds", reason=(
        f"judged with timing bounds of {spread:.0%} spread and {drift:.0%} drift (published: {SHAKY_SPREAD:.0%} and "
        f"{SHAKY_DRIFT:.0%}): its speedup ranks against those"))]


class BaselineSource(Record):
    """Which timing of the baselines a verdict's speedups divide by: taken by the referee, in its own
    process (which never runs candidate code), with no candidate process alive on the device."""

    batch: str = Field(description="The referee's batch id (one referee per batch and device).")
    round: int = Field(description="0 before the batch's first candidate, then one more each time they were re-timed.")
    measured_at: float = Field(description="Unix time the round ended.")
    after_candidates: int = Field(description="Candidates the referee had judged before this round.")
    cached: str | None = Field(None, description=(
        "Where the figures came from when they were not timed in this round: the stored timing they were read "
        "from (by problem, size, device, judge and torch) and the baseline re-timed in this round as a spot "
        "check, with how far it was from the stored figure. None: every baseline timed in this round."))
    next_round_ms: dict[str, float] = Field(default_factory=dict, description=(
        "Each baseline's median in the batch's next round, the one timed after this verdict's candidate, filled in "
        "once the batch is over (empty until then, or where no round followed). A speedup's 95% interval is widened "
        "by the baseline's move to it (harness.core.intervals): the device's drift and one executor's figure against "
        "another's, error the per-call figures cannot show."))
    paired: list[str] = Field(default_factory=list, description=(
        "Baselines timed beside this candidate's own windows, a window of theirs after each of its, on the same "
        "inputs (on the CPU: eager, evaluator.referee.calibrator.EagerBeside): their figures in `baselines` are this "
        "verdict's, not the round's, and the rounds' moves bear on neither its flags nor its intervals."))


class Verdict(Record):
    """Exactly one per evaluated candidate: the worker's answer, completed by the parent."""

    schema_version: int = Field(SCHEMA_VERSION, description="Version of this record's layout.")
    evaluator_version: str = Field(EVALUATOR_VERSION, description="The evaluator package's version (for people).")
    judge: Judge | None = Field(None, description=(
        "What judged it: hashes of the evaluator's sources and the problem's files, torch and CUDA versions. "
        "Its fingerprint is part of the verdict's key; None on verdicts stored before fingerprints."))
    candidate: str = Field(description="Path of the candidate file, or its id in a run.")
    source_sha256: str = Field(description="SHA-256 of the candidate source (the build cache key).")
    problem: str = Field(description="Problem name.")
    size: str = Field(description="Size preset.")
    size_values: dict[str, int] = Field(default_factory=dict, description=(
        "For a scaled size (`default/64`): the values it gave the variables it changed; empty for a preset."))
    device: str = Field(description="`cuda` or `cpu`.")
    precision: str = Field("fp32", description="`fp32`, `fp16` or `bf16`: the dtype inputs and weights were cast to.")
    backend: str | None = Field(None, description="`cuda`, `triton` or `cpp`: what the candidate was judged as.")
    autotuned: list[str] = Field(default_factory=list, description=(
        "Each `@triton.autotune` kernel's chosen configuration, as the executor saw it after the timed calls."))
    status: Status = Field(description="The outcome.")
    error: str | None = Field(None, description="Why it is not correct; null when correct.")
    phase: Phase | None = Field(None, description="Phase in which the error happened.")
    correctness: Correctness | None = Field(None, description="Comparison with the reference, if it ran.")
    runtime_ms: float | None = Field(None, description=(
        "Median time of one candidate forward by the referee's clock (evaluator.referee.clock): what ranks."))
    timing: TimingStats | None = Field(None, description=(
        "The candidate's per-call times by the referee's clock (each window less the window's own cost)."))
    baselines: dict[str, TimingStats] = Field(default_factory=dict, description=(
        "Baseline name -> timing by the referee in the round `baseline_source` names (same device, same timing loop)."))
    baseline_source: BaselineSource | None = Field(None, description="The baseline round the speedups divide by.")
    speedup: dict[str, float] = Field(default_factory=dict, description="Baseline name -> baseline median / candidate median.")
    timing_check: TimingCheck | None = Field(None, description="The reported timings against the referee's clock.")
    flags: list[Flag] = Field(default_factory=list, description="Static and dynamic check findings.")
    kernels: list[str] = Field(default_factory=list, description=(
        "What one candidate forward launched, in launch order (at most 256 names, `kernel_count` has the "
        "total): on CUDA the GPU kernels the profiler saw (memcpy/memset left out); on the CPU the "
        "functions of the candidate's own extensions that forward called. Empty when not run."))
    kernel_times_us: list[float] = Field(default_factory=list, description=(
        "CUDA: the device time of each of `kernels` (µs, the profiler's, as the executor reported it), in the "
        "same order; empty on the CPU and when not run."))
    kernel_count: int | None = Field(None, description="Number of launches `kernels` stands for; null when not run.")
    custom_kernels: list[str] = Field(default_factory=list, description=(
        "Distinct names among `kernels` that come from the candidate itself (found in its own extension "
        "libraries, or launched by neither the reference nor a known library); none means `no_custom_kernel`."))
    runtime_floor_ms: float | None = Field(None, description=(
        "Physical lower bound of one forward on this device (FLOPs at the tensor-core peak, bytes read at "
        "the memory bandwidth); a runtime below it is flagged `implausible`."))
    roofline: Roofline | None = Field(None, description=(
        "The median time against the device's peaks (achieved TFLOP/s and bandwidth); null when not timed."))
    phase_seconds: dict[str, float] = Field(default_factory=dict, description="Wall time per worker phase.")
    environment: Environment | None = Field(None, description="Device and versions of the worker.")
    stdout_tail: str = Field("", description="Last part of the candidate's stdout (capped).")
    stderr_tail: str = Field("", description="Last part of the candidate's stderr (capped).")
    stdout_bytes: int = Field(0, description="Total bytes the worker wrote to stdout.")
    stderr_bytes: int = Field(0, description="Total bytes the worker wrote to stderr.")
    log_dir: str | None = Field(None, description="Folder holding the capped stdout/stderr logs.")
    containment: Containment | None = Field(None, description=(
        "How the worker was confined (namespaces, Landlock, seccomp) and what was missing; null when no worker ran."))
    built_on: str | None = Field(None, description=(
        "The machine its extensions were built on (host name; under Ray with the node's ID)."))
    judged_on: str | None = Field(None, description=(
        "The machine that reached this verdict: its lane's, or the build's when the build was the last word."))

    @property
    def rejected(self) -> bool:
        return any(f.policy == FlagPolicy.reject for f in self.flags)


def merge_flags(flags) -> list[Flag]:
    """One flag per name, in the order names first appear: the reasons of a name's flags joined
    with "; " (each once), `reject` if any of them is. Static and dynamic findings of one kind
    (the executor may report `monkeypatch` after the import and again later) become one."""
    merged: dict[str, Flag] = {}
    for flag in flags:
        if flag.name not in merged:
            merged[flag.name] = flag.model_copy()
            continue
        kept = merged[flag.name]
        reasons = kept.reason.split("; ") if kept.reason else []
        if flag.reason and flag.reason not in kept.reason:
            kept.reason = "; ".join([*reasons, flag.reason]) if reasons else flag.reason
        if flag.policy == FlagPolicy.reject:
            kept.policy = FlagPolicy.reject
    return list(merged.values())
