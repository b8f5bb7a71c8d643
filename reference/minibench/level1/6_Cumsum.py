"""Inclusive prefix sum along a dimension (a scan; KernelBench level 1, 89_cumsum)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=self.dim)


batch_size = 256
length = 32768
scan_dim = 1


def get_inputs():
    return [torch.randn(batch_size, length)]


def get_init_inputs():
    return [scan_dim]
