"""Swish (x * sigmoid(x)) times a constant scale (two elementwise ops to fuse; KernelBench level 2's epilogues)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x) * self.scale


batch_size = 32
dim = 65536


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [2.0]
