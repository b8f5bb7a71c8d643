"""Lanes: one referee per device, fed candidates as their builds finish.

The parent (evaluator.parent.sandbox) reads and gates every candidate, then hands those that run to a
`Scheduler`: builds run in a pool (`jobs` at once) while earlier candidates are judged, with no
barrier between them, and each build that succeeds becomes ready for the lanes. A lane is one
device: a GPU (its referee and every executor it starts see only that GPU, through
CUDA_VISIBLE_DEVICES) or the CPU. A lane takes ready candidates in their order and keeps `ahead`
of them queued at its referee behind the one being judged, so their executors start, import torch
and load their extensions while the device is busy (evaluator.referee stops them while anything is
timed). Only one candidate is ever checked or timed on a device at a time; a candidate that crashes
or hangs its referee costs its lane that candidate, and the lane goes on with a fresh referee.

With `executor="ray"` each lane is a Ray actor (one GPU each, or one CPU for a CPU problem), on
any machine of the cluster, running the same `LaneWorker` there; its builds happen there (each
machine has its own build cache) and candidates go to it a few at a time.
"""

from __future__ import annotations

import heapq
import os
import threading
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from evaluator.parent.artifacts import place
from evaluator.parent.placement import plan as plan_placement, release as release_placement
from evaluator.parent.referee_client import RefereeClient
from evaluator.referee.live import stop_now
from evaluator.wire.protocol import BaselineRound, JudgeRequest
from evaluator.wire.records import Status, Verdict


READY_POLL_S = 0.2  # how long a lane whose referee is not yet idle waits for that before it looks for a job again


class ClusterError(RuntimeError):
    """`--executor ray` could not begin: no cluster to join, a token refused, no GPU for CUDA lanes."""


# How a lane ends a candidate its referee failed around (the verdict says `crashed` with this reason).
REFEREE_FAILED = "the referee failed around this candidate: "


@dataclass(order=True)
class Job:
    """One candidate that runs: what the parent read and the static checks let through."""

    index: int
    name: str = field(compare=False)
    source: bytes = field(compare=False, repr=False)
    digest: str = field(compare=False)
    built_on: str | None = field(default=None, compare=False)  # set by its build in the pool
    artifact: object = field(default=None, compare=False, repr=False)  # Ray: its build folder, packed (a reference)


@dataclass
class Judged:
    """A lane's answer for one job: the referee's verdict and the candidate's capped streams."""

    job: Job
    verdict: Verdict
    stdout: bytes = b""
    stderr: bytes = b""


def resolve_device(device: str | None) -> str:
    """The device asked for, else cuda where one is visible, else cpu."""
    if device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES entries (what a child is pinned with)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [entry.strip() for entry in env.split(",") if entry.strip() and entry.strip() != "-1"]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def choose_gpus(spec: str | None) -> list[str]:
    """`--gpus`: None or `all`, every visible GPU; else a comma list of positions among them (`0,2`), one lane each: a
    position named twice gives its GPU two lanes, whose referees take turns on it (evaluator.referee.device_share)."""
    visible = visible_gpus()
    if spec is None or spec.strip() in ("", "all"):
        return visible
    chosen = []
    for part in spec.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) >= len(visible):
            raise ValueError(f"--gpus {spec!r}: {part!r} is not one of the {len(visible)} visible GPU(s) (0..{len(visible) - 1})")
        chosen.append(visible[int(part)])
    return chosen


def lane_workers(evaluator, gpus: list[str | None]) -> list[LaneWorker]:
    """A LaneWorker per entry of `gpus` (None: the CPU), lane by lane; a GPU named twice gets two lanes, which take
    turns on it (evaluator.referee.device_share)."""
    return [LaneWorker(evaluator, gpu, lane, gpus.count(gpu) if gpu is not None else 1) for lane, gpu in enumerate(gpus)]


