"""The Triton backend and the precisions on a GPU (`bash .ci/gpu triton`): prints a short table last, logs to OUT.

1. Six KernelBench level-1 problems at KernelBench's own sizes and semantics (19_ReLU, 23_Softmax, 40_LayerNorm,
   47_Sum_reduction_over_a_dimension, 1_Square_matrix_multiplication_, 89_cumsum), written here as bare files in a
   level folder, and a run folder in KernelBench's layout: sample 0 the Triton candidate of candidates/triton/, sample 1
   the reference itself as ModelNew (the control). Judged as a suite, `harness eval --problems --backend triton`, at
   each of SUITES (`PRECISION[:SIZE[:IDS]]`, default fp32), with eager as the baseline at that precision.
2. The hostile Triton fixtures (tests/fixtures/hacks/triton/) against 1_ReLU at a size of its own (HACK_SIZE),
   `--run-rejected`, each verdict against its EXPECT line; the honest ReLU judged alone and after the cache plant.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from evaluator.wire.problem import reference_as_candidate  # noqa: E402

# id, name, forward, sizes, inputs, init inputs, candidate file
PROBLEMS = [
    (19, "19_ReLU", "return torch.relu(x)", "batch_size = 4096\ndim = 393216",
     "[torch.rand(batch_size, dim)]", "[]", "1_ReLU/triton_relu.py"),
    (23, "23_Softmax", "return torch.softmax(x, dim=1)", "batch_size = 4096\ndim = 393216",
     "[torch.rand(batch_size, dim)]", "[]", "3_Softmax/triton_softmax.py"),
    (47, "47_Sum_reduction_over_a_dimension", "return torch.sum(x, dim=self.dim, keepdim=True)",
     "batch_size = 128\ndim1 = 4096\ndim2 = 4095\nreduce_dim = 1", "[torch.rand(batch_size, dim1, dim2)]", "[reduce_dim]",
     "2_Sum_over_a_dimension/triton_sum_over_a_dimension.py"),
    (1, "1_Square_matrix_multiplication_", "return torch.matmul(x, y)", "N = 2048 * 2",
     "[torch.rand(N, N), torch.rand(N, N)]", "[]", "5_Matmul/triton_matmul.py"),
    (89, "89_cumsum", "return torch.cumsum(x, dim=self.dim)", "batch_size = 32768\nlength = 32768\ndim = 1",
     "[torch.rand(batch_size, length)]", "[dim]", "6_Cumsum/triton_cumsum.py"),
]
LAYERNORM = (40, "40_LayerNorm", "4_LayerNorm/triton_layernorm.py")


def problem_source(name: str, forward: str, sizes: str, inputs: str, init: str) -> str:
    takes_dim = "self.dim" in forward
    args = "x, y" if "y)" in forward else "x"
    init_sig, init_body = ("self, dim", "        self.dim = dim\n") if takes_dim else ("self", "")
    return (f'"""KernelBench level 1, {name}, at its own size."""\nimport torch\nimport torch.nn as nn\n\n\n'
            f"class Model(nn.Module):\n    def __init__({init_sig}):\n        super().__init__()\n{init_body}\n"
            f"    def forward(self, {args}):\n        {forward}\n\n\n{sizes}\n\n\n"
            f"def get_inputs():\n    return {inputs}\n\n\ndef get_init_inputs():\n    return {init}\n")


LAYERNORM_SOURCE = '''"""KernelBench level 1, 40_LayerNorm, at its own size."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x):
        return self.ln(x)


batch_size = 16
features = 64
dim1 = 256
dim2 = 256


def get_inputs():
    return [torch.rand(batch_size, features, dim1, dim2)]


def get_init_inputs():
    return [(features, dim1, dim2)]
