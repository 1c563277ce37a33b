/* The CPU products' dot products of f32 rows of x with rows of weights, read in place: of the
 * float types, and of GGUF's block types, whose integers go from the block's bytes, in
 * registers, to f32 weights eight at a time (each rounded as qblock.c's dequantisation rounds
 * it: q d, or q d + m). Each weight is loaded once for up to four rows of x. The same operations
 * in the same order for every row of x, whatever the rows beside it: a row's product does not
 * depend on the batch it is in. (Scaling each group's sum of x q once and adding m times the
 * sum of x instead saves two operations in eight but loses up to six times the precision to
 * cancellation: not done.) qblock.c's dequantisation stays the reference (tests/ops).
 *
 * On x86-64 meson compiles this file a second time with -mavx2 -mf16c (TC_QDOT_FN
 * tc__qdot_avx2), and tc__qdot takes that build where the CPU has both: the same operations,
 * so the same bits (no FMA to contract them into; f16 to f32 is exact either way). A function
 * attribute (target_clones) would not do: GCC lowers the vector code of the helpers for the
 * baseline before inlining them. */
#include "ops/internal.h"
#ifdef __F16C__
#include <immintrin.h>
#endif

/* The block types whose scales go by groups of 16 elements (the others': 32). */
static inline bool groups_of_16(tc_dtype dt)
{
    return dt == TC_DTYPE_Q2_K || dt == TC_DTYPE_Q3_K || dt == TC_DTYPE_Q6_K;
}

#if defined(TC_QDOT_VARIANT) || !TC_QDOT_AVX2
/* (The 32-byte vectors below never cross a call that is not inlined: their passing convention
 * without AVX, of which GCC and Clang warn, is no interface of ours.) */
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef int8_t i8x16 __attribute__((vector_size(16)));
typedef uint8_t u8x16 __attribute__((vector_size(16)));

static inline float half(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
#ifdef __F16C__
    return _cvtsh_ss(h); /* (exact either way) */
#else
    return tc__f16_to_f32(h);
#endif
}

static inline u8x16 load16(const uint8_t *p)
{
    u8x16 v;
    memcpy(&v, p, 16);
    return v;
}

static inline f32x8 load8(const float *p)
{
    f32x8 v;
    memcpy(&v, p, 32);
    return v;
}

/* Elements 0-7 (hi8: 8-15) of a vector of integers as f32. (Element by element: GCC 12 makes
 * one sign extension of it, where it takes a conversion of an 8-byte vector apart byte by
 * byte.) */
static inline f32x8 lo8(i8x16 v)
{
    i32x8 r = { v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7] };
    return __builtin_convertvector(r, f32x8);
}

