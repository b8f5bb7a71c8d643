"""Lanes as Ray actors (`--executor ray`): the same `LaneWorker` on any machine of a Ray cluster.

Each lane is one actor that asks Ray for one GPU (a CUDA problem; Ray pins the actor to it with
CUDA_VISIBLE_DEVICES, and its referee and executors inherit that) or one CPU (a CPU problem). The
candidates are built as Ray tasks on any machine with a CPU free (evaluator.parent.ray_builds); the
actor unpacks each one's build folder into its own machine's cache before judging it (its executor
builds it when none came), builds an `Evaluator` from the parent's options there, and judges the jobs
it is sent in order, with the referee's `ahead` inside each
batch of jobs (1 + ahead at a time). What comes back is the verdict and the capped streams; the
parent settles, logs and stores them as it does for a local lane. An actor that dies (its machine
lost, its process killed) costs the jobs it held (`crashed`, with Ray's reason); the lane starts a
new actor and goes on.

Every machine needs the project importable at the same place and the problem at the path the
parent names (a shared checkout or the same install). Ray is an optional extra:
`pip install -e '.[ray]'`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import ray

from evaluator.parent.artifacts import install, place
from evaluator.parent.lanes import ClusterError, Job, Judged, LaneWorker, crashed
from evaluator.referee.environment import build_folder
from evaluator.wire.protocol import BaselineRound

MAX_DEFAULT_CPU_LANES = 4


@ray.remote
class LaneActor:
    """A LaneWorker in a Ray actor."""

    def __init__(self, make_evaluator: Callable[[dict], object], options: dict, lane: int):
        self.evaluator = make_evaluator(options)
        self.worker = LaneWorker(self.evaluator, gpu=None, lane=lane)  # Ray pinned this process to its GPU
        self.gpu = ",".join(str(g) for g in ray.get_gpu_ids()) or None
        self.host = self.worker.place = place()

    def judge_many(self, jobs: list[Job]) -> list[Judged]:
        cache, device = self.evaluator.cache_dir, self.evaluator.device
        for job in jobs:
            if job.artifact is not None:  # built on the cluster: its folder fetched from Ray's object store
                artifact, job.artifact = ray.get(job.artifact), None
                if artifact is not None:
                    install(cache, artifact, build_folder(cache, job.digest, device))
        judged = self.worker.judge_many(jobs)
        for item in judged:
            if item.verdict.environment is not None and self.gpu is not None:
                item.verdict.environment.gpu = self.gpu
        return judged

    def where(self) -> str:
        return f"{self.host} gpu {self.gpu}" if self.gpu else self.host

    def close(self) -> list[BaselineRound]:
        return self.worker.close()


def connect(address: str | None) -> None:
    """Join the cluster at `address` (else RAY_ADDRESS's, else a local Ray instance started here)."""
    if ray.is_initialized():
        return
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    except (ConnectionError, ray.exceptions.AuthenticationError) as err:
        where = address or os.environ.get("RAY_ADDRESS") or "a local instance"
        raise ClusterError(
            f"could not join the Ray cluster at {where}: {str(err).splitlines()[0][:300]} (a cluster started "
            "with `ray start` wants its token here: RAY_AUTH_MODE=token, and RAY_AUTH_TOKEN or ~/.ray/auth_token "
            "holding what `ray get-auth-token` prints on its head)") from None


def lane_count(evaluator) -> int:
    """`lanes`, or the cluster's GPUs (CUDA), or its CPUs (at most 4)."""
    options = evaluator.options
    connect(options.ray_address)
    resources = ray.cluster_resources()
    if evaluator.device == "cuda":
        count = options.lanes or int(resources.get("GPU", 0))
        if count < 1:
            raise ClusterError(f"the Ray cluster at {options.ray_address or 'localhost'} has no GPU for CUDA candidates")
        return count
    return options.lanes or max(1, min(MAX_DEFAULT_CPU_LANES, int(resources.get("CPU", 1))))


def payload(evaluator) -> dict:
    """The parent's options as every machine's evaluator is made from them (an executor of its own there)."""
    options = evaluator.options.model_dump(mode="json")
    options.update(problem=str(evaluator.problem.location), size=evaluator.size, device=evaluator.device,
                   executor="local", cache_dir=str(evaluator.cache_dir), log_root=str(evaluator.log_root.absolute()))
    return options


def cluster_builds(evaluator, make_evaluator: Callable[[dict], object], lanes: bool):
    """Builds as Ray tasks (evaluator.parent.ray_builds), or None when the lanes leave the cluster no CPU."""
    from evaluator.parent.ray_builds import RayBuilds

    builds = RayBuilds(payload(evaluator), evaluator.device, lane_count(evaluator) if lanes else 0, make_evaluator)
    return builds if builds.slots > 0 else None


def ray_workers(evaluator, make_evaluator: Callable[[dict], object]) -> list[RayLane]:
    """One lane per actor (lane_count). Each actor makes its own evaluator from `evaluator`'s options with
    `make_evaluator` (a function of the parent's module, which Ray ships by reference)."""
    count, options = lane_count(evaluator), payload(evaluator)

    def factory(lane: int) -> Callable[[], object]:
        resource = {"num_gpus": 1, "num_cpus": 1} if evaluator.device == "cuda" else {"num_cpus": 1}
        return lambda: LaneActor.options(**resource).remote(make_evaluator, options, lane)

    return [RayLane(factory(lane), evaluator.ahead, evaluator.device) for lane in range(count)]


class RayLane:
    """The parent's end of one actor: jobs go to it 1 + ahead at a time, in the order taken."""

    def __init__(self, make_actor: Callable[[], object], ahead: int, device: str):
        self.make_actor, self.ahead, self.device = make_actor, ahead, device
        self.actor = make_actor()
        self.rounds: list[BaselineRound] = []

    def stream(self, take: Callable[[bool], Job | None], ending: Callable[[], bool] | None = None) -> Iterator[Judged]:
        # `ending` unused: an actor's referee outlives each `judge_many`, and its close comes with the actor's
        while True:
            job = take(True)
            if job is None:
                return
            batch = [job]
            while len(batch) <= self.ahead:
                more = take(False)
                if more is None:
                    break
                batch.append(more)
            try:
                yield from ray.get(self.actor.judge_many.remote(batch))
            except ray.exceptions.RayError as err:
                for lost in batch:
                    yield crashed(lost, f"the Ray lane failed around this candidate: {type(err).__name__}: "
                                        f"{str(err)[:1500]}", self.device)
                self._retire()
                self.actor = self.make_actor()

    def _retire(self) -> None:
        try:
            self.rounds += ray.get(self.actor.close.remote(), timeout=120)
        except Exception:
            pass
        try:
            ray.kill(self.actor)
        except Exception:
            pass

    def close(self) -> list[BaselineRound]:
        self._retire()
        return self.rounds
