"""Containment of the worker and of every process it starts, from before Python starts it to its exit.

The parent (evaluator.parent.sandbox) never starts `evaluator.worker` directly: it starts THIS file as a
launcher, with the worker's command line after `--` and a plan (`plan()`, JSON in the environment):
which folders the worker may write, which hierarchies it may read, which devices it may use, which
paths it must not even read. The launcher, still single-threaded and before any candidate code
exists, applies what the kernel offers and execs the worker, so the restrictions hold for the
worker's every thread and every process it starts (compilers, ninja, anything a candidate spawns):

* `pid_namespace` (+ `user_namespace` where it can be made, `net_namespace`): unshare(2), then a
  small init is PID 1 of the new PID namespace and the worker is PID 2. When the worker exits,
  the init exits, and the kernel kills every process left in the namespace: a child started with
  `start_new_session=True` dies with it. The parent kills the launcher's process group and every
  process of its session on a timeout; the init follows the launcher (PR_SET_PDEATHSIG).
  The new network namespace holds only a loopback device that is down: nothing to connect to.
* `landlock` (Landlock filesystem rules, through `landlockpy`): writes only under the worker's own
  folder (its HOME, TMPDIR and caches are there) and its extension build folder, plus the device
  files CUDA needs (read/write/ioctl); reads (and execution) only in system and Python hierarchies,
  the evaluator's own package and the problem; the result store, the logs and the build cache
  (other candidates' builds) are carved out of whatever hierarchy would contain them. A Landlock
  domain also forbids ptrace-style access (ptrace, /proc/PID/mem, process_vm_readv) to any
  process outside it.
* `landlock_net` (Landlock ABI >= 4): no TCP bind or connect, on any address.
* `landlock_scope` (ABI >= 6): no signals to processes outside the domain (the parent, the init),
  no abstract unix sockets outside it.
* `seccomp` (libseccomp, through its Python bindings `seccomp` or `pyseccomp`): socket(2) denied
  for every family (TCP, UDP, unix, raw, netlink); ptrace, process_vm_readv/writev, pidfd_getfd,
  setsid (so nothing leaves the worker's session, the parent's kill reaches it all), new
  namespaces, io_uring (which would bypass the socket rule), mounts, modules, bpf, perf events,
  keyrings, handle-based opens and the clock denied with EPERM.

Each mechanism is probed after it is applied (a write next to the worker's folder must fail, a TCP
connect must fail with EACCES, socket(2) must fail, ...), and the launcher writes one
`containment` message on the verdict channel before it execs the worker: what is in force,
what was verified, and why anything is missing. The parent (`assess()`) turns it into the
verdict's `containment` record, and into an `unsandboxed` flag naming the requirements no
mechanism covered, whenever one is missing.

This file runs as a script before anything else (`python .../launcher.py -- worker argv`): it imports
only the contract (evaluator.wire.containment) and the rules (evaluator.executor.lockdown), both of the
standard library alone, and `landlockpy` / `seccomp` only when they are installed. Every module it and the
init use is imported at the top: once the candidate exists nothing is imported in them (they are not
contained, and the worker's folder, which the candidate writes, may lie on a search path).
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import resource
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

# Run as a script, Python put this file's folder first on sys.path; the package's root goes there instead
# (whatever PYTHONPATH the worker is given), so `evaluator.*` is this checkout's and no module of this
# folder is importable under a bare name. (Imported, by evaluator.executor.zygote, it changes nothing.)
if __name__ == "__main__":
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from evaluator.executor.lockdown import (  # noqa: E402
    CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWUSER, MS_NODEV, MS_NOEXEC,
    MS_BIND, MS_NOSUID, MS_PRIVATE, MS_RDONLY, MS_REC, PR_SET_PDEATHSIG, Report, apply_landlock, apply_seccomp,
    libc_handle)
from evaluator.wire.cgroups import join_self  # noqa: E402
from evaluator.wire.containment import DISABLE_ENV, GPU_GLOBS, IN_FORCE_ENV, OFF_ENV, PLAN_ENV, within  # noqa: E402


def enter_namespaces(report: Report) -> bool:
    """unshare(2) into a new PID namespace (with a user namespace when one can be made, so that
    root inside is not root outside, and a network namespace). True when a PID namespace was
    entered: the next fork is its PID 1."""
    for name in ("pid_namespace", "user_namespace", "net_namespace"):
        if name in report.disabled:
            report.set(name, "missing", f"disabled by {DISABLE_ENV}")
    if "pid_namespace" in report.disabled:
        return False
    libc = libc_handle()
    uid, gid = os.geteuid(), os.getegid()
    attempts = []
    for user in (True, False):
        for net in (True, False):
            if (user and "user_namespace" in report.disabled) or (net and "net_namespace" in report.disabled):
                continue
            attempts.append((CLONE_NEWPID | CLONE_NEWNS | (CLONE_NEWUSER if user else 0) | (CLONE_NEWNET if net else 0),
                             user, net))
    errors = []
    for flags, user, net in attempts:
        if libc.unshare(flags) != 0:
            errors.append(f"unshare({'user+' if user else ''}pid{'+net' if net else ''}): "
                          f"{os.strerror(ctypes.get_errno())}")
            continue
        if user:
            try:
                for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"0 {uid} 1"),
                                   ("/proc/self/gid_map", f"0 {gid} 1")):
                    with open(path, "w") as handle:
                        handle.write(text)
                report.set("user_namespace", "applied", f"root inside maps to uid {uid} outside, nothing else")
            except OSError as err:
                report.set("user_namespace", "missing", f"its uid/gid maps could not be written: {err}")
        elif "user_namespace" not in report.disabled:
            report.set("user_namespace", "missing", "; ".join(errors) or "not attempted")
        if net:
            report.set("net_namespace", "applied", "a network namespace of its own (loopback only, down)")
        elif "net_namespace" not in report.disabled:
            report.set("net_namespace", "missing", "; ".join(e for e in errors if "net" in e) or "not attempted")
        # A mount namespace of its own, so that the init can mount a /proc of the new PID namespace
        # (CUDA reads /proc/<its pid>/...): first make every mount private, so nothing propagates out.
        if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
            report.set("pid_namespace", "applied", "PID namespace, but mounts could not be made private "
                       f"({os.strerror(ctypes.get_errno())}): /proc stays the host's")
            report.proc = False
        else:
            report.set("pid_namespace", "applied", "PID 1 of a namespace of its own is the worker's init")
            report.proc = True
        return True
    detail = "; ".join(errors) or "not attempted"
    for name in ("pid_namespace", "user_namespace", "net_namespace"):
        if name not in report.mechanisms:
            report.set(name, "missing", detail)
    return False


def die_with_parent() -> None:
    """SIGKILL to this process when the thread that started it exits (PR_SET_PDEATHSIG)."""
    libc_handle().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)




def check_namespaces(report: Report) -> None:
    """Probes, from the worker-to-be, of the namespaces `enter_namespaces` made."""
    if report.mechanisms.get("pid_namespace", {}).get("state") == "applied":
        if os.getpid() == 2:
            report.set("pid_namespace", "verified", "the worker is PID 2 of its own PID namespace; when it exits, "
                       "PID 1 exits and the kernel kills every process left in it; "
                       + report.mechanisms["pid_namespace"]["detail"])
        else:
            report.set("pid_namespace", "missing", f"the worker is PID {os.getpid()}, not 2")
    if report.mechanisms.get("net_namespace", {}).get("state") == "applied":
        try:
            with open("/proc/self/net/dev") as dev:
                interfaces = [line.split(":")[0].strip() for line in dev.readlines()[2:]]
        except OSError as err:
            interfaces = [f"? ({err})"]
        if interfaces == ["lo"]:
            report.set("net_namespace", "verified", "its own network namespace: only a loopback device, down")
        else:
            report.set("net_namespace", "missing", f"interfaces seen: {', '.join(interfaces)}")
    if report.mechanisms.get("user_namespace", {}).get("state") == "applied":
        try:
            with open("/proc/self/uid_map") as handle:
                mapping = handle.read().split()
        except OSError:
            mapping = []
        if len(mapping) == 3 and mapping[2] == "1":
            report.set("user_namespace", "verified", f"uid 0 inside is uid {mapping[1]} outside; no capability "
                       "outside its namespaces")




def hide_protected_folders(report: Report) -> list[str]:
    """An empty, read-only tmpfs over each protected folder that holds nothing the worker is granted
    (the store's folder, the logs), in the worker's own mount namespace: Landlock keeps a protected
    file unreadable, but a folder whose parent may be listed would still show its names. Only where the
    namespace's mounts are private (nothing propagates out). The folders hidden."""
    if not report.proc or "landlock" in report.disabled:
        return []
    plan = report.plan
    granted = [*plan.get("write", []), *plan.get("exact", []), *plan.get("read", []), *plan.get("list", [])]
    libc, hidden = libc_handle(), []
    for folder in plan.get("protect", []):
        if not os.path.isdir(folder) or any(within(path, folder) for path in granted):
            continue
        if libc.mount(b"tmpfs", folder.encode(), b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                      b"size=4k,mode=000") == 0:
            hidden.append(folder)
    return hidden




def place(plan: dict) -> None:
    """Before anything else, in the launcher: the cgroup that holds every process it will start (the referee
    freezes it; evaluator.wire.cgroups), the cores it and they may run on (a build's are never a lane's, and
    seccomp denies sched_setaffinity from here on), and for a build, its session's niceness: with the
    kernel's autogroup scheduling each session is scheduled as one, so a build's own niceness would rank it
    only among its own processes. Every process it starts is the first the kernel's out-of-memory killer takes:
    past import nothing caps a candidate's host memory, and a referee holding gigabytes of float64 copies would
    otherwise be the larger process."""
    try:
        with open("/proc/self/oom_score_adj", "w") as oom:  # raising it needs no privilege; children inherit it
            oom.write("1000")
    except OSError:
        pass
    join_self(plan.get("cgroup"))
    if plan.get("cores"):
        try:
            os.sched_setaffinity(0, plan["cores"])
        except OSError:
            pass
    if plan.get("nice"):
        try:
            with open("/proc/self/autogroup", "w") as autogroup:
                autogroup.write(str(int(plan["nice"])))
        except OSError:
            pass  # no autogroup scheduling in this kernel: plain niceness is what counts


def hide_gpu(report: Report) -> None:
    """A build (plan `gpu` false) sees no GPU: in its own mount namespace each GPU device node is covered by
    /dev/null and each GPU device folder by an empty read-only tmpfs, so no process of it can open one
    (Landlock, too, grants it none). Reported as the `no_gpu` mechanism."""
    if report.plan.get("gpu", True):
        return
    patterns = report.plan.get("gpu_globs") or GPU_GLOBS  # (a test names files of its own)
    found = sorted({p for pattern in patterns for p in glob.glob(pattern)})
    if not found:
        report.set("no_gpu", "verified", "no GPU device node on this machine")
        return
    if not report.proc:
        report.set("no_gpu", "missing", f"no private mount namespace to cover {len(found)} GPU device node(s) in "
                   "(Landlock grants none of them)")
        return
    libc, null = libc_handle(), os.stat("/dev/null").st_rdev
    for path in found:
        if os.path.isdir(path):
            libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, b"size=4k,mode=000")
        else:
            libc.mount(b"/dev/null", path.encode(), None, MS_BIND, None)
    left = [p for pattern in patterns for p in glob.glob(pattern)
            if not os.path.isdir(p) and os.stat(p).st_rdev != null]
    if left:
        report.set("no_gpu", "missing", f"GPU device nodes still reachable: {', '.join(left[:4])}")
    else:
        report.set("no_gpu", "verified", f"{len(found)} GPU device path(s) covered in its mount namespace")


