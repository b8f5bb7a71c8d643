"""The check phase: checked calls compared with the float64 reference, in every mode and tolerance
tier the problem names (evaluator.referee.phases runs it).
"""

from __future__ import annotations

import contextlib
import math
import time

import torch

from evaluator.referee import compare, tuning
from evaluator.referee import inputs as draws
from evaluator.referee.view import RefereeView
from evaluator.wire import tensors as cmp
from evaluator.wire.protocol import Call, Reply, ValueInfo
from evaluator.wire.tiers import MATCHED_TIER
from evaluator.wire.records import Correctness, Flag, FlagPolicy, ModeCheck, Phase, Status
from evaluator.referee.session import Built, Checked, Judged, Session, Stop, release_cached


# ------------------------------------------------------------------------------------------ check

def device_free_bytes(device: str) -> int | None:
    """The device's free memory now (every process's use counted), or None off a GPU."""
    return torch.cuda.mem_get_info()[0] if device == "cuda" and torch.cuda.is_available() else None


def wrong_already(acc: compare.ModeAccumulator, phase: Phase | None, then: str) -> None:
    """`incorrect` (Judged) where the trials so far (or what the executor said of this one) failed every tolerance
    tier, whatever came `then`: a candidate that holds the device's memory must not hide an earlier wrong trial. A
    candidate correct at a looser tier only is not wrong."""
    if acc.failure is not None or (bool(acc.tiers) and not any(acc.tiers.values())):
        earlier = acc.failure or "outside every tolerance tier"
        raise Judged(Status.incorrect, phase, f"wrong in an earlier trial ({earlier}), then {then}")


def out_of_memory(err: BaseException) -> bool:
    """The GPU's memory, or the host's (c10's CPU allocator: where the float64 judge runs in host memory), ran out."""
    return isinstance(err, torch.OutOfMemoryError) or "DefaultCPUAllocator: can't allocate memory" in str(err)


def out_of_memory_words(err: BaseException) -> str:
    """CUDA's own words of an out-of-memory error, to its allocation's size (not its allocator's advice)."""
    return ". ".join(str(err).split(". ")[:2])[:300]


def staging_out_of_memory(session: Session, inputs: list, reply: Reply, acc: compare.ModeAccumulator) -> None:
    """The executor says the device's memory ran out as it staged a call's inputs: the judge's copies did not fit
    (`crashed`, not the candidate's error), unless the candidate made it so. It shares the executor's interpreter
    (it could raise that error itself) and may hold the device's memory (so that staging really fails and hides an
    earlier wrong trial): an earlier failed trial is its `incorrect`, and the device is measured with the executor
    gone and the referee's cache given back; with room for the call's inputs twice it is the candidate's
    `runtime_error`."""
    wrong_already(acc, session.phase, "the GPU's memory ran out staging the next: " + reply.error)
    session.link.close(wait_s=30)
    release_cached(session.referee.device)
    free = device_free_bytes(session.referee.device)
    needed = sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))
    if free is not None and free >= 2 * needed:
        raise Judged(Status.runtime_error, session.phase, f"the GPU's memory ran out staging the call, yet with the "
                     f"executor gone {free / 2**30:.1f} GiB are free for {needed / 2**30:.2f} GiB of inputs: the "
                     "candidate's own memory: " + reply.error)
    raise Judged(Status.crashed, session.phase, STAGING_MEMORY + reply.error)


def referee_out_of_memory(acc: compare.ModeAccumulator, err: BaseException) -> None:
    """The referee ran out of the device's memory reading a call's outputs or computing the float64 reference:
    the judge's copies did not fit (`crashed`, saying so), or `incorrect` after an earlier wrong trial (a candidate
    holding the device's memory must not hide one). Never the candidate's `runtime_error`: the judge failed."""
    wrong_already(acc, Phase.check, "the referee ran out of GPU memory judging the next")
    raise Judged(Status.crashed, Phase.check, referee_memory_said(
        "read the candidate's outputs or computed the float64 reference", err))


