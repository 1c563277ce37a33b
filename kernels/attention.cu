// Attention over a paged KV cache (layout in src/ops/ops.h): writing new keys and values into
// their slots, decode (one query per sequence, split over the cached length as in
// flash-decoding; the last split to finish merges) and causal prefill (flash-attention style
// online softmax over key tiles held in shared memory; Dao et al. 2022). f32 arithmetic
// throughout. A cache holds the activations' type, or FP8 E4M3 (half the bytes of a 16-bit
// cache): its tiles are copied to shared memory as bytes; decode builds f16 tensor-core
// fragments from them, prefill widens them there to the activations' type, exactly. head_dim
// 64 and 128 have kernels of their own; every other even size up to 256 runs on generic
// kernels that read it at run time (one instantiation each, to keep the binary small), and
// f32 activations (a check of the others, not a fast path) on one simple kernel for decode
// and prefill. Sliding windows: tokens before a query's window are never read (their blocks
// may be freed).
#include <limits.h>

#include <type_traits>

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

// Block (row, y) copies its share of k's and v's row to the row's slot (converted to C), as
// 16-byte vectors of T where every row is aligned to them. An FP8 cache with scales (per kv
// head of head_dim elements) takes each value divided by its head's scale.
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
            kd[i] = tc::from_f32<C>(k_scale ? a / k_scale[h] : a);
            vd[i] = tc::from_f32<C>(v_scale ? b / v_scale[h] : b);
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

// Decode: block (seq, kv head x head chunk, split) of 4 warps, each a flash-decoding worker of
// its own. Warp w streams tiles w, w + 4, ... (16 tokens each) of the split's keys and values
// through a private ring of shared-memory stages (cp.async; only warp barriers in the loop) and
// scores each tile against every query head of the block, so keys and values are read once per
// group of heads. 16-bit caches go through the tensor cores: the heads are the rows of one
// m16n8k16 product with the tile's keys, and the probabilities (rounded to T, as flash
// attention does) the rows of one with its values. An FP8 cache's tiles go through f16 products
// whose fragments are built from the bytes straight from shared memory (queries widened to f16
// once). The warps merge at the end. With several splits each writes its
// result to partials, and the last split of a (sequence, head group) to arrive merges them (an
// arrival counter per group, reset by that block), so no second kernel is launched. Splits past
// the sequence's length return at once.
constexpr int kMaxGroup = 8, kWarps = 4, kTile = 16;

// Padded row of keys or values in shared memory (decode and prefill), in elements: 16 extra
// bytes put the rows read by a quarter-warp (and the eight row addresses of an ldmatrix) in
// distinct banks.
template <typename T, int HD> __host__ __device__ constexpr int kv_ld() { return HD + 16 / (int)sizeof(T); }
template <typename T, int HD> __host__ __device__ constexpr int decode_stage_elems()
{
    return 2 * kTile * kv_ld<T, HD>();
}

// One warp queues the cp.async copies of kTile cache rows of kv head kvh from token ts (a
// multiple of kTile): keys to rows of ks, values to rows of vs (kv_ld apart); tokens before
// start (a sliding window's first: earlier blocks may be freed, never read) or at or past t1
// are zero-filled. With lo > 0 only the tokens in [lo, hi) are copied and nothing is
// zero-filled (the rest of a tile whose first part was copied earlier, up to hi).
template <typename T, int HD>
__device__ __forceinline__ void load_kv_rows(T *ks, T *vs, const T *k_cache, const T *v_cache, const int32_t *tbl,
                                             int ts, int t1, int start, int block_size, int n_kv_heads,
                                             int kvh, int lane, int lo = 0, int hi = INT_MAX)
{
    constexpr int LD = kv_ld<T, HD>(), VE = 16 / (int)sizeof(T), CR = HD / VE, RP = 32 / CR;
    int col = lane % CR;
    // A tile lies in one cache block when the block size is a multiple of the tile: one table
    // read for the tile instead of one per row.
    bool one_block = (block_size % kTile) == 0;
    int64_t base = 0;
    if (one_block && ts < t1 && ts + kTile > max(lo, start) && ts < hi) { // an entry only where rows are copied
        uint32_t bi = (uint32_t)ts / (uint32_t)block_size;
        base = (int64_t)tbl[bi] * block_size + ((uint32_t)ts - bi * (uint32_t)block_size);
    }
#pragma unroll
    for (int i = 0; i < kTile / RP; i++) {
        int r = lane / CR + i * RP;
        int t = ts + r;
        bool real = t >= start && t < t1, ok = real && t >= lo && t < hi;
        if (!ok && (real || lo > 0))
            continue; // copied in the other part
        int64_t off = 0;
        if (ok) {
            if (one_block)
                off = ((base + r) * n_kv_heads + kvh) * (int64_t)HD;
            else
                off = kv_row(k_cache, tbl, t, block_size, n_kv_heads, HD, kvh) - k_cache;
        }
        tc::cp_async16(ks + r * LD + col * VE, k_cache + off + col * VE, ok);
        tc::cp_async16(vs + r * LD + col * VE, v_cache + off + col * VE, ok);
    }
}

// What a block works on. (The warps leave their results in ms, ls [kWarps][kMaxGroup], the
// running max and sum of each head, and as [kWarps][kMaxGroup][HD], the unnormalised output,
// laid over the rings once every warp is done.)
struct DecodeWork {
    int seq, h0, g, kvh, used, n_tiles, mine, t0, t1, start; // start: the window's first token
};

// The warp's ring and the copy of its j-th tile (tile warp + 4 j of the split).
template <typename T, int HD> struct DecodeRing {
    T *ring;
    const T *k_cache, *v_cache;
    const int32_t *tbl;
    int block_size, n_kv_heads, stages; // stages: 1 to 3, as many as shared memory holds
    bool late; // the first tiles' newest rows were queued after the others (see decode)
    // A stage holds a tile's keys, then its values.
    __device__ __forceinline__ T *stage(int j) const { return ring + (j % stages) * decode_stage_elems<T, HD>(); }
    // Queue tile j's tokens in [lo, hi) (all of them by default), as one cp.async group.
    __device__ __forceinline__ void load(const DecodeWork &w, int warp, int lane, int j, int lo = 0,
                                         int hi = INT_MAX) const
    {
        if (j < w.mine)
            load_kv_rows<T, HD>(stage(j), stage(j) + kTile * kv_ld<T, HD>(), k_cache, v_cache, tbl,
                                w.t0 + (warp + j * kWarps) * kTile, w.t1, w.start, block_size, n_kv_heads,
                                w.kvh, lane, lo, hi);
        tc::cp_commit();
    }
    // Ask L2 (not shared memory) for tile j's rows: lane l < 16 for row l's keys, lane l >= 16
    // for row l - 16's values (sm_90's bulk prefetch; nothing on earlier GPUs).
    __device__ __forceinline__ void prefetch(const DecodeWork &w, int warp, int lane, int j) const
    {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        int t = w.t0 + (warp + j * kWarps) * kTile + (lane & 15);
        if (j < w.mine && t < w.t1 && t >= w.start) {
            const T *row = kv_row(lane < 16 ? k_cache : v_cache, tbl, t, block_size, n_kv_heads, HD, w.kvh);
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(row), "r"(HD * (int)sizeof(T))
                         : "memory");
        }
#endif
    }
    // Queue the warp's tile j + stages - 1 and wait for tile j; returns the stage holding it.
    // (With late rows, their group came after the first tiles': wait for everything then.)
    __device__ __forceinline__ const T *next(const DecodeWork &w, int warp, int lane, int j) const
    {
        __syncwarp(); // every lane is done with the stage that this load refills
        load(w, warp, lane, j + stages - 1);
        if (late && j < stages - 1)
            tc::cp_wait<0>();
        else
            tc::cp_wait_upto(stages - 1);
        __syncwarp();
        return stage(j);
    }
};

// Widen rows x HD FP8 values (rows kv_ld<f8e4m3, HD> bytes apart) to T (rows kv_ld<T, HD>
// apart), eight values a step, thread `t` of `n`.
template <typename T, int HD>
__device__ __forceinline__ void widen(T *dst, const tc::f8e4m3 *src, int rows, int t, int n)
{
    constexpr int LS = kv_ld<tc::f8e4m3, HD>(), LD = kv_ld<T, HD>(), P = HD / 8;
    for (int e = t; e < rows * P; e += n) {
        int r = e / P, c = e % P;
        uint2 x = *reinterpret_cast<const uint2 *>(src + r * LS + 8 * c);
        uint4 y;
        tc::f8x4_to<T>(x.x, y.x, y.y);
        tc::f8x4_to<T>(x.y, y.z, y.w);
        *reinterpret_cast<uint4 *>(dst + r * LD + 8 * c) = y;
    }
}

// ---- The generic kernels: any even head_dim up to kMaxHD, read at run time. Their rows in
// shared memory and their products are head_dim rounded up to 16 (hp) wide; the columns from
// head_dim to hp are zeroed once and never written by the copies.
constexpr int kMaxHD = 256;

// Copy G bytes (16, 8 or 4) global -> shared asynchronously (cp.async.ca), or fill them with
// zeros (nothing read) when !pred; 2 bytes synchronously (cp.async copies 4 or more).
__device__ __forceinline__ void copy_piece(void *smem, const void *gmem, bool pred, int G)
{
    unsigned d = (unsigned)__cvta_generic_to_shared(smem);
    int n = pred ? G : 0;
    if (G == 16)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(gmem), "r"(n));
    else if (G == 8)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(d), "l"(gmem), "r"(n));
    else if (G == 4)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(gmem), "r"(n));
    else
        *static_cast<uint16_t *>(smem) = pred ? *static_cast<const uint16_t *>(gmem) : (uint16_t)0;
}

// load_kv_rows for a run-time head_dim hd: one warp copies `rows` cache rows of kv head kvh from
// token ts (keys to ks, values to vs, rows ld elements apart), in pieces of G bytes (the
// largest of 16, 8, 4, 2 that divides a row's bytes, so every piece is aligned). Rows as
// load_kv_rows: [start, t1) are real, the rest zero-filled; with lo > 0 only [lo, hi). (Not
// inlined: the generic kernels call it from several places.)
template <typename C>
__device__ __noinline__ void load_rows_any(C *ks, C *vs, const C *k_cache, const C *v_cache, const int32_t *tbl,
                                           int ts, int rows, int t1, int start, int block_size, int n_kv_heads,
                                           int kvh, int hd, int ld, int lane, int lo, int hi)
{
    const int bytes = hd * (int)sizeof(C);
    const int G = bytes % 16 == 0 ? 16 : bytes % 8 == 0 ? 8 : bytes % 4 == 0 ? 4 : 2, per_row = bytes / G;
    for (int e = lane; e < rows * per_row; e += 32) {
        int r = e / per_row, c = e - r * per_row, t = ts + r;
        bool real = t >= start && t < t1, ok = real && t >= lo && t < hi;
        if (!ok && (real || lo > 0))
            continue; // copied in the other part
        const char *kr = reinterpret_cast<const char *>(k_cache), *vr = reinterpret_cast<const char *>(v_cache);
        if (ok) {
            int64_t off = (kv_row(k_cache, tbl, t, block_size, n_kv_heads, hd, kvh) - k_cache) * (int64_t)sizeof(C);
            kr += off;
            vr += off;
        }
        copy_piece(reinterpret_cast<char *>(ks + r * ld) + c * G, kr + c * G, ok, G);
        copy_piece(reinterpret_cast<char *>(vs + r * ld) + c * G, vr + c * G, ok, G);
    }
}

// Zero columns [hd, hp) of `rows` rows ld elements apart (thread t of n).
template <typename C>
__device__ __forceinline__ void zero_pad(C *rows_at, int rows, int hd, int hp, int ld, int t, int n)
{
    int w = (hp - hd) * (int)sizeof(C);
    for (int e = t; e < rows * w; e += n) {
        int r = e / w;
        reinterpret_cast<char *>(rows_at + r * ld + hd)[e - r * w] = 0;
    }
}

