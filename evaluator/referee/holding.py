"""Stopping every process of one executor, every time: the hold around the calibrator's windows.

Where the harness may make cgroups, an executor is held by freezing its cgroup (evaluator.wire.cgroups),
which holds every process in it until it is thawed, whatever signal one of them gets. Where it may not,
it is held with SIGSTOP, as follows.

An executor's processes are its launcher, the init of its PID namespace and whatever runs below them: a
process that leaves its process group (setpgid; seccomp denies only setsid) is still in that tree, and
one orphaned by a double fork is adopted by the namespace's init. So the tree, read from
/proc/PID/task/TID/children, holds all of them, and reading it costs a few small reads per thread, not a
pass over every process of the machine. A process forked while the tree is read is caught by the next
pass: the hold ends only when a pass finds every process signalled, every thread of each stopped (not
merely in the kernel: a thread in uninterruptible sleep at the hold runs on once it leaves it, and a
SIGCONT meanwhile cancels its pending stop) and the run time of every thread unchanged since the pass
before (a thread seen stopped may still be switching out, its run time not yet all counted). Those run
times are read again after the window: a thread continued meanwhile (a candidate's own timer can send
SIGCONT, which the kernel acts on at once, even for a stopped process) has run. Where the kernel does not list children, or the executor has no PID namespace (an
orphan would leave the tree), every hold is a pass over /proc for its session instead.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from evaluator.referee import launch

# A task in any of these states runs nothing until something continues it: stopped, traced, dead, zombie.
# (Not uninterruptible sleep: it leaves the kernel and runs on if a SIGCONT cancels its pending stop.)
HELD = frozenset(b"TtZXx")
HOLD_WAIT_S = 2.0  # a tree that is still growing or running after this is not held: the candidate is judged


class NotHeld(RuntimeError):
    """The executor's processes could not all be stopped (they kept forking, or a thread kept running)."""


def tree(root: int, times: dict | None = None) -> dict[int, bool]:
    """Every process at or below `root`, each with whether all its threads are stopped (and in `times`, the
    run time of each of its threads: see _thread_held)."""
    found: dict[int, bool] = {}
    pending = [root]
    while pending:
        pid = pending.pop()
        if pid not in found and (held := _process_held(pid, times, pending)) is not None:
            found[pid] = held
    return found


def complete(root: int) -> bool:
    """Whether `tree` finds every process of this executor: the kernel lists children, and the launcher's
    child is PID 1 of a PID namespace of its own (so that orphans are adopted below it)."""
    for child in tree_children(root) or []:
        try:
            with open(f"/proc/{child}/status", "rb") as status:
                for line in status:
                    if line.startswith(b"NSpid:"):
                        ids = line.split()[1:]
                        return len(ids) >= 2 and ids[-1] == b"1"
        except OSError:
            continue
    return False


def processes(root: int, by_tree: bool, times: dict | None = None) -> dict[int, bool]:
    """Every process of the executor whose launcher is `root`, each with whether it is held (see `tree`):
    its tree, or a pass over /proc for its session, every member whatever group it is in."""
    if by_tree:
        return tree(root, times)
    found = {pid: _process_held(pid, times) for pid in {root, *launch.session_members(root)}}
    return {pid: held for pid, held in found.items() if held is not None}


def candidates_processes(root: int, by_tree: bool) -> list[int]:
    """The executor's processes less its launcher and the init of its PID namespace (the harness's own: forked from a
    zygote, they share its pages, which would count as the candidate's memory). Without a PID namespace (`by_tree`
    false) the launcher is the worker itself, and every process counts."""
    found = processes(root, by_tree)
    ours = {root, *(tree_children(root) or [])} if by_tree else set()
    return [pid for pid in found if pid not in ours]


def tree_children(pid: int) -> list[int] | None:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", "rb") as children:
            return [int(child) for child in children.read().split()]
    except OSError:
        return None


