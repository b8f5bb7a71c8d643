"""The referee's tuning diagnostics: with KH_REFEREE_PROFILE set (a folder), the referee logs there each
candidate's phase, command and executor start-up seconds, and the wall seconds of its costed steps (`costed`); with
KH_REFEREE_CPROFILE=1 as well, it profiles itself (cProfile, slower: every Python call is counted). For tuning the
evaluator; never read by it."""

from __future__ import annotations

import functools
import json
import os
import statistics
import threading
import time
from pathlib import Path

PROFILE_DIR = os.environ.get("KH_REFEREE_PROFILE")
CPROFILE = bool(PROFILE_DIR) and os.environ.get("KH_REFEREE_CPROFILE") == "1"

# Wall seconds of each costed step since the last `take_spent`, on the referee's main thread (the one that judges).
_spent: dict[str, float] = {}
_inside = threading.local()


def costed(step: str):
    """A function's wall seconds added to `step` (PROFILE_DIR only; else the function as it is). Only the outermost
    costed step counts, so the steps never overlap: a reply read inside a window is the window's. cProfile's
    cumulative seconds did not serve here: with the referee's threads it charged a step time it never took (a release
    of cached memory 11.9 s, its callees 0.15 s)."""
    def wrap(fn):
        if not PROFILE_DIR:
            return fn

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            if getattr(_inside, "step", None) is not None or threading.current_thread() is not threading.main_thread():
                return fn(*args, **kwargs)
            _inside.step = step
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                _inside.step = None
                _spent[step] = _spent.get(step, 0.0) + time.perf_counter() - started
        return timed
    return wrap


def take_spent() -> dict[str, float]:
    """The costed steps' seconds since the last call (then reset)."""
    spent = {step: round(seconds, 4) for step, seconds in _spent.items()}
    _spent.clear()
    return spent


class Laps:
    """Wall seconds between named marks (`laps("step")` ends a step begun at the previous mark): a set-up's steps for the
    profile, never read by the evaluator. Cheap enough to keep without PROFILE_DIR."""

    def __init__(self) -> None:
        self.last, self.seconds = time.perf_counter(), {}

    def __call__(self, step: str) -> None:
        now = time.perf_counter()
        self.seconds[step] = round(now - self.last, 4)
        self.last = now


def profile_log(record: dict) -> None:
    """One line of the tuning diagnostics (PROFILE_DIR), never read by the evaluator."""
    if PROFILE_DIR:
        Path(PROFILE_DIR).mkdir(parents=True, exist_ok=True)  # a folder named but not made must not fail a batch
        with open(Path(PROFILE_DIR) / f"referee-{os.getpid()}.jsonl", "a") as log:
            log.write(json.dumps(record) + "\n")


def profile_windows(name: str, candidate: list, calibrator: list) -> None:
    """Where a candidate's windows and the calibrator's beside them spent their time (PROFILE_DIR):
    the quartiles of each step, and of the executors' reports."""
    if not PROFILE_DIR:
        return
    from evaluator.referee.timing import quantile  # torch: this module is imported before the zygote starts

    def quartiles(values: list[float]) -> list[float]:
        return [round(quantile(values, q), 4) for q in (0.25, 0.5, 0.75)] if values else []

    record = {"event": "windows", "name": name, "calls": candidate[0].calls if candidate else 1}
    for role, windows in (("candidate", candidate), ("calibrator", calibrator)):
        steps = [w.steps for w in windows if len(w.steps) == 4]
        record[role] = {step: quartiles([s[i] for s in steps])
                        for i, step in enumerate(("staged", "go", "put", "copied"))}
        if any(w.handed_off for w in windows):  # each window and its reports, in order (the pairs' estimators:
            # tools/experiments/handoff_profile.py), through host memory and on the device alike
            record[role]["windows"] = [[round(w.ms, 4), round(w.reported_ms, 4) if w.reported_ms is not None else None]
                                       for w in windows if w.handed_off]
        handed = [w for w in windows if w.handed_off and len(w.steps) == 3]  # per call, medians over a window's calls
        if handed:
            record[role]["handoff"] = {step: quartiles([w.steps[i] for w in handed])
                                       for i, step in enumerate(("inputs_written", "go_to_commit", "captured"))}
            record[role]["handoff"].update({step: quartiles([w.go.steps_ms[i] for w in handed if len(w.go.steps_ms) == 5])
                                            for i, step in enumerate(("waited", "inputs", "forward", "written", "synced"))})
            record[role]["per_call"] = quartiles([w.per_call_ms for w in handed])
            record[role]["events_per_call"] = quartiles([statistics.fmean(w.go.events_ms) for w in handed if w.go.events_ms])
        record[role]["window"] = quartiles([w.ms for w in windows])
        record[role]["events"] = quartiles([w.go.events_ms[0] for w in windows if w.go.events_ms])
        record[role]["host"] = quartiles([w.go.host_ms[0] for w in windows if w.go.host_ms])
        record[role]["go_handled"] = quartiles([w.go.handled_ms for w in windows if w.go.handled_ms is not None])
        record[role]["put_handled"] = quartiles([w.put.handled_ms for w in windows
                                                 if w.put is not None and w.put.handled_ms is not None])
    profile_log(record)
