// Rotary position embedding (RoFormer, Su et al. 2021; Llama 3 frequency scaling as in Meta's
// reference and Hugging Face's _compute_llama3_parameters). A row of blocks per token: each
// block computes the pairs' cos/sin in double, then rotates its share of the q and k heads
// with them; fused with the KV-cache store, it also writes k and v to their cache slot (in the
// activations' type, or as FP8 E4M3: the rotated value rounded to the activations' type,
// times the reciprocal of its kv head's scale where one is given (exactly the value divided by
// it for tc_kv_scales' powers of two), then rounded to FP8, as the CPU op stores the rotated
// k).
#include <type_traits>

#include "common.cuh"

namespace rope_cu {

constexpr int kMaxPairs = 256; // head_dim up to 512

// Move P consecutive pairs starting at pair i of the head at `src` (P = 2 moves the
// elements as 4-element or two 2-element vectors), rotated when Rot, to `dst` and, where not
// NULL, `dst2` as well (each in its own element type; one of another type than T, a cache,
// takes the values times inv, the reciprocal of its scale).
template <typename T, int P, bool Rot, typename D1, typename D2>
__device__ __forceinline__ void move(const T *src, D1 *dst, D2 *dst2, int i, int half, bool interleaved,
                                     const float *cs, const float *sn, float inv = 1.0f)
{
    float a[P], b[P];
    if (interleaved) {
        float x[2 * P];
        tc::load_f32<T, 2 * P>(src + 2 * i, x);
#pragma unroll
        for (int p = 0; p < P; p++)
            a[p] = x[2 * p], b[p] = x[2 * p + 1];
    } else {
        tc::load_f32<T, P>(src + i, a);
        tc::load_f32<T, P>(src + i + half, b);
    }
    if (Rot) {
#pragma unroll
        for (int p = 0; p < P; p++) {
            tc::rope_rotate(a[p], b[p], cs[i + p], sn[i + p]);
        }
    }
    auto put = [&](auto *d) {
        using E = typename std::remove_pointer<decltype(d)>::type;
        float ra[P], rb[P]; // what a and b store as: for a cache of another type, rounded to T first
#pragma unroll
        for (int p = 0; p < P; p++) {
            ra[p] = std::is_same<E, T>::value ? a[p] : tc::to_f32(tc::from_f32<T>(a[p])) * inv;
            rb[p] = std::is_same<E, T>::value ? b[p] : tc::to_f32(tc::from_f32<T>(b[p])) * inv;
        }
        if (interleaved) {
            float x[2 * P];
#pragma unroll
            for (int p = 0; p < P; p++)
                x[2 * p] = ra[p], x[2 * p + 1] = rb[p];
            tc::store_f32<E, 2 * P>(d + 2 * i, x);
        } else {
            tc::store_f32<E, P>(d + i, ra);
            tc::store_f32<E, P>(d + i + half, rb);
        }
    };
    if (dst)
        put(dst);
    if (dst2)
        put(dst2);
}

// The row's heads as units spread over the blocks of grid row y: q heads, then k heads, then
// (when storing) v heads. q and k rotate in place; with a cache slot, k's rotated rows and v's
// rows are written there too.
struct Heads {
    int n_heads, n_k, n_v, n_kv_heads, head_dim;
};

template <typename T, typename C, int P>
__device__ void each_head(T *q, T *k, const T *v, C *k_cache, C *v_cache, int64_t row, int64_t slot, Heads hs,
                          int64_t q_stride, int64_t k_stride, int64_t v_stride, bool interleaved, const float *cs,
                          const float *sn, const float *k_scale, const float *v_scale)
{
    int hd = hs.head_dim, half = hd / 2, per_head = half / P;
    int total = (hs.n_heads + hs.n_k + hs.n_v) * per_head;
    for (int t = blockIdx.y * blockDim.x + threadIdx.x; t < total; t += gridDim.y * blockDim.x) {
        int u = t / per_head, i = (t % per_head) * P;
        if (u < hs.n_heads) {
            T *b = q + row * q_stride + (int64_t)u * hd;
            move<T, P, true>(b, b, (C *)nullptr, i, half, interleaved, cs, sn);
        } else if (u < hs.n_heads + hs.n_k) {
            int h = u - hs.n_heads;
            T *b = k + row * k_stride + (int64_t)h * hd;
            C *c = slot >= 0 ? k_cache + (slot * hs.n_kv_heads + h) * hd : nullptr;
            move<T, P, true>(b, b, c, i, half, interleaved, cs, sn, k_scale ? __frcp_rn(k_scale[h]) : 1.0f);
        } else if (slot >= 0) {
            int h = u - hs.n_heads - hs.n_k;
            move<T, P, false>(v + row * v_stride + (int64_t)h * hd, v_cache + (slot * hs.n_kv_heads + h) * hd,
                              (C *)nullptr, i, half, interleaved, cs, sn, v_scale ? __frcp_rn(v_scale[h]) : 1.0f);
        }
    }
}

template <typename T, typename C>
__device__ void run(T *q, T *k, const T *v, C *k_cache, C *v_cache, const int32_t *pos, const int32_t *slots,
                    int n_heads, int n_kv_heads, int head_dim, int64_t q_stride, int64_t k_stride, int64_t v_stride,
                    int interleaved, double theta, int scaling, double factor, double low_ff, double high_ff,
                    double orig_max, const float *k_scale = nullptr, const float *v_scale = nullptr)
{
    __shared__ float cs[kMaxPairs], sn[kMaxPairs];
    int64_t row = blockIdx.x;
    int half = head_dim / 2;
    bool store = k && k_cache;
    // pos and slots are index arrays that no kernel writes (tc_stream_set_overlap): the angles'
    // long double-precision chain runs while the kernel before this one ends, and the next
    // kernel's blocks may be scheduled from the start.
    tc::launch_next();
    int64_t slot = store ? slots[row] : -1;
    double p = (double)pos[row];
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        double s, c;
        sincos(p * tc::rope_frequency(i, head_dim, theta, scaling, factor, low_ff, high_ff, orig_max), &s, &c);
        cs[i] = (float)c;
        sn[i] = (float)s;
    }
    tc::await_grids();
    __syncthreads();
    Heads hs = { n_heads, k ? n_kv_heads : 0, store ? n_kv_heads : 0, n_kv_heads, head_dim };
    // Several pairs per thread, moved as 16-byte vectors (8 or 4 pairs for 16-bit types), when
    // every access stays aligned to its vector size: fewer, wider memory operations keep more
    // bytes in flight, which is what a memory-bound op needs.
    constexpr int PW = 16 / (int)sizeof(T); // elements per 16 bytes
    constexpr int PI = PW / 2;              // interleaved: a vector holds PW/2 pairs
    auto fits = [&](int elems) {
        int bytes = elems * (int)sizeof(T);
        return half % (interleaved ? elems / 2 : elems) == 0 && q_stride % elems == 0 && k_stride % elems == 0 &&
               v_stride % elems == 0 && head_dim % elems == 0 && tc::aligned(q, k, v, bytes) &&
               tc::aligned(k_cache, v_cache, q, bytes);
    };
    if (interleaved && fits(PW))
        each_head<T, C, PI>(q, k, v, k_cache, v_cache, row, slot, hs, q_stride, k_stride, v_stride, true, cs, sn,
                              k_scale, v_scale);
    else if (!interleaved && fits(PW))
        each_head<T, C, PW>(q, k, v, k_cache, v_cache, row, slot, hs, q_stride, k_stride, v_stride, false, cs, sn,
                              k_scale, v_scale);
    else if (half % 2 == 0 && fits(4))
        each_head<T, C, 2>(q, k, v, k_cache, v_cache, row, slot, hs, q_stride, k_stride, v_stride, interleaved, cs, sn,
                              k_scale, v_scale);
    else
        each_head<T, C, 1>(q, k, v, k_cache, v_cache, row, slot, hs, q_stride, k_stride, v_stride, interleaved, cs, sn,
                              k_scale, v_scale);
}

} // namespace rope_cu

