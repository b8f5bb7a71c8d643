"""A build only: an executor started by the parent itself (no referee) imports the candidate, which builds its
extensions into the cache, placed away from the lanes' clocks (evaluator.parent.placement) with its share of
the compilers' budget (evaluator.parent.jobserver). `compile_only` verdicts, the builds that fill the cache
before a batch is judged, and Ray's build tasks all come here (`Evaluator.build`)."""

from __future__ import annotations

from evaluator.parent.lanes import resolve_device
from evaluator.parent.referee_client import protected_paths
from evaluator.referee import headers, phases
from evaluator.referee.environment import build_arch_list
from evaluator.referee.process import ExecutorProcess
from evaluator.referee.session import Session
from evaluator.referee.settling import import_error_kind, settle
from evaluator.wire.identity import usable_cores
from evaluator.wire.protocol import VERDICT_TAIL_CHARS
from evaluator.wire.records import Status, Verdict

BUILD_NICE = 10  # builds made beside candidates being judged leave the CPU to the referee and its executors


def build_candidate(evaluator, name: str, source: bytes, digest: str,
                    max_jobs: int | None = None) -> tuple[Verdict, bytes, bytes]:
    """`evaluator`'s build of one candidate (an `evaluator.parent.sandbox.Evaluator`): the verdict (`compiled`, or
    why not) and the executor's capped stdout and stderr."""
    jobserver = evaluator.jobserver
    if max_jobs is not None:  # niced as local builds are: a lane may be timing on this machine
        budget = dict(max_jobs=max_jobs, nice=BUILD_NICE)
    elif jobserver is not None:
        # behind the builds already in flight: the kernel gives the ones the lanes need first more of the CPU
        ahead_of_it = jobserver.begin()
        budget = dict(makeflags=jobserver.makeflags, jobs_fifo=jobserver.fifo, nice=min(19, BUILD_NICE + ahead_of_it))
    else:  # concurrent builds share the cores
        budget = dict(max_jobs=max(1, usable_cores() // evaluator.jobs))
    placement = evaluator.placement
    process = ExecutorProcess(
        source=source, digest=digest, device=evaluator.device, compile_only=True, watch=evaluator.problem.rules.watch,
        cache_dir=evaluator.cache_dir, problem_location=evaluator.problem.location, protect=protected_paths(evaluator),
        exchange_bytes=None, output_cap=evaluator.options.output_cap_bytes,
        memory_limit_gb=evaluator.options.compile_memory_limit_gb, arch_list=build_arch_list(evaluator.device),
        cores=placement.build_cores if placement else None,
        group=placement.build_group() if placement else None, **budget)
    session = Session(referee=None, link=process, name=name, digest=digest,
                             problem=evaluator.problem.name, size=evaluator.size, device=evaluator.device,
                             compile_timeout_s=evaluator.compile_timeout, run_timeout_s=evaluator.run_timeout,
                             memory_limit_gb=evaluator.options.compile_memory_limit_gb)
    returncode = None
    try:
        process.start()
        verdict = phases.judge(session, compile_only=True)
        if verdict.status == Status.compiled:
            returncode = process.wait_exit(10)
    finally:
        used = process.group.usage_usec() if process.group is not None else None  # its whole tree, compilers too
        process.close()
        if used is not None:  # what the batch's builds cost the CPU (harness bench --throughput)
            cores = placement.build_cores if placement is not None else None
            evaluator.build_cpu.append((used / 1e6, len(cores or []) or usable_cores()))
        if jobserver is not None and max_jobs is None:
            jobserver.end()
    if (verdict.status == Status.compile_error and not evaluator.options.compile_only and evaluator.device == "cuda"
            and import_error_kind(process) == "import"):
        # built, then its import failed in a build, which sees no GPU: its lane imports it again, with its GPU
        verdict = verdict.model_copy(update={"status": Status.compiled, "error": (
            "built; its import failed without a GPU, so its lane imports it again: " + (verdict.error or ""))[:2000]})
    if (verdict.status == Status.compiled and evaluator.device == "cpu" and not evaluator.options.compile_only
            and headers.builds_cuda(source.decode(errors="replace"))):  # built only because it cannot run here
        verdict.error += "; this is a CUDA candidate and " + ("it was not run on the GPU" if resolve_device(None) == "cuda"
                                                                else "there is no CUDA GPU on this machine to run it")
    verdict.environment = evaluator.environment
    verdict = settle(verdict, process, returncode, VERDICT_TAIL_CHARS)
    return verdict, process.stdout.tail(), process.stderr.tail()
