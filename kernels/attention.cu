// Attention over a paged KV cache (layout in src/ops/ops.h): writing new keys and values into
// their slots, decode (one query per sequence, split over the cached length as in
// flash-decoding, then combined) and causal prefill (flash-attention style online softmax
// over key tiles held in shared memory; Dao et al. 2022). f32 arithmetic throughout.
#include "common.cuh"

namespace attention_cu {

// Address of token t's row for kv head h in a paged cache. 32-bit division: a 64-bit one
// costs about a hundred instructions, and positions stay far below 2^31.
template <typename T>
__device__ __forceinline__ const T *kv_row(const T *cache, const int32_t *table, int64_t t, int block_size,
                                           int n_kv_heads, int head_dim, int h)
{
    uint32_t tt = (uint32_t)t, bs = (uint32_t)block_size;
    uint32_t bi = tt / bs;
    int64_t blk = table[bi];
    return cache + ((blk * block_size + (tt - bi * bs)) * n_kv_heads + h) * (int64_t)head_dim;
}

template <typename T>
__device__ void store(T *k_cache, T *v_cache, const T *k, const T *v, const int32_t *slots, int64_t row_elems,
                      int64_t k_stride, int64_t v_stride)
{
    int64_t slot = slots[blockIdx.x];
    if (slot < 0)
        return;
    for (int64_t i = threadIdx.x; i < row_elems; i += blockDim.x) {
        k_cache[slot * row_elems + i] = k[blockIdx.x * k_stride + i];
        v_cache[slot * row_elems + i] = v[blockIdx.x * v_stride + i];
    }
}

// Decode: block (seq, kv head x head chunk, split); 4 warps, each an independent online
// softmax over every 4th group of kUnroll keys of the split, merged in shared memory.
constexpr int kMaxGroup = 8, kWarps = 4, kUnroll = 4;

template <typename T, int HD>
__device__ void decode(T *out, float *part, const T *q, const T *k_cache, const T *v_cache, const int32_t *table,
                       const int32_t *seq_lens, int n_heads, int n_kv_heads, int block_size, int max_blocks,
                       int64_t q_stride, int64_t out_stride, int chunk, float scale)
{
    constexpr int D = HD / 32; // dimensions per lane
    __shared__ float sm_m[kWarps][kMaxGroup], sm_l[kWarps][kMaxGroup];
    __shared__ float sm_acc[kWarps][kMaxGroup][HD];
    int seq = blockIdx.x, split = blockIdx.z, splits = gridDim.z;
    int group = n_heads / n_kv_heads, chunks = (group + kMaxGroup - 1) / kMaxGroup;
    int kvh = blockIdx.y / chunks, h0 = kvh * group + (blockIdx.y % chunks) * kMaxGroup;
    int g = min(kMaxGroup, kvh * group + group - h0);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t *tbl = table + (int64_t)seq * max_blocks;
    int64_t len = seq_lens[seq];
    int64_t t0 = (int64_t)split * chunk, t1 = min(len, t0 + chunk);

    float qv[kMaxGroup][D], acc[kMaxGroup][D], m[kMaxGroup], l[kMaxGroup];
#pragma unroll
    for (int h = 0; h < kMaxGroup; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
#pragma unroll
        for (int j = 0; j < D; j++) {
            acc[h][j] = 0.0f;
            qv[h][j] = h < g ? tc::to_f32(q[seq * q_stride + (int64_t)(h0 + h) * HD + lane * D + j]) * scale : 0.0f;
        }
    }
    // Software pipelined: the next group's keys and values load while this group computes,
    // so each warp keeps two groups of rows in flight.
    const int64_t step = kWarps * kUnroll;
    tc::Vec<T, D> kr0[kUnroll], vr0[kUnroll], kr1[kUnroll], vr1[kUnroll];
    // Groups start at multiples of kUnroll (the host rounds `chunk` to one), so when
    // block_size is a multiple of kUnroll a group never crosses a block: one table lookup.
    const bool one_block = block_size % kUnroll == 0;
    const int64_t row_step = (int64_t)n_kv_heads * HD;
    auto load_group = [&](int64_t base, tc::Vec<T, D>(&kr)[kUnroll], tc::Vec<T, D>(&vr)[kUnroll]) {
        const T *k0 = one_block ? kv_row(k_cache, tbl, base, block_size, n_kv_heads, HD, kvh) : nullptr;
        const T *v0 = one_block ? kv_row(v_cache, tbl, base, block_size, n_kv_heads, HD, kvh) : nullptr;
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            int64_t t = base + u;
            if (t < t1) {
                const T *kp = one_block ? k0 + u * row_step : kv_row(k_cache, tbl, t, block_size, n_kv_heads, HD, kvh);
                const T *vp = one_block ? v0 + u * row_step : kv_row(v_cache, tbl, t, block_size, n_kv_heads, HD, kvh);
                kr[u] = *reinterpret_cast<const tc::Vec<T, D> *>(kp + lane * D);
                vr[u] = *reinterpret_cast<const tc::Vec<T, D> *>(vp + lane * D);
            } else {
#pragma unroll
                for (int j = 0; j < D; j++) {
                    kr[u].v[j] = tc::from_f32<T>(0.0f);
                    vr[u].v[j] = tc::from_f32<T>(0.0f);
                }
            }
        }
    };
    auto process = [&](int64_t base, const tc::Vec<T, D>(&kr)[kUnroll], const tc::Vec<T, D>(&vr)[kUnroll]) {
        float kv[kUnroll][D], vv[kUnroll][D];
#pragma unroll
        for (int u = 0; u < kUnroll; u++)
#pragma unroll
            for (int j = 0; j < D; j++) {
                kv[u][j] = tc::to_f32(kr[u].v[j]);
                vv[u][j] = tc::to_f32(vr[u].v[j]);
            }
#pragma unroll
        for (int h = 0; h < kMaxGroup; h++) {
            if (h >= g)
                break;
            float sc[kUnroll], smax = -INFINITY;
#pragma unroll
            for (int u = 0; u < kUnroll; u++) {
                float d = 0.0f;
#pragma unroll
                for (int j = 0; j < D; j++)
                    d = fmaf(qv[h][j], kv[u][j], d);
                sc[u] = base + u < t1 ? tc::warp_sum(d) : -INFINITY;
                smax = fmaxf(smax, sc[u]);
            }
            float mn = fmaxf(m[h], smax);
            float corr = __expf(m[h] - mn);
            l[h] *= corr;
#pragma unroll
            for (int j = 0; j < D; j++)
                acc[h][j] *= corr;
#pragma unroll
            for (int u = 0; u < kUnroll; u++) {
                float p = base + u < t1 ? __expf(sc[u] - mn) : 0.0f;
                l[h] += p;
#pragma unroll
                for (int j = 0; j < D; j++)
                    acc[h][j] = fmaf(p, vv[u][j], acc[h][j]);
            }
            m[h] = mn;
        }
    };
    int64_t base = t0 + warp * kUnroll;
    if (base < t1)
        load_group(base, kr0, vr0);
    for (; base < t1; base += 2 * step) {
        if (base + step < t1)
            load_group(base + step, kr1, vr1);
        process(base, kr0, vr0);
        if (base + step >= t1)
            break;
        if (base + 2 * step < t1)
            load_group(base + 2 * step, kr0, vr0);
        process(base + step, kr1, vr1);
    }
    // Merge the warps: each (head, dimension) rescaled to the largest maximum.
#pragma unroll
    for (int h = 0; h < kMaxGroup; h++) {
        if (lane == 0) {
            sm_m[warp][h] = m[h];
            sm_l[warp][h] = l[h];
        }
#pragma unroll
        for (int j = 0; j < D; j++)
            sm_acc[warp][h][lane * D + j] = acc[h][j];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < g * HD; e += blockDim.x) {
        int h = e / HD, d = e % HD;
        float mx = -INFINITY;
        for (int w = 0; w < kWarps; w++)
            mx = fmaxf(mx, sm_m[w][h]);
        float sl = 0.0f, sa = 0.0f;
        if (mx != -INFINITY)
            for (int w = 0; w < kWarps; w++) {
                float f = __expf(sm_m[w][h] - mx);
                sl += sm_l[w][h] * f;
                sa += sm_acc[w][h][d] * f;
            }
        int head = h0 + h;
        if (splits == 1) {
            out[seq * out_stride + (int64_t)head * HD + d] = tc::from_f32<T>(sl > 0.0f ? sa / sl : 0.0f);
        } else {
            // Partials: [seq, head, split] records of (m, l, acc[HD]).
            float *p = part + (((int64_t)seq * n_heads + head) * splits + split) * (HD + 2);
            if (d == 0) {
                p[0] = mx;
                p[1] = sl;
            }
            p[2 + d] = sa;
        }
    }
}

