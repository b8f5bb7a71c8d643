"""One candidate's judgement, phase by phase, in the referee's process.

    imported = import_phase(session)            the executor built and imported the candidate
    built    = init_phase(session, imported)    ModelNew built, the reference's weights loaded
    checked  = check_phase(session, built)      checked calls compared with the float64 reference
    timed    = time_phase(session, checked)     timed calls, their outputs, the buffers after them
    profiled = profile_phase(session, timed)    which kernels one forward launches (CUDA: with their times)
    verdict  = compose(session, results, outcome)

Each phase takes the previous phase's result (frozen) and returns its own, or raises `Judged`
(status, phase, error) when the candidate is judged there; a result may also end the judgement
with `stop` (the check phase does, keeping its correctness record in the verdict). The verdict is
composed in one place, `compose`, from whatever results exist. `Session` holds what is neither:
the referee (reference, tolerances, baselines: evaluator.referee), the executor link, the seeds,
the phase clock and the flags log.

Everything the executor sends is checked here: its tensors are read through the exchange's bounds
checks, its outputs and buffers compared with the referee's own float64 reference on inputs the
referee drew (or drew again from the seeds it handed out), and its per-call times checked against
the referee's clock around the whole series (`TimingCheck`). Nothing the candidate can reach
decides a tolerance, a pass or a speedup.
"""

from __future__ import annotations

import contextlib
import copy
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ContextManager

import torch

from evaluator import clock
from evaluator import correctness as cmp
from evaluator import inputs as draws
from evaluator.exchange import ExchangeError
from evaluator.kernels import kernel_base_name, own_kernels
from evaluator.process import Ended, exit_description
from evaluator.protocol import Call, Finish, LoadState, Profile, Reply, SendState, ValueInfo
from evaluator.records import (
    Correctness, Flag, FlagPolicy, ModeCheck, Phase, Roofline, Status, TimingCheck, TimingStats, Verdict,
    merge_flags,
)
from evaluator.timing import physical_floor_ms, roofline, summarize

if TYPE_CHECKING:
    from evaluator.referee import Referee

