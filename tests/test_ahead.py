"""Executors started ahead, built ahead (evaluator.referee.ahead): the Construct sent once a candidate imported, with
seeds of the keys drawn at its start, and what the init phase reads of it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import local_executor
from evaluator.referee import ahead, phases
from evaluator.referee.check_phase import check_phase
from evaluator.referee.keys import Keys
from evaluator.referee.process import Ended
from evaluator.referee.session import Imported, Judged
from evaluator.wire.protocol import Construct
from evaluator.wire.records import Status


class Sent:
    """An executor started ahead, as `ahead.prepare` sees it: what it was sent."""

    def __init__(self, closed: bool = False):
        self.keys, self.constructing, self.commands, self.closed = None, None, [], closed

    def send(self, command) -> int:
        if self.closed:
            raise Ended("closed")
        self.commands.append(command)
        return len(self.commands)


def fake_referee(fixed: dict | None = None):
    judge = local_executor.referee()
    return SimpleNamespace(keys=Keys(b"\x01" * 32), fixed=fixed or {}, construct=judge.construct)


REQUEST = SimpleNamespace(digest="d" * 64, compile_only=False)


def test_a_candidate_started_ahead_is_sent_its_construct_once_imported_with_a_seed_of_its_own_keys():
    referee, process = fake_referee(), Sent()
    send = ahead.prepare(referee, process, REQUEST)
    assert process.keys is not None and not process.commands  # keys now, the Construct only once it imported
    send()
    [command] = process.commands
    assert isinstance(command, Construct) and process.constructing == 1
    assert command.seed == process.keys.seed("construct")
    # another start of the same candidate: keys of its own (no seed of one tells the other's)
    other = Sent()
    ahead.prepare(referee, other, REQUEST)()
    assert other.keys.hex != process.keys.hex and other.commands[0].seed != command.seed


def test_none_is_sent_ahead_with_fixed_tensor_inputs_nor_to_a_build_nor_to_one_closed_meanwhile():
    fixed = Sent()  # written into its exchange from the referee's device: never from the import's reader thread
    assert ahead.prepare(fake_referee(fixed={1: torch.ones(2)}), fixed, REQUEST) is None and fixed.keys is not None
    assert ahead.prepare(fake_referee(), Sent(), SimpleNamespace(digest="d", compile_only=True)) is None
    closed = Sent(closed=True)
    ahead.prepare(fake_referee(), closed, REQUEST)()  # no exception on the reader thread: its turn finds it ended
    assert closed.constructing is None


def constructed_ahead(model_class):
    """(session, built, checked) with ModelNew's Construct sent before its turn, as to an executor started ahead."""
    judge = local_executor.referee()
    session = local_executor.session_for(model_class, judge)
    session.link.constructing = session.link.send(judge.construct([], session.keys.seed("construct")))
    built = phases.init_phase(session, Imported())
    return session, built, check_phase(session, built)


def test_the_init_phase_reads_the_construct_sent_ahead_and_an_honest_candidate_passes_its_checks():
    session, _, checked = constructed_ahead(local_executor.Honest)
    assert checked.stop is None and all(checked.correctness.tiers.values())
    assert "Construct" in session.command_seconds and not session.link.sent  # its reply read, nothing sent twice


def test_a_candidate_that_keeps_a_transpose_of_its_weights_from_its_first_call_is_correct_when_built_ahead():
    """Its first call is a checked one, after the reference's weights are loaded: what it derives from its weights
    then is derived from those (a call before them, made ahead, would keep a transpose of the wrong weights)."""
    class KeepsTranspose(local_executor.Honest):
        kept = None

        def forward(self, x):
            if self.kept is None:
                self.kept = self.gemm.weight.t().contiguous()
            return self.bn((x @ self.kept + self.gemm.bias) * self.scale)

    _, _, checked = constructed_ahead(KeepsTranspose)
    assert checked.stop is None and all(checked.correctness.tiers.values())


def test_a_global_flag_changed_in_init_when_built_ahead_is_flagged_and_put_back():
    """Hostile: TF32 matmuls switched on in `__init__`, which now runs before the candidate's turn: the construct's
    guard sees it in the reply the init phase reads (precision_flags, reject), and the flag is back before any call."""
    class Tf32InInit(local_executor.Honest):
        def __init__(self, *args):
            super().__init__(*args)
            torch.set_float32_matmul_precision("high")

    try:
        session, _, _ = constructed_ahead(Tf32InInit)
        assert torch.get_float32_matmul_precision() == "highest"
        flags = [f for f in session.flags if f.name == "precision_flags"]
        assert flags and "constructing ModelNew" in flags[0].reason
    finally:
        torch.set_float32_matmul_precision("highest")


def test_a_construct_sent_ahead_that_raised_is_judged_in_the_init_phase():
    class Raises(local_executor.Honest):
        def __init__(self, *args):
            raise RuntimeError("no model today")

    with pytest.raises(Judged) as judged:
        constructed_ahead(Raises)
    assert judged.value.status == Status.runtime_error and "no model today" in judged.value.error
