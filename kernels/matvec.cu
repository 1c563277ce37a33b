// Decode matrix products: out[m, n] = x[m, k] w[n, k]^T for m <= 8 rows, where every weight
// byte is read once and speed is set by memory bandwidth. One warp per weight row: lanes read
// the row in 16-byte vectors (streamed past L2 so that x stays cached), eight vectors in flight
// each, and reduce with shuffles.
#include "common.cuh"

namespace matvec_cu {

constexpr int kUnroll = 8;

// N weights from p (16-byte streaming load when N * sizeof(TW) == 16).
template <typename TW, int N> __device__ __forceinline__ void load_w(const TW *p, float (&out)[N])
{
    if constexpr (N * sizeof(TW) == 16) {
        uint4 raw = __ldcs(reinterpret_cast<const uint4 *>(p));
        const TW *e = reinterpret_cast<const TW *>(&raw);
#pragma unroll
        for (int i = 0; i < N; i++)
            out[i] = tc::to_f32(e[i]);
    } else {
#pragma unroll
        for (int i = 0; i < N; i++)
            out[i] = tc::to_f32(p[i]);
    }
}

template <typename TX, int N> __device__ __forceinline__ void load_x(const TX *p, float (&out)[N])
{
    if constexpr (N > 1) {
        tc::load_f32<TX, N>(p, out);
    } else {
#pragma unroll
        for (int i = 0; i < N; i++)
            out[i] = tc::to_f32(p[i]);
    }
}

template <typename TX, int M>
__device__ __forceinline__ void finish(float (&acc)[M], TX *out, int m, int64_t row, int64_t os)
{
#pragma unroll
    for (int r = 0; r < M; r++)
        acc[r] = tc::warp_sum(acc[r]);
    if ((threadIdx.x & 31) == 0)
#pragma unroll
        for (int r = 0; r < M; r++)
            if (r < m)
                out[r * os + row] = tc::from_f32<TX>(acc[r]);
}

// Float weights, N per access (16 bytes of weights, or 1 for unaligned shapes).
template <typename TX, typename TW, int M, int N>
__device__ void float_rows(TX *out, const TX *x, const TW *w, int m, int64_t n, int64_t k, int64_t xs,
                           int64_t os)
{
    int lane = threadIdx.x & 31;
    int64_t warps = blockDim.x >> 5;
    constexpr int64_t step = 32 * N;
    for (int64_t row = blockIdx.x * warps + (threadIdx.x >> 5); row < n; row += gridDim.x * warps) {
        const TW *wr = w + row * k;
        float acc[M] = {};
        int64_t kk = lane * N;
        for (; kk + (kUnroll - 1) * step < k; kk += kUnroll * step) {
            float wv[kUnroll][N];
#pragma unroll
            for (int u = 0; u < kUnroll; u++)
                load_w<TW, N>(wr + kk + u * step, wv[u]);
#pragma unroll
            for (int r = 0; r < M; r++) {
                if (r >= m)
                    break;
#pragma unroll
                for (int u = 0; u < kUnroll; u++) {
                    float xv[N];
                    load_x<TX, N>(x + r * xs + kk + u * step, xv);
#pragma unroll
                    for (int j = 0; j < N; j++)
                        acc[r] = fmaf(wv[u][j], xv[j], acc[r]);
                }
            }
        }
        for (; kk < k; kk += step) {
            float wv[N];
            load_w<TW, N>(wr + kk, wv);
#pragma unroll
            for (int r = 0; r < M; r++) {
                if (r >= m)
                    break;
                float xv[N];
                load_x<TX, N>(x + r * xs + kk, xv);
#pragma unroll
                for (int j = 0; j < N; j++)
                    acc[r] = fmaf(wv[j], xv[j], acc[r]);
            }
        }
        finish<TX, M>(acc, out, m, row, os);
    }
}

// Block-quantised weights (GGUF Q4_0 / Q8_0 layout): one lane per block of 32.
template <typename TX, int M, int DT>
__device__ void block_rows(TX *out, const TX *x, const uint8_t *w, int m, int64_t n, int64_t k,
                           int64_t xs, int64_t os)
{
    constexpr int kBytes = DT == tc::DT_Q4_0 ? 18 : 34;
    int lane = threadIdx.x & 31;
    int64_t warps = blockDim.x >> 5, nblocks = k / tc::kQBlock;
    for (int64_t row = blockIdx.x * warps + (threadIdx.x >> 5); row < n; row += gridDim.x * warps) {
        const uint8_t *wr = w + row * nblocks * kBytes;
        float acc[M] = {};
        for (int64_t b = lane; b < nblocks; b += 32) {
            const uint16_t *blk = reinterpret_cast<const uint16_t *>(wr + b * kBytes);
            float d = __half2float(__ushort_as_half(blk[0]));
            float wv[tc::kQBlock];
#pragma unroll
            for (int j = 0; j < tc::kQBlock / 2; j++) {
                uint16_t two = blk[1 + j / (DT == tc::DT_Q4_0 ? 2 : 1)];
                if constexpr (DT == tc::DT_Q4_0) {
                    uint8_t byte = (uint8_t)(j % 2 ? two >> 8 : two);
                    wv[j] = (float)((byte & 0xf) - 8);
                    wv[j + 16] = (float)((byte >> 4) - 8);
                } else {
                    wv[2 * j] = (float)(int8_t)(two & 0xff);
                    wv[2 * j + 1] = (float)(int8_t)(two >> 8);
                }
            }
#pragma unroll
            for (int r = 0; r < M; r++) {
                if (r >= m)
                    break;
                const TX *xr = x + r * xs + b * tc::kQBlock;
                float s = 0.0f;
#pragma unroll
                for (int j = 0; j < tc::kQBlock; j++)
                    s = fmaf(wv[j], tc::to_f32(xr[j]), s);
                acc[r] = fmaf(d, s, acc[r]);
            }
        }
        finish<TX, M>(acc, out, m, row, os);
    }
}

template <typename TX, int M>
__device__ void by_weight(TX *out, const TX *x, const void *w, int dt, int m, int64_t n, int64_t k,
                          int64_t xs, int64_t os)
{
    // 16-byte vectors need every row start aligned: k, the x stride and the pointers.
    switch (dt) {
    case tc::DT_F32:
        if (k % 4 == 0 && xs % 4 == 0 && tc::aligned(x, w, w, 16))
            float_rows<TX, float, M, 4>(out, x, (const float *)w, m, n, k, xs, os);
        else
            float_rows<TX, float, M, 1>(out, x, (const float *)w, m, n, k, xs, os);
        break;
    case tc::DT_F16:
        if (k % 8 == 0 && xs % 8 == 0 && tc::aligned(x, w, w, 16))
            float_rows<TX, __half, M, 8>(out, x, (const __half *)w, m, n, k, xs, os);
        else
            float_rows<TX, __half, M, 1>(out, x, (const __half *)w, m, n, k, xs, os);
        break;
    case tc::DT_BF16:
        if (k % 8 == 0 && xs % 8 == 0 && tc::aligned(x, w, w, 16))
            float_rows<TX, __nv_bfloat16, M, 8>(out, x, (const __nv_bfloat16 *)w, m, n, k, xs, os);
        else
            float_rows<TX, __nv_bfloat16, M, 1>(out, x, (const __nv_bfloat16 *)w, m, n, k, xs, os);
        break;
    case tc::DT_Q4_0:
        block_rows<TX, M, tc::DT_Q4_0>(out, x, (const uint8_t *)w, m, n, k, xs, os);
        break;
    case tc::DT_Q8_0:
        block_rows<TX, M, tc::DT_Q8_0>(out, x, (const uint8_t *)w, m, n, k, xs, os);
        break;
    }
}

template <typename TX>
__device__ void by_rows(TX *out, const TX *x, const void *w, int dt, int m, int64_t n, int64_t k,
                        int64_t xs, int64_t os)
{
    if (m <= 1)
        by_weight<TX, 1>(out, x, w, dt, m, n, k, xs, os);
    else if (m <= 2)
        by_weight<TX, 2>(out, x, w, dt, m, n, k, xs, os);
    else if (m <= 4)
        by_weight<TX, 4>(out, x, w, dt, m, n, k, xs, os);
    else
        by_weight<TX, 8>(out, x, w, dt, m, n, k, xs, os);
}

} // namespace matvec_cu

/** out[m, n] = x[m, k] w[n, k]^T for 1 <= m <= 8, w of run-time dtype w_dtype (tc_dtype);
 *  one warp per weight row, grid-stride over rows. */
extern "C" __global__ void tc_k_matvec_f32(float *out, const float *x, const void *w, int32_t w_dtype,
                                           int32_t m, int64_t n, int64_t k, int64_t x_stride,
                                           int64_t out_stride)
{
    matvec_cu::by_rows(out, x, w, w_dtype, m, n, k, x_stride, out_stride);
}
extern "C" __global__ void tc_k_matvec_f16(__half *out, const __half *x, const void *w,
                                           int32_t w_dtype, int32_t m, int64_t n, int64_t k,
                                           int64_t x_stride, int64_t out_stride)
{
    matvec_cu::by_rows(out, x, w, w_dtype, m, n, k, x_stride, out_stride);
}
extern "C" __global__ void tc_k_matvec_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *x,
                                            const void *w, int32_t w_dtype, int32_t m, int64_t n,
                                            int64_t k, int64_t x_stride, int64_t out_stride)
{
    matvec_cu::by_rows(out, x, w, w_dtype, m, n, k, x_stride, out_stride);
}
