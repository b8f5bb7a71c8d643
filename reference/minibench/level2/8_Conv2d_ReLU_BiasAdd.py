"""Conv2d, ReLU, then a learned per-channel bias added (a convolution; KernelBench level 2, 1_Conv2D_ReLU_BiasAdd)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, bias_shape: tuple):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x)) + self.bias


batch_size = 16
in_channels = 16
out_channels = 32
height = width = 64
kernel_size = 3


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, (out_channels, 1, 1)]
