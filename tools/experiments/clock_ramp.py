"""What moves a GEMM timed by device events on a GPU: the time the device sat idle before it, and load on the host's
other cores (builds). Prints, for each condition, the median of the first calls and of the rest (ms).
`--warm`: instead, after the device idled or ran the GEMM back to back for PRIOR_S, how long an untimed run of it
(each call waited for, as a baseline's warm-up) brings its time to the same figure either way. `--contexts`: the
same after the work a referee's round does before a baseline's series: a twin judged (checked calls behind idle
holds, then windows of a few fp32 calls), or a full round's earlier baselines (seconds of GEMMs back to back)."""
import os
import statistics
import subprocess
import sys
import time

import torch


def clocks() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception as error:  # noqa: BLE001 - a reading, nothing depends on it
        return f"no nvidia-smi ({error})"


def timed_calls(step, calls: int) -> list[float]:
    out = []
    for _ in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end))
    return out


def load(cores: list[int]) -> list[subprocess.Popen]:
    """A build's kind of load: each process on one core, churning 256 MiB of memory."""
    code = "import os,numpy as n;os.sched_setaffinity(0,{%d});a=n.ones(1<<25);b=n.empty_like(a)\nwhile 1: n.copyto(b,a);a,b=b,a"
    return [subprocess.Popen([sys.executable, "-c", code % c]) for c in cores]


PRIOR_S = 3.0


def run_for(step, seconds: float) -> None:
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        step()
        torch.cuda.synchronize()


def warm_table(step, warms: tuple, befores: dict) -> None:
    """For each untimed run's length and each condition before it (`befores`: a name and what the device is given),
    the medians over two repeats of the GEMM's calls 1-10 and 11-40 after both, and the clocks after."""
    rows = []
    for warm_s in warms:
        for before, give in befores.items():
            firsts, rests = [], []
            for _ in range(2):
                torch.cuda.synchronize()
                give()
                run_for(step, warm_s)
                times = timed_calls(step, 40)
                firsts.append(statistics.median(times[:10]))
                rests.append(statistics.median(times[10:]))
            rows.append((warm_s, before, statistics.median(firsts), statistics.median(rests), clocks()))
    print(f"{'warm s':>6} {'after':>12} {'calls 1-10 ms':>13} {'calls 11-40 ms':>14}  clocks after")
    for warm_s, before, first, rest, clock in rows:
        print(f"{warm_s:6.2f} {before:>12} {first:13.3f} {rest:14.3f}  {clock}")


def twin_like(fp32) -> None:
    """About what judging the reference as a candidate puts on the device at `kernelbench`: nine checked calls, each
    behind a 66 ms hold with the device idle, then about 30 windows of three fp32 calls with short gaps between."""
    for _ in range(9):
        time.sleep(0.066)
        fp32()
        torch.cuda.synchronize()
    for _ in range(30):
        for _ in range(3):
            fp32()
        torch.cuda.synchronize()
        time.sleep(0.005)


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = True
    x = torch.randn(16384, 4096, device="cuda")
    w = torch.randn(4096, 4096, device="cuda")
    step = lambda: torch.mm(x, w.t())  # noqa: E731 - the GEMM of part:gemm_tf32 at `kernelbench`
    timed_calls(step, 200)
    if "--warm" in sys.argv:
        return warm_table(step, (0.0, 0.1, 0.25, 0.5, 1.0), {f"idle {PRIOR_S:g} s": lambda: time.sleep(PRIOR_S),
                                                              f"busy {PRIOR_S:g} s": lambda: run_for(step, PRIOR_S)})
    if "--contexts" in sys.argv:
        def fp32():  # the reference's GEMM at `kernelbench` without TF32, about 11 ms
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.mm(x, w.t())
            torch.backends.cuda.matmul.allow_tf32 = True
        # 2 s idle first: whatever the candidate before left, let go
        return warm_table(step, (0.25, 0.5, 1.0, 2.0), {
            "twin": lambda: (time.sleep(2.0), twin_like(fp32)),
            "full round": lambda: (time.sleep(2.0), run_for(fp32, 1.0), run_for(step, 1.5))})
    rows = []

    def measure(label: str, idle_s: float, repeats: int = 3) -> None:
        firsts, rests = [], []
        for _ in range(repeats):
            torch.cuda.synchronize()
            time.sleep(idle_s)
            times = timed_calls(step, 40)
            firsts.append(statistics.median(times[:3]))
            rests.append(statistics.median(times[10:]))
        rows.append((label, idle_s, statistics.median(firsts), statistics.median(rests), clocks()))

    for idle_s in (0.0, 0.5, 2.0, 5.0):
        measure("quiet host", idle_s)
    cores = sorted(os.sched_getaffinity(0))
    procs = load(cores[1:])
    time.sleep(2)
    try:
        for idle_s in (0.0, 0.5, 2.0, 5.0):
            measure(f"load on {len(cores) - 1} cores", idle_s)
    finally:
        for proc in procs:
            proc.kill()
    measure("quiet host again", 0.0)
    print(f"{'condition':22} {'idle s':>6} {'first 3 ms':>10} {'calls 10-40 ms':>14}  clocks after (sm, mem, W, C)")
    for label, idle_s, first, rest, clock in rows:
        print(f"{label:22} {idle_s:6.1f} {first:10.3f} {rest:14.3f}  {clock}")


if __name__ == "__main__":
    main()
