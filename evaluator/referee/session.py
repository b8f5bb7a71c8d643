"""What one candidate's phases share (`Session`: the referee, the executor link, the seeds, the phase
clock and the flags log), how a phase ends the judgement (`Judged`, `Stop`), and each phase's result.
See evaluator.referee.phases for the phases themselves.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ContextManager

import torch

from evaluator.referee.keys import Keys
from evaluator.referee.launch import exit_description
from evaluator.referee.process import Ended
from evaluator.referee.view import RefereeView
from evaluator.wire.exchange import ExchangeError
from evaluator.wire.protocol import Reply, TensorSlot
from evaluator.wire.records import Correctness, Flag, Phase, Status, TimingCheck, TimingStats


# A run limit scaled to the reference (RefereeConfig.run_timeout_scaled): never under RUN_FLOOR_S (an honest
# candidate's init, check and time took 3.5 s at `small` on a loaded 2-core CPU, but one that compiles its kernels
# at its first call, with torch.compile or Triton, takes tens of seconds there), and long enough for
# SLOWER_ALLOWED times the reference's time over CALLS_ALLOWED calls (checks, warm-up, the fewest timed) beyond
# the timing budget, so a slow candidate gets its slow verdict, not a timeout.
RUN_FLOOR_S = 60.0
SLOWER_ALLOWED = 50
CALLS_ALLOWED = 60


def scaled_run_limit(cap_s: float, reference_ms: float | None, budget_s: float) -> float:
    """The run phases' limit of one candidate whose reference takes `reference_ms` a call; `cap_s` when that is
    unknown (a failed baseline), and never over it."""
    if reference_ms is None or reference_ms <= 0:
        return cap_s
    scaled = 10 + 4 * budget_s + CALLS_ALLOWED * SLOWER_ALLOWED * reference_ms / 1000
    return round(min(cap_s, max(RUN_FLOOR_S, scaled)), 1)


def run_limit(config, current) -> float:
    """The run limit of the next candidate under `config` (a RefereeConfig): the configured one, or scaled to the
    reference's time in the `current` round (eager's median; else the slowest baseline's)."""
    if not config.run_timeout_scaled or current is None:
        return config.run_timeout_s
    eager = current.baselines.get("eager") or current.eager_unsettled
    reference_ms = eager.median_ms if eager is not None else max((s.median_ms for s in current.baselines.values()),
                                                                   default=None)
    return scaled_run_limit(config.run_timeout_s, reference_ms, config.timing_budget_s)


# The referee's own work between a candidate's calls moves its run limit on by at most the limit again, or this
# many times the limit where the float64 judge runs in host memory (19_ReLU's size on an H100: 470 s of the
# referee's against a 60 s limit): a candidate that slows the referee cannot hold its lane for ever. At most
# OWN_CREDIT_MAX_S, within the parent's allowance for a referee's reply (referee_client.REFEREE_ALLOWANCE_S).
OWN_CREDIT_ON_HOST = 12.0
OWN_CREDIT_MAX_S = 600.0


def own_credit(run_limit_s: float, on_host: bool) -> float:
    """How much of the referee's own time may move a candidate's run limit on (Session.own_credit_s)."""
    return min(OWN_CREDIT_MAX_S, run_limit_s * (OWN_CREDIT_ON_HOST if on_host else 1.0))


def release_cached(device: str) -> None:
    """Return the memory PyTorch's caching allocator keeps after a float64 check or a baseline round to the device:
    cached in the referee, it is out of an executor's reach (a KernelBench-size problem ran its executor out of it).
    And the page-locked host memory its caching host allocator keeps (the float64 judge's inputs where it lives in
    host memory, each block rounded up to a power of two: 16 GiB for 19_ReLU's 12.9 GB), which neither the host nor
    another lane could use between candidates."""
    if device == "cuda":
        torch.cuda.empty_cache()
        try:  # best effort: a private function of torch's (run on no GPU yet), never a judgement's failure
            torch._C._host_emptyCache()
        except Exception:  # noqa: BLE001
            pass


class Judged(Exception):
    """Ends the judgement with a status and a reason."""

    def __init__(self, status: Status, phase: Phase | None, error: str | None):
        super().__init__(error)
        self.status, self.phase, self.error = status, phase, error


@dataclass(frozen=True)
class Stop:
    """How a phase that kept its result ends the judgement."""

    status: Status
    phase: Phase | None
    error: str | None


