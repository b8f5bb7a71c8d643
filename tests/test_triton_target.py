"""evaluator.executor.triton_target: a Triton candidate's kernels compiled for sm_90 on a machine without a GPU.

Each test writes its candidate and a KernelBench-format reference into tmp_path; the kernels are compiled for real
(Triton's own ptxas makes the cubin), never run, and TRITON_INTERPRET stays unset.
"""

import textwrap

import pytest

pytest.importorskip("triton")

from triton.runtime.autotuner import Autotuner  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from evaluator.executor.triton_target import NoTritonLaunchError, TritonCompileError, compile_for_target  # noqa: E402

HEADER = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"

ADD_REFERENCE = """
N = 4096

class Model(nn.Module):
    def forward(self, a, b):
        return a + b

def get_inputs():
    return [torch.randn(N), torch.randn(N)]

def get_init_inputs():
    return []
"""

MATMUL_REFERENCE = """
M, N, K = 64, 64, 80

class Model(nn.Module):
    def forward(self, a, b):
        return a @ b

def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]

def get_init_inputs():
    return []
"""

# launched twice with the same specialization: compiled (and reported) once
ADD = """
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

def add(x, y):
    out = torch.empty_like(x)
    n = out.numel()
    block = min(triton.next_power_of_2(n), 1024)
    add_kernel[(triton.cdiv(n, block),)](x, y, out, n, BLOCK_SIZE=block, num_warps=4)
    return out

class ModelNew(nn.Module):
    def forward(self, a, b):
        return add(add(a, b), b)
"""

# autotune over heuristics: EVEN_K is computed from each config's BLOCK_K
MATMUL = """
@triton.autotune(configs=[
    triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}, num_warps=4, num_stages=2),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=8, num_stages=3),
], key=["M", "N", "K"])
@triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        rk = k * BLOCK_K + tl.arange(0, BLOCK_K)
        a_mask = rm[:, None] < M
        b_mask = rn[None, :] < N
        if not EVEN_K:
            a_mask = a_mask & (rk[None, :] < K)
            b_mask = b_mask & (rk[:, None] < K)
        a = tl.load(a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak, mask=a_mask, other=0.0)
        b = tl.load(b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn, mask=b_mask, other=0.0)
        acc += tl.dot(a, b)
    c = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))

class ModelNew(nn.Module):
    def forward(self, a, b):
        (M, K), N = a.shape, b.shape[1]
        c = torch.empty((M, N), dtype=a.dtype)
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))
        matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                            c.stride(0), c.stride(1))
        return c
"""

BROKEN = """
@triton.jit
def broken_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * undefined_scale, mask=offs < n)

class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.empty_like(a)
        try:
            broken_kernel[(4,)](a, out, a.numel(), BLOCK_SIZE=1024)
        except Exception:
            if not FALLBACK:
                raise
            return a + b  # a candidate hiding its kernel's failure behind torch
        return out
"""

NO_LAUNCH = """
class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.add(a, b)
"""


@pytest.fixture(scope="module", autouse=True)
def triton_cache(tmp_path_factory):
    """Triton's compile cache and home in a folder of the module's own, never the user's ~/.triton."""
    folder = tmp_path_factory.mktemp("triton")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(folder / "cache"))
        mp.setenv("TRITON_HOME", str(folder))
        mp.delenv("TRITON_INTERPRET", raising=False)
        yield


def write(tmp_path, name, body):
    path = tmp_path / f"{name}.py"
    path.write_text(HEADER + textwrap.dedent(body))
    return path


def test_add_compiles_to_cubin_for_sm90(tmp_path):
    records = compile_for_target(write(tmp_path, "add", ADD), write(tmp_path, "ref", ADD_REFERENCE))
    assert len(records) == 1  # two launches, one specialization
    (rec,) = records
    assert rec.kernel == "add_kernel" and rec.arch == 90
    assert rec.signature == "x_ptr: *fp32, y_ptr: *fp32, out_ptr: *fp32, n_elements: i32, BLOCK_SIZE: constexpr"
    assert rec.constexprs == {"BLOCK_SIZE": 1024} and rec.num_warps == 4
    assert {"ttir", "ttgir", "llir", "ptx", "cubin"} <= set(rec.asm)
    assert rec.cubin_bytes > 0
    # Triton's launchers are back as they were
    assert JITFunction.run.__qualname__ == "JITFunction.run" and Autotuner.run.__qualname__ == "Autotuner.run"


@pytest.mark.parametrize("dtype, sizes, block", [("fp16", {"N": 200}, 256), ("bf16", None, 1024)])
def test_half_dtypes_and_sizes(tmp_path, dtype, sizes, block):
    (rec,) = compile_for_target(write(tmp_path, "add", ADD), write(tmp_path, "ref", ADD_REFERENCE), dtype=dtype,
                                sizes=sizes)
    assert rec.signature.startswith(f"x_ptr: *{dtype}, y_ptr: *{dtype}, out_ptr: *{dtype}, ")
    assert rec.constexprs == {"BLOCK_SIZE": block} and rec.cubin_bytes > 0


def test_unknown_size_is_refused(tmp_path):
    with pytest.raises(KeyError, match="BATCH"):
        compile_for_target(write(tmp_path, "add", ADD), write(tmp_path, "ref", ADD_REFERENCE), sizes={"BATCH": 2})


def test_every_autotune_config_compiles(tmp_path):
    records = compile_for_target(write(tmp_path, "mm", MATMUL), write(tmp_path, "ref", MATMUL_REFERENCE))
    assert [r.kernel for r in records] == ["matmul_kernel", "matmul_kernel"]
    assert [(r.constexprs["BLOCK_M"], r.constexprs["EVEN_K"], r.num_warps, r.num_stages) for r in records] == [
        (32, True, 4, 2), (64, False, 8, 3)]
    for rec in records:
        # unit strides are specialized into constants, as Triton's launcher does
        assert rec.constexprs["stride_ak"] == 1 and rec.constexprs["stride_bn"] == 1
        assert rec.signature.startswith("a_ptr: *fp32, b_ptr: *fp32, c_ptr: *fp32, M: i32")
        assert "cubin" in rec.asm and rec.cubin_bytes > 0


@pytest.mark.parametrize("fallback", [False, True])
def test_compile_error_names_the_kernel(tmp_path, fallback):
    candidate = write(tmp_path, "broken", f"FALLBACK = {fallback}\n" + textwrap.dedent(BROKEN))
    with pytest.raises(TritonCompileError, match="broken_kernel") as caught:
        compile_for_target(candidate, write(tmp_path, "ref", ADD_REFERENCE))
    assert caught.value.kernel == "broken_kernel" and "undefined_scale" in caught.value.message
    assert JITFunction.run.__qualname__ == "JITFunction.run"


def test_no_triton_launch(tmp_path):
    with pytest.raises(NoTritonLaunchError, match="launched no Triton kernel"):
        compile_for_target(write(tmp_path, "torch_only", NO_LAUNCH), write(tmp_path, "ref", ADD_REFERENCE))
