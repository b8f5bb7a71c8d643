"""The referee's exchanges kept from one executor for a later one (evaluator.wire.exchange.ExchangePool): handed on only
from an executor gone whole, never to two live ones, and nothing an earlier executor left in one passes a later
candidate's checks."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

import pytest
import torch

import local_executor
from evaluator.wire import exchange as exchanges
from evaluator.wire.exchange import ExchangePool

REFERENCE = Path(__file__).resolve().parents[1] / "reference" / "gemm_scale_bn"
SIZE = 1 << 20


@pytest.fixture(autouse=True)
def kept_from(monkeypatch):
    """Exchanges of SIZE kept here (KEEP_BYTES: 2 GiB and more, where a fresh one costs seconds)."""
    monkeypatch.setattr(exchanges, "KEEP_BYTES", SIZE)


def test_an_exchange_is_handed_on_only_from_an_executor_gone_whole_and_zeroed():
    pool = ExchangePool(keep=2)
    first = pool.take(SIZE)
    first.write([("output", torch.ones(16))])
    pool.expect()
    pool.release(first, reusable=True)
    assert pool.take(SIZE) is first  # its pages kept for the next executor
    assert not first.bytes.any()  # nothing of one candidate's reaches the next
    pool.expect()
    pool.release(first, reusable=False)  # its executor not known to have ended whole: closed, never handed on
    assert first.map.closed
    second = pool.take(SIZE)
    assert second is not first and not second.map.closed
    assert pool.take(SIZE) is not second  # taken is taken: a second executor gets another
    other = pool.take(SIZE * 2)
    pool.expect()
    pool.release(other, reusable=True)
    assert pool.take(SIZE) is not other  # only one of the size asked for
    small = pool.take(SIZE // 2)
    pool.expect()
    pool.release(small, reusable=True)
    assert small.map.closed  # below KEEP_BYTES nothing is handed on
    pool.close()


def test_a_kept_exchange_is_handed_on_only_while_the_device_is_idle_and_its_descriptor_still_names_it():
    """On a GPU a dead executor's kernel still in flight could write the pages it locked: a kept exchange goes to a
    later executor only while the device is idle (`ready`). And one whose descriptor number was closed and reused by
    something else (a clean-up run twice) is dropped without closing what the number names now."""
    import os

    busy = [True]
    pool = ExchangePool(ready=lambda: not busy[0])
    first = pool.take(SIZE)
    pool.expect()
    pool.release(first, reusable=True)
    assert pool.take(SIZE) is not first and first.map.closed  # the device busy: fresh, the kept one closed
    busy[0] = False
    second = pool.take(SIZE)
    pool.expect()
    pool.release(second, reusable=True)
    os.close(second.fd)
    other = os.open(os.devnull, os.O_RDONLY)  # the lowest free number: the one just closed
    try:
        assert other == second.fd
        assert pool.take(SIZE) is not second
        os.fstat(other)  # still open: not the pool's to close
    finally:
        os.close(other)
    pool.close()


def test_an_exchange_released_twice_is_kept_once():
    pool = ExchangePool()
    first = pool.take(SIZE)
    for _ in range(2):
        pool.expect()
        pool.release(first, reusable=True)
    assert pool.take(SIZE) is first
    assert pool.take(SIZE) is not first and not first.map.closed
    pool.close()


def test_the_pool_keeps_few_and_closes_what_comes_back_after_it_closed():
    pool = ExchangePool(keep=2)
    taken = [pool.take(SIZE) for _ in range(3)]
    for one in taken:
        pool.expect()
        pool.release(one, reusable=True)
    assert [one.map.closed for one in taken] == [False, False, True]  # host memory: two kept at most
    late = pool.take(SIZE)
    assert late in taken
    pool.close()
    assert all(one.map.closed for one in taken if one is not late)
    pool.expect()
    pool.release(late, reusable=True)
    assert late.map.closed


def test_a_large_exchange_waits_for_the_one_being_closed(monkeypatch):
    """From KEEP_BYTES up, a start waits for the exchange of an executor being closed (cheaper than fresh pages
    locked for the first time); with none being closed, or below the size, it takes a fresh one at once; a release
    that never comes is waited for once."""
    pool = ExchangePool()
    closing = pool.take(SIZE)
    started = time.monotonic()
    assert pool.take(SIZE) is not closing and time.monotonic() - started < 0.5  # nothing being closed: fresh at once
    pool.expect()
    releaser = threading.Timer(0.3, pool.release, args=(closing, True))
    releaser.start()
    assert pool.take(SIZE) is closing
    assert time.monotonic() - started >= 0.3
    small = pool.take(SIZE // 2)
    pool.expect()
    started = time.monotonic()
    assert pool.take(SIZE // 2) is not small and time.monotonic() - started < 0.2  # below the size: no wait
    monkeypatch.setattr(exchanges, "REUSE_WAIT_S", 0.3)
    started = time.monotonic()
    pool.take(SIZE)  # `small`'s executor never says it ended
    assert time.monotonic() - started >= 0.3
    started = time.monotonic()
    pool.take(SIZE)
    assert time.monotonic() - started < 0.2  # waited for once
    pool.close()


class StaleOutput(local_executor.Honest):
    """Hostile: keeps its buffers right and has its executor name the output's place in the stage without writing it, so
    the referee reads whatever lies there: the output of the checked call before, or what an earlier executor left in
    the exchange or the stage."""

    def forward(self, x):
        import gc

        from evaluator.wire.protocol import TensorSlot
        from evaluator.wire.stage import Stage

        for found in gc.get_objects():
            if type(found) is Stage and "write" not in vars(found):
                honest = found.write

                def unwritten(name, tensor, offset, honest=honest):
                    if name != "output":
                        return honest(name, tensor, offset)
                    return TensorSlot(name=name, dtype=exchanges.dtype_name(tensor.dtype), shape=list(tensor.shape),
                                      offset=offset, nbytes=exchanges.nbytes_of(tensor), in_stage=True)
                found.write = unwritten
        honest_output = super().forward(x)  # its buffers right: only the output is left unwritten
        return torch.empty_like(honest_output)


def test_what_an_earlier_executor_left_passes_no_check():
    judge = local_executor.referee()
    session, _, honest = local_executor.checked(local_executor.Honest, judge)
    assert honest.stop is None and any(honest.correctness.tiers.values())  # its outputs, for its own inputs, left behind
    handed_on = session.link.exchange
    _, _, stale = local_executor.checked(StaleOutput, judge, exchange=handed_on)
    assert stale.stop is not None and stale.stop.status.value == "incorrect"
    assert "output" in stale.stop.error, stale.stop.error


def _executor(tmp_path: Path, pool: ExchangePool, group):
    from evaluator.referee.process import ExecutorProcess

    source = b"import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n"
    # not compile-only: it waits for commands after its import, as a judged executor does (alive when it is read)
    return ExecutorProcess(source=source, digest=hashlib.sha256(source).hexdigest(), device="cpu", compile_only=False,
                           watch=[], cache_dir=tmp_path / "cache", problem_location=REFERENCE, protect=[],
                           exchange_bytes=SIZE, output_cap=1 << 16, memory_limit_gb=None, group=group,
                           exchanges=pool)


@pytest.mark.slow
def test_a_contained_executors_exchange_goes_to_the_next_once_its_cgroup_is_gone(tmp_path):
    from evaluator.wire import cgroups

    root = cgroups.root_group("test-pool")
    if root is None:
        pytest.skip(f"no cgroup here: {cgroups.usable()[1]}")
    pool = ExchangePool()
    try:
        first = _executor(tmp_path, pool, cgroups.Group.create(root, "x"))
        first.start()
        assert first.reply(0, time.monotonic() + 120).error is None
        used = first._exchange
        first.close(wait_s=10)
        second = _executor(tmp_path, pool, cgroups.Group.create(root, "x"))
        second.start()
        assert second._exchange is used and not used.map.closed
        third = _executor(tmp_path, pool, None)  # held with SIGSTOP: nothing proves every process of it ended
        third.start()
        assert third._exchange is not used
        unproven = third._exchange
        for process in (second, third):
            process.reply(0, time.monotonic() + 120)
            process.close(wait_s=10)
        assert unproven.map.closed and pool.take(SIZE) is used
    finally:
        pool.close()
        root.remove(wait_s=5.0)


def test_an_executor_said_to_close_is_waited_for_once(tmp_path):
    """The referee says an executor will close as soon as its verdict is made (its exit is waited for on another
    thread, after the next executor's start may already wait for the exchange): counted once, however often said."""
    from types import SimpleNamespace

    pool = ExchangePool()
    process = _executor(tmp_path, pool, None)
    process._exchange = pool.take(SIZE)  # as its start takes it
    process.proc = SimpleNamespace(pid=0)  # started
    process.will_close()
    process.will_close()
    assert pool.closing == 1
    pool.release(process._exchange, reusable=False)
    assert pool.closing == 0
    pool.close()


def test_an_executor_that_failed_to_start_hands_nothing_on_and_nothing_is_waited_for(tmp_path, monkeypatch):
    from evaluator.referee import forking

    def refused(*_, **__):
        raise OSError("no process for it")

    monkeypatch.setattr(forking, "spawn", refused)
    pool = ExchangePool()
    kept = pool.take(SIZE)
    pool.expect()
    pool.release(kept, reusable=True)
    process = _executor(tmp_path, pool, None)
    with pytest.raises(OSError):
        process.start()
    assert kept.map.closed and process._exchange is None  # taken, then closed: nothing proves what holds it
    process.close()
    assert pool.closing == 0
    pool.close()


@pytest.mark.slow
def test_an_executor_closed_twice_is_cleaned_up_once(tmp_path):
    """A check's failure closes its executor and its reply closes it again: the second clean-up must not close
    descriptor numbers that by then name something else (a later executor's exchange)."""
    import os

    pool = ExchangePool()
    process = _executor(tmp_path, pool, None)
    process.start()
    process.reply(0, time.monotonic() + 120)
    channel = process._channel_fd
    process.close(wait_s=10)
    other = os.open(os.devnull, os.O_RDONLY)
    try:
        process.close(wait_s=10)
        os.fstat(other)  # whatever number it got, the second close left it open
        assert channel is not None and process._channel_fd is None
    finally:
        os.close(other)
        pool.close()


@pytest.mark.slow
def test_an_executor_not_wholly_contained_hands_its_exchange_on_to_none(tmp_path, monkeypatch):
    """Uncontained (what would have its verdict flagged `unsandboxed`), a process of it could leave its cgroup or hand
    the descriptor on: its exchange is closed, not kept."""
    from evaluator.wire import cgroups

    root = cgroups.root_group("test-pool")
    if root is None:
        pytest.skip(f"no cgroup here: {cgroups.usable()[1]}")
    monkeypatch.setenv("HARNESS_CONTAINMENT_OFF", "all")
    pool = ExchangePool()
    try:
        process = _executor(tmp_path, pool, cgroups.Group.create(root, "x"))
        process.start()
        assert process.reply(0, time.monotonic() + 120).error is None
        assert process.in_group  # read as it answered its import
        used = process._exchange
        process.close(wait_s=10)
        assert used.map.closed and pool.take(SIZE) is not used
    finally:
        pool.close()
        root.remove(wait_s=5.0)