@dataclass
class Session:
    """What one candidate's phases share: see the module's docstring."""

    referee: RefereeView | None      # None: a build only (the parent's parallel builds)
    link: object  # evaluator.referee.process.ExecutorProcess, or anything with its request/reply/constructing
    name: str
    digest: str
    problem: str
    size: str
    device: str
    compile_timeout_s: float
    run_timeout_s: float
    memory_limit_gb: float | None = None
    source: str = ""  # the candidate's text (read by the referee, never run here): its @triton.jit names
    run_limit_scaled: bool = False  # run_timeout_s was scaled to the reference (scaled_run_limit)
    own_credit_s: float = 0.0  # the most of the referee's own time between calls that moves the run limit on
    defer_replay: bool = False  # compared calls may be replayed after its executor's last reply (replay.Later)
    eager_beside: bool = True  # eager timed beside its windows where the referee has it (time_phase.Series.figures)
    keys: Keys = field(default_factory=Keys)  # its own: every seed it draws (evaluator.referee.keys)
    flags: list[Flag] = field(default_factory=list)
    phase: Phase = Phase.compile
    deadline: float = 0.0
    phase_seconds: dict[str, float] = field(default_factory=dict)
    command_seconds: dict[str, float] = field(default_factory=dict)  # waited on the executor, per command kind
    checked_ms: list[dict] = field(default_factory=list)  # each checked call's steps (KH_REFEREE_PROFILE only)
    # the device to this candidate alone while it is timed and profiled (the referee stops the others)
    exclusive: Callable[..., ContextManager] = lambda *given: contextlib.nullcontext()  # given (link, excuse)
    _entered: float = 0.0
    _own_since: float = 0.0  # when the referee's own work began (its last reply): time the run limit does not count

    def enter(self, phase: Phase) -> None:
        """A new phase: the compile limit covers the import, the run limit init, check and time together."""
        self.leave()
        self.phase, self._entered = phase, time.monotonic()
        if phase == Phase.compile:
            self.deadline = time.monotonic() + self.compile_timeout_s
        elif phase == Phase.init:
            self.deadline = time.monotonic() + self.run_timeout_s
        self._own_since = time.monotonic() if phase != Phase.compile else 0.0

    def leave(self) -> None:
        if self._entered:
            self.phase_seconds[self.phase.value] = round(time.monotonic() - self._entered, 3)
            self._entered = 0.0

    def seed(self) -> int:
        """The next seed of its inputs (a keyed hash: no seed it was handed tells another)."""
        return self.keys.next_seed("inputs")

    def add(self, flags) -> None:
        self.flags.extend(flags)

    def request(self, command, during=None, meanwhile=None) -> Reply:
        """One command to the executor; its flags logged. An executor that is gone, too slow or
        breaks the protocol is judged here. `meanwhile()`: the referee's own work once the command is sent, before
        its reply is read; its seconds move the deadline on as the referee's own work between calls does."""
        if meanwhile is not None:
            assert during is None, "one of `during` and `meanwhile`"

            def during(deadline: float, answered) -> float:
                begun = time.monotonic()
                meanwhile()
                return self._credit(time.monotonic() - begun)  # this reply's deadline, and every later one's
        return self._answered(type(command).__name__, lambda: self.link.request(command, self.deadline, during))

    def answer(self, command_id: int, kind: str) -> Reply:
        """The reply to a command sent earlier (`kind`, its class's name), as `request` reads one."""
        return self._answered(kind, lambda: self.link.reply(command_id, self.deadline))

    def _answered(self, kind: str, read: Callable[[], Reply]) -> Reply:
        started = time.monotonic()
        if self._own_since:
            # the run limit is the executor's: the referee's own work since its last reply (drawing inputs, the
            # float64 reference, comparing, the calibrator's windows) moves the deadline on (at KernelBench's sizes,
            # judged in host memory, a checked call's comparisons take seconds), up to own_credit_s in all
            self._credit(started - self._own_since)
        try:
            reply = read()
        except Ended as ended:
            raise self.ended(ended) from None
        finally:
            self.command_seconds[kind] = self.command_seconds.get(kind, 0.0) + time.monotonic() - started
            self._own_since = time.monotonic() if self._own_since else 0.0
        self.add(reply.flags)
        return reply

    def _credit(self, seconds: float) -> float:
        """The referee's own `seconds` moved onto the deadline, within what is left of own_credit_s; how many were."""
        credit = min(seconds, self.own_credit_s)
        self.own_credit_s -= credit
        self.deadline += credit
        return credit

    def excuse(self, seconds: float) -> None:
        """Seconds its lane waited for a turn on a GPU other lanes share (evaluator.referee.device_share): neither the
        candidate's nor the referee's own work, so its run limit moves on by all of them (and none of its credit for
        the referee's own time is spent on them)."""
        self.deadline += seconds
        if self._own_since:
            self._own_since += seconds

    def charge(self, seconds: float) -> None:
        """Seconds the referee waited between calls on the candidate's own work (device work it left queued:
        time_phase.idle) count against its run limit, as its calls do: else a candidate leaving work behind each
        call would hold its lane up to two idle waits a window, unbounded by any limit. A timeout once it is past."""
        if not self._own_since:  # not in the run phases (their limit is the one charged)
            return
        self.deadline -= seconds
        now = time.monotonic()
        # the deadline as the next request will see it: the referee's own time so far credited, within its credit
        if now > self.deadline + min(now - self._own_since, self.own_credit_s):
            raise self.ended(Ended("timeout"))

    def ended(self, ended: Ended) -> Judged:
        phase = self.phase
        if ended.reason == "timeout":
            limit = self.compile_timeout_s if phase == Phase.compile else self.run_timeout_s
            scaled = " (scaled to the reference's time: a call at most %d times the reference's)" % SLOWER_ALLOWED \
                if self.run_limit_scaled and phase != Phase.compile else ""
            return Judged(Status.timeout, phase, f"phase `{phase.value}` ran past its {limit:g} s limit{scaled}; "
                                                 "the process group was killed")
        if ended.reason == "memory":
            return Judged(Status.compile_error, Phase.compile, (
                f"compile step exceeded {self.memory_limit_gb:g} GiB of resident memory (the executor's processes "
                f"held {ended.detail}); the process group was killed"))
        if ended.reason == "malformed":
            return Judged(Status.crashed, phase, ended.detail)
        how = exit_description(self.link.wait_exit()) if hasattr(self.link, "wait_exit") else "ended"
        return Judged(Status.crashed, phase, f"the executor {how} during phase `{phase.value}` before it answered")

    def shipment(self, reply: Reply) -> tuple[dict[str, torch.Tensor], list[str]]:
        """The tensors a reply shipped (through the exchange or the stage), copied to where the referee judges (its
        judge_device), and what could not be read."""
        tensors, problems = {}, []
        device = self.referee.judge_device if self.referee is not None else "cpu"
        read = {False: 0, True: 0}  # bytes read from the exchange and from the stage
        for slot in reply.tensors:
            # read once each, and no more than each memory holds: every read is a copy of the referee's
            # (in host memory, where the float64 judge lives there), so a reply listing a slot many times cannot
            # make the referee copy the exchange over and over
            memory = self.link.stage if slot.in_stage else self.link.exchange
            read[slot.in_stage] += slot.nbytes
            if slot.name in tensors or memory is None or read[slot.in_stage] > memory.size:
                problems.append(f"the executor shipped {slot.name} again, or more than its exchange or stage holds")
                break
            if slot.in_stage and not self.staged_where_asked(slot):
                problems.append(f"the executor staged {slot.name} where the referee did not ask for it")
                continue
            try:
                tensors[slot.name] = memory.read(slot, device)
            except ExchangeError as err:
                problems.append(f"the executor shipped an unreadable tensor ({err})")
        return tensors, problems

    def staged_where_asked(self, slot: TensorSlot) -> bool:
        """Whether a slot of the stage is where a checked or profiled call leaves it: the output at the region's start
        (`Call.place`) within a call's room, an input in its slot of the first input set. Anything else is never read:
        the stage is gigabytes, and each read a copy of the referee's that its memory plan does not count."""
        layout = self.referee.layout if self.referee is not None else None
        if layout is None:
            return False
        if slot.name == "output":
            return slot.offset == layout.region and slot.nbytes <= layout.span
        given = next((s for s in layout.inputs if s.name == slot.name), None)
        return given is not None and (slot.offset, slot.nbytes, slot.dtype, slot.shape) == (
            given.offset, given.nbytes, given.dtype, given.shape)


