"""Where a referee's time went, from the profiles it writes with KH_REFEREE_PROFILE=DIR (evaluator.referee.tuning):
the largest costs of a judged candidate, by the wall seconds of the referee's costed steps (`tuning.costed`: the
steps never overlap), as each candidate's and twin's line of the log records them. `harness bench --throughput`
prints them per pass; tools/gpu_checks/profile_summary.py prints them with the rest of a profile."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# The referee's costed steps (`tuning.costed`), as its log names them.
STEPS = {
    "windows": "the candidate's clocked windows",
    "calibrator": "the calibrator's windows beside them (the candidate held, the device idle before and after)",
    "replay": "the clocked calls' float64 replays and comparisons (the sample drawn)",
    "checked_calls": "checked calls (inputs written, the reply behind the stream hold, the float64 reference, compared)",
    "replies": "waiting for an executor's other replies (its import, construct, state, the profiled call)",
}


@dataclass(frozen=True)
class Cost:
    what: str
    seconds: float      # over every referee of the folder
    calls: int          # judged candidates (twins included) that spent any
    per_judged: float   # seconds a judged candidate (the twins are judged too)


def records(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def largest_costs(logs: list[Path], count: int = 5) -> list[Cost]:
    """The `count` largest STEPS over the candidates and twins the referees of `logs` (each a `.jsonl`) judged."""
    seconds: dict[str, float] = {}
    calls: dict[str, int] = {}
    judged = 0
    for log in logs:
        for row in records(log):
            if row.get("event") not in ("candidate", "twin"):
                continue
            judged += 1
            for step, spent in (row.get("costs") or {}).items():
                if step in STEPS:
                    seconds[step] = seconds.get(step, 0.0) + spent
                    calls[step] = calls.get(step, 0) + 1
    ranked = sorted(seconds, key=seconds.get, reverse=True)[:count]
    return [Cost(STEPS[k], seconds[k], calls[k], seconds[k] / max(judged, 1)) for k in ranked]


def referees_began(logs: list[Path], since: float) -> float | None:
    """When the first referee of `logs` to begin at `since` or later began, its config read (the wall clock,
    `time.time()`); None without one (a folder may keep an earlier run's logs)."""
    began = [row["at"] for log in logs for row in records(log)
             if row.get("event") == "start" and row.get("at", 0.0) >= since]
    return min(began) if began else None
