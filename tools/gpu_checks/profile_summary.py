"""Where a batch's time went, from the referee profiles a `harness bench --throughput` or `harness eval` run wrote with
KH_REFEREE_PROFILE=DIR: per referee, its start, each baseline round (compile, round, twin), its waits for
builds, the medians of its candidates' phases and steps, and the referee's largest costs by its cProfile (main
thread: cumulative seconds of the steps named in STEPS, which do not nest in one another).

    python3 tools/gpu_checks/profile_summary.py DIR
"""

import glob
import json
import pstats
import statistics
import sys
from pathlib import Path

# The referee's steps whose cumulative seconds a warm candidate's time is made of (none calls another of them).
STEPS = {
    "time_phase.py:277(compare)": "the clocked calls' float64 replays and comparisons",
    "relay.py:228(device_window)": "the candidate's windows on the device",
    "calibrator.py:101(window)": "the calibrator's windows beside them",
    "exchange.py:128(write)": "inputs written into the exchange (checked calls)",
    "exchange.py:171(read)": "tensors read out of the exchange (checked calls)",
    "process.py:253(read)": "waiting for an executor's reply (checked calls behind their stream holds)",
    "check_phase.py:203(unwritten_trial)": "the unwritten-output trial",
    "session.py:68(release_cached)": "the referee's cached device memory released (waits for the device's work)",
}


def median(values: list[float]) -> float:
    return round(statistics.median(values), 2) if values else float("nan")


def summarize(log: Path) -> None:
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    candidates = [r for r in records if r.get("event") == "candidate"]
    print(f"== {log.name}: {len(candidates)} candidates")
    for r in records:
        if r.get("event") == "start":
            print(f"  start: executors' modules {r['executor_modules_s']:.2f} s, set-up {r['setup_s']:.2f} s")
        elif r.get("event") == "baseline_round":
            print(f"  round {r['index']}: compile {r['compile_s']:.2f} s, round {r['round_s']:.2f} s, "
                  f"twin {r.get('twin_s', 0):.2f} s")
    idle = [r["s"] for r in records if r.get("event") == "idle"]
    if idle:
        print(f"  waited for builds {sum(idle):.1f} s in {len(idle)} waits (longest {max(idle):.1f} s)")
    if candidates:
        for key in ("phases", "referee"):
            names = sorted({n for c in candidates for n in c.get(key, {})})
            print(f"  {key} (medians, s): " + ", ".join(f"{n} {median([c[key][n] for c in candidates if n in c[key]])}"
                                                    for n in names))
    prof = log.with_suffix(".prof")
    if prof.exists():
        stats = pstats.Stats(str(prof)).stats  # {(file, line, function): (calls, primitive, tottime, cumtime, callers)}
        rows = []
        for (file, line, function), (_, calls, _, cumulative, _) in stats.items():
            key = f"{Path(file).name}:{line}({function})"
            if key in STEPS:
                rows.append((cumulative, calls, STEPS[key], key))
        judged = max(len(candidates) + sum(r.get("event") == "twin" for r in records), 1)  # the twins are judged too
        print(f"  {'largest costs (cProfile, main thread)':<78}{'s':>8}{'calls':>8}{'a judged':>13}")
        for cumulative, calls, what, key in sorted(rows, reverse=True)[:5]:
            print(f"  {what[:76]:<78}{cumulative:>8.1f}{calls:>8}{cumulative / judged:>13.2f}")


def main() -> None:
    logs = sorted(Path(p) for p in glob.glob(str(Path(sys.argv[1]) / "*.jsonl")))
    if not logs:
        sys.exit(f"no referee profile in {sys.argv[1]}")
    for log in logs:
        summarize(log)


if __name__ == "__main__":
    main()
