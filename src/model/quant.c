/* Dequantisation of GGUF tensors to f32: the block types through the ops layer's
 * src/ops/qblock.c, the IQ family and the ternary types here (kernels/iq.cu is their GPU
 * twin). Layouts: ggml-common.h's block_iq2_xxs ... block_tq2_0, as gguf-py's quants.py reads
 * them; the lookup tables come from gguf-py through kernels/iq_grids.h. */
#include "model/quant.h"
#include "../../kernels/iq_grids.h"
#include "ops/internal.h"

bool tc_ggml_dtype(tc_ggml_type type, tc_dtype *dt)
{
    static const struct {
        tc_ggml_type g;
        tc_dtype d;
    } map[] = {
        { TC_GGML_F32, TC_DTYPE_F32 },
        { TC_GGML_F16, TC_DTYPE_F16 },
        { TC_GGML_BF16, TC_DTYPE_BF16 },
        { TC_GGML_Q4_0, TC_DTYPE_Q4_0 },
        { TC_GGML_Q4_1, TC_DTYPE_Q4_1 },
        { TC_GGML_Q5_0, TC_DTYPE_Q5_0 },
        { TC_GGML_Q5_1, TC_DTYPE_Q5_1 },
        { TC_GGML_Q8_0, TC_DTYPE_Q8_0 },
        { TC_GGML_Q2_K, TC_DTYPE_Q2_K },
        { TC_GGML_Q3_K, TC_DTYPE_Q3_K },
        { TC_GGML_Q4_K, TC_DTYPE_Q4_K },
        { TC_GGML_Q5_K, TC_DTYPE_Q5_K },
        { TC_GGML_Q6_K, TC_DTYPE_Q6_K },
        { TC_GGML_Q4_1_G64, TC_DTYPE_Q4_1_G64 },
        { TC_GGML_Q4_1_G128, TC_DTYPE_Q4_1_G128 },
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (map[i].g == type) {
            *dt = map[i].d;
            return true;
        }
    return false;
}

bool tc_ggml_is_iq(tc_ggml_type type)
{
    switch (type) {
    case TC_GGML_IQ2_XXS:
    case TC_GGML_IQ2_XS:
    case TC_GGML_IQ2_S:
    case TC_GGML_IQ3_XXS:
    case TC_GGML_IQ3_S:
    case TC_GGML_IQ1_S:
    case TC_GGML_IQ1_M:
    case TC_GGML_IQ4_NL:
    case TC_GGML_IQ4_XS:
    case TC_GGML_TQ1_0:
    case TC_GGML_TQ2_0: return true;
    default: return false;
    }
}

/* Little-endian fields at any alignment. */
static uint32_t rd16(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}
static uint32_t rd32(const uint8_t *p)
{
    return rd16(p) | rd16(p + 2) << 16;
}
static float rdf16(const uint8_t *p)
{
    return tc__f16_to_f32((uint16_t)rd16(p));
}

/* Eight elements of an IQ2 grid row, each db times its value, negated where `signs` has its
 * bit. */
static void iq2_eight(uint32_t row, uint32_t signs, float db, float *y)
{
    for (int j = 0; j < 8; j++) {
        float v = db * (float)tc_iq2_values[row >> 2 * j & 3];
        y[j] = signs >> j & 1 ? -v : v;
    }
}

/* Four elements of an IQ3 grid row (values from `map`), signed by the low four bits of signs. */
static void iq3_four(uint32_t row, const uint8_t *map, uint32_t signs, float db, float *y)
{
    for (int j = 0; j < 4; j++) {
        float v = db * (float)map[row >> 4 * j & 15];
        y[j] = signs >> j & 1 ? -v : v;
    }
}

/* Eight elements of an IQ1 grid row: dl (value + delta). */
static void iq1_eight(uint32_t row, float dl, float delta, float *y)
{
    for (int j = 0; j < 8; j++)
        y[j] = dl * ((float)tc_iq1s_values[row >> 2 * j & 3] + delta);
}

/* Sixteen bytes of 4-bit indices into IQ4_NL's values: the low halves are elements 0-15, the
 * high ones 16-31. */
static void iq4_32(const uint8_t *q, float d, float *y)
{
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)tc_iq4nl_values[q[j] & 15];
        y[j + 16] = d * (float)tc_iq4nl_values[q[j] >> 4];
    }
}