// widen for a run-time width: rows x hp FP8 values (rows lds bytes apart) to T (rows ldd apart).
template <typename T>
__device__ __forceinline__ void widen_any(T *dst, const tc::f8e4m3 *src, int rows, int hp, int ldd, int lds, int t,
                                          int n)
{
    int P = hp / 8;
    for (int e = t; e < rows * P; e += n) {
        int r = e / P, c = e - r * P;
        uint2 x = *reinterpret_cast<const uint2 *>(src + r * lds + 8 * c);
        uint4 y;
        tc::f8x4_to<T>(x.x, y.x, y.y);
        tc::f8x4_to<T>(x.y, y.z, y.w);
        *reinterpret_cast<uint4 *>(dst + r * ldd + 8 * c) = y;
    }
}

// 16-bit caches: tensor-core scores and value products. Rows of the products are the heads
// (g of 16 used); lane l holds row l / 4.
template <typename T, int HD>
__device__ void decode_warp_mma(const DecodeWork &w, const DecodeRing<T, HD> &ring, const T *q, int64_t q_stride,
                                float scale, float *ms, float *ls, float *as)
{
    constexpr int LD = kv_ld<T, HD>(), KS = HD / 16, NT = HD / 8;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gr = lane >> 2, pos = lane & 3;
    // The block's queries as A fragments (rows g..15 zero), read once.
    uint32_t qa[KS][2];
    const T *qrow = q + w.seq * q_stride + (int64_t)(w.h0 + gr) * HD + 2 * pos;
#pragma unroll
    for (int kk = 0; kk < KS; kk++) {
        qa[kk][0] = gr < w.g ? *reinterpret_cast<const uint32_t *>(qrow + 16 * kk) : 0u;
        qa[kk][1] = gr < w.g ? *reinterpret_cast<const uint32_t *>(qrow + 16 * kk + 8) : 0u;
    }
    float o[NT][4], mrow = -INFINITY, lrow = 0.0f;
#pragma unroll
    for (int n = 0; n < NT; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    for (int j = 0; j < w.mine; j++) {
        const T *kt = ring.next(w, warp, lane, j), *vt = kt + kTile * LD;
        int ts = w.t0 + (warp + j * kWarps) * kTile;
        // Two accumulators per score fragment (even and odd k steps), summed at the end: half
        // the chain of dependent products.
        float s[2][4], s2[2][4];
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
            s2[nt][0] = s2[nt][1] = s2[nt][2] = s2[nt][3] = 0.0f;
#pragma unroll
            for (int kp = 0; kp < KS / 2; kp++) {
                uint32_t kb[4];
                tc::ldmatrix_x4(kb, kt + (8 * nt + (lane & 7)) * LD + 32 * kp + 8 * (lane >> 3));
                tc::mma16816<T>(s[nt], qa[2 * kp][0], 0u, qa[2 * kp][1], 0u, kb[0], kb[1]);
                tc::mma16816<T>(s2[nt], qa[2 * kp + 1][0], 0u, qa[2 * kp + 1][1], 0u, kb[2], kb[3]);
            }
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[nt][e] += s2[nt][e];
        }
        // Lane holds tokens 2 pos, +1 (s[0]) and 8 + 2 pos, +1 (s[1]) of row gr; the row's
        // other tokens are in the three lanes beside it.
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int t = ts + 8 * nt + 2 * pos + e;
                bool ok = t < w.t1 && t >= w.start;
                s[nt][e] = ok ? s[nt][e] * scale : -INFINITY;
                mx = fmaxf(mx, s[nt][e]);
            }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        float mn = fmaxf(mrow, mx), corr = __expf(mrow - mn);
        float ps = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                s[nt][e] = __expf(s[nt][e] - mn);
                ps += s[nt][e];
            }
        lrow = lrow * corr + ps; // this lane's share; the row's lanes are summed at the end
        mrow = mn;
#pragma unroll
        for (int n = 0; n < NT; n++) {
            o[n][0] *= corr;
            o[n][1] *= corr;
        }
        uint32_t pa0 = tc::pack2<T>(s[0][0], s[0][1]), pa2 = tc::pack2<T>(s[1][0], s[1][1]);
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t vb[4];
            tc::ldmatrix_x4<true>(vb, vt + ((lane & 7) + 8 * ((lane >> 3) & 1)) * LD + 8 * (2 * np + (lane >> 4)));
            tc::mma16816<T>(o[2 * np], pa0, 0u, pa2, 0u, vb[0], vb[1]);
            tc::mma16816<T>(o[2 * np + 1], pa0, 0u, pa2, 0u, vb[2], vb[3]);
        }
    }
    lrow += __shfl_xor_sync(0xffffffffu, lrow, 1);
    lrow += __shfl_xor_sync(0xffffffffu, lrow, 2);
    tc::cp_wait<0>();
    __syncthreads(); // the rings are free
    if (gr < w.g) {
        if (pos == 0) {
            ms[warp * kMaxGroup + gr] = mrow;
            ls[warp * kMaxGroup + gr] = lrow;
        }
        float *a = as + (warp * kMaxGroup + gr) * HD + 2 * pos;
#pragma unroll
        for (int n = 0; n < NT; n++) {
            a[8 * n] = o[n][0];
            a[8 * n + 1] = o[n][1];
        }
    }
}

// Two E4M3 values (the low 16 bits of x, the first lowest) as an f16 pair: one instruction from
// sm_89 on, the exact bit rearrangement of f8x4_to before.
__device__ __forceinline__ uint32_t f8x2_to_h2(uint32_t x)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    uint32_t r;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(r) : "h"((unsigned short)x));
    return r;
#else
    uint32_t lo, hi;
    tc::f8x4_to<__half>(x & 0xffffu, lo, hi);
    return lo;
#endif
}

// FP8 caches: the same online softmax as decode_warp_mma, on f16 products (the queries, of f16
// or bf16, are exact in f16 within its range; they are clamped to it), with fragments built
// from the tile's bytes without ldmatrix. The dot product's order does not matter, so each lane
// takes a contiguous run of dimensions: in k step kk, lane (g, p) gives key row g's bytes
// HD/4 p + 4 kk .. + 3 as its slots 2p, 2p + 1, 2p + 8, 2p + 9, and the query fragments are
// read with the same permutation. For the values, column g of output tile n stands for
// dimension NT g + n, so lane (g, p) reads one run of NT bytes from each of its four tokens
// (2p, 2p + 1, 2p + 8, 2p + 9) and the output dimensions are unscrambled when stored.
template <typename T, int HD>
__device__ void decode_warp_f8(const DecodeWork &w, const DecodeRing<tc::f8e4m3, HD> &ring, const T *q,
                               int64_t q_stride, float scale, float *ms, float *ls, float *as)
{
    constexpr int LD = kv_ld<tc::f8e4m3, HD>(), KS = HD / 16, NT = HD / 8, KW = HD / 16, VW = NT / 4;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gr = lane >> 2, pos = lane & 3;
    uint32_t qa[KS][2];
    const T *qrow = q + w.seq * q_stride + (int64_t)(w.h0 + gr) * HD + (HD / 4) * pos;
#pragma unroll
    for (int kk = 0; kk < KS; kk++) {
        float x[4];
#pragma unroll
        for (int e = 0; e < 4; e++)
            x[e] = gr < w.g ? fminf(fmaxf(tc::to_f32(qrow[4 * kk + e]), -65504.0f), 65504.0f) : 0.0f;
        qa[kk][0] = tc::pack2<__half>(x[0], x[1]);
        qa[kk][1] = tc::pack2<__half>(x[2], x[3]);
    }
    float o[NT][4], mrow = -INFINITY, lrow = 0.0f;
#pragma unroll
    for (int n = 0; n < NT; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    for (int j = 0; j < w.mine; j++) {
        const uint8_t *kt = reinterpret_cast<const uint8_t *>(ring.next(w, warp, lane, j)), *vt = kt + kTile * LD;
        int ts = w.t0 + (warp + j * kWarps) * kTile;
        float s[2][4], s2[2][4];
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            uint32_t kw[KW];
#pragma unroll
            for (int c = 0; c < KW / 4; c++) {
                uint4 v = *reinterpret_cast<const uint4 *>(kt + (8 * nt + gr) * LD + (HD / 4) * pos + 16 * c);
                kw[4 * c] = v.x, kw[4 * c + 1] = v.y, kw[4 * c + 2] = v.z, kw[4 * c + 3] = v.w;
            }
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
            s2[nt][0] = s2[nt][1] = s2[nt][2] = s2[nt][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KS; kk += 2) {
                tc::mma16816<__half>(s[nt], qa[kk][0], 0u, qa[kk][1], 0u, f8x2_to_h2(kw[kk]),
                                     f8x2_to_h2(kw[kk] >> 16));
                tc::mma16816<__half>(s2[nt], qa[kk + 1][0], 0u, qa[kk + 1][1], 0u, f8x2_to_h2(kw[kk + 1]),
                                     f8x2_to_h2(kw[kk + 1] >> 16));
            }
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[nt][e] += s2[nt][e];
        }
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int t = ts + 8 * nt + 2 * pos + e;
                bool ok = t < w.t1 && t >= w.start;
                s[nt][e] = ok ? s[nt][e] * scale : -INFINITY;
                mx = fmaxf(mx, s[nt][e]);
            }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        float mn = fmaxf(mrow, mx), corr = __expf(mrow - mn);
        float ps = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                s[nt][e] = __expf(s[nt][e] - mn);
                ps += s[nt][e];
            }
        lrow = lrow * corr + ps;
        mrow = mn;
#pragma unroll
        for (int n = 0; n < NT; n++) {
            o[n][0] *= corr;
            o[n][1] *= corr;
        }
        uint32_t pa0 = tc::pack2<__half>(s[0][0], s[0][1]), pa2 = tc::pack2<__half>(s[1][0], s[1][1]);
        // Rows 2p, 2p + 1, 2p + 8, 2p + 9 of the values, bytes NT g .. NT g + NT - 1 of each.
        uint32_t vw[4][VW];
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const uint8_t *row = vt + (2 * pos + (r & 1) + 8 * (r >> 1)) * LD + NT * gr;
            if constexpr (VW == 4) {
                uint4 v = *reinterpret_cast<const uint4 *>(row);
                vw[r][0] = v.x, vw[r][1] = v.y, vw[r][2] = v.z, vw[r][3] = v.w;
            } else {
                uint2 v = *reinterpret_cast<const uint2 *>(row);
                vw[r][0] = v.x, vw[r][1] = v.y;
            }
        }
#pragma unroll
        for (int n = 0; n < NT; n += 2) {
            // Bytes b, b + 1 of tokens (2p, 2p + 1), interleaved: pairs for tiles n and n + 1.
            constexpr int kSel[2] = { 0x5140, 0x7362 };
            int wi = n / 4, sel = kSel[(n / 2) & 1];
            uint32_t lo = __byte_perm(vw[0][wi], vw[1][wi], sel), hi = __byte_perm(vw[2][wi], vw[3][wi], sel);
            tc::mma16816<__half>(o[n], pa0, 0u, pa2, 0u, f8x2_to_h2(lo), f8x2_to_h2(hi));
            tc::mma16816<__half>(o[n + 1], pa0, 0u, pa2, 0u, f8x2_to_h2(lo >> 16), f8x2_to_h2(hi >> 16));
        }
    }
    lrow += __shfl_xor_sync(0xffffffffu, lrow, 1);
    lrow += __shfl_xor_sync(0xffffffffu, lrow, 2);
    tc::cp_wait<0>();
    __syncthreads(); // the rings are free
    if (gr < w.g) {
        if (pos == 0) {
            ms[warp * kMaxGroup + gr] = mrow;
            ls[warp * kMaxGroup + gr] = lrow;
        }
        float *a = as + (warp * kMaxGroup + gr) * HD;
#pragma unroll
        for (int n = 0; n < NT; n++) {
            a[NT * (2 * pos) + n] = o[n][0];
            a[NT * (2 * pos + 1) + n] = o[n][1];
        }
    }
}

