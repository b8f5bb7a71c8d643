#!/usr/bin/env python3
"""Self-check of the golden kernels (run on a GPU): python3 candidates/golden/_selfcheck.py

For each size and input distribution (randn, rand): the reference Model in float64 and each
ModelNew variant share one state dict; two training-mode forwards (running stats accumulate),
then one eval-mode forward. Errors are reported as
    max_abs = max |out - ref|
    ratio   = max |out - ref| / (atol + rtol * |ref|)      (pass <=> ratio <= 1, i.e. allclose)
with atol = rtol = 1e-2 for tf32 and 1e-4 for strict, for the output, running_mean and
running_var (num_batches_tracked must match exactly). Then times training-mode forwards
(CUDA events, median of 20 after warm-up) against eager fp32, eager with TF32, torch.mm TF32.
Variants "[sm80]" force the mma.sync path (on Hopper the default is TMA + wgmma).
Env: GOLDEN_QUICK=1 (small sizes only), GOLDEN_COMPILE=1 (also time torch.compile, TF32).
"""
import copy
import importlib.util
import os
import statistics
import sys
import time
import warnings

import torch

warnings.filterwarnings("ignore")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def set_tf32(on):
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def bench(fn, n=20, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1))
    return statistics.median(ts)


def err(out, ref, tol):
    d = (out.double() - ref.double()).abs()
    if not torch.isfinite(out).all():
        return float("inf"), float("inf")
    return d.max().item(), (d / (tol + tol * ref.double().abs())).max().item()


