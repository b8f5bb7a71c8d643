"""The referee: the process that judges, for one batch on one device, and never runs candidate code.

    python -m evaluator.referee --config FILE --requests FD --replies FD

Started by the parent (evaluator.sandbox) once per batch. It owns everything a judgement rests on:

* the reference (`Model` from the problem, a fresh one per candidate, with its own seed) and its
  float64 twin, the seeds, the inputs of every checked call, the tolerances and every comparison
  (evaluator.phases);
* the baselines (eager, torch.compile, with and without TF32, the problem's ceilings), timed here
  with the same timing loop as the candidates (evaluator.timing), in rounds: one before the batch's
  first candidate, again after every `baseline_every` candidates and once at the end, always with
  no executor alive on the device. A verdict divides by the last round before it and names it
  (`Verdict.baseline_source`); the rounds come back to the parent when the batch closes, so drift
  over a batch shows;
* its own clock around every clocked call of a candidate (evaluator.clock), and the cost of such a
  window, measured in every baseline round with the calibrator: an executor of the referee's own
  (contained like any other, the same code and path) whose forward does known work and reports its
  device time truthfully (`Calibrator`).

For each candidate it starts one executor (evaluator.process, contained by evaluator.containment)
with an exchange sized for the problem, runs the phases and answers the parent with the verdict
and the candidate's capped output. Requests and replies are JSON lines (evaluator.protocol).
"""

from __future__ import annotations

import argparse
import base64
import collections
import concurrent.futures
import contextlib
import copy
import functools
import hashlib
import importlib
import json
import os
import random
import secrets
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field

from evaluator import clock, identity, phases
from evaluator import inputs as draws
from evaluator.exchange import Exchange, capacity_for, dtype_name
from evaluator.problem import import_file, load_problem
from evaluator.process import Ended, ExecutorProcess, settle, stop_everything
from evaluator.protocol import BaselineRound, Construct, JudgeReply, JudgeRequest, LoadState, TensorSlot, pack
from evaluator.records import BaselineSource, Phase, Status, TimingStats, Verdict
from evaluator.stage import Layout
from evaluator.timing import Call, Timer, quantile, summarize

VERDICT_TAIL_CHARS = 4000  # how much of each stream the verdict itself carries; the logs keep more
# Set (a folder), the referee profiles itself (cProfile) and logs each candidate's phase, command and
# executor start-up seconds there: for tuning the evaluator, never read by it.
PROFILE_DIR = os.environ.get("KH_REFEREE_PROFILE")
# What every executor imports. The referee imports them first, so that their bytecode is in the cache
# executors read (process.bytecode_cache) before they start.
EXECUTOR_MODULES = ("evaluator.executor", "torch._dynamo", "torch.utils.cpp_extension", "torch.profiler")


def profile_log(record: dict) -> None:
    """One line of the tuning diagnostics (PROFILE_DIR), never read by the evaluator."""
    if PROFILE_DIR:
        with open(Path(PROFILE_DIR) / f"referee-{os.getpid()}.jsonl", "a") as log:
            log.write(json.dumps(record) + "\n")


def cache_executor_bytecode() -> None:
    for name in EXECUTOR_MODULES:
        try:
            importlib.import_module(name)
        except Exception:
            traceback.print_exc()  # the executor's own import says what is wrong


