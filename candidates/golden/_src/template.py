"""@@DOC@@"""
import os
import re

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
@@CUDA@@
"""

cpp_source = r"""
torch::Tensor gemm_scale_bn_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, torch::Tensor scale,
                                    torch::Tensor gamma, torch::Tensor beta, torch::Tensor running_mean,
                                    torch::Tensor running_var, torch::Tensor num_batches_tracked, bool use_batch_stats,
                                    bool update_running, double momentum, bool cumulative, double eps,
                                    int64_t force_path);
"""


def _arch_flags():
    """The targets to build for: those TORCH_CUDA_ARCH_LIST names where it is set (read as torch reads it: `9.0`,
    `9.0a`, `9.0+PTX`, `;` or spaces between), else the GPU's own, else (a build on a machine with neither) Ampere and
    Hopper. The list first, the GPU only without one: the harness builds without a GPU and passes the list (the
    user's, or the GPU's architecture it sets), so the import on the GPU finds the same flags and the build up to date
    instead of building again before it is judged. Hopper gets its arch-specific target (wgmma, setmaxnreg)."""
    listed = [re.fullmatch(r"(\d+)\.(\d+)[af]?(\+PTX)?", entry)
              for entry in os.environ.get("TORCH_CUDA_ARCH_LIST", "").replace(";", " ").split()]
    targets = [(int(m[1]), int(m[2])) for m in listed if m]
    if not targets and torch.cuda.is_available():
        targets = [torch.cuda.get_device_capability()]
    if not targets:
        targets = [(8, 0), (9, 0)]
    flags = []
    for major, minor in dict.fromkeys(targets):
        target = f"{major}{minor}a" if (major, minor) == (9, 0) else f"{major}{minor}"
        flags.append(f"-gencode=arch=compute_{target},code=sm_{target}")
    return flags


_ext = load_inline(
    name="@@NAME@@",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["gemm_scale_bn_forward"],
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3"] + _arch_flags(),
    verbose=False,
)

# "auto": TMA + wgmma on sm_90 (when K % 4 == 0 and the operands are 16-byte aligned),
# mma.sync otherwise. "sm80": always the mma.sync path (used by the self-check).
GEMM_PATH = os.environ.get("GOLDEN_GEMM_PATH", "auto")


class ModelNew(nn.Module):
    """Linear -> * scale -> BatchNorm1d, fused into custom CUDA kernels (@@PREC@@)."""

    def __init__(self, in_features, out_features, scale_shape, eps=1e-5, momentum=0.1):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.randn(scale_shape))
        self.bn = nn.BatchNorm1d(out_features, eps=eps, momentum=momentum)

    def forward(self, x):
        bn = self.bn
        if x.dim() != 2:
            raise ValueError(f"expected a 2-D input [batch, in_features], got {tuple(x.shape)}")
        x = x.contiguous()
        weight = self.gemm.weight.contiguous()
        empty = x.new_empty(0)
        bias = self.gemm.bias.contiguous() if self.gemm.bias is not None else empty
        scale = self.scale.contiguous().reshape(-1)
        gamma = bn.weight.contiguous() if bn.weight is not None else empty
        beta = bn.bias.contiguous() if bn.bias is not None else empty
        has_running = bn.running_mean is not None and bn.running_var is not None
        use_batch_stats = bn.training or not has_running
        update_running = bn.training and bn.track_running_stats and has_running
        momentum = 0.0 if bn.momentum is None else float(bn.momentum)
        cumulative = False
        nbt = empty
        if update_running and bn.num_batches_tracked is not None:
            bn.num_batches_tracked.add_(1)
            if bn.momentum is None:
                cumulative = True  # factor 1/num_batches_tracked, read on the device
                nbt = bn.num_batches_tracked
        rm = bn.running_mean if has_running else empty
        rv = bn.running_var if has_running else empty
        return _ext.gemm_scale_bn_forward(
            x, weight, bias, scale, gamma, beta, rm, rv, nbt,
            use_batch_stats, update_running, momentum, cumulative, float(bn.eps),
            1 if GEMM_PATH == "sm80" else 0,
        )