template <typename T>
__device__ void combine(T *out, const float *part, int n_heads, int head_dim, int splits, int64_t out_stride)
{
    int seq = blockIdx.x / n_heads, head = blockIdx.x % n_heads;
    const float *p = part + ((int64_t)seq * n_heads + head) * splits * (head_dim + 2);
    float mx = -INFINITY;
    for (int s = 0; s < splits; s++)
        mx = fmaxf(mx, p[s * (head_dim + 2)]);
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float sl = 0.0f, sa = 0.0f;
        if (mx != -INFINITY)
            for (int s = 0; s < splits; s++) {
                const float *r = p + s * (head_dim + 2);
                float f = __expf(r[0] - mx);
                sl += r[1] * f;
                sa += r[2 + d] * f;
            }
        out[seq * out_stride + (int64_t)head * head_dim + d] = tc::from_f32<T>(sl > 0.0f ? sa / sl : 0.0f);
    }
}

// Prefill: block (tile of BQ query rows of one sequence, head); 128 threads, 4 per query row.
constexpr int BQ = 32, BK = 32, kPrefillThreads = 128;

template <typename T, int HD>
__device__ void prefill(T *out, const T *q, const T *k_cache, const T *v_cache, const int32_t *table,
                        const int32_t *seq_lens, const int32_t *q_start, int n_seqs, int n_heads, int n_kv_heads,
                        int block_size, int max_blocks, int64_t q_stride, int64_t out_stride, float scale)
{
    extern __shared__ float sh[];
    float *qs = sh, *ks = qs + BQ * (HD + 1), *vs = ks + BK * (HD + 1), *ps = vs + BK * (HD + 1);
    __shared__ int s_seq, s_tile;
    __shared__ const T *krow[BK], *vrow[BK];
    if (threadIdx.x == 0) {
        int found = -1, tile = 0, cum = 0;
        for (int s = 0; s < n_seqs; s++) {
            int tiles = (q_start[s + 1] - q_start[s] + BQ - 1) / BQ;
            if ((int)blockIdx.x < cum + tiles) {
                found = s;
                tile = blockIdx.x - cum;
                break;
            }
            cum += tiles;
        }
        s_seq = found;
        s_tile = tile;
    }
    __syncthreads();
    if (s_seq < 0)
        return;
    int seq = s_seq, head = blockIdx.y;
    int kvh = head / (n_heads / n_kv_heads);
    int64_t qbeg = q_start[seq], m = q_start[seq + 1] - qbeg, len = seq_lens[seq];
    int64_t r0 = (int64_t)s_tile * BQ; // first row of the tile within the sequence
    int rows = (int)min((int64_t)BQ, m - r0);
    int64_t first_pos = len - m + r0; // position of the tile's first query
    const int32_t *tbl = table + (int64_t)seq * max_blocks;

    for (int e = threadIdx.x; e < BQ * HD; e += kPrefillThreads) {
        int r = e / HD, d = e % HD;
        qs[r * (HD + 1) + d] = r < rows ? tc::to_f32(q[(qbeg + r0 + r) * q_stride + (int64_t)head * HD + d]) * scale : 0.0f;
    }
    int r = threadIdx.x / 4, sub = threadIdx.x % 4;
    constexpr int DJ = HD / 4;
    float o[DJ], mrow = -INFINITY, lrow = 0.0f;
#pragma unroll
    for (int j = 0; j < DJ; j++)
        o[j] = 0.0f;
    int64_t qpos = first_pos + r;
    int64_t kend = first_pos + rows; // keys [0, kend) are visible to some row of the tile
    for (int64_t k0 = 0; k0 < kend; k0 += BK) {
        __syncthreads();
        if (threadIdx.x < BK) {
            int64_t t = k0 + threadIdx.x;
            krow[threadIdx.x] = t < kend ? kv_row(k_cache, tbl, t, block_size, n_kv_heads, HD, kvh) : nullptr;
            vrow[threadIdx.x] = t < kend ? kv_row(v_cache, tbl, t, block_size, n_kv_heads, HD, kvh) : nullptr;
        }
        __syncthreads();
        for (int e = threadIdx.x; e < BK * HD; e += kPrefillThreads) {
            int c = e / HD, d = e % HD;
            ks[c * (HD + 1) + d] = krow[c] ? tc::to_f32(krow[c][d]) : 0.0f;
            vs[c * (HD + 1) + d] = vrow[c] ? tc::to_f32(vrow[c][d]) : 0.0f;
        }
        __syncthreads();
        float s[BK / 4], smax = -INFINITY;
#pragma unroll
        for (int j = 0; j < BK / 4; j++) {
            int c = sub + 4 * j;
            float d = 0.0f;
#pragma unroll 8
            for (int x = 0; x < HD; x++)
                d = fmaf(qs[r * (HD + 1) + x], ks[c * (HD + 1) + x], d);
            s[j] = (r < rows && k0 + c <= qpos) ? d : -INFINITY;
            smax = fmaxf(smax, s[j]);
        }
        smax = fmaxf(smax, __shfl_xor_sync(0xffffffffu, smax, 1));
        smax = fmaxf(smax, __shfl_xor_sync(0xffffffffu, smax, 2));
        float mn = fmaxf(mrow, smax);
        float corr = mn == -INFINITY ? 1.0f : __expf(mrow - mn);
        float psum = 0.0f;
#pragma unroll
        for (int j = 0; j < BK / 4; j++) {
            float p = s[j] == -INFINITY ? 0.0f : __expf(s[j] - mn);
            psum += p;
            ps[r * (BK + 1) + sub + 4 * j] = p;
        }
        psum += __shfl_xor_sync(0xffffffffu, psum, 1);
        psum += __shfl_xor_sync(0xffffffffu, psum, 2);
        lrow = lrow * corr + psum;
        mrow = mn;
        __syncwarp();
#pragma unroll
        for (int j = 0; j < DJ; j++)
            o[j] *= corr;
        for (int c = 0; c < BK; c++) {
            float p = ps[r * (BK + 1) + c];
#pragma unroll
            for (int j = 0; j < DJ; j++)
                o[j] = fmaf(p, vs[c * (HD + 1) + sub + 4 * j], o[j]);
        }
    }
    if (r < rows) {
        float inv = lrow > 0.0f ? 1.0f / lrow : 0.0f;
        T *orow = out + (qbeg + r0 + r) * out_stride + (int64_t)head * HD;
#pragma unroll
        for (int j = 0; j < DJ; j++)
            orow[sub + 4 * j] = tc::from_f32<T>(o[j] * inv);
    }
}

} // namespace attention_cu

