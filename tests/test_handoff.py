"""Windows of calls handed off one by one through the exchange (issue 33): the plan of the exchange, the referee's
relay against an executor in the test's process (a thread of its own), and what a candidate can and cannot do there."""

from __future__ import annotations

import struct
import time

import pytest
import torch

import local_executor
from conftest import calls_drawn
from evaluator.wire import handoff
from evaluator.wire.protocol import TensorSlot
from evaluator.wire.records import Status


def test_a_plan_carries_each_calls_inputs_and_what_it_left():
    inputs = [TensorSlot(name="input.0", dtype="float32", shape=[3, 5], offset=0, nbytes=60),
              TensorSlot(name="input.2", dtype="int64", shape=[4], offset=256, nbytes=32)]
    plan = handoff.Plan.make(inputs, ([3, 2], "float32"), [("bn.running_mean", [2], "float32"),
                                                            ("bn.num_batches_tracked", [], "int64")])
    assert [s.offset for s in plan.inputs] == [handoff.HEADER, handoff.HEADER + 256]
    assert plan.out_offset == handoff.HEADER + plan.in_span and plan.out_offset >= handoff.HEADER + 256 + 32
    assert [s.name for s in plan.outputs] == ["output", "state.bn.running_mean", "state.bn.num_batches_tracked"]
    sets = [[torch.randn(3, 5), None, torch.arange(4) + 10 * k] for k in range(2)]
    packed = plan.pack(sets)
    for row, inputs_k in zip(packed, sets):  # each set's bytes where its slots say
        assert torch.equal(row[:60].view(torch.float32).view(3, 5), inputs_k[0])
        assert torch.equal(row[256:288].view(torch.int64), inputs_k[2])
    capture = torch.zeros(2, plan.out_span, dtype=torch.uint8)
    for k in range(2):  # as an executor writes them, at the output region's offsets
        for slot, value in zip(plan.outputs, (torch.full((3, 2), float(k)), torch.tensor([k, -k], dtype=torch.float32),
                                              torch.tensor(k + 7))):
            start = slot.offset - plan.out_offset
            capture[k, start:start + slot.nbytes] = value.reshape(-1).view(torch.uint8)
    staged = plan.unpack(capture)
    assert staged["outputs"].shape == (2, 3, 2) and torch.equal(staged["outputs"][1], torch.ones(3, 2))
    assert torch.equal(staged["states.bn.running_mean"][1], torch.tensor([1.0, -1.0]))
    assert staged["states.bn.num_batches_tracked"].tolist() == [7, 8]


def test_a_word_that_never_comes_is_late_and_stop_ends_the_wait_sooner():
    page = bytearray(64)
    started = time.monotonic()
    with pytest.raises(handoff.Late):
        handoff.wait_for(page, handoff.COMMIT, 1, started + 0.05)
    assert time.monotonic() - started < 1.0
    with pytest.raises(handoff.Late):
        handoff.wait_for(page, handoff.COMMIT, 1, started + 60, stop=lambda: True)
    handoff.write(page, handoff.COMMIT, 3)
    handoff.wait_for(page, handoff.COMMIT, 3, started)  # there already: no wait, deadline or not

    def answered_right_after_the_commit():  # the executor's last COMMIT and its reply land between two looks
        handoff.write(page, handoff.COMMIT, 4)
        return True
    handoff.wait_for(page, handoff.COMMIT, 4, started + 60, stop=answered_right_after_the_commit)  # not late


def test_a_napping_wait_takes_no_core_and_still_sees_the_word_and_its_deadline():
    """On the CPU the referee naps between looks at COMMIT, leaving the call's threads both cores: its wait costs
    a fraction of the wall time it lasts, and it still returns once the word comes and is late after its deadline."""
    import threading

    page = bytearray(64)
    setter = threading.Timer(0.3, handoff.write, args=(page, handoff.COMMIT, 1))
    setter.start()
    wall, cpu = time.monotonic(), time.process_time()
    handoff.wait_for(page, handoff.COMMIT, 1, wall + 60, nap_s=50e-6)
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    assert 0.25 < wall < 5 and cpu < wall / 2, (wall, cpu)
    with pytest.raises(handoff.Late):
        handoff.wait_for(page, handoff.COMMIT, 2, time.monotonic() + 0.05, nap_s=50e-6)