def become_worker(argv: list[str], report: Report, channel_fd: int | None,
                  run_worker: Callable[[list[str], dict[str, str]], None] | None = None) -> None:
    """The worker, contained and reported, then exec'd (or `run_worker(argv, env)` in its place: a zygote's child,
    evaluator.executor.zygote, whose interpreter has the executor's modules imported already)."""
    check_namespaces(report)
    hide_protected_folders(report)
    hide_gpu(report)
    try:
        apply_landlock(report)
    except Exception as err:  # noqa: BLE001 - reported, and the worker still runs (flagged unsandboxed)
        for name in ("landlock", "landlock_net", "landlock_scope"):
            report.set(name, "missing", f"{type(err).__name__}: {err}"[:300])
    apply_seccomp(report)
    send_report(channel_fd, report)
    env = dict(os.environ)
    env.pop(PLAN_ENV, None)
    env[IN_FORCE_ENV] = ",".join(n for n, m in report.mechanisms.items() if m["state"] != "missing")
    env[OFF_ENV] = ",".join(sorted(report.disabled))
    if run_worker is not None:
        run_worker(argv, env)
    os.execve(argv[0], argv, env)


def send_report(channel_fd: int | None, report: Report) -> None:
    """One `containment` line on the verdict channel, before the worker (or any candidate code) runs."""
    if channel_fd is None:
        return
    line = json.dumps({"kind": "containment", "containment": report.as_dict()}) + "\n"
    data = line.encode()
    while data:
        data = data[os.write(channel_fd, data):]


