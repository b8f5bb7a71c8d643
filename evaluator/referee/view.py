"""What the referee's parts (the phases, the calibrator) see of the referee: the `RefereeView` that
evaluator.referee.referee.Referee provides, and the baseline round verdicts divide by. They read the
referee through this, never by importing it (it imports them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from evaluator.referee import clock
from evaluator.referee.forking import Zygote
from evaluator.referee.keys import Keys
from evaluator.referee.memory import MemoryPlan
from evaluator.referee.timing import Timer
from evaluator.wire.exchange import Exchange
from evaluator.wire.problem import ProblemSpec
from evaluator.wire.protocol import Construct, RefereeConfig, TensorSlot
from evaluator.wire.records import BaselineSource, Environment, TimingStats
from evaluator.wire.stage import Layout

@dataclass(frozen=True)
class Round:
    """A baseline round, as verdicts use it."""

    baselines: dict[str, TimingStats]
    failed: dict[str, str]
    source: BaselineSource
    window_cost: clock.WindowCost | None  # None: the calibrator failed (windows are then not reduced)
    calibration_error: str | None = None
    moved: dict[str, float] = field(default_factory=dict)  # baseline -> its median over the previous round's, less 1
    device_busy: str | None = None  # why the device was not idle when it was timed
    # eager's twin's figure while its compared calls are still replayed (evaluator.referee.twin): never divided by,
    # only the next candidate's run limit (evaluator.referee.session.run_limit)
    eager_unsettled: TimingStats | None = None


class CalibratorView(Protocol):
    """What the phases use of the calibrator (evaluator.referee.calibrator.Calibrator)."""

    error: str | None
    broken: bool  # failed since the last round
    link: object | None  # its executor (held through a candidate's windows)

    def window(self, input_sets: list[list], pace_ms: float = 0.0, plan=None) -> clock.Clocked | None: ...


class RefereeView(Protocol):
    """The referee's state and services its parts use (see evaluator.referee.referee.Referee)."""

    config: RefereeConfig
    problem: ProblemSpec
    size: str
    device: str
    judge_device: str  # where the float64 reference and the comparisons live (evaluator.referee.memory)
    call_cores: list[int] | None  # the CPU executors' cores (environment.cpu_call_cores); None on a GPU
    reference64_peak: int | None  # the float64 reference's peak device memory in one call (check_phase.overlapped)
    memory: MemoryPlan
    environment: Environment
    tolerances: dict
    rel_floor: float
    keys: Keys
    timer: Timer
    layout: Layout
    input_nbytes: int
    output_nbytes: int
    output_dtype: str
    output_shape: list[int]
    reference_ms: float  # one reference forward, timed at the referee's start
    handoff_plan: object | None  # handoff.Plan where ranked calls are handed off back to back (relay.plan_for)
    handed_off: bool  # whether they are, candidates' and baselines' alike
    baseline_model: torch.nn.Module  # the fp32 reference the baselines run (its buffers name a call's)
    state_nbytes: int
    state_sizes: list[int]  # bytes of each state tensor (parameters and buffers), in state_dict order
    fixed: dict[int, torch.Tensor]  # the forward's fixed (non-random) tensor inputs, by position
    reference_kernels: list[str]
    current_round: Round | None
    calibrator: CalibratorView
    eager_beside: CalibratorView | None  # eager beside a CPU candidate's windows (calibrator.EagerBeside), or None
    zygote: Zygote | None  # what its executors are forked from (evaluator.referee.forking)
    # the buffers a training call changes and whether the output reads them (evaluator.referee.replay.state_use), once
    # probed; None before
    buffer_use: tuple[set[str], bool] | None

    @property
    def exchange_bytes(self) -> int: ...
    def new_reference(self, seed: int) -> torch.nn.Module: ...
    def draw(self, distribution: str, seed: int) -> list: ...
    def exchange_tensors(self, exchange: Exchange) -> list[TensorSlot]: ...
    def construct(self, fixed: list[TensorSlot], seed: int) -> Construct: ...
    def sm_clock(self) -> int | None: ...
    def close_waiting(self) -> bool: ...
    def held_elsewhere_broken(self) -> str | None: ...
    def executor_group(self): ...
    def device_idle(self, limit_s: float) -> float | None: ...