def main():
    assert torch.cuda.is_available(), "needs a CUDA GPU"
    set_tf32(False)
    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name()} cc {torch.cuda.get_device_capability()} torch {torch.__version__}",
          flush=True)
    ref_mod = load(os.path.join(ROOT, "reference", "gemm_scale_bn", "model.py"), "gsb_reference")
    mods = {}
    for name in ("tf32", "strict"):
        t0 = time.time()
        mods[name] = load(os.path.join(HERE, f"fused_{name}.py"), f"golden_{name}")
        print(f"loaded fused_{name}.py in {time.time() - t0:.1f} s", flush=True)
    tols = {"tf32": 1e-2, "strict": 1e-4}
    variants = [("tf32", "auto"), ("strict", "auto"), ("tf32", "sm80"), ("strict", "sm80")]
    sizes = [(128, 1024, 512), (16384, 4096, 4096), (1024, 8192, 8192), (1000, 1000, 777), (257, 130, 67)]
    if os.environ.get("GOLDEN_QUICK"):
        sizes = [s for s in sizes if s[0] * s[1] * s[2] < 1e10]

    rows = []  # (size, variant, worst ratio, pass)
    for (M, K, N) in sizes:
        for dist in ("randn", "rand"):
            torch.manual_seed(1234)
            base = ref_mod.Model(K, N, (N,))
            with torch.no_grad():  # non-trivial BN affine params and running stats
                base.bn.weight.uniform_(0.5, 1.5)
                base.bn.bias.normal_(0.0, 0.2)
                base.bn.running_mean.normal_(0.0, 0.2)
                base.bn.running_var.uniform_(0.5, 1.5)
            state = base.state_dict()
            ref0 = copy.deepcopy(base).to(dev).double()
            gen = torch.randn if dist == "randn" else torch.rand
            xs = [gen(M, K, device=dev) for _ in range(3)]
            for (pname, path) in variants:
                mod, tol = mods[pname], tols[pname]
                vname = pname + ("" if path == "auto" else "[sm80]")
                mod.GEMM_PATH = path
                new = mod.ModelNew(K, N, (N,)).to(dev)
                new.load_state_dict(state)
                ref = copy.deepcopy(ref0)
                new.train(); ref.train()
                parts, worst, ok = [], 0.0, True
                with torch.no_grad():
                    for it in range(2):
                        o = new(xs[it])
                        r = ref(xs[it].double())
                        a, q = err(o, r, tol)
                        _, qm = err(new.bn.running_mean, ref.bn.running_mean, tol)
                        _, qv = err(new.bn.running_var, ref.bn.running_var, tol)
                        nb = int(new.bn.num_batches_tracked.item()) == int(ref.bn.num_batches_tracked.item())
                        parts.append(f"train{it} out {a:.1e}/{q:.2f} rm {qm:.2f} rv {qv:.2f} nbt {'ok' if nb else 'BAD'}")
                        worst = max(worst, q, qm, qv)
                        ok = ok and nb
                    new.eval(); ref.eval()
                    o = new(xs[2])
                    r = ref(xs[2].double())
                    a, q = err(o, r, tol)
                    parts.append(f"eval out {a:.1e}/{q:.2f}")
                    worst = max(worst, q)
                ok = ok and worst <= 1.0
                print(f"{'PASS' if ok else 'FAIL'} {vname:13s} {M}x{K}->{N} {dist:5s} | " + " | ".join(parts), flush=True)
                rows.append(((M, K, N), vname, dist, worst, ok))
                mod.GEMM_PATH = "auto"
                del new, ref, o, r
            del ref0, xs, base
            torch.cuda.empty_cache()

    # ------------------------------------------- extras: BatchNorm options, non-contiguous input
    for pname in ("tf32", "strict"):
        mod, tol = mods[pname], tols[pname]
        for (M, K, N) in [(300, 256, 384), (257, 130, 67)]:
            for case in ("momentum=None", "affine=False", "no_running_stats", "noncontig_x"):
                torch.manual_seed(7)
                kw = {}
                base = ref_mod.Model(K, N, (N,))
                if case == "momentum=None":
                    base.bn.momentum = None
                elif case == "affine=False":
                    base.bn = torch.nn.BatchNorm1d(N, affine=False)
                elif case == "no_running_stats":
                    base.bn = torch.nn.BatchNorm1d(N, track_running_stats=False)
                new = mod.ModelNew(K, N, (N,))
                new.bn = copy.deepcopy(base.bn)
                new.load_state_dict(base.state_dict())
                new = new.to(dev)
                ref = copy.deepcopy(base).to(dev).double()
                worst, ok = 0.0, True
                with torch.no_grad():
                    for it in range(4):
                        if it == 3:
                            new.eval(); ref.eval()
                        if case == "noncontig_x":
                            x = torch.randn(K, M, device=dev).t()  # non-contiguous view
                        else:
                            x = torch.rand(M, K, device=dev)
                        o, r = new(x), ref(x.double())
                        worst = max(worst, err(o, r, tol)[1])
                        if ref.bn.running_mean is not None:
                            worst = max(worst, err(new.bn.running_mean, ref.bn.running_mean, tol)[1],
                                        err(new.bn.running_var, ref.bn.running_var, tol)[1])
                            ok = ok and int(new.bn.num_batches_tracked) == int(ref.bn.num_batches_tracked)
                ok = ok and worst <= 1.0
                print(f"{'PASS' if ok else 'FAIL'} {pname:13s} {M}x{K}->{N} {case:16s} | 3 train + 1 eval, worst ratio {worst:.3f}",
                      flush=True)
                rows.append(((M, K, N), pname + " " + case, "rand", worst, ok))

    # ---------------------------------------------------------------- timing
    timing = {}
    do_compile = bool(os.environ.get("GOLDEN_COMPILE"))
    for (M, K, N) in sizes:
        torch.manual_seed(0)
        x = torch.randn(M, K, device=dev)
        t = {}
        for (pname, path) in variants:
            mod = mods[pname]
            mod.GEMM_PATH = path
            m = mod.ModelNew(K, N, (N,)).to(dev).train()
            with torch.no_grad():
                t[pname + ("" if path == "auto" else "[sm80]")] = bench(lambda: m(x))
            mod.GEMM_PATH = "auto"
            del m
        ref = ref_mod.Model(K, N, (N,)).to(dev).train()
        W = ref.gemm.weight.detach()
        with torch.no_grad():
            set_tf32(False)
            t["eager_fp32"] = bench(lambda: ref(x))
            set_tf32(True)
            t["eager_tf32"] = bench(lambda: ref(x))
            t["mm_tf32"] = bench(lambda: torch.mm(x, W.t()))
            t["addmm_tf32"] = bench(lambda: torch.addmm(ref.gemm.bias, x, W.t()))
            if do_compile and M * K * N > 1e11:
                cm = torch.compile(ref)
                t["compile_tf32"] = bench(lambda: cm(x))
            set_tf32(False)
        timing[(M, K, N)] = t
        del x, ref, W
        torch.cuda.empty_cache()

    # ---------------------------------------------------------------- summary
    print("\n=== correctness (worst ratio = max |d|/(atol+rtol|ref|) over out/rm/rv, train x2 + eval; pass <= 1) ===")
    vnames = [p + ("" if a == "auto" else "[sm80]") for p, a in variants]
    print(f"{'size':>18s} " + " ".join(f"{v:>15s}" for v in vnames))
    for s in sizes:
        cells = []
        for v in vnames:
            rs = [r for r in rows if r[0] == s and r[1] == v]
            w = max(r[3] for r in rs)
            cells.append(f"{w:9.3f} {'PASS' if all(r[4] for r in rs) else 'FAIL'}")
        print(f"{'%dx%d->%d' % s:>18s} " + " ".join(f"{c:>15s}" for c in cells))
    print("\n=== time, training-mode forward, ms (median of 20) ===")
    cols = vnames + ["eager_fp32", "eager_tf32", "mm_tf32", "addmm_tf32"] + (["compile_tf32"] if do_compile else [])
    print(f"{'size':>18s} " + " ".join(f"{c:>13s}" for c in cols))
    for s in sizes:
        t = timing[s]
        print(f"{'%dx%d->%d' % s:>18s} " + " ".join(f"{t[c]:13.3f}" if c in t else f"{'-':>13s}" for c in cols))
    n_fail = sum(1 for r in rows if not r[4])
    print(f"\n{len(rows) - n_fail} passed, {n_fail} failed")
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