class RefereeConfig(BaseModel):
    """How the referee judges a batch (written by the parent, from its EvalOptions)."""

    model_config = ConfigDict(extra="forbid")
    problem: str = Field(description="The problem's folder or bare .py file.")
    size: str
    device: str
    baselines: list[str] = Field(description="Baselines timed in every round.")
    seed: int = Field(description="The batch's root seed: every candidate's seeds derive from it.")
    timing_budget_s: float = 2.0
    min_reps: int = 10
    max_reps: int = 200
    warmup: int = 3
    baseline_every: int = Field(8, ge=1, description="Candidates timed between two baseline rounds.")
    compile_timeout_s: float
    run_timeout_s: float
    output_cap_bytes: int
    compile_memory_limit_gb: float | None
    cache_dir: str
    protect: list[str] = Field(default_factory=list, description="Paths no executor may read.")
    round_at_start: bool = Field(False, description=(
        "Time the first baseline round as soon as the referee is up, before any request (a lane starts its "
        "referee while the first builds run)."))
    ahead: int = Field(0, ge=0, description=(
        "Executors started before their turn, from the requests already queued: each imports its candidate "
        "(its extension loaded) while another is judged, and is stopped (SIGSTOP) while any candidate is timed "
        "or profiled and while baselines are timed."))


@dataclass(frozen=True)
class Round:
    """A baseline round, as verdicts use it."""

    baselines: dict[str, TimingStats]
    failed: dict[str, str]
    source: BaselineSource
    window_cost: clock.WindowCost | None  # None: the calibrator failed (windows are then not reduced)
    calibration_error: str | None = None


CALIBRATOR_SOURCE = '''"""The referee's calibrator: never a candidate. It runs in an executor like any candidate (same
code, same containment, same path for its calls), and its forward does known work on the device (one
copy of the reference's answer into its output) whose time it reports truthfully: the referee's window
around it, less that time, is what a window costs (evaluator.clock.window_cost)."""
from pathlib import Path

import torch

from evaluator.problem import import_file

_reference = import_file(Path(%(path)r), "kh_calibrator_reference")
for _name, _value in %(sizes)r.items():
    setattr(_reference, _name, _value)


class ModelNew(_reference.Model):
    def forward(self, *inputs):
        if getattr(self, "_answer", None) is None:
            self._answer = super().forward(*inputs).detach().clone()
            self._out = torch.empty_like(self._answer)
        return self._out.copy_(self._answer)
'''


