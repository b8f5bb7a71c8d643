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

Where neither is possible (few cores and no cgroup the harness may make), builds only run niced, and each
verdict says so (`TimingCheck.builds`). `HARNESS_BUILD_ISOLATION=cores|frozen|niced` chooses one, for
measuring what each costs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from evaluator.wire import cgroups

MODES = ("cores", "frozen", "niced")
MIN_BUILD_CORES = 2


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

    def describe(self, lane: int) -> str:
        """For the verdicts of lane `lane` (TimingCheck.builds)."""
        if self.mode == "cores":
            return (f"on cores {_ranges(self.build_cores or [])}, apart from this lane's "
                    f"{_ranges(self.lane_cores[lane])}")
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

    def close(self) -> None:
        if self.lane_groups:
            self.lane_groups[0].remove(wait_s=5.0)
        elif self.builds is not None:
            self.builds.remove(wait_s=5.0)


def plan(lanes: int) -> Placement:
    """The placement of a batch with `lanes` lanes on this machine (see the module's docstring)."""
    cores = sorted(os.sched_getaffinity(0))
    wanted = os.environ.get("HARNESS_BUILD_ISOLATION", "")
    per_lane = lane_core_count(len(cores), lanes)
    enough = len(cores) - lanes * per_lane >= MIN_BUILD_CORES
    why = []
    if wanted in ("", "cores") and enough:
        taken = [cores[i * per_lane:(i + 1) * per_lane] for i in range(lanes)]
        # a group each all the same (never frozen here): a build's whole group is killed when it ends
        return Placement("cores", lane_cores=taken, build_cores=cores[lanes * per_lane:],
                         builds=cgroups.root_group("builds"))
    if wanted == "cores":
        why.append(f"{len(cores)} cores are too few for {lanes} lane(s) of {per_lane} and {MIN_BUILD_CORES} for builds")
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
