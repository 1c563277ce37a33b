/* Dequantisation of GGUF tensor blocks to f32, for the types the kernels do not read directly.
 * Block layouts and formulas follow ggml's reference (ggml-common.h, ggml-quants.c:
 * dequantize_row_q4_1, _q4_K, _q6_K); this is our own code written from that description. */
#include "model/quant.h"
#include <string.h>
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

/* Q4_1: f16 d, f16 m, 16 bytes of nibbles; x = q d + m. */
static void q4_1(const uint8_t *b, float *y)
{
    float d = half(b), m = half(b + 2);
    for (int j = 0; j < 16; j++) {
        y[j] = (float)(b[4 + j] & 15) * d + m;
        y[j + 16] = (float)(b[4 + j] >> 4) * d + m;
    }
}

/* Q5_0: f16 d, 32 high bits, 16 bytes of nibbles; x = (q - 16) d. */
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

/* Q8_0: f16 d, 32 int8; x = q d. */
static void q8_0(const uint8_t *b, float *y)
{
    float d = half(b);
    for (int j = 0; j < 32; j++)
        y[j] = (float)(int8_t)b[2 + j] * d;
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

/* Q4_K: 256 elements as 8 sub-blocks of 32: f16 d, f16 dmin, 12 bytes of scales, 128 bytes of
 * nibbles (each 32 bytes hold two sub-blocks: low nibbles then high); x = d sc q - dmin mn. */
static void q4_k(const uint8_t *b, float *y)
{
    float d = half(b), dmin = half(b + 2);
    const uint8_t *scales = b + 4, *q = b + 16;
    for (int j = 0; j < 8; j += 2, q += 32) {
        int sc0, m0, sc1, m1;
        k_scale_min(j, scales, &sc0, &m0);
        k_scale_min(j + 1, scales, &sc1, &m1);
        for (int l = 0; l < 32; l++) {
            *y++ = d * (float)sc0 * (float)(q[l] & 15) - dmin * (float)m0;
        }
        for (int l = 0; l < 32; l++)
            *y++ = d * (float)sc1 * (float)(q[l] >> 4) - dmin * (float)m1;
    }
}

/* Q6_K: 256 elements: 128 bytes of low nibbles, 64 bytes of high 2-bit pairs, 16 int8
 * scales (one per 16 elements), f16 d; x = d scale (q - 32). Each half of 128 elements takes
 * 64 low bytes and 32 high bytes, in four interleaved runs of 32. */
static void q6_k(const uint8_t *b, float *y)
{
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = half(b + 208);
    for (int half_ = 0; half_ < 2; half_++, y += 128, ql += 64, qh += 32, sc += 8) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 15) | ((qh[l] & 3) << 4)) - 32;
            int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
    }
}

bool tc_dequantize(tc_ggml_type type, const void *src, uint64_t n, float *out)
{
    const uint8_t *b = src;
    uint64_t be, bb;
    if (!tc_ggml_type_block(type, &be, &bb) || n % be)
        return false;
    void (*block)(const uint8_t *, float *) = NULL;
    switch (type) {
    case TC_GGML_F32: memcpy(out, src, n * 4); return true;
    case TC_GGML_F16:
    case TC_GGML_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, b + 2 * i, 2);
            out[i] = type == TC_GGML_F16 ? tc__f16_to_f32(h) : tc__bf16_to_f32(h);
        }
        return true;
    case TC_GGML_Q4_0: block = q4_0; break;
    case TC_GGML_Q4_1: block = q4_1; break;
    case TC_GGML_Q5_0: block = q5_0; break;
    case TC_GGML_Q5_1: block = q5_1; break;
    case TC_GGML_Q8_0: block = q8_0; break;
    case TC_GGML_Q4_K: block = q4_k; break;
    case TC_GGML_Q6_K: block = q6_k; break;
    default: return false;
    }
    for (uint64_t i = 0; i < n / be; i++)
        block(b + i * bb, out + i * be);
    return true;
}
