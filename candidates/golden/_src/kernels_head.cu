// ============================================================================
// Fused  out = BatchNorm1d( (x @ W^T + b) * s )   (fp32 in / fp32 out)
//
// GEMM_PRECISION: GB_STRICT == 0 -> TF32 tensor cores (1 product)
//                 GB_STRICT == 1 -> 3xTF32 split (a_lo*b_hi + a_hi*b_lo + a_hi*b_hi)
// Paths:
//   sm90a : TMA (128B swizzle) + wgmma.m64n256k8.tf32, 4-stage mbarrier pipeline,
//           1 producer warpgroup + 2 consumer warpgroups, CTA tile 128x256x32.
//           Strict: x and W are pre-split into (hi, lo) tf32 arrays; the GEMM runs
//           over 3 K-segments (x_lo.W_hi, x_hi.W_lo, x_hi.W_hi).
//   sm80  : cp.async 3-stage pipeline + mma.sync.m16n8k8.tf32, CTA tile 128x128x32,
//           8 warps (2x4, warp tile 64x32), XOR-swizzled smem + ldmatrix.
//           Any K (K % 4 != 0 / misaligned -> 4-byte cp.async).
// Epilogue (training): raw accumulator -> out, per-(row-tile, column) mean and
//   M2 (sum of squared deviations from the tile mean, valid rows only) -> workspace.
//   bn_finalize merges the partials (Chan, fp64), writes per-column coefficients and
//   updates the running stats; bn_apply normalizes out in place.
// Epilogue (eval): out = acc * a_j + c_j (BatchNorm folded into an affine map).
// ============================================================================
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#ifndef GB_STRICT
#define GB_STRICT 0
#endif

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GB_SM90A 1
#else
#define GB_SM90A 0
#endif

