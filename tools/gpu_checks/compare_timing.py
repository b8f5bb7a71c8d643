"""Times the same candidates with two checkouts of the harness, in one sitting, on one GPU: each
`harness eval --json` in a process of its own, alternating (B, A, B, ...), then a table of medians.

    python3 tools/gpu_checks/compare_timing.py --before OLD_TREE --rounds 2 --size kernelbench FILE...

For judging a change to how candidates are timed against the timing it replaces: the figures that
rank (`runtime_ms`), the spread, the eager baseline, the new clock's reported and window figures, and the seconds of
each verdict's time phase."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def evaluate(tree: Path, files: list[str], size: str, label: str, log: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]))
    proc = subprocess.run([sys.executable, "-m", "harness", "eval", "--json", "--no-store", "--size", size, *files],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=900)
    log.write_text(proc.stdout + "\n---- stderr\n" + proc.stderr)
    rows = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            v = json.loads(line)
            check = v.get("timing_check") or {}
            rows[Path(v["candidate"]).stem] = {
                "status": v["status"], "ms": v.get("runtime_ms"), "iqr": (v.get("timing") or {}).get("iqr_ms"),
                "eager": (v.get("baselines", {}).get("eager") or {}).get("median_ms"),
                "reported": check.get("reported_median_ms"), "cost": check.get("overhead_ms"),
                "time_s": (v.get("phase_seconds") or {}).get("time"),
                "flags": [f["name"] for f in v.get("flags", [])], "error": (v.get("error") or "")[:200]}
    print(f"{label}: rc={proc.returncode}, {len(rows)} verdicts", flush=True)
    time.sleep(10)  # what is left of its executors' teardown is over before the next one times anything
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", required=True, type=Path)
    parser.add_argument("--after", default=Path.cwd(), type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--size", default="kernelbench")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    files = [str(Path(f).resolve()) for f in args.files]
    runs = []
    for i in range(args.rounds):
        runs.append(("after", evaluate(args.after, files, args.size, f"after #{i}", args.out / f"after{i}.log")))
        if i < args.rounds - 1 or args.rounds == 1:
            runs.append(("before", evaluate(args.before, files, args.size, f"before #{i}", args.out / f"before{i}.log")))
    names = sorted({n for _, rows in runs for n in rows})
    print(f"\n{'candidate':28} {'run':7} {'status':10} {'ms (ranked)':>11} {'iqr':>7} {'eager':>8} {'reported':>9} {'cost':>6} {'time s':>6}  flags")
    for name in names:
        for label, rows in runs:
            r = rows.get(name)
            if r is None:
                continue
            fmt = lambda x, d=3: "-" if x is None else f"{x:.{d}f}"  # noqa: E731
            print(f"{name:28} {label:7} {r['status']:10} {fmt(r['ms']):>11} {fmt(r['iqr']):>7} {fmt(r['eager']):>8} "
                  f"{fmt(r['reported']):>9} {fmt(r['cost']):>6} {fmt(r['time_s'], 2):>6}  {','.join(r['flags'])[:60]} "
                  f"{r['error'][:80]}")
    for name in names:
        for label in ("before", "after"):
            values = [rows[name]["ms"] for l, rows in runs if l == label and name in rows and rows[name]["ms"]]
            if values:
                print(f"{name:28} {label:7} median of runs {statistics.median(values):.4f} ms over {len(values)} run(s)")


if __name__ == "__main__":
    main()