/** Write row i of k and v (row_elems = n_kv_heads * head_dim) into cache slot slots[i]
 *  (skipped when negative); one block per row. */
extern "C" __global__ void tc_k_attn_store_f32(float *k_cache, float *v_cache, const float *k, const float *v,
                                           const int32_t *slots, int64_t row_elems, int64_t k_stride,
                                           int64_t v_stride)
{
    attention_cu::store(k_cache, v_cache, k, v, slots, row_elems, k_stride, v_stride);
}
/** Decode attention, head_dim 64: grid (n_seqs, n_kv_heads * ceil(group / 8), splits), 128
 *  threads; each split covers `chunk` cached tokens; with splits > 1 it writes partials
 *  [n_seqs, n_heads, splits, 64 + 2] for tc_k_attn_combine_f32. */
extern "C" __global__ void tc_k_attn_decode64_f32(float *out, float *partials, const float *q,
                                              const float *k_cache, const float *v_cache,
                                              const int32_t *block_table, const int32_t *seq_lens,
                                              int32_t n_heads, int32_t n_kv_heads, int32_t block_size,
                                              int32_t max_blocks, int64_t q_stride, int64_t out_stride,
                                              int32_t chunk, float scale)
{
    attention_cu::decode<float, 64>(out, partials, q, k_cache, v_cache, block_table, seq_lens, n_heads,
                                  n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale);
}
/** Causal prefill attention, head_dim 64: grid (n_tokens / 32 + n_seqs, n_heads), 128 threads,
 *  shared bytes 4 * (32 * 65 * 3 + 32 * 33). */
