"""Containment of the worker and of every process it starts, from before Python starts it to its exit.

The parent (evaluator.sandbox) never starts `evaluator.worker` directly: it starts THIS file as a
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

This file runs as a script before anything else (`python .../containment.py -- worker argv`):
it imports nothing of the evaluator, and `landlockpy` / `seccomp` only when they are installed.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import socket
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

PLAN_ENV = "KH_CONTAINMENT_PLAN"
# Set by the launcher for the worker: the mechanisms it verified, which the worker confirms in itself.
IN_FORCE_ENV = "KH_CONTAINMENT_IN_FORCE"
OFF_ENV = "KH_CONTAINMENT_OFF"  # and those left out on purpose (the worker never sees HARNESS_* settings)
# Mechanisms to leave out, comma-separated (`all` for every one): for checking what each one stops.
# Verdicts made so carry the `unsandboxed` flag like any other missing mechanism.
DISABLE_ENV = "HARNESS_CONTAINMENT_OFF"

MECHANISMS = ("pid_namespace", "user_namespace", "net_namespace", "landlock", "landlock_net", "landlock_scope",
              "seccomp", "seccomp_unix")
WORKER_MECHANISMS = ("seccomp_unix",)  # applied (and reported) by the worker itself, not the launcher
# What the issue asks for -> the mechanisms that give it (any one verified is enough).
REQUIREMENTS: dict[str, tuple[str, ...]] = {
    # writes only under its own folders, the store neither writable nor readable
    "files": ("landlock",),
    # no TCP, UDP, unix, raw or netlink socket (unix ones are closed once CUDA is initialised)
    "sockets": ("seccomp_unix",),
    # every process it starts dies with it: a PID namespace, or setsid denied (nothing leaves the
    # session) and the parent killing the whole session
    "processes": ("pid_namespace", "seccomp"),
    # no ptrace, no other process's memory
    "ptrace": ("seccomp", "landlock"),
    # no signals to processes outside
    "signals": ("landlock_scope", "pid_namespace"),
}

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 1 << 14, 1 << 18

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
)
NAMESPACE_FLAGS = (CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID,
                   CLONE_NEWNET)

# Files no plan may make readable, whatever hierarchy holds them.
SYSTEM_SECRETS = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", "/etc/sudoers", "/etc/sudoers.d",
                  "/etc/ssh", "/etc/security/opasswd")
SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/etc", "/proc", "/sys")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
DEVICE_GLOBS = ("nvidia*", "nvidia-caps/*")


# ------------------------------------------------------------------------------------------------ parent side

def plan(workdir: Path, extension_dir: Path, problem_location: Path, env: Mapping[str, str],
         protect: Iterable[Path] = (), disable: Iterable[str] = ()) -> dict:
    """What the launcher is asked to apply for one worker (JSON-able). `env` is the worker's
    environment (PATH, PYTHONPATH, LD_LIBRARY_PATH, CUDA_HOME are read from it); `protect` holds
    paths the worker must not read even where a readable hierarchy holds them (the store, the
    logs, the build cache, the checkout): what the worker needs inside them (the evaluator package,
    the problem) is granted by name."""
    import site
    import sysconfig

    evaluator_dir = Path(__file__).resolve().parent
    # Python itself, the evaluator and the problem: granted as they are
    exact = [sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(sys.executable).resolve().parent)]
    exact += [p for p in sysconfig.get_paths().values() if p]
    for getter in (site.getsitepackages, site.getusersitepackages):
        try:
            found = getter()
        except Exception:
            continue
        exact += [found] if isinstance(found, str) else list(found)
    exact += [str(evaluator_dir), str(problem_location)]
    # the bytecode cache (PYTHONPYCACHEPREFIX) is read here, never written: the referee writes it
    exact += [env[name] for name in ("CUDA_HOME", "CUDA_PATH", "PYTHONUSERBASE", "PYTHONPYCACHEPREFIX") if env.get(name)]
    # system hierarchies and search paths: granted except where they hold a protected path
    read: list[str] = list(SYSTEM_READ) + [p for p in sys.path if p]
    for name in ("PYTHONPATH", "PATH", "LD_LIBRARY_PATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH", "LIBRARY_PATH"):
        read += [p for p in env.get(name, "").split(os.pathsep) if p]
    # a toolchain on PATH (`/opt/gcc/bin`) reads its own prefix (`/opt/gcc/lib/gcc/...`)
    for folder in env.get("PATH", "").split(os.pathsep):
        prefix = os.path.dirname(os.path.realpath(folder)) if os.path.isabs(folder) else "/"
        if os.path.basename(folder.rstrip("/")) in ("bin", "sbin") and prefix != "/":
            read.append(prefix)
    listed = [str(evaluator_dir.parent)]  # names only: Python's import system lists the folders on sys.path
    if Path(problem_location).is_file():
        listed.append(str(Path(problem_location).parent))

    def real(paths: Iterable[str]) -> list[str]:
        return _dedup(os.path.realpath(p) for p in paths if os.path.isabs(p) and os.path.exists(p))

    return {
        "workdir": str(workdir),
        "write": real([str(workdir), str(extension_dir)]),
        "exact": real(exact),
        "read": real(read),
        "list": real(listed),
        "devices": list(DEVICES),
        "device_globs": list(DEVICE_GLOBS),
        "protect": _dedup([os.path.realpath(p) for p in protect] + list(SYSTEM_SECRETS)),
        "disable": sorted(set(disable) & set(MECHANISMS)),
    }


def disabled_mechanisms(env: Mapping[str, str]) -> set[str]:
    words = {w.strip() for w in env.get(DISABLE_ENV, "").split(",") if w.strip()}
    return set(MECHANISMS) if "all" in words else words & set(MECHANISMS)


def launch_command(worker_argv: list[str]) -> list[str]:
    """The command that starts the worker through this launcher."""
    return [sys.executable, str(Path(__file__).resolve()), "--", *worker_argv]


def assess(report: dict | None, updates: Iterable[dict] = ()) -> tuple[dict, list[str]]:
    """The verdict's `containment` (a dict for records.Containment) from the launcher's report and
    the worker's `updates` (mechanism entries it applied itself before the candidate's import), and
    the requirements no working mechanism covers (empty: fully contained)."""
    if report is not None:
        report = {**report, "mechanisms": list(report.get("mechanisms", [])) + list(updates)}
    if report is None:
        mechanisms = [{"name": name, "state": "missing", "detail": "the launcher sent no containment report"}
                      for name in MECHANISMS]
    else:
        by_name = {m.get("name"): m for m in report.get("mechanisms", []) if isinstance(m, dict)}  # later wins
        mechanisms = []
        for name in MECHANISMS:  # the parent asked for every one: one absent from the report is missing
            entry = by_name.get(name) or {"state": "missing", "detail": "not reported"}
            state = entry.get("state") if entry.get("state") in ("verified", "applied", "missing") else "missing"
            mechanisms.append({"name": name, "state": state, "detail": str(entry.get("detail", ""))[:500]})
    working = {m["name"] for m in mechanisms if m["state"] != "missing"}
    missing = [req for req, names in REQUIREMENTS.items() if not working & set(names)]
    writable = [str(p) for p in (report or {}).get("writable", [])][:8]
    return {"mechanisms": mechanisms, "missing": missing, "writable": writable}, missing


def unsandboxed_reason(containment: dict, missing: list[str]) -> str:
    lacking = [f"{m['name']} ({m['detail']})" for m in containment["mechanisms"] if m["state"] == "missing"]
    return (f"not contained for: {', '.join(missing)}; missing: " + "; ".join(lacking))[:1000]


def session_members(leader: int) -> list[int]:
    """Processes whose session or process group is `leader` (read from /proc)."""
    members = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
            if int(fields[2]) == leader or int(fields[3]) == leader:
                members.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return members


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


# ------------------------------------------------------------------------------------------------ launcher side

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
                               for n in MECHANISMS if n not in WORKER_MECHANISMS],
                "writable": self.plan.get("write", [])}


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _within(path: str | Path, folder: str | Path) -> bool:
    path, folder = str(path), str(folder).rstrip("/") or "/"
    return path == folder or path.startswith(folder + "/") or folder == "/"


def _dedup(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(str(i) for i in items))


def enter_namespaces(report: Report) -> bool:
    """unshare(2) into a new PID namespace (with a user namespace when one can be made, so that
    root inside is not root outside, and a network namespace). True when a PID namespace was
    entered: the next fork is its PID 1."""
    for name in ("pid_namespace", "user_namespace", "net_namespace"):
        if name in report.disabled:
            report.set(name, "missing", f"disabled by {DISABLE_ENV}")
    if "pid_namespace" in report.disabled:
        return False
    libc = _libc()
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


def _set_pdeathsig() -> None:
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


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
        if not exact and any(_within(real, p) for p in protect):
            return
        inner = [p for p in protect if _within(p, real) and p != real]
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
    libc, hidden = _libc(), []
    for folder in plan.get("protect", []):
        if not os.path.isdir(folder) or any(_within(path, folder) for path in granted):
            continue
        if libc.mount(b"tmpfs", folder.encode(), b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                      b"size=4k,mode=000") == 0:
            hidden.append(folder)
    return hidden


def become_worker(argv: list[str], report: Report, channel_fd: int | None) -> None:
    check_namespaces(report)
    hide_protected_folders(report)
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
    os.execve(argv[0], argv, env)


def send_report(channel_fd: int | None, report: Report) -> None:
    """One `containment` line on the verdict channel, before the worker (or any candidate code) runs."""
    if channel_fd is None:
        return
    line = json.dumps({"kind": "containment", "containment": report.as_dict()}) + "\n"
    data = line.encode()
    while data:
        data = data[os.write(channel_fd, data):]


def run_init(argv: list[str], report: Report, channel_fd: int | None, status_fd: int) -> None:
    """PID 1 of the new namespace: starts the worker (PID 2), reaps whatever is orphaned to it, and
    exits when the worker does, which makes the kernel kill everything left in the namespace. Not
    restricted itself, so the worker's Landlock domain cannot signal or trace it."""
    _set_pdeathsig()
    if report.proc:
        libc = _libc()
        if libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) != 0:
            report.mechanisms["pid_namespace"]["detail"] += (f"; /proc of the namespace could not be mounted "
                                                             f"({os.strerror(ctypes.get_errno())})")
        else:
            report.mechanisms["pid_namespace"]["detail"] += "; its own /proc (no other process visible)"
    worker = os.fork()
    if worker == 0:
        os.close(status_fd)
        try:
            become_worker(argv, report, channel_fd)
        except BaseException:
            import traceback

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
        import resource

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


def main(argv: list[str]) -> None:
    if "--" not in argv:
        sys.exit("usage: containment.py -- WORKER ARGV...")
    worker_argv = argv[argv.index("--") + 1:]
    # The launcher dies with whoever started it (the referee, or the parent for a build): its init,
    # and with it the whole namespace, follow. Started by a parent that is already gone: stop here.
    parent = os.getppid()
    _set_pdeathsig()
    if os.getppid() != parent:
        os._exit(137)
    plan = json.loads(os.environ.get(PLAN_ENV) or "{}")
    report = Report(plan)
    channel_fd = _channel_fd(worker_argv)
    if not enter_namespaces(report):
        become_worker(worker_argv, report, channel_fd)  # the launcher itself becomes the worker
    status_r, status_w = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(status_r)
        try:
            run_init(worker_argv, report, channel_fd, status_w)
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
