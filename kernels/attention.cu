// Attention over a paged KV cache (layout in src/ops/ops.h): writing new keys and values into
// their slots, decode (one query per sequence, split over the cached length as in
// flash-decoding; the last split to finish merges) and causal prefill (flash-attention style
// online softmax over key tiles held in shared memory; Dao et al. 2022). f32 arithmetic
// throughout. A cache holds the activations' type, or FP8 E4M3 (half the bytes of a 16-bit
// cache): its tiles are copied to shared memory as bytes; decode builds f16 tensor-core
// fragments from them, prefill widens them there to the activations' type, exactly.
#include <limits.h>

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
// 16-byte vectors of T where every row is aligned to them.
template <typename T, typename C>
__device__ void store(C *__restrict__ k_cache, C *__restrict__ v_cache, const T *__restrict__ k,
                      const T *__restrict__ v, const int32_t *slots, int64_t row_elems, int64_t k_stride,
                      int64_t v_stride)
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
            kd[i] = tc::from_f32<C>(tc::to_f32(ks[i]));
            vd[i] = tc::from_f32<C>(tc::to_f32(vs[i]));
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
// once). f32 caches take a SIMT path with f32
// arithmetic throughout. The warps merge at the end. With several splits each writes its
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
// multiple of kTile): keys to rows of ks, values to rows of vs (kv_ld apart); tokens at or past
// t1 are zero-filled. With lo > 0 only the tokens in [lo, hi) are copied and nothing is
// zero-filled (the rest of a tile whose first part was copied earlier, up to hi).
template <typename T, int HD>
__device__ __forceinline__ void load_kv_rows(T *ks, T *vs, const T *k_cache, const T *v_cache, const int32_t *tbl,
                                             int ts, int t1, int block_size, int n_kv_heads, int kvh,
                                             int lane, int lo = 0, int hi = INT_MAX)
{
    constexpr int LD = kv_ld<T, HD>(), VE = 16 / (int)sizeof(T), CR = HD / VE, RP = 32 / CR;
    int col = lane % CR;
    // A tile lies in one cache block when the block size is a multiple of the tile: one table
    // read for the tile instead of one per row.
    bool one_block = (block_size % kTile) == 0;
    int64_t base = 0;
    if (one_block && ts < t1 && ts + kTile > lo && ts < hi) { // a table entry only where rows are copied
        uint32_t bi = (uint32_t)ts / (uint32_t)block_size;
        base = (int64_t)tbl[bi] * block_size + ((uint32_t)ts - bi * (uint32_t)block_size);
    }
#pragma unroll
    for (int i = 0; i < kTile / RP; i++) {
        int r = lane / CR + i * RP;
        int t = ts + r;
        bool ok = t < t1 && t >= lo && t < hi;
        if (!ok && (t < t1 || lo > 0))
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
    int seq, h0, g, kvh, used, n_tiles, mine, t0, t1;
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
                                w.t0 + (warp + j * kWarps) * kTile, w.t1, block_size, n_kv_heads, w.kvh,
                                lane, lo, hi);
        tc::cp_commit();
    }
    // Ask L2 (not shared memory) for tile j's rows: lane l < 16 for row l's keys, lane l >= 16
    // for row l - 16's values (sm_90's bulk prefetch; nothing on earlier GPUs).
    __device__ __forceinline__ void prefetch(const DecodeWork &w, int warp, int lane, int j) const
    {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        int t = w.t0 + (warp + j * kWarps) * kTile + (lane & 15);
        if (j < w.mine && t < w.t1) {
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
                bool ok = ts + 8 * nt + 2 * pos + e < w.t1;
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
                bool ok = ts + 8 * nt + 2 * pos + e < w.t1;
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

// f32 caches: lane l scores token l % 16 over half of the dimensions (l / 16), the halves
// summed by one shuffle; values accumulate with each lane owning HD/32 dimensions.
template <typename T, int HD>
__device__ void decode_warp_simt(const DecodeWork &w, const DecodeRing<T, HD> &ring, const T *q, int64_t q_stride,
                                 float scale, float *qs, float *ms, float *ls, float *as)
{
    constexpr int LD = kv_ld<T, HD>(), VE = 16 / (int)sizeof(T), D = HD / 32,
                  HALF = HD / 2;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int e = threadIdx.x; e < w.g * HD; e += blockDim.x)
        qs[e] = tc::to_f32(q[w.seq * q_stride + (int64_t)w.h0 * HD + e]) * scale;
    __syncthreads();
    float m[kMaxGroup], l[kMaxGroup], acc[kMaxGroup][D];
#pragma unroll
    for (int h = 0; h < kMaxGroup; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
#pragma unroll
        for (int d = 0; d < D; d++)
            acc[h][d] = 0.0f;
    }
    int r = lane & (kTile - 1), half = lane >> 4;
    for (int j = 0; j < w.mine; j++) {
        const T *kt = ring.next(w, warp, lane, j), *vt = kt + kTile * LD;
        bool valid = w.t0 + (warp + j * kWarps) * kTile + r < w.t1;
        // Two partial sums per head: one chain of HD/2 dependent FMAs would be latency-bound.
        float d2[kMaxGroup][2];
#pragma unroll
        for (int h = 0; h < kMaxGroup; h++)
            d2[h][0] = d2[h][1] = 0.0f;
#pragma unroll 2
        for (int c = 0; c < HALF / VE; c++) {
            tc::Vec<T, VE> kv = *reinterpret_cast<const tc::Vec<T, VE> *>(kt + r * LD + half * HALF + c * VE);
#pragma unroll
            for (int h = 0; h < kMaxGroup; h++) {
                if (h < w.g) {
#pragma unroll
                    for (int e = 0; e < VE; e += 4) {
                        float4 qv = *reinterpret_cast<const float4 *>(&qs[h * HD + half * HALF + c * VE + e]);
                        d2[h][0] = fmaf(qv.x, tc::to_f32(kv.v[e]), d2[h][0]);
                        d2[h][1] = fmaf(qv.y, tc::to_f32(kv.v[e + 1]), d2[h][1]);
                        d2[h][0] = fmaf(qv.z, tc::to_f32(kv.v[e + 2]), d2[h][0]);
                        d2[h][1] = fmaf(qv.w, tc::to_f32(kv.v[e + 3]), d2[h][1]);
                    }
                }
            }
        }
        float p[kMaxGroup];
#pragma unroll
        for (int h = 0; h < kMaxGroup; h++) {
            p[h] = 0.0f;
            if (h < w.g) {
                float s = d2[h][0] + d2[h][1];
                s += __shfl_xor_sync(0xffffffffu, s, 16);
                s = valid ? s : -INFINITY;
                float mx = s;
#pragma unroll
                for (int o = kTile / 2; o > 0; o >>= 1)
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
                float mn = fmaxf(m[h], mx), corr = __expf(m[h] - mn);
                p[h] = valid ? __expf(s - mn) : 0.0f;
                float ps = p[h];
#pragma unroll
                for (int o = kTile / 2; o > 0; o >>= 1)
                    ps += __shfl_xor_sync(0xffffffffu, ps, o);
                l[h] = l[h] * corr + ps;
#pragma unroll
                for (int d = 0; d < D; d++)
                    acc[h][d] *= corr;
                m[h] = mn;
            }
        }
        // Rows past t1 were zero-filled and their p is 0.
#pragma unroll 4
        for (int t = 0; t < kTile; t++) {
            tc::Vec<T, D> vv = *reinterpret_cast<const tc::Vec<T, D> *>(vt + t * LD + lane * D);
#pragma unroll
            for (int h = 0; h < kMaxGroup; h++) {
                if (h < w.g) {
                    float pt = __shfl_sync(0xffffffffu, p[h], t);
#pragma unroll
                    for (int d = 0; d < D; d++)
                        acc[h][d] = fmaf(pt, tc::to_f32(vv.v[d]), acc[h][d]);
                }
            }
        }
    }
    tc::cp_wait<0>();
    __syncthreads(); // the rings are free
#pragma unroll
    for (int h = 0; h < kMaxGroup; h++) {
        if (h < w.g) {
            if (lane == 0) {
                ms[warp * kMaxGroup + h] = m[h];
                ls[warp * kMaxGroup + h] = l[h];
            }
#pragma unroll
            for (int d = 0; d < D; d++)
                as[(warp * kMaxGroup + h) * HD + lane * D + d] = acc[h][d];
        }
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

template <typename T, typename C, int HD>
__device__ void decode(T *out, float *part, int32_t *counters, const T *q, const C *k_cache, const C *v_cache,
                       const int32_t *table, const int32_t *seq_lens, int n_heads, int n_kv_heads, int block_size,
                       int max_blocks, int64_t q_stride, int64_t out_stride, int chunk, float scale, int stages,
                       int fresh)
{
    constexpr int STAGE = decode_stage_elems<C, HD>(), REC = HD + 4;
    int S = stages;
    // fresh >= 0: the kernel before this one wrote at most each sequence's newest `fresh` cached
    // rows (and not seq_lens or the table): the lengths, the table and the older rows of the
    // first tiles are read while it finishes, the rest after the wait. Else all after it.
    if (fresh < 0)
        tc::await_inputs();
    // Dynamic shared memory: the warps' rings, then (f32) the block's queries.
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
    chunk = split_chunk(len, splits, chunk);
    w.used = len > 0 ? min(splits, (int)(((uint32_t)len + chunk - 1) / (uint32_t)chunk)) : 1;
    if (split >= w.used)
        return;
    w.t0 = split * chunk;
    w.t1 = min(len, w.t0 + chunk);
    w.n_tiles = w.t1 > w.t0 ? (w.t1 - w.t0 + kTile - 1) / kTile : 0;
    w.mine = w.n_tiles > warp ? (w.n_tiles - warp + kWarps - 1) / kWarps : 0;
    DecodeRing<C, HD> ring = { reinterpret_cast<C *>(sh) + warp * S * STAGE,
                               k_cache,
                               v_cache,
                               tbl,
                               block_size,
                               n_kv_heads,
                               stages,
                               false };
    int lane = threadIdx.x & 31, cut = fresh < 0 ? INT_MAX : len - fresh;
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
    if constexpr (sizeof(C) == 1)
        decode_warp_f8<T, HD>(w, ring, q, q_stride, scale, ms, ls, as);
    else if constexpr (sizeof(T) == 2)
        decode_warp_mma<T, HD>(w, ring, q, q_stride, scale, ms, ls, as);
    else
        decode_warp_simt<T, HD>(w, ring, q, q_stride, scale, sh + kWarps * S * STAGE * sizeof(T) / sizeof(float),
                                ms, ls, as);
    __syncthreads();

    int g = w.g, used = w.used, seq = w.seq, h0 = w.h0;
    for (int e = threadIdx.x; e < g * HD; e += blockDim.x) {
        int h = e / HD, d = e % HD;
        float mx = -INFINITY, sl = 0.0f, sa = 0.0f;
#pragma unroll
        for (int i = 0; i < kWarps; i++)
            mx = fmaxf(mx, ms[i * kMaxGroup + h]);
#pragma unroll
        for (int i = 0; i < kWarps; i++) {
            float mw = ms[i * kMaxGroup + h];
            float f = mw == -INFINITY ? 0.0f : __expf(mw - mx);
            sl += ls[i * kMaxGroup + h] * f;
            sa += as[(i * kMaxGroup + h) * HD + d] * f;
        }
        if (used == 1) {
            out[seq * out_stride + (int64_t)(h0 + h) * HD + d] = tc::from_f32<T>(sl > 0.0f ? sa / sl : 0.0f);
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
    for (int e = threadIdx.x; e < g * (HD / 4); e += blockDim.x) {
        int h = e / (HD / 4), d4 = e % (HD / 4);
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
        float inv = sl > 0.0f ? 1.0f / sl : 0.0f;
        T *o = out + seq * out_stride + (int64_t)(h0 + h) * HD + d4 * 4;
#pragma unroll
        for (int i = 0; i < 4; i++)
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

// Prefill of f32 caches: block (tile of BQ query rows of one sequence, head); 128 threads, 4
// per query row.
constexpr int BQ = 32, BK = 32, kPrefillThreads = 128;

template <typename T, int HD>
__device__ void prefill_simt(T *out, const T *q, const T *k_cache, const T *v_cache, const int32_t *table,
                             const int32_t *seq_lens, const int32_t *q_start, int n_seqs, int n_heads,
                             int n_kv_heads, int block_size, int max_blocks, int64_t q_stride, int64_t out_stride,
                             float scale)
{
    extern __shared__ float sh[];
    float *qs = sh, *ks = qs + BQ * (HD + 1), *vs = ks + BK * (HD + 1), *ps = vs + BK * (HD + 1);
    __shared__ int seq_tile[2];
    __shared__ const T *krow[BK], *vrow[BK];
    prefill_tile(q_start, n_seqs, BQ, false, seq_tile);
    int s_seq = seq_tile[0], s_tile = seq_tile[1];
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


// Prefill of 16-bit caches on the tensor cores (flash attention 2's arrangement, Dao 2023):
// block (tile of 64 query rows of one sequence, head) of 4 warps, 16 rows each. Key and value
// tiles of 64 tokens go through shared memory (cp.async, double-buffered); each warp keeps its
// queries as A fragments, computes its 16 x 64 scores with m16n8k16 products, updates its
// rows' online softmax in registers (lane l holds rows l / 4 and l / 4 + 8) and multiplies the
// probabilities, rounded to T, by the values straight from the score registers. Warps whose
// rows all precede a key tile skip it. The sequence's last query tiles (the longest) go first.
constexpr int kPBQ = 64, kPBK = 64;
static_assert(kPBK == kWarps * kTile, "each warp of a prefill block loads kTile rows of a key tile");

template <typename T, typename C, int HD>
__device__ void prefill_mma(T *out, const T *q, const C *k_cache, const C *v_cache, const int32_t *table,
                            const int32_t *seq_lens, const int32_t *q_start, int n_seqs, int n_heads,
                            int n_kv_heads, int block_size, int max_blocks, int64_t q_stride, int64_t out_stride,
                            float scale)
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
    int n_kt = (int)((kend + kPBK - 1) / kPBK);
    const int32_t *tbl = table + (int64_t)seq * max_blocks;

    auto load = [&](int kt) { // warp w copies rows 16 w .. 16 w + 15 of key tile kt
        if (kt < n_kt) {
            constexpr int LC = kv_ld<C, HD>();
            C *ks = smem + (kt & 1) * STAGE + kTile * warp * LC;
            load_kv_rows<C, HD>(ks, ks + kPBK * LC, k_cache, v_cache, tbl, kt * kPBK + kTile * warp, (int)kend,
                                block_size, n_kv_heads, kvh, lane);
        }
        tc::cp_commit();
    };
    load(0);

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

    for (int kt = 0; kt < n_kt; kt++) {
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
        if (active && k0 <= wpos + 15) {
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
                    int64_t key = k0 + 8 * nt + 2 * pos + (e & 1), qpos = wpos + gr + 8 * (e >> 1);
                    s[nt][e] = key <= qpos ? s[nt][e] * scale : -INFINITY;
                    mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
                }
            float corr[2];
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
                mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
                float mn = fmaxf(mr[hr], mx[hr]); // finite: key 0 is visible to every row
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
        float inv = lr[hr] > 0.0f ? 1.0f / lr[hr] : 0.0f;
        T *orow = out + (qbeg + r0 + rr) * out_stride + (int64_t)head * HD + 2 * pos;
#pragma unroll
        for (int n = 0; n < NT; n++) {
            orow[8 * n] = tc::from_f32<T>(o[n][2 * hr] * inv);
            orow[8 * n + 1] = tc::from_f32<T>(o[n][2 * hr + 1] * inv);
        }
    }
}


template <typename T, typename C, int HD>
__device__ void prefill(T *out, const T *q, const C *k_cache, const C *v_cache, const int32_t *table,
                        const int32_t *seq_lens, const int32_t *q_start, int n_seqs, int n_heads, int n_kv_heads,
                        int block_size, int max_blocks, int64_t q_stride, int64_t out_stride, float scale)
{
    if constexpr (sizeof(T) == 2)
        prefill_mma<T, C, HD>(out, q, k_cache, v_cache, table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads,
                           block_size, max_blocks, q_stride, out_stride, scale);
    else
        prefill_simt<T, HD>(out, q, k_cache, v_cache, table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads,
                            block_size, max_blocks, q_stride, out_stride, scale);
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
/** Decode attention, head_dim 64: grid (n_seqs, n_kv_heads * ceil(group / 8), splits), 128
 *  threads, stages * 34816 + 2048 bytes of dynamic shared memory (stages 1 to 3); a split covers at
 *  most `chunk` cached tokens (a multiple of 64; less where the sequence is shorter), at most
 *  256 splits. With several splits in use, partials holds
 *  [n_seqs, n_heads, splits, 64 + 4] floats and counters n_seqs * gridDim.y zeroed int32 (left
 *  zeroed). fresh >= 0: only each sequence's newest `fresh` rows may come from the previous
 *  kernel (the lengths, the table and older rows are read before it has finished); -1: none
 *  is read before. */
extern "C" __global__ void tc_k_attn_decode64_f32(float *out, float *partials, int32_t *counters, const float *q,
                                              const float *k_cache, const float *v_cache,
                                              const int32_t *block_table, const int32_t *seq_lens,
                                              int32_t n_heads, int32_t n_kv_heads, int32_t block_size,
                                              int32_t max_blocks, int64_t q_stride, int64_t out_stride,
                                              int32_t chunk, float scale, int32_t stages, int32_t fresh)
{
    attention_cu::decode<float, float, 64>(out, partials, counters, q, k_cache, v_cache, block_table, seq_lens, n_heads,
                                  n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale, stages, fresh);
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
    attention_cu::prefill<float, float, 64>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs,
                                   n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale);
}
/** Decode attention, head_dim 128: grid (n_seqs, n_kv_heads * ceil(group / 8), splits), 128
 *  threads, stages * 67584 + 4096 bytes of dynamic shared memory (stages 1 to 3); a split covers at
 *  most `chunk` cached tokens (a multiple of 64; less where the sequence is shorter), at most
 *  256 splits. With several splits in use, partials holds
 *  [n_seqs, n_heads, splits, 128 + 4] floats and counters n_seqs * gridDim.y zeroed int32 (left
 *  zeroed). fresh >= 0: only each sequence's newest `fresh` rows may come from the previous
 *  kernel (the lengths, the table and older rows are read before it has finished); -1: none
 *  is read before. */
extern "C" __global__ void tc_k_attn_decode128_f32(float *out, float *partials, int32_t *counters, const float *q,
                                              const float *k_cache, const float *v_cache,
                                              const int32_t *block_table, const int32_t *seq_lens,
                                              int32_t n_heads, int32_t n_kv_heads, int32_t block_size,
                                              int32_t max_blocks, int64_t q_stride, int64_t out_stride,
                                              int32_t chunk, float scale, int32_t stages, int32_t fresh)
{
    attention_cu::decode<float, float, 128>(out, partials, counters, q, k_cache, v_cache, block_table, seq_lens, n_heads,
                                  n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale, stages, fresh);
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
    attention_cu::prefill<float, float, 128>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs,
                                   n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale);
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
 *  is read before. */
extern "C" __global__ void tc_k_attn_decode64_f16(__half *out, float *partials, int32_t *counters, const __half *q,
                                              const __half *k_cache, const __half *v_cache,
                                              const int32_t *block_table, const int32_t *seq_lens,
                                              int32_t n_heads, int32_t n_kv_heads, int32_t block_size,
                                              int32_t max_blocks, int64_t q_stride, int64_t out_stride,
                                              int32_t chunk, float scale, int32_t stages, int32_t fresh)
{
    attention_cu::decode<__half, __half, 64>(out, partials, counters, q, k_cache, v_cache, block_table, seq_lens, n_heads,
                                  n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale, stages, fresh);
}
/** Causal prefill attention, head_dim 64: grid (n_tokens / 64 + n_seqs, n_heads), 128 threads,
 *  36864 bytes of dynamic shared memory. */
extern "C" __global__ void tc_k_attn_prefill64_f16(__half *out, const __half *q, const __half *k_cache,
                                               const __half *v_cache, const int32_t *block_table,
                                               const int32_t *seq_lens, const int32_t *q_start,
                                               int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads,
                                               int32_t block_size, int32_t max_blocks, int64_t q_stride,
                                               int64_t out_stride, float scale)
{
    tc::await_inputs();
    attention_cu::prefill<__half, __half, 64>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs,
                                   n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale);
}
/** Decode attention, head_dim 128: grid (n_seqs, n_kv_heads * ceil(group / 8), splits), 128
 *  threads, stages * 34816 bytes of dynamic shared memory (stages 1 to 3); a split covers at
 *  most `chunk` cached tokens (a multiple of 64; less where the sequence is shorter), at most
 *  256 splits. With several splits in use, partials holds
 *  [n_seqs, n_heads, splits, 128 + 4] floats and counters n_seqs * gridDim.y zeroed int32 (left
 *  zeroed). fresh >= 0: only each sequence's newest `fresh` rows may come from the previous
 *  kernel (the lengths, the table and older rows are read before it has finished); -1: none
 *  is read before. */
extern "C" __global__ void tc_k_attn_decode128_f16(__half *out, float *partials, int32_t *counters, const __half *q,
                                              const __half *k_cache, const __half *v_cache,
                                              const int32_t *block_table, const int32_t *seq_lens,
                                              int32_t n_heads, int32_t n_kv_heads, int32_t block_size,
                                              int32_t max_blocks, int64_t q_stride, int64_t out_stride,
                                              int32_t chunk, float scale, int32_t stages, int32_t fresh)
{
    attention_cu::decode<__half, __half, 128>(out, partials, counters, q, k_cache, v_cache, block_table, seq_lens, n_heads,
                                  n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale, stages, fresh);
}
/** Causal prefill attention, head_dim 128: grid (n_tokens / 64 + n_seqs, n_heads), 128 threads,
 *  69632 bytes of dynamic shared memory. */
extern "C" __global__ void tc_k_attn_prefill128_f16(__half *out, const __half *q, const __half *k_cache,
                                               const __half *v_cache, const int32_t *block_table,
                                               const int32_t *seq_lens, const int32_t *q_start,
                                               int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads,
                                               int32_t block_size, int32_t max_blocks, int64_t q_stride,
                                               int64_t out_stride, float scale)
{
    tc::await_inputs();
    attention_cu::prefill<__half, __half, 128>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs,
                                   n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale);
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
 *  is read before. */
extern "C" __global__ void tc_k_attn_decode64_bf16(__nv_bfloat16 *out, float *partials, int32_t *counters, const __nv_bfloat16 *q,
                                              const __nv_bfloat16 *k_cache, const __nv_bfloat16 *v_cache,
                                              const int32_t *block_table, const int32_t *seq_lens,
                                              int32_t n_heads, int32_t n_kv_heads, int32_t block_size,
                                              int32_t max_blocks, int64_t q_stride, int64_t out_stride,
                                              int32_t chunk, float scale, int32_t stages, int32_t fresh)
{
    attention_cu::decode<__nv_bfloat16, __nv_bfloat16, 64>(out, partials, counters, q, k_cache, v_cache, block_table, seq_lens, n_heads,
                                  n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale, stages, fresh);
}
/** Causal prefill attention, head_dim 64: grid (n_tokens / 64 + n_seqs, n_heads), 128 threads,
 *  36864 bytes of dynamic shared memory. */
extern "C" __global__ void tc_k_attn_prefill64_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *k_cache,
                                               const __nv_bfloat16 *v_cache, const int32_t *block_table,
                                               const int32_t *seq_lens, const int32_t *q_start,
                                               int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads,
                                               int32_t block_size, int32_t max_blocks, int64_t q_stride,
                                               int64_t out_stride, float scale)
{
    tc::await_inputs();
    attention_cu::prefill<__nv_bfloat16, __nv_bfloat16, 64>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs,
                                   n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale);
}
/** Decode attention, head_dim 128: grid (n_seqs, n_kv_heads * ceil(group / 8), splits), 128
 *  threads, stages * 34816 bytes of dynamic shared memory (stages 1 to 3); a split covers at
 *  most `chunk` cached tokens (a multiple of 64; less where the sequence is shorter), at most
 *  256 splits. With several splits in use, partials holds
 *  [n_seqs, n_heads, splits, 128 + 4] floats and counters n_seqs * gridDim.y zeroed int32 (left
 *  zeroed). fresh >= 0: only each sequence's newest `fresh` rows may come from the previous
 *  kernel (the lengths, the table and older rows are read before it has finished); -1: none
 *  is read before. */
extern "C" __global__ void tc_k_attn_decode128_bf16(__nv_bfloat16 *out, float *partials, int32_t *counters, const __nv_bfloat16 *q,
                                              const __nv_bfloat16 *k_cache, const __nv_bfloat16 *v_cache,
                                              const int32_t *block_table, const int32_t *seq_lens,
                                              int32_t n_heads, int32_t n_kv_heads, int32_t block_size,
                                              int32_t max_blocks, int64_t q_stride, int64_t out_stride,
                                              int32_t chunk, float scale, int32_t stages, int32_t fresh)
{
    attention_cu::decode<__nv_bfloat16, __nv_bfloat16, 128>(out, partials, counters, q, k_cache, v_cache, block_table, seq_lens, n_heads,
                                  n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale, stages, fresh);
}
/** Causal prefill attention, head_dim 128: grid (n_tokens / 64 + n_seqs, n_heads), 128 threads,
 *  69632 bytes of dynamic shared memory. */
extern "C" __global__ void tc_k_attn_prefill128_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *k_cache,
                                               const __nv_bfloat16 *v_cache, const int32_t *block_table,
                                               const int32_t *seq_lens, const int32_t *q_start,
                                               int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads,
                                               int32_t block_size, int32_t max_blocks, int64_t q_stride,
                                               int64_t out_stride, float scale)
{
    tc::await_inputs();
    attention_cu::prefill<__nv_bfloat16, __nv_bfloat16, 128>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs,
                                   n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale);
}
/** Write row i of k and v (row_elems = n_kv_heads * head_dim) as FP8 E4M3 into cache slot
 *  slots[i] (skipped when negative); grid (rows, any), 256 threads. */
extern "C" __global__ void tc_k_attn_store_f16_f8(uint8_t *k_cache, uint8_t *v_cache, const __half *k, const __half *v,
                                                const int32_t *slots, int64_t row_elems, int64_t k_stride,
                                                int64_t v_stride)
{
    tc::await_inputs();
    attention_cu::store(reinterpret_cast<tc::f8e4m3 *>(k_cache), reinterpret_cast<tc::f8e4m3 *>(v_cache), k, v,
                        slots, row_elems, k_stride, v_stride);
}
/** Decode attention over an FP8 E4M3 cache, head_dim 64: as tc_k_attn_decode64_f16, with
 *  stages * 10240 bytes of dynamic shared memory (stages 1 to 3). */
extern "C" __global__ void tc_k_attn_decode64_f16_f8(__half *out, float *partials, int32_t *counters, const __half *q,
                                                   const uint8_t *k_cache, const uint8_t *v_cache,
                                                   const int32_t *block_table, const int32_t *seq_lens,
                                                   int32_t n_heads, int32_t n_kv_heads, int32_t block_size,
                                                   int32_t max_blocks, int64_t q_stride, int64_t out_stride,
                                                   int32_t chunk, float scale, int32_t stages, int32_t fresh)
{
    attention_cu::decode<__half, tc::f8e4m3, 64>(
        out, partials, counters, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache),
        reinterpret_cast<const tc::f8e4m3 *>(v_cache), block_table, seq_lens, n_heads, n_kv_heads, block_size,
        max_blocks, q_stride, out_stride, chunk, scale, stages, fresh);
}
/** Causal prefill attention over an FP8 E4M3 cache, head_dim 64: grid (n_tokens / 64 + n_seqs,
 *  n_heads), 128 threads, 38912 bytes of dynamic shared memory. */
extern "C" __global__ void tc_k_attn_prefill64_f16_f8(__half *out, const __half *q, const uint8_t *k_cache,
                                                    const uint8_t *v_cache, const int32_t *block_table,
                                                    const int32_t *seq_lens, const int32_t *q_start,
                                                    int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads,
                                                    int32_t block_size, int32_t max_blocks, int64_t q_stride,
                                                    int64_t out_stride, float scale)
{
    tc::await_inputs();
    attention_cu::prefill<__half, tc::f8e4m3, 64>(
        out, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache), reinterpret_cast<const tc::f8e4m3 *>(v_cache),
        block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride,
        scale);
}
/** Decode attention over an FP8 E4M3 cache, head_dim 128: as tc_k_attn_decode128_f16, with
 *  stages * 18432 bytes of dynamic shared memory (stages 1 to 3). */
