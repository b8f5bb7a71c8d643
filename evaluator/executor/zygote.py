"""A process that has imported what every executor imports, and starts executors by forking itself.

An executor spends seconds importing torch, dynamo and torch's extension builder before the candidate
exists (4-5 s of a core each on a 2-core machine, most of a small batch's time). The referee starts one
of these per batch (evaluator.referee.forking) and asks it for each executor instead:

    python -m evaluator.executor.zygote --socket FD

It imports EXECUTOR_MODULES, never initialises CUDA nor asks its driver anything (a child of a process that did
could not use it: `import_untouched`, checked by `fork_unfit`), holds
no secret (the referee never sends it one: a request is the executor's command line, its scrubbed environment,
its folder and its descriptors) and no descriptor but its socket. For each request it forks a child that:

* closes the socket and every descriptor it was not sent, puts those it was sent where the executor's
  command line names them (stdin /dev/null, stdout and stderr the referee's pipes), starts a session of
  its own (as `start_new_session`) and dies with this process (PR_SET_PDEATHSIG);
* takes the executor's environment and folder, then does exactly what the launcher does
  (evaluator.executor.launcher.main: cgroup, cores, namespaces, init, Landlock, seccomp, the probes and
  the `containment` message), except that its worker runs the executor's main in place of exec.

So the candidate runs under the same containment, applied in the same order, before any of its code exists;
what differs is only that the modules it finds imported were imported before its folder was made. The
zygote reaps its children and tells the referee each one's exit status (the referee is not their parent).

Messages on the socket (SOCK_SEQPACKET, one JSON object each): from the zygote `{"ready": true}` once its
imports are done (or `{"error": ...}`), `{"started": ID, "pid": PID}` or `{"started": ID, "error": ...}`
for each request, `{"exited": PID, "status": WAITSTATUS}` for each child; from the referee
`{"id": ID, "argv": [...], "env": {...}, "cwd": ..., "nice": N, "fds": [N, ...]}`, with the referee's
stdout and stderr pipes and then the descriptors numbered `fds` in its ancillary data.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import fcntl
import importlib
import json
import os
import selectors
import signal
import socket
import sys
import tempfile
import time
import traceback
from pathlib import Path

from evaluator.executor import launcher
from evaluator.wire.zygote import EXECUTOR_ARGV, EXECUTOR_MODULES, MAX_FDS, MAX_REQUEST

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def send(sock: socket.socket, message: dict) -> None:
    try:
        sock.send(json.dumps(message).encode())
    except OSError:
        pass  # the referee is gone: its children die with this process


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--socket", type=int, required=True)
    args = parser.parse_args(argv)
    launcher.die_with_parent()  # with the referee that started it, and its children with it (each dies with this one)
    sock = socket.socket(fileno=args.socket)
    try:
        import_untouched()
        unfit = fork_unfit()
    except BaseException:
        send(sock, {"error": traceback.format_exc()[-4000:]})
        return 1
    if unfit:
        send(sock, {"error": unfit})
        return 1
    wakeup_r, wakeup_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wakeup_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # wakes the selector below
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    selector.register(wakeup_r, selectors.EVENT_READ)
    send(sock, {"ready": True})
    while True:
        for key, _ in selector.select():
            if key.fileobj is sock:
                try:
                    data, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST, MAX_FDS)
                except OSError:
                    data, fds = b"", []
                if not data:  # the referee is gone or done: nothing to tear down (an interpreter's exit with
                    os._exit(0)  # torch loaded took the referee's close 1.5 s); its children die with it
                start(sock, data, fds)
            else:
                try:
                    while os.read(wakeup_r, 4096):
                        pass
                except BlockingIOError:
                    pass
        reap(sock)


def import_untouched() -> None:
    """EXECUTOR_MODULES imported without asking the CUDA driver anything: torch's extension builder asks whether CUDA
    is available as it is imported (only to warn), and torch answers through the driver, after which no fork of this
    process could use CUDA ("Cannot re-initialize CUDA in forked subprocess"). While they are imported the question
    is answered from the environment: a GPU unless CUDA_VISIBLE_DEVICES hides every one."""
    import torch

    asked = torch.cuda.is_available
    torch.cuda.is_available = lambda: os.environ.get("CUDA_VISIBLE_DEVICES") != ""
    try:
        for name in EXECUTOR_MODULES:
            importlib.import_module(name)
    finally:
        torch.cuda.is_available = asked


def fork_unfit() -> str | None:
    """Why a fork of this process could not use CUDA (something asked the driver after all), else None: a child
    forked now says whether torch finds itself in a bad fork."""
    import torch

    if torch.cuda.is_initialized():
        return "CUDA was initialised in the zygote"
    pid = os.fork()
    if pid == 0:
        if torch.cuda._is_in_bad_fork():
            os._exit(3)
        if os.environ.get("CUDA_VISIBLE_DEVICES") != "" and torch.backends.cuda.is_built():
            try:  # a zygote of executors that use a GPU: one of its forks must be able to start CUDA
                torch.cuda.init()
            except Exception:
                os._exit(4)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return None if os.waitstatus_to_exitcode(status) == 0 else "a fork of the zygote could not use CUDA"


def reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        send(sock, {"exited": pid, "status": status})


def start(sock: socket.socket, data: bytes, fds: list[int]) -> None:
    """One executor, forked (the child never returns); the referee told its pid, or why not."""
    ident = None
    try:
        request = json.loads(data)
        ident = request["id"]
        argv, env, cwd = list(request["argv"]), dict(request["env"]), str(request["cwd"])
        numbers = [int(n) for n in request["fds"]]
        if len(fds) != len(numbers) + 2 or tuple(argv[1:3]) != EXECUTOR_ARGV:
            raise ValueError(f"{len(fds)} descriptors for {len(numbers)} + 2, command line {argv[:3]}")
        nice = int(request.get("nice") or 0)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
    except BaseException:
        for fd in fds:
            os.close(fd)
        send(sock, {"started": ident, "error": traceback.format_exc()[-2000:]})
        return
    if pid == 0:
        code = 127
        try:
            become(argv, env, cwd, nice, fds, numbers)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    for fd in fds:
        os.close(fd)
    send(sock, {"started": ident, "pid": pid})


def become(argv: list[str], env: dict[str, str], cwd: str, nice: int, fds: list[int], numbers: list[int]) -> None:
    """In the forked child: the launcher's process as `subprocess.Popen(..., start_new_session=True)` would have
    started it, then the launcher itself (which never returns)."""
    zygote = os.getppid()
    signal.set_wakeup_fd(-1)
    for number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)
    os.setsid()
    launcher.die_with_parent()
    if os.getppid() != zygote:
        os._exit(137)
    # where the command line and stdio name them: first out of the way of every target, then onto it
    null = os.open(os.devnull, os.O_RDONLY)
    targets = {0: null, 1: fds[0], 2: fds[1], **dict(zip(numbers, fds[2:]))}
    floor = max([*targets, *targets.values()]) + 1
    high = {target: fcntl.fcntl(fd, fcntl.F_DUPFD, floor) for target, fd in targets.items()}
    for target, fd in high.items():
        os.dup2(fd, target, inheritable=True)
    for entry in os.listdir("/proc/self/fd"):  # nothing of the zygote's (its socket) and nothing else
        fd = int(entry)
        if fd not in targets:
            try:
                os.close(fd)
            except OSError:
                pass
    os.chdir(cwd)
    if nice:
        os.nice(nice)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None  # found again from TMPDIR, the executor's own
    sys.argv = [argv[0], *argv[3:]]
    # as the launcher run as a script has it: never the worker's folder, which the candidate writes (the launcher and
    # the init are not contained; they import nothing once the candidate exists, and must find nothing of it if they did)
    sys.path[0] = str(PROJECT_ROOT)
    launcher.main(["--", *argv], run_worker=run_executor)


MADV_POPULATE_WRITE = 23  # Linux 5.14


def refresh_from_environment() -> None:
    """What the zygote's imports computed from its own environment (its folders), computed again from the
    executor's: dynamo's package cache lies in torch's compile cache folder (TORCHINDUCTOR_CACHE_DIR); and the random
    states an interpreter seeds from the system as it starts (Python's, numpy's), seeded again, as a fresh one's."""
    import random

    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    try:
        from torch._dynamo import package
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        package.DynamoCache._path_prefix = os.path.join(cache_dir(), "dynamo")
    except (ImportError, AttributeError):
        pass  # another torch: nothing of the kind to move


