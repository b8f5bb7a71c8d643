"""The parent side of evaluation: candidates in, verdicts out, nothing of the candidate imported here.

For each batch the parent starts one referee (evaluator.referee, a process that never runs candidate code and owns the
reference, the inputs, the baselines, the tolerances and every comparison) and sends it the candidates one at a time;
the referee starts one contained executor per candidate (evaluator.executor through evaluator.executor.launcher) and
answers with the verdict. The parent reads each source first: one that cannot be a candidate is a `parse_error`, and
one the static checks reject is `rejected` without its code ever running (unless `run_rejected`). Builds
(`compile_only`, and the parallel builds that fill the extension cache before a batch is judged) need no referee: the
parent starts those executors itself. A referee that dies or hangs costs the candidate it was judging (`crashed`, with
the reason) and is started afresh for the next one.

The parent stamps every verdict with what judged it (`Verdict.judge`, evaluator.wire.identity), merges
the static flags into it and writes its logs (the candidate's capped stdout and stderr, the verdict).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import secrets
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from evaluator.wire import identity, syntax
from evaluator.wire.problem import DEFAULT_PROBLEM, ProblemSpec, load_problem
from evaluator.wire.tiers import Backend, Precision, keyed_backend, resolve_backend
from evaluator.checks.bounded import bounded_flags
from evaluator.parent.artifacts import place
from evaluator.parent.build import BUILD_NICE, build_candidate
from evaluator.parent.jobserver import JobServer, build_slots, default_build_jobs, ninja_takes_jobserver
from evaluator.parent.placement import Placement, plan as plan_placement, release as release_placement
from evaluator.parent.lanes import EarlyLanes, Job, Judged, Scheduler, resolve_device
from evaluator.parent.referee_client import RefereeClient
from evaluator.referee import headers
from evaluator.referee.environment import toolchain_digest
from evaluator.wire.protocol import VERDICT_TAIL_CHARS, BaselineRound
from evaluator.wire.records import (
    SHAKY_DRIFT, SHAKY_SPREAD, Flag, FlagPolicy, Judge, Phase, Status, TimingStats, Verdict, merge_flags)

DEFAULT_BASELINES = {"cuda": ["eager", "eager_tf32", "compile", "compile_tf32"], "cpu": ["eager"]}
TIMING_BUDGET_S = 2.0
TIMING_BUDGET_ENV = "HARNESS_TIMING_BUDGET_S"  # where set, the default (the test suite's: 0.2, as its own options)


def default_timing_budget() -> float:
    try:
        return float(os.environ.get(TIMING_BUDGET_ENV) or TIMING_BUDGET_S)
    except ValueError:
        raise ValueError(f"{TIMING_BUDGET_ENV}={os.environ[TIMING_BUDGET_ENV]!r} is not a number of seconds") from None


class CandidateFile(BaseModel):
    """A candidate source file and the name its verdict will carry."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="How verdicts name it: a path, `run/sample`, or `golden/...`.")
    path: Path = Field(description="The Python file defining ModelNew.")


