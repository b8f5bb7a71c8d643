import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

add_cpp_source = r"""
#include <torch/extension.h>

// out[i] = a[i] + b[i] over contiguous float32 storage; at::parallel_for splits the range
// over PyTorch's intra-op threads, and the plain loop vectorises.
torch::Tensor elementwise_add(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.device().is_cpu() && b.device().is_cpu(), "elementwise_add: inputs must be CPU tensors");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32,
                "elementwise_add: inputs must be float32");
    TORCH_CHECK(a.sizes() == b.sizes(), "elementwise_add: shapes differ");
    auto a_c = a.contiguous();
    auto b_c = b.contiguous();
    auto out = torch::empty_like(a_c);
    const float* pa = a_c.data_ptr<float>();
    const float* pb = b_c.data_ptr<float>();
    float* po = out.data_ptr<float>();
    at::parallel_for(0, a_c.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) po[i] = pa[i] + pb[i];
    });
    return out;
}
"""

elementwise_add_ext = load_inline(
    name="elementwise_add_cpu_ext",
    cpp_sources=add_cpp_source,
    functions=["elementwise_add"],
    verbose=False,
)


class ModelNew(nn.Module):
    """Same interface as Model; the addition runs in one custom C++ function on the CPU."""

    def __init__(self):
        super().__init__()
        self.elementwise_add = elementwise_add_ext

    def forward(self, a, b):
        return self.elementwise_add.elementwise_add(a, b)
