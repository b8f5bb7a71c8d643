"""The calibrator: the referee's own executor, for measuring what a clocked window costs
(evaluator.referee.clock.window_cost).

It runs the CALIBRATOR_SOURCE below in an executor like any candidate's (same code, same containment,
same path for its calls); its forward does known work and reports its device time truthfully. The
referee measures it in every baseline round and beside each of a candidate's clocked calls.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import time
import traceback
from pathlib import Path

from evaluator.referee import clock, relay, tuning
from evaluator.referee.process import Ended, ExecutorProcess
from evaluator.referee.timing import quantile, summarize
from evaluator.referee.view import RefereeView
from evaluator.wire.records import TimingStats
from evaluator.wire.protocol import LoadState

CALIBRATOR_SOURCE = '''"""The referee's calibrator: never a candidate. It runs in an executor like any candidate (same
code, same containment, same path for its calls), and its forward does known work on the device (a wait
as long as the window's pace asks, then one copy of the reference's answer into its output) whose time it
reports truthfully: the referee's window around it, less that time, is what a window costs
(evaluator.referee.clock.window_cost)."""
import sys
from pathlib import Path

import torch

from evaluator.wire.problem import import_file

_reference = import_file(Path(%(path)r), "kh_calibrator_reference")
for _name, _value in %(sizes)r.items():
    setattr(_reference, _name, _value)


class ModelNew(_reference.Model):
    def forward(self, *inputs):
        if getattr(self, "_answer", None) is None:
            self._answer = super().forward(*inputs).detach().clone()
            self._cycles_per_ms = _cycles_per_ms() if self._answer.is_cuda else 0.0
        pace = sys.modules["evaluator.executor.serve"].PACE_MS
        if pace and self._cycles_per_ms:  # device work as long as the candidate's call: host steps hidden alike
            torch.cuda._sleep(int(pace * self._cycles_per_ms))
        return self._answer.clone()  # a fresh output each call, as a candidate's (a window holds several)


def _cycles_per_ms():
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)  # the clocks up
    begin.record()
    torch.cuda._sleep(1_000_000)
    end.record()
    end.synchronize()
    return 1_000_000 / max(begin.elapsed_time(end), 1e-3)
'''

# Eager beside a CPU candidate's windows (EagerBeside): the reference's own forward, each call, unchanged.
EAGER_BESIDE_SOURCE = '''"""The referee's eager beside a CPU candidate's windows: never a candidate. The reference's own `Model`, run in an
executor like any candidate (same code, same containment, same path for its calls), on the inputs of the candidate's
window just closed (evaluator.referee.calibrator.EagerBeside)."""
from pathlib import Path

from evaluator.wire.problem import import_file

_reference = import_file(Path(%(path)r), "kh_eager_beside_reference")
for _name, _value in %(sizes)r.items():
    setattr(_reference, _name, _value)


class ModelNew(_reference.Model):
    pass
'''


class Calibrator:
    """The referee's own executor for measuring what a clocked window costs (see CALIBRATOR_SOURCE).
    Started as each baseline round begins; measured in every round (recorded with it, and the cost used
    when it fails beside a candidate) and beside each of a candidate's clocked calls (evaluator.referee.phases)."""

    def __init__(self, referee: RefereeView, link=None):
        self.referee, self.link, self.ready = referee, link, link is not None
        self.error: str | None = None
        self.broken = False  # failed since the last round: not started again before the next one

    SOURCE = CALIBRATOR_SOURCE

    def start(self) -> None:
        referee, config = self.referee, self.referee.config
        source = (self.SOURCE % {"path": str(referee.problem.reference_path),
                                       "sizes": referee.problem.size_values(referee.size)}).encode()
        self.link = ExecutorProcess(
            source=source, digest=hashlib.sha256(source).hexdigest(), device=referee.device,
            compile_only=False, watch=referee.problem.rules.watch, cache_dir=Path(config.cache_dir),
            problem_location=referee.problem.location, protect=[Path(p) for p in config.protect],
            exchange_bytes=referee.exchange_bytes, output_cap=config.output_cap_bytes, memory_limit_gb=None,
            stage_bytes=referee.layout.size, group=referee.executor_group(), zygote=referee.zygote,
            cores=referee.call_cores)
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
                inputs = referee.draw(referee.problem.distributions[0], referee.keys.next_seed("calibrator"))
                windows.append(self.window([inputs]))
                if windows[-1] is None:
                    return None
                clock.inputs_changed(self.link.stage, referee.layout, [inputs])
        cost = clock.window_cost(windows[referee.timer.warmup:])
        if cost is None:
            self.failed("the calibrator reported no time for its calls")
        return cost

    def window(self, input_sets: list[list], pace_ms: float = 0.0, plan=None) -> clock.Clocked | None:
        """One of the calibrator's windows, a call on each of `input_sets`, each taking `pace_ms` of device time
        at least (CUDA), handed off call by call where `plan` says where (evaluator.referee.relay); None when it
        failed."""
        referee = self.referee
        if self.broken:
            return None
        try:
            self.get_ready()
            train = referee.problem.mode == "train"
            if plan is not None:
                clocked = relay.window(self.request, self.link.exchange, plan, input_sets, train, referee.device, pace_ms,
                                       self.link.stage, give_up=lambda: self.link.kill(wait_s=5))
                if clocked.go.error_kind == "room":  # no window on the device here: none beside the candidate's,
                    return None                       # whose windows then hold one call (calibrator_queued)
                if clocked.go.error:  # the relay's own (its calls did not all commit): a failed reply raised already
                    raise RuntimeError(clocked.go.error)
            else:
                clocked = clock.window(self.request, self.link.stage, referee.layout, input_sets, train,
                                       referee.timer.flush, referee.keys.next_unit("calibrator place"), pace_ms)
            clocked.capture = clocked.staged = None  # only its time is wanted
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

    @tuning.costed("calibrator start")  # a round's, in the profile (within a candidate's windows: theirs)
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
        self.request(referee.construct(referee.exchange_tensors(self.link.exchange), referee.keys.next_seed("calibrator construct")))
        state = referee.new_reference(referee.keys.next_seed("calibrator reference")).state_dict()  # onto the device, as a candidate
        self.request(LoadState(id=0, tensors=self.link.exchange.write([(f"state.{k}", v) for k, v in state.items()])))
        self.ready = True

    def deadline(self) -> float:
        return time.monotonic() + self.referee.config.run_timeout_s + self.referee.config.compile_timeout_s

    def request(self, command, during=None):
        reply = self.link.request(command, self.deadline(), during)
        if reply.error and reply.error_kind != "room":  # no window on the device here: said to `window`, not a failure
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


