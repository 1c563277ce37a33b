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

enum : int {
    Q4_0 = 5,
    Q8_0 = 6,
    Q4_1 = 8,
    Q5_0 = 9,
    Q5_1 = 10,
    Q2_K = 11,
    Q3_K = 12,
    Q4_K = 13,
    Q5_K = 14,
    Q6_K = 15,
    Q4_1G = 16,   // q4_1_g64: Q4_1's d and m once for 64 elements, then two Q4_1 blocks' nibbles
    Q4_1G128 = 17 // q4_1_g128: the same for 128 elements, four Q4_1 blocks' nibbles
};
// Q4_1's nibbles under one d and m for 64 or 128 elements.
template <int DT> constexpr bool kQ41G = DT == Q4_1G || DT == Q4_1G128;

// A block type's fields: where each sits in the file's block and how many bytes it has. On
// the GPU a tensor of B blocks keeps each field of all its blocks together, one plane per
// field in the order listed, each plane starting 256-byte aligned: the quants first (whole
// 16-byte multiples a block, so that a lane reads its 8 bytes of them in one load), then the
// small fields. The same bytes as the file plus at most 4 x 255 of alignment. Q4_K's and Q5_K's
// d, dmin and packed scales, the first 16 bytes of their file blocks, are one field: one 16-byte
// unit a block to copy and load, where the 12 bytes of scales (straddling a unit boundary at
// most offsets) and the 4 of (d, dmin) apart took three (H200, 7B batch 1: Q4_K_M 469-477 ->
// 503-510 tokens/s, Q5_K_M 400-401 -> 431-437).
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
    case Q4_1G: return { 64, 36, 2, { { 4, 32 }, { 0, 4 } } };
    case Q4_1G128: return { 128, 68, 2, { { 4, 64 }, { 0, 4 } } };
    case Q5_0: return { 32, 22, 3, { { 6, 16 }, { 2, 4 }, { 0, 2 } } };
    case Q5_1: return { 32, 24, 3, { { 8, 16 }, { 4, 4 }, { 0, 4 } } };
    case Q2_K: return { 256, 84, 3, { { 16, 64 }, { 0, 16 }, { 80, 4 } } };
    case Q3_K: return { 256, 110, 4, { { 32, 64 }, { 0, 32 }, { 96, 12 }, { 108, 2 } } };
    case Q4_K: return { 256, 144, 2, { { 16, 128 }, { 0, 16 } } };
    case Q5_K: return { 256, 176, 3, { { 48, 128 }, { 16, 32 }, { 0, 16 } } };
    case Q6_K: return { 256, 210, 4, { { 0, 128 }, { 128, 64 }, { 192, 16 }, { 208, 2 } } };
    default: return { 1, 0, 0, {} };
    }
}

// The planes of a tensor of `blocks` blocks of type dt at w.
struct Planes {
    const uint8_t *p[4];
};
__device__ __forceinline__ int64_t align256(int64_t v) { return (v + 255) & ~(int64_t)255; }
template <int DT> __device__ __forceinline__ Planes planes(const void *w, int64_t blocks)
{
    constexpr Layout L = layout(DT);
    Planes P = {};
    const uint8_t *at = static_cast<const uint8_t *>(w);
#pragma unroll
    for (int f = 0; f < L.nf; f++) {
        P.p[f] = at;
        at += align256(blocks * L.f[f].size);
    }
    return P;
}

// (Plain loads: volatile asm ones, kept where the code issues them, and L2 prefetches of the
// chunks further on made the tensor-core kernel slower on the H100, 7B shapes: Q4_0 decode 237
// -> 193 tokens/s. So did a batch-1 product asking L2, as it started its last tile, for the rows
// of the next product's weights that product's first wave reads (prefetch.global.L2::evict_last):
// 7B Q4_K_M decode 370 -> 360, 346, 332 tokens/s for 8, 16, 32 MiB asked; Q8_0 293 -> 251.)
__device__ __forceinline__ uint2 ld8(const uint8_t *p) { return *reinterpret_cast<const uint2 *>(p); }
__device__ __forceinline__ uint32_t ld4(const uint8_t *p) { return *reinterpret_cast<const uint32_t *>(p); }
__device__ __forceinline__ uint32_t ld2(const uint8_t *p) { return *reinterpret_cast<const uint16_t *>(p); }
__device__ __forceinline__ uint32_t ld1(const uint8_t *p) { return *p; }
__device__ __forceinline__ float half_lo(uint32_t v) { return __half2float(__ushort_as_half((unsigned short)(v & 0xffff))); }
__device__ __forceinline__ float half_hi(uint32_t v) { return __half2float(__ushort_as_half((unsigned short)(v >> 16))); }
// v (0 <= v < 2^23) as a float, exactly, by the magic-number trick: no conversion instruction,
// which runs at a quarter of the rate of arithmetic.
__device__ __forceinline__ float small_float(uint32_t v) { return __int_as_float(0x4b000000 | v) - 8388608.0f; }
// Byte i (0..7) of the 8 quant bytes.
__device__ __forceinline__ uint32_t byte_of(uint2 q, int i) { return ((i < 4 ? q.x : q.y) >> (8 * (i & 3))) & 0xff; }

// What one lane loads to dequantise 8 consecutive weights: their quant bytes and the block's
// other fields they need. Loading (fetch) is apart from the arithmetic (decode) so that a loop
// issues several groups' loads before it uses the first.
struct Raw {
    uint2 q;
    uint32_t e[6];
};

// The 12 packed scale bytes (x, y, z) and (d, dmin) (w) of block blk of a Q4_K or Q5_K
// tensor's planes (or of a stage's copy of them).
template <int DT, typename I> __device__ __forceinline__ uint4 k_meta(const Planes &P, I blk)
{
    const uint4 v = *reinterpret_cast<const uint4 *>(P.p[DT == Q4_K ? 1 : 2] + (uint64_t)blk * 16);
    return make_uint4(v.y, v.z, v.w, v.x);
}

// Group j's quant bits of Q6_K block blk: the low four in r.q, the high two in r.e[0], r.e[1].
template <typename I> __device__ __forceinline__ void q6_bits(Raw &r, const Planes &P, I blk, int j)
{
    const int n = j >> 4, q4 = (j >> 2) & 3;
    r.q = ld8(P.p[0] + (uint64_t)blk * 128 + n * 64 + (q4 & 1) * 32 + (j & 3) * 8);
    const uint2 h = ld8(P.p[1] + (uint64_t)blk * 64 + n * 32 + (j & 3) * 8);
    r.e[0] = h.x;
    r.e[1] = h.y;
}

// Group j (elements 8j .. 8j + 7) of block blk.
template <int DT, typename I = int64_t> __device__ __forceinline__ Raw fetch(const Planes &P, I blk, int j)
{
    Raw r;
    if constexpr (DT == Q4_0 || DT == Q4_1) {
        r.q = ld8(P.p[0] + (uint64_t)blk * 16 + (j & 1) * 8);
        r.e[0] = DT == Q4_0 ? ld2(P.p[1] + (uint64_t)blk * 2) : ld4(P.p[1] + (uint64_t)blk * 4);
    } else if constexpr (kQ41G<DT>) {
        // Groups 4h .. 4h + 3 are Q4_1's 0 .. 3 of 32-block h.
        r.q = ld8(P.p[0] + (uint64_t)blk * layout(DT).f[0].size + (j >> 2) * 16 + (j & 1) * 8);
        r.e[0] = ld4(P.p[1] + (uint64_t)blk * 4);
    } else if constexpr (DT == Q5_0 || DT == Q5_1) {
        r.q = ld8(P.p[0] + (uint64_t)blk * 16 + (j & 1) * 8);
        r.e[0] = ld4(P.p[1] + (uint64_t)blk * 4);
        r.e[1] = DT == Q5_0 ? ld2(P.p[2] + (uint64_t)blk * 2) : ld4(P.p[2] + (uint64_t)blk * 4);
    } else if constexpr (DT == Q8_0) {
        r.q = ld8(P.p[0] + (uint64_t)blk * 32 + j * 8);
        r.e[0] = ld2(P.p[1] + (uint64_t)blk * 2);
    } else if constexpr (DT == Q2_K) {
        r.q = ld8(P.p[0] + (uint64_t)blk * 64 + (j >> 4) * 32 + (j & 3) * 8);
        r.e[0] = ld1(P.p[1] + (uint64_t)blk * 16 + (j >> 1));
        r.e[1] = ld4(P.p[2] + (uint64_t)blk * 4);
    } else if constexpr (DT == Q3_K) {
        r.q = ld8(P.p[0] + (uint64_t)blk * 64 + (j >> 4) * 32 + (j & 3) * 8);
        uint2 h = ld8(P.p[1] + (uint64_t)blk * 32 + (j & 3) * 8);
        r.e[0] = h.x;
        r.e[1] = h.y;
        const int s = j >> 1;
        r.e[2] = ld1(P.p[2] + (uint64_t)blk * 12 + (s & 7));
        r.e[3] = ld1(P.p[2] + (uint64_t)blk * 12 + 8 + (s & 3));
        r.e[4] = ld2(P.p[3] + (uint64_t)blk * 2);
    } else if constexpr (DT == Q4_K || DT == Q5_K) {
        const int sb = j >> 2;
        r.q = ld8(P.p[0] + (uint64_t)blk * 128 + (sb >> 1) * 32 + (j & 3) * 8);
        const uint4 m = k_meta<DT>(P, blk);
        r.e[0] = m.x;
        r.e[1] = m.y;
        r.e[2] = m.z;
        r.e[3] = m.w;
        if constexpr (DT == Q5_K) {
            uint2 h = ld8(P.p[1] + (uint64_t)blk * 32 + (j & 3) * 8);
            r.e[4] = h.x;
            r.e[5] = h.y;
        }
    } else if constexpr (DT == Q6_K) {
        q6_bits(r, P, blk, j);
        r.e[2] = ld1(P.p[2] + (uint64_t)blk * 16 + (j >> 1));
        r.e[3] = ld2(P.p[3] + (uint64_t)blk * 2);
    }
    return r;
}

// The 8 weights of group j as small unsigned integers, one a byte (elements 0-3 in b.x, 4-7
// in b.y), and the affine map to their values: w = s (b - bias) + off. What the tensor-core
// kernel converts to 16-bit pairs without a conversion instruction.
struct Ints {
    uint2 b;
    int bias;
    float s, off;
};
// Bit i of the low 8 bits of v to bit 4 of byte i (the 5th bit of Q5 quants).
__device__ __forceinline__ uint2 spread_bits(uint32_t v)
{
    return make_uint2(((v & 15) * 0x00204081u & 0x01010101u) << 4, ((v >> 4 & 15) * 0x00204081u & 0x01010101u) << 4);
}
// The 6-bit scale (x) and min (y) of sub-block sb (0-7) of a Q4_K or Q5_K block from its 12
// packed bytes (words w0, w1, w2), four sub-blocks' at once: bytes 0-3 of w0 and w1 hold
// sub-blocks 0-3 in their low 6 bits and the top bits of 4-7, whose low bits are w2's nibbles.
__device__ __forceinline__ uint2 k_scale_min(uint32_t w0, uint32_t w1, uint32_t w2, int sb)
{
    const uint32_t scw = sb < 4 ? w0 & 0x3f3f3f3fu : (w2 & 0x0f0f0f0fu) | ((w0 >> 2) & 0x30303030u);
    const uint32_t mnw = sb < 4 ? w1 & 0x3f3f3f3fu : ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 2) & 0x30303030u);
    return make_uint2((scw >> (8 * (sb & 3))) & 0xff, (mnw >> (8 * (sb & 3))) & 0xff);
}
template <int DT> __device__ __forceinline__ Ints ints(const Raw &r, int j)
{
    Ints o;
    if constexpr (DT == Q4_0 || DT == Q4_1 || kQ41G<DT> || DT == Q5_0 || DT == Q5_1) {
        const int shift = ((j >> 1) & 1) * 4;
        const bool q5 = DT == Q5_0 || DT == Q5_1;
        const uint32_t dm = q5 ? r.e[1] : r.e[0];
        o.b = make_uint2((r.q.x >> shift) & 0x0f0f0f0fu, (r.q.y >> shift) & 0x0f0f0f0fu);
        if constexpr (q5) {
            const uint2 h = spread_bits(r.e[0] >> (8 * j));
            o.b.x |= h.x;
            o.b.y |= h.y;
        }
        o.bias = DT == Q4_0 ? 8 : DT == Q5_0 ? 16 : 0;
        o.s = half_lo(dm);
        o.off = DT == Q4_1 || kQ41G<DT> || DT == Q5_1 ? half_hi(dm) : 0.0f;
    } else if constexpr (DT == Q8_0) {
        o.b = make_uint2(r.q.x ^ 0x80808080u, r.q.y ^ 0x80808080u);
        o.bias = 128;
        o.s = half_lo(r.e[0]);
        o.off = 0.0f;
    } else if constexpr (DT == Q2_K) {
        const int g = (j >> 2) & 3;
        o.b = make_uint2((r.q.x >> (2 * g)) & 0x03030303u, (r.q.y >> (2 * g)) & 0x03030303u);
        o.bias = 0;
        o.s = half_lo(r.e[1]) * small_float(r.e[0] & 15);
        o.off = -half_hi(r.e[1]) * small_float((r.e[0] >> 4) & 15);
    } else if constexpr (DT == Q3_K) {
        const int n = j >> 4, g = (j >> 2) & 3, s = j >> 1;
        const int lo = s < 8 ? (int)(r.e[2] & 15) : (int)(r.e[2] >> 4);
        const int hi = (int)(r.e[3] >> (2 * (s >> 2))) & 3;
        const int sh = 4 * n + g;
        o.b = make_uint2(((r.q.x >> (2 * g)) & 0x03030303u) | (((r.e[0] >> sh) & 0x01010101u) << 2),
                         ((r.q.y >> (2 * g)) & 0x03030303u) | (((r.e[1] >> sh) & 0x01010101u) << 2));
        o.bias = 4;
        o.s = half_lo(r.e[4]) * (small_float(lo | (hi << 4)) - 32.0f);
        o.off = 0.0f;
    } else if constexpr (DT == Q4_K || DT == Q5_K) {
        const int sb = j >> 2;
        const uint2 sm = k_scale_min(r.e[0], r.e[1], r.e[2], sb);
        const uint32_t sc = sm.x, mn = sm.y;
        const int shift = (sb & 1) * 4;
        o.b = make_uint2((r.q.x >> shift) & 0x0f0f0f0fu, (r.q.y >> shift) & 0x0f0f0f0fu);
        if constexpr (DT == Q5_K) {
            o.b.x |= ((r.e[4] >> sb) & 0x01010101u) << 4;
            o.b.y |= ((r.e[5] >> sb) & 0x01010101u) << 4;
        }
        o.bias = 0;
        o.s = half_lo(r.e[3]) * small_float(sc);
        o.off = -half_hi(r.e[3]) * small_float(mn);
    } else if constexpr (DT == Q6_K) {
        const int q4 = (j >> 2) & 3;
        const int sl = 4 * (q4 >> 1), sh = 2 * q4;
        o.b = make_uint2(((r.q.x >> sl) & 0x0f0f0f0fu) | (((r.e[0] >> sh) & 0x03030303u) << 4),
                         ((r.q.y >> sl) & 0x0f0f0f0fu) | (((r.e[1] >> sh) & 0x03030303u) << 4));
        o.bias = 32;
        o.s = half_lo(r.e[3]) * (small_float((r.e[2] & 0xff) ^ 0x80) - 128.0f);
        o.off = 0.0f;
    }
    return o;
}

// Two of the bytes of w (selector sel: 0x4140 for bytes 0 and 1, 0x4342 for 2 and 3) as a pair
// of T: each byte under T's exponent of 1024 (f16, 10 mantissa bits) or 128 (bf16, 7) makes
// that number plus the byte exactly; subtracting the number and the bias leaves the integer,
// exactly, and one multiply-add gives the weights, rounded once. No conversion instruction:
// those run at an eighth of the rate of arithmetic on the H100.
// Without scale (Scaled false) the pair is the integers themselves (the subtraction alone).
// raw_pair: the pair before the subtraction, the integers plus kMagic<T>.
template <typename T> constexpr float kMagic = tc::is_half<T> ? 1024.0f : 128.0f;
template <typename T> __device__ __forceinline__ uint32_t raw_pair(uint32_t w, uint32_t sel)
{
    return __byte_perm(tc::is_half<T> ? 0x64 : 0x43, w, sel ^ 0x4444);
}
template <typename T, bool Scaled = true>
__device__ __forceinline__ uint32_t pair_of(uint32_t w, uint32_t sel, int bias, uint32_t s2, uint32_t off2,
                                            bool has_off)
{
    uint32_t r;
    if constexpr (tc::is_half<T>) {
        uint32_t v = raw_pair<T>(w, sel);
        __half2 t = __hsub2(*reinterpret_cast<__half2 *>(&v), __half2half2(__int2half_rn(1024 + bias)));
        __half2 s = *reinterpret_cast<__half2 *>(&s2), o = *reinterpret_cast<__half2 *>(&off2);
        __half2 a = !Scaled ? t : has_off ? __hfma2(t, s, o) : __hmul2(t, s);
        r = *reinterpret_cast<uint32_t *>(&a);
    } else {
        uint32_t v = raw_pair<T>(w, sel);
        __nv_bfloat162 t = __hsub2(*reinterpret_cast<__nv_bfloat162 *>(&v),
                                   __bfloat162bfloat162(__int2bfloat16_rn(128 + bias)));
        __nv_bfloat162 s = *reinterpret_cast<__nv_bfloat162 *>(&s2), o = *reinterpret_cast<__nv_bfloat162 *>(&off2);
        __nv_bfloat162 a = !Scaled ? t : has_off ? __hfma2(t, s, o) : __hmul2(t, s);
        r = *reinterpret_cast<uint32_t *>(&a);
    }
    return r;
}

