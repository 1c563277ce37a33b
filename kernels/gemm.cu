// Our own matrix products out[m, n] = x[m, k] w[n, k]^T, for where cuBLAS is not installed
// (only the driver is promised). f16/bf16 run on tensor cores (wgmma on Hopper, else mma.sync
// m16n8k16; f32 accumulate) fed by cp.async pipelines; everything else, a tiled f32 kernel.
#include "common.cuh"

namespace gemm_cu {

// Tensor-core tiling: a 128x128 block tile, K steps of 64 through a cp.async pipeline of 3
// stages (2 where shared memory holds fewer), 8 warps of 64x32 each. Fragments come from
// shared memory by ldmatrix and go through mma.sync m16n8k16 (f32 accumulate); the epilogue
// converts and stores straight from the accumulator registers.
constexpr int BM = 128, BN = 128, BK = 64, kThreads = 256;
constexpr int kLd = BK + 8; // padded smem row (halves), 144 bytes: ldmatrix rows in distinct banks
constexpr int kStageElems = (BM + BN) * kLd;

using tc::cp_async16;
using tc::cp_commit;
using tc::cp_wait;

// The rows this thread copies in every K step: chunk c = threadIdx.x + 256 i of a stage's 2048
// (256 rows of x then w, 8 chunks of 8 halves each) is row c / 8, part c % 8.
template <typename T> struct StageLoader {
    const T *src[8];
    bool ok[8];
    int part;
    __device__ StageLoader(const T *x, const T *w, int64_t m, int64_t n, int64_t k, int64_t xs, int64_t row0,
                           int64_t col0)
    {
        part = (threadIdx.x & 7) * 8;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int r = (threadIdx.x >> 3) + 32 * i;
            if (r < BM) {
                ok[i] = row0 + r < m;
                src[i] = ok[i] ? x + (row0 + r) * xs + part : x;
            } else {
                ok[i] = col0 + (r - BM) < n;
                src[i] = ok[i] ? w + (col0 + r - BM) * k + part : w;
            }
        }
    }
    // Queue K step kt into stage buffer s; columns past k (a multiple of 8) are zero-filled.
    __device__ __forceinline__ void load(T *s, int64_t kt, int64_t k) const
    {
        int64_t kk = kt * BK;
        bool in_k = kk + part < k;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int r = (threadIdx.x >> 3) + 32 * i;
            bool ok_i = ok[i] && in_k;
            cp_async16(s + r * kLd + part, ok_i ? src[i] + kk : src[i], ok_i);
        }
    }
};

template <typename T>
__device__ void tensor_core(T *out, const T *x, const T *w, int64_t m, int64_t n, int64_t k, int64_t xs,
                            int64_t os, int stages)
{
    extern __shared__ __align__(128) unsigned char smem_raw[];
    T *smem = reinterpret_cast<T *>(smem_raw);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int wm = warp >> 2, wn = warp & 3; // 2 x 4 warps, each 64 rows x 32 columns
    int64_t row0 = (int64_t)blockIdx.y * BM, col0 = (int64_t)blockIdx.x * BN;
    int64_t ktiles = (k + BK - 1) / BK;
    StageLoader<T> loader(x, w, m, n, k, xs, row0, col0);

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

    for (int s = 0; s < stages - 1; s++) {
        if (s < ktiles)
            loader.load(smem + s * kStageElems, s, k);
        cp_commit();
    }
    // ldmatrix row addresses: A (16 x 16): lanes 0-15 rows 0-15 at k 0, lanes 16-31 at k 8;
    // B (two n-tiles x 16 k): lanes 0-7 n 0-7 k 0, 8-15 n 0-7 k 8, 16-23 n 8-15 k 0, 24-31 k 8.
    int a_off = (wm * 64 + (lane & 15)) * kLd + 8 * (lane >> 4);
    int b_off = BM * kLd + (wn * 32 + (lane & 7) + 8 * (lane >> 4)) * kLd + 8 * ((lane >> 3) & 1);
    // Stage indices advance by one with wrap-around (a 64-bit modulo per K step costs about a
    // hundred instructions).
    int rd = 0, wr = stages - 1;
    for (int64_t kt = 0; kt < ktiles; kt++) {
        tc::cp_wait_upto(stages - 2);
        __syncthreads();
        int64_t next = kt + stages - 1;
        if (next < ktiles)
            loader.load(smem + wr * kStageElems, next, k);
        cp_commit();
        const T *st = smem + rd * kStageElems;
        rd = rd + 1 == stages ? 0 : rd + 1;
        wr = wr + 1 == stages ? 0 : wr + 1;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            uint32_t a[4][4], b[2][4];
#pragma unroll
            for (int i = 0; i < 4; i++)
                tc::ldmatrix_x4(a[i], st + a_off + i * 16 * kLd + kk);
#pragma unroll
            for (int j = 0; j < 2; j++)
                tc::ldmatrix_x4(b[j], st + b_off + j * 16 * kLd + kk);
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    tc::mma16816<T>(acc[i][j], a[i][0], a[i][1], a[i][2], a[i][3], b[j >> 1][2 * (j & 1)],
                                    b[j >> 1][2 * (j & 1) + 1]);
        }
    }
    cp_wait<0>();
    // acc[i][j]: rows wm 64 + 16 i + lane / 4 (+ 8 for elements 2, 3), columns wn 32 + 8 j +
    // 2 (lane % 4), +1.
    bool pairs = (os & 1) == 0 && (((uintptr_t)out) & 3) == 0;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int64_t r = row0 + wm * 64 + 16 * i + (lane >> 2) + 8 * h;
            if (r >= m)
                continue;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int64_t c = col0 + wn * 32 + 8 * j + 2 * (lane & 3);
                T *o = out + r * os + c;
                if (pairs && c + 1 < n) {
                    *reinterpret_cast<uint32_t *>(o) = tc::pack2<T>(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
                } else {
                    if (c < n)
                        o[0] = tc::from_f32<T>(acc[i][j][2 * h]);
                    if (c + 1 < n)
                        o[1] = tc::from_f32<T>(acc[i][j][2 * h + 1]);
                }
            }
        }
}

