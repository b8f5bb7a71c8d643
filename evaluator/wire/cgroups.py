"""cgroup v2 groups of the harness's own: what holds an executor (or every build) still.

A process joins a group by writing its PID into the group's `cgroup.procs`; what it forks afterwards is
born in the same group, whatever process group, session or namespace it moves to, and only a writer of
some `cgroup.procs` could take it out (Landlock denies an executor every write outside its own folders).
Writing 1 to `cgroup.freeze` stops every task of the group and of the groups below it: the kernel
reports `frozen 1` in `cgroup.events` once each has left user space and the kernel, and a frozen task
stays frozen until the group is thawed, whatever signals it gets (a SIGCONT from a candidate's own timer
included); only SIGKILL ends it. `cgroup.kill` kills every task of the group at once.

The harness makes its groups below the group it runs in, when the cgroup v2 hierarchy is mounted and
that group may be written (root on most machines, or a delegated group); `usable()` says whether it
can. Where it cannot, the referee holds executors with SIGSTOP (evaluator.referee.holding) and builds
are kept off the timing cores otherwise (evaluator.parent.cores).

Standard library only: the launcher (evaluator.executor.launcher) joins its group with `join_self`
before anything else runs.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

FREEZE_POLL_S = 0.0002
# A task's last run before it froze is charged to its group as it switches out, a moment after the kernel may
# report the group frozen: what a hold begins with is read again until two reads this far apart agree.
SETTLE_S = 0.0005


@dataclass(frozen=True)
class Held:
    """What a frozen group was once it had settled (`Group.settle`): its tasks, and the CPU time charged to it
    and the groups below it. A frozen task runs nothing, so both stay as they are until the group is thawed,
    unless a task dies (a fatal signal ends a frozen task: a candidate's own timer can carry SIGKILL, and its
    exit, tearing down its memory, runs on a core meanwhile) or something else moves tasks in or out."""

    tasks: frozenset[int]
    usage_usec: int | None


class Moved(str):
    """What a frozen group did although frozen (`Group.changed_since`), as a sentence. `cpu_time_alone`: CPU time
    charged and nothing else, every task still there and the group still frozen. That is seen of honest executors:
    a task preempted on its way into the freezer after it had counted itself frozen is charged once it switches
    out (an honest candidate's group was charged 106 us once in 64, cold, beside builds on a 16-core host); a handled
    signal sent to a frozen task does the same (it wakes in the kernel and freezes again)."""

    cpu_time_alone: bool = False


def _mount_point() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (from /proc/self/mountinfo)."""
    try:
        with open("/proc/self/mountinfo") as mountinfo:
            for line in mountinfo:
                before, _, after = line.partition(" - ")
                if after.split()[:1] == ["cgroup2"]:
                    return Path(before.split()[4])
    except OSError:
        pass
    return None


def own_group() -> Path | None:
    """This process's cgroup v2 folder, or None without a cgroup v2 hierarchy."""
    mount = _mount_point()
    if mount is None:
        return None
    try:
        with open("/proc/self/cgroup") as cgroup:
            for line in cgroup:
                if line.startswith("0::"):
                    folder = mount / line.strip()[3:].lstrip("/")
                    return folder if folder.is_dir() else None
    except OSError:
        pass
    return None


_usable: tuple[bool, str] | None = None


def usable() -> tuple[bool, str]:
    """(whether groups can be made below this process's own, freezing and holding processes; why not)."""
    global _usable
    if _usable is None:
        if os.environ.get("HARNESS_CGROUPS", "1") == "0":
            _usable = (False, "switched off (HARNESS_CGROUPS=0)")
        else:
            try:
                probe = Group.create(None, "probe")
                probe.remove()
                _usable = (True, str(probe.path.parent))
            except OSError as err:
                _usable = (False, f"no cgroup v2 group can be made here: {err}")
    return _usable


class Group:
    """One cgroup v2 group of the harness's (see the module's docstring)."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, parent: Group | None, name: str) -> Group:
        """A new group below `parent` (None: below this process's own group), named `name` and a token."""
        if parent is None:
            base = own_group()
            if base is None:
                raise OSError("no cgroup v2 hierarchy is mounted")
        else:
            base = parent.path
        path = base / f"kh-{name}-{os.getpid()}-{secrets.token_hex(3)}"
        path.mkdir()
        if not (path / "cgroup.freeze").exists():  # the root group has none, and a v1 hierarchy is no use
            path.rmdir()
            raise OSError(f"{path} has no cgroup.freeze")
        return cls(path)

    def join(self, pid: int = 0) -> None:
        """Move process `pid` (0: the writer itself) into this group."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def pids(self) -> list[int]:
        """The processes in this group and every group below it."""
        found = []
        for folder, _, _ in os.walk(self.path):
            try:
                found += [int(p) for p in Path(folder, "cgroup.procs").read_text().split()]
            except (OSError, ValueError):
                continue
        return found

    def holds(self, pid: int) -> bool:
        try:
            return pid in {int(p) for p in (self.path / "cgroup.procs").read_text().split()}
        except (OSError, ValueError):
            return False

    def tasks(self) -> frozenset[int]:
        """Every thread in this group and the groups below it."""
        found: set[int] = set()
        for folder, _, _ in os.walk(self.path):
            try:
                found.update(int(t) for t in Path(folder, "cgroup.threads").read_text().split())
            except (OSError, ValueError):
                continue
        return frozenset(found)

    def usage_usec(self) -> int | None:
        """CPU time charged to this group and every group below it (`cpu.stat`, there with or without the cpu
        controller), in microseconds; None where it cannot be read."""
        try:
            for line in (self.path / "cpu.stat").read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == "usage_usec":
                    return int(value)
        except (OSError, ValueError):
            pass
        return None

    def settle(self, wait_s: float) -> Held:
        """What the group is once frozen and settled: its CPU time read until two reads SETTLE_S apart agree with the
        group frozen at both (a task dying of a signal leaves the frozen state until its exit, and its teardown, are
        over), at most `wait_s`; then its tasks."""
        usage = self.usage_usec()
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            time.sleep(SETTLE_S)
            again = self.usage_usec()
            if again == usage and self.frozen():
                break
            usage = again
        return Held(tasks=self.tasks(), usage_usec=usage)

    def changed_since(self, held: Held) -> Moved | None:
        """What the group did since `held` although frozen (None: nothing): tasks that ended or appeared, CPU time
        charged to it, or the group no longer frozen. Frozen is read before and after the rest: a task dying of a
        signal leaves the frozen state until its teardown is over, so a death begun between the reads is not CPU
        time alone."""
        what = []
        frozen = self.frozen()
        usage = self.usage_usec()
        charged = usage is not None and held.usage_usec is not None and usage != held.usage_usec
        if charged:
            what.append(f"{usage - held.usage_usec} us of CPU time was charged to it")
        tasks = self.tasks()
        if ended := sorted(held.tasks - tasks):
            what.append(f"{len(ended)} of its task(s) ended ({_few(ended)})")
        if born := sorted(tasks - held.tasks):
            what.append(f"{len(born)} task(s) appeared in it ({_few(born)})")
        if not (frozen and self.frozen()):
            what.insert(0, "its cgroup was no longer frozen")
        if not what:
            return None
        moved = Moved("; ".join(what))
        moved.cpu_time_alone = charged and len(what) == 1
        return moved

    def children(self) -> list[Group]:
        """The groups directly below this one."""
        try:
            return [Group(entry) for entry in sorted(self.path.iterdir()) if entry.is_dir()]
        except OSError:
            return []

    def populated(self) -> bool:
        """Whether any task is left in it or below it (`cgroup.events`); False once it is gone."""
        try:
            return "populated 1" in (self.path / "cgroup.events").read_text()
        except OSError:
            return False

    def empty_within(self, wait_s: float) -> bool:
        """Wait until no task is left in it (a killed process's teardown included), at most `wait_s`."""
        deadline = time.monotonic() + wait_s
        while self.populated():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def frozen(self) -> bool:
        try:
            return "frozen 1" in (self.path / "cgroup.events").read_text()
        except OSError:
            return False

    def freeze(self, wait_s: float) -> bool:
        """Freeze it; True once the kernel reports every task frozen (within `wait_s`)."""
        (self.path / "cgroup.freeze").write_text("1")
        deadline = time.monotonic() + wait_s
        while not self.frozen():
            if time.monotonic() > deadline:
                return False
            time.sleep(FREEZE_POLL_S)
        return True

    def thaw(self) -> None:
        try:
            (self.path / "cgroup.freeze").write_text("0")
        except OSError:
            pass

    def kill(self) -> None:
        """SIGKILL to every task in it and below (`cgroup.kill`, else one by one)."""
        try:
            (self.path / "cgroup.kill").write_text("1")
            return
        except OSError:
            pass
        for pid in self.pids():
            try:
                os.kill(pid, 9)
            except OSError:
                pass

    def remove(self, wait_s: float = 0.0) -> bool:
        """Remove it and the groups below it once they are empty (waiting up to `wait_s`); True when gone."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                for folder, _, _ in sorted(os.walk(self.path), key=lambda entry: -len(entry[0])):
                    os.rmdir(folder)
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.01)


def _few(ids: list[int]) -> str:
    return ", ".join(map(str, ids[:5])) + (", ..." if len(ids) > 5 else "")


def root_group(name: str) -> Group | None:
    """A group of the harness's below this process's own (None where none can be made), after removing the
    empty ones left by harness processes that are gone (killed before they could)."""
    if not usable()[0]:
        return None
    base = own_group()
    for folder in base.glob("kh-*") if base is not None else ():
        parts = folder.name.split("-")
        if len(parts) >= 3 and parts[-2].isdigit() and not Path(f"/proc/{parts[-2]}").exists():
            Group(folder).remove()
    try:
        return Group.create(None, name)
    except OSError:
        return None


def pin(pid: int, cores) -> None:
    """Every thread of process `pid` onto `cores` (threads it starts later inherit it)."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        tids = [pid]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:
            pass


def join_self(path: str | None) -> str | None:
    """For the launcher: this process into the group at `path`; None, or why it could not."""
    if not path:
        return None
    try:
        Group(Path(path)).join(0)
        return None
    except OSError as err:
        return f"{type(err).__name__}: {err}"
