"""An executor in the test's own process: the referee's phases driven against a ModelNew class.

No containment, no pipes, no import of a candidate file: `LocalLink` hands each command straight to
an `evaluator.executor.serve.Executor` (the same code the contained process runs) over a real exchange, so
tests of the judging itself (evaluator.referee.phases) run in a fraction of a second.
"""

from __future__ import annotations


import threading
from types import SimpleNamespace

import torch

from evaluator.referee import phases
from evaluator.referee.check_phase import check_phase
from evaluator.referee.keys import Keys
from evaluator.referee.session import Imported, Session
from evaluator.wire.exchange import Exchange
from evaluator.executor.serve import Executor
from evaluator.wire.protocol import ExecutorRequest
from evaluator.referee.calibrator import CALIBRATOR_SOURCE, Calibrator, EagerBeside
from evaluator.referee.referee import Referee
from evaluator.wire.protocol import RefereeConfig
from evaluator.wire.stage import Stage


class Honest(torch.nn.Module):
    """The reference's own math (nn.Linear, scale, nn.BatchNorm1d) as a ModelNew."""

    def __init__(self, in_features, out_features, scale_shape, eps=1e-5, momentum=0.1):
        super().__init__()
        self.gemm = torch.nn.Linear(in_features, out_features)
        self.scale = torch.nn.Parameter(torch.randn(scale_shape))
        self.bn = torch.nn.BatchNorm1d(out_features, eps=eps, momentum=momentum)

    def forward(self, x):
        return self.bn(self.gemm(x) * self.scale)


class LocalLink:
    def __init__(self, model_class, referee: Referee, exchange: Exchange | None = None):
        self.exchange = exchange or Exchange.create(referee.exchange_bytes)  # `exchange`: one an earlier link used
        self.stage = Stage.create(referee.layout.size, referee.device)  # one mapping, shared by both sides
        request = ExecutorRequest(candidate_path="in-process.py", device=referee.device, watch=[])
        self.executor = Executor(request, self.exchange, self.stage)
        self.executor.module = SimpleNamespace(ModelNew=model_class)
        self.ids = 0
        self.keys = None  # none drawn at a start ahead: the session's own
        self.constructing = None  # no Construct sent ahead (evaluator.referee.ahead)
        self.sent = {}

    def reply(self, command_id, deadline, poll_memory=False):
        from evaluator.wire.protocol import Reply

        if command_id in self.sent:  # a command sent earlier (`send`)
            return self.sent.pop(command_id)
        return Reply(id=0)  # "imported": the class is handed over directly

    def send(self, command):
        """Handled at once, its reply kept for `reply` (as a contained executor's waits in its channel): the id."""
        self.ids += 1
        self.sent[self.ids] = self.executor.handle(command.model_copy(update={"id": self.ids}))
        return self.ids

    def request(self, command, deadline, during=None):
        self.ids += 1
        command = command.model_copy(update={"id": self.ids})
        if during is None:
            return self.executor.handle(command)
        # a handed-off window: the executor's side in a thread of its own, the referee's relay here
        replies = []
        worker = threading.Thread(target=lambda: replies.append(self.executor.handle(command)), daemon=True)
        worker.start()
        during(deadline, lambda: not worker.is_alive())
        worker.join()
        return replies[0]

    def own_folders(self):
        return []

    def start(self):
        pass

    def will_close(self):
        pass

    def close(self, wait_s=None):
        pass


def calibrator_class(judge: Referee):
    """The calibrator's ModelNew, made from the same source the referee's contained calibrator imports."""
    namespace: dict = {}
    exec(compile(CALIBRATOR_SOURCE % {"path": str(judge.problem.reference_path),
                                      "sizes": judge.problem.size_values(judge.size)}, "calibrator", "exec"), namespace)
    return namespace["ModelNew"]


def referee(problem: str = "gemm_scale_bn", size: str = "small", **overrides) -> Referee:
    """A referee whose calibrator runs in this process too (the contained one is tested end to end)."""
    settings = dict(problem=problem, size=size, device="cpu", baselines=[], seed=12, timing_budget_s=0.05,
                    compile_timeout_s=60, run_timeout_s=60, output_cap_bytes=1 << 20, compile_memory_limit_gb=None,
                    cache_dir="/nonexistent", eager_as_candidate=False)  # the twin is an executor of its own
    settings.update(overrides)
    judge = Referee(RefereeConfig(**settings))
    link = LocalLink(calibrator_class(judge), judge)
    judge.calibrator = Calibrator(judge, link=link)
    judge.calibrator.ready = False  # constructed at its first measurement, as the contained one is
    if judge.eager_beside is not None:  # with eager's twin on the CPU: eager beside each window, in this process too
        judge.eager_beside = EagerBeside(judge, link=LocalLink(judge.module.Model, judge))
        judge.eager_beside.ready = False
    return judge


def session_for(model_class, judge: Referee | None = None, exchange: Exchange | None = None) -> Session:
    judge = judge or referee()
    return Session(referee=judge, link=LocalLink(model_class, judge, exchange), name="in-process", digest="",
                          problem=judge.problem.name, size=judge.size, device=judge.device, compile_timeout_s=60,
                          run_timeout_s=60, keys=Keys(b"\x0c" * 32))


def checked(model_class, judge: Referee | None = None, exchange: Exchange | None = None):
    """(session, built, checked): ModelNew built with the reference's weights and put through the checks."""
    session = session_for(model_class, judge, exchange)
    built = phases.init_phase(session, Imported())
    return session, built, check_phase(session, built)