def handed_off(monkeypatch, model_class, calls: int = 6):
    """The time phase of `model_class` in this process with windows of `calls` calls (K as a short call gets it)."""
    from evaluator.referee import time_phase as phase

    monkeypatch.setattr(phase, "window_calls", lambda *_: calls)
    session, built, checked = local_executor.checked(model_class)
    assert checked.stop is None
    model_class.exchange = session.link.exchange  # the candidate's own (a contained one finds it with gc: the fixtures)
    try:
        return phase.time_phase(session, checked, built)
    finally:
        del model_class.exchange


@pytest.mark.slow  # an in-process judgement with the calibrator: about a second
def test_calls_handed_off_back_to_back_rank(monkeypatch):
    timed = handed_off(monkeypatch, local_executor.Honest)
    assert timed.check.calls_per_window == 6 and timed.check.calls == timed.timing.reps * 6
    assert timed.timing.reps >= 10 and timed.check.agrees
    assert timed.check.overhead_ms > 0  # the calibrator's handed-off windows beside them: their cost, per window
    # every call kept: the ranked calls, the warm-up's and the back-to-back windows'; a sample of them compared (16 of
    # the ranked, 4 of the rest and the last), and the checks after
    assert timed.check.clocked_calls > timed.check.calls
    assert timed.later.trials >= timed.check.compared_calls == calls_drawn(timed.check)


class _PeeksAhead(local_executor.Honest):
    """Watches the exchange's input region through each call for the next call's inputs (to batch the two)."""

    looked = changed = own = 0

    def forward(self, x):
        out = super().forward(x)
        raw = self.exchange.bytes if hasattr(self, "exchange") else None
        if raw is not None:
            region = raw[handoff.HEADER:handoff.HEADER + x.numel() * x.element_size()]
            seen = region.clone()
            type(self).own += torch.equal(seen.view(x.dtype).view(x.shape), x)  # its own inputs: the region watched
            until = time.perf_counter() + 0.002
            while time.perf_counter() < until:
                if not torch.equal(region, seen):
                    type(self).changed += 1
                    break
            type(self).looked += 1
        return out


@pytest.mark.slow  # an in-process judgement with the calibrator: about a second
def test_no_call_of_a_handed_off_window_sees_the_next_calls_inputs(monkeypatch):
    _PeeksAhead.looked = _PeeksAhead.changed = _PeeksAhead.own = 0
    timed = handed_off(monkeypatch, _PeeksAhead)
    assert timed.check.calls_per_window == 6 and _PeeksAhead.own >= timed.check.calls  # the handed-off calls' inputs
    assert _PeeksAhead.changed == 0


class _CommitsEarly(local_executor.Honest):
    """Writes the commit word as each handed-off call begins, then works: its output comes after the commit."""

    def forward(self, x):
        if not hasattr(type(self), "exchange"):  # the checks, before the time phase
            return super().forward(x)
        page = self.exchange.map
        go, committed = struct.unpack_from("<q", page, handoff.GO)[0], struct.unpack_from("<q", page, handoff.COMMIT)[0]
        if hasattr(type(self), "exchange") and go > committed:
            struct.pack_into("<q", page, handoff.COMMIT, go)
            time.sleep(0.01)
        return super().forward(x)


@pytest.mark.slow  # an in-process judgement with the calibrator: about a second
def test_a_call_committed_before_its_output_exists_is_judged_on_what_the_commit_found(monkeypatch):
    from evaluator.referee.session import Judged

    with pytest.raises(Judged) as caught:
        handed_off(monkeypatch, _CommitsEarly)
    assert caught.value.status == Status.incorrect and "wrong on clocked call" in caught.value.error, caught.value.error
    assert "back to back" in caught.value.error  # a call of a handed-off window


@pytest.mark.slow  # an in-process judgement: about a second
def test_handed_off_windows_without_the_calibrator_beside_them_are_uncalibrated(monkeypatch):
    """The round's cost is a window of one call's (1.5-2.7 ms on an H100): taken off windows of K calls handed off, it
    would move every figure by cost / K. A series whose calibrator failed is `uncalibrated` instead (a review's find)."""
    from types import SimpleNamespace

    from evaluator.referee import clock
    from evaluator.referee import time_phase as phase

    monkeypatch.setattr(phase, "window_calls", lambda *_: 6)
    session, built, checked = local_executor.checked(local_executor.Honest)
    referee = session.referee
    referee.current_round = SimpleNamespace(baselines={}, window_cost=clock.WindowCost(cost_ms=2.0, window_ms=2.1, device_ms=0.1,
                                                                         windows=30, costs=(2.0,) * 30))
    calibrate = referee.calibrator.window
    monkeypatch.setattr(referee.calibrator, "window",
                        lambda sets, pace=0.0, plan=None: None if plan is not None else calibrate(sets, pace, plan))
    timed = phase.time_phase(session, checked, built)
    assert timed.check.calls_per_window == 6 and timed.check.overhead_ms == 0.0
    assert timed.timing.reps >= 10  # the series goes on without the calibrator (it once stopped at one window)
    assert any(f.name == "uncalibrated" for f in session.flags)


