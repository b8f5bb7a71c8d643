"""The referee's tuning diagnostics: with KH_REFEREE_PROFILE set (a folder), the referee profiles itself
(cProfile) and logs each candidate's phase, command and executor start-up seconds there. For tuning the
evaluator; never read by it."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

PROFILE_DIR = os.environ.get("KH_REFEREE_PROFILE")


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
