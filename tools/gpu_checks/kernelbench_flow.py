"""KernelBench's own batch flow against `harness eval`, cold, on the same distinct CUDA sources, one after the other on
one machine (`gpu kbflow`).

COUNT distinct copies of the replay's CUDA candidate (harness.bench.throughput's copies: a comment of its own in each
CUDA text, so no two share a build) are written as a KernelBench run folder, `runs/<run>/level_2_problem_39_sample_{S}
_kernel.py`, in a KernelBench checkout (KB). Then:

- KernelBench's `scripts/eval_from_generations.py` (local GPU, `build_cache=True`: its CPU workers build every sample
  first, then it evaluates them), with a fresh build folder and torch extensions folder;
- `harness eval --problems KB/KernelBench/level2 runs/<run>/` with a fresh build cache and store (torch's precompiled
  headers made in the run too), which also reads the `eval_results.json` KernelBench just wrote and lists where the two
  disagree.

KernelBench's imports need `pydra-config`, `modal`, `tqdm` and `python-dotenv` (installed into KB_SITE, never beside the
harness's own packages), and `litellm` and `openai`, which only its generation uses: stub modules stand in for them.
Where KernelBench's flow judges fewer than COUNT samples (within --kb-limit), the harness's is not run: its figure would
compare with nothing. Prints a table last.

    python3 tools/gpu_checks/kernelbench_flow.py --kb .kb --kb-site /tmp/kbsite --out OUT [--count 16] [--workers 16]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.bench.throughput import default_source, distinct_copies  # noqa: E402
from tools.gpu_checks.suite_gpu import verdict_lines  # noqa: E402

LEVEL, PROBLEM_ID = 2, 39  # KernelBench's 39_Gemm_Scale_BatchNorm, the replay candidate's problem
STUBS = {"litellm": "completion = None", "openai": "OpenAI = None"}  # KernelBench's generation only: never called


def run_folder(kb: Path, run: str, count: int) -> Path:
    """COUNT distinct copies as KernelBench's generate_samples.py names them, in KB/runs/RUN."""
    folder = kb / "runs" / run
    folder.mkdir(parents=True, exist_ok=False)
    for index, copy in enumerate(distinct_copies(default_source(), count, folder / ".copies")):
        (folder / f"level_{LEVEL}_problem_{PROBLEM_ID}_sample_{index}_kernel.py").write_text(copy.path.read_text())
    for copy in (folder / ".copies").iterdir():
        copy.unlink()
    (folder / ".copies").rmdir()
    return folder


def kernelbench_flow(kb: Path, kb_site: Path, run: str, count: int, workers: int, scratch: Path,
                     limit_s: float) -> tuple[float, dict]:
    """KernelBench's batch flow, cold: its wall seconds and what its eval_results.json says of the samples."""
    stub = scratch / "stub"
    stub.mkdir(parents=True, exist_ok=True)
    for module, text in STUBS.items():
        (stub / f"{module}.py").write_text(text + "\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(kb_site), str(kb / "src"), str(stub)]),
               TORCH_EXTENSIONS_DIR=str(scratch / "torch_extensions"))
    # problem_ids alone is read by no code of KernelBench's script at the snapshot used (its first run here went through
    # all 100 problems of the level): subset, a range of ids, is what chooses the problems
    command = [sys.executable, "scripts/eval_from_generations.py", f"run_name={run}", "dataset_src=local",
               f"level={LEVEL}", f"problem_ids=[{PROBLEM_ID}]",
               f"subset=[{PROBLEM_ID},{PROBLEM_ID}]", f"num_samples_per_problem={count}",
               "build_cache=True", f"num_cpu_workers={workers}", "gpu_arch=['Hopper']", "timeout=600",
               f"kernel_eval_build_dir={scratch / 'kb_build'}", f"runs_dir={kb / 'runs'}"]
    started = time.perf_counter()
    with open(scratch / "kernelbench.log", "w") as log:
        try:  # a limit of its own, so that a flow gone wrong leaves the device call time to say so
            code = subprocess.run(command, cwd=kb, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=limit_s).returncode
        except subprocess.TimeoutExpired:
            code = f"killed at its limit of {limit_s:.0f} s"
    wall = time.perf_counter() - started
    results = kb / "runs" / run / "eval_results.json"
    samples = json.loads(results.read_text()).get(str(PROBLEM_ID), []) if results.exists() else []
    said = {"exit": code, "samples": len(samples),
            "compiled": sum(bool(s.get("compiled")) for s in samples),
            "correct": sum(bool(s.get("correctness")) for s in samples)}
    return wall, said


def harness_flow(kb: Path, run: str, scratch: Path) -> tuple[float, dict]:
    """`harness eval` on the same folder, cold: its wall seconds and its verdicts' statuses."""
    env = dict(os.environ, HARNESS_CACHE_DIR=str(scratch / "harness_cache"), HARNESS_STORE=str(scratch / "store.sqlite"))
    command = [sys.executable, "-m", "harness", "eval", "--problems", str(kb / "KernelBench" / f"level{LEVEL}"),
               str(kb / "runs" / run), "--json"]
    started = time.perf_counter()
    with open(scratch / "harness.jsonl", "w") as out, open(scratch / "harness.log", "w") as log:
        done = subprocess.run(command, env=env, stdout=out, stderr=log)
    wall = time.perf_counter() - started
    # each candidate's last line: a verdict printed again after the batch replaces one
    final = {v["index"]: v.get("status") for v in verdict_lines(scratch / "harness.jsonl") if "index" in v}
    return wall, {"exit": done.returncode, **Counter(final.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kb", type=Path, required=True, help="a KernelBench checkout")
    parser.add_argument("--kb-site", type=Path, required=True, help="KernelBench's packages (.kbwhl) installed here")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--count", type=int, default=16)
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)),
                        help="KernelBench's CPU build workers (default: the cores this may use)")
    parser.add_argument("--kb-limit", type=float, default=360, help="seconds KernelBench's flow may take")
    args = parser.parse_args()
    kb, scratch = args.kb.resolve(), args.out.resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    run = f"kh_flow_{int(time.time())}"
    run_folder(kb, run, args.count)
    rows = [("KernelBench's batch flow", *kernelbench_flow(kb, args.kb_site.resolve(), run, args.count, args.workers,
                                                         scratch, args.kb_limit))]
    if rows[0][2]["samples"] < args.count:
        print((scratch / "kernelbench.log").read_text(errors="replace")[-3000:])
        sys.exit(f"KernelBench's flow judged {rows[0][2]['samples']} of {args.count} (exit {rows[0][2]['exit']}): its "
                 "log's end is above")
    rows.append(("harness eval", *harness_flow(kb, run, scratch)))
    print(f"{args.count} distinct sources of level {LEVEL} problem {PROBLEM_ID}, cold, one after the other")
    print(f"{'flow':<28}{'wall s':>10}{'per min':>10}  what it said")
    for name, wall, said in rows:
        print(f"{name:<28}{wall:>10.1f}{args.count / wall * 60:>10.2f}  {said}")
    print(f"harness eval against KernelBench's flow: {rows[0][1] / rows[1][1]:.2f}x")


if __name__ == "__main__":
    main()
