"""The judge's own error at KernelBench's own sizes (one device call): each problem's reference itself as its
candidate (the control, `class ModelNew(Model)`), judged as a suite in KernelBench's run layout by
`harness eval --problems`, then the suite board. A control's speedup is the judge's error; its 95% interval must hold
1.0 (none may count as significantly faster than eager). Prints a short table last, logs to OUT.

    python3 tools/gpu_checks/controls.py --kernelbench KERNELBENCH/KernelBench --out OUT [--problems 1/19,2/39]

KERNELBENCH is a KernelBench checkout (its problem files are read there, never kept in this repo; carry them).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from triton_gpu import row, sh, verdicts  # noqa: E402  (which puts the repo on sys.path)

from evaluator.wire.problem import reference_as_candidate  # noqa: E402

# level/id: seven of level 1 (elementwise, reductions, a scan, a matmul) and this project's level-2 problem
DEFAULT = "1/19,1/23,1/40,1/47,1/1,1/89,1/88,2/39"


def write_run(kernelbench: Path, out: Path, picks: list[tuple[int, int]]) -> tuple[Path, Path]:
    """The problems' folder (KernelBench's level folders, only the picked files) and a run folder of controls."""
    problems, run = out / "problems", out / "run"
    run.mkdir(parents=True, exist_ok=True)
    for level, pid in picks:
        found = sorted((kernelbench / f"level{level}").glob(f"{pid}_*.py"))
        if len(found) != 1:
            raise SystemExit(f"level{level}: {len(found)} files start with {pid}_")
        source = found[0].read_text()
        (problems / f"level{level}").mkdir(parents=True, exist_ok=True)
        (problems / f"level{level}" / found[0].name).write_text(source)
        (run / f"level_{level}_problem_{pid}_sample_0_kernel.py").write_bytes(reference_as_candidate(source, {}))
    return problems, run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernelbench", type=Path, required=True, help="a KernelBench checkout's KernelBench/ folder")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--problems", default=DEFAULT, help="LEVEL/ID,...")
    parser.add_argument("--seconds", type=float, default=540.0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    picks = [tuple(int(x) for x in item.split("/")) for item in args.problems.split(",")]
    problems, run = write_run(args.kernelbench, args.out, picks)
    store = args.out / "results.sqlite"
    log = args.out / "eval.log"
    started = time.monotonic()
    rc, wall = sh([sys.executable, "-m", "harness", "eval", "--problems", str(problems), str(run), "--baselines",
                   "eager", "--json", "--store", str(store)], log, args.seconds)
    rows = [f"-- controls at KernelBench's own sizes: rc={rc} {wall:.0f} s"]
    found = sorted(verdicts(log), key=lambda v: v["candidate"])
    rows += [row(v) for v in found]
    faster = [v["candidate"] for v in found
              if ((v.get("speedup_interval") or {}).get("eager") or (0, 0))[0] > 1.0]
    rows.append(f"controls significantly faster than eager: {len(faster)} of {len(found)} {faster}")
    board = subprocess.run([sys.executable, "-m", "harness", "leaderboard", "--problems", str(problems), "--store",
                            str(store), "--format", "json"], capture_output=True, text=True, timeout=120)
    (args.out / "board.json").write_text(board.stdout)
    try:
        suite = json.loads(board.stdout).get("suite") or {}
        rows.append(f"suite board: correct {suite.get('correct')} of {len(suite.get('problems') or [])}; "
                    f"fast_p (KernelBench's) {json.dumps(suite.get('fast_p'))}; "
                    f"significant {json.dumps(suite.get('fast_p_significant'))}")
    except ValueError:
        rows.append(f"suite board: rc={board.returncode} {board.stderr[-300:]}")
    text = log.read_text(errors="replace")
    print("\n".join(line for line in text.splitlines() if not line.startswith("{"))[-4000:])
    print(f"[{time.monotonic() - started:.0f} s]")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