def stop_all(root: int, by_tree: bool, times: dict | None = None) -> list[int]:
    """SIGSTOP to every process of the executor whose launcher is `root`, and back only once every thread of
    them is stopped with its run time the same in two passes in a row. Returns them (for `continue_all`),
    and fills `times` with the run time of every thread as it was then (ran_since); raises NotHeld."""
    try:
        os.killpg(root, signal.SIGSTOP)
    except (ProcessLookupError, PermissionError):
        pass
    signalled: set[int] = set()
    deadline = time.monotonic() + HOLD_WAIT_S
    before: dict | None = None
    while True:
        seen: dict = {}
        found = processes(root, by_tree, seen)
        settled = True
        for pid, stopped in found.items():
            if pid not in signalled or not stopped:  # again: one of its own may have continued it
                _send(pid, signal.SIGSTOP)
                settled = settled and pid in signalled and stopped
                signalled.add(pid)
        if settled and seen == before:
            if times is not None:
                times.update(seen)
            return sorted(signalled)
        before = seen if settled else None
        if time.monotonic() > deadline:
            continue_all(root, sorted(signalled))
            raise NotHeld(f"its processes could not all be stopped within {HOLD_WAIT_S:g} s ({len(found)} "
                          "processes, some still forking or running)")
        time.sleep(0.0002)


def _thread_held(pid: int, tid: str, times: dict | None) -> bool:
    """Whether thread `tid` of `pid` is stopped; its run time (schedstat, nanoseconds), whatever its state,
    goes in `times`. A stopped thread runs again only when something continues it (a candidate's own
    timer can send SIGCONT, which the kernel acts on at once)."""
    with open(f"/proc/{pid}/task/{tid}/stat", "rb") as stat:
        state = _state(stat.read())
    if times is not None:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as schedstat:
                times[(pid, int(tid))] = int(schedstat.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # no schedstat in this kernel, or gone
    return state in HELD


def ran_since(times: dict[tuple[int, int], int], now: dict[tuple[int, int], int] | None = None) -> list[int]:
    """The processes with a thread that has run since `times` was taken (stop_all): its run time changed, or it
    is gone (a stopped thread cannot end unless something continued it), or, with `now` (the run times a pass
    over the processes found after the window), a thread that was not there before."""
    ran = set()
    for (pid, tid), before in times.items():
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as schedstat:
                if int(schedstat.read().split()[0]) != before:
                    ran.add(pid)
        except (OSError, ValueError, IndexError):
            ran.add(pid)  # gone: it ran to its end
    ran |= {pid for pid, tid in (now or {}) if (pid, tid) not in times}
    return sorted(ran)


def broken_since(root: int, by_tree: bool, times: dict) -> str | None:
    """What the executor whose launcher is `root` did since `stop_all` filled `times` (None: nothing): processes of
    it that ran (`ran_since`; a process born meanwhile ran to be born)."""
    now: dict = {}
    processes(root, by_tree, now)
    ran = ran_since(times, now)
    return f"its processes {ran} ran (something continued them)" if ran else None


def continue_all(root: int, pids: list[int]) -> None:
    try:
        os.killpg(root, signal.SIGCONT)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in pids:
        _send(pid, signal.SIGCONT)


def _send(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _state(stat: bytes) -> int:
    return stat.rpartition(b")")[2].split(maxsplit=1)[0][0]


def _process_held(pid: int, times: dict | None, children: list[int] | None = None) -> bool | None:
    """Whether no thread of `pid` runs user code (None: it is gone); each thread's children go in `children`."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    held = True
    for tid in tids:
        try:
            held = _thread_held(pid, tid, times) and held
            if children is not None:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as listed:
                    children.extend(int(child) for child in listed.read().split())
        except (OSError, ValueError, IndexError):
            continue  # an exited thread
    return held


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL to the executor's process group, then to every process left in its session (ninja puts each
    compiler in a group of its own; seccomp keeps them all in the session). Whatever runs in the executor's PID
    namespace dies with its init, which dies with the launcher."""
    signal_groups([proc], signal.SIGKILL)


def signal_groups(procs: list[subprocess.Popen], sig: int) -> None:
    """`sig` to each executor's process group and every process left in its session (one pass over /proc)."""
    for proc in procs:
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for members in launch.sessions_members([proc.pid for proc in procs]).values():
        for pid in members:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