static inline f32x8 hi8(i8x16 v)
{
#if defined(__clang__) || __GNUC__ >= 12
    return lo8(__builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
#else
    return lo8(
        __builtin_shuffle(v, (i8x16){ 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7 }));
#endif
}

/* The running sums of the rows of x (R: 1, or 4 where fewer are padded with copies of one, whose
 * sums are thrown away: the operations a row gets are the same either way). */
typedef struct {
    const float *x[4];
    f32x8 acc[4];
    float tail[4];
} sums;

#define INLINE static inline __attribute__((always_inline))

/* A group of 16 (q1 NULL) or 32 integers at element e: the weights q d (+ m where the type has
 * offsets), rounded as the dequantisation rounds them, times each row of x, into acc. The
 * integers go from the block's bytes to the products in registers. */
INLINE void group(f32x8 *acc, const float *const *x, int R, int64_t e, i8x16 q0, const i8x16 *q1,
                  float d, float m, bool offsets)
{
    f32x8 w0 = lo8(q0) * d, w1 = hi8(q0) * d, w2 = { 0 }, w3 = { 0 };
    if (q1)
        w2 = lo8(*q1) * d, w3 = hi8(*q1) * d;
    if (offsets)
        w0 += m, w1 += m, w2 += m, w3 += m;
    for (int r = 0; r < R; r++) {
        const float *xr = x[r] + e;
        f32x8 a = load8(xr) * w0 + load8(xr + 8) * w1;
        if (q1)
            a += load8(xr + 16) * w2 + load8(xr + 24) * w3;
        acc[r] += a;
    }
}

#define GROUP_ARGS f32x8 *acc, const float *const *x, int R, int64_t e
#define GROUP_PASS acc, x, R, e

/* 16 bytes of nibbles as a group of 32 (low nibbles first) less `bias`. */
INLINE void nibbles(GROUP_ARGS, const uint8_t *qs, int bias, float d, float m, bool offsets)
{
    u8x16 v = load16(qs);
    i8x16 q1 = (i8x16)(v >> 4) - (int8_t)bias;
    group(GROUP_PASS, (i8x16)(v & 15) - (int8_t)bias, &q1, d, m, offsets);
}

/* Q4_0 (q - 8) d; Q4_1 q d + m, and our groups of two and four Q4_1 blocks sharing d and m. */
INLINE void b_q4_0(GROUP_ARGS, const uint8_t *b)
{
    nibbles(GROUP_PASS, b + 2, 8, half(b), 0.0f, false);
}

INLINE void b_q4_1(GROUP_ARGS, const uint8_t *b, int groups)
{
    float d = half(b), m = half(b + 2);
    for (int i = 0; i < groups; i++)
        nibbles(acc, x, R, e + 32 * i, b + 4 + 16 * i, 0, d, m, true);
}

/* Q5_0 (q - 16) d and Q5_1 q d + m: the fifth bits (bit j: element j) in a 32-bit word before
 * the nibbles. */
INLINE void b_q5(GROUP_ARGS, const uint8_t *b, bool offset)
{
    const uint8_t *qs = b + (offset ? 8 : 6);
    uint32_t qh;
    memcpy(&qh, b + (offset ? 4 : 2), 4);
    int bias = offset ? 0 : 16;
    i8x16 q0, q1;
    for (int j = 0; j < 16; j++) {
        q0[j] = (int8_t)(((qs[j] & 15) | (int)(((qh >> j) & 1) << 4)) - bias);
        q1[j] = (int8_t)(((qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4)) - bias);
    }
    group(GROUP_PASS, q0, &q1, half(b), offset ? half(b + 2) : 0.0f, offset);
}

INLINE void b_q8_0(GROUP_ARGS, const uint8_t *b)
{
    i8x16 q0, q1;
    memcpy(&q0, b + 2, 16);
    memcpy(&q1, b + 18, 16);
    group(GROUP_PASS, q0, &q1, half(b), 0.0f, false);
}

/* Q2_K: groups of 16, x = d sc q - dmin mn; element 32 g + l of half n is bits 2g, 2g + 1 of
 * quant byte 32 n + l. */
INLINE void b_q2_k(GROUP_ARGS, const uint8_t *b)
{
    const uint8_t *sc = b, *qs = b + 16;
    float d = half(b + 80), dmin = half(b + 82);
    for (int n = 0; n < 2; n++)
        for (int g = 0; g < 4; g++)
            for (int h = 0; h < 2; h++) {
                int at = 128 * n + 32 * g + 16 * h, c = sc[at / 16];
                u8x16 v = load16(qs + 32 * n + 16 * h);
                group(acc, x, R, e + at, (i8x16)((v >> (2 * g)) & 3), NULL, d * (float)(c & 15),
                      -(dmin * (float)(c >> 4)), true);
            }
}

/* Q3_K: groups of 16, x = d (sc - 32) q, q less 4 where its high bit (bit 4n + g of byte l for
 * element 128 n + 32 g + l) is clear. */
INLINE void b_q3_k(GROUP_ARGS, const uint8_t *b)
{
    const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
    float d = half(b + 108);
    for (int n = 0; n < 2; n++)
        for (int g = 0; g < 4; g++)
            for (int h = 0; h < 2; h++) {
                int at = 128 * n + 32 * g + 16 * h, t = at / 16;
                int lo = t < 8 ? sc[t] & 15 : sc[t - 8] >> 4,
                    hi = (sc[8 + (t & 3)] >> (2 * (t / 4))) & 3;
                u8x16 v = load16(qs + 32 * n + 16 * h), m = load16(hm + 16 * h);
                i8x16 q =
                    (i8x16)((v >> (2 * g)) & 3) - (i8x16)((((m >> (4 * n + g)) & 1) ^ 1) << 2);
                group(acc, x, R, e + at, q, NULL, d * (float)((lo | (hi << 4)) - 32), 0.0f, false);
            }
}

/* Q4_K and Q5_K: groups of 32, x = d sc q - dmin mn (scales as qblock.c's k_scale_min); each
 * 32 quant bytes hold two groups (low nibbles, then high), Q5_K's fifth bit of element l of
 * group j is bit j of high byte l. */
INLINE void b_k(GROUP_ARGS, const uint8_t *b, const uint8_t *hbits, const uint8_t *qs)
{
    const uint8_t *sm = b + 4;
    float d = half(b), dmin = half(b + 2);
    for (int j = 0; j < 8; j++) {
        int sc = j < 4 ? sm[j] & 63 : (sm[j + 4] & 15) | ((sm[j - 4] >> 6) << 4),
            mn = j < 4 ? sm[j + 4] & 63 : (sm[j + 4] >> 4) | ((sm[j] >> 6) << 4);
        u8x16 v0 = load16(qs + 32 * (j / 2)), v1 = load16(qs + 32 * (j / 2) + 16);
        int shift = 4 * (j & 1);
        v0 = (v0 >> shift) & 15, v1 = (v1 >> shift) & 15;
        if (hbits) {
            v0 |= ((load16(hbits) >> j) & 1) << 4;
            v1 |= ((load16(hbits + 16) >> j) & 1) << 4;
        }
        i8x16 q1 = (i8x16)v1;
        group(acc, x, R, e + 32 * j, (i8x16)v0, &q1, d * (float)sc, -(dmin * (float)mn), true);
    }
}

/* Q6_K: groups of 16, x = d sc (q - 32); element 128 n + 32 g + l from low byte
 * 64 n + 32 (g & 1) + l (its high nibble for g >= 2) and bits 2g, 2g + 1 of high byte
 * 32 n + l (qblock.c's q6_k). */
INLINE void b_q6_k(GROUP_ARGS, const uint8_t *b)
{
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = half(b + 208);
    for (int n = 0; n < 2; n++)
        for (int g = 0; g < 4; g++)
            for (int h = 0; h < 2; h++) {
                u8x16 lo = load16(ql + 64 * n + 32 * (g & 1) + 16 * h),
                      hi = load16(qh + 32 * n + 16 * h);
                int at = 128 * n + 32 * g + 16 * h;
                i8x16 q = (i8x16)(((lo >> (4 * (g >> 1))) & 15) | ((hi >> (2 * g)) & 3) << 4) - 32;
                group(acc, x, R, e + at, q, NULL, d * (float)sc[at / 16], 0.0f, false);
            }
}

/* Every block of a row of a block type (BE elements, BB bytes each) through `block`, the sums
 * in registers (in memory they could be one of the rows of x as far as the compiler knows). */
#define BLOCK_ROW(name, BLOCK, BE)                                           \
    INLINE void name(sums *s, int R, const uint8_t *w, int64_t k, size_t bb) \
    {                                                                        \
        f32x8 acc[4];                                                        \
        for (int r = 0; r < R; r++)                                          \
            acc[r] = s->acc[r];                                              \
        const int64_t be = (BE);                                             \
        for (int64_t i = 0; i < k / be; i++)                                 \
            BLOCK;                                                           \
        for (int r = 0; r < R; r++)                                          \
            s->acc[r] = acc[r];                                              \
    }
#define AT acc, s->x, R, i *be, w + (size_t)i *bb
BLOCK_ROW(r_q4_0, b_q4_0(AT), 32)
BLOCK_ROW(r_q4_1, b_q4_1(AT, 1), 32)
BLOCK_ROW(r_g64, b_q4_1(AT, 2), 64)
BLOCK_ROW(r_g128, b_q4_1(AT, 4), 128)
BLOCK_ROW(r_q5_0, b_q5(AT, false), 32)
BLOCK_ROW(r_q5_1, b_q5(AT, true), 32)
BLOCK_ROW(r_q8_0, b_q8_0(AT), 32)
BLOCK_ROW(r_q2_k, b_q2_k(AT), 256)
BLOCK_ROW(r_q3_k, b_q3_k(AT), 256)
BLOCK_ROW(r_q4_k, b_k(AT, NULL, w + (size_t)i * bb + 16), 256)
BLOCK_ROW(r_q5_k, b_k(AT, w + (size_t)i * bb + 16, w + (size_t)i * bb + 48), 256)
BLOCK_ROW(r_q6_k, b_q6_k(AT), 256)
#undef AT
#undef BLOCK_ROW

/* Eight elements of a 16- or 32-bit float row from p, as f32 (exact). */
INLINE f32x8 wide8(tc_dtype dt, const uint8_t *p)
{
    if (dt == TC_DTYPE_F32)
        return load8((const float *)(const void *)p);
    uint16_t h[8];
    memcpy(h, p, 16);
    if (dt == TC_DTYPE_BF16) {
        i32x8 v = { h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7] };
        return (f32x8)(v << 16);
    }
    f32x8 v;
#ifdef __F16C__
    __m256 c = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
    memcpy(&v, &c, 32);
#else
    for (int i = 0; i < 8; i++)
        v[i] = tc__f16_to_f32(h[i]);
#endif
    return v;
}