def referee_memory_said(doing: str, err: BaseException) -> str:
    """Why a judgement is `crashed` where the referee's own memory ran out as it was `doing` something."""
    return ("the memory ran out in the referee (the GPU's, or the host's where its float64 judge runs there) as it "
            f"{doing}: at this problem's size the judge's copies and the executor's do not fit this GPU "
            "(docs/problems.md, the memory bound); a smaller size, or a GPU with more memory, judges it. "
            + out_of_memory_words(err))

STAGING_MEMORY = ("the GPU's memory ran out as the judge staged the call's inputs, before the candidate was called: "
                  "at this problem's size the referee's float64 checks and the executor's copies do not fit this GPU "
                  "(docs/problems.md, the memory bound); a smaller size, or a GPU with more memory, judges it. ")

def output_problem(info: ValueInfo | None, actual: torch.Tensor | None, shape: list[int], referee: RefereeView) -> str | None:
    """Why what forward returned (as the executor describes it, and its values as shipped) is not a plain
    tensor of the reference output's shape, dtype and device type; None when it is."""
    if info is None:
        return "forward returned nothing the executor could describe"
    if not info.plain:
        return f"expected a plain torch.Tensor, got {info.kind}"
    if list(info.shape or []) != list(shape):
        return f"shape {tuple(info.shape or [])}, expected {tuple(shape)}"
    if info.dtype != referee.output_dtype:
        return f"dtype torch.{info.dtype}, expected torch.{referee.output_dtype}"
    if info.device != referee.device:
        return f"on {info.device}, expected on {referee.device}"
    if actual is None or list(actual.shape) != list(shape):
        return "its values did not reach the referee"
    return None


def said_first(acc: compare.ModeAccumulator, reply: Reply, shipped: dict, expected: torch.Tensor, referee: RefereeView,
               unreadable: list[str]) -> None:
    """What a reply's output is not (its dtype, its shape: the bytes of a wrong one were never staged where asked), then
    what could not be read, into `acc` before any comparison: a comparison that runs the referee out of memory must
    find every failure already there (wrong_already)."""
    problem = output_problem(reply.output, shipped.get("output"), list(expected.shape), referee)
    if problem is not None:
        acc.fail(f"output: {problem}")
    for problem in unreadable:
        acc.fail(problem)


def compare_output(info: ValueInfo | None, actual: torch.Tensor | None, expected: torch.Tensor, referee: RefereeView,
                   tolerances: dict) -> compare.TensorCompare:
    """What forward returned against the float64 `expected` (output_problem first)."""
    problem = output_problem(info, actual, list(expected.shape), referee)
    if problem is not None:
        inf = float("inf")
        return compare.TensorCompare(inf, inf, {tier: False for tier in tolerances}, f"output: {problem}")
    return compare.compare_tensor("output", actual, expected, tolerances, referee.rel_floor, on=referee.device)