class _SlowInItsWarmUp(local_executor.Honest):
    """Slow (60 ms) in the windows of one call alone (its inputs are views of the stage there, fresh tensors in
    checked calls and handed-off ones): its warm-up windows say its calls are long."""

    def forward(self, x):
        if x._base is not None:
            time.sleep(0.06)
        return super().forward(x)


@pytest.mark.slow  # an in-process judgement with slow warm-up calls: a few seconds
def test_a_candidate_slow_in_its_warm_up_alone_does_not_choose_its_windows():
    """K comes from the reference's call, not the candidate's warm-up: slow there alone, a candidate once got windows
    of one call, where its copies are in the cost taken off, instead of handed-off ones, where they are its own."""
    from evaluator.referee import time_phase as phase

    session, built, checked = local_executor.checked(_SlowInItsWarmUp)
    timed = phase.time_phase(session, checked, built)
    assert timed.check.calls_per_window > 1


def test_a_baseline_is_timed_as_a_handed_off_candidates_calls_with_its_copies():
    """Where candidates' calls are handed off (a call's bytes decide), a baseline is timed as they are: K calls back to
    back, each call's inputs copied in from host memory and its output and buffers copied out inside its time (issue
    33: the copies are a handed-off call's own, so a baseline without them read faster than the same work handed off)."""
    from evaluator.referee import relay

    judge = local_executor.referee()
    assert judge.handed_off
    stats = judge.time_baseline("eager")
    assert stats.handed_off and stats.reps >= judge.timer.min_reps and stats.median_ms > 0
    # windows of about BASELINE_WINDOW_MS, 2 calls at least: a long call with few bytes does not hold a round for minutes
    assert relay.baseline_calls(0.1, "cuda") == relay.HANDOFF_CALLS["cuda"] and relay.baseline_calls(50.0, "cuda") == 2
    assert relay.baseline_calls(10.0, "cpu") == 4
    copies = relay.CopiedCalls("cpu")
    sets = [judge.draw(judge.problem.distributions[0], seed) for seed in (1, 2)]
    copies.load(sets)
    model = judge.baseline_model.train(True)
    with torch.no_grad():
        first = copies.call(model)
        assert torch.equal(copies.outs["output"], first)  # what the call left, copied out
        assert torch.equal(copies.outs["state.bn.running_mean"], model.bn.running_mean)
        second = copies.call(model)
    assert not torch.equal(first, second)  # each call on its own set
    assert copies.hosts[0][0].data_ptr() != sets[0][0].data_ptr()  # copied into host memory of its own


def test_a_call_too_large_to_hand_off_is_timed_a_call_at_a_time_candidates_and_baselines_alike(monkeypatch):
    from evaluator.referee import relay
    from evaluator.referee import time_phase as phase

    monkeypatch.setitem(relay.HANDOFF_BYTES, "cpu", 1024)
    session, built, checked = local_executor.checked(local_executor.Honest)
    judge = session.referee
    assert not judge.handed_off and not judge.time_baseline("eager").handed_off
    timed = phase.time_phase(session, checked, built)
    assert timed.check.calls_per_window == 1 and not timed.timing.handed_off


def test_a_speedup_over_baselines_timed_otherwise_than_the_candidate_does_not_rank():
    """A candidate whose handed-off windows fell back to one call (a driver that refuses the queued waits, its
    calibrator's not queued) against baselines timed with their copies, or the reverse: `shaky_timing`."""
    from evaluator.referee.phases import shaky_timing
    from evaluator.wire.records import TimingStats

    def stats(median, handed_off):
        return TimingStats(median_ms=median, mean_ms=median, min_ms=median, max_ms=median, iqr_ms=0.01 * median,
                           reps=30, warmup=3, handed_off=handed_off)

    def rounds(handed_off):
        from types import SimpleNamespace
        return SimpleNamespace(device_busy=None, baselines={"eager": stats(0.3, handed_off)}, moved={})

    assert shaky_timing(stats(0.2, True), rounds(True)) == []
    assert shaky_timing(stats(0.2, False), rounds(False)) == []
    [flag] = shaky_timing(stats(0.2, False), rounds(True))
    assert flag.name == "shaky_timing" and "not like for like" in flag.reason
    assert "not like for like" in shaky_timing(stats(0.2, True), rounds(False))[0].reason


