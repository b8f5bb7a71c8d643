"""Executors forked from a referee's zygote (evaluator.executor.zygote, evaluator.referee.forking): started and
reported as a fresh interpreter's would be, their exit told; a zygote that dies takes its children with it and the
next executor is started as before. (Containment of a forked executor: test_containment's escapes, which run forked.)"""

from __future__ import annotations

import hashlib
import signal
import subprocess
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


def test_exec_is_asked_for_with_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(forking.START_ENV, "exec")
    assert forking.for_executors("cpu", tmp_path) is None