@tuning.costed("checked_calls")
def trial(session: Session, reference64: torch.nn.Module, distribution: str, seed: int, *, train: bool,
          acc: compare.ModeAccumulator, fill: bool = False, before: Comparisons | None = None,
          later: list | None = None) -> Reply:
    """One checked call: inputs drawn here and shipped, the executor's output, inputs (as the call left
    them) and buffers compared with `reference64` (advanced by the same call, in the same mode). `before`: the checked
    call before's comparisons, made while this one is under way (behind its stream hold), or after its reply where the
    referee's memory ran out meanwhile. With `later` (a list), this call's comparisons are put there to be made so,
    instead of here."""
    referee = session.referee
    marks = [time.perf_counter()]  # its steps, for tuning (KH_REFEREE_PROFILE)
    inputs = referee.draw(distribution, seed)
    stage_inputs(session, inputs)
    marks.append(time.perf_counter())
    early = EarlyReference(referee, reference64, inputs, train) if overlapped(referee) else None
    call = Call(id=0, place=referee.layout.region, train=train, fill_uninitialized=fill, send_state=True)

    def meanwhile() -> None:
        if early is not None:
            early.run()  # first: it queues its work on the device
        if before is not None:
            before.run(beside=True)

    reply = session.request(call, meanwhile=meanwhile) if early is not None or before is not None \
        else session.request(call)
    marks.append(time.perf_counter())
    if before is not None:
        before.run()  # where the memory ran out beside the call: made now, the call over (nothing where made)
    if reply.error_kind == "staging_memory":
        staging_out_of_memory(session, inputs, reply, acc)
    if reply.error:
        raise Judged(Status.runtime_error, session.phase, reply.error)
    for problem in reply.problems:  # what the executor said of this call counts before anything is read
        acc.fail(problem)
    try:  # the referee's copies, the float64 reference and the comparisons: where its memory can run out
        shipped, unreadable = session.shipment(reply)
        expected = early.expected if early is not None else None
        if expected is None:
            expected = reference_output(referee, reference64, inputs, train)
        acc.trials += 1
        said_first(acc, reply, shipped, expected, referee, unreadable)
        # the reference's state as this call left it: the next call's float64 reference steps it on
        state = {name: value.clone() for name, value in reference64.state_dict().items()} if later is not None else None
    except (torch.OutOfMemoryError, RuntimeError) as err:
        if not out_of_memory(err):
            raise
        referee_out_of_memory(acc, err)
    comparisons = Comparisons(referee, acc, reply, shipped, expected, inputs, reference64, state)
    if later is not None:
        later.append(comparisons)
    else:
        comparisons.run()
    if tuning.PROFILE_DIR:
        marks.append(time.perf_counter())
        session.checked_ms.append({
            "staged": round((marks[1] - marks[0]) * 1e3, 2), "replied": round((marks[2] - marks[1]) * 1e3, 2),
            "compared": round((marks[3] - marks[2]) * 1e3, 2), "handled": reply.handled_ms,
            "early": round(early.seconds * 1e3, 2) if early is not None else None, "executor": reply.steps_ms,
            "before": round(before.seconds * 1e3, 2) if before is not None else None})
    return reply


class Comparisons:
    """A checked call's comparisons, on the referee's own copies: what the executor shipped (read off the stage and the
    exchange, which the next call then overwrites), the float64 expected output, the call's inputs and the reference's
    state as the call left it (`state`; None: the reference's own, read when they are made at once). Made at once, or
    while the next checked call waits behind its stream hold (`trial`'s `later` and `before`), in the same order
    either way."""

    def __init__(self, referee: RefereeView, acc: compare.ModeAccumulator, reply: Reply, shipped: dict,
                 expected: torch.Tensor, inputs: list, reference64: torch.nn.Module, state: dict | None):
        self.referee, self.acc, self.reply, self.shipped = referee, acc, reply, shipped
        self.expected, self.inputs, self.reference64, self.state = expected, inputs, reference64, state
        self.seconds = 0.0  # for tuning

    def run(self, beside: bool = False) -> None:
        """Into the call's accumulator (once made: nothing the second time); `Judged` where the referee's memory runs
        out. `beside` the next call, a referee short of memory lets its cache go and keeps them, to be made again once
        that call's reply is in (`trial`), as the early reference does: a result added twice is the same result. Their
        copies let go once made."""
        started = time.perf_counter()
        try:
            self._run(beside)
        finally:
            self.seconds += time.perf_counter() - started

    def _run(self, beside: bool) -> None:
        if self.shipped is None:
            return
        referee, acc, shipped = self.referee, self.acc, self.shipped
        try:
            changed = [i for i, x in enumerate(self.inputs) if isinstance(x, torch.Tensor)
                       and not (cmp.is_plain_tensor(shipped.get(f"input.{i}"))
                                and compare.same_values_on(x, shipped[f"input.{i}"], referee.device))]
            if changed:
                acc.fail(f"the candidate modified its input(s) {changed} in place")
            acc.add("output", compare_output(self.reply.output, shipped.get("output"), self.expected, referee,
                                             referee.tolerances))
            state = self.state if self.state is not None else self.reference64.state_dict()
            for name, value in state.items():
                acc.add(name, compare.compare_tensor(name, shipped.get(f"state.{name}"), value, referee.tolerances,
                                                     referee.rel_floor, on=referee.device))
        except (torch.OutOfMemoryError, RuntimeError) as err:
            if not out_of_memory(err):
                self.let_go()
                raise
            if beside:
                release_cached(referee.device)
                return
            self.let_go()
            referee_out_of_memory(acc, err)
        self.let_go()

    def let_go(self) -> None:
        self.shipped = self.expected = self.inputs = self.reference64 = self.state = None


