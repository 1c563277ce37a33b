// Attention over a paged KV cache (layout in src/ops/ops.h), the writes: new keys and values
// into their slots (in the activations' type, or FP8 E4M3 over per-kv-head scales), and
// those scales from a batch of rows. The reads: attention_decode.cu and attention_prefill.cu.
#include "attention.cuh"

namespace attention_cu {

// Block (row, y) copies its share of k's and v's row to the row's slot (converted to C), as
// 16-byte vectors of T where every row is aligned to them. An FP8 cache with scales (per kv
// head of head_dim elements) takes each value times the reciprocal of its head's scale (the
// value divided by it, exactly, for the powers of two of tc_kv_scales; one rounding more for
// another scale, as on the CPU).
template <typename T, typename C>
__device__ void store(C *__restrict__ k_cache, C *__restrict__ v_cache, const T *__restrict__ k,
                      const T *__restrict__ v, const int32_t *slots, int64_t row_elems, int64_t k_stride,
                      int64_t v_stride, const float *k_scale = nullptr, const float *v_scale = nullptr,
                      int head_dim = 1)
{
    int64_t slot = slots[blockIdx.x];
    if (slot < 0)
        return;
    const T *ks = k + blockIdx.x * k_stride, *vs = v + blockIdx.x * v_stride;
    C *kd = k_cache + slot * row_elems, *vd = v_cache + slot * row_elems;
    int64_t first = (int64_t)blockIdx.y * blockDim.x + threadIdx.x, step = (int64_t)gridDim.y * blockDim.x;
    constexpr int V = 16 / (int)sizeof(T);
    if constexpr (sizeof(C) != sizeof(T)) {
        for (int64_t i = first; i < row_elems; i += step) {
            float a = tc::to_f32(ks[i]), b = tc::to_f32(vs[i]);
            int h = (int)(i / head_dim);
            kd[i] = tc::from_f32<C>(k_scale ? a * __frcp_rn(k_scale[h]) : a);
            vd[i] = tc::from_f32<C>(v_scale ? b * __frcp_rn(v_scale[h]) : b);
        }
    } else if (row_elems % V == 0 && tc::aligned(ks, vs, kd, 16) && tc::aligned(vd, vd, vd, 16)) {
        for (int64_t i = first; i < row_elems / V; i += step) {
            uint4 a = reinterpret_cast<const uint4 *>(ks)[i], b = reinterpret_cast<const uint4 *>(vs)[i];
            reinterpret_cast<uint4 *>(kd)[i] = a;
            reinterpret_cast<uint4 *>(vd)[i] = b;
        }
    } else {
        for (int64_t i = first; i < row_elems; i += step) {
            T a = ks[i], b = vs[i];
            kd[i] = a;
            vd[i] = b;
        }
    }
}

// The FP8 scales (tc_kv_scales) of rows of run-time dtype dt: block (h, 0) of k, (h, 1) of v.
__device__ void scales(float *k_scale, float *v_scale, const void *k, const void *v, int dt, int64_t rows, int hd,
                       int64_t k_stride, int64_t v_stride)
{
    __shared__ float red[32];
    const void *x = blockIdx.y ? v : k;
    int64_t stride = blockIdx.y ? v_stride : k_stride, h = blockIdx.x;
    float amax = 0.0f;
    for (int64_t e = threadIdx.x; e < rows * hd; e += blockDim.x) {
        int64_t r = e / hd;
        amax = fmaxf(amax, fabsf(tc::load_any(dt, x, r * stride + h * hd + (e - r * hd))));
    }
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = amax;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); w++)
            amax = fmaxf(amax, red[w]);
        float sc = 1.0f;
        if (amax > 0.0f && isfinite(amax)) {
            int e;
            float m = frexpf(amax, &e); // amax = m 2^e, m in [0.5, 1): ceil(log2(amax)) is e, or e - 1 at 0.5
            sc = ldexpf(1.0f, (m == 0.5f ? e - 1 : e) - 5);
        }
        (blockIdx.y ? v_scale : k_scale)[h] = sc;
    }
}

} // namespace attention_cu

/** Write row i of k and v (row_elems = n_kv_heads * head_dim) into cache slot slots[i]
 *  (skipped when negative); grid (rows, any), 256 threads. */
