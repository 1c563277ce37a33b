// GGUF's IQ family and ternary types dequantised at load (no kernel reads them as stored): the
// file's blocks, uploaded as they are, to f32/f16/bf16 rows. Layouts as ggml-common.h's
// block_iq2_xxs ... block_tq2_0 (gguf-py's quants.py reads the same); the CPU twin is
// src/model/quant.c, and both take their lookup tables from iq_grids.h. It runs once per load, so
// it is kept small rather than fast (the binary stays under 5 MB): helpers are calls, loops are
// not unrolled.
#include "common.cuh"
#include "iq_grids.h"

namespace iq_cu {

// ggml type ids (GGUF's ggml_type).
enum : int {
    IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
    IQ4_XS = 23, IQ1_M = 29, TQ1_0 = 34, TQ2_0 = 35
};

// Bytes of a block of `type` (of 256 elements; IQ4_NL's of 32), 0 for another type.
__device__ __forceinline__ int block_bytes(int type)
{
    switch (type) {
    case IQ2_XXS: return 66;
    case IQ2_XS: return 74;
    case IQ3_XXS: return 98;
    case IQ1_S: return 50;
    case IQ4_NL: return 18;
    case IQ3_S: return 110;
    case IQ2_S: return 82;
    case IQ4_XS: return 136;
    case IQ1_M: return 56;
    case TQ1_0: return 54;
    case TQ2_0: return 66;
    default: return 0;
    }
}

__device__ __forceinline__ uint32_t rd16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
__device__ __forceinline__ uint32_t rd32(const uint8_t *p) { return rd16(p) | rd16(p + 2) << 16; }
__device__ __forceinline__ float f16(uint32_t bits) { return __half2float(__ushort_as_half((unsigned short)bits)); }

// 3^p for the ternary digits' positions.
__device__ __forceinline__ uint32_t pow3(int p)
{
    uint32_t r = 1;
    while (p-- > 0)
        r *= 3;
    return r;
}

// Where one thread's 32 elements go: element j to out[base + j] in dtype dt.
struct sink {
    void *out;
    int dt;
    int64_t base;
    __device__ __noinline__ void put(int j, float v) const { tc::store_any(dt, out, base + j, v); }
};

// Eight IQ2 grid values times db, negated where `signs` has the element's bit, to y[at..].
__device__ __noinline__ void iq2_eight(const sink &y, int at, uint32_t row, uint32_t signs, float db)
{
#pragma unroll 1
    for (int j = 0; j < 8; j++) {
        float v = db * (float)tc_iq2_values[row >> 2 * j & 3];
        y.put(at + j, signs >> j & 1 ? -v : v);
    }
}

// Four IQ3 grid values (from `map`) times db, signed by the low four bits of signs.
__device__ __noinline__ void iq3_four(const sink &y, int at, uint32_t row, const uint8_t *map, uint32_t signs,
                                      float db)
{
#pragma unroll 1
    for (int j = 0; j < 4; j++) {
        float v = db * (float)map[row >> 4 * j & 15];
        y.put(at + j, signs >> j & 1 ? -v : v);
    }
}

// Eight IQ1 grid values: dl (value + delta).
__device__ __noinline__ void iq1_eight(const sink &y, int at, uint32_t row, float dl, float delta)
{
#pragma unroll 1
    for (int j = 0; j < 8; j++)
        y.put(at + j, dl * ((float)tc_iq1s_values[row >> 2 * j & 3] + delta));
}

// IQ4_NL's values of 16 bytes of 4-bit indices times d: low halves first, then high ones.
__device__ __noinline__ void iq4_32(const sink &y, const uint8_t *q, float d)
{
#pragma unroll 1
    for (int j = 0; j < 16; j++) {
        uint32_t x = q[j];
        y.put(j, d * (float)tc_iq4nl_values[x & 15]);
        y.put(j + 16, d * (float)tc_iq4nl_values[x >> 4]);
    }
}

// Elements [32 ib, 32 ib + 32) of the block of `type` at b.
__device__ void dequant32(int type, const uint8_t *b, int ib, const sink &y)
{
    switch (type) {
    case IQ2_XXS: { // d; per 32: 4 grid bytes, then 4x7 sign bits and a 4-bit scale
        const uint8_t *q = b + 2 + 8 * ib;
        uint32_t aux = rd32(q + 4);
        float db = f16(rd16(b)) * (0.5f + (float)(aux >> 28)) * 0.25f;
    #pragma unroll 1
        for (int l = 0; l < 4; l++)
            iq2_eight(y, 8 * l, tc_iq2xxs_grid[q[l]], tc_iq_ksigns[aux >> 7 * l & 127], db);
        break;
    }
    case IQ2_XS: { // d; u16s of a 9-bit grid index and 7 sign bits; 4-bit scales per 16
        float d = f16(rd16(b));
    #pragma unroll 1
        for (int l = 0; l < 4; l++) {
            uint32_t w = rd16(b + 2 + 8 * ib + 2 * l), s = b[66 + ib] >> 4 * (l / 2) & 15;
            iq2_eight(y, 8 * l, tc_iq2xs_grid[w & 511], tc_iq_ksigns[w >> 9], d * (0.5f + (float)s) * 0.25f);
        }
        break;
    }
    case IQ2_S: { // d; 32 grid bytes; 32 sign bytes; 2 high index bits each; 4-bit scales per 16
        float d = f16(rd16(b));
    #pragma unroll 1
        for (int l = 0; l < 4; l++) {
            uint32_t i = b[2 + 4 * ib + l] | (b[66 + ib] >> 2 * l & 3) << 8, s = b[74 + ib] >> 4 * (l / 2) & 15;
            iq2_eight(y, 8 * l, tc_iq2s_grid[i], b[34 + 4 * ib + l], d * (0.5f + (float)s) * 0.25f);
        }
        break;
    }
    case IQ3_XXS: { // d; 64 grid bytes; per 32 a u32 of 4x7 sign bits and a 4-bit scale
        uint32_t aux = rd32(b + 66 + 4 * ib);
        float db = f16(rd16(b)) * (0.5f + (float)(aux >> 28)) * 0.5f;
    #pragma unroll 1
        for (int l = 0; l < 4; l++) {
            uint32_t signs = tc_iq_ksigns[aux >> 7 * l & 127];
            const uint8_t *q = b + 2 + 8 * ib + 2 * l;
            iq3_four(y, 8 * l, tc_iq3xxs_grid[q[0]], tc_iq3xxs_values, signs, db);
            iq3_four(y, 8 * l + 4, tc_iq3xxs_grid[q[1]], tc_iq3xxs_values, signs >> 4, db);
        }
        break;
    }
    case IQ3_S: { // d; 64 grid bytes; 8 bytes of high index bits; 32 sign bytes; 4-bit scales
        float db = f16(rd16(b)) * (float)(1 + 2 * (b[106 + ib / 2] >> 4 * (ib & 1) & 15));
    #pragma unroll 1
        for (int k = 0; k < 8; k++) {
            uint32_t i = b[2 + 8 * ib + k] | (b[66 + ib] >> k & 1) << 8;
            iq3_four(y, 4 * k, tc_iq3s_grid[i], tc_iq3s_values, b[74 + 4 * ib + k / 2] >> 4 * (k & 1), db);
        }
        break;
    }
    case IQ1_S: { // d; 32 grid bytes; per 32 a u16 of 4x3 high index bits, a scale, the delta's sign
        uint32_t h = rd16(b + 34 + 2 * ib);
        float dl = f16(rd16(b)) * (float)(2 * (h >> 12 & 7) + 1), delta = h & 0x8000 ? -0.125f : 0.125f;
    #pragma unroll 1
        for (int l = 0; l < 4; l++)
            iq1_eight(y, 8 * l, tc_iq1s_grid[b[2 + 4 * ib + l] | (h >> 3 * l & 7) << 8], dl, delta);
        break;
    }
    case IQ1_M: { // 32 grid bytes; 16 bytes of 3 high index bits and the delta's sign per 8; four
                  // u16s of 3-bit scales whose top nibbles make the f16 d
        uint32_t s0 = rd16(b + 48), s1 = rd16(b + 50), s2 = rd16(b + 52), s3 = rd16(b + 54);
        float d = f16(s0 >> 12 | (s1 >> 8 & 0xf0) | (s2 >> 4 & 0xf00) | (s3 & 0xf000));
        uint32_t sc = rd16(b + 48 + 2 * (ib / 2)) >> 6 * (ib & 1);
    #pragma unroll 1
        for (int l = 0; l < 4; l++) {
            int k = 4 * ib + l;
            uint32_t h = b[32 + k / 2] >> 4 * (k & 1) & 15;
            float dl = d * (float)(2 * (sc >> 3 * (l / 2) & 7) + 1);
            iq1_eight(y, 8 * l, tc_iq1s_grid[b[k] | (h & 7) << 8], dl, h & 8 ? -0.125f : 0.125f);
        }
        break;
    }
    case IQ4_NL: // d; 16 bytes of 4-bit indices (one 32-element block)
        iq4_32(y, b + 2, f16(rd16(b)));
        break;
    case IQ4_XS: { // d; the high 2 and low 4 bits of 6-bit scales (less 32); 4-bit indices
        int ls = (int)((b[4 + ib / 2] >> 4 * (ib & 1) & 15) | (rd16(b + 2) >> 2 * ib & 3) << 4);
        iq4_32(y, b + 8 + 16 * ib, f16(rd16(b)) * (float)(ls - 32));
        break;
    }
    case TQ1_0: { // 48 + 4 bytes of base-3 digits as fractions of 256; d
        float d = f16(rd16(b + 52));
    #pragma unroll 1
        for (int j = 0; j < 32; j++) {
            int n = 32 * ib + j;
            uint32_t x = n < 160   ? b[n % 32] * pow3(n / 32)
                         : n < 240 ? b[32 + (n - 160) % 16] * pow3((n - 160) / 16)
                                   : b[48 + (n - 240) % 4] * pow3((n - 240) / 4);
            y.put(j, d * (float)((int)(((x & 255) * 3) >> 8) - 1));
        }
        break;
    }
    case TQ2_0: { // 64 bytes of 2-bit digits: element 128 c + 32 s + m is byte 32 c + m, bits 2 s; d
        float d = f16(rd16(b + 64));
        const uint8_t *q = b + 32 * (ib / 4);
    #pragma unroll 1
        for (int j = 0; j < 32; j++)
            y.put(j, d * (float)((int)(q[j] >> 2 * (ib % 4) & 3) - 1));
        break;
    }
    }
}

} // namespace iq_cu

/** out[i] = element i of n_blocks blocks of ggml type `type` (an IQ or TQ type: ggml type ids)
 *  in the file's layout at `blocks`, stored as out_dtype (DT_F32/F16/BF16 codes; rounding to
 *  nearest even). A thread per 32 elements, grid-stride (any grid size works). */
extern "C" __global__ void tc_k_iq_dequant(void *out, int32_t out_dtype, const uint8_t *blocks, int32_t type,
                                           int64_t n_blocks)
{
    tc::await_inputs();
    int units = type == iq_cu::IQ4_NL ? 1 : 8, bytes = iq_cu::block_bytes(type);
    int64_t total = n_blocks * units;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        int64_t blk = t / units;
        int ib = (int)(t % units);
        iq_cu::dequant32(type, blocks + blk * bytes, ib, iq_cu::sink{out, out_dtype, 32 * t});
    }
}
