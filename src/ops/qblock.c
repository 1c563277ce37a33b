/* GGUF's quantised blocks dequantised to f32 on the host: the CPU backend's products read
 * weights of these types in place through them (a row at a time), and the model layer
 * converts types no kernel reads. Layouts and formulas follow ggml's reference
 * (ggml-common.h, ggml-quants.c: dequantize_row_q4_0 ... _q6_K); our own code written from
 * that description. kernels/quant.cu holds the CUDA twin. */
#include "ops/internal.h"

static float half(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return tc__f16_to_f32(h);
}

/* Q4_0: f16 d, 16 bytes of nibbles; x = (q - 8) d. Low nibbles are elements 0..15. */
static void q4_0(const uint8_t *b, float *y)
{
    float d = half(b);
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((b[2 + j] & 15) - 8) * d;
        y[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
    }
}

/* 32 elements from 16 bytes of nibbles (low: 0-15, high: 16-31), x = q d + m. The nibbles are
 * copied out first: y cannot alias them, so the loops vectorise (the CPU demo's decode). */
static void nibbles(const uint8_t *qs, float d, float m, float *y)
{
    uint8_t q[16];
    memcpy(q, qs, 16);
    for (int j = 0; j < 16; j++)
        y[j] = (float)(q[j] & 15) * d + m;
    for (int j = 0; j < 16; j++)
        y[j + 16] = (float)(q[j] >> 4) * d + m;
}

/* Q4_1: f16 d, f16 m, 16 bytes of nibbles; x = q d + m. */
static void q4_1(const uint8_t *b, float *y)
{
    nibbles(b + 4, half(b), half(b + 2), y);
}

/* Q4_1_G64 and Q4_1_G128 (ours, for GPTQ's and AWQ's groups of 64 and of multiples of 128:
 * src/model/hfquant.c): f16 d, f16 m, then the 16 nibble bytes of two (four) Q4_1 blocks of 32
 * elements that share them. */
static void q4_1_g64(const uint8_t *b, float *y)
{
    float d = half(b), m = half(b + 2);
    nibbles(b + 4, d, m, y);
    nibbles(b + 20, d, m, y + 32);
}

static void q4_1_g128(const uint8_t *b, float *y)
{
    float d = half(b), m = half(b + 2);
    for (int i = 0; i < 4; i++)
        nibbles(b + 4 + 16 * i, d, m, y + 32 * i);
}

