// GGUF block-quantised weights on the GPU: the plane layout they are held in and its
// conversion from and to the file's blocks, dequantisation (embedding rows, and row tiles
// handed to cuBLAS for products of many rows), and the decode products of 1 to 8 rows of
// activations, which read every weight byte once. Block formats follow ggml-common.h and
// ggml-quants.c's dequantize_row_* (our own code written from their description); the CPU
// twin is src/ops/qblock.c.
#include "common.cuh"

namespace quant_cu {

template <int V> struct Int {
    static constexpr int value = V;
};

enum : int { Q4_0 = 5, Q8_0 = 6, Q4_1 = 8, Q5_0 = 9, Q5_1 = 10, Q2_K = 11, Q3_K = 12, Q4_K = 13, Q5_K = 14, Q6_K = 15 };

// A block type's fields: where each sits in the file's block and how many bytes it has. On
// the GPU a tensor of B blocks keeps each field of all its blocks together, one plane per
// field in the order listed, each plane starting 256-byte aligned: the quants first (whole
// 16-byte multiples a block, so that a lane reads its 8 bytes of them in one load), then the
// small fields. The same bytes as the file plus at most 4 x 255 of alignment.
struct Field {
    int off, size;
};
struct Layout {
    int block, bytes, nf;
    Field f[4];
};
__host__ __device__ constexpr Layout layout(int dt)
{
    switch (dt) {
    case Q4_0: return { 32, 18, 2, { { 2, 16 }, { 0, 2 } } };
    case Q8_0: return { 32, 34, 2, { { 2, 32 }, { 0, 2 } } };
    case Q4_1: return { 32, 20, 2, { { 4, 16 }, { 0, 4 } } };
    case Q5_0: return { 32, 22, 3, { { 6, 16 }, { 2, 4 }, { 0, 2 } } };
    case Q5_1: return { 32, 24, 3, { { 8, 16 }, { 4, 4 }, { 0, 4 } } };
    case Q2_K: return { 256, 84, 3, { { 16, 64 }, { 0, 16 }, { 80, 4 } } };
    case Q3_K: return { 256, 110, 4, { { 32, 64 }, { 0, 32 }, { 96, 12 }, { 108, 2 } } };
    case Q4_K: return { 256, 144, 3, { { 16, 128 }, { 4, 12 }, { 0, 4 } } };
    case Q5_K: return { 256, 176, 4, { { 48, 128 }, { 16, 32 }, { 4, 12 }, { 0, 4 } } };
    case Q6_K: return { 256, 210, 4, { { 0, 128 }, { 128, 64 }, { 192, 16 }, { 208, 2 } } };
    default: return { 1, 0, 0, {} };
    }
}

// The planes of a tensor of `blocks` blocks of type dt at w.
struct Planes {
    const uint8_t *p[4];
};
__device__ __forceinline__ int64_t align256(int64_t v) { return (v + 255) & ~(int64_t)255; }
__device__ __forceinline__ Planes planes(int dt, const void *w, int64_t blocks)
{
    const Layout L = layout(dt);
    Planes P = {};
    const uint8_t *at = static_cast<const uint8_t *>(w);
    for (int f = 0; f < L.nf; f++) {
        P.p[f] = at;
        at += align256(blocks * L.f[f].size);
    }
    return P;
}

__device__ __forceinline__ uint2 ld8(const uint8_t *p) { return *reinterpret_cast<const uint2 *>(p); }
__device__ __forceinline__ uint32_t ld4(const uint8_t *p) { return *reinterpret_cast<const uint32_t *>(p); }
__device__ __forceinline__ uint32_t ld2(const uint8_t *p) { return *reinterpret_cast<const uint16_t *>(p); }
__device__ __forceinline__ float half_lo(uint32_t v) { return __half2float(__ushort_as_half((unsigned short)(v & 0xffff))); }
__device__ __forceinline__ float half_hi(uint32_t v) { return __half2float(__ushort_as_half((unsigned short)(v >> 16))); }
// Byte i (0..7) of the 8 quant bytes.
__device__ __forceinline__ uint32_t byte_of(uint2 q, int i) { return ((i < 4 ? q.x : q.y) >> (8 * (i & 3))) & 0xff; }

// What one lane loads to dequantise 8 consecutive weights: their quant bytes and the block's
// other fields they need. Loading (fetch) is apart from the arithmetic (decode) so that a loop
// issues several groups' loads before it uses the first.
struct Raw {
    uint2 q;
    uint32_t e[6];
};

// Group j (elements 8j .. 8j + 7) of block blk.
template <int DT> __device__ __forceinline__ Raw fetch(const Planes &P, int64_t blk, int j)
{
    Raw r;
    if constexpr (DT == Q4_0 || DT == Q4_1) {
        r.q = ld8(P.p[0] + blk * 16 + (j & 1) * 8);
        r.e[0] = DT == Q4_0 ? ld2(P.p[1] + blk * 2) : ld4(P.p[1] + blk * 4);
    } else if constexpr (DT == Q5_0 || DT == Q5_1) {
        r.q = ld8(P.p[0] + blk * 16 + (j & 1) * 8);
        r.e[0] = ld4(P.p[1] + blk * 4);
        r.e[1] = DT == Q5_0 ? ld2(P.p[2] + blk * 2) : ld4(P.p[2] + blk * 4);
    } else if constexpr (DT == Q8_0) {
        r.q = ld8(P.p[0] + blk * 32 + j * 8);
        r.e[0] = ld2(P.p[1] + blk * 2);
    } else if constexpr (DT == Q2_K) {
        r.q = ld8(P.p[0] + blk * 64 + (j >> 4) * 32 + (j & 3) * 8);
        r.e[0] = P.p[1][blk * 16 + (j >> 1)];
        r.e[1] = ld4(P.p[2] + blk * 4);
    } else if constexpr (DT == Q3_K) {
        r.q = ld8(P.p[0] + blk * 64 + (j >> 4) * 32 + (j & 3) * 8);
        uint2 h = ld8(P.p[1] + blk * 32 + (j & 3) * 8);
        r.e[0] = h.x;
        r.e[1] = h.y;
        const int s = j >> 1;
        r.e[2] = P.p[2][blk * 12 + (s & 7)];
        r.e[3] = P.p[2][blk * 12 + 8 + (s & 3)];
        r.e[4] = ld2(P.p[3] + blk * 2);
    } else if constexpr (DT == Q4_K || DT == Q5_K) {
        const int sb = j >> 2;
        r.q = ld8(P.p[0] + blk * 128 + (sb >> 1) * 32 + (j & 3) * 8);
        const uint8_t *sc = P.p[DT == Q4_K ? 1 : 2] + blk * 12;
        r.e[0] = ld4(sc);
        r.e[1] = ld4(sc + 4);
        r.e[2] = ld4(sc + 8);
        r.e[3] = ld4(P.p[DT == Q4_K ? 2 : 3] + blk * 4);
        if constexpr (DT == Q5_K) {
            uint2 h = ld8(P.p[1] + blk * 32 + (j & 3) * 8);
            r.e[4] = h.x;
            r.e[5] = h.y;
        }
    } else if constexpr (DT == Q6_K) {
        const int n = j >> 4, q4 = (j >> 2) & 3;
        r.q = ld8(P.p[0] + blk * 128 + n * 64 + (q4 & 1) * 32 + (j & 3) * 8);
        uint2 h = ld8(P.p[1] + blk * 64 + n * 32 + (j & 3) * 8);
        r.e[0] = h.x;
        r.e[1] = h.y;
        r.e[2] = P.p[2][blk * 16 + (j >> 1)];
        r.e[3] = ld2(P.p[3] + blk * 2);
    }
    return r;
}

// Byte i of a K type's 12 packed scale bytes (held as three words).
__device__ __forceinline__ int sbyte(const Raw &r, int i) { return (int)((r.e[i >> 2] >> (8 * (i & 3))) & 0xff); }

// The 8 weights of group j as floats.
template <int DT> __device__ __forceinline__ void decode(const Raw &r, int j, float (&v)[8])
{
    if constexpr (DT == Q4_0 || DT == Q4_1 || DT == Q5_0 || DT == Q5_1) {
        // Elements 0-15 in the low nibbles of the 16 bytes, 16-31 in the high ones.
        const int shift = (j >> 1) * 4;
        const bool q5 = DT == Q5_0 || DT == Q5_1;
        const uint32_t dm = q5 ? r.e[1] : r.e[0];
        const float d = half_lo(dm), m = DT == Q4_1 || DT == Q5_1 ? half_hi(dm) : 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int q = (int)((byte_of(r.q, i) >> shift) & 15);
            if constexpr (q5)
                q |= (int)((r.e[0] >> (8 * j + i)) & 1) << 4;
            if constexpr (DT == Q4_0)
                v[i] = (float)(q - 8) * d;
            else if constexpr (DT == Q5_0)
                v[i] = (float)(q - 16) * d;
            else
                v[i] = (float)q * d + m;
        }
    } else if constexpr (DT == Q8_0) {
        const float d = half_lo(r.e[0]);
#pragma unroll
        for (int i = 0; i < 8; i++)
            v[i] = (float)(int8_t)byte_of(r.q, i) * d;
    } else if constexpr (DT == Q2_K) {
        // Half n = j / 16 of the block: byte l of its 32 holds elements 32g + l of the half in
        // bits 2g, 2g + 1; a byte of scale (low nibble) and minimum (high) per 16 elements.
        const int g = (j >> 2) & 3;
        const float d = half_lo(r.e[1]), dmin = half_hi(r.e[1]);
        const float sc = d * (float)(r.e[0] & 15), mn = dmin * (float)(r.e[0] >> 4);
#pragma unroll
        for (int i = 0; i < 8; i++)
            v[i] = sc * (float)((byte_of(r.q, i) >> (2 * g)) & 3) - mn;
    } else if constexpr (DT == Q3_K) {
        // As Q2_K, with a high bit per element in hmask (bit 4n + g of byte l): clear means
        // q - 4. 6-bit scales less 32: the low 4 bits in a nibble of bytes 0-7, the high 2 in
        // bytes 8-11.
        const int n = j >> 4, g = (j >> 2) & 3, s = j >> 1;
        const int lo = s < 8 ? (int)(r.e[2] & 15) : (int)(r.e[2] >> 4);
        const int hi = (int)(r.e[3] >> (2 * (s >> 2))) & 3;
        const float sc = half_lo(r.e[4]) * (float)((lo | (hi << 4)) - 32);
        const uint2 h = make_uint2(r.e[0], r.e[1]);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int q = (int)((byte_of(r.q, i) >> (2 * g)) & 3);
            q -= (byte_of(h, i) >> (4 * n + g)) & 1 ? 0 : 4;
            v[i] = sc * (float)q;
        }
    } else if constexpr (DT == Q4_K || DT == Q5_K) {
        // Sub-block sb = j / 4 of 32: the low (even sb) or high (odd) nibbles of 32 bytes; its
        // 6-bit scale and minimum packed in 12 bytes (sub-blocks 0-3 in the low 6 bits of
        // bytes 0-3 and 4-7, 4-7 in the nibbles of bytes 8-11 and the top 2 bits of 0-7).
        const int sb = j >> 2;
        int sc, mn;
        if (sb < 4) {
            sc = sbyte(r, sb) & 63;
            mn = sbyte(r, sb + 4) & 63;
        } else {
            sc = (sbyte(r, sb + 4) & 15) | ((sbyte(r, sb - 4) >> 6) << 4);
            mn = (sbyte(r, sb + 4) >> 4) | ((sbyte(r, sb) >> 6) << 4);
        }
        const float d = half_lo(r.e[3]) * (float)sc, m = half_hi(r.e[3]) * (float)mn;
        const int shift = (sb & 1) * 4;
        const uint2 h = make_uint2(r.e[4], r.e[5]);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int q = (int)((byte_of(r.q, i) >> shift) & 15);
            if constexpr (DT == Q5_K)
                q |= (int)((byte_of(h, i) >> sb) & 1) << 4;
            v[i] = d * (float)q - m;
        }
    } else if constexpr (DT == Q6_K) {
        // Half n = j / 16: quarter q4 of it takes the low (q4 < 2) or high nibbles of 32 of its
        // 64 low bytes and bits 2 q4, 2 q4 + 1 of its 32 high bytes; int8 scales per 16.
        const int q4 = (j >> 2) & 3;
        const float sc = half_lo(r.e[3]) * (float)(int8_t)r.e[2];
        const uint2 h = make_uint2(r.e[0], r.e[1]);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int q = (int)((byte_of(r.q, i) >> (4 * (q4 >> 1))) & 15) | (int)(((byte_of(h, i) >> (2 * q4)) & 3) << 4);
            v[i] = sc * (float)(q - 32);
        }
    }
}