extern "C" __global__ void tc_k_attn_prefill64_f32(float *out, const float *q, const float *k_cache,
                                               const float *v_cache, const int32_t *block_table,
                                               const int32_t *seq_lens, const int32_t *q_start,
                                               int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads,
                                               int32_t block_size, int32_t max_blocks, int64_t q_stride,
                                               int64_t out_stride, float scale)
{
    attention_cu::prefill<float, 64>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs,
                                   n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale);
}
/** Decode attention, head_dim 128: grid (n_seqs, n_kv_heads * ceil(group / 8), splits), 128
 *  threads; each split covers `chunk` cached tokens; with splits > 1 it writes partials
 *  [n_seqs, n_heads, splits, 128 + 2] for tc_k_attn_combine_f32. */
extern "C" __global__ void tc_k_attn_decode128_f32(float *out, float *partials, const float *q,
                                              const float *k_cache, const float *v_cache,
                                              const int32_t *block_table, const int32_t *seq_lens,
                                              int32_t n_heads, int32_t n_kv_heads, int32_t block_size,
                                              int32_t max_blocks, int64_t q_stride, int64_t out_stride,
                                              int32_t chunk, float scale)
{
    attention_cu::decode<float, 128>(out, partials, q, k_cache, v_cache, block_table, seq_lens, n_heads,
                                  n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale);
}
/** Causal prefill attention, head_dim 128: grid (n_tokens / 32 + n_seqs, n_heads), 128 threads,
 *  shared bytes 4 * (32 * 129 * 3 + 32 * 33). */
