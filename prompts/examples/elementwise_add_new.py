import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

add_cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

// One thread per element: out[i] = a[i] + b[i]. A grid-stride loop covers any size.
__global__ void elementwise_add_kernel(const float* __restrict__ a,
                                       const float* __restrict__ b,
                                       float* __restrict__ out,
                                       int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        out[i] = a[i] + b[i];
    }
}

torch::Tensor elementwise_add(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "elementwise_add: inputs must be CUDA tensors");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32,
                "elementwise_add: inputs must be float32");
    TORCH_CHECK(a.sizes() == b.sizes(), "elementwise_add: shapes differ");
    auto a_c = a.contiguous();
    auto b_c = b.contiguous();
    auto out = torch::empty_like(a_c);
    const int64_t n = a_c.numel();
    if (n == 0) return out;
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 65535);
    // Launch on PyTorch's current stream so the kernel is ordered with the surrounding ops.
    elementwise_add_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        a_c.data_ptr<float>(), b_c.data_ptr<float>(), out.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

add_cpp_source = "torch::Tensor elementwise_add(torch::Tensor a, torch::Tensor b);"

elementwise_add_ext = load_inline(
    name="elementwise_add_ext",
    cpp_sources=add_cpp_source,
    cuda_sources=add_cuda_source,
    functions=["elementwise_add"],
    verbose=False,
)


class ModelNew(nn.Module):
    """Same interface as Model; the addition runs in one custom CUDA kernel."""

    def __init__(self):
        super().__init__()
        self.elementwise_add = elementwise_add_ext

    def forward(self, a, b):
        return self.elementwise_add.elementwise_add(a, b)