MAX_KERNEL_NAMES = 256
# What the referee keeps of the clocked calls (each one's output and buffers, copied out of the stage
# inside its window) until it has compared them: it bounds how many calls a series has (at kernelbench,
# 256 MiB outputs: 4 warm-up calls and 19 timed ones).
KEEP_BYTES = {"cuda": 6 << 30, "cpu": 512 << 20}


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

    referee: Referee | None          # None: a build only (the parent's parallel builds)
    link: object                     # evaluator.process.ExecutorProcess, or anything with its request/reply
    name: str
    digest: str
    problem: str
    size: str
    device: str
    compile_timeout_s: float
    run_timeout_s: float
    memory_limit_gb: float | None = None
    rng: random.Random = field(default_factory=random.Random)
    flags: list[Flag] = field(default_factory=list)
    phase: Phase = Phase.compile
    deadline: float = 0.0
    phase_seconds: dict[str, float] = field(default_factory=dict)
    command_seconds: dict[str, float] = field(default_factory=dict)  # waited on the executor, per command kind
    # the device to this candidate alone while it is timed and profiled (the referee stops the others)
    exclusive: Callable[[], ContextManager] = contextlib.nullcontext
    _entered: float = 0.0

    def enter(self, phase: Phase) -> None:
        """A new phase: the compile limit covers the import, the run limit init, check and time together."""
        self.leave()
        self.phase, self._entered = phase, time.monotonic()
        if phase == Phase.compile:
            self.deadline = time.monotonic() + self.compile_timeout_s
        elif phase == Phase.init:
            self.deadline = time.monotonic() + self.run_timeout_s

    def leave(self) -> None:
        if self._entered:
            self.phase_seconds[self.phase.value] = round(time.monotonic() - self._entered, 3)
            self._entered = 0.0

    def seed(self) -> int:
        return self.rng.randrange(2**31)

    def add(self, flags) -> None:
        self.flags.extend(flags)

    def request(self, command) -> Reply:
        """One command to the executor; its flags logged. An executor that is gone, too slow or
        breaks the protocol is judged here."""
        started = time.monotonic()
        try:
            reply = self.link.request(command, self.deadline)
        except Ended as ended:
            raise self.ended(ended) from None
        finally:
            kind = type(command).__name__
            self.command_seconds[kind] = self.command_seconds.get(kind, 0.0) + time.monotonic() - started
        self.add(reply.flags)
        return reply

    def ended(self, ended: Ended) -> Judged:
        phase = self.phase
        if ended.reason == "timeout":
            limit = self.compile_timeout_s if phase == Phase.compile else self.run_timeout_s
            return Judged(Status.timeout, phase, f"phase `{phase.value}` ran past its {limit:g} s limit; "
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
        """The tensors a reply shipped, read onto the referee's device, and what could not be read."""
        tensors, problems = {}, []
        device = self.referee.device if self.referee is not None else "cpu"
        for slot in reply.tensors:
            try:
                tensors[slot.name] = self.link.exchange.read(slot, device)
            except ExchangeError as err:
                problems.append(f"the executor shipped an unreadable tensor ({err})")
        return tensors, problems


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


@dataclass(frozen=True)
class Profiled:
    kernels: tuple[str, ...] = ()
    kernel_times_us: tuple[float, ...] = ()  # aligned with `kernels`; empty when unknown (the CPU)
    kernel_count: int | None = None
    custom_kernels: tuple[str, ...] = ()


# ------------------------------------------------------------------------------------------ compile

def import_phase(session: Session) -> Imported:
    """Wait for the executor's import of the candidate (memory watched while it builds)."""
    session.enter(Phase.compile)
    try:
        reply = session.link.reply(0, session.deadline, poll_memory=True)
    except Ended as ended:
        raise session.ended(ended) from None
    session.add(reply.flags)
    if reply.error_kind == "no_model_new":
        raise Judged(Status.parse_error, Phase.compile, reply.error)
    if reply.error_kind == "import":
        raise Judged(Status.compile_error, Phase.compile, reply.error)
    if reply.error:
        raise Judged(Status.runtime_error, Phase.compile, reply.error)
    return Imported()


# ------------------------------------------------------------------------------------------ init

def init_phase(session: Session, imported: Imported) -> Built:
    """ModelNew(*get_init_inputs()) in the executor, the reference's parameters and buffers loaded
    into it by name (copies: the reference's own tensors never leave the referee)."""
    session.enter(Phase.init)
    referee = session.referee
    reference = referee.new_reference(session.seed())
    fixed = referee.exchange_tensors(session.link.exchange)
    reply = session.request(referee.construct(fixed, session.seed()))
    if reply.error_kind == "not_module":
        raise Judged(Status.incorrect, Phase.init, reply.error)
    if reply.error:
        raise Judged(Status.runtime_error, Phase.init, reply.error)
    reference_state = {k: v for k, v in reference.state_dict().items()}
    candidate_state = reply.state or {}
    missing = [k for k in reference_state if k not in candidate_state]
    if missing:
        raise Judged(Status.incorrect, Phase.init,
                     "ModelNew lacks the reference's parameters/buffers (same attribute names are required): "
                     + ", ".join(missing))
    mismatched = [f"{k}: {tuple(candidate_state[k])} vs {tuple(v.shape)}"
                  for k, v in reference_state.items() if list(candidate_state[k]) != list(v.shape)]
    if mismatched:
        raise Judged(Status.incorrect, Phase.init, "parameter shapes differ from the reference: " + "; ".join(mismatched))
    slots = session.link.exchange.write([(f"state.{k}", v) for k, v in reference_state.items()])
    reply = session.request(LoadState(id=0, tensors=slots))
    if reply.error:
        raise Judged(Status.runtime_error, Phase.init, reply.error)
    reference64 = copy.deepcopy(reference).to(torch.float64)
    return Built(reference=reference, reference64=reference64)


# ------------------------------------------------------------------------------------------ check

def compare_output(info: ValueInfo | None, actual: torch.Tensor | None, expected: torch.Tensor, referee: Referee,
                   tolerances: dict) -> cmp.TensorCompare:
    """What forward returned (as the executor describes it, and its values as shipped) against the
    float64 `expected`: a plain tensor of the reference output's shape, dtype and device type first."""
    failed = {tier: False for tier in tolerances}
    inf = float("inf")

    def failure(reason: str) -> cmp.TensorCompare:
        return cmp.TensorCompare(inf, inf, failed, f"output: {reason}")

    if info is None:
        return failure("forward returned nothing the executor could describe")
    if not info.plain:
        return failure(f"expected a plain torch.Tensor, got {info.kind}")
    if list(info.shape or []) != list(expected.shape):
        return failure(f"shape {tuple(info.shape or [])}, expected {tuple(expected.shape)}")
    if info.dtype != referee.output_dtype:
        return failure(f"dtype torch.{info.dtype}, expected torch.{referee.output_dtype}")
    if info.device != referee.device:
        return failure(f"on {info.device}, expected on {referee.device}")
    if actual is None or list(actual.shape) != list(expected.shape):
        return failure("its values did not reach the referee")
    return cmp.compare_tensor("output", actual, expected, tolerances, referee.rel_floor)


def trial(session: Session, reference64: torch.nn.Module, distribution: str, seed: int, *, train: bool,
          acc: cmp.ModeAccumulator, fill: bool = False) -> Reply:
    """One checked call: inputs drawn here and shipped, the executor's output, inputs (as the call left
    them) and buffers compared with `reference64` (advanced by the same call, in the same mode)."""
    referee = session.referee
    inputs = referee.draw(distribution, seed)
    slots = session.link.exchange.write([(f"input.{i}", x) for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)])
    reply = session.request(Call(id=0, tensors=slots, train=train, fill_uninitialized=fill, send_state=True))
    if reply.error:
        raise Judged(Status.runtime_error, session.phase, reply.error)
    shipped, unreadable = session.shipment(reply)
    reference64.train(train)
    with torch.no_grad(), cmp.guarded():
        expected = reference64(*draws.as_float64(inputs))
    acc.trials += 1
    for problem in reply.problems + unreadable:
        acc.fail(problem)
    changed = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)
               and not (cmp.is_plain_tensor(shipped.get(f"input.{i}")) and cmp.same_values(x, shipped[f"input.{i}"]))]
    if changed:
        acc.fail(f"the candidate modified its input(s) {changed} in place")
    acc.add("output", compare_output(reply.output, shipped.get("output"), expected, referee, referee.tolerances))
    for name, value in reference64.state_dict().items():
        acc.add(name, cmp.compare_tensor(name, shipped.get(f"state.{name}"), value, referee.tolerances,
                                         referee.rel_floor))
    return reply


