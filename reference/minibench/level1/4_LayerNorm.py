"""LayerNorm over the last dimension, with its learned weight and bias (a norm; KernelBench level 1, 40_LayerNorm)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, normalized_shape: int):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size = 16
features = 64
dim = 256


def get_inputs():
    return [torch.randn(batch_size, features, dim)]


def get_init_inputs():
    return [dim]
