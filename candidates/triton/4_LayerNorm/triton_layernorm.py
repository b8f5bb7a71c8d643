"""LayerNorm over the trailing prod(normalized_shape) elements of each row, in three Triton kernels: per-block
partial statistics (sum and centred sum of squares), per-row mean and rstd combined from them, then the affine
normalisation; every row is split over many programs, so even a few rows of 4M elements fill the GPU."""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def ln_partial_kernel(x_ptr, psum_ptr, pm2_ptr, N, n_rows, n_blocks, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0).to(tl.int64)  # int64: 16 rows x 4M elements pass 2^31
    row, blk = pid % n_rows, pid // n_rows
    cols = blk * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    count = tl.minimum(N - blk * BLOCK, BLOCK).to(tl.float32)
    total = tl.sum(x, axis=0)
    # Squares about the block's own mean (not raw sums of squares): no cancellation when |mean| >> std.
    d = tl.where(mask, x - total / count, 0.0)
    tl.store(psum_ptr + row * n_blocks + blk, total)
    tl.store(pm2_ptr + row * n_blocks + blk, tl.sum(d * d, axis=0))


@triton.jit
def ln_stats_kernel(psum_ptr, pm2_ptr, mean_ptr, rstd_ptr, N, n_blocks, eps, BLOCK: tl.constexpr,
                    BLOCK_P: tl.constexpr):
    row = tl.program_id(axis=0).to(tl.int64)
    offs = tl.arange(0, BLOCK_P)
    acc = tl.zeros([BLOCK_P], dtype=tl.float32)
    for p0 in range(0, n_blocks, BLOCK_P):
        acc += tl.load(psum_ptr + row * n_blocks + p0 + offs, mask=p0 + offs < n_blocks, other=0.0)
    mean = tl.sum(acc, axis=0) / N
    # Chan's combination: M2 = sum over blocks of (m2_b + count_b * (mean_b - mean)^2).
    acc = tl.zeros([BLOCK_P], dtype=tl.float32)
    for p0 in range(0, n_blocks, BLOCK_P):
        p = p0 + offs
        mask = p < n_blocks
        count = tl.maximum(tl.minimum(N - p * BLOCK, BLOCK), 1).to(tl.float32)
        dm = tl.load(psum_ptr + row * n_blocks + p, mask=mask, other=0.0) / count - mean
        m2 = tl.load(pm2_ptr + row * n_blocks + p, mask=mask, other=0.0)
        acc += tl.where(mask, m2 + count * dm * dm, 0.0)
    var = tl.sum(acc, axis=0) / N  # biased, as LayerNorm
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, 1.0 / tl.sqrt(var + eps))


@triton.jit
def ln_apply_kernel(x_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, out_ptr, N, n_rows, BLOCK: tl.constexpr):
    # Row is the fast index: the programs at one block of columns run together and share its weight and bias in L2.
    pid = tl.program_id(axis=0).to(tl.int64)
    row, blk = pid % n_rows, pid // n_rows
    cols = blk * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = (x - tl.load(mean_ptr + row)) * tl.load(rstd_ptr + row) * w + b
    tl.store(out_ptr + row * N + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)  # holds weight, bias and eps; its forward is not used

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.ln.weight.contiguous(), self.ln.bias.contiguous()
        N = math.prod(self.ln.normalized_shape)
        if tuple(x.shape[x.dim() - len(self.ln.normalized_shape):]) != tuple(self.ln.normalized_shape):
            raise ValueError(f"LayerNorm: input {tuple(x.shape)} does not end in {tuple(self.ln.normalized_shape)}")
        x = x.contiguous()
        rows = x.numel() // N
        out = torch.empty_like(x)
        BLOCK = min(triton.next_power_of_2(N), 4096)
        n_blocks = triton.cdiv(N, BLOCK)
        f32 = dict(dtype=torch.float32, device=x.device)
        psum, pm2 = torch.empty(rows * n_blocks, **f32), torch.empty(rows * n_blocks, **f32)
        mean, rstd = torch.empty(rows, **f32), torch.empty(rows, **f32)
        ln_partial_kernel[(rows * n_blocks,)](x, psum, pm2, N, rows, n_blocks, BLOCK=BLOCK, num_warps=8)
        BLOCK_P = min(triton.next_power_of_2(n_blocks), 1024)
        ln_stats_kernel[(rows,)](psum, pm2, mean, rstd, N, n_blocks, self.ln.eps, BLOCK=BLOCK, BLOCK_P=BLOCK_P,
                                 num_warps=4)
        ln_apply_kernel[(rows * n_blocks,)](x, weight, bias, mean, rstd, out, N, rows, BLOCK=BLOCK,
                                           num_warps=8)
        return out
