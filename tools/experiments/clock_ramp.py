"""What moves a GEMM timed by device events on a GPU: the time the device sat idle before it, and load on the host's
other cores (builds). Prints, for each condition, the median of the first calls and of the rest (ms)."""
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


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = True
    x = torch.randn(16384, 4096, device="cuda")
    w = torch.randn(4096, 4096, device="cuda")
    step = lambda: torch.mm(x, w.t())  # noqa: E731 - the GEMM of part:gemm_tf32 at `kernelbench`
    timed_calls(step, 200)
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