/* A row of a float type: 32 elements at a time as the block types' groups, then 8 at a time,
 * then one at a time into tail. A dequantised row of a block type takes the same operations
 * as the block type's own row. */
INLINE void float_row(sums *s, int R, tc_dtype dt, const uint8_t *w, int64_t k, bool g16)
{
    const size_t es = dt == TC_DTYPE_F32 ? 4 : 2;
    int64_t e = 0;
    f32x8 acc[4];
    for (int r = 0; r < R; r++)
        acc[r] = s->acc[r];
    /* (g16: a row of a type of groups of 16, dequantised: 16 at a time, as those groups go) */
    for (; g16 && e + 16 <= k; e += 16) {
        const float *p = (const float *)(const void *)w + e;
        f32x8 w0 = load8(p), w1 = load8(p + 8);
        for (int r = 0; r < R; r++)
            acc[r] += load8(s->x[r] + e) * w0 + load8(s->x[r] + e + 8) * w1;
    }
    for (; e + 32 <= k; e += 32) {
        const uint8_t *p = w + (size_t)e * es;
        f32x8 w0 = wide8(dt, p), w1 = wide8(dt, p + 8 * es), w2 = wide8(dt, p + 16 * es),
              w3 = wide8(dt, p + 24 * es);
        for (int r = 0; r < R; r++) {
            const float *xr = s->x[r] + e;
            acc[r] +=
                (load8(xr) * w0 + load8(xr + 8) * w1) + (load8(xr + 16) * w2 + load8(xr + 24) * w3);
        }
    }
    for (; e + 8 <= k; e += 8) {
        f32x8 w0 = wide8(dt, w + (size_t)e * es);
        for (int r = 0; r < R; r++)
            acc[r] += load8(s->x[r] + e) * w0;
    }
    for (int r = 0; r < R; r++)
        s->acc[r] = acc[r];
    for (; e < k; e++) {
        float v = tc__load(dt, w, e);
        for (int r = 0; r < R; r++)
            s->tail[r] += s->x[r][e] * v;
    }
}