extern "C" __global__ void tc_k_attn_prefill128_f32(float *out, const float *q, const float *k_cache,
                                               const float *v_cache, const int32_t *block_table,
                                               const int32_t *seq_lens, const int32_t *q_start,
                                               int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads,
                                               int32_t block_size, int32_t max_blocks, int64_t q_stride,
                                               int64_t out_stride, float scale)
{
    attention_cu::prefill<float, 128>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs,
                                   n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale);
}
/** Merge decode partials: one block per (sequence, head). */
extern "C" __global__ void tc_k_attn_combine_f32(float *out, const float *partials, int32_t n_heads,
                                             int32_t head_dim, int32_t splits, int64_t out_stride)
{
    attention_cu::combine(out, partials, n_heads, head_dim, splits, out_stride);
}
/** Write row i of k and v (row_elems = n_kv_heads * head_dim) into cache slot slots[i]
 *  (skipped when negative); one block per row. */
extern "C" __global__ void tc_k_attn_store_f16(__half *k_cache, __half *v_cache, const __half *k, const __half *v,
                                           const int32_t *slots, int64_t row_elems, int64_t k_stride,
                                           int64_t v_stride)
{
    attention_cu::store(k_cache, v_cache, k, v, slots, row_elems, k_stride, v_stride);
}
/** Decode attention, head_dim 64: grid (n_seqs, n_kv_heads * ceil(group / 8), splits), 128
 *  threads; each split covers `chunk` cached tokens; with splits > 1 it writes partials
 *  [n_seqs, n_heads, splits, 64 + 2] for tc_k_attn_combine_f16. */
