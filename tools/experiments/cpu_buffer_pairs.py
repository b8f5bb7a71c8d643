"""A memory-bound forward (ReLU as `clamp_min(x, 0, out=y)`, 64 MiB of fp32 in and out) on one core, in one process,
over three input buffers and four output buffers: the median ms of each (input, output) pair, twice. Shows whether a
process's speed is its own or its buffers': run it in a few fresh interpreters with the harness's CPU malloc settings.

    export MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=68719476736
    for i in 1 2 3; do taskset -c 1 python3 tools/experiments/cpu_buffer_pairs.py $i; done
"""
import statistics
import sys
import time

import torch

torch.set_num_threads(1)
n = 16 << 20
inputs = [torch.randn(n) for _ in range(3)]
outputs = [torch.empty(n).fill_(1) for _ in range(4)]  # touched: no page faults in the timed calls
medians: dict[str, list[float]] = {}
with torch.no_grad():
    for _ in range(2):
        for i, x in enumerate(inputs):
            for j, y in enumerate(outputs):
                for _ in range(2):
                    torch.clamp_min(x, 0, out=y)
                times = []
                for _ in range(7):
                    start = time.perf_counter()
                    torch.clamp_min(x, 0, out=y)
                    times.append((time.perf_counter() - start) * 1e3)
                medians.setdefault(f"x{i}y{j}", []).append(round(statistics.median(times), 2))
print(sys.argv[1] if len(sys.argv) > 1 else "", " ".join(f"{k}:{a}/{b}" for k, (a, b) in medians.items()))
