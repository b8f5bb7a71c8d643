"""Memory-bound forwards (ReLU, a sum, LayerNorm, Swish on 64 MiB of fp32) on one core, median ms of each: run it in
many fresh interpreters, with the harness's CPU malloc settings and with and without torch's huge pages, to see
whether a process's speed is its own.

    export MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=68719476736
    for i in 1 2 3 4 5 6; do taskset -c 1 python3 tools/experiments/cpu_process_regimes.py; done
    for i in 1 2 3 4 5 6; do THP_MEM_ALLOC_ENABLE=1 taskset -c 1 python3 tools/experiments/cpu_process_regimes.py; done
"""
import json, os, statistics, sys, time
import torch
torch.set_num_threads(1)
n = 16 << 20  # 64 MiB of fp32
x = torch.randn(n)
ln = torch.nn.LayerNorm(1024)
ops = {"relu": lambda a: torch.relu(a), "sum": lambda a: a.view(64, -1).sum(1), "ln": lambda a: ln(a.view(-1, 1024)),
       "swish": lambda a: a * torch.sigmoid(a)}
out = {}
with torch.no_grad():
    for name, op in ops.items():
        times = []
        for i in range(25):
            a = x.clone() if i % 5 == 0 else x  # some fresh allocations
            t = time.perf_counter(); op(a); times.append((time.perf_counter() - t) * 1e3)
        out[name] = round(statistics.median(times[5:]), 2)
print(json.dumps(out))
