"""The referee's end of its zygote (evaluator.executor.zygote): executors started by a fork of a process that
has imported what they import, instead of a fresh interpreter each (4-5 s of a core each on a 2-core machine).

`Zygote.start` sends the executor's command line, environment, folder and descriptors, and returns a `Forked`:
what `subprocess.Popen` would have given (pid, stdout and stderr to read, poll, wait, returncode), its exit
status told by the zygote, which is its parent. Where the zygote cannot start or dies, `start` returns None and
the executor is started as before (`HARNESS_EXECUTOR_START=exec` asks for that always).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

from evaluator.wire.zygote import MAX_REQUEST, ZYGOTE_MODULE
from evaluator.wire.folders import remove_tree
from evaluator.referee import launch
from evaluator.referee.environment import bytecode_cache, scrubbed_environment

START_ENV = "HARNESS_EXECUTOR_START"  # `exec`: every executor a fresh interpreter (no zygote)
READY_WAIT_S = 300.0  # its imports (with a cold bytecode cache on a busy machine: tens of seconds)
STARTED_WAIT_S = 30.0
CLOSE_WAIT_S = 5.0


def wanted() -> bool:
    return os.environ.get(START_ENV, "fork") != "exec" and sys.platform == "linux"


class Forked:
    """An executor's launcher forked by the zygote, as the referee sees it (the part of Popen it uses)."""

    def __init__(self, pid: int, stdout, stderr):
        self.pid, self.stdout, self.stderr = pid, stdout, stderr
        self.returncode: int | None = None
        self._exited = threading.Event()

    def _exit(self, status: int | None) -> None:
        self.returncode = os.waitstatus_to_exitcode(status) if status is not None else -9
        self._exited.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(f"executor {self.pid}", timeout)
        return self.returncode