def own_pages() -> int:
    """Every page the zygote had touched made this process's own now (copied: madvise MADV_POPULATE_WRITE on each run
    of resident pages of its private writable mappings), as an executor started afresh has them: else the first write
    to each, anywhere later (a reference count, a collection of the garbage collector, inside a clocked window), is a
    page fault and a copy. Pages never touched stay untouched. The bytes made own (0 where the kernel cannot)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
    page = os.sysconf("SC_PAGE_SIZE")
    owned = 0
    with open("/proc/self/maps") as maps:
        regions = [line.split() for line in maps]
    for fields in regions:
        if fields[1][:2] != "rw" or fields[1][3] != "p" or (len(fields) > 5 and fields[5].startswith(("/dev/", "[v"))):
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        resident = ctypes.create_string_buffer((end - start) // page)
        if libc.mincore(start, end - start, resident) != 0:
            continue
        flags = resident.raw
        index = 0
        while index < len(flags):
            if not flags[index] & 1:
                index += 1
                continue
            run = index
            while run < len(flags) and flags[run] & 1:
                run += 1
            if libc.madvise(start + index * page, (run - index) * page, MADV_POPULATE_WRITE) == 0:
                owned += (run - index) * page
            elif ctypes.get_errno() == errno.EINVAL and owned == 0:
                return 0  # a kernel without it
            index = run
    return owned


def run_executor(argv: list[str], env: dict[str, str]) -> None:
    """The launcher's worker, contained: the executor's main, in place of exec (its modules imported already)."""
    os.environ.clear()
    os.environ.update(env)
    sys.path[0] = os.getcwd()  # as `python -m` puts it (contained now)
    from evaluator.executor import __main__ as executor_main
    from evaluator.executor import serve

    refresh_from_environment()
    own_pages()
    now = time.time()
    serve.STARTUP.clear()
    serve.STARTUP.update(python=now, torch=now)  # imported before the fork
    code = 1
    try:
        code = executor_main.main(argv[3:])
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
