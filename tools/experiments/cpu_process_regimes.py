"""Memory-bound forwards (ReLU, a sum, LayerNorm, Swish on 64 MiB of fp32) on one core in a fresh interpreter: for
each, the median ms of calls 6-20 and of calls 21-40, and the page faults of calls 21-40. Run it in many fresh
interpreters, with the harness's CPU malloc settings and with and without torch's huge pages, to see which part of a
process's speed is its warm-up (its heap faulted in) and which is its own.

    export MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=68719476736
    for i in $(seq 10); do taskset -c 1 python3 tools/experiments/cpu_process_regimes.py; done
    for i in $(seq 10); do THP_MEM_ALLOC_ENABLE=1 taskset -c 1 python3 tools/experiments/cpu_process_regimes.py; done
"""
import json, resource, statistics, time
import torch
torch.set_num_threads(1)
n = 16 << 20  # 64 MiB of fp32
x = torch.randn(n)
ln = torch.nn.LayerNorm(1024)
ops = {"relu": lambda a: torch.relu(a), "sum": lambda a: a.view(64, -1).sum(1), "ln": lambda a: ln(a.view(-1, 1024)),
       "swish": lambda a: a * torch.sigmoid(a)}


def faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


out = {}
with torch.no_grad():
    for name, op in ops.items():
        times, faulted = [], []
        for i in range(40):
            a = x.clone() if i % 5 == 0 else x  # some fresh allocations
            f, t = faults(), time.perf_counter()
            op(a)
            times.append((time.perf_counter() - t) * 1e3)
            faulted.append(faults() - f)
        out[name] = {"early_ms": round(statistics.median(times[5:20]), 1), "late_ms": round(statistics.median(times[20:]), 1),
                     "late_faults": sum(faulted[20:])}
print(json.dumps(out))
