import torch
import torch.nn as nn


class Model(nn.Module):
    """Adds two tensors of the same shape."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a + b


def get_inputs():
    return [torch.randn(4096, 1024), torch.randn(4096, 1024)]


def get_init_inputs():
    return []