@pytest.mark.slow  # an in-process judgement with the calibrator: about a second
def test_a_verdict_divides_only_by_baselines_timed_as_the_candidate_was():
    """A speedup is a ratio of two figures of one kind: over a baseline timed otherwise than the candidate's calls
    (handed off or not) there is none, in the verdict or in what the model is told (an attacker's review)."""
    from evaluator.referee import phases
    from evaluator.referee import time_phase as phase
    from evaluator.referee.view import Round
    from evaluator.wire.records import BaselineSource, TimingStats

    session, built, checked = local_executor.checked(local_executor.Honest)
    timed = phase.time_phase(session, checked, built)
    assert timed.timing.handed_off

    def stats(handed_off):
        return TimingStats(median_ms=1.0, mean_ms=1.0, min_ms=1.0, max_ms=1.0, iqr_ms=0.01, reps=20, warmup=3,
                           handed_off=handed_off)

    session.referee.current_round = Round(baselines={"eager": stats(True), "compile": stats(False)}, failed={},
                                          source=BaselineSource(batch="b", round=0, measured_at=0.0, after_candidates=0),
                                          window_cost=None)
    verdict = phases.compose(session, {"checked": checked, "timed": timed}, None)
    assert set(verdict.speedup) == {"eager"}
    assert any(f.name == "shaky_timing" and "`compile` was timed a call at a time" in f.reason for f in verdict.flags)


def test_stored_baselines_timed_otherwise_than_this_batchs_calls_are_dropped():
    from types import SimpleNamespace

    from evaluator.referee import stored
    from evaluator.wire.records import TimingStats

    figure = TimingStats(median_ms=1.0, mean_ms=1.0, min_ms=1.0, max_ms=1.0, iqr_ms=0.01, reps=20, warmup=3)
    referee = SimpleNamespace(config=SimpleNamespace(cached_baselines={"eager": figure}, baselines=["eager"]),
                              cache_dropped=None, cached_said="", handed_off=True, rounds=[], twin=None)
    assert stored.stored_figures(referee) is None and "timed otherwise" in referee.cache_dropped


def test_calls_too_large_for_the_exchange_are_handed_off_on_the_device_on_a_gpu(monkeypatch):
    """Calls too large to copy through host memory are handed off on the device where the driver has stream memory
    operations (issue 33 at `kernelbench` and `wide`), in windows whose input sets and captures fit DEVICE_WINDOW_BYTES;
    never on the CPU, and not where a call is over half of that."""
    import dataclasses
    from types import SimpleNamespace

    from evaluator.referee import relay

    judge = local_executor.referee()
    host_plan = relay.plan_for(judge)
    assert host_plan is not None and not host_plan.on_device
    monkeypatch.setitem(relay.HANDOFF_BYTES, "cpu", 64)
    assert relay.plan_for(judge) is None  # the CPU: one call a window
    view = SimpleNamespace(**{name: getattr(judge, name) for name in ("output_dtype", "output_shape", "layout",
                                                                      "baseline_model", "exchange_bytes")}, device="cuda")
    assert host_plan.size <= judge.layout.size  # the stage holds a window's regions
    monkeypatch.setitem(relay.HANDOFF_BYTES, "cuda", 64)
    monkeypatch.setattr(handoff, "stream_ops", lambda: (None, None))
    plan = relay.plan_for(view)
    assert plan is not None and plan.on_device and all(slot.in_stage for slot in plan.inputs + plan.outputs)
    assert [s.model_copy(update={"in_stage": False}) for s in plan.inputs] == list(host_plan.inputs)
    call = plan.in_span + plan.out_span
    monkeypatch.setattr(relay, "DEVICE_WINDOW_BYTES", 5 * call + 1)
    assert relay.window_calls(plan, 32, "cuda") == 5 and relay.window_calls(plan, 3, "cuda") == 3
    assert relay.window_calls(dataclasses.replace(plan, on_device=False), 32, "cuda") == relay.HANDOFF_CALLS["cuda"]
    assert relay.baseline_calls(0.001, "cuda", plan) == 5
    monkeypatch.setattr(relay, "DEVICE_WINDOW_BYTES", 2 * call - 1)
    assert relay.plan_for(view) is None  # not two calls to a window
    monkeypatch.setattr(relay, "DEVICE_WINDOW_BYTES", 2 * call)
    monkeypatch.setattr(handoff, "stream_ops", lambda: None)
    assert relay.plan_for(view) is None  # no stream memory operations