class Calibrator:
    """The referee's own executor for measuring what a clocked window costs (see CALIBRATOR_SOURCE).
    Started as each baseline round begins; measured in every round (recorded with it, and the cost used
    when it fails beside a candidate) and beside each of a candidate's clocked calls (evaluator.phases)."""

    def __init__(self, referee: Referee, link=None):
        self.referee, self.link, self.ready = referee, link, link is not None
        self.error: str | None = None
        self.broken = False  # failed since the last round: not started again before the next one

    def start(self) -> None:
        referee, config = self.referee, self.referee.config
        source = (CALIBRATOR_SOURCE % {"path": str(referee.problem.reference_path),
                                       "sizes": referee.problem.size_values(referee.size)}).encode()
        self.link = ExecutorProcess(
            source=source, digest=hashlib.sha256(source).hexdigest(), device=referee.device,
            compile_only=False, watch=referee.problem.rules.watch, cache_dir=Path(config.cache_dir),
            problem_location=referee.problem.location, protect=[Path(p) for p in config.protect],
            exchange_bytes=referee.exchange_bytes, output_cap=config.output_cap_bytes, memory_limit_gb=None,
            stage_bytes=referee.layout.size)
        self.link.start()
        self.link.import_ahead(time.monotonic() + config.compile_timeout_s)

    def measure(self) -> clock.WindowCost | None:
        """Warm-up windows, then CALIBRATION_WINDOWS more, back to back as a candidate's series runs them
        (fresh inputs drawn before each, the stage's inputs read back after each): their median cost.
        None (and `error`) when the calibrator fails; it is started afresh at the next round (start_early)."""
        referee = self.referee
        windows = []
        with clock.collector_paused():
            for _ in range(referee.timer.warmup + clock.CALIBRATION_WINDOWS):
                inputs = referee.draw(referee.problem.distributions[0], referee.rng.randrange(2**31))
                windows.append(self.window(inputs))
                if windows[-1] is None:
                    return None
                clock.inputs_changed(self.link.stage, referee.layout, inputs)
        cost = clock.window_cost(windows[referee.timer.warmup:])
        if cost is None:
            self.failed("the calibrator reported no time for its calls")
        return cost

    def window(self, inputs: list) -> clock.Clocked | None:
        """One of the calibrator's windows on `inputs`; None when it failed."""
        referee = self.referee
        if self.broken:
            return None
        try:
            self.get_ready()
            clocked = clock.window(self.request, self.link.stage, referee.layout, inputs,
                                   referee.problem.mode == "train", referee.timer.flush, referee.rng.random())
            clocked.capture = None  # only its time is wanted
            self.error = None
            return clocked
        except (Ended, Exception) as err:  # noqa: BLE001 - recorded with the round; the batch goes on
            self.failed(f"{type(err).__name__}: {err}")
            return None

    def start_early(self) -> None:
        """At a round's beginning: started afresh if it failed before, its process started now (the
        round's torch.compile overlaps its imports)."""
        self.broken = False
        if self.link is None:
            try:
                self.start()
            except Exception as err:  # noqa: BLE001 - recorded with the round; the batch goes on
                self.failed(f"{type(err).__name__}: {err}")

    def prepare(self) -> None:
        """Ready before anything of the round is timed (its start-up never overlaps a timed call)."""
        if self.broken:
            return
        try:
            self.get_ready()
        except (Ended, Exception) as err:  # noqa: BLE001 - recorded with the round; the batch goes on
            self.failed(f"{type(err).__name__}: {err}")

    def get_ready(self) -> None:
        """Started, its model built and its state on the device (raises when it cannot be)."""
        referee = self.referee
        if self.link is None:
            self.start()
        if self.ready:
            return
        reply = self.link.reply(0, self.deadline())
        if reply.error:
            raise RuntimeError(f"the calibrator could not start: {reply.error}"[:2000])
        self.request(referee.construct(referee.exchange_tensors(self.link.exchange), referee.rng.randrange(2**31)))
        state = referee.new_reference(referee.rng.randrange(2**31)).state_dict()  # onto the device, as a candidate
        self.request(LoadState(id=0, tensors=self.link.exchange.write([(f"state.{k}", v) for k, v in state.items()])))
        self.ready = True

    def deadline(self) -> float:
        return time.monotonic() + self.referee.config.run_timeout_s + self.referee.config.compile_timeout_s

    def request(self, command):
        reply = self.link.request(command, self.deadline())
        if reply.error:
            raise RuntimeError(f"the calibrator failed: {reply.error}"[:2000])
        return reply

    def failed(self, why: str) -> None:
        self.error, self.broken = why[:1000], True
        traceback.print_exc()
        self.close()

    def close(self) -> None:
        if self.link is not None and hasattr(self.link, "close"):
            self.link.close(wait_s=1)
        if not isinstance(self.link, ExecutorProcess):
            return
        self.link, self.ready = None, False


