"""The static checks in a process of their own, bounded in time and memory.

The checks read a candidate in the parent, before anything is contained, and what they do grows with the source in
ways an adversary can choose: a 157-byte source whose spelled strings fold exponentially, a regex that backtracks over
a folded megabyte, findings that grow with the square of their count. Rather than bound each, the parent asks a
worker process (one, kept for the process's life, its memory capped by RLIMIT_AS) and waits at most LIMIT_S: a worker
that overruns is killed, one that dies is started again, and the candidate is rejected with the reason
(evaluator.parent.sandbox's `_prepare`). Sources over syntax.MAX_SOURCE_BYTES are not read at all.

A source can keep the worker busy for LIMIT_S while lanes time (a suite gates its next problem's candidates while one
is judged; a warm judge gates each call beside its other lanes): it runs niced as a build is, its session too, and
while a batch keeps its builds on cores of their own it runs there (`keep_beside_builds`).

    python -m evaluator.checks.bounded      the worker: JSON lines in on stdin, out on stdout
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from evaluator.wire.cgroups import pin
from evaluator.wire.polling import readable
from evaluator.wire.problem import Rules
from evaluator.wire.records import Flag

LIMIT_S = 30.0  # honest candidates take milliseconds, a large one a tenth of a second
NICE = 10  # as a build (evaluator.parent.build.BUILD_NICE); any lower a priority and a gate under their load could overrun
MEMORY_BYTES = 4 << 30
ROOT = Path(__file__).resolve().parents[2]


class GateFailed(RuntimeError):
    """The checks did not finish on a source (overran, ran out of memory, or raised): the reason."""


class _Worker:
    def __init__(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
        self.proc = subprocess.Popen([sys.executable, "-m", "evaluator.checks.bounded"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=ROOT,
                                     start_new_session=True)
        self.buffer = b""

    def ask(self, request: dict) -> dict:
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + LIMIT_S
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if readable(fd, min(left, 1.0)):
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise EOFError
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


_worker: _Worker | None = None
_lock = threading.Lock()
_place: Callable[[int], None] | None = None  # where the worker runs while a batch keeps its builds apart
_placing = threading.Lock()  # for `_place` and the worker's moves: never held through a gate under way (`_lock`)


def keep_beside_builds(place: Callable[[int], None] | None, only: Callable[[int], None] | None = None) -> None:
    """The worker placed by `place` (given its pid: evaluator.parent.placement keeps it where the batch's builds run),
    now and whenever it is started again; None: back on the cores this process may use (`only`: if `only` placed it,
    so that another batch's placement stays)."""
    global _place
    with _placing:
        if place is None and only is not None and _place != only:
            return
        _place = place
        worker = _worker
        if worker is not None and worker.proc.poll() is None:
            _placed(worker.proc.pid)


def _placed(pid: int) -> None:
    """Worker `pid` where `_place` says (`_placing` held)."""
    try:
        _place(pid) if _place is not None else pin(pid, os.sched_getaffinity(0))
    except OSError:
        pass  # gone, or not ours to move: it still runs niced (serve)


def bounded_flags(source: str, rules: Rules | None = None, backend: str | None = None) -> list[Flag]:
    """`static_flags(source, rules=rules, backend=backend)`, read by the worker; GateFailed with the reason where it
    does not finish within LIMIT_S and MEMORY_BYTES."""
    global _worker
    request = {"source": source, "rules": rules.model_dump(mode="json") if rules is not None else None,
               "backend": backend}
    with _lock:
        for attempt in range(2):  # a worker found dead (killed from outside, say) is started again once
            if _worker is None or _worker.proc.poll() is not None:
                _worker = _Worker()
                with _placing:
                    _placed(_worker.proc.pid)
            try:
                reply = _worker.ask(request)
                break
            except TimeoutError:
                _worker.kill()
                _worker = None
                raise GateFailed(f"they did not finish within {LIMIT_S:g} s") from None
            except (EOFError, OSError, ValueError):  # a broken pipe, a reply cut short
                _worker.kill()
                _worker = None
                if attempt:
                    raise GateFailed("their process ended (out of memory, or killed)") from None
    if "error" in reply:
        raise GateFailed(f"they raised {reply['error']}")
    return [Flag.model_validate(flag) for flag in reply["flags"]]


def serve() -> None:
    """The worker: a request a line, a reply a line; memory capped (an allocation past it raises MemoryError)."""
    import ctypes
    import signal

    from evaluator.checks import static_flags

    parent = os.getppid()
    try:  # killed with the parent (PR_SET_PDEATHSIG): a source it would read forever never outlives the harness
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        return
    os.nice(NICE)  # beside lanes timing, as a build: its session too (autogroup scheduling)
    try:
        with open("/proc/self/autogroup", "w") as autogroup:
            autogroup.write(str(NICE))
    except OSError:
        pass  # no autogroup scheduling here: plain niceness is what counts
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    for line in sys.stdin.buffer:
        request = json.loads(line)
        try:
            rules = Rules.model_validate(request["rules"]) if request["rules"] is not None else None
            flags = static_flags(request["source"], rules=rules, backend=request["backend"])
            reply = {"flags": [flag.model_dump(mode="json") for flag in flags]}
        except BaseException as err:  # MemoryError, RecursionError, a bug: the candidate's verdict says which
            reply = {"error": f"{type(err).__name__}: {err}"[:300]}
        sys.stdout.buffer.write(json.dumps(reply).encode() + b"\n")
        sys.stdout.buffer.flush()


if __name__ == "__main__":
    serve()
