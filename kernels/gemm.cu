// Our own matrix products out[m, n] = x[m, k] w[n, k]^T, for where cuBLAS is not installed
// (only the driver is promised). f16/bf16 run on tensor cores (WMMA 16x16x16, f32
// accumulate) with a three-stage cp.async pipeline; everything else runs a tiled f32 kernel.
#include <mma.h>
#include "common.cuh"

namespace gemm_cu {

// Tensor-core tiling: a 128x128 block tile, K steps of 32, 8 warps of 64x32 each.
constexpr int BM = 128, BN = 128, BK = 32, kStages = 3, kThreads = 256;
constexpr int kLd = BK + 8; // padded smem row (halves), 80 bytes: keeps 16-byte alignment
constexpr int kStageElems = (BM + BN) * kLd;
constexpr int kEpLd = BN + 4;

using tc::cp_async16;
using tc::cp_commit;
using tc::cp_wait;

// Queue the loads of K step `kt` (rows of x and of w, 32 halves each) into stage buffer s.
template <typename T>
__device__ __forceinline__ void load_stage(T *s, const T *x, const T *w, int64_t m, int64_t n, int64_t k,
                                           int64_t xs, int64_t row0, int64_t col0, int64_t kt)
{
    // 256 rows x 4 chunks of 8 halves = 1024 chunks, 4 per thread.
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int c = threadIdx.x + i * kThreads;
        int r = c >> 2, part = (c & 3) * 8;
        int64_t kk = kt * BK + part;
        const T *src;
        bool ok;
        if (r < BM) {
            ok = row0 + r < m && kk < k;
            src = ok ? x + (row0 + r) * xs + kk : x;
        } else {
            ok = col0 + (r - BM) < n && kk < k;
            src = ok ? w + (col0 + r - BM) * k + kk : w;
        }
        cp_async16(s + r * kLd + part, src, ok);
    }
}

template <typename T>
__device__ void tensor_core(T *out, const T *x, const T *w, int64_t m, int64_t n, int64_t k, int64_t xs,
                            int64_t os)
{
    using namespace nvcuda;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    T *smem = reinterpret_cast<T *>(smem_raw);
    int warp = threadIdx.x >> 5;
    int wm = warp >> 2, wn = warp & 3; // 2 x 4 warps, each 64 rows x 32 columns
    int64_t row0 = (int64_t)blockIdx.y * BM, col0 = (int64_t)blockIdx.x * BN;
    int64_t ktiles = (k + BK - 1) / BK;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::fill_fragment(acc[i][j], 0.0f);

#pragma unroll
    for (int s = 0; s < kStages - 1; s++) {
        if (s < ktiles)
            load_stage(smem + s * kStageElems, x, w, m, n, k, xs, row0, col0, s);
        cp_commit();
    }
    for (int64_t kt = 0; kt < ktiles; kt++) {
        cp_wait<kStages - 2>();
        __syncthreads();
        int64_t next = kt + kStages - 1;
        if (next < ktiles)
            load_stage(smem + (next % kStages) * kStageElems, x, w, m, n, k, xs, row0, col0, next);
        cp_commit();
        const T *a = smem + (kt % kStages) * kStageElems;
        const T *b = a + BM * kLd;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[4];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb[2];
#pragma unroll
            for (int i = 0; i < 4; i++)
                wmma::load_matrix_sync(fa[i], a + (wm * 64 + i * 16) * kLd + kk, kLd);
#pragma unroll
            for (int j = 0; j < 2; j++)
                wmma::load_matrix_sync(fb[j], b + (wn * 32 + j * 16) * kLd + kk, kLd);
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 2; j++)
                    wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
    }
    cp_wait<0>();
    __syncthreads();
    // Epilogue through shared memory: f32 tile, then converted, bounds-checked stores.
    float *ep = reinterpret_cast<float *>(smem_raw);
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(ep + (wm * 64 + i * 16) * kEpLd + wn * 32 + j * 16, acc[i][j], kEpLd,
                                    wmma::mem_row_major);
    __syncthreads();
    for (int e = threadIdx.x; e < BM * BN; e += kThreads) {
        int r = e / BN, c = e % BN;
        if (row0 + r < m && col0 + c < n)
            out[(row0 + r) * os + col0 + c] = tc::from_f32<T>(ep[r * kEpLd + c]);
    }
}

