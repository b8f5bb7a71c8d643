"""Waiting for a pipe to be readable, with a first stretch polled without sleeping.

A process blocked on a pipe takes tens of microseconds to wake when a message arrives (more on a core
that went into a deep idle state), and how long varies from one wake-up to the next. Inside a clocked
window (evaluator.referee.clock) two messages go each way, so that variation lands in every call's
time; on an H100 at `kernelbench` the windows' spread was about twice what the device events showed.
Both sides therefore poll through the stretch where the next message is due (the referee for the
replies to `go` and `put`, an executor for the command after them), and only then sleep.
"""

from __future__ import annotations

import select
import time

# How long a clocked message is polled for before the waiting side sleeps: longer than a clocked call
# and the calibrator's window beside it at the sizes we time (the next command then comes well within
# it), short enough that a side left waiting gives the core back soon.
CLOCKED_POLL_S = 0.1


def readable(fd: int, timeout_s: float, poll_s: float = 0.0) -> bool:
    """Whether `fd` has data (or its end) within `timeout_s`: asked without sleeping for the first
    `poll_s`, then waited for."""
    timeout_s = max(0.0, timeout_s)
    poller = select.poll()  # not select(): it refuses descriptors numbered 1024 or more, which a busy parent reaches
    poller.register(fd, select.POLLIN)
    if poll_s > 0:
        polled = min(poll_s, timeout_s)
        until = time.perf_counter() + polled
        while time.perf_counter() < until:
            if poller.poll(0):
                return True
        timeout_s -= polled
    return bool(poller.poll(timeout_s * 1e3))