// DecodeRing of the generic kernels: stages of kTile keys then kTile values in rows ld
// elements apart (hp + 16 bytes, in C).
template <typename C> struct AnyRing {
    C *ring;
    const C *k_cache, *v_cache;
    const int32_t *tbl;
    int block_size, n_kv_heads, stages;
    bool late;
    int hd, ld;
    __device__ __forceinline__ C *stage(int j) const { return ring + (j % stages) * 2 * kTile * ld; }
    __device__ __forceinline__ void load(const DecodeWork &w, int warp, int lane, int j, int lo = 0,
                                         int hi = INT_MAX) const
    {
        if (j < w.mine)
            load_rows_any<C>(stage(j), stage(j) + kTile * ld, k_cache, v_cache, tbl,
                             w.t0 + (warp + j * kWarps) * kTile, kTile, w.t1, w.start, block_size, n_kv_heads,
                             w.kvh, hd, ld, lane, lo, hi);
        tc::cp_commit();
    }
    __device__ __forceinline__ void prefetch(const DecodeWork &w, int warp, int lane, int j) const
    {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        int t = w.t0 + (warp + j * kWarps) * kTile + (lane & 15);
        if (j < w.mine && t < w.t1 && t >= w.start) {
            const C *row = kv_row(lane < 16 ? k_cache : v_cache, tbl, t, block_size, n_kv_heads, hd, w.kvh);
            // (the bulk prefetch takes multiples of 16 bytes: a row's whole 16-byte pieces)
            int bytes = hd * (int)sizeof(C) / 16 * 16;
            if (bytes > 0 && tc::aligned(row, row, row, 16))
                asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(row), "r"(bytes) : "memory");
        }
#endif
    }
    __device__ __forceinline__ const C *next(const DecodeWork &w, int warp, int lane, int j) const
    {
        __syncwarp();
        load(w, warp, lane, j + stages - 1);
        if (late && j < stages - 1)
            tc::cp_wait<0>();
        else
            tc::cp_wait_upto(stages - 1);
        __syncwarp();
        return stage(j);
    }
};

// The generic decode warp, for 16-bit and FP8 caches: decode_warp_mma's scores and online
// softmax over k steps of 16 dimensions up to hp; an FP8 tile is first widened to T in the
// warp's own rows `wide` (its keys, then its values). The value product is transposed,
// out^T = V^T P^T: the output dimensions are the rows of the m16n8k16 products and the heads
// (8 at most) their columns, so that no accumulator holds the unused rows 8..15 of the head
// dimension (half the registers of decode_warp_mma's at 256, and half the products).
template <typename T, typename C>
__device__ void decode_any_warp(const DecodeWork &w, const AnyRing<C> &ring, T *wide, const T *q, int64_t q_stride,
                                float scale, int hd, int hp, float *ms, float *ls, float *as)
{
    constexpr int KM = kMaxHD / 16;
    const int LD = hp + 8, KS = hp / 16;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gr = lane >> 2, pos = lane & 3;
    uint32_t qa[KM][2];
    const T *qrow = q + w.seq * q_stride + (int64_t)(w.h0 + gr) * hd + 2 * pos;
#pragma unroll
    for (int kk = 0; kk < KM; kk++) {
        qa[kk][0] = gr < w.g && 16 * kk + 2 * pos < hd ? *reinterpret_cast<const uint32_t *>(qrow + 16 * kk) : 0u;
        qa[kk][1] =
            gr < w.g && 16 * kk + 8 + 2 * pos < hd ? *reinterpret_cast<const uint32_t *>(qrow + 16 * kk + 8) : 0u;
    }
    // o[j]: dimensions 16 j + gr (elements 0, 1) and 16 j + 8 + gr (2, 3) of heads 2 pos (0, 2)
    // and 2 pos + 1 (1, 3).
    float o[KM][4], mrow = -INFINITY, lrow = 0.0f;
#pragma unroll
    for (int j = 0; j < KM; j++)
        o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    for (int j = 0; j < w.mine; j++) {
        const C *tile = ring.next(w, warp, lane, j);
        const T *kt;
        if constexpr (sizeof(C) == 1) {
            widen_any<T>(wide, tile, kTile, hp, LD, ring.ld, lane, 32);
            __syncwarp();
            kt = wide;
        } else {
            kt = tile;
        }
        int ts = w.t0 + (warp + j * kWarps) * kTile;
        float s[2][4], s2[2][4];
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = s2[nt][0] = s2[nt][1] = s2[nt][2] = s2[nt][3] = 0.0f;
        // One ldmatrix per k step gives both tiles of 8 tokens: matrices (tokens 0-7, dims
        // 16 kk + 0-7), (0-7, +8-15), (8-15, +0-7), (8-15, +8-15).
#pragma unroll
        for (int kk = 0; kk < KM; kk++) {
            if (kk < KS) {
                uint32_t kb[4];
                tc::ldmatrix_x4(kb, kt + (8 * (lane >> 4) + (lane & 7)) * LD + 16 * kk + 8 * ((lane >> 3) & 1));
                float(&a0)[4] = (kk & 1) ? s2[0] : s[0];
                float(&a1)[4] = (kk & 1) ? s2[1] : s[1];
                tc::mma16816<T>(a0, qa[kk][0], 0u, qa[kk][1], 0u, kb[0], kb[1]);
                tc::mma16816<T>(a1, qa[kk][0], 0u, qa[kk][1], 0u, kb[2], kb[3]);
            }
        }
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[nt][e] += s2[nt][e];
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int t = ts + 8 * nt + 2 * pos + e;
                bool ok = t < w.t1 && t >= w.start;
                s[nt][e] = ok ? s[nt][e] * scale : -INFINITY;
                mx = fmaxf(mx, s[nt][e]);
            }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        float mn = fmaxf(mrow, mx), corr = __expf(mrow - mn);
        float ps = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                s[nt][e] = __expf(s[nt][e] - mn);
                ps += s[nt][e];
            }
        lrow = lrow * corr + ps;
        mrow = mn;
        // The corrections of this lane's heads 2 pos and 2 pos + 1 (rows of lanes 8 pos, +4).
        float c0 = __shfl_sync(0xffffffffu, corr, 8 * pos), c1 = __shfl_sync(0xffffffffu, corr, 8 * pos + 4);
#pragma unroll
        for (int jj = 0; jj < KM; jj++) {
            o[jj][0] *= c0;
            o[jj][1] *= c1;
            o[jj][2] *= c0;
            o[jj][3] *= c1;
        }
        // P^T as the B fragment: lane (g, p) holds head g's tokens 2p, 2p + 1 and 8 + 2p, +1.
        uint32_t pb0 = tc::pack2<T>(s[0][0], s[0][1]), pb1 = tc::pack2<T>(s[1][0], s[1][1]);
        const T *vt;
        if constexpr (sizeof(C) == 1) {
            __syncwarp(); // every lane is done with the keys in `wide`
            widen_any<T>(wide, tile + kTile * ring.ld, kTile, hp, LD, ring.ld, lane, 32);
            __syncwarp();
            vt = wide;
        } else {
            vt = tile + kTile * LD;
        }
        // V^T as the A fragment: the transposed matrices (tokens 0-7, dims 16 jj + 0-7), (8-15,
        // +0-7), (0-7, +8-15), (8-15, +8-15) are its registers 0, 2, 1, 3.
#pragma unroll
        for (int jj = 0; jj < KM; jj++) {
            if (jj < KS) {
                uint32_t vb[4];
                tc::ldmatrix_x4<true>(vb, vt + ((lane & 7) + 8 * ((lane >> 3) & 1)) * LD + 16 * jj + 8 * (lane >> 4));
                tc::mma16816<T>(o[jj], vb[0], vb[2], vb[1], vb[3], pb0, pb1);
            }
        }
    }
    lrow += __shfl_xor_sync(0xffffffffu, lrow, 1);
    lrow += __shfl_xor_sync(0xffffffffu, lrow, 2);
    tc::cp_wait<0>();
    __syncthreads(); // the rings are free
    if (gr < w.g && pos == 0) {
        ms[warp * kMaxGroup + gr] = mrow;
        ls[warp * kMaxGroup + gr] = lrow;
    }
#pragma unroll
    for (int jj = 0; jj < KM; jj++)
        if (jj < KS)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int h = 2 * pos + (e & 1);
                if (h < w.g)
                    as[(warp * kMaxGroup + h) * hp + 16 * jj + gr + 8 * (e >> 1)] = o[jj][e];
            }
}

// The cached tokens a split covers: the host sizes `chunk` for the table's whole width; a
// shorter sequence spreads over the splits by its own length (at least one tile per warp), so
// that it is not left to the first split alone.
__device__ __forceinline__ int split_chunk(int len, int splits, int chunk)
{
    constexpr int kMin = kWarps * kTile;
    int even = (int)(((uint32_t)len + splits - 1) / (uint32_t)splits);
    return min(chunk, max(kMin, (even + kMin - 1) / kMin * kMin));
}

