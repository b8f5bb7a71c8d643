"""What the referee's per-call work costs on a GPU at `kernelbench`: the float64 replay of one call,
compare_tensor on its output and buffers (the one pass against the value-by-value comparison, with the judge's tiers:
the problem's and a `matched` one; on one call, on four stacked, and against a reference in host memory), one combined
variant, and the host exchange's copies against a device-to-device one. Prints a table of median milliseconds."""
import copy, statistics, sys, time
import torch
sys.path.insert(0, ".")
from evaluator.referee import compare
from evaluator.wire.exchange import Exchange
from evaluator.wire.problem import load_problem

def ms(fn, reps=10):
    fn(); torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        t = time.perf_counter(); fn(); torch.cuda.synchronize(); out.append((time.perf_counter() - t) * 1e3)
    return statistics.median(out)

from evaluator.wire.tiers import MatchedTolerance
problem = load_problem("gemm_scale_bn")
tol = {**problem.tolerances, "matched": MatchedTolerance(atol=0.0, rtol=2.4e-7, by_tensor={"output": 2e-6})}
sys.path.insert(0, "reference/gemm_scale_bn")
import model as ref
torch.manual_seed(0)
m32 = ref.Model(4096, 4096, (4096,)).cuda().train()
m64 = copy.deepcopy(m32).double().train()  # the same weights: the output compared is a right one, as a judged candidate's
x = torch.randn(16384, 4096, device="cuda")
rows = []
with torch.no_grad():
    rows.append(("float64 replay (forward, train)", ms(lambda: m64(x.double()))))
    rows.append(("fp32 forward", ms(lambda: m32(x))))
    exp = m64(x.double()); out = m32(x)
    rows.append(("compare_tensor(output)", ms(lambda: compare.compare_tensor("output", out, exp, tol, 1e-4))))
    flat_out, flat_exp, on = out.reshape(-1), exp.reshape(-1), torch.device("cuda")
    rows.append(("  value by value (_compare_each)", ms(lambda: compare._compare_each("output", flat_out, flat_exp, tol, 1e-4, on))))
    outs, exps = torch.stack([out] * 4), torch.stack([exp] * 4)
    rows.append(("compare_tensor(4 outputs stacked)", ms(lambda: compare.compare_tensor("output", outs, exps, tol, 1e-4))))
    rows.append(("  value by value", ms(lambda: compare._compare_each("output", outs.reshape(-1), exps.reshape(-1), tol, 1e-4, on))))
    del outs, exps
    host = exp.cpu().pin_memory()
    rows.append(("compare_tensor(output), reference in host memory", ms(lambda: compare.compare_tensor("output", out, host, tol, 1e-4, on="cuda"))))
    rows.append(("  value by value", ms(lambda: compare._compare_each("output", flat_out, host.reshape(-1), tol, 1e-4, on))))
    same = (compare.compare_tensor("output", out, exp, tol, 1e-4) == compare._compare_each("output", flat_out, flat_exp, tol, 1e-4, on))
    print("one pass and value by value agree:", same, compare.compare_tensor("output", out, exp, tol, 1e-4))
    del host
    rm = m64.bn.running_mean.clone()
    rows.append(("compare_tensor(running_mean)", ms(lambda: compare.compare_tensor("rm", m32.bn.running_mean, rm, tol, 1e-4))))
    def combined():
        got = out.double(); diff = (got - exp).abs_(); ref_abs = exp.abs()
        stats = [torch.isfinite(out).all(), diff.amax(), (diff / ref_abs.clamp_min(1e-4)).amax()]
        stats += [(diff - ref_abs * t.rtol).amax() for t in tol.values()]
        return torch.stack([s.double() for s in stats]).tolist()
    rows.append(("combined, one sync", ms(combined)))
    ex = Exchange.create(1 << 30); pinned = ex.pin()
    slots = ex.write([("input.0", x)])
    rows.append((f"exchange.write 256 MB (pinned {pinned})", ms(lambda: ex.write([("input.0", x)]))))
    rows.append((f"exchange.read 256 MB to cuda (pinned {pinned})", ms(lambda: ex.read(slots[0], "cuda"))))
    ex2 = Exchange.create(1 << 30)
    slots2 = ex2.write([("input.0", x)])
    rows.append(("exchange.write 256 MB (pageable)", ms(lambda: ex2.write([("input.0", x)]))))
    rows.append(("exchange.read 256 MB to cuda (pageable)", ms(lambda: ex2.read(slots2[0], "cuda"))))
    y = torch.empty_like(x)
    rows.append(("device-to-device copy 256 MB", ms(lambda: y.copy_(x))))
print(torch.cuda.get_device_name())
for name, v in rows:
    print(f"{name:50s} {v:8.3f} ms")
