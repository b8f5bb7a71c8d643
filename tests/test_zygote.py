"""Executors forked from a referee's zygote (evaluator.executor.zygote, evaluator.referee.forking): started and
reported as a fresh interpreter's would be, their exit told; a zygote that dies takes its children with it and the
next executor is started as before. (Containment of a forked executor: test_containment's escapes, which run forked.)"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evaluator.referee import forking
from evaluator.referee.process import ExecutorProcess

CANDIDATE = b"import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n"
REFERENCE = Path(__file__).resolve().parents[1] / "reference" / "gemm_scale_bn"


def executor(tmp_path: Path, zygote: forking.Zygote | None, source: bytes = CANDIDATE) -> ExecutorProcess:
    return ExecutorProcess(source=source, digest=hashlib.sha256(source).hexdigest(), device="cpu", compile_only=True,
                           watch=[], cache_dir=tmp_path / "cache", problem_location=REFERENCE, protect=[],
                           exchange_bytes=None, output_cap=1 << 16, memory_limit_gb=None, zygote=zygote)


@pytest.mark.slow
def test_forked_executors_import_and_exit_as_started_ones_do_and_a_dead_zygote_falls_back(tmp_path):
    zygote = forking.for_executors("cpu", tmp_path / "cache")
    assert zygote is not None
    processes = []
    try:
        first = executor(tmp_path, zygote)
        processes.append(first)
        first.start()
        assert isinstance(first.proc, forking.Forked)
        reply = first.reply(0, time.monotonic() + 120)
        assert reply.error is None, reply.error
        contained = next(m.containment for m in first.messages if m.kind == "containment")
        assert {m.name for m in contained.mechanisms if m.state == "verified"} >= {"seccomp", "pid_namespace"}
        assert first.wait_exit(30) == 0  # a build exits by itself once it answered, and its zygote says so

        crashing = executor(tmp_path, zygote, CANDIDATE + b"import ctypes\nctypes.string_at(0)\n")
        processes.append(crashing)
        crashing.start()
        assert crashing.wait_exit(60) == -signal.SIGSEGV  # the launcher exits as its worker did

        second = executor(tmp_path, zygote, CANDIDATE + b"import time\ntime.sleep(60)\n")
        processes.append(second)
        second.start()
        zygote.proc.kill()
        assert second.wait_exit(30) == -signal.SIGKILL  # its children die with it
        third = executor(tmp_path, zygote)
        processes.append(third)
        third.start()
        assert isinstance(third.proc, subprocess.Popen)  # started as before
        assert third.reply(0, time.monotonic() + 120).error is None
    finally:
        for process in processes:
            process.close(wait_s=5)
        zygote.close()


@pytest.mark.slow
def test_a_closed_zygote_lets_its_running_children_finish_then_exits_at_once(tmp_path):
    """close() waits for the executors still running (a judged one's exit may still be awaited for its verdict), then
    the zygote exits without tearing its interpreter down (that took 1.5 s of every batch's close)."""
    zygote = forking.for_executors("cpu", tmp_path / "cache")
    assert zygote is not None and zygote.wait_ready()
    slow = executor(tmp_path, zygote, CANDIDATE + b"import time\ntime.sleep(2)\n")
    try:
        slow.start()
        assert isinstance(slow.proc, forking.Forked)
        started = time.monotonic()
        zygote.close()
        assert slow.wait_exit(0) == 0  # finished its import, answered and exited on its own: not killed
        assert zygote.proc.poll() is not None and time.monotonic() - started < forking.CLOSE_WAIT_S
    finally:
        slow.close(wait_s=5)
        zygote.close()


def test_the_referee_starts_its_zygote_before_it_imports_torch():
    """The referee's entry point imports nothing of torch before the zygote starts, so the two imports overlap (one
    after the other, each batch waited 4.1-4.7 s for the zygote on 2 cores, 1.2-1.9 s overlapped)."""
    code = "import sys, evaluator.referee.__main__ as m; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


def test_exec_is_asked_for_with_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(forking.START_ENV, "exec")
    assert forking.for_executors("cpu", tmp_path) is None


@pytest.mark.slow
def test_the_zygote_imports_without_asking_the_cuda_driver_so_its_forks_can_use_cuda():
    """torch's extension builder asks whether CUDA is available as it is imported; answered by the driver, no fork
    could initialise CUDA. The zygote's imports never ask it, and a zygote that did is told apart (it then sends an
    error, and the referee starts executors as before)."""
    probe = ("import sys, torch\nfrom evaluator.executor import zygote\nzygote.import_untouched()\n"
             "print(zygote.fork_unfit())\ntorch.cuda.is_available()\nprint(zygote.fork_unfit())\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(REFERENCE.parents[1]),
                                 "CUDA_VISIBLE_DEVICES": ""})  # as a CPU referee's zygote has it (a GPU's starts CUDA)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["None", "a fork of the zygote could not use CUDA"], result.stdout


@pytest.mark.slow  # over 0.4 s: out of the fast subset
def test_a_fork_makes_the_pages_it_shares_with_its_parent_its_own_and_leaves_the_untouched_ones_alone():
    """own_pages: a forked executor copies every page it shares with the zygote at once (as an executor started afresh
    has them), so no later write (inside a clocked window) is a copy-on-write fault; a mapped page never touched stays
    unallocated."""
    import ctypes
    import mmap

    from evaluator.executor.zygote import own_pages

    size = 16 << 20
    private = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS  # (a shared mapping stays shared: own_pages leaves it)
    touched, untouched = mmap.mmap(-1, size, flags=private), mmap.mmap(-1, size, flags=private)
    touched.write(b"\1" * size)
    where = {name: ctypes.addressof(ctypes.c_char.from_buffer(m)) for name, m in (("touched", touched),
                                                                                  ("untouched", untouched))}

    def pages(address: int) -> dict[str, int]:
        """Of the mapping's pages at `address`: present ones, and present ones mapped by this process alone
        (/proc/self/pagemap: bit 63 present, bit 56 exclusively mapped)."""
        page = os.sysconf("SC_PAGE_SIZE")
        with open("/proc/self/pagemap", "rb") as pagemap:
            pagemap.seek(address // page * 8)
            entries = [int.from_bytes(pagemap.read(8), "little") for _ in range(size // page)]
        return {"present": sum(e >> 63 & 1 for e in entries), "own": sum(e >> 63 & 1 and e >> 56 & 1 for e in entries)}

    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            owned = own_pages()
            seen = {name: pages(address) for name, address in where.items()}
            os.write(writer, json.dumps({"owned": owned, **seen}).encode())
        finally:
            os._exit(0)
    os.close(writer)
    seen = json.loads(os.read(reader, 1 << 16))
    os.waitpid(pid, 0)
    if seen["owned"] == 0:
        pytest.skip("this kernel has no MADV_POPULATE_WRITE (Linux 5.14)")
    every = size // os.sysconf("SC_PAGE_SIZE")
    assert seen["touched"] == {"present": every, "own": every}, seen
    assert seen["untouched"]["present"] == 0, seen
    touched.close()
    untouched.close()


@pytest.mark.slow
def test_a_zygote_that_stops_answering_is_killed_before_its_executor_is_started_afresh(tmp_path, monkeypatch):
    """A start the zygote does not answer in time: the zygote is killed and waited for first (so it cannot fork the
    request it still holds beside the executor started afresh), then the executor is exec'd as before."""
    zygote = forking.for_executors("cpu", tmp_path / "cache")
    assert zygote is not None and zygote.wait_ready()
    monkeypatch.setattr(forking, "STARTED_WAIT_S", 2.0)
    os.kill(zygote.proc.pid, signal.SIGSTOP)
    process = executor(tmp_path, zygote)
    try:
        process.start()
        assert isinstance(process.proc, subprocess.Popen)
        assert zygote.proc.poll() == -signal.SIGKILL and zygote.ready is False
        assert process.reply(0, time.monotonic() + 120).error is None
    finally:
        process.close(wait_s=5)
        zygote.close()
