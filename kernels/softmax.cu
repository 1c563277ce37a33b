// Softmax over the last dimension: one block per row, max and sum in f32.
#include "common.cuh"

namespace softmax_cu {

template <typename T>
__device__ void run(T *out, const T *x, int64_t cols, int64_t out_stride, int64_t x_stride)
{
    __shared__ float scratch[32];
    const T *xr = x + blockIdx.x * x_stride;
    T *o = out + blockIdx.x * out_stride;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x)
        m = fmaxf(m, tc::to_f32(xr[i]));
    m = tc::block_max(m, scratch);
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x)
        s += expf(tc::to_f32(xr[i]) - m);
    float inv = 1.0f / tc::block_sum(s, scratch);
    // Every thread read the row above before the block-wide sum, so writing in place is safe.
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x)
        o[i] = tc::from_f32<T>(expf(tc::to_f32(xr[i]) - m) * inv);
}

} // namespace softmax_cu

/** Softmax of gridDim.x rows of `cols` elements (out may alias x). */
extern "C" __global__ void tc_k_softmax_f32(float *out, const float *x, int64_t cols, int64_t out_stride,
                                          int64_t x_stride)
{
    tc::await_inputs();
    softmax_cu::run(out, x, cols, out_stride, x_stride);
}
/** Softmax of gridDim.x rows of `cols` elements (out may alias x). */
extern "C" __global__ void tc_k_softmax_f16(__half *out, const __half *x, int64_t cols, int64_t out_stride,
                                          int64_t x_stride)
{
    tc::await_inputs();
    softmax_cu::run(out, x, cols, out_stride, x_stride);
}
/** Softmax of gridDim.x rows of `cols` elements (out may alias x). */
extern "C" __global__ void tc_k_softmax_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *x, int64_t cols, int64_t out_stride,
                                          int64_t x_stride)
{
    tc::await_inputs();
    softmax_cu::run(out, x, cols, out_stride, x_stride);
}