// Group j of block blk, loaded and decoded.
template <int DT> __device__ __forceinline__ void deq8(const Planes &P, int64_t blk, int j, float (&v)[8])
{
    decode<DT>(fetch<DT>(P, blk, j), j, v);
}

// Calls f with the type's code as a compile-time constant (an unknown dtype calls nothing).
template <typename F> __device__ __forceinline__ void by_type(int dt, F &&f)
{
    switch (dt) {
    case Q4_0: f(Int<Q4_0>{}); break;
    case Q8_0: f(Int<Q8_0>{}); break;
    case Q4_1: f(Int<Q4_1>{}); break;
    case Q5_0: f(Int<Q5_0>{}); break;
    case Q5_1: f(Int<Q5_1>{}); break;
    case Q2_K: f(Int<Q2_K>{}); break;
    case Q3_K: f(Int<Q3_K>{}); break;
    case Q4_K: f(Int<Q4_K>{}); break;
    case Q5_K: f(Int<Q5_K>{}); break;
    case Q6_K: f(Int<Q6_K>{}); break;
    }
}

// Rows [r0, r0 + rows) of w (n_rows x k, planes) into out (rows x k, row stride os) as T,
// or, with ids, rows ids[i] (outside [0, n_rows): a NaN row). A thread per group of 8.
template <typename T, int DT>
__device__ void dequant_rows(T *out, const void *w, int64_t n_rows, int64_t k, int64_t r0, int64_t rows,
                             const int32_t *ids, int64_t os)
{
    constexpr Layout L = layout(DT);
    const Planes P = planes(DT, w, n_rows * (k / L.block));
    const int64_t groups = k / 8, total = rows * groups, nb = k / L.block;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = t / groups, g = t % groups;
        const int64_t src = ids ? ids[r] : r0 + r;
        float v[8];
        if (src < 0 || src >= n_rows) {
#pragma unroll
            for (int i = 0; i < 8; i++)
                v[i] = __int_as_float(0x7fc00000);
        } else {
            deq8<DT>(P, src * nb + g / (L.block / 8), (int)(g % (L.block / 8)), v);
        }
        T *o = out + r * os + g * 8;
        if constexpr (sizeof(T) == 2) {
            uint4 pk = { tc::pack2<T>(v[0], v[1]), tc::pack2<T>(v[2], v[3]), tc::pack2<T>(v[4], v[5]),
                         tc::pack2<T>(v[6], v[7]) };
            *reinterpret_cast<uint4 *>(o) = pk;
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++)
                o[i] = v[i];
        }
    }
}