def check_phase(session: Session, built: Built) -> Checked:
    """The problem's trials (each distribution, fresh seeds), one more call with uninitialised memory
    filled with NaN, one call in eval mode: outputs and buffers against the float64 reference."""
    session.enter(Phase.check)
    referee = session.referee
    problem = referee.problem
    train = problem.mode == "train"
    reference64 = built.reference64
    main = cmp.ModeAccumulator(problem.mode, referee.tolerances)
    by_distribution: dict[str, cmp.ModeAccumulator] = {}
    seeds: list[int] = []
    for distribution in problem.distributions:
        # each distribution's trials apart too, so the verdict says which one failed
        acc = by_distribution[distribution] = cmp.ModeAccumulator(problem.mode, referee.tolerances)
        for _ in range(problem.trials):
            seeds.append(session.seed())
            trial(session, reference64, distribution, seeds[-1], train=train, acc=acc)
        main.merge(acc)
    unwritten = None
    if main.passed:  # a failing candidate is judged already
        seeds.append(session.seed())
        unwritten = unwritten_trial(session, reference64, seeds[-1], train)
    eval_check = None
    if problem.check_eval_mode and train:
        eval_check = cmp.ModeAccumulator("eval", referee.tolerances)
        seeds.append(session.seed())
        try:
            trial(session, reference64, problem.distributions[0], seeds[-1], train=False, acc=eval_check)
        except Judged as judged:
            eval_check.fail(judged.error)
        reference64.train(train)
    record = main.record()
    correctness = Correctness(
        tiers=record.tiers, max_abs_err=record.max_abs_err, max_rel_err=record.max_rel_err, main=record,
        eval_mode=eval_check.record() if eval_check else None, distributions=list(problem.distributions),
        seeds=seeds, buffers_checked=list(reference64.state_dict()),
        by_distribution={name: acc.record() for name, acc in by_distribution.items()})
    if eval_check is not None and not eval_check.passed:
        session.add([Flag(name="eval_mode_incorrect", policy=FlagPolicy.reject, reason=(
            "wrong in eval mode (after module.eval(); for BatchNorm: normalized with the running "
            "statistics): " + mode_failure(referee, correctness.eval_mode))[:1000])])
    stop = None
    if not main.passed:
        stop = Stop(Status.incorrect, Phase.check, mode_failure(referee, correctness.main))
    elif unwritten is not None and regressed(unwritten, correctness):
        stop = Stop(Status.incorrect, Phase.check, (
            "its output depended on memory it never wrote: one more checked call, made with uninitialised "
            "memory filled with NaN (torch.empty and at::empty in extensions included; "
            "torch.use_deterministic_algorithms(True, warn_only=True) with fill_uninitialized_memory), "
            f"failed where the others passed: {describe_regression(unwritten, correctness)}"))
    return Checked(correctness=correctness, reference64=reference64, stop=stop)