// The 8 bytes of b as four pairs of T (bytes 0-1 and 2-3 of b.x, then of b.y), each as pair_of
// makes it: the A fragment registers of one row's group of 8.
template <typename T, bool Scaled = true>
__device__ __forceinline__ uint4 pairs_of(uint2 b, int bias, uint32_t s2, uint32_t off2, bool has_off)
{
    return { pair_of<T, Scaled>(b.x, 0x4140, bias, s2, off2, has_off),
             pair_of<T, Scaled>(b.x, 0x4342, bias, s2, off2, has_off),
             pair_of<T, Scaled>(b.y, 0x4140, bias, s2, off2, has_off),
             pair_of<T, Scaled>(b.y, 0x4342, bias, s2, off2, has_off) };
}
template <typename T> __device__ __forceinline__ uint4 pairs_raw(uint2 b)
{
    return { raw_pair<T>(b.x, 0x4140), raw_pair<T>(b.x, 0x4342), raw_pair<T>(b.y, 0x4140), raw_pair<T>(b.y, 0x4342) };
}

// Q4_1's grouped types (one scale and offset for a block's 2 or 4 chunks) in the mma16816 loops:
// the weights go in raw (pairs_raw, not subtracted), each chunk adding to a block's sums of
// weights times x (t) and of x (u, all-ones weights); at the block's end w = s (v - kMagic) +
// off is applied once, s times t and off - kMagic s times u, into acc (mma16816's C: rows g and g
// + 8 of a and b). The sums of the larger values round at 2^-24 of kMagic times x's, far under
// the 16-bit x's own rounding. H200, bench_ops quant q4_1_g128 at 8 rows: 7.3 / 15.7 / 14.6 ->
// 6.7 / 14.2 / 13.3 us; per chunk, for Q4_1, Q5_1, Q4_K and Q5_K (only the subtractions saved),
// no faster.
template <typename T>
__device__ __forceinline__ void raw_mma(float (&t)[4], float (&u)[4], const uint4 &a, const uint4 &b, const uint4 &xx)
{
    const uint32_t one = tc::pack2<T>(1.0f, 1.0f);
    tc::mma16816<T>(t, a.x, b.x, a.y, b.y, xx.x, xx.y);
    tc::mma16816<T>(t, a.z, b.z, a.w, b.w, xx.z, xx.w);
    tc::mma16816<T>(u, one, one, one, one, xx.x, xx.y);
    tc::mma16816<T>(u, one, one, one, one, xx.z, xx.w);
}
template <typename T>
__device__ __forceinline__ void raw_fold(float (&acc)[4], const float (&t)[4], const float (&u)[4], const Ints &a,
                                         const Ints &b)
{
    const float oa = fmaf(-kMagic<T>, a.s, a.off), ob = fmaf(-kMagic<T>, b.s, b.off);
    acc[0] = fmaf(a.s, t[0], fmaf(oa, u[0], acc[0]));
    acc[1] = fmaf(a.s, t[1], fmaf(oa, u[1], acc[1]));
    acc[2] = fmaf(b.s, t[2], fmaf(ob, u[2], acc[2]));
    acc[3] = fmaf(b.s, t[3], fmaf(ob, u[3], acc[3]));
}

// Types whose scale covers each chunk of 32 elements that a tensor-core step takes: their
// integers go into the products as they are (exact in 16 bits), the scale and offset are
// applied to each chunk's f32 sums. The others (scales per 16) take kHalfScale's path below in
// decode, and fold their scales into the weights where dequantised to 16 bits (batched, tiles).
template <int DT> constexpr bool kChunkScale = DT == Q4_0 || DT == Q4_1 || kQ41G<DT> || DT == Q5_0 || DT == Q5_1 ||
                                               DT == Q8_0 || DT == Q4_K || DT == Q5_K;
template <int DT> constexpr bool kHasOff = DT == Q4_1 || kQ41G<DT> || DT == Q5_1 || DT == Q2_K || DT == Q4_K || DT == Q5_K;


// Types whose scales cover 16 elements (Q2_K, Q3_K, Q6_K): their integers go into the products
// as they are too, each product covering one scale group, so that the two sums of a chunk are
// scaled apart. Lane p then takes elements 4p .. 4p + 3 of the chunk's first half and of its
// second (fetch_halves: a quad of each, of the same bytes and shifts), x the same ones.
template <int DT> constexpr bool kHalfScale = DT == Q2_K || DT == Q3_K || DT == Q6_K;

// Lane p's two quads of chunk c (elements 32c + 4p .. + 3 and 32c + 16 + 4p .. + 3) of block
// blk, with the scale bytes of the chunk's two groups.
template <int DT, typename I = int64_t> __device__ __forceinline__ Raw fetch_halves(const Planes &P, I blk, int c, int p)
{
    Raw r;
    const int n = c >> 2, q4 = c & 3;
    if constexpr (DT == Q6_K) {
        const uint8_t *ql = P.p[0] + (uint64_t)blk * 128 + n * 64 + (q4 & 1) * 32 + 4 * p,
                      *qh = P.p[1] + (uint64_t)blk * 64 + n * 32 + 4 * p;
        r.q = make_uint2(ld4(ql), ld4(ql + 16));
        r.e[0] = ld4(qh);
        r.e[1] = ld4(qh + 16);
        r.e[2] = ld2(P.p[2] + (uint64_t)blk * 16 + 2 * c);
        r.e[3] = ld2(P.p[3] + (uint64_t)blk * 2);
    } else {
        const uint8_t *qs = P.p[0] + (uint64_t)blk * 64 + n * 32 + 4 * p;
        r.q = make_uint2(ld4(qs), ld4(qs + 16));
        if constexpr (DT == Q2_K) {
            r.e[0] = ld2(P.p[1] + (uint64_t)blk * 16 + 2 * c);
            r.e[1] = ld4(P.p[2] + (uint64_t)blk * 4);
        } else {
            const uint8_t *hm = P.p[1] + (uint64_t)blk * 32 + 4 * p, *sc = P.p[2] + (uint64_t)blk * 12;
            r.e[0] = ld4(hm);
            r.e[1] = ld4(hm + 16);
            r.e[2] = ld2(sc + ((2 * c) & 7));
            r.e[3] = ld2(sc + 8 + ((2 * c) & 3));
            r.e[4] = ld2(P.p[3] + (uint64_t)blk * 2);
        }
    }
    return r;
}

// The two quads as small unsigned integers (the first half's in b.x), and each half's scale
// and offset: w = s[h] (b - bias) + off[h].
struct Ints2 {
    uint2 b;
    int bias;
    float s[2], off[2];
};
template <int DT> __device__ __forceinline__ Ints2 ints_halves(const Raw &r, int c)
{
    Ints2 o;
    const int q4 = c & 3;
    if constexpr (DT == Q6_K) {
        const int sl = 4 * (q4 >> 1), sh = 2 * q4;
        o.b = make_uint2(((r.q.x >> sl) & 0x0f0f0f0fu) | (((r.e[0] >> sh) & 0x03030303u) << 4),
                         ((r.q.y >> sl) & 0x0f0f0f0fu) | (((r.e[1] >> sh) & 0x03030303u) << 4));
        o.bias = 32;
        const float d = half_lo(r.e[3]);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            o.s[h] = d * (small_float(((r.e[2] >> (8 * h)) & 0xff) ^ 0x80) - 128.0f);
            o.off[h] = 0.0f;
        }
    } else if constexpr (DT == Q2_K) {
        o.b = make_uint2((r.q.x >> (2 * q4)) & 0x03030303u, (r.q.y >> (2 * q4)) & 0x03030303u);
        o.bias = 0;
        const float d = half_lo(r.e[1]), dmin = half_hi(r.e[1]);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint32_t sc = (r.e[0] >> (8 * h)) & 0xff;
            o.s[h] = d * small_float(sc & 15);
            o.off[h] = -dmin * small_float(sc >> 4);
        }
    } else {
        const int n = c >> 2, sh = 4 * n + q4, s = 2 * c;
        o.b = make_uint2(((r.q.x >> (2 * q4)) & 0x03030303u) | (((r.e[0] >> sh) & 0x01010101u) << 2),
                         ((r.q.y >> (2 * q4)) & 0x03030303u) | (((r.e[1] >> sh) & 0x01010101u) << 2));
        o.bias = 4;
        const float d = half_lo(r.e[4]);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint32_t lo_b = (r.e[2] >> (8 * h)) & 0xff, hi_b = (r.e[3] >> (8 * h)) & 0xff;
            const uint32_t lo = s < 8 ? lo_b & 15 : lo_b >> 4, hi = (hi_b >> (2 * (s >> 2))) & 3;
            o.s[h] = d * (small_float(lo | (hi << 4)) - 32.0f);
            o.off[h] = 0.0f;
        }
    }
    return o;
}
// The integers (b - bias) of q as four pairs of T, exact. Q8_0's do not fit bf16's magic
// number: they go through f32 (exact there, and as bf16 too: 8 significant bits).
template <typename T, int DT> __device__ __forceinline__ uint4 frag_int(const Ints &q)
{
    if constexpr (DT == Q8_0 && !tc::is_half<T>) {
        float v[8];
#pragma unroll
        for (int i = 0; i < 8; i++)
            v[i] = __int_as_float(0x4b000000 | byte_of(q.b, i)) - 8388736.0f;
        return { tc::pack2<T>(v[0], v[1]), tc::pack2<T>(v[2], v[3]), tc::pack2<T>(v[4], v[5]),
                 tc::pack2<T>(v[6], v[7]) };
    } else {
        return pairs_of<T, false>(q.b, q.bias, 0, 0, false);
    }
}

// The 8 weights of group j as four pairs of T, the A fragment registers of the batched
// kernel (the decode kernel multiplies integers, frag_int). Q8_0's bytes do not fit bf16's 7 mantissa bits: those go through f32 (an exact
// float from each byte by the same trick, one multiply, then a rounding pack).
template <typename T, int DT> __device__ __forceinline__ uint4 frag_ints(const Ints &q)
{
    if constexpr (DT == Q8_0 && !tc::is_half<T>) {
        float v[8];
#pragma unroll
        for (int i = 0; i < 8; i++)
            v[i] = (__int_as_float(0x4b000000 | byte_of(q.b, i)) - 8388736.0f) * q.s;
        return { tc::pack2<T>(v[0], v[1]), tc::pack2<T>(v[2], v[3]), tc::pack2<T>(v[4], v[5]),
                 tc::pack2<T>(v[6], v[7]) };
    } else {
        return pairs_of<T>(q.b, q.bias, tc::pack2<T>(q.s, q.s), tc::pack2<T>(q.off, q.off), kHasOff<DT>);
    }
}
template <typename T, int DT> __device__ __forceinline__ uint4 frag(const Raw &r, int j)
{
    return frag_ints<T, DT>(ints<DT>(r, j));
}

// Lane p's weights of a chunk in x's own order, for the batched kernel's wgmma (kBatchNat):
// elements 2p, 2p + 1, 2p + 8, 2p + 9 (a fragment's first product), then those plus 16 (its
// second), where the other kernels take 8p .. 8p + 7. nat8: the bytes of a 32-byte run whose
// byte e holds element e (Q4_K's and Q5_K's quants and fifth bits, Q8_0's quants), in that
// order; nat_nibbles: a 16-byte run whose byte i holds elements i and i + 16 in its nibbles
// (Q4_0's and Q4_1's quants), the first four elements' in b.x, the second's in b.y.
__device__ __forceinline__ uint2 nat8(const uint8_t *run, int p)
{
    const uint8_t *w = run + 4 * (p >> 1);
    const uint32_t sel = p & 1 ? 0x7632 : 0x5410;
    return make_uint2(__byte_perm(ld4(w), ld4(w + 8), sel), __byte_perm(ld4(w + 16), ld4(w + 24), sel));
}
__device__ __forceinline__ uint2 nat_nibbles(const uint8_t *run, int p)
{
    const uint8_t *w = run + 4 * (p >> 1);
    const uint32_t v = __byte_perm(ld4(w), ld4(w + 8), p & 1 ? 0x7632 : 0x5410);
    return make_uint2(v & 0x0f0f0f0fu, (v >> 4) & 0x0f0f0f0fu);
}

// Group j of block blk, loaded and decoded to f32: each byte made an exact float by the
// same trick as pair_of (2^23 plus the byte), then one multiply-add (no conversion
// instruction).
template <int DT> __device__ __forceinline__ void deq8(const Planes &P, int64_t blk, int j, float (&v)[8])
{
    const Ints q = ints<DT>(fetch<DT>(P, blk, j), j);
    const float base = 8388608.0f + (float)q.bias;
#pragma unroll
    for (int i = 0; i < 8; i++)
        v[i] = fmaf(__int_as_float(0x4b000000 | byte_of(q.b, i)) - base, q.s, q.off);
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
    case Q4_1G: f(Int<Q4_1G>{}); break;
    case Q4_1G128: f(Int<Q4_1G128>{}); break;
    }
}