// The f32 fallback: 64x64 tiles, 16 K per step, each thread a 4x4 block of outputs.
constexpr int SM = 64, SN = 64, SK = 16;

template <typename T>
__device__ void simt(T *out, const T *x, const T *w, int64_t m, int64_t n, int64_t k, int64_t xs, int64_t os)
{
    __shared__ float as[SK][SM + 4], bs[SK][SN + 4];
    int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    int64_t row0 = (int64_t)blockIdx.y * SM, col0 = (int64_t)blockIdx.x * SN;
    float acc[4][4] = {};
    for (int64_t k0 = 0; k0 < k; k0 += SK) {
        for (int e = threadIdx.x; e < SM * SK; e += 256) {
            int r = e / SK, c = e % SK;
            as[c][r] = row0 + r < m && k0 + c < k ? tc::to_f32(x[(row0 + r) * xs + k0 + c]) : 0.0f;
            bs[c][r] = col0 + r < n && k0 + c < k ? tc::to_f32(w[(col0 + r) * k + k0 + c]) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < SK; kk++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                a[i] = as[kk][ty + 16 * i];
                b[i] = bs[kk][tx + 16 * i];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int64_t r = row0 + ty + 16 * i, c = col0 + tx + 16 * j;
            if (r < m && c < n)
                out[r * os + c] = tc::from_f32<T>(acc[i][j]);
        }
}

// Hopper products (sm_90a builds only): wgmma.mma_async, operands from shared memory. A block
// of two warpgroups computes a 128 x BN tile (BN 128 or 256); warpgroup g owns rows 64 g to
// 64 g + 63 and issues one m64n128k16 per 128 columns and 16 K. Tiles of 64 K (128 bytes a
// row) lie in the layout of wgmma's 128-byte swizzle: 16-byte chunk c of row r at chunk
// c ^ (r % 8), rows 128 bytes apart, in 1024-byte-aligned atoms of 8 rows. cp.async fills a
// ring of 4 stages two K steps ahead: the stage a load refills held the K step two back, whose
// products each warpgroup waited for (wgmma.wait_group 1) before the barrier that precedes the
// load.
constexpr int kWgStages = 4, kWgBM = 128;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TC_WG_OUT4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define TC_WG_OUT16(i) TC_WG_OUT4(i), TC_WG_OUT4(i + 4), TC_WG_OUT4(i + 8), TC_WG_OUT4(i + 12)
#define TC_WG_MMA(TY)                                                                             \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                     \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {"                    \
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "         \
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, " \
                 "%64, %65, p, 1, 1, 0, 0;\n}\n"                                                  \
                 : TC_WG_OUT16(0), TC_WG_OUT16(16), TC_WG_OUT16(32), TC_WG_OUT16(48)              \
                 : "l"(a), "l"(b), "r"(1))