// HD 0: the generic kernel, head_dim hd_arg (see kMaxHD). window > 0: the query (position
// len - 1) sees tokens from len - window on. FP8 caches: scores scaled by the kv head's key
// scale, the output by its value scale.
template <typename T, typename C, int HD>
__device__ void decode(T *out, float *part, int32_t *counters, const T *q, const C *k_cache, const C *v_cache,
                       const int32_t *table, const int32_t *seq_lens, int n_heads, int n_kv_heads, int block_size,
                       int max_blocks, int64_t q_stride, int64_t out_stride, int chunk, float scale, int stages,
                       int fresh, int window, const float *k_scale = nullptr, const float *v_scale = nullptr,
                       int hd_arg = HD)
{
    // (hp: the width of the rows in shared memory and of the products; REC: a split's record.)
    const int hd = HD ? HD : hd_arg, hp = HD ? HD : (hd + 15) / 16 * 16, REC = HD ? HD + 4 : (hd + 3) / 4 * 4 + 4;
    const int STAGE = HD ? decode_stage_elems<C, HD>() : 2 * kTile * (hp + 16 / (int)sizeof(C));
    int S = stages;
    // fresh >= 0: the kernel before this one wrote at most each sequence's newest `fresh` cached
    // rows (and not seq_lens or the table): the lengths, the table and the older rows of the
    // first tiles are read while it finishes, the rest after the wait. Else all after it.
    if (fresh < 0)
        tc::await_inputs();
    // Dynamic shared memory: the warps' rings, then (generic kernel over an FP8 cache) the
    // warps' widened rows.
    extern __shared__ float sh[];
    __shared__ int last;
    DecodeWork w;
    w.seq = blockIdx.x;
    int split = blockIdx.z, splits = gridDim.z;
    int group = n_heads / n_kv_heads, chunks = (group + kMaxGroup - 1) / kMaxGroup;
    w.kvh = blockIdx.y / chunks;
    w.h0 = w.kvh * group + (blockIdx.y % chunks) * kMaxGroup;
    w.g = min(kMaxGroup, w.kvh * group + group - w.h0);
    int warp = threadIdx.x >> 5;
    const int32_t *tbl = table + (int64_t)w.seq * max_blocks;
    // The table entry of the warp's first tile is asked for beside the length: one memory
    // round trip instead of two before the first copies are queued (where the split is the
    // shortest, one tile per warp: the short sequences, whose latency this is).
    // (Lengths and positions are below 2^31: 32-bit arithmetic, as 64-bit divisions cost about
    // a hundred instructions each on this path.)
    tc::prefetch_l1(tbl + min((uint32_t)(split * kWarps * kTile + warp * kTile) / (uint32_t)block_size,
                              (uint32_t)max_blocks - 1));
    int len = seq_lens[w.seq];
    // With a window the splits cover [base, len), from the tile holding the window's first
    // token (tokens before it are never read: their blocks may be freed).
    w.start = window > 0 ? max(0, len - window) : 0;
    int base = w.start / kTile * kTile, span = len - base;
    chunk = split_chunk(span, splits, chunk);
    w.used = span > 0 ? min(splits, (int)(((uint32_t)span + chunk - 1) / (uint32_t)chunk)) : 1;
    if (split >= w.used)
        return;
    w.t0 = base + split * chunk;
    w.t1 = min(len, w.t0 + chunk);
    w.n_tiles = w.t1 > w.t0 ? (w.t1 - w.t0 + kTile - 1) / kTile : 0;
    w.mine = w.n_tiles > warp ? (w.n_tiles - warp + kWarps - 1) / kWarps : 0;
    using Ring = std::conditional_t<HD != 0, DecodeRing<C, HD>, AnyRing<C>>;
    Ring ring;
    ring.ring = reinterpret_cast<C *>(sh) + warp * S * STAGE;
    ring.k_cache = k_cache;
    ring.v_cache = v_cache;
    ring.tbl = tbl;
    ring.block_size = block_size;
    ring.n_kv_heads = n_kv_heads;
    ring.stages = stages;
    ring.late = false;
    int lane = threadIdx.x & 31, cut = fresh < 0 ? INT_MAX : len - fresh;
    if constexpr (HD == 0) {
        ring.hd = hd;
        ring.ld = hp + 16 / (int)sizeof(C);
        zero_pad<C>(ring.ring, 2 * kTile * S, hd, hp, ring.ld, lane, 32); // before any copy lands
    }
    for (int j = 0; j < S - 1; j++)
        ring.load(w, warp, lane, j, 0, cut);
    // A warp with at most two tiles past its ring (a short split, as at batch 1 with few KV
    // heads) has L2 fetch them now too, while the kernel before finishes: H100, 8 KV heads,
    // 4,096 tokens, batch 1 (4 tiles a warp), graph replay: 54% -> 60% of the bandwidth. With
    // more tiles the prefetches compete with the ring's copies (32 KV heads: 87% -> 83%).
    if (fresh >= 0 && w.mine <= S + 1)
        for (int j = S - 1; j < w.mine; j++)
            ring.prefetch(w, warp, lane, j);
    if (fresh >= 0) {
        tc::await_inputs();
        // The first tiles' rows from `cut` on (the newest, in the split that ends the sequence).
        for (int j = 0; j < S - 1 && j < w.mine; j++)
            ring.late |= min(w.t0 + (warp + j * kWarps) * kTile + kTile, w.t1) > cut;
        if (ring.late)
            for (int j = 0; j < S - 1; j++)
                ring.load(w, warp, lane, j, cut);
    }
    float *ms = sh, *ls = ms + kWarps * kMaxGroup, *as = ls + kWarps * kMaxGroup;
    float vsc = 1.0f; // the output's factor: an FP8 cache's value scale
    if constexpr (sizeof(C) == 1) {
        if (k_scale)
            scale *= k_scale[w.kvh];
        if (v_scale)
            vsc = v_scale[w.kvh];
    }
    if constexpr (HD == 0) {
        // (an FP8 cache: the warp's widened rows after the rings)
        T *wide = reinterpret_cast<T *>(reinterpret_cast<C *>(sh) + kWarps * S * STAGE) + warp * kTile * (hp + 8);
        decode_any_warp<T, C>(w, ring, wide, q, q_stride, scale, hd, hp, ms, ls, as);
    } else if constexpr (sizeof(C) == 1) {
        decode_warp_f8<T, HD>(w, ring, q, q_stride, scale, ms, ls, as);
    } else {
        decode_warp_mma<T, HD>(w, ring, q, q_stride, scale, ms, ls, as);
    }
    __syncthreads();

    int g = w.g, used = w.used, seq = w.seq, h0 = w.h0;
    for (int e = threadIdx.x; e < g * hd; e += blockDim.x) {
        int h = e / hd, d = e % hd;
        float mx = -INFINITY, sl = 0.0f, sa = 0.0f;
#pragma unroll
        for (int i = 0; i < kWarps; i++)
            mx = fmaxf(mx, ms[i * kMaxGroup + h]);
#pragma unroll
        for (int i = 0; i < kWarps; i++) {
            float mw = ms[i * kMaxGroup + h];
            float f = mw == -INFINITY ? 0.0f : __expf(mw - mx);
            sl += ls[i * kMaxGroup + h] * f;
            sa += as[(i * kMaxGroup + h) * hp + d] * f;
        }
        if (used == 1) {
            out[seq * out_stride + (int64_t)(h0 + h) * hd + d] = tc::from_f32<T>(sl > 0.0f ? sa / sl * vsc : 0.0f);
        } else {
            // Partials: [seq, head, split] records of (m, l, -, -, acc[HD]).
            float *rec = part + (((int64_t)seq * n_heads + h0 + h) * splits + split) * REC;
            rec[4 + d] = sa;
            if (d == 0) {
                rec[0] = mx;
                rec[1] = sl;
            }
        }
    }
    if (used == 1)
        return;
    // Arrival: the block's partials are published by thread 0's release (after the barrier,
    // which orders every thread's stores before it), and the last block's acquire makes every
    // split's visible to it; no full fences.
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t *cnt = counters + (int64_t)seq * gridDim.y + blockIdx.y;
        last = tc::atomic_add_acq_rel(cnt, 1) == used - 1;
        if (last)
            *cnt = 0; // every split has arrived: ready for the next launch
    }
    __syncthreads();
    if (!last)
        return;
    // The merge, online over batches of sixteen splits: each thread reads the batch's (m, l)
    // and its four dimensions of the batch's sums together (one round trip to L2 per batch),
    // rescaling what it holds when the running maximum grows.
    constexpr int U = 16;
    const int D4 = (hd + 3) / 4;
    for (int e = threadIdx.x; e < g * D4; e += blockDim.x) {
        int h = e / D4, d4 = e % D4;
        const float *base = part + ((int64_t)seq * n_heads + h0 + h) * splits * REC;
        float a[4] = { 0.0f, 0.0f, 0.0f, 0.0f }, mx = -INFINITY, sl = 0.0f;
        for (int s0 = 0; s0 < used; s0 += U) {
            float2 ml[U];
            float4 v[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                bool in = s0 + u < used;
                const float *rec = base + (int64_t)(s0 + u) * REC;
                ml[u] = in ? __ldcg(reinterpret_cast<const float2 *>(rec)) : make_float2(-INFINITY, 0.0f);
                v[u] = in ? __ldcg(reinterpret_cast<const float4 *>(rec + 4 + d4 * 4))
                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
            float bm = mx;
#pragma unroll
            for (int u = 0; u < U; u++)
                bm = fmaxf(bm, ml[u].x);
            if (bm == -INFINITY)
                continue; // nothing but empty splits so far
            float corr = mx == -INFINITY ? 0.0f : __expf(mx - bm);
            sl *= corr;
#pragma unroll
            for (int i = 0; i < 4; i++)
                a[i] *= corr;
#pragma unroll
            for (int u = 0; u < U; u++) {
                float f = ml[u].x == -INFINITY ? 0.0f : __expf(ml[u].x - bm);
                sl = fmaf(f, ml[u].y, sl);
                a[0] = fmaf(f, v[u].x, a[0]);
                a[1] = fmaf(f, v[u].y, a[1]);
                a[2] = fmaf(f, v[u].z, a[2]);
                a[3] = fmaf(f, v[u].w, a[3]);
            }
            mx = bm;
        }
        float inv = sl > 0.0f ? vsc / sl : 0.0f;
        T *o = out + seq * out_stride + (int64_t)(h0 + h) * hd + d4 * 4;
#pragma unroll
        for (int i = 0; i < 4; i++)
            if (HD || d4 * 4 + i < hd)
                o[i] = tc::from_f32<T>(a[i] * inv);
    }
}

// The (sequence, query tile) of prefill block blockIdx.x, tiles of bq rows, found by thread 0
// and shared through seq_tile (seq -1: a block past the last tile). With `longest_first` the
// sequence's tiles go in reverse order (the last tiles have the most keys).
__device__ __forceinline__ void prefill_tile(const int32_t *q_start, int n_seqs, int bq, bool longest_first,
                                             int *seq_tile)
{
    if (threadIdx.x == 0) {
        int found = -1, tile = 0, cum = 0;
        for (int s = 0; s < n_seqs; s++) {
            int tiles = (q_start[s + 1] - q_start[s] + bq - 1) / bq;
            if ((int)blockIdx.x < cum + tiles) {
                found = s;
                tile = longest_first ? tiles - 1 - ((int)blockIdx.x - cum) : (int)blockIdx.x - cum;
                break;
            }
            cum += tiles;
        }
        seq_tile[0] = found;
        seq_tile[1] = tile;
    }
    __syncthreads();
}

// f32 caches, any head_dim hd up to kMaxHD: block (tile of BQ query rows of one sequence,
// head); 128 threads, 4 per query row. With q_start NULL a decode (block x is sequence x, whose
// query is row x). window > 0: a query at position p sees keys from p - window + 1 on.
constexpr int BQ = 32, BK = 32, kPrefillThreads = 128;

template <typename T>
__device__ void prefill_simt(T *out, const T *q, const T *k_cache, const T *v_cache, const int32_t *table,
                             const int32_t *seq_lens, const int32_t *q_start, int n_seqs, int n_heads,
                             int n_kv_heads, int block_size, int max_blocks, int64_t q_stride, int64_t out_stride,
                             float scale, int window, int hd)
{
    const int HS = hd + 1;
    extern __shared__ float sh[];
    float *qs = sh, *ks = qs + BQ * HS, *vs = ks + BK * HS, *ps = vs + BK * HS;
    __shared__ int seq_tile[2];
    __shared__ const T *krow[BK], *vrow[BK];
    if (!q_start) {
        if (threadIdx.x == 0) {
            seq_tile[0] = blockIdx.x;
            seq_tile[1] = 0;
        }
        __syncthreads();
    } else {
        prefill_tile(q_start, n_seqs, BQ, false, seq_tile);
    }
    int s_seq = seq_tile[0], s_tile = seq_tile[1];
    if (s_seq < 0)
        return;
    int seq = s_seq, head = blockIdx.y;
    int kvh = head / (n_heads / n_kv_heads);
    bool one = !q_start; // decode: one query per sequence
    int64_t qbeg = one ? seq : q_start[seq], m = one ? 1 : q_start[seq + 1] - qbeg, len = seq_lens[seq];
    int64_t r0 = (int64_t)s_tile * BQ; // first row of the tile within the sequence
    int rows = (int)min((int64_t)BQ, m - r0);
    int64_t first_pos = len - m + r0; // position of the tile's first query
    const int32_t *tbl = table + (int64_t)seq * max_blocks;

    for (int e = threadIdx.x; e < BQ * hd; e += kPrefillThreads) {
        int r = e / hd, d = e % hd;
        qs[r * HS + d] = r < rows ? tc::to_f32(q[(qbeg + r0 + r) * q_stride + (int64_t)head * hd + d]) * scale : 0.0f;
    }
    int r = threadIdx.x / 4, sub = threadIdx.x % 4;
    constexpr int DJ = kMaxHD / 4;
    float o[DJ], mrow = -INFINITY, lrow = 0.0f;
#pragma unroll
    for (int j = 0; j < DJ; j++)
        o[j] = 0.0f;
    int64_t qpos = first_pos + r;
    int64_t kend = first_pos + rows; // keys [lo, kend) are visible to some row of the tile
    int64_t lo = window > 0 && first_pos - window + 1 > 0 ? first_pos - window + 1 : 0;
    for (int64_t k0 = lo / BK * BK; k0 < kend; k0 += BK) {
        __syncthreads();
        if (threadIdx.x < BK) {
            int64_t t = k0 + threadIdx.x;
            bool in = t < kend && t >= lo;
            krow[threadIdx.x] = in ? kv_row(k_cache, tbl, t, block_size, n_kv_heads, hd, kvh) : nullptr;
            vrow[threadIdx.x] = in ? kv_row(v_cache, tbl, t, block_size, n_kv_heads, hd, kvh) : nullptr;
        }
        __syncthreads();
        for (int e = threadIdx.x; e < BK * hd; e += kPrefillThreads) {
            int c = e / hd, d = e % hd;
            ks[c * HS + d] = krow[c] ? tc::to_f32(krow[c][d]) : 0.0f;
            vs[c * HS + d] = vrow[c] ? tc::to_f32(vrow[c][d]) : 0.0f;
        }
        __syncthreads();
        float s[BK / 4], smax = -INFINITY;
#pragma unroll
        for (int j = 0; j < BK / 4; j++) {
            int c = sub + 4 * j;
            float d = 0.0f;
#pragma unroll 8
            for (int x = 0; x < hd; x++)
                d = fmaf(qs[r * HS + x], ks[c * HS + x], d);
            int64_t key = k0 + c;
            s[j] = (r < rows && key <= qpos && (window <= 0 || key > qpos - window)) ? d : -INFINITY;
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
                if (sub + 4 * j < hd)
                    o[j] = fmaf(p, vs[c * HS + sub + 4 * j], o[j]);
        }
    }
    if (r < rows) {
        float inv = lrow > 0.0f ? 1.0f / lrow : 0.0f;
        T *orow = out + (qbeg + r0 + r) * out_stride + (int64_t)head * hd;
#pragma unroll
        for (int j = 0; j < DJ; j++)
            if (sub + 4 * j < hd)
                orow[sub + 4 * j] = tc::from_f32<T>(o[j] * inv);
    }
}


