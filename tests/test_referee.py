"""The referee/executor split (issue 12, item 1), piece by piece and fast: the exchange, the
executor's channel as the referee reads it, the baseline rounds, and a verdict composed from the
phases. The whole path (a contained executor per candidate, every hack fixture) runs in
tests/test_integrity.py and tests/test_evaluator.py."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

import pytest
import torch

import local_executor
from conftest import calls_drawn
from evaluator.referee import phases, relay
from evaluator.referee.session import Imported, Judged, Session
from evaluator.referee.time_phase import held, idle
from evaluator.wire.exchange import ALIGN, Exchange, ExchangeError
from evaluator.wire.polling import readable
from evaluator.referee.process import Ended, ExecutorProcess
from evaluator.wire.protocol import COMMAND, Call, ExecutorMessage, LoadState, Profile, Reply, TensorSlot
from evaluator.wire.records import Status


# --------------------------------------------------------------------------- the exchange

def test_tensors_travel_through_the_exchange_as_copies():
    exchange = Exchange.create(1 << 16)
    values = [("a", torch.randn(3, 5)), ("b", torch.arange(7)), ("c", torch.tensor([True, False, True])),
              ("d", torch.empty(0, 4)), ("e", torch.randn(2, 2, dtype=torch.float64))]
    slots = exchange.write(values)
    assert all(slot.offset % ALIGN == 0 for slot in slots)
    read = [exchange.read(slot) for slot in slots]
    for (_, sent), got in zip(values, read):
        assert got.dtype == sent.dtype and torch.equal(got, sent)
    exchange.write([("a", torch.zeros(3, 5))])  # the other side writes again: what was read stays
    assert torch.equal(read[0], values[0][1])
    exchange.close()


@pytest.mark.parametrize("change, words", [
    (dict(offset=1 << 20), "outside"),
    (dict(offset=ALIGN + 4), "multiple"),
    (dict(nbytes=12), "bytes for shape"),
    (dict(dtype="complex128"), "unknown dtype"),
    (dict(shape=[-1, 4], nbytes=-16), "bad shape"),
    (dict(shape=[0, 2 ** 63], nbytes=0), "bad shape"),  # empty: its dimensions multiply to nothing, and overflow a view
])
def test_a_slot_that_does_not_describe_its_bytes_is_refused(change, words):
    exchange = Exchange.create(1 << 16)
    [slot] = exchange.write([("x", torch.randn(4, 4))])
    with pytest.raises(ExchangeError, match=words):
        exchange.read(slot.model_copy(update=change))
    exchange.close()


def test_an_exchange_holds_what_it_is_sent_and_is_not_sized_for_a_checked_call():
    """Checked calls go through the stage: an exchange holds the fixed inputs, the state and a handed-off window (on
    the CPU, in the exchange), far less than a checked call's inputs, output and inputs as it left them."""
    judge = local_executor.referee()
    size = judge.exchange_bytes
    assert judge.handoff_plan is not None and judge.handoff_plan.size <= size
    exchange = Exchange.create(size)
    judge.exchange_tensors(exchange)
    exchange.write([(f"state.{k}", v) for k, v in judge.baseline_model.state_dict().items()])  # raises where it does not fit
    exchange.close()


def test_a_checked_call_of_a_megabyte_goes_through_an_exchange_of_a_few_hundred_bytes(monkeypatch):
    monkeypatch.setitem(relay.HANDOFF_BYTES, "cpu", 0)  # no window through host memory: every call through the stage
    minibench = Path(__file__).resolve().parents[1] / "reference" / "minibench"
    judge = local_executor.referee(problem=str(minibench / "level1" / "1_ReLU.py"), size="default")
    assert judge.exchange_bytes <= 1024 < judge.input_nbytes == judge.output_nbytes == 1 << 20

    class ReLU(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x)

    checked = local_executor.checked(ReLU, judge)[2]
    assert checked.stop is None and any(checked.correctness.tiers.values())


@pytest.mark.gpu
def test_an_exchange_is_page_locked_and_released_from_threads_other_than_the_one_that_made_it():
    """The referee pins an executor's exchange in a background thread and unpins it in its outbox thread:
    the memory is page-locked in between, and pageable after."""
    import threading

    torch.cuda.init()
    exchange = Exchange.create(256 << 20)
    pinning = threading.Thread(target=exchange.pin)
    pinning.start()
    pinning.join()
    assert exchange.pinned and exchange.bytes.is_pinned()
    data = torch.randn(1 << 20, device="cuda")
    [slot] = exchange.write([("x", data)])
    assert torch.equal(exchange.read(slot, "cuda"), data)
    unpinned = []
    closing = threading.Thread(target=lambda: unpinned.append(exchange.unpin()))
    closing.start()
    closing.join()
    assert unpinned == [True] and not exchange.bytes.is_pinned()
    exchange.close()


@pytest.mark.gpu
def test_a_device_stage_is_one_memory_seen_through_two_mappings():
    """The referee's stage on a GPU: a virtual-memory allocation exported as a descriptor; a second mapping
    of it (what the executor makes) sees what the first wrote, and slots outside it are refused."""
    from evaluator.wire.stage import Layout, Stage

    layout = Layout.plan([(0, [64, 32], "float32")], 64 * 16 * 4, [16 * 4, 16 * 4, 8])
    referee_side = Stage.create(layout.size, "cuda")
    executor_side = Stage.attach(os.dup(referee_side.fd), referee_side.size, "cuda")
    x = torch.randn(64, 32, device="cuda")
    referee_side.view(layout.inputs[0]).copy_(x)
    torch.cuda.synchronize()
    assert torch.equal(executor_side.view(layout.inputs[0]), x)
    with pytest.raises(ExchangeError):
        executor_side.view(layout.inputs[0].model_copy(update={"offset": referee_side.size}))
    executor_side.close()
    referee_side.close()


def test_tensors_that_do_not_fit_are_refused_before_anything_is_written():
    exchange = Exchange.create(1024)
    with pytest.raises(ExchangeError, match="do not fit"):
        exchange.write([("big", torch.zeros(1024))])
    exchange.close()


# --------------------------------------------------------------------------- the executor's channel

def _process_reading(lines: list[bytes], close: bool = True) -> ExecutorProcess:
    """An ExecutorProcess whose channel holds `lines` (no process behind it)."""
    process = ExecutorProcess(source=b"", digest="0" * 64, device="cpu", compile_only=False, watch=[],
                              cache_dir=Path("/nonexistent"), problem_location=Path("/nonexistent"), protect=[],
                              exchange_bytes=None,
                              output_cap=1024, memory_limit_gb=None)
    read_fd, write_fd = os.pipe()
    for line in lines:
        os.write(write_fd, line)
    if close:
        os.close(write_fd)
    process._channel_fd = read_fd
    return process


def test_the_referee_reads_replies_in_turn_and_keeps_the_containment_reports():
    lines = [ExecutorMessage(kind="containment").model_dump_json().encode() + b"\n",
             ExecutorMessage(kind="phase", phase="compile").model_dump_json().encode() + b"\n",
             ExecutorMessage(kind="reply", reply=Reply(id=0)).model_dump_json().encode() + b"\n"]
    process = _process_reading(lines)
    assert process.reply(0, time.monotonic() + 5).id == 0
    assert [m.kind for m in process.messages] == ["containment", "phase", "reply"]


@pytest.mark.parametrize("line, reason", [
    (ExecutorMessage(kind="reply", reply=Reply(id=7)).model_dump_json().encode() + b"\n", "malformed"),  # out of turn
    (b'{"kind": "verdict", "verdict": {"status": "correct"}}\n', "malformed"),                              # forged
    (b"not json\n", "malformed"),
    (b"", "closed"),
])
def test_anything_but_the_awaited_reply_ends_the_executor(line, reason):
    process = _process_reading([line])
    with pytest.raises(Ended) as ended:
        process.reply(1, time.monotonic() + 5)
    assert ended.value.reason == reason


def test_a_silent_executor_runs_out_of_time():
    process = _process_reading([], close=False)
    with pytest.raises(Ended) as ended:
        process.reply(1, time.monotonic() + 0.3)
    assert ended.value.reason == "timeout"


@pytest.mark.slow  # over 0.4 s: out of the fast subset
def test_a_paused_executors_memory_is_not_scanned_until_it_is_continued(monkeypatch):
    from evaluator.referee import process as process_module

    scans = []
    monkeypatch.setattr(process_module.holding, "processes", lambda pid, by_tree: scans.append(pid) or {pid: True})
    monkeypatch.setattr(process_module, "MEMORY_POLL_S", 0.02)
    process = _process_reading([], close=False)
    process.memory_limit_gb, process.proc, process.paused = 1.0, type("P", (), {"pid": 4242})(), True
    with pytest.raises(Ended):
        process.reply(0, time.monotonic() + 0.2, poll_memory=True)
    assert scans == []  # stopped: nothing of it can grow
    process.ended, process.paused = None, False
    with pytest.raises(Ended):
        process.reply(0, time.monotonic() + 0.2, poll_memory=True)
    assert len(scans) >= 3 and set(scans) == {4242}


def test_a_pipe_is_polled_through_its_first_stretch_then_waited_on():
    read_fd, write_fd = os.pipe()
    try:
        began = time.perf_counter()
        assert not readable(read_fd, 0.2, poll_s=0.05)  # nothing comes: False at the timeout, not at the poll's end
        assert time.perf_counter() - began >= 0.19
        # a message during the polled stretch, and one after it (while the reader sleeps), are both seen
        for delay in (0.02, 0.12):
            timer = threading.Timer(delay, os.write, (write_fd, b"x"))
            began = time.perf_counter()  # before the timer starts: its delay is counted from after this
            timer.start()
            assert readable(read_fd, 5.0, poll_s=0.05)
            assert delay <= time.perf_counter() - began < 2.0
            timer.join()
            assert os.read(read_fd, 1) == b"x"
        os.close(write_fd)
        write_fd = None
        assert readable(read_fd, 5.0, poll_s=0.05)  # the end of the pipe is readable
    finally:
        os.close(read_fd)
        if write_fd is not None:
            os.close(write_fd)


def test_a_pipe_numbered_past_1024_is_waited_on_too():
    """select() refuses descriptors from FD_SETSIZE (1024) up, which a parent with many lanes, builds and logs can
    reach; the wait is a poll()."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft <= 1500:
        if hard != resource.RLIM_INFINITY and hard <= 1500:
            pytest.skip(f"this process may open {hard} files at most")
        resource.setrlimit(resource.RLIMIT_NOFILE, (2048, hard))
    read_fd, write_fd = os.pipe()
    high = os.dup2(read_fd, 1500)
    os.close(read_fd)
    try:
        assert not readable(high, 0.05)
        os.write(write_fd, b"x")
        assert readable(high, 1.0) and readable(high, 1.0, poll_s=0.01)
    finally:
        os.close(high)
        os.close(write_fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_commands_are_one_typed_union():
    command = COMMAND.validate_json(Call(id=3, place=4096).model_dump_json())
    assert isinstance(command, Call) and command.place == 4096
    put = COMMAND.validate_json(LoadState(id=4, tensors=[TensorSlot(name="state.w", dtype="float32", shape=[2],
                                                                     offset=0, nbytes=8)]).model_dump_json())
    assert put.tensors[0].name == "state.w" and not put.tensors[0].in_stage
    with pytest.raises(ValueError):
        Reply.model_validate_json('{"id": 1, "verdict": "correct"}')  # replies carry nothing unknown


# --------------------------------------------------------------------------- baselines and the verdict

@pytest.mark.slow  # an in-process judgement (referee, calibrator, rounds): about a second
def test_baselines_are_timed_in_rounds_before_the_first_candidate_and_every_few():
    referee = local_executor.referee(baselines=["eager"], baseline_every=2)
    referee.ensure_round()
    first = referee.current_round
    assert first.source.round == 0 and first.source.after_candidates == 0
    cost = first.window_cost  # the calibrator's windows: each longer than the device time it reported
    assert cost is not None and cost.windows >= 10 and cost.cost_ms > 0 and cost.window_ms > cost.device_ms
    assert first.baselines["eager"].reps >= 10 and first.source.batch == referee.batch
    referee.ensure_round()
    assert referee.current_round is first  # nothing judged since
    referee.judged, referee.timed_since_round = 2, 2
    referee.ensure_round()
    assert referee.current_round.source.round == 1 and referee.current_round.source.after_candidates == 2
    rounds = referee.close()  # nothing timed since the last round: no more
    assert [r.index for r in rounds] == [0, 1] and "eager" in rounds[1].baselines


@pytest.mark.slow  # an in-process judgement (referee, calibrator, rounds): about a second
def test_a_verdict_divides_by_the_round_before_it_and_says_which():
    referee = local_executor.referee(baselines=["eager"])
    referee.ensure_round()
    session = local_executor.session_for(local_executor.Honest, referee)
    verdict = phases.judge(session, compile_only=False, imported=Imported())
    assert verdict.status == Status.correct, verdict.error
    assert verdict.baseline_source == referee.current_round.source
    eager = referee.current_round.baselines["eager"]
    assert verdict.baselines["eager"] == eager
    assert verdict.speedup["eager"] == pytest.approx(eager.median_ms / verdict.runtime_ms)
    check = verdict.timing_check
    assert check.agrees and check.calls == verdict.timing.reps * check.calls_per_window
    assert [q.q for q in check.quantiles] == [0.1, 0.25, 0.5, 0.75]
    assert 0 < check.overhead_ms < check.wall_ms * check.calls_per_window / check.calls  # a window's cost, beside it
    assert verdict.runtime_ms == pytest.approx(check.referee_ms, abs=1e-5) == verdict.timing.median_ms
    assert verdict.custom_kernels == [] and "no_custom_kernel" in {f.name for f in verdict.flags}


@pytest.mark.slow  # an in-process judgement (referee, calibrator, rounds): about a second
def test_the_verdict_says_each_distributions_checks_and_where_its_time_sits_against_the_peaks():
    referee = local_executor.referee(baselines=["eager"])
    referee.ensure_round()
    verdict = phases.judge(local_executor.session_for(local_executor.Honest, referee), compile_only=False,
                           imported=Imported())
    assert verdict.status == Status.correct, verdict.error
    by_distribution = verdict.correctness.by_distribution
    assert list(by_distribution) == referee.problem.distributions == ["randn", "rand"]
    assert all(c.trials == referee.problem.trials and all(c.tiers.values()) for c in by_distribution.values())
    assert sum(c.trials for c in by_distribution.values()) == verdict.correctness.main.trials
    roof = verdict.roofline
    # size small: x (128, 1024); Linear 1024 -> 512, scale and BatchNorm's four vectors of 512; output (128, 512)
    assert roof.min_bytes == 4 * (128 * 1024 + 512 * 1024 + 512 + 512 + 4 * 512 + 128 * 512) + 8  # + num_batches
    assert roof.flops == 2 * 128 * 1024 * 512
    assert roof.tflops == pytest.approx(roof.flops / (verdict.runtime_ms * 1e-3) / 1e12)
    assert roof.bandwidth_tbs == pytest.approx(roof.min_bytes / (verdict.runtime_ms * 1e-3) / 1e12)
    assert roof.peak_bandwidth_tbs is None and roof.fraction_bandwidth is None  # no bandwidth known for the CPU
    assert verdict.kernel_times_us == []  # the CPU's observer sees calls, not device time


def test_the_roofline_puts_a_time_against_the_devices_peaks():
    from evaluator.referee.timing import roofline

    roof = roofline(2e12, 3_350_000_000, 10.0, "cuda", "NVIDIA H100 80GB HBM3")  # 2 TFLOP, 3.35 GB in 10 ms
    assert roof.peaks == "H100 SXM" and roof.tflops == pytest.approx(200) and roof.bandwidth_tbs == pytest.approx(0.335)
    assert roof.fraction_tf32 == pytest.approx(200 / 495) and roof.fraction_tensor == pytest.approx(200 / 989)
    assert roof.fraction_fp32 == pytest.approx(200 / 67) and roof.fraction_bandwidth == pytest.approx(0.1)
    without_flops = roofline(None, 1000, 1.0, "cuda", "NVIDIA L4")
    assert without_flops.tflops is None and without_flops.fraction_tf32 is None
    assert without_flops.fraction_bandwidth == pytest.approx(1e-6 / 0.3)


class _ListsKernels(local_executor.LocalLink):
    """The executor's profile reply as a CUDA executor sends it: kernel names and their device times."""

    times: list[float] = []

    def request(self, command, deadline, during=None):
        reply = super().request(command, deadline, during)
        if isinstance(command, Profile):
            reply.kernels, reply.kernel_count = ["fused_scale_kernel", "bn_stats_kernel"], 2
            reply.kernel_times_us = list(self.times)
        return reply