class EvalOptions(BaseModel):
    """How to evaluate a batch of candidates. `None` means the problem's or machine's default."""

    model_config = ConfigDict(extra="forbid")
    problem: str = Field(DEFAULT_PROBLEM, description="Problem name, folder or bare KernelBench-format .py file.")
    size: str | None = Field(None, description="Size preset; default depends on the device.")
    device: Literal["cuda", "cpu"] | None = Field(None, description="cuda when visible, else cpu.")
    backend: Backend | None = Field(None, description="What candidates are written in (None: the problem's, else the device's).")
    precision: Precision | None = Field(None, description="fp32, fp16 or bf16 (None: the problem's, fp32 unless it says).")
    compile_only: bool = Field(False, description="Build without running.")
    run_rejected: bool = Field(False, description=(
        "Run candidates whose static checks give a `reject` flag (contained, like any other), for people "
        "studying hacks. By default they are `rejected` without their code ever running."))
    baselines: list[str] | None = Field(None, description="Baselines to time (see `default_baselines`).")
    baseline_every: int = Field(8, ge=1, description=(
        "Candidates timed between two rounds of baseline timings by the referee (one round comes before the "
        "first candidate and one after the last)."))
    eager_as_candidate: bool = Field(default_factory=identity.eager_as_candidate, description=(
        "Eager: the reference judged as a candidate each round (RefereeConfig); False: the referee's own loop."))
    cached_baselines: dict[str, TimingStats] | None = Field(None, description="Stored figures (RefereeConfig).")
    cached_note: str = Field("", description="Where the stored figures come from, for the verdicts.")
    protect: list[Path] = Field([], description="More paths no executor may read (a service's keys file).")
    seed: int | None = Field(None, description=(
        "Pins the reference's initial weights (None: fresh for each candidate). Inputs are never pinned: they "
        "derive from a secret drawn for each batch; a verdict's `correctness.check_key` makes its checks again."))
    jobs: int | None = Field(None, ge=1, description=(
        "Candidates built at once, while earlier ones are judged; None: see `default_build_jobs` (on a GPU one per "
        "core, their compilers sharing one budget of jobs). 1: each executor builds as it imports."))
    gpus: str | None = Field(None, description="GPUs to judge on, one lane each: None/`all`, or positions (`0,2`).")
    ahead: int | None = Field(None, ge=0, description=(
        "Candidates a lane queues at its referee behind the one judged, their executors started and importing "
        "meanwhile (stopped while anything is timed); None: 4 on a GPU, 0 on the CPU (whose cores they would use)."))
    executor: Literal["local", "ray"] = Field("local", description=(
        "`local`: lanes in this process, one per GPU; `ray`: each lane a Ray actor (a GPU or a CPU) at `ray_address`."))
    ray_address: str | None = Field(None, description="Ray cluster to join (None: a local Ray instance).")
    lanes: int | None = Field(None, ge=1, description=(
        "Ray only: actors; None: the cluster's GPUs for a CUDA problem, its CPUs' worth for a CPU one (at most 4)."))
    compile_timeout_s: float | None = Field(None, description="Override of the problem's compile timeout.")
    run_timeout_s: float | None = Field(None, description="Override of the problem's run timeout.")
    timing_budget_s: float = Field(default_factory=default_timing_budget, gt=0, description=(
        f"Target seconds of timed calls per callable (default {TIMING_BUDGET_S:g}, or {TIMING_BUDGET_ENV} where set)."))
    shaky_spread: float = Field(SHAKY_SPREAD, gt=0, description="Spread bound (IQR over median) of shaky_timing.")
    shaky_drift: float = Field(SHAKY_DRIFT, gt=0, description="Drift bound (between rounds) of shaky_timing.")
    compile_memory_limit_gb: float | None = Field(16.0, gt=0, description=(
        "Most resident memory (GiB, private pages summed over the executor's process group: the executor, "
        "the compilers it starts) while the candidate is imported and built; over it the group is killed and "
        "the verdict is compile_error. None: no limit."))
    output_cap_bytes: int = Field(1 << 20, description="Bytes of stdout and of stderr kept (the tail).")
    log_root: Path | None = Field(None, description="Where per-candidate logs go (default .harness/logs).")
    cache_dir: Path | None = Field(None, description="Extension build cache (default ~/.cache/kernelharness).")
    store: Path | None = Field(None, description=(
        "The result store the harness writes (however it was given: --store, harness.toml, HARNESS_STORE): "
        "no executor may read it, its SQLite side files or the folder that holds them (`protected_paths`)."))


def default_baselines(problem: ProblemSpec, device: str) -> list[str]:
    """DEFAULT_BASELINES for the device; on CUDA the problem's `[bench] ceilings` too (for gemm_scale_bn
    `part:gemm_tf32`, cuBLAS's GEMM alone), so every verdict knows its gap to them. The referee times
    baselines once a round, not once a candidate: they cost little."""
    names = list(DEFAULT_BASELINES[device])
    if device == "cuda":
        names += [c for c in problem.bench.ceilings if c not in names]
    return names