// Prefill of 16-bit caches on the tensor cores (flash attention 2's arrangement, Dao 2023):
// block (tile of 64 query rows of one sequence, head) of 4 warps, 16 rows each. Key and value
// tiles of 64 tokens go through shared memory (cp.async, double-buffered); each warp keeps its
// queries as A fragments, computes its 16 x 64 scores with m16n8k16 products, updates its
// rows' online softmax in registers (lane l holds rows l / 4 and l / 4 + 8) and multiplies the
// probabilities, rounded to T, by the values straight from the score registers. Warps whose
// rows all precede a key tile skip it. The sequence's last query tiles (the longest) go first.
constexpr int kPBQ = 64, kPBK = 64;
static_assert(kPBK == kWarps * kTile, "each warp of a prefill block loads kTile rows of a key tile");

// A masked score: finite, so that a row whose keys in a tile are all masked (before its
// window) gets no NaN; the garbage it sums there is scaled away by exp(-1e30 - m) = 0 at its
// first visible key, which every row meets (its own position).
constexpr float kMasked = -1e30f;

template <typename T, typename C, int HD>
__device__ void prefill_mma(T *out, const T *q, const C *k_cache, const C *v_cache, const int32_t *table,
                            const int32_t *seq_lens, const int32_t *q_start, int n_seqs, int n_heads,
                            int n_kv_heads, int block_size, int max_blocks, int64_t q_stride, int64_t out_stride,
                            float scale, int window, const float *k_scale, const float *v_scale)
{
    constexpr int LD = kv_ld<T, HD>(), KS = HD / 16, NT = HD / 8, NK = kPBK / 8;
    constexpr int STAGE = 2 * kPBK * kv_ld<C, HD>();
    extern __shared__ float sh[];
    // The two stages of the cache's tiles, then (FP8 cache) the current tile widened to T.
    C *smem = reinterpret_cast<C *>(sh);
    T *wide = reinterpret_cast<T *>(smem + 2 * STAGE);
    __shared__ int seq_tile[2];
    prefill_tile(q_start, n_seqs, kPBQ, true, seq_tile);
    int s_seq = seq_tile[0], s_tile = seq_tile[1];
    if (s_seq < 0)
        return;
    int seq = s_seq, head = blockIdx.y, kvh = head / (n_heads / n_kv_heads);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gr = lane >> 2, pos = lane & 3;
    int64_t qbeg = q_start[seq], m = q_start[seq + 1] - qbeg, len = seq_lens[seq];
    int64_t r0 = (int64_t)s_tile * kPBQ;
    int rows = (int)min((int64_t)kPBQ, m - r0);
    int64_t first_pos = len - m + r0, kend = first_pos + rows;
    // keys [lo, kend) are visible to some row of the tile (with a window, lo is the first row's
    // first key: earlier blocks may be freed, never read)
    int64_t lo = window > 0 && first_pos - window + 1 > 0 ? first_pos - window + 1 : 0;
    int kt0 = (int)(lo / kPBK), n_kt = (int)((kend + kPBK - 1) / kPBK);
    const int32_t *tbl = table + (int64_t)seq * max_blocks;
    float vsc = 1.0f;
    if constexpr (sizeof(C) == 1) {
        if (k_scale)
            scale *= k_scale[kvh];
        if (v_scale)
            vsc = v_scale[kvh];
    }

    auto load = [&](int kt) { // warp w copies rows 16 w .. 16 w + 15 of key tile kt
        if (kt < n_kt) {
            constexpr int LC = kv_ld<C, HD>();
            C *ks = smem + (kt & 1) * STAGE + kTile * warp * LC;
            load_kv_rows<C, HD>(ks, ks + kPBK * LC, k_cache, v_cache, tbl, kt * kPBK + kTile * warp, (int)kend,
                                (int)lo, block_size, n_kv_heads, kvh, lane);
        }
        tc::cp_commit();
    };
    load(kt0);

    // The warp's queries as A fragments: registers 0, 2 hold row gr, 1, 3 row gr + 8.
    int wrow = 16 * warp; // the warp's first row within the tile
    uint32_t qa[KS][4];
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        int rr = wrow + gr + 8 * hr;
        const T *qp = q + (qbeg + r0 + rr) * q_stride + (int64_t)head * HD + 2 * pos;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            qa[kk][hr] = rr < rows ? *reinterpret_cast<const uint32_t *>(qp + 16 * kk) : 0u;
            qa[kk][2 + hr] = rr < rows ? *reinterpret_cast<const uint32_t *>(qp + 16 * kk + 8) : 0u;
        }
    }
    float o[NT][4], mr[2] = { -INFINITY, -INFINITY }, lr[2] = { 0.0f, 0.0f };
#pragma unroll
    for (int n = 0; n < NT; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    int64_t wpos = first_pos + wrow; // position of the warp's first row
    bool active = wrow < rows;
    int wlen = window > 0 ? window : INT_MAX; // keys after qpos - wlen are in a row's window

    for (int kt = kt0; kt < n_kt; kt++) {
        load(kt + 1);
        tc::cp_wait<1>();
        __syncthreads();
        const T *ks;
        if constexpr (sizeof(C) == 1) {
            widen<T, HD>(wide, smem + (kt & 1) * STAGE, 2 * kPBK, threadIdx.x, blockDim.x);
            __syncthreads();
            ks = wide;
        } else {
            ks = smem + (kt & 1) * STAGE;
        }
        const T *vs = ks + kPBK * LD;
        int64_t k0 = (int64_t)kt * kPBK;
        // (skipped by a warp whose rows all precede the tile, or whose first row's window starts
        // after it)
        if (active && k0 <= wpos + 15 && (window <= 0 || k0 + kPBK > wpos - window + 1)) {
            float s[NK][4];
#pragma unroll
            for (int nt = 0; nt < NK; nt++) {
                s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
                for (int kp = 0; kp < KS / 2; kp++) {
                    uint32_t kb[4];
                    tc::ldmatrix_x4(kb, ks + (8 * nt + (lane & 7)) * LD + 32 * kp + 8 * (lane >> 3));
                    tc::mma16816<T>(s[nt], qa[2 * kp][0], qa[2 * kp][1], qa[2 * kp][2], qa[2 * kp][3], kb[0],
                                    kb[1]);
                    tc::mma16816<T>(s[nt], qa[2 * kp + 1][0], qa[2 * kp + 1][1], qa[2 * kp + 1][2],
                                    qa[2 * kp + 1][3], kb[2], kb[3]);
                }
            }
            // Element e of s[nt]: row gr + 8 (e / 2), key k0 + 8 nt + 2 pos + e % 2.
            float mx[2] = { -INFINITY, -INFINITY };
#pragma unroll
            for (int nt = 0; nt < NK; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    // (32-bit: positions stay below 2^31)
                    int key = (int)k0 + 8 * nt + 2 * pos + (e & 1), qpos = (int)wpos + gr + 8 * (e >> 1);
                    bool seen = key <= qpos && key > qpos - wlen;
                    s[nt][e] = seen ? s[nt][e] * scale : kMasked;
                    mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
                }
            float corr[2];
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
                mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
                float mn = fmaxf(mr[hr], mx[hr]); // finite (kMasked at least)
                corr[hr] = __expf(mr[hr] - mn);
                mr[hr] = mn;
                lr[hr] *= corr[hr];
            }
#pragma unroll
            for (int nt = 0; nt < NK; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[nt][e] = __expf(s[nt][e] - mr[e >> 1]);
                    lr[e >> 1] += s[nt][e];
                }
#pragma unroll
            for (int n = 0; n < NT; n++) {
                o[n][0] *= corr[0];
                o[n][1] *= corr[0];
                o[n][2] *= corr[1];
                o[n][3] *= corr[1];
            }
#pragma unroll
            for (int kk = 0; kk < kPBK / 16; kk++) {
                uint32_t a0 = tc::pack2<T>(s[2 * kk][0], s[2 * kk][1]), a1 = tc::pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                         a2 = tc::pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                         a3 = tc::pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
                for (int np = 0; np < NT / 2; np++) {
                    uint32_t vb[4];
                    tc::ldmatrix_x4<true>(vb, vs + (16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1)) * LD +
                                                  8 * (2 * np + (lane >> 4)));
                    tc::mma16816<T>(o[2 * np], a0, a1, a2, a3, vb[0], vb[1]);
                    tc::mma16816<T>(o[2 * np + 1], a0, a1, a2, a3, vb[2], vb[3]);
                }
            }
        }
        __syncthreads(); // the stage is refilled by the next iteration's load
    }
    tc::cp_wait<0>();
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        lr[hr] += __shfl_xor_sync(0xffffffffu, lr[hr], 1);
        lr[hr] += __shfl_xor_sync(0xffffffffu, lr[hr], 2);
        int rr = wrow + gr + 8 * hr;
        if (rr >= rows)
            continue;
        float inv = lr[hr] > 0.0f ? vsc / lr[hr] : 0.0f;
        T *orow = out + (qbeg + r0 + rr) * out_stride + (int64_t)head * HD + 2 * pos;
#pragma unroll
        for (int n = 0; n < NT; n++) {
            orow[8 * n] = tc::from_f32<T>(o[n][2 * hr] * inv);
            orow[8 * n + 1] = tc::from_f32<T>(o[n][2 * hr + 1] * inv);
        }
    }
}


// The generic prefill of 16-bit and FP8 caches (head_dim hd up to kMaxHD, read at run time):
// prefill_mma's arrangement with key tiles of 32 tokens, and the warps' query fragments read
// from the block's query tile in shared memory at each k step instead of held in registers
// (at 256 the registers would not hold them beside the output's).
constexpr int kAnyBK = 32;

