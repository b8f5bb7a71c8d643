"""Turns on one GPU's clock, for the referees of several lanes on it (`--gpus 0,0`: two lanes on GPU 0).

A referee's own work on the device outside its windows (a candidate's start, its checked calls and their holds, the
float64 replays and comparisons) takes most of a candidate's seconds and leaves the device mostly idle; a second lane's
referee can do the same beside it. Nothing may run beside a window, though. So each referee holds a turn:

- **shared** while anything of its own may reach the device (its work beside the other lanes' work of the same kind);
- **exclusive** while it times (a candidate's windows and the calibrator's, a baseline round): no other lane's
  referee holds any turn then;
- **none** while it waits for a request or a turn: then nothing of its own may reach the device. Before it lets go of a
  turn it holds its processes still (the executors, those started ahead) and waits for its own device work.

The turns are `flock` locks on two files of a folder no executor may read (the build cache's `device-share`, keyed by
the GPU's UUID, so lanes of every run sharing that cache take turns). Every turn is taken through a turnstile (the
second file, held exclusively while a turn is waited for): a referee that asks for the exclusive turn is served before
a referee asking for any turn after it, so two lanes alternate their windows instead of one starving the other
(`flock` wakes every waiter and the first to run wins, often the one that just let go).
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

NONE, SHARED, EXCLUSIVE = "none", "shared", "exclusive"


class DeviceShare:
    """One referee's end of the turns on its GPU (see the module's docstring)."""

    def __init__(self, folder: Path, key: str):
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.turns = os.open(folder / f"{key}.turn", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self.turnstile = os.open(folder / f"{key}.turnstile", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self.state = NONE
        self.waited_s = 0.0  # seconds spent waiting for turns, all told (for the profile)

    def take(self, state: str) -> float:
        """Hold the turn `state` (NONE lets go); the seconds waited for it. From a turn held, the turn is let go
        first and taken again through the turnstile (never converted in place: see the module's docstring)."""
        if state == self.state:
            return 0.0
        if self.state != NONE:
            fcntl.flock(self.turns, fcntl.LOCK_UN)
            self.state = NONE
        if state == NONE:
            return 0.0
        started = time.perf_counter()
        fcntl.flock(self.turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self.turns, fcntl.LOCK_EX if state == EXCLUSIVE else fcntl.LOCK_SH)
        finally:
            fcntl.flock(self.turnstile, fcntl.LOCK_UN)
        self.state = state
        waited = time.perf_counter() - started
        self.waited_s += waited
        return waited

    def close(self) -> None:
        self.take(NONE)
        for fd in (self.turns, self.turnstile):
            os.close(fd)


# -- a referee's turns ---------------------------------------------------------------------------------------------

def open_for(config, device: str) -> DeviceShare | None:
    """The turns of a referee whose GPU `config.device_lanes` lanes share (None: it has the GPU alone)."""
    if device != "cuda" or config.device_lanes <= 1:
        return None
    import torch

    uuid = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid", None)
    key = f"GPU-{uuid}" if uuid is not None else "gpu-" + os.environ.get("CUDA_VISIBLE_DEVICES", "0").replace("/", "_")
    return DeviceShare(Path(config.cache_dir) / "device-share", key)


def hold_still(referee) -> None:
    """Nothing of `referee`'s own left to reach the device: its judged executors closed (their contexts' teardown),
    those started ahead held, its own queued work done. (The executor being judged: `timed_turn`.)"""
    from evaluator.referee.beside import pause_all

    for closed in list(referee.closing):
        closed.wait()
    pause_all(list(referee.waiting.values()))
    referee._sync()


def take_turn(referee) -> None:
    """The shared turn, before anything of `referee`'s reaches the device; its executors started ahead go on."""
    share = referee.share
    if share is not None and share.state == NONE:
        share.take(SHARED)
        from evaluator.referee.process import resume_all

        resume_all(list(referee.waiting.values()))


def step_aside(referee) -> None:
    """The turn let go while `referee` waits for requests (its processes held still first)."""
    if referee.share is not None and referee.share.state != NONE:
        hold_still(referee)
        referee.share.take(NONE)


class timed_turn:
    """The exclusive turn around what `referee` times (evaluator.referee.Referee.exclusive, inside its holds), then the
    shared turn again; `link`, the executor being judged, held while a turn is waited for (a process of a
    candidate's left running could reach the device inside another lane's windows)."""

    def __init__(self, referee, link=None):
        self.referee, self.link = referee, link

    def __enter__(self):
        self._wait_for(EXCLUSIVE)
        if self.referee.share is not None:  # what the other lanes queued before they let go: over before any window
            from evaluator.referee.clock import IDLE_WAIT_S

            self.referee.device_idle(IDLE_WAIT_S)  # still busy: the windows' own waits void them (time_phase.idle)
        from evaluator.referee.tuning import profile_log

        self.took = time.time()
        profile_log({"event": "turn", "lane_pid": os.getpid(), "took": self.took})
        return self

    def __exit__(self, *exc) -> None:
        let_go = time.time()
        self._wait_for(SHARED)
        from evaluator.referee.tuning import profile_log

        profile_log({"event": "turn_over", "took": self.took, "let_go": let_go})

    def _wait_for(self, state: str) -> None:
        share = self.referee.share
        if share is None:
            return
        hold, release = getattr(self.link, "hold", None), getattr(self.link, "release", None)
        self.referee._sync()
        held = False
        if hold is not None:
            try:
                hold()
                held = True
            except Exception:  # noqa: BLE001 - holding.NotHeld: it keeps running; the other lanes' windows see its work
                pass
        try:
            share.take(state)
        finally:
            if held and release is not None:
                release()
