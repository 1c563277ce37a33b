/* Element types: names, sizes, and the host conversions the CPU ops use (IEEE binary16 and
 * bfloat16 by bit manipulation, rounding to nearest even as the GPU's conversions do). */
#include "ops/internal.h"

static const struct {
    const char *name;
    size_t block_bytes; /* bytes per block */
    int block;          /* elements per block */
} dtypes[TC_DTYPE_COUNT] = {
    [TC_DTYPE_F32] = { "f32", 4, 1 },
    [TC_DTYPE_F16] = { "f16", 2, 1 },
    [TC_DTYPE_BF16] = { "bf16", 2, 1 },
    [TC_DTYPE_I8] = { "i8", 1, 1 },
    [TC_DTYPE_I32] = { "i32", 4, 1 },
    [TC_DTYPE_Q4_0] = { "q4_0", 2 + TC_QBLOCK / 2, TC_QBLOCK },
    [TC_DTYPE_Q8_0] = { "q8_0", 2 + TC_QBLOCK, TC_QBLOCK },
    [TC_DTYPE_F8E4M3] = { "f8e4m3", 1, 1 },
    [TC_DTYPE_Q4_1] = { "q4_1", 4 + TC_QBLOCK / 2, TC_QBLOCK },
    [TC_DTYPE_Q5_0] = { "q5_0", 22, TC_QBLOCK },
    [TC_DTYPE_Q5_1] = { "q5_1", 24, TC_QBLOCK },
    [TC_DTYPE_Q2_K] = { "q2_k", 84, 256 },
    [TC_DTYPE_Q3_K] = { "q3_k", 110, 256 },
    [TC_DTYPE_Q4_K] = { "q4_k", 144, 256 },
    [TC_DTYPE_Q5_K] = { "q5_k", 176, 256 },
    [TC_DTYPE_Q6_K] = { "q6_k", 210, 256 },
    [TC_DTYPE_Q4_1_G64] = { "q4_1_g64", 36, 64 },
    [TC_DTYPE_Q4_1_G128] = { "q4_1_g128", 68, 128 },
};

const char *tc_dtype_name(tc_dtype dt)
{
    return (unsigned)dt < TC_DTYPE_COUNT ? dtypes[dt].name : "invalid";
}

size_t tc_dtype_bytes(tc_dtype dt, int64_t n)
{
    if ((unsigned)dt >= TC_DTYPE_COUNT || n < 0)
        return 0;
    return (size_t)(n / dtypes[dt].block) * dtypes[dt].block_bytes;
}

bool tc_dtype_is_block(tc_dtype dt)
{
    return (unsigned)dt < TC_DTYPE_COUNT && dtypes[dt].block > 1;
}

int tc_dtype_block(tc_dtype dt)
{
    return (unsigned)dt < TC_DTYPE_COUNT ? dtypes[dt].block : 1;
}

uint16_t tc__f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return sign | 0x7e00;
    if (a >= 0x477ff000u) /* rounds to at least 65520: infinity */
        return sign | 0x7c00;
    if (a >= 0x38800000u) { /* normal half */
        uint32_t r = a - 0x38000000u;
        r += 0xfffu + ((r >> 13) & 1);
        return sign | (uint16_t)(r >> 13);
    }
    if (a < 0x33000000u) /* below half the smallest subnormal */
        return sign;
    /* Subnormal half: shift the full mantissa into place, rounding to nearest even. */
    uint32_t man = (a & 0x7fffff) | 0x800000;
    int shift = 126 - (int)(a >> 23);
    uint32_t q = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    return sign | (uint16_t)q;
}

float tc__f8e4m3_to_f32(uint8_t b)
{
    float sign = (b & 0x80) ? -1.0f : 1.0f;
    int exp = (b >> 3) & 0xf, man = b & 7;
    if ((b & 0x7f) == 0x7f)
        return NAN;
    if (exp == 0)
        return sign * ldexpf((float)man, -9); /* subnormal: man / 8 * 2^-6 */
    return sign * ldexpf((float)(8 + man), exp - 10);
}

uint8_t tc__f32_to_f8e4m3(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return sign | 0x7f;
    if (a >= 0x43e00000u) /* 448 and beyond (infinity included): saturate */
        return sign | 0x7e;
    if (a >= 0x3c800000u) { /* 2^-6 and up: normal; round the 20 dropped bits to nearest even */
        uint32_t r = a + 0x7ffffu + ((a >> 20) & 1);
        return sign | (uint8_t)((r >> 20) - (120u << 3));
    }
    /* Subnormal: multiples of 2^-9 (the rounding of 2^-6 - 2^-10 and up gives 8, 2^-6's code). */
    float x;
    memcpy(&x, &a, 4);
    return sign | (uint8_t)lrintf(x * 512.0f);
}

float tc__load(tc_dtype dt, const void *row, int64_t i)
{
    switch (dt) {
    case TC_DTYPE_F32: return ((const float *)row)[i];
    case TC_DTYPE_F16: return tc__f16_to_f32(((const uint16_t *)row)[i]);
    case TC_DTYPE_BF16: return tc__bf16_to_f32(((const uint16_t *)row)[i]);
    case TC_DTYPE_I8: return ((const int8_t *)row)[i];
    case TC_DTYPE_F8E4M3: return tc__f8e4m3_to_f32(((const uint8_t *)row)[i]);
    case TC_DTYPE_I32: return (float)((const int32_t *)row)[i];
    default: return tc__dequant_one(dt, row, i);
    }
}

void tc__store(tc_dtype dt, void *row, int64_t i, float v)
{
    switch (dt) {
    case TC_DTYPE_F32: ((float *)row)[i] = v; break;
    case TC_DTYPE_F16: ((uint16_t *)row)[i] = tc__f32_to_f16(v); break;
    case TC_DTYPE_BF16: ((uint16_t *)row)[i] = tc__f32_to_bf16(v); break;
    case TC_DTYPE_F8E4M3: ((uint8_t *)row)[i] = tc__f32_to_f8e4m3(v); break;
    default: break;
    }
}

void tc__load_row(tc_dtype dt, const void *row, int64_t n, float *out)
{
    switch (dt) {
    case TC_DTYPE_F32: memcpy(out, row, (size_t)n * 4); break;
    case TC_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            out[i] = tc__bf16_to_f32(((const uint16_t *)row)[i]);
        break;
    case TC_DTYPE_F16:
        for (int64_t i = 0; i < n; i++)
            out[i] = tc__f16_to_f32(((const uint16_t *)row)[i]);
        break;
    default:
        if (tc__dequant_row(dt, row, n, out)) /* the block types (qblock.c) */
            break;
        for (int64_t i = 0; i < n; i++)
            out[i] = tc__load(dt, row, i);
        break;
    }
}