extern "C" __global__ void tc_k_attn_store_f32(float *k_cache, float *v_cache, const float *k, const float *v,
                                           const int32_t *slots, int64_t row_elems, int64_t k_stride,
                                           int64_t v_stride)
{
    tc::await_inputs();
    attention_cu::store(k_cache, v_cache, k, v, slots, row_elems, k_stride, v_stride);
}
/** Write row i of k and v (row_elems = n_kv_heads * head_dim) into cache slot slots[i]
 *  (skipped when negative); grid (rows, any), 256 threads. */
extern "C" __global__ void tc_k_attn_store_f16(__half *k_cache, __half *v_cache, const __half *k, const __half *v,
                                           const int32_t *slots, int64_t row_elems, int64_t k_stride,
                                           int64_t v_stride)
{
    tc::await_inputs();
    attention_cu::store(k_cache, v_cache, k, v, slots, row_elems, k_stride, v_stride);
}
/** Write row i of k and v (row_elems = n_kv_heads * head_dim) into cache slot slots[i]
 *  (skipped when negative); grid (rows, any), 256 threads. */
extern "C" __global__ void tc_k_attn_store_bf16(__nv_bfloat16 *k_cache, __nv_bfloat16 *v_cache, const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                                           const int32_t *slots, int64_t row_elems, int64_t k_stride,
                                           int64_t v_stride)
{
    tc::await_inputs();
    attention_cu::store(k_cache, v_cache, k, v, slots, row_elems, k_stride, v_stride);
}
/** Write row i of k and v (row_elems = n_kv_heads * head_dim) as FP8 E4M3 into cache slot
 *  slots[i] (skipped when negative), each value times the reciprocal of its kv head's scale
 *  (k_scale, v_scale f32 [n_kv_heads]; NULL: 1), saturating at +-448; grid (rows, any), 256
 *  threads. */
extern "C" __global__ void tc_k_attn_store_f16_f8(uint8_t *k_cache, uint8_t *v_cache, const __half *k, const __half *v,
                                                const int32_t *slots, int64_t row_elems, int64_t k_stride,
                                                int64_t v_stride, const float *k_scale, const float *v_scale,
                                                int32_t head_dim)
{
    tc::await_inputs();
    attention_cu::store(reinterpret_cast<tc::f8e4m3 *>(k_cache), reinterpret_cast<tc::f8e4m3 *>(v_cache), k, v,
                        slots, row_elems, k_stride, v_stride, k_scale, v_scale, head_dim);
}
/** Write row i of k and v (row_elems = n_kv_heads * head_dim) as FP8 E4M3 into cache slot
 *  slots[i] (skipped when negative), each value times the reciprocal of its kv head's scale
 *  (k_scale, v_scale f32 [n_kv_heads]; NULL: 1), saturating at +-448; grid (rows, any), 256
 *  threads. */
extern "C" __global__ void tc_k_attn_store_bf16_f8(uint8_t *k_cache, uint8_t *v_cache, const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                                                const int32_t *slots, int64_t row_elems, int64_t k_stride,
                                                int64_t v_stride, const float *k_scale, const float *v_scale,
                                                int32_t head_dim)
{
    tc::await_inputs();
    attention_cu::store(reinterpret_cast<tc::f8e4m3 *>(k_cache), reinterpret_cast<tc::f8e4m3 *>(v_cache), k, v,
                        slots, row_elems, k_stride, v_stride, k_scale, v_scale, head_dim);
}
/** The FP8 scales of a batch of k and v rows [rows, n_kv_heads, head_dim] of dtype `dtype`
 *  (f16 or bf16; rows k_stride and v_stride elements apart): block (h, 0) writes k_scale[h],
 *  block (h, 1) v_scale[h], the power of two 2^(ceil(log2(amax)) - 5) of the head's largest
 *  magnitude (1 where it is 0); grid (n_kv_heads, 2), 256 threads. */
extern "C" __global__ void tc_k_attn_scales_f32(float *k_scale, float *v_scale, const void *k, const void *v,
                                               int32_t dtype, int64_t rows, int32_t head_dim, int64_t k_stride,
                                               int64_t v_stride)
{
    tc::await_inputs();
    attention_cu::scales(k_scale, v_scale, k, v, dtype, rows, head_dim, k_stride, v_stride);
}
