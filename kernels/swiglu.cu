// SwiGLU (Shazeer 2020): out = silu(gate) * up, elementwise over rows that may be strided.
#include "common.cuh"

namespace swiglu_cu {

template <typename T, int N>
__device__ void run(T *out, const T *gate, const T *up, int64_t rows, int64_t cols, int64_t out_stride,
                    int64_t gate_stride, int64_t up_stride)
{
    int64_t per_row = (cols + N - 1) / N;
    int64_t total = rows * per_row;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = t / per_row, c = (t % per_row) * N;
        float g[N], u[N], o[N];
        tc::load_f32<T, N>(gate + r * gate_stride + c, g);
        tc::load_f32<T, N>(up + r * up_stride + c, u);
#pragma unroll
        for (int j = 0; j < N; j++)
            o[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
        tc::store_f32<T, N>(out + r * out_stride + c, o);
    }
}

template <typename T>
__device__ void dispatch(T *out, const T *gate, const T *up, int64_t rows, int64_t cols,
                         int64_t out_stride, int64_t gate_stride, int64_t up_stride)
{
    constexpr int N = tc::vec16<T>();
    if (cols % N == 0 && out_stride % N == 0 && gate_stride % N == 0 && up_stride % N == 0 &&
        tc::aligned(out, gate, up, 16))
        run<T, N>(out, gate, up, rows, cols, out_stride, gate_stride, up_stride);
    else
        run<T, 1>(out, gate, up, rows, cols, out_stride, gate_stride, up_stride);
}

} // namespace swiglu_cu

/** out = silu(gate) * up over rows x cols (grid-stride: any grid size works). */
extern "C" __global__ void tc_k_swiglu_f32(float *out, const float *gate, const float *up, int64_t rows,
                                         int64_t cols, int64_t out_stride, int64_t gate_stride,
                                         int64_t up_stride)
{
    tc::await_inputs();
    swiglu_cu::dispatch(out, gate, up, rows, cols, out_stride, gate_stride, up_stride);
}
/** out = silu(gate) * up over rows x cols (grid-stride: any grid size works). */
extern "C" __global__ void tc_k_swiglu_f16(__half *out, const __half *gate, const __half *up, int64_t rows,
                                         int64_t cols, int64_t out_stride, int64_t gate_stride,
                                         int64_t up_stride)
{
    tc::await_inputs();
    swiglu_cu::dispatch(out, gate, up, rows, cols, out_stride, gate_stride, up_stride);
}
/** out = silu(gate) * up over rows x cols (grid-stride: any grid size works). */
extern "C" __global__ void tc_k_swiglu_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *gate, const __nv_bfloat16 *up, int64_t rows,
                                         int64_t cols, int64_t out_stride, int64_t gate_stride,
                                         int64_t up_stride)
{
    tc::await_inputs();
    swiglu_cu::dispatch(out, gate, up, rows, cols, out_stride, gate_stride, up_stride);
}
