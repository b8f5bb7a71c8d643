"""The time phase: clocked calls on the referee's clock, each beside a calibrator window, every clocked
call's output and buffers copied out and kept, then a secret sample of them against the replayed float64
reference (evaluator.referee.replay; evaluator.referee.phases runs the phase; evaluator.referee.clock is the
clock).
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import statistics

from evaluator.referee import clock, floor, holding, relay, tuning
from evaluator.referee.calibrator import paired_figures
from evaluator.referee.timing import summarize
from evaluator.wire import handoff
from evaluator.wire.records import Flag, FlagPolicy, Phase, Status, TimingStats
from evaluator.referee.session import Built, Checked, Judged, Session, Timed
from evaluator.referee.view import RefereeView
from evaluator.referee.after_timing import compare_state_after_timing, recheck
from evaluator.referee.replay import Replay


# Bytes of the stage the referee copies out of a series of clocked calls (each call's output and buffers,
# copied inside its window and kept for the replay, evaluator.referee.replay): with the fewest windows a series
# has, it bounds how many calls a series has (at kernelbench, 256 MiB outputs: 23).
SERIES_BYTES = {"cuda": 6 << 30, "cpu": 512 << 20}
# A back-to-back window holds K calls, K chosen so that the window is at least this many times what a window
# costs beyond its calls (as many calls as a loop makes in that time).
WINDOW_OVER_COST = 20
# Windows of K calls back to back after the ranked series, each call compared as any other, never ranked: a
# window's later inputs lie in the stage from its start, so a candidate could batch its calls (one kernel
# reading every input set) or overlap them on streams of its own, and the window would time that, not the
# calls a loop makes one after another (an attacker's review of issue 33's first windows, which ranked).
BACK_TO_BACK_WINDOWS = 2
# The calibrator's calls keep the device busy as long as the candidate's call beside them (`Series.pace_for`), at
# most this long: a window around a longer device call costs more (on H100s at `kernelbench`, paced to at most 1 ms
# the replay's candidate read 5-6% above its own events, paced to its call 0-3%: docs/timing.md), and past 50 ms
# what is left is a few hundredths of the call.
PACE_CAP_MS = float(os.environ.get("KH_PACE_CAP_MS", "50"))  # the variable: tools/experiments/window_gap.py alone
# The cost a pace is worked out with: the median of the calibrator's last windows (each paced already).
PACE_COSTS = 5
# On a GPU, the calibrator's window is beside each ranked window with this chance, drawn from a secret seed after the
# window closed, and beside at least CALIBRATED_LEAST of a series (beside every one on the CPU, whose windows vary
# more): the calibrator's windows were a third of the time phase (0.55 of 2.15 s at `kernelbench` on an H200), and
# beside half of them still 0.37 s a candidate (docs/results.md). The candidate's processes are held and the device
# let go idle between its windows all the same, so each window starts as it did beside a calibrator's: its executor
# just continued.
# At least five: at `kernelbench` a series has ten ranked windows, so the least, not the share, sets the count. A least
# of three saved 0.07 s a candidate on an H200 with the same precision, but three can all fall beside slow windows (an
# honest series on a busy host in up to 1 in 125), and a series with no calibrator beside a usual window has no cost it
# can take off without favouring or failing the candidate (`not_beside_slow`); past four slow windows of ten the median
# is slow, so five always leave one beside a usual window. KH_CALIBRATED_LEAST: for measuring one least against
# another in one run only.
CALIBRATED_SHARE = 0.25
CALIBRATED_LEAST = int(os.environ.get("KH_CALIBRATED_LEAST", str(PACE_COSTS)))
# Void windows (something held beside them ran or died inside them) a candidate's series times again; past these, the
# verdict is `shaky_timing` (Series.retime). The candidate's own processes voiding one are its verdict at once.
MAX_VOID_WINDOWS = 4

# ------------------------------------------------------------------------------------------ time

def time_phase(session: Session, checked: Checked, built: Built) -> Timed:
    """Warm-up windows, then the timed series, one call a window, every window clocked by the referee
    (evaluator.referee.clock: its inputs written into the stage and the call's output and buffers copied out
    inside it), each followed by a window of the calibrator on the same inputs (paced: `Series.pace_for`), with the
    candidate's processes held and the device idle: what a window costs, measured in the same pattern and
    the same minute. Then BACK_TO_BACK_WINDOWS windows of K calls back to back (K: `window_calls`, at least
    2), as a training loop makes them: compared, never ranked. Every clocked call's output and buffers are
    kept; once the windows are closed a secret sample of the calls (evaluator.referee.replay) is compared, in every
    tier, with the float64 reference replaying the same calls; then the reported times against the referee's, the
    physical floor (a figure the clock cannot resolve is shaky and given as no number), the whole state and one more
    checked call. A tier is claimed
    only where every one of these passes it (`Timed.later`); one that passes none is `incorrect`."""
    session.enter(Phase.time)
    referee = session.referee
    series = Series(session, checked)
    # the windows alone hold the device (and its clock) to this candidate: what follows them is the referee's own work
    # and checked calls, beside other lanes' (evaluator.referee.device_share)
    with session.exclusive(session.link, session.excuse), clock.collector_paused():
        opened_busy = getattr(referee, "opened_busy", False)  # another lane's work still ran as its turn began
        series.run(referee.timer.warmup + 1, 1, calibrated="last")
        beside = series.costs[-1] if series.costs else None
        # whether calls are handed off: a call's bytes decide (the referee's `handoff_plan`, as its baselines are
        # timed), never the candidate's warm-up (a candidate slow there alone would choose windows of one call, where
        # its copies are in the cost taken off: an attacker's review). How many calls a window holds: the referee's
        # count, from the reference's call and the calibrator's cost, at least 2; fewer for a candidate slower in its
        # warm-up (a slow candidate's windows of 8 or 40 calls took CI's suite a minute longer), kept only where its
        # ranked windows then last as long as the reference's calls in a window of the referee's count
        # (`Series.short`): one slow in its warm-up alone is timed again with that count
        referees = max(2, window_calls(referee, beside, reference_call_ms(referee)))
        by_candidate = max(2, window_calls(referee, beside, series.windows[-1].ms - (warm_cost(referee, beside) or 0.0)))
        plan = referee.handoff_plan
        together = min(referees, by_candidate)
        calls = relay.window_calls(plan, together, referee.device) if plan is not None else 1
        if plan is not None:  # calls back to back, handed off one by one: they rank (evaluator.referee.relay)
            try:
                series.run(relay.HANDOFF_WARMUP, calls, plan=plan)
            except NoRoom:
                plan = None  # no window on the device here (its baselines were: `shaky_timing`, not like for like)
            series.room_known = True  # later, a `room` reply is the candidate's failure (a reply it chose the time of)
            if plan is None or not series.calibrator_queued(relay.HANDOFF_WARMUP):
                plan, calls = None, 1  # its cost would not be the candidate's: windows of one call rank
        jit_before = series.jit
        timed = series.timed(calls, plan)
        full = relay.window_calls(plan, referees, referee.device) if plan is not None else 1
        retimed = None
        if calls < full and (short := series.short(timed, full * reference_call_ms(referee))) is not None:
            retimed = (f"its windows of {calls} calls lasted {short}; timed again with {full} calls a window, as the "
                       "reference's calls are")
            calls, together = full, referees
            timed = series.timed(calls, plan)
        timing, cost = series.figures(timed)
        jit_in_clock(session, jit_before, series.jit)
        series.run(BACK_TO_BACK_WINDOWS, min(together, referee.layout.sets), beside=False)
        sm_clock = referee.sm_clock()
    if opened_busy:
        session.add([Flag(name="shaky_timing", reason=(
            f"the device was still busy {clock.IDLE_WAIT_S:g} s into its lane's turn on a GPU other lanes share (work "
            "another lane's held processes left queued): its windows may have run beside it"))])
    check = clock.cross_check(series.windows[timed], cost, referee.device)
    check.hold = getattr(session.link, "hold_mechanism", None)
    check.void_windows, check.retimed = series.void, retimed
    check.builds = referee.config.builds
    late = referee.beside.builds_late if hasattr(referee, "beside") else 0
    if late and check.builds:
        check.builds += f" (in {late} of this batch's holds, not all frozen within a second)"
    if not check.agrees:
        session.add([Flag(name="timing_mismatch", policy=FlagPolicy.reject, reason=clock.mismatch_reason(check))])
    replay = series.replay
    ranked = {id(w) for w in series.windows[timed]}
    later = replay.settle(ranked=ranked, defer=True)  # the windows are closed: the calls compared drawn now
    check.compared_calls, check.clocked_calls = replay.compared, replay.count
    check.compared_ranked = replay.ranked_compared(ranked, check.calls)
    compare_state_after_timing(session, replay.module, replay.count, replay.later)
    floor_ms, resolved = floor.check_floor(session, built, timing, cost, calls)
    recheck(session, replay.module, replay.later)
    return Timed(timing=timing, check=check, floor_ms=floor_ms, sm_clock_mhz=sm_clock, later=replay.later,
                 reference64=replay.module, rest=later, resolved=resolved, paired=series.paired,
                 paired_spread=series.paired_spread)


def jit_in_clock(session: Session, before: int | None, after: int | None) -> None:
    """Triton compiled or autotuned during the ranked windows (executor.triton_watch): not the kernel's figure."""
    if before is not None and after is not None and after > before:
        session.add([Flag(name="jit_in_clock", policy=FlagPolicy.reject, reason=(
            f"Triton compiled or autotuned {after - before} time(s) during the ranked windows, after the warm-up "
            "calls (a new specialization, shape or cache each call): that work belongs before the clock"))])


