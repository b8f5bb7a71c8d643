#include "kernels.cu"
extern "C" {
size_t gbh_ws_floats(int M, int N, int K, int force, const float* x, const float* w) {
  return gb::gb_workspace_floats(M, N, K, force, x, w);
}
const char* gbh_forward(const float* x, const float* w, const float* bias, const float* scale, const float* gamma,
                        const float* beta, float* rm, float* rv, const int64_t* nbt, float* out, float* ws, int M,
                        int N, int K, int use_batch, int update, float momentum, int cumulative, float eps,
                        int force_path, void* stream) {
  return gb::gb_forward(x, w, bias, scale, gamma, beta, rm, rv, nbt, out, ws, M, N, K, use_batch, update, momentum,
                        cumulative, eps, force_path, (cudaStream_t)stream);
}
}