class EarlyLanes:
    """A local batch's GPU lanes, started as soon as one candidate passed the gate (`start`: the batch's placement
    planned, their referees started), so that they import and prepare their first round while the parent gates the
    rest (a gate is tens of milliseconds a candidate, seconds in a batch of thousands). They time nothing until the
    gate is over (`gated`): a source can make the gate's work last (evaluator.checks.bounded), and it is not kept off
    the lanes' cores. On the CPU or under Ray, whose lanes start with the scheduler, none. Used as a context: where the
    batch fails before its scheduler takes them, they are stopped and the placement closed."""

    def __init__(self, evaluator):
        self.evaluator = evaluator
        self.workers: list[LaneWorker] = []
        self.tried = False

    def start(self, compile_only: bool = False) -> None:
        """Once, for the first candidate that will run (not `compile_only`)."""
        evaluator = self.evaluator
        if self.tried or compile_only:
            return
        self.tried = True
        local_gpus = evaluator.options.executor == "local" and evaluator.device == "cuda"
        if not (gpus := choose_gpus(evaluator.options.gpus) if local_gpus else []):
            return
        evaluator.placement = plan_placement(len(gpus))
        self.workers = lane_workers(evaluator, gpus)
        for worker in self.workers:
            worker.referee.gate_pending = True
            worker.start()

    def gated(self) -> None:
        """The parent's gate is over: the referees may time."""
        for worker in self.workers:
            worker.referee.gated()

    def __enter__(self) -> EarlyLanes:
        return self

    def __exit__(self, kind, error, trace) -> None:
        if kind is None:
            return
        stop_now([worker.referee for worker in self.workers])  # as an interrupt stops them: 5 s for them all
        release_placement(self.evaluator)


def crashed(job: Job, error: str, device: str) -> Judged:
    return Judged(job, Verdict(candidate=job.name, source_sha256=job.digest, problem="", size="", device=device,
                               status=Status.crashed, error=error))


