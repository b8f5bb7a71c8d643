import ctypes, os, sys, statistics, torch, torch.nn as nn
here = os.path.dirname(os.path.abspath(__file__))
names = sys.argv[1].split(",")
libs = {n: ctypes.CDLL(os.path.join(here, f"libgb_{n}.so")) for n in names}
for L in libs.values():
    L.gbh_ws_floats.restype = ctypes.c_size_t
    L.gbh_ws_floats.argtypes = [ctypes.c_int] * 4 + [ctypes.c_void_p] * 2
    L.gbh_forward.restype = ctypes.c_char_p
    L.gbh_forward.argtypes = [ctypes.c_void_p] * 11 + [ctypes.c_int] * 5 + [ctypes.c_float, ctypes.c_int, ctypes.c_float, ctypes.c_int, ctypes.c_void_p]
P = lambda t: ctypes.c_void_p(t.data_ptr())
def bench(fn, n=30, w=5):
    for _ in range(w): fn()
    ts = []
    for _ in range(n):
        e0 = torch.cuda.Event(enable_timing=True); e1 = torch.cuda.Event(enable_timing=True)
        e0.record(); fn(); e1.record(); torch.cuda.synchronize(); ts.append(e0.elapsed_time(e1))
    return statistics.median(ts)
for (M, K, N) in [(16384, 4096, 4096), (1024, 8192, 8192), (128, 1024, 512)]:
    x = torch.randn(M, K, device="cuda"); W = torch.randn(N, K, device="cuda") / K ** 0.5
    b = torch.randn(N, device="cuda"); s = torch.randn(N, device="cuda"); g = torch.ones(N, device="cuda"); be = torch.zeros(N, device="cuda")
    rm = torch.zeros(N, device="cuda"); rv = torch.ones(N, device="cuda"); nbt = torch.ones((), dtype=torch.long, device="cuda")
    out = torch.empty(M, N, device="cuda")
    line = f"{M}x{K}->{N}: "
    st = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    for name, lib in libs.items():
        for force in (0,):
            ws = torch.empty(lib.gbh_ws_floats(M, N, K, force, P(x), P(W)), device="cuda")
            def f(ub):
                e = lib.gbh_forward(P(x), P(W), P(b), P(s), P(g), P(be), P(rm), P(rv), P(nbt), P(out), P(ws), M, N, K, ub, ub, 0.1, 0, 1e-5, force, st)
                assert e is None, e
            line += f"{name} train {bench(lambda: f(1)):.3f} eval {bench(lambda: f(0)):.3f}"
            if M == 1024:
                one = torch.ones(N, device="cuda"); zero = torch.zeros(N, device="cuda"); rv1 = torch.full((N,), 1 - 1e-5, device="cuda")
                e = lib.gbh_forward(P(x), P(W), P(zero), P(one), P(one), P(zero), P(zero), P(rv1), P(nbt), P(out), P(ws), M, N, K, 0, 0, 0.1, 0, 1e-5, force, st)
                accr = x.double() @ W.double().T
                line += f" rel {((out.double() - accr).norm() / accr.norm()).item():.1e}"
            line += " | "
    torch.backends.cuda.matmul.allow_tf32 = True
    line += f"mm_tf32 {bench(lambda: x @ W.T):.3f} addmm_tf32 {bench(lambda: torch.addmm(b, x, W.T)):.3f} copy {bench(lambda: out.mul_(1.0)):.3f} | "
    if M == 16384 and "compile" in sys.argv:
        sys.path.insert(0, os.path.join(here, "../../../reference/gemm_scale_bn"))
        import model as R
        m = R.Model(K, N, (N,)).cuda()
        mc = torch.compile(m)
        with torch.no_grad():
            line += f"compile_tf32 {bench(lambda: mc(x)):.3f} eager_tf32 {bench(lambda: m(x)):.3f}"
    torch.backends.cuda.matmul.allow_tf32 = False
    print(line, flush=True)
