"""Where a candidate's window costs more than the calibrator's beside it: each FILE judged at one size
with `harness eval --json`, once per mode (tuning variables such as KH_PACE_CAP_MS), the referee profiling its windows
(KH_REFEREE_PROFILE). Prints each candidate's ranked median against its device events, then the median of each
window step for it and for the calibrator beside it (ms): inputs staged, go (and the executor's own part of it,
and its forward by host clock and by events), put (and the executor's part), copied out.

    python3 tools/experiments/window_gap.py --size kernelbench --modes "KH_PACE_CAP_MS=1;KH_PACE_CAP_MS=50" --out DIR FILE...
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

STEPS = ("staged", "go", "go_handled", "host", "events", "put", "put_handled", "copied", "window")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="kernelbench")
    parser.add_argument("--modes", default="KH_PACE_CAP_MS=1;KH_PACE_CAP_MS=50")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    for index, mode in enumerate(args.modes.split(";")):
        profile = args.out / f"gap-profile-{index}"
        env = {**os.environ, **dict(kv.split("=", 1) for kv in mode.split(",") if kv), "KH_REFEREE_PROFILE": str(profile)}
        proc = subprocess.run([sys.executable, "-m", "harness", "eval", "--json", "--no-store", "--size", args.size,
                               *args.files], capture_output=True, text=True, timeout=900, env=env)
        (args.out / f"gap-{index}.log").write_text(proc.stdout + "\n---- stderr\n" + proc.stderr)
        verdicts = {}
        for line in proc.stdout.splitlines():
            if line.startswith("{"):
                v = json.loads(line)
                verdicts.setdefault(Path(v["candidate"]).stem, v)
        windows = {}
        for log in profile.glob("*.jsonl"):
            for line in log.read_text().splitlines():
                r = json.loads(line)
                if r.get("event") == "windows":
                    windows[Path(r["name"]).stem] = r
        print(f"== mode {index} ({mode}), size {args.size}")
        for name, v in verdicts.items():
            check = v.get("timing_check") or {}
            ranked, events = v.get("runtime_ms"), check.get("reported_median_ms")
            ratio = f"{ranked / events:.3f}" if ranked and events else "-"
            flags = ",".join(f["name"] for f in v.get("flags", []))
            print(f"{name[:30]:<31} ranked {ranked} events {events} ratio {ratio} cost {check.get('overhead_ms')} "
                  f"{v['status']} {flags}")
            w = windows.get(name)
            for role in ("candidate", "calibrator"):
                if w and w.get(role):
                    row = "  ".join(f"{s} {w[role][s][1]:.3f}" if w[role].get(s) else f"{s} -" for s in STEPS)
                    print(f"   {role:<11}{row}")


if __name__ == "__main__":
    main()
