// The bias of a linear layer added to each row of its output: x[r, :] += bias (rows may be
// strided, as the q, k and v parts of one fused product are).
#include "common.cuh"

namespace add_bias_cu {

template <typename T, int N>
__device__ void run(T *x, const T *bias, int64_t rows, int64_t cols, int64_t x_stride)
{
    int64_t per_row = (cols + N - 1) / N;
    int64_t total = rows * per_row;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = t / per_row, c = (t % per_row) * N;
        float v[N], b[N];
        tc::load_f32<T, N>(x + r * x_stride + c, v);
        tc::load_f32<T, N>(bias + c, b);
#pragma unroll
        for (int j = 0; j < N; j++)
            v[j] += b[j];
        tc::store_f32<T, N>(x + r * x_stride + c, v);
    }
}

template <typename T>
__device__ void dispatch(T *x, const T *bias, int64_t rows, int64_t cols, int64_t x_stride)
{
    constexpr int N = tc::vec16<T>();
    if (cols % N == 0 && x_stride % N == 0 && tc::aligned(x, bias, bias, 16))
        run<T, N>(x, bias, rows, cols, x_stride);
    else
        run<T, 1>(x, bias, rows, cols, x_stride);
}

} // namespace add_bias_cu

/** x[r, :] += bias over rows x cols (grid-stride: any grid size works). */
extern "C" __global__ void tc_k_add_bias_f32(float *x, const float *bias, int64_t rows, int64_t cols,
                                           int64_t x_stride)
{
    tc::await_inputs();
    add_bias_cu::dispatch(x, bias, rows, cols, x_stride);
}
/** x[r, :] += bias over rows x cols (grid-stride: any grid size works). */
extern "C" __global__ void tc_k_add_bias_f16(__half *x, const __half *bias, int64_t rows, int64_t cols,
                                           int64_t x_stride)
{
    tc::await_inputs();
    add_bias_cu::dispatch(x, bias, rows, cols, x_stride);
}
/** x[r, :] += bias over rows x cols (grid-stride: any grid size works). */
extern "C" __global__ void tc_k_add_bias_bf16(__nv_bfloat16 *x, const __nv_bfloat16 *bias, int64_t rows,
                                            int64_t cols, int64_t x_stride)
{
    tc::await_inputs();
    add_bias_cu::dispatch(x, bias, rows, cols, x_stride);
}