extern "C" __global__ void tc_k_attn_decode64_f16(__half *out, float *partials, const __half *q,
                                              const __half *k_cache, const __half *v_cache,
                                              const int32_t *block_table, const int32_t *seq_lens,
                                              int32_t n_heads, int32_t n_kv_heads, int32_t block_size,
                                              int32_t max_blocks, int64_t q_stride, int64_t out_stride,
                                              int32_t chunk, float scale)
{
    attention_cu::decode<__half, 64>(out, partials, q, k_cache, v_cache, block_table, seq_lens, n_heads,
                                  n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale);
}
/** Causal prefill attention, head_dim 64: grid (n_tokens / 32 + n_seqs, n_heads), 128 threads,
 *  shared bytes 4 * (32 * 65 * 3 + 32 * 33). */
extern "C" __global__ void tc_k_attn_prefill64_f16(__half *out, const __half *q, const __half *k_cache,
                                               const __half *v_cache, const int32_t *block_table,
                                               const int32_t *seq_lens, const int32_t *q_start,
                                               int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads,
                                               int32_t block_size, int32_t max_blocks, int64_t q_stride,
                                               int64_t out_stride, float scale)
{
    attention_cu::prefill<__half, 64>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs,
                                   n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale);
}
/** Decode attention, head_dim 128: grid (n_seqs, n_kv_heads * ceil(group / 8), splits), 128
 *  threads; each split covers `chunk` cached tokens; with splits > 1 it writes partials
 *  [n_seqs, n_heads, splits, 128 + 2] for tc_k_attn_combine_f16. */
extern "C" __global__ void tc_k_attn_decode128_f16(__half *out, float *partials, const __half *q,
                                              const __half *k_cache, const __half *v_cache,
                                              const int32_t *block_table, const int32_t *seq_lens,
                                              int32_t n_heads, int32_t n_kv_heads, int32_t block_size,
                                              int32_t max_blocks, int64_t q_stride, int64_t out_stride,
                                              int32_t chunk, float scale)
{
    attention_cu::decode<__half, 128>(out, partials, q, k_cache, v_cache, block_table, seq_lens, n_heads,
                                  n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale);
}
/** Causal prefill attention, head_dim 128: grid (n_tokens / 32 + n_seqs, n_heads), 128 threads,
 *  shared bytes 4 * (32 * 129 * 3 + 32 * 33). */
extern "C" __global__ void tc_k_attn_prefill128_f16(__half *out, const __half *q, const __half *k_cache,
                                               const __half *v_cache, const int32_t *block_table,
                                               const int32_t *seq_lens, const int32_t *q_start,
                                               int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads,
                                               int32_t block_size, int32_t max_blocks, int64_t q_stride,
                                               int64_t out_stride, float scale)
{
    attention_cu::prefill<__half, 128>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs,
                                   n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale);
}
/** Merge decode partials: one block per (sequence, head). */
extern "C" __global__ void tc_k_attn_combine_f16(__half *out, const float *partials, int32_t n_heads,
                                             int32_t head_dim, int32_t splits, int64_t out_stride)
{
    attention_cu::combine(out, partials, n_heads, head_dim, splits, out_stride);
}
/** Write row i of k and v (row_elems = n_kv_heads * head_dim) into cache slot slots[i]
 *  (skipped when negative); one block per row. */
