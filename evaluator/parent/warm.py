"""A judge kept warm between calls, for a caller that judges one candidate at a time and many of them (the
reward of a reinforcement-learning loop, a service): its lanes started once and kept, each a referee with its
reference, its calibrator and its baseline rounds (a round every `baseline_every` candidates, not one a call),
until `close`. Each candidate goes through the same gate and the same lane as in a batch (evaluator.parent.lanes):
one lane where `gpus` is not given, as the batch's scheduler makes them where it is (one per GPU, placed so that
no lane's executor builds on another lane's cores: evaluator.parent.placement), or Ray actors (`executor="ray"`,
one per GPU of the cluster). Calls from several threads are judged at once, one per lane; a lane whose referee
dies costs the candidate it was judging and starts afresh."""

from __future__ import annotations

import threading
from collections import deque

from evaluator.parent.lanes import Job, choose_gpus, crashed, lane_workers
from evaluator.parent.placement import plan as plan_placement, release as release_placement
from evaluator.parent.sandbox import CandidateFile, EvalOptions, Evaluator, evaluator_from_options
from evaluator.wire.protocol import BaselineRound
from evaluator.wire.records import Verdict


class WarmJudge:
    """One problem, size and device; `judge` a candidate (from up to `len(lanes)` threads at once); `close` once
    (the baseline rounds)."""

    def __init__(self, options: EvalOptions):
        self.evaluator = Evaluator(options)
        self.lanes: list = []
        self.busy: list[bool] = []
        self.changed = threading.Condition()
        self.count = threading.Lock()
        self.judged = 0

    def start(self) -> WarmJudge:
        """The lanes made and started (on a GPU each referee's first baseline round under way): after the caller
        has handed the evaluator its stored baselines (a referee and a Ray actor take the options they start
        with). Judging starts them where nobody did."""
        with self.changed:
            if self.lanes:
                return self
            ev, options = self.evaluator, self.evaluator.options
            if options.executor == "ray":
                from evaluator.parent.ray_lanes import ray_workers

                lanes = ray_workers(ev, evaluator_from_options)
            else:
                gpus = choose_gpus(options.gpus) if ev.device == "cuda" and options.gpus is not None else [None]
                if not gpus:
                    raise RuntimeError("no GPU is visible to judge CUDA candidates on")
                if len(gpus) > 1:
                    ev.placement = plan_placement(len(gpus))
                lanes = lane_workers(ev, gpus)
                for lane in lanes:
                    lane.start()
            self.lanes, self.busy = lanes, [False] * len(lanes)
        return self

    def next_number(self) -> int:
        with self.count:
            self.judged += 1
            return self.judged - 1

    def take(self, lane: int | None) -> int:
        """A lane free now (`lane`: that one, modulo the lanes), marked busy until `give_back`."""
        with self.changed:
            while True:
                wanted = [lane % len(self.lanes)] if lane is not None else range(len(self.lanes))
                for index in wanted:
                    if not self.busy[index]:
                        self.busy[index] = True
                        return index
                self.changed.wait()

    def give_back(self, index: int) -> None:
        with self.changed:
            self.busy[index] = False
            self.changed.notify_all()

    def judge(self, candidate: CandidateFile, lane: int | None = None) -> Verdict:
        """One candidate, on lane `lane` (a service binds each of its workers to one, so that a GPU judges one
        candidate at a time whatever the problem), else on the first lane free."""
        ev = self.evaluator
        prepared = ev._prepare(candidate, ev.options.compile_only)
        if isinstance(prepared, Verdict):  # unreadable, not a candidate, rejected, not built
            return prepared
        base, source, digest, flags, compile_only = prepared
        if compile_only:  # a CUDA candidate where no GPU runs it: built, and said so
            return ev._evaluate(candidate, True, None)
        job = Job(index=0, name=candidate.name, source=source, digest=digest)
        self.start()
        index = self.take(lane)
        try:
            waiting = deque([job])
            [judged] = list(self.lanes[index].stream(lambda block: waiting.popleft() if waiting else None))
        except Exception as err:  # the harness's own failure around this candidate: it fails alone
            judged = crashed(job, f"the evaluator failed around this candidate: {type(err).__name__}: {err}", ev.device)
        finally:
            self.give_back(index)
        return ev._settle(judged.verdict, base, digest, flags, judged.stdout, judged.stderr)

    def close(self) -> list[BaselineRound]:
        """Every lane's baseline rounds; their referees (and Ray actors) end."""
        rounds: list[BaselineRound] = []
        for lane in self.lanes:
            rounds += lane.close()
        release_placement(self.evaluator)
        self.evaluator.rounds = rounds
        return rounds