class Zygote:
    """One referee's zygote: started at once (its imports overlap the referee's own start), used by every
    executor the referee starts, closed with the referee (it dies with it in any case)."""

    def __init__(self, env: Mapping[str, str], folder: Path | None = None):
        self.folder = folder  # its own HOME, TMPDIR and caches (removed at close)
        self.lock = threading.Lock()
        self.children: dict[int, Forked] = {}
        self.early: dict[int, int] = {}  # exit statuses told before the start's reply was read
        self.replies: dict[int, dict] = {}
        self.arrived = threading.Condition(self.lock)
        self.ready: bool | None = None
        self.error = ""
        self.ids = 0
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", ZYGOTE_MODULE, "--socket", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, env=dict(env), cwd="/")
        finally:
            theirs.close()
        self.reader = threading.Thread(target=self._read, daemon=True, name="zygote")
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(MAX_REQUEST)
            except OSError:
                data = b""
            with self.lock:
                if not data:
                    self._gone("the zygote exited")
                    return
                try:
                    message = json.loads(data)
                except ValueError:
                    self._gone(f"the zygote sent {data[:200]!r}")
                    return
                if "ready" in message:
                    self.ready = True
                elif "error" in message and "started" not in message:
                    self._gone(f"the zygote could not start: {message['error']}")
                elif "started" in message:
                    self.replies[message["started"]] = message
                elif "exited" in message:
                    child = self.children.pop(message["exited"], None)
                    if child is not None:
                        child._exit(message["status"])
                    else:
                        self.early[message["exited"]] = message["status"]
                self.arrived.notify_all()

    def _gone(self, why: str) -> None:
        """(lock held) No more starts; every child of it died with it (PR_SET_PDEATHSIG)."""
        if not self.error and self.ready is not False:  # said once, in the referee's log: executors are exec'd now
            print(f"kernelharness: executors are started afresh from now on: {why}", file=sys.stderr, flush=True)
        self.ready, self.error = False, self.error or why
        for child in self.children.values():
            child._exit(None)
        self.children.clear()
        self.arrived.notify_all()

    def wait_ready(self, timeout: float = READY_WAIT_S) -> bool:
        """Whether its imports are done (waiting for them at most `timeout`, then giving it up); False once it failed
        or is gone."""
        with self.lock:
            if self.arrived.wait_for(lambda: self.ready is not None, timeout):
                return bool(self.ready)
        self.abandon(f"its imports were not done within {timeout:g} s")
        return False

    def abandon(self, why: str) -> None:
        """Given up: killed, and waited for (so that no request it still holds is forked later, beside the executor
        the caller then starts itself); its children die with it."""
        self.proc.kill()
        self.proc.wait()
        with self.lock:
            self._gone(why)

    def start(self, argv: list[str], env: Mapping[str, str], cwd: Path, pass_fds: list[int],
              nice: int = 0) -> Forked | None:
        """The executor's launcher forked with this command line, environment, folder and descriptors; None where the
        zygote is not (or no longer) there, or failed this start, a command line not the executor's among the reasons
        (the caller starts it as before)."""
        if not self.wait_ready():
            return None
        with self.lock:
            self.ids += 1
            ident = self.ids
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        request = {"id": ident, "argv": list(argv), "env": dict(env), "cwd": str(cwd), "nice": nice,
                   "fds": list(pass_fds)}
        try:
            socket.send_fds(self.sock, [json.dumps(request).encode()], [out_w, err_w, *pass_fds])
            sent = None
        except OSError as err:
            sent = f"sending a request failed: {err}"
        os.close(out_w)
        os.close(err_w)
        with self.lock:
            if sent is None:
                self.arrived.wait_for(lambda: ident in self.replies or self.ready is False, STARTED_WAIT_S)
            reply = self.replies.pop(ident, None)
            if reply is not None and "pid" in reply:
                child = Forked(reply["pid"], os.fdopen(out_r, "rb"), os.fdopen(err_r, "rb"))
                if reply["pid"] in self.early:
                    child._exit(self.early.pop(reply["pid"]))
                elif self.ready is False:  # gone meanwhile: its children died with it
                    child._exit(None)
                else:
                    self.children[reply["pid"]] = child
                return child
        os.close(out_r)
        os.close(err_r)
        if reply is None and self.ready is not False:
            self.abandon(sent or f"no reply to a start within {STARTED_WAIT_S:g} s")
        return None

    def close(self) -> None:
        """Once its children have exited (a judged executor's exit may still be awaited for its verdict: each dies
        with the zygote, which exits at once when its socket closes), at most CLOSE_WAIT_S."""
        with self.lock:
            self.arrived.wait_for(lambda: not self.children or self.ready is False, CLOSE_WAIT_S)
            self.error = self.error or "closed"
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.sock.close()
        if self.folder is not None:
            remove_tree(self.folder)


def spawn(zygote: Zygote | None, command: list[str], env: Mapping[str, str], cwd: Path, pass_fds: list[int],
          nice: int = 0) -> Forked | subprocess.Popen:
    """The executor's launcher (evaluator.executor.launcher) with the executor's `command`: forked by the zygote, or
    where there is none (or it failed) a fresh interpreter, in a session of its own, stdout and stderr piped."""
    if zygote is not None:
        forked = zygote.start(command, env, cwd, pass_fds, nice)
        if forked is not None:
            return forked
    niced = ["nice", "-n", str(nice)] if nice and shutil.which("nice") else []
    return subprocess.Popen(niced + launch.launch_command(command), pass_fds=tuple(pass_fds), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=dict(env),
                            start_new_session=True)


def for_executors(device: str, cache_dir: Path) -> Zygote | None:
    """A zygote for the executors of a referee on `device` with this build cache: its environment is theirs (the
    variables Python reads as it starts are the same; the folders and what differs per candidate are set in each
    child), its folders its own. None where it is not wanted (START_ENV) or cannot be started."""
    if not wanted():
        return None
    folder = Path(tempfile.mkdtemp(prefix="kh-zygote-"))
    try:
        env = scrubbed_environment(folder / "extensions", device, folder, bytecode_cache(cache_dir))
        return Zygote(env, folder)
    except Exception:
        remove_tree(folder)
        return None