extern "C" __global__ void tc_k_attn_store_bf16(__nv_bfloat16 *k_cache, __nv_bfloat16 *v_cache, const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                                           const int32_t *slots, int64_t row_elems, int64_t k_stride,
                                           int64_t v_stride)
{
    attention_cu::store(k_cache, v_cache, k, v, slots, row_elems, k_stride, v_stride);
}
/** Decode attention, head_dim 64: grid (n_seqs, n_kv_heads * ceil(group / 8), splits), 128
 *  threads; each split covers `chunk` cached tokens; with splits > 1 it writes partials
 *  [n_seqs, n_heads, splits, 64 + 2] for tc_k_attn_combine_bf16. */
extern "C" __global__ void tc_k_attn_decode64_bf16(__nv_bfloat16 *out, float *partials, const __nv_bfloat16 *q,
                                              const __nv_bfloat16 *k_cache, const __nv_bfloat16 *v_cache,
                                              const int32_t *block_table, const int32_t *seq_lens,
                                              int32_t n_heads, int32_t n_kv_heads, int32_t block_size,
                                              int32_t max_blocks, int64_t q_stride, int64_t out_stride,
                                              int32_t chunk, float scale)
{
    attention_cu::decode<__nv_bfloat16, 64>(out, partials, q, k_cache, v_cache, block_table, seq_lens, n_heads,
                                  n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale);
}
/** Causal prefill attention, head_dim 64: grid (n_tokens / 32 + n_seqs, n_heads), 128 threads,
 *  shared bytes 4 * (32 * 65 * 3 + 32 * 33). */
extern "C" __global__ void tc_k_attn_prefill64_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *k_cache,
                                               const __nv_bfloat16 *v_cache, const int32_t *block_table,
                                               const int32_t *seq_lens, const int32_t *q_start,
                                               int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads,
                                               int32_t block_size, int32_t max_blocks, int64_t q_stride,
                                               int64_t out_stride, float scale)
{
    attention_cu::prefill<__nv_bfloat16, 64>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs,
                                   n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale);
}
/** Decode attention, head_dim 128: grid (n_seqs, n_kv_heads * ceil(group / 8), splits), 128
 *  threads; each split covers `chunk` cached tokens; with splits > 1 it writes partials
 *  [n_seqs, n_heads, splits, 128 + 2] for tc_k_attn_combine_bf16. */
extern "C" __global__ void tc_k_attn_decode128_bf16(__nv_bfloat16 *out, float *partials, const __nv_bfloat16 *q,
                                              const __nv_bfloat16 *k_cache, const __nv_bfloat16 *v_cache,
                                              const int32_t *block_table, const int32_t *seq_lens,
                                              int32_t n_heads, int32_t n_kv_heads, int32_t block_size,
                                              int32_t max_blocks, int64_t q_stride, int64_t out_stride,
                                              int32_t chunk, float scale)
{
    attention_cu::decode<__nv_bfloat16, 128>(out, partials, q, k_cache, v_cache, block_table, seq_lens, n_heads,
                                  n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale);
}
/** Causal prefill attention, head_dim 128: grid (n_tokens / 32 + n_seqs, n_heads), 128 threads,
 *  shared bytes 4 * (32 * 129 * 3 + 32 * 33). */
extern "C" __global__ void tc_k_attn_prefill128_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *k_cache,
                                               const __nv_bfloat16 *v_cache, const int32_t *block_table,
                                               const int32_t *seq_lens, const int32_t *q_start,
                                               int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads,
                                               int32_t block_size, int32_t max_blocks, int64_t q_stride,
                                               int64_t out_stride, float scale)
{
    attention_cu::prefill<__nv_bfloat16, 128>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs,
                                   n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale);
}
/** Merge decode partials: one block per (sequence, head). */
extern "C" __global__ void tc_k_attn_combine_bf16(__nv_bfloat16 *out, const float *partials, int32_t n_heads,
                                             int32_t head_dim, int32_t splits, int64_t out_stride)
{
    attention_cu::combine(out, partials, n_heads, head_dim, splits, out_stride);
}