def unwritten_trial(session: Session, reference64, seed: int, train: bool) -> cmp.ModeAccumulator:
    """One more checked call (buffers compared too) with uninitialised memory filled with NaN in the
    executor: an output the candidate never wrote (a fresh `torch.empty` the allocator happens to hand
    back holding the right values) is NaN there. A candidate that switches the filling off is flagged
    `precision_flags` (reject)."""
    referee = session.referee
    acc = cmp.ModeAccumulator(referee.problem.mode, referee.tolerances)
    try:
        reply = trial(session, reference64, referee.problem.distributions[0], seed, train=train, acc=acc, fill=True)
    except Judged as judged:
        raise Judged(judged.status, judged.phase, (
            f"{judged.error}\n(in the checked call made with uninitialised memory filled: "
            "torch.use_deterministic_algorithms(True, warn_only=True) with fill_uninitialized_memory)"))
    during = tuple(reply.fill) if reply.fill is not None else None
    if during != (True, True, True):
        session.add([Flag(name="precision_flags", policy=FlagPolicy.reject, reason=(
            "ModelNew.forward switched off the filling of uninitialised memory while it was checked for "
            f"unwritten output (deterministic algorithms, warn only, fill: {during}); restored"))])
    return acc


def mode_failure(referee: Referee, check: ModeCheck) -> str:
    """Why the trials of one mode failed."""
    if check.failure:
        return check.failure
    loosest = max(referee.tolerances.items(), key=lambda kv: (kv[1].atol, kv[1].rtol))
    worst = max(check.tensors, key=lambda t: t.max_abs_err if t.max_abs_err is not None else float("inf"))
    error = f"{worst.max_abs_err:.3g}" if worst.max_abs_err is not None else "not comparable"
    return (f"outside every tolerance tier (loosest `{loosest[0]}`: atol={loosest[1].atol:g}, "
            f"rtol={loosest[1].rtol:g}); worst tensor `{worst.name}` max abs err {error}")


def regressed(acc: cmp.ModeAccumulator, correctness: Correctness) -> bool:
    """Whether a later comparison failed, or lost a tier the checks passed."""
    return not acc.passed or not all(acc.tiers[t] or not correctness.tiers.get(t) for t in acc.tiers)


def describe_regression(acc: cmp.ModeAccumulator, correctness: Correctness) -> str:
    if acc.failure:
        return acc.failure
    lost = [t for t in acc.tiers if correctness.tiers.get(t, True) and not acc.tiers[t]]
    # the worst of the tensors that failed a lost tier (not the largest error overall, which may pass)
    culprits = {n: e for n, e in acc.worst.items() if acc.failed.get(n, set()) & set(lost)} or acc.worst
    worst = max(culprits.items(), key=lambda kv: kv[1][0], default=("output", (float("nan"), 0.0)))
    what = "outside every tolerance tier" if not any(acc.tiers.values()) else \
        f"errors grew beyond the tier(s) it passed before ({', '.join(lost)})"
    return f"{what}; worst tensor `{worst[0]}` max abs err {worst[1][0]:.3g}"


# ------------------------------------------------------------------------------------------ time