// 1 to 8 rows of f32 x against the weights, a warp per output row (grid-stride), each lane
// taking every 32nd group of 8: exact f32 arithmetic, the CPU's twin (f32 activations, and
// the logits of up to 8 rows). Each row of x, and with SwiGLU (flags bit 0) the up row n +
// row, is a pass of its own over the weight row (from L1 or L2 after the first): kept
// rolled up, a kernel per type, for the binary's size. Bit 1 adds to out.
template <int DT>
__device__ void simt_rows(float *out, const float *x, const void *w, int m, int64_t n, int64_t k, int64_t xs,
                          int64_t os, int flags)
{
    constexpr Layout L = layout(DT);
    constexpr int GB = L.block / 8; // groups a block
    const bool swiglu = flags & 1;
    const Planes P = planes(DT, w, (swiglu ? 2 * n : n) * (k / L.block));
    const int lane = threadIdx.x & 31;
    const int64_t warps = blockDim.x >> 5, nb = k / L.block, groups = k / 8;
    for (int64_t row = blockIdx.x * warps + (threadIdx.x >> 5); row < n; row += gridDim.x * warps)
        for (int r = 0; r < m; r++) {
            float v = 0.0f, up = 0.0f;
            for (int h = 0; h < (swiglu ? 2 : 1); h++) {
                const int64_t wr = (h ? n + row : row) * nb;
                const float *xr = x + r * xs;
                float acc = 0.0f;
                for (int64_t g = lane; g < groups; g += 32) {
                    float a[8];
                    deq8<DT>(P, wr + g / GB, (int)(g % GB), a);
                    const float4 x0 = *reinterpret_cast<const float4 *>(xr + g * 8),
                                 x1 = *reinterpret_cast<const float4 *>(xr + g * 8 + 4);
                    acc = fmaf(a[0], x0.x, acc);
                    acc = fmaf(a[1], x0.y, acc);
                    acc = fmaf(a[2], x0.z, acc);
                    acc = fmaf(a[3], x0.w, acc);
                    acc = fmaf(a[4], x1.x, acc);
                    acc = fmaf(a[5], x1.y, acc);
                    acc = fmaf(a[6], x1.z, acc);
                    acc = fmaf(a[7], x1.w, acc);
                }
                acc = tc::warp_sum(acc);
                if (h)
                    up = acc;
                else
                    v = acc;
            }
            if (lane == 0) {
                if (swiglu)
                    v = v / (1.0f + expf(-v)) * up;
                if (flags & 2)
                    v += out[r * os + row];
                out[r * os + row] = v;
            }
        }
}

