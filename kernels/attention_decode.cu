// Attention decode over a paged KV cache (one query per sequence, split over the cached length
// as in flash-decoding; the last split to finish merges). f32 arithmetic throughout; 16-bit
// caches on the tensor cores; an FP8 E4M3 cache's tiles copied as bytes and turned into f16
// fragments in registers (64, 128) or widened in shared memory (generic). head_dim 64 and 128
// have kernels of their own, and so do 80, 96, 112 and 256 over bf16 caches under bf16
// activations; every other even size up to 256, and those four over FP8 caches, run on one
// generic kernel that reads it, and whether the cache is bf16 or FP8, at run time (bf16
// activations only). f32 activations run on attention_prefill.cu's
// simple kernel. With a sliding window, tokens before the query's window are never read (their
// blocks may be freed).
#include <type_traits>

#include "attention.cuh"

namespace attention_cu {


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
            if constexpr (KS % 2 != 0) { // (80 and 112: the last 16 dimensions alone)
                uint32_t kb[2];
                tc::ldmatrix_x2(kb, kt + (8 * nt + (lane & 7)) * LD + 16 * (KS - 1) + 8 * ((lane >> 3) & 1));
                tc::mma16816<T>(s[nt], qa[KS - 1][0], 0u, qa[KS - 1][1], 0u, kb[0], kb[1]);
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
    static_assert(KS % 2 == 0 && NT % 4 == 0, "FP8 caches have kernels of their own for 64 and 128 only");
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

// DecodeRing of the generic kernels, on bytes: stages of kTile keys then kTile values in rows
// ld bytes apart (hp elements of esz bytes, and 16).
struct AnyRing {
    uint8_t *ring;
    const uint8_t *k_cache, *v_cache;
    const int32_t *tbl;
    int block_size, n_kv_heads, stages;
    bool late;
    int hd, esz, ld;
    __device__ __forceinline__ uint8_t *stage(int j) const { return ring + (j % stages) * 2 * kTile * ld; }
    __device__ __forceinline__ void load(const DecodeWork &w, int warp, int lane, int j, int lo = 0,
                                         int hi = INT_MAX) const
    {
        if (j < w.mine)
            load_rows_any(stage(j), stage(j) + kTile * ld, k_cache, v_cache, tbl, w.t0 + (warp + j * kWarps) * kTile,
                          kTile, w.t1, w.start, block_size, n_kv_heads, w.kvh, hd, esz, ld, lane, lo, hi);
        tc::cp_commit();
    }
    __device__ __forceinline__ void prefetch(const DecodeWork &w, int warp, int lane, int j) const
    {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        int t = w.t0 + (warp + j * kWarps) * kTile + (lane & 15);
        if (j < w.mine && t < w.t1 && t >= w.start) {
            const uint8_t *row = kv_row(lane < 16 ? k_cache : v_cache, tbl, t, block_size, n_kv_heads, hd * esz, w.kvh);
            // (the bulk prefetch takes multiples of 16 bytes: a row's whole 16-byte pieces)
            int bytes = hd * esz / 16 * 16;
            if (bytes > 0 && tc::aligned(row, row, row, 16))
                asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(row), "r"(bytes) : "memory");
        }
#endif
    }
    __device__ __forceinline__ const uint8_t *next(const DecodeWork &w, int warp, int lane, int j) const
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
template <typename T>
__device__ void decode_any_warp(const DecodeWork &w, const AnyRing &ring, T *wide, const T *q, int64_t q_stride,
                                float scale, bool fp8, int hd, int hp, float *ms, float *ls, float *as)
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
        const uint8_t *tile = ring.next(w, warp, lane, j);
        const T *kt = reinterpret_cast<const T *>(tile); // (16-bit rows: ring.ld = 2 LD)
        if (fp8) {
            widen_any<T>(wide, tile, kTile, hp, LD, ring.ld, lane, 32);
            __syncwarp();
            kt = wide;
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
        const T *vt = reinterpret_cast<const T *>(tile + kTile * ring.ld);
        if (fp8) {
            __syncwarp(); // every lane is done with the keys in `wide`
            widen_any<T>(wide, tile + kTile * ring.ld, kTile, hp, LD, ring.ld, lane, 32);
            __syncwarp();
            vt = wide;
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
// shorter sequence spreads over the splits by its own length (whole tiles, at least one), so
// that it is not left to the first split alone.
__device__ __forceinline__ int split_chunk(int len, int splits, int chunk)
{
    int even = (int)(((uint32_t)len + splits - 1) / (uint32_t)splits);
    return min(chunk, max(kTile, (even + kTile - 1) / kTile * kTile));
}

// HD 0: the generic kernel (C uint8_t: the cache as bytes), head_dim hd_arg (see kMaxHD), an
// FP8 cache where fp8 is set, else one of T. window > 0: the query (position len - 1) sees
// tokens from len - window on. FP8 caches: scores scaled by the kv head's key scale, the
// output by its value scale.
template <typename T, typename C, int HD>
__device__ void decode(T *out, float *part, int32_t *counters, const T *q, const C *k_cache, const C *v_cache,
                       const int32_t *table, const int32_t *seq_lens, int n_heads, int n_kv_heads, int block_size,
                       int max_blocks, int64_t q_stride, int64_t out_stride, int chunk, float scale, int stages,
                       int fresh, int window, const float *k_scale = nullptr, const float *v_scale = nullptr,
                       int hd_arg = HD, int fp8 = 0)
{
    // (hp: the width of the rows in shared memory and of the products; REC: a split's record;
    // esz: the generic kernel's cache element bytes.)
    const int hd = HD ? HD : hd_arg, hp = HD ? HD : (hd + 15) / 16 * 16, REC = HD ? HD + 4 : (hd + 3) / 4 * 4 + 4;
    const int esz = HD ? (int)sizeof(C) : fp8 ? 1 : (int)sizeof(T);
    const int STAGE = HD ? decode_stage_elems<C, HD>() : 2 * kTile * (hp * esz + 16);
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
    using Ring = std::conditional_t<HD != 0, DecodeRing<C, HD>, AnyRing>;
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
        static_assert(sizeof(C) == 1, "the generic kernel takes its cache as bytes");
        ring.hd = hd;
        ring.esz = esz;
        ring.ld = hp * esz + 16;
        zero_pad(ring.ring, 2 * kTile * S, hd * esz, hp * esz, ring.ld, lane, 32); // before any copy lands
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
    if constexpr (sizeof(C) == 1) { // (the generic kernel's scales are NULL over a 16-bit cache)
        if (k_scale)
            scale *= k_scale[w.kvh];
        if (v_scale)
            vsc = v_scale[w.kvh];
    }
    if constexpr (HD == 0) {
        // (an FP8 cache: the warp's widened rows after the rings)
        T *wide = reinterpret_cast<T *>(reinterpret_cast<C *>(sh) + kWarps * S * STAGE) + warp * kTile * (hp + 8);
        decode_any_warp<T>(w, ring, wide, q, q_stride, scale, fp8 != 0, hd, hp, ms, ls, as);
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

} // namespace attention_cu

/** Decode attention, head_dim 64: grid (n_seqs, n_kv_heads * ceil(group / 8), splits), 128
 *  threads, stages * 18432 bytes of dynamic shared memory (stages 1 to 3); a split covers at
 *  most `chunk` cached tokens (a multiple of 16; less where the sequence is shorter), at most
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
/** Decode attention, head_dim 128: grid (n_seqs, n_kv_heads * ceil(group / 8), splits), 128
 *  threads, stages * 34816 bytes of dynamic shared memory (stages 1 to 3); a split covers at
 *  most `chunk` cached tokens (a multiple of 16; less where the sequence is shorter), at most
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
/** Decode attention, head_dim 64: grid (n_seqs, n_kv_heads * ceil(group / 8), splits), 128
 *  threads, stages * 18432 bytes of dynamic shared memory (stages 1 to 3); a split covers at
 *  most `chunk` cached tokens (a multiple of 16; less where the sequence is shorter), at most
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
/** Decode attention, head_dim 128: grid (n_seqs, n_kv_heads * ceil(group / 8), splits), 128
 *  threads, stages * 34816 bytes of dynamic shared memory (stages 1 to 3); a split covers at
 *  most `chunk` cached tokens (a multiple of 16; less where the sequence is shorter), at most
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
/** Decode attention, head_dim 80, bf16 activations and cache: as tc_k_attn_decode64_bf16, with
 *  stages * 22528 bytes of dynamic shared memory (stages 1 to 3) and partials records of
 *  80 + 4 floats. */
extern "C" __global__ void tc_k_attn_decode80_bf16(__nv_bfloat16 *out, float *partials, int32_t *counters, const __nv_bfloat16 *q,
        const __nv_bfloat16 *k_cache, const __nv_bfloat16 *v_cache, const int32_t *block_table, const int32_t *seq_lens,
        int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks, int64_t q_stride,
        int64_t out_stride, int32_t chunk, float scale, int32_t stages, int32_t fresh, int32_t window)
{
    attention_cu::decode<__nv_bfloat16, __nv_bfloat16, 80>(out, partials, counters, q, k_cache, v_cache, block_table, seq_lens, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale, stages, fresh, window);
}
/** Decode attention, head_dim 96, bf16 activations and cache: as tc_k_attn_decode64_bf16, with
 *  stages * 26624 bytes of dynamic shared memory (stages 1 to 3) and partials records of
 *  96 + 4 floats. */
extern "C" __global__ void tc_k_attn_decode96_bf16(__nv_bfloat16 *out, float *partials, int32_t *counters, const __nv_bfloat16 *q,
        const __nv_bfloat16 *k_cache, const __nv_bfloat16 *v_cache, const int32_t *block_table, const int32_t *seq_lens,
        int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks, int64_t q_stride,
        int64_t out_stride, int32_t chunk, float scale, int32_t stages, int32_t fresh, int32_t window)
{
    attention_cu::decode<__nv_bfloat16, __nv_bfloat16, 96>(out, partials, counters, q, k_cache, v_cache, block_table, seq_lens, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale, stages, fresh, window);
}
/** Decode attention, head_dim 112, bf16 activations and cache: as tc_k_attn_decode64_bf16, with
 *  stages * 30720 bytes of dynamic shared memory (stages 1 to 3) and partials records of
 *  112 + 4 floats. */
extern "C" __global__ void tc_k_attn_decode112_bf16(__nv_bfloat16 *out, float *partials, int32_t *counters, const __nv_bfloat16 *q,
        const __nv_bfloat16 *k_cache, const __nv_bfloat16 *v_cache, const int32_t *block_table, const int32_t *seq_lens,
        int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks, int64_t q_stride,
        int64_t out_stride, int32_t chunk, float scale, int32_t stages, int32_t fresh, int32_t window)
{
    attention_cu::decode<__nv_bfloat16, __nv_bfloat16, 112>(out, partials, counters, q, k_cache, v_cache, block_table, seq_lens, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale, stages, fresh, window);
}
/** Decode attention, head_dim 256, bf16 activations and cache: as tc_k_attn_decode64_bf16, with
 *  stages * 67584 bytes of dynamic shared memory (stages 1 to 3) and partials records of
 *  256 + 4 floats. */
extern "C" __global__ void tc_k_attn_decode256_bf16(__nv_bfloat16 *out, float *partials, int32_t *counters, const __nv_bfloat16 *q,
        const __nv_bfloat16 *k_cache, const __nv_bfloat16 *v_cache, const int32_t *block_table, const int32_t *seq_lens,
        int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks, int64_t q_stride,
        int64_t out_stride, int32_t chunk, float scale, int32_t stages, int32_t fresh, int32_t window)
{
    attention_cu::decode<__nv_bfloat16, __nv_bfloat16, 256>(out, partials, counters, q, k_cache, v_cache, block_table, seq_lens, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, chunk, scale, stages, fresh, window);
}
/** Decode attention of any even head_dim from 16 to 256 (rounded up to 16: hp) over a bf16
 *  cache, or with fp8 set an FP8 E4M3 one (k_scale, v_scale: each kv head's scales, f32
 *  [n_kv_heads]; NULL: 1): as tc_k_attn_decode64_bf16, with stages * 128 * (2 hp + 16) bytes of
 *  dynamic shared memory over a bf16 cache, stages * 128 * (hp + 16) + 128 * (hp + 8) over an
 *  FP8 one, and partials records of head_dim rounded up to 4, plus 4, floats. (f16 activations:
 *  64 and 128 only.) window > 0: the query (at position seq_lens - 1) attends only to the last
 *  `window` tokens. */
extern "C" __global__ void tc_k_attn_decode_bf16(__nv_bfloat16 *out, float *partials, int32_t *counters,
                                                const __nv_bfloat16 *q, const uint8_t *k_cache,
                                                const uint8_t *v_cache, const int32_t *block_table,
                                                const int32_t *seq_lens, int32_t n_heads, int32_t n_kv_heads,
                                                int32_t block_size, int32_t max_blocks, int64_t q_stride,
                                                int64_t out_stride, int32_t chunk, float scale, int32_t stages,
                                                int32_t fresh, int32_t window, const float *k_scale,
                                                const float *v_scale, int32_t fp8, int32_t head_dim)
{
    attention_cu::decode<__nv_bfloat16, uint8_t, 0>(out, partials, counters, q, k_cache, v_cache, block_table,
                                                    seq_lens, n_heads, n_kv_heads, block_size, max_blocks, q_stride,
                                                    out_stride, chunk, scale, stages, fresh, window, k_scale, v_scale,
                                                    head_dim, fp8);
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