def time_phase(session: Session, checked: Checked, built: Built) -> Timed:
    """Warm-up calls, then timed calls, every one clocked by the referee (evaluator.clock: its inputs
    written into the stage and its output and buffers copied out inside the window), each followed by a
    window of the calibrator on the same inputs, with the candidate's processes stopped and the device
    idle: what a window costs, measured in the same pattern and the same minute. Then every clocked
    call's output and buffers against the float64 reference replaying the same calls, the reported times
    against the referee's, the physical floor, and one more checked call."""
    session.enter(Phase.time)
    referee = session.referee
    timer = referee.timer
    calls: list[tuple[int, clock.Clocked]] = []  # (seed of its inputs, its window)
    costs: list[clock.Clocked] = []              # the calibrator's windows beside them
    warm = timer.warmup + 1
    with clock.collector_paused():
        clocked_calls(session, warm, calls, costs)
        fit = KEEP_BYTES[referee.device] // referee.layout.span
        estimate = calls[-1][1].ms - (costs[-1].ms - (costs[-1].reported_ms or 0.0) if costs else 0.0)
        reps = timer.reps_for(max(estimate, 1e-3), cap=max(1, fit - warm))
        clocked_calls(session, reps, calls, costs)
    sm_clock = referee.sm_clock()
    cost = clock.window_cost(costs[warm:]) if len(costs) == len(calls) else None
    if cost is None and referee.current_round is not None:  # the calibrator failed beside it: the round's
        cost = referee.current_round.window_cost
    if cost is None:
        session.add([Flag(name="uncalibrated", reason=(
            f"the calibrator could not measure what a clocked window costs ({referee.calibrator.error}): the "
            "times are whole windows, longer than the calls"))])
    cost_ms = cost.cost_ms if cost is not None else 0.0
    series = [c for _, c in calls[warm:]]
    referee.profile_windows(session.name, series, costs[warm:])
    timing = summarize(clock.referee_times(series, cost_ms), warm)
    check = clock.cross_check(series, cost, referee.device)
    if not check.agrees:
        session.add([Flag(name="timing_mismatch", policy=FlagPolicy.reject, reason=clock.mismatch_reason(check))])
    replayed = compare_clocked(session, checked, calls)
    compare_state_after_timing(session, checked, replayed, len(calls))
    floor_ms = check_floor(session, built, timing)
    recheck(session, checked, replayed)
    return Timed(timing=timing, check=check, floor_ms=floor_ms, sm_clock_mhz=sm_clock)


def clocked_calls(session: Session, count: int, calls: list, costs: list) -> None:
    """`count` more clocked calls, each on fresh inputs drawn here (outside the window) from a seed of its
    own; after each window, the inputs it was given must be as the referee wrote them. Each is followed
    by one of the calibrator's windows on the same inputs (the pattern a window's cost depends on), run
    with the candidate's processes stopped and only once the device has no work of theirs left, so that
    nothing the candidate does can make the calibrator's windows, and so a window's cost, dearer."""
    referee = session.referee
    train = referee.problem.mode == "train"
    stage = session.link.stage
    for _ in range(count):
        seed = session.seed()
        inputs = referee.draw(referee.problem.distributions[0], seed)
        clocked = clock.window(session.request, stage, referee.layout, inputs, train, referee.timer.flush,
                               session.rng.random())
        if clocked.go.error:
            raise Judged(Status.runtime_error, Phase.time, clocked.go.error)
        changed = clock.inputs_changed(stage, referee.layout, inputs)
        if changed:
            raise Judged(Status.incorrect, Phase.time, f"the candidate modified its input(s) {changed} in place "
                                                       f"(clocked call {len(calls) + 1})")
        calls.append((seed, clocked))
        with held(session.link):
            idle(session, f"after clocked call {len(calls)} had returned")
            beside = referee.calibrator.window(inputs)
            idle(session, f"through the calibrator's window after clocked call {len(calls)}")
        if beside is not None:
            costs.append(beside)


def idle(session: Session, when: str) -> None:
    """The device has no work of any other process left (its processes held, the candidate can add none).
    Executors started ahead may have queued work at import: when the device stays busy they are stopped
    for good (started again in their turn) before the candidate is blamed."""
    waited = session.referee.device_idle(clock.IDLE_WAIT_S)
    if waited is None and session.referee.close_waiting():
        waited = session.referee.device_idle(clock.IDLE_WAIT_S)
    if waited is None:
        raise Judged(Status.runtime_error, Phase.time, (
            f"device work kept running {when}, for {clock.IDLE_WAIT_S:g} s with the candidate's processes "
            "stopped: work left queued could make the calibrator's windows, and so a window's cost, dearer"))


