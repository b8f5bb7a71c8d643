"""Where a batch's builds run while its lanes time: never on the cores a clock uses.

A build imports its candidate to call `load_inline`, so it runs candidate code, beside candidates and
baselines being timed. It sees no GPU (evaluator.executor.launcher.hide_gpu); this module keeps it off
the CPU the timing needs, in one of two ways:

- `cores`: each lane's referee, and every executor it starts, runs on cores of the lane's own
  (`lane_cores`), and the builds on the others (`build_cores`). The launcher places each process before
  anything runs, and seccomp denies sched_setaffinity, so neither side can move. Taken where the machine
  has enough cores: two to four per lane and at least two left for the builds.
- `frozen`: the builds share every core, but every build lies in one cgroup below a chain of one group per
  lane, and a lane's referee freezes its group while it times anything (a baseline round, a candidate's
  calls and the calibrator's beside them): the builds then stop until the lane thaws it (a group is frozen
  while any group above it is).

In mode `cores` a lane's cores are lent to the builds running while the lane waits for one: nothing queued at its
referee, which has judged a candidate already or answered its `ready` request, sent first, once its start and the
round at its start were over (a referee times only within a candidate's judgement and that round). Builds started
meanwhile still start on the builds' own cores; the lane takes its cores back before it hands its referee the next
candidate, the builds frozen meanwhile, and goes on only once no thread of any build may run on them (`take_back`).
A build cannot move itself (seccomp), so only what it forks while lent inherits the wider set, and is moved back
with it.

Where neither is possible (few cores and no cgroup the harness may make), builds only run niced, and each
verdict says so (`TimingCheck.builds`). The static checks' worker, which a source can keep busy, runs niced always and
in mode `cores` on the builds' cores (`keep_gate`). `HARNESS_BUILD_ISOLATION=cores|frozen|niced` chooses one, and
`HARNESS_LEND_CORES=0` keeps every lane's cores from the builds, for measuring what each costs.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

from evaluator.checks import bounded
from evaluator.wire import cgroups

MODES = ("cores", "frozen", "niced")
MIN_BUILD_CORES = 2
FREEZE_WAIT_S = 1.0  # for the builds' group to freeze as a lane takes its cores back, else those outside are ended


def lane_core_count(cores: int, lanes: int) -> int:
    """Cores each lane keeps to itself: two to four, a quarter of its share of the machine."""
    return max(2, min(4, cores // (4 * max(1, lanes))))


@dataclass
class Placement:
    """How one batch keeps its builds away from its lanes' clocks (see the module's docstring)."""

    mode: str
    lane_cores: list[list[int]] = field(default_factory=list)   # mode `cores`: lane i's cores
    build_cores: list[int] | None = None                         # mode `cores`: the builds'
    lane_groups: list[cgroups.Group] = field(default_factory=list)  # mode `frozen`: lane i freezes its group
    builds: cgroups.Group | None = None  # each build's group lies below it (mode `frozen`: frozen with the lanes')
    why: str = ""
    lent: set[int] = field(default_factory=set)  # mode `cores`: the lanes whose cores the builds may use now
    lending: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # each stretch in which some lane's cores were lent: its wall seconds and the CPU seconds the builds' group took
    # in it (harness bench --throughput: what lending gave the builds); where the stretch began and at what usage
    lent_stretches: list[tuple[float, float]] = field(default_factory=list)
    _lent_since: tuple[float, int] | None = field(default=None, repr=False)

    def describe(self, lane: int) -> str:
        """For the verdicts of lane `lane` (TimingCheck.builds)."""
        if self.mode == "cores":
            lent = " except while it waited for a build with nothing to time" if self.can_lend() else ""
            return (f"on cores {_ranges(self.build_cores or [])}, apart from this lane's "
                    f"{_ranges(self.lane_cores[lane])}{lent}")
        if self.mode == "frozen":
            return "frozen (their cgroup) whenever this lane timed anything"
        return f"niced only, beside the clock ({self.why})"

    def cores_of(self, lane: int) -> list[int] | None:
        return self.lane_cores[lane] if self.mode == "cores" and lane < len(self.lane_cores) else None

    def group_of(self, lane: int) -> cgroups.Group | None:
        return self.lane_groups[lane] if self.mode == "frozen" and lane < len(self.lane_groups) else None

    def build_group(self) -> cgroups.Group | None:
        """A group of its own for one build, below the builds' (where groups can be made): killed whole when the
        build ends (evaluator.referee.process.ExecutorProcess.kill), so nothing it started outlives it."""
        if self.builds is None:
            return None
        try:
            return cgroups.Group.create(self.builds, "b")
        except OSError:
            return None

    def can_lend(self) -> bool:
        """Whether a waiting lane's cores may go to the builds (mode `cores`, their threads found in their group)."""
        return self.mode == "cores" and self.builds is not None and os.environ.get("HARNESS_LEND_CORES", "1") != "0"

    def lend(self, lane: int) -> None:
        """Lane `lane`'s cores to every build thread running now (see the module's docstring)."""
        with self.lending:
            if not self.lent:
                usage = self.builds.usage_usec()
                self._lent_since = (time.monotonic(), usage) if usage is not None else None
            self.lent.add(lane)
            _move(self.builds, self._allowed(), every=True)

    def take_back(self, lane: int) -> None:
        """Lane `lane`'s cores back: returns once no build thread may run on them. The builds' group is frozen
        meanwhile: a fork under way completes before its process freezes and its child is born frozen, so every
        thread is listed and none starts as they are moved. Where the group does not freeze in time, each build
        with a thread still on other cores is ended, its whole group (a fork under way included)."""
        with self.lending:
            self.lent.discard(lane)
            allowed, ended = self._allowed(), []
            try:
                frozen = self.builds.freeze(FREEZE_WAIT_S)
            except OSError:
                frozen = False
            try:
                if frozen:
                    _move(self.builds, allowed, every=False)
                else:
                    for build in self.builds.children():
                        if _move(build, allowed, every=False):
                            build.kill()
                            ended.append(build)
            finally:
                self.builds.thaw()
            if not self.lent and self._lent_since is not None:
                since, usage = self._lent_since
                now = self.builds.usage_usec()
                if now is not None:
                    self.lent_stretches.append((time.monotonic() - since, (now - usage) / 1e6))
                self._lent_since = None
            for build in ended:
                build.empty_within(5.0)

    def _allowed(self) -> set[int]:
        return set(self.build_cores or []).union(*(self.lane_cores[lane] for lane in self.lent))

    def keep_gate(self, pid: int) -> None:
        """The static checks' worker (evaluator.checks.bounded), which a source can keep busy, on the builds' cores."""
        cgroups.pin(pid, self.build_cores)

    def close(self) -> None:
        bounded.keep_beside_builds(None, only=self.keep_gate)  # where it was, unless another batch placed it since
        if self.lane_groups:
            self.lane_groups[0].remove(wait_s=5.0)
        elif self.builds is not None:
            self.builds.remove(wait_s=5.0)


