"""What this process started and has not closed (its executors, referees and builds: `LIVE`), and the stop of it all
on an interrupt, after which nothing more is started (`STOPPED`)."""

from __future__ import annotations

import threading
import time

LIVE: set = set()  # this process's executors and referees not yet closed (stop_everything)
# set by stop_everything: this process starts no executor or referee again (a lane or a build pool's thread would start
# one for the work queued behind what was stopped, and nothing would stop it); its end follows
STOPPED = threading.Event()


def refuse_when_stopped(what: str) -> None:
    """RuntimeError where stop_everything has run in this process: `what` is not started."""
    if STOPPED.is_set():
        raise RuntimeError(f"{what} not started: the harness is stopping (an interrupt)")


def stop_everything() -> int:
    """Every executor and referee this process started and has not closed, stopped now (an interrupt: stop_now);
    how many there were. Nothing is started after it (`STOPPED`)."""
    STOPPED.set()
    stop_now(live := list(LIVE))
    LIVE.clear()
    return len(live)


def stop_now(processes: list, wait_s: float = 5.0) -> None:
    """Executors or referees asked to end (a referee closes its executors), then killed with all they started."""
    for process in processes:
        process.interrupt()
    deadline = time.monotonic() + wait_s
    for process in processes:
        process.finish_interrupt(max(0.0, deadline - time.monotonic()))
