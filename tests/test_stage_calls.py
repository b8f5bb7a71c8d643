"""Checked and profiled calls through the stage (evaluator.wire.stage): the referee reads only what it asked for, where
it asked for it, and an exchange holds the state an executor writes."""

from __future__ import annotations

import pytest
import torch

import local_executor
from evaluator.executor.serve import Executor
from evaluator.wire.exchange import Exchange, capacity_for
from evaluator.wire.protocol import ExecutorRequest, Reply, TensorSlot
from evaluator.wire.stage import Stage


class NamesTheWholeStage(local_executor.Honest):
    """Hostile: correct, but its executor's replies name every byte of the stage under made-up names, so that the
    referee would copy gigabytes its memory plan does not count with each checked call."""

    def forward(self, x):
        import gc

        for found in gc.get_objects():
            if type(found) is Executor and "ship" not in vars(found):
                honest = found.ship

                def ship(reply, *args, honest=honest, stage=found.stage, **kwargs):
                    shipped = honest(reply, *args, **kwargs)
                    shipped.tensors += [TensorSlot(name=f"extra.{k}", dtype="uint8", shape=[stage.size // 4],
                                                   offset=0, nbytes=stage.size // 4, in_stage=True) for k in range(4)]
                    return shipped
                found.ship = ship
        return super().forward(x)


def test_a_reply_naming_stage_bytes_it_was_not_asked_for_is_never_read(monkeypatch):
    judge = local_executor.referee()
    read = []
    honest_read = Stage.read
    monkeypatch.setattr(Stage, "read", lambda self, slot, device: (read.append(slot.name), honest_read(self, slot, device))[1])
    _, _, checked = local_executor.checked(NamesTheWholeStage, judge)
    assert checked.stop is not None and checked.stop.status.value == "incorrect"
    assert "where the referee did not ask" in checked.stop.error, checked.stop.error
    assert read and not any(name.startswith("extra.") for name in read)  # the output and inputs alone were copied
    honest = local_executor.checked(local_executor.Honest, judge)[2]
    assert honest.stop is None and any(honest.correctness.tiers.values())


def test_an_exchange_of_the_states_capacity_holds_what_an_executor_writes_of_it():
    """The executor writes each state tensor after the last, as capacity_for counts them: empty ones included."""
    state = {"a": torch.empty(0), "b": torch.empty(0, 3), "c": torch.randn(300)}
    exchange = Exchange.create(capacity_for(*(t.numel() * t.element_size() for t in state.values())))
    executor = Executor(ExecutorRequest(candidate_path="x.py", device="cpu", watch=[]), exchange, None)
    executor.model = torch.nn.Module()
    for name, value in state.items():
        executor.model.register_buffer(name, value)
    executor.state_names = list(state)
    reply = executor.ship(Reply(id=0), None, [], state=True, place=0)
    assert not reply.problems and [s.name for s in reply.tensors] == [f"state.{n}" for n in state]
    assert torch.equal(exchange.read(reply.tensors[-1]), state["c"])
    exchange.close()


def test_a_checked_calls_inputs_are_the_candidates_own_copies_of_the_stage():
    from evaluator.executor.hold import StreamHold, inputs_behind_hold

    given = [torch.randn(4), 3, torch.arange(3)]
    inputs = inputs_behind_hold(given, StreamHold(66.0, "cpu"), "cpu")
    assert torch.equal(inputs[0], given[0]) and inputs[1] == 3 and torch.equal(inputs[2], given[2])
    inputs[0].add_(1)  # what the candidate does to its inputs never reaches the stage
    assert not torch.equal(inputs[0], given[0]) and inputs[0].data_ptr() != given[0].data_ptr()


def test_a_stage_slot_is_checked_as_an_exchange_slot_is_and_read_as_a_copy():
    import pytest

    from evaluator.wire.exchange import ExchangeError

    stage = Stage.create(1 << 16, "cpu")
    with pytest.raises(ExchangeError, match="bad shape"):  # empty, so its dimensions multiply to nothing
        stage.read(TensorSlot(name="output", dtype="float32", shape=[0, 2 ** 63], offset=0, nbytes=0, in_stage=True), "cpu")
    stage.bytes[:4] = torch.tensor([0, 1, 2, 255], dtype=torch.uint8)  # bool bytes other than 0 and 1, as a writer may leave
    flags = stage.read(TensorSlot(name="output", dtype="bool", shape=[4], offset=0, nbytes=4, in_stage=True), "cpu")
    assert flags.tolist() == [False, True, True, True] and flags.view(torch.uint8).tolist() == [0, 1, 1, 1]
    stage.bytes[0] = 7  # what the other side writes after the read never reaches the copy
    assert flags.tolist() == [False, True, True, True]
    stage.close()



def test_the_stream_hold_uses_only_what_was_looked_up_before_the_candidate_and_says_when_it_fails(monkeypatch):
    from types import SimpleNamespace

    from evaluator.executor import hold

    monkeypatch.setattr(hold, "_LAUNCH", None)
    with pytest.raises(RuntimeError, match="not prepared before the candidate"):
        hold.StreamHold(66.0, "cuda")
    assert hold.StreamHold(66.0, "cpu").micros == 0 and hold.StreamHold(0.0, "cuda").micros == 0
    calls = []
    monkeypatch.setattr(hold, "_LAUNCH", lambda stream, fn, arg: calls.append((stream, fn, arg)) or 0)
    monkeypatch.setattr(hold, "_USLEEP", 1234)
    monkeypatch.setattr(hold.torch.cuda, "current_stream", lambda: SimpleNamespace(cuda_stream=77))
    hold.StreamHold(66.0, "cuda").queue()
    assert calls == [(77, 1234, 66000)]  # the current stream, usleep, the microseconds
    monkeypatch.setattr(hold, "_LAUNCH", lambda stream, fn, arg: 1)
    with pytest.raises(RuntimeError, match="CUresult 1"):
        hold.StreamHold(66.0, "cuda").queue()


def test_a_candidate_that_replaces_the_stream_holds_method_is_seen_and_put_back():
    from evaluator.executor import hold
    from evaluator.executor.guard import StateGuard

    guard = StateGuard()
    queue = hold.StreamHold.queue
    hold.StreamHold.queue = lambda self: None
    try:
        assert "evaluator.executor.hold.StreamHold.queue" in guard.changes()
    finally:
        hold.StreamHold.queue = queue
    assert hold.StreamHold.queue is queue


@pytest.mark.gpu
def test_the_stream_hold_keeps_the_stream_waiting_and_a_side_stream_that_does_not_wait_reads_nan():
    from evaluator.executor.hold import StreamHold, inputs_behind_hold, prepare

    assert prepare() is None  # as an executor does before its candidate's import
    hold = StreamHold(50.0, "cuda")
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    hold.queue()
    end.record()
    end.synchronize()
    assert begin.elapsed_time(end) >= 49.0
    given = [torch.randn(1 << 20, device="cuda"), torch.arange(4, device="cuda")]
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # the kernel loaded ahead: CUDA's lazy loading of a module waits for the device
        given[0] * 1
    torch.cuda.synchronize()
    inputs = inputs_behind_hold(given, hold, "cuda")
    with torch.cuda.stream(side):  # does not wait for the current stream
        seen = inputs[0] * 1
    side.synchronize()
    assert not torch.cuda.current_stream().query()  # read while the hold still held the current stream
    assert seen.isnan().all() and torch.equal(inputs[1], given[1])
    torch.cuda.synchronize()
    assert torch.equal(inputs[0], given[0])  # the real values, once the hold has passed