class LaneWorker:
    """One device's judge: a referee (evaluator.parent.referee_client.RefereeClient) fed jobs in order, `ahead`
    of them sent before the reply to the one being judged. Runs in the parent (a thread per lane)
    or in a Ray actor."""

    def __init__(self, evaluator, gpu: str | None, lane: int, device_lanes: int = 1):
        self.evaluator = evaluator
        self.referee = RefereeClient(evaluator, gpu=gpu, lane=lane, early=True, device_lanes=device_lanes)
        self.lane = lane
        self.judged = 0  # verdicts collected: after the first, an idle referee times nothing (its round at start over)
        # the referee process whose reply to `ready` is still to be read (`start`), and the one that gave it: idle
        # since, until a candidate is sent, so that the lane's cores may go to the builds before its first verdict too
        self.ready_owed = self.idle_referee = None
        self.ahead = evaluator.ahead
        self.place = place()  # what its verdicts say they were judged on

    def start(self) -> None:
        """The referee up and its first baseline round under way before any candidate is ready (on a
        CUDA lane: they take tens of seconds, which the first builds then hide)."""
        if self.evaluator.device == "cuda" and self.referee.proc is None:
            try:
                self.referee.start()
            except Exception:
                traceback.print_exc()  # started again with the first candidate
                return
            self._ask_ready()

    def _ask_ready(self) -> None:
        """Where the lane's cores may be lent (evaluator.parent.placement): a `ready` request, the referee's first
        (written here, before any candidate), which it answers once its start and its round at start are over; from then
        on it times nothing until a candidate is sent, so the lane lends its cores while it waits for its first as for
        any later one (`_take`). Its reply is read on the lane's thread, as every other is (`_read_ready`)."""
        placement, proc = self.evaluator.placement, self.referee.proc
        if placement is not None and placement.can_lend() and proc is not None \
                and self.referee.tell(JudgeRequest(kind="ready")):
            self.ready_owed = proc

    def _read_ready(self, wait_s: float | None, raising: bool = False) -> None:
        """The `ready` reply, where the referee running now owes it: read if it comes within `wait_s` (None: wait for
        it, as a verdict is waited for; it comes before any). A referee since replaced never answers: nothing owed.
        Where the referee died or overran first, `raising` raises why (for the candidate sent to it), else it is
        logged."""
        proc = self.ready_owed
        if proc is None:
            return
        if proc is not self.referee.proc:
            self.ready_owed = None
            return
        if wait_s is not None and not self.referee.reply_waiting(wait_s):
            return
        self.ready_owed = None
        try:
            self.referee.receive(self.referee.reply_timeout_s)
            self.idle_referee = proc
        except Exception:
            if raising:
                raise
            traceback.print_exc()  # the referee gone before any candidate was sent to it: the next one starts afresh

    def stream(self, take: Callable[[bool], Job | None], ending: Callable[[], bool] | None = None) -> Iterator[Judged]:
        """Judged jobs in the order taken. `take(block)` gives the next job, None when there are no
        more; with block=False it may also give None when none is ready yet. `ending()`, where given, says that
        every job has been taken (the batch's last ones are those sent): the referee's close is then queued behind
        them, so that its last round follows the last candidate at once, its twin started beside that candidate."""
        pending: deque[tuple[Job, object]] = deque()
        done = False
        while True:
            while not done and len(pending) <= self.ahead:
                job = self._take(take, pending, ending)  # blocks only when nothing is pending
                if job is None:
                    done = not pending  # a blocking take that gives nothing: there is no more
                    break
                pending.append((job, None))
                self._send(pending, len(pending) - 1)
            if pending and ending is not None and ending():
                self.referee.close_after_queued()
            if not pending:
                return
            job, path = pending.popleft()
            judged = self._collect(job, path, pending)
            self.judged += 1
            judged.verdict.judged_on = self.place
            yield judged

    def _take(self, take: Callable[[bool], Job | None], pending: deque,
              ending: Callable[[], bool] | None = None) -> Job | None:
        """The next job; where the lane would wait for one with nothing queued at its referee, which has said it is
        idle (its first verdict, or its `ready` reply), its cores are lent to the builds meanwhile
        (evaluator.parent.placement) and taken back before the job is sent (not where every job has been taken:
        nothing comes to wait for)."""
        placement = self.evaluator.placement
        ended = ending if ending is not None else (lambda: False)
        if pending or placement is None or not placement.can_lend() or ended():
            return take(not pending)
        job = take(False)
        while job is None and not self.judged and self.ready_owed is not None and not ended():
            self._read_ready(READY_POLL_S)  # its start or round at start under way: its cores are its own
            job = take(False)
        if job is not None:
            return job
        current = self.referee.proc
        asked = current is not None and self.ready_owed is current  # maybe in its round at start
        idle = current is not None and self.idle_referee is current  # it answered `ready`
        if asked or not (self.judged or idle):
            return take(True)  # a referee that has not said it is idle (another one since, or none asked)
        try:
            placement.lend(self.lane)
            return take(True)
        finally:
            placement.take_back(self.lane)

    def _send(self, pending: deque, position: int) -> None:
        job, _ = pending[position]
        try:
            pending[position] = (job, self.referee.submit(job.name, job.source, job.digest))
        except Exception as err:  # the referee cannot be started or written to: the job fails alone
            pending[position] = (job, err)

    def _collect(self, job: Job, sent, pending: deque) -> Judged:
        if isinstance(sent, Exception):
            return crashed(job, f"{REFEREE_FAILED}{type(sent).__name__}: {sent}", self.evaluator.device)
        try:
            self._read_ready(None, raising=True)  # a referee that died in its start: why, for this candidate
            verdict, stdout, stderr = self.referee.collect(sent)
            return Judged(job, verdict, stdout, stderr)
        except Exception as err:
            if self.referee.proc is None:  # it died: those queued behind go to a fresh one
                for position in range(len(pending)):
                    self._send(pending, position)
            detail = str(err) if isinstance(err, RuntimeError) else f"{type(err).__name__}: {err}\n" + traceback.format_exc()[-2000:]
            return crashed(job, REFEREE_FAILED + detail, self.evaluator.device)

    def judge_many(self, jobs: list[Job]) -> list[Judged]:
        """Every job of a list, in order (a Ray actor's unit of work)."""
        queue = deque(jobs)
        return list(self.stream(lambda block: queue.popleft() if queue else None))

    def close(self) -> list[BaselineRound]:
        self._read_ready(None)
        return self.referee.close()


