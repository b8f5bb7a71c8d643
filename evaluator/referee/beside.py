"""What a referee holds while it times anything, beyond the executor being timed: the builds' cgroup (where its lane
freezes one: evaluator.parent.placement) and the executors started ahead; and what they did although held.

A frozen task dies of a fatal signal, and a stopped one runs if something continues it (a candidate's own timer can
do either): a window in which anything held beside it ran or died is void (evaluator.referee.time_phase: timed
again). `broken` is read before and after every window the referee times.
"""

from __future__ import annotations

from evaluator.referee.process import ExecutorProcess, pause_all, resume_all
from evaluator.wire import cgroups

BUILDS_FREEZE_S = 1.0  # how long `hold` waits for every build to be frozen


class Beside:
    def __init__(self, builds: cgroups.Group | None):
        self.builds = builds
        self.builds_late = 0  # times the builds were not all frozen within BUILDS_FREEZE_S (said in verdicts)
        self.builds_held: cgroups.Held | None = None  # the builds' frozen cgroup as `hold` found it
        self.paused: list[ExecutorProcess] = []       # the executors started ahead that `hold` holds

    def hold(self, waiting: list[ExecutorProcess]) -> None:
        self.builds_held = None
        if self.builds is not None:
            if self.builds.freeze(BUILDS_FREEZE_S):  # each freezes as it leaves the kernel
                self.builds_held = self.builds.settle(BUILDS_FREEZE_S)
            else:
                self.builds_late += 1
        pause_all(waiting)
        self.paused = waiting

    def release(self) -> None:
        waiting, self.paused, self.builds_held = self.paused, [], None
        resume_all(waiting)
        if self.builds is not None:
            self.builds.thaw()

    def broken(self) -> str | None:
        """What was held beside the executor being timed and ran or died although held, since the last look (None:
        nothing). Each part found so is held again as it is now, so that the next look starts from there."""
        why = []
        if self.builds is not None and self.builds_held is not None:
            if (broken := self.builds.changed_since(self.builds_held)) is not None:
                why.append(f"the builds: {broken}")
                self.builds_held = self.builds.settle(BUILDS_FREEZE_S)
        for process in self.paused:
            if (broken := process.hold_broken(process.paused_times)) is not None:
                why.append(f"an executor started ahead: {broken}")
        return "; ".join(why) or None