def release(holder) -> None:
    """The placement a batch's holder (an Evaluator) keeps, closed and forgotten, where it keeps one."""
    if holder.placement is not None:
        holder.lent_stretches += holder.placement.lent_stretches
        holder.placement.close()
        holder.placement = None


def core_split(lanes: int) -> tuple[list[list[int]], list[int]] | None:
    """Mode `cores` for a batch of `lanes` lanes on this machine: each lane's cores and the builds'; None where it is
    not taken (too few cores, or HARNESS_BUILD_ISOLATION names another mode)."""
    cores = sorted(os.sched_getaffinity(0))
    per_lane = lane_core_count(len(cores), lanes)
    if os.environ.get("HARNESS_BUILD_ISOLATION", "") not in ("", "cores") \
            or len(cores) - lanes * per_lane < MIN_BUILD_CORES:
        return None
    return [cores[i * per_lane:(i + 1) * per_lane] for i in range(lanes)], cores[lanes * per_lane:]


def plan(lanes: int) -> Placement:
    """The placement of a batch with `lanes` lanes on this machine (see the module's docstring)."""
    wanted = os.environ.get("HARNESS_BUILD_ISOLATION", "")
    split = core_split(lanes)
    why = []
    if split is not None:
        # a group each all the same (never frozen here): a build's whole group is killed when it ends
        placement = Placement("cores", lane_cores=split[0], build_cores=split[1], builds=cgroups.root_group("builds"))
        bounded.keep_beside_builds(placement.keep_gate)  # the static checks' worker with them
        return placement
    if wanted == "cores":
        cores = len(os.sched_getaffinity(0))
        why.append(f"{cores} cores are too few for {lanes} lane(s) of {lane_core_count(cores, lanes)} and "
                   f"{MIN_BUILD_CORES} for builds")
    if wanted in ("", "cores", "frozen"):
        chain = _group_chain(lanes)
        if chain is not None:
            return Placement("frozen", lane_groups=chain[:-1], builds=chain[-1])
        why.append(f"no cgroup can be made ({cgroups.usable()[1]})")
    if not why:
        why.append(f"HARNESS_BUILD_ISOLATION={wanted}" if wanted else "neither cores apart nor a cgroup")
    return Placement("niced", why="; ".join(why))


def _group_chain(lanes: int) -> list[cgroups.Group] | None:
    """One group per lane, each inside the one before, and the builds' group inside the last."""
    chain: list[cgroups.Group] = []
    try:
        top = cgroups.root_group("builds")
        if top is None:
            return None
        chain.append(top)
        for lane in range(1, lanes):
            chain.append(cgroups.Group.create(chain[-1], f"lane{lane}"))
        chain.append(cgroups.Group.create(chain[-1], "all"))
        return chain
    except OSError:
        if chain:
            chain[0].remove()
        return None


def _move(group: cgroups.Group, allowed: set[int], every: bool) -> bool:
    """Every thread in `group` and below (`every`), or those that may run outside `allowed`, onto `allowed`: whether
    any was outside."""
    outside = False
    for tid in group.tasks():
        try:
            if every or not os.sched_getaffinity(tid) <= allowed:
                outside = True
                os.sched_setaffinity(tid, allowed)
        except OSError:
            continue  # gone
    return outside


def _ranges(cores: list[int]) -> str:
    """`0-3,8` for [0, 1, 2, 3, 8]."""
    parts, start = [], None
    for i, core in enumerate(cores):
        if start is None:
            start = core
        if i + 1 == len(cores) or cores[i + 1] != core + 1:
            parts.append(f"{start}-{core}" if core != start else str(core))
            start = None
    return ",".join(parts)