@contextlib.contextmanager
def held(link):
    """The candidate's processes stopped (SIGSTOP): nothing of theirs can start on the device meanwhile."""
    hold, release = getattr(link, "hold", None), getattr(link, "release", None)
    if hold is not None:
        hold()
    try:
        yield
    finally:
        if release is not None:
            release()


def sanity_tolerances(referee: Referee) -> dict:
    """The loosest tier widened by half: what every clocked call's output and buffers must meet."""
    name, loosest = max(referee.tolerances.items(), key=lambda kv: (kv[1].atol, kv[1].rtol))
    return {name: type(loosest)(atol=1.5 * loosest.atol, rtol=1.5 * loosest.rtol)}


def staged_tensors(session: Session, clocked: clock.Clocked) -> tuple[dict[str, torch.Tensor], list[str]]:
    """What a clocked call staged, read from the referee's copy of it, and what could not be read."""
    tensors, problems = {}, list(clocked.put.problems) if clocked.put is not None else []
    referee = session.referee
    for slot in clocked.put.tensors if clocked.put is not None else []:
        try:
            tensors[slot.name] = clocked.tensor(slot, referee.layout, session.link.stage)
        except ExchangeError as err:
            problems.append(f"the executor staged an unreadable tensor ({err})")
    return tensors, problems


def compare_clocked(session: Session, checked: Checked, calls: list) -> torch.nn.Module:
    """Every clocked call (warm-up included), in order, against a copy of the float64 reference replaying
    the same calls on the same inputs from its state after the checks: each output and each call's buffers
    within the loosest tier widened by half; the last call's output and one chosen now at random in every
    tier the checks passed. A candidate that behaves only while it is checked, or only on some calls, or
    leaves its running statistics for later, fails here. Returns the replayed reference."""
    referee = session.referee
    train = referee.problem.mode == "train"
    replay = copy.deepcopy(checked.reference64).train(train)
    sanity = sanity_tolerances(referee)
    full = {len(calls) - 1, session.rng.randrange(len(calls))}
    for index, (seed, clocked) in enumerate(calls):
        label = f"clocked call {index + 1} of {len(calls)}"
        with torch.no_grad(), cmp.guarded():
            expected = replay(*draws.as_float64(referee.draw(referee.problem.distributions[0], seed)))
        staged, problems = staged_tensors(session, clocked)
        acc = cmp.ModeAccumulator(referee.problem.mode, sanity)
        for problem in clocked.go.problems + problems:
            acc.fail(problem)
        acc.add("output", compare_output(clocked.put.output, staged.get("output"), expected, referee, sanity))
        for name, value in replay.named_buffers():
            acc.add(name, cmp.compare_tensor(name, staged.get(f"state.{name}"), value, sanity, referee.rel_floor))
        if acc.passed and index in full:
            every = cmp.ModeAccumulator(referee.problem.mode, referee.tolerances)
            every.add("output", compare_output(clocked.put.output, staged.get("output"), expected, referee,
                                               referee.tolerances))
            if regressed(every, checked.correctness):
                acc = every
        if not acc.passed or acc.tolerances is referee.tolerances:
            buffers = acc.failure is None and "output" not in acc.failed
            raise Judged(Status.incorrect, Phase.time, f"{'buffers wrong after' if buffers else 'wrong on'} {label}: "
                                                       f"{describe_regression(acc, checked.correctness)}")
        calls[index] = (seed, None)  # compared: its copy is freed
    return replay


def spot(session: Session, checked: Checked, reply: Reply, inputs: list, label: str) -> None:
    """An output shipped through the exchange (the profiled call's) against the float64 reference on the
    same inputs: within the loosest tier widened by half, and in every tier the checks passed."""
    referee = session.referee
    reference64 = copy.deepcopy(checked.reference64).train(referee.problem.mode == "train")
    shipped, unreadable = session.shipment(reply)
    with torch.no_grad(), cmp.guarded():
        expected = reference64(*draws.as_float64(inputs))
    for tolerances in (sanity_tolerances(referee), referee.tolerances):
        acc = cmp.ModeAccumulator(referee.problem.mode, tolerances)
        for problem in reply.problems + unreadable:
            acc.fail(problem)
        acc.add("output", compare_output(reply.output, shipped.get("output"), expected, referee, tolerances))
        if not acc.passed or (tolerances is referee.tolerances and regressed(acc, checked.correctness)):
            raise Judged(Status.incorrect, Phase.time, f"wrong on {label}: {describe_regression(acc, checked.correctness)}")