@pytest.mark.parametrize("times, kept", [
    ([12.5, 3.0], [12.5, 3.0]),
    ([12.5], []),                     # one time for two kernels: which is which?
    ([12.5, -3.0], []),               # no duration
    ([float("nan"), 3.0], []),
])
@pytest.mark.slow  # an in-process judgement (referee, calibrator, rounds): about a second
def test_kernel_times_come_with_their_kernels_or_not_at_all(times, kept):
    referee = local_executor.referee(baselines=["eager"])
    referee.ensure_round()
    link = _ListsKernels(local_executor.Honest, referee)
    link.times = times
    session = Session(referee=referee, link=link, name="in-process", digest="", problem=referee.problem.name,
                             size=referee.size, device=referee.device, compile_timeout_s=60, run_timeout_s=60)
    verdict = phases.judge(session, compile_only=False, imported=Imported())
    assert verdict.status == Status.correct, verdict.error
    assert verdict.kernels == ["fused_scale_kernel", "bn_stats_kernel"] and verdict.kernel_times_us == kept


def test_cuda_evaluations_time_the_problems_ceilings_by_default():
    from evaluator.wire.problem import load_problem
    from evaluator.parent.sandbox import EvalOptions, Evaluator, default_baselines

    problem = load_problem("gemm_scale_bn")
    assert default_baselines(problem, "cuda") == ["eager", "eager_tf32", "compile", "compile_tf32", "part:gemm_tf32"]
    assert default_baselines(problem, "cpu") == ["eager"]
    assert Evaluator(EvalOptions(device="cuda")).baselines == default_baselines(problem, "cuda")
    assert Evaluator(EvalOptions(device="cuda", baselines=["eager"])).baselines == ["eager"]


def test_baseline_series_stop_once_the_median_is_known_and_never_beyond_the_budget():
    from evaluator.referee.timing import Timer, median_half_width

    timer = Timer("cpu", min_reps=10)
    steady = timer.series(lambda: sum(range(2000)), 200, target_rel=0.5)[0]
    assert len(steady) == 20  # two rounds of min_reps: the median is known to 50% by then
    noisy = iter([1.0, 100.0] * 200)
    clock = {"t": 0.0}

    def fake_one(fn, call, before=None, after=None, calls=1):
        clock["t"] = next(noisy)
        return clock["t"], clock["t"]

    timer.one = fake_one
    assert len(timer.series(lambda: None, 57, target_rel=0.005)[0]) == 57  # never known to 0.5%: the budget ends it
    assert median_half_width([1.0] * 19 + [2.0]) == 0.0 and median_half_width([1.0, 3.0] * 10) == 1.0


def test_a_busy_device_stops_the_executors_started_ahead_before_the_candidate_is_blamed():
    referee = local_executor.referee()
    session = local_executor.session_for(local_executor.Honest, referee)
    answers, closed = [None, 0.01], []
    referee.device_idle = lambda limit_s: answers.pop(0)
    referee.close_waiting = lambda: closed.append(True) or True
    idle(session, "after clocked call 1 had returned")  # idle once those started ahead are gone
    assert closed == [True] and answers == []
    referee.device_idle = lambda limit_s: None  # still busy with none left: the candidate's own work
    referee.close_waiting = lambda: False
    with pytest.raises(Judged) as judged:
        idle(session, "after clocked call 2 had returned")
    assert judged.value.status == Status.runtime_error and "device work kept running after clocked call 2" in \
        judged.value.error


def test_a_busy_device_shared_with_another_lane_voids_the_window_only_where_the_turn_began_busy():
    """With lanes taking turns on the GPU (evaluator.referee.device_share), work left on the device between a candidate's
    windows may be another lane's candidate's where its turn began with the device busy: the window is void (timed
    again). In a turn that began idle only its own can run: its verdict, as on a GPU of its own."""
    from evaluator.referee.time_phase import SharedBusy

    referee = local_executor.referee()
    session = local_executor.session_for(local_executor.Honest, referee)
    referee.device_idle = lambda limit_s: None
    referee.close_waiting = lambda: False
    referee.share, referee.opened_busy = object(), True  # its turn began with another lane's work on the device
    with pytest.raises(SharedBusy, match="began with the device busy"):
        idle(session, "after clocked call 2 had returned")
    referee.opened_busy = False  # a turn that began idle: what runs is its own
    with pytest.raises(Judged, match="device work kept running"):
        idle(session, "after clocked call 3 had returned")


def test_a_candidate_is_held_around_the_calibrators_window_and_released_after():
    events = []

    class Link:
        def hold(self):
            events.append("hold")

        def release(self):
            events.append("release")

    with pytest.raises(RuntimeError):
        with held(Link()):
            events.append("window")
            raise RuntimeError("the calibrator failed")
    assert events == ["hold", "window", "release"]


@pytest.mark.slow  # over 0.4 s: out of the fast subset
def test_each_side_is_stopped_through_the_other_sides_windows():
    from evaluator.referee.time_phase import BACK_TO_BACK_WINDOWS, time_phase
    from evaluator.wire.protocol import Go, Handoff, Put

    session, built, checked = local_executor.checked(local_executor.Honest)
    calibrator = session.referee.calibrator
    calibrator.get_ready()
    log = []
    for side, link in (("candidate", session.link), ("calibrator", calibrator.link)):
        link.hold = lambda side=side: log.append(f"{side} held")
        link.release = lambda side=side: log.append(f"{side} released")
        request = link.request
        link.request = lambda command, deadline, during=None, side=side, request=request: (
            isinstance(command, (Go, Put, Handoff)) and log.append(f"{side} {command.kind}"),
            request(command, deadline, during))[1]
    time_phase(session, checked, built)
    held = {"candidate": False, "calibrator": False}
    windows = {"candidate": 0, "calibrator": 0}
    for entry in log:
        side, what = entry.split()
        if what in ("held", "released"):
            held[side] = what == "held"
        else:
            other = "calibrator" if side == "candidate" else "candidate"
            assert held[other] and not held[side], f"{entry} with {held}"
            windows[side] += what in ("go", "handoff")
    # every timed window has one of the calibrator's beside it; the back-to-back windows, compared only, none
    assert windows["candidate"] == windows["calibrator"] + BACK_TO_BACK_WINDOWS and windows["calibrator"] > 3


@pytest.mark.slow  # over 0.4 s: out of the fast subset
def test_cpu_time_alone_charged_to_a_held_candidate_retakes_the_calibrators_window_and_anything_more_is_its_verdict():
    """An honest candidate's frozen group was once charged 106 us while held, every task still there (a task
    preempted on its way into the freezer, cold, beside builds): its window, closed before the hold, stands, and the
    calibrator's beside it is taken again in a fresh hold, never kept; not the candidate's `runtime_error`. A task that
    ended while held still is, and so is CPU time charged past MAX_VOID_WINDOWS times (an attacker's review: a
    candidate able to void windows at will would choose which of its windows are dropped)."""
    from evaluator.referee.time_phase import MAX_VOID_WINDOWS, time_phase
    from evaluator.wire.cgroups import Moved

    def moved(text: str, alone: bool) -> Moved:
        said = Moved(text)
        said.cpu_time_alone = alone
        return said

    alone, ended = "106 us of CPU time was charged to it", "106 us of CPU time was charged to it; 1 of its task(s) ended (4242)"
    from evaluator.referee.time_phase import BACK_TO_BACK_WINDOWS
    from evaluator.wire.protocol import Go, Handoff

    session, built, checked = local_executor.checked(local_executor.Honest)
    said = [moved(alone, True)]
    session.link.ran_while_held = lambda: said.pop() if said else None
    windows = {"candidate": 0, "calibrator": 0}
    for side, link in (("candidate", session.link), ("calibrator", session.referee.calibrator.link)):
        request = link.request
        link.request = lambda command, deadline, during=None, side=side, request=request: (
            windows.__setitem__(side, windows[side] + isinstance(command, (Go, Handoff))),
            request(command, deadline, during))[1]
    timed = time_phase(session, checked, built)
    [retaken] = timed.check.void_windows
    assert "its own frozen group: 106 us" in retaken, retaken
    # the candidate's window stood (none timed again) and the calibrator's beside it was taken twice
    assert windows["calibrator"] == windows["candidate"] - BACK_TO_BACK_WINDOWS + 1, windows
    for text, is_alone in [(ended, False), (alone, True)]:  # a task ended: at once; CPU time alone: past the limit
        session, built, checked = local_executor.checked(local_executor.Honest)
        holds = []
        session.link.ran_while_held = lambda text=text, is_alone=is_alone: holds.append(1) or moved(text, is_alone)
        with pytest.raises(Judged, match="void on purpose") as judged:
            time_phase(session, checked, built)
        assert judged.value.status == Status.runtime_error and (is_alone or "ended" in str(judged.value))
        assert len(holds) == (MAX_VOID_WINDOWS + 1 if is_alone else 1)


def test_baselines_are_run_untimed_before_the_first_round_only(monkeypatch):
    """The first round is not measured cold: each baseline runs untimed first (at least the warm-up's
    calls), for FIRST_ROUND_WARM_S before the calibrator's start (which waits for the zygote's imports), then the
    warm-up's calls just before it is timed; later rounds need no such run."""
    from evaluator.referee import referee as referee_module

    monkeypatch.setattr(referee_module, "FIRST_ROUND_WARM_S", 0.05)
    referee = local_executor.referee(baselines=["eager"])
    calls = []
    forward = referee.baseline_model.forward
    monkeypatch.setattr(referee.baseline_model, "forward", lambda *a: calls.append(1) or forward(*a))
    warmed = []
    real_warm = referee.warm_baselines
    monkeypatch.setattr(referee, "warm_baselines",
                        lambda early=False: warmed.append((early, len(calls))) or real_warm(early))
    referee.ensure_round()
    referee.baseline_round()
    # early, before anything of the first round was timed, then in the round only: never in the second
    assert [early for early, _ in warmed] == [True, False] and warmed[0][1] == 0 and len(referee.rounds) == 2
    # warmed early, and in full again in any later round that needs it (stored figures dropped hours later)
    assert set(referee.warmed_early) == {"eager"} and referee.warm_seconds("eager") == referee_module.FIRST_ROUND_WARM_S
    timed_calls = sum(r.baselines["eager"]["reps"] + r.baselines["eager"]["warmup"] for r in referee.rounds)
    # the untimed run (at least the warm-up's calls; more within FIRST_ROUND_WARM_S) came on top of the rounds'
    assert len(calls) >= timed_calls + referee.timer.warmup


def test_each_baseline_runs_untimed_for_its_devices_clock_warm_right_before_its_series(monkeypatch):
    """A GPU's clocks follow its recent work (a TF32 GEMM read 1.38 ms after 3 s idle and 1.61 after 3 s busy on an
    H200): each baseline's series follows CLOCK_WARM_S of its own untimed calls, so that a spot check after an idle
    spell reads what a round after busy work stored. None on the CPU."""
    from evaluator.referee import baselines

    for warm_s in (0.0, 0.3):
        monkeypatch.setitem(baselines.CLOCK_WARM_S, "cpu", warm_s)
        referee = local_executor.referee(baselines=["eager"])
        stamps, first_timed = [], []
        forward = referee.baseline_model.forward
        monkeypatch.setattr(referee.baseline_model, "forward", lambda *a: stamps.append(time.perf_counter()) or forward(*a))
        one = referee.timer.one
        monkeypatch.setattr(referee.timer, "one", lambda *a, **k: first_timed.append(len(stamps)) or one(*a, **k))
        started = time.perf_counter()
        stats = referee.time_baseline("eager")
        untimed = stamps[:first_timed[0]]
        assert stats.median_ms > 0 and untimed and untimed[0] - started < 0.25
        if warm_s:  # for the whole warm, its last call just before the sizing call
            assert untimed[-1] - started >= warm_s - stats.max_ms / 1e3 and stamps[first_timed[0]] - untimed[-1] < 0.25
        else:  # the warm-up's calls alone
            assert len(untimed) == referee.timer.warmup


def test_a_referee_started_while_the_parent_gates_times_nothing_until_told_the_gate_is_over(monkeypatch, tmp_path):
    """RefereeConfig.gate_pending: the inbox holds `gated` until the parent's request (never queued as a candidate),
    or until the parent is gone; the referee's first exclusive turn (its first round's baselines) waits for it, its
    preparation does not; a lane sharing its GPU with others holds no turn while it waits (another lane times)."""
    import os

    from evaluator.referee import referee as referee_module
    from evaluator.referee.device_share import EXCLUSIVE, NONE, DeviceShare
    from evaluator.referee.__main__ import Inbox
    from evaluator.wire.protocol import JudgeRequest

    monkeypatch.setattr(referee_module, "FIRST_ROUND_WARM_S", 0.0)
    assert Inbox(iter(()), gate_pending=False).gated.is_set()
    read, write = os.pipe()
    with os.fdopen(read) as requests, os.fdopen(write, "w") as parent:
        inbox = Inbox(requests, gate_pending=True)
        parent.write(JudgeRequest(name="c0").model_dump_json() + "\n")
        parent.flush()
        time.sleep(0.2)
        assert not inbox.gated.is_set() and [r.name for r in inbox.queued()] == ["c0"]
        referee = local_executor.referee(baselines=["eager"])
        referee.gate_over = inbox.gated.wait
        referee.share, other_lane = DeviceShare(tmp_path, "GPU-x"), DeviceShare(tmp_path, "GPU-x")
        timed = []
        monkeypatch.setattr(referee, "time_baseline", lambda name: timed.append(name) or _stats(5.0, 0.1))
        first_round = threading.Thread(target=referee.ensure_round)
        first_round.start()
        time.sleep(0.5)
        assert timed == [] and first_round.is_alive()  # prepared, nothing timed
        timing = threading.Event()  # another lane on the GPU takes its exclusive turn meanwhile
        threading.Thread(target=lambda: (other_lane.take(EXCLUSIVE), timing.set()), daemon=True).start()
        assert timing.wait(5)  # the lane waiting for the gate holds no turn
        other_lane.take(NONE)
        parent.write(JudgeRequest(kind="gated").model_dump_json() + "\n")
        parent.flush()
        first_round.join(timeout=60)
        assert timed == ["eager"] and len(referee.rounds) == 1
        assert [r.name for r in inbox.queued()] == ["c0"]  # `gated` is no candidate
        referee.share.close()
        other_lane.close()
    gone = Inbox(iter([]), gate_pending=True)  # the parent gone: nothing will come
    assert gone.gated.wait(timeout=5)


def test_a_round_records_how_far_each_baseline_moved_since_the_one_before(monkeypatch):
    from evaluator.referee import referee as referee_module
    from evaluator.wire.records import TimingStats

    monkeypatch.setattr(referee_module, "FIRST_ROUND_WARM_S", 0.0)
    referee = local_executor.referee(baselines=["eager"])
    medians = iter([2.0, 1.0])

    def timed(name):
        median = next(medians)
        return TimingStats(median_ms=median, mean_ms=median, min_ms=median, max_ms=median, iqr_ms=0.0, reps=5,
                           warmup=1)

    monkeypatch.setattr(referee, "time_baseline", timed)
    referee.ensure_round()
    assert referee.current_round.moved == {}
    second = referee.baseline_round()
    assert second.moved == {"eager": pytest.approx(-0.5)}


def _twin_referee(monkeypatch, model_class=None):
    """A referee whose eager is the reference judged as a candidate, the twin's executor in this process (a LocalLink
    of `model_class`, by default the reference's own Model, as the twin's source makes it)."""
    from evaluator.referee import referee as referee_module

    monkeypatch.setattr(referee_module, "FIRST_ROUND_WARM_S", 0.0)
    referee = local_executor.referee(baselines=["eager"], eager_as_candidate=True)
    assert referee.twin is not None
    started = []
    monkeypatch.setattr(referee, "executor_for", lambda request: started.append(request.name) or local_executor.LocalLink(
        model_class or referee.module.Model, referee))
    return referee, started


