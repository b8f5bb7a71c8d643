"""At `small` on the device: does eager's back-to-back call in a bare process cost what the
referee's baseline reads (0.24 ms on an H100, when device windows time an eager-like candidate at 0.088 ms)?
Times each callable as the referee's Timer.one does (events around each of K calls launched back to back, one
synchronize after), in a bare process, alone and with a process spinning on the same core; and the host's launch
time per call. Prints a table.

    python3 tools/experiments/launch_rate.py
"""

import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "reference", "gemm_scale_bn"))
from model import Model  # noqa: E402


def per_call(fn, inputs, calls=32, reps=30):
    events, hosts = [], []
    for _ in range(reps):
        torch.cuda.synchronize()
        marks, start = [], time.perf_counter()
        for k in range(calls):
            b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            b.record()
            fn(*inputs[k])
            e.record()
            marks.append((b, e))
        launched = time.perf_counter() - start
        torch.cuda.synchronize()
        events.append(sum(b.elapsed_time(e) for b, e in marks) / calls)
        hosts.append(launched * 1e3 / calls)
    return statistics.median(events), statistics.median(hosts)


def main():
    torch.manual_seed(0)
    model = Model(1024, 512, (512,)).cuda().train()
    inputs = [[torch.randn(128, 1024, device="cuda")] for _ in range(32)]
    callables = {"eager": model, "compile": torch.compile(model)}
    with torch.no_grad():
        for fn in callables.values():
            for _ in range(3):
                fn(*inputs[0])
        rows = []
        for label, pin in (("alone", False), ("core shared with a spinner", True)):
            spinner = None
            if pin:
                core = sorted(os.sched_getaffinity(0))[0]
                os.sched_setaffinity(0, {core})
                spinner = subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", "while True: pass"])
                time.sleep(0.5)
            for name, fn in callables.items():
                for prec in ("highest", "high"):
                    torch.set_float32_matmul_precision(prec)
                    ev, host = per_call(fn, inputs)
                    rows.append((label, name + ("_tf32" if prec == "high" else ""), ev, host))
            if spinner is not None:
                spinner.kill()
    print(torch.cuda.get_device_name())
    print(f"{'process':<30}{'callable':<16}{'events ms':>10}{'launch ms':>10}")
    for label, name, ev, host in rows:
        print(f"{label:<30}{name:<16}{ev:>10.4f}{host:>10.4f}")


if __name__ == "__main__":
    main()