def warm_cost(referee: RefereeView, beside: clock.Clocked | None) -> float | None:
    """What a window of one call cost beside the last warm-up window (else the round's)."""
    if beside is not None and beside.reported_ms is not None:
        return beside.ms - beside.reported_ms
    if referee.current_round is not None and referee.current_round.window_cost is not None:
        return referee.current_round.window_cost.cost_ms
    return None


def window_calls(referee: RefereeView, beside: clock.Clocked | None, call_ms: float) -> int:
    """K: calls of `call_ms` a window holds so that it is at least WINDOW_OVER_COST times its cost, from the
    calibrator's window beside the last warm-up window (1 for calls that long already; at most the stage's input
    sets)."""
    cost = warm_cost(referee, beside)
    if cost is None or cost <= 0:
        return 1
    return max(1, min(referee.layout.sets, math.ceil(WINDOW_OVER_COST * cost / max(call_ms, 1e-3))))


def reference_call_ms(referee: RefereeView) -> float:
    """The reference's call: eager's median in the current round, else one forward timed at the referee's start."""
    eager = referee.current_round.baselines.get("eager") if referee.current_round is not None else None
    return eager.median_ms if eager is not None else referee.reference_ms


class NoRoom(Exception):
    """The executor could not have windows on the device (relay.device_window): before any call ran."""


