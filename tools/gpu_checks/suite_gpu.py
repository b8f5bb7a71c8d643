"""One device call (`bash .ci/gpu suite`): prints a short table last, logs to OUT.

1. The repo's suite (reference/minibench) judged twice with `harness eval --problems`, each problem's replayed
   candidate against its own problem, one store: the first batch times and stores the baselines, the second
   divides by them (a spot check a round). Wall time of each.
2. Problems at KernelBench's own sizes, made here from the suite's files by setting their module-level sizes to
   KernelBench's (level 1: 19_ReLU and 23_Softmax at 4096 x 393216 fp32, 6.4 GB in and out per call; 47 Sum over
   a dimension at 128 x 4096 x 4095): each problem's replayed candidate judged, its verdict or the reason it got
   none, the wall time and the referee's peak GPU memory.
3. The service: `harness serve`, 8 clients sending 32 distinct sources (plain PyTorch, so no build) of
   gemm_scale_bn at `kernelbench`, candidates per minute and the API's own answer latency; then `harness eval`
   on the same 32 files.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

KERNELBENCH_SIZES = {  # KernelBench's own module-level sizes (level 1)
    "1_ReLU": ("19_ReLU", {"batch_size": 4096, "dim": 393216}),
    "3_Softmax": ("23_Softmax", {"batch_size": 4096, "dim": 393216}),
    "2_Sum_over_a_dimension": ("47_Sum_reduction", {"batch_size": 128, "dim1": 4096, "dim2": 4095}),
}


def sh(cmd: list[str], log: Path, timeout: float, env: dict | None = None) -> tuple[int, float]:
    """Run `cmd` to `log` for at most `timeout` s. Past it, SIGTERM (the harness then stops every referee and
    executor it started), and after 30 s SIGKILL to its whole session: a harness killed alone left its referee
    holding 75 GiB of the GPU, and the problems after it crashed."""
    started = time.monotonic()
    with open(log, "w") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(process.pid, 9)
            except ProcessLookupError:
                pass
            process.wait()
            rc = 124
    return rc, time.monotonic() - started


def replayed_sources(folder: Path) -> dict[str, Path]:
    from harness.generation.parsing import parse_reply

    files = {}
    for problem in sorted(p for p in (ROOT / "tests/fixtures/replays/minibench").iterdir() if p.is_dir()):
        source = parse_reply((problem / "0.md").read_text()).source
        if source:
            path = folder / problem.name / "candidate.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(source)
            files[problem.name] = path
    return files


def verdict_lines(log: Path) -> list[dict]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def suite_twice(out: Path, rows: list[str]) -> None:
    files = replayed_sources(out / "suite")
    store = out / "suite.sqlite"
    for attempt in ("first", "second"):
        log = out / f"suite-{attempt}.log"
        rc, wall = sh([sys.executable, "-m", "harness", "eval", "--problems", str(ROOT / "reference/minibench"),
                       "--store", str(store), "--json", *map(str, files.values())], log, 280)
        verdicts = verdict_lines(log)
        cached = sum(1 for v in verdicts if (v.get("baseline_source") or {}).get("cached"))
        statuses = ",".join(sorted({v["status"] for v in verdicts}))
        rows.append(f"suite {attempt}: rc={rc} {wall:.0f} s, {len(verdicts)} verdicts ({statuses}), {cached} on stored baselines")
        print(rows[-1], flush=True)
    board = out / "suite-board.log"
    sh([sys.executable, "-m", "harness", "leaderboard", "--problems", str(ROOT / "reference/minibench"),
        "--store", str(store)], board, 60)
    print(board.read_text()[-3000:])


def suite_run(out: Path, rows: list[str], timeouts: tuple[float, float] = (200, 60)) -> None:
    """`harness run --problems` end to end on the replayed replies (each problem's next replies asked for while
    the one before it is judged), then the same command again: every reply and verdict from the store."""
    store = out / "suite-run.sqlite"
    for attempt, timeout in zip(("first", "again"), timeouts):
        log = out / f"suite-run-{attempt}.log"
        rc, wall = sh([sys.executable, "-m", "harness", "run", "--problems", str(ROOT / "reference/minibench"),
                       "--model", f"replay:{ROOT / 'tests/fixtures/replays/minibench'}", "--store", str(store),
                       "--runs-dir", str(out / "runs"), "--salvage", "off"], log, timeout)
        text = log.read_text(errors="replace")
        rows.append(f"suite run {attempt}: rc={rc} {wall:.0f} s; asked ahead {text.count('asked ahead')} time(s)")
        print(rows[-1], flush=True)
    print(text[-4000:])


def kernelbench_sizes(out: Path, rows: list[str], budget_s: float) -> None:
    """Each problem at KernelBench's size, its replayed candidate judged by `harness eval` on a GPU of its own where
    the machine has several (one after another on one): verdict, flags, wall time, that GPU's peak memory."""
    files = replayed_sources(out / "kb-candidates")
    started = time.monotonic()
    gpus = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                          text=True).stdout.split() or ["0"]
    only = [name for name in os.environ.get("KB_ONLY", "").split(",") if name]  # e.g. KB_ONLY=19_ReLU
    queue = [(ours, spec) for ours, spec in KERNELBENCH_SIZES.items() if not only or spec[0] in only]
    lock = threading.Lock()

    def judge(gpu: str, ours: str, theirs: str, sizes: dict) -> None:
        left = budget_s - (time.monotonic() - started)
        if left < 60:
            with lock:
                rows.append(f"{theirs}: not run (no time left)")
            return
        text = (ROOT / "reference/minibench/level1" / f"{ours}.py").read_text()
        for name, value in sizes.items():
            text = re.sub(rf"^{name} = .*$", f"{name} = {value}", text, flags=re.M)
        problem = out / "kb" / f"{theirs}.py"
        problem.parent.mkdir(parents=True, exist_ok=True)
        problem.write_text(text)
        log = out / f"kb-{theirs}.log"
        env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "CUDA_VISIBLE_DEVICES": gpu}
        if len(gpus) > 1:  # each eval would place its lane on the same cores: none is placed (no builds here)
            env["HARNESS_BUILD_ISOLATION"] = "niced"
        peak, stop = [0], threading.Event()

        def watch() -> None:  # the GPU's memory in use, every half second: its peak over the judgement
            while not stop.wait(0.5):
                read = subprocess.run(["nvidia-smi", "-i", gpu, "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                      capture_output=True, text=True).stdout.split()
                peak[0] = max(peak[0], int(read[0]) if read else 0)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        rc, wall = sh([sys.executable, "-m", "harness", "eval", "--problem", str(problem), "--no-store", "--json",
                       "--baselines", "eager,compile", str(files[ours])], log,
                      min(left, float(os.environ.get("KB_EACH_S", "300"))), env)
        stop.set()
        verdicts = verdict_lines(log)
        if verdicts:
            v = verdicts[-1]
            flags = ",".join(f["name"] for f in v.get("flags") or [])
            phases = v.get("phase_seconds") or {}
            what = f"{v['status']} {v.get('runtime_ms') or 0:.2f} ms x{(v.get('speedup') or {}).get('eager', 0):.2f} eager " \
                   f"[{flags}] phases {phases}; {(v.get('error') or '')[:160]}"
        else:
            what = "no verdict: " + log.read_text(errors="replace")[-300:].replace("\n", " | ")
        with lock:
            rows.append(f"{theirs} {sizes} on GPU {gpu}: rc={rc} {wall:.0f} s, GPU memory peak {peak[0] / 1024:.1f} GiB: {what}")
            print(rows[-1], flush=True)

    def lane(gpu: str) -> None:
        while True:
            with lock:
                if not queue:
                    return
                ours, (theirs, sizes) = queue.pop(0)
            judge(gpu, ours, theirs, sizes)

    lanes = [threading.Thread(target=lane, args=(gpu,)) for gpu in gpus]
    for t in lanes:
        t.start()
    for t in lanes:
        t.join()


def service_sources(out: Path, count: int) -> tuple[list[str], Path]:
    """`count` distinct sources (plain PyTorch: no build) of gemm_scale_bn, and the folder holding them as files."""
    base = (ROOT / "tests/fixtures/candidates/cpu/torch_ops_correct.py").read_text()
    sources = [base + f"\n# variant {i}: a source of its own, so that no two are one judgement\n" for i in range(count)]
    folder = out / "service-sources"
    folder.mkdir(parents=True, exist_ok=True)
    for i, source in enumerate(sources):
        (folder / f"v{i:02d}.py").write_text(source)
    return sources, folder


def eval_same_sources(out: Path, rows: list[str], count: int = 32, timeout: float = 250) -> None:
    sources, folder = service_sources(out, count)
    log = out / "service-eval.log"
    rc, wall = sh([sys.executable, "-m", "harness", "eval", "--size", "kernelbench", "--no-store", "--json",
                   *map(str, sorted(folder.glob("*.py")))], log, timeout)
    done = verdict_lines(log)
    rows.append(f"harness eval, the service's {len(sources)} sources: rc={rc} {len(done)} verdicts in {wall:.0f} s: "
                f"{60 * len(done) / wall:.1f}/min")


def service_load(out: Path, rows: list[str], clients: int = 8, per_client: int = 4, gpus: str | None = None) -> None:
    """`gpus`: `harness serve --gpus` (a lane and a worker per GPU), else one lane."""
    import httpx

    from harness.service.client import Client

    sources, folder = service_sources(out, clients * per_client)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "HARNESS_API_KEYS": "k"}
    label = f"-gpus{gpus.replace(',', '_')}" if gpus else ""
    server = subprocess.Popen([sys.executable, "-m", "harness", "serve", "--port", str(port), "--store",
                               str(out / f"service{label}.sqlite"), *(["--gpus", gpus] if gpus else [])], env=env,
                              stdout=open(out / f"serve{label}.log", "w"), stderr=subprocess.STDOUT,
                              start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            httpx.get(url + "/v1/evaluations/x", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    latencies, verdicts, lock = [], [], threading.Lock()

    def client(number: int) -> None:
        with Client(url, "k", poll_s=0.5) as c:
            for source in sources[number::clients]:
                t = time.monotonic()
                job = c.submit(source, problem="gemm_scale_bn", size="kernelbench", device="cuda")
                with lock:
                    latencies.append(time.monotonic() - t)
                verdict = c.result(job, timeout_s=560)
                with lock:
                    verdicts.append(verdict)

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    for _ in range(20):  # the API's own answers, apart from the judging: GETs of done jobs
        t = time.monotonic()
        httpx.get(url + "/v1/evaluations/x", headers={"Authorization": "Bearer k"})
        latencies.append(time.monotonic() - t)
    server.terminate()
    server.wait(timeout=60)
    latencies.sort()
    ranked = sum(1 for v in verdicts if v.get("ranked"))
    rows.append(f"service{' --gpus ' + gpus if gpus else ''}: {len(verdicts)} verdicts ({ranked} ranked) from {clients} clients in {wall:.0f} s: "
                f"{60 * len(verdicts) / wall:.1f}/min; API answers p50 {1000 * statistics.median(latencies):.0f} ms, "
                f"p99 {1000 * latencies[int(0.99 * (len(latencies) - 1))]:.0f} ms")
    print(rows[-1], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("gpu-out"))
    parser.add_argument("--parts", default="suite,service,kernelbench", help="in this order; `eval`: harness eval on "
                        "the service's sources alone; `run`: harness run --problems on the replayed replies, twice")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[str] = []
    parts = args.parts.split(",")
    try:
        for part in parts:
            if part == "suite":
                suite_twice(args.out, rows)
            elif part == "service":
                service_load(args.out, rows)
                eval_same_sources(args.out, rows)
            elif part == "service-gpus":  # the service alone, a lane per GPU, then one lane
                service_load(args.out, rows, gpus="all")
                service_load(args.out, rows)
            elif part == "run":
                suite_run(args.out, rows)
            elif part == "eval":
                eval_same_sources(args.out, rows)
            elif part == "kernelbench":
                kernelbench_sizes(args.out, rows, budget_s=float(os.environ.get("KB_BUDGET_S", "420")))
    finally:
        print("\n".join(rows))


if __name__ == "__main__":
    main()