// Rows [r0, r0 + rows) of w (n_rows x k, planes) into out (rows x k, row stride os) as T,
// or, with ids, rows ids[i] (outside [0, n_rows): a NaN row). A block per row (grid-stride), a
// thread per group of 8 of it: no division by the row length (a 64-bit division of a flat
// index per group held the 512-row products to 0.44 T weights/s on the H100).
template <typename T, int DT>
__device__ void dequant_rows(T *out, const void *w, int64_t n_rows, int64_t k, int64_t r0, int64_t rows,
                             const int32_t *ids, int64_t os)
{
    constexpr Layout L = layout(DT);
    constexpr int GB = L.block / 8;
    const Planes P = planes<DT>(w, n_rows * (k / L.block));
    const int64_t nb = k / L.block;
    const int groups = (int)(k / 8);
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t src = ids ? ids[r] : r0 + r;
        const bool bad = src < 0 || src >= n_rows;
        const uint32_t rblk = bad ? 0 : (uint32_t)(src * nb);
        T *orow = out + r * os;
        for (int g = threadIdx.x; g < groups; g += blockDim.x) {
            float v[8];
            if (bad) {
#pragma unroll
                for (int i = 0; i < 8; i++)
                    v[i] = __int_as_float(0x7fc00000);
            } else {
                const Ints q = ints<DT>(fetch<DT, uint32_t>(P, rblk + g / GB, g % GB), g % GB);
                const float base = 8388608.0f + (float)q.bias;
#pragma unroll
                for (int i = 0; i < 8; i++)
                    v[i] = fmaf(__int_as_float(0x4b000000 | byte_of(q.b, i)) - base, q.s, q.off);
            }
            T *o = orow + (int64_t)g * 8;
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
}

template <int DT>
__device__ void simt_rows(float *out, const float *x, const void *w, int m, int64_t n, int64_t k, int64_t xs,
                          int64_t os, int flags)
{
    constexpr Layout L = layout(DT);
    constexpr int GB = L.block / 8; // groups a block
    const bool swiglu = flags & 1;
    const Planes P = planes<DT>(w, (swiglu ? 2 * n : n) * (k / L.block));
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

// 1 to 8 rows of 16-bit x on the tensor cores. A block of kWarps warps takes 16 weight rows at a
// time (the rows of an m16n8k16 product; x's rows are its columns) and each warp a share of k,
// in steps of S blocks. A warp streams its steps' weights through shared memory: each step's
// bytes of its 16 rows, plane by plane, are copied with 16-byte cp.async into a ring of nst
// stages, nst - 1 steps ahead of the one it computes, across rows and tiles, so that several
// kilobytes a warp are always on their way whatever the type's density (holding them in
// registers, 8 bytes a lane and a few chunks deep, kept every type at 0.5-1 TB/s). The first
// steps are requested before the kernel waits for its inputs: they read only weights.
//
// Computing a step, lane (g, p) = (l / 4, l % 4) dequantises group p of each chunk of 32
// (8 weights) of rows g and g + 8 from shared memory into registers, in x's dtype; its fragment
// slots {2p, 2p + 1, 2p + 8, 2p + 9} of the chunk's first product stand for elements 0-3 of the
// group, of the second for 4-7, and x's row g is read the same way, so the products are the
// dot products. The warps' sums meet in shared memory in a fixed order. With SwiGLU (flags bit
// 0) the block takes the 16 up rows (n on) after the gate rows; bit 1 adds to out.
constexpr int kWarps = 8;

// Calls f(Int<i>) for each i in [I, N).
template <int I, int N, typename F> __device__ __forceinline__ void each(F &&f)
{
    if constexpr (I < N) {
        f(Int<I>{});
        each<I + 1, N>(f);
    }
}

// One step of a warp's pipeline: S blocks of each of 16 rows. A plane's bytes of a row's S
// blocks are contiguous; the copy takes the 16-byte units that cover them, the first of which
// may start up to 16 - a bytes early (a: the largest power of two up to 16 dividing the field's
// size, so dividing every block's offset), which the reads then skip. units(f) is how many that
// can be, first(f) where plane f's begin in a row's share of the stage.
template <int DT, int SS = 0> struct Step {
    static constexpr Layout L = layout(DT);
    // Steps of 256 elements (Q8_0: 128), whose fixed costs (the copies' addresses, the wait) the
    // chunks share; at most 3584 bytes for 16 rows. SS (> 0) sets the blocks a step instead.
    static constexpr int S = SS > 0 ? SS : L.block == 32 ? (DT == Q8_0 ? 4 : 8) : L.block == 64 ? 4 : L.block == 128 ? 2 : 1,
                         CPB = L.block / 32;
    __host__ __device__ static constexpr int align(int v) { return v % 16 == 0 ? 16 : v % 8 == 0 ? 8 : v % 4 == 0 ? 4 : v % 2 == 0 ? 2 : 1; }
    __host__ __device__ static constexpr int units(int f) { return (16 - align(L.f[f].size) + S * L.f[f].size + 15) / 16; }
    __host__ __device__ static constexpr int first(int f) { return f == 0 ? 0 : first(f - 1) + units(f - 1); }
    static constexpr int row_bytes = 16 * first(L.nf), bytes = 16 * row_bytes;
};

// A 16-byte cp.async to a shared-memory address, asking L2 for the whole 128-byte line around
// it (.L2::128B), so that a row's next units are on their way with its first (H200, 7B batch 1:
// Q4_K_M 510-514 -> 520-524 tokens/s, Q6_K 431-436 -> 439-442, Q4_0 unchanged; 256 bytes was
// slower: Q4_K_M 496-497).
__device__ __forceinline__ void cp_async16_s(uint32_t to, const void *from)
{
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(to), "l"(from));
}

// Unit u of a row's copy of one field (`size` bytes a block) for a step of S blocks, cnt of them
// there, whose bytes start at `at`: a field of whole 16-byte units copies its unit u (only a
// row's last, short step has fewer); another copies the units that cover its bytes from the
// 16-byte boundary at or before `at` (planes start 256-byte aligned).
template <int S, int size>
__device__ __forceinline__ void copy_unit(uint32_t to, const uint8_t *at, uint32_t u, uint32_t cnt)
{
    if constexpr (size % 16 == 0) {
        if (S == 1 || u < cnt * (size / 16))
            cp_async16_s(to, at + 16 * u);
    } else {
        // The unit starts 16 u - (a & 15) bytes after the field: copied where that is before
        // the step's last byte (tested in 32 bits).
        const uintptr_t a = reinterpret_cast<uintptr_t>(at);
        if (16 * u < (S == 1 ? (uint32_t)size : cnt * size) + ((uint32_t)a & 15))
            cp_async16_s(to, reinterpret_cast<const void *>((a & ~(uintptr_t)15) + 16 * u));
    }
}

// cp.async.wait_group for a run-time n (0 to 5; more waits as for 5, which waits for more).
__device__ __forceinline__ void wait_copies(int n)
{
    switch (n) {
    case 0: tc::cp_wait<0>(); break;
    case 1: tc::cp_wait<1>(); break;
    case 2: tc::cp_wait<2>(); break;
    case 3: tc::cp_wait<3>(); break;
    case 4: tc::cp_wait<4>(); break;
    default: tc::cp_wait<5>(); break;
    }
}

// One row of bf16 x (batch-1 decode) on the integer tensor cores, for every block type (Q2_K's
// and Q3_K's on Hopper alone). The kernel of 1 to 8 rows above spends most of its issue slots
// per weight on dequantising to 16 bits and on scales: each lane decodes the scale of every
// row and chunk it touches, four lanes the same one, and for one row of x seven of the eight
// columns of each product are empty (H100, 7B Q4_K 11008 x 4096: 4.8 weights an instruction,
// 1.4 TB/s). Here each block first writes x's row to shared memory as two 8-bit integer digits,
// x = dx (q1 + q2 / 254) with a scale dx per 32 elements (max |x| / 127, as llama.cpp's q8_1
// keeps it; with one digit alone the products' error reached 1.5% of the largest output under
// SwiGLU on random data, beyond the bf16 tolerance; with two it is below bf16's own rounding),
// and the sum of each 16 elements; the products are m16n8k32 integer ones whose eight columns are eight groups of k: column c
// of B holds x only in the k slots 4c .. 4c + 3 (in the lanes that supply it, zeros elsewhere),
// so that product i adds part i (elements 4i .. 4i + 3) of each column's group to that column's
// sum, and after GS / 4 products (for each digit) column c holds the integer dot product of each
// of the 16 rows with group c. Weights go in as their bare unsigned quants (Q8_0's signed), masked out of the
// bytes with one logic operation a word (a high nibble left in place counts 16 times: its sum is
// scaled by 1 / 16); every lane then scales two groups of two rows, each once. About 24
// weights an instruction.
// The elements of a column's group (Q4_K's scales cover 32; the others' groups are halves of
// 32-element blocks (Q4_0, Q8_0) or Q6_K's scale groups).
template <int DT> constexpr int kGS = DT == Q4_K || DT == Q5_K ? 32 : 16;
// Where column c's group starts in a set of 8 groups (the step's elements in order): Q4_K's
// column j < 4 is sub-block 2j, whose quants are the low nibbles of bytes that hold sub-block
// 2j + 1's (column j + 4) in their high ones; Q4_0's and Q8_0's columns j and j + 4 are block
// j's two halves; Q2_K's, Q3_K's and Q6_K's eight groups of a half-block in order.
template <int DT> __device__ __forceinline__ int xoff(int c)
{
    if constexpr (DT == Q4_K || DT == Q5_K)
        return 64 * (c & 3) + 32 * (c >> 2);
    else if constexpr (kHalfScale<DT>)
        return 16 * c;
    else
        return 32 * (c & 3) + 16 * (c >> 2);
}

// c += a b: A 16 x 32 of 8-bit integers (unsigned, or signed with SA), B 32 x 8 signed, C int32.
// Fragments as mma16816's with four 8-bit elements a register: A (row g, k 4p .. 4p + 3),
// (row g + 8, same), (row g, k 16 + 4p ..), (row g + 8, same); B (k 4p .., col g), (k 16 + 4p
// .., col g).
template <bool SA>
__device__ __forceinline__ void imma16832(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                          uint32_t b1)
{
    if constexpr (SA)
        asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Chunks [c0, c1) of 32 elements of x's NX rows (k elements, xstride apart) as two 8-bit
// digits, row j's q1 in xq[2kj, 2kj + k) and q2 in xq[2kj + k, 2kj + 2k), with xs[k / 16 j + i]
// = (dx of the 32 elements holding 16-element group i, the sum of group i's elements). A warp's
// work (each warp rounds the part of x its share of k reads: no barrier between the warps). A
// NaN or infinity in a chunk makes its dx NaN, so that it reaches every product that reads the
// chunk. The block's
// threads take 8 elements each, a quad a chunk. With an RMSNorm's weight nw (k elements), x times
// nw is what is rounded; the result is the lane's sum of squares of x itself (the norm's
// 1 / rms scales the product's sums instead: the product is linear in x). The loads of R
// rounds of 8 chunks are issued before the first is used, and after() is called once, when the
// first R rounds' loads are on their way (the caller asks for more weights there); ss[j] is
// row j's. R = 4 covers a warp's share of 4096-element rows and most of 11008; the two-product
// kernels, whose two types' code shares one register allocation, take R = 2 (their x is a
// layer's input: 4096 elements at 7B), which ptxas holds without spilling, and so do two rows
// (the same loads in flight as four rounds of one).
template <int R, int NX = 1, typename T, typename F>
__device__ __forceinline__ void quantise_x(int8_t *xq, float2 *xs, const T *x, int64_t xstride, int64_t k, int c0,
                                           int c1, const T *nw, F &&after, float (&ss)[NX])
{
    const int q = threadIdx.x & 3, cl = (int)((threadIdx.x & 31) >> 2);
#pragma unroll
    for (int xr = 0; xr < NX; xr++)
        ss[xr] = 0.0f;
    bool called = false;
    for (int b0 = c0; b0 < c1; b0 += 8 * R) {
        uint4 xv[NX][R], gvv[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int c = b0 + 8 * r + cl;
            const bool in = c < c1;
#pragma unroll
            for (int xr = 0; xr < NX; xr++)
                xv[xr][r] = in ? *reinterpret_cast<const uint4 *>(x + xstride * xr + 32 * (int64_t)c + 8 * q)
                               : make_uint4(0, 0, 0, 0);
            gvv[r] = in && nw ? *reinterpret_cast<const uint4 *>(nw + 32 * (int64_t)c + 8 * q) : make_uint4(0, 0, 0, 0);
        }
        if (!called) {
            called = true;
            after();
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (b0 + 8 * r >= c1)
                break;
            const int c = b0 + 8 * r + cl;
            const bool in = c < c1;
#pragma unroll
            for (int xr = 0; xr < NX; xr++) {
                const uint4 v = xv[xr][r], gv = gvv[r];
                const T *e = reinterpret_cast<const T *>(&v), *ge = reinterpret_cast<const T *>(&gv);
                float f[8], amax = 0.0f, sum = 0.0f;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    f[i] = tc::to_f32(e[i]);
                    ss[xr] = fmaf(f[i], f[i], ss[xr]);
                    if (nw)
                        f[i] *= tc::to_f32(ge[i]);
                    amax = fmaxf(amax, fabsf(f[i]));
                    sum += f[i];
                }
                amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
                amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
                const float s16 = sum + __shfl_xor_sync(0xffffffffu, sum, 1), s32 = s16 + __shfl_xor_sync(0xffffffffu, s16, 2);
                const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
                // The digits rounded to integers by adding 1.5 * 2^23 (to nearest, ties to even, as
                // __float2int_rn), whose sum's low byte is the digit in two's complement (both lie in
                // [-127, 127]) and which, subtracted again, gives q1 as a float: the same digits
                // without three conversions an element on the slower conversion pipe.
                constexpr float kRound = 12582912.0f;
                uint32_t t[8], u[8];
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    const float v = f[i] * inv, tv = __fadd_rn(v, kRound), q1 = tv - kRound;
                    t[i] = __float_as_uint(tv);
                    u[i] = __float_as_uint(__fadd_rn(__fmul_rn(v - q1, 254.0f), kRound));
                }
                uint32_t d1[2], d2[2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    d1[h] = __byte_perm(__byte_perm(t[4 * h], t[4 * h + 1], 0x0040), __byte_perm(t[4 * h + 2], t[4 * h + 3], 0x0040),
                                        0x5410);
                    d2[h] = __byte_perm(__byte_perm(u[4 * h], u[4 * h + 1], 0x0040), __byte_perm(u[4 * h + 2], u[4 * h + 3], 0x0040),
                                        0x5410);
                }
                if (in) {
                    int8_t *xqr = xq + 2 * k * xr;
                    *reinterpret_cast<uint2 *>(xqr + 32 * c + 8 * q) = make_uint2(d1[0], d1[1]);
                    *reinterpret_cast<uint2 *>(xqr + k + 32 * c + 8 * q) = make_uint2(d2[0], d2[1]);
                    if (!(q & 1))
                        xs[(k / 16) * xr + 2 * c + (q >> 1)] = make_float2(amax * (1.0f / 127.0f) + 0.0f * s32, s16);
                }
            }
        }
    }
    if (!called)
        after();
}

// Words of shared memory, four a 16-byte load.
template <int N> __device__ __forceinline__ void lds_words(uint32_t (&w)[N], const uint8_t *p)
{
#pragma unroll
    for (int i = 0; i < N; i += 4) {
        const uint4 v = *reinterpret_cast<const uint4 *>(p + 4 * i);
        w[i] = v.x, w[i + 1] = v.y, w[i + 2] = v.z, w[i + 3] = v.w;
    }
}

// One step of a warp's 16 rows (Q: rows g and g + 8 in the stage) against x's NX rows (row i's
// digits at xq + 2 k i, its scales and sums at xs + k / 16 i): the step's sets of 8 groups, each
// GS / 4 integer products a row of x over the same weight registers, then each lane's two
// columns (2p, 2p + 1) of its two rows scaled into acc[i]. b0: the step's first block; cnt: its
// blocks.
template <int DT, int NX = 1>
__device__ __forceinline__ void q8_step(const Planes (&Q)[2], uint32_t b0, uint32_t cnt, const int8_t *xq,
                                        uint32_t k, const float2 *xs, int g, int p,
                                        float (&acc)[NX][2])
{
    constexpr Layout L = layout(DT);
    constexpr int GS = kGS<DT>, PARTS = GS / 4, SETS = Step<DT>::S * L.block / (8 * GS);
    // A column's chunk of 32 within the step (types of 32-, 64- and 128-element blocks) and whether the
    // step has it.
    auto valid = [&](int t, int c) { return L.block == 256 || (uint32_t)(4 * t + (c & 3)) < cnt * (L.block / 32); };
#pragma unroll
    for (int t = 0; t < SETS; t++) {
        const uint32_t es = b0 * L.block + t * 8 * GS;
        // x's digits for the column this lane supplies (b0 or b1), zeros for the other. Every
        // lane loads its column g's digits (a quarter-warp's lanes read two addresses, in
        // different banks) and keeps them where it supplies them (past a row's end, in its
        // last step, the bytes read lie in the scales or the ring and none is kept): zeros
        // loaded from one place by the other lanes had shared banks with the real columns'
        // (H200 ncu: 42% more shared-memory wavefronts than the accesses needed; 7B Q4_0
        // decode 497 -> 526 tokens/s, AWQ 481-487 -> 503-505).
        const bool in = valid(t, g), ina = in && g == p, inb = in && g == p + 4;
        uint32_t wa[2][PARTS], wb[2][PARTS];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            if constexpr (DT == Q4_K) {
                uint32_t w[8];
                lds_words(w, Q[r].p[0] + 32 * p);
#pragma unroll
                for (int i = 0; i < 8; i++)
                    wa[r][i] = w[i] & 0x0f0f0f0fu, wb[r][i] = w[i] & 0xf0f0f0f0u;
            } else if constexpr (DT == Q5_K) {
                // Sub-blocks 2p and 2p + 1: their fifth bits are bits 2p and 2p + 1 of qh's bytes.
                uint32_t w[8], h[8];
                lds_words(w, Q[r].p[0] + 32 * p);
                lds_words(h, Q[r].p[1]);
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    wa[r][i] = (w[i] & 0x0f0f0f0fu) | (((h[i] >> (2 * p)) & 0x01010101u) << 4);
                    wb[r][i] = ((w[i] >> 4) & 0x0f0f0f0fu) | (((h[i] >> (2 * p + 1)) & 0x01010101u) << 4);
                }
            } else if constexpr (DT == Q5_0 || DT == Q5_1) {
                // Block 4t + p: element e's fifth bit is bit e of qh.
                uint32_t w[4];
                lds_words(w, Q[r].p[0] + 16 * (4 * t + p));
                const uint32_t h = ld4(Q[r].p[1] + 4 * (4 * t + p));
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    wa[r][i] = (w[i] & 0x0f0f0f0fu) | spread_bits(h >> (4 * i)).x;
                    wb[r][i] = ((w[i] >> 4) & 0x0f0f0f0fu) | spread_bits(h >> (16 + 4 * i)).x;
                }
            } else if constexpr (DT == Q4_0 || DT == Q4_1 || kQ41G<DT>) {
                // (Q4_1G: chunk 4t + p is half (4t + p) % 2 of block (4t + p) / 2, the same bytes;
                // Q4_1G128: quarter (4t + p) % 4 of block (4t + p) / 4.)
                uint32_t w[4];
                lds_words(w, Q[r].p[0] + 16 * (4 * t + p));
#pragma unroll
                for (int i = 0; i < 4; i++)
                    wa[r][i] = w[i] & 0x0f0f0f0fu, wb[r][i] = w[i] & 0xf0f0f0f0u;
            } else if constexpr (DT == Q8_0) {
                uint32_t w[8];
                lds_words(w, Q[r].p[0] + 32 * p);
#pragma unroll
                for (int i = 0; i < 4; i++)
                    wa[r][i] = w[i], wb[r][i] = w[4 + i];
            } else if constexpr (DT == Q2_K || DT == Q3_K) {
                // Half-block t: column p is its elements 16p .. 16p + 15, bits 2jj (jj = p / 2)
                // of qs[32t + 16h ..] (h = p % 2) with Q3_K's high bit 4t + jj of hmask[16h ..];
                // column p + 4 is elements 16p + 64 .., the same bytes' bits 2jj + 4 and high
                // bit 4t + jj + 2 (Q3_K's quants as q + 4, 0 .. 7).
                const int jj = p >> 1, h = p & 1;
                uint32_t qs[4], hm[4] = {};
                lds_words(qs, Q[r].p[0] + 32 * t + 16 * h);
                if constexpr (DT == Q3_K)
                    lds_words(hm, Q[r].p[1] + 16 * h);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    wa[r][i] = (qs[i] >> (2 * jj)) & 0x03030303u;
                    wb[r][i] = (qs[i] >> (2 * jj + 4)) & 0x03030303u;
                    if constexpr (DT == Q3_K) {
                        // (the high bits moved to bit 2 of their bytes)
                        wa[r][i] |= (t ? hm[i] >> (2 + jj) : hm[i] << (2 - jj)) & 0x04040404u;
                        wb[r][i] |= (hm[i] >> (4 * t + jj)) & 0x04040404u;
                    }
                }
            } else {
                // Q6_K, half-block t: column p is sub-row jj = p / 2's elements 16h .. 16h + 15
                // (h = p % 2), the low nibbles of ql[32 jj + 16h ..] with bits 2jj of qh[16h ..];
                // column p + 4 is sub-row jj + 2's, the same bytes' high nibbles and qh bits.
                const int jj = p >> 1, h = p & 1;
                uint32_t ql[4], qh[4];
                lds_words(ql, Q[r].p[0] + 64 * t + 32 * jj + 16 * h);
                lds_words(qh, Q[r].p[1] + 32 * t + 16 * h);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    wa[r][i] = (ql[i] & 0x0f0f0f0fu) | ((qh[i] << (4 - 2 * jj)) & 0x30303030u);
                    wb[r][i] = ((ql[i] >> 4) & 0x0f0f0f0fu) | ((qh[i] >> (2 * jj)) & 0x30303030u);
                }
            }
        }
        int d[NX][4] = {}, e[NX][4] = {};
