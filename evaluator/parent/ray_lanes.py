"""Lanes as Ray actors (`--executor ray`): the same `LaneWorker` on any machine of a Ray cluster.

Each lane is one actor that asks Ray for one GPU (a CUDA problem; Ray pins the actor to it with
CUDA_VISIBLE_DEVICES, and its referee and executors inherit that) or one CPU (a CPU problem). The
actor builds an `Evaluator` from the parent's options on its own machine, so its builds go to that
machine's cache, and judges the jobs it is sent in order, with the referee's `ahead` inside each
batch of jobs (1 + ahead at a time). What comes back is the verdict and the capped streams; the
parent settles, logs and stores them as it does for a local lane. An actor that dies (its machine
lost, its process killed) costs the jobs it held (`crashed`, with Ray's reason); the lane starts a
new actor and goes on.

Every machine needs the project importable at the same place and the problem at the path the
parent names (a shared checkout or the same install). Ray is an optional extra:
`pip install -e '.[ray]'`.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import ray

from evaluator.parent.lanes import Job, Judged, LaneWorker, crashed
from evaluator.wire.protocol import BaselineRound

MAX_DEFAULT_CPU_LANES = 4


@ray.remote
class LaneActor:
    """A LaneWorker in a Ray actor."""

    def __init__(self, make_evaluator: Callable[[dict], object], options: dict, lane: int):
        self.evaluator = make_evaluator(options)
        self.worker = LaneWorker(self.evaluator, gpu=None, lane=lane)  # Ray pinned this process to its GPU
        self.gpu = ",".join(str(g) for g in ray.get_gpu_ids()) or None
        self.host = socket.gethostname()

    def judge_many(self, jobs: list[Job]) -> list[Judged]:
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
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)


def ray_workers(evaluator, make_evaluator: Callable[[dict], object]) -> list[RayLane]:
    """One lane per actor: `lanes`, or the cluster's GPUs (CUDA), or its CPUs (at most 4). Each actor makes
    its own evaluator from `evaluator`'s options with `make_evaluator` (a function of the parent's module,
    which Ray ships by reference)."""
    options = evaluator.options
    connect(options.ray_address)
    resources = ray.cluster_resources()
    if evaluator.device == "cuda":
        count = options.lanes or int(resources.get("GPU", 0))
        if count < 1:
            raise RuntimeError(f"the Ray cluster at {options.ray_address or 'localhost'} has no GPU for CUDA candidates")
    else:
        count = options.lanes or max(1, min(MAX_DEFAULT_CPU_LANES, int(resources.get("CPU", 1))))
    payload = options.model_dump(mode="json")
    payload.update(problem=str(evaluator.problem.location), size=evaluator.size, device=evaluator.device,
                   executor="local", cache_dir=str(evaluator.cache_dir), log_root=str(evaluator.log_root.absolute()))

    def factory(lane: int) -> Callable[[], object]:
        resource = {"num_gpus": 1, "num_cpus": 1} if evaluator.device == "cuda" else {"num_cpus": 1}
        return lambda: LaneActor.options(**resource).remote(make_evaluator, payload, lane)

    return [RayLane(factory(lane), evaluator.ahead, evaluator.device) for lane in range(count)]


class RayLane:
    """The parent's end of one actor: jobs go to it 1 + ahead at a time, in the order taken."""

    def __init__(self, make_actor: Callable[[], object], ahead: int, device: str):
        self.make_actor, self.ahead, self.device = make_actor, ahead, device
        self.actor = make_actor()
        self.rounds: list[BaselineRound] = []

    def stream(self, take: Callable[[bool], Job | None]) -> Iterator[Judged]:
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