static inline float hsum8(f32x8 v)
{
    return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

/* One row w of k elements of type dt against s's R rows (1 or 4), each kind of row once for
 * one row of x and once for four. */
INLINE void row_dot(sums *s, int R, tc_dtype dt, const uint8_t *w, int64_t k, size_t bb, bool g16)
{
    switch (dt) {
    case TC_DTYPE_F32:
    case TC_DTYPE_BF16:
    case TC_DTYPE_F16: float_row(s, R, dt, w, k, g16); break;
    case TC_DTYPE_Q4_0: r_q4_0(s, R, w, k, bb); break;
    case TC_DTYPE_Q4_1: r_q4_1(s, R, w, k, bb); break;
    case TC_DTYPE_Q4_1_G64: r_g64(s, R, w, k, bb); break;
    case TC_DTYPE_Q4_1_G128: r_g128(s, R, w, k, bb); break;
    case TC_DTYPE_Q5_0: r_q5_0(s, R, w, k, bb); break;
    case TC_DTYPE_Q5_1: r_q5_1(s, R, w, k, bb); break;
    case TC_DTYPE_Q8_0: r_q8_0(s, R, w, k, bb); break;
    case TC_DTYPE_Q2_K: r_q2_k(s, R, w, k, bb); break;
    case TC_DTYPE_Q3_K: r_q3_k(s, R, w, k, bb); break;
    case TC_DTYPE_Q4_K: r_q4_k(s, R, w, k, bb); break;
    case TC_DTYPE_Q5_K: r_q5_k(s, R, w, k, bb); break;
    case TC_DTYPE_Q6_K: r_q6_k(s, R, w, k, bb); break;
    default: break;
    }
}

static __attribute__((noinline)) void rows1(sums *s, tc_dtype dt, const uint8_t *w, int64_t k,
                                            size_t bb, bool g16)
{
    row_dot(s, 1, dt, w, k, bb, g16);
}

static __attribute__((noinline)) void rows4(sums *s, tc_dtype dt, const uint8_t *w, int64_t k,
                                            size_t bb, bool g16)
{
    row_dot(s, 4, dt, w, k, bb, g16);
}

#ifndef TC_QDOT_FN
#define TC_QDOT_FN tc__qdot_base
#endif
void TC_QDOT_FN(tc_dtype dt, const void *w, size_t row_bytes, int W, const float *const *x, int R,
                int64_t k, bool g16, float (*out)[4]);
void TC_QDOT_FN(tc_dtype dt, const void *w, size_t row_bytes, int W, const float *const *x, int R,
                int64_t k, bool g16, float (*out)[4])
{
    size_t bb = tc_dtype_block(dt) > 1 ? tc_dtype_bytes(dt, tc_dtype_block(dt)) : 0;
    for (int i = 0; i < W; i++) {
        /* (only the sums the kernel uses are zeroed: a row of 576 weights is short enough
         * for zeroing all of them to show) */
        sums s;
        for (int r = 0; r < (R == 1 ? 1 : 4); r++) {
            s.x[r] = x[r < R ? r : 0];
            s.acc[r] = (f32x8){ 0 };
            s.tail[r] = 0.0f;
        }
        (R == 1 ? rows1 : rows4)(&s, dt, (const uint8_t *)w + (size_t)i * row_bytes, k, bb, g16);
        for (int r = 0; r < R; r++)
            out[i][r] = hsum8(s.acc[r]) + s.tail[r];
    }
}

#else
/* The baseline beside the AVX2 build: the same operations lane by lane (eight lanes, as the
 * vectors' elements), on the weights as qblock.c's dequantisation makes them, which the vector
 * code's rounding matches element for element (tests/ops compare the bits). Small, for the CPUs
 * of before 2013 that lack AVX2; the vector code stays out of the release binary's baseline. */
void tc__qdot_base(tc_dtype dt, const void *w, size_t row_bytes, int W, const float *const *x,
                   int R, int64_t k, bool g16, float (*out)[4]);
void tc__qdot_base(tc_dtype dt, const void *w, size_t row_bytes, int W, const float *const *x,
                   int R, int64_t k, bool g16, float (*out)[4])
{
    bool block = tc_dtype_is_block(dt);
    int64_t be = block ? tc_dtype_block(dt) : 1, per = be >= 256 ? be : 256 / be * be;
    int G = g16 || groups_of_16(dt) ? 16 : 32;
    float wv[256];
    for (int i = 0; i < W; i++) {
        const uint8_t *row = (const uint8_t *)w + (size_t)i * row_bytes;
        float acc[4][8] = { { 0 } }, tail[4] = { 0 };
        for (int64_t e0 = 0; e0 < k; e0 += per) {
            int64_t n = k - e0 < per ? k - e0 : per, e = 0;
            if (block)
                tc__dequant_row(dt, row + tc_dtype_bytes(dt, e0), n, wv);
            else
                tc__load_row(dt, row + tc_dtype_bytes(dt, e0), n, wv);
            for (; e + G <= n; e += G)
                for (int r = 0; r < R; r++) {
                    const float *xr = x[r] + e0 + e, *wr = wv + e;
                    for (int l = 0; l < 8; l++) {
                        float a = xr[l] * wr[l] + xr[l + 8] * wr[l + 8];
                        if (G == 32)
                            a += xr[l + 16] * wr[l + 16] + xr[l + 24] * wr[l + 24];
                        acc[r][l] += a;
                    }
                }
            for (; e + 8 <= n; e += 8)
                for (int r = 0; r < R; r++)
                    for (int l = 0; l < 8; l++)
                        acc[r][l] += x[r][e0 + e + l] * wv[e + l];
            for (; e < n; e++)
                for (int r = 0; r < R; r++)
                    tail[r] += x[r][e0 + e] * wv[e];
        }
        for (int r = 0; r < R; r++) {
            const float *v = acc[r];
            out[i][r] = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7])) + tail[r];
        }
    }
}
#endif