#pragma unroll
        for (int xr = 0; xr < NX; xr++) {
            uint32_t x0[PARTS], x1[PARTS], y0[PARTS], y1[PARTS], xw[PARTS], yw[PARTS];
            const uint8_t *xc = reinterpret_cast<const uint8_t *>(xq + 2 * k * xr + es + xoff<DT>(g));
            lds_words(xw, xc);
            lds_words(yw, xc + k);
#pragma unroll
            for (int i = 0; i < PARTS; i++) {
                x0[i] = ina ? xw[i] : 0u;
                x1[i] = inb ? xw[i] : 0u;
                y0[i] = ina ? yw[i] : 0u;
                y1[i] = inb ? yw[i] : 0u;
            }
#pragma unroll
            for (int i = 0; i < PARTS; i++) {
                imma16832<DT == Q8_0>(d[xr], wa[0][i], wa[1][i], wb[0][i], wb[1][i], x0[i], x1[i]);
                imma16832<DT == Q8_0>(e[xr], wa[0][i], wa[1][i], wb[0][i], wb[1][i], y0[i], y1[i]);
            }
        }
        // Q4_K's and Q5_K's packed scales and (d, dmin) of each row, read once for both columns.
        uint32_t kw[2][4] = {};
        if constexpr (DT == Q4_K || DT == Q5_K) {
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const uint4 m = k_meta<DT>(Q[r], 0u);
                kw[r][0] = m.x, kw[r][1] = m.y, kw[r][2] = m.z, kw[r][3] = m.w;
            }
        }
        // Lane (g, p) holds columns 2p and 2p + 1 of rows g (d[0], d[1]) and g + 8 (d[2], d[3]).
        if constexpr (kHalfScale<DT>) {
            // Columns 2p and 2p + 1 are the two 16-element groups of x's chunk p (one dx): their
            // integer sums times their integer scales are added in int32 (at most 2 x 16 x 63 x
            // 127 x 128), then scaled once; the offsets (Q3_K's and Q6_K's bias, Q2_K's min)
            // times each group's sum of x. Scale bytes: Q2_K's 8t + c (d times the low nibble,
            // dmin the high one), Q6_K's 8t + c (signed), Q3_K's 6 bits less 32, the low four in
            // nibble t of byte c and the high two at bit 2 (2t + c / 4) of byte 8 + c % 4. (The
            // lane's two bytes are read from the stage: indexing words held in registers by the
            // lane's column would put them in local memory.)
            const int c = 2 * p;
#pragma unroll
            for (int r = 0; r < 2; r++) {
                int s0, s1;
                float dd, o0, o1;
                if constexpr (DT == Q2_K) {
                    const uint32_t sc = ld2(Q[r].p[1] + 8 * t + c), dm = ld4(Q[r].p[2]);
                    s0 = (int)(sc & 15u), s1 = (int)((sc >> 8) & 15u);
                    dd = half_lo(dm);
                    o0 = -half_hi(dm) * small_float((sc >> 4) & 15u);
                    o1 = -half_hi(dm) * small_float(sc >> 12);
                } else {
                    if constexpr (DT == Q3_K) {
                        const uint32_t lo = ld2(Q[r].p[2] + c) >> (4 * t),
                                       hi = ld2(Q[r].p[2] + 8 + 2 * (p & 1)) >> (2 * (2 * t + (p >> 1)));
                        s0 = (int)((lo & 15u) | ((hi & 3u) << 4)) - 32;
                        s1 = (int)(((lo >> 8) & 15u) | (((hi >> 8) & 3u) << 4)) - 32;
                        dd = half_lo(ld2(Q[r].p[3]));
                    } else {
                        const uint32_t sc = ld2(Q[r].p[2] + 8 * t + c);
                        s0 = (int)(int8_t)(sc & 0xffu), s1 = (int)(int8_t)(sc >> 8);
                        dd = half_lo(ld2(Q[r].p[3]));
                    }
                    const float bias = DT == Q3_K ? -4.0f : -32.0f;
                    o0 = bias * dd * (float)s0, o1 = bias * dd * (float)s1;
                }
#pragma unroll
                for (int xr = 0; xr < NX; xr++) {
                    const float2 *xg = xs + (k / 16) * xr + (es + 16 * c) / 16;
                    const float2 xa = xg[0], xb = xg[1];
                    const int id = s0 * d[xr][2 * r] + s1 * d[xr][2 * r + 1],
                              ie = s0 * e[xr][2 * r] + s1 * e[xr][2 * r + 1];
                    acc[xr][r] += dd * (xa.x * ((float)id + (float)ie * (1.0f / 254.0f))) + (o0 * xa.y + o1 * xb.y);
                }
            }
        } else {
#pragma unroll
            for (int cc = 0; cc < 2; cc++) {
                const int c = 2 * p + cc, j = c & 3, hi = c >> 2;
                if (!valid(t, c))
                    continue;
                float2 xgs[NX];
#pragma unroll
                for (int xr = 0; xr < NX; xr++)
                    xgs[xr] = xs[(k / 16) * xr + (es + xoff<DT>(c)) / 16];
#pragma unroll
                for (int r = 0; r < 2; r++) {
#pragma unroll
                    for (int xr = 0; xr < NX; xr++) {
                        const float2 *xsr = xs + (k / 16) * xr;
                        const float2 xg = xgs[xr];
                        const float isum = (float)d[xr][2 * r + cc] + (float)e[xr][2 * r + cc] * (1.0f / 254.0f);
                        float &a = acc[xr][r];
                        if constexpr (DT == Q4_K || DT == Q5_K) {
                            const uint2 sm = k_scale_min(kw[r][0], kw[r][1], kw[r][2], 2 * j + hi);
                            const float sx = xg.y + xsr[(es + xoff<DT>(c)) / 16 + 1].y;
                            const float hs = DT == Q4_K && hi ? 0.0625f : 1.0f;
                            a += half_lo(kw[r][3]) * small_float(sm.x) * (xg.x * isum * hs) -
                                 half_hi(kw[r][3]) * small_float(sm.y) * sx;
                        } else if constexpr (DT == Q4_0) {
                            const float db = half_lo(ld2(Q[r].p[1] + 2 * (4 * t + j)));
                            a += db * (xg.x * isum * (hi ? 0.0625f : 1.0f) - 8.0f * xg.y);
                        } else if constexpr (DT == Q4_1 || kQ41G<DT>) {
                            const uint32_t dm = ld4(Q[r].p[1] + 4 * ((uint32_t)(4 * t + j) / (L.block / 32)));
                            a += half_lo(dm) * xg.x * isum * (hi ? 0.0625f : 1.0f) + half_hi(dm) * xg.y;
                        } else if constexpr (DT == Q5_0) {
                            a += half_lo(ld2(Q[r].p[2] + 2 * (4 * t + j))) * (xg.x * isum - 16.0f * xg.y);
                        } else if constexpr (DT == Q5_1) {
                            const uint32_t dm = ld4(Q[r].p[2] + 4 * (4 * t + j));
                            a += half_lo(dm) * xg.x * isum + half_hi(dm) * xg.y;
                        } else {
                            static_assert(DT == Q8_0, "every block type has its scales");
                            a += half_lo(ld2(Q[r].p[1] + 2 * j)) * xg.x * isum;
                        }
                    }
                }
            }
        }
    }
}

template <typename T, int DT, bool Q8 = false, int XR = 4, int NX = 1>
__device__ void mma_rows(void *out, const T *x, const void *w, int m, int64_t n, int64_t k, int64_t xs, int64_t os,
                         int flags, float (*red)[kWarps][16][8], uint8_t *sm, int nst, int8_t *xq,
                         float2 *xq_s, const T *nw, float eps, float (*nss)[kWarps], uint32_t bid, uint32_t nblk)
{
    using G = Step<DT>;
    constexpr Layout L = G::L;
    constexpr int S = G::S, CPB = G::CPB, RB = G::row_bytes;
    const bool swiglu = flags & 1;
    const int H = swiglu ? 2 : 1;
    const Planes P = planes<DT>(w, (swiglu ? 2 * n : n) * (k / L.block));
    const int lane = threadIdx.x & 31, g = lane >> 2, p = lane & 3, warp = threadIdx.x >> 5;
    const uint32_t nb = (uint32_t)(k / L.block);
    const int steps = (int)((nb + S - 1) / S), per = (steps + kWarps - 1) / kWarps, s0 = min(steps, warp * per),
              my = min(steps, s0 + per) - s0;
    const int64_t tiles = (n + 15) / 16,
                  mine = bid < tiles ? (tiles - 1 - bid) / nblk + 1 : 0, total = mine * H * my;
    uint8_t *ring = sm + warp * nst * G::bytes;
    // The ring's shared-memory address (32 bits: cp.async takes no generic address), and n in
    // 32 bits (rows fit: a tensor has fewer than 2^32 blocks).
    const uint32_t ring_s = (uint32_t)__cvta_generic_to_shared(ring), n32 = (uint32_t)n;

    // The next step to copy: its number, ring slot, tile, half (gate or up) and step.
    int64_t li = 0;
    uint32_t ltile = bid;
    int lslot = 0, lh = 0, ls = 0;
    // The lane's copies of the fields whose unit count U divides 32: its unit is the same in
    // every round and its row 32 / U rows further, so a pointer to its first round's bytes
    // moves on by a step's bytes from one step to the next and is set anew only where a half or
    // a tile starts (rows past n are not copied: a row's sums take none of another's, and these
    // are never stored). vr: the rows of the tile from its first on that exist.
    const uint8_t *fp[4] = {};
    int vr = 0;
    auto start_half = [&]() {
        const uint32_t row0 = ltile * 16, hoff = lh ? n32 : 0;
        vr = (int)(n32 - row0);
        each<0, L.nf>([&](auto F) {
            constexpr int f = decltype(F)::value, size = L.f[f].size, U = G::units(f);
            if constexpr (32 % U == 0) {
                const uint32_t r = lane / U;
                const uint64_t at = (uint64_t)((row0 + r + hoff) * nb + (uint32_t)s0 * S) * size;
                fp[f] = P.p[f] + at;
            }
        });
    };
    start_half();
    auto issue = [&]() {
        if (li < total) {
            const uint32_t dst = ring_s + lslot * G::bytes, row0 = ltile * 16, hoff = lh ? n32 : 0;
            const uint32_t b0 = (uint32_t)(s0 + ls) * S, cnt = min((uint32_t)S, nb - b0);
            each<0, L.nf>([&](auto F) {
                constexpr int f = decltype(F)::value, size = L.f[f].size, U = G::units(f);
                if constexpr (32 % U == 0) {
                    constexpr int RS = 32 / U;
                    const uint32_t r = lane / U, u = lane % U;
                    const uint64_t rstride = (uint64_t)(RS * size) * nb;
                    const uint8_t *from = fp[f];
                    fp[f] += S * size;
#pragma unroll
                    for (int i = 0; i < (16 * U + 31) / 32; i++, from += rstride)
                        if ((16 * U % 32 == 0 || lane + 32 * i < 16 * U) && (int)(r + i * RS) < vr)
                            copy_unit<S, size>(dst + (r + i * RS) * RB + 16 * (G::first(f) + u), from, u, cnt);
                } else {
#pragma unroll
                    for (int i = 0; i < (16 * U + 31) / 32; i++) {
                        const int slot = lane + 32 * i, r = slot / U, u = slot % U;
                        if (16 * U % 32 == 0 || slot < 16 * U) {
                            const uint32_t row = (row0 + r < n32 ? row0 + r : 0) + hoff;
                            copy_unit<S, size>(dst + r * RB + 16 * (G::first(f) + u),
                                               P.p[f] + (uint64_t)(row * nb + b0) * size, u, cnt);
                        }
                    }
                }
            });
            li++;
            lslot = lslot + 1 == nst ? 0 : lslot + 1;
            if (++ls == my) {
                ls = 0;
                if (++lh == H) {
                    lh = 0;
                    ltile += nblk;
                }
                start_half();
            }
        }
        tc::cp_commit();
    };
    // The integer kernel asks for its first step's weights before the wait, then, after it,
    // for x's first rounds and only then for the next steps' weights (in quantise_x): a load
    // waits behind the copies its SM issued before it, and with every step's copies ahead x
    // arrived with the last weights, which left the steps nothing to overlap (H200, 7B batch 1:
    // Q4_0 532 -> 549-550 tokens/s, Q4_K_M 459-467 -> 470-472, AWQ 516 -> 539).
    const int pre = Q8 ? min(1, nst - 1) : nst - 1;
    for (int q = 0; q < pre; q++)
        issue();
    tc::await_inputs();
    if constexpr (Q8) {
        // x's rows in two 8-bit digits, each warp its share (the later weights asked for once the
        // first row's first rounds are on their way).
        float ss[NX];
        quantise_x<(NX > 1 ? 2 : XR), NX>(xq, xq_s, x, xs, k, s0 * S * CPB, min((s0 + my) * S * CPB, (int)(nb * CPB)),
                                        nw,
                                        [&]() {
                                            for (int q = pre; q < nst - 1; q++)
                                                issue();
                                        },
                                        ss);
#pragma unroll
        for (int xr = 0; xr < NX; xr++) {
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                ss[xr] += __shfl_xor_sync(0xffffffffu, ss[xr], o);
            if (lane == 0)
                nss[xr][warp] = ss[xr];
        }
        __syncwarp();
    }

    // x of a step's chunks (as many as the step has), loaded a step ahead of its use: the next
    // step is s + 1, or the first again for the next half or tile.
    constexpr int CPS = S * CPB;
    const bool xin = g < m;
    const T *xr = x + (xin ? g : 0) * xs + p * (kHalfScale<DT> ? 4 : 8);
    auto load_x = [&](int s, uint4(&xx)[CPS]) {
        const uint32_t c0 = (uint32_t)(s0 + s) * CPS;
        const T *xc = xr + (size_t)c0 * 32;
#pragma unroll
        for (int i = 0; i < CPS; i++) {
            const bool in = xin && c0 + i < nb * CPB;
            if constexpr (kHalfScale<DT>) {
                const uint2 lo = in ? *reinterpret_cast<const uint2 *>(xc + 32 * i) : make_uint2(0, 0),
                            hi = in ? *reinterpret_cast<const uint2 *>(xc + 32 * i + 16) : make_uint2(0, 0);
                xx[i] = make_uint4(lo.x, lo.y, hi.x, hi.y);
            } else {
                xx[i] = in ? *reinterpret_cast<const uint4 *>(xc + 32 * i) : make_uint4(0, 0, 0, 0);
            }
        }
    };
    uint4 xa[CPS];
    if constexpr (!Q8)
        load_x(0, xa);
    int cslot = 0;
    for (int64_t tile = bid; tile < tiles; tile += nblk) {
        const int64_t ra = tile * 16 + g, rb = ra + 8;
        for (int h = 0; h < H; h++) {
            // The rows' first blocks (rows past n read row 0 and are never written).
            const uint32_t rblk[2] = { (uint32_t)((h ? n : 0) + (ra < n ? ra : 0)) * nb,
                                       (uint32_t)((h ? n : 0) + (rb < n ? rb : 0)) * nb };
            float acc[4] = {}, acc1[NX][2] = {};
            for (int s = 0; s < my; s++) {
                uint4 xb[CPS];
                if constexpr (!Q8)
                    load_x(s + 1 < my ? s + 1 : 0, xb);
                __syncwarp();
                issue();
                wait_copies(nst - 1);
                __syncwarp();
                const uint8_t *st = ring + cslot * G::bytes;
                cslot = cslot + 1 == nst ? 0 : cslot + 1;
                const uint32_t b0 = (uint32_t)(s0 + s) * S, cnt = min((uint32_t)S, nb - b0);
                // The rows' planes in the stage, as fetch takes them (block 0: the step's first).
                Planes Q[2];
#pragma unroll
                for (int i = 0; i < 2; i++)
                    each<0, L.nf>([&](auto F) {
                        constexpr int f = decltype(F)::value, size = L.f[f].size;
                        const uint32_t skip = size % 16 ? ((rblk[i] + b0) * size) & 15 : 0;
                        Q[i].p[f] = st + (g + 8 * i) * RB + 16 * G::first(f) + skip;
                    });
                if constexpr (Q8) {
                    q8_step<DT, NX>(Q, b0, cnt, xq, (uint32_t)k, xq_s, g, p, acc1);
                } else {
#pragma unroll
                    for (int bl = 0; bl < S; bl++) {
                        if (bl >= cnt)
                            break;
                        // (Q4_1's grouped types: the block's sums for raw_fold)
                        float tb[4] = {}, sb[4] = {};
                        Ints ga = {}, gb = {};
#pragma unroll
                        for (int cc = 0; cc < CPB; cc++) {
                            const int j = cc * 4 + p;
                            const uint4 xx = xa[bl * CPB + cc];
                            if constexpr (kHalfScale<DT>) {
                                // Each product the sums of one scale group: scaled per row and
                                // half; Q2_K's offsets times the halves' sums of x.
                                const Ints2 qa = ints_halves<DT>(fetch_halves<DT, uint32_t>(Q[0], bl, cc, p), cc),
                                            qb = ints_halves<DT>(fetch_halves<DT, uint32_t>(Q[1], bl, cc, p), cc);
                                const uint4 a = frag_int<T, DT>(Ints{ qa.b, qa.bias, 0.0f, 0.0f }),
                                            b = frag_int<T, DT>(Ints{ qb.b, qb.bias, 0.0f, 0.0f });
                                float t0[4] = {}, t1[4] = {};
                                tc::mma16816<T>(t0, a.x, b.x, a.y, b.y, xx.x, xx.y);
                                tc::mma16816<T>(t1, a.z, b.z, a.w, b.w, xx.z, xx.w);
                                acc[0] = fmaf(qa.s[1], t1[0], fmaf(qa.s[0], t0[0], acc[0]));
                                acc[1] = fmaf(qa.s[1], t1[1], fmaf(qa.s[0], t0[1], acc[1]));
                                acc[2] = fmaf(qb.s[1], t1[2], fmaf(qb.s[0], t0[2], acc[2]));
                                acc[3] = fmaf(qb.s[1], t1[3], fmaf(qb.s[0], t0[3], acc[3]));
                                if constexpr (DT == Q2_K) {
                                    const uint32_t one = tc::pack2<T>(1.0f, 1.0f);
                                    float u0[4] = {}, u1[4] = {};
                                    tc::mma16816<T>(u0, one, one, one, one, xx.x, xx.y);
                                    tc::mma16816<T>(u1, one, one, one, one, xx.z, xx.w);
                                    acc[0] = fmaf(qa.off[1], u1[0], fmaf(qa.off[0], u0[0], acc[0]));
                                    acc[1] = fmaf(qa.off[1], u1[1], fmaf(qa.off[0], u0[1], acc[1]));
                                    acc[2] = fmaf(qb.off[1], u1[2], fmaf(qb.off[0], u0[2], acc[2]));
                                    acc[3] = fmaf(qb.off[1], u1[3], fmaf(qb.off[0], u0[3], acc[3]));
                                }
                            } else if constexpr (kQ41G<DT>) {
                                ga = ints<DT>(fetch<DT, uint32_t>(Q[0], bl, j), j);
                                gb = ints<DT>(fetch<DT, uint32_t>(Q[1], bl, j), j);
                                raw_mma<T>(tb, sb, pairs_raw<T>(ga.b), pairs_raw<T>(gb.b), xx);
                            } else {
                                static_assert(kChunkScale<DT>, "every block type has an integer decode path");
                                const Raw r0 = fetch<DT, uint32_t>(Q[0], bl, j), r1 = fetch<DT, uint32_t>(Q[1], bl, j);
                                // The chunk's integer sums, scaled per row (this lane holds rows g
                                // and g + 8 of the sums, whose scales it decoded); offsets times the
                                // sums of x, which a product with all-ones weights gives in the same
                                // layout.
                                const Ints qa = ints<DT>(r0, j), qb = ints<DT>(r1, j);
                                const uint4 a = frag_int<T, DT>(qa), b = frag_int<T, DT>(qb);
                                float t[4] = {};
                                tc::mma16816<T>(t, a.x, b.x, a.y, b.y, xx.x, xx.y);
                                tc::mma16816<T>(t, a.z, b.z, a.w, b.w, xx.z, xx.w);
                                acc[0] = fmaf(qa.s, t[0], acc[0]);
                                acc[1] = fmaf(qa.s, t[1], acc[1]);
                                acc[2] = fmaf(qb.s, t[2], acc[2]);
                                acc[3] = fmaf(qb.s, t[3], acc[3]);
                                if constexpr (kHasOff<DT>) {
                                    const uint32_t one = tc::pack2<T>(1.0f, 1.0f);
                                    float sx[4] = {};
                                    tc::mma16816<T>(sx, one, one, one, one, xx.x, xx.y);
                                    tc::mma16816<T>(sx, one, one, one, one, xx.z, xx.w);
                                    acc[0] = fmaf(qa.off, sx[0], acc[0]);
                                    acc[1] = fmaf(qa.off, sx[1], acc[1]);
                                    acc[2] = fmaf(qb.off, sx[2], acc[2]);
                                    acc[3] = fmaf(qb.off, sx[3], acc[3]);
                                }
                            }
                        }
                        if constexpr (kQ41G<DT>)
                            raw_fold<T>(acc, tb, sb, ga, gb);
                    }
#pragma unroll
                    for (int i = 0; i < CPS; i++)
                        xa[i] = xb[i];
                }
            }
            if constexpr (Q8) {
                // The quad's columns added (a fixed order), the sums of x's row i in column i
                // (written by the quad's lane 0, whose columns are 0 and 1).
#pragma unroll
                for (int xr = 0; xr < NX; xr++)
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        acc1[xr][r] += __shfl_xor_sync(0xffffffffu, acc1[xr][r], 1);
                        acc1[xr][r] += __shfl_xor_sync(0xffffffffu, acc1[xr][r], 2);
                    }
                acc[0] = acc1[0][0], acc[2] = acc1[0][1];
                if constexpr (NX > 1)
                    acc[1] = acc1[1][0], acc[3] = acc1[1][1];
            }
            tc::put_sums(red[h], warp, acc);
        }
        __syncthreads();
        // Under flags & 4 (the integer kernel), the RMSNorm's 1 / rms of each row of x from the
        // warps' sums of squares, added in warp order; flags & 8: out is f32.
        auto scale = [&](int col) {
            float sc = 1.0f;
            if constexpr (Q8)
                if (flags & 4) {
                    float t = 0.0f;
#pragma unroll
                    for (int i = 0; i < kWarps; i++)
                        t += nss[NX > 1 ? col : 0][i];
                    sc = rsqrtf(t / (float)k + eps);
                }
            return sc;
        };
        tc::store_tile<T>(out, red[0], red[1], tile, m, n, os, swiglu, flags & 2, scale, flags & 8);
        __syncthreads();
    }
}

