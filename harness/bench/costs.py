"""Where a referee's time went, from the profiles it writes with KH_REFEREE_PROFILE=DIR (evaluator.referee.tuning):
the largest costs of a judged candidate, by the referee's own cProfile (main thread: cumulative seconds of the steps
in STEPS, which do not nest in one another). `harness bench --throughput` prints them per pass;
tools/gpu_checks/profile_summary.py prints them with the rest of a profile."""

from __future__ import annotations

import json
import pstats
from dataclasses import dataclass
from pathlib import Path

# The referee's steps whose cumulative seconds a warm candidate's time is made of (none calls another of them), by
# file and function.
STEPS = {
    "replay.py(compare)": "the clocked calls' float64 replays and comparisons (the sample drawn)",
    "relay.py(device_window)": "the candidate's windows on the device",
    "calibrator.py(window)": "the calibrator's windows beside them",
    "exchange.py(write)": "inputs written into the exchange (checked calls)",
    "exchange.py(read)": "tensors read out of the exchange (checked calls)",
    "process.py(read)": "waiting for an executor's reply (checked calls behind their stream holds)",
    "check_phase.py(unwritten_trial)": "the unwritten-output trial",
    # cProfile charges it far more than its callees take (11.9 s against 0.15 s in a warm pass on an H200,
    # docs/results.md): read it as time around the release, not the release's own
    "session.py(release_cached)": "charged to releasing the referee's cached device memory (not the release alone)",
}


@dataclass(frozen=True)
class Cost:
    what: str
    seconds: float      # cumulative, over every referee of the folder
    calls: int
    per_judged: float   # seconds a judged candidate (the twins are judged too)


def records(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def largest_costs(logs: list[Path], count: int = 5) -> list[Cost]:
    """The `count` largest STEPS over the referees of `logs` (each `.jsonl` with its `.prof` beside it)."""
    seconds: dict[str, float] = {}
    calls: dict[str, int] = {}
    judged = 0
    for log in logs:
        rows = records(log)
        judged += sum(r.get("event") in ("candidate", "twin") for r in rows)
        prof = log.with_suffix(".prof")
        if not prof.exists():
            continue
        # {(file, line, function): (calls, primitive calls, tottime, cumtime, callers)}
        for (file, _, function), (_, primitive, _, cumulative, _) in pstats.Stats(str(prof)).stats.items():
            key = f"{Path(file).name}({function})"
            if key in STEPS:
                seconds[key] = seconds.get(key, 0.0) + cumulative
                calls[key] = calls.get(key, 0) + primitive
    ranked = sorted(seconds, key=seconds.get, reverse=True)[:count]
    return [Cost(STEPS[k], seconds[k], calls[k], seconds[k] / max(judged, 1)) for k in ranked]
