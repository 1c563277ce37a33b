// GPTQ, AWQ and compressed-tensors matrices packed into GGUF q4_0, q4_1 or q8_0 blocks (or our
// q4_1_g64 and q4_1_g128) on the GPU, from their parts as the safetensors files hold them (src/model/hfquant.c
// describes the layouts and does the same on the host for the CPU backend; the tests compare the
// two bit for bit). The blocks then go to the planes through tc_k_qrepack.
#include "common.cuh"

namespace hfpack_cu {

// AWQ's nibble of output o (of 8) within its word: the inverse of [0, 2, 4, 6, 1, 3, 5, 7].
__device__ __forceinline__ int awq_nibble(int o) { return (o >> 1) + 4 * (o & 1); }

// v rounded to f16, as bits. (Stored whole, as 16 bits: nvcc 13.0 made the low byte of these
// bits, cast to uint8_t, a conversion of the half's value to an integer (F2I.U8.F16), so that
// q4_1's m lost its low byte.)
__device__ __forceinline__ uint16_t f16_bits(float v)
{
    const __half_raw r = __float2half_rn(v);
    return r.x;
}

// A scale as f16 bits: as stored (f16), or an exact conversion (bf16 or f32 scales that the
// host found f16 to hold exactly).
__device__ __forceinline__ uint16_t scale_bits(const void *sc, int type, int64_t i)
{
    if (type == 0)
        return static_cast<const uint16_t *>(sc)[i];
    float v = type == 1 ? __uint_as_float((uint32_t) static_cast<const uint16_t *>(sc)[i] << 16)
                        : static_cast<const float *>(sc)[i];
    return f16_bits(v);
}

} // namespace hfpack_cu

/** Pack one quantised matrix of `out` rows and nb 32-element blocks a row into GGUF blocks at
 *  `blocks` (row j's block kb at (j nb + kb) times the block's bytes): type 0 q4_0 (every zero
 *  the midpoint 8: d = s), 1 q4_1 (d = s, m = -s z rounded to f16 once), 2 q8_0 (zero 128:
 *  q - 128), 3 q4_1_g64 (q4_1's d and m once for each 64 elements, then the two halves' nibble
 *  bytes; row j's 64-block kb / 2 at (j nb / 2 + kb / 2) times 36 bytes), 4 q4_1_g128 (the same
 *  for 128 elements: four quarters, (j nb / 4 + kb / 4) times 68 bytes). Input k of output j
 *  is bits `bits` at bit bits ((k % kpack) + n) of word
 *  (k / kpack) wk + (j / jpack) wj of qw, n = 0, or AWQ's nibble of j % 8 (awq 1: jpack 8,
 *  kpack 1). Zeros (qz NULL: the midpoint) of group g, output j: word g zg + (j / zpack) zj at
 *  bits bits (j % zpack), AWQ's nibble order likewise, plus zero_offset. Scales (sc_type 0 f16,
 *  1 bf16, 2 f32) at g sg + j sj. Block kb's group: g_idx[32 kb] where g_idx is given, else
 *  32 kb / group (group <= 0: one group). Act-order (perm given, with g_idx): the block's
 *  element e is input perm[32 kb + e] instead of 32 kb + e; with rows, block row j is the parts'
 *  output rows[j]. A thread per block. */
extern "C" __global__ void tc_k_hfq_pack(uint8_t *blocks, int32_t type, int64_t out, int64_t nb, const uint32_t *qw,
                                         int64_t wk, int64_t wj, int32_t kpack, int32_t jpack, int32_t bits,
                                         int32_t awq, const uint32_t *qz, int64_t zg, int64_t zj, int32_t zpack,
                                         int32_t zero_offset, const void *sc, int32_t sc_type, int64_t sg, int64_t sj,
                                         const int32_t *g_idx, const int32_t *perm, const int32_t *rows,
                                         int64_t group)
{
    tc::await_inputs();
    const int bsz = type == 0 ? 18 : type == 1 ? 20 : type == 2 ? 34 : type == 3 ? 36 : 68;
    const int share = type == 3 ? 2 : type == 4 ? 4 : 1; // 32-blocks under one d and m
    const uint32_t mask = (1u << bits) - 1;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < out * nb;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = t / nb, kb = t % nb, o = rows ? rows[j] : j;
        const int64_t k0 = perm ? perm[32 * kb] : 32 * kb;
        const int64_t g = g_idx ? g_idx[k0] : group > 0 ? 32 * kb / group : 0;
        const int jn = awq ? hfpack_cu::awq_nibble((int)(o % 8)) : 0;
        int z = 1 << (bits - 1);
        if (qz) {
            const int zs = awq ? jn : (int)(o % zpack);
            z = (int)(qz[g * zg + (o / zpack) * zj] >> (bits * zs) & mask) + zero_offset;
        }
        const uint16_t s = hfpack_cu::scale_bits(sc, sc_type, g * sg + o * sj);
        uint8_t *b = blocks + (j * (nb / share) + kb / share) * bsz;
        uint8_t q[32];
#pragma unroll 4
        for (int e = 0; e < 32; e++) {
            const int64_t k = perm ? perm[32 * kb + e] : 32 * kb + e;
            const uint32_t w = qw[(k / kpack) * wk + (o / jpack) * wj];
            q[e] = (uint8_t)(w >> (bits * ((int)(k % kpack) + jn)) & mask);
        }
        if (kb % share == 0)
            reinterpret_cast<uint16_t *>(b)[0] = s; // blocks of 18, 20, 34, 36, 68 bytes: 2-byte aligned
        if (type == 2) {
            for (int e = 0; e < 32; e++)
                b[2 + e] = q[e] ^ 0x80;
            continue;
        }
        uint8_t *qs = b + 2;
        if (type != 0) {
            // (q4_1_g64's and q4_1_g128's m: once, by the thread of the first 32-block)
            if (kb % share == 0)
                reinterpret_cast<uint16_t *>(b)[1] =
                    hfpack_cu::f16_bits(-(__half2float(__ushort_as_half(s)) * (float)z));
            qs = b + 4 + 16 * (kb % share);
        }
        for (int l = 0; l < 16; l++)
            qs[l] = (uint8_t)(q[l] | q[l + 16] << 4);
    }
}