// One kernel per type and activation dtype (below): in one kernel the ten types' code shared
// one register allocation and spilled (1.2 KB of spill code), each alone spills little or none.
// The ring takes the dynamic shared memory the launch gives: as many stages as fit, up to 6.
// (This file's dynamic shared memory is declared 128-byte aligned, as it was when these kernels
// shared a module with gemm.cu's, whose declaration set every kernel's: at 16 bytes, in a
// fatbin of their own, the same SASS but for the region's start ran 7B Q4_K_M decode 3-4%
// slower on the H200.)
template <typename T, int DT>
__device__ __forceinline__ void mma_kernel(void *out, const T *x, const void *w, int m, int64_t n, int64_t k,
                                           int64_t xs, int64_t os, int flags)
{
    __shared__ float red[2][kWarps][16][8];
    extern __shared__ __align__(128) uint8_t ring[];
    uint32_t bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
    const int nst = min(6, (int)(bytes / (kWarps * Step<DT>::bytes)));
    if (nst < 1)
        __trap();
    mma_rows<T, DT>(out, x, w, m, n, k, xs, os, flags, red, ring, nst, nullptr, nullptr, nullptr, 0.0f, nullptr,
                    blockIdx.x, gridDim.x);
}

// The batch-1 kernel of the integer products: x's row in two 8-bit digits takes the start of
// the dynamic shared memory (2k bytes, then a float2 per 16 elements), the ring
// the rest. (Rotating q and k and storing k and v to the cache in its epilogue, a thread per
// row of a tile with tc_rope's double-precision angle, made 7B decode slower, not faster: Q4_0
// 440 -> 407 tokens/s, Q8_0 293 -> 277 on the H100; each tile ended on that long chain of
// dependent FP64 operations. So did it with the angles worked out before the wait, which
// removed that chain: H200, 7B, batch 1, alternating runs, Q4_0 496.8 -> 482.2, Q4_K_M
// 446.8-447.6 -> 441.1-443.3. Two of these blocks fill an SM's registers, so the next kernel's
// blocks start only as this kernel's end; the separate rotary kernel, small, lets decode
// attention's blocks start beside it and fetch the older keys and values while it runs.)
template <int DT> __host__ __device__ constexpr uint32_t q8_x_bytes(int64_t k) { return (uint32_t)(2 * k + k / 2); }
// (Blocks bid of nblk taking the tiles.)
// x's rounds loaded at once by a single-product kernel (quantise_x): four on Hopper, where they
// were measured; two in the builds for older GPUs, whose code the release binary carries too
// (12 KB smaller).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr int kXRounds = 4;
#else
constexpr int kXRounds = 2;
#endif
template <typename T, int DT, int XR = kXRounds, int NX = 1>
__device__ __forceinline__ void q8_rows(void *out, const T *x, const void *w, int64_t n, int64_t k, int64_t os,
                                        int flags, const T *nw, float eps, uint32_t bid, uint32_t nblk, int64_t xs = 0)
{
    __shared__ float red[2][kWarps][16][8], nss[NX][kWarps];
    extern __shared__ __align__(128) uint8_t ring[];
    uint32_t bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
    const uint32_t xb = NX * q8_x_bytes<DT>(k);
    const int nst = bytes > xb ? min(6, (int)((bytes - xb) / (kWarps * Step<DT>::bytes))) : 0;
    if (nst < 1)
        __trap();
    mma_rows<T, DT, true, XR, NX>(out, x, w, NX, n, k, xs, os, flags, red, ring + xb, nst,
                                  reinterpret_cast<int8_t *>(ring), reinterpret_cast<float2 *>(ring + 2 * NX * k), nw,
                                  eps, nss, bid, nblk);
}
// (Q2_K's and Q3_K's in sm_90a code only, as the two-row kernels below: the host takes them on
// compute capability 9.x.)
template <typename T, int DT>
__device__ __forceinline__ void q8_kernel(void *out, const T *x, const void *w, int64_t n, int64_t k, int64_t os,
                                          int flags, const T *nw, float eps)
{
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if constexpr (DT == Q2_K || DT == Q3_K)
        __trap();
    else
#endif
        q8_rows<T, DT>(out, x, w, n, k, os, flags, nw, eps, blockIdx.x, gridDim.x);
}

// Two rows of x (x_stride apart) on the integer products, in sm_90a code only (the host takes
// them on compute capability 9.x: the other builds, and the PTX, keep the release binary
// small without them).
template <typename T, int DT>
__device__ __forceinline__ void q8_kernel2(void *out, const T *x, const void *w, int64_t n, int64_t k, int64_t xs,
                                           int64_t os, int flags, const T *nw, float eps)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    q8_rows<T, DT, kXRounds, 2>(out, x, w, n, k, os, flags, nw, eps, blockIdx.x, gridDim.x, xs);
#else
    __trap();
#endif
}

// Two products of one row of x in one launch (a layer's q and k of one block type, v of
// another: Q4_K_M's Q4_K and Q6_K, Q5_K_M's Q5_K and Q6_K): blocks [0, split) take out_a = x w_a^T, the rest out_b =
// x w_b^T, so that the second's weights stream while the first's last tiles finish instead of
// after the whole first kernel has ended.
template <typename T, int DA, int DB>
__device__ __forceinline__ void q8_pair(T *out_a, T *out_b, const T *x, const void *w_a, const void *w_b, int64_t n_a,
                                        int64_t n_b, int64_t k, int flags, const T *nw, float eps, uint32_t split)
{
    if (blockIdx.x < split)
        q8_rows<T, DA, 2>(out_a, x, w_a, n_a, k, 0, flags, nw, eps, blockIdx.x, split);
    else
        q8_rows<T, DB, 2>(out_b, x, w_b, n_b, k, 0, flags, nw, eps, blockIdx.x - split, gridDim.x - split);
}

// 9 to 64 rows of 16-bit x (batched decode) on the tensor cores, reading and dequantising each
// weight once for all of them: a GEMM-like tile of 128 weight rows (a warp's 16 each) by all the
// rows of x, over a share of k (grid.y shares: blockIdx.y's). The block's stages, 256 elements
// of k each, hold the 128 rows' quantised bytes (planes as Step lays them out) and x's rows in
// 16-bit, copied by every thread with 16-byte cp.async, as many stages as the dynamic shared
// memory holds (2 to 4), one barrier a stage. A warp dequantises its rows' group p of each
// chunk of 32 into registers once (the scale folded in, in T's arithmetic: computing them in f32
// and rounding once, as the tiles handed to cuBLAS are, made the H100's 64-row products 1.4x
// slower) and multiplies it with each 8-row column tile of x (mma16816's B from shared memory: row
// g, the same 8 elements; odd rows keep each pair of chunks swapped, so that a quarter-warp's
// loads, rows g and g + 1, meet no bank twice). With more than one share, each block stores its f32 sums in ws (share, row of x,
// row of w) and the last of a tile's blocks to arrive adds them in share order (the same bits
// every run) and writes out, leaving its counter at zero.
constexpr int kBatchRows = 8 * 16, kBatchXRow = 256 * 2;
// Blocks an SM the kernels of up to 64 rows are built for: two on Hopper, whose 228 KB of
// shared memory hold two blocks of two stages at 64 rows (the host picks one or two:
// tc__quant_batch), under 128 registers; one on earlier GPUs, where two never fit and the
// register cap would only spill.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
constexpr int kBatchBlocks = 1;
#else
constexpr int kBatchBlocks = 2;
#endif

// Q4_K's and Q5_K's scale and offset of sub-blocks p and p + 4 of a block of a row, as pairs of
// T: what frag folds into the weights, decoded by one lane of a quad for the four (each
// chunk's sub-block is then read from the lane that holds it) instead of by all four at every
// chunk.
template <typename T, int DT> __device__ __forceinline__ void k_scales(const Planes &P, uint32_t blk, int p,
                                                                      uint32_t (&s2)[2], uint32_t (&o2)[2])
{
    const uint4 m = k_meta<DT>(P, blk);
    const uint32_t w0 = m.x, w1 = m.y, w2 = m.z, dm = m.w;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const uint2 sm = k_scale_min(w0, w1, w2, p + 4 * i);
        const float s = half_lo(dm) * small_float(sm.x), off = -half_hi(dm) * small_float(sm.y);
        s2[i] = tc::pack2<T>(s, s);
        o2[i] = tc::pack2<T>(off, off);
    }
}

// Group j of a Q4_K or Q5_K block as frag makes it: its quant bytes (and Q5_K's fifth bits,
// in e[0], e[1]) loaded apart (k_load), so that the batched loop issues a chunk's loads a chunk
// ahead of their use, then decoded with its sub-block's scale and offset pairs (k_scales).
template <int DT, bool NAT = false> __device__ __forceinline__ Raw k_load(const Planes &P, uint32_t blk, int j)
{
    const int sb = j >> 2;
    const uint8_t *run = P.p[0] + blk * 128 + (sb >> 1) * 32;
    Raw r;
    r.q = NAT ? nat8(run, j & 3) : ld8(run + (j & 3) * 8);
    if constexpr (DT == Q5_K) {
        const uint2 h = NAT ? nat8(P.p[1] + blk * 32, j & 3) : ld8(P.p[1] + blk * 32 + (j & 3) * 8);
        r.e[0] = h.x;
        r.e[1] = h.y;
    }
    return r;
}
template <typename T, int DT> __device__ __forceinline__ uint4 k_frag(const Raw &r, int j, uint32_t s2, uint32_t o2)
{
    const int sb = j >> 2, shift = (sb & 1) * 4;
    uint2 b = make_uint2((r.q.x >> shift) & 0x0f0f0f0fu, (r.q.y >> shift) & 0x0f0f0f0fu);
    if constexpr (DT == Q5_K) {
        b.x |= ((r.e[0] >> sb) & 0x01010101u) << 4;
        b.y |= ((r.e[1] >> sb) & 0x01010101u) << 4;
    }
    return pairs_of<T>(b, 0, s2, o2, true);
}

