"""Turns on one GPU's clock, for the referees of several lanes on it (`--gpus 0,0`: two lanes on GPU 0).

A referee's own work on the device outside its windows (a candidate's start, its checked calls and their holds, the
float64 replays and comparisons) takes most of a candidate's seconds and leaves the device mostly idle; a second lane's
referee can do the same beside it. Nothing may run beside a window, though. So each referee holds a turn:

- **shared** while anything of its own may reach the device (its work beside the other lanes' work of the same kind);
- **exclusive** while it times (a candidate's windows and the calibrator's, a baseline round): no other lane's
  referee holds any turn then;
- **none** while it waits for a request or a turn: then nothing of its own may reach the device. Before it lets go of a
  turn it holds its processes still (the executors, those started ahead) and waits for its own device work (the
  exchanges' page-locking too).

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
        return time.perf_counter() - started

    def someone_waiting(self) -> bool:
        """Whether another referee waits for a turn (it holds the turnstile meanwhile)."""
        try:
            fcntl.flock(self.turnstile, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(self.turnstile, fcntl.LOCK_UN)
        return False

    def close(self) -> None:
        if self.turns < 0:
            return
        self.take(NONE)
        for fd in (self.turns, self.turnstile):
            os.close(fd)
        self.turns = self.turnstile = -1

    __del__ = close  # a referee whose start failed lets go of its turn with it


# -- a referee's turns ---------------------------------------------------------------------------------------------

def open_for(config, device: str) -> DeviceShare | None:
    """The turns of a referee whose GPU `config.device_lanes` lanes share, the shared one taken (None: it has the GPU
    alone)."""
    if device != "cuda" or config.device_lanes <= 1:
        return None
    import torch

    uuid = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid", None)
    key = f"GPU-{uuid}" if uuid is not None else "gpu-" + os.environ.get("CUDA_VISIBLE_DEVICES", "0").replace("/", "_")
    share = DeviceShare(Path(config.cache_dir) / "device-share", key)
    share.take(SHARED)
    return share


def executors_closed(referee) -> None:
    """Returns once `referee`'s judged executors are closed (their contexts' teardown, device work too) and what
    waited for that is over (their compared calls replayed later): each of `referee.closing` set."""
    for closed in list(referee.closing):
        closed.wait()


def hold_still(referee) -> None:
    """Nothing of `referee`'s own left to reach the device: its judged executors closed (their contexts' teardown),
    those started ahead held (one that cannot be is closed, started again in its turn) and their exchanges'
    page-locking over (the driver's work, beside another lane's windows otherwise), its own queued work done.
    (The executor being judged: `timed_turn`.)"""
    from evaluator.referee.beside import close_ahead, hold_ahead

    executors_closed(referee)
    hold_ahead(list(referee.waiting.values()), lambda process: close_ahead(referee.waiting, process))
    for process in list(referee.waiting.values()):
        process.wait_pinned()
    referee._sync()


def take_turn(referee) -> None:
    """The shared turn, before anything of `referee`'s reaches the device; its executors started ahead go on. A referee
    that holds it already lets go and takes it again where another waits for a turn, so that a lane judging candidates
    that are never timed (failures, timeouts) does not keep the other from its windows."""
    share = referee.share
    if share is None:
        return
    if share.state != NONE and share.someone_waiting():
        step_aside(referee)
    if share.state == NONE:
        share.take(SHARED)
        from evaluator.referee.process import resume_all

        resume_all(list(referee.waiting.values()))


def gate_passed(referee) -> None:
    """Once the parent's gate is over (Referee.gate_over: a lane started while the parent gates its batch); the shared
    turn let go while it waits, so that the other lanes on this GPU are not kept from theirs."""
    if not referee.gate_over(0):
        step_aside(referee)
        referee.gate_over()
        take_turn(referee)


def step_aside(referee) -> None:
    """The turn let go while `referee` waits for requests (its processes held still first)."""
    if referee.share is not None and referee.share.state != NONE:
        hold_still(referee)
        referee.share.take(NONE)


class timed_turn:
    """The exclusive turn around what `referee` times (evaluator.referee.Referee.exclusive, inside its holds), then the
    shared turn again. `link`, the executor being judged, is held while a turn is waited for and while the device is
    waited for at either end of the exclusive turn; before that turn is let go the device must fall idle (nothing else
    holds a turn then: what runs is the candidate's, unless the turn began busy). One that cannot be held, or leaves
    work running, is killed inside the turn and judged `runtime_error`: it would run on inside another lane's windows.
    `excuse` is given the seconds waited for turns (neither the candidate's nor the referee's own time)."""

    def __init__(self, referee, link=None, excuse=None):
        self.referee, self.link, self.excuse = referee, link, excuse
        self.share = referee.share

    def __enter__(self):
        self.referee.opened_busy = False
        if self.share is not None:
            from evaluator.referee.clock import IDLE_WAIT_S

            self.referee._sync()
            self._hold()  # judged and killed where it cannot be, the shared turn still held
            try:
                self._wait(EXCLUSIVE)
                # what other lanes queued before they let go: over before any window, else said (time_phase.idle)
                self.referee.opened_busy = self.referee.device_idle(IDLE_WAIT_S) is None
            except BaseException:
                self.share.take(NONE)  # the referee's own failure: nothing of it holds a turn
                raise
            finally:
                self._release()
        self.took = time.time()  # logged with the turn's end (`turn_over`)
        return self

    def __exit__(self, kind, value, traceback) -> None:
        let_go = time.time()
        from evaluator.referee.tuning import profile_log

        profile_log({"event": "turn_over", "took": self.took, "let_go": let_go})
        opened_busy, self.referee.opened_busy = self.referee.opened_busy, False
        if self.share is None:
            return
        from evaluator.referee.session import Judged

        if kind is not None:  # no synchronize or idle wait (a stuck stream would hang them)
            if issubclass(kind, Judged) and self.link is not None:
                self.link.kill(wait_s=5)  # judged already: nothing of it runs into another lane's turn
                self.share.take(SHARED)
            else:
                self.share.take(NONE)  # the referee's own failure: the lane starts another
            return
        self.referee._sync()
        self._hold()
        try:
            from evaluator.referee.clock import IDLE_WAIT_S

            busy = self.referee.device_idle(IDLE_WAIT_S) is None
            if busy and self.referee.close_waiting():  # work its executors started ahead queued at import, perhaps
                busy = self.referee.device_idle(IDLE_WAIT_S) is None
            if busy and not opened_busy:  # else perhaps the other lane's (the candidate is `shaky_timing` already)
                self._fail(f"its device work kept running for {IDLE_WAIT_S:g} s after its windows, its processes held")
            self._wait(SHARED)
        except BaseException:
            if self.share.state == EXCLUSIVE:
                self.share.take(SHARED)
            raise
        finally:
            self._release()

    def _hold(self) -> None:
        hold = getattr(self.link, "hold", None)
        if hold is None:
            return
        try:
            hold()
        except Exception as err:  # noqa: BLE001 - holding.NotHeld: it would run on beside another lane's windows
            self._fail(f"it could not be held still while its lane gave the GPU to another: {err}")

    def _release(self) -> None:
        release = getattr(self.link, "release", None)
        if release is not None:
            release()

    def _fail(self, why: str) -> None:
        """The candidate killed, and its device work waited out while this lane still holds its turn; its verdict."""
        from evaluator.referee.clock import IDLE_WAIT_S
        from evaluator.referee.session import Judged
        from evaluator.wire.records import Phase, Status

        self.link.kill(wait_s=5)
        self.referee.device_idle(IDLE_WAIT_S)
        raise Judged(Status.runtime_error, Phase.time, why)

    def _wait(self, state: str) -> None:
        waited = self.share.take(state)
        if self.excuse is not None:
            self.excuse(waited)