template <typename T, typename C>
__device__ void prefill_any(T *out, const T *q, const C *k_cache, const C *v_cache, const int32_t *table,
                            const int32_t *seq_lens, const int32_t *q_start, int n_seqs, int n_heads,
                            int n_kv_heads, int block_size, int max_blocks, int64_t q_stride, int64_t out_stride,
                            float scale, int window, const float *k_scale, const float *v_scale, int hd)
{
    constexpr int KM = kMaxHD / 16, NK = kAnyBK / 8;
    const int hp = (hd + 15) / 16 * 16, LD = hp + 8, LC = hp + 16 / (int)sizeof(C), KS = hp / 16;
    const int STAGE = 2 * kAnyBK * LC;
    extern __shared__ float sh[];
    // The query tile [64][LD], the two stages of the cache's tiles, then (FP8 cache) the
    // current tile widened to T.
    T *qs = reinterpret_cast<T *>(sh);
    C *smem = reinterpret_cast<C *>(qs + kPBQ * LD);
    T *wide = reinterpret_cast<T *>(smem + 2 * STAGE);
    __shared__ int seq_tile[2];
    prefill_tile(q_start, n_seqs, kPBQ, true, seq_tile);
    int s_seq = seq_tile[0], s_tile = seq_tile[1];
    if (s_seq < 0)
        return;
    int seq = s_seq, head = blockIdx.y, kvh = head / (n_heads / n_kv_heads);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gr = lane >> 2, pos = lane & 3;
    int64_t qbeg = q_start[seq], m = q_start[seq + 1] - qbeg, len = seq_lens[seq];
    int64_t r0 = (int64_t)s_tile * kPBQ;
    int rows = (int)min((int64_t)kPBQ, m - r0);
    int64_t first_pos = len - m + r0, kend = first_pos + rows;
    int64_t lo = window > 0 && first_pos - window + 1 > 0 ? first_pos - window + 1 : 0;
    int kt0 = (int)(lo / kAnyBK), n_kt = (int)((kend + kAnyBK - 1) / kAnyBK);
    const int32_t *tbl = table + (int64_t)seq * max_blocks;
    float vsc = 1.0f;
    if constexpr (sizeof(C) == 1) {
        if (k_scale)
            scale *= k_scale[kvh];
        if (v_scale)
            vsc = v_scale[kvh];
    }
    // The stages' columns past head_dim stay zero (the copies write only head_dim).
    zero_pad<C>(smem, 4 * kAnyBK, hd, hp, LC, threadIdx.x, blockDim.x);
    auto load = [&](int kt) { // warp w copies rows 8 w .. 8 w + 7 of key tile kt
        if (kt < n_kt) {
            constexpr int R = kAnyBK / kWarps;
            C *ks = smem + (kt & 1) * STAGE + R * warp * LC;
            load_rows_any<C>(ks, ks + kAnyBK * LC, k_cache, v_cache, tbl, kt * kAnyBK + R * warp, R, (int)kend,
                             (int)lo, block_size, n_kv_heads, kvh, hd, LC, lane, 0, INT_MAX);
        }
        tc::cp_commit();
    };
    load(kt0);
    // The query tile, rows past the sequence's and columns past head_dim zero (pairs of
    // elements: head_dim is even).
    for (int e = threadIdx.x; e < kPBQ * (hp / 2); e += blockDim.x) {
        int r = e / (hp / 2), d = 2 * (e - r * (hp / 2));
        uint32_t v = r < rows && d < hd
                         ? *reinterpret_cast<const uint32_t *>(q + (qbeg + r0 + r) * q_stride + (int64_t)head * hd + d)
                         : 0u;
        *reinterpret_cast<uint32_t *>(qs + r * LD + d) = v;
    }
    float o[2 * KM][4], mr[2] = { -INFINITY, -INFINITY }, lr[2] = { 0.0f, 0.0f };
#pragma unroll
    for (int n = 0; n < 2 * KM; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    int wrow = 16 * warp;
    int64_t wpos = first_pos + wrow;
    bool active = wrow < rows;
    int wlen = window > 0 ? window : INT_MAX;
    // A fragments of the warp's 16 rows at k step kk: matrices (rows 0-7, dims 16 kk + 0-7),
    // (8-15, +0-7), (0-7, +8-15), (8-15, +8-15).
    const T *qa_row = qs + (wrow + (lane & 7) + 8 * ((lane >> 3) & 1)) * LD + 8 * (lane >> 4);
    for (int kt = kt0; kt < n_kt; kt++) {
        load(kt + 1);
        tc::cp_wait<1>();
        __syncthreads();
        const T *ks;
        if constexpr (sizeof(C) == 1) {
            widen_any<T>(wide, smem + (kt & 1) * STAGE, 2 * kAnyBK, hp, LD, LC, threadIdx.x, blockDim.x);
            __syncthreads();
            ks = wide;
        } else {
            ks = smem + (kt & 1) * STAGE;
        }
        const T *vs = ks + kAnyBK * LD;
        int64_t k0 = (int64_t)kt * kAnyBK;
        if (active && k0 <= wpos + 15 && (window <= 0 || k0 + kAnyBK > wpos - window + 1)) {
            float s[NK][4];
#pragma unroll
            for (int nt = 0; nt < NK; nt++)
                s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KM; kk++) {
                if (kk < KS) {
                    uint32_t a[4];
                    tc::ldmatrix_x4(a, qa_row + 16 * kk);
#pragma unroll
                    for (int np = 0; np < NK / 2; np++) {
                        uint32_t kb[4];
                        tc::ldmatrix_x4(kb, ks + (16 * np + 8 * (lane >> 4) + (lane & 7)) * LD + 16 * kk +
                                                8 * ((lane >> 3) & 1));
                        tc::mma16816<T>(s[2 * np], a[0], a[1], a[2], a[3], kb[0], kb[1]);
                        tc::mma16816<T>(s[2 * np + 1], a[0], a[1], a[2], a[3], kb[2], kb[3]);
                    }
                }
            }
            float mx[2] = { -INFINITY, -INFINITY };
#pragma unroll
            for (int nt = 0; nt < NK; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    // (32-bit: positions stay below 2^31)
                    int key = (int)k0 + 8 * nt + 2 * pos + (e & 1), qpos = (int)wpos + gr + 8 * (e >> 1);
                    bool seen = key <= qpos && key > qpos - wlen;
                    s[nt][e] = seen ? s[nt][e] * scale : kMasked;
                    mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
                }
            float corr[2];
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
                mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
                float mn = fmaxf(mr[hr], mx[hr]);
                corr[hr] = __expf(mr[hr] - mn);
                mr[hr] = mn;
                lr[hr] *= corr[hr];
            }
#pragma unroll
            for (int nt = 0; nt < NK; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[nt][e] = __expf(s[nt][e] - mr[e >> 1]);
                    lr[e >> 1] += s[nt][e];
                }
#pragma unroll
            for (int n = 0; n < 2 * KM; n++) {
                o[n][0] *= corr[0];
                o[n][1] *= corr[0];
                o[n][2] *= corr[1];
                o[n][3] *= corr[1];
            }
#pragma unroll
            for (int kk = 0; kk < kAnyBK / 16; kk++) {
                uint32_t a0 = tc::pack2<T>(s[2 * kk][0], s[2 * kk][1]), a1 = tc::pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                         a2 = tc::pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                         a3 = tc::pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
                for (int np = 0; np < KM; np++) {
                    if (np < KS) {
                        uint32_t vb[4];
                        tc::ldmatrix_x4<true>(vb, vs + (16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1)) * LD +
                                                      8 * (2 * np + (lane >> 4)));
                        tc::mma16816<T>(o[2 * np], a0, a1, a2, a3, vb[0], vb[1]);
                        tc::mma16816<T>(o[2 * np + 1], a0, a1, a2, a3, vb[2], vb[3]);
                    }
                }
            }
        }
        __syncthreads(); // the stage (and the widened tile) is refilled next
    }
    tc::cp_wait<0>();
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        lr[hr] += __shfl_xor_sync(0xffffffffu, lr[hr], 1);
        lr[hr] += __shfl_xor_sync(0xffffffffu, lr[hr], 2);
        int rr = wrow + gr + 8 * hr;
        if (rr >= rows)
            continue;
        float inv = lr[hr] > 0.0f ? vsc / lr[hr] : 0.0f;
        T *orow = out + (qbeg + r0 + rr) * out_stride + (int64_t)head * hd + 2 * pos;
#pragma unroll
        for (int n = 0; n < 2 * KM; n++) {
            if (8 * n + 2 * pos < hd) {
                orow[8 * n] = tc::from_f32<T>(o[n][2 * hr] * inv);
                orow[8 * n + 1] = tc::from_f32<T>(o[n][2 * hr + 1] * inv);
            }
        }
    }
}

template <typename T, typename C, int HD>
__device__ void prefill(T *out, const T *q, const C *k_cache, const C *v_cache, const int32_t *table,
                        const int32_t *seq_lens, const int32_t *q_start, int n_seqs, int n_heads, int n_kv_heads,
                        int block_size, int max_blocks, int64_t q_stride, int64_t out_stride, float scale, int window,
                        const float *k_scale = nullptr, const float *v_scale = nullptr, int hd = HD)
{
    if constexpr (sizeof(T) == 4)
        prefill_simt<T>(out, q, k_cache, v_cache, table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size,
                        max_blocks, q_stride, out_stride, scale, window, hd);
    else if constexpr (HD == 0)
        prefill_any<T, C>(out, q, k_cache, v_cache, table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads,
                          block_size, max_blocks, q_stride, out_stride, scale, window, k_scale, v_scale, hd);
    else
        prefill_mma<T, C, HD>(out, q, k_cache, v_cache, table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads,
                              block_size, max_blocks, q_stride, out_stride, scale, window, k_scale, v_scale);
}

// The FP8 scales (tc_kv_scales): block (h, 0) of k, (h, 1) of v.
template <typename T>
__device__ void scales(float *k_scale, float *v_scale, const T *k, const T *v, int64_t rows, int hd,
                       int64_t k_stride, int64_t v_stride)
{
    __shared__ float red[32];
    const T *x = blockIdx.y ? v : k;
    int64_t stride = blockIdx.y ? v_stride : k_stride, h = blockIdx.x;
    float amax = 0.0f;
    for (int64_t e = threadIdx.x; e < rows * hd; e += blockDim.x) {
        int64_t r = e / hd;
        amax = fmaxf(amax, fabsf(tc::to_f32(x[r * stride + h * hd + (e - r * hd)])));
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
/** Attention over f32 caches of any head_dim up to 256 (f32 on CUDA is a check of the 16-bit
 *  paths, kept to one simple kernel): causal prefill with grid (n_tokens / 32 + n_seqs,
 *  n_heads), 128 threads, 4 * (32 * (head_dim + 1) * 3 + 32 * 33) bytes of dynamic shared
 *  memory; or with q_start NULL a decode: grid (n_seqs, n_heads), row s of q is sequence s's
 *  query. window > 0: a query at position p attends only to positions p - window + 1 .. p. */
extern "C" __global__ void tc_k_attn_prefill_f32(float *out, const float *q, const float *k_cache,
        const float *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window, int32_t head_dim)
{
    tc::await_inputs();
    attention_cu::prefill<float, float, 0>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window, nullptr, nullptr, head_dim);
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
/** Decode attention, head_dim 64: grid (n_seqs, n_kv_heads * ceil(group / 8), splits), 128
 *  threads, stages * 18432 bytes of dynamic shared memory (stages 1 to 3); a split covers at
 *  most `chunk` cached tokens (a multiple of 64; less where the sequence is shorter), at most
 *  256 splits. With several splits in use, partials holds
 *  [n_seqs, n_heads, splits, 64 + 4] floats and counters n_seqs * gridDim.y zeroed int32 (left
 *  zeroed). fresh >= 0: only each sequence's newest `fresh` rows may come from the previous
 *  kernel (the lengths, the table and older rows are read before it has finished); -1: none
 *  is read before. window > 0: the query (at position seq_lens - 1) attends only to the last `window` tokens. */
extern "C" __global__ void tc_k_attn_decode64_f16(__half *out, float *partials, int32_t *counters, const __half *q,
        const __half *k_cache, const __half *v_cache, const int32_t *block_table, const int32_t *seq_lens,
        int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks, int64_t q_stride,
        int64_t out_stride, int32_t chunk, float scale, int32_t stages, int32_t fresh, int32_t window)
{
    attention_cu::decode<__half, __half, 64>(out, partials, counters, q, k_cache, v_cache, block_table, seq_lens, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale, stages, fresh, window);
}
/** Causal prefill attention, head_dim 64: grid (n_tokens / 64 + n_seqs, n_heads), 128 threads,
 *  36864 bytes of dynamic shared memory. window > 0: a query at position p attends only to positions p - window + 1 .. p. */
extern "C" __global__ void tc_k_attn_prefill64_f16(__half *out, const __half *q, const __half *k_cache,
        const __half *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window)
{
    tc::await_inputs();
    attention_cu::prefill<__half, __half, 64>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window);
}
/** Decode attention, head_dim 128: grid (n_seqs, n_kv_heads * ceil(group / 8), splits), 128
 *  threads, stages * 34816 bytes of dynamic shared memory (stages 1 to 3); a split covers at
 *  most `chunk` cached tokens (a multiple of 64; less where the sequence is shorter), at most
 *  256 splits. With several splits in use, partials holds
 *  [n_seqs, n_heads, splits, 128 + 4] floats and counters n_seqs * gridDim.y zeroed int32 (left
 *  zeroed). fresh >= 0: only each sequence's newest `fresh` rows may come from the previous
 *  kernel (the lengths, the table and older rows are read before it has finished); -1: none
 *  is read before. window > 0: the query (at position seq_lens - 1) attends only to the last `window` tokens. */
extern "C" __global__ void tc_k_attn_decode128_f16(__half *out, float *partials, int32_t *counters, const __half *q,
        const __half *k_cache, const __half *v_cache, const int32_t *block_table, const int32_t *seq_lens,
        int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks, int64_t q_stride,
        int64_t out_stride, int32_t chunk, float scale, int32_t stages, int32_t fresh, int32_t window)
{
    attention_cu::decode<__half, __half, 128>(out, partials, counters, q, k_cache, v_cache, block_table, seq_lens, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale, stages, fresh, window);
}
/** Causal prefill attention, head_dim 128: grid (n_tokens / 64 + n_seqs, n_heads), 128 threads,
 *  69632 bytes of dynamic shared memory. window > 0: a query at position p attends only to positions p - window + 1 .. p. */
extern "C" __global__ void tc_k_attn_prefill128_f16(__half *out, const __half *q, const __half *k_cache,
        const __half *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window)
{
    tc::await_inputs();
    attention_cu::prefill<__half, __half, 128>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window);
}
/** Decode attention of any even head_dim from 16 to 256 (rounded up to 16: hp): as
 *  tc_k_attn_decode64_f16, with stages * 256 * (hp + 8) bytes of dynamic shared memory and
 *  partials records of head_dim rounded up to 4, plus 4, floats. */
