"""Two fresh processes on core 0, each a memory-bound forward (relu, ln or sum) on 64 MiB buffers of its own, timed by
its own clock in windows of three calls, either alternating (A B A B ...) or in blocks (A's thirty, then B's). Prints,
per run, each series' median and spread (IQR over median), A's median over B's, and the window-by-window ratio's median
and spread: whether a forward timed beside another compares like with like where one timed seconds later does not.

    export MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=68719476736
    python3 tools/experiments/cpu_interleave.py relu 5
"""
import os, statistics, sys, time
import multiprocessing as mp

def worker(conn, op, n, calls):
    os.sched_setaffinity(0, {0})
    import torch
    torch.set_num_threads(1)
    xs = [torch.randn(n) for _ in range(3)]
    y = torch.empty(n).fill_(1)
    ln = torch.nn.LayerNorm(1024)
    def f(x):
        if op == "relu":
            torch.clamp_min(x, 0, out=y)
        elif op == "ln":
            ln(x.view(-1, 1024))
        elif op == "sum":
            x.view(-1, 512).sum(dim=1)
    with torch.no_grad():
        for _ in range(20):
            f(xs[0])
        k = 0
        while True:
            msg = conn.recv()
            if msg is None:
                return
            t = time.perf_counter()
            for _ in range(calls):
                f(xs[k % 3]); k += 1
            conn.send((time.perf_counter() - t) * 1e3 / calls)

def q(v):
    v = sorted(v); n = len(v)
    return v[n // 4], statistics.median(v), v[(3 * n) // 4]

def run(op, n, calls, windows, mode):
    pa, ca = mp.Pipe(); pb, cb = mp.Pipe()
    A = mp.Process(target=worker, args=(ca, op, n, calls)); B = mp.Process(target=worker, args=(cb, op, n, calls))
    A.start(); B.start()
    a, b = [], []
    def one(p, out):
        p.send(1); out.append(p.recv())
    if mode == "alt":
        for _ in range(windows):
            one(pa, a); one(pb, b)
    else:
        for _ in range(windows): one(pa, a)
        for _ in range(windows): one(pb, b)
    pa.send(None); pb.send(None); A.join(); B.join()
    qa, qb = q(a), q(b)
    r = [x / y for x, y in zip(a, b)]
    qr = q(r)
    return dict(a_med=qa[1], a_iqr=(qa[2]-qa[0])/qa[1], b_med=qb[1], b_iqr=(qb[2]-qb[0])/qb[1],
                ratio=qa[1]/qb[1], pair_med=qr[1], pair_iqr=(qr[2]-qr[0])/qr[1])

if __name__ == "__main__":
    op, runs = sys.argv[1], int(sys.argv[2])
    n = 16 << 20
    for mode in ("alt", "block"):
        for i in range(runs):
            d = run(op, n, 3, 30, mode)
            print(f"{op} {mode} {i}: A {d['a_med']:.2f} ({d['a_iqr']:.0%})  B {d['b_med']:.2f} ({d['b_iqr']:.0%})  "
                  f"A/B medians {d['ratio']:.3f}  paired {d['pair_med']:.3f} (IQR {d['pair_iqr']:.0%})", flush=True)