// 1 to 8 rows of 16-bit x on the tensor cores, as matvec.cu's mma_rows does for 16-bit
// weights: a block of kWarps warps takes 16 weight rows (the rows of an m16n8k16 product; x's
// rows are its columns) and each warp a share of k in chunks of 32. Lane (g, p) = (l / 4,
// l % 4) dequantises group p of each chunk (8 weights) of rows g and g + 8 into registers, in
// x's dtype; its fragment slots {2p, 2p + 1, 2p + 8, 2p + 9} of the chunk's first product
// stand for elements 0-3 of the group, of the second for 4-7, and x's row g is read the same
// way, so the products are the dot products. U chunks' loads are issued before the first is
// decoded. The warps' sums meet in shared memory in a fixed order. With SwiGLU (flags bit 0)
// the block then takes the 16 up rows (n on) the same way (a second pass rather than a second
// instantiation: the binary's size); bit 1 adds to out.
constexpr int kWarps = 8;
template <typename T, int DT>
__device__ void mma_rows(T *out, const T *x, const void *w, int m, int64_t n, int64_t k, int64_t xs, int64_t os,
                         int flags, float (*red)[kWarps][16][8])
{
    constexpr Layout L = layout(DT);
    constexpr int GB = L.block / 8, U = 4;
    const bool swiglu = flags & 1;
    const Planes P = planes(DT, w, (swiglu ? 2 * n : n) * (k / L.block));
    const int lane = threadIdx.x & 31, g = lane >> 2, p = lane & 3, warp = threadIdx.x >> 5;
    const int64_t nb = k / L.block, chunks = k / 32, per = (chunks + kWarps - 1) / kWarps, c0 = warp * per,
                  c1 = min(chunks, c0 + per), tiles = (n + 15) / 16;
    const bool xin = g < m;
    const T *xr = x + (xin ? g : 0) * xs + p * 8;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int64_t ra = tile * 16 + g, rb = ra + 8;
        for (int h = 0; h < (swiglu ? 2 : 1); h++) {
            // Rows past n read row 0 (in bounds) and are never written.
            const int64_t rows[2] = { (h ? n : 0) + (ra < n ? ra : 0), (h ? n : 0) + (rb < n ? rb : 0) };
            float acc[4] = {};
            for (int64_t c = c0; c < c1; c += U) {
                Raw raw[U][2];
                uint4 xv[U];
#pragma unroll
                for (int u = 0; u < U; u++) {
                    // Past c1 a lane re-reads chunk c0 (its product is zero: x is).
                    const int64_t grp = (c + u < c1 ? c + u : c0) * 4 + p;
#pragma unroll
                    for (int i = 0; i < 2; i++)
                        raw[u][i] = fetch<DT>(P, rows[i] * nb + grp / GB, (int)(grp % GB));
                    xv[u] = xin && c + u < c1 ? *reinterpret_cast<const uint4 *>(xr + (c + u) * 32)
                                              : make_uint4(0, 0, 0, 0);
                }
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const int j = (int)(((c + u < c1 ? c + u : c0) * 4 + p) % GB);
                    uint4 a[2];
#pragma unroll
                    for (int i = 0; i < 2; i++) {
                        float v[8];
                        decode<DT>(raw[u][i], j, v);
                        a[i] = { tc::pack2<T>(v[0], v[1]), tc::pack2<T>(v[2], v[3]), tc::pack2<T>(v[4], v[5]),
                                 tc::pack2<T>(v[6], v[7]) };
                    }
                    tc::mma16816<T>(acc, a[0].x, a[1].x, a[0].y, a[1].y, xv[u].x, xv[u].y);
                    tc::mma16816<T>(acc, a[0].z, a[1].z, a[0].w, a[1].w, xv[u].z, xv[u].w);
                }
            }
            red[h][warp][g][2 * p] = acc[0];
            red[h][warp][g][2 * p + 1] = acc[1];
            red[h][warp][g + 8][2 * p] = acc[2];
            red[h][warp][g + 8][2 * p + 1] = acc[3];
        }
        __syncthreads();
        if (threadIdx.x < 128) {
            const int row = threadIdx.x >> 3, col = threadIdx.x & 7;
            const int64_t r = tile * 16 + row;
            if (col < m && r < n) {
                float v = 0.0f, up = 0.0f;
#pragma unroll
                for (int i = 0; i < kWarps; i++) {
                    v += red[0][i][row][col];
                    if (swiglu)
                        up += red[1][i][row][col];
                }
                if (swiglu)
                    v = v / (1.0f + expf(-v)) * up;
                T *o = out + col * os + r;
                if (flags & 2)
                    v += tc::to_f32(*o);
                *o = tc::from_f32<T>(v);
            }
        }
        __syncthreads();
    }
}

