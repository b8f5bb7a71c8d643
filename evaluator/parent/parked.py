"""Referees started ahead for a suite's next problem ("parked").

A batch's referee first imports torch and every module its executors import: 2.6-3.7 s of each problem's set-up on an
H200 host, paid again by every problem of a suite. A parked referee makes those imports while the problem before is
judged, on cores no lane uses (the builds' own, placement mode `cores`), then waits, touching no device, until a lane of
the batch it was parked for takes it and sends its config as the first line of its requests
(evaluator.referee.__main__ --park); the lane's referee then pins itself to the lane's cores and starts as any other.

Parked only on a GPU whose lanes have cores of their own: on the CPU nothing of the harness's own runs beside a
window, and where builds are frozen or only niced there are no cores apart to park on. A parked referee is keyed by
the batch it is for (problem, size, GPU, environment): another batch never takes it, and those no lane took are
ended when that batch is done, when the suite ends, or with everything on an interrupt (live.LIVE).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field

from evaluator.referee.live import LIVE, STOPPED, refuse_when_stopped

_parked: dict[tuple, list[ParkedReferee]] = {}
_lock = threading.Lock()


@dataclass(eq=False)
class ParkedReferee:
    """One referee process waiting for its config: the parent's ends of its pipes."""

    proc: subprocess.Popen
    requests: int  # the write end of its requests
    replies: int  # the read end of its replies
    cores: list[int] | None  # where it was pinned while parked
    ends: threading.Lock = field(default_factory=threading.Lock, repr=False)  # its descriptors closed once (`close`)

    def interrupt(self) -> None:
        if self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # nothing of its own started yet: no folder, no executor
        except (ProcessLookupError, PermissionError):
            pass

    def finish_interrupt(self, wait_s: float) -> None:
        self.close()

    def close(self) -> None:
        """Ended unused (by one thread's close where two race: an interrupt's and the one that parked it)."""
        LIVE.discard(self)
        self.interrupt()
        self.proc.wait()
        with self.ends:  # each descriptor closed once: a second close could close a file that took its number
            fds, self.requests, self.replies = (self.requests, self.replies), -1, -1
        for fd in fds:
            if fd >= 0:
                os.close(fd)


def batch_key(evaluator, gpu: str | None, env: dict[str, str]) -> tuple:
    """What a parked referee is for: the batch's problem, size, precision and backend, the GPU and the environment."""
    return (str(evaluator.problem.location), evaluator.size, evaluator.precision, evaluator.backend, gpu,
            json.dumps(env, sort_keys=True))


def park(key: tuple, env: dict[str, str], log, cores: list[int] | None) -> ParkedReferee:
    """A referee started parked (imports on `cores`, None: where it may run), kept under `key`."""
    if STOPPED.is_set() and log is not subprocess.DEVNULL:
        log.close()
    refuse_when_stopped("a parked referee")
    requests_r, requests_w = os.pipe()
    replies_r, replies_w = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "evaluator.referee", "--park", ",".join(map(str, cores or [])),
             "--requests", str(requests_r), "--replies", str(replies_w)], pass_fds=(requests_r, replies_w),
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    except OSError:
        for fd in (requests_w, replies_r):
            os.close(fd)
        raise
    finally:
        os.close(requests_r)
        os.close(replies_w)
        if log is not subprocess.DEVNULL:
            log.close()
    referee = ParkedReferee(proc, requests_w, replies_r, cores)
    LIVE.add(referee)
    if STOPPED.is_set():  # stop_everything took LIVE before this one joined it
        referee.close()
        refuse_when_stopped("a parked referee")
    with _lock:
        _parked.setdefault(key, []).append(referee)
    return referee


def take(key: tuple, placed: bool) -> ParkedReferee | None:
    """A live referee parked under `key`, for a lane that `placed` on cores of its own (one parked on other cores
    is never given to a lane without: it would time where builds run); None where there is none."""
    with _lock:
        waiting = _parked.get(key, [])
        while waiting:
            referee = waiting.pop(0)
            if referee.proc.poll() is None and (placed or not referee.cores):
                LIVE.discard(referee)
                return referee
            referee.close()
    return None


def end(keys: list[tuple]) -> None:
    """The referees parked under `keys` that no lane took ended (their batch is done)."""
    with _lock:
        waiting = [r for key in keys for r in _parked.pop(key, [])]
    for referee in waiting:
        referee.close()


def end_all() -> None:
    """Every referee still parked ended (the suite moved on, or ended)."""
    with _lock:
        waiting = [r for rs in _parked.values() for r in rs]
        _parked.clear()
    for referee in waiting:
        referee.close()
