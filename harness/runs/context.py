"""What every step of one run needs, resolved once by `harness.runs.pipeline.execute_run`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from evaluator.wire import identity
from evaluator.wire.records import Judge
from evaluator.wire.problem import ProblemSpec
from evaluator.wire.tiers import keyed_backend, resolve_backend
from evaluator.wire.records import Verdict
from harness.core.config import RunConfig
from harness.core.records import Hardware
from harness.core.store import Store

EvaluateFn = Callable[[Sequence[Any], Any], Iterable[Verdict]]  # (candidate files, EvalOptions) -> verdicts


@dataclass(frozen=True)
class RunContext:
    """What every step of one run needs, resolved once by `execute_run`."""

    cfg: RunConfig
    problem: ProblemSpec
    size: str
    device: str
    device_name: str             # what verdicts are keyed by (evaluator.wire.identity.device_name)
    hardware: Hardware | None
    judge: Judge                 # the rules verdicts are judged by now (evaluator.wire.identity.judge_identity)
    store: Store
    console: Console
    evaluate_fn: EvaluateFn | None = None
    # Another problem's candidates its batches may build after their own (a suite's next problem, whose replies
    # were asked ahead: harness.cli.suites.AskAhead), taken when a batch starts
    prebuild: Callable[[], list[tuple[str, bytes, str]]] | None = None

    @property
    def backend(self) -> str:
        """What the candidates are written in: the run's, the problem's, else the device's default."""
        return resolve_backend(self.device, self.cfg.backend, self.problem.backend, compile_only=self.cfg.compile_only)

    @property
    def precision(self) -> str:
        return self.cfg.precision or self.problem.precision

    def verdict_key(self, source_sha: str) -> str:
        return identity.verdict_key(source_sha, self.problem.name, self.size, self.device_name, self.judge,
                                    compile_only=self.cfg.compile_only, run_rejected=self.cfg.run_rejected,
                                    bounds=(self.cfg.shaky_spread, self.cfg.shaky_drift),
                                    eager_in_referee=not identity.eager_as_candidate(), precision=self.precision,
                                    backend=keyed_backend(self.backend, self.device))
