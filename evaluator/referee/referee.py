"""The referee: the process that judges, for one batch on one device, and never runs candidate code.

    python -m evaluator.referee --config FILE --requests FD --replies FD

Started by the parent (evaluator.parent.sandbox) once per batch. It owns everything a judgement rests on:

* the reference (`Model` from the problem, a fresh one per candidate, with its own seed) and its
  float64 twin, the seeds, every checked call's inputs, the tolerances and every comparison (evaluator.referee.phases);
* the baselines (eager, torch.compile, with and without TF32, the problem's ceilings), timed here with the same timing
  loop as the candidates (evaluator.referee.timing), in rounds: one before the batch's first candidate, again after
  every `baseline_every` candidates and once at the end, always with no executor alive on the device (or figures
  stored from an earlier batch, one baseline spot-checked: evaluator.referee.stored). A verdict divides by the last
  round before it and names it (`Verdict.baseline_source`); the rounds come back to the parent when the batch closes,
  so drift shows;
* its own clock around every clocked call of a candidate (evaluator.referee.clock), and the cost of such a window,
  measured in every baseline round with the calibrator: an executor of the referee's own (contained like any other,
  the same code and path) whose forward does known work and reports its device time truthfully (`Calibrator`).

Per candidate: one executor (evaluator.referee.process, contained by evaluator.executor.lockdown), the phases, and the
verdict and capped output to the parent (JSON lines: evaluator.wire.protocol).
"""

from __future__ import annotations

import contextlib
import functools
import secrets
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from evaluator.referee import (
    ahead, baselines, clock, device_share, forking, memory, phases, relay, stored as stored_baselines, tuning, twin)
from evaluator.referee.environment import cpu_call_cores
from evaluator.referee.session import Session, candidate_text, own_credit, release_cached, run_limit
from evaluator.referee import inputs as draws
from evaluator.referee.calibrator import EAGER_BESIDE, Calibrator, EagerBeside
from evaluator.referee.keys import Keys
from evaluator.referee.beside import Beside, close_ahead
from evaluator.referee.process import ExecutorProcess
from evaluator.referee.settling import reply
from evaluator.referee.timing import Timer, launched_kernels
from evaluator.referee.tuning import Laps, profile_log
from evaluator.referee.view import Round
from evaluator.wire import cgroups, handoff, identity
from evaluator.wire.exchange import DTYPES, Exchange, ExchangePool, capacity_for, dtype_name, nbytes_of
from evaluator.referee.matched import matched_tolerance
from evaluator.wire.problem import import_file, load_problem, reference_as_candidate
from evaluator.wire.tiers import MATCHED_TIER, PRECISION_DTYPES, tolerances_for
from evaluator.wire.protocol import (
    BaselineRound, Construct, JudgeReply, JudgeRequest, RefereeConfig, TensorSlot, pack)
from evaluator.wire.records import BaselineSource, TimingStats
from evaluator.wire.stage import Layout

FIRST_ROUND_WARM_S = 0.5  # each baseline's untimed run before the batch's first round (warm_baselines)
EARLY_WARM_FRESH_S = 3.0  # a warm-up run this recently before the first round needs no second one (warm_seconds)
ROUND_MAX_AGE_S = 600.0  # a candidate never divides by a round older than this (ensure_round)
# A stage holds input sets for windows of up to MOST_CALLS calls back to back, within these bytes (each
# executor's stage, those started ahead included; at kernelbench, 512 MiB a call: windows of up to 5).
STAGE_BYTES = {"cuda": 3 << 30, "cpu": 32 << 20}
MOST_CALLS = 256