template <int DT> using BatchStep = Step<DT, 256 / layout(DT).block>;

// On Hopper (sm_90a builds) x's rows go to the tensor cores straight from shared memory: one
// wgmma.mma_async a chunk's 16 of k for each warpgroup's 64 weight rows (A from registers: the
// warps' dequantised fragments, as mma16816 takes them) against all 8 NT rows of x (B: a
// descriptor), instead of every warp loading each row tile of x and multiplying it alone. x lies
// in the 128-byte swizzle (as kernels/gemm.cu's tiles): 64 of k a 1024-byte-aligned atom of 8
// rows, 128 bytes a row, 16-byte unit c of row r at c ^ (r % 8); the stage's 256 of k are four
// such regions of 8 NT rows one after another. Where the fragments hold lane p's group p of
// each chunk (elements 8p .. 8p + 3 in the chunk's first product, 8p + 4 .. 8p + 7 in its
// second), x is stored in that order: word (element pair) 4p + b of a chunk at place
// 8 (b / 2) + 4 (b % 2) + p, copied 4 bytes at a time. The types of kBatchNat take their lane's
// weights in x's own order instead (nat8, nat_nibbles), and x is copied 16 bytes at a time as
// it is. Up to 16 rows of x take the mma16816 loop (batch_kernel).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr bool kBatchWg = true;
#else
constexpr bool kBatchWg = false;
#endif
template <int DT>
constexpr bool kBatchNat = DT == Q4_K || DT == Q5_K || DT == Q8_0 || DT == Q4_0 || DT == Q4_1 || kQ41G<DT>;

#define TC_WGQ(N, TY, OUTS, A0, D, ONE)                                                          \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #ONE ", 0;\n"                              \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" OUTS "}, {" A0 \
                 "}, %" #D ", p, 1, 1, 0;\n}\n"                                                  \
                 : ACC                                                                            \
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(bd), "r"(1))
// acc (8 NT columns: rows of x) += a (this warp's 16 weight rows by 16 of k) b (the descriptor's
// 16 of k by 8 NT rows of x), for the warpgroup's 64 rows; acc as mma16816's C for tile t.
template <typename T, int NT>
__device__ __forceinline__ void wg_mma(float (&acc)[NT][4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint64_t bd)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr bool bf = std::is_same<T, __nv_bfloat16>::value;
    if constexpr (NT == 8) {
#define ACC "+f"(acc[0][0]), "+f"(acc[0][1]), "+f"(acc[0][2]), "+f"(acc[0][3]), "+f"(acc[1][0]), "+f"(acc[1][1]), "+f"(acc[1][2]), "+f"(acc[1][3]), "+f"(acc[2][0]), "+f"(acc[2][1]), "+f"(acc[2][2]), "+f"(acc[2][3]), "+f"(acc[3][0]), "+f"(acc[3][1]), "+f"(acc[3][2]), "+f"(acc[3][3]), "+f"(acc[4][0]), "+f"(acc[4][1]), "+f"(acc[4][2]), "+f"(acc[4][3]), "+f"(acc[5][0]), "+f"(acc[5][1]), "+f"(acc[5][2]), "+f"(acc[5][3]), "+f"(acc[6][0]), "+f"(acc[6][1]), "+f"(acc[6][2]), "+f"(acc[6][3]), "+f"(acc[7][0]), "+f"(acc[7][1]), "+f"(acc[7][2]), "+f"(acc[7][3])
        if constexpr (bf)
            TC_WGQ(64, "bf16", "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31", "%32, %33, %34, %35", 36, 37);
        else
            TC_WGQ(64, "f16", "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31", "%32, %33, %34, %35", 36, 37);
#undef ACC
    } else {
        static_assert(NT == 4, "wgmma products of 32 or 64 rows of x");
#define ACC "+f"(acc[0][0]), "+f"(acc[0][1]), "+f"(acc[0][2]), "+f"(acc[0][3]), "+f"(acc[1][0]), "+f"(acc[1][1]), "+f"(acc[1][2]), "+f"(acc[1][3]), "+f"(acc[2][0]), "+f"(acc[2][1]), "+f"(acc[2][2]), "+f"(acc[2][3]), "+f"(acc[3][0]), "+f"(acc[3][1]), "+f"(acc[3][2]), "+f"(acc[3][3])
        if constexpr (bf)
            TC_WGQ(32, "bf16", "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15", "%16, %17, %18, %19", 20, 21);
        else
            TC_WGQ(32, "f16", "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15", "%16, %17, %18, %19", 20, 21);
#undef ACC
    }
#endif
}
#undef TC_WGQ

// A 4-byte cp.async to a shared-memory address.
__device__ __forceinline__ void cp_async4_s(uint32_t to, const void *from)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(to), "l"(from));
}
// cp_async4_s that writes zeros (reading nothing) where !in (16 bytes: tc::cp_async16_at).
__device__ __forceinline__ void cp_async4_z(uint32_t to, const void *from, bool in)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(to), "l"(from), "r"(in ? 4 : 0));
}

template <typename T, int DT, int NT, bool WG>
__device__ void mma_batch(void *out, bool out_f32, const T *x, const void *w, int m, int64_t n, int64_t k, int64_t xs,
                          int64_t os, float *ws, int32_t *counts, uint32_t tile, uint8_t *sm, uint32_t smem)
{
    using G = BatchStep<DT>;
    constexpr Layout L = G::L;
    // MO: Q6_K's products of 33 to 64 rows keep each block's scales and d out of the stage (NF:
    // the fields the stage holds): lane p of a quad loads word p of the 16 scale bytes of its
    // two rows, and their d, a step ahead into registers, and the quad hands the words round at
    // the step's start. Their two 16-byte units a row took the stage from 56 to 60 KiB at 64
    // rows, where two blocks an SM need at most 56 (two stages each).
    constexpr bool MO = DT == Q6_K && NT == 8;
    constexpr int S = G::S, CPB = G::CPB, NF = MO ? 2 : L.nf, RB = 16 * G::first(NF);
    constexpr bool NAT = WG && kBatchNat<DT>;
    // ZB: under wgmma the types of 32-element blocks (eight a step) multiply a short last
    // step's absent blocks too, as zero fragments against x's zeros past k, instead of leaving
    // the step's loop: that branch, products in flight, had ptxas serialise every one of their
    // wgmma (C7513; H200, bench_ops quant q4_0 at 64 rows 15.3 / 25.6 / 29.5 -> 13.0 / 25.0 /
    // 24.7 us). The grouped types (two or four blocks a step) were not serialised, and lost 3-5%
    // at 32 rows with it.
    constexpr bool ZB = WG && layout(DT).block == 32;
    const int lane = threadIdx.x & 31, g = lane >> 2, p = lane & 3, warp = threadIdx.x >> 5;
    const int nt = (m + 7) >> 3;
    // A stage: the weights, then x's rows (room for two tiles at least: the loop multiplies
    // tiles 0 and 1 always); with wgmma x's 8 NT rows first, in whole 1024-byte atoms, from a
    // 1024-byte-aligned start.
    constexpr uint32_t XR = 8 * NT;
    if constexpr (WG) {
        const uint32_t pad = (1024 - ((uint32_t)__cvta_generic_to_shared(sm) & 1023)) & 1023;
        sm += pad;
        smem = smem > pad ? smem - pad : 0;
    }
    const uint32_t wbytes = kBatchRows * RB, xbytes = WG ? XR * kBatchXRow : max(nt, 2) * 8 * kBatchXRow,
                   sbytes = WG ? (wbytes + xbytes + 1023) & ~1023u : wbytes + xbytes,
                   wat = WG ? xbytes : 0, xat = WG ? 0 : wbytes;
    const int nst = min(4, (int)(smem / sbytes));
    if (nst < 2)
        __trap();
    const Planes P = planes<DT>(w, n * (k / L.block));
    const uint32_t nb = (uint32_t)(k / L.block), steps = (nb + S - 1) / S, per = (steps + gridDim.y - 1) / gridDim.y,
                   s0 = min(steps, blockIdx.y * per), my = min(steps, s0 + per) - s0, n32 = (uint32_t)n;
    const uint32_t row0 = tile * kBatchRows, sm_s = (uint32_t)__cvta_generic_to_shared(sm);

    // Each thread's copies of a stage, fixed but for the stage's place in k: field f's units go
    // 256 a round, slot threadIdx.x + 256 it being unit slot % U of the tile's row slot / U.
    // Where U divides 256 the thread's unit is the same in every round and its row 256 / U rows
    // further, so its source and place follow from the first round's by constant steps (rows
    // past n are not copied: a row's sums take none of another's, and these are never stored).
    // x: row warp + 8 it, unit lane, its 16-byte units of odd rows in swapped pairs.
    const uint8_t *fsrc[4];
    uint32_t fto[4];
    int frows[4];
    each<0, NF>([&](auto F) {
        constexpr int f = decltype(F)::value, size = L.f[f].size, U = G::units(f);
        if constexpr (256 % U == 0) {
            const int r = threadIdx.x / U, u = threadIdx.x % U;
            frows[f] = (int)(n32 - row0) - r;
            fsrc[f] = P.p[f] + (uint64_t)((row0 + r) * nb + s0 * S) * size;
            fto[f] = wat + r * RB + 16 * (G::first(f) + u);
        }
    });
    const T *xsrc = x + warp * xs + 8 * lane;
    const uint32_t xto = xat + warp * kBatchXRow + 16 * (lane ^ (warp & 1) << 2);
    // (wgmma) x's words: rows 2 it + warp / 4, word q of the 128 a stage row, at its place in
    // the row's 16-byte unit of atom q / 32 (chunk q / 16, word 4p + b of it; see wg_mma). The
    // rows' swizzle repeats every 8: xwto[j] is row 2 j + warp / 4's place, rows 8 further 1024
    // bytes on; the source moves on by two rows of x a copy.
    const int xq = 32 * (warp & 3) + lane, xw = xq & 15, xh = warp >> 2,
              xplace = 64 * ((xq >> 4) & 1) + 4 * (8 * ((xw & 3) >> 1) + 4 * (xw & 1) + (xw >> 2));
    uint32_t xwto[4];
#pragma unroll
    for (int j = 0; j < 4; j++)
        xwto[j] = xat + (xq >> 5) * XR * 128 + (2 * j + xh) * 128 + ((((xplace >> 4) ^ (2 * j + xh)) << 4) | (xplace & 15));
    const char *xwsrc = reinterpret_cast<const char *>(x + xh * xs + 2 * xq);
    const uint64_t xwstep = 2 * (uint64_t)xs * sizeof(T);
    const int xrows = (min(m, (int)XR) - xh + 1) >> 1; // this thread's rows of x

    // A stage's copies into the stage at base: its weights (wq), and its rows of x then the
    // commit (wx).
    auto issue = [&](uint32_t i, uint32_t base, bool wq, bool wx) {
        if (i < my) {
            const uint32_t b0 = (s0 + i) * S, cnt = min((uint32_t)S, nb - b0);
            if (wq) {
                each<0, NF>([&](auto F) {
                    constexpr int f = decltype(F)::value, size = L.f[f].size, U = G::units(f);
                    if constexpr (256 % U == 0) {
                        constexpr int R = (kBatchRows * U + 255) / 256, RS = 256 / U;
                        // (Stages are issued in order: the pointer moves on by a stage's bytes.)
                        const uint8_t *at = fsrc[f];
                        fsrc[f] += S * size;
                        const uint64_t rstride = (uint64_t)(RS * size) * nb;
                        const uint32_t u = threadIdx.x % U;
#pragma unroll
                        for (int it = 0; it < R; it++, at += rstride)
                            if ((kBatchRows * U % 256 == 0 || threadIdx.x + 256 * it < kBatchRows * U) &&
                                it * RS < frows[f])
                                copy_unit<S, size>(base + fto[f] + it * RS * RB, at, u, cnt);
                    } else {
#pragma unroll
                        for (int it = 0; it < (kBatchRows * U + 255) / 256; it++) {
                            const int slot = threadIdx.x + 256 * it, r = slot / U, u = slot % U;
                            if (kBatchRows * U % 256 == 0 || slot < kBatchRows * U) {
                                const uint32_t row = row0 + r < n32 ? row0 + r : 0;
                                copy_unit<S, size>(base + wat + r * RB + 16 * (G::first(f) + u),
                                                   P.p[f] + (uint64_t)(row * nb + b0) * size, u, cnt);
                            }
                        }
                    }
                });
            }
            // (ZB: x past k is zeros, which the products of a short last step's absent blocks
            // multiply; see the chunk loop.)
            if constexpr (NAT) {
                // Row warp + 8 it, unit lane: at unit lane % 8 ^ warp of atom lane / 8.
                const bool in = b0 * L.block + 8 * lane < k;
                if (wx && (in || ZB)) {
                    const T *src = xsrc + (!ZB || in ? b0 * L.block : 0);
                    const uint32_t to = base + xat + (lane >> 3) * XR * 128 + warp * 128 + (((lane & 7) ^ warp) << 4);
#pragma unroll
                    for (int it = 0; it < NT; it++)
                        if (warp + 8 * it < m) {
                            if constexpr (ZB)
                                tc::cp_async16_at(to + it * 1024, src + it * 8 * xs, in);
                            else
                                cp_async16_s(to + it * 1024, src + it * 8 * xs);
                        }
                }
            } else if constexpr (WG) {
                const bool in = b0 * L.block + 2 * xq < k;
                if (wx && (in || ZB)) {
                    const char *src = xwsrc + (!ZB || in ? (size_t)b0 * L.block * sizeof(T) : 0);
#pragma unroll
                    for (int it = 0; it < (int)XR / 2; it++, src += xwstep)
                        if (it < xrows) {
                            if constexpr (ZB)
                                cp_async4_z(base + xwto[it & 3] + (it >> 2) * 1024, src, in);
                            else
                                cp_async4_s(base + xwto[it & 3] + (it >> 2) * 1024, src);
                        }
                }
            } else if (wx && b0 * L.block + 8 * lane < k) {
                const T *src = xsrc + b0 * L.block;
#pragma unroll
                for (int it = 0; it < NT; it++)
                    if (warp + 8 * it < m)
                        cp_async16_s(base + xto + it * 8 * kBatchXRow, src + it * 8 * xs);
            }
        }
        if (wx)
            tc::cp_commit();
    };
    // The first stages' weights are requested before the kernel waits for the one before it
    // (weights are written by no kernel), their rows of x after; stage q's group then holds
    // at least its own copies.
    const int r_a = warp * 16 + g;
    const uint32_t rblk[2] = { (row0 + r_a < n32 ? row0 + r_a : 0) * nb, (row0 + r_a + 8 < n32 ? row0 + r_a + 8 : 0) * nb };
    // (MO) Step i's scale word p and d of rows r_a and r_a + 8, loaded a step ahead (S is 1).
    uint32_t mw[2] = {}, md[2] = {};
    auto meta = [&](uint32_t i) {
        if (MO && i < my)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint32_t blk = rblk[h] + s0 + i;
                mw[h] = ld4(P.p[2] + (uint64_t)blk * 16 + 4 * p);
                md[h] = ld2(P.p[3] + (uint64_t)blk * 2);
            }
    };
    for (int q = 0; q < nst - 1; q++)
        issue(q, sm_s + q * sbytes, true, false);
    meta(0);
    tc::await_inputs();
    for (int q = 0; q < nst - 1; q++)
        issue(q, sm_s + q * sbytes, false, true);

    float acc[NT][4] = {};
    // A2: Q4_K's and Q5_K's mma16816 loop on Hopper (up to 16 rows) takes the odd chunks'
    // products into a second set of sums, added at the end: two chains of dependent products,
    // each half as long (H200, bench_ops quant q4_k at 8 rows 9.7 / 16.0 / 17.0 -> 9.4 / 15.6 /
    // 16.6 us, at 16 rows 10.0 / 16.5 / 17.5 -> 9.7 / 16.1 / 17.2; 7B Q4_K_M at 4, 8 and 16
    // sequences 1,163 / 2,158-2,165 / 3,562-3,597 -> 1,175-1,194 / 2,177-2,189 / 3,612-3,618
    // tokens/s). The other types lost so (q4_1_g128 at 16 rows 9.8 / 15.7 / 17.3 -> 10.5 / 16.5 /
    // 18.4, q4_0 and q6_k 1-4%); before Hopper the registers it takes spill.
    constexpr bool A2 = !WG && kBatchWg && (DT == Q4_K || DT == Q5_K);
    float acc2[NT][4] = {};
    // The stage computed (cs) and the one the step's copies fill (is): the stage before cs.
    uint32_t cs = 0, is = (nst - 1) * sbytes;
    const uint32_t last = (nst - 1) * sbytes;
    constexpr bool PF = WG && S == 1; // (see the chunk loop)
    // Q4_1's grouped types on Hopper up to 16 rows (two tiles of x) take raw_mma and raw_fold
    // (H200, bench_ops quant q4_1_g64 at 16 rows 10.5 / 16.3 / 18.6 -> 9.9 / 15.7 / 17.2 us).
    constexpr bool GF = kQ41G<DT> && !WG && kBatchWg && NT == 4;
    for (uint32_t i = 0; i < my; i++) {
        wait_copies(nst - 2);
        if constexpr (WG) {
            // The step before's products have read their stage, which this step refills; this
            // thread's copies are made visible to wgmma (the async proxy) before the barrier.
            asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        }
        __syncthreads();
        const uint32_t fill = sm_s + is;
        is = is == last ? 0 : is + sbytes;
        if constexpr (!PF)
            issue(i + nst - 1, fill, true, true);
        const uint8_t *st = sm + cs;
        const uint64_t xd = tc::wg_desc128(sm_s + cs + xat);
        cs = cs == last ? 0 : cs + sbytes;
        const uint32_t b0 = (s0 + i) * S, cnt = min((uint32_t)S, nb - b0);
        // (MO) Chunk cc's scale byte of each row for this lane, 2 cc + p / 2 of the block's 16
        // (word cc / 2), at byte cc % 4 of sc[h][cc / 4]; then the next step's loads.
        uint32_t sc[2][2] = {}, dd[2] = {};
        if constexpr (MO) {
            const uint32_t sel = p >> 1 ? 0x7531u : 0x6420u;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                uint32_t wd[4];
#pragma unroll
                for (int q = 0; q < 4; q++)
                    wd[q] = __shfl_sync(0xffffffffu, mw[h], (lane & ~3) | q);
                sc[h][0] = __byte_perm(wd[0], wd[1], sel);
                sc[h][1] = __byte_perm(wd[2], wd[3], sel);
                dd[h] = md[h];
            }
            meta(i + 1);
        }
        Planes Q[2];
