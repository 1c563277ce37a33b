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

// Decode: block (seq, kv head x head chunk, split) of 4 warps. The split's keys and values
// go through shared memory in tiles of kTile tokens (cp.async, double-buffered), loaded by all
// threads; each warp then owns heads of the group (warp w: heads w and w + 4). Scores: lane j
// takes token j of the tile, a whole dot product against q from shared memory (no shuffle
// reductions per key, which made the previous kernel compute-bound); then one online-softmax
// update per tile, and values accumulate with each lane owning HD/32 dimensions.
constexpr int kMaxGroup = 8, kWarps = 4, kHeadsPerWarp = kMaxGroup / kWarps;

template <typename T> __host__ __device__ constexpr int tile_tokens() { return sizeof(T) == 4 ? 16 : 32; }
// Padded row of a tile, in elements: 16 extra bytes make the rows of a quarter-warp's 16-byte
// reads fall in distinct banks.
template <typename T, int HD> __host__ __device__ constexpr int tile_ld() { return HD + 16 / (int)sizeof(T); }

template <typename T, int HD>
__device__ void decode(T *out, float *part, const T *q, const T *k_cache, const T *v_cache, const int32_t *table,
                       const int32_t *seq_lens, int n_heads, int n_kv_heads, int block_size, int max_blocks,
                       int64_t q_stride, int64_t out_stride, int chunk, float scale)
{
    constexpr int TT = tile_tokens<T>(), LD = tile_ld<T, HD>(), VE = 16 / (int)sizeof(T), D = HD / 32;
    constexpr int CR = HD / VE; // 16-byte chunks per row
    __shared__ __align__(16) T tiles[2][2][TT * LD]; // [buffer][K, V][token, dim]
    __shared__ __align__(16) float qs[kMaxGroup][HD];
    int seq = blockIdx.x, split = blockIdx.z, splits = gridDim.z;
    int group = n_heads / n_kv_heads, chunks = (group + kMaxGroup - 1) / kMaxGroup;
    int kvh = blockIdx.y / chunks, h0 = kvh * group + (blockIdx.y % chunks) * kMaxGroup;
    int g = min(kMaxGroup, kvh * group + group - h0);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t *tbl = table + (int64_t)seq * max_blocks;
    int64_t len = seq_lens[seq];
    int64_t t0 = (int64_t)split * chunk, t1 = min(len, t0 + chunk);
    int n_tiles = t1 > t0 ? (int)((t1 - t0 + TT - 1) / TT) : 0;

    for (int e = threadIdx.x; e < g * HD; e += blockDim.x)
        qs[e / HD][e % HD] = tc::to_f32(q[seq * q_stride + (int64_t)(h0 + e / HD) * HD + e % HD]) * scale;
    auto load_tile = [&](int buf, int64_t ts) {
        for (int c = threadIdx.x; c < 2 * TT * CR; c += blockDim.x) {
            int which = c / (TT * CR), r = (c / CR) % TT, col = c % CR;
            int64_t t = ts + r;
            bool ok = t < t1;
            const T *src = which == 0 ? k_cache : v_cache;
            if (ok)
                src = kv_row(src, tbl, t, block_size, n_kv_heads, HD, kvh) + col * VE;
            tc::cp_async16(&tiles[buf][which][r * LD + col * VE], src, ok);
        }
    };
    float m[kHeadsPerWarp], l[kHeadsPerWarp], acc[kHeadsPerWarp][D];
#pragma unroll
    for (int i = 0; i < kHeadsPerWarp; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int d = 0; d < D; d++)
            acc[i][d] = 0.0f;
    }
    if (n_tiles > 0)
        load_tile(0, t0);
    tc::cp_commit();
    for (int it = 0; it < n_tiles; it++) {
        int buf = it & 1;
        int64_t ts = t0 + (int64_t)it * TT;
        if (it + 1 < n_tiles)
            load_tile(buf ^ 1, ts + TT);
        tc::cp_commit();
        tc::cp_wait<1>();
        __syncthreads();
        int nv = (int)min((int64_t)TT, t1 - ts);
        const T *kt = tiles[buf][0], *vt = tiles[buf][1];
#pragma unroll
        for (int i = 0; i < kHeadsPerWarp; i++) {
            int h = warp + i * kWarps;
            if (h >= g)
                break;
            float s = -INFINITY;
            if (lane < nv) {
                // Four partial sums: a single chain of HD dependent FMAs would be latency-bound.
                float d4[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
#pragma unroll
                for (int c = 0; c < CR; c++) {
                    tc::Vec<T, VE> kv = *reinterpret_cast<const tc::Vec<T, VE> *>(kt + lane * LD + c * VE);
#pragma unroll
                    for (int e = 0; e < VE; e += 4) {
                        float4 qv = *reinterpret_cast<const float4 *>(&qs[h][c * VE + e]);
                        d4[0] = fmaf(qv.x, tc::to_f32(kv.v[e]), d4[0]);
                        d4[1] = fmaf(qv.y, tc::to_f32(kv.v[e + 1]), d4[1]);
                        d4[2] = fmaf(qv.z, tc::to_f32(kv.v[e + 2]), d4[2]);
                        d4[3] = fmaf(qv.w, tc::to_f32(kv.v[e + 3]), d4[3]);
                    }
                }
                s = (d4[0] + d4[1]) + (d4[2] + d4[3]);
            }
            float mn = fmaxf(m[i], tc::warp_max(s));
            float corr = __expf(m[i] - mn);
            float p = lane < nv ? __expf(s - mn) : 0.0f;
            l[i] = l[i] * corr + tc::warp_sum(p);
#pragma unroll
            for (int d = 0; d < D; d++)
                acc[i][d] *= corr;
            // Unrolled so that several value loads and shuffles are in flight; rows past nv were
            // zero-filled and their p is 0, so whole groups of 8 are safe.
            for (int t0v = 0; t0v < nv; t0v += 8) {
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    float pt = __shfl_sync(0xffffffffu, p, t0v + u);
                    tc::Vec<T, D> vv = *reinterpret_cast<const tc::Vec<T, D> *>(vt + (t0v + u) * LD + lane * D);
#pragma unroll
                    for (int d = 0; d < D; d++)
                        acc[i][d] = fmaf(pt, tc::to_f32(vv.v[d]), acc[i][d]);
                }
            }
            m[i] = mn;
        }
        __syncthreads(); // the buffer is refilled by the next iteration's load
    }