template <typename T>
__device__ void mma_any(T *out, const T *x, const void *w, int dt, int m, int64_t n, int64_t k, int64_t xs,
                        int64_t os, int flags)
{
    // One array for every instantiation (each would otherwise get its own).
    __shared__ float red[2][kWarps][16][8];
    by_type(dt, [&](auto t) { mma_rows<T, decltype(t)::value>(out, x, w, m, n, k, xs, os, flags, red); });
}

template <typename T>
__device__ void dequant_any(T *out, const void *w, int dt, int64_t n_rows, int64_t k, int64_t r0, int64_t rows,
                            const int32_t *ids, int64_t os)
{
    by_type(dt, [&](auto t) { dequant_rows<T, decltype(t)::value>(out, w, n_rows, k, r0, rows, ids, os); });
}

} // namespace quant_cu

/** Convert between a block type's file layout and its GPU planes: blocks [first, first + n)
 *  of a tensor of `total` blocks of type `dtype` (tc_dtype) held as planes at `planes`, from
 *  (to_planes 1) or to (0) n file blocks at `blocks`. A thread per 2 bytes. */
extern "C" __global__ void tc_k_qrepack(uint8_t *planes, uint8_t *blocks, int32_t dtype, int64_t total,
                                        int64_t first, int64_t n, int32_t to_planes)
{
    tc::await_inputs();
    const quant_cu::Layout L = quant_cu::layout(dtype);
    const int halves = L.bytes / 2;
    uint8_t *base[4];
    uint8_t *at = planes;
    for (int f = 0; f < L.nf; f++) {
        base[f] = at;
        at += quant_cu::align256(total * L.f[f].size);
    }
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n * halves;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = t / halves;
        const int o = (int)(t % halves) * 2;
        int f = 0;
        while (f + 1 < L.nf && !(o >= L.f[f].off && o < L.f[f].off + L.f[f].size))
            f++;
        uint16_t *pl = reinterpret_cast<uint16_t *>(base[f] + (first + b) * L.f[f].size + (o - L.f[f].off));
        uint16_t *bl = reinterpret_cast<uint16_t *>(blocks + b * L.bytes + o);
        if (to_planes)
            *pl = *bl;
        else
            *bl = *pl;
    }
}