class Referee:
    """One batch's judge (see the module's docstring)."""

    def __init__(self, config: RefereeConfig, zygote: forking.Zygote | None = None):
        laps = Laps()  # the start's steps, for the profile (__main__'s start event)
        self.config = config
        self.zygote = zygote  # what the batch's executors are forked from (None: each a fresh interpreter)
        self.call_cores = cpu_call_cores() if config.device == "cpu" else None  # on the CPU: one core left out
        self.reference64_peak: int | None = None  # measured on the first checked call (check_phase.reference_output)
        self.problem = load_problem(config.problem)
        self.size, self.device = config.size, config.device
        self.batch = secrets.token_hex(4)
        self.keys = Keys()  # the batch's secret: every seed derives from it (evaluator.referee.keys)
        # each executor's cgroup lies below this one (frozen to hold it), made with the first executor
        self.groups: cgroups.Group | None = None
        # what `exclusive` holds beside the executor being timed: the batch's builds' cgroup (where this lane freezes
        # one: they do not run on cores of their own), the executors started ahead
        self.beside = Beside(cgroups.Group(Path(config.builds_group)) if config.builds_group else None,
                             lambda process: close_ahead(self.waiting, process))
        self.precision = config.precision
        self.dtype = DTYPES[PRECISION_DTYPES[config.precision]]  # what inputs, weights and buffers are cast to
        self.tolerances = tolerances_for(self.problem.tolerances, self.precision)  # `matched` added once measured
        self.rel_floor = min(t.atol for t in self.tolerances.values())
        # its turns on a GPU other lanes share (evaluator.referee.device_share): the shared one before its first device work
        self.share, self.opened_busy = device_share.open_for(config, self.device), False
        self.environment = identity.describe_environment(self.device)
        self.module = import_file(self.problem.reference_path, "kh_reference")
        wanted = config.eager_as_candidate and twin.TIMED in config.baselines  # eager's twin (evaluator.referee.twin)
        self.twin_source = reference_as_candidate(self.problem.reference_path.read_text(),
                                                  self.problem.size_values(self.size)) if wanted else None
        self.twin = twin.request(self.twin_source) if self.twin_source is not None else None
        for name, value in self.problem.size_values(self.size).items():
            setattr(self.module, name, value)
        self.init_inputs = self.module.get_init_inputs()
        laps("problem")
        self.specs, self.fixed, self.values = draws.input_specs(draws.templates_of(self.module.get_inputs), self.dtype)
        self.input_sizes = draws.tensor_sizes(self.specs, self.fixed)
        self.input_nbytes = sum(self.input_sizes)
        self.timer = Timer(self.device, config.timing_budget_s, config.min_reps, config.max_reps, config.warmup)
        torch.set_float32_matmul_precision("highest")  # the fp32 reference is real fp32
        probe = self.new_reference(self.keys.next_seed("reference"))
        state = probe.state_dict()
        self.state_names = list(state)  # the only state an executor ships (Construct.state_names)
        self.state_sizes = [v.numel() * v.element_size() for v in state.values()]
        self.state_nbytes = sum(self.state_sizes)
        sample = self.draw(self.problem.distributions[0], self.keys.next_seed("probe"))
        with torch.no_grad():
            out = probe(*sample)
        self.output_shape, self.output_dtype = list(out.shape), dtype_name(out.dtype) or str(out.dtype)
        self.output_nbytes = out.numel() * out.element_size()
        laps("probe")
        self.buffer_names = [name for name, _ in probe.named_buffers()]
        staged = [(i, s.shape, s.dtype) for i, s in enumerate(self.specs) if s.kind == "random"]
        staged += [(i, list(t.shape), dtype_name(t.dtype)) for i, t in self.fixed.items()]
        self.layout = Layout.plan(sorted(staged), self.output_nbytes, [b.numel() * b.element_size() for b in probe.buffers()],
                                  budget=STAGE_BYTES[self.device], most=MOST_CALLS)
        # the GPU's memory, shared out among the lanes taking turns on it (evaluator.referee.device_share)
        total = torch.cuda.mem_get_info()[1] // config.device_lanes if self.device == "cuda" else 0
        self.memory = memory.plan(self.device, total, self.layout.size, self.input_nbytes, self.output_nbytes,
                                  self.state_nbytes, config.ahead, beside=int(self.twin is not None))
        self.judge_device = self.memory.judge_device  # where the float64 reference and the comparisons live
        laps("memory plan")
        self.reference_ms = baselines.forward_ms(self, probe, sample)
        laps("reference timed")
        self.stream_delay_ms = min(500.0, 20.0 + 4 * self.reference_ms) if self.device == "cuda" else 0.0
        self.reference_kernels = launched_kernels(probe, sample) if self.device == "cuda" else []
        del probe, sample, out
        laps("kernels listed")
        self.tolerances[MATCHED_TIER] = matched_tolerance(self, self.dtype)
        release_cached(self.device)  # its float64 copies: the executors' memory, not the referee's cache
        laps("matched tier")
        self.baseline_model = self.new_reference(self.keys.next_seed("reference"))
        # where ranked calls are handed off back to back, or None (a call's bytes decide: relay.plan_for), candidates'
        # and baselines' alike (through host memory, each call's copies in its time; on the device, none for baselines)
        self.handoff_plan = relay.plan_for(self)
        self.compiled: dict[str, torch.nn.Module] = {}
        self.warmed_early: dict[str, float] = {}  # when the first round's early warm-up of each baseline ended
        self.rounds, self.current_round = [], None  # BaselineRound each, and the Round verdicts divide by
        self.cache_dropped, self.spot_check_read, self.spot_plan = None, {}, None  # evaluator.referee.stored's
        self.buffer_use: tuple[set[str], bool] | None = None  # replay.state_use, probed by the batch's first candidate
        self.cached_said = ""  # what the verdicts dividing by stored figures say of them
        self.judged, self.timed_since_round, self.sessions = 0, 0, 0  # sessions: candidates begun (their keys' numbers)
        self.round_due = False  # a round before the next candidate: a twin's later replay left its round without eager
        self.waiting: dict[tuple[str, str], ExecutorProcess] = {}  # started ahead, by (path, digest)
        self.closing: list[threading.Event] = []  # set once a judged executor is closed
        self.exchanges = ExchangePool(ready=lambda: self.device != "cuda" or self.device_idle(1.0) is not None)
        self.calibrator = Calibrator(self)
        # on the CPU, eager timed beside each candidate's windows too, where eager is judged as a candidate (its twin)
        self.eager_beside = EagerBeside(self) if self.device == "cpu" and self.twin is not None and EAGER_BESIDE else None
        self.idle_probe: torch.Tensor | None = None  # device_idle's tiny kernel's operand
        self.queued: Callable[[], list[JudgeRequest]] = list  # the requests waiting behind (main's inbox)
        # whether the parent's gate is over, once it is or within `timeout` s (main's inbox: its `gated` event's wait)
        self.gate_over: Callable[..., bool] = lambda timeout=None: True
        laps("the rest")
        self.start_seconds = laps.seconds

    # -- the reference -----------------------------------------------------------------------------

    def new_reference(self, seed: int) -> torch.nn.Module:
        """A fresh reference Model (torch seeded with `seed`), made on the device (drawn on the CPU, its weights took
        0.2-0.6 s a candidate at kernelbench), then cast to the problem's precision as KernelBench casts it
        (`model.to(dtype)`: every floating parameter and buffer)."""
        torch.manual_seed(seed)
        with torch.device(self.device):
            model = self.module.Model(*self.init_inputs).to(self.device)
        return model if self.dtype == torch.float32 else model.to(self.dtype)

    def draw(self, distribution: str, seed: int) -> list:
        return draws.draw(self.specs, distribution, seed, self.device, self.fixed, self.values)

    def exchange_tensors(self, exchange: Exchange) -> list[TensorSlot]:
        """The fixed (non-random) tensor inputs, shipped once with `construct`."""
        return exchange.write([(f"input.{i}", t) for i, t in self.fixed.items()])

    def construct(self, fixed: list[TensorSlot], seed: int) -> Construct:
        """Build ModelNew (torch seeded with `seed`), knowing the forward's inputs and the stage's layout."""
        return Construct(id=0, init_inputs=pack(self.init_inputs), seed=seed, dtype=dtype_name(self.dtype),
                         inputs=self.specs, fixed=fixed, values=pack(self.values), stream_delay_ms=self.stream_delay_ms,
                         staged=list(self.layout.inputs), sets=self.layout.sets, set_stride=self.layout.stride,
                         staged_state=self.buffer_names, state_names=self.state_names)

    @property
    def handed_off(self) -> bool:
        return self.handoff_plan is not None

    @property
    def exchange_bytes(self) -> int:
        """Room for the largest thing an exchange carries (calls' inputs and outputs go through the stage): the fixed
        inputs, the reference's parameters and buffers, and a call's state after it at twice their bytes (float64
        statistics where the reference keeps float32 are compared, not refused), each aligned on its own; a handed-off
        window (through host memory; on the device, its header)."""
        return max(capacity_for(*map(nbytes_of, self.fixed.values())), capacity_for(*(2 * n for n in self.state_sizes)),
                   relay.exchange_room(self.layout, self.device), handoff.HEADER)

    def sm_clock(self) -> int | None:
        """Read straight after a candidate's timed calls: read before them it shows the idle clock."""
        return identity.read_sm_clock_mhz() if self.device == "cuda" else None

    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def close_waiting(self, keep: JudgeRequest | None = None) -> bool:
        """Close every executor started ahead but `keep`'s (each is started again in its turn); whether there was one."""
        waiting = [p for key, p in self.waiting.items() if keep is None or key != (keep.path, keep.digest)]
        for process in waiting:
            close_ahead(self.waiting, process)
        return bool(waiting)

    def device_idle(self, limit_s: float) -> float | None:
        """Seconds waited until no other process has work on the device (clock.device_idle)."""
        if self.idle_probe is None:
            self.idle_probe = torch.zeros(1, device=self.device)
        return clock.device_idle(self.idle_probe, limit_s)

    # -- baselines ---------------------------------------------------------------------------------

    def ensure_round(self, defer: bool = False) -> None:
        """A baseline round before the first candidate, after every `baseline_every` timed ones, and before one timed
        more than ROUND_MAX_AGE_S after the last (a warm judge of a training loop or a service idles between calls);
        `defer`: a candidate follows it (baseline_round)."""
        if (self.current_round is None or self.timed_since_round >= self.config.baseline_every or self.round_due
                or time.time() - self.current_round.source.measured_at > ROUND_MAX_AGE_S):
            self.baseline_round(defer)

    def baseline_round(self, defer: bool = False) -> Round:
        """Every baseline timed once more (or stored figures spot-checked), and the loop's own cost per call, no executor
        running (those started ahead stopped; torch.compile compiles before); then eager's twin judged (`defer`: its
        compared calls left for later replayed beside the candidate that follows, evaluator.referee.twin)."""
        started = time.perf_counter()
        device_share.take_turn(self)
        if not self.rounds:
            self.warm_baselines(early=True)
        for own in self.measuring():
            own.start_early()
        self.start_ahead([self.twin] if self.twin else [])  # its imports overlap the compile (held while anything is timed)
        self.compile_baselines()
        self.start_ahead(self.queued())  # requests that came while it compiled: their imports overlap the round
        for own in self.measuring():
            own.prepare()
        compiled = time.perf_counter()
        costs = tuning.take_spent()  # the round's own (the twin's are the twin's)
        # after a round, the twin before the baselines are timed: its start and checks overlap the replay of the
        # compared calls the candidate before left for later, which the round's exclusive turn would wait for
        ran = twin.run(self, len(self.rounds), defer) if self.twin and self.current_round and twin.FIRST else None
        with self.exclusive():
            previous = self.current_round  # settled: a twin's calls left for later are over (`exclusive`)
            round_ = self._baseline_round(busy=self.wait_for_idle_device())
        timed = time.perf_counter()
        costs = {**costs, **{k: costs.get(k, 0) + v for k, v in tuning.take_spent().items()}}
        round_ = twin.judged_round(self, round_, previous, defer, ran) if self.twin is not None else round_
        profile_log({"event": "baseline_round", "index": round_.source.round, "compile_s": compiled - started,
                     "round_s": timed - compiled - (ran.seconds if ran else 0.0), "twin_first": ran is not None,
                     "twin_s": time.perf_counter() - timed + (ran.seconds if ran else 0.0), "costs": costs,
                     "stored": self.rounds[-1].stored, "cached": self.cached_said or None})
        return round_

    def measuring(self) -> list[Calibrator]:
        """The referee's own executors: the calibrator, and eager beside a CPU candidate's windows where it has it."""
        return [c for c in (self.calibrator, self.eager_beside) if c is not None]

    def close_later(self, process: ExecutorProcess) -> threading.Event:
        """A judged executor closed in the background (tenths of a second; over before anything is timed): set once."""
        self.closing.append(closed := threading.Event())
        process.will_close()
        threading.Thread(target=_closing, args=(process, closed), daemon=True).start()
        return closed

    def compile_baselines(self) -> None:
        """torch.compile's compilations (CPU work, tens of seconds the first time) before the round, where no
        candidate runs beside (baselines.may_compile); with stored figures, its spot checks' (stored.warm_spot_checks)."""
        if self.config.cached_baselines and not self.cache_dropped:
            return stored_baselines.warm_spot_checks(self)
        for name in self.config.baselines:
            if name.startswith("compile") and name not in self.compiled and baselines.may_compile(self):
                self.run_untimed(name, calls=1)

    def warm_baselines(self, early: bool = False, only: list[str] = (), seconds: float | None = None) -> None:
        """Before the batch's first round: each baseline (`only`: those) runs untimed for FIRST_ROUND_WARM_S (`seconds`
        where given; at least the warm-up's calls), so the first round is not measured cold (thread pools, allocator,
        clocks: a CPU's first round once read eager at 8.9 ms and the next at 1.2). `early`, before the calibrator's
        start (it waits for the zygote's imports), those with no torch.compile, and none where stored figures stand."""
        if early and stored_baselines.planned(self) is not None:
            return
        for name in only or [n for n in self.config.baselines if not (early and (n.startswith("compile") or n in self.warmed_early))]:
            self.run_untimed(name, calls=self.timer.warmup, seconds=self.warm_seconds(name) if seconds is None else seconds)
            if early or only:
                self.warmed_early[name] = time.perf_counter()

    def warm_seconds(self, name: str) -> float:
        """FIRST_ROUND_WARM_S; none in the first round for a baseline warmed early less than EARLY_WARM_FRESH_S ago (the
        compiled baselines' torch.compile, tens of seconds, may come between: then again in full)."""
        early = self.warmed_early.get(name)
        fresh = not self.rounds and early is not None and time.perf_counter() - early < EARLY_WARM_FRESH_S
        return 0.0 if fresh else FIRST_ROUND_WARM_S

    def run_untimed(self, name: str, calls: int, seconds: float = 0.0) -> None:
        baselines.run_untimed(self, name, calls, seconds)

    def wait_for_idle_device(self) -> str | None:
        """Before a round: the device idle (clock.device_idle), the executors started ahead closed if it is not
        (work they queued at import keeps running while they are held); why not, if it stays busy."""
        if self.device_idle(clock.IDLE_WAIT_S) is not None:
            return None
        if self.close_waiting() and self.device_idle(clock.IDLE_WAIT_S) is not None:
            return None
        return (f"the device ran other work for {clock.IDLE_WAIT_S:g} s before the round, with every executor held "
                "or closed")

    def _baseline_round(self, busy: str | None = None) -> Round:
        baselines, failed = {}, {}
        cached = self.stored_figures()
        if cached is not None:
            baselines = cached
        elif not self.rounds or self.rounds[-1].stored:
            self.warm_baselines()
        for name in self.config.baselines if cached is None else []:
            try:
                baselines[name] = self.time_baseline(name)
            except Exception as err:
                failed[name] = f"{type(err).__name__}: {err}"[:400]
            finally:
                torch.set_float32_matmul_precision("highest")
        stored_baselines.adopt_round(self, baselines, failed, busy, index := len(self.rounds))
        cost = self.calibrator.measure()
        source = BaselineSource(batch=self.batch, round=index, measured_at=time.time(), after_candidates=self.judged,
                                cached=self.cached_said or None)
        self.rounds.append(BaselineRound(index=index, batch=self.batch, measured_at=source.measured_at,
                                         after_candidates=self.judged, failed=failed, cached=source.cached,
                                         stored=cached is not None,
                                         baselines={k: v.model_dump() for k, v in baselines.items()},
                                         window_cost_ms=cost.cost_ms if cost else None,
                                         calibration_error=self.calibrator.error, device_busy=busy))
        previous = self.current_round.baselines if self.current_round is not None else {}
        moved = {name: stats.median_ms / previous[name].median_ms - 1 for name, stats in baselines.items()
                 if name in previous and previous[name].median_ms > 0}
        self.current_round = Round(baselines=baselines, failed=failed, source=source, window_cost=cost,
                                   calibration_error=self.calibrator.error, moved=moved, device_busy=busy)
        self.timed_since_round, self.round_due = 0, False
        release_cached(self.device)  # what the round's baselines (torch.compile's too) held, free for the executors
        return self.current_round

    def stored_figures(self) -> dict[str, TimingStats] | None:
        """The stored figures where they stand (evaluator.referee.stored); None: every baseline is to be timed."""
        return stored_baselines.stored_figures(self)

    def baseline_callable(self, name: str) -> torch.nn.Module:
        return baselines.callable_for(self, name)

    def time_baseline(self, name: str) -> TimingStats:
        return baselines.time_baseline(self, name)

    # -- one candidate -----------------------------------------------------------------------------

    def executor_group(self) -> cgroups.Group | None:
        """A cgroup of its own for the next executor (None: it is held with SIGSTOP)."""
        if self.groups is None:
            self.groups = cgroups.root_group("referee")
        try:
            return cgroups.Group.create(self.groups, "x") if self.groups is not None else None
        except OSError:
            return None

    def executor_for(self, request: JudgeRequest, ahead: bool = False) -> ExecutorProcess:
        config = self.config
        source = self.twin_source if request.path == twin.PATH else Path(request.path).read_bytes()
        return ExecutorProcess(
            source=source, digest=request.digest, device=self.device,
            compile_only=request.compile_only, watch=self.problem.rules.watch, cache_dir=Path(config.cache_dir),
            problem_location=self.problem.location, protect=[Path(p) for p in config.protect],
            exchange_bytes=None if request.compile_only else self.exchange_bytes, output_cap=config.output_cap_bytes,
            memory_limit_gb=config.compile_memory_limit_gb, stage_bytes=self.layout.size, group=self.executor_group(),
            zygote=self.zygote, cores=self.call_cores, exchanges=self.exchanges, ahead=ahead)

    def start_ahead(self, upcoming: list[JudgeRequest], now: JudgeRequest | None = None) -> None:
        """Start the executors of the next `ahead` queued candidates: each imports its candidate now, then builds it
        (`now`'s is wanted at once: no time to start cuBLAS ahead of its first call)."""
        for request in [r for r in upcoming if r.kind == "judge"][:self.memory.ahead]:  # not a `ready` or `close`
            key = (request.path, request.digest)
            if request.compile_only or key in self.waiting:
                continue
            try:
                process = self.executor_for(request, ahead=request is not now)
                process.start()
            except Exception:
                traceback.print_exc()  # it is started again in its turn
                continue
            process.import_ahead(time.monotonic() + self.config.compile_timeout_s, ahead.prepare(self, process, request))
            self.waiting[key] = process
            profile_log({"event": "start_ahead", "name": request.name, "steps": process.start_seconds})

    @contextlib.contextmanager
    def exclusive(self, link: ExecutorProcess | None = None, excuse: Callable[[float], None] | None = None):
        """The device and the CPU to one candidate (or to the baselines): every executor started ahead is held, the
        builds too where they share this lane's cores (their cgroup frozen), the exchanges' page-locking is over; the
        other lanes on this GPU out of their turns (device_share.timed_turn: `link`, the candidate's, held meanwhile;
        `excuse`, given the seconds waited for turns). Nothing is timed before the parent's gate is over."""
        device_share.gate_passed(self)
        device_share.executors_closed(self)  # judged executors are gone (each within about two seconds)
        self.closing.clear()
        if self.zygote is not None:
            self.zygote.wait_ready()  # its imports (a core for seconds) are over
        waiting = list(self.waiting.values())
        for process in waiting:
            process.wait_pinned()
        self.beside.hold(waiting)
        try:
            with device_share.timed_turn(self, link, excuse):
                yield
        finally:
            self.beside.release()

    def held_elsewhere_broken(self) -> str | None:
        return self.beside.broken()

    def judge(self, request: JudgeRequest, upcoming: list[JudgeRequest] = ()) -> Callable[[], JudgeReply]:
        """The candidate's phases, here and now; then what makes its reply, for the outbox's thread: its executor's exit
        and clean-up (a CUDA context's teardown: tenths of a second) and the compared calls left for later
        (replay.Later) overlap the next candidate's start and checks (`exclusive` waits for them)."""
        steps = {"begin": time.perf_counter()}  # the referee's own steps, for the profile
        device_share.take_turn(self)
        if not request.compile_only:
            if not self.rounds:  # before the executors' start, which waits for the zygote's imports
                self.warm_baselines(early=True)
            self.start_ahead([request, *upcoming], now=request)  # its own too: it imports while a round compiles
            self.ensure_round(defer=True)
        steps["round"] = time.perf_counter()
        process = self.waiting.pop((request.path, request.digest), None)
        if process is None:
            process = self.executor_for(request)
            process.start()
        self.start_ahead(list(upcoming))
        # a round begins the next turn, or ends the batch (its close next): the twin imports now (a warm Judge: no)
        if self.twin and upcoming and not request.compile_only and (upcoming[0].kind == "close"
                                                                    or self.timed_since_round + 1 >= self.config.baseline_every):
            self.start_ahead([self.twin])
        steps["start"] = time.perf_counter()
        tuning.take_spent()  # none of it this candidate's
        self.sessions += 1
        session = self.session_for(request, process, self.keys.derive("candidate", self.sessions, request.digest))
        session.defer_replay = True  # compared calls replayed beside the next candidate's start (replay.Later)
        try:
            judgement = phases.begin(session, request.compile_only)
        except BaseException:
            process.close(wait_s=1)
            raise
        steps["phases"] = time.perf_counter()
        release_cached(self.device)  # the checks' float64 copies: the next executor's memory, not the referee's cache
        costs = tuning.take_spent()  # its steps', for the profile (written with its reply)
        timed = "timed" in judgement.results and judgement.outcome is None  # its windows ran (`Later` may fail it yet)
        self.judged, self.timed_since_round = self.judged + 1, self.timed_since_round + timed
        # set once its executor is closed and its compared calls left for later replayed (settling.reply): before the
        # next exclusive turn (`exclusive`)
        self.closing.append(closed := threading.Event())
        process.will_close()  # before the next executor's start, which may wait for its exchange
        steps["released"] = time.perf_counter()  # release_cached, mostly (the next candidate allocates afresh)
        return functools.partial(reply, request, process, session, judgement, steps, costs, closed)

    def session_for(self, request: JudgeRequest, process: ExecutorProcess, keys: Keys) -> Session:
        config = self.config
        limit = run_limit(config, self.current_round)
        return Session(
            referee=self, link=process, name=request.name, digest=request.digest, problem=self.problem.name,
            size=self.size, device=self.device, compile_timeout_s=config.compile_timeout_s,
            run_timeout_s=limit, run_limit_scaled=config.run_timeout_scaled,
            own_credit_s=own_credit(limit, on_host=self.judge_device != self.device),
            memory_limit_gb=config.compile_memory_limit_gb, keys=process.keys or keys, exclusive=self.exclusive,
            source=candidate_text(request.path) if config.backend == "triton" else "")

    def close(self) -> list[BaselineRound]:
        """The batch's baseline rounds, after a last one when candidates were timed since the last."""
        device_share.take_turn(self)  # its executors' teardown is device work too
        last = self.current_round is not None and self.timed_since_round
        self.close_waiting(keep=self.twin if last else None)  # started for requests that never came, but the twin's
        if last:
            self.baseline_round()
        device_share.executors_closed(self)  # the last ones, their replays over (the round's twin judged beside)
        for own in self.measuring():
            own.close()
        if self.groups is not None:
            self.groups.remove(wait_s=2.0)
        if self.zygote is not None:
            self.zygote.close()
        self.exchanges.close()
        device_share.step_aside(self)  # its last executors gone first
        return self.rounds


def _closing(process: ExecutorProcess, closed: threading.Event) -> None:
    try:
        process.close(wait_s=1)
    finally:
        closed.set()