// d[64] += a (64 x 16, K-major) b (16 x 128, K-major), both given by shared-memory descriptors.
// Lane l of the warpgroup's warp v holds rows 16 v + l / 4 (elements 4 j, 4 j + 1) and + 8
// (4 j + 2, 4 j + 3), columns 8 j + 2 (l % 4) and + 1.
__device__ __forceinline__ void wgmma(float (&d)[64], uint64_t a, uint64_t b, const __half *)
{
    TC_WG_MMA("f16");
}
__device__ __forceinline__ void wgmma(float (&d)[64], uint64_t a, uint64_t b, const __nv_bfloat16 *)
{
    TC_WG_MMA("bf16");
}
#undef TC_WG_MMA
#undef TC_WG_OUT16
#undef TC_WG_OUT4

// Descriptor of a K-major tile in the 128-byte swizzle at p (tc::wg_desc128).
__device__ __forceinline__ uint64_t wg_desc(const void *p)
{
    return tc::wg_desc128((uint32_t)__cvta_generic_to_shared(p));
}

template <typename T, int BN>
__device__ void hopper(T *out, const T *x, const T *w, int64_t m, int64_t n, int64_t k, int64_t xs, int64_t os)
{
    constexpr int NB = BN / 128, ROWS = kWgBM + BN, STAGE = ROWS * 128, PER = ROWS / 32;
    extern __shared__ unsigned char smem_raw[];
    unsigned char *smem = reinterpret_cast<unsigned char *>(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = warp >> 2;
    // Tiles go in groups of 8 row blocks (as Triton's grouped order), so that the blocks resident
    // at once share rows of x and of w in L2.
    int64_t grid_m = (m + kWgBM - 1) / kWgBM, grid_n = (n + BN - 1) / BN;
    int64_t pid = blockIdx.x, width = 8 * grid_n, first = pid / width * 8;
    int64_t gsize = grid_m - first < 8 ? grid_m - first : 8;
    int64_t row0 = (first + (pid % width) % gsize) * kWgBM, col0 = (pid % width) / gsize * BN;

    // Thread t copies chunk t % 8 of rows t / 8 + 32 i of a stage (x's rows, then w's); rows
    // past m or n, and columns past k (a multiple of 8), are zero-filled.
    int chunk = tid & 7;
    uint32_t dst = (uint32_t)((tid >> 3) * 128 + ((chunk ^ ((tid >> 3) & 7)) << 4));
    const T *src[PER];
    bool ok[PER];
#pragma unroll
    for (int i = 0; i < PER; i++) {
        int r = (tid >> 3) + 32 * i;
        if (r < kWgBM) {
            ok[i] = row0 + r < m;
            src[i] = x + (ok[i] ? (row0 + r) * xs : 0) + chunk * 8;
        } else {
            ok[i] = col0 + r - kWgBM < n;
            src[i] = w + (ok[i] ? (col0 + r - kWgBM) * k : 0) + chunk * 8;
        }
    }
    int64_t ktiles = (k + 63) / 64;
    auto load = [&](int64_t kt) {
        unsigned char *s = smem + (int)(kt & (kWgStages - 1)) * STAGE + dst;
        bool in_k = kt * 64 + chunk * 8 < k;
#pragma unroll
        for (int i = 0; i < PER; i++) {
            bool ok_i = ok[i] && in_k;
            cp_async16(s + i * 32 * 128, ok_i ? src[i] + kt * 64 : src[i], ok_i);
        }
    };

    float d[NB][64];
#pragma unroll
    for (int nb = 0; nb < NB; nb++)
#pragma unroll
        for (int i = 0; i < 64; i++)
            d[nb][i] = 0.0f;
    for (int s = 0; s < kWgStages - 2; s++) {
        if (s < ktiles)
            load(s);
        cp_commit();
    }
    for (int64_t kt = 0; kt < ktiles; kt++) {
        cp_wait<kWgStages - 3>();
        // This thread's copies of step kt are done; make them visible to wgmma (the async proxy)
        // and wait for everyone's.
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        if (kt + kWgStages - 2 < ktiles)
            load(kt + kWgStages - 2);
        cp_commit();
        const unsigned char *s = smem + (int)(kt & (kWgStages - 1)) * STAGE;
        uint64_t da = wg_desc(s + g * 64 * 128), db = wg_desc(s + kWgBM * 128);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int j = 0; j < 4; j++) // 16 K (32 bytes) each: the start address moves within the atom
#pragma unroll
            for (int nb = 0; nb < NB; nb++)
                wgmma(d[nb], da + 2 * j, db + nb * (128 * 128 >> 4) + 2 * j, static_cast<const T *>(nullptr));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    }
    tc::wg_wait_all<NB * 64>(&d[0][0]);

    int rr = g * 64 + (warp & 3) * 16 + (lane >> 2);
    bool pairs = (os & 1) == 0 && (((uintptr_t)out) & 3) == 0;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int64_t r = row0 + rr + 8 * h;
        if (r >= m)
            continue;
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int j = 0; j < 16; j++) {
                int64_t c = col0 + nb * 128 + 8 * j + 2 * (lane & 3);
                float v0 = d[nb][4 * j + 2 * h], v1 = d[nb][4 * j + 2 * h + 1];
                T *o = out + r * os + c;
                if (pairs && c + 1 < n) {
                    *reinterpret_cast<uint32_t *>(o) = tc::pack2<T>(v0, v1);
                } else {
                    if (c < n)
                        o[0] = tc::from_f32<T>(v0);
                    if (c + 1 < n)
                        o[1] = tc::from_f32<T>(v1);
                }
            }
    }
}
#endif

} // namespace gemm_cu

