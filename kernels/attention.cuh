// Shared by kernels/attention*.cu (attention over a paged KV cache, layout in src/ops/ops.h):
// the cache's addressing and the copies of its rows to shared memory, for kernels of a
// compile-time head_dim (64, 80, 96, 112, 128, 256) and for the generic ones that read it at
// run time.
#pragma once
#include <limits.h>

#include "common.cuh"

namespace attention_cu {

// Address of token t's row for kv head h in a paged cache. 32-bit division: a 64-bit one
// costs about a hundred instructions, and positions stay far below 2^31.
template <typename T>
__device__ __forceinline__ const T *kv_row(const T *cache, const int32_t *table, int64_t t, int block_size,
                                           int n_kv_heads, int head_dim, int h)
{
    uint32_t tt = (uint32_t)t, bs = (uint32_t)block_size;
    uint32_t bi = tt / bs;
    int64_t blk = table[bi];
    return cache + ((blk * block_size + (tt - bi * bs)) * n_kv_heads + h) * (int64_t)head_dim;
}

// A decode block's warps, and a prefill block's (4 of 16 query rows each); tiles of kTile
// tokens (a decode warp's step; a prefill warp's share of a key tile).
constexpr int kMaxGroup = 8, kWarps = 4, kTile = 16;

// Padded row of keys or values in shared memory (decode and prefill), in elements: 16 extra
// bytes put the rows read by a quarter-warp (and the eight row addresses of an ldmatrix) in
// distinct banks.
template <typename T, int HD> __host__ __device__ constexpr int kv_ld() { return HD + 16 / (int)sizeof(T); }
template <typename T, int HD> __host__ __device__ constexpr int decode_stage_elems()
{
    return 2 * kTile * kv_ld<T, HD>();
}

// One warp queues the cp.async copies of kTile cache rows of kv head kvh from token ts (a
// multiple of kTile): keys to rows of ks, values to rows of vs (kv_ld apart); tokens before
// start (a sliding window's first: earlier blocks may be freed, never read) or at or past t1
// are zero-filled. With lo > 0 only the tokens in [lo, hi) are copied and nothing is
// zero-filled (the rest of a tile whose first part was copied earlier, up to hi).
template <typename T, int HD>
__device__ __forceinline__ void load_kv_rows(T *ks, T *vs, const T *k_cache, const T *v_cache, const int32_t *tbl,
                                             int ts, int t1, int start, int block_size, int n_kv_heads,
                                             int kvh, int lane, int lo = 0, int hi = INT_MAX)
{
    // CR 16-byte chunks a row: lane + 32 i takes row (lane + 32 i) / CR, chunk (lane + 32 i) % CR.
    constexpr int LD = kv_ld<T, HD>(), VE = 16 / (int)sizeof(T), CR = HD / VE, N = kTile * CR;
    static_assert(HD % VE == 0, "rows of whole 16-byte chunks");
    // A tile lies in one cache block when the block size is a multiple of the tile: one table
    // read for the tile instead of one per row.
    bool one_block = (block_size % kTile) == 0;
    int64_t base = 0;
    if (one_block && ts < t1 && ts + kTile > max(lo, start) && ts < hi) { // an entry only where rows are copied
        uint32_t bi = (uint32_t)ts / (uint32_t)block_size;
        base = (int64_t)tbl[bi] * block_size + ((uint32_t)ts - bi * (uint32_t)block_size);
    }
#pragma unroll
    for (int i = 0; i < (N + 31) / 32; i++) {
        int c = lane + 32 * i, r = c / CR, col = c % CR;
        if (N % 32 != 0 && c >= N)
            break;
        int t = ts + r;
        bool real = t >= start && t < t1, ok = real && t >= lo && t < hi;
        if (!ok && (real || lo > 0))
            continue; // copied in the other part
        int64_t off = 0;
        if (ok) {
            if (one_block)
                off = ((base + r) * n_kv_heads + kvh) * (int64_t)HD;
            else
                off = kv_row(k_cache, tbl, t, block_size, n_kv_heads, HD, kvh) - k_cache;
        }
        tc::cp_async16(ks + r * LD + col * VE, k_cache + off + col * VE, ok);
        tc::cp_async16(vs + r * LD + col * VE, v_cache + off + col * VE, ok);
    }
}

// ---- The generic kernels: any even head_dim up to kMaxHD, read at run time, and a 16-bit or
// an FP8 cache (one kernel for both, chosen at run time: fewer instantiations, a smaller
// binary). Their rows in shared memory and their products are head_dim rounded up to 16 (hp)
// wide; the columns from head_dim to hp are zeroed once and never written by the copies.
constexpr int kMaxHD = 256;

// Copy G bytes (16, 8 or 4) global -> shared asynchronously (cp.async.ca; 16 bytes with
// tc::cp_async16's L2 hint), or fill them with zeros (nothing read) when !pred; 2 bytes
// synchronously (cp.async copies 4 or more).
__device__ __forceinline__ void copy_piece(void *smem, const void *gmem, bool pred, int G)
{
    unsigned d = (unsigned)__cvta_generic_to_shared(smem);
    int n = pred ? G : 0;
    if (G == 16)
        asm volatile("cp.async.ca.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(d), "l"(gmem), "r"(n));
    else if (G == 8)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(d), "l"(gmem), "r"(n));
    else if (G == 4)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(gmem), "r"(n));
    else
        *static_cast<uint16_t *>(smem) = pred ? *static_cast<const uint16_t *>(gmem) : (uint16_t)0;
}

