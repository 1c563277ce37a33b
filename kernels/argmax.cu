// Argmax over the last dimension; the lowest index wins ties, NaN loses. A decode step runs it
// once per sequence over the vocabulary (128k logits for Llama 3), so the row is read in
// 16-byte vectors, four in flight per thread, and a few rows are cut into chunks, a block each:
// the last block of a row to finish picks among the chunks' winners.
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

// The block's best (v, i), in thread 0.
__device__ __forceinline__ void block_best(float &bv, int64_t &bi)
{
    __shared__ float sv[32];
    __shared__ int64_t si[32];
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
    if (threadIdx.x == 0)
        for (int w = 1; w < (int)(blockDim.x + 31) / 32; w++)
            if (better(sv[w], si[w], bv, bi)) {
                bv = sv[w];
                bi = si[w];
            }
}

template <typename T>
__device__ void run(int32_t *out, const T *x, int64_t cols, int64_t x_stride, float2 *part, int32_t *counters,
                    int64_t chunk)
{
    // Block (row, y) takes columns [y chunk, (y + 1) chunk); chunk keeps 16-byte alignment.
    const int64_t c0 = blockIdx.y * chunk;
    const T *xr = x + blockIdx.x * x_stride + c0;
    float bv = __int_as_float(0x7fc00000);
    int64_t bi = -1;
    auto take = [&](float v, int64_t i) {
        if (better(v, c0 + i, bv, bi)) {
            bv = v;
            bi = c0 + i;
        }
    };
    cols = cols - c0 < chunk ? cols - c0 : chunk;
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
    block_best(bv, bi);
    if (gridDim.y > 1) {
        // Thread 0 publishes the chunk's winner with its release; the last chunk's acquire
        // makes every chunk's visible to it.
        __shared__ bool last;
        if (threadIdx.x == 0) {
            part[blockIdx.x * gridDim.y + blockIdx.y] = make_float2(bv, __int_as_float((int32_t)bi));
            int32_t *cnt = counters + blockIdx.x;
            last = tc::atomic_add_acq_rel(cnt, 1) == (int)gridDim.y - 1;
            if (last)
                *cnt = 0; // every chunk has arrived: ready for the next launch
        }
        __syncthreads();
        if (!last)
            return;
        bv = __int_as_float(0x7fc00000);
        bi = -1;
        for (int y = threadIdx.x; y < (int)gridDim.y; y += blockDim.x) {
            float2 p = part[blockIdx.x * gridDim.y + y];
            int64_t i = __float_as_int(p.y);
            if (better(p.x, i, bv, bi)) {
                bv = p.x;
                bi = i;
            }
        }
        __syncthreads();
        block_best(bv, bi);
    }
    if (threadIdx.x == 0)
        out[blockIdx.x] = (int32_t)(bi < 0 ? 0 : bi);
}

} // namespace argmax_cu

/** out[r] = the index of the largest of `cols` elements of row r. Grid (rows, chunks): block
 *  (r, y) reads columns [y chunk, (y + 1) chunk) (chunk: a multiple of 8; the row itself with
 *  one chunk); with several, each writes its winner (value, index bits) to part[2 (r * chunks + y)] and the last to
 *  finish (counted in counters[r], zero before and after) picks among them. */
extern "C" __global__ void tc_k_argmax_f32(int32_t *out, const float *x, int64_t cols, int64_t x_stride,
                                           float *part, int32_t *counters, int64_t chunk)
{
    tc::await_inputs();
    argmax_cu::run(out, x, cols, x_stride, reinterpret_cast<float2 *>(part), counters, chunk);
}
/** out[r] = the index of the largest of `cols` elements of row r. Grid (rows, chunks): block
 *  (r, y) reads columns [y chunk, (y + 1) chunk) (chunk: a multiple of 8; the row itself with
 *  one chunk); with several, each writes its winner (value, index bits) to part[2 (r * chunks + y)] and the last to
 *  finish (counted in counters[r], zero before and after) picks among them. */
extern "C" __global__ void tc_k_argmax_f16(int32_t *out, const __half *x, int64_t cols, int64_t x_stride,
                                           float *part, int32_t *counters, int64_t chunk)
{
    tc::await_inputs();
    argmax_cu::run(out, x, cols, x_stride, reinterpret_cast<float2 *>(part), counters, chunk);
}
/** out[r] = the index of the largest of `cols` elements of row r. Grid (rows, chunks): block
 *  (r, y) reads columns [y chunk, (y + 1) chunk) (chunk: a multiple of 8; the row itself with
 *  one chunk); with several, each writes its winner (value, index bits) to part[2 (r * chunks + y)] and the last to
 *  finish (counted in counters[r], zero before and after) picks among them. */
extern "C" __global__ void tc_k_argmax_bf16(int32_t *out, const __nv_bfloat16 *x, int64_t cols, int64_t x_stride,
                                           float *part, int32_t *counters, int64_t chunk)
{
    tc::await_inputs();
    argmax_cu::run(out, x, cols, x_stride, reinterpret_cast<float2 *>(part), counters, chunk);
}
