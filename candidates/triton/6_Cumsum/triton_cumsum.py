"""Inclusive prefix sum along one dimension: one program per row walks the row in blocks, scanning each block
with tl.cumsum in fp32 and adding the running total of the blocks before it; other dims are moved last first."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def cumsum_kernel(x_ptr, out_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0).to(tl.int64)  # int64: 32768 x 32768 elements pass 2^31
    x_row = x_ptr + row * n_cols
    out_row = out_ptr + row * n_cols
    offs = tl.arange(0, BLOCK_SIZE)
    carry = tl.zeros([1], dtype=tl.float32)  # sum of the row's earlier blocks
    for start in range(0, n_cols, BLOCK_SIZE):
        mask = start + offs < n_cols
        x = tl.load(x_row + start + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_row + start + offs, (tl.cumsum(x, axis=0) + carry).to(out_ptr.dtype.element_ty), mask=mask)
        carry += tl.sum(x, axis=0)


def cumsum(x: torch.Tensor, dim: int) -> torch.Tensor:
    dim = dim % x.dim()
    # The kernel scans contiguous rows: another dim is moved last (a copy) and moved back after.
    x_rows = x.movedim(dim, -1).contiguous()
    out = torch.empty_like(x_rows)
    n_cols = x_rows.shape[-1]
    n_rows = x_rows.numel() // max(n_cols, 1)
    # At most 2048 elements a block: a longer row loops, carrying its running total.
    BLOCK_SIZE = min(triton.next_power_of_2(n_cols), 2048)
    cumsum_kernel[(n_rows,)](x_rows, out, n_cols, BLOCK_SIZE=BLOCK_SIZE, num_warps=8)
    return out.movedim(-1, dim)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cumsum(x, self.dim)
