// Argmax over the last dimension: one block per row; the lowest index wins ties, NaN loses.
// A decode step runs it once per sequence over the vocabulary (128k logits for Llama 3), so
// the row is read in 16-byte vectors, four in flight per thread.
#include "common.cuh"

namespace argmax_cu {

// Whether (v, i) beats (bv, bi): larger value, or equal value and lower index; NaN never wins
// against a number.
__device__ __forceinline__ bool better(float v, int64_t i, float bv, int64_t bi)
{
    if (isnan(v))
        return bi < 0;
    return isnan(bv) || v > bv || (v == bv && i < bi) || bi < 0;
}

template <typename T> __device__ void run(int32_t *out, const T *x, int64_t cols, int64_t x_stride)
{
    __shared__ float sv[32];
    __shared__ int64_t si[32];
    const T *xr = x + blockIdx.x * x_stride;
    float bv = __int_as_float(0x7fc00000);
    int64_t bi = -1;
    auto take = [&](float v, int64_t i) {
        if (better(v, i, bv, bi)) {
            bv = v;
            bi = i;
        }
    };
    constexpr int V = tc::vec16<T>(), U = 4;
    int64_t head = 0;
    if ((reinterpret_cast<uintptr_t>(xr) & 15) == 0) {
        // Each thread's elements come in increasing index order, so within a thread the
        // first of equal values is kept.
        int64_t nvec = cols / V, step = (int64_t)blockDim.x * U;
        const tc::Vec<T, V> *xv = reinterpret_cast<const tc::Vec<T, V> *>(xr);
        int64_t c = threadIdx.x;
        for (; c + (U - 1) * (int64_t)blockDim.x < nvec; c += step) {
            tc::Vec<T, V> part[U];
#pragma unroll
            for (int u = 0; u < U; u++)
                part[u] = xv[c + u * (int64_t)blockDim.x];
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int j = 0; j < V; j++)
                    take(tc::to_f32(part[u].v[j]), (c + u * (int64_t)blockDim.x) * V + j);
        }
        for (; c < nvec; c += blockDim.x) {
            tc::Vec<T, V> part = xv[c];
#pragma unroll
            for (int j = 0; j < V; j++)
                take(tc::to_f32(part.v[j]), c * V + j);
        }
        head = nvec * V;
    }
    for (int64_t i = head + threadIdx.x; i < cols; i += blockDim.x)
        take(tc::to_f32(xr[i]), i);
    for (int o = 16; o > 0; o >>= 1) {
        float v = __shfl_xor_sync(0xffffffffu, bv, o);
        int64_t i = __shfl_xor_sync(0xffffffffu, bi, o);
        if (better(v, i, bv, bi)) {
            bv = v;
            bi = i;
        }
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        sv[warp] = bv;
        si[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x + 31) / 32; w++)
            if (better(sv[w], si[w], bv, bi)) {
                bv = sv[w];
                bi = si[w];
            }
        out[blockIdx.x] = (int32_t)(bi < 0 ? 0 : bi);
    }
}

} // namespace argmax_cu

/** out[r] = the index of the largest of `cols` elements of row r, one block per row. */
extern "C" __global__ void tc_k_argmax_f32(int32_t *out, const float *x, int64_t cols, int64_t x_stride)
{
    tc::await_inputs();
    argmax_cu::run(out, x, cols, x_stride);
}
/** out[r] = the index of the largest of `cols` elements of row r, one block per row. */
extern "C" __global__ void tc_k_argmax_f16(int32_t *out, const __half *x, int64_t cols, int64_t x_stride)
{
    tc::await_inputs();
    argmax_cu::run(out, x, cols, x_stride);
}
/** out[r] = the index of the largest of `cols` elements of row r, one block per row. */
extern "C" __global__ void tc_k_argmax_bf16(int32_t *out, const __nv_bfloat16 *x, int64_t cols, int64_t x_stride)
{
    tc::await_inputs();
    argmax_cu::run(out, x, cols, x_stride);
}