class EagerBeside(Calibrator):
    """Eager timed beside each of a CPU candidate's windows, alternating with them, on the same inputs: the reference's
    `Model` unchanged (EAGER_BESIDE_SOURCE), in an executor started and held as the calibrator's is, its windows
    less the calibrator's cost taken off the candidate's. On a 2-core CPU a memory-bound forward's speed moves with the
    machine's memory, by up to a fifth from one second to the next: a candidate and eager's twin, timed seconds apart,
    read 0.88-1.43x of each other where windows alternated read within 3-10% (docs/timing.md). Its figure is eager's
    for that candidate (`BaselineSource.paired`); the round's twin is still judged, for everything else."""

    SOURCE = EAGER_BESIDE_SOURCE
    WARM_S, WARM_CALLS = 0.5, 20  # its untimed warm-up each round (`prepare`)

    def window(self, input_sets: list[list], pace_ms: float = 0.0, plan=None) -> clock.Clocked | None:
        return super().window(input_sets, 0.0, plan)

    def prepare(self) -> None:
        """Ready, then run untimed in windows of one call for WARM_S and at least WARM_CALLS, each on fresh inputs: a
        fresh process's first 10-20 calls of a 64 MiB forward fault its heap in, 5x slower (docs/results.md), and its
        windows beside a candidate's would start there."""
        super().prepare()
        referee, started, calls = self.referee, time.perf_counter(), 0
        while not self.broken and (calls < self.WARM_CALLS or time.perf_counter() - started < self.WARM_S):
            self.window([referee.draw(referee.problem.distributions[0], referee.keys.next_seed("eager beside"))])
            calls += 1


# KH_EAGER_BESIDE=0: eager not timed beside a CPU candidate's windows (EagerBeside), for measuring the two
EAGER_BESIDE = os.environ.get("KH_EAGER_BESIDE") != "0"


def paired_figures(windows: list[clock.Clocked], paired: list[clock.Clocked], cost_ms: float,
                   warmup: int) -> tuple[TimingStats, float] | None:
    """Eager's figure from its windows `paired` with the candidate's `windows` (each less the same cost, `cost_ms`, as
    the candidate's), and the spread (IQR over median) of the candidate's per-call time over eager's, window by
    window; None where a window's calls are all cost (no ratio to tell the spread by)."""
    eager = clock.referee_times(paired, cost_ms)
    ratios = [own / theirs for own, theirs in zip(clock.referee_times(windows, cost_ms), eager) if theirs > 0]
    if len(ratios) < len(eager):
        return None
    middle = statistics.median(ratios)
    spread = (quantile(ratios, 0.75) - quantile(ratios, 0.25)) / middle if middle > 0 else float("inf")
    return summarize(eager, warmup).model_copy(update={"handed_off": paired[0].handed_off}), spread