extern "C" __global__ void tc_k_attn_decode128_f16_f8(__half *out, float *partials, int32_t *counters, const __half *q,
                                                   const uint8_t *k_cache, const uint8_t *v_cache,
                                                   const int32_t *block_table, const int32_t *seq_lens,
                                                   int32_t n_heads, int32_t n_kv_heads, int32_t block_size,
                                                   int32_t max_blocks, int64_t q_stride, int64_t out_stride,
                                                   int32_t chunk, float scale, int32_t stages, int32_t fresh)
{
    attention_cu::decode<__half, tc::f8e4m3, 128>(
        out, partials, counters, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache),
        reinterpret_cast<const tc::f8e4m3 *>(v_cache), block_table, seq_lens, n_heads, n_kv_heads, block_size,
        max_blocks, q_stride, out_stride, chunk, scale, stages, fresh);
}
/** Causal prefill attention over an FP8 E4M3 cache, head_dim 128: grid (n_tokens / 64 + n_seqs,
 *  n_heads), 128 threads, 71680 bytes of dynamic shared memory. */
extern "C" __global__ void tc_k_attn_prefill128_f16_f8(__half *out, const __half *q, const uint8_t *k_cache,
                                                    const uint8_t *v_cache, const int32_t *block_table,
                                                    const int32_t *seq_lens, const int32_t *q_start,
                                                    int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads,
                                                    int32_t block_size, int32_t max_blocks, int64_t q_stride,
                                                    int64_t out_stride, float scale)
{
    tc::await_inputs();
    attention_cu::prefill<__half, tc::f8e4m3, 128>(
        out, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache), reinterpret_cast<const tc::f8e4m3 *>(v_cache),
        block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride,
        scale);
}
/** Write row i of k and v (row_elems = n_kv_heads * head_dim) as FP8 E4M3 into cache slot
 *  slots[i] (skipped when negative); grid (rows, any), 256 threads. */