/** Rotate q [rows, n_heads, head_dim] and k [rows, n_kv_heads, head_dim] (k may be NULL) in
 *  place by pos[row]; scaling 1 is Llama 3's. With k_cache (and v_cache, v, slots), also
 *  write k's rotated rows and v's rows to cache slot slots[row] ([slots, n_kv_heads,
 *  head_dim]; a negative slot skips the row). Grid (rows, any), 128 threads. */
extern "C" __global__ void tc_k_rope_f32(float *q, float *k, const float *v, float *k_cache, float *v_cache,
                                       const int32_t *pos, const int32_t *slots, int32_t n_heads,
                                       int32_t n_kv_heads, int32_t head_dim, int64_t q_stride,
                                       int64_t k_stride, int64_t v_stride, int32_t interleaved, double theta,
                                       int32_t scaling, double factor, double low_freq_factor,
                                       double high_freq_factor, double original_max_position)
{
    rope_cu::run(q, k, v, k_cache, v_cache, pos, slots, n_heads, n_kv_heads, head_dim, q_stride, k_stride,
                 v_stride, interleaved, theta,
                 scaling, factor, low_freq_factor, high_freq_factor, original_max_position);
}
/** Rotate q [rows, n_heads, head_dim] and k [rows, n_kv_heads, head_dim] (k may be NULL) in
 *  place by pos[row]; scaling 1 is Llama 3's. With k_cache (and v_cache, v, slots), also
 *  write k's rotated rows and v's rows to cache slot slots[row] ([slots, n_kv_heads,
 *  head_dim]; a negative slot skips the row). Grid (rows, any), 128 threads. */
