"""One candidate's judgement, phase by phase, in the referee's process.

    imported = import_phase(session)            the executor built and imported the candidate
    built    = init_phase(session, imported)    ModelNew built, the reference's weights loaded
    checked  = check_phase(session, built)      checked calls compared with the float64 reference
    timed    = time_phase(session, checked)     timed calls, their outputs, the buffers after them
    profiled = profile_phase(session, timed)    which kernels one forward launches (CUDA: with their times)
    verdict  = compose(session, results, outcome)   once the compared calls left for later are over (Judgement)

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

import copy
import math
from dataclasses import dataclass

import torch

from evaluator.referee import compare
from evaluator.referee.process import Ended
from evaluator.referee.timing import roofline
from evaluator.referee.view import RefereeView, Round
from evaluator.wire.kernels import kernel_base_name, own_kernels, triton_kernel_names
from evaluator.wire.protocol import Finish, LoadState, Profile
from evaluator.wire.records import (
    SHAKY_DRIFT, SHAKY_SPREAD, Correctness, Flag, Phase, Roofline, Status, TimingStats, Verdict, bounds_flag, merge_flags)
from evaluator.referee.session import Built, Checked, Imported, Judged, Profiled, Session, Stop, Timed
from evaluator.referee.check_phase import check_phase, out_of_memory, referee_memory_said, stage_inputs
from evaluator.referee.after_timing import spot
from evaluator.referee.time_phase import time_phase

MAX_KERNEL_NAMES = 256


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
    if reply.error_kind in ("build", "import"):
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
    # a pinned seed pins the weights (which the candidate is handed anyway), never an input
    pinned = referee.config.seed
    reference = referee.new_reference(pinned if pinned is not None else session.keys.seed("reference"))
    if session.link.constructing is not None:  # sent once it imported, ahead of its turn (evaluator.referee.ahead)
        reply = session.answer(session.link.constructing, "Construct")
    else:
        reply = session.request(referee.construct(referee.exchange_tensors(session.link.exchange),
                                                  session.keys.seed("construct")))
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
    reference64 = copy.deepcopy(reference).to(referee.judge_device, torch.float64)
    return Built(reference=reference, reference64=reference64)


# ------------------------------------------------------------------------------------------ profile

def profile_phase(session: Session, checked: Checked, timed: Timed) -> Profiled:
    """One more forward, observed by the executor: which kernels it launched and each one's device time
    (CUDA) or which of the candidate's extension functions it called (CPU). None of the candidate's own
    is `no_custom_kernel` (flag). Its output is compared too, against the float64 reference from its state after the
    timed calls and the check after them (`Timed.reference64`)."""
    referee = session.referee
    inputs = referee.draw(referee.problem.distributions[0], session.seed())
    stage_inputs(session, inputs)  # the profiled call reads the stage, as a clocked one does
    reply = session.request(Profile(id=0, train=referee.problem.mode == "train", place=referee.layout.region))
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
    seen = (f"{count} launch(es): " + ", ".join(dict.fromkeys(kernel_base_name(n) for n in names))[:300]
            if names else "none at all")
    if referee.config.backend == "triton":
        # one launched kernel must be of its @triton.jit functions, by name (before the library filter: an honest
        # `gemm_kernel` is its own); one launched under no such name is no Triton kernel of its own
        jitted = set(triton_kernel_names(session.source))
        mine = [n for n in names if kernel_base_name(n) in jitted]
        own = list(dict.fromkeys([*own, *mine]))
        if not mine:
            session.add([Flag(name="no_custom_kernel", reason=(
                f"one forward launched none of the candidate's @triton.jit kernels "
                f"({', '.join(sorted(jitted)) or 'it has none'}; {seen})"))])
    elif not own:
        where = "GPU kernel" if referee.device == "cuda" else "call into an extension module"
        session.add([Flag(name="no_custom_kernel", reason=f"one forward made no {where} built by the candidate ({seen})")])
    check = spot(session, checked, timed.reference64, reply, inputs, "the profiled call")
    return Profiled(kernels=tuple(names), kernel_times_us=tuple(times), kernel_count=count, custom_kernels=tuple(own),
                    autotuned=tuple(str(a)[:300] for a in reply.autotuned[:32]),
                    check=check)


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
    return begin(session, compile_only, imported).verdict()


@dataclass
class Judgement:
    """A candidate's phases run: their results and how they ended, and the verdict, made once the compared calls left
    for after its executor's last reply (`Timed.rest`, evaluator.referee.replay.Later) are over."""

    session: Session
    results: dict
    outcome: Stop | None
    round: Round | None = None  # the round its windows were timed after: what it divides by, whatever came since
    later_s: float | None = None  # how long the calls left for later took, once `verdict` replayed them

    @property
    def rest(self):
        timed = self.results.get("timed")
        return timed.rest if timed is not None and self.outcome is None else None

    def verdict(self) -> Verdict:
        if (rest := self.rest) is not None:
            try:
                rest.run()
            except (Judged, torch.OutOfMemoryError, RuntimeError) as err:
                self.outcome = stopped(err, Phase.time, "replayed the candidate's calls")
            finally:
                self.later_s = rest.seconds
        return compose(self.session, self.results, self.outcome, self.round)