namespace gb {

constexpr int BM = 128;  // rows per CTA tile (both GEMM paths); workspace is [ceil(M/BM), N]

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ uint32_t f2tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

// ------------------------------------------------------------------ sm80 path
namespace s80 {
constexpr int BN = 128, BK = 32, STAGES = 3, THREADS = 256;
constexpr int WM = 64, WN = 32, MT = WM / 16, NT = WN / 8;
constexpr int FLUSH80 = 4;  // strict: k-tiles between flushes of the mma accumulators
constexpr int A_ELEMS = BM * BK, B_ELEMS = BN * BK;
constexpr int SMEM_BYTES = STAGES * (A_ELEMS + B_ELEMS) * 4;  // 98304

__device__ __forceinline__ void cp16(uint32_t dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp4(uint32_t dst, const void* src, int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// smem tile: [rows][32 floats], 16-byte chunk c of row r stored at chunk (c ^ (r & 7)).
template <bool VEC>
__device__ __forceinline__ void load_rows(float* s, const float* __restrict__ G, int nrows_total, int K,
                                          int r0, int k0, int tid) {
  if (VEC) {
#pragma unroll
    for (int i = 0; i < (BM * BK / 4) / THREADS; ++i) {
      const int c = tid + i * THREADS;
      const int row = c >> 3, ch = c & 7;
      const int gr = r0 + row, gk = k0 + ch * 4;
      const bool ok = (gr < nrows_total) && (gk < K);
      const float* src = ok ? (G + (size_t)gr * K + gk) : G;
      cp16(smem_u32(s + row * BK + ((ch ^ (row & 7)) << 2)), src, ok ? 16 : 0);
    }
  } else {
#pragma unroll 4
    for (int i = 0; i < (BM * BK) / THREADS; ++i) {
      const int e = tid + i * THREADS;
      const int row = e >> 5, kc = e & 31;
      const int gr = r0 + row, gk = k0 + kc;
      const bool ok = (gr < nrows_total) && (gk < K);
      const float* src = ok ? (G + (size_t)gr * K + gk) : G;
      cp4(smem_u32(s + row * BK + ((((kc >> 2) ^ (row & 7)) << 2) | (kc & 3))), src, ok ? 4 : 0);
    }
  }
}

// mode 0: training (raw acc -> out, tile stats -> ws); mode 1: out = acc*coef[j] + coef[N+j]
template <bool VEC, bool STRICT>
__global__ void __launch_bounds__(THREADS, STRICT ? 1 : 2)
gemm_bn_sm80(const float* __restrict__ X, const float* __restrict__ W, float* __restrict__ out,
             int M, int N, int K, int mode, const float* __restrict__ coef,
             float* __restrict__ ws_mean, float* __restrict__ ws_m2) {
  extern __shared__ float4 gb_smem80[];
  float* sA = reinterpret_cast<float*>(gb_smem80);
  float* sB = sA + STAGES * A_ELEMS;
  __shared__ float red[2][2][BN];  // [pass][warp_m][col]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int KT = (K + BK - 1) / BK;

  float acc[MT][NT][4], tot[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = tot[i][j][q] = 0.f;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < KT) {
      load_rows<VEC>(sA + s * A_ELEMS, X, M, K, m0, s * BK, tid);
      load_rows<VEC>(sB + s * B_ELEMS, W, N, K, n0, s * BK, tid);
    }
    cp_commit();
  }

  // ldmatrix lane geometry
  const int q = lane >> 3, r = lane & 7;
  uint32_t a_off[MT], b_off[NT / 2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) a_off[mt] = (uint32_t)((wm * WM + mt * 16 + (q & 1) * 8 + r) * BK * 4);
#pragma unroll
  for (int np = 0; np < NT / 2; ++np) b_off[np] = (uint32_t)((wn * WN + np * 16 + (q >> 1) * 8 + r) * BK * 4);
  const uint32_t sA_u = smem_u32(sA), sB_u = smem_u32(sB);

  for (int kt = 0; kt < KT; ++kt) {
    cp_wait<STAGES - 2>();
    __syncthreads();
    {
      const int nk = kt + STAGES - 1;
      if (nk < KT) {
        const int st = nk % STAGES;
        load_rows<VEC>(sA + st * A_ELEMS, X, M, K, m0, nk * BK, tid);
        load_rows<VEC>(sB + st * B_ELEMS, W, N, K, n0, nk * BK, tid);
      }
      cp_commit();
    }
    const int st = kt % STAGES;
    const uint32_t a_st = sA_u + st * A_ELEMS * 4, b_st = sB_u + st * B_ELEMS * 4;
#pragma unroll
    for (int kk = 0; kk < BK / 8; ++kk) {
      uint32_t af[MT][4], bfr[NT][2];
      const uint32_t a_ch = (uint32_t)(((kk * 2 + (q >> 1)) ^ r) << 4);
      const uint32_t b_ch = (uint32_t)(((kk * 2 + (q & 1)) ^ r) << 4);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) ldsm_x4(af[mt], a_st + a_off[mt] + a_ch);
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t t4[4];
        ldsm_x4(t4, b_st + b_off[np] + b_ch);
        bfr[2 * np][0] = t4[0];
        bfr[2 * np][1] = t4[1];
        bfr[2 * np + 1][0] = t4[2];
        bfr[2 * np + 1][1] = t4[3];
      }
      if (!STRICT) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int i = 0; i < 4; ++i) af[mt][i] = f2tf32(__uint_as_float(af[mt][i]));
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int i = 0; i < 2; ++i) bfr[nt][i] = f2tf32(__uint_as_float(bfr[nt][i]));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mma_tf32(acc[mt][nt], af[mt], bfr[nt][0], bfr[nt][1]);
      } else {
        uint32_t al[MT][4], bl[NT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float v = __uint_as_float(af[mt][i]);
            const uint32_t h = f2tf32(v);
            af[mt][i] = h;
            al[mt][i] = f2tf32(v - __uint_as_float(h));
          }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const float v = __uint_as_float(bfr[nt][i]);
            const uint32_t h = f2tf32(v);
            bfr[nt][i] = h;
            bl[nt][i] = f2tf32(v - __uint_as_float(h));
          }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            mma_tf32(acc[mt][nt], al[mt], bfr[nt][0], bfr[nt][1]);  // small terms first
            mma_tf32(acc[mt][nt], af[mt], bl[nt][0], bl[nt][1]);
            mma_tf32(acc[mt][nt], af[mt], bfr[nt][0], bfr[nt][1]);
          }
      }
    }
    if (STRICT && ((kt + 1) % FLUSH80) == 0) {  // bound the tensor cores' truncating accumulation
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int q2 = 0; q2 < 4; ++q2) {
            tot[i][j][q2] += acc[i][j][q2];
            acc[i][j][q2] = 0.f;
          }
    }
  }
  cp_wait<0>();
  if (STRICT) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int q2 = 0; q2 < 4; ++q2) acc[i][j][q2] += tot[i][j][q2];
  }

  // ---------------------------------------------------------------- epilogue
  const int g = lane >> 2, t = lane & 3;
  if (mode == 0) {
    const int nvalid = min(BM, M - m0);
    const float inv_n = 1.0f / (float)nvalid;
    float cs[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float s = 0.f;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            if (wm * WM + mt * 16 + h * 8 + g < nvalid) s += acc[mt][nt][2 * h + j];
        s += __shfl_xor_sync(0xffffffffu, s, 4);
        s += __shfl_xor_sync(0xffffffffu, s, 8);
        s += __shfl_xor_sync(0xffffffffu, s, 16);
        cs[nt][j] = s;
      }
    if (g == 0) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int j = 0; j < 2; ++j) red[0][wm][wn * WN + nt * 8 + 2 * t + j] = cs[nt][j];
    }
    __syncthreads();
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int c = wn * WN + nt * 8 + 2 * t + j;
        const float mu = (red[0][0][c] + red[0][1][c]) * inv_n;
        float s = 0.f;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            if (wm * WM + mt * 16 + h * 8 + g < nvalid) {
              const float dv = acc[mt][nt][2 * h + j] - mu;
              s = fmaf(dv, dv, s);
            }
        s += __shfl_xor_sync(0xffffffffu, s, 4);
        s += __shfl_xor_sync(0xffffffffu, s, 8);
        s += __shfl_xor_sync(0xffffffffu, s, 16);
        cs[nt][j] = s;
      }
    if (g == 0) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int j = 0; j < 2; ++j) red[1][wm][wn * WN + nt * 8 + 2 * t + j] = cs[nt][j];
    }
    __syncthreads();
    if (tid < BN) {
      const int gc = n0 + tid;
      if (gc < N) {
        const size_t o = (size_t)blockIdx.y * N + gc;
        ws_mean[o] = (red[0][0][tid] + red[0][1][tid]) * inv_n;
        ws_m2[o] = red[1][0][tid] + red[1][1][tid];
      }
    }
  }

  const bool even_n = (N & 1) == 0;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int col = n0 + wn * WN + nt * 8 + 2 * t;
    float ca0 = 1.f, cc0 = 0.f, ca1 = 1.f, cc1 = 0.f;
    if (mode == 1) {
      if (col < N) { ca0 = __ldg(coef + col); cc0 = __ldg(coef + N + col); }
      if (col + 1 < N) { ca1 = __ldg(coef + col + 1); cc1 = __ldg(coef + N + col + 1); }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = m0 + wm * WM + mt * 16 + h * 8 + g;
        if (row >= M) continue;
        float v0 = acc[mt][nt][2 * h], v1 = acc[mt][nt][2 * h + 1];
        if (mode == 1) { v0 = fmaf(v0, ca0, cc0); v1 = fmaf(v1, ca1, cc1); }
        float* p = out + (size_t)row * N + col;
        if (even_n && col + 1 < N) {
          *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
        } else {
          if (col < N) p[0] = v0;
          if (col + 1 < N) p[1] = v1;
        }
      }
  }
}
}  // namespace s80

