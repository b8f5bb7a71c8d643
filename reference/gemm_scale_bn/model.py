"""KernelBench level 2, problem 39: Gemm -> scale -> BatchNorm1d (training mode).

The module-level size constants are defaults; the evaluator overrides them with a size
preset from problem.toml before it calls `get_inputs()` / `get_init_inputs()`, so both
functions read them at call time.
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear layer, element-wise scale by a learned vector, then BatchNorm1d."""

    def __init__(self, in_features, out_features, scale_shape, eps=1e-5, momentum=0.1):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.randn(scale_shape))
        self.bn = nn.BatchNorm1d(out_features, eps=eps, momentum=momentum)

    def forward(self, x):
        x = self.gemm(x)
        x = x * self.scale
        x = self.bn(x)
        return x


batch_size = 16384
in_features = 4096
out_features = 4096


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, (out_features,)]
