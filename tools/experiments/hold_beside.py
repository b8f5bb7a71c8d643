"""What an executor's stream hold costs the referee's float64 work beside it, two processes on one GPU: the referee's
part runs float64 matmuls back to back and counts them a second, while the executor's part holds its stream (as a
checked call's hold does, 66 ms at `kernelbench`) then makes a short call, over and over: with no hold at all, with a
spinning kernel (`torch.cuda._sleep`, today's hold), or with a stream waiting on a device word that another stream of
its process writes once the hold's time is up (`cuStreamWaitValue32`: no kernel runs while it waits; on an H200 it was
never released, and that mode is reported `hung`), or with a host function on the stream that sleeps the hold's time
(`cuLaunchHostFunc` calling libc's `usleep`: no kernel either; the harness's own hold, evaluator/executor/hold.py).

    python3 tools/experiments/hold_beside.py [--seconds 3] [--hold-ms 66] [--modes idle,spin,wait,host]
"""

import argparse
import ctypes
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # the repository's root


def referee_part(ready, go, stop, out):
    import torch

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float64)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.float64)
    for _ in range(5):
        a @ b
    torch.cuda.synchronize()
    ready.set()
    go.wait()
    done, started = 0, time.perf_counter()
    while not stop.is_set():
        for _ in range(4):
            a @ b
        torch.cuda.synchronize()
        done += 4
    out.put(done / (time.perf_counter() - started))


def wait_value():
    """cuStreamWaitValue32 from the driver (its _v2 symbol where there is one), or None."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    for name in ("cuStreamWaitValue32_v2", "cuStreamWaitValue32"):
        fn = getattr(cuda, name, None)
        if fn is not None:
            fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
            fn.restype = ctypes.c_int
            return fn
    return None


def executor_part(mode, hold_ms, ready, go, stop, out):
    import torch

    x = torch.randn(4096, 4096, device="cuda")
    stream, writer = torch.cuda.Stream(), torch.cuda.Stream()
    word = torch.zeros(1, dtype=torch.int32, device="cuda")
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    torch.cuda._sleep(1_000_000)
    end.record()
    end.synchronize()
    cycles = int(hold_ms * 1_000_000 / begin.elapsed_time(end))
    waiter = wait_value() if mode == "wait" else None
    host = None
    if mode == "host":  # the harness's own hold, prepared as an executor prepares it
        from evaluator.executor import hold

        why = hold.prepare()
        host = hold.StreamHold(hold_ms, "cuda") if why is None else None
    torch.cuda.synchronize()
    ready.set()
    go.wait()
    holds, errors = [], []
    n = 0
    while not stop.is_set() and mode != "idle":
        n += 1
        started = time.perf_counter()
        with torch.cuda.stream(stream):
            if mode == "spin":
                torch.cuda._sleep(cycles)
            elif mode == "host":
                if host is None:
                    errors.append(why)
                    break
                host.queue()
            else:
                rc = waiter(stream.cuda_stream, word.data_ptr(), n, 0)  # 0: CU_STREAM_WAIT_VALUE_GEQ
                if rc != 0:
                    errors.append(rc)
                    break

                def release(value=n):
                    time.sleep(hold_ms / 1000)
                    with torch.cuda.stream(writer):
                        word.fill_(value)
                threading.Thread(target=release, daemon=True).start()
            x @ x  # the call behind the hold
        stream.synchronize()
        holds.append((time.perf_counter() - started) * 1000)
    out.put((holds, errors))


def run(mode, seconds, hold_ms):
    ctx = mp.get_context("spawn")
    ready = [ctx.Event(), ctx.Event()]
    go, stop = ctx.Event(), ctx.Event()
    ref_out, ex_out = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=referee_part, args=(ready[0], go, stop, ref_out)),
             ctx.Process(target=executor_part, args=(mode, hold_ms, ready[1], go, stop, ex_out))]
    for p in procs:
        p.start()
    for r in ready:
        r.wait(120)
    go.set()
    time.sleep(seconds)
    stop.set()
    try:
        rate = ref_out.get(timeout=30)
        holds, errors = ex_out.get(timeout=30)
    except Exception:  # a hold that never ends: say so and go on to the next mode
        rate, holds, errors = float("nan"), [], ["hung"]
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
    return rate, holds, errors


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--hold-ms", type=float, default=66.0)
    parser.add_argument("--modes", default="idle,spin,wait,host")
    args = parser.parse_args()
    rows = []
    for mode in args.modes.split(","):
        rate, holds, errors = run(mode, args.seconds, args.hold_ms)
        rows.append((mode, rate, holds, errors))
        print(mode, rate, len(holds), errors, flush=True)
    idle = next((rate for mode, rate, _, _ in rows if mode == "idle"), None)
    print(f"{'hold':6} {'fp64 matmuls/s':>15} {'vs idle':>8} {'holds':>6} {'hold+call ms (median)':>22}  errors")
    for mode, rate, holds, errors in rows:
        ratio = f"{rate / idle:.3f}" if idle else "-"
        median = f"{statistics.median(holds):.1f}" if holds else "-"
        print(f"{mode:6} {rate:15.1f} {ratio:>8} {len(holds):6d} {median:>22}  {errors or ''}")


if __name__ == "__main__":
    main()