extern "C" __global__ void tc_k_attn_store_bf16_f8(uint8_t *k_cache, uint8_t *v_cache, const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                                                const int32_t *slots, int64_t row_elems, int64_t k_stride,
                                                int64_t v_stride)
{
    tc::await_inputs();
    attention_cu::store(reinterpret_cast<tc::f8e4m3 *>(k_cache), reinterpret_cast<tc::f8e4m3 *>(v_cache), k, v,
                        slots, row_elems, k_stride, v_stride);
}
/** Decode attention over an FP8 E4M3 cache, head_dim 64: as tc_k_attn_decode64_bf16, with
 *  stages * 10240 bytes of dynamic shared memory (stages 1 to 3). */
extern "C" __global__ void tc_k_attn_decode64_bf16_f8(__nv_bfloat16 *out, float *partials, int32_t *counters, const __nv_bfloat16 *q,
                                                   const uint8_t *k_cache, const uint8_t *v_cache,
                                                   const int32_t *block_table, const int32_t *seq_lens,
                                                   int32_t n_heads, int32_t n_kv_heads, int32_t block_size,
                                                   int32_t max_blocks, int64_t q_stride, int64_t out_stride,
                                                   int32_t chunk, float scale, int32_t stages, int32_t fresh)
{
    attention_cu::decode<__nv_bfloat16, tc::f8e4m3, 64>(
        out, partials, counters, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache),
        reinterpret_cast<const tc::f8e4m3 *>(v_cache), block_table, seq_lens, n_heads, n_kv_heads, block_size,
        max_blocks, q_stride, out_stride, chunk, scale, stages, fresh);
}
/** Causal prefill attention over an FP8 E4M3 cache, head_dim 64: grid (n_tokens / 64 + n_seqs,
 *  n_heads), 128 threads, 38912 bytes of dynamic shared memory. */