def test_eager_is_the_reference_judged_as_a_candidate_and_the_referees_own_figure_is_kept_beside_it(monkeypatch):
    """Eager timed the way candidates are (evaluator.referee.twin): each round's eager is the twin's ranked figure,
    timed through the windows a candidate's are; the referee's own loop's figure stays on the round's record."""
    from evaluator.referee import twin

    referee, started = _twin_referee(monkeypatch)
    medians = iter([2.0, 1.0])
    own = lambda name: _stats(next(medians), 0.0)  # noqa: E731 - the referee's loop, a figure no window gives
    monkeypatch.setattr(referee, "time_baseline", own)
    referee.ensure_round()
    referee.baseline_round()
    assert started == [twin.NAME, twin.NAME]  # judged in every round, an executor each time
    for record, in_referee in zip(referee.rounds, (2.0, 1.0)):
        assert record.in_referee["eager"]["median_ms"] == in_referee
        figure = record.baselines["eager"]
        assert figure["median_ms"] not in (2.0, 1.0) and figure["reps"] >= referee.timer.min_reps
        assert figure["handed_off"] == referee.handed_off and "eager" not in record.failed
    current = referee.current_round
    assert current.baselines["eager"].median_ms == referee.rounds[-1].baselines["eager"]["median_ms"]
    # drift is the twin's against the twin's, never against the referee's own figure
    before = referee.rounds[0].baselines["eager"]["median_ms"]
    assert current.moved["eager"] == pytest.approx(current.baselines["eager"].median_ms / before - 1)


def test_the_twins_executor_starts_in_the_turn_before_its_round_and_is_kept_for_the_batchs_last_round(monkeypatch):
    """The twin imports while the candidate before its round is judged (held as any executor started ahead while that
    one is timed), not inside the round, where it would wait held; the batch's last round keeps it too."""
    from types import SimpleNamespace

    from evaluator.referee import twin
    from evaluator.wire.protocol import JudgeRequest

    referee, _ = _twin_referee(monkeypatch)
    starts = []
    monkeypatch.setattr(referee, "start_ahead", lambda requests, now=None: starts.append([r.name for r in requests]))
    monkeypatch.setattr(referee, "ensure_round", lambda defer=False: None)
    monkeypatch.setattr(phases, "begin", lambda session, compile_only: SimpleNamespace(
        results={"timed": object()}, outcome=None, rest=None))
    referee.rounds = [None]  # past the first round's early warm-up
    every = referee.config.baseline_every
    turns = []
    for n in range(every):
        before = len(starts)
        queued = [JudgeRequest(name=f"c{n + 1}", path=f"/c{n + 1}", digest=str(n + 1))]
        referee.judge(JudgeRequest(name=f"c{n}", path=f"/c{n}", digest=str(n)), queued)
        turns.append(twin.NAME in sum(starts[before:], []))
    assert turns == [False] * (every - 1) + [True]  # only in the turn a round follows
    referee.timed_since_round, before = every - 1, len(starts)
    referee.judge(JudgeRequest(name="alone", path="/alone", digest="a"))  # a warm Judge's call, nothing queued
    assert twin.NAME not in sum(starts[before:], [])  # no twin idling on the device between its calls
    referee.timed_since_round, before = 0, len(starts)
    close = JudgeRequest(kind="close")
    referee.judge(JudgeRequest(name="one", path="/one", digest="o"), [JudgeRequest(name="l", path="/l", digest="l"), close])
    assert twin.NAME not in sum(starts[before:], [])  # the close behind another candidate: not yet
    referee.judge(JudgeRequest(name="last", path="/last", digest="l"), [close])
    assert twin.NAME in sum(starts[before:], [])  # the batch's close next behind it: its last round follows

    closed, at_round = [], []
    kept, other = SimpleNamespace(close=lambda wait_s: closed.append("twin")), object()
    referee.waiting = {(referee.twin.path, referee.twin.digest): kept, ("/c9", "9"): other}
    monkeypatch.setattr("evaluator.referee.referee.close_ahead",
                        lambda waiting, process: closed.append(process) or waiting.pop(next(
                            k for k, p in waiting.items() if p is process)))
    referee.current_round = SimpleNamespace()
    monkeypatch.setattr(referee, "baseline_round", lambda: closed.append("round") or at_round.append(dict(referee.waiting)))

    class Closing:  # the last candidate's executor closing (no reply was made here: `finish` never ran)
        def wait(self):
            closed.append("waited")

    referee.closing[:] = [Closing()]
    referee.close()
    assert list(at_round[0].values()) == [kept]  # the last round finds the twin imported, and begins beside the last
    # executor's exit and replays, as any round after a candidate does (its exclusive turn waits for them)
    assert closed == [other, "round", "waited"]


def test_executors_started_for_queued_candidates_start_cublas_ahead_and_the_one_wanted_now_does_not(monkeypatch):
    """An executor started ahead of its turn says so in its request (ExecutorRequest.ahead: it starts cuBLAS at its
    start, evaluator.executor.first_use); the one the referee judges next does not, as in a warm Judge's call."""
    import dataclasses

    from evaluator.referee.process import ExecutorProcess
    from evaluator.wire.protocol import JudgeRequest

    referee = local_executor.referee(baselines=["eager"])
    referee.memory = dataclasses.replace(referee.memory, ahead=3)
    started = {}
    monkeypatch.setattr(ExecutorProcess, "start", lambda self: started.setdefault(
        self.digest, self.start_request(Path("/c.py")).ahead))
    monkeypatch.setattr(ExecutorProcess, "import_ahead", lambda self, deadline, then: None)
    now, *queued = [JudgeRequest(name=f"c{n}", path=str(Path(__file__)), digest=str(n)) for n in range(4)]
    referee.start_ahead([now, *queued], now=now)
    assert started == {"0": False, "1": True, "2": True}  # the third queued one is beyond `ahead`
    referee.start_ahead([*queued, JudgeRequest(name="c4", path=str(Path(__file__)), digest="4")])
    assert started["3"] is True
    referee.waiting.clear()
    referee.memory = dataclasses.replace(referee.memory, ahead=1)  # a lane's `ready` takes no candidate's place
    referee.start_ahead([JudgeRequest(kind="ready"), JudgeRequest(name="c5", path=str(Path(__file__)), digest="5")])
    assert started["5"] is True
    referee.waiting.clear()


def test_a_twin_that_is_not_correct_leaves_eager_failed_with_the_reason(monkeypatch):
    """No figure from the referee's own loop stands in for the twin's: where the twin fails, the round has no eager
    (verdicts divide by nothing there, and say why: `baseline_failed`)."""

    class Off(local_executor.Honest):
        def forward(self, x):
            return super().forward(x) + 1.0

    referee, _ = _twin_referee(monkeypatch, Off)
    referee.ensure_round()
    current = referee.current_round
    assert "eager" not in current.baselines and "eager" in referee.rounds[-1].in_referee
    assert "reference judged as a candidate" in current.failed["eager"] and "incorrect" in current.failed["eager"]
    assert referee.rounds[-1].failed == current.failed


def test_a_twin_started_beside_a_candidate_that_fails_is_judged_again_from_a_fresh_executor(monkeypatch):
    """The twin's executor started ahead shares the device with the candidate then judged, which could crowd out its
    start: where it comes out other than `correct`, the round judges the twin once more from an executor started with
    no candidate beside it (one judged in its round from the start is not judged twice: the test above)."""

    class Off(local_executor.Honest):
        def forward(self, x):
            return super().forward(x) + 1.0

    referee, started = _twin_referee(monkeypatch)
    crowded = local_executor.LocalLink(Off, referee)
    closed = []
    monkeypatch.setattr(referee, "close_later", lambda process: closed.append(process))
    monkeypatch.setattr(referee, "exclusive", lambda *args: contextlib.nullcontext())  # nothing real to hold here
    referee.waiting[(referee.twin.path, referee.twin.digest)] = crowded

    class Closing:  # the candidate judged before, still closing
        def wait(self):
            closed.append(f"waited, {len(started)} started")

    referee.closing[:] = [Closing()]
    referee.ensure_round()
    assert crowded in closed and len(started) == 1  # one fresh executor, after the one started ahead failed
    assert "waited, 0 started" in closed  # and once the candidate before was gone
    assert "eager" in referee.current_round.baselines and "eager" not in referee.current_round.failed


@pytest.mark.parametrize("first", [True, False])
def test_after_a_round_the_twin_is_judged_before_the_baselines_are_timed(monkeypatch, first):
    """A round after another judges its twin before its baselines are timed: the twin's start and checks overlap the
    replay the candidate before left for later, which the round's exclusive turn would only wait for. The batch's first
    round times its baselines first (the twin leans on the round's calibrator cost), and so does every round with
    KH_DEFER_REPLAY=candidates (`twin.FIRST`, for measuring). Either way the round's eager is the twin's."""
    from evaluator.referee import twin

    monkeypatch.setattr(twin, "FIRST", first)
    referee, _ = _twin_referee(monkeypatch)
    order, real_begin, real_round = [], phases.begin, referee._baseline_round
    monkeypatch.setattr(phases, "begin", lambda *a, **k: order.append("twin") or real_begin(*a, **k))
    monkeypatch.setattr(referee, "_baseline_round", lambda **k: order.append("baselines") or real_round(**k))
    referee.ensure_round()
    referee.baseline_round()
    assert order == ["baselines", "twin", *(["twin", "baselines"] if first else ["baselines", "twin"])]
    assert referee.rounds[-1].in_referee["eager"] is not None  # the mark of a twin's round
    assert referee.current_round.failed.get("eager", "").find("did not finish") < 0


def _twin_held_before_its_later_replay(monkeypatch, before=None):
    """A twin referee on the deferred path (the GPU's, on the CPU) whose later replay waits for `gate`; `seen` gets
    the twin's judgement as it waits, handed to `before` first."""
    import threading

    from evaluator.referee import replay, twin

    monkeypatch.setattr(replay, "DEFER", "1")
    referee, _ = _twin_referee(monkeypatch)
    gate, seen, real = threading.Event(), [], twin._settle_later

    def held(referee_, ran, *rest):
        seen.append(ran.judgement)
        if before is not None:
            before(ran.judgement)
        gate.wait(60)
        real(referee_, ran, *rest)

    monkeypatch.setattr(twin, "_settle_later", held)
    return referee, gate, seen


@pytest.mark.slow  # a round and its twin judged in-process: about two seconds
def test_the_twins_compared_calls_left_for_later_are_replayed_beside_the_next_candidate_and_the_round_waits(monkeypatch):
    """Where a candidate follows its round, the twin's compared calls left for later are replayed beside that
    candidate's start (as a candidate's are beside the next one's): until they are over the round has no eager (its
    phases' figure stands for the run limit alone), and the next exclusive turn waits for them (`closing`); then the
    round's eager is the twin's figure, on its record too."""
    import dataclasses
    from types import SimpleNamespace

    from evaluator.referee.session import run_limit

    referee, gate, seen = _twin_held_before_its_later_replay(monkeypatch)
    referee.ensure_round(defer=True)
    pending = referee.current_round
    assert "eager" not in pending.baselines and "not yet replayed" in pending.failed["eager"]
    assert referee.rounds[-1].in_referee == {}  # its record not yet a twin's round (returned at the batch's end)
    [judgement] = seen
    assert judgement.outcome is None and judgement.rest is not None and judgement.rest.seconds is None
    assert not all(event.is_set() for event in referee.closing)  # the next exclusive turn waits (Referee.exclusive)
    scaled = SimpleNamespace(run_timeout_scaled=True, run_timeout_s=1e6, timing_budget_s=1.0)
    as_settled = dataclasses.replace(pending, baselines={"eager": pending.eager_unsettled}, eager_unsettled=None)
    assert run_limit(scaled, pending) == run_limit(scaled, as_settled) < 1e6
    gate.set()
    for event in referee.closing:
        assert event.wait(60)
    current = referee.current_round
    assert judgement.rest.seconds is not None and judgement.rest.plan == []  # replayed, its copies let go
    assert "eager" not in current.failed and current.eager_unsettled is None
    assert current.baselines["eager"].median_ms == referee.rounds[-1].baselines["eager"]["median_ms"]
    assert current.baselines["eager"] == pending.eager_unsettled  # nothing of its figure changed, only when it stands