def stage_inputs(session: Session, inputs: list) -> None:
    """A call's tensor inputs into the stage's first input set, where the executor reads a checked or profiled call's
    inputs; the copies done before the call is sent (the stage is another process's too)."""
    stage = session.link.stage
    for slot in session.referee.layout.inputs:
        stage.view(slot).copy_(inputs[int(slot.name.removeprefix("input."))])
    if stage.device == "cuda":
        torch.cuda.current_stream().synchronize()


# The float64 reference of a checked call runs while the executor's call waits behind its stream hold (tens of
# milliseconds: `Construct.stream_delay_ms`) where the judge lives on the GPU and the memory plan leaves this many times
# the reference's own peak free beside everything else (the room kept for the clocked calls' copies, unused until the
# time phase): the executor's call never meets a referee short of memory it planned on. The peak is measured on the
# batch's first checked call, made after its reply (its float64 inputs, output and whatever the reference holds
# between: an attention's scores, a convolution's workspace).
OVERLAP_ROOM = 2


def judged_on_gpu(referee: RefereeView) -> bool:
    """Whether the float64 reference and the comparisons live on the GPU (not in host memory, nor on the CPU)."""
    return referee.device == "cuda" and referee.judge_device == "cuda"


def overlapped(referee: RefereeView) -> bool:
    """Whether a checked call's float64 reference runs while the executor's call is under way (OVERLAP_ROOM)."""
    if not judged_on_gpu(referee) or referee.reference64_peak is None:
        return False
    return referee.memory.kept_bytes >= OVERLAP_ROOM * referee.reference64_peak


@tuning.costed("checked_calls")
def compare_last(comparisons: Comparisons) -> None:
    """The last main trial's comparisons, after it (none is under way to make them beside)."""
    comparisons.run()


def deferred(referee: RefereeView, reference64: torch.nn.Module) -> bool:
    """Whether a checked call's comparisons are made while the next checked call is under way (`Comparisons`): on the
    CPU; on a GPU where the float64 reference runs beside the call (`overlapped`) and the room kept for the clocked
    calls' copies holds, besides that, one call's copies more (its inputs drawn and as shipped, its output as shipped
    and expected in float64, its state as shipped and `reference64`'s copied) and a few of the comparisons' chunks.
    Not where the judge lives in host memory beside a GPU: a call's copies there are gigabytes (KernelBench's
    19_ReLU)."""
    if referee.device == "cpu":
        return True
    if not overlapped(referee):
        return False
    expected = 8 * math.prod(referee.output_shape)  # float64
    copied = sum(v.numel() * v.element_size() for v in reference64.state_dict().values())
    copies = 2 * referee.input_nbytes + referee.output_nbytes + expected + referee.state_nbytes + copied
    return referee.memory.kept_bytes >= OVERLAP_ROOM * referee.reference64_peak + copies + COMPARISON_ROOM


# The comparisons' own temporaries, float64 chunks (compare.COMPARE_CHUNK elements each): a few at once
COMPARISON_ROOM = 4 * compare.COMPARE_CHUNK * 8