@pytest.mark.slow  # an in-process judgement with the calibrator: about a second
def test_an_executor_without_windows_on_the_device_says_so_before_any_call_and_its_windows_hold_one(monkeypatch):
    """The executor looks for its stage on the device before its first call; where a window cannot lie there (no stream
    memory operations, a stage in host memory) it answers `room` at once, the calibrator stays whole, and the candidate's
    windows hold one call (against baselines timed on the device: not like for like, so never ranked)."""
    import dataclasses

    from evaluator.referee import relay
    from evaluator.referee import time_phase as phase
    from evaluator.wire.protocol import Handoff

    session, built, checked = local_executor.checked(local_executor.Honest)
    judge = session.referee
    judge.handoff_plan = dataclasses.replace(judge.handoff_plan, on_device=True)
    answered = []

    def without_a_gpu(request, exchange, stage, plan, input_sets, train, pace_ms=0.0, give_up=None):  # as device_window
        command = Handoff(id=0, train=train, calls=len(input_sets), token=1, inputs=list(plan.inputs),
                          outputs=list(plan.outputs), pace_ms=pace_ms, on_device=True)
        reply = request(command)
        answered.append(reply)
        return relay.clock.Clocked(0.0, reply, None, 0, None, calls=len(input_sets))

    monkeypatch.setattr(relay, "device_window", without_a_gpu)
    timed = phase.time_phase(session, checked, built)
    assert answered and answered[0].error_kind == "room" and "no window on the device" in answered[0].error
    assert timed.check.calls_per_window == 1 and not timed.timing.handed_off
    assert judge.calibrator.error is None and not judge.calibrator.broken


def test_no_executor_can_shrink_or_grow_the_exchange_or_a_host_stage():
    """The executor holds the memfds' descriptors; a candidate that truncated one would kill the referee with SIGBUS at
    its next touch of the mapping (an attacker's review): both are sealed against shrinking and growing."""
    import os

    from evaluator.wire.exchange import Exchange
    from evaluator.wire.stage import Stage

    exchange, stage = Exchange.create(1 << 16), Stage.create(1 << 16, "cpu")
    try:
        for fd in (exchange.fd, stage.fd):
            for size in (0, 1 << 20):
                with pytest.raises(PermissionError):
                    os.ftruncate(fd, size)
        handoff.write(exchange.map, handoff.COMMIT, 5)  # the referee's mapping still whole
        assert struct.unpack_from("<q", exchange.map, handoff.COMMIT)[0] == 5
        assert stage.bytes.numel() == 1 << 16
    finally:
        exchange.close()
        stage.close()


def test_a_baseline_drops_the_windows_something_held_beside_it_ran_or_died_in(monkeypatch):
    """The referee-timed baselines are watched as a candidate's windows are (evaluator.referee.beside): a window in
    which the builds or an executor started ahead ran or died although held is not part of the figure. Here every
    odd timed window is said to be broken: the figure holds the even ones alone."""
    judge = local_executor.referee()
    timed, state = [], {"broken": False}
    one = judge.timer.one

    def watched_one(fn, call, before=None, after=None, calls=1):
        result = one(fn, call, before, after, calls)
        if call.timed is not None:
            timed.append(call.timed)
            state["broken"] = call.timed % 2 == 1  # seen at the next look: as the next window begins, or at the end
        return result

    def broken():
        said, state["broken"] = state["broken"], False
        return "the builds: 1 task ended" if said else None

    monkeypatch.setattr(judge.timer, "one", watched_one)
    monkeypatch.setattr(judge, "held_elsewhere_broken", broken)
    stats = judge.time_baseline("eager")
    assert len(timed) >= 2 * judge.timer.min_reps and stats.reps == len([t for t in timed if t % 2 == 0])