// load_kv_rows for a run-time head_dim hd and cache element size esz (1: FP8, 2: 16-bit), on
// bytes: one warp copies `rows` cache rows of kv head kvh from token ts (keys to ks, values to
// vs, rows ld bytes apart), in pieces of G bytes (the largest of 16, 8, 4, 2 that divides a
// row's bytes, so every piece is aligned). Rows as load_kv_rows: [start, t1) are real, the rest
// zero-filled; with lo > 0 only [lo, hi). (Not inlined: the generic kernels call it from
// several places.)
__device__ __noinline__ void load_rows_any(uint8_t *ks, uint8_t *vs, const uint8_t *k_cache, const uint8_t *v_cache,
                                           const int32_t *tbl, int ts, int rows, int t1, int start, int block_size,
                                           int n_kv_heads, int kvh, int hd, int esz, int ld, int lane, int lo,
                                           int hi)
{
    const int bytes = hd * esz;
    const int G = bytes % 16 == 0 ? 16 : bytes % 8 == 0 ? 8 : bytes % 4 == 0 ? 4 : 2, per_row = bytes / G;
    for (int e = lane; e < rows * per_row; e += 32) {
        int r = e / per_row, c = e - r * per_row, t = ts + r;
        bool real = t >= start && t < t1, ok = real && t >= lo && t < hi;
        if (!ok && (real || lo > 0))
            continue; // copied in the other part
        int64_t off = ok ? kv_row(k_cache, tbl, t, block_size, n_kv_heads, bytes, kvh) - k_cache : 0;
        copy_piece(ks + r * ld + c * G, k_cache + off + c * G, ok, G);
        copy_piece(vs + r * ld + c * G, v_cache + off + c * G, ok, G);
    }
}

// Zero bytes [from, to) of `rows` rows ld bytes apart (thread t of n).
__device__ __forceinline__ void zero_pad(uint8_t *rows_at, int rows, int from, int to, int ld, int t, int n)
{
    int w = to - from;
    for (int e = t; e < rows * w; e += n) {
        int r = e / w;
        rows_at[r * ld + from + (e - r * w)] = 0;
    }
}

// widen for a run-time width: rows x hp FP8 values (rows lds bytes apart) to T (rows ldd apart).
template <typename T>
__device__ __forceinline__ void widen_any(T *dst, const uint8_t *src, int rows, int hp, int ldd, int lds, int t, int n)
{
    int P = hp / 8;
    for (int e = t; e < rows * P; e += n) {
        int r = e / P, c = e - r * P;
        uint2 x = *reinterpret_cast<const uint2 *>(src + r * lds + 8 * c);
        uint4 y;
        tc::f8x4_to<T>(x.x, y.x, y.y);
        tc::f8x4_to<T>(x.y, y.z, y.w);
        *reinterpret_cast<uint4 *>(dst + r * ldd + 8 * c) = y;
    }
}

} // namespace attention_cu