def default_cache_dir() -> Path:
    if os.environ.get("HARNESS_CACHE_DIR"):
        return Path(os.environ["HARNESS_CACHE_DIR"]).absolute()  # executors and links read it from other folders
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kernelharness"


def source_digest(source: bytes) -> str:
    return hashlib.sha256(source).hexdigest()


def parse_problem(source: str) -> str | None:
    """Why this source cannot be a candidate (None when it can): checked without importing it."""
    try:
        tree = syntax.parse(source)
    except SyntaxError as err:
        return f"syntax error at line {err.lineno}: {err.msg}"
    except ValueError as err:  # NUL bytes; nested too deep (syntax.TooDeep)
        return f"the source cannot be parsed: {err}"
    if not any(isinstance(node, ast.ClassDef) and node.name == "ModelNew" for node in tree.body):
        return "no top-level `class ModelNew` in the source"
    return None


def calls_for_extension(source: bytes) -> bool:
    """Whether a candidate's text names torch's extension builder (`load_inline`, `cpp_extension`): where it does
    not, a build ahead of its lane has nothing to build. (One that hides the names is built by its lane's executor
    as it imports it, within the same limits: later, not differently.)"""
    return b"load_inline" in source or b"cpp_extension" in source


def builds_beside_windows(device: str, placement: Placement) -> bool:
    """Whether a batch may build candidates while its lanes time others: not on the CPU where builds can be neither
    frozen nor kept to cores of their own (its cores are the windows'); each executor then builds as it imports."""
    return not (device == "cpu" and placement.mode == "niced")


def rejected_error(flags: Sequence[Flag]) -> str:
    names = ", ".join(f.name for f in flags if f.policy == FlagPolicy.reject)
    return f"not run: the static checks reject it ({names}); --run-rejected runs it, contained, to study it"


