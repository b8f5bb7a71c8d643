"""Linear (GEMM plus bias) with a GELU epilogue (GEMM with an epilogue; KernelBench level 2's pattern)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.gemm(x))


batch_size = 1024
in_features = 1024
out_features = 1024


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