class Series:
    """A candidate's clocked windows, each beside a calibrator window and compared as soon as it is over."""

    def __init__(self, session: Session, checked: Checked):
        self.session, self.checked = session, checked
        referee = session.referee
        self.train = referee.problem.mode == "train"
        self.replay = Replay(session, checked)  # every clocked call kept; the float64 replay of a secret sample
        self.windows: list[clock.Clocked] = []
        self.costs: list[clock.Clocked] = []  # the calibrator's windows beside them
        self.paces: list[float] = []          # the device time each of the calibrator's calls was to take (`pace_for`)
        self.beside_at: list[int | None] = []  # per window, its calibrator's window in `costs` (None: none beside it)
        self.uncalibrated = False             # a calibrator's window failed where one was to be beside a window
        self.sample_size: int | None = None   # how many of a "sample" run's windows get one (`beside_here`)
        # where the calibrator is beside: a 256-bit key's seed (a 31-bit one could be searched from the draws it saw)
        self.draw = random.Random(int.from_bytes(session.keys.derive("calibrated windows").key, "big"))
        self.room_known = False               # whether windows on the device were tried (`NoRoom` before that only)
        self.void: list[str] = []             # the windows timed again, each with why it was void (`retime`)
        self.jit: int | None = None           # the executor's Triton compiles and autotune runs, after the last window
        # eager beside each window on the CPU (calibrator.EagerBeside), its windows by the candidate's, figure, spread
        eager = referee.eager_beside if referee.device == "cpu" and session.eager_beside else None  # (not the twin's)
        self.eager = eager if eager is not None and not eager.broken else None
        self.paired_at, self.paired, self.paired_spread = [], None, None

    def timed(self, calls: int = 1, plan: handoff.Plan | None = None) -> slice:
        """The ranked series, windows of `calls` calls (handed off one by one where `plan` says where, else one call a
        window): as many windows as the timing budget allows (at least the timer's fewest, and no more calls than
        SERIES_BYTES hold); the slice of `windows` it took."""
        referee = self.session.referee
        timer = referee.timer
        first = len(self.windows)
        estimate = max(self.windows[-1].per_call_ms * calls, 1e-3)  # one window's ms, from the last one's calls
        if self.paired_at and self.paired_at[-1] is not None:  # and eager's beside it: a fast candidate's windows
            estimate += self.paired_at[-1].per_call_ms * calls  # are not a slow eager's
        fit = max(1, SERIES_BYTES[referee.device] // (calls * referee.layout.span))
        if plan is not None:
            fit = min(fit, max(1, relay.HANDOFF_SERIES_CALLS // calls))
        self.run(timer.reps_for(estimate, cap=fit), calls, plan=plan, calibrated="sample")
        return slice(first, len(self.windows))

    def short(self, timed: slice, reference_window_ms: float) -> str | None:
        """How long the windows of `timed` lasted, where the median is under `reference_window_ms` (what the
        reference's calls last in a window of the referee's count); None where it is not. Shorter windows would weigh
        the cost taken off each one more than in the reference's windows: a multiplier of the candidate's choosing."""
        median = statistics.median(w.ms for w in self.windows[timed])
        if median >= reference_window_ms:
            return None
        return f"{median:.4g} ms (median), under the {reference_window_ms:.4g} ms of the reference's calls in a window"

    def figures(self, timed: slice) -> tuple[TimingStats, clock.WindowCost | None]:
        """The series' per-call figures (each window less the cost beside it, over its calls), and that cost:
        the calibrator's windows beside these (on a GPU, those beside windows no slower than the series' median plus
        its spread: `not_beside_slow`), or the round's where it failed (flag `uncalibrated`)."""
        session, referee = self.session, self.session.referee
        windows = self.windows[timed]
        pairs = [(w, self.costs[i]) for w, i in zip(windows, self.beside_at[timed]) if i is not None]
        # on the CPU no calibrator window is paced (`pace_for`): a slow window's beside costs what any other's does
        beside = [] if self.uncalibrated else (
            not_beside_slow(pairs, windows) if referee.device == "cuda" else [cost for _, cost in pairs])
        cost = clock.window_cost(beside) if beside else None
        # the round's cost is a window of one call's: never taken off calls handed off back to back
        if cost is None and referee.current_round is not None and not windows[0].handed_off:
            cost = referee.current_round.window_cost
        if cost is None:
            session.add([Flag(name="uncalibrated", reason=(
                f"the calibrator could not measure what a clocked window costs ({referee.calibrator.error}): the "
                "times are whole windows, longer than the calls"))])
        tuning.profile_windows(session.name, windows, beside)
        stats = summarize(clock.referee_times(windows, cost.cost_ms if cost else 0.0), timed.start)
        paired, figures = self.paired_at[timed], None  # eager's beside each window (calibrator.paired_figures)
        if self.eager is not None and cost is not None and not self.uncalibrated:
            figures = paired_figures(windows, paired, cost.cost_ms, timed.start) if None not in paired else None
            if figures is None:  # never a choice between eager beside and the round's for a ranked figure
                why = self.eager.error or "a window all cost"
                session.add([Flag(name="shaky_timing", reason=f"eager's windows beside its own gave no figure ({why}): not ranked")])
        self.paired, self.paired_spread = figures or (None, None)  # None: the round's eager stands
        return stats.model_copy(update={"handed_off": windows[0].handed_off}), cost

    def run(self, count: int, calls: int, beside: bool = True, plan: handoff.Plan | None = None,
            calibrated: str = "every") -> None:
        """`count` more windows of `calls` calls back to back, each call on fresh inputs drawn here (outside the
        window) from a seed of its own; after each window, the inputs it was given must be as the referee wrote
        them. Each window is followed by one of the calibrator's on the same inputs (the pattern a window's
        cost depends on), run with the candidate's processes held and only once the device has no work of
        theirs left, so that nothing the candidate does can make the calibrator's windows, and so a window's
        cost, dearer (`beside` false: windows that are compared only, never timed, have none). With `plan`, the
        window's calls are handed off one by one through the exchange, and so are the calibrator's (evaluator.referee.
        relay). Each call's output and buffers, as the window copied them, are kept for the replay (`Replay.keep`).
        On a GPU, `calibrated` "last" puts a calibrator's window beside the last window only, "sample" beside a secret
        sample of them (`beside_here`)."""
        session = self.session
        referee = session.referee
        stage = session.link.stage
        made = beside_so_far = 0
        self.sample_size = None  # drawn once this run's first window has closed
        while made < count:
            seeds = [session.seed() for _ in range(calls)]  # the replay draws a kept call's inputs again from its seed
            input_sets = [self.replay.inputs(seed) for seed in seeds]
            if beside:
                referee.held_elsewhere_broken()  # what happened before this window is no part of it
            # the calibrator held through the candidate's window as the candidate is through the calibrator's:
            # each window then starts with its executor just continued, the pattern a window's cost depends on
            with held(referee.calibrator.link), held(self.eager.link if self.eager else None):
                if plan is not None:
                    clocked = relay.window(session.request, session.link.exchange, plan, input_sets, self.train,
                                           referee.device, stage=stage, give_up=lambda: session.link.kill(wait_s=5))
                else:
                    clocked = clock.window(session.request, stage, referee.layout, input_sets, self.train,
                                           referee.timer.flush, session.keys.next_unit("place"))
            why = referee.held_elsewhere_broken() if beside else None
            void = [f"in it, {why}"] if why else []
            first = self.replay.count + 1
            what = f"clocked call {first}" if calls == 1 else f"the window of clocked calls {first}-{first + calls - 1}"
            if clocked.go.error_kind == "room" and plan is not None and plan.on_device and not self.room_known:
                raise NoRoom(clocked.go.error)
            if clocked.go.error:
                raise Judged(Status.runtime_error, Phase.time, clocked.go.error)
            if clocked.go.jit_events is not None:
                self.jit = clocked.go.jit_events
            # (a handed-off call reads its inputs from the exchange into memory of its own, or on the device reads the
            # stage, where the relay compares the last call's inputs after the window: no stage to read back here)
            changed = clock.inputs_changed(stage, referee.layout, input_sets) if plan is None else []
            if changed:
                raise Judged(Status.incorrect, Phase.time, (
                    f"the candidate modified its input(s) {sorted({p for _, p in changed})} in place "
                    f"(clocked call {first + changed[0][0]})"))
            if plan is not None and plan.on_device:
                self.room_known = True  # a window on the device ended: a `room` reply later is the candidate's own
            if not beside:
                self.replay.keep(clocked, seeds)
                made += 1
                continue
            wanted = self.beside_here(calibrated, count - made, beside_so_far)
            calibrated_window, paced, paired = self.calibrate(clocked, input_sets, plan, what, void, wanted)
            self.replay.keep(clocked, seeds)
            if void and self.retime(what, void):
                continue  # neither the window nor the calibrator's beside it is kept: timed again
            self.windows.append(clocked)
            self.beside_at.append(None)
            self.paired_at.append(paired)  # None where the calibrator's is (`calibrate`)
            if calibrated_window is not None:
                self.beside_at[-1] = len(self.costs)
                self.costs.append(calibrated_window)
                self.paces.append(paced)
                beside_so_far += 1
            elif wanted:
                self.uncalibrated = True
            made += 1

    def beside_here(self, calibrated: str, left: int, beside_so_far: int) -> bool:
        """Whether a calibrator's window goes beside the window just closed (`left`: it and those after it in this
        run): drawn now, from the series' secret seed, where `calibrated` is "sample"; beside the last only for "last";
        beside every one on the CPU. A sample is as many windows as a CALIBRATED_SHARE chance each gives, at least
        CALIBRATED_LEAST (its size drawn once the run's first window has closed), at places uniformly at random: each
        window is beside with the chance that what is still to place has among the windows left (selection sampling).
        So every place is as likely as any other: a rule that made up the least with the run's last windows would put a
        calibrator beside the last of ten at `kernelbench` 96 times in 100 and beside the first 25, a pattern a
        candidate could time its slow windows to."""
        if calibrated == "every" or self.session.referee.device != "cuda":
            return True
        if calibrated == "last":
            return left == 1
        if self.sample_size is None:
            drawn = sum(self.draw.random() < CALIBRATED_SHARE for _ in range(left))
            self.sample_size = min(left, max(CALIBRATED_LEAST, drawn))
        return self.draw.random() * left < self.sample_size - beside_so_far

    @tuning.costed("calibrator")
    def calibrate(self, clocked: clock.Clocked, input_sets: list[list], plan: handoff.Plan | None, what: str,
                  void: list[str], wanted: bool = True) -> tuple[clock.Clocked | None, float, clock.Clocked | None]:
        """The calibrator's window beside the candidate's `clocked` one where `wanted` (see `run`), with the
        candidate's processes held and the device idle before and after it (also where none is wanted); its pace; then
        eager's on the same inputs where it is beside (`eager`: on the CPU), each held through the other's window.
        Why it is void is added to `void`. Where the candidate's frozen group was charged CPU time alone
        (evaluator.wire.cgroups.Moved), its window, closed before the hold, stands, and the calibrator's and eager's
        are taken again in a fresh hold (at most MAX_VOID_WINDOWS times a candidate, then its verdict)."""
        session = self.session
        referee = session.referee
        paced = self.pace_for(clocked) if wanted else 0.0
        while True:
            calibrated, paired = None, None
            with held(session.link):
                try:
                    idle(session, f"after {what} had returned")
                    if wanted:
                        with held(self.eager.link if self.eager else None):
                            calibrated = referee.calibrator.window(input_sets, paced, plan)
                        idle(session, f"through the calibrator's window after {what}")
                        if self.eager is not None and calibrated is not None:
                            with held(referee.calibrator.link):
                                paired = self.eager.window(input_sets, 0.0, plan)
                except SharedBusy as busy:
                    void.append(str(busy))
                    return None, 0.0, None
                around = "around the calibrator's window" if wanted else "between its windows"
                own = session.link.ran_while_held() if hasattr(session.link, "ran_while_held") else None
                if own and not (getattr(own, "cpu_time_alone", False) and len(self.void) < MAX_VOID_WINDOWS):
                    raise Judged(Status.runtime_error, Phase.time, (
                        f"held {around} after {what}, its processes did what held processes cannot unless they "
                        f"arranged it ({own}): a window void on purpose (that window's cost, taken off every call, "
                        "cannot be trusted)"))
                if why := referee.held_elsewhere_broken():
                    void.append(f"in the calibrator's window beside it, {why}" if wanted else f"while held after it, {why}")
            if own:
                self.void.append(f"held {around} after {what}, its own frozen group: {own}")
            if not own or void or not wanted:
                return calibrated, paced, paired

    def retime(self, what: str, void: list[str]) -> bool:
        """A void window (something held beside it ran or died in it or in the calibrator's beside it, or the candidate's
        frozen group was charged CPU time alone): whether it is timed again (up to MAX_VOID_WINDOWS a candidate); past
        them it is kept and the verdict flagged `shaky_timing`, never ranked."""
        self.void.append(f"{what}: {'; '.join(void)}")
        if len(self.void) <= MAX_VOID_WINDOWS:
            return True
        if len(self.void) == MAX_VOID_WINDOWS + 1:
            self.session.add([Flag(name="shaky_timing", reason=(
                f"{len(self.void)} windows were void, something held beside them running or dying inside them "
                f"(first: {self.void[0]}); after {MAX_VOID_WINDOWS} were timed again the rest were kept: not ranked"))])
        return False

    def calibrator_queued(self, last: int) -> bool:
        """Whether the calibrator's last `last` windows (handed off) had their calls queued on the device as a GPU
        candidate's are (its own word: it is the referee's code): on the host its calls cost about twice as much, and
        the cost taken off a queued candidate's windows would be too large. Always true on the CPU (no queue)."""
        if self.session.referee.device != "cuda":
            return True
        recent = self.costs[-last:]
        return len(recent) == last and all(c.go.queued for c in recent)

    def pace_for(self, clocked: clock.Clocked) -> float:
        """How long each call of the calibrator's window beside the last window is to keep the device busy (CUDA): the
        candidate's call by the referee's clock (the median of its last PACE_COSTS windows, never more than the last
        one), less the median cost of the calibrator's last windows (else the round's), less the calibrator's own copy,
        at most PACE_CAP_MS; so its windows cost what the candidate's cost around a call that long. Why the median and
        why the bound by the window itself (a candidate lengthening the pace beside its fast windows): docs/timing.md,
        "The pace". Paced windows hold one call each (back-to-back windows have no calibrator beside them)."""
        referee = self.session.referee
        if referee.device != "cuda":
            return 0.0
        # per call, from the calibrator's last windows of as many calls as this one (handed off or not)
        calls = clocked.calls
        recent = [((c.ms - c.reported_ms) / c.calls, c.reported_ms / c.calls - pace)
                  for c, pace in zip(self.costs[-PACE_COSTS:], self.paces[-PACE_COSTS:])
                  if c.reported_ms is not None and c.calls == calls]
        cost = statistics.median(c for c, _ in recent) if recent else warm_cost(referee, None)
        if cost is None:
            return 0.0
        # never longer than the window beside it: only a slow window gets a long pace, so long paces never outnumber
        # slow windows, and the median cost is never one of paces longer than the median window's
        call = min(clocked.per_call_ms,
                   statistics.median(w.per_call_ms for w in [*self.windows[-PACE_COSTS + 1:], clocked] if w.calls == calls))
        own = recent[-1][1] if recent else 0.0  # the calibrator's own device work beyond its pace (its copy)
        return min(PACE_CAP_MS, max(0.0, call - cost - max(own, 0.0)))


def not_beside_slow(pairs: list[tuple[clock.Clocked, clock.Clocked]], windows: list[clock.Clocked]) -> list[clock.Clocked]:
    """The calibrator's windows of `pairs` (each with the window it was beside) beside windows no slower per call than
    the median of `windows` plus twice their median absolute deviation (at least 1% of the median); where none is, the
    one beside the fastest.

    Why: a calibrator beside a slow window is paced long (`Series.pace_for`), and a long pace's dearer cost, taken off
    every window, would make a candidate's fast windows faster. With about five calibrator windows in ten, slow warm-up
    windows and the first four ranked ones slow put three long-paced costs of five in the median in about a quarter of
    series, the ranked median still a fast window's (an attacker's review). A cost from a shorter pace is cheaper,
    taken off less: never in the candidate's favour. The deviation is at most the median's lead over the fastest call,
    so a kept window's call is at most three such leads longer than the fastest: slowing windows to widen the bound
    pays only where a window's cost grows by a third of each ms of pace (about 0.06 on H100s, docs/timing.md). Twice
    the deviation keeps about nine in ten of an honest series' calibrator windows."""
    if not pairs:
        return []
    calls = [w.per_call_ms for w in windows]
    median = statistics.median(calls)
    bound = median + max(0.01 * median, 2 * statistics.median(abs(c - median) for c in calls))
    kept = [cost for window, cost in pairs if window.per_call_ms <= bound]
    return kept or [min(pairs, key=lambda pair: pair[0].per_call_ms)[1]]


def idle(session: Session, when: str) -> None:
    """The device has no work of any other process left (its processes held, the candidate can add none).
    Executors started ahead may have queued work at import: when the device stays busy they are stopped
    for good (started again in their turn) before the candidate is blamed."""
    waited = session.referee.device_idle(clock.IDLE_WAIT_S)
    if waited is None and session.referee.close_waiting():
        waited = session.referee.device_idle(clock.IDLE_WAIT_S)
    if waited is not None:
        session.charge(waited)  # the candidate's own work: its time, though between its calls
    if waited is None and getattr(session.referee, "opened_busy", False):
        raise SharedBusy(f"the device stayed busy {when}, for {clock.IDLE_WAIT_S:g} s with the candidate's processes "
                         "stopped; its lane's turn on a GPU other lanes share began with the device busy, and work "
                         "another lane's held processes queued could be it")
    if waited is None:
        raise Judged(Status.runtime_error, Phase.time, (
            f"device work kept running {when}, for {clock.IDLE_WAIT_S:g} s with the candidate's processes "
            "stopped: work left queued could make the calibrator's windows, and so a window's cost, dearer"))


class SharedBusy(Exception):
    """The device stayed busy between a candidate's windows, in a turn that began with another lane's work still on the
    GPU (`idle`): perhaps that work, so not this candidate's verdict: the window is void (`Series.run`: timed again). In
    a turn that began idle nothing but its own can run (device_share.timed_turn): then it is its verdict."""


@contextlib.contextmanager
def held(link):
    """The candidate's processes stopped (SIGSTOP): nothing of theirs can start on the device meanwhile,
    or take a core or this process's time (its output is not read meanwhile)."""
    hold, release = getattr(link, "hold", None), getattr(link, "release", None)
    if hold is not None:
        try:
            hold()
        except holding.NotHeld as err:
            raise Judged(Status.runtime_error, Phase.time, f"the executor could not be held still around the "
                                                           f"calibrator's window: {err}") from None
    try:
        yield
    finally:
        if release is not None:
            release()