class Evaluator:
    """Evaluates candidates for one problem, size and device."""

    def __init__(self, options: EvalOptions):
        self.options = options
        self.problem: ProblemSpec = load_problem(options.problem)
        self.device = resolve_device(options.device)
        self.size = options.size or self.problem.default_size_for(self.device)
        self.backend = resolve_backend(self.device, options.backend, self.problem.backend,
                                       compile_only=options.compile_only)
        self.precision = options.precision or self.problem.precision
        self.problem.size_values(self.size)  # fail now on an unknown size
        self.baselines = options.baselines if options.baselines is not None else default_baselines(self.problem,
                                                                                                    self.device)
        # absolute: executors run in folders of their own, where a relative build cache is another, empty one
        self.cache_dir = (options.cache_dir or default_cache_dir()).absolute()
        self.log_root = (options.log_root or Path(".harness") / "logs").absolute()
        self.compile_timeout, self.run_timeout = (options.compile_timeout_s or self.problem.timeouts.compile_s,
                                                  options.run_timeout_s or self.problem.timeouts.run_s)
        # not set by the user: the problem's is a cap, each candidate's limit scaled to the reference's time within it
        self.run_timeout_scaled = not options.run_timeout_s  # (a looping candidate at `small` cost 300 s)
        self.rounds: list[BaselineRound] = []  # the baseline rounds of the last batch (every lane's)
        # the last batch's builds made here: each one's CPU seconds (its cgroup's), and the cores builds could use
        self.build_cpu: list[tuple[float, int]] = []
        self.lent_stretches: list[tuple[float, float]] = []  # and what lending the lanes' cores gave them (placement)
        self.jobs = options.jobs or default_build_jobs(self.device)
        self.jobserver: JobServer | None = None  # the compilers' shared budget while a batch builds in a pool
        # where a batch's builds run while its lanes time (evaluator.parent.placement); None: no lane times
        self.placement: Placement | None = None
        # 4 on a GPU: an executor took about 7 s to start, import torch and dynamo and load its extension (H100,
        # 16 cores, stopped while others are timed), a candidate about 3.3 s of the referee's at kernelbench; a warm
        # batch of 16 waited 10.7 s in all for executors with 3 ahead, 2.9 s with 4 (and some while a round compiles)
        self.ahead = options.ahead if options.ahead is not None else (4 if self.device == "cuda" else 0)

    # -- one candidate ---------------------------------------------------------------------------

    @functools.cached_property
    def judge(self) -> Judge:
        """What judges this batch (evaluator.wire.identity): stamped on every verdict here, whatever the referee sent."""
        return identity.judge_identity(self.problem)

    @functools.cached_property
    def device_name(self) -> str:
        """The device name verdicts of this batch are keyed by."""
        return identity.device_name(self.device)

    @functools.cached_property
    def environment(self):
        """Where builds are made (a build has no referee to describe it)."""
        return identity.describe_environment(self.device)

    def key(self, verdict: Verdict, compile_only: bool | None = None) -> str:
        """The store key of a verdict made by this evaluator."""
        compile_only = self.options.compile_only if compile_only is None else compile_only
        return identity.verdict_key(verdict.source_sha256, self.problem.name, self.size, self.device_name, self.judge,
                                    compile_only=compile_only, run_rejected=self.options.run_rejected,
                                    bounds=(self.options.shaky_spread, self.options.shaky_drift),
                                    eager_in_referee=not self.options.eager_as_candidate, precision=self.precision,
                                    backend=keyed_backend(self.backend, self.device))

    def evaluate(self, candidate: CandidateFile, compile_only: bool | None = None) -> Verdict:
        """One candidate, with a referee of its own when it runs."""
        referee = RefereeClient(self)
        try:
            return self._evaluate(candidate, compile_only, referee)
        finally:
            self.rounds = referee.close()

    def _prepare(self, candidate: CandidateFile, compile_only: bool) -> tuple[dict, bytes, str, list[Flag], bool] | Verdict:
        """Read and gate a candidate: its final verdict when it cannot run (unreadable, not a candidate, rejected by
        the static checks, unbuildable), else what running it needs (base fields, source, digest, static flags,
        whether it is only built)."""
        base = dict(candidate=candidate.name, problem=self.problem.name, size=self.size, device=self.device,
                    precision=self.precision, backend=self.backend, size_values=self.problem.scaled_values(self.size))
        try:
            source_bytes = candidate.path.read_bytes()
            source = source_bytes.decode("utf-8")
        except (OSError, UnicodeDecodeError) as err:
            return self._stamp(Verdict(**base, source_sha256="", status=Status.parse_error, phase=Phase.parse,
                                       error=f"cannot read the candidate: {err}"))
        digest = source_digest(source_bytes)
        too_long = len(source_bytes) > syntax.MAX_SOURCE_BYTES
        reason = (f"the source is {len(source_bytes)} bytes, over the {syntax.MAX_SOURCE_BYTES} a candidate may have"
                  if too_long else parse_problem(source))
        if reason:
            return self._stamp(Verdict(**base, source_sha256=digest, status=Status.parse_error, phase=Phase.parse,
                                       error=reason))
        try:  # in a process of their own, bounded: the batch never waits on, nor dies of, one source
            flags = merge_flags(bounded_flags(source, rules=self.problem.rules, backend=self.backend))
        except Exception as err:
            return self._stamp(Verdict(**base, source_sha256=digest, status=Status.rejected, phase=Phase.parse,
                                       error=f"the static checks could not read it: {err}; never run"))
        if any(f.policy == FlagPolicy.reject for f in flags) and not self.options.run_rejected:
            # the static gate: a candidate the checks reject never runs (importing it would run it)
            return self._stamp(Verdict(**base, source_sha256=digest, status=Status.rejected, phase=Phase.parse,
                                       flags=flags, error=rejected_error(flags)))
        if self.device == "cpu" and headers.builds_cuda(source):  # (by its syntax: a comment does not count)
            if not headers.torch_builds_cuda():  # a CPU build of torch has no CUDA headers or libraries to link
                return self._stamp(Verdict(**base, source_sha256=digest, status=Status.not_built, phase=Phase.compile,
                                           flags=flags, error=headers.NOT_BUILT))
            compile_only = True  # running it would only fail; build it and say plainly it was not run
        return base, source_bytes, digest, flags, compile_only

    def to_prebuild(self, candidates: Sequence[CandidateFile]) -> list[tuple[str, bytes, str]]:
        """Of these candidates (this evaluator's problem's), those another batch may build ahead of their own
        (`evaluate_all`'s `prebuild`): through this problem's gate, not built yet, and calling for an extension
        (by their text: a candidate missed here is only built later, by its own batch)."""
        items = []
        for candidate in candidates:
            prepared = self._prepare(candidate, self.options.compile_only)
            if isinstance(prepared, Verdict):  # never run: nothing to build (a rejected one is never imported)
                continue
            _, source, digest, _, _ = prepared
            if not self.built_before(digest) and calls_for_extension(source):
                items.append((candidate.name, source, digest))
        return items

    def _settle(self, verdict: Verdict, base: dict, digest: str, flags: list[Flag], stdout: bytes = b"",
                stderr: bytes = b"", logs: bool = True) -> Verdict:
        """A verdict from a build or a referee, made the parent's: its names, the logs (unless written
        already), the static flags and the stamp."""
        verdict = verdict.model_copy(update={**base, "source_sha256": digest})
        # judged where its lane ran, or where it was built when the build was the last word; built where
        # judged when its executor built it as it imported
        verdict.judged_on = verdict.judged_on or verdict.built_on or place()
        verdict.built_on = verdict.built_on or verdict.judged_on
        if logs:
            self._write_logs(verdict, stdout, stderr, digest)
        verdict.flags = merge_flags(flags + verdict.flags)  # one flag per name, static and dynamic reasons joined
        return self._stamp(verdict)

    def _evaluate(self, candidate: CandidateFile, compile_only: bool | None, referee: RefereeClient | None) -> Verdict:
        compile_only = self.options.compile_only if compile_only is None else compile_only
        prepared = self._prepare(candidate, compile_only)
        if isinstance(prepared, Verdict):
            return prepared
        base, source_bytes, digest, flags, compile_only = prepared
        try:
            verdict = self._run_worker(candidate, source_bytes, digest, compile_only, base, referee)
        except Exception as err:  # the harness's own failure: recorded, so the rest of the batch goes on
            verdict = Verdict(**base, source_sha256=digest, status=Status.crashed,
                              error=f"the evaluator failed around this candidate: {type(err).__name__}: {err}\n"
                                    + traceback.format_exc()[-VERDICT_TAIL_CHARS:])
        return self._settle(verdict, base, digest, flags, logs=False)  # _run_worker wrote the logs

    def _stamp(self, verdict: Verdict) -> Verdict:
        return verdict.model_copy(update={"judge": self.judge})

    def _run_worker(self, candidate: CandidateFile, source: bytes, digest: str, compile_only: bool, base: dict,
                    referee: RefereeClient | None = None) -> Verdict:
        """Build it (here), or have the referee judge it; the logs written either way."""
        if compile_only:
            verdict, stdout, stderr = self.build(candidate.name, source, digest)
        else:
            if referee is None:
                raise RuntimeError("a candidate that runs needs a referee")
            try:
                verdict, stdout, stderr = referee.judge(candidate.name, source, digest)
            except RuntimeError as err:
                verdict, stdout, stderr = Verdict(**base, source_sha256=digest, status=Status.crashed,
                                                  error=f"the referee failed around this candidate: {err}"), b"", b""
        verdict = verdict.model_copy(update={**base, "source_sha256": digest})
        self._write_logs(verdict, stdout, stderr, digest)
        return verdict

    def build(self, name: str, source: bytes, digest: str, max_jobs: int | None = None) -> tuple[Verdict, bytes, bytes]:
        """A build only (evaluator.parent.build): an executor imports the candidate, building its extensions into
        the cache, with `max_jobs` compile jobs when given (a Ray task's), else its share of this machine's."""
        return build_candidate(self, name, source, digest, max_jobs)

    def _write_logs(self, verdict: Verdict, stdout: bytes, stderr: bytes, digest: str) -> None:
        folder = self.log_root / f"{time.strftime('%Y%m%d-%H%M%S')}-{digest[:12]}-{secrets.token_hex(3)}"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "stdout.log").write_bytes(stdout)
            (folder / "stderr.log").write_bytes(stderr)
            verdict.log_dir = str(folder)
            (folder / "verdict.json").write_text(verdict.model_dump_json(indent=2))
        except OSError:
            verdict.log_dir = None  # logs are a convenience; the verdict itself is what counts

    # -- many candidates -------------------------------------------------------------------------

    def evaluate_all(self, candidates: Sequence[CandidateFile], on_verdict: Callable[[Verdict], None] | None = None,
                     prebuild: Sequence[tuple[str, bytes, str]] = ()) -> Iterator[Verdict]:
        """Verdicts in order. The parent gates each candidate; those that run go to the scheduler
        (evaluator.parent.lanes): builds `jobs` at once while earlier candidates are judged, one lane per GPU,
        each judging one candidate at a time with `ahead` more importing behind it. With `compile_only`
        the builds are the verdicts. The baseline rounds of every lane are in `self.rounds` once the
        last verdict is out.

        `prebuild`: (name, source, digest) of another batch's candidates, gated by that batch's own checks, built
        into the cache by this batch's pool after its own, placed as its own builds are, and never judged here (a
        suite's next problem, built while this one is judged: harness.cli.suites). Under Ray they are submitted as
        tasks once this batch's own builds are, and the next batch takes their results (ray_builds.RayBuilds)."""
        verdicts: dict[int, Verdict] = {}
        jobs: list[Job] = []
        context: dict[int, tuple] = {}
        early = EarlyLanes(self)  # the lanes, started once a candidate will run (lanes.EarlyLanes)
        with early:  # stopped, with the placement, where the batch fails before its scheduler takes them
            for index, candidate in enumerate(candidates):
                prepared = self._prepare(candidate, self.options.compile_only)
                if isinstance(prepared, Verdict):
                    verdicts[index] = prepared
                    continue
                base, source, digest, flags, compile_only = prepared
                context[index] = (candidate, base, digest, flags, compile_only)
                jobs.append(Job(index=index, name=candidate.name, source=source, digest=digest))
                early.start(compile_only)
            early.gated()  # their first rounds may be timed: no gate's work is left beside them
            ahead_of_time = range(len(candidates), len(candidates) + len(prebuild))
            for index, (name, source, digest) in zip(ahead_of_time, prebuild):
                if self.options.executor == "ray" or not self.built_before(digest):
                    context[index] = (CandidateFile(name=name, path=Path(name)), {}, digest, [], True)
                    jobs.append(Job(index=index, name=name, source=source, digest=digest))
            # Builds of their own for candidates only built, and, with several candidates to run and `jobs` > 1,
            # for those too (else the executor that imports a candidate builds it, in its lane).
            running = sum(not c[4] for c in context.values())
            cluster = None  # builds as Ray tasks, spread over the cluster's machines
            if self.options.executor == "ray" and jobs:
                from evaluator.parent.ray_lanes import cluster_builds

                cluster = cluster_builds(self, evaluator_from_options, lanes=running > 0)
                if cluster is None:  # no CPU left for builds on the cluster: the next batch's are its own lanes' to make
                    jobs = [job for job in jobs if job.index not in ahead_of_time]
            builds_here = self.options.executor == "local" and self.jobs > 1 and running > 1
            if sum(1 for c in context.values() if c[4] or builds_here) > 1 and ninja_takes_jobserver():
                self.jobserver = JobServer(build_slots(self.device))
            to_build = [job.source.decode(errors="replace") for job in jobs if not self.built_before(job.digest)]
            wanted = headers.missing(self.cache_dir, self.device, to_build) if self.options.executor == "local" else []
            header_builds = headers.HeaderBuilds(self.cache_dir, self.device, wanted, nice=BUILD_NICE,
                                                 jobserver=self.jobserver)

            def build(job: Job) -> Judged | None:
                """A build, when it is the last word (compile only, or it failed), else None."""
                candidate, _, digest, _, compile_only = context[job.index]
                if cluster is not None and job.index in ahead_of_time:  # the next batch's: submitted, not waited for
                    cluster.build_ahead(candidate.name, job.source, digest)
                    return Judged(job, Verdict(candidate=candidate.name, source_sha256=digest, problem=self.problem.name,
                                               size=self.size, device=self.device, status=Status.compiled))
                if cluster is not None:
                    remote = cluster.build(candidate.name, job.source, digest)
                    verdict, stdout, stderr, job.built_on, job.artifact = (remote.verdict, remote.stdout, remote.stderr,
                                                                            remote.built_on, remote.artifact)
                else:
                    verdict, stdout, stderr = self.build(candidate.name, job.source, digest)
                    job.built_on = place()
                if compile_only or verdict.status != Status.compiled:
                    return Judged(job, verdict, stdout, stderr)
                if cluster is None:  # a folder in this machine's cache
                    self.mark_built(digest)
                return None

            def pool_builds(job: Job) -> bool:
                """Only-built candidates always; the others when builds run here, this source was never built here
                before and it calls for an extension (by its text): a build of a candidate with none would only import
                it, and its executor imports it anyway (the mark would only save a start)."""
                compile_only = context[job.index][4]
                return compile_only or cluster is not None or (builds_here and not self.built_before(job.digest)
                                                               and calls_for_extension(job.source))

            next_index = 0

            def in_order() -> Iterator[Verdict]:
                nonlocal next_index
                while next_index in verdicts:
                    verdict = verdicts.pop(next_index)
                    next_index += 1
                    if on_verdict:
                        on_verdict(verdict)
                    yield verdict

            workers = (lambda: early.workers) if early.workers else None
            if self.options.executor == "ray":  # each lane a Ray actor (ray is an optional dependency)
                from evaluator.parent.ray_lanes import ray_workers

                workers = functools.partial(ray_workers, self, evaluator_from_options)
            scheduler = Scheduler(self, build, pool_builds, workers, build_slots=cluster.slots if cluster else None)
            if running and self.options.executor == "local":
                self.placement = self.placement or plan_placement(len(scheduler.lanes()))
                builds_here = builds_here and builds_beside_windows(self.device, self.placement)
        self.rounds, self.build_cpu, self.lent_stretches = [], [], []
        try:
            for judged in scheduler.run(jobs, lanes=running > 0) if jobs else ():
                if judged.job.index in ahead_of_time:
                    if judged.verdict.status == Status.compiled and cluster is None:  # the next batch finds it built
                        self.mark_built(judged.job.digest)
                    continue
                _, base, digest, flags, _ = context[judged.job.index]
                judged.verdict.built_on = judged.job.built_on
                verdicts[judged.job.index] = self._settle(judged.verdict, base, digest, flags, judged.stdout,
                                                          judged.stderr)
                yield from in_order()
            yield from in_order()
        finally:
            self.rounds = scheduler.rounds
            header_builds.stop()
            release_placement(self)
            if self.jobserver is not None:
                self.jobserver.close()
                self.jobserver = None

    def built_mark(self, digest: str) -> Path:
        """Written by the parent after a build of this source with this toolchain succeeded (outside any
        executor's folder: no candidate can write it)."""
        return self.cache_dir / "built" / toolchain_digest(self.device) / digest

    def mark_built(self, digest: str) -> None:
        try:
            self.built_mark(digest).parent.mkdir(parents=True, exist_ok=True)
            self.built_mark(digest).touch()
        except OSError:
            pass

    def built_before(self, digest: str) -> bool:
        return self.built_mark(digest).is_file()


def evaluator_from_options(options: dict) -> Evaluator:
    """An Evaluator made from EvalOptions as JSON (what a Ray lane's actor is sent)."""
    return Evaluator(EvalOptions.model_validate(options))


def evaluate(candidates: Sequence[CandidateFile], options: EvalOptions | None = None) -> Iterator[Verdict]:
    """One verdict per candidate, in order. Never raises for a bad candidate."""
    yield from Evaluator(options or EvalOptions()).evaluate_all(candidates)

