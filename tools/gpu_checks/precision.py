"""The precision table: for each size, the golden kernels and the replay's candidate judged with
`harness eval --json` (one process per size), each candidate's ranked figure (its windows less their cost,
over K) against its own device events for the same calls, their spreads, K, the window's cost and its speedup over
eager, and the baselines (timed the same way, by device events in the referee).

    python3 tools/gpu_checks/precision.py --sizes small,kernelbench,wide --out DIR FILE...
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="small,kernelbench,wide")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    rows, twins = [], []
    for size in args.sizes.split(","):
        profile = args.out / f"profile-{size}"
        profile.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([sys.executable, "-m", "harness", "eval", "--json", "--no-store", "--size", size,
                               *args.files], capture_output=True, text=True, timeout=900,
                              env={**os.environ, "KH_REFEREE_PROFILE": str(profile)})
        for log in sorted(profile.glob("*.jsonl")):  # each round's twin: eager judged as a candidate
            twins += [(size, r) for r in map(json.loads, log.read_text().splitlines()) if r.get("event") == "twin"]
        (args.out / f"precision-{size}.log").write_text(proc.stdout + "\n---- stderr\n" + proc.stderr)
        latest = {}  # each candidate's last word: a verdict flagged after the batch comes again (`replaces`)
        for line in proc.stdout.splitlines():
            if line.startswith("{"):
                v = json.loads(line)
                latest[Path(v["candidate"]).stem] = v
        for v in latest.values():
            check, timing = v.get("timing_check") or {}, v.get("timing") or {}
            if not rows or rows[-1][0] != size:
                for name, stats in (v.get("baselines") or {}).items():
                    rows.append((size, f"[{name}]", stats.get("median_ms"), stats.get("iqr_ms"), None, None, None, None, "",
                                 None))
            rows.append((size, Path(v["candidate"]).stem, v.get("runtime_ms"), timing.get("iqr_ms"),
                         check.get("reported_median_ms"), check.get("reported_iqr_ms"), check.get("calls_per_window"),
                         check.get("overhead_ms"), f"{v['status']} {','.join(f['name'] for f in v.get('flags', []))}",
                         (v.get("speedup") or {}).get("eager")))
    fmt = lambda x: "-" if x is None else (f"{x:.4f}" if isinstance(x, float) else str(x))  # noqa: E731
    print(f"{'size':<12}{'callable':<34}{'ranked':>9}{'iqr':>9}{'events':>9}{'ev.iqr':>9}{'rank/ev':>8}{'iqr/ev':>8}"
          f"{'K':>5}{'cost':>9}{'x eager':>8}  status")
    for size, name, ranked, iqr, events, eiqr, k, cost, status, speedup in rows:
        ratio = f"{ranked / events:.3f}" if ranked and events else "-"
        spread = f"{iqr / eiqr:.2f}" if iqr is not None and eiqr else "-"
        print(f"{size:<12}{name[:33]:<34}{fmt(ranked):>9}{fmt(iqr):>9}{fmt(events):>9}{fmt(eiqr):>9}{ratio:>8}"
              f"{spread:>8}{fmt(k):>5}{fmt(cost):>9}{fmt(speedup):>8}  {status[:60]}")
    print(f"\n{'size':<12}{'round':>6}{'twin ms':>10}{'events':>10}{'rank/ev':>8}{'referee':>10}{'ref/twin':>9}  phases (s)")
    for size, r in twins:  # the twin's figure (eager's) against its events, and the referee's own loop against it
        ms, events, own = r.get("ms"), r.get("events_ms"), r.get("in_referee_ms")
        print(f"{size:<12}{r.get('round', '-'):>6}{fmt(ms):>10}{fmt(events):>10}"
              f"{f'{ms / events:.3f}' if ms and events else '-':>8}{fmt(own):>10}{f'{own / ms:.3f}' if ms and own else '-':>9}"
              f"  {r.get('phases')}")


if __name__ == "__main__":
    main()