extern "C" __global__ void tc_k_attn_decode_f16(__half *out, float *partials, int32_t *counters, const __half *q,
        const __half *k_cache, const __half *v_cache, const int32_t *block_table, const int32_t *seq_lens,
        int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks, int64_t q_stride,
        int64_t out_stride, int32_t chunk, float scale, int32_t stages, int32_t fresh, int32_t window, int32_t head_dim)
{
    attention_cu::decode<__half, __half, 0>(out, partials, counters, q, k_cache, v_cache, block_table, seq_lens, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale, stages, fresh, window, nullptr, nullptr, head_dim);
}
/** Causal prefill attention of any even head_dim from 16 to 256 (rounded up to 16: hp): grid
 *  (n_tokens / 64 + n_seqs, n_heads), 128 threads, 384 * (hp + 8) bytes of dynamic shared
 *  memory. window > 0: a query at position p attends only to positions p - window + 1 .. p. */
extern "C" __global__ void tc_k_attn_prefill_f16(__half *out, const __half *q, const __half *k_cache,
        const __half *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window, int32_t head_dim)
{
    tc::await_inputs();
    attention_cu::prefill<__half, __half, 0>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window, nullptr, nullptr, head_dim);
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
/** Decode attention, head_dim 64: grid (n_seqs, n_kv_heads * ceil(group / 8), splits), 128
 *  threads, stages * 18432 bytes of dynamic shared memory (stages 1 to 3); a split covers at
 *  most `chunk` cached tokens (a multiple of 64; less where the sequence is shorter), at most
 *  256 splits. With several splits in use, partials holds
 *  [n_seqs, n_heads, splits, 64 + 4] floats and counters n_seqs * gridDim.y zeroed int32 (left
 *  zeroed). fresh >= 0: only each sequence's newest `fresh` rows may come from the previous
 *  kernel (the lengths, the table and older rows are read before it has finished); -1: none
 *  is read before. window > 0: the query (at position seq_lens - 1) attends only to the last `window` tokens. */
extern "C" __global__ void tc_k_attn_decode64_bf16(__nv_bfloat16 *out, float *partials, int32_t *counters, const __nv_bfloat16 *q,
        const __nv_bfloat16 *k_cache, const __nv_bfloat16 *v_cache, const int32_t *block_table, const int32_t *seq_lens,
        int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks, int64_t q_stride,
        int64_t out_stride, int32_t chunk, float scale, int32_t stages, int32_t fresh, int32_t window)
{
    attention_cu::decode<__nv_bfloat16, __nv_bfloat16, 64>(out, partials, counters, q, k_cache, v_cache, block_table, seq_lens, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale, stages, fresh, window);
}
/** Causal prefill attention, head_dim 64: grid (n_tokens / 64 + n_seqs, n_heads), 128 threads,
 *  36864 bytes of dynamic shared memory. window > 0: a query at position p attends only to positions p - window + 1 .. p. */
extern "C" __global__ void tc_k_attn_prefill64_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *k_cache,
        const __nv_bfloat16 *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window)
{
    tc::await_inputs();
    attention_cu::prefill<__nv_bfloat16, __nv_bfloat16, 64>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window);
}
/** Decode attention, head_dim 128: grid (n_seqs, n_kv_heads * ceil(group / 8), splits), 128
 *  threads, stages * 34816 bytes of dynamic shared memory (stages 1 to 3); a split covers at
 *  most `chunk` cached tokens (a multiple of 64; less where the sequence is shorter), at most
 *  256 splits. With several splits in use, partials holds
 *  [n_seqs, n_heads, splits, 128 + 4] floats and counters n_seqs * gridDim.y zeroed int32 (left
 *  zeroed). fresh >= 0: only each sequence's newest `fresh` rows may come from the previous
 *  kernel (the lengths, the table and older rows are read before it has finished); -1: none
 *  is read before. window > 0: the query (at position seq_lens - 1) attends only to the last `window` tokens. */
extern "C" __global__ void tc_k_attn_decode128_bf16(__nv_bfloat16 *out, float *partials, int32_t *counters, const __nv_bfloat16 *q,
        const __nv_bfloat16 *k_cache, const __nv_bfloat16 *v_cache, const int32_t *block_table, const int32_t *seq_lens,
        int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks, int64_t q_stride,
        int64_t out_stride, int32_t chunk, float scale, int32_t stages, int32_t fresh, int32_t window)
{
    attention_cu::decode<__nv_bfloat16, __nv_bfloat16, 128>(out, partials, counters, q, k_cache, v_cache, block_table, seq_lens, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale, stages, fresh, window);
}
/** Causal prefill attention, head_dim 128: grid (n_tokens / 64 + n_seqs, n_heads), 128 threads,
 *  69632 bytes of dynamic shared memory. window > 0: a query at position p attends only to positions p - window + 1 .. p. */
extern "C" __global__ void tc_k_attn_prefill128_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *k_cache,
        const __nv_bfloat16 *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window)
{
    tc::await_inputs();
    attention_cu::prefill<__nv_bfloat16, __nv_bfloat16, 128>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window);
}
/** Decode attention of any even head_dim from 16 to 256 (rounded up to 16: hp): as
 *  tc_k_attn_decode64_bf16, with stages * 256 * (hp + 8) bytes of dynamic shared memory and
 *  partials records of head_dim rounded up to 4, plus 4, floats. */
extern "C" __global__ void tc_k_attn_decode_bf16(__nv_bfloat16 *out, float *partials, int32_t *counters, const __nv_bfloat16 *q,
        const __nv_bfloat16 *k_cache, const __nv_bfloat16 *v_cache, const int32_t *block_table, const int32_t *seq_lens,
        int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks, int64_t q_stride,
        int64_t out_stride, int32_t chunk, float scale, int32_t stages, int32_t fresh, int32_t window, int32_t head_dim)
{
    attention_cu::decode<__nv_bfloat16, __nv_bfloat16, 0>(out, partials, counters, q, k_cache, v_cache, block_table, seq_lens, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale, stages, fresh, window, nullptr, nullptr, head_dim);
}
/** Causal prefill attention of any even head_dim from 16 to 256 (rounded up to 16: hp): grid
 *  (n_tokens / 64 + n_seqs, n_heads), 128 threads, 384 * (hp + 8) bytes of dynamic shared
 *  memory. window > 0: a query at position p attends only to positions p - window + 1 .. p. */
extern "C" __global__ void tc_k_attn_prefill_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *k_cache,
        const __nv_bfloat16 *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window, int32_t head_dim)
{
    tc::await_inputs();
    attention_cu::prefill<__nv_bfloat16, __nv_bfloat16, 0>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window, nullptr, nullptr, head_dim);
}
/** Write row i of k and v (row_elems = n_kv_heads * head_dim) as FP8 E4M3 into cache slot
 *  slots[i] (skipped when negative), each value divided by its kv head's scale (k_scale,
 *  v_scale f32 [n_kv_heads]; NULL: 1), saturating at +-448; grid (rows, any), 256 threads. */
extern "C" __global__ void tc_k_attn_store_f16_f8(uint8_t *k_cache, uint8_t *v_cache, const __half *k, const __half *v,
                                                const int32_t *slots, int64_t row_elems, int64_t k_stride,
                                                int64_t v_stride, const float *k_scale, const float *v_scale,
                                                int32_t head_dim)
{
    tc::await_inputs();
    attention_cu::store(reinterpret_cast<tc::f8e4m3 *>(k_cache), reinterpret_cast<tc::f8e4m3 *>(v_cache), k, v,
                        slots, row_elems, k_stride, v_stride, k_scale, v_scale, head_dim);
}
/** Decode attention over an FP8 E4M3 cache, head_dim 64: as tc_k_attn_decode64_f16, with
 *  stages * 10240 bytes of dynamic shared memory (stages 1 to 3). k_scale, v_scale
 *  (NULL: 1): each kv head's scales (f32 [n_kv_heads]); the cache holds values divided by them. */
extern "C" __global__ void tc_k_attn_decode64_f16_f8(__half *out, float *partials, int32_t *counters, const __half *q,
        const uint8_t *k_cache, const uint8_t *v_cache, const int32_t *block_table, const int32_t *seq_lens,
        int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks, int64_t q_stride,
        int64_t out_stride, int32_t chunk, float scale, int32_t stages, int32_t fresh, int32_t window, const float *k_scale,
        const float *v_scale)
{
    attention_cu::decode<__half, tc::f8e4m3, 64>(out, partials, counters, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache), reinterpret_cast<const tc::f8e4m3 *>(v_cache), block_table, seq_lens, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale, stages, fresh, window, k_scale, v_scale);
}
/** Causal prefill attention over an FP8 E4M3 cache, head_dim 64: grid (n_tokens / 64 + n_seqs,
 *  n_heads), 128 threads, 38912 bytes of dynamic shared memory. window > 0: a query at position p attends only to positions p - window + 1 .. p. k_scale, v_scale
 *  (NULL: 1): each kv head's scales (f32 [n_kv_heads]); the cache holds values divided by them. */
extern "C" __global__ void tc_k_attn_prefill64_f16_f8(__half *out, const __half *q, const uint8_t *k_cache,
        const uint8_t *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window, const float *k_scale,
        const float *v_scale)
{
    tc::await_inputs();
    attention_cu::prefill<__half, tc::f8e4m3, 64>(out, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache), reinterpret_cast<const tc::f8e4m3 *>(v_cache), block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window, k_scale, v_scale);
}
/** Decode attention over an FP8 E4M3 cache, head_dim 128: as tc_k_attn_decode128_f16, with
 *  stages * 18432 bytes of dynamic shared memory (stages 1 to 3). k_scale, v_scale
 *  (NULL: 1): each kv head's scales (f32 [n_kv_heads]); the cache holds values divided by them. */