#ifndef TC_QDOT_VARIANT
#if TC_QDOT_AVX2
void tc__qdot_avx2(tc_dtype dt, const void *w, size_t row_bytes, int W, const float *const *x,
                   int R, int64_t k, bool g16, float (*out)[4]);
#endif

static bool qdot(tc_dtype dt, const void *w, int W, const float *const *x, int R, int64_t k,
                 bool g16, float (*out)[4], bool any)
{
    bool floats = dt == TC_DTYPE_F32 || dt == TC_DTYPE_BF16 || dt == TC_DTYPE_F16;
    if (!(floats || (tc_dtype_is_block(dt) && k % tc_dtype_block(dt) == 0)) || R < 1 || R > 4)
        return false;
    size_t row_bytes = tc_dtype_bytes(dt, k);
#if TC_QDOT_AVX2
    if (any && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) {
        tc__qdot_avx2(dt, w, row_bytes, W, x, R, k, g16, out);
        return true;
    }
#else
    (void)any;
#endif
    tc__qdot_base(dt, w, row_bytes, W, x, R, k, g16, out);
    return true;
}

bool tc__qdot(tc_dtype dt, const void *w, int W, const float *const *x, int R, int64_t k,
              float (*out)[4])
{
    return qdot(dt, w, W, x, R, k, false, out, true);
}

bool tc__qdot_baseline(tc_dtype dt, const void *w, int W, const float *const *x, int R, int64_t k,
                       float (*out)[4])
{
    return qdot(dt, w, W, x, R, k, false, out, false);
}

bool tc__qdot_dequantised(tc_dtype dt, const float *w, const float *const *x, int R, int64_t k,
                          float out[4])
{
    if (!tc_dtype_is_block(dt) || k % tc_dtype_block(dt))
        return false;
    return qdot(TC_DTYPE_F32, w, 1, x, R, k, groups_of_16(dt), (float(*)[4])out, true);
}
#endif
