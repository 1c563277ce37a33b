// RMSNorm fused with the residual add: one block per row, statistics in f32.
#include "common.cuh"

namespace rmsnorm_cu {

// N elements per access: 16-byte vectors when every row allows it, else 1.
template <typename T, int N>
__device__ void run(T *out, T *residual, const T *x, const T *w, int64_t dim, int64_t out_stride,
                    int64_t res_stride, int64_t x_stride, float eps)
{
    __shared__ float scratch[32];
    int64_t row = blockIdx.x;
    const T *xr = x + row * x_stride;
    T *rr = residual ? residual + row * res_stride : nullptr;
    T *orow = out + row * out_stride;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x * N; i < dim; i += blockDim.x * N) {
        float v[N];
        tc::load_f32<T, N>(xr + i, v);
        if (rr) {
            float r[N];
            tc::load_f32<T, N>(rr + i, r);
#pragma unroll
            for (int j = 0; j < N; j++)
                v[j] += r[j];
            tc::store_f32<T, N>(rr + i, v);
            // Normalise the rounded sum, as the next layer will read it.
#pragma unroll
            for (int j = 0; j < N; j++)
                v[j] = tc::to_f32(tc::from_f32<T>(v[j]));
        }
#pragma unroll
        for (int j = 0; j < N; j++)
            ss += v[j] * v[j];
    }
    float inv = rsqrtf(tc::block_sum(ss, scratch) / (float)dim + eps);
    const T *src = rr ? rr : xr;
    for (int64_t i = threadIdx.x * N; i < dim; i += blockDim.x * N) {
        float v[N], g[N];
        tc::load_f32<T, N>(src + i, v);
        if (w)
            tc::load_f32<T, N>(w + i, g);
        else
#pragma unroll
            for (int j = 0; j < N; j++)
                g[j] = 1.0f;
#pragma unroll
        for (int j = 0; j < N; j++)
            v[j] = v[j] * inv * g[j];
        tc::store_f32<T, N>(orow + i, v);
    }
}

template <typename T>
__device__ void dispatch(T *out, T *residual, const T *x, const T *w, int64_t dim, int64_t out_stride,
                         int64_t res_stride, int64_t x_stride, float eps)
{
    constexpr int N = tc::vec16<T>();
    bool vec = dim % N == 0 && out_stride % N == 0 && x_stride % N == 0 &&
               (!residual || res_stride % N == 0) && tc::aligned(out, x, w, 16) &&
               tc::aligned(residual, residual, residual, 16);
    if (vec)
        run<T, N>(out, residual, x, w, dim, out_stride, res_stride, x_stride, eps);
    else
        run<T, 1>(out, residual, x, w, dim, out_stride, res_stride, x_stride, eps);
}

} // namespace rmsnorm_cu

/** RMSNorm of gridDim.x rows of `dim` elements: with residual (may be NULL), residual += x
 *  first and the norm is of the sum. A NULL w is all ones. out may alias x. */
extern "C" __global__ void tc_k_rmsnorm_f32(float *out, float *residual, const float *x,
                                            const float *w, int64_t dim, int64_t out_stride,
                                            int64_t res_stride, int64_t x_stride, float eps)
{
    tc::await_inputs();
    rmsnorm_cu::dispatch(out, residual, x, w, dim, out_stride, res_stride, x_stride, eps);
}
extern "C" __global__ void tc_k_rmsnorm_f16(__half *out, __half *residual, const __half *x,
                                            const __half *w, int64_t dim, int64_t out_stride,
                                            int64_t res_stride, int64_t x_stride, float eps)
{
    tc::await_inputs();
    rmsnorm_cu::dispatch(out, residual, x, w, dim, out_stride, res_stride, x_stride, eps);
}
extern "C" __global__ void tc_k_rmsnorm_bf16(__nv_bfloat16 *out, __nv_bfloat16 *residual,
                                             const __nv_bfloat16 *x, const __nv_bfloat16 *w,
                                             int64_t dim, int64_t out_stride, int64_t res_stride,
                                             int64_t x_stride, float eps)
{
    tc::await_inputs();
    rmsnorm_cu::dispatch(out, residual, x, w, dim, out_stride, res_stride, x_stride, eps);
}