# ------------------------------------------------------------------------------------------ results

@dataclass(frozen=True)
class Imported:
    """The candidate imported (its extensions built) in the executor."""


@dataclass(frozen=True)
class Built:
    """ModelNew built in the executor with the reference's weights; the reference (fp32) and its
    float64 twin, in the referee, at the state the candidate was given."""

    reference: torch.nn.Module
    reference64: torch.nn.Module


@dataclass(frozen=True)
class Checked:
    correctness: Correctness
    reference64: torch.nn.Module  # after every checked call: the replay of the timed calls starts here
    stop: Stop | None = None


@dataclass(frozen=True)
class Timed:
    timing: TimingStats       # by the referee's clock: what ranks
    check: TimingCheck        # the executor's reports against it
    floor_ms: float | None
    sm_clock_mhz: int | None
    later: object = None      # compare.ModeAccumulator: every call compared after the checks, in every tier
    resolved: bool = True     # whether the figure per call stands as a number (evaluator.referee.floor.check_floor)
    reference64: object = None  # torch.nn.Module: the float64 reference after the timed calls and the check after them
    rest: object = None       # replay.Later: compared calls replayed after the executor's last reply, before the verdict
    paired: TimingStats | None = None  # eager timed beside each window (time_phase.Series.figures), or None
    paired_spread: float | None = None  # the spread of the candidate's per-call time over eager's beside it


@dataclass(frozen=True)
class Profiled:
    kernels: tuple[str, ...] = ()
    kernel_times_us: tuple[float, ...] = ()  # aligned with `kernels`; empty when unknown (the CPU)
    kernel_count: int | None = None
    custom_kernels: tuple[str, ...] = ()
    autotuned: tuple[str, ...] = ()  # each @triton.autotune kernel's chosen configuration
    check: object = None      # compare.ModeAccumulator of the profiled call's output, in every tier


def candidate_text(path: str) -> str:
    """A candidate's source as text, to read (never run) in the referee; empty where it cannot be read."""
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""