def stopped(err: BaseException, phase: Phase | None, doing: str) -> Stop:
    """How an exception ends a judgement: `Judged`, as it says; the referee's own copies out of memory (a check's:
    check_phase), `crashed` in `phase`, saying it was `doing` that. Anything else is raised again: the referee's own
    failure, not a verdict on the candidate."""
    if isinstance(err, Judged):
        return Stop(err.status, err.phase, err.error)
    if isinstance(err, (torch.OutOfMemoryError, RuntimeError)) and out_of_memory(err):
        return Stop(Status.crashed, phase, referee_memory_said(doing, err))
    raise err


def begin(session: Session, compile_only: bool, imported: Imported | None = None) -> Judgement:
    """The phases in order (`judge`), the verdict left to `Judgement.verdict`."""
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
                results["timed"] = time_phase(session, checked, built)  # its windows alone `session.exclusive`
                results["profiled"] = profile_phase(session, checked, results["timed"])
                finish(session)
    except (Judged, torch.OutOfMemoryError, RuntimeError) as err:
        outcome = stopped(err, session.phase, "judged the candidate's calls")
    session.leave()
    return Judgement(session, results, outcome, session.referee.current_round if session.referee is not None else None)


def compose(session: Session, results: dict, outcome: Stop | None, current: Round | None = None) -> Verdict:
    """The one place a verdict is made: from the phases' results and how the judgement ended; `current`, the round its
    windows were timed after (else the referee's current one)."""
    referee = session.referee
    checked, timed, profiled = results.get("checked"), results.get("timed"), results.get("profiled")
    status = outcome.status if outcome is not None else Status.correct
    error = outcome.error if outcome is not None else None
    correctness = checked.correctness if checked is not None else None
    if correctness is not None and status == Status.correct:
        correctness = claimed(referee, correctness, timed, profiled)
        if not any(correctness.tiers.values()):
            status, error = Status.incorrect, ("no tolerance tier was passed by every call: the tiers each call "
                                               f"passed do not meet ({correctness.later.tiers})")
    if timed is not None and status != Status.correct:
        timed = None
    timing = timed.timing if timed else None
    figure = timing if timed is not None and timed.resolved else None  # a number the clock resolves, or none
    rounds = (current or referee.current_round) if referee is not None and timing is not None else None
    baselines = dict(rounds.baselines) if rounds is not None else {}
    source = rounds.source if rounds is not None else None
    paired = timed is not None and timed.paired is not None and "eager" in baselines  # eager beside its windows
    if paired:
        baselines["eager"] = timed.paired
        source = source.model_copy(update={"paired": ["eager"]})
    environment = referee.environment.model_copy() if referee is not None else None
    if environment is not None and timed is not None:
        environment.sm_clock_mhz = timed.sm_clock_mhz
    flags = list(session.flags)
    if timing is not None:
        flags += shaky_timing(timing, rounds, referee.config.shaky_spread, referee.config.shaky_drift,
                              paired={"eager": (timed.paired, timed.paired_spread)} if paired else {})
        flags += bounds_flag(referee.config.shaky_spread, referee.config.shaky_drift)
    moved = referee.memory.said() if referee is not None and correctness is not None else None
    if moved:  # informative: every check ran, in host memory
        flags.append(Flag(name="judged_on_host", reason=moved))
    if rounds is not None and rounds.failed:  # a baseline failing is not the candidate's fault
        flags += [Flag(name="baseline_failed", reason=f"baseline `{name}` failed: {why}"[:500])
                  for name, why in rounds.failed.items()]
    return Verdict(
        candidate=session.name, source_sha256=session.digest, problem=session.problem, size=session.size,
        device=session.device, status=status,
        phase=outcome.phase if outcome is not None else (Phase.time if error else None), error=error,
        correctness=correctness,
        runtime_ms=figure.median_ms if figure else None, timing=timing, baselines=baselines,
        baseline_source=source,
        # only over baselines timed as the candidate was (handed off or not): no ratio of two kinds of figure
        speedup={name: stats.median_ms / figure.median_ms for name, stats in baselines.items()
                 if stats.handed_off == figure.handed_off} if figure else {},
        timing_check=timed.check if timed else None, flags=merge_flags(flags),
        kernels=list(profiled.kernels) if profiled else [], kernel_count=profiled.kernel_count if profiled else None,
        kernel_times_us=list(profiled.kernel_times_us) if profiled else [],
        custom_kernels=list(profiled.custom_kernels) if profiled else [],
        autotuned=list(profiled.autotuned) if profiled else [],
        runtime_floor_ms=timed.floor_ms if timed else None,
        roofline=forward_roofline(referee, figure.median_ms) if figure else None,
        phase_seconds=dict(session.phase_seconds), environment=environment)



