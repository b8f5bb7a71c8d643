"""An interrupt (Ctrl-C or SIGTERM) stops every process the harness started, removes their folders,
and loses no verdict already reached."""

from __future__ import annotations

import glob
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "candidates" / "cpu"


def descendants(root: int) -> set[int]:
    """Processes whose parent chain leads to `root` (read from /proc)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    parents[int(entry)] = int(stat.read().rpartition(b")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] != b"Z"
    except OSError:
        return False


def stored_verdicts(store: Path) -> int:
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
            return db.execute("SELECT count(*) FROM verdicts").fetchone()[0]
    except sqlite3.Error:
        return 0


def folders(temp: Path) -> set[str]:
    return {p for pattern in ("kh-referee-*", "kh-worker-*", "kh-candidate-*") for p in glob.glob(f"{temp}/{pattern}")}


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_stops_everything_started_and_keeps_the_verdicts_reached(tmp_path, sig):
    store, temp = tmp_path / "results.sqlite", tmp_path / "tmp"  # its own temporary folder: only its folders
    temp.mkdir()
    harness = subprocess.Popen(
        [sys.executable, "-m", "harness", "eval", str(FIXTURES / "torch_ops_correct.py"),
         str(FIXTURES / "infinite_loop.py"), "--device", "cpu", "--size", "small", "--baselines", "eager",
         "--run-timeout", "300", "--store", str(store)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env={**os.environ, "TMPDIR": str(temp)},
        # as started from a terminal: a suite run in the background (`pytest &`) has SIGINT ignored, which a
        # child inherits, and Python then leaves it ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 400
        while stored_verdicts(store) < 1:  # the first candidate's verdict, stored as it is reached
            assert harness.poll() is None and time.monotonic() < deadline, harness.communicate()
            time.sleep(0.2)
        time.sleep(1.5)  # the second is looping in its executor by now (forked, its import took 0.1-0.6 s here)
        started = descendants(harness.pid)
        assert folders(temp)  # the referee's, the executor's, the candidate's source
        assert len(started) >= 3  # the referee, its executor and the executor's launcher at least
        interrupted_at = time.monotonic()
        harness.send_signal(sig)  # to the harness alone, as `timeout -s INT` does
        out, err = harness.communicate(timeout=60)
    finally:
        if harness.poll() is None:
            harness.kill()
    assert time.monotonic() - interrupted_at < 30
    assert harness.returncode == 130, err
    assert "interrupted:" in err and "the 1 verdict(s) reached are in" in err, err
    gone = time.monotonic() + 5  # a killed process is reaped by its parent a moment later
    while [pid for pid in started if alive(pid)] and time.monotonic() < gone:
        time.sleep(0.1)
    assert not [pid for pid in started if alive(pid)], "processes the harness started outlived it"
    assert folders(temp) == set()
    assert stored_verdicts(store) == 1


@pytest.mark.slow
def test_a_bench_stopped_by_sigterm_leaves_no_referee_running(tmp_path):
    """`timeout harness bench --throughput` (as the GPU checks run it): SIGTERM stops every referee and executor the
    bench started, as Ctrl-C does, so that none is left judging (or holding a GPU) after the bench has gone."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    bench = subprocess.Popen(
        [sys.executable, "-m", "harness", "bench", "--throughput", "2", "--device", "cpu", "--sizes", "small",
         "--out", str(tmp_path / "bench.json"), str(FIXTURES / "infinite_loop.py")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(temp), "HARNESS_STORE": str(tmp_path / "results.sqlite")})
    try:
        deadline = time.monotonic() + 300
        while not any(glob.glob(f"{temp}/kh-candidate-*")):  # a candidate's executor started: it loops from now on
            assert bench.poll() is None and time.monotonic() < deadline, bench.communicate()
            time.sleep(0.2)
        time.sleep(1.5)
        started = descendants(bench.pid)
        assert len(started) >= 3  # the referee, its executor and the executor's launcher at least
        bench.send_signal(signal.SIGTERM)
        out, err = bench.communicate(timeout=60)
    finally:
        if bench.poll() is None:
            bench.kill()
    assert bench.returncode == 130, err
    assert "interrupted:" in err, err
    gone = time.monotonic() + 5
    while [pid for pid in started if alive(pid)] and time.monotonic() < gone:
        time.sleep(0.1)
    assert not [pid for pid in started if alive(pid)], "processes the bench started outlived it"


def test_a_referee_stops_once_its_parent_has_died_and_not_before(monkeypatch):
    """`watch_parent` sleeps while the parent lives and stops the referee (`orphaned`) once it has exited; one whose
    parent is gone already stops at once."""
    from evaluator.referee import __main__ as referee_main

    stops = []
    monkeypatch.setattr(referee_main, "orphaned", lambda: stops.append(True))
    parent = subprocess.Popen(["sleep", "60"])
    monkeypatch.setattr(referee_main.os, "getppid", lambda: parent.pid)  # the watcher's view: its parent is `sleep`
    watcher = threading.Thread(target=referee_main.watch_parent, args=(parent.pid,), daemon=True)
    watcher.start()
    time.sleep(0.3)
    assert watcher.is_alive() and stops == []
    parent.kill()
    parent.wait()
    watcher.join(timeout=5)
    assert not watcher.is_alive() and stops == [True]
    monkeypatch.setattr(referee_main.os, "getppid", lambda: 1)  # reparented: the parent died before the watch began
    referee_main.watch_parent(parent.pid)
    assert stops == [True, True]


@pytest.mark.slow
def test_a_harness_killed_outright_leaves_no_referee_or_executor_judging(tmp_path):
    """SIGKILL (the OOM killer, a scheduler's kill) gives the harness no chance to stop anything: its referee sees its
    parent exit (`watch_parent`) and stops itself, closing its executors, so that nothing judges (or holds a GPU) for
    no one."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    harness = subprocess.Popen(
        [sys.executable, "-m", "harness", "eval", str(FIXTURES / "infinite_loop.py"),
         str(FIXTURES / "torch_ops_correct.py"), "--device", "cpu", "--size", "small", "--baselines", "eager",
         "--run-timeout", "300", "--no-store"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path, env={**os.environ, "TMPDIR": str(temp)})
    try:
        deadline = time.monotonic() + 300
        while len(descendants(harness.pid)) < 5:  # the referee, its zygote and an executor's three processes
            assert harness.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        time.sleep(2)  # the first candidate loops by now, its close already queued behind the second
        started = descendants(harness.pid)
    finally:
        harness.kill()
        harness.wait()
    gone = time.monotonic() + 30
    while [pid for pid in started if alive(pid)] and time.monotonic() < gone:
        time.sleep(0.2)
    assert not [pid for pid in started if alive(pid)], "processes the killed harness started went on"
