"""Executors started ahead, built ahead (evaluator.referee.ahead): the Construct sent once a candidate imported, its
warm-up call, what the init phase reads of it, and the memory it is planned with."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import local_executor
from evaluator.executor.hold import inputs_of_its_own
from evaluator.referee import ahead, phases
from evaluator.referee.check_phase import check_phase
from evaluator.referee.keys import Keys
from evaluator.referee.memory import KEPT_CAP, plan
from evaluator.referee.session import Imported, Judged
from evaluator.wire.protocol import Construct
from evaluator.wire.records import Status
from test_memory_plan import H100, H200, layout_of, sizes

KERNELBENCH = dict(x=[16384, 4096], out=[16384, 4096], state=4096 * 4096 * 4 + 4 * 4096 * 4)


class Sent:
    """An executor started ahead, as `ahead.prepare` sees it: what it was sent."""

    def __init__(self):
        self.keys, self.constructing, self.commands = None, None, []

    def send(self, command) -> int:
        self.commands.append(command)
        return len(self.commands)


def fake_referee(device: str = "cuda", fixed: dict | None = None, warm_up: bool = True, mode: str = "train"):
    judge = local_executor.referee()
    return SimpleNamespace(keys=Keys(b"\x01" * 32), fixed=fixed or {}, device=device, construct=judge.construct,
                           memory=SimpleNamespace(warm_up=warm_up), problem=SimpleNamespace(mode=mode))


def test_a_candidate_started_ahead_is_sent_its_construct_once_imported_with_a_seed_of_its_own_keys():
    referee, process = fake_referee(), Sent()
    request = SimpleNamespace(digest="d" * 64, compile_only=False)
    send = ahead.prepare(referee, process, request)
    assert process.keys is not None and not process.commands  # keys now, the Construct only once it imported
    send()
    [command] = process.commands
    assert isinstance(command, Construct) and process.constructing == 1
    assert command.seed == process.keys.seed("construct") and command.warm_up and command.train
    # another start of the same candidate: keys of its own (no seed of one tells the other's)
    other = Sent()
    ahead.prepare(referee, other, request)()
    assert other.keys.hex != process.keys.hex and other.commands[0].seed != command.seed


def test_no_warm_up_where_the_plan_has_no_room_and_no_construct_ahead_with_fixed_tensor_inputs():
    request = SimpleNamespace(digest="d" * 64, compile_only=False)
    process = Sent()
    ahead.prepare(fake_referee(warm_up=False, mode="eval"), process, request)()
    assert not process.commands[0].warm_up and not process.commands[0].train
    fixed = Sent()  # written into its exchange from the referee's device: never from the import's reader thread
    assert ahead.prepare(fake_referee(fixed={1: torch.ones(2)}), fixed, request) is None and fixed.keys is not None


def constructed_ahead(model_class, warm_up: bool = True):
    """(session, built, checked) with ModelNew's Construct sent before its turn, as to an executor started ahead."""
    judge = local_executor.referee()
    session = local_executor.session_for(model_class, judge)
    command = judge.construct([], session.keys.seed("construct"))
    session.link.constructing = session.link.send(command.model_copy(update={"warm_up": warm_up, "train": True}))
    built = phases.init_phase(session, Imported())
    return session, built, check_phase(session, built)


def test_the_init_phase_reads_the_construct_sent_ahead_and_an_honest_candidate_passes_its_checks():
    calls = []

    class Counted(local_executor.Honest):
        def forward(self, x):
            calls.append(x.detach().clone())
            return super().forward(x)

    cold, _, _ = constructed_ahead(Counted, warm_up=False)
    checked_calls, tracked = len(calls), int(cold.link.executor.model.state_dict()["bn.num_batches_tracked"])
    calls.clear()
    session, built, checked = constructed_ahead(Counted)
    assert checked.stop is None and all(checked.correctness.tiers.values())
    assert "Construct" in session.command_seconds and session.link.constructing not in session.link.sent
    # one call more, the first, on inputs of the executor's own (never the checks')
    assert len(calls) == checked_calls + 1 and not any(torch.equal(calls[0], later) for later in calls[1:])
    # the reference's buffers loaded after it: its batch statistics are gone
    assert int(session.link.executor.model.state_dict()["bn.num_batches_tracked"]) == tracked