def compare_state_after_timing(session: Session, checked: Checked, replayed: torch.nn.Module, calls: int) -> None:
    """Every parameter and buffer of the candidate after the clocked calls (shipped now, outside any window)
    against the replayed reference, in every tier the checks passed: a weight edited, or buffers that
    differ from what the last clocked call staged."""
    referee = session.referee
    reply = session.request(SendState(id=0))
    if reply.error:
        raise Judged(Status.crashed, Phase.time, reply.error)
    shipped, unreadable = session.shipment(reply)
    acc = cmp.ModeAccumulator(referee.problem.mode, referee.tolerances)
    for problem in reply.problems + unreadable:
        acc.fail(problem)
    for name, value in replayed.state_dict().items():
        acc.add(name, cmp.compare_tensor(name, shipped.get(f"state.{name}"), value, referee.tolerances, referee.rel_floor))
    if regressed(acc, checked.correctness):
        raise Judged(Status.incorrect, Phase.time, (
            f"buffers wrong after {calls} timed calls (warm-up included; the reference replayed the same "
            f"calls on the same inputs): {describe_regression(acc, checked.correctness)}"))


def check_floor(session: Session, built: Built, timing: TimingStats) -> float | None:
    """Flag (reject) a runtime below what the device can physically do."""
    referee = session.referee
    read = referee.input_nbytes + sum(p.numel() * p.element_size() for p in built.reference.parameters())
    floor, how = physical_floor_ms(referee.problem.flop_count(referee.size), read, referee.device,
                                   referee.environment.device_name)
    if floor is not None and timing.median_ms < floor:
        session.add([Flag(name="implausible", policy=FlagPolicy.reject, reason=(
            f"median {timing.median_ms * 1e3:.4g} us per call is below the physical floor "
            f"{floor * 1e3:.4g} us ({how}): the timing cannot be real"))])
    return floor


def recheck(session: Session, checked: Checked, replayed: torch.nn.Module) -> None:
    """A candidate that degrades after many calls (or caches) is caught here: one more checked call on
    fresh inputs, its output and buffers against the reference replayed through the timed calls."""
    referee = session.referee
    acc = cmp.ModeAccumulator(referee.problem.mode, referee.tolerances)
    trial(session, replayed, referee.problem.distributions[-1], session.seed(),
          train=referee.problem.mode == "train", acc=acc)
    if regressed(acc, checked.correctness):
        raise Judged(Status.incorrect, Phase.time,
                     f"wrong on fresh inputs after the timing loop: {describe_regression(acc, checked.correctness)}")


# ------------------------------------------------------------------------------------------ profile

def profile_phase(session: Session, checked: Checked, built: Built) -> Profiled:
    """One more forward, observed by the executor: which kernels it launched and each one's device time
    (CUDA) or which of the candidate's extension functions it called (CPU). None of the candidate's own
    is `no_custom_kernel` (flag). Its output is compared too."""
    referee = session.referee
    inputs = referee.draw(referee.problem.distributions[0], session.seed())
    for slot in referee.layout.inputs:  # the profiled call reads the stage, as a clocked one does
        session.link.stage.view(slot).copy_(inputs[int(slot.name.removeprefix("input."))])
    reply = session.request(Profile(id=0, train=referee.problem.mode == "train"))
    if reply.error:
        session.add([Flag(name="profiler_failed", reason=f"the kernel listing failed: {reply.error}"[:500])])
        return Profiled()
    names = [str(n)[:500] for n in reply.kernels[:MAX_KERNEL_NAMES]]
    times = reply.kernel_times_us[:MAX_KERNEL_NAMES]
    if len(times) != len(names) or not all(math.isfinite(t) and t >= 0 for t in times):
        times = []  # informative only (feedback), never judged: times that do not fit the names are dropped
    count = max(reply.kernel_count or 0, len(names))
    if referee.device == "cuda":
        own = own_kernels(names, set(referee.reference_kernels), reply.libraries,
                          roots=[str(p) for p in session.link.own_folders()])
    else:
        own = list(dict.fromkeys(names))
    if not own:
        seen = (f"{count} launch(es): " + ", ".join(dict.fromkeys(kernel_base_name(n) for n in names))[:300]
                if names else "none at all")
        where = "GPU kernel" if referee.device == "cuda" else "call into an extension module"
        session.add([Flag(name="no_custom_kernel", reason=f"one forward made no {where} built by the candidate ({seen})")])
    spot(session, checked, reply, inputs, "the profiled call")
    return Profiled(kernels=tuple(names), kernel_times_us=tuple(times), kernel_count=count, custom_kernels=tuple(own))