// ------------------------------------------------------------------ sm90a path
namespace s90 {
#ifndef GB_GROUP_M
#define GB_GROUP_M 16
#endif
// Kernel configs (template <BN, STAGES, FLUSH>):
//   <256, 4, 0>: 128x256 tiles, 4 stages (TF32; 3xTF32 for K <= 4096)
//   <128, 6, 8>: 128x128 tiles, 6 stages, 64 accumulators + 64 fp32 register totals per thread
//                (3xTF32 for K > 4096). The tensor cores' fp32 accumulation truncates; flushing
//                it into a register total (FADD, round-to-nearest) every FLUSH k-tiles bounds the
//                resulting bias, which otherwise grows linearly with K.
constexpr int BK = 32, THREADS = 384, GROUP_M = GB_GROUP_M, NSEG = GB_STRICT ? 3 : 1;
constexpr int A_BYTES = BM * BK * 4;  // 16 KB
__host__ __device__ constexpr int smem_bytes(int bn, int stages) {
  return 1024 + stages * (A_BYTES + bn * BK * 4) + 2 * stages * 8 + 9 * bn * 4;
}

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred P1;\n"
      "GB_WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@P1 bra GB_DONE_%=;\n"
      "bra GB_WAIT_%=;\n"
      "GB_DONE_%=:\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void named_bar_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// K-major operand, rows of 128 B, 128B swizzle: LBO = 16 B (unused), SBO = 1024 B (8 rows)
__device__ __forceinline__ uint64_t make_desc(uint32_t addr) {
  uint64_t d = (uint64_t)((addr & 0x3FFFFu) >> 4);
  d |= (uint64_t)1 << 16;
  d |= (uint64_t)64 << 32;
  d |= (uint64_t)1 << 62;
  return d;
}