#pragma unroll
        for (int h = 0; h < 2; h++)
            each<0, NF>([&](auto F) {
                constexpr int f = decltype(F)::value, size = L.f[f].size;
                const uint32_t skip = size % 16 ? ((rblk[h] + b0) * size) & 15 : 0;
                Q[h].p[f] = st + wat + (r_a + 8 * h) * RB + 16 * G::first(f) + skip;
            });
        const uint8_t *xst = st + xat + g * kBatchXRow + p * 16;
        const int xo = (g & 1) * 64; // chunk c of this row is at chunk c ^ (g & 1)
        constexpr bool KS = DT == Q4_K || DT == Q5_K;
        // A chunk's shared-memory loads of both 8-row halves (Raw: fetch's fields; the
        // natural-order types' bytes in q). Under wgmma the types of 256-element blocks issue
        // them a chunk ahead of their use (PF), so that their latency runs under the chunk
        // before's arithmetic (4-8% faster at 32 and 64 rows); the others (several blocks a
        // step, their last step cut short: Q8_0 3% slower so) and mma16816's loop (no faster)
        // load as they use them. PF's first chunk and scales are loaded before the step's
        // copies are issued, so that the copies' issue runs under their latency.
        auto load = [&](int bl, int cc, Raw (&r)[2]) {
            const int j = cc * 4 + p;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                if constexpr (KS)
                    r[h] = k_load<DT, NAT>(Q[h], bl, j);
                else if constexpr (MO) {
                    q6_bits(r[h], Q[h], bl, j);
                    r[h].e[2] = sc[h][cc >> 2] >> (8 * (cc & 3));
                    r[h].e[3] = dd[h];
                } else {
                    r[h] = fetch<DT, uint32_t>(Q[h], bl, j);
                    if constexpr (NAT && DT == Q8_0)
                        r[h].q = nat8(Q[h].p[0] + bl * 32, p);
                    else if constexpr (NAT) // (Q4_1G: chunk cc of the block is 16 bytes of Q4_1's layout.)
                        r[h].q = nat_nibbles(Q[h].p[0] + bl * layout(DT).f[0].size + cc * 16, p);
                }
            }
        };
        Raw cur[2];
        uint32_t s2[2][2], o2[2][2];
        auto scales = [&](int bl) {
            if constexpr (KS) {
                k_scales<T, DT>(Q[0], bl, p, s2[0], o2[0]);
                k_scales<T, DT>(Q[1], bl, p, s2[1], o2[1]);
            }
        };
        if constexpr (PF) {
            load(0, 0, cur);
            scales(0);
            issue(i + nst - 1, fill, true, true);
        }
#pragma unroll
        for (int bl = 0; bl < S; bl++) {
            if (!ZB && bl >= cnt)
                break;
            const bool on = !ZB || bl < cnt;
            if constexpr (!PF) // (PF's steps are one block, whose scales came before the copies)
                scales(bl);
            float tb[2][4] = {}, sb[2][4] = {}; // (GF: the block's sums for raw_fold)
            Ints ga = {}, gb = {};
#pragma unroll
            for (int cc = 0; cc < CPB; cc++) {
                const int j = cc * 4 + p;
                Raw nxt[2];
                if (PF && cc + 1 < CPB)
                    load(bl, cc + 1, nxt);
                // (wgmma: the products of the chunk two back, whose fragments this one's may
                // take the place of, are done.)
                if constexpr (WG)
                    asm volatile("wgmma.wait_group.sync.aligned 1;\n");
                if constexpr (!PF)
                    load(bl, cc, cur);
                uint4 a, b;
                if constexpr (KS) {
                    const int from = (lane & ~3) | (cc & 3), i = cc >> 2;
                    a = k_frag<T, DT>(cur[0], j, __shfl_sync(0xffffffffu, s2[0][i], from),
                                      __shfl_sync(0xffffffffu, o2[0][i], from));
                    b = k_frag<T, DT>(cur[1], j, __shfl_sync(0xffffffffu, s2[1][i], from),
                                      __shfl_sync(0xffffffffu, o2[1][i], from));
                } else if constexpr (NAT && DT != Q8_0) {
                    uint4 f[2];
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        Ints q = ints<DT>(cur[h], j);
                        q.b = cur[h].q;
                        f[h] = frag_ints<T, DT>(q);
                    }
                    a = f[0], b = f[1];
                } else if constexpr (GF) {
                    ga = ints<DT>(cur[0], j);
                    gb = ints<DT>(cur[1], j);
                    a = pairs_raw<T>(ga.b);
                    b = pairs_raw<T>(gb.b);
                } else {
                    a = frag<T, DT>(cur[0], j);
                    b = frag<T, DT>(cur[1], j);
                }
                const int c = bl * CPB + cc;
                if constexpr (WG) {
                    if (ZB && !on) // (the stale bytes' scales may be NaN)
                        a = b = make_uint4(0u, 0u, 0u, 0u);
                    // (Every row of x: those past m are stale and their sums never stored.)
                    const uint64_t bd = xd + (c >> 1) * (XR * 128 >> 4) + (c & 1) * 4;
                    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
                    wg_mma<T, NT>(acc, a.x, b.x, a.y, b.y, bd);
                    wg_mma<T, NT>(acc, a.z, b.z, a.w, b.w, bd + 2);
                    asm volatile("wgmma.commit_group.sync.aligned;\n");
                } else {
                    const uint8_t *xc = xst + c * 64 + (c & 1 ? -xo : xo);
                    // (Tiles 0 and 1 unconditionally: with fewer rows than 9 tile 1 multiplies
                    // stale rows whose sums are never stored.)
#pragma unroll
                    for (int t = 0; t < NT; t++)
                        if constexpr (GF) {
                            if (t < 2) {
                                const uint4 xx = *reinterpret_cast<const uint4 *>(xc + t * 8 * kBatchXRow);
                                raw_mma<T>(tb[t], sb[t], a, b, xx);
                            }
                        } else if (t < 2 || t < nt) {
                            const uint4 xx = *reinterpret_cast<const uint4 *>(xc + t * 8 * kBatchXRow);
                            float(&d)[4] = A2 && (c & 1) ? acc2[t] : acc[t];
                            tc::mma16816<T>(d, a.x, b.x, a.y, b.y, xx.x, xx.y);
                            tc::mma16816<T>(d, a.z, b.z, a.w, b.w, xx.z, xx.w);
                        }
                }
                if (PF && cc + 1 < CPB) {
                    cur[0] = nxt[0];
                    cur[1] = nxt[1];
                }
            }
            if constexpr (GF)
#pragma unroll
                for (int t = 0; t < 2; t++)
                    raw_fold<T>(acc[t], tb[t], sb[t], ga, gb);
        }
    }
    if constexpr (WG)
        tc::wg_wait_all<NT * 4>(&acc[0][0]);
    if constexpr (A2)
#pragma unroll
        for (int t = 0; t < NT; t++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[t][e] += acc2[t][e];

    // The warps' sums meet in shared memory (column c of x's rows, then the tile's row; rows
    // padded so that a warp's stores meet no bank twice), from where the block writes them
    // along rows.
    constexpr int RP = kBatchRows + 4;
    tc::cp_wait<0>();
    __syncthreads();
    float *red = reinterpret_cast<float *>(sm);
#pragma unroll
    for (int t = 0; t < NT; t++)
        if (t < nt)
#pragma unroll
            for (int e = 0; e < 4; e++)
                red[(8 * t + 2 * p + (e & 1)) * RP + r_a + 8 * (e >> 1)] = acc[t][e];
    __syncthreads();
    // The cells go four rows of w at a time (16-byte loads and stores of the shares' sums where
    // n is a multiple of 4), each thread's shares read before they are added, in share order
    // (the same bits as one at a time: the adds waited on each load in turn).
    const int quads = m * kBatchRows / 4;
    // Quad q's four sums v (rows row0 + r .. of column c) into out.
    auto put = [&](int q, const float (&v)[4]) {
        const int c = q / (kBatchRows / 4), r = 4 * (q % (kBatchRows / 4));
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (row0 + r + e < n32) {
                if (out_f32)
                    static_cast<float *>(out)[c * os + row0 + r + e] = v[e];
                else
                    static_cast<T *>(out)[c * os + row0 + r + e] = tc::from_f32<T>(v[e]);
            }
    };
    if (gridDim.y > 1 && tc::cluster_blocks() == gridDim.y) {
        // The shares' blocks are one cluster (launched so where the device has clusters; the
        // block's rank in it is blockIdx.y): once every block's sums are in its shared memory
        // (the cluster barrier), each block adds its part of the tile's quads from all of them,
        // in share order (the same bits as through ws), and none leaves before all have read
        // (that last barrier without a fence, which would wait for the stores to out: H200,
        // bench_ops quant at 64 rows, 4096 x 4096, q4_k 13.7 -> 13.4 us, q4_1_g128 13.4 ->
        // 13.1).
        tc::cluster_sync();
        const uint32_t red_s = (uint32_t)__cvta_generic_to_shared(red);
        for (int q = threadIdx.x + 256 * blockIdx.y; q < quads; q += 256 * gridDim.y) {
            const int c = q / (kBatchRows / 4), r = 4 * (q % (kBatchRows / 4));
            if (row0 + r >= n32)
                continue;
            float v[4] = {};
            for (uint32_t y = 0; y < gridDim.y; y++) {
                const float4 t = tc::ld_cluster_f4(red_s + 4 * (c * RP + r), y);
                v[0] += t.x, v[1] += t.y, v[2] += t.z, v[3] += t.w;
            }
            put(q, v);
        }
        tc::cluster_sync_relaxed();
        return;
    }
    const bool vec = (n & 3) == 0;
    if (gridDim.y > 1) {
        // (The flag after the sums, not a static __shared__ variable: that took 128 bytes, the
        // dynamic memory's alignment, which two blocks of Q6_K's 64 rows lacked.)
        volatile int &last = *reinterpret_cast<int *>(red + XR * RP);
        float *mine = ws + (int64_t)blockIdx.y * m * n;
        for (int q = threadIdx.x; q < quads; q += blockDim.x) {
            const int c = q / (kBatchRows / 4), r = 4 * (q % (kBatchRows / 4));
            const float *v = red + c * RP + r;
            float *to = mine + (int64_t)c * n + row0 + r;
            if (vec && row0 + r + 3 < n32)
                *reinterpret_cast<float4 *>(to) = make_float4(v[0], v[1], v[2], v[3]);
            else
                for (int e = 0; e < 4; e++)
                    if (row0 + r + e < n32)
                        to[e] = v[e];
        }
        // Arrival as decode attention's merge: thread 0's release after the barrier publishes
        // the block's sums, the last block's acquire sees every share's.
        __syncthreads();
        if (threadIdx.x == 0) {
            last = tc::atomic_add_acq_rel(counts + blockIdx.x, 1) == (int)gridDim.y - 1 ? 1 : 0;
            if (last)
                counts[blockIdx.x] = 0;
        }
        __syncthreads();
        if (!last)
            return;
    }
    // The thread's quads (q = threadIdx.x + 256 i: at most NT of them), every share's sums of
    // all of them loaded before any is added (in share order), so that the last block waits on
    // L2 once a share rather than once a quad and share.
    float v[NT][4] = {};
#pragma unroll 2
    for (uint32_t y = 0; y < gridDim.y; y++) {
        float t[NT][4];
#pragma unroll
        for (int i = 0; i < NT; i++) {
            const int q = threadIdx.x + 256 * i, c = q / (kBatchRows / 4), r = 4 * (q % (kBatchRows / 4));
            const float *at = ws + ((int64_t)y * m + c) * n + row0 + r;
            t[i][0] = t[i][1] = t[i][2] = t[i][3] = 0.0f;
            if (q >= quads || row0 + r >= n32) {
            } else if (y == blockIdx.y) {
                const float *own = red + c * RP + r;
                t[i][0] = own[0], t[i][1] = own[1], t[i][2] = own[2], t[i][3] = own[3];
            } else if (vec && row0 + r + 3 < n32) {
                const float4 f = __ldcg(reinterpret_cast<const float4 *>(at));
                t[i][0] = f.x, t[i][1] = f.y, t[i][2] = f.z, t[i][3] = f.w;
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++)
                    t[i][e] = row0 + r + e < n32 ? __ldcg(at + e) : 0.0f;
            }
        }
#pragma unroll
        for (int i = 0; i < NT; i++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                v[i][e] += t[i][e];
    }
#pragma unroll
    for (int i = 0; i < NT; i++)
        if (threadIdx.x + 256 * i < quads)
            put(threadIdx.x + 256 * i, v[i]);
}

template <typename T, int DT, int NT = 8>
__device__ __forceinline__ void batch_kernel(void *out, int out_f32, const T *x, const void *w, int m, int64_t n,
                                             int64_t k, int64_t xs, int64_t os, float *ws, int32_t *counts)
{
    extern __shared__ __align__(128) uint8_t stages[];
    uint32_t bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
    // (Up to 16 rows of x the products of mma16816 are quicker than a wgmma of 32 columns: H200,
    // 7B Q4_K_M decode of 16 sequences 3,148-3,159 tokens/s with wgmma, 3,383-3,385 without.)
    if (kBatchWg && (NT == 8 || m > 16))
        mma_batch<T, DT, NT, kBatchWg>(out, out_f32 != 0, x, w, m, n, k, xs, os, ws, counts, blockIdx.x, stages,
                                       bytes);
    else
        mma_batch<T, DT, NT, false>(out, out_f32 != 0, x, w, m, n, k, xs, os, ws, counts, blockIdx.x, stages, bytes);
}

