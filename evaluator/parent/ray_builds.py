"""Builds as Ray tasks (`--executor ray`): placed on any machine of the cluster with a CPU free, spread
across them, so that adding CPU machines adds builds per minute.

A task makes an `Evaluator` from the parent's options on its machine, builds the candidate there as a
local build does (contained, compile only, into that machine's build cache), and sends back the
verdict, the capped streams and the build folder packed (evaluator.parent.artifacts). The lane that
judges the candidate unpacks the folder into its own cache before its executor imports the candidate,
which then finds its extensions built. For a CUDA problem the builds are made for the architecture of
the cluster's GPUs, asked of one of them before the lanes take them all; a machine whose toolchain
differs from the judge's builds a folder the judge does not take (its executor builds it again).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import ray

from evaluator.parent.artifacts import Artifact, pack, place
from evaluator.referee.environment import build_folder
from evaluator.wire.records import Status, Verdict

BUILD_CPUS = 1  # what each build task asks of Ray
BUILD_MAX_JOBS = 2  # the compile jobs of one build (a binding and a .cu: two translation units)

# Builds submitted by a batch for the next one (a suite's next problem: Evaluator.evaluate_all's `prebuild`), by
# source digest, device and target architecture: the batch whose candidate it is takes a build that succeeded (one
# that failed under the earlier problem's settings is made again under its own). Entries no batch takes stay until
# the process ends (a suite's command).
_AHEAD: dict[tuple[str, str, str | None], tuple[object, object]] = {}


@dataclass
class RemoteBuild:
    """What the parent learns of a build on the cluster; the packed folder stays in Ray's object store
    (`artifact`, a reference) until the lane that judges the candidate fetches it from there."""

    verdict: Verdict
    stdout: bytes
    stderr: bytes
    built_on: str
    artifact: object = None


@ray.remote(num_returns=2)
def _build_task(make_evaluator: Callable[[dict], object], options: dict, name: str, source: bytes, digest: str,
                arch: str | None) -> tuple[RemoteBuild, Artifact | None]:
    if arch:  # the judging GPUs' architecture: a CPU machine has none to ask
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch
    evaluator = make_evaluator(options)
    verdict, stdout, stderr = evaluator.build(name, source, digest, max_jobs=BUILD_MAX_JOBS)
    artifact = None
    if verdict.status == Status.compiled:
        artifact = pack(evaluator.cache_dir, build_folder(evaluator.cache_dir, digest, evaluator.device))
    return RemoteBuild(verdict, stdout, stderr, place()), artifact


@ray.remote
def _gpu_arch() -> str:
    import torch

    return "%d.%d" % torch.cuda.get_device_capability()


class RayBuilds:
    """The parent's end: one Ray task per build, as many in flight as the cluster has CPUs the lanes leave."""

    def __init__(self, options: dict, device: str, lanes: int, make_evaluator: Callable[[dict], object]):
        self.options, self.make_evaluator, self.device = options, make_evaluator, device
        self.arch = None
        if device == "cuda" and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
            self.arch = ray.get(_gpu_arch.options(num_gpus=1).remote(), timeout=300)
        cpus = int(ray.cluster_resources().get("CPU", 0))
        # each lane's actor holds a CPU for the whole batch: builds get what is left, never none (they
        # would wait for ever), so with no CPU left the lanes' executors build as they import
        self.slots = max(0, cpus - lanes) // BUILD_CPUS

    def submit(self, name: str, source: bytes, digest: str) -> tuple[object, object]:
        task = _build_task.options(num_cpus=BUILD_CPUS, scheduling_strategy="SPREAD")
        return task.remote(self.make_evaluator, self.options, name, source, digest, self.arch)

    def build(self, name: str, source: bytes, digest: str) -> RemoteBuild:
        """The build's outcome: the task an earlier batch submitted for this source where it succeeded, else a task
        of its own."""
        ahead = _AHEAD.pop((digest, self.device, self.arch), None)
        if ahead is not None:
            build = ray.get(ahead[0])
            if build.verdict.status == Status.compiled:
                build.artifact = ahead[1]
                return build
        done, artifact = self.submit(name, source, digest)
        build = ray.get(done)
        build.artifact = artifact
        return build

    def build_ahead(self, name: str, source: bytes, digest: str) -> None:
        """Submit a later batch's build now, without waiting for it (that batch's `build` takes it)."""
        key = (digest, self.device, self.arch)
        if key not in _AHEAD:
            _AHEAD[key] = self.submit(name, source, digest)