extern "C" __global__ void tc_k_rope_f16(__half *q, __half *k, const __half *v, __half *k_cache, __half *v_cache,
                                       const int32_t *pos, const int32_t *slots, int32_t n_heads,
                                       int32_t n_kv_heads, int32_t head_dim, int64_t q_stride,
                                       int64_t k_stride, int64_t v_stride, int32_t interleaved, double theta,
                                       int32_t scaling, double factor, double low_freq_factor,
                                       double high_freq_factor, double original_max_position)
{
    rope_cu::run(q, k, v, k_cache, v_cache, pos, slots, n_heads, n_kv_heads, head_dim, q_stride, k_stride,
                 v_stride, interleaved, theta,
                 scaling, factor, low_freq_factor, high_freq_factor, original_max_position);
}
/** Rotate q [rows, n_heads, head_dim] and k [rows, n_kv_heads, head_dim] (k may be NULL) in
 *  place by pos[row]; scaling 1 is Llama 3's. With k_cache (and v_cache, v, slots), also
 *  write k's rotated rows and v's rows to cache slot slots[row] ([slots, n_kv_heads,
 *  head_dim]; a negative slot skips the row). Grid (rows, any), 128 threads. */
extern "C" __global__ void tc_k_rope_bf16(__nv_bfloat16 *q, __nv_bfloat16 *k, const __nv_bfloat16 *v, __nv_bfloat16 *k_cache, __nv_bfloat16 *v_cache,
                                       const int32_t *pos, const int32_t *slots, int32_t n_heads,
                                       int32_t n_kv_heads, int32_t head_dim, int64_t q_stride,
                                       int64_t k_stride, int64_t v_stride, int32_t interleaved, double theta,
                                       int32_t scaling, double factor, double low_freq_factor,
                                       double high_freq_factor, double original_max_position)
{
    rope_cu::run(q, k, v, k_cache, v_cache, pos, slots, n_heads, n_kv_heads, head_dim, q_stride, k_stride,
                 v_stride, interleaved, theta,
                 scaling, factor, low_freq_factor, high_freq_factor, original_max_position);
}
/** Rotate q [rows, n_heads, head_dim] and k [rows, n_kv_heads, head_dim] in place by pos[row]
 *  (scaling 1 is Llama 3's) and write k's rotated rows and v's rows as FP8 E4M3 to cache slot
 *  slots[row] ([slots, n_kv_heads, head_dim]; a negative slot skips the row), times the
 *  reciprocal of their kv head's scale (k_scale, v_scale f32 [n_kv_heads]; NULL: 1). Grid
 *  (rows, any), 128 threads. */
extern "C" __global__ void tc_k_rope_f16_f8(__half *q, __half *k, const __half *v, uint8_t *k_cache, uint8_t *v_cache,
                                          const int32_t *pos, const int32_t *slots, int32_t n_heads,
                                          int32_t n_kv_heads, int32_t head_dim, int64_t q_stride,
                                          int64_t k_stride, int64_t v_stride, int32_t interleaved, double theta,
                                          int32_t scaling, double factor, double low_freq_factor,
                                          double high_freq_factor, double original_max_position,
                                          const float *k_scale, const float *v_scale)
{
    rope_cu::run(q, k, v, reinterpret_cast<tc::f8e4m3 *>(k_cache), reinterpret_cast<tc::f8e4m3 *>(v_cache), pos,
                 slots, n_heads, n_kv_heads, head_dim, q_stride, k_stride, v_stride, interleaved, theta, scaling,
                 factor, low_freq_factor, high_freq_factor, original_max_position, k_scale, v_scale);
}
/** Rotate q [rows, n_heads, head_dim] and k [rows, n_kv_heads, head_dim] in place by pos[row]
 *  (scaling 1 is Llama 3's) and write k's rotated rows and v's rows as FP8 E4M3 to cache slot
 *  slots[row] ([slots, n_kv_heads, head_dim]; a negative slot skips the row), times the
 *  reciprocal of their kv head's scale (k_scale, v_scale f32 [n_kv_heads]; NULL: 1). Grid
 *  (rows, any), 128 threads. */
extern "C" __global__ void tc_k_rope_bf16_f8(__nv_bfloat16 *q, __nv_bfloat16 *k, const __nv_bfloat16 *v, uint8_t *k_cache, uint8_t *v_cache,
                                          const int32_t *pos, const int32_t *slots, int32_t n_heads,
                                          int32_t n_kv_heads, int32_t head_dim, int64_t q_stride,
                                          int64_t k_stride, int64_t v_stride, int32_t interleaved, double theta,
                                          int32_t scaling, double factor, double low_freq_factor,
                                          double high_freq_factor, double original_max_position,
                                          const float *k_scale, const float *v_scale)
{
    rope_cu::run(q, k, v, reinterpret_cast<tc::f8e4m3 *>(k_cache), reinterpret_cast<tc::f8e4m3 *>(v_cache), pos,
                 slots, n_heads, n_kv_heads, head_dim, q_stride, k_stride, v_stride, interleaved, theta, scaling,
                 factor, low_freq_factor, high_freq_factor, original_max_position, k_scale, v_scale);
}