/** Tensor-core product out[m, n] = x[m, k] w[n, k]^T: grid (ceil(n/128), ceil(m/128)), 256
 *  threads, stages * 36864 bytes of dynamic shared memory (stages of 256 rows x 72 halves;
 *  2 or 3 stages); k and x_stride multiples of 8, x and w 16-byte aligned. */
extern "C" __global__ void __launch_bounds__(256) tc_k_gemm_tc_f16(__half *out, const __half *x,
                                                                   const __half *w, int64_t m,
                                                                   int64_t n, int64_t k,
                                                                   int64_t x_stride, int64_t out_stride,
                                                                   int32_t stages)
{
    tc::await_inputs();
    gemm_cu::tensor_core(out, x, w, m, n, k, x_stride, out_stride, stages);
}
extern "C" __global__ void __launch_bounds__(256)
    tc_k_gemm_tc_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *x, const __nv_bfloat16 *w, int64_t m,
                      int64_t n, int64_t k, int64_t x_stride, int64_t out_stride, int32_t stages)
{
    tc::await_inputs();
    gemm_cu::tensor_core(out, x, w, m, n, k, x_stride, out_stride, stages);
}
/** Hopper tensor-core product out[m, n] = x[m, k] w[n, k]^T (wgmma; sm_90a only, elsewhere it
 *  traps): grid (ceil(m/128) * ceil(n/BN)), 256 threads, 4 * (128 + BN) * 128 + 1024 bytes of
 *  dynamic shared memory, BN 256 where wide is nonzero, else 128; k and x_stride multiples of
 *  8, x and w 16-byte aligned. */
extern "C" __global__ void __launch_bounds__(256, 1)
    tc_k_gemm_wg_f16(__half *out, const __half *x, const __half *w, int64_t m, int64_t n, int64_t k,
                     int64_t x_stride, int64_t out_stride, int32_t wide)
{
    tc::await_inputs();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if (wide)
        gemm_cu::hopper<__half, 256>(out, x, w, m, n, k, x_stride, out_stride);
    else
        gemm_cu::hopper<__half, 128>(out, x, w, m, n, k, x_stride, out_stride);
#else
    __trap();
#endif
}
extern "C" __global__ void __launch_bounds__(256, 1)
    tc_k_gemm_wg_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *x, const __nv_bfloat16 *w, int64_t m,
                      int64_t n, int64_t k, int64_t x_stride, int64_t out_stride, int32_t wide)
{
    tc::await_inputs();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if (wide)
        gemm_cu::hopper<__nv_bfloat16, 256>(out, x, w, m, n, k, x_stride, out_stride);
    else
        gemm_cu::hopper<__nv_bfloat16, 128>(out, x, w, m, n, k, x_stride, out_stride);
#else
    __trap();
#endif
}
/** f32-arithmetic product for any shape and alignment: grid (ceil(n/64), ceil(m/64)), 256
 *  threads. */
extern "C" __global__ void tc_k_gemm_f32(float *out, const float *x, const float *w, int64_t m, int64_t n,
                                         int64_t k, int64_t x_stride, int64_t out_stride)
{
    tc::await_inputs();
    gemm_cu::simt(out, x, w, m, n, k, x_stride, out_stride);
}
extern "C" __global__ void tc_k_gemm_f16(__half *out, const __half *x, const __half *w, int64_t m,
                                         int64_t n, int64_t k, int64_t x_stride, int64_t out_stride)
{
    tc::await_inputs();
    gemm_cu::simt(out, x, w, m, n, k, x_stride, out_stride);
}
extern "C" __global__ void tc_k_gemm_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *x,
                                          const __nv_bfloat16 *w, int64_t m, int64_t n, int64_t k,
                                          int64_t x_stride, int64_t out_stride)
{
    tc::await_inputs();
    gemm_cu::simt(out, x, w, m, n, k, x_stride, out_stride);
}