def run_init(argv: list[str], report: Report, channel_fd: int | None, status_fd: int,
             run_worker: Callable[[list[str], dict[str, str]], None] | None = None) -> None:
    """PID 1 of the new namespace: starts the worker (PID 2), reaps whatever is orphaned to it, and
    exits when the worker does, which makes the kernel kill everything left in the namespace. Not
    restricted itself, so the worker's Landlock domain cannot signal or trace it."""
    die_with_parent()
    if report.proc:
        libc = libc_handle()
        if libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) != 0:
            report.mechanisms["pid_namespace"]["detail"] += (f"; /proc of the namespace could not be mounted "
                                                             f"({os.strerror(ctypes.get_errno())})")
        else:
            report.mechanisms["pid_namespace"]["detail"] += "; its own /proc (no other process visible)"
    worker = os.fork()
    if worker == 0:
        os.close(status_fd)
        try:
            become_worker(argv, report, channel_fd, run_worker)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(127)
    _close_worker_fds(argv)
    status = 0
    while True:
        try:
            pid, status_now = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid == worker:
            status = status_now
            break
    os.write(status_fd, str(status).encode())
    os._exit(0)


def mirror(status: int) -> None:
    """Exit as the worker did: its exit code, or its signal."""
    if os.WIFEXITED(status):
        os._exit(os.WEXITSTATUS(status))
    number = os.WTERMSIG(status) if os.WIFSIGNALED(status) else signal.SIGKILL
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if number not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    finally:
        os._exit(128 + number)