class ReadyQueue:
    """Jobs whose builds are done, lowest index first; `finish()` once no more will come."""

    def __init__(self):
        self.heap: list[Job] = []
        self.closed = False
        self.cond = threading.Condition()

    def put(self, job: Job) -> None:
        with self.cond:
            heapq.heappush(self.heap, job)
            self.cond.notify()

    def finish(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def exhausted(self) -> bool:
        """Every job taken: finished, and none left."""
        with self.cond:
            return self.closed and not self.heap

    def take(self, block: bool) -> Job | None:
        with self.cond:
            while block and not self.heap and not self.closed:
                self.cond.wait()
            return heapq.heappop(self.heap) if self.heap else None

    __call__ = take


@dataclass
class LaneFailure:
    """A lane that broke down (not a candidate's doing): the scheduler stops waiting for its jobs."""

    error: Exception


class Scheduler:
    """Builds in a pool and lanes that judge (see the module's docstring). `run` yields each job's
    `Judged` (a lane's, or a build's that is the last word) as it comes, in no particular order."""

    def __init__(self, evaluator, build: Callable[[Job], Judged | None], builds: Callable[[Job], bool],
                 workers: Callable[[], list] | None = None, build_slots: int | None = None):
        self.evaluator = evaluator
        self.build_slots = build_slots or evaluator.jobs  # builds at once (Ray: what the cluster's CPUs allow)
        # the lanes' workers: one LaneWorker per device here, unless the caller makes them (Ray actors)
        self.make_workers = workers or self.local_workers
        self.build = build    # a build that is the job's last word, or None: the job goes on to a lane
        self.builds = builds  # whether a job is built in the pool (else its executor builds it as it imports)
        self.rounds: list[BaselineRound] = []

    def lanes(self) -> list[tuple[str | None, int]]:
        ev = self.evaluator
        if ev.device != "cuda":
            return [(None, 0)]
        gpus = choose_gpus(ev.options.gpus)
        if not gpus:
            raise RuntimeError("no GPU is visible to judge CUDA candidates on")
        return [(gpu, lane) for lane, gpu in enumerate(gpus)]

    def run(self, jobs: list[Job], lanes: bool = True) -> Iterator[Judged]:
        """`lanes=False`: every job is only built (no referee, no GPU asked for)."""
        import queue as queues

        ready = ReadyQueue()
        out: queues.Queue = queues.Queue()
        threads = [threading.Thread(target=self._builds, args=(jobs, ready, out), daemon=True)]
        workers = self.make_workers() if lanes else []
        for worker in workers:
            threads.append(threading.Thread(target=self._lane, args=(worker, ready, out), daemon=True))
        for thread in threads:
            thread.start()
        left = {job.index: job for job in jobs}
        failures: list[Exception] = []
        while left:
            try:
                item = out.get(timeout=1.0)
            except queues.Empty:
                if any(t.is_alive() for t in threads):
                    continue
                # every lane has ended and the jobs left were never judged (a lane broke down)
                reason = "; ".join(f"{type(e).__name__}: {e}" for e in failures) or "no lane was left to judge it"
                for job in list(left.values()):
                    left.pop(job.index)
                    yield crashed(job, f"the evaluator's lanes failed before judging it: {reason}", self.evaluator.device)
                break
            if isinstance(item, LaneFailure):
                failures.append(item.error)
                continue
            if left.pop(item.job.index, None) is not None:
                yield item
        for thread in threads:
            thread.join(timeout=60)

    def local_workers(self) -> list:
        return lane_workers(self.evaluator, [gpu for gpu, _ in self.lanes()])

    def _builds(self, jobs: list[Job], ready: ReadyQueue, out) -> None:
        """Each job to the lanes as soon as its build succeeds; a failed build is the job's verdict."""
        from concurrent.futures import ThreadPoolExecutor

        def build_one(job: Job) -> None:
            try:
                judged = self.build(job)
            except Exception as err:  # the harness's own failure: the job fails alone
                judged = crashed(job, f"the build failed around this candidate: {type(err).__name__}: {err}",
                                 self.evaluator.device)
            if judged is None:
                ready.put(job)
            else:
                out.put(judged)

        try:
            pooled = []
            for job in jobs:
                if self.builds(job):
                    pooled.append(job)
                else:
                    ready.put(job)
            if pooled:
                with ThreadPoolExecutor(self.build_slots) as pool:
                    list(pool.map(build_one, pooled))
        finally:
            ready.finish()

    def _lane(self, worker, ready: ReadyQueue, out) -> None:
        try:
            if hasattr(worker, "start"):
                worker.start()
            for judged in worker.stream(ready, ending=ready.exhausted):
                out.put(judged)
        except Exception as err:  # the lane itself broke: what it took is lost, so say so per job
            traceback.print_exc()
            out.put(LaneFailure(err))
        finally:
            try:
                self.rounds += worker.close()
            except Exception:
                traceback.print_exc()