/* Q5_0: f16 d, 32 high bits (bit j: element j), 16 bytes of nibbles; x = (q - 16) d. */
static void q5_0(const uint8_t *b, float *y)
{
    float d = half(b);
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    for (int j = 0; j < 16; j++) {
        int lo = (b[6 + j] & 15) | (int)(((qh >> j) & 1) << 4);
        int hi = (b[6 + j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
        y[j] = (float)(lo - 16) * d;
        y[j + 16] = (float)(hi - 16) * d;
    }
}

/* Q5_1: f16 d, f16 m, 32 high bits, 16 bytes of nibbles; x = q d + m. */
static void q5_1(const uint8_t *b, float *y)
{
    float d = half(b), m = half(b + 2);
    uint32_t qh;
    memcpy(&qh, b + 4, 4);
    for (int j = 0; j < 16; j++) {
        int lo = (b[8 + j] & 15) | (int)(((qh >> j) & 1) << 4);
        int hi = (b[8 + j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
        y[j] = (float)lo * d + m;
        y[j + 16] = (float)hi * d + m;
    }
}

/* Q8_0: f16 d, 32 int8; x = q d (copied out first, as Q4_1's). */
static void q8_0(const uint8_t *b, float *y)
{
    float d = half(b);
    int8_t q[32];
    memcpy(q, b + 2, 32);
    for (int j = 0; j < 32; j++)
        y[j] = (float)q[j] * d;
}

/* Q2_K: 256 elements: 16 bytes of scales (low nibble) and minima (high), one per 16
 * elements, 64 bytes of 2-bit quants, f16 d, f16 dmin; x = d sc q - dmin mn. Each half of
 * 128 elements takes 32 quant bytes: element 32 g + l of the half is bits 2g, 2g + 1 of byte
 * l. */
static void q2_k(const uint8_t *b, float *y)
{
    const uint8_t *sc = b, *qs = b + 16;
    float d = half(b + 80), dmin = half(b + 82);
    for (int e = 0; e < 256; e++) {
        int n = e / 128, g = (e % 128) / 32, l = e % 32, s = sc[e / 16];
        int q = (qs[32 * n + l] >> (2 * g)) & 3;
        y[e] = d * (float)(s & 15) * (float)q - dmin * (float)(s >> 4);
    }
}

/* Q3_K: 256 elements: 32 bytes of high bits (element 128 n + 32 g + l: bit 4n + g of byte l;
 * clear means q - 4), 64 bytes of 2-bit quants laid out as Q2_K's, 12 bytes of 6-bit scales
 * less 32 (one per 16 elements: the low 4 bits in the nibbles of bytes 0-7, the high 2 in
 * bytes 8-11), f16 d; x = d sc q. */
static void q3_k(const uint8_t *b, float *y)
{
    const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
    float d = half(b + 108);
    for (int e = 0; e < 256; e++) {
        int n = e / 128, g = (e % 128) / 32, l = e % 32, s = e / 16;
        int lo = s < 8 ? sc[s] & 15 : sc[s - 8] >> 4, hi = (sc[8 + (s & 3)] >> (2 * (s / 4))) & 3;
        int q = ((qs[32 * n + l] >> (2 * g)) & 3) - ((hm[l] >> (4 * n + g)) & 1 ? 0 : 4);
        y[e] = d * (float)((lo | (hi << 4)) - 32) * (float)q;
    }
}

/* The 6-bit scale and minimum of sub-block j (0..7) of a Q4_K/Q5_K block, packed in 12 bytes:
 * sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scale) and 4-7 (min), 4-7 split between the
 * nibbles of bytes 8-11 and the top 2 bits of bytes 0-7. */
static void k_scale_min(int j, const uint8_t *s, int *sc, int *mn)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Q4_K (hbits NULL) and Q5_K: 256 elements as 8 sub-blocks of 32: f16 d, f16 dmin, 12 bytes
 * of scales, for Q5_K 32 bytes of high bits (bit j of byte l: element l of sub-block j), 128
 * bytes of nibbles (each 32 hold two sub-blocks: low nibbles, then high); x = d sc q - dmin
 * mn. */
static void k_quant(const uint8_t *b, const uint8_t *hbits, const uint8_t *q, float *y)
{
    float d = half(b), dmin = half(b + 2);
    for (int j = 0; j < 8; j++) {
        int sc, mn;
        k_scale_min(j, b + 4, &sc, &mn);
        float dl = d * (float)sc, ml = dmin * (float)mn;
        for (int l = 0; l < 32; l++) {
            int v = (q[32 * (j / 2) + l] >> (4 * (j & 1))) & 15;
            if (hbits)
                v |= ((hbits[l] >> j) & 1) << 4;
            *y++ = dl * (float)v - ml;
        }
    }
}

static void q4_k(const uint8_t *b, float *y)
{
    k_quant(b, NULL, b + 16, y);
}

static void q5_k(const uint8_t *b, float *y)
{
    k_quant(b, b + 16, b + 48, y);
}

/* Q6_K: 256 elements: 128 bytes of low nibbles, 64 bytes of high 2-bit pairs, 16 int8
 * scales (one per 16 elements), f16 d; x = d scale (q - 32). Each half of 128 elements takes
 * 64 low bytes and 32 high bytes, in four interleaved runs of 32. */
static void q6_k(const uint8_t *b, float *y)
{
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = half(b + 208);
    for (int e = 0; e < 256; e++) {
        int n = e / 128, q4 = (e % 128) / 32, l = e % 32;
        int lo = (ql[64 * n + 32 * (q4 & 1) + l] >> (4 * (q4 >> 1))) & 15;
        int hi = (qh[32 * n + l] >> (2 * q4)) & 3;
        y[e] = d * (float)sc[e / 16] * (float)((lo | (hi << 4)) - 32);
    }
}

/* Each block of a row through the type's function, a loop per type so that the function is
 * inlined into it (the CPU products widen every weight row through here). */
#define ROW(fn, be)                                                \
    for (int64_t i = 0; i < n / (be); i++)                         \
        fn((const uint8_t *)row + (size_t)i * bb, out + i * (be)); \
    return true

bool tc__dequant_row(tc_dtype dt, const void *row, int64_t n, float *out)
{
    if (!tc_dtype_is_block(dt) || n % tc_dtype_block(dt))
        return false;
    size_t bb = tc_dtype_bytes(dt, tc_dtype_block(dt)); /* bytes a block */
    switch (dt) {
    case TC_DTYPE_Q4_0: ROW(q4_0, 32);
    case TC_DTYPE_Q4_1: ROW(q4_1, 32);
    case TC_DTYPE_Q4_1_G64: ROW(q4_1_g64, 64);
    case TC_DTYPE_Q4_1_G128: ROW(q4_1_g128, 128);
    case TC_DTYPE_Q5_0: ROW(q5_0, 32);
    case TC_DTYPE_Q5_1: ROW(q5_1, 32);
    case TC_DTYPE_Q8_0: ROW(q8_0, 32);
    case TC_DTYPE_Q2_K: ROW(q2_k, 256);
    case TC_DTYPE_Q3_K: ROW(q3_k, 256);
    case TC_DTYPE_Q4_K: ROW(q4_k, 256);
    case TC_DTYPE_Q5_K: ROW(q5_k, 256);
    case TC_DTYPE_Q6_K: ROW(q6_k, 256);
    default: return false;
    }
}
#undef ROW

float tc__dequant_one(tc_dtype dt, const void *row, int64_t i)
{
    float blk[256];
    int be = tc_dtype_block(dt);
    if (!tc__dequant_row(dt, (const uint8_t *)row + (size_t)(i / be) * tc_dtype_bytes(dt, be), be,
                         blk))
        return NAN;
    return blk[i % be];
}