// The f32 fallback: 64x64 tiles, 16 K per step, each thread a 4x4 block of outputs.
constexpr int SM = 64, SN = 64, SK = 16;

template <typename T>
__device__ void simt(T *out, const T *x, const T *w, int64_t m, int64_t n, int64_t k, int64_t xs, int64_t os)
{
    __shared__ float as[SK][SM + 4], bs[SK][SN + 4];
    int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    int64_t row0 = (int64_t)blockIdx.y * SM, col0 = (int64_t)blockIdx.x * SN;
    float acc[4][4] = {};
    for (int64_t k0 = 0; k0 < k; k0 += SK) {
        for (int e = threadIdx.x; e < SM * SK; e += 256) {
            int r = e / SK, c = e % SK;
            as[c][r] = row0 + r < m && k0 + c < k ? tc::to_f32(x[(row0 + r) * xs + k0 + c]) : 0.0f;
            bs[c][r] = col0 + r < n && k0 + c < k ? tc::to_f32(w[(col0 + r) * k + k0 + c]) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < SK; kk++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                a[i] = as[kk][ty + 16 * i];
                b[i] = bs[kk][tx + 16 * i];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int64_t r = row0 + ty + 16 * i, c = col0 + tx + 16 * j;
            if (r < m && c < n)
                out[r * os + c] = tc::from_f32<T>(acc[i][j]);
        }
}

} // namespace gemm_cu

/** Tensor-core product out[m, n] = x[m, k] w[n, k]^T: grid (ceil(n/128), ceil(m/128)), 256
 *  threads, 67584 bytes of dynamic shared memory (the f32 epilogue tile, 128 x 132 floats,
 *  outgrows the 3 x 256 x 40 halves of the pipeline); k and x_stride multiples of 8, x and w
 *  16-byte aligned. */
extern "C" __global__ void __launch_bounds__(256) tc_k_gemm_tc_f16(__half *out, const __half *x,
                                                                   const __half *w, int64_t m,
                                                                   int64_t n, int64_t k,
                                                                   int64_t x_stride, int64_t out_stride)
{
    tc::await_inputs();
    gemm_cu::tensor_core(out, x, w, m, n, k, x_stride, out_stride);
}
extern "C" __global__ void __launch_bounds__(256)
    tc_k_gemm_tc_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *x, const __nv_bfloat16 *w, int64_t m,
                      int64_t n, int64_t k, int64_t x_stride, int64_t out_stride)
{
    tc::await_inputs();
    gemm_cu::tensor_core(out, x, w, m, n, k, x_stride, out_stride);
}
/** f32-arithmetic product for any shape and alignment: grid (ceil(n/64), ceil(m/64)), 256
 *  threads. */
extern "C" __global__ void tc_k_gemm_f32(float *out, const float *x, const float *w, int64_t m, int64_t n,
                                         int64_t k, int64_t x_stride, int64_t out_stride)
{
    tc::await_inputs();
    gemm_cu::simt(out, x, w, m, n, k, x_stride, out_stride);
}
extern "C" __global__ void tc_k_gemm_f16(__half *out, const __half *x, const __half *w, int64_t m,
                                         int64_t n, int64_t k, int64_t x_stride, int64_t out_stride)
{
    tc::await_inputs();
    gemm_cu::simt(out, x, w, m, n, k, x_stride, out_stride);
}
extern "C" __global__ void tc_k_gemm_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *x,
                                          const __nv_bfloat16 *w, int64_t m, int64_t n, int64_t k,
                                          int64_t x_stride, int64_t out_stride)
{
    tc::await_inputs();
    gemm_cu::simt(out, x, w, m, n, k, x_stride, out_stride);
}
