"""Sum over one dimension (kept): the input is seen as (outer, R, inner); each program sums a tile of inner
columns over R, BLOCK_R rows at a time, in fp32, its loads coalesced along the contiguous inner axis."""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_dim_kernel(x_ptr, out_ptr, R, inner, n_col_blocks, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    # One flat grid (the y and z grid axes stop at 65535): program -> (outer index, block of inner columns).
    pid = tl.program_id(axis=0).to(tl.int64)  # int64: 128 x 4096 x 4095 elements pass 2^31
    pid_o = pid // n_col_blocks
    cols = (pid % n_col_blocks) * BLOCK_I + tl.arange(0, BLOCK_I)
    col_mask = cols < inner
    base = x_ptr + pid_o * R * inner
    # A 2-D accumulator, reduced once at the end: the loop itself has no cross-thread reduction.
    acc = tl.zeros([BLOCK_R, BLOCK_I], dtype=tl.float32)
    for r0 in range(0, R, BLOCK_R):
        rows = r0 + tl.arange(0, BLOCK_R)
        mask = (rows < R)[:, None] & col_mask[None, :]
        acc += tl.load(base + rows.to(tl.int64)[:, None] * inner + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    total = tl.sum(acc, axis=0)
    tl.store(out_ptr + pid_o * inner + cols, total.to(out_ptr.dtype.element_ty), mask=col_mask)


def sum_over_dim(x: torch.Tensor, dim: int) -> torch.Tensor:
    x = x.contiguous()
    dim = dim % x.dim()
    shape = list(x.shape)
    outer, R, inner = math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:])
    out = torch.empty(shape[:dim] + [1] + shape[dim + 1:], dtype=x.dtype, device=x.device)
    # 4096-element tiles, as wide as the inner axis allows (up to 128 columns), the rest in rows.
    BLOCK_I = min(triton.next_power_of_2(inner), 128)
    BLOCK_R = 4096 // BLOCK_I
    n_col_blocks = triton.cdiv(inner, BLOCK_I)
    sum_dim_kernel[(outer * n_col_blocks,)](x, out, R, inner, n_col_blocks, BLOCK_R=BLOCK_R, BLOCK_I=BLOCK_I,
                                            num_warps=8)
    return out


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum_over_dim(x, self.dim)