extern "C" __global__ void tc_k_attn_decode128_f16_f8(__half *out, float *partials, int32_t *counters, const __half *q,
        const uint8_t *k_cache, const uint8_t *v_cache, const int32_t *block_table, const int32_t *seq_lens,
        int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks, int64_t q_stride,
        int64_t out_stride, int32_t chunk, float scale, int32_t stages, int32_t fresh, int32_t window, const float *k_scale,
        const float *v_scale)
{
    attention_cu::decode<__half, tc::f8e4m3, 128>(out, partials, counters, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache), reinterpret_cast<const tc::f8e4m3 *>(v_cache), block_table, seq_lens, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale, stages, fresh, window, k_scale, v_scale);
}
/** Causal prefill attention over an FP8 E4M3 cache, head_dim 128: grid (n_tokens / 64 + n_seqs,
 *  n_heads), 128 threads, 71680 bytes of dynamic shared memory. window > 0: a query at position p attends only to positions p - window + 1 .. p. k_scale, v_scale
 *  (NULL: 1): each kv head's scales (f32 [n_kv_heads]); the cache holds values divided by them. */
extern "C" __global__ void tc_k_attn_prefill128_f16_f8(__half *out, const __half *q, const uint8_t *k_cache,
        const uint8_t *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window, const float *k_scale,
        const float *v_scale)
{
    tc::await_inputs();
    attention_cu::prefill<__half, tc::f8e4m3, 128>(out, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache), reinterpret_cast<const tc::f8e4m3 *>(v_cache), block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window, k_scale, v_scale);
}
/** Decode attention over an FP8 E4M3 cache of any even head_dim from 16 to 256 (rounded up to
 *  16: hp): as tc_k_attn_decode_f16, with stages * 128 * (hp + 16) + 128 * (hp + 8) bytes of
 *  dynamic shared memory. k_scale, v_scale
 *  (NULL: 1): each kv head's scales (f32 [n_kv_heads]); the cache holds values divided by them. */
extern "C" __global__ void tc_k_attn_decode_f16_f8(__half *out, float *partials, int32_t *counters, const __half *q,
        const uint8_t *k_cache, const uint8_t *v_cache, const int32_t *block_table, const int32_t *seq_lens,
        int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks, int64_t q_stride,
        int64_t out_stride, int32_t chunk, float scale, int32_t stages, int32_t fresh, int32_t window, const float *k_scale,
        const float *v_scale, int32_t head_dim)
{
    attention_cu::decode<__half, tc::f8e4m3, 0>(out, partials, counters, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache), reinterpret_cast<const tc::f8e4m3 *>(v_cache), block_table, seq_lens, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale, stages, fresh, window, k_scale, v_scale, head_dim);
}
/** Causal prefill attention over an FP8 E4M3 cache of any even head_dim from 16 to 256 (rounded
 *  up to 16: hp): as tc_k_attn_prefill_f16, with 256 * (hp + 8) + 128 * (hp + 16) bytes of
 *  dynamic shared memory. k_scale, v_scale
 *  (NULL: 1): each kv head's scales (f32 [n_kv_heads]); the cache holds values divided by them. */
extern "C" __global__ void tc_k_attn_prefill_f16_f8(__half *out, const __half *q, const uint8_t *k_cache,
        const uint8_t *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window, const float *k_scale,
        const float *v_scale, int32_t head_dim)
{
    tc::await_inputs();
    attention_cu::prefill<__half, tc::f8e4m3, 0>(out, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache), reinterpret_cast<const tc::f8e4m3 *>(v_cache), block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window, k_scale, v_scale, head_dim);
}
/** Write row i of k and v (row_elems = n_kv_heads * head_dim) as FP8 E4M3 into cache slot
 *  slots[i] (skipped when negative), each value divided by its kv head's scale (k_scale,
 *  v_scale f32 [n_kv_heads]; NULL: 1), saturating at +-448; grid (rows, any), 256 threads. */
extern "C" __global__ void tc_k_attn_store_bf16_f8(uint8_t *k_cache, uint8_t *v_cache, const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                                                const int32_t *slots, int64_t row_elems, int64_t k_stride,
                                                int64_t v_stride, const float *k_scale, const float *v_scale,
                                                int32_t head_dim)
{
    tc::await_inputs();
    attention_cu::store(reinterpret_cast<tc::f8e4m3 *>(k_cache), reinterpret_cast<tc::f8e4m3 *>(v_cache), k, v,
                        slots, row_elems, k_stride, v_stride, k_scale, v_scale, head_dim);
}
/** Decode attention over an FP8 E4M3 cache, head_dim 64: as tc_k_attn_decode64_bf16, with
 *  stages * 10240 bytes of dynamic shared memory (stages 1 to 3). k_scale, v_scale
 *  (NULL: 1): each kv head's scales (f32 [n_kv_heads]); the cache holds values divided by them. */
extern "C" __global__ void tc_k_attn_decode64_bf16_f8(__nv_bfloat16 *out, float *partials, int32_t *counters, const __nv_bfloat16 *q,
        const uint8_t *k_cache, const uint8_t *v_cache, const int32_t *block_table, const int32_t *seq_lens,
        int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks, int64_t q_stride,
        int64_t out_stride, int32_t chunk, float scale, int32_t stages, int32_t fresh, int32_t window, const float *k_scale,
        const float *v_scale)
{
    attention_cu::decode<__nv_bfloat16, tc::f8e4m3, 64>(out, partials, counters, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache), reinterpret_cast<const tc::f8e4m3 *>(v_cache), block_table, seq_lens, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale, stages, fresh, window, k_scale, v_scale);
}
/** Causal prefill attention over an FP8 E4M3 cache, head_dim 64: grid (n_tokens / 64 + n_seqs,
 *  n_heads), 128 threads, 38912 bytes of dynamic shared memory. window > 0: a query at position p attends only to positions p - window + 1 .. p. k_scale, v_scale
 *  (NULL: 1): each kv head's scales (f32 [n_kv_heads]); the cache holds values divided by them. */
extern "C" __global__ void tc_k_attn_prefill64_bf16_f8(__nv_bfloat16 *out, const __nv_bfloat16 *q, const uint8_t *k_cache,
        const uint8_t *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window, const float *k_scale,
        const float *v_scale)
{
    tc::await_inputs();
    attention_cu::prefill<__nv_bfloat16, tc::f8e4m3, 64>(out, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache), reinterpret_cast<const tc::f8e4m3 *>(v_cache), block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window, k_scale, v_scale);
}
/** Decode attention over an FP8 E4M3 cache, head_dim 128: as tc_k_attn_decode128_bf16, with
 *  stages * 18432 bytes of dynamic shared memory (stages 1 to 3). k_scale, v_scale
 *  (NULL: 1): each kv head's scales (f32 [n_kv_heads]); the cache holds values divided by them. */
extern "C" __global__ void tc_k_attn_decode128_bf16_f8(__nv_bfloat16 *out, float *partials, int32_t *counters, const __nv_bfloat16 *q,
        const uint8_t *k_cache, const uint8_t *v_cache, const int32_t *block_table, const int32_t *seq_lens,
        int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks, int64_t q_stride,
        int64_t out_stride, int32_t chunk, float scale, int32_t stages, int32_t fresh, int32_t window, const float *k_scale,
        const float *v_scale)
{
    attention_cu::decode<__nv_bfloat16, tc::f8e4m3, 128>(out, partials, counters, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache), reinterpret_cast<const tc::f8e4m3 *>(v_cache), block_table, seq_lens, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale, stages, fresh, window, k_scale, v_scale);
}
/** Causal prefill attention over an FP8 E4M3 cache, head_dim 128: grid (n_tokens / 64 + n_seqs,
 *  n_heads), 128 threads, 71680 bytes of dynamic shared memory. window > 0: a query at position p attends only to positions p - window + 1 .. p. k_scale, v_scale
 *  (NULL: 1): each kv head's scales (f32 [n_kv_heads]); the cache holds values divided by them. */
extern "C" __global__ void tc_k_attn_prefill128_bf16_f8(__nv_bfloat16 *out, const __nv_bfloat16 *q, const uint8_t *k_cache,
        const uint8_t *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window, const float *k_scale,
        const float *v_scale)
{
    tc::await_inputs();
    attention_cu::prefill<__nv_bfloat16, tc::f8e4m3, 128>(out, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache), reinterpret_cast<const tc::f8e4m3 *>(v_cache), block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window, k_scale, v_scale);
}
/** Decode attention over an FP8 E4M3 cache of any even head_dim from 16 to 256 (rounded up to
 *  16: hp): as tc_k_attn_decode_bf16, with stages * 128 * (hp + 16) + 128 * (hp + 8) bytes of
 *  dynamic shared memory. k_scale, v_scale
 *  (NULL: 1): each kv head's scales (f32 [n_kv_heads]); the cache holds values divided by them. */
extern "C" __global__ void tc_k_attn_decode_bf16_f8(__nv_bfloat16 *out, float *partials, int32_t *counters, const __nv_bfloat16 *q,
        const uint8_t *k_cache, const uint8_t *v_cache, const int32_t *block_table, const int32_t *seq_lens,
        int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks, int64_t q_stride,
        int64_t out_stride, int32_t chunk, float scale, int32_t stages, int32_t fresh, int32_t window, const float *k_scale,
        const float *v_scale, int32_t head_dim)
{
    attention_cu::decode<__nv_bfloat16, tc::f8e4m3, 0>(out, partials, counters, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache), reinterpret_cast<const tc::f8e4m3 *>(v_cache), block_table, seq_lens, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale, stages, fresh, window, k_scale, v_scale, head_dim);
}
/** Causal prefill attention over an FP8 E4M3 cache of any even head_dim from 16 to 256 (rounded
 *  up to 16: hp): as tc_k_attn_prefill_bf16, with 256 * (hp + 8) + 128 * (hp + 16) bytes of
 *  dynamic shared memory. k_scale, v_scale
 *  (NULL: 1): each kv head's scales (f32 [n_kv_heads]); the cache holds values divided by them. */
extern "C" __global__ void tc_k_attn_prefill_bf16_f8(__nv_bfloat16 *out, const __nv_bfloat16 *q, const uint8_t *k_cache,
        const uint8_t *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window, const float *k_scale,
        const float *v_scale, int32_t head_dim)
{
    tc::await_inputs();
    attention_cu::prefill<__nv_bfloat16, tc::f8e4m3, 0>(out, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache), reinterpret_cast<const tc::f8e4m3 *>(v_cache), block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window, k_scale, v_scale, head_dim);
}
/** The FP8 scales of a batch of k and v rows [rows, n_kv_heads, head_dim] (rows k_stride and
 *  v_stride elements apart): block (h, 0) writes k_scale[h], block (h, 1) v_scale[h], the
 *  power of two 2^(ceil(log2(amax)) - 5) of the head's largest magnitude (1 where it is 0);
 *  grid (n_kv_heads, 2), 256 threads. */
extern "C" __global__ void tc_k_attn_scales_f16(float *k_scale, float *v_scale, const __half *k, const __half *v,
                                              int64_t rows, int32_t head_dim, int64_t k_stride,
                                              int64_t v_stride)
{
    tc::await_inputs();
    attention_cu::scales(k_scale, v_scale, k, v, rows, head_dim, k_stride, v_stride);
}
/** The FP8 scales of a batch of k and v rows [rows, n_kv_heads, head_dim] (rows k_stride and
 *  v_stride elements apart): block (h, 0) writes k_scale[h], block (h, 1) v_scale[h], the
 *  power of two 2^(ceil(log2(amax)) - 5) of the head's largest magnitude (1 where it is 0);
 *  grid (n_kv_heads, 2), 256 threads. */
extern "C" __global__ void tc_k_attn_scales_bf16(float *k_scale, float *v_scale, const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                                              int64_t rows, int32_t head_dim, int64_t k_stride,
                                              int64_t v_stride)
{
    tc::await_inputs();
    attention_cu::scales(k_scale, v_scale, k, v, rows, head_dim, k_stride, v_stride);
}