/* Element n of a TQ1_0 block: base-3 digits packed five (four in the last 4 bytes) to a byte
 * as a fraction of 256; digit p of byte x is the top of 3 (x 3^p mod 256), less one. */
static int tq1_digit(const uint8_t *b, int n)
{
    static const uint8_t pow3[5] = { 1, 3, 9, 27, 81 };
    uint8_t x;
    if (n < 160)
        x = (uint8_t)(b[n % 32] * pow3[n / 32]);
    else if (n < 240)
        x = (uint8_t)(b[32 + (n - 160) % 16] * pow3[(n - 160) / 16]);
    else
        x = (uint8_t)(b[48 + (n - 240) % 4] * pow3[(n - 240) / 4]);
    return ((x * 3) >> 8) - 1;
}

/* One block of an IQ or TQ type at b into y (its 32 or 256 elements); false for another type. */
static bool iq_block(tc_ggml_type type, const uint8_t *b, float *y)
{
    switch (type) {
    case TC_GGML_IQ2_XXS: { /* d; per 32: 4 grid bytes, then 4x7 sign bits and a 4-bit scale */
        float d = rdf16(b);
        for (int ib = 0; ib < 8; ib++, y += 32) {
            const uint8_t *q = b + 2 + 8 * ib;
            uint32_t aux = rd32(q + 4);
            float db = d * (0.5f + (float)(aux >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++)
                iq2_eight(tc_iq2xxs_grid[q[l]], tc_iq_ksigns[aux >> 7 * l & 127], db, y + 8 * l);
        }
        return true;
    }
    case TC_GGML_IQ2_XS: { /* d; 32 u16 of 9-bit grid index and 7 sign bits; 4-bit scales */
        float d = rdf16(b);
        for (int ib = 0; ib < 8; ib++, y += 32)
            for (int l = 0; l < 4; l++) {
                uint32_t w = rd16(b + 2 + 8 * ib + 2 * l), s = b[66 + ib] >> 4 * (l / 2) & 15;
                float db = d * (0.5f + (float)s) * 0.25f;
                iq2_eight(tc_iq2xs_grid[w & 511], tc_iq_ksigns[w >> 9], db, y + 8 * l);
            }
        return true;
    }
    case TC_GGML_IQ2_S: { /* d; 32 grid bytes; 32 sign bytes; 2 high bits each; 4-bit scales */
        float d = rdf16(b);
        for (int ib = 0; ib < 8; ib++, y += 32)
            for (int l = 0; l < 4; l++) {
                uint32_t i = b[2 + 4 * ib + l] | (b[66 + ib] >> 2 * l & 3) << 8;
                uint32_t s = b[74 + ib] >> 4 * (l / 2) & 15;
                float db = d * (0.5f + (float)s) * 0.25f;
                iq2_eight(tc_iq2s_grid[i], b[34 + 4 * ib + l], db, y + 8 * l);
            }
        return true;
    }
    case TC_GGML_IQ3_XXS: { /* d; 64 grid bytes; per 32 a u32 of 4x7 sign bits and a scale */
        float d = rdf16(b);
        for (int ib = 0; ib < 8; ib++, y += 32) {
            uint32_t aux = rd32(b + 66 + 4 * ib);
            float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++) {
                uint32_t signs = tc_iq_ksigns[aux >> 7 * l & 127];
                const uint8_t *q = b + 2 + 8 * ib + 2 * l;
                iq3_four(tc_iq3xxs_grid[q[0]], tc_iq3xxs_values, signs, db, y + 8 * l);
                iq3_four(tc_iq3xxs_grid[q[1]], tc_iq3xxs_values, signs >> 4, db, y + 8 * l + 4);
            }
        }
        return true;
    }
    case TC_GGML_IQ3_S: { /* d; 64 grid bytes; 8 bytes of high bits; 32 sign bytes; scales */
        float d = rdf16(b);
        for (int ib = 0; ib < 8; ib++, y += 32) {
            float db = d * (float)(1 + 2 * (b[106 + ib / 2] >> 4 * (ib & 1) & 15));
            for (int k = 0; k < 8; k++) {
                uint32_t i = b[2 + 8 * ib + k] | (b[66 + ib] >> k & 1) << 8;
                uint32_t signs = b[74 + 4 * ib + k / 2] >> 4 * (k & 1);
                iq3_four(tc_iq3s_grid[i], tc_iq3s_values, signs, db, y + 4 * k);
            }
        }
        return true;
    }
    case TC_GGML_IQ1_S: { /* d; 32 grid bytes; per 32 a u16: 4x3 high bits, scale, delta sign */
        float d = rdf16(b);
        for (int ib = 0; ib < 8; ib++, y += 32) {
            uint32_t h = rd16(b + 34 + 2 * ib);
            float dl = d * (float)(2 * (h >> 12 & 7) + 1), delta = h & 0x8000 ? -0.125f : 0.125f;
            for (int l = 0; l < 4; l++)
                iq1_eight(tc_iq1s_grid[b[2 + 4 * ib + l] | (h >> 3 * l & 7) << 8], dl, delta,
                          y + 8 * l);
        }
        return true;
    }
    case TC_GGML_IQ1_M: { /* 32 grid bytes; 16 bytes of 3 high bits and a delta sign per 8;
                           * four u16 of 3-bit scales whose top nibbles make the f16 d */
        uint32_t sc[4] = { rd16(b + 48), rd16(b + 50), rd16(b + 52), rd16(b + 54) };
        float d = tc__f16_to_f32((uint16_t)(sc[0] >> 12 | (sc[1] >> 8 & 0xf0) |
                                            (sc[2] >> 4 & 0xf00) | (sc[3] & 0xf000)));
        for (int ib = 0; ib < 8; ib++, y += 32)
            for (int l = 0; l < 4; l++) {
                int k = 4 * ib + l, m = 2 * ib + l / 2;
                uint32_t h = b[32 + k / 2] >> 4 * (k & 1) & 15;
                float dl = d * (float)(2 * (sc[m / 4] >> 3 * (m % 4) & 7) + 1);
                iq1_eight(tc_iq1s_grid[b[k] | (h & 7) << 8], dl, h & 8 ? -0.125f : 0.125f,
                          y + 8 * l);
            }
        return true;
    }
    case TC_GGML_IQ4_NL: { /* d; 16 bytes of 4-bit indices */
        iq4_32(b + 2, rdf16(b), y);
        return true;
    }
    case TC_GGML_IQ4_XS: { /* d; 2 high bits and 4 low bits of 6-bit scales (less 32); indices */
        float d = rdf16(b);
        uint32_t high = rd16(b + 2);
        for (int ib = 0; ib < 8; ib++, y += 32) {
            int ls = (int)((b[4 + ib / 2] >> 4 * (ib & 1) & 15) | (high >> 2 * ib & 3) << 4);
            iq4_32(b + 8 + 16 * ib, d * (float)(ls - 32), y);
        }
        return true;
    }
    case TC_GGML_TQ1_0: { /* 48 + 4 bytes of base-3 digits; d */
        float d = rdf16(b + 52);
        for (int n = 0; n < 256; n++)
            y[n] = d * (float)tq1_digit(b, n);
        return true;
    }
    case TC_GGML_TQ2_0: { /* 64 bytes of 2-bit digits (element 128 c + 32 s + m in byte 32 c + m,
                           * bits 2 s); d */
        float d = rdf16(b + 64);
        for (int n = 0; n < 256; n++)
            y[n] = d * (float)((b[32 * (n / 128) + n % 32] >> 2 * (n % 128 / 32) & 3) - 1);
        return true;
    }
    default: return false;
    }
}

bool tc_dequantize(tc_ggml_type type, const void *src, uint64_t n, float *out)
{
    uint64_t be, bb;
    tc_dtype dt;
    if (!tc_ggml_type_block(type, &be, &bb) || n % be)
        return false;
    if (tc_ggml_dtype(type, &dt)) {
        tc__load_row(dt, src, (int64_t)n, out);
        return true;
    }
    if (!tc_ggml_is_iq(type))
        return false;
    const uint8_t *b = src;
    for (uint64_t i = 0; i < n / be; i++)
        iq_block(type, b + i * bb, out + i * be);
    return true;
}
