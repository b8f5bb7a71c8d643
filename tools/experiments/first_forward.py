"""Where a fresh process's first forward of the reference at `kernelbench` spends its time, on a GPU.

An executor's first checked call blocks in forward about 240 ms (later calls 3 ms plus the hold), for a candidate
that is the reference itself too, so not its own kernels' loading. Each mode runs in a fresh process: the reference
(Linear 4096 -> 4096, x * scale, BatchNorm1d in training mode, batch 16384) called three times, each behind a 66 ms
spin on the stream as the checked calls wait behind the hold; it prints forward's host time and the wait after it.
Modes, made before the first call: `none`; `alloc` (the caching allocator given a segment of three outputs first);
`handle` (cuBLAS's handle alone); `blas` (a small fp32 matmul: cuBLAS's handle and workspace); `alloc+blas`; `eager` (CUDA_MODULE_LOADING=EAGER).

    python3 tools/experiments/first_forward.py            # every mode, a table last
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

MODES = ("none", "alloc", "handle", "blas", "alloc+blas", "eager")


def one(mode: str) -> None:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4096, 4096)).cuda()
    bn = torch.nn.BatchNorm1d(4096).cuda().train()
    x = torch.randn(16384, 4096, device="cuda")
    torch.cuda.synchronize()
    began = time.perf_counter()
    if mode == "handle":
        torch.cuda.current_blas_handle()
        block = torch.empty(3 * x.numel(), device="cuda")
        del block
    if "blas" in mode:
        a = torch.randn(64, 64, device="cuda")
        (a @ a).sum().item()
    torch.cuda.synchronize()
    made = (time.perf_counter() - began) * 1e3
    cycles = int(0.066 * 1.98e9)  # an H200's boost clock: about 66 ms
    rows = []
    for _ in range(3):
        torch.cuda._sleep(cycles)  # the hold: the stream waits while forward enqueues
        start = time.perf_counter()
        with torch.no_grad():
            out = bn(model(x) * 0.5)
        called = time.perf_counter()
        torch.cuda.synchronize()
        rows.append(((called - start) * 1e3, (time.perf_counter() - called) * 1e3))
        del out
    print("ROW", mode, " ".join(f"{f:.1f}/{w:.1f}" for f, w in rows), f"(made before: {made:.1f} ms)", flush=True)


def main() -> None:
    if len(sys.argv) > 1:
        one(sys.argv[1])
        return
    lines = []
    for mode in MODES:
        env = dict(os.environ)
        if mode == "eager":
            env["CUDA_MODULE_LOADING"] = "EAGER"
        started = time.perf_counter()
        out = subprocess.run([sys.executable, __file__, mode], env=env, capture_output=True, text=True, timeout=120)
        rows = [line for line in out.stdout.splitlines() if line.startswith("ROW")]
        lines.append(f"{mode:<11} {rows[0].split(' ', 2)[2] if rows else out.stderr[-300:]}   "
                     f"(process {time.perf_counter() - started:.1f} s)")
    print("mode        calls 1-3: forward ms / wait after it ms")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
