"""Measured: what a handoff between two processes costs per call, when each call's inputs
may appear only once the call before has committed (so calls of a window cannot be batched), and how much it
spreads. One GPU; a parent (the referee's part) and a child (the executor's part) share a page of host memory.

    python3 tools/experiments/handoff_latency.py [--calls 200] [--work-us 100]

Each call is `work-us` of device work (torch.cuda._sleep). Per scheme, the median and IQR of the time between two
commits as the parent sees them, less the device work (the per-call overhead), over two passes:

  sync      the executor waits for the device after each call and writes its commit from the host (the host turn
            one-call windows make today, without the pipes)
  copy      the executor's stream copies the commit into the shared page behind each call (no host wait); its host
            spins for the parent's go before it launches the next
  waitvalue the executor queues every call up front, each behind cuStreamWaitValue32 on the parent's go in the
            shared page (the device polls host memory); the parent spins on each commit and writes the next go

Prints a table last. Not a test: an experiment for the design of windows of K calls that rank.
"""

import argparse
import ctypes
import mmap
import os
import statistics
import struct
import sys
import time

PAGE = 4096
GO, COMMIT = 0, 2048  # the parent's go counter, the child's commit counter (uint32 each, at these offsets)


def read(buf, offset):
    return struct.unpack_from("<I", buf, offset)[0]


def child(fd: int, scheme: str, calls: int, work_us: float) -> None:
    import torch

    buf = mmap.mmap(fd, PAGE)
    host = torch.frombuffer(buf, dtype=torch.uint8)
    cudart = torch.cuda.cudart()
    assert cudart.cudaHostRegister(host.data_ptr(), PAGE, 0) == 0
    commit = host[COMMIT:COMMIT + 4].view(torch.int32)
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    from device_handoff import _cycles  # beside this file

    cycles = _cycles(work_us)
    stream = torch.cuda.current_stream()
    if scheme == "waitvalue":
        libcuda = ctypes.CDLL("libcuda.so.1")
        wait = libcuda.cuStreamWaitValue32_v2
        wait.argtypes = (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint)
        for k in range(1, calls + 1):
            rc = wait(stream.cuda_stream, host.data_ptr() + GO, k, 0)  # CU_STREAM_WAIT_VALUE_GEQ
            assert rc == 0, rc
            torch.cuda._sleep(cycles)
            counter.fill_(k)
            commit.copy_(counter, non_blocking=True)
        torch.cuda.synchronize()
        return
    for k in range(1, calls + 1):
        while read(buf, GO) < k:
            pass
        torch.cuda._sleep(cycles)
        if scheme == "sync":
            torch.cuda.synchronize()
            struct.pack_into("<I", buf, COMMIT, k)
        else:
            counter.fill_(k)
            commit.copy_(counter, non_blocking=True)
    torch.cuda.synchronize()


def parent(scheme: str, calls: int, work_us: float) -> list[float]:
    fd = os.memfd_create("handoff")
    os.ftruncate(fd, PAGE)
    buf = mmap.mmap(fd, PAGE)
    pid = os.fork()
    if pid == 0:
        try:
            child(fd, scheme, calls, work_us)
            os._exit(0)
        except BaseException:
            import traceback

            traceback.print_exc()
            os._exit(1)
    seen = []
    deadline = time.monotonic() + 60
    time.sleep(3)  # the child's CUDA start
    struct.pack_into("<I", buf, GO, 1)
    for k in range(1, calls + 1):
        spins = 0
        while read(buf, COMMIT) < k:
            spins += 1
            if spins % 100_000 == 0:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    raise RuntimeError(f"{scheme}: the child exited ({status}) before commit {k}")
                if time.monotonic() > deadline:
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                    raise RuntimeError(f"{scheme}: no commit {k}")
        seen.append(time.perf_counter())
        struct.pack_into("<I", buf, GO, k + 1)
    _, status = os.waitpid(pid, 0)
    assert status == 0, status
    return [(b - a) * 1e6 - work_us for a, b in zip(seen[10:], seen[11:])]


def quartiles(values):
    q = statistics.quantiles(values, n=4)
    return q[0], statistics.median(values), q[2]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--work-us", type=float, default=100.0)
    args = parser.parse_args()
    rows = []
    for scheme in ("sync", "copy", "waitvalue"):
        for attempt in range(2):
            try:
                over = parent(scheme, args.calls, args.work_us)
            except Exception as err:  # noqa: BLE001 - said in the table
                rows.append((scheme, attempt, str(err)[:60]))
                continue
            q1, med, q3 = quartiles(over)
            rows.append((scheme, attempt, f"{med:8.1f} us over the work a call (IQR {q3 - q1:6.1f} us; "
                                          f"p90 {statistics.quantiles(over, n=10)[8]:7.1f})"))
    print(f"handoff per call beyond {args.work_us:g} us of device work, {args.calls} calls, GPU "
          f"{os.popen('nvidia-smi --query-gpu=name --format=csv,noheader').read().strip()}")
    for scheme, attempt, text in rows:
        print(f"  {scheme:10s} pass {attempt}: {text}")


if __name__ == "__main__":
    sys.exit(main())