def reference_output(referee: RefereeView, reference64: torch.nn.Module, inputs: list, train: bool) -> torch.Tensor:
    """The float64 reference's output on a call's inputs (its buffers stepped); on a GPU judge, its peak memory measured
    the first time (`overlapped`)."""
    measure = judged_on_gpu(referee) and referee.reference64_peak is None
    if measure:
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    reference64.train(train)
    with torch.no_grad(), cmp.guarded():
        expected = reference64(*draws.as_float64(inputs, referee.judge_device))
    if measure:
        torch.cuda.synchronize()
        referee.reference64_peak = torch.cuda.max_memory_allocated() - before
    return expected


class EarlyReference:
    """The float64 reference's output on a checked call's inputs, made after the call is sent and before its reply is
    read (Session.request's `meanwhile`). Its buffers are as the call leaves them, as they would be made after the
    reply; where the memory runs out meanwhile they are put back as they were and `expected` stays None: it is then
    made after the reply, as where nothing overlaps."""

    def __init__(self, referee: RefereeView, reference64: torch.nn.Module, inputs: list, train: bool):
        self.referee, self.reference64, self.inputs, self.train = referee, reference64, inputs, train
        self.expected: torch.Tensor | None = None
        self.seconds = 0.0  # for tuning

    def run(self) -> None:
        started = time.perf_counter()
        try:
            self._run()
        finally:
            self.seconds = time.perf_counter() - started

    def _run(self) -> None:
        before = {}
        try:
            before = {name: value.clone() for name, value in self.reference64.named_buffers()}
            self.expected = reference_output(self.referee, self.reference64, self.inputs, self.train)
        except (torch.OutOfMemoryError, RuntimeError) as err:
            if not out_of_memory(err):
                raise
            self.expected = None
            with torch.no_grad():
                for name, value in self.reference64.named_buffers():
                    if name in before:  # else the memory ran out copying them: nothing ran
                        value.copy_(before[name])
            release_cached(self.referee.device)


def check_phase(session: Session, built: Built) -> Checked:
    """The problem's trials (each distribution, fresh seeds), one more call with uninitialised memory
    filled with NaN, one call in eval mode: outputs and buffers against the float64 reference."""
    session.enter(Phase.check)
    referee = session.referee
    problem = referee.problem
    train = problem.mode == "train"
    reference64 = built.reference64
    main = compare.ModeAccumulator(problem.mode, referee.tolerances)
    by_distribution: dict[str, compare.ModeAccumulator] = {}
    seeds: list[int] = []
    # each call's comparisons made while the next one waits behind its stream hold, where there is room (`deferred`);
    # the last one's after it, before anything reads the accumulators
    later: list[Comparisons] | None = [] if deferred(referee, reference64) else None
    accumulators = []
    for distribution in problem.distributions:
        # each distribution's trials apart too, so the verdict says which one failed
        acc = by_distribution[distribution] = compare.ModeAccumulator(problem.mode, referee.tolerances)
        accumulators.append(acc)
        for _ in range(problem.trials):
            seeds.append(session.seed())
            before = later.pop() if later else None
            with wrong_before_crashed(accumulators, before):
                trial(session, reference64, distribution, seeds[-1], train=train, acc=acc, before=before, later=later)
    for comparisons in later or ():
        with wrong_before_crashed(accumulators, None):
            compare_last(comparisons)
    for acc in accumulators:
        main.merge(acc)
    unwritten = None
    if main.passed:  # a failing candidate is judged already
        seeds.append(session.seed())
        unwritten = unwritten_trial(session, reference64, seeds[-1], train)
    eval_check = None
    if problem.check_eval_mode and train:
        eval_check = compare.ModeAccumulator("eval", referee.tolerances)
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
        seeds=seeds, check_key=session.keys.hex, buffers_checked=list(reference64.state_dict()),
        by_distribution={name: acc.record() for name, acc in by_distribution.items()},
        matched_bounds=dict(getattr(referee.tolerances.get(MATCHED_TIER), "by_tensor", {})))
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


