"""What a referee holds while it times anything, beyond the executor being timed: the builds' cgroup (where its lane
freezes one: evaluator.parent.placement) and the executors started ahead; and what they did although held.

A frozen task dies of a fatal signal, and a stopped one runs if something continues it (a candidate's own timer can
do either): a window in which anything held beside it ran or died is void (evaluator.referee.time_phase: timed
again). `broken` is read before and after every window the referee times.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

from evaluator.referee import holding
from evaluator.referee.holding import signal_groups
from evaluator.referee.process import ExecutorProcess, resume_all
from evaluator.wire import cgroups

BUILDS_FREEZE_S = 1.0  # how long `hold` waits for every build to be frozen


def pause_all(processes: list[ExecutorProcess]) -> None:
    """SIGSTOP to all of each, while another candidate is timed or baselines are: they can start nothing
    on the device, and their output is not read meanwhile (it would take this process's time while it
    measures). Each is found as a hold finds it (evaluator.referee.holding: its tree, not a pass over
    every process of a machine busy with builds). Their deadlines still run."""
    for process in [p for p in processes if p.proc is not None and p.proc.poll() is None and not p.paused]:
        process.paused = True
        process.reading.clear()
        process.paused_times = {}
        try:
            process.paused_pids = process.stop_all(process.paused_times)
        except holding.NotHeld:  # still forking after seconds: its group and session, as they are now
            if process.frozen_by_group:
                process.group.freeze(0.0)  # each task freezes as it leaves the kernel
            else:
                signal_groups([process.proc], signal.SIGSTOP)
            process.paused_pids = None


def hold_ahead(waiting: list[ExecutorProcess], drop: Callable[[ExecutorProcess], None]) -> list[ExecutorProcess]:
    """The executors started ahead paused (`pause_all`) and those alive held still; each that could not be held is
    `drop`ped (not beside a clock: closed, started again in its turn)."""
    pause_all(waiting)
    held = [p for p in waiting if p.proc is not None and p.proc.poll() is None]
    for process in [p for p in held if not p.held_still()]:
        held.remove(process)
        drop(process)
    return held


def close_ahead(waiting: dict, process: ExecutorProcess) -> None:
    """An executor started ahead closed and out of `waiting` (started again in its turn), nothing of it left before
    anything is timed again: a CUDA context's teardown takes seconds, and would run inside the next windows."""
    for key in [key for key, p in waiting.items() if p is process]:
        del waiting[key]
    process.close(wait_s=1)
    if process.group is not None:
        process.group.empty_within(10.0)


class Beside:
    """What `hold` holds, and what broke its hold: each build's group apart, and each executor started ahead. A part that
    ran or died although held is ended at once (`drop`: an executor started ahead, started again in its turn; a build
    killed, its verdict the build's own): a neighbour can void a window or two of another candidate's, never keep
    voiding them until that candidate is `shaky_timing`. A build's group charged CPU time alone (evaluator.wire.
    cgroups.Moved: every task still there, still frozen), as a task preempted on its way into the freezer leaves, is
    spared once: the window is void all the same, and a second time the build is killed."""

    def __init__(self, builds: cgroups.Group | None, drop: Callable[[ExecutorProcess], None] = lambda process: None):
        self.builds, self.drop = builds, drop
        self.builds_late = 0  # times the builds were not all frozen within BUILDS_FREEZE_S (said in verdicts)
        self.builds_held: dict[Path, cgroups.Held] | None = None  # each build's frozen group as `hold` found it
        self.paused: list[ExecutorProcess] = []                    # the executors started ahead that `hold` holds
        self.killed: set[Path] = set()                               # the builds' groups this hold killed
        self.spared: set[Path] = set()                               # builds charged CPU time alone once (all holds)

    def hold(self, waiting: list[ExecutorProcess]) -> None:
        self.builds_held, self.killed = None, set()
        if self.builds is not None:
            if self.builds.freeze(BUILDS_FREEZE_S):  # each freezes as it leaves the kernel
                self.builds_held = self._settled()
            else:
                self.builds_late += 1
        self.paused = hold_ahead(waiting, self.drop)

    def release(self) -> None:
        waiting, self.paused, self.builds_held = self.paused, [], None
        resume_all(waiting)
        if self.builds is not None:
            self.builds.thaw()

    def _settled(self) -> dict[Path, cgroups.Held]:
        """Each build's group as it settled, but those this hold killed (their exits charge CPU time for a while yet,
        and they are over: watched no longer)."""
        return {child.path: child.settle(BUILDS_FREEZE_S) for child in self.builds.children()
                if child.path not in self.killed}

    def broken(self) -> str | None:
        """What was held beside the executor being timed and ran or died although held, since the last look (None:
        nothing). The builds' group not frozen (yet) is broken too. Each part found so is ended (see the class)."""
        why = []
        if self.builds is not None:
            if self.builds_held is None:
                if not self.builds.frozen():
                    why.append("the builds: their cgroup is not all frozen")
                else:
                    self.builds_held = self._settled()  # frozen late: watched from now on
            else:
                for path, held in self.builds_held.items():  # a build begun meanwhile was born frozen: not its doing
                    group = cgroups.Group(path)
                    if (broken := group.changed_since(held) if path.exists() else
                            ("its group was removed" if held.tasks else None)) is not None:
                        if getattr(broken, "cpu_time_alone", False) and path not in self.spared:
                            self.spared.add(path)
                            why.append(f"a build: {broken} (spared once)")
                            continue
                        why.append(f"a build: {broken} (killed)")
                        group.kill()
                        self.killed.add(path)
                self.builds_held = self._settled() if why else self.builds_held
        for process in list(self.paused):
            if (broken := process.hold_broken(process.paused_times)) is not None:
                why.append(f"an executor started ahead: {broken} (stopped, started again in its turn)")
                self.paused.remove(process)
                self.drop(process)
        return "; ".join(why) or None