/** out[r, :] (row stride out_stride) = rows r0 + r of w, a [n_rows, k] tensor of block type
 *  w_dtype held as planes, dequantised, for r < rows; with ids (not NULL) rows ids[r] instead
 *  (an id outside [0, n_rows) gives a NaN row). Grid-stride, a thread per 8 elements. */
extern "C" __global__ void tc_k_qdequant_f32(float *out, const void *w, int32_t w_dtype, int64_t n_rows, int64_t k,
                                             int64_t r0, int64_t rows, const int32_t *ids, int64_t out_stride)
{
    tc::await_inputs();
    quant_cu::dequant_any<float>(out, w, w_dtype, n_rows, k, r0, rows, ids, out_stride);
}
extern "C" __global__ void tc_k_qdequant_f16(__half *out, const void *w, int32_t w_dtype, int64_t n_rows, int64_t k,
                                             int64_t r0, int64_t rows, const int32_t *ids, int64_t out_stride)
{
    tc::await_inputs();
    quant_cu::dequant_any<__half>(out, w, w_dtype, n_rows, k, r0, rows, ids, out_stride);
}
extern "C" __global__ void tc_k_qdequant_bf16(__nv_bfloat16 *out, const void *w, int32_t w_dtype, int64_t n_rows,
                                              int64_t k, int64_t r0, int64_t rows, const int32_t *ids,
                                              int64_t out_stride)
{
    tc::await_inputs();
    quant_cu::dequant_any<__nv_bfloat16>(out, w, w_dtype, n_rows, k, r0, rows, ids, out_stride);
}