class Referee:
    """One batch's judge (see the module's docstring)."""

    def __init__(self, config: RefereeConfig):
        self.config = config
        self.problem = load_problem(config.problem)
        self.size, self.device = config.size, config.device
        self.batch = secrets.token_hex(4)
        self.rng = random.Random(config.seed)
        self.tolerances = self.problem.tolerances
        self.rel_floor = min(t.atol for t in self.tolerances.values())
        self.environment = identity.describe_environment(self.device)
        self.module = import_file(self.problem.reference_path, "kh_reference")
        for name, value in self.problem.size_values(self.size).items():
            setattr(self.module, name, value)
        self.init_inputs = self.module.get_init_inputs()
        self.specs, self.fixed, self.values = draws.input_specs(self.module.get_inputs())
        self.input_nbytes = draws.tensor_bytes(self.specs, self.fixed)
        self.timer = Timer(self.device, config.timing_budget_s, config.min_reps, config.max_reps, config.warmup)
        torch.set_float32_matmul_precision("highest")  # the fp32 reference is real fp32
        probe = self.new_reference(self.rng.randrange(2**31))
        self.state_nbytes = sum(v.numel() * v.element_size() for v in probe.state_dict().values())
        sample = self.draw(self.problem.distributions[0], self.rng.randrange(2**31))
        with torch.no_grad():
            out = probe(*sample)
        self.output_shape, self.output_dtype = list(out.shape), dtype_name(out.dtype) or str(out.dtype)
        self.output_nbytes = out.numel() * out.element_size()
        self.buffer_names = [name for name, _ in probe.named_buffers()]
        staged = [(i, s.shape, s.dtype) for i, s in enumerate(self.specs) if s.kind == "random"]
        staged += [(i, list(t.shape), dtype_name(t.dtype)) for i, t in self.fixed.items()]
        self.layout = Layout.plan(sorted(staged), self.output_nbytes,
                                  [b.numel() * b.element_size() for b in probe.buffers()])
        self.reference_ms = self.forward_ms(probe, sample)
        self.stream_delay_ms = min(500.0, 20.0 + 4 * self.reference_ms) if self.device == "cuda" else 0.0
        self.reference_kernels = self.kernel_names(probe, sample) if self.device == "cuda" else []
        del probe, sample, out
        self.baseline_model = self.new_reference(self.rng.randrange(2**31))
        self.compiled: dict[str, torch.nn.Module] = {}
        self.rounds: list[BaselineRound] = []
        self.current_round: Round | None = None
        self.judged = 0
        self.timed_since_round = 0
        self.waiting: dict[tuple[str, str], ExecutorProcess] = {}  # started ahead, by (path, digest)
        self.closing: list[threading.Event] = []  # set once a judged executor is closed
        self.calibrator = Calibrator(self)
        self.idle_probe: torch.Tensor | None = None  # device_idle's tiny kernel's operand
        self.queued: Callable[[], list[JudgeRequest]] = list  # the requests waiting behind (main's inbox)

    # -- the reference -----------------------------------------------------------------------------

    def new_reference(self, seed: int) -> torch.nn.Module:
        """A fresh reference Model (torch seeded with `seed`), fp32, on the device."""
        torch.manual_seed(seed)
        return self.module.Model(*self.init_inputs).to(self.device)

    def draw(self, distribution: str, seed: int) -> list:
        return draws.draw(self.specs, distribution, seed, self.device, self.fixed, self.values)

    def exchange_tensors(self, exchange: Exchange) -> list[TensorSlot]:
        """The fixed (non-random) tensor inputs, shipped once with `construct`."""
        return exchange.write([(f"input.{i}", t) for i, t in self.fixed.items()])

    def construct(self, fixed: list[TensorSlot], seed: int) -> Construct:
        """Build ModelNew (torch seeded with `seed`), knowing the forward's inputs and the stage's layout."""
        return Construct(id=0, init_inputs=pack(self.init_inputs), seed=seed, inputs=self.specs, fixed=fixed,
                         values=pack(self.values), stream_delay_ms=self.stream_delay_ms,
                         staged=list(self.layout.inputs), staged_state=self.buffer_names)

    @property
    def exchange_bytes(self) -> int:
        """Room for the largest turn: an output, the inputs as a call left them and every buffer."""
        return capacity_for(self.output_nbytes, self.input_nbytes, self.state_nbytes, self.input_nbytes)

    def forward_ms(self, model: torch.nn.Module, inputs: list) -> float:
        with torch.no_grad():
            model(*inputs)  # warm-up: library handles, workspaces
            self._sync()
            start = time.perf_counter()
            model(*inputs)
            self._sync()
        return (time.perf_counter() - start) * 1e3

    def kernel_names(self, model: torch.nn.Module, inputs: list) -> list[str]:
        """What one reference forward launches (the CUDA profiler): names no candidate gets credit for."""
        try:
            from torch.autograd import DeviceType
            from torch.profiler import ProfilerActivity, profile

            reference = copy.deepcopy(model)
            torch.cuda.synchronize()
            with torch.no_grad(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                reference(*inputs)
                torch.cuda.synchronize()
            return [e.name for e in prof.events() if e.device_type == DeviceType.CUDA]
        except Exception:
            return []

    def sm_clock(self) -> int | None:
        """Read straight after a candidate's timed calls: read before them it shows the idle clock."""
        return identity.read_sm_clock_mhz() if self.device == "cuda" else None

    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def close_waiting(self) -> bool:
        """Close every executor started ahead (each is started again in its turn); whether there was one."""
        waiting, self.waiting = list(self.waiting.values()), {}
        for process in waiting:
            process.close(wait_s=1)
        return bool(waiting)

    def device_idle(self, limit_s: float) -> float | None:
        """Seconds waited until no other process has work on the device (clock.device_idle)."""
        if self.idle_probe is None:
            self.idle_probe = torch.zeros(1, device=self.device)
        return clock.device_idle(self.idle_probe, limit_s)

    @staticmethod
    def profile_windows(name: str, candidate: list[clock.Clocked], calibrator: list[clock.Clocked]) -> None:
        """Where a candidate's windows and the calibrator's beside them spent their time (PROFILE_DIR):
        the quartiles of each step, and of the executors' reports."""
        if not PROFILE_DIR:
            return

        def quartiles(values: list[float]) -> list[float]:
            return [round(quantile(values, q), 4) for q in (0.25, 0.5, 0.75)] if values else []

        record = {"event": "windows", "name": name}
        for role, windows in (("candidate", candidate), ("calibrator", calibrator)):
            steps = [w.steps for w in windows if len(w.steps) == 4]
            record[role] = {step: quartiles([s[i] for s in steps])
                            for i, step in enumerate(("staged", "go", "put", "copied"))}
            record[role]["window"] = quartiles([w.ms for w in windows])
            record[role]["events"] = quartiles([w.go.events_ms[0] for w in windows if w.go.events_ms])
            record[role]["host"] = quartiles([w.go.host_ms[0] for w in windows if w.go.host_ms])
        profile_log(record)

    # -- baselines ---------------------------------------------------------------------------------

    def ensure_round(self) -> None:
        """A baseline round before the first candidate, and after every `baseline_every` timed ones."""
        if self.current_round is None or self.timed_since_round >= self.config.baseline_every:
            self.baseline_round()

    def baseline_round(self) -> Round:
        """Every baseline timed once more, and the loop's own cost per call. No executor runs while
        they are timed: those started ahead are stopped (torch.compile compiles before that)."""
        started = time.perf_counter()
        self.calibrator.start_early()
        self.compile_baselines()
        self.start_ahead(self.queued())  # requests that came while it compiled: their imports overlap the round
        self.calibrator.prepare()
        compiled = time.perf_counter()
        with self.exclusive():
            round_ = self._baseline_round()
        profile_log({"event": "baseline_round", "index": round_.source.round, "compile_s": compiled - started,
                     "round_s": time.perf_counter() - compiled})
        return round_

    def compile_baselines(self) -> None:
        """torch.compile's compilations (CPU work, tens of seconds the first time) before the round."""
        for name in self.config.baselines:
            if not name.startswith("compile") or name in self.compiled:
                continue
            try:
                model = self.baseline_callable(name)
                self.baseline_model.train(self.problem.mode == "train")
                with torch.no_grad():
                    model(*self.draw(self.problem.distributions[0], self.rng.randrange(2**31)))
                self._sync()
            except Exception:
                pass  # timing it fails the same way, and the round records why
            finally:
                torch.set_float32_matmul_precision("highest")

    def _baseline_round(self) -> Round:
        baselines, failed = {}, {}
        for name in self.config.baselines:
            try:
                baselines[name] = self.time_baseline(name)
            except Exception as err:
                failed[name] = f"{type(err).__name__}: {err}"[:400]
            finally:
                torch.set_float32_matmul_precision("highest")
        cost = self.calibrator.measure()
        index = len(self.rounds)
        source = BaselineSource(batch=self.batch, round=index, measured_at=time.time(), after_candidates=self.judged)
        self.rounds.append(BaselineRound(index=index, batch=self.batch, measured_at=source.measured_at,
                                         after_candidates=self.judged, failed=failed,
                                         baselines={k: v.model_dump() for k, v in baselines.items()},
                                         window_cost_ms=cost.cost_ms if cost else None,
                                         calibration_error=self.calibrator.error))
        self.current_round = Round(baselines=baselines, failed=failed, source=source, window_cost=cost,
                                   calibration_error=self.calibrator.error)
        self.timed_since_round = 0
        return self.current_round

    def baseline_callable(self, name: str) -> torch.nn.Module:
        tf32 = name.endswith("_tf32")
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        if name.startswith("compile"):
            if name not in self.compiled:  # compiled once per batch, with its precision set
                torch._dynamo.reset()
                self.compiled[name] = torch.compile(copy.deepcopy(self.baseline_model))
            return self.compiled[name]
        if name.startswith("part:"):
            # One sub-module alone (e.g. `part:gemm_tf32`: cuBLAS's GEMM with nothing fused): a ceiling.
            return getattr(self.baseline_model, name.removeprefix("part:").removesuffix("_tf32"))
        if name.startswith("eager"):
            return self.baseline_model
        raise ValueError(f"unknown baseline {name!r}")

    def time_baseline(self, name: str) -> TimingStats:
        """As a candidate is timed: warm-up, one call to size the series, the series; fresh inputs
        drawn for every call outside the timed window."""
        model = self.baseline_callable(name)
        self.baseline_model.train(self.problem.mode == "train")
        distribution = self.problem.distributions[0]
        current: dict = {}

        def drawing(seed: int):
            def before(call: Call) -> None:
                current.pop("inputs", None)
                current["inputs"] = self.draw(distribution, draws.call_seed(seed, call.index))
            return before

        with torch.no_grad():
            fn = lambda: model(*current["inputs"])  # noqa: E731
            warm = drawing(self.rng.randrange(2**31))
            self.timer.untimed(fn, self.timer.warmup, warm)
            estimate = self.timer.one(fn, Call(self.timer.warmup), warm)[1]
            # until the median is known to 0.5% (at most the budget's calls): a round takes seconds, not tens
            events, _ = self.timer.series(fn, self.timer.reps_for(estimate), drawing(self.rng.randrange(2**31)),
                                          target_rel=0.005)
        return summarize(events, self.timer.warmup + 1)

    # -- one candidate -----------------------------------------------------------------------------

    def executor_for(self, request: JudgeRequest) -> ExecutorProcess:
        config = self.config
        return ExecutorProcess(
            source=Path(request.path).read_bytes(), digest=request.digest, device=self.device,
            compile_only=request.compile_only, watch=self.problem.rules.watch, cache_dir=Path(config.cache_dir),
            problem_location=self.problem.location, protect=[Path(p) for p in config.protect],
            exchange_bytes=self.exchange_bytes, output_cap=config.output_cap_bytes,
            memory_limit_gb=config.compile_memory_limit_gb, stage_bytes=self.layout.size)

    def start_ahead(self, upcoming: list[JudgeRequest]) -> None:
        """Start the executors of the next `ahead` queued candidates: each imports its candidate now."""
        for request in upcoming[:self.config.ahead]:
            key = (request.path, request.digest)
            if request.kind != "judge" or request.compile_only or key in self.waiting:
                continue
            try:
                process = self.executor_for(request)
                process.start()
            except Exception:
                traceback.print_exc()  # it is started again in its turn
                continue
            process.import_ahead(time.monotonic() + self.config.compile_timeout_s)
            self.waiting[key] = process
            profile_log({"event": "start_ahead", "name": request.name, "steps": process.start_seconds})

    @contextlib.contextmanager
    def exclusive(self):
        """The device to one candidate (or to the baselines): every executor started ahead is stopped,
        and the referee's page-locking of their exchanges is over."""
        for closed in self.closing:  # judged executors are gone (each within about two seconds)
            closed.wait()
        self.closing.clear()
        for process in self.waiting.values():
            process.wait_pinned()
            process.pause()
        try:
            yield
        finally:
            for process in self.waiting.values():
                process.resume()

    def judge(self, request: JudgeRequest, upcoming: list[JudgeRequest] = ()) -> Callable[[], JudgeReply]:
        """The candidate's phases, here and now; then what makes its reply, for the outbox's thread: its
        executor's exit and clean-up (a CUDA context's teardown takes tenths of a second) overlap the
        next candidate's start, and are over before anything is timed (`exclusive`)."""
        steps = {"begin": time.perf_counter()}  # the referee's own steps, for the profile
        if not request.compile_only:
            self.start_ahead([request, *upcoming])  # its own executor too: it imports while a round compiles
            self.ensure_round()
        steps["round"] = time.perf_counter()
        config = self.config
        process = self.waiting.pop((request.path, request.digest), None)
        if process is None:
            process = self.executor_for(request)
            process.start()
        self.start_ahead(list(upcoming))
        steps["start"] = time.perf_counter()
        session = phases.Session(
            referee=self, link=process, name=request.name, digest=request.digest, problem=self.problem.name,
            size=self.size, device=self.device, compile_timeout_s=config.compile_timeout_s,
            run_timeout_s=config.run_timeout_s, memory_limit_gb=config.compile_memory_limit_gb,
            rng=random.Random(self.rng.randrange(2**63)), exclusive=self.exclusive)
        try:
            verdict = phases.judge(session, request.compile_only)
        except BaseException:
            process.close(wait_s=1)
            raise
        steps["phases"] = time.perf_counter()
        self.judged += 1
        if verdict.timing is not None:
            self.timed_since_round += 1
        closed = threading.Event()
        self.closing.append(closed)
        return functools.partial(self.finish, request, process, session, verdict, steps, closed)

    def finish(self, request: JudgeRequest, process: ExecutorProcess, session: phases.Session, verdict: Verdict,
               steps: dict[str, float], closed: threading.Event) -> JudgeReply:
        returncode = None
        try:
            if verdict.status == Status.correct:
                returncode = process.wait_exit(1)  # it exits by itself after `finish`
            steps["exit"] = time.perf_counter()
        finally:
            process.close(wait_s=1)  # the rest of a slow exit in the background
            closed.set()
        steps["close"] = time.perf_counter()
        verdict = settle(verdict, process, returncode, VERDICT_TAIL_CHARS)
        if PROFILE_DIR:  # where each candidate's seconds went
            startup = next((m.reply.startup for m in process.messages if m.reply is not None and m.reply.id == 0), {})
            marks = list(steps.items())
            profile_log({"event": "candidate", "name": request.name, "phases": verdict.phase_seconds,
                         "executor": session.command_seconds,
                         "startup": {k: v - process.launched_at for k, v in startup.items()},
                         "referee": {name: round(t - marks[i][1], 3) for i, (name, t) in enumerate(marks[1:])}})
        return JudgeReply(verdict=verdict, stdout=base64.b64encode(process.stdout.tail()).decode(),
                          stderr=base64.b64encode(process.stderr.tail()).decode())

    def close(self) -> list[BaselineRound]:
        """The batch's baseline rounds, after a last one when candidates were timed since the last."""
        self.close_waiting()  # started for requests that never came
        if self.current_round is not None and self.timed_since_round:
            self.baseline_round()
        self.calibrator.close()
        return self.rounds


class Inbox:
    """The parent's requests, read as they come (a thread), so the referee sees those queued behind
    the one it judges and can start their executors ahead."""

    def __init__(self, stream):
        self.items: collections.deque = collections.deque()
        self.ready = threading.Condition()
        self.done = False
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        try:
            for line in stream:
                request = JudgeRequest.model_validate_json(line)
                with self.ready:
                    self.items.append(request)
                    self.ready.notify()
        finally:
            with self.ready:
                self.done = True
                self.ready.notify()

    def next(self) -> JudgeRequest | None:
        """The next request; None when the parent is gone."""
        with self.ready:
            while not self.items and not self.done:
                self.ready.wait()
            return self.items.popleft() if self.items else None

    def queued(self) -> list[JudgeRequest]:
        with self.ready:
            return list(self.items)


def failed_verdict(request: JudgeRequest, config: RefereeConfig, error: str) -> Verdict:
    """The referee's own failure around one candidate: recorded, so the batch goes on."""
    return Verdict(candidate=request.name, source_sha256=request.digest, problem=Path(config.problem).stem,
                   size=config.size, device=config.device, status=Status.crashed, phase=Phase.init,
                   error=f"the referee failed around this candidate: {error}"[-6000:])


def main(argv: list[str] | None = None) -> int:
    # The parent's interrupt (process.stop_everything): end now, every executor started closed on the way out.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        return serve(argv)
    finally:
        stop_everything()


def serve(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True)
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--replies", type=int, required=True)
    args = parser.parse_args(argv)
    config = RefereeConfig.model_validate_json(Path(args.config).read_text())
    requests = os.fdopen(args.requests, "r")
    replies = os.fdopen(args.replies, "w", buffering=1)

    def answer(reply: JudgeReply) -> None:
        replies.write(reply.model_dump_json() + "\n")
        replies.flush()

    # Replies are made and written by one thread, in the order of the requests: a judged candidate's
    # reply waits there for its executor's exit while the next candidate starts.
    outbox = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="outbox")

    def send(request: JudgeRequest | None, make: Callable[[], JudgeReply]) -> None:
        def run() -> None:
            try:
                reply = make()
            except Exception:
                traceback.print_exc()
                if request is None:
                    raise
                reply = JudgeReply(verdict=failed_verdict(request, config, traceback.format_exc()))
            answer(reply)

        outbox.submit(run)

    referee, setup_error = None, None
    inbox = Inbox(requests)  # reading before the referee is up: a round at start sees what is queued
    started = time.perf_counter()
    if sys.pycache_prefix:  # the cache executors read (process.bytecode_cache) is written here
        cache_executor_bytecode()
    imported = time.perf_counter()
    try:
        referee = Referee(config)
        referee.queued = inbox.queued
        profile_log({"event": "start", "executor_modules_s": imported - started,
                     "setup_s": time.perf_counter() - imported})
        if config.round_at_start:
            referee.ensure_round()
    except Exception:
        setup_error = traceback.format_exc()
        traceback.print_exc()
    while True:
        waited = time.perf_counter()
        request = inbox.next()
        if time.perf_counter() - waited > 0.05:
            profile_log({"event": "idle", "s": time.perf_counter() - waited})
        if request is None:
            break
        if request.kind == "close":
            rounds = []
            if referee is not None:
                try:
                    rounds = referee.close()
                except Exception:
                    traceback.print_exc()
            send(None, functools.partial(JudgeReply, rounds=rounds))
            break
        if referee is None:
            verdict = failed_verdict(request, config, f"it could not start: {setup_error}")
            send(request, functools.partial(JudgeReply, verdict=verdict))
            continue
        try:
            send(request, referee.judge(request, inbox.queued()))
        except Exception:
            traceback.print_exc()
            send(request, functools.partial(JudgeReply, verdict=failed_verdict(request, config, traceback.format_exc())))
    outbox.shutdown(wait=True)
    return 0


if __name__ == "__main__":
    if PROFILE_DIR:
        import cProfile

        profiler = cProfile.Profile()
        code = profiler.runcall(main)
        profiler.dump_stats(Path(PROFILE_DIR) / f"referee-{os.getpid()}.prof")
        sys.exit(code)
    sys.exit(main())
