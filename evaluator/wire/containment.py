"""The contract between whoever starts a contained executor (evaluator.referee.launch) and the launcher
that contains it (evaluator.executor.launcher): the environment variables that carry the plan and
what is in force, the mechanisms and what each one covers, and the paths every plan treats alike.

Standard library only: the launcher imports it before anything else, still single-threaded.
"""

from __future__ import annotations

from collections.abc import Iterable
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



# Files no plan may make readable, whatever hierarchy holds them.
SYSTEM_SECRETS = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", "/etc/sudoers", "/etc/sudoers.d",
                  "/etc/ssh", "/etc/security/opasswd")
SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/etc", "/proc", "/sys")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
DEVICE_GLOBS = ("nvidia*", "nvidia-caps/*")
# What a build must not see (evaluator.executor.launcher.hide_gpu): every GPU device node and folder.
GPU_GLOBS = ("/dev/nvidia*", "/dev/dri", "/dev/kfd")


def within(path: str | Path, folder: str | Path) -> bool:
    path, folder = str(path), str(folder).rstrip("/") or "/"
    return path == folder or path.startswith(folder + "/") or folder == "/"


def dedup(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(str(i) for i in items))