# ------------------------------------------------------------------------------------------ the verdict

def finish(session: Session) -> None:
    """Ask the executor what changed since the import, and let it exit."""
    try:
        session.request(Finish(id=0))
    except Judged:
        pass


def judge(session: Session, compile_only: bool, imported: Imported | None = None) -> Verdict:
    """The phases in order, then the verdict (see the module's docstring). With `imported`, the
    candidate is taken as imported already (an executor in the test's own process)."""
    results: dict[str, object] = {}
    outcome: Stop | None = None
    try:
        results["imported"] = imported or import_phase(session)
        if compile_only:
            outcome = Stop(Status.compiled, None, "built only: not run, so neither checked nor timed")
        else:
            built = results["built"] = init_phase(session, results["imported"])
            checked = results["checked"] = check_phase(session, built)
            outcome = checked.stop
            if outcome is None:
                with session.exclusive():
                    results["timed"] = time_phase(session, checked, built)
                    results["profiled"] = profile_phase(session, checked, built)
                finish(session)
    except Judged as judged:
        outcome = Stop(judged.status, judged.phase, judged.error)
    session.leave()
    return compose(session, results, outcome)


def compose(session: Session, results: dict, outcome: Stop | None) -> Verdict:
    """The one place a verdict is made: from the phases' results and how the judgement ended."""
    referee = session.referee
    checked, timed, profiled = results.get("checked"), results.get("timed"), results.get("profiled")
    status = outcome.status if outcome is not None else Status.correct
    if timed is not None and status != Status.correct:
        timed = None
    timing = timed.timing if timed else None
    rounds = referee.current_round if referee is not None and timing is not None else None
    baselines = dict(rounds.baselines) if rounds is not None else {}
    environment = referee.environment.model_copy() if referee is not None else None
    if environment is not None and timed is not None:
        environment.sm_clock_mhz = timed.sm_clock_mhz
    flags = list(session.flags)
    if rounds is not None and rounds.failed:  # a baseline failing is not the candidate's fault
        flags += [Flag(name="baseline_failed", reason=f"baseline `{name}` failed: {why}"[:500])
                  for name, why in rounds.failed.items()]
    return Verdict(
        candidate=session.name, source_sha256=session.digest, problem=session.problem, size=session.size,
        device=session.device, status=status,
        phase=outcome.phase if outcome is not None else None, error=outcome.error if outcome is not None else None,
        correctness=checked.correctness if checked is not None else None,
        runtime_ms=timing.median_ms if timing else None, timing=timing, baselines=baselines,
        baseline_source=rounds.source if rounds is not None else None,
        speedup={name: stats.median_ms / timing.median_ms for name, stats in baselines.items()} if timing else {},
        timing_check=timed.check if timed else None, flags=merge_flags(flags),
        kernels=list(profiled.kernels) if profiled else [], kernel_count=profiled.kernel_count if profiled else None,
        kernel_times_us=list(profiled.kernel_times_us) if profiled else [],
        custom_kernels=list(profiled.custom_kernels) if profiled else [],
        runtime_floor_ms=timed.floor_ms if timed else None,
        roofline=forward_roofline(referee, timing.median_ms) if timing else None,
        phase_seconds=dict(session.phase_seconds), environment=environment)


def forward_roofline(referee: Referee, median_ms: float) -> Roofline:
    """The accepted median time against the device's peaks, from the referee's own numbers: the problem's
    FLOPs, and the bytes a forward must move (inputs and the reference's parameters and buffers read,
    the output written)."""
    return roofline(referee.problem.flop_count(referee.size),
                    referee.input_nbytes + referee.state_nbytes + referee.output_nbytes, median_ms,
                    referee.device, referee.environment.device_name)