def claimed(referee: RefereeView, correctness: Correctness, timed: Timed | None, profiled: Profiled | None) -> Correctness:
    """The checks' correctness with every call compared after them (the clocked calls, the state after them,
    the fresh call after timing, the profiled call): a tier is claimed only where every call passed it."""
    later = [acc for acc in (timed.later if timed else None, profiled.check if profiled else None) if acc is not None]
    if not later:
        return correctness
    total = compare.ModeAccumulator(referee.problem.mode, referee.tolerances)
    for acc in later:
        total.merge(acc)
    record = total.record()
    tiers = {tier: passed and record.tiers.get(tier, False) for tier, passed in correctness.tiers.items()}
    return correctness.model_copy(update={"tiers": tiers, "later": record})


def shaky_timing(timing: TimingStats, rounds: Round | None, spread: float = SHAKY_SPREAD,
                 drift: float = SHAKY_DRIFT, paired: dict[str, tuple] | None = None) -> list[Flag]:
    """`shaky_timing`, with every reason, when the candidate's series or a baseline it is divided by is
    beyond the bounds (the published ones, or the user's); else nothing. `paired`: the baselines timed beside the
    candidate's windows (time_phase.Series.figures), each (its figure there, the spread of the candidate's time over
    it window by window): the spread stands for both series' spreads and the round's drift, since what moves both
    alike (a CPU's memory, second to second) cancels in a speedup; the figure may differ from the round's by the drift
    bound at most (what the candidate's processes leave running could slow the windows after its own, eager's among
    them: docs/timing.md). The candidate's own spread still counts where a baseline is not paired."""
    reasons, paired = [], paired or {}
    if rounds is not None and rounds.device_busy:
        reasons.append(f"its baselines were timed while {rounds.device_busy.removeprefix('the ')}")
    unpaired = {name: stats for name, stats in (rounds.baselines if rounds is not None else {}).items()
                if name not in paired}
    if (unpaired or not paired) and timing.median_ms > 0 and timing.iqr_ms / timing.median_ms > spread:
        reasons.append(f"its times spread by {timing.iqr_ms / timing.median_ms:.0%} of their median (IQR)")
    for name, (beside, over) in paired.items():
        if over is None or over > spread:
            reasons.append(f"its times over `{name}`'s beside them spread by {over:.0%} (IQR over median)"
                           if over is not None else f"no spread of its times over `{name}`'s beside them")
        round_ = rounds.baselines.get(name) if rounds is not None else None
        off = beside.median_ms / round_.median_ms - 1 if round_ is not None and round_.median_ms > 0 else None
        if off is not None and abs(off) > drift:
            reasons.append(f"`{name}` beside its windows read {off:+.0%} off the round's ({beside.median_ms:.4g} "
                           f"against {round_.median_ms:.4g} ms)")
    for name, stats in unpaired.items():
        if stats.handed_off != timing.handed_off:  # a candidate whose windows fell back to one call (or the reverse)
            reasons.append(f"baseline `{name}` was timed {_shape(stats)}, the candidate's calls {_shape(timing)}: "
                           "not like for like")
        if stats.median_ms > 0 and stats.iqr_ms / stats.median_ms > spread:
            reasons.append(f"baseline `{name}` spread by {stats.iqr_ms / stats.median_ms:.0%} of its median")
        moved = rounds.moved.get(name)
        if moved is not None and abs(moved) > drift:
            reasons.append(f"baseline `{name}` moved {moved:+.0%} since the previous round")
    if not reasons:
        return []
    return [Flag(name="shaky_timing", reason=("; ".join(reasons) + f" (bounds: {spread:.0%} spread, "
                                               f"{drift:.0%} drift): not ranked")[:500])]


def _shape(stats: TimingStats) -> str:
    return "back to back (handed off)" if stats.handed_off else "a call at a time"


def forward_roofline(referee: RefereeView, median_ms: float) -> Roofline:
    """The accepted median time against the device's peaks, from the referee's own numbers: the problem's
    FLOPs, and the bytes a forward must move (inputs and the reference's parameters and buffers read,
    the output written)."""
    return roofline(referee.problem.flop_count(referee.size),
                    referee.input_nbytes + referee.state_nbytes + referee.output_nbytes, median_ms,
                    referee.device, referee.environment.device_name)
