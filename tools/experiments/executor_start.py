"""Where an executor's start goes on a GPU: CUDA's init and context in forked children, an exchange's pages allocated,
page-locked the first time and again, unlocked and freed, and a device stage made and imported.

    python3 tools/experiments/executor_start.py [EXCHANGE_BYTES]   # default 19 GiB (19_ReLU at KernelBench's size)
"""
import os, sys, time, json
import torch
from evaluator.wire.exchange import Exchange
from evaluator.wire.stage import Stage

def t(): return time.perf_counter()

def cuda_steps(tag):
    a = t(); torch.cuda.init(); b = t(); torch.zeros(1, device="cuda"); torch.cuda.synchronize(); c = t()
    return {f"{tag}_init": round(b - a, 3), f"{tag}_context": round(c - b, 3)}

def in_child(fn):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = fn()
        except Exception as e:
            out = {"error": repr(e)}
        os.write(w, json.dumps(out).encode()); os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk: break
        data += chunk
    os.waitpid(pid, 0)
    return json.loads(data)

res = {}
res.update(in_child(lambda: cuda_steps("fork1")))
res.update(in_child(lambda: cuda_steps("fork2")))
size = int(sys.argv[1]) if len(sys.argv) > 1 else 19 << 30
ex = Exchange.create(size)
def child_pin(ex=ex):
    d = cuda_steps("childctx")
    a = t(); e2 = Exchange(ex.fd, ex.size); ok = e2.pin(); b = t(); e2.unpin(); c = t()
    d.update({"child_pin_s": round(b - a, 3), "child_pinned": ok, "child_unpin_s": round(c - b, 3)})
    return d
res["exchange_gb"] = round(size / 2**30, 1)
a = t(); os.posix_fallocate(ex.fd, 0, size); b = t()
res["fallocate_s"] = round(b - a, 3)
res.update(in_child(child_pin))  # the pages there already: the register alone
ex2 = Exchange.create(size)
def child_fresh(ex2=ex2):
    d = cuda_steps("freshctx")
    a = t(); e = Exchange(ex2.fd, ex2.size); ok = e.pin(); b = t(); e.unpin(); c = t()
    d.update({"fresh_pin_s": round(b - a, 3), "fresh_unpin_s": round(c - b, 3)}); return d
res.update(in_child(child_fresh))  # fallocate and register together, as an executor's start does
res.update(cuda_steps("parent"))
a = t(); ok = ex.pin(); b = t(); res.update({"parent_pin_s": round(b - a, 3), "parent_pinned": ok})
a = t(); ex.unpin(); b = t(); res["parent_unpin_s"] = round(b - a, 3)
a = t(); ex.close(); b = t(); res["close_s"] = round(b - a, 3)
a = t(); ex2.close(); b = t(); res["close2_s"] = round(b - a, 3)
import subprocess
a = t(); st = Stage.create(13 << 30, "cuda"); b = t(); res["stage_create_s"] = round(b - a, 3)
os.set_inheritable(st.fd, True)
code = ("import time,torch,json;from evaluator.wire.stage import Stage;a=time.perf_counter();torch.cuda.init();"
        "torch.zeros(1,device='cuda');b=time.perf_counter();s=Stage.attach(%d,%d,'cuda');c=time.perf_counter();s.close();"
        "print(json.dumps({'spawned_ctx':round(b-a,3),'stage_attach_s':round(c-b,3),'stage_close_s':round(time.perf_counter()-c,3)}))"
        % (st.fd, st.size))
out = subprocess.run([sys.executable, "-c", code], pass_fds=[st.fd], capture_output=True, text=True)
try:
    res.update(json.loads(out.stdout.strip().splitlines()[-1]))
except Exception:
    res["stage_child_error"] = out.stderr[-300:]
a = t(); st.close(); b = t(); res["stage_release_s"] = round(b - a, 3)
print(json.dumps(res))
