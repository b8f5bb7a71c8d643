"""The service under load on loopback: a real `harness serve`, 20 client threads sending small CPU jobs
through `harness.Client`, the server killed with SIGKILL halfway and started again on the same store; then every
job's verdict checked (none lost) and the store's count of judgements (none judged twice). Prints the API's own
answer times (each POST and GET, not the judging), p50 and p99.

    python3 tools/gpu_checks/service_load.py [--clients 20] [--jobs 300]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=300)
    args = parser.parse_args()
    import httpx

    from harness.service.client import Client

    folder = Path(tempfile.mkdtemp(prefix="kh-load-"))
    store = folder / "jobs.sqlite"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "HARNESS_API_KEYS": "k"}

    def start() -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-m", "harness", "serve", "--port", str(port), "--store", str(store)],
                                env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        for _ in range(300):
            try:
                httpx.get(url + "/v1/evaluations/x", timeout=1)
                return proc
            except httpx.HTTPError:
                time.sleep(0.1)
        raise SystemExit("the server did not start")

    # small CPU jobs: sources that parse and define no ModelNew, judged at once (a parse_error), each distinct
    sources = [f"import torch\nVALUE = {i}\n" for i in range(args.jobs)]
    latencies: list[float] = []
    ids: dict[int, str] = {}
    lock = threading.Lock()
    server = start()
    killed = threading.Event()

    def client(number: int) -> None:
        with Client(url, "k", timeout_s=30) as c:
            for i in range(number, args.jobs, args.clients):
                for _ in range(100):  # a request the kill cut off is sent again: the same source, the same job
                    try:
                        t = time.monotonic()
                        job = c.submit(sources[i], problem="gemm_scale_bn", size="small", device="cpu")
                        with lock:
                            latencies.append(time.monotonic() - t)
                            ids[i] = job
                        break
                    except httpx.HTTPError:
                        time.sleep(0.2)

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(args.clients)]
    for t in threads:
        t.start()
    while len(ids) < args.jobs // 2:
        time.sleep(0.01)
    os.killpg(server.pid, signal.SIGKILL)  # halfway: jobs queued, one being judged
    server.wait()
    server = start()
    for t in threads:
        t.join()
    verdicts = {}
    with Client(url, "k") as c:
        for i, job in ids.items():
            verdicts[i] = c.result(job, timeout_s=300)
        wall = time.monotonic() - started
        for job in ids.values():  # a GET of a done job: the API's own answer, no judging in it
            t = time.monotonic()
            c.job(job)
            latencies.append(time.monotonic() - t)
    os.killpg(server.pid, signal.SIGTERM)
    server.wait(timeout=60)
    judged = sqlite3.connect(store).execute("SELECT COUNT(*), SUM(judged) FROM jobs").fetchone()
    latencies.sort()
    print(f"{args.clients} clients, {args.jobs} jobs, SIGKILL and restart halfway: {len(verdicts)} verdicts "
          f"({sorted({v['status'] for v in verdicts.values()})}) in {wall:.1f} s; store: {judged[0]} jobs, "
          f"{judged[1]} judgements; API answers ({len(latencies)}): p50 {1000 * statistics.median(latencies):.1f} ms, "
          f"p99 {1000 * latencies[int(0.99 * (len(latencies) - 1))]:.1f} ms")
    assert len(verdicts) == args.jobs and judged == (args.jobs, args.jobs), "lost or judged twice"


if __name__ == "__main__":
    main()
