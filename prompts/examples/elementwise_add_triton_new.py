import torch
import torch.nn as nn
import triton
import triton.language as tl


# Each program adds one BLOCK_SIZE-long slice: out[i] = a[i] + b[i]. The mask keeps the last,
# partial slice from reading or writing past the end.
@triton.jit
def elementwise_add_kernel(a_ptr, b_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0).to(tl.int64)  # int64: offsets of tensors over 2^31 elements stay exact
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    # Add in fp32 and round once to the output's dtype: the same result for fp32, fp16 and bf16 inputs
    # (and Triton's CPU interpreter, which holds bf16 as raw 16-bit integers, cannot add bf16 directly).
    a = tl.load(a_ptr + offsets, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, (a + b).to(out_ptr.dtype.element_ty), mask=mask)


def elementwise_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    assert a.shape == b.shape and a.dtype == b.dtype, "elementwise_add: shapes or dtypes differ"
    # The kernel indexes flat storage: make both inputs contiguous; the output has the inputs' dtype.
    a, b = a.contiguous(), b.contiguous()
    out = torch.empty_like(a)
    n_elements = out.numel()
    # One program per block; Triton launches on PyTorch's current stream.
    grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)
    elementwise_add_kernel[grid](a, b, out, n_elements, BLOCK_SIZE=1024)
    return out


class ModelNew(nn.Module):
    """Same interface as Model; the addition runs in one Triton kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return elementwise_add(a, b)