extern "C" __global__ void tc_k_attn_prefill64_bf16_f8(__nv_bfloat16 *out, const __nv_bfloat16 *q, const uint8_t *k_cache,
                                                    const uint8_t *v_cache, const int32_t *block_table,
                                                    const int32_t *seq_lens, const int32_t *q_start,
                                                    int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads,
                                                    int32_t block_size, int32_t max_blocks, int64_t q_stride,
                                                    int64_t out_stride, float scale)
{
    tc::await_inputs();
    attention_cu::prefill<__nv_bfloat16, tc::f8e4m3, 64>(
        out, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache), reinterpret_cast<const tc::f8e4m3 *>(v_cache),
        block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride,
        scale);
}
/** Decode attention over an FP8 E4M3 cache, head_dim 128: as tc_k_attn_decode128_bf16, with
 *  stages * 18432 bytes of dynamic shared memory (stages 1 to 3). */
extern "C" __global__ void tc_k_attn_decode128_bf16_f8(__nv_bfloat16 *out, float *partials, int32_t *counters, const __nv_bfloat16 *q,
                                                   const uint8_t *k_cache, const uint8_t *v_cache,
                                                   const int32_t *block_table, const int32_t *seq_lens,
                                                   int32_t n_heads, int32_t n_kv_heads, int32_t block_size,
                                                   int32_t max_blocks, int64_t q_stride, int64_t out_stride,
                                                   int32_t chunk, float scale, int32_t stages, int32_t fresh)
{
    attention_cu::decode<__nv_bfloat16, tc::f8e4m3, 128>(
        out, partials, counters, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache),
        reinterpret_cast<const tc::f8e4m3 *>(v_cache), block_table, seq_lens, n_heads, n_kv_heads, block_size,
        max_blocks, q_stride, out_stride, chunk, scale, stages, fresh);
}
/** Causal prefill attention over an FP8 E4M3 cache, head_dim 128: grid (n_tokens / 64 + n_seqs,
 *  n_heads), 128 threads, 71680 bytes of dynamic shared memory. */
extern "C" __global__ void tc_k_attn_prefill128_bf16_f8(__nv_bfloat16 *out, const __nv_bfloat16 *q, const uint8_t *k_cache,
                                                    const uint8_t *v_cache, const int32_t *block_table,
                                                    const int32_t *seq_lens, const int32_t *q_start,
                                                    int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads,
                                                    int32_t block_size, int32_t max_blocks, int64_t q_stride,
                                                    int64_t out_stride, float scale)
{
    tc::await_inputs();
    attention_cu::prefill<__nv_bfloat16, tc::f8e4m3, 128>(
        out, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache), reinterpret_cast<const tc::f8e4m3 *>(v_cache),
        block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride,
        scale);
}