// Two products of one x in one launch (tc_k_qmm_pair_*): blocks [0, tiles of w_a) take w_a's
// tiles, the rest w_b's, each as batch_kernel's 64-row wgmma kernel (sm_90a code only: the host
// takes it on compute capability 9.x; elsewhere it traps); w_b's shares of k in ws after w_a's,
// its counters those of its blocks.
template <typename T, int DA, int DB>
__device__ __forceinline__ void batch_pair(T *out_a, T *out_b, const T *x, const void *w_a, const void *w_b, int m,
                                           int64_t n_a, int64_t n_b, int64_t k, int64_t xs, int64_t os_a,
                                           int64_t os_b, float *ws, int32_t *counts)
{
    if constexpr (!kBatchWg) {
        __trap();
    } else {
        extern __shared__ __align__(128) uint8_t stages[];
        uint32_t bytes;
        asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
        const uint32_t ta = (uint32_t)((n_a + kBatchRows - 1) / kBatchRows);
        if (blockIdx.x < ta)
            mma_batch<T, DA, 8, true>(out_a, false, x, w_a, m, n_a, k, xs, os_a, ws, counts, blockIdx.x, stages,
                                      bytes);
        else
            mma_batch<T, DB, 8, true>(out_b, false, x, w_b, m, n_b, k, xs, os_b,
                                      ws ? ws + (int64_t)gridDim.y * m * n_a : ws, counts, blockIdx.x - ta, stages,
                                      bytes);
    }
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
 *  (an id outside [0, n_rows) gives a NaN row). A block per row (grid-stride), a thread per 8
 *  elements. */
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

/** The same for 16-bit x on the tensor cores, one kernel per block type (tc_k_qmv_<type>_<f16|
 *  bf16>), out of x's dtype, or f32 under flags bit 3 (8): blocks of 256 threads, each taking 16
 *  rows of out at a time (grid-stride); k a multiple of 32, x and its stride 16-byte aligned. Dynamic shared memory: the weights'
 *  pipeline, at least 8 x 3584 bytes (one step of the largest type for each warp); more gives
 *  deeper pipelines (up to 6 steps). Two blocks an SM. */
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q4_0_f16(void *out, const __half *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                     int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__half, quant_cu::Q4_0>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q4_0_bf16(void *out, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                      int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__nv_bfloat16, quant_cu::Q4_0>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q4_1_f16(void *out, const __half *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                     int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__half, quant_cu::Q4_1>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q4_1_g64_f16(void *out, const __half *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                         int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__half, quant_cu::Q4_1G>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q4_1_g128_f16(void *out, const __half *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                         int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__half, quant_cu::Q4_1G128>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q4_1_bf16(void *out, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                      int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__nv_bfloat16, quant_cu::Q4_1>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q4_1_g64_bf16(void *out, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                          int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__nv_bfloat16, quant_cu::Q4_1G>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q4_1_g128_bf16(void *out, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                          int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__nv_bfloat16, quant_cu::Q4_1G128>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q5_0_f16(void *out, const __half *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                     int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__half, quant_cu::Q5_0>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q5_0_bf16(void *out, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                      int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__nv_bfloat16, quant_cu::Q5_0>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q5_1_f16(void *out, const __half *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                     int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__half, quant_cu::Q5_1>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q5_1_bf16(void *out, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                      int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__nv_bfloat16, quant_cu::Q5_1>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q8_0_f16(void *out, const __half *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                     int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__half, quant_cu::Q8_0>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q8_0_bf16(void *out, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                      int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__nv_bfloat16, quant_cu::Q8_0>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q2_k_f16(void *out, const __half *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                     int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__half, quant_cu::Q2_K>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q2_k_bf16(void *out, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                      int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__nv_bfloat16, quant_cu::Q2_K>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q3_k_f16(void *out, const __half *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                     int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__half, quant_cu::Q3_K>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q3_k_bf16(void *out, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                      int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__nv_bfloat16, quant_cu::Q3_K>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q4_k_f16(void *out, const __half *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                     int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__half, quant_cu::Q4_K>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q4_k_bf16(void *out, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                      int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__nv_bfloat16, quant_cu::Q4_K>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q5_k_f16(void *out, const __half *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                     int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__half, quant_cu::Q5_K>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q5_k_bf16(void *out, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                      int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__nv_bfloat16, quant_cu::Q5_K>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q6_k_f16(void *out, const __half *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                     int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__half, quant_cu::Q6_K>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv_q6_k_bf16(void *out, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k, int64_t x_stride,
                      int64_t out_stride, int32_t flags)
{
    quant_cu::mma_kernel<__nv_bfloat16, quant_cu::Q6_K>(out, x, w, m, n, k, x_stride, out_stride, flags);
}

/** One row of bf16 x (batch-1 decode) on the integer tensor cores (tc_k_qmv1_<type>_bf16): out[1, n] = x[1, k] w[n, k]^T with x written to shared memory
 *  as two 8-bit integer digits per element and a scale per 32 first (flags as tc_k_qmv_*, and 4: x
 *  RMS-normalised first, x / sqrt(mean(x^2) + eps) times norm [k] when norm is not null; 8: out is
 *  f32, else bf16). Blocks of 256 threads;
 *  k a multiple of 32, x and norm 16-byte aligned. Dynamic shared memory: 2k + k / 2 bytes for x,
 *  then the weights' pipeline, at least 8 x 3584 bytes. Two blocks an SM. */
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv1_q4_0_bf16(void *out, const __nv_bfloat16 *x, const void *w, int64_t n, int64_t k, int64_t out_stride, int32_t flags,
                         const __nv_bfloat16 *norm, float eps)
{
    quant_cu::q8_kernel<__nv_bfloat16, quant_cu::Q4_0>(out, x, w, n, k, out_stride, flags, norm, eps);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv1_q4_1_bf16(void *out, const __nv_bfloat16 *x, const void *w, int64_t n, int64_t k, int64_t out_stride, int32_t flags,
                         const __nv_bfloat16 *norm, float eps)
{
    quant_cu::q8_kernel<__nv_bfloat16, quant_cu::Q4_1>(out, x, w, n, k, out_stride, flags, norm, eps);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv1_q4_1_g64_bf16(void *out, const __nv_bfloat16 *x, const void *w, int64_t n, int64_t k, int64_t out_stride, int32_t flags,
                             const __nv_bfloat16 *norm, float eps)
{
    quant_cu::q8_kernel<__nv_bfloat16, quant_cu::Q4_1G>(out, x, w, n, k, out_stride, flags, norm, eps);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv1_q4_1_g128_bf16(void *out, const __nv_bfloat16 *x, const void *w, int64_t n, int64_t k, int64_t out_stride, int32_t flags,
                             const __nv_bfloat16 *norm, float eps)
{
    quant_cu::q8_kernel<__nv_bfloat16, quant_cu::Q4_1G128>(out, x, w, n, k, out_stride, flags, norm, eps);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv1_q5_0_bf16(void *out, const __nv_bfloat16 *x, const void *w, int64_t n, int64_t k, int64_t out_stride, int32_t flags,
                         const __nv_bfloat16 *norm, float eps)
{
    quant_cu::q8_kernel<__nv_bfloat16, quant_cu::Q5_0>(out, x, w, n, k, out_stride, flags, norm, eps);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv1_q5_1_bf16(void *out, const __nv_bfloat16 *x, const void *w, int64_t n, int64_t k, int64_t out_stride, int32_t flags,
                         const __nv_bfloat16 *norm, float eps)
{
    quant_cu::q8_kernel<__nv_bfloat16, quant_cu::Q5_1>(out, x, w, n, k, out_stride, flags, norm, eps);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv1_q5_k_bf16(void *out, const __nv_bfloat16 *x, const void *w, int64_t n, int64_t k, int64_t out_stride, int32_t flags,
                         const __nv_bfloat16 *norm, float eps)
{
    quant_cu::q8_kernel<__nv_bfloat16, quant_cu::Q5_K>(out, x, w, n, k, out_stride, flags, norm, eps);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv1_q8_0_bf16(void *out, const __nv_bfloat16 *x, const void *w, int64_t n, int64_t k, int64_t out_stride, int32_t flags,
                         const __nv_bfloat16 *norm, float eps)
{
    quant_cu::q8_kernel<__nv_bfloat16, quant_cu::Q8_0>(out, x, w, n, k, out_stride, flags, norm, eps);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv1_q4_k_bf16(void *out, const __nv_bfloat16 *x, const void *w, int64_t n, int64_t k, int64_t out_stride, int32_t flags,
                         const __nv_bfloat16 *norm, float eps)
{
    quant_cu::q8_kernel<__nv_bfloat16, quant_cu::Q4_K>(out, x, w, n, k, out_stride, flags, norm, eps);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv1_q6_k_bf16(void *out, const __nv_bfloat16 *x, const void *w, int64_t n, int64_t k, int64_t out_stride, int32_t flags,
                         const __nv_bfloat16 *norm, float eps)
{
    quant_cu::q8_kernel<__nv_bfloat16, quant_cu::Q6_K>(out, x, w, n, k, out_stride, flags, norm, eps);
}
/** The same for Q2_K and Q3_K, in sm_90a code only (elsewhere they trap). */
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv1_q2_k_bf16(void *out, const __nv_bfloat16 *x, const void *w, int64_t n, int64_t k, int64_t out_stride, int32_t flags,
                         const __nv_bfloat16 *norm, float eps)
{
    quant_cu::q8_kernel<__nv_bfloat16, quant_cu::Q2_K>(out, x, w, n, k, out_stride, flags, norm, eps);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv1_q3_k_bf16(void *out, const __nv_bfloat16 *x, const void *w, int64_t n, int64_t k, int64_t out_stride, int32_t flags,
                         const __nv_bfloat16 *norm, float eps)
{
    quant_cu::q8_kernel<__nv_bfloat16, quant_cu::Q3_K>(out, x, w, n, k, out_stride, flags, norm, eps);
}
/** Two rows of bf16 x (decode of two sequences) over K-quant weights on the integer tensor cores
 *  (tc_k_qmv2_<type>_bf16, in sm_90a code only; elsewhere they trap): out[2, n] =
 *  x[2, k] w[n, k]^T as tc_k_qmv1_* computes each row, the weights read once for both; x's rows
 *  x_stride elements apart, out's out_stride; flags as tc_k_qmv1_* (4: each row normalised by its
 *  own rms). Dynamic shared memory: 2 (2k + k / 2) bytes for x, then the weights' pipeline, at
 *  least 8 x 3584 bytes. Two blocks an SM. */
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv2_q4_k_bf16(void *out, const __nv_bfloat16 *x, const void *w, int64_t n, int64_t k, int64_t x_stride,
                         int64_t out_stride, int32_t flags, const __nv_bfloat16 *norm, float eps)
{
    quant_cu::q8_kernel2<__nv_bfloat16, quant_cu::Q4_K>(out, x, w, n, k, x_stride, out_stride, flags, norm, eps);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv2_q5_k_bf16(void *out, const __nv_bfloat16 *x, const void *w, int64_t n, int64_t k, int64_t x_stride,
                         int64_t out_stride, int32_t flags, const __nv_bfloat16 *norm, float eps)
{
    quant_cu::q8_kernel2<__nv_bfloat16, quant_cu::Q5_K>(out, x, w, n, k, x_stride, out_stride, flags, norm, eps);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv2_q6_k_bf16(void *out, const __nv_bfloat16 *x, const void *w, int64_t n, int64_t k, int64_t x_stride,
                         int64_t out_stride, int32_t flags, const __nv_bfloat16 *norm, float eps)
{
    quant_cu::q8_kernel2<__nv_bfloat16, quant_cu::Q6_K>(out, x, w, n, k, x_stride, out_stride, flags, norm, eps);
}
/** Two one-row products in one launch (tc_k_qmv1_<a>_<b>_bf16): blocks [0, split) take
 *  out_a[1, n_a] = x w_a^T (w_a of the first type), blocks [split, grid) out_b[1, n_b] = x w_b^T
 *  (the second type), each as tc_k_qmv1_* does with flags 4 (the same x, norm and eps; flags 1,
 *  2 and 8 are not taken). Dynamic shared memory as tc_k_qmv1_*, at least the larger type's
 *  least. */
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv1_q4_k_q6_k_bf16(__nv_bfloat16 *out_a, __nv_bfloat16 *out_b, const __nv_bfloat16 *x, const void *w_a,
                             const void *w_b, int64_t n_a, int64_t n_b, int64_t k, int32_t flags,
                             const __nv_bfloat16 *norm, float eps, int32_t split)
{
    quant_cu::q8_pair<__nv_bfloat16, quant_cu::Q4_K, quant_cu::Q6_K>(out_a, out_b, x, w_a, w_b, n_a, n_b, k,
                                                                     flags & 4, norm, eps, (uint32_t)split);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmv1_q5_k_q6_k_bf16(__nv_bfloat16 *out_a, __nv_bfloat16 *out_b, const __nv_bfloat16 *x, const void *w_a,
                             const void *w_b, int64_t n_a, int64_t n_b, int64_t k, int32_t flags,
                             const __nv_bfloat16 *norm, float eps, int32_t split)
{
    quant_cu::q8_pair<__nv_bfloat16, quant_cu::Q5_K, quant_cu::Q6_K>(out_a, out_b, x, w_a, w_b, n_a, n_b, k,
                                                                     flags & 4, norm, eps, (uint32_t)split);
}

/** out[m, n] = x[m, k] w[n, k]^T for 9 (5 for the K-quants) <= m <= 64 rows of 16-bit x and w
 *  of a block type held as planes, one kernel per type (tc_k_qmm_<type>_<f16|bf16>), out in
 *  x's dtype or (out_f32 1) f32; batched decode. Blocks of 256 threads take 128 rows of w each
 *  (grid.x) over one of grid.y equal shares of k; with more than one share, ws holds grid.y x
 *  m x n floats and counts grid.x zeroed counters (left at zero), unless (Hopper) the launch
 *  makes a tile's grid.y blocks one cluster (at most 8), whose shares add in shared memory.
 *  Dynamic shared memory: 2 to 4 stages of 128 weight rows and 8 ceil(m / 8) rows of x, 256
 *  of k each. On Hopper under 128 registers (a few spilled), so that two blocks of two stages
 *  fit an SM where a product's blocks would take more than one wave at one an SM (the host's
 *  choice, as for tc_k_qmm32_* below). The first stages' weights
 *  are requested before the kernel waits for the one before it. k a multiple of 32, x and its
 *  stride 16-byte aligned. */
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q4_0_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q4_0>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q4_0_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q4_0>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q4_1_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q4_1>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q4_1_g64_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                          int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q4_1G>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q4_1_g128_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                          int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q4_1G128>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q4_1_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q4_1>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q4_1_g64_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                          int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q4_1G>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q4_1_g128_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                          int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q4_1G128>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q5_0_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q5_0>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q5_0_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q5_0>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q5_1_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q5_1>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q5_1_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q5_1>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q8_0_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q8_0>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q8_0_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q8_0>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q2_k_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q2_K>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q2_k_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q2_K>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q3_k_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q3_K>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q3_k_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q3_K>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q4_k_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q4_K>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q4_k_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q4_K>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q5_k_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q5_K>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q5_k_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q5_K>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q6_k_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q6_K>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_q6_k_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q6_K>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}

/** out_a = x w_a^T and out_b = x w_b^T for 33 <= m <= 64 rows of bf16 x (a layer's q and k
 *  beside its v where their types differ, as Q4_K_M's more-bits layers have them), in one
 *  launch of tc_k_qmm_*'s blocks (tc_k_qmm_pair_<a>_<b>_bf16, sm_90a code only: elsewhere they
 *  trap): grid.x the tiles of w_a then those of w_b, grid.y the shares of k of both; ws holds
 *  grid.y x m x (n_a + n_b) floats with more than one share (unless a cluster), counts grid.x
 *  counters. Dynamic shared memory as tc_k_qmm_*, enough for two stages of either type. */
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_pair_q4_k_q6_k_bf16(__nv_bfloat16 *out_a, __nv_bfloat16 *out_b, const __nv_bfloat16 *x,
                                 const void *w_a, const void *w_b, int32_t m, int64_t n_a, int64_t n_b, int64_t k,
                                 int64_t x_stride, int64_t os_a, int64_t os_b, float *ws, int32_t *counts)
{
    quant_cu::batch_pair<__nv_bfloat16, quant_cu::Q4_K, quant_cu::Q6_K>(out_a, out_b, x, w_a, w_b, m, n_a, n_b, k,
                                                                       x_stride, os_a, os_b, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, quant_cu::kBatchBlocks)
    tc_k_qmm_pair_q5_k_q6_k_bf16(__nv_bfloat16 *out_a, __nv_bfloat16 *out_b, const __nv_bfloat16 *x,
                                 const void *w_a, const void *w_b, int32_t m, int64_t n_a, int64_t n_b, int64_t k,
                                 int64_t x_stride, int64_t os_a, int64_t os_b, float *ws, int32_t *counts)
{
    quant_cu::batch_pair<__nv_bfloat16, quant_cu::Q5_K, quant_cu::Q6_K>(out_a, out_b, x, w_a, w_b, m, n_a, n_b, k,
                                                                       x_stride, os_a, os_b, ws, counts);
}

/** out[m, n] = x[m, k] w[n, k]^T for 9 <= m <= 32 rows, as tc_k_qmm_* (the same arguments,
 *  workspace and stages) with room for four 8-row tiles of x instead of eight: under 128
 *  registers a thread, so that two blocks share an SM and hide each other's latency (H100,
 *  bench_ops quant, Q4_K 11008 x 4096: 16 rows 37.3 -> 24.2 us, 32 rows 44.0 -> 32.8 us;
 *  7B Q4_K_M decode of 16 sequences 2,183 -> 2,587 tokens/s, 32 sequences 3,157 -> 3,453),
 *  where a product's blocks would take more than one wave at one an SM; one block of up to
 *  four stages otherwise (the host's choice). */
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q4_0_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q4_0, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q4_0_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q4_0, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q4_1_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q4_1, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q4_1_g64_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                          int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q4_1G, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q4_1_g128_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                          int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q4_1G128, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q4_1_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q4_1, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q4_1_g64_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                          int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q4_1G, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q4_1_g128_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                          int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q4_1G128, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q5_0_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q5_0, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q5_0_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q5_0, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q5_1_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q5_1, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q5_1_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q5_1, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q8_0_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q8_0, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q8_0_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q8_0, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q2_k_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q2_K, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q2_k_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q2_K, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q3_k_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q3_K, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q3_k_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q3_K, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q4_k_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q4_K, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q4_k_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q4_K, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q5_k_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q5_K, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q5_k_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q5_K, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q6_k_f16(void *out, int32_t out_f32, const __half *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__half, quant_cu::Q6_K, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tc_k_qmm32_q6_k_bf16(void *out, int32_t out_f32, const __nv_bfloat16 *x, const void *w, int32_t m, int64_t n, int64_t k,
                      int64_t x_stride, int64_t out_stride, float *ws, int32_t *counts)
{
    quant_cu::batch_kernel<__nv_bfloat16, quant_cu::Q6_K, 4>(out, out_f32, x, w, m, n, k, x_stride, out_stride, ws, counts);
}
