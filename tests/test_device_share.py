"""Lanes taking turns on one GPU (evaluator.referee.device_share): the exclusive turn shuts every other lane out, shared
turns overlap, and a lane waiting for the exclusive turn is served before a lane that lets go and asks again."""

from __future__ import annotations

import threading
import time

from evaluator.parent.lanes import Scheduler
from evaluator.referee.device_share import EXCLUSIVE, NONE, SHARED, DeviceShare, open_for
from evaluator.wire.protocol import RefereeConfig


def _taken(share: DeviceShare, state: str) -> threading.Event:
    """`share` takes `state` in a thread of its own; the event is set once it holds it."""
    done = threading.Event()
    threading.Thread(target=lambda: (share.take(state), done.set()), daemon=True).start()
    return done


def test_the_exclusive_turn_waits_for_every_shared_one_and_shuts_them_out(tmp_path):
    a, b, c = (DeviceShare(tmp_path, "GPU-x") for _ in range(3))
    a.take(SHARED)
    assert _taken(b, SHARED).wait(2)  # shared turns overlap
    wants = _taken(c, EXCLUSIVE)
    assert not wants.wait(0.2)
    a.take(NONE)
    assert not wants.wait(0.2)  # b still holds its shared turn
    b.take(NONE)
    assert wants.wait(2) and c.state == EXCLUSIVE
    again = _taken(a, SHARED)
    assert not again.wait(0.2)  # nothing beside an exclusive turn
    c.take(NONE)
    assert again.wait(2)
    for share in (a, b, c):
        share.close()


def test_a_lane_waiting_for_its_windows_goes_before_a_lane_that_let_go_and_asks_again(tmp_path):
    """flock alone wakes every waiter and the first to run wins, often the one that just let go: the turnstile keeps
    two lanes alternating (one lane's windows never starve behind the other's checks)."""
    a, b = DeviceShare(tmp_path, "GPU-x"), DeviceShare(tmp_path, "GPU-x")
    a.take(SHARED)
    wants = _taken(b, EXCLUSIVE)
    time.sleep(0.2)  # b waits at the turns, holding the turnstile
    again = _taken(a, EXCLUSIVE)  # a lets go of its shared turn and asks for the exclusive one: b goes first
    assert wants.wait(2) and b.state == EXCLUSIVE and not again.wait(0.2)
    b.take(NONE)
    assert again.wait(2) and a.state == EXCLUSIVE
    a.close()
    b.close()


def test_a_gpu_named_twice_gives_two_lanes_that_take_turns_and_plan_on_half_its_memory(monkeypatch, tmp_path):
    from evaluator.parent.sandbox import EvalOptions, Evaluator

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    evaluator = Evaluator(EvalOptions(device="cuda", gpus="0,0,1"))
    scheduler = Scheduler(evaluator, build=lambda job: None, builds=lambda job: False)
    assert scheduler.lanes() == [("3", 0), ("3", 1), ("5", 2)]
    workers = scheduler.local_workers()
    assert [w.referee.device_lanes for w in workers] == [2, 2, 1]
    config = RefereeConfig.model_validate(dict(
        problem="p", size="small", device="cuda", baselines=["eager"], compile_timeout_s=1, run_timeout_s=1,
        output_cap_bytes=1, compile_memory_limit_gb=None, cache_dir=str(tmp_path)))
    assert config.device_lanes == 1 and open_for(config, "cuda") is None  # a GPU of its own: no turns
    assert open_for(config.model_copy(update={"device_lanes": 2}), "cpu") is None


class _Process:
    """What hold_still and take_turn touch of an executor started ahead (evaluator.referee.process.ExecutorProcess)."""

    def __init__(self, order=None):
        self.proc, self.paused, self.events, self.order = None, False, [], order

    def wait_pinned(self):
        self.order.append("pinned")


def test_a_referee_steps_aside_only_once_its_closings_are_over_and_takes_its_turn_before_resuming(tmp_path, monkeypatch):
    from evaluator.referee import beside, device_share, process

    order = []
    closing = threading.Event()
    referee = type("R", (), {})()
    referee.share = DeviceShare(tmp_path, "GPU-x")
    referee.closing, referee.waiting = [closing], {("a", "1"): _Process(order)}
    referee._sync = lambda: order.append("synchronized")
    monkeypatch.setattr(beside, "pause_all", lambda processes: order.append(("paused", len(processes))))
    monkeypatch.setattr(process, "resume_all", lambda processes: order.append(("resumed", len(processes))))
    device_share.take_turn(referee)
    assert referee.share.state == SHARED and order == [("resumed", 1)]
    order.clear()
    threading.Timer(0.2, lambda: (order.append("closed"), closing.set())).start()
    device_share.step_aside(referee)  # waits for the judged executor's teardown and the page-locking before it lets go
    assert order == ["closed", ("paused", 1), "pinned", "synchronized"] and referee.share.state == NONE
    other = DeviceShare(tmp_path, "GPU-x")
    assert other.take(EXCLUSIVE) < 1.0  # nothing of the referee's holds a turn now
    other.close()
    referee.share.close()


def _referee(tmp_path):
    referee = type("R", (), {})()
    referee.share = DeviceShare(tmp_path, "GPU-x")
    referee.closing, referee.waiting, referee.opened_busy = [], {}, False
    referee._sync = lambda: None
    referee.device_idle = lambda limit_s: 0.0
    referee.close_waiting = lambda: False
    return referee


def test_a_lane_that_keeps_judging_lets_a_waiting_lane_time_before_its_next_candidate(tmp_path):
    from evaluator.referee import device_share

    referee = _referee(tmp_path)
    device_share.take_turn(referee)  # its first candidate
    other = DeviceShare(tmp_path, "GPU-x")
    wants = _taken(other, EXCLUSIVE)
    time.sleep(0.2)
    assert not wants.is_set()
    threading.Timer(0.3, lambda: other.take(NONE)).start()
    device_share.take_turn(referee)  # its next candidate: the waiting lane's windows first
    assert wants.is_set() and referee.share.state == SHARED
    other.close()
    referee.share.close()


class _Link:
    def __init__(self, holds: bool):
        self.holds, self.killed, self.events = holds, False, []

    def hold(self):
        if not self.holds:
            raise RuntimeError("it kept forking")
        self.events.append("held")

    def release(self):
        self.events.append("released")

    def kill(self, wait_s=5.0):
        self.killed = True


def test_a_candidate_that_cannot_be_held_or_leaves_work_running_as_its_lane_lets_go_is_killed_and_judged(tmp_path):
    import pytest

    from evaluator.referee import device_share
    from evaluator.referee.session import Judged
    from evaluator.wire.records import Status

    referee = _referee(tmp_path)
    waited = []
    honest = _Link(holds=True)
    with device_share.timed_turn(referee, honest, waited.append):
        assert referee.share.state == EXCLUSIVE and honest.events == ["held", "released"]
    assert referee.share.state == SHARED and not honest.killed and len(waited) == 2
    with pytest.raises(Judged) as judged:  # held while its lane waits for the exclusive turn: it cannot be
        with device_share.timed_turn(referee, _Link(holds=False)):
            pass
    assert judged.value.status == Status.runtime_error and referee.share.state == SHARED
    busy = _Link(holds=True)
    with pytest.raises(Judged, match="kept running"):  # its own work still on the device after its windows
        with device_share.timed_turn(referee, busy):
            referee.device_idle = lambda limit_s: None
    assert busy.killed and referee.share.state == SHARED
    referee.share.close()
