"""The kernel's rules on an executor: Landlock (files, TCP, signals), the seccomp filter, and the check,
in the executor itself before the candidate exists, that they hold (`confirm_in_worker`). Applied by the
launcher (evaluator.executor.launcher) before it execs the executor; `deny_unix_sockets` by the executor
once CUDA is initialised.

Standard library only (`landlockpy` / `seccomp` when installed), like the launcher that imports it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
from collections.abc import Iterable
from pathlib import Path

from evaluator.wire.containment import DISABLE_ENV, MECHANISMS, WORKER_MECHANISMS, within

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 1 << 12, 1 << 14, 1 << 18

# Denied with EPERM by the seccomp filter (names this libseccomp does not know are skipped).
DENIED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp", "process_madvise",
    "setsid",                                        # nothing leaves the worker's session
    "unshare", "setns",                              # no new namespaces (clone's flags below)
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsmount", "fsconfig",
    "fspick", "mount_setattr",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
    "swapon", "swapoff", "acct", "quotactl", "bpf", "perf_event_open", "fanotify_init", "userfaultfd",
    "keyctl", "add_key", "request_key", "open_by_handle_at", "name_to_handle_at",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname",
    "iopl", "ioperm",
    "sched_setaffinity",                             # no process leaves the cores it was started on
)
FALLOC_FL_PUNCH_HOLE, MADV_REMOVE = 0x02, 9
NAMESPACE_FLAGS = (CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID,
                   CLONE_NEWNET)


class Report:
    def __init__(self, plan: dict):
        self.plan = plan
        self.disabled = set(plan.get("disable", []))
        self.mechanisms: dict[str, dict] = {}
        self.proc = False  # whether the init is to mount a /proc of its PID namespace

    def set(self, name: str, state: str, detail: str) -> None:
        self.mechanisms[name] = {"name": name, "state": state, "detail": detail}

    def wanted(self, name: str) -> bool:
        if name in self.disabled:
            self.set(name, "missing", f"disabled by {DISABLE_ENV}")
            return False
        return True

    def as_dict(self) -> dict:
        return {"mechanisms": [self.mechanisms.get(n, {"name": n, "state": "missing", "detail": "not attempted"})
                               for n in MECHANISMS if n not in WORKER_MECHANISMS]
                              + [m for n, m in self.mechanisms.items() if n not in MECHANISMS],
                "writable": self.plan.get("write", [])}



def libc_handle():
    return ctypes.CDLL(None, use_errno=True)



def confirm_in_worker(in_force: str) -> str | None:
    """Run by the worker before the candidate is imported: do the launcher's restrictions hold in
    this process (they outlive exec: no_new_privs, the seccomp filter, the PID namespace)? None
    when they do; otherwise what does not, and the candidate must not run."""
    names = set(filter(None, in_force.split(",")))
    status = {}
    try:
        with open("/proc/self/status") as handle:
            status = dict(line.rstrip("\n").split(":\t", 1) for line in handle if ":\t" in line)
    except OSError as err:
        return f"cannot read /proc/self/status: {err}"
    wrong = []
    if names & {"landlock", "seccomp"} and status.get("NoNewPrivs", "").strip() != "1":
        wrong.append("no_new_privs is not set")
    if "seccomp" in names and status.get("Seccomp", "").strip() != "2":
        wrong.append(f"seccomp mode is {status.get('Seccomp', '?').strip()}, not 2 (filter)")
    if "pid_namespace" in names and os.getpid() != 2 and len(status.get("NSpid", "").split()) < 2:
        wrong.append("the worker is not in a PID namespace of its own")
    return "containment reported by the launcher is not in force in the worker: " + "; ".join(wrong) if wrong else None



def _open_rule_target(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def apply_landlock(report: Report) -> None:
    plan = report.plan
    wanted = {name: report.wanted(name) for name in ("landlock", "landlock_net", "landlock_scope")}
    if not wanted["landlock"]:
        for name in ("landlock_net", "landlock_scope"):
            if wanted[name]:
                report.set(name, "missing", "Landlock itself is disabled")
        return
    try:
        import landlockpy as ll
    except ImportError as err:
        for name, on in wanted.items():
            if on:
                report.set(name, "missing", f"the landlockpy package is not installed ({err})")
        return
    try:
        abi = ll.abi_version()
    except Exception as err:  # noqa: BLE001 - whatever the kernel says, it is reported
        abi, why = 0, str(err)
    else:
        why = "the kernel offers no Landlock (ENOSYS/EOPNOTSUPP)"
    if abi < 1:
        for name, on in wanted.items():
            if on:
                report.set(name, "missing", why)
        return
    net = ll.AccessNet.BIND_TCP | ll.AccessNet.CONNECT_TCP | ll.AccessNet.BIND_UDP | ll.AccessNet.CONNECT_SEND_UDP
    scope = ll.Scope.ABSTRACT_UNIX_SOCKET | ll.Scope.SIGNAL
    ruleset = ll.Ruleset(handled_net=net if wanted["landlock_net"] else ll.AccessNet.NONE,
                         scoped=scope if wanted["landlock_scope"] else ll.Scope.NONE)
    handled = ruleset.handled_fs
    A = ll.AccessFS
    file_rights = (A.EXECUTE | A.WRITE_FILE | A.READ_FILE | A.TRUNCATE | A.IOCTL_DEV) & handled
    read = (A.READ_FILE | A.READ_DIR | A.EXECUTE) & handled
    write = handled & ~(A.EXECUTE | A.MAKE_CHAR | A.MAKE_BLOCK | A.IOCTL_DEV)
    device = (A.READ_FILE | A.WRITE_FILE | A.TRUNCATE | A.IOCTL_DEV) & handled
    protect = list(plan.get("protect", []))
    skipped: list[str] = []

    def allow(path: str, access) -> None:
        info = _open_rule_target(path)
        if info is None:
            return
        if not os.path.isdir(path):
            access &= file_rights
        if not access:
            return
        try:
            ruleset.allow_path(path, access)
        except OSError as err:
            skipped.append(f"{path}: {err}")

    def grant(path: str, access, seen: set, exact: bool = False) -> None:
        """`access` on `path`, except beneath the protected paths: those are carved out by
        granting the entries around them one level at a time. A path inside a protected one is
        left out, unless it is `exact` (asked for by name: Python, the evaluator, the problem)."""
        real = os.path.realpath(path)
        if real in seen or not os.path.exists(real):
            return
        seen.add(real)
        if not exact and any(within(real, p) for p in protect):
            return
        inner = [p for p in protect if within(p, real) and p != real]
        if not inner:
            allow(real, access)
            return
        allow(real, A.READ_DIR & access)  # names only; every entry but the protected ones in full
        try:
            entries = sorted(os.listdir(real))
        except OSError:
            return
        for entry in entries:
            grant(os.path.join(real, entry), access, seen)

    for path in plan.get("exact", []):
        grant(path, read, set(), exact=True)
    for path in plan.get("read", []):
        grant(path, read, set())
    for path in plan.get("list", []):
        allow(path, A.READ_DIR & handled)
    for path in plan.get("write", []):
        allow(path, write | read)
    devices = list(plan.get("devices", []))
    for pattern in plan.get("device_globs", []):
        devices += [str(p) for p in sorted(Path("/dev").glob(pattern))]
    for path in devices:
        allow(path, device)
    allow("/dev", A.READ_DIR & handled)
    # Its own /proc/<pid> (the worker keeps this process's pid through exec): the CUDA driver writes
    # there while it initialises (cudaGetDeviceCount fails with error 304 otherwise; /proc/self/task/*/comm
    # and the like). No other process's /proc entries.
    allow(os.path.realpath("/proc/self"), (A.READ_FILE | A.READ_DIR | A.WRITE_FILE | A.TRUNCATE) & handled)
    ruleset.restrict()  # also sets no_new_privs
    ruleset.close()

    # probes: each restriction must actually refuse something
    probe = os.path.join(os.path.dirname(os.path.realpath(plan["workdir"])), f".kh-landlock-probe-{os.getpid()}")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except PermissionError:
        present = [p for p in protect if os.path.isfile(p)]
        blocked = [p for p in present if not _readable(p)]
        report.set("landlock", "verified", f"ABI {abi}; a write beside its folder was refused; writable: "
                   f"{', '.join(plan.get('write', []))}; {len(blocked)} of {len(present)} protected files unreadable"
                   + (f"; {len(skipped)} rule(s) skipped: {skipped[0]}" if skipped else ""))
    except OSError as err:
        report.set("landlock", "applied", f"ABI {abi}; the write probe failed otherwise: {err}")
    else:
        os.unlink(probe)
        report.set("landlock", "missing", f"ABI {abi}, yet a write beside the worker's folder succeeded")
    if wanted["landlock_net"]:
        if not ruleset.handled_net & ll.AccessNet.CONNECT_TCP:
            report.set("landlock_net", "missing", f"Landlock ABI {abi} has no network rules (ABI 4)")
        else:
            probe_socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                probe_socket.connect(("127.0.0.1", 9))
            except PermissionError:
                udp = "and UDP " if ruleset.handled_net & ll.AccessNet.CONNECT_SEND_UDP else ""
                report.set("landlock_net", "verified", f"TCP {udp}bind/connect denied; a connect to 127.0.0.1 was refused")
            except OSError as err:
                report.set("landlock_net", "applied", f"TCP bind/connect denied; the probe failed otherwise: {err}")
            else:
                report.set("landlock_net", "missing", "a TCP connect to 127.0.0.1 succeeded")
            finally:
                probe_socket.close()
    if wanted["landlock_scope"]:
        if not ruleset.scoped & ll.Scope.SIGNAL:
            report.set("landlock_scope", "missing", f"Landlock ABI {abi} has no scopes (ABI 6)")
        else:
            try:
                os.kill(os.getppid(), 0)
            except PermissionError:
                report.set("landlock_scope", "verified", "signals and abstract unix sockets outside refused")
            except OSError as err:
                report.set("landlock_scope", "applied", f"the signal probe failed otherwise: {err}")
            else:
                report.set("landlock_scope", "missing", "a signal to the parent was allowed")


def _readable(path: str) -> bool:
    try:
        os.close(os.open(path, os.O_RDONLY))
        return True
    except OSError:
        return False


def _seccomp_module():
    try:
        import seccomp  # libseccomp's own bindings (Debian's python3-seccomp)

        return seccomp
    except ImportError:
        import pyseccomp  # the same API over libseccomp.so through ctypes (a pure-Python wheel)

        return pyseccomp


def apply_seccomp(report: Report) -> None:
    if not report.wanted("seccomp"):
        return
    try:
        sc = _seccomp_module()
    except (ImportError, RuntimeError, OSError) as err:
        report.set("seccomp", "missing", f"no libseccomp bindings (seccomp or pyseccomp): {err}")
        return
    try:
        rules = sc.SyscallFilter(sc.ALLOW)
        deny = sc.ERRNO(errno.EPERM)
        unknown = []
        for name in DENIED_SYSCALLS:
            try:
                rules.add_rule(deny, name)
            except (ValueError, OSError):
                unknown.append(name)
        try:  # clone3's flags sit in memory seccomp cannot read: ENOSYS makes libc fall back to clone
            rules.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        except (ValueError, OSError):
            unknown.append("clone3")
        for flag in NAMESPACE_FLAGS:
            rules.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        # Every socket family but AF_UNIX: the CUDA driver opens unix sockets while it initialises
        # (cudaGetDeviceCount fails with error 304 without them); the worker closes them too once
        # CUDA is up (`deny_unix_sockets`).
        rules.add_rule(deny, "socket", sc.Arg(0, sc.NE, socket.AF_UNIX))
        # No hole punched in shared memory (the exchange, a host stage): its pages would part from the ones the GPU
        # has pinned, and the referee's writes to the exchange's words would no longer reach its stream's waits.
        rules.add_rule(deny, "fallocate", sc.Arg(1, sc.MASKED_EQ, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_PUNCH_HOLE))
        rules.add_rule(deny, "madvise", sc.Arg(2, sc.EQ, MADV_REMOVE))
        rules.load()
    except Exception as err:  # noqa: BLE001 - a kernel without seccomp filters, ...
        report.set("seccomp", "missing", f"the filter could not be loaded: {type(err).__name__}: {err}")
        return
    try:
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()
    except PermissionError:
        report.set("seccomp", "verified", f"{sc.__name__}: socket(2) refused for every family but AF_UNIX (a UDP "
                   f"socket was refused); ptrace, setsid, ... denied: {len(DENIED_SYSCALLS) - len(unknown)} syscalls"
                   + (f" (unknown here: {', '.join(unknown)})" if unknown else ""))
    else:
        report.set("seccomp", "missing", "socket(2) still worked after the filter was loaded")


def deny_unix_sockets(disabled: Iterable[str] = ()) -> dict:
    """Run by the worker once CUDA is initialised and before the candidate is imported: a second
    seccomp filter, on every thread (TSYNC), refusing socket(2) altogether. The mechanism entry
    (`seccomp_unix`) for the verdict's containment."""
    name = "seccomp_unix"
    if name in set(disabled):
        return {"name": name, "state": "missing", "detail": f"disabled by {DISABLE_ENV}"}
    try:
        sc = _seccomp_module()
        rules = sc.SyscallFilter(sc.ALLOW)
        rules.set_attr(sc.Attr.CTL_TSYNC, 1)
        rules.add_rule(sc.ERRNO(errno.EPERM), "socket")
        rules.load()
    except Exception as err:  # noqa: BLE001 - no bindings, no seccomp: reported
        return {"name": name, "state": "missing", "detail": f"{type(err).__name__}: {err}"[:300]}
    try:
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
    except PermissionError:
        return {"name": name, "state": "verified", "detail": "socket(2) refused on every thread from before the "
                "candidate's import (a unix socket was refused)"}
    return {"name": name, "state": "missing", "detail": "a unix socket could still be made"}


