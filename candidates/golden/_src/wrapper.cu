
// ============================================================================ PyTorch binding
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>  // same stream as at::cuda::getCurrentCUDAStream()
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

static void gb_check_vec(const torch::Tensor& t, const torch::Tensor& x, int64_t n, const char* name, bool optional) {
  if (optional && t.numel() == 0) return;
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.device() == x.device(), name, " must be on the same device as x");
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(t.numel() == n, name, " must have ", n, " elements, got ", t.numel());
}

torch::Tensor gemm_scale_bn_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, torch::Tensor scale,
                                    torch::Tensor gamma, torch::Tensor beta, torch::Tensor running_mean,
                                    torch::Tensor running_var, torch::Tensor num_batches_tracked, bool use_batch_stats,
                                    bool update_running, double momentum, bool cumulative, double eps,
                                    int64_t force_path) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  TORCH_CHECK(x.dim() == 2, "x must be 2-D [batch, in_features]");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
  TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
  TORCH_CHECK(weight.is_cuda() && weight.device() == x.device(), "weight must be on x's device");
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == torch::kFloat32 && weight.is_contiguous(),
              "weight must be a contiguous float32 [out_features, in_features] tensor");
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  TORCH_CHECK(weight.size(1) == K, "weight.size(1) (", weight.size(1), ") != in_features (", K, ")");
  TORCH_CHECK(M < (int64_t)1 << 31 && N < (int64_t)1 << 31 && K < (int64_t)1 << 31, "sizes too large");
  gb_check_vec(bias, x, N, "bias", true);
  gb_check_vec(scale, x, N, "scale", false);
  gb_check_vec(gamma, x, N, "bn.weight", true);
  gb_check_vec(beta, x, N, "bn.bias", true);
  if (!use_batch_stats || update_running) {
    gb_check_vec(running_mean, x, N, "running_mean", false);
    gb_check_vec(running_var, x, N, "running_var", false);
  }
  if (update_running && cumulative) {
    TORCH_CHECK(num_batches_tracked.is_cuda() && num_batches_tracked.device() == x.device() &&
                    num_batches_tracked.scalar_type() == torch::kInt64 && num_batches_tracked.numel() == 1,
                "num_batches_tracked must be a 1-element int64 CUDA tensor");
  }
  if (use_batch_stats) TORCH_CHECK(M > 1, "Expected more than 1 value per channel when training, got input size ", x.sizes());
  TORCH_CHECK(K > 0, "in_features must be > 0");

  const c10::cuda::CUDAGuard guard(x.device());
  auto out = torch::empty({M, N}, x.options());
  if (M == 0 || N == 0) return out;
  const size_t nws = gb::gb_workspace_floats((int)M, (int)N, (int)K, (int)force_path, x.data_ptr<float>(),
                                             weight.data_ptr<float>());
  auto ws = torch::empty({(int64_t)nws}, x.options());
  auto opt = [](const torch::Tensor& t) -> float* { return t.numel() ? t.data_ptr<float>() : nullptr; };
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const char* err = gb::gb_forward(
      x.data_ptr<float>(), weight.data_ptr<float>(), opt(bias), scale.data_ptr<float>(), opt(gamma), opt(beta),
      opt(running_mean), opt(running_var),
      (update_running && cumulative) ? num_batches_tracked.data_ptr<int64_t>() : nullptr, out.data_ptr<float>(),
      ws.data_ptr<float>(), (int)M, (int)N, (int)K, use_batch_stats ? 1 : 0, update_running ? 1 : 0, (float)momentum,
      cumulative ? 1 : 0, (float)eps, (int)force_path, stream);
  TORCH_CHECK(err == nullptr, "gemm_scale_bn_forward failed: ", err ? err : "");
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