'''


def write_suite(out: Path, ids: set[int] | None = None) -> tuple[Path, Path]:
    """The level folder and the run folder (of the problems `ids`, default all)."""
    tag = "all" if not ids else "-".join(map(str, sorted(ids)))
    level, run = out / f"kb-{tag}" / "level1", out / f"run-{tag}"
    level.mkdir(parents=True, exist_ok=True)
    run.mkdir(parents=True, exist_ok=True)
    entries = [(pid, name, problem_source(name, fwd, sizes, inputs, init), cand)
               for pid, name, fwd, sizes, inputs, init, cand in PROBLEMS]
    entries.append((LAYERNORM[0], LAYERNORM[1], LAYERNORM_SOURCE, LAYERNORM[2]))
    for pid, name, source, cand in entries:
        if ids and pid not in ids:
            continue
        (level / f"{name}.py").write_text(source)
        (run / f"level_1_problem_{pid}_sample_0_kernel.py").write_text((ROOT / "candidates/triton" / cand).read_text())
        (run / f"level_1_problem_{pid}_sample_1_kernel.py").write_bytes(reference_as_candidate(source, {}))
    return level, run


def sh(cmd: list[str], log: Path, timeout: float) -> tuple[int, float]:
    started = time.monotonic()
    with open(log, "w") as sink:
        process = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.terminate()
            try:
                rc = process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                rc = process.wait()
            rc = 124
    return rc, time.monotonic() - started


def verdicts(log: Path) -> list[dict]:
    found = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                found.append(json.loads(line))
            except ValueError:
                pass
    latest = {}  # a verdict printed again after its batch (`replaces`) stands for the earlier line
    for v in found:
        if "status" in v:
            latest[(v.get("index"), v["candidate"])] = v
    return list(latest.values())


def row(v: dict) -> str:
    correctness = v.get("correctness") or {}
    tiers = ",".join(t for t, ok in (correctness.get("tiers") or {}).items() if ok) or "-"
    err, bound = correctness.get("max_abs_err"), (correctness.get("matched_bounds") or {}).get("output")
    ratio = f"{err:.3g}/{bound:.2g}" if err is not None and bound is not None else "-"  # its error; matched's ratio
    speed = (v.get("speedup") or {}).get("eager")
    low, high = (v.get("speedup_interval") or {}).get("eager") or (0, 0)
    span = f"[{low:.3f}-{high:.3f}]" if high else "-"
    flags = ",".join(f["name"] for f in v.get("flags") or [] if f["name"] not in ("bounds",))
    return (f"{v['candidate'][-40:]:40} {v['status']:13} {tiers:21} err={ratio:16} "
            f"{(f'{speed:.3f}x' if speed else '-'):>7} {span:15} {v.get('runtime_ms') or 0:9.3f} ms  {flags[:60]}")


def suite(out: Path, spec: str, rows: list[str], timeout: float) -> None:
    """One suite: `PRECISION[:SIZE[:ID+ID...]]` (fp32:default:19 is 19_ReLU alone at KernelBench's size)."""
    parts = spec.split(":")
    precision, size, ids = parts[0], parts[1] if len(parts) > 1 else "default", parts[2] if len(parts) > 2 else ""
    level, run = write_suite(out, {int(i) for i in ids.split("+") if i})
    log = out / f"suite-{spec.replace(':', '_').replace('/', '-')}.log"
    rc, wall = sh([sys.executable, "-m", "harness", "eval", "--problems", str(level), str(run), "--backend", "triton",
                   "--precision", precision, "--size", size, "--baselines", "eager", "--json",
                   "--store", str(out / "results.sqlite")], log, timeout)
    rows.append(f"-- suite {spec}: rc={rc} {wall:.0f} s")
    rows += [row(v) for v in sorted(verdicts(log), key=lambda v: v["candidate"])]
    text = log.read_text(errors="replace")
    board = [line for line in text.splitlines() if not line.startswith("{")]
    print("\n".join(board[-40:]), flush=True)


def hacks(out: Path, rows: list[str], size: str) -> None:
    folder = ROOT / "tests/fixtures/hacks/triton"
    problem = ROOT / "reference/minibench/level1/1_ReLU.py"
    base = [sys.executable, "-m", "harness", "eval", "--problem", str(problem), "--backend", "triton", "--size", size,
            "--baselines", "eager", "--json", "--no-store", "--run-rejected"]
    log = out / "hacks.log"
    files = sorted(p for p in folder.glob("*.py") if p.stem != "honest_relu")
    # the plant first, the honest candidate after it in the same batch; then the honest one alone
    rc, wall = sh(base + [str(p) for p in files] + [str(folder / "honest_relu.py")], log, 300)
    rows.append(f"-- hostile Triton fixtures: rc={rc} {wall:.0f} s")
    for v in verdicts(log):
        stem = Path(v["candidate"]).stem
        text = (folder / f"{stem}.py").read_text()
        expect = " ".join(re.findall(r"^EXPECT:(.*)$", text, re.MULTILINE))
        rows.append(row(v) + f"   EXPECT{expect}")
        if v["status"] != "correct":
            rows.append(f"    {(v.get('error') or '')[:200]!r}")
    alone = out / "honest-alone.log"
    sh(base + [str(folder / "honest_relu.py")], alone, 90)
    rows += ["honest alone: " + row(v) for v in verdicts(alone)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--suites", default="fp32", help="PRECISION[:SIZE[:ID+ID]],... (see `suite`)")
    parser.add_argument("--parts", default="suite,hacks")
    parser.add_argument("--hack-size", default="default")
    parser.add_argument("--seconds", type=float, default=570.0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[str] = []
    parts = args.parts.split(",")
    precisions = args.suites.split(",")
    deadline = time.monotonic() + args.seconds
    try:
        if "hacks" in parts:
            hacks(args.out, rows, args.hack_size)
        if "suite" in parts:
            for i, precision in enumerate(precisions):
                suite(args.out, precision, rows, (deadline - time.monotonic()) / (len(precisions) - i))
    finally:
        print("\n".join(rows))


if __name__ == "__main__":
    main()
