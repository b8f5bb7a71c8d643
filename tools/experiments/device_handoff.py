"""Measured at `kernelbench` and `wide`: can calls too large for the host handoff be handed
off on the device, between two processes (two CUDA contexts on one GPU), with no host in the loop?

    python3 tools/experiments/device_handoff.py [--calls 8] [--windows 30]

A child (the executor's part) queues K calls up front, each behind cuStreamWaitValue64 on GO=k in a page of shared,
page-locked host memory, then its work (a sleep of --work-us, then its input buffer copied into its output buffer),
then COMMIT=k written by its stream (cuStreamWriteValue64). The parent (the referee's part) queues on a stream of its
own: call k's inputs copied from its private memory into the child's input buffer (CUDA IPC), GO=k, a wait for
COMMIT>=k, the child's output copied into the parent's private memory. Its device events around that stream give the
window. Per call, the window less the child's own events for its calls is the handoff's cost: two context switches
(the GPU time-slices two processes' contexts) and the parent's two copies.

Each case runs --windows windows; printed: the cost per call (median, IQR over windows) and the window's spread
against the child's events' spread. Not a test: an experiment for the design.
"""

import argparse
import ctypes
import mmap
import os
import statistics
import sys
import time

import torch
import torch.multiprocessing as mp

PAGE = 4096
GO, COMMIT, STOP = 0, 64, 128


def _ops():
    driver = ctypes.CDLL("libcuda.so.1")
    wait, write = driver.cuStreamWaitValue64_v2, driver.cuStreamWriteValue64_v2
    for op in (wait, write):
        op.argtypes, op.restype = (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint), ctypes.c_int
    return wait, write


def _page(path):
    fd = os.open(path, os.O_RDWR)
    buf = mmap.mmap(fd, PAGE)
    host = torch.frombuffer(buf, dtype=torch.uint8)
    assert torch.cuda.cudart().cudaHostRegister(host.data_ptr(), PAGE, 0) == 0
    return buf, host.data_ptr(), host


def _cycles(us):
    torch.cuda._sleep(1_000_000)
    b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    b.record()
    torch.cuda._sleep(1_000_000)
    e.record()
    e.synchronize()
    return int(us * 1e-3 * 1_000_000 / b.elapsed_time(e))


def child(path, nbytes, work_us, calls, windows, queue, done):
    torch.cuda.init()
    buf, at, host = _page(path)
    wait, write = _ops()
    x = torch.zeros(max(nbytes, 16), dtype=torch.uint8, device="cuda")
    out = torch.zeros_like(x)
    queue.put((x, out))
    cycles = _cycles(work_us) if work_us else 0
    stream = torch.cuda.Stream()
    marks = []
    k = 0
    with torch.cuda.stream(stream):
        for _ in range(windows):
            for _ in range(calls):
                k += 1
                assert wait(stream.cuda_stream, at + GO, k, 0) == 0
                b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                b.record()
                if cycles:
                    torch.cuda._sleep(cycles)
                if nbytes:
                    out.copy_(x)
                e.record()
                assert write(stream.cuda_stream, at + COMMIT, k, 0) == 0
                marks.append((b, e))
    stream.synchronize()
    queue.put([b.elapsed_time(e) for b, e in marks])
    done.wait()


_PARENT_PAGE = {}


def case(nbytes, work_us, calls, windows):
    path = f"/dev/shm/device_handoff_{os.getpid()}"
    if not _PARENT_PAGE:  # registered once: the same range twice is refused
        with open(path, "wb") as f:
            f.write(b"\0" * PAGE)
        _PARENT_PAGE["page"] = _page(path)
    buf, at, host = _PARENT_PAGE["page"]
    buf[:PAGE] = b"\0" * PAGE
    ctx = mp.get_context("spawn")
    queue, done = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=child, args=(path, nbytes, work_us, calls, windows, queue, done))
    proc.start()
    try:
        wait, write = _ops()
        x, out = queue.get(timeout=120)
        srcs = [torch.randint(0, 255, (max(nbytes, 16),), dtype=torch.uint8, device="cuda") for _ in range(calls)]
        caps = [torch.empty_like(s) for s in srcs]
        stream = torch.cuda.Stream()
        spans, hosts, k = [], [], 0
        for _ in range(windows):
            b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            started = time.perf_counter()
            with torch.cuda.stream(stream):
                b.record()
                for i in range(calls):
                    k += 1
                    if nbytes:
                        x.copy_(srcs[i])
                    assert write(stream.cuda_stream, at + GO, k, 0) == 0
                    assert wait(stream.cuda_stream, at + COMMIT, k, 0) == 0
                    if nbytes:
                        caps[i].copy_(out)
                e.record()
            deadline = time.monotonic() + 30
            while not e.query():
                if time.monotonic() > deadline:
                    raise RuntimeError("window did not end in 30 s")
            hosts.append((time.perf_counter() - started) * 1e3)
            spans.append(b.elapsed_time(e))
        events = queue.get(timeout=60)
        if nbytes:
            assert torch.equal(caps[-1], srcs[-1]), "the last call's output is not its input"
        done.set()
        proc.join(30)
        per_window = [sum(events[w * calls:(w + 1) * calls]) for w in range(windows)]
        cost = [(s - p) / calls for s, p in zip(spans[2:], per_window[2:])]
        return cost, [s / calls for s in spans[2:]], [p / calls for p in per_window[2:]], hosts[2:]
    finally:
        if proc.is_alive():
            proc.kill()


def iqr(v):
    q = statistics.quantiles(v, n=4)
    return q[2] - q[0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--windows", type=int, default=30)
    args = parser.parse_args()
    rows = []
    for label, nbytes, work_us, calls in [("bare GO/COMMIT, 1 ms work", 0, 1000, args.calls),
                                          ("4 MiB each way, 100 us work", 4 << 20, 100, args.calls),
                                          ("256 MiB each way, 2 ms work", 256 << 20, 2000, args.calls),
                                          ("256 MiB each way, 2 ms work, K=1", 256 << 20, 2000, 1),
                                          ("64 MiB each way, 500 us work", 64 << 20, 500, args.calls)]:
        try:
            cost, window, events, hosts = case(nbytes, work_us, calls, args.windows)
        except Exception as err:  # noqa: BLE001 - said in the table
            import traceback

            traceback.print_exc()
            rows.append(f"{label:38s} failed: {err!r:.120}")
            continue
        rows.append(f"{label:38s} K={calls:2d} cost/call {statistics.median(cost) * 1e3:8.1f} us "
                    f"(IQR {iqr(cost) * 1e3:6.1f}); per-call window {statistics.median(window):.4f} ms IQR "
                    f"{iqr(window) * 1e3:6.1f} us vs events {statistics.median(events):.4f} ms IQR "
                    f"{iqr(events) * 1e3:6.1f} us; host {statistics.median(hosts):.3f} ms/window")
    print("device handoff between two processes on", torch.cuda.get_device_name())
    for row in rows:
        print(" ", row)


if __name__ == "__main__":
    sys.exit(main())