/** out[m, n] = x[m, k] w[n, k]^T for 1 <= m <= 8 with f32 x and w of block type w_dtype (held
 *  as planes), a warp per output row, grid-stride. flags bit 0: SwiGLU (w holds 2n rows, gate
 *  then up; out = silu(gate) * up); bit 1: out += the result. x 16-byte aligned. */
extern "C" __global__ void tc_k_qmatvec_f32(float *out, const float *x, const void *w, int32_t w_dtype, int32_t m,
                                            int64_t n, int64_t k, int64_t x_stride, int64_t out_stride, int32_t flags)
{
    tc::await_inputs();
    quant_cu::by_type(w_dtype, [&](auto t) {
        quant_cu::simt_rows<decltype(t)::value>(out, x, w, m, n, k, x_stride, out_stride, flags);
    });
}

/** The same for 16-bit x on the tensor cores: blocks of 256 threads, each taking 16 rows of
 *  out at a time (grid-stride); k a multiple of 32, x and its stride 16-byte aligned. */
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmatvec_mma_f16(__half *out, const __half *x, const void *w, int32_t w_dtype, int32_t m, int64_t n,
                         int64_t k, int64_t x_stride, int64_t out_stride, int32_t flags)
{
    tc::await_inputs();
    quant_cu::mma_any<__half>(out, x, w, w_dtype, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmatvec_mma_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *x, const void *w, int32_t w_dtype, int32_t m,
                          int64_t n, int64_t k, int64_t x_stride, int64_t out_stride, int32_t flags)
{
    tc::await_inputs();
    quant_cu::mma_any<__nv_bfloat16>(out, x, w, w_dtype, m, n, k, x_stride, out_stride, flags);
}