#pragma unroll
    for (int i = 0; i < kHeadsPerWarp; i++) {
        int h = warp + i * kWarps;
        if (h >= g)
            break;
        int head = h0 + h;
        if (splits == 1) {
#pragma unroll
            for (int d = 0; d < D; d++)
                out[seq * out_stride + (int64_t)head * HD + lane * D + d] =
                    tc::from_f32<T>(l[i] > 0.0f ? acc[i][d] / l[i] : 0.0f);
        } else {
            // Partials: [seq, head, split] records of (m, l, acc[HD]).
            float *pr = part + (((int64_t)seq * n_heads + head) * splits + split) * (HD + 2);
            if (lane == 0) {
                pr[0] = m[i];
                pr[1] = l[i];
            }
#pragma unroll
            for (int d = 0; d < D; d++)
                pr[2 + lane * D + d] = acc[i][d];
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
    tc::await_inputs();
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
    tc::await_inputs();
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
    tc::await_inputs();
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
    tc::await_inputs();
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
    tc::await_inputs();
    attention_cu::prefill<float, 128>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs,
                                   n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale);
}
/** Merge decode partials: one block per (sequence, head). */
extern "C" __global__ void tc_k_attn_combine_f32(float *out, const float *partials, int32_t n_heads,
                                             int32_t head_dim, int32_t splits, int64_t out_stride)
{
    tc::await_inputs();
    attention_cu::combine(out, partials, n_heads, head_dim, splits, out_stride);
}
/** Write row i of k and v (row_elems = n_kv_heads * head_dim) into cache slot slots[i]
 *  (skipped when negative); one block per row. */
extern "C" __global__ void tc_k_attn_store_f16(__half *k_cache, __half *v_cache, const __half *k, const __half *v,
                                           const int32_t *slots, int64_t row_elems, int64_t k_stride,
                                           int64_t v_stride)
{
    tc::await_inputs();
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
    tc::await_inputs();
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
    tc::await_inputs();
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
    tc::await_inputs();
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
    tc::await_inputs();
    attention_cu::prefill<__half, 128>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs,
                                   n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale);
}
/** Merge decode partials: one block per (sequence, head). */
extern "C" __global__ void tc_k_attn_combine_f16(__half *out, const float *partials, int32_t n_heads,
                                             int32_t head_dim, int32_t splits, int64_t out_stride)
{
    tc::await_inputs();
    attention_cu::combine(out, partials, n_heads, head_dim, splits, out_stride);
}
/** Write row i of k and v (row_elems = n_kv_heads * head_dim) into cache slot slots[i]
 *  (skipped when negative); one block per row. */
extern "C" __global__ void tc_k_attn_store_bf16(__nv_bfloat16 *k_cache, __nv_bfloat16 *v_cache, const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                                           const int32_t *slots, int64_t row_elems, int64_t k_stride,
                                           int64_t v_stride)
{
    tc::await_inputs();
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
    tc::await_inputs();
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
    tc::await_inputs();
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
    tc::await_inputs();
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
    tc::await_inputs();
    attention_cu::prefill<__nv_bfloat16, 128>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs,
                                   n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale);
}
/** Merge decode partials: one block per (sequence, head). */
extern "C" __global__ void tc_k_attn_combine_bf16(__nv_bfloat16 *out, const float *partials, int32_t n_heads,
                                             int32_t head_dim, int32_t splits, int64_t out_stride)
{
    tc::await_inputs();
    attention_cu::combine(out, partials, n_heads, head_dim, splits, out_stride);
}