@contextlib.contextmanager
def wrong_before_crashed(accumulators: list[compare.ModeAccumulator], before: Comparisons | None):
    """The main trials' `crashed` (the judge's own failure, its memory short: a memory the candidate may hold among the
    causes) is `incorrect` after any trial wrong before, of any input distribution (wrong_already), the comparisons of
    the call before (`before`) made first where they were not. The memory running out as the referee draws or stages a
    call's inputs is that `crashed`."""
    try:
        yield
    except (Judged, torch.OutOfMemoryError, RuntimeError) as err:
        if isinstance(err, Judged):
            judged = err
        elif out_of_memory(err):
            judged = Judged(Status.crashed, Phase.check, referee_memory_said("drew or staged a checked call's inputs", err))
        else:
            raise
        if judged.status == Status.crashed:
            if before is not None:
                with contextlib.suppress(Judged):
                    before.run()
            for earlier in accumulators:
                wrong_already(earlier, judged.phase, judged.error)
        if judged is err:
            raise
        raise judged from None


def unwritten_trial(session: Session, reference64, seed: int, train: bool) -> compare.ModeAccumulator:
    """One more checked call (buffers compared too) with uninitialised memory filled with NaN in the
    executor: an output the candidate never wrote (a fresh `torch.empty` the allocator happens to hand
    back holding the right values) is NaN there. A candidate that switches the filling off is flagged
    `precision_flags` (reject)."""
    referee = session.referee
    acc = compare.ModeAccumulator(referee.problem.mode, referee.tolerances)
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


def mode_failure(referee: RefereeView, check: ModeCheck) -> str:
    """Why the trials of one mode failed."""
    if check.failure:
        return check.failure
    loosest = max(referee.tolerances.items(), key=lambda kv: (kv[1].atol, kv[1].rtol))
    worst = max(check.tensors, key=lambda t: t.max_abs_err if t.max_abs_err is not None else float("inf"))
    error = f"{worst.max_abs_err:.3g}" if worst.max_abs_err is not None else "not comparable"
    return (f"outside every tolerance tier (loosest `{loosest[0]}`: atol={loosest[1].atol:g}, "
            f"rtol={loosest[1].rtol:g}); worst tensor `{worst.name}` max abs err {error}")


def regressed(acc: compare.ModeAccumulator, correctness: Correctness) -> bool:
    """Whether a later comparison failed, or lost a tier the checks passed. `matched` aside: its bound sits near the
    errors of a kernel a few times less accurate than eager, which pass it on one call and miss it on the next (the
    tier is then simply not claimed); memory never written fails every other tier."""
    return not acc.passed or not all(acc.tiers[t] or not correctness.tiers.get(t) for t in acc.tiers if t != MATCHED_TIER)


def describe_regression(acc: compare.ModeAccumulator, correctness: Correctness | None) -> str:
    """What failed: `acc`'s first hard failure, or its worst tensor among the tiers lost (of those
    `correctness` passed; all of them without it)."""
    if acc.failure:
        return acc.failure
    lost = [t for t in acc.tiers if (correctness is None or correctness.tiers.get(t, True)) and not acc.tiers[t]]
    # the worst of the tensors that failed a lost tier (not the largest error overall, which may pass)
    culprits = {n: e for n, e in acc.worst.items() if acc.failed.get(n, set()) & set(lost)} or acc.worst
    worst = max(culprits.items(), key=lambda kv: kv[1][0], default=("output", (float("nan"), 0.0)))
    what = "outside every tolerance tier" if not any(acc.tiers.values()) else \
        f"errors grew beyond the tier(s) it passed before ({', '.join(lost)})"
    return f"{what}; worst tensor `{worst[0]}` max abs err {worst[1][0]:.3g}"