def _channel_fd(argv: list[str]) -> int | None:
    try:
        return int(argv[argv.index("--fd") + 1])
    except (ValueError, IndexError):
        return None


def _close_worker_fds(argv: list[str]) -> None:
    """The worker's descriptors (its channel, the referee's commands, the exchange, the stage), closed in the
    launcher and the init once the worker has them: only the worker holds them open."""
    for option in ("--fd", "--commands", "--exchange", "--stage"):
        try:
            os.close(int(argv[argv.index(option) + 1].partition(":")[0]))  # --stage is FD:BYTES
        except (ValueError, IndexError, OSError):
            pass


def main(argv: list[str], run_worker: Callable[[list[str], dict[str, str]], None] | None = None) -> None:
    if "--" not in argv:
        sys.exit("usage: launcher.py -- WORKER ARGV...")
    worker_argv = argv[argv.index("--") + 1:]
    # The launcher dies with whoever started it (the referee, or the parent for a build): its init,
    # and with it the whole namespace, follow. Started by a parent that is already gone: stop here.
    parent = os.getppid()
    die_with_parent()
    if os.getppid() != parent:
        os._exit(137)
    plan = json.loads(os.environ.get(PLAN_ENV) or "{}")
    place(plan)
    report = Report(plan)
    channel_fd = _channel_fd(worker_argv)
    if not enter_namespaces(report):
        become_worker(worker_argv, report, channel_fd, run_worker)  # the launcher itself becomes the worker
    status_r, status_w = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(status_r)
        try:
            run_init(worker_argv, report, channel_fd, status_w, run_worker)
        finally:
            os._exit(127)
    os.close(status_w)
    _close_worker_fds(worker_argv)
    while True:
        try:
            _, init_status = os.waitpid(init, 0)
            break
        except InterruptedError:
            continue
    data = os.read(status_r, 64)
    mirror(int(data) if data else init_status)


if __name__ == "__main__":
    main(sys.argv[1:])