def test_the_warm_up_call_makes_the_executors_own_check_after_a_call_too(monkeypatch):
    """The first checked call's own check (its output against the copy taken as forward returned) launches comparison
    kernels of its own: the warm-up call makes it, so that their first launch is not the first checked call's."""
    from evaluator.wire import tensors

    compared, same_values = [], tensors.same_values
    monkeypatch.setattr(tensors, "same_values", lambda a, b: compared.append(a.shape) or same_values(a, b))
    judge = local_executor.referee()
    session = local_executor.session_for(local_executor.Honest, judge)
    command = judge.construct([], session.keys.seed("construct"))
    session.link.send(command.model_copy(update={"warm_up": True, "train": True}))
    assert len(compared) == 1
    session.link.send(command.model_copy(update={"warm_up": False}))
    assert len(compared) == 1


def test_a_global_flag_changed_in_the_warm_up_call_alone_is_flagged_as_in_any_call():
    """Hostile: TF32 matmuls switched on in its first call only, which is the warm-up's: the warm-up's guard sees it
    (precision_flags, reject) and puts the flag back, so no checked or timed call runs with it."""
    class FirstCallTf32(local_executor.Honest):
        first = True

        def forward(self, x):
            if FirstCallTf32.first:
                FirstCallTf32.first = False
                torch.set_float32_matmul_precision("high")
            return super().forward(x)

    try:
        session, _, checked = constructed_ahead(FirstCallTf32)
        assert torch.get_float32_matmul_precision() == "highest"
        flags = [f for f in session.flags if f.name == "precision_flags"]
        assert flags and "warm-up" in flags[0].reason
    finally:
        torch.set_float32_matmul_precision("highest")


def test_a_warm_up_call_that_raises_is_no_verdict_the_checked_calls_judge_it():
    class FailsOnce(local_executor.Honest):
        failed = False

        def forward(self, x):
            if not FailsOnce.failed:
                FailsOnce.failed = True
                raise RuntimeError("first call")
            return super().forward(x)

    _, _, checked = constructed_ahead(FailsOnce)
    assert checked.stop is None and all(checked.correctness.tiers.values())

    class AlwaysFails(local_executor.Honest):
        def forward(self, x):
            raise RuntimeError("every call")

    with pytest.raises(Judged) as judged:
        constructed_ahead(AlwaysFails)
    assert judged.value.status == Status.runtime_error and "every call" in judged.value.error


def test_the_warm_ups_inputs_are_drawn_afresh_and_none_where_an_unwritten_integer_tensor_could_index():
    given = [torch.zeros(4, 3), 7, torch.full((2,), float("nan"))]
    drawn = inputs_of_its_own(given)
    assert drawn[1] == 7 and drawn[0].shape == (4, 3) and drawn[0].data_ptr() != given[0].data_ptr()
    assert torch.isfinite(drawn[2]).all()
    assert inputs_of_its_own([torch.zeros(3), torch.zeros(3, dtype=torch.long)]) is None


@pytest.mark.parametrize("device_bytes", [H100, H200])
def test_the_warm_ups_room_comes_out_of_the_kept_copies_cap_never_out_of_the_replay_beside(device_bytes):
    """At `kernelbench` the executors started ahead warm up; what is left past the kept copies' cap (a candidate's
    replay beside the next one's checks) is what it was without them."""
    layout = layout_of(KERNELBENCH["x"], KERNELBENCH["out"], [4096 * 4, 4096 * 4])
    given = sizes(layout, KERNELBENCH["out"], state=KERNELBENCH["state"])
    planned = plan("cuda", int(device_bytes), ahead=4, beside=1, **given)
    assert planned.warm_up and planned.ahead == 4
    warm = 5 * (given["input_bytes"] + given["output_bytes"] + given["state_bytes"])
    assert planned.kept_bytes == KEPT_CAP["cuda"] - warm
    without = planned.beside_bytes + planned.kept_bytes + warm  # the spare room with no warm-up
    assert planned.beside_bytes == max(0, without - KEPT_CAP["cuda"])


def test_no_warm_up_where_no_executor_is_started_ahead():
    relu = [4096, 393216]  # KernelBench's 19_ReLU: judged in host memory on an H100, nothing ahead
    assert not plan("cuda", int(H100), ahead=4, **sizes(layout_of(relu, relu), relu)).warm_up
    layout = layout_of(KERNELBENCH["x"], KERNELBENCH["out"])
    assert not plan("cuda", int(H200), ahead=0, **sizes(layout, KERNELBENCH["out"])).warm_up
    on_a_cpu = sizes(layout_of([64, 32], [64, 16]), [64, 16])
    assert plan("cpu", 0, ahead=2, **on_a_cpu).warm_up and not plan("cpu", 0, ahead=0, **on_a_cpu).warm_up