@pytest.mark.slow  # a round and its twin judged in-process: about two seconds
def test_a_twin_wrong_on_a_call_replayed_later_leaves_the_rounds_eager_failed_naming_the_call(monkeypatch):
    """A call of the twin's left for later that comes out wrong (its window's copy corrupted here) leaves the round
    with no eager, saying which call, on its record too: no verdict divides by a figure whose calls were not right."""
    named = []

    def corrupt(judgement):
        kept, indices = judgement.rest.plan[len(judgement.rest.plan) // 2]
        kept.staged["outputs"][indices[0]] += 1.0
        named.append(kept.first + indices[0])

    referee, gate, _ = _twin_held_before_its_later_replay(monkeypatch, corrupt)
    referee.ensure_round(defer=True)
    gate.set()
    for event in referee.closing:
        assert event.wait(60)
    current = referee.current_round
    assert "eager" not in current.baselines and "incorrect" in current.failed["eager"]
    assert f"wrong on clocked call {named[0]}:" in current.failed["eager"]
    assert referee.rounds[-1].failed == current.failed and "eager" not in referee.rounds[-1].baselines


@pytest.mark.slow  # a round, its twin and a candidate judged in-process: about four seconds
def test_the_candidate_after_a_round_is_timed_only_once_the_twins_calls_are_replayed_and_divides_by_its_figure(
        monkeypatch):
    """The candidate that follows a round starts and is checked beside the twin's replay, but its windows (its
    exclusive turn) wait for that replay, and its verdict divides by the round's settled eager: the twin's figure."""
    import threading

    from evaluator.wire.protocol import JudgeRequest

    referee, gate, seen = _twin_held_before_its_later_replay(monkeypatch)
    monkeypatch.setattr(referee, "eager_beside", None)  # as on a GPU: the round's eager, not one beside its windows
    referee.ensure_round(defer=True)
    entered, real_exclusive = [], referee.exclusive

    @contextlib.contextmanager
    def watched(*args, **kwargs):
        with real_exclusive(*args, **kwargs):
            entered.append("eager" in referee.current_round.baselines)  # the round settled as its turn began
            yield

    monkeypatch.setattr(referee, "exclusive", watched)
    threading.Timer(2.0, gate.set).start()  # the replay held past the candidate's start and checks
    request = JudgeRequest(name="next", path="/next", digest="n")
    session = referee.session_for(request, local_executor.LocalLink(local_executor.Honest, referee),
                                  referee.keys.derive("candidate", 1, "n"))
    verdict = phases.judge(session, compile_only=False, imported=Imported())
    assert verdict.status == Status.correct, verdict.error
    assert entered and all(entered), entered
    assert seen[0].rest.seconds is not None
    assert verdict.baselines["eager"] == referee.current_round.baselines["eager"] and "eager" in verdict.speedup


@pytest.mark.slow  # two rounds and their twins judged in-process: about five seconds
def test_a_round_begun_before_the_last_twins_calls_are_replayed_drifts_against_its_settled_figure(monkeypatch):
    """A round that begins while the last round's twin is still being replayed (its twin judged first, its own calls
    left for later too) waits for it before anything is timed, and its eager's drift is against that settled figure."""
    import threading

    from evaluator.referee import twin

    monkeypatch.setattr(twin, "FIRST", True)
    referee, gate, seen = _twin_held_before_its_later_replay(monkeypatch)
    referee.ensure_round(defer=True)
    threading.Timer(2.0, gate.set).start()
    referee.baseline_round(defer=True)
    for event in referee.closing:
        assert event.wait(60)
    assert len(seen) == 2 and all(judgement.rest.seconds is not None for judgement in seen)  # both left for later
    first = referee.rounds[0].baselines["eager"]["median_ms"]
    current = referee.current_round
    assert current.moved["eager"] == pytest.approx(current.baselines["eager"].median_ms / first - 1)
    assert referee.rounds[1].baselines["eager"]["median_ms"] == current.baselines["eager"].median_ms


@pytest.mark.slow  # two rounds and their twins judged in-process: about four seconds
def test_a_twin_whose_later_replay_runs_out_of_memory_leaves_its_round_without_eager_and_a_round_due(monkeypatch):
    """Beside the next candidate's own code, whose memory can crowd the twin's replay out: the round has no eager
    (`crashed`, the referee's memory), and the candidate after the one beside it gets a round of its own."""

    def crowded(judgement):
        rest = judgement.rest
        if crowded.done:  # the first round's twin alone
            return
        crowded.done = True

        def out_of_memory():
            rest.seconds = 0.0
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

        rest.run = out_of_memory

    crowded.done = False
    referee, gate, _ = _twin_held_before_its_later_replay(monkeypatch, crowded)
    gate.set()
    referee.ensure_round(defer=True)
    for event in referee.closing:
        assert event.wait(60)
    assert "crashed" in referee.current_round.failed["eager"] and referee.round_due
    referee.ensure_round(defer=True)
    assert len(referee.rounds) == 2 and not referee.round_due


def test_stored_figures_never_stand_in_for_the_twins_eager(monkeypatch):
    """With stored figures, eager is still judged as a candidate in every round: never read from the store, never
    the spot check (the referee's own loop against a stored twin's figure would compare two kinds of figure)."""
    from evaluator.referee import stored

    referee, started = _twin_referee(monkeypatch)
    cached = {name: _stats(ms, 0.1).model_copy(update={"handed_off": referee.handed_off})
              for name, ms in (("eager", 9.0), ("eager_tf32", 5.0))}
    referee.config.cached_baselines, referee.config.baselines = cached, ["eager", "eager_tf32"]
    checked = []
    monkeypatch.setattr(stored, "spot_checked", lambda names, first_round=False: checked.append(list(names)) or names)
    monkeypatch.setattr(referee, "time_baseline", lambda name: _stats(5.0, 0.1))
    referee.ensure_round()
    assert checked == [["eager_tf32"]] and started == ["reference twin"]
    assert referee.current_round.baselines["eager"].median_ms != 9.0
    assert referee.current_round.baselines["eager_tf32"].median_ms == 5.0


def _first_round_runs(monkeypatch, stored_figures: bool, beside: bool) -> tuple:
    """A twin referee's first round over eager, eager_tf32, compile, compile_tf32 and part:gemm_tf32, with their
    figures stored or not and with a candidate's executor started ahead beside it or not: (the referee, each untimed
    run and timing as (name, its seconds or "timed", whether in the exclusive turn), each spot-check draw)."""
    import contextlib

    from evaluator.referee import referee as referee_module
    from evaluator.referee import stored

    referee, _ = _twin_referee(monkeypatch)
    monkeypatch.setattr(referee_module, "FIRST_ROUND_WARM_S", 0.25)
    names = ["eager", "eager_tf32", "compile", "compile_tf32", "part:gemm_tf32"]
    referee.config.baselines = names
    if stored_figures:
        referee.config.cached_baselines = {n: _stats(5.0, 0.1).model_copy(update={"handed_off": referee.handed_off})
                                           for n in names}
    draws = iter([["part:gemm_tf32", "compile_tf32"], ["eager_tf32"]])
    drawn = []
    monkeypatch.setattr(stored, "spot_checked",
                        lambda names, first_round=False: drawn.append((list(names), first_round)) or next(draws))
    runs, in_turn = [], []
    monkeypatch.setattr(referee, "run_untimed", lambda name, calls, seconds=0.0: runs.append(
        (name, seconds, bool(in_turn))))
    monkeypatch.setattr(referee, "time_baseline", lambda name: runs.append((name, "timed", bool(in_turn))) or _stats(
        5.0, 0.1))
    exclusive = referee.exclusive

    @contextlib.contextmanager
    def marked(*args, **kwargs):
        with contextlib.nullcontext() if beside else exclusive(*args, **kwargs):
            in_turn.append(True)
            try:
                yield
            finally:
                in_turn.pop()

    monkeypatch.setattr(referee, "exclusive", marked)
    if beside:  # a candidate's executor started ahead (a warm Judge's first call starts its own before the round)
        referee.waiting[("candidate.py", "digest")] = object()
    referee.ensure_round()
    return referee, runs, drawn


def test_with_stored_figures_the_first_round_warms_only_its_spot_checks_and_compiles_before_its_turn(monkeypatch):
    """Stored figures stand: the first round's spot checks are drawn before it, and only those baselines run before
    its exclusive turn, the compiled one (its torch.compile) first; in the turn each is timed after the warm-up's calls
    alone, nothing compiles there, and no other baseline runs at all. The next round draws its own checks afresh."""
    referee, runs, drawn = _first_round_runs(monkeypatch, stored_figures=True, beside=False)
    names = referee.config.baselines
    before = [(name, seconds) for name, seconds, turn in runs if not turn]
    assert before == [("compile_tf32", 0.25), ("part:gemm_tf32", 0.25)]  # compiled first, each its full warm-up
    assert [(name, seconds) for name, seconds, turn in runs if turn] == [
        ("part:gemm_tf32", 0.0), ("part:gemm_tf32", "timed"), ("compile_tf32", 0.0), ("compile_tf32", "timed")]
    assert drawn == [([n for n in names if n != "eager"], True)]  # drawn once, the twin's eager never among them
    assert referee.spot_plan is None and "`compile_tf32` re-timed" in referee.current_round.source.cached
    runs.clear()
    referee.baseline_round()  # a later round: its own draw, nothing run before its turn
    assert drawn[1] == ([n for n in names if n != "eager"], False)
    assert [name for name, _, turn in runs if not turn] == [] and [r[0] for r in runs] == ["eager_tf32", "eager_tf32"]


def test_where_each_series_warms_the_clocks_the_first_rounds_spot_checks_run_their_warm_up_calls_alone(monkeypatch):
    """On a device whose series each warm its clocks first (baselines.CLOCK_WARM_S: a GPU's), the first round's spot
    checks run before its turn for the warm-up's calls alone (the compile and first calls), as any later round's do,
    not FIRST_ROUND_WARM_S more; nothing else of the round changes. Elsewhere, their full warm-up (above)."""
    from evaluator.referee import baselines

    monkeypatch.setitem(baselines.CLOCK_WARM_S, "cpu", 0.3)
    referee, runs, _ = _first_round_runs(monkeypatch, stored_figures=True, beside=False)
    assert [(name, seconds) for name, seconds, turn in runs if not turn] == [("compile_tf32", 0.0), ("part:gemm_tf32", 0.0)]
    assert [(name, seconds) for name, seconds, turn in runs if turn] == [
        ("part:gemm_tf32", 0.0), ("part:gemm_tf32", "timed"), ("compile_tf32", 0.0), ("compile_tf32", "timed")]
    assert "`compile_tf32` re-timed" in referee.current_round.source.cached


@pytest.mark.parametrize("stored_figures", [True, False])
def test_no_baseline_compiles_beside_a_candidates_executor(monkeypatch, stored_figures):
    """A compiled baseline's first call autotunes (Inductor times its kernels' configurations on the device and keeps
    the winner for later batches): with a candidate's executor alive beside the round (a warm Judge's first call, or
    a round whose executors were started before it), it compiles in the exclusive turn, every executor held, never
    before it; the cheap spot check is still warmed before it."""
    referee, runs, _ = _first_round_runs(monkeypatch, stored_figures=stored_figures, beside=True)
    assert not [name for name, _, turn in runs if name.startswith("compile") and not turn]
    assert [name for name, seconds, turn in runs if name.startswith("compile") and turn and seconds != "timed"]
    if stored_figures:
        assert [(name, seconds) for name, seconds, turn in runs if not turn] == [("part:gemm_tf32", 0.25)]
        assert ("compile_tf32", 0.25, True) in runs  # its full warm-up in the turn: not warmed before it


def test_a_judged_executor_still_closing_keeps_a_compile_out_of_the_time_before_the_turn():
    """may_compile: an executor started ahead other than the twin's, or a judged one not yet closed (its exit and
    replays run on the referee's reply thread), is a candidate's code alive beside a compile."""
    from types import SimpleNamespace

    from evaluator.referee import baselines

    twin = SimpleNamespace(path="/twin", digest="t")
    closing = threading.Event()
    referee = SimpleNamespace(twin=twin, waiting={("/twin", "t"): object()}, closing=[closing])
    assert not baselines.may_compile(referee)
    closing.set()
    assert baselines.may_compile(referee)
    referee.waiting[("/c", "c")] = object()
    assert not baselines.may_compile(referee)


def test_a_stuck_stream_in_the_twins_judgement_ends_the_referee_and_no_round_keeps_the_referees_own_eager(monkeypatch):
    """While the twin is judged the round has no eager (nothing that escapes leaves the referee's own loop's figure in
    its place), and a stream stuck on the device ends the referee as a candidate's would (its lane starts another)."""
    from evaluator.referee import phases as phases_module
    from evaluator.referee.relay import StreamStuck

    referee, _ = _twin_referee(monkeypatch)
    seen = []

    def stuck(session, compile_only=False, imported=None):
        seen.append(dict(referee.current_round.failed))
        raise StreamStuck("the referee's stream still waited")

    monkeypatch.setattr(phases_module, "begin", stuck)
    with pytest.raises(StreamStuck):
        referee.ensure_round()
    assert "did not finish" in seen[0]["eager"]
    assert "eager" not in referee.current_round.baselines and "did not finish" in referee.current_round.failed["eager"]


def test_the_twins_source_is_the_reference_as_the_referee_read_it(tmp_path):
    """The twin's source holds the reference's text as the referee read it at its start (a file changed later changes
    nothing), its sizes set, and ModelNew its Model unchanged."""
    from evaluator.referee import twin

    referee = local_executor.referee(baselines=["eager"], eager_as_candidate=True)
    text = referee.problem.reference_path.read_text()
    assert referee.twin_source.decode().startswith(text)
    namespace: dict = {}
    exec(compile(referee.twin_source, "twin", "exec"), namespace)
    assert namespace["ModelNew"].__bases__ == (namespace["Model"],) and namespace["ModelNew"].forward is namespace["Model"].forward
    for name, value in referee.problem.size_values(referee.size).items():
        assert namespace[name] == value
    assert referee.twin.digest == twin.request(referee.twin_source).digest and referee.twin.path == twin.PATH


def _stats(median: float, iqr: float):
    from evaluator.wire.records import TimingStats

    return TimingStats(median_ms=median, mean_ms=median, min_ms=median, max_ms=median, iqr_ms=iqr, reps=9, warmup=1)


@pytest.mark.parametrize("candidate, eager, moved, shaky", [
    ((1.0, 0.1), (4.0, 0.2), {"eager": 0.05}, []),
    ((1.0, 0.3), (4.0, 0.2), {"eager": 0.05}, ["its times spread by 30%"]),
    ((1.0, 0.1), (4.0, 1.2), {}, ["baseline `eager` spread by 30%"]),
    ((1.0, 0.1), (4.0, 0.2), {"eager": -0.87}, ["baseline `eager` moved -87% since the previous round"]),
])
def test_a_speedup_beyond_the_published_bounds_is_flagged_shaky(candidate, eager, moved, shaky):
    from evaluator.referee.view import Round
    from evaluator.wire.records import BaselineSource

    source = BaselineSource(batch="b", round=1, measured_at=0.0, after_candidates=0)
    rounds = Round(baselines={"eager": _stats(*eager)}, failed={}, source=source, window_cost=None, moved=moved)
    flags = phases.shaky_timing(_stats(*candidate), rounds)
    assert [f.name for f in flags] == (["shaky_timing"] if shaky else [])
    for part in shaky:
        assert part in flags[0].reason and flags[0].reason.endswith("not ranked")


@pytest.mark.parametrize("candidate, beside, paired_spread, others, moved, shaky", [
    ((1.0, 0.4), 4.4, 0.05, {}, {"eager": 0.5}, []),  # both moved alike: the speedup holds
    ((1.0, 0.1), 4.0, 0.3, {}, {}, ["its times over `eager`'s beside them spread by 30%"]),
    ((1.0, 0.1), 4.0, None, {}, {}, ["no spread of its times over `eager`'s beside them"]),
    ((1.0, 0.1), 5.2, 0.05, {}, {}, ["`eager` beside its windows read +30% off the round's (5.2 against 4 ms)"]),
    ((1.0, 0.4), 4.0, 0.05, {"compile": (3.0, 0.1)}, {}, ["its times spread by 40%"]),  # compile: its own figure
    ((1.0, 0.1), 4.0, 0.05, {"compile": (3.0, 0.1)}, {"eager": 0.5, "compile": 0.3}, ["baseline `compile` moved +30%"]),
])
def test_a_speedup_over_eager_beside_the_candidates_windows_is_shaky_by_their_ratio_and_within_the_drift_bound(
        candidate, beside, paired_spread, others, moved, shaky):
    """Eager timed beside each of the candidate's windows (time_phase.Series.figures): the spread of the candidate's time
    over eager's, window by window, stands for both spreads and eager's drift between rounds (what moves both alike
    cancels in the speedup), and eager's figure there may be off the round's by the drift bound at most (what a
    candidate leaves running could slow the windows after its own); a baseline not beside it is judged as before,
    with the candidate's own spread."""
    from evaluator.referee.view import Round
    from evaluator.wire.records import BaselineSource

    source = BaselineSource(batch="b", round=1, measured_at=0.0, after_candidates=0)
    baselines = {"eager": _stats(4.0, 2.0), **{name: _stats(*figures) for name, figures in others.items()}}
    rounds = Round(baselines=baselines, failed={}, source=source, window_cost=None, moved=moved)
    flags = phases.shaky_timing(_stats(*candidate), rounds, paired={"eager": (_stats(beside, 0.1), paired_spread)})
    assert [f.name for f in flags] == (["shaky_timing"] if shaky else [])
    for part in shaky:
        assert part in flags[0].reason
    assert not flags or "`eager` spread" not in flags[0].reason and "`eager` moved" not in flags[0].reason


def test_an_executors_output_is_not_read_while_it_is_held_or_paused():
    """Reading a pipe kept full would take the referee's own time inside a calibrator window (or a
    baseline round): while `reading` is clear, what the executor wrote waits in the pipe."""
    from evaluator.referee.output_tail import CappedTail, drain

    read_fd, write_fd = os.pipe()
    tail, reading = CappedTail(1 << 20), threading.Event()
    stream = os.fdopen(read_fd, "rb")
    drainer = threading.Thread(target=drain, args=(stream, tail, reading), daemon=True)
    drainer.start()
    os.write(write_fd, b"x" * 1000)
    time.sleep(0.2)
    assert tail.total == 0  # held: nothing read
    reading.set()
    deadline = time.monotonic() + 5
    while tail.total < 1000 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert tail.total == 1000
    os.close(write_fd)
    drainer.join(timeout=5)
    assert not drainer.is_alive()
    stream.close()


def test_a_users_own_timing_bounds_reach_the_referee_are_flagged_and_keyed_apart(tmp_path):
    """A shared machine's looser bounds: the referee judges by them, the verdict says so (`own_bounds`), and its
    key differs from the published bounds' verdict of the same source, so neither stands for the other."""
    from evaluator.parent.referee_client import RefereeClient
    from evaluator.parent.sandbox import EvalOptions, Evaluator
    from evaluator.referee.view import Round
    from evaluator.wire.records import BaselineSource, Verdict, bounds_flag

    source = BaselineSource(batch="b", round=1, measured_at=0.0, after_candidates=0)
    rounds = Round(baselines={"eager": _stats(4.0, 0.2)}, failed={}, source=source, window_cost=None,
                   moved={"eager": 0.3})
    assert phases.shaky_timing(_stats(1.0, 0.3), rounds)  # 30% spread, 30% drift: beyond the published bounds
    assert phases.shaky_timing(_stats(1.0, 0.3), rounds, spread=0.5, drift=0.5) == []
    assert bounds_flag(0.2, 0.2) == [] and "published: 20% and 20%" in bounds_flag(0.5, 0.5)[0].reason
    loose = Evaluator(EvalOptions(device="cpu", size="small", shaky_spread=0.5, shaky_drift=0.5, cache_dir=tmp_path))
    published = Evaluator(EvalOptions(device="cpu", size="small", cache_dir=tmp_path))
    config = RefereeClient(loose).config()
    assert (config.shaky_spread, config.shaky_drift) == (0.5, 0.5)
    verdict = Verdict(candidate="c", source_sha256="ab" * 32, problem="gemm_scale_bn", size="small", device="cpu",
                      status="correct")
    assert loose.key(verdict) != published.key(verdict)


def test_a_comparison_in_chunks_gives_what_one_whole_gives(monkeypatch):
    """The float64 comparison runs in chunks (a KernelBench-size output took the GPU's memory whole): the same
    maxima, tiers and NaN count, whatever the chunk."""
    from evaluator.referee import compare
    from evaluator.wire.tiers import Tolerance

    tolerances = {"strict": Tolerance(atol=1e-6, rtol=1e-6), "loose": Tolerance(atol=1e-2, rtol=1e-2)}
    expected = torch.randn(37, 11, dtype=torch.float64)
    near = (expected + 1e-4 * torch.randn_like(expected)).float()
    broken = near.clone()
    broken[20, 3], broken[36, 10] = float("nan"), float("inf")
    whole = {name: compare.compare_tensor("out", t, expected, tolerances, 1e-3) for name, t in
             (("near", near), ("broken", broken), ("exact", expected.float()))}
    monkeypatch.setattr(compare, "COMPARE_CHUNK", 7)  # 407 elements: 59 chunks, the last a short one
    for name, t in (("near", near), ("broken", broken), ("exact", expected.float())):
        assert compare.compare_tensor("out", t, expected, tolerances, 1e-3) == whole[name]
    assert whole["near"].tiers == {"strict": False, "loose": True} and whole["broken"].failure == "out: 2 NaN/Inf values"


@pytest.mark.parametrize("chunk", [1 << 25, 5])
def test_a_tier_passed_by_every_difference_within_its_absolute_room_is_the_bounds_verdict(monkeypatch, chunk):
    """compare_tensor skips a tier's bound where a chunk's largest difference is within the tier's atol (or the tier
    failed already): every tier's verdict is still allclose's, `|got - want| <= |want| * rtol + atol` over the whole,
    and a finite output against an infinite reference is close in no tier (it passed every tier of rtol > 0)."""
    from evaluator.referee import compare
    from evaluator.wire.tiers import MatchedTolerance, Tolerance

    monkeypatch.setattr(compare, "COMPARE_CHUNK", chunk)
    tolerances = {"strict": Tolerance(atol=1e-4, rtol=1e-4), "loose": Tolerance(atol=1e-2, rtol=1e-2),
                  "absolute": Tolerance(atol=1e-3, rtol=0.0), "relative": Tolerance(atol=0.0, rtol=1e-3),
                  "matched": MatchedTolerance(atol=0.0, rtol=1e-6, by_tensor={"out": 1e-4}),
                  # |want| * rtol is NaN where want is infinite and rtol 0, or want 0 and rtol infinite: no bound holds
                  "unbounded_absolute": Tolerance(atol=float("inf"), rtol=0.0),
                  "unbounded_relative": Tolerance(atol=1e-4, rtol=float("inf"))}
    generator = torch.Generator().manual_seed(3)
    for case in range(60):
        want = torch.randn(41, generator=generator, dtype=torch.float64) * 10 ** (case % 5 - 2)
        if case % 7 == 0:
            want[case % 41] = float("inf")
        got = (want + torch.randn(41, generator=generator, dtype=torch.float64) * 10 ** -(case % 6)).float()
        if case % 4 == 0:
            got = want.float()
        if case % 9 == 0:
            want[(case + 5) % 41] = -0.0
        if case % 11 == 0:  # finite where the reference is infinite
            got = torch.where(torch.isinf(want), torch.zeros_like(want), want).float()
        result = compare.compare_tensor("out", got, want, tolerances, 1e-3)
        diff, ref_abs = (got.double() - want).abs(), want.abs()
        scale = want.abs().max().item()
        if not torch.isfinite(got).all():
            assert result.failure is not None
            continue
        # allclose: a finite output is close to no infinite reference, whatever inf * rtol + atol would allow
        expected = {tier: bool((diff <= ref_abs * tol.rtol + tol.atol_for("out", scale)).all()
                               and torch.isfinite(want).all()) for tier, tol in tolerances.items()}
        assert result.tiers == expected, (case, result.tiers, expected)


def test_a_judge_out_of_memory_staging_a_call_is_not_the_candidates_runtime_error():
    """At KernelBench's own sizes an executor ran out of GPU memory staging its inputs (the referee's float64 copies
    beside it), and the verdict read `runtime_error`, as if the candidate had failed: it is `crashed`, saying why.
    Unless the candidate made it so: it shares the executor's interpreter (it can raise that error) and can hold
    the device's memory so that staging really fails (hiding an earlier wrong trial)."""
    from types import SimpleNamespace

    from evaluator.referee import check_phase
    from evaluator.referee.compare import ModeAccumulator
    from evaluator.referee.session import Judged
    from evaluator.wire.protocol import Reply
    from evaluator.wire.records import Phase, Status

    reply = Reply(id=0, error="out of GPU memory staging the call's inputs: torch.OutOfMemoryError ...",
                  error_kind="staging_memory")
    closed = []
    session = SimpleNamespace(referee=SimpleNamespace(draw=lambda distribution, seed: [torch.zeros(2)], device="cuda",
                                                      judge_device="cpu", layout=SimpleNamespace(inputs=(), region=0)),
                              link=SimpleNamespace(stage=SimpleNamespace(device="cpu"),
                                                   close=lambda wait_s: closed.append(True)),
                              request=lambda command: reply, phase=Phase.check)
    wrong_before = ModeAccumulator("train", {"loose": None})
    wrong_before.fail("output: 3 values outside")
    for free, acc, status in ((0, ModeAccumulator("train", {}), Status.crashed),
                              (80 << 30, ModeAccumulator("train", {}), Status.runtime_error),
                              (0, wrong_before, Status.incorrect)):
        # nearly full with the executor gone: the judge's failure; 80 GiB free once the executor is gone: the
        # candidate's own memory; a trial wrong before it: incorrect, whatever the memory
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(check_phase, "device_free_bytes", lambda device: free)
            patch.setattr(check_phase, "release_cached", lambda device: None)
            with pytest.raises(Judged) as judged:
                check_phase.trial(session, None, "randn", 0, train=True, acc=acc)
        assert judged.value.status == status and judged.value.error.endswith(reply.error)
        assert ("before the candidate was called" in judged.value.error) == (status == Status.crashed)
    assert closed == [True, True]  # measured with the executor gone


def test_the_referee_out_of_memory_reading_a_calls_outputs_is_crashed_saying_why_or_incorrect_after_a_wrong_trial():
    """On an H100 at KernelBench's own sizes (19_ReLU, 6 GiB in and out) the referee ran out of GPU memory copying
    the candidate's output out of the exchange, and the verdict was `crashed` with the referee's traceback, as if
    the referee had broken: it says that the judge's copies do not fit this GPU at this size. A candidate that
    holds the device's memory must not hide an earlier wrong trial that way: that is `incorrect`."""
    from types import SimpleNamespace

    from evaluator.referee import check_phase
    from evaluator.referee.compare import ModeAccumulator
    from evaluator.referee.session import Judged
    from evaluator.wire.protocol import Reply
    from evaluator.wire.records import Phase, Status

    def shipment(reply):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB. GPU 0 has ...")

    session = SimpleNamespace(referee=SimpleNamespace(draw=lambda distribution, seed: [torch.zeros(2)], device="cuda",
                                                      judge_device="cpu", layout=SimpleNamespace(inputs=(), region=0)),
                              link=SimpleNamespace(stage=SimpleNamespace(device="cpu")),
                              request=lambda command: Reply(id=0), shipment=shipment, phase=Phase.check)
    wrong_before = ModeAccumulator("train", {"loose": None})
    wrong_before.fail("output: 3 values outside")
    loose_only = ModeAccumulator("train", {"strict": None, "loose": None})
    loose_only.tiers["strict"] = False  # correct at the looser tier: not wrong
    for acc, status in ((ModeAccumulator("train", {}), Status.crashed), (wrong_before, Status.incorrect),
                        (loose_only, Status.crashed)):
        with pytest.raises(Judged) as judged:
            check_phase.trial(session, None, "randn", 0, train=True, acc=acc)
        assert judged.value.status == status
        said = judged.value.error
        assert ("do not fit this GPU" in said and "Tried to allocate 6.00 GiB" in said) == (status == Status.crashed), said
        assert ("wrong in an earlier trial (output: 3 values outside)" in said) == (status == Status.incorrect), said
    # where the float64 judge lives in host memory, the host's running out is the same (c10's CPU allocator's words);
    # any other error of the referee's is its own failure, never a verdict on the candidate
    def host_out(reply):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 12884901888 bytes. Error code 12 (Cannot allocate memory)")

    session.shipment = host_out
    with pytest.raises(Judged) as judged:
        check_phase.trial(session, None, "randn", 0, train=True, acc=ModeAccumulator("train", {}))
    assert judged.value.status == Status.crashed and "the host's" in judged.value.error
    session.shipment = lambda reply: (_ for _ in ()).throw(RuntimeError("the referee's own bug"))
    with pytest.raises(RuntimeError, match="own bug"):
        check_phase.trial(session, None, "randn", 0, train=True, acc=ModeAccumulator("train", {}))
    session.shipment = shipment
    # what the executor itself said was wrong with this call counts, though its outputs could not be read
    session.request = lambda command: Reply(id=0, problems=["bn.num_batches_tracked: [7], expected [8]"])
    with pytest.raises(Judged) as judged:
        check_phase.trial(session, None, "randn", 0, train=True, acc=ModeAccumulator("train", {"loose": None}))
    assert judged.value.status == Status.incorrect and "num_batches_tracked" in judged.value.error
    # what could not be read is counted before any comparison: one that runs the referee out of memory cannot hide it
    from evaluator.wire.protocol import ValueInfo

    session.request = lambda command: Reply(id=0, output=ValueInfo(kind="Tensor", plain=True, dtype="float32",
                                                                   shape=[2], device="cuda"))
    session.shipment = lambda reply: ({"output": torch.zeros(2)}, ["the executor staged state.w where the referee did "
                                                                   "not ask for it"])
    session.referee.output_dtype, session.referee.judge_device, session.referee.tolerances = "float32", "cpu", {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(check_phase, "reference_output", lambda *args: torch.zeros(2, dtype=torch.float64))
        patch.setattr(check_phase, "compare_output", lambda *args: shipment(None))
        with pytest.raises(Judged) as judged:
            check_phase.trial(session, None, "randn", 0, train=True, acc=ModeAccumulator("train", {"loose": None}))
    assert judged.value.status == Status.incorrect and "did not ask" in judged.value.error, judged.value.error


def test_the_run_limit_counts_the_executors_time_and_the_device_work_it_leaves_not_the_referees_own(monkeypatch):
    """Session's deadline: the referee's own work between two calls (comparisons in host memory took seconds a call
    at KernelBench's sizes) moves it on, up to its credit (a candidate slowing the referee cannot hold its lane for
    ever); time the executor takes, and waits charged to the candidate (device work it left queued:
    time_phase.idle), do not. On a clock of the test's own (the session reads no other), so no second is slept."""
    from types import SimpleNamespace

    from evaluator.referee import session as session_module
    from evaluator.referee.process import Ended

    now = [1000.0]

    def sleep(seconds):
        now[0] += seconds

    clock = SimpleNamespace(monotonic=lambda: now[0], sleep=sleep)
    monkeypatch.setattr(session_module, "time", clock)
    from evaluator.referee.session import Judged, Session
    from evaluator.wire.protocol import Reply
    from evaluator.wire.records import Phase, Status

    class Link:
        def __init__(self, takes_s):
            self.takes_s = takes_s

        def request(self, command, deadline, during=None):
            clock.sleep(self.takes_s)
            if clock.monotonic() > deadline:
                raise Ended("timeout")
            return Reply(id=0)

    def session(takes_s, credit_s=2.0):
        made = Session(referee=None, link=Link(takes_s), name="c", digest="d", problem="p", size="small", device="cpu",
                       compile_timeout_s=5, run_timeout_s=0.6, own_credit_s=credit_s)
        made.enter(Phase.init)
        return made

    patient = session(0.05)
    for _ in range(4):  # 0.2 s of the executor's, 1.2 s of the referee's own: within 0.6 s
        patient.request(object())
        clock.sleep(0.3)
    patient.request(object())
    stingy = session(0.05, credit_s=0.5)  # past its credit, the referee's own time counts
    with pytest.raises(Judged) as judged:
        for _ in range(4):
            stingy.request(object())
            clock.sleep(0.3)
        stingy.request(object())
    assert judged.value.status == Status.timeout
    slow = session(0.2)  # the executor's own time runs past the limit
    with pytest.raises(Judged) as judged:
        for _ in range(5):
            slow.request(object())
    assert judged.value.status == Status.timeout and "0.6 s limit" in judged.value.error
    charged = session(0.05)
    charged.request(object())
    charged.charge(0.3)
    with pytest.raises(Judged) as judged:
        charged.charge(0.3)  # device work left behind: 0.65 s of the candidate's
    assert judged.value.status == Status.timeout
    uncredited = session(0.05, credit_s=0.0)  # the referee's own time past its credit counts in a charge too
    uncredited.request(object())
    clock.sleep(0.3)
    with pytest.raises(Judged) as judged:
        uncredited.charge(0.35)
    assert judged.value.status == Status.timeout


@pytest.mark.gpu
def test_the_host_judges_copies_give_what_torchs_own_give(monkeypatch):
    """Where the float64 judge lives in host memory, inputs go there converted on the GPU chunk by chunk into
    page-locked memory, and chunks come back through page-locked memory: the same values as torch's own whole-tensor copies, whatever the chunk."""
    from evaluator.referee import compare
    from evaluator.referee import inputs as draws

    monkeypatch.setattr(draws, "HOST_CHUNK", 1000)
    monkeypatch.setattr(compare, "COMPARE_CHUNK", 777)
    x = torch.randn(37, 211, device="cuda")
    host = draws.to_float64(x, "cpu")
    assert host.device.type == "cpu" and host.dtype == torch.float64 and host.is_pinned()
    assert torch.equal(host, x.to("cpu", torch.float64))
    assert compare.same_values_on(x, x.cpu(), "cuda") and not compare.same_values_on(x, (x + 1).cpu(), "cuda")
    from evaluator.wire.tiers import Tolerance

    tolerances = {"strict": Tolerance(atol=1e-6, rtol=1e-6)}
    assert compare.compare_tensor("out", x.cpu(), host, tolerances, 1e-3, on="cuda").tiers == {"strict": True}
    assert compare.compare_tensor("out", (x * 1.01).cpu(), host, tolerances, 1e-3, on="cuda").tiers == {"strict": False}


def test_huge_pages_are_a_gpu_referees_own_never_its_executors_nor_a_cpu_referees(monkeypatch, tmp_path):
    """THP_MEM_ALLOC_ENABLE speeds the host-memory judge's copies: set for a GPU's referee only (on the CPU the
    referee times the eager baselines candidates are measured against), and dropped from its executors' environment
    where the harness set it (a user's own setting passes through)."""
    from evaluator.parent.referee_client import RefereeClient
    from evaluator.parent.sandbox import EvalOptions, Evaluator
    from evaluator.referee.environment import HARNESS_SET_THP, scrubbed_environment

    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    cpu = RefereeClient(Evaluator(EvalOptions(device="cpu", size="small", cache_dir=tmp_path))).environment()
    assert "THP_MEM_ALLOC_ENABLE" not in cpu and HARNESS_SET_THP not in cpu
    from types import SimpleNamespace

    gpu = RefereeClient(SimpleNamespace(device="cuda", cache_dir=tmp_path)).environment()
    assert gpu["THP_MEM_ALLOC_ENABLE"] == "1" and gpu[HARNESS_SET_THP] == "1"
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "1")
    monkeypatch.setenv(HARNESS_SET_THP, "1")  # as a GPU referee's environment has it
    executor = scrubbed_environment(tmp_path / "ext", "cuda")
    assert "THP_MEM_ALLOC_ENABLE" not in executor and HARNESS_SET_THP not in executor
    monkeypatch.delenv(HARNESS_SET_THP)  # the user's own setting
    assert scrubbed_environment(tmp_path / "ext", "cuda")["THP_MEM_ALLOC_ENABLE"] == "1"


def test_a_cpu_referee_and_its_executors_keep_freed_memory_for_the_next_call(monkeypatch, tmp_path):
    """On the CPU, glibc's malloc keeps what a call frees (CPU_MALLOC) in the referee and, through its environment, in
    the zygote and every executor: a process that faulted its tensors in afresh each call ran twice as slow as one
    that did not, and which of the two an executor was in moved from window to window. A user's own setting stands;
    a GPU's referee is left as the user has it. And the setting does what it says: a process with it allocates and
    frees a call's tensors without faulting pages in each call."""
    import subprocess
    import sys
    from types import SimpleNamespace

    from evaluator.parent.referee_client import RefereeClient
    from evaluator.parent.sandbox import EvalOptions, Evaluator
    from evaluator.referee.environment import CPU_MALLOC, scrubbed_environment

    for name in CPU_MALLOC:
        monkeypatch.delenv(name, raising=False)
    cpu = RefereeClient(Evaluator(EvalOptions(device="cpu", size="small", cache_dir=tmp_path))).environment()
    assert all(cpu[k] == v for k, v in CPU_MALLOC.items())
    gpu = RefereeClient(SimpleNamespace(device="cuda", cache_dir=tmp_path)).environment()
    assert not any(k in gpu for k in CPU_MALLOC)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1234")
    mine = RefereeClient(Evaluator(EvalOptions(device="cpu", size="small", cache_dir=tmp_path))).environment()
    assert mine["MALLOC_TRIM_THRESHOLD_"] == "1234"
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", CPU_MALLOC["MALLOC_TRIM_THRESHOLD_"])
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", CPU_MALLOC["MALLOC_MMAP_THRESHOLD_"])
    executor = scrubbed_environment(tmp_path / "ext", "cpu")  # what the zygote and its executors are given
    assert all(executor[k] == v for k, v in CPU_MALLOC.items())
    # 4 MiB freed and taken again, 50 times: with the trim threshold alone (the dynamic threshold off) each call
    # is a fresh mapping, about a thousand pages faulted in; kept, none
    probe = ("import ctypes, resource\nlibc = ctypes.CDLL(None)\nlibc.malloc.restype = ctypes.c_void_p\n"
             "libc.free.argtypes = [ctypes.c_void_p]\nlibc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]\n"
             "def call():\n    p = libc.malloc(4 << 20); libc.memset(p, 1, 4 << 20); libc.free(p)\n"
             "call(); a = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
             "for _ in range(50): call()\n"
             "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - a)")
    bare = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    kept = int(subprocess.run([sys.executable, "-c", probe], env={**bare, **CPU_MALLOC}, capture_output=True,
                              text=True, check=True).stdout)
    fresh = int(subprocess.run([sys.executable, "-c", probe], env={**bare, "MALLOC_TRIM_THRESHOLD_": str(64 << 30)},
                               capture_output=True, text=True, check=True).stdout)
    assert kept < 50 and fresh > 50 * 500, (kept, fresh)


def test_each_calibrator_window_is_paced_to_the_candidates_last_calls():
    """The calibrator's device work beside a candidate's window is the candidate's call (the median of its last five
    windows less the median of the last paced costs), less the calibrator's own copy, capped: a slow window or two
    lengthen no pace, a candidate slow in its warm-up cannot make every window's cost dearer (issue 33)."""
    from types import SimpleNamespace

    from evaluator.referee import clock, time_phase

    def clocked(ms: float, device_ms: float) -> clock.Clocked:
        return clock.Clocked(ms=ms, go=Reply(id=1, events_ms=[device_ms]), put=Reply(id=2), offset=0, capture=None)

    series = object.__new__(time_phase.Series)
    round_cost = SimpleNamespace(cost_ms=2.0)
    series.session = SimpleNamespace(referee=SimpleNamespace(device="cuda", current_round=SimpleNamespace(window_cost=round_cost)))
    series.costs, series.paces, series.windows = [], [], []

    def beside(window_ms: float) -> float:
        window = clocked(window_ms, 0.0)
        pace = series.pace_for(window)  # before the window joins the series (kept only once its calibrator's is)
        series.windows.append(window)
        return pace

    def last() -> float:  # the pace beside the series' last window
        *series.windows, window = series.windows
        return beside(window.ms)

    assert beside(6.5) == pytest.approx(4.5)  # no paced window yet: the round's cost
    # the calibrator's windows beside the last ones: each cost 2.5 ms around its pace and a copy of 0.2 ms
    for pace in (4.0, 4.1, 4.2):
        series.costs.append(clocked(2.5 + pace + 0.2, pace + 0.2))
        series.paces.append(pace)
    series.windows = [clocked(7.0, 0.0)] * 4
    assert beside(7.0) == pytest.approx(7.0 - 2.5 - 0.2)
    assert beside(40.0) == pytest.approx(4.3) and beside(40.0) == pytest.approx(4.3)  # two slow windows: no longer
    assert beside(40.0) == pytest.approx(40.0 - 2.5 - 0.2)  # most of the last five slow: the pace follows
    series.windows += [clocked(500.0, 0.0)] * 5
    assert last() == time_phase.PACE_CAP_MS
    series.windows += [clocked(1.0, 0.0)] * 5
    assert last() == 0.0  # shorter than a window costs: no pace, never negative
    series.windows += [clocked(40.0, 0.0)] * 4
    assert beside(7.0) == pytest.approx(4.3)  # a fast window after slow ones: never paced longer than itself
    series.session.referee.device = "cpu"
    assert beside(7.0) == 0.0


def test_slow_windows_in_a_pattern_pace_no_more_calibrator_windows_than_they_are():
    """An attacker's pattern (an attacker's review of issue 33's pace): slow warm-up windows, then slow windows in
    three of every five (40%). With the pace the median of the last five alone, more than half the calibrator's
    windows were paced long and the median cost, taken off every window, was a long call's; bounded by the window
    beside it, only slow windows get long paces, and the median cost stays a fast call's."""
    from types import SimpleNamespace

    from evaluator.referee import clock, time_phase

    series = object.__new__(time_phase.Series)
    series.session = SimpleNamespace(referee=SimpleNamespace(device="cuda", current_round=SimpleNamespace(
        window_cost=SimpleNamespace(cost_ms=2.5))))
    series.costs, series.paces, series.windows = [], [], []
    fast, slow = 7.0, 50.0
    pattern = [slow] * 4 + [fast if c == "0" else slow for c in "0011100100" * 6]
    for window_ms in pattern:
        window = clock.Clocked(ms=window_ms, go=Reply(id=1), put=Reply(id=2), offset=0, capture=None)
        pace = series.pace_for(window)
        series.windows.append(window)
        cost = 2.5 + 0.01 * pace  # a longer pace makes the calibrator's window dearer (docs/timing.md)
        series.costs.append(clock.Clocked(ms=cost + pace + 0.2, go=Reply(id=1, events_ms=[pace + 0.2]), put=Reply(id=2),
                                          offset=0, capture=None))
        series.paces.append(pace)
    ranked = slice(4, None)
    long_paces = sum(p > 10 for p in series.paces[ranked])
    assert long_paces <= sum(w == slow for w in pattern[ranked]) < len(pattern[ranked]) / 2
    assert clock.window_cost(series.costs[ranked]).cost_ms < 2.5 + 0.01 * 10


def _sampling_series(device: str, seed: int = 1):
    """A Series with only what the calibrator's placement and `figures` read (a session of the test's own)."""
    import random
    from types import SimpleNamespace

    from evaluator.referee import time_phase

    series = object.__new__(time_phase.Series)
    flags = []
    series.session = SimpleNamespace(name="c", add=flags.extend, referee=SimpleNamespace(
        device=device, current_round=None, calibrator=SimpleNamespace(error="failed")))
    series.costs, series.paces, series.windows, series.beside_at = [], [], [], []
    series.uncalibrated, series.draw, series.flags, series.sample_size = False, random.Random(seed), flags, None
    series.eager, series.paired_at, series.paired, series.paired_spread = None, [], None, None
    return series


def test_on_the_cpu_eagers_windows_beside_the_candidates_give_eagers_figure_and_the_spread_of_their_ratio():
    """`Series.figures`: eager's windows beside the candidate's, less the same cost, are eager's figure for it; the spread
    of the candidate's per-call time over eager's, window by window, is small where both moved alike (a CPU's memory
    slowing both windows of a pair), however much each series spread. Where a window has no eager beside it, none, and
    the verdict is shaky: a candidate making one window fail never chooses the round's eager instead."""
    from types import SimpleNamespace

    from evaluator.referee import clock

    def window(ms: float, reported: float | None = None) -> clock.Clocked:
        return clock.Clocked(ms=ms, go=Reply(id=1, events_ms=[reported] if reported is not None else []),
                             put=Reply(id=2), offset=0, capture=None)

    series = _sampling_series("cpu")
    series.eager = object()
    speeds = [1.0, 1.5, 1.0, 2.0, 1.2, 1.0, 1.8, 1.0]  # the machine's memory, window by window
    series.windows = [window(1.0 + 4.0 * k) for k in speeds]  # cost 1 ms, then 4 ms of calls
    series.paired_at = [window(1.0 + 8.0 * k * (1.02 if i % 2 else 0.98)) for i, k in enumerate(speeds)]
    series.costs = [window(1.5, 0.5) for _ in speeds]  # cost 1.0
    series.beside_at = list(range(len(speeds)))
    timing, cost = series.figures(slice(0, None))
    assert cost.cost_ms == 1.0
    assert timing.iqr_ms / timing.median_ms > 0.2  # the candidate's own series is beyond the spread bound
    assert series.paired.median_ms / timing.median_ms == pytest.approx(2.0, rel=0.03)
    assert series.paired_spread < 0.05
    assert not series.flags
    series.paired_at[3] = None  # one window without eager beside it: no pairing at all, and never the round's instead
    series.eager = SimpleNamespace(error="the calibrator failed: gone")
    series.figures(slice(0, None))
    assert series.paired is None and series.paired_spread is None
    assert [f.name for f in series.flags] == ["shaky_timing"] and "gone" in series.flags[0].reason


def test_on_a_gpu_the_calibrator_is_beside_a_secret_sample_of_the_ranked_windows_and_at_least_the_least():
    """Ranked windows get the calibrator's window beside a CALIBRATED_SHARE of them and at least CALIBRATED_LEAST of a
    series, at places drawn from the series' secret seed after each window (no two seeds place them alike) and as
    likely at one place as at any other, the last windows included (making up the least at the end made the last
    window nearly sure at ten windows, the first ones unlikely); the warm-up's only beside its last; on the CPU beside
    every window."""
    from math import comb

    from evaluator.referee import time_phase

    def placed(series, count: int, calibrated: str) -> list[bool]:
        series.sample_size, beside, so_far = None, [], 0  # as `run` starts
        for made in range(count):
            beside.append(series.beside_here(calibrated, count - made, so_far))
            so_far += beside[-1]
        return beside

    share, least, seeds = time_phase.CALIBRATED_SHARE, time_phase.CALIBRATED_LEAST, 1000
    for count in (10, 30):  # kernelbench's series, and a longer one
        draws = [placed(_sampling_series("cuda", seed), count, "sample") for seed in range(seeds)]
        assert all(sum(d) >= least for d in draws)
        # the mean: a binomial draw of the share, made up to the least
        expected = sum(comb(count, k) * share ** k * (1 - share) ** (count - k) * min(count, max(least, k))
                       for k in range(count + 1))
        assert abs(sum(map(sum, draws)) / seeds - expected) < 0.3, (sum(map(sum, draws)) / seeds, expected)
        assert len({tuple(d) for d in draws}) > 200  # places differ from seed to seed (ten windows: 252 ways of five)
        at = [sum(d[i] for d in draws) / seeds for i in range(count)]
        assert all(abs(p - expected / count) < 0.06 for p in at), at  # every place alike, the first and last too
    assert placed(_sampling_series("cuda"), 4, "last") == [False, False, False, True]
    assert placed(_sampling_series("cpu"), 10, "sample") == [True] * 10
    assert placed(_sampling_series("cuda"), 3, "every") == [True] * 3


def test_a_series_figure_takes_off_the_cost_of_the_calibrator_windows_beside_its_own_windows_only():
    """`figures`: the cost is the median of the calibrator's windows beside the ranked windows (those beside the
    warm-up are not theirs); one that failed where it was to be beside a window leaves the series `uncalibrated`."""
    from evaluator.referee import clock

    def clocked(ms: float, device_ms: float | None) -> clock.Clocked:
        return clock.Clocked(ms=ms, go=Reply(id=1, events_ms=[device_ms] if device_ms is not None else []),
                             put=Reply(id=2), offset=0, capture=None)

    series = _sampling_series("cuda")
    series.windows = [clocked(20.0, None)] * 2 + [clocked(10.0 + i % 2, None) for i in range(6)]
    series.costs = [clocked(9.0, 1.0), clocked(3.0, 1.0), clocked(4.0, 1.0), clocked(3.5, 1.0)]  # costs 8, 2, 3, 2.5
    series.beside_at = [None, 0, 1, None, 2, None, None, 3]
    timing, cost = series.figures(slice(2, None))
    assert cost.cost_ms == 2.5 and cost.windows == 3  # 2, 3 and 2.5: not the warm-up's 8
    assert timing.median_ms == 8.0 and not series.flags
    series.uncalibrated = True
    timing, cost = series.figures(slice(2, None))
    assert cost is None and [f.name for f in series.flags] == ["uncalibrated"]


def test_slow_windows_in_a_pattern_get_no_more_of_the_sampled_calibrator_windows_than_their_share():
    """The attacker's pattern above (slow windows in three of every five) against the sampled calibrator: its places
    are drawn after each window from a secret seed, so the calibrated windows are as slow as the series is, and the
    median cost stays a fast call's."""
    from evaluator.referee import clock

    pattern = [50.0] * 4 + [7.0 if c == "0" else 50.0 for c in "0011100100" * 6]
    for seed in range(20):
        series = _sampling_series("cuda", seed)
        series.session.referee.current_round = type("R", (), {"window_cost": type("C", (), {"cost_ms": 2.5})})()
        so_far = 0
        for index, window_ms in enumerate(pattern):
            window = clock.Clocked(ms=window_ms, go=Reply(id=1), put=Reply(id=2), offset=0, capture=None)
            wanted = series.beside_here("sample", len(pattern) - index, so_far)
            pace = series.pace_for(window)  # before the window joins the series, as `run` does
            series.windows.append(window)
            if wanted:
                cost = 2.5 + 0.01 * pace
                series.costs.append(clock.Clocked(ms=cost + pace + 0.2, go=Reply(id=1, events_ms=[pace + 0.2]),
                                                  put=Reply(id=2), offset=0, capture=None))
                series.paces.append(pace)
                so_far += 1
        assert clock.window_cost(series.costs).cost_ms < 2.5 + 0.01 * 10


def test_the_cost_comes_from_calibrator_windows_beside_windows_within_the_series_spread_of_its_median():
    """`not_beside_slow`: an honest series' noise keeps nearly every calibrator window (twice the median absolute
    deviation), slow windows' are left out, and where every one is beside a slow window the fastest's stands."""
    from evaluator.referee import clock
    from evaluator.referee.time_phase import not_beside_slow

    def window(ms: float) -> clock.Clocked:
        return clock.Clocked(ms=ms, go=Reply(id=1), put=Reply(id=2), offset=0, capture=None)

    honest = [window(ms) for ms in (10.0, 10.1, 9.9, 10.2, 9.8, 10.05, 9.95, 10.15, 9.85, 10.3)]
    costs = [window(1.0 + i) for i in range(10)]  # told apart by their length
    kept = not_beside_slow(list(zip(honest, costs)), honest)
    assert len(kept) == 9 and costs[9] not in kept  # 10.3 lies beyond 10.025 + 2 x 0.125
    attacked = [window(11.5)] * 6 + [window(50.0)] * 4
    pairs = list(zip(attacked, costs))
    assert not_beside_slow(pairs, attacked) == costs[:6]
    assert not_beside_slow(pairs[7:] + pairs[6:7], attacked) == [costs[7]]  # none beside a fast one: the first slow
    assert not_beside_slow([], attacked) == []


def test_slow_windows_where_a_sampled_calibrator_falls_never_make_the_cost_taken_off_a_long_paces():
    """An attacker's review of the uniform sample: slow warm-up windows, then the first four ranked windows slow and
    six fast. The ranked median stays a fast window's, and in about a quarter of series three of the five calibrator
    windows fall beside slow windows, paced long: their median cost, taken off every window, was a long pace's. Only
    the calibrator's windows beside windows no slower than the median (and its spread) give the cost."""
    from evaluator.referee import clock

    fast, slow = 11.5 * 3, 50.0 * 3  # windows of three calls
    pattern = [slow] * 2 + [slow] * 4 + [fast] * 6  # two warm-up windows, then the ranked ten
    long_medians = 0
    for seed in range(60):
        series = _sampling_series("cuda", seed)
        series.session.referee.current_round = type("R", (), {"window_cost": type("C", (), {"cost_ms": 2.5})})()
        so_far = 0
        for index, window_ms in enumerate(pattern):
            window = clock.Clocked(ms=window_ms, go=Reply(id=1), put=Reply(id=2), offset=0, capture=None, calls=3)
            wanted = index < 2 or series.beside_here("sample", len(pattern) - index, so_far)
            pace = series.pace_for(window)  # before the window joins the series, as `run` does
            series.windows.append(window)
            series.beside_at.append(None)
            if wanted:
                cost = 2.5 + 0.1 * pace  # a longer pace makes the calibrator's window dearer (exaggerated)
                series.beside_at[-1] = len(series.costs)
                series.costs.append(clock.Clocked(ms=cost + 3 * (pace + 0.2), go=Reply(id=1, events_ms=[pace + 0.2] * 3),
                                                  put=Reply(id=2), offset=0, capture=None, calls=3))
                series.paces.append(pace)
                so_far += index >= 2
        beside = [(w, series.costs[i]) for w, i in zip(series.windows[2:], series.beside_at[2:]) if i is not None]
        by_fast = clock.window_cost([c for w, c in beside if w.ms == fast])
        by_slow = [c.ms - c.reported_ms for w, c in beside if w.ms == slow]
        long_medians += clock.window_cost([c for _, c in beside]).cost_ms > by_fast.cost_ms + 1.0
        timing, cost = series.figures(slice(2, None))
        assert cost.cost_ms == by_fast.cost_ms and cost.windows == by_fast.windows, seed  # those beside fast ones
        assert all(cost.cost_ms < c for c in by_slow)
        assert timing.median_ms == pytest.approx((fast - by_fast.cost_ms) / 3)
    assert long_medians >= 5  # the pattern does make the median of every calibrator beside a long pace's


@pytest.mark.slow  # an in-process judgement with the calibrator: about a second
def test_the_kept_calls_are_drawn_from_where_they_outgrow_the_memory_plan():
    """With room for every window's copies, one draw once the windows are closed: 16 of the ranked calls, 4 of the rest
    and the last. With none, each window is drawn from as it ends (all the calls of a window of 17 or fewer), in many
    draws."""
    import dataclasses

    from evaluator.referee.time_phase import time_phase

    from evaluator.referee.replay import SAMPLED_CALLS

    counts, ranked, ranked_calls = {}, {}, {}
    for room in (1 << 30, 0):
        session, built, checked = local_executor.checked(local_executor.Honest)
        session.referee.memory = dataclasses.replace(session.referee.memory, kept_bytes=room)
        timed = time_phase(session, checked, built)
        counts[room] = (timed.check.compared_calls, timed.check.clocked_calls, calls_drawn(timed.check))
        ranked[room], ranked_calls[room] = timed.check.compared_ranked, timed.check.calls
        assert timed.later.trials >= timed.check.compared_calls
    assert counts[1 << 30][0] == counts[1 << 30][2] < counts[1 << 30][1]
    assert 17 < counts[0][0] <= counts[0][1]
    assert ranked[1 << 30] == min(SAMPLED_CALLS, ranked_calls[1 << 30])  # one draw at the end: 16 of the ranked


def test_fewer_ranked_calls_compared_than_the_bound_counts_is_flagged_with_the_bound_that_holds():
    """The detection bound is on the ranked calls compared: where a draw made before the ranked windows were known (the
    copies outgrowing the memory plan) left fewer than 16 of them, the verdict says so and what then holds."""
    from types import SimpleNamespace

    from evaluator.referee import clock
    from evaluator.referee.replay import Replay

    flags = []
    replay = Replay.__new__(Replay)
    replay.session = SimpleNamespace(add=flags.extend)
    windows = [clock.Clocked(ms=1.0, go=Reply(id=1), put=None, offset=0, capture=None, calls=3) for _ in range(12)]
    ranked = {id(w) for w in windows[2:]}  # ten windows of 3 ranked: 30 calls
    replay.compared_in = [(windows[0], 3), (windows[1], 3), *((w, 1) for w in windows[2:])]  # 10 of the ranked
    assert replay.ranked_compared(ranked, 30) == 10
    assert [f.name for f in flags] == ["few_ranked_compared"] and "about 6%" in flags[0].reason
    flags.clear()
    replay.compared_in = [(w, 2) for w in windows[2:]]  # 20 of them
    assert replay.ranked_compared(ranked, 30) == 20 and not flags
    replay.compared_in = [(w, 1) for w in windows[2:5]]  # every one of only 3 ranked calls
    assert replay.ranked_compared({id(w) for w in windows[2:5]}, 3) == 3 and not flags


def test_a_kept_window_holds_its_copies_and_draws_its_inputs_again_from_their_seeds():
    """A kept call's inputs are drawn again from their seed to replay it, never kept: the kept bytes the memory plan
    bounds are the copies alone (kernelbench's inputs, kept beside its outputs, outgrew the plan's 24 GiB in every
    candidate and drew 16 of all the calls, not of the ranked ones, inside the exclusive turn), and a draw from the same
    seed gives the very values the call was given."""
    from types import SimpleNamespace

    from evaluator.referee import inputs as draws
    from evaluator.referee.replay import Replay, kept_nbytes

    assert kept_nbytes({"outputs": torch.zeros(4, 1), "states.mean": torch.zeros(4, 2)}) == 16 + 32
    specs, fixed, values = draws.input_specs([torch.zeros(64, 8), torch.arange(3), 2.5])
    referee = SimpleNamespace(problem=SimpleNamespace(distributions=["randn"]),
                              draw=lambda distribution, seed: draws.draw(specs, distribution, seed, "cpu", fixed, values))
    replay = Replay.__new__(Replay)
    replay.session = SimpleNamespace(referee=referee)
    given = referee.draw("randn", 1234)
    again = replay.inputs(1234)
    assert torch.equal(again[0], given[0]) and torch.equal(again[1], given[1]) and again[2] == 2.5
    assert not torch.equal(replay.inputs(1235)[0], given[0])


def test_a_window_staged_under_names_the_referee_never_asked_for_or_twice_is_wrong_and_never_counted_as_kept():
    """The slots a window's put reply names are the executor's (the candidate's interpreter): 200 slots over one region
    must not make the kept copies look 200 times larger (a draw forced before the ranked windows are known), and a
    name the referee did not ask for, or one named twice, is a problem of the window (compared at once: incorrect)."""
    from types import SimpleNamespace

    from evaluator.referee import clock
    from evaluator.referee.replay import Replay, staged_tensors
    from evaluator.wire.protocol import ValueInfo
    from evaluator.wire.stage import Layout

    layout = Layout(inputs=(), span=64, region=0, sets=1, stride=0)
    stage = SimpleNamespace(check=lambda slot: torch.float32)
    referee = SimpleNamespace(layout=layout, buffer_names=["bn.running_mean"], judge_device="cpu", output_shape=[4],
                              output_dtype="float32", device="cpu")
    session = SimpleNamespace(referee=referee, link=SimpleNamespace(stage=stage))

    def window(*names):
        slots = [TensorSlot(name=n, dtype="float32", shape=[1, 4], offset=0, nbytes=16, in_stage=True) for n in names]
        output = ValueInfo(plain=True, kind="Tensor", shape=[4], dtype="float32", device="cpu")
        return clock.Clocked(ms=1.0, go=Reply(id=1), put=Reply(id=2, tensors=slots, outputs=[output]), offset=0,
                             capture=torch.zeros(64, dtype=torch.uint8))

    tensors, problems = staged_tensors(session, window("outputs", "states.bn.running_mean"))
    assert set(tensors) == {"outputs", "states.bn.running_mean"} and not problems
    tensors, problems = staged_tensors(session, window("outputs", "outputs", "states.alias1"))
    assert set(tensors) == {"outputs"} and len(problems) == 2
    assert "twice" in problems[0] and "did not ask for" in problems[1]

    kept = []
    replay = Replay.__new__(Replay)
    replay.session, replay.count, replay.kept, replay.kept_bytes, replay.limit = session, 0, [], 0, 1 << 20
    replay.forced, replay.states = None, {}
    replay.compare = lambda *args: kept.append(args)
    replay.keep(window("outputs", "states.bn.running_mean"), [7])
    assert replay.kept_bytes == 64 and not kept  # the referee's copy of the span, not the slots' sum
    replay.keep(window("outputs", *(f"states.alias{i}" for i in range(200))), [8])
    assert kept and "did not ask for" in kept[0][2][0]  # compared at once, with its first problem


def test_at_kernelbench_an_80_gb_gpu_keeps_every_clocked_call_for_one_draw_at_the_end():
    """The stated bound (16 of the ranked calls compared) holds where the copies fit: gemm_scale_bn at `kernelbench`
    (a 256 MiB output a call, about 46 clocked calls) on one lane of an 80 GB GPU keeps 64 calls' copies."""
    from evaluator.referee import memory
    from evaluator.referee.referee import MOST_CALLS, STAGE_BYTES
    from evaluator.wire.stage import Layout

    io = 16384 * 4096 * 4
    layout = Layout.plan([(0, [16384, 4096], "float32")], io, [4096 * 4] * 3, budget=STAGE_BYTES["cuda"], most=MOST_CALLS)
    plan = memory.plan("cuda", 80 * 10**9, layout.size, io, io, 3 * 4096 * 4, ahead=4, beside=1)
    from evaluator.referee.replay import kept_nbytes

    copies = {"outputs": torch.empty(64, 16384, 4096, device="meta"), "states.running_mean": torch.empty(64, 4096)}
    assert plan.judge_device == "cuda" and plan.kept_bytes >= kept_nbytes(copies)
    # and room past them for one candidate's replay beside the next one's start and checks (replay.Later): 46 calls'
    # copies and twice the float64 judge's
    assert plan.beside_bytes >= 46 * io + 2 * plan.judge_bytes
    two_lanes = memory.plan("cuda", 40 * 10**9, layout.size, io, io, 3 * 4096 * 4, ahead=4, beside=1)
    assert two_lanes.beside_bytes == 0  # an 80 GB GPU's half: every compared call replayed before the verdict


def _deferring(monkeypatch, model_class, judge=None):
    from evaluator.referee import replay

    monkeypatch.setattr(replay, "DEFER", "1")  # the GPU's path on the CPU
    session = local_executor.session_for(model_class, judge)
    session.defer_replay = True
    return session


@pytest.mark.slow  # an in-process judgement with the calibrator: about a second
def test_compared_calls_left_for_later_are_counted_when_drawn_and_compared_before_the_verdict(monkeypatch):
    """Where the memory plan has room, only the run of compared calls that ends with the last is replayed before the
    state after the windows is compared; the others are drawn and counted at once (the bound's figures), and replayed
    after the executor's last reply on a copy of the reference, into the same accumulator, before the verdict."""
    from evaluator.referee.replay import SAMPLED_CALLS
    from evaluator.referee.time_phase import time_phase

    session = _deferring(monkeypatch, local_executor.Honest)
    built = phases.init_phase(session, Imported())
    checked = phases.check_phase(session, built)
    timed = time_phase(session, checked, built)
    later = timed.rest
    assert later is not None and later.seconds is None  # run on the reply thread, its executor closed first
    deferred = sum(len(indices) for _, indices in later.plan)
    assert 0 < deferred < timed.check.compared_calls and timed.check.compared_ranked == SAMPLED_CALLS
    before = timed.later.trials
    later.run()
    assert timed.later.trials == before + deferred and timed.later.passed
    assert later.plan == [] and later.worker is None  # its copies let go


@pytest.mark.slow  # two in-process judgements with the calibrator: about two seconds
def test_a_call_wrong_among_those_replayed_later_makes_the_verdict_incorrect_and_names_it(monkeypatch):
    """Every step of the candidate's own phases passed; one of the calls left for later is wrong as its window copied
    it (what a candidate wrong on that call alone leaves): the verdict, made once they are over, is `incorrect`, names
    the call and ranks nothing. An honest candidate's is `correct`, every drawn call compared."""
    judgement = phases.begin(_deferring(monkeypatch, local_executor.Honest), compile_only=False, imported=Imported())
    assert judgement.outcome is None and judgement.rest is not None
    kept, indices = judgement.rest.plan[len(judgement.rest.plan) // 2]
    kept.staged["outputs"][indices[0]] += 1.0
    verdict = judgement.verdict()
    assert verdict.status == Status.incorrect and verdict.phase.value == "time", verdict.error
    assert f"wrong on clocked call {kept.first + indices[0]}:" in verdict.error
    assert verdict.runtime_ms is None and verdict.speedup == {}
    honest = phases.judge(_deferring(monkeypatch, local_executor.Honest), compile_only=False, imported=Imported())
    assert honest.status == Status.correct, honest.error
    assert honest.timing_check.compared_calls == honest.correctness.later.trials - 2  # the state's and the recheck's


@pytest.mark.slow  # an in-process judgement and two rounds: about three seconds
def test_a_verdict_made_after_the_next_round_began_divides_by_the_round_its_windows_followed(monkeypatch):
    """Its verdict waits for the compared calls replayed beside the next candidate, and a baseline round can come in
    between (before that candidate): the verdict still divides by the round before its own windows, and names it."""
    referee = local_executor.referee(baselines=["eager"])
    referee.ensure_round()
    before = referee.current_round
    judgement = phases.begin(_deferring(monkeypatch, local_executor.Honest, referee), compile_only=False,
                             imported=Imported())
    assert judgement.rest is not None
    referee.baseline_round()
    assert referee.current_round.source != before.source
    verdict = judgement.verdict()
    assert verdict.status == Status.correct, verdict.error
    assert verdict.baseline_source == before.source and verdict.baselines["eager"] == before.baselines["eager"]


@pytest.mark.slow  # an in-process judgement beside eager's windows, and a round with the twin: a few seconds
def test_on_the_cpu_a_candidate_is_divided_by_eagers_windows_beside_its_own_not_by_the_rounds_twin(monkeypatch):
    """With eager's twin on the CPU, eager is timed beside each of the candidate's windows too (calibrator.EagerBeside):
    the verdict's `eager` is that figure (`BaselineSource.paired`), its speedup eager's over the candidate's, while the
    round keeps its twin's; eager's own twin is never paired with itself."""
    from evaluator.referee import twin

    referee, started = _twin_referee(monkeypatch)
    assert referee.eager_beside is not None
    referee.ensure_round()
    round_eager = referee.current_round.baselines["eager"]
    assert started == [twin.NAME]
    verdict = phases.judge(local_executor.session_for(local_executor.Honest, referee), compile_only=False,
                           imported=Imported())
    assert verdict.status == Status.correct, verdict.error
    assert verdict.baseline_source.paired == ["eager"] and verdict.baselines["eager"] != round_eager
    assert verdict.baselines["eager"].reps == verdict.timing.reps  # one of eager's windows beside each of its own
    assert verdict.speedup["eager"] == pytest.approx(verdict.baselines["eager"].median_ms / verdict.runtime_ms)
    monkeypatch.setattr(referee, "eager_beside", None)  # where it is not run (a GPU, or KH_EAGER_BESIDE=0): the round's
    plain = phases.judge(local_executor.session_for(local_executor.Honest, referee), compile_only=False,
                         imported=Imported())
    assert plain.baseline_source.paired == [] and plain.baselines["eager"] == round_eager


# --------------------------------------------------------------------------- a checked call's reference, overlapped

def _overlap_referee(device: str = "cuda", judge_device: str = "cuda", kept: int = 1 << 30, peak: int | None = 1 << 20):
    from types import SimpleNamespace

    from evaluator.referee.memory import MemoryPlan

    return SimpleNamespace(device=device, judge_device=judge_device, reference64_peak=peak,
                           memory=MemoryPlan(judge_device=judge_device, ahead=0, need_bytes=0, device_bytes=80 << 30,
                                             kept_bytes=kept))


def test_a_checked_calls_reference_overlaps_the_call_only_on_a_gpu_judge_with_room_to_spare():
    """Only where the judge is on the GPU, the reference's own peak was measured (on the first checked call, made
    after its reply) and the room kept for the clocked calls' copies holds OVERLAP_ROOM times it: a GPU short of memory
    never meets the executor's call with the referee's float64 work it did not plan on beside it (an attention's
    scores, a convolution's workspace: more than its inputs and output)."""
    from evaluator.referee.check_phase import OVERLAP_ROOM, overlapped

    assert overlapped(_overlap_referee(kept=OVERLAP_ROOM << 20))
    assert not overlapped(_overlap_referee(kept=(OVERLAP_ROOM << 20) - 1))
    assert not overlapped(_overlap_referee(peak=None))  # the first checked call: measured, not overlapped
    assert not overlapped(_overlap_referee(judge_device="cpu"))  # judged in host memory: seconds, not milliseconds
    assert not overlapped(_overlap_referee(device="cpu", judge_device="cpu"))


def test_the_early_reference_is_the_reference_after_the_reply_and_gives_way_where_memory_runs_out():
    """Made meanwhile, the expected output and the buffers after it are the ones made after the reply; where the
    memory runs out meanwhile (after a buffer moved), the buffers are put back and nothing is expected early, so the
    reference made after the reply steps them once, not twice."""
    from evaluator.referee.check_phase import EarlyReference

    torch.manual_seed(0)
    reference = torch.nn.BatchNorm1d(8).double()
    inputs = [torch.randn(16, 8)]
    sequential = torch.nn.BatchNorm1d(8).double()
    sequential.load_state_dict(reference.state_dict())
    early = EarlyReference(_overlap_referee(device="cpu", judge_device="cpu"), reference, inputs, train=True)
    early.run()
    with torch.no_grad():
        expected = sequential.train()(inputs[0].double())
    assert torch.equal(early.expected, expected)
    assert all(torch.equal(a, b) for a, b in zip(reference.state_dict().values(), sequential.state_dict().values()))

    class RunsOut(torch.nn.BatchNorm1d):
        def forward(self, x):
            super().forward(x)  # its running statistics moved
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    short = RunsOut(8).double()
    short.load_state_dict(reference.state_dict())
    before = {k: v.clone() for k, v in short.state_dict().items()}
    early = EarlyReference(_overlap_referee(device="cpu", judge_device="cpu"), short, inputs, train=True)
    early.run()
    assert early.expected is None
    assert all(torch.equal(before[k], v) for k, v in short.state_dict().items())


def test_the_referees_work_meanwhile_moves_the_calls_deadline_on_within_its_credit():
    """`Session.request(meanwhile=)`: the work runs once the command is sent, before its reply is read, and its
    seconds move the reply's deadline on, out of the referee's credit (a slow referee never makes a candidate late)."""
    from types import SimpleNamespace

    seen = {}

    def request(command, deadline, during):
        seen["deadline"] = deadline
        seen["moved"] = during(deadline, lambda: False)
        return Reply(id=1)

    session = Session(referee=None, link=SimpleNamespace(request=request), name="c", digest="d", problem="p",
                      size="s", device="cuda", compile_timeout_s=1, run_timeout_s=1, own_credit_s=0.05)
    order = []
    session.request(Call(id=0, place=0, train=True), meanwhile=lambda: (order.append("meanwhile"), time.sleep(0.02)))
    assert order == ["meanwhile"] and 0.02 <= seen["moved"] <= 0.05
    assert session.own_credit_s == pytest.approx(0.05 - seen["moved"])
    left = session.own_credit_s
    session.request(Call(id=0, place=0, train=True), meanwhile=lambda: time.sleep(0.05))
    assert seen["moved"] == pytest.approx(left) and session.own_credit_s == 0.0  # at most what is left


def test_each_checked_calls_comparisons_are_made_while_the_next_call_is_under_way_and_the_last_before_the_verdict():
    """Where there is room (check_phase.deferred), a checked call's comparisons wait for the next call and are made
    while it waits behind its stream hold (its request's `meanwhile`); the last main trial's are made before anything
    reads the accumulators, so a candidate wrong only there is `incorrect` (a flush left out loses it:
    mutation-checked)."""
    from types import SimpleNamespace

    from evaluator.referee import check_phase
    from evaluator.wire.records import Status

    made, calls = [], []

    class Made:  # a call's comparisons: wrong for the last main trial only
        def __init__(self, index, acc):
            self.index, self.acc = index, acc

        def run(self):
            made.append(self.index)
            if self.index == 3:
                self.acc.fail("output: wrong on the last trial only")

    def trial(session, reference64, distribution, seed, *, train, acc, fill=False, before=None, later=None):
        index = len(calls)
        calls.append((index, before.index if before is not None else None, later is not None, fill))
        if before is not None:
            before.run()  # in the request's `meanwhile`: before this call's reply is read
        comparisons = Made(index, acc)
        if later is not None:
            later.append(comparisons)
        else:
            comparisons.run()
        return SimpleNamespace(fill=(True, True, True))

    problem = SimpleNamespace(mode="train", distributions=["randn", "rand"], trials=2, check_eval_mode=False)
    referee = SimpleNamespace(problem=problem, tolerances={}, device="cpu")
    session = SimpleNamespace(referee=referee, enter=lambda phase: None, seed=iter(range(100)).__next__,
                              keys=SimpleNamespace(hex="k"), add=lambda flags: None, phase=None)
    reference64 = SimpleNamespace(state_dict=dict, train=lambda mode: None)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(check_phase, "trial", trial)
        checked = check_phase.check_phase(session, SimpleNamespace(reference64=reference64))
    # four main trials, each made during the next (the last after them); none deferred past them
    assert calls[:4] == [(0, None, True, False), (1, 0, True, False), (2, 1, True, False), (3, 2, True, False)]
    assert made[:4] == [0, 1, 2, 3]
    assert checked.stop is not None and checked.stop.status == Status.incorrect
    assert "wrong on the last trial only" in checked.stop.error
    # with no room, every call compares at once
    calls.clear(), made.clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(check_phase, "trial", trial)
        patch.setattr(check_phase, "deferred", lambda referee, reference64: False)
        check_phase.check_phase(session, SimpleNamespace(reference64=reference64))
    assert [c[1:3] for c in calls[:4]] == [(None, False)] * 4 and made[:4] == [0, 1, 2, 3]


def test_comparisons_made_later_read_the_state_as_the_call_left_it_and_run_inside_the_next_calls_request():
    """A checked call's comparisons kept for later (check_phase.trial's `later`) hold the reference's state as that
    call left it: the next call's float64 reference steps the reference on before they are made (a snapshot left out
    compares a later state: mutation-checked). Given as the next call's `before`, they are made after its request is
    sent and before its reply is read (its `meanwhile`)."""
    from types import SimpleNamespace

    from evaluator.referee import check_phase
    from evaluator.referee.compare import ModeAccumulator
    from evaluator.wire.problem import load_problem
    from evaluator.wire.protocol import Reply, ValueInfo

    class Reference(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("steps", torch.zeros(2, dtype=torch.float64))

    reference64, expected = Reference(), torch.arange(8, dtype=torch.float64).reshape(4, 2)
    tolerances = load_problem("gemm_scale_bn").tolerances
    referee = SimpleNamespace(draw=lambda distribution, seed: [torch.ones(4, 3)], device="cpu", judge_device="cpu",
                              layout=SimpleNamespace(inputs=(), region=0), output_dtype="float32",
                              tolerances=tolerances, rel_floor=1e-4, reference64_peak=None)
    seen = []

    def request(command, meanwhile=None):
        seen.append("sent")
        if meanwhile is not None:
            meanwhile()
        seen.append("replied")
        return Reply(id=0, output=ValueInfo(kind="Tensor", plain=True, dtype="float32", shape=[4, 2], device="cpu"))

    session = SimpleNamespace(referee=referee, link=SimpleNamespace(stage=SimpleNamespace(device="cpu")),
                              request=request, phase=None,
                              shipment=lambda reply: ({"output": expected.float(), "input.0": torch.ones(4, 3),
                                                       "state.steps": reference64.steps.float()}, []))
    acc, later = ModeAccumulator("train", tolerances), []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(check_phase, "reference_output", lambda *args: expected)
        check_phase.trial(session, reference64, "randn", 0, train=True, acc=acc, later=later)
        assert len(later) == 1 and acc.trials == 1 and not acc.worst  # counted, not compared yet
        reference64.steps += 1  # the next call's float64 reference, made while that call waits behind its hold
        seen.clear()
        later[0].run = (lambda run: lambda **kw: (seen.append(("compared", kw)), run(**kw)))(later[0].run)
        check_phase.trial(session, reference64, "randn", 1, train=True, acc=acc, before=later.pop())
    # made beside the call; after its reply, the second look finds them made
    assert seen == ["sent", ("compared", {"beside": True}), "replied", ("compared", {})]
    assert acc.passed and set(acc.worst) == {"output", "steps"}, acc.record()  # against the state the call left


def test_comparisons_short_of_memory_beside_the_next_call_are_made_after_its_reply_and_judged_as_before_if_short_again():
    """The referee's memory running out as a call's comparisons are made beside the next call (whose executor holds
    memory then) is not the verdict: the cache is let go, and they are made again once that call's reply is in, as the
    early float64 reference falls back. Short again, it is what it was before they were made beside: `crashed`,
    saying the judge's copies do not fit, or `incorrect` after a wrong trial."""
    from types import SimpleNamespace

    from evaluator.referee import check_phase
    from evaluator.referee.compare import ModeAccumulator
    from evaluator.referee.session import Judged
    from evaluator.wire.problem import load_problem
    from evaluator.wire.protocol import Reply, ValueInfo
    from evaluator.wire.records import Status

    tolerances = load_problem("gemm_scale_bn").tolerances
    expected = torch.arange(8, dtype=torch.float64).reshape(4, 2)
    referee = SimpleNamespace(draw=lambda distribution, seed: [torch.ones(4, 3)], device="cpu", judge_device="cpu",
                              layout=SimpleNamespace(inputs=(), region=0), output_dtype="float32",
                              tolerances=tolerances, rel_floor=1e-4, reference64_peak=None)
    session = SimpleNamespace(
        referee=referee, link=SimpleNamespace(stage=SimpleNamespace(device="cpu")), phase=None,
        request=lambda command, meanwhile=None: (meanwhile and meanwhile(), Reply(id=0, output=ValueInfo(
            kind="Tensor", plain=True, dtype="float32", shape=[4, 2], device="cpu")))[1],
        shipment=lambda reply: ({"output": shipped.pop(0), "input.0": torch.ones(4, 3)}, []))
    reference64, shipped = torch.nn.Module(), []
    real_compare, released = check_phase.compare_output, []

    def short(times: int):
        left = [times]

        def compare_output(*args):
            if left[0] > 0:
                left[0] -= 1
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB.")
            return real_compare(*args)
        return compare_output

    for times, acc, status in ((1, ModeAccumulator("train", tolerances), None),
                               (2, ModeAccumulator("train", tolerances), Status.crashed),
                               (2, None, Status.incorrect)):
        if acc is None:  # a trial wrong before
            acc = ModeAccumulator("train", tolerances)
            acc.fail("output: 3 values outside")
        later, shipped[:] = [], [expected.float() + 1, expected.float()]  # the call made beside the next is wrong
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(check_phase, "reference_output", lambda *args: expected)
            patch.setattr(check_phase, "release_cached", released.append)
            check_phase.trial(session, reference64, "randn", 0, train=True, acc=acc, later=later)
            patch.setattr(check_phase, "compare_output", short(times))
            if status is None:
                check_phase.trial(session, reference64, "randn", 1, train=True, acc=acc, before=later[0])
                assert acc.trials == 2 and later[0].shipped is None  # made once the reply was in
                assert not acc.passed and acc.worst["output"][0] == 1.0  # the wrong call found, not lost
                continue
            with pytest.raises(Judged) as judged:
                check_phase.trial(session, reference64, "randn", 1, train=True, acc=acc, before=later[0])
        assert judged.value.status == status, judged.value.error
        assert ("do not fit this GPU" in judged.value.error) == (status == Status.crashed)
    assert released == ["cpu"] * 3  # each time short beside the call


def test_comparisons_wait_for_the_next_call_only_where_one_calls_float64_copies_fit_beside_it():
    """check_phase.deferred on a GPU: the kept room must hold twice the float64 reference's peak, one call's copies
    (float64 four times a half-precision call's bytes, twice a float32's) and the comparisons' chunks; on the CPU,
    always; never where the judge lives in host memory beside a GPU."""
    from types import SimpleNamespace

    from evaluator.referee import check_phase

    gib = 1 << 30

    def referee(itemsize, kept, judge="cuda", device="cuda"):
        return SimpleNamespace(device=device, judge_device=judge, reference64_peak=gib, output_shape=[gib // itemsize],
                               input_nbytes=gib, output_nbytes=gib, state_nbytes=0,
                               memory=SimpleNamespace(kept_bytes=kept))

    stateless, room = torch.nn.Module(), 2 * gib + check_phase.COMPARISON_ROOM  # the reference's peak twice, chunks
    assert check_phase.deferred(referee(4, room + 5 * gib), stateless)  # float32: 2 I + O + 2 O
    assert not check_phase.deferred(referee(4, room + 5 * gib - 1), stateless)
    assert not check_phase.deferred(referee(2, room + 5 * gib), stateless)  # half precision: 2 I + O + 4 O
    assert check_phase.deferred(referee(2, room + 7 * gib), stateless)
    stateful = torch.nn.Module()
    stateful.register_buffer("steps", torch.zeros(1024, dtype=torch.float64))  # its copy counted at its own bytes
    assert not check_phase.deferred(referee(4, room + 5 * gib), stateful)
    assert check_phase.deferred(referee(4, room + 5 * gib + 8192), stateful)
    assert not check_phase.deferred(referee(4, 100 * gib, judge="cpu"), stateless)
    assert check_phase.deferred(referee(4, 0, judge="cpu", device="cpu"), stateless)


def test_a_judge_short_of_memory_never_hides_a_trial_wrong_in_an_earlier_distribution():
    """A candidate wrong on one distribution's trials that then holds the device's memory so that the referee runs
    short on the next distribution's first call is `incorrect`, as within one distribution (wrong_already), not
    `crashed` (the judge's own failure): the check phase looks at every distribution's trials so far
    (mutation-checked)."""
    from types import SimpleNamespace

    from evaluator.referee import check_phase
    from evaluator.referee.session import Judged
    from evaluator.wire.records import Phase, Status

    def trial(session, reference64, distribution, seed, *, train, acc, fill=False, before=None, later=None):
        if distribution == "rand":
            raise Judged(Status.crashed, Phase.check, "the memory ran out in the referee")
        acc.fail("output: wrong on randn")
        return SimpleNamespace(fill=(True, True, True))

    problem = SimpleNamespace(mode="train", distributions=["randn", "rand"], trials=2, check_eval_mode=False)
    session = SimpleNamespace(referee=SimpleNamespace(problem=problem, tolerances={}, device="cpu"),
                              enter=lambda phase: None, seed=iter(range(100)).__next__, phase=Phase.check)

    def judged_with(stub) -> Judged:  # the check phase's verdict with `stub` for each checked call, comparisons deferred
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(check_phase, "trial", stub)
            patch.setattr(check_phase, "deferred", lambda referee, reference64: True)
            with pytest.raises(Judged) as judged:
                check_phase.check_phase(session, SimpleNamespace(reference64=None))
        return judged.value

    judged = judged_with(trial)
    assert judged.status == Status.incorrect, judged.error
    assert "wrong in an earlier trial (output: wrong on randn), then the memory ran out" in judged.error

    # the call before's comparisons still pending (its executor gone before they were made beside the next call):
    # made first, and wrong there, the crash is `incorrect`; the referee short of memory drawing the next call's
    # inputs is that crash
    class Pending:
        def __init__(self, acc):
            self.acc = acc

        def run(self, beside=False):
            self.acc.fail("output: wrong on the call before")

    for crash in (Judged(Status.crashed, Phase.check, "the memory ran out in the referee"),
                  torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB.")):
        def pending_trial(session, reference64, distribution, seed, *, train, acc, fill=False, before=None, later=None):
            if before is None:
                later.append(Pending(acc))
                return SimpleNamespace(fill=(True, True, True))
            raise crash  # before `before` was made

        judged = judged_with(pending_trial)
        assert judged.status == Status.incorrect, judged.error
        assert "wrong in an earlier trial (output: wrong on the call before)" in judged.error

    # the last call's comparisons, made after the trials, short of memory after a distribution wrong before
    class ShortLast:
        def run(self, beside=False):
            raise Judged(Status.crashed, Phase.check, "the memory ran out in the referee")

    def last_short(session, reference64, distribution, seed, *, train, acc, fill=False, before=None, later=None):
        if distribution == "randn":
            acc.fail("output: wrong on randn")
        elif before is None:
            later.append(ShortLast())
        return SimpleNamespace(fill=(True, True, True))

    problem.trials = 1
    judged = judged_with(last_short)
    assert judged.status == Status.incorrect, judged.error
