// Shared by every kernels/<file>.cu: the CUDA headers kernels may use and small device helpers.
// Only `extern "C" __global__ void tc_k_<op>_<dtype>(...)` functions cross into C.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace tc {

// Element conversions for the three activation types; arithmetic is always f32.
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}
// OCP FP8 E4M3 ("e4m3fn"), the KV caches' 8-bit type: bias 7, 3 mantissa bits, 0x7f and 0xff
// NaN, largest finite 448. The conversions here are bit for bit those of the CPU ops
// (src/ops/dtype.c) on every GPU: rounding to nearest even, finite values saturating at 448.
struct f8e4m3 {
    uint8_t bits;
};
// Its value as an f16's bits before scaling by 2^8: the sign stays at bit 15, exponent and
// mantissa move to bits 13..7 (an E4M3 subnormal becomes an f16 subnormal, exactly).
__device__ __forceinline__ float to_f32(f8e4m3 v)
{
    if ((v.bits & 0x7f) == 0x7f)
        return __int_as_float(0x7fc00000);
    unsigned short h = (unsigned short)(((v.bits & 0x80) << 8) | ((v.bits & 0x7f) << 7));
    return __half2float(__ushort_as_half(h)) * 256.0f;
}
template <> __device__ __forceinline__ f8e4m3 from_f32<f8e4m3>(float f)
{
    uint32_t u = __float_as_uint(f), a = u & 0x7fffffffu;
    uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    if (a > 0x7f800000u)
        return { (uint8_t)(sign | 0x7f) };
    if (a >= 0x43e00000u) // 448 and beyond: saturate
        return { (uint8_t)(sign | 0x7e) };
    if (a >= 0x3c800000u) { // normal: round the 20 dropped bits to nearest even
        uint32_t r = a + 0x7ffffu + ((a >> 20) & 1);
        return { (uint8_t)(sign | ((r >> 20) - (120u << 3))) };
    }
    return { (uint8_t)(sign | (uint8_t)__float2int_rn(__uint_as_float(a) * 512.0f)) }; // subnormal
}
// N consecutive elements of T moved as one 16-byte (or smaller) access.
template <typename T, int N> struct alignas(sizeof(T) * N) Vec {
    T v[N];
};
// N consecutive elements as floats, read in 16-byte pieces when N * sizeof(T) is a multiple of
// 16 (p then 16-byte aligned), else as one N-element access (p aligned to its size).
template <typename T, int N>
__device__ __forceinline__ void load_f32(const T *p, float (&out)[N])
{
    constexpr int C = (N * sizeof(T)) % 16 == 0 ? 16 / (int)sizeof(T) : N;
#pragma unroll
    for (int c = 0; c < N / C; c++) {
        Vec<T, C> x = reinterpret_cast<const Vec<T, C> *>(p)[c];
#pragma unroll
        for (int i = 0; i < C; i++)
            out[c * C + i] = to_f32(x.v[i]);
    }
}
template <typename T, int N>
__device__ __forceinline__ void store_f32(T *p, const float (&in)[N])
{
    constexpr int C = (N * sizeof(T)) % 16 == 0 ? 16 / (int)sizeof(T) : N;
#pragma unroll
    for (int c = 0; c < N / C; c++) {
        Vec<T, C> x;
#pragma unroll
        for (int i = 0; i < C; i++)
            x.v[i] = from_f32<T>(in[c * C + i]);
        reinterpret_cast<Vec<T, C> *>(p)[c] = x;
    }
}
// Asynchronous 16-byte copies global -> shared (sm_80 cp.async): queue, close a group, and
// wait until at most N groups are still in flight. A copy asks L2 for its whole 128-byte line
// (.L2::128B), as the quantised products' do: decode attention over 16 and 64 sequences of 576
// tokens read at 3.73 and 3.88 TB/s against 3.68 and 3.83 without (H200, `bench_ops decode`).
// (cp_async16_at: to a shared-memory address, as cp.async takes it.)
__device__ __forceinline__ void cp_async16_at(uint32_t to, const void *gmem, bool pred)
{
    int bytes = pred ? 16 : 0; // 0: fill the 16 bytes with zeros, read nothing
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(to), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool pred)
{
    cp_async16_at((uint32_t)__cvta_generic_to_shared(smem), gmem, pred);
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
// cp_wait for a run-time n (0 to 2; larger waits as for 2, which is safe: it waits for more).
__device__ __forceinline__ void cp_wait_upto(int n)
{
    if (n >= 2)
        cp_wait<2>();
    else if (n == 1)
        cp_wait<1>();
    else
        cp_wait<0>();
}
// Tensor-core fragments (sm_80 mma.sync m16n8k16, f32 accumulate). In a warp, lane l is in
// group l / 4 at position l % 4. A (16 x 16, row-major) is four registers of two 16-bit
// elements: (row g, cols 2p, 2p+1), (row g + 8, same), (row g, cols 2p + 8, +9), (row g + 8,
// same); B (16 x 8, k x n) is two: (rows k 2p, 2p+1, col g), (rows 2p + 8, +9, col g); C is
// (row g, cols 2p, 2p+1) then (row g + 8, same).
// Four 8 x 8 matrices of 16-bit elements from shared memory: lanes 8i..8i+7 give the row
// addresses of matrix i (16 bytes each), and register i receives lane l's (row l / 4, cols
// 2 (l % 4), +1) of matrix i, or with Trans its (rows 2 (l % 4), +1, col l / 4).
template <bool Trans = false> __device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void *row)
{
    unsigned a = (unsigned)__cvta_generic_to_shared(row);
    if constexpr (Trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a)
                     : "memory");
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a)
                     : "memory");
}
// Two 8 x 8 matrices (lanes 0..15 give the row addresses; the others' are not read): registers
// 0 and 1 as ldmatrix_x4's first two.
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void *row)
{
    unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a) : "memory");
}
template <typename T> constexpr bool is_half = false;
template <> constexpr bool is_half<__half> = true;
// c += a b for 16-bit T (__half or __nv_bfloat16).
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1)
{
    if constexpr (is_half<T>)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// Two floats as one register of 16-bit T: lo in the low half.
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
    T v[2] = { from_f32<T>(lo), from_f32<T>(hi) };
    uint32_t r;
    memcpy(&r, v, 4);
    return r;
}

// Elements of T per 16-byte vector.
template <typename T> __host__ __device__ constexpr int vec16() { return 16 / (int)sizeof(T); }

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// Sum (or max) over the block; every thread gets the result. `scratch` holds 32 floats and
// may be reused after the call returns.
__device__ __forceinline__ float block_sum(float v, float *scratch)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : 0.0f;
    return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float *scratch)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : -INFINITY;
    return warp_max(v);
}

// Rotary embedding: the frequency of pair i of a head_dim-wide head, theta^(-2i/head_dim),
// with Llama 3's scaling when scaling is 1 (kernels/rope.cu and the matrix-vector kernel's
// fused rotation share it, so that both rotate alike).
__device__ inline double rope_frequency(int i, int head_dim, double theta, int scaling, double factor,
                            double low_ff, double high_ff, double orig_max)
{
    double inv = exp(-(2.0 * i / head_dim) * log(theta));
    if (scaling != 1)
        return inv;
    const double pi = 3.14159265358979323846;
    double wavelen = 2.0 * pi / inv;
    double low_wavelen = orig_max / low_ff, high_wavelen = orig_max / high_ff;
    if (wavelen > low_wavelen)
        return inv / factor;
    if (wavelen < high_wavelen)
        return inv;
    double smooth = (orig_max / wavelen - low_ff) / (high_ff - low_ff);
    return (1.0 - smooth) * inv / factor + smooth * inv;
}

// Rotate the pair (a, b) by the angle with cosine c and sine s: the one rotation of kernels/
// rope.cu and the matrix-vector kernel's fused rope, so that both round alike.
__device__ __forceinline__ void rope_rotate(float &a, float &b, float c, float s)
{
    float x0 = a, x1 = b;
    a = x0 * c - x1 * s;
    b = x1 * c + x0 * s;
}

// The tensor-core matrix-vector kernels' tile of out (16 weight rows x 8 rows of x): each of a
// block's W warps leaves its m16n8 sums (acc, in mma16816's C layout) in red[warp], the up
// half's in red2 under SwiGLU; put_sums stores them, store_tile adds the warps' in warp order
// (a fixed order: the same bits every run) and writes rows [16 tile, 16 tile + 16) of the
// columns below m, scaled (an RMSNorm's 1 / rms), applying SwiGLU (silu(gate) * up) and the
// accumulation into out when asked; out is T, or f32 under out_f32.
template <int W> __device__ __forceinline__ void put_sums(float (&red)[W][16][8], int warp, const float (&acc)[4])
{
    const int g = (threadIdx.x & 31) >> 2, p = threadIdx.x & 3;
    red[warp][g][2 * p] = acc[0];
    red[warp][g][2 * p + 1] = acc[1];
    red[warp][g + 8][2 * p] = acc[2];
    red[warp][g + 8][2 * p + 1] = acc[3];
}
// (scale: a float for every column, or a callable giving column col's.)
__device__ __forceinline__ float col_scale(float s, int) { return s; }
template <typename F> __device__ __forceinline__ float col_scale(const F &f, int col) { return f(col); }
template <typename T, int W, typename S = float>
__device__ __forceinline__ void store_tile(void *out, const float (&red)[W][16][8], const float (&red2)[W][16][8],
                                           int64_t tile, int m, int64_t n, int64_t os, bool swiglu, bool accumulate,
                                           S scale_of = 1.0f, bool out_f32 = false)
{
    if (threadIdx.x < 128) {
        const int row = threadIdx.x >> 3, col = threadIdx.x & 7;
        const int64_t r = tile * 16 + row;
        if (col < m && r < n) {
            float v = 0.0f, up = 0.0f;
            const float scale = col_scale(scale_of, col);
#pragma unroll
            for (int i = 0; i < W; i++) {
                v += red[i][row][col];
                if (swiglu)
                    up += red2[i][row][col];
            }
            v *= scale;
            if (swiglu)
                v = v / (1.0f + expf(-v)) * (up * scale);
            if (out_f32) {
                float *o = static_cast<float *>(out) + col * os + r;
                *o = accumulate ? *o + v : v;
                return;
            }
            T *o = static_cast<T *>(out) + col * os + r;
            if (accumulate)
                v += to_f32(*o);
            *o = from_f32<T>(v);
        }
    }
}

// Programmatic dependent launch (compute capability 9.0+; a no-op before that, and when the
// launch did not ask for it: tc_stream_set_overlap). Every kernel calls await_inputs() before it
// touches memory that an earlier kernel on its stream writes or reads; only reads of data that no
// kernel writes (weights) may come before it. The call then lets the next kernel's blocks be
// scheduled; they in turn wait here until this grid has finished and its writes are visible.
__device__ __forceinline__ void await_inputs()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
// The two halves of await_inputs(), in the other order: let the next kernel's blocks be
// scheduled, and wait for the grids before (and their writes) to finish.
__device__ __forceinline__ void launch_next()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void await_grids()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
// Hopper's wgmma (kernels/gemm.cu's product, kernels/quant.cu's batched products). The
// descriptor of a K-major tile in the 128-byte swizzle at shared address a: 8-row atoms 1024
// bytes apart (the leading offset is unused in this layout; 16 bytes by convention).
__device__ __forceinline__ uint64_t wg_desc128(uint32_t a)
{
    return ((uint64_t)(a & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
// Wait for every wgmma of the warpgroup; the N accumulators at d are final only then.
template <int N> __device__ __forceinline__ void wg_wait_all(float *d)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(d[i])::"memory");
#endif
}
// await_inputs() that first lets the next kernel's blocks be scheduled, for a small kernel
// between two large ones (the act-order gather between products; the rotary kernel between
// the q/k/v product and decode attention calls the halves itself, working out its angles
// between them): the next one then asks for its weights (or older cache rows) while the one
// before this kernel ends, as it would with no kernel between them. Safe where await_inputs()
// is: the next kernel still waits for this grid to finish, which it does only after this
// wait, and every block of the grids before has started by then.
__device__ __forceinline__ void launch_next_then_await()
{
    launch_next();
    await_grids();
}
// atomicAdd with acquire and release semantics at GPU scope: the caller's earlier writes (and
// those a barrier ordered before it) are visible to whoever reads the new value, and the writes
// before the values it reads are visible to the caller.
__device__ __forceinline__ int atomic_add_acq_rel(int *p, int v)
{
    int old;
    asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;\n" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}
// Thread-block clusters (compute capability 9.0+; launched with a cluster extent). The number
// of blocks in this block's cluster (1 before 9.0).
__device__ __forceinline__ uint32_t cluster_blocks()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint32_t n;
    asm("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(n));
    return n;
#else
    return 1;
#endif
}
// Every thread of every block of the cluster waits here for all the others: the shared-memory
// writes before it are visible to the cluster's blocks after it (release, acquire). Each
// thread must call it (the .aligned form), as __syncthreads.
__device__ __forceinline__ void cluster_sync()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}
// As cluster_sync, without ordering any memory access: for a block that must not leave while
// the cluster's other blocks may still read its shared memory, whose own reads of theirs have
// completed (their values used). No fence, so the block's global stores before it are not
// waited for here (a release at cluster scope is a fence of the whole GPU's scope on Hopper).
__device__ __forceinline__ void cluster_sync_relaxed()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.aligned;\n" ::: "memory");
#endif
}
// The four floats at shared-memory address `at` (16-byte aligned) of the cluster's block `rank`.
__device__ __forceinline__ float4 ld_cluster_f4(uint32_t at, uint32_t rank)
{
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(at), "r"(rank));
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(remote)
                 : "memory");
#endif
    return v;
}
// Ask for the line holding p in L1 (no register written, nothing waited for).
__device__ __forceinline__ void prefetch_l1(const void *p)
{
    asm volatile("prefetch.global.L1 [%0];\n" ::"l"(p));
}
// Ask for the 128-byte line holding p in L2 (no register written, nothing waited for).
__device__ __forceinline__ void prefetch_l2(const void *p)
{
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

// Whether every pointer is aligned to `bytes`.
__device__ __forceinline__ bool aligned(const void *a, const void *b, const void *c, int bytes)
{
    return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & (uintptr_t)(bytes - 1)) == 0;
}

// Dtype codes passed to kernels that take a run-time weight type (tc_dtype's values).
// (The block-quantised types' codes are in quant.cu.)
enum : int { DT_F32 = 0, DT_F16 = 1, DT_BF16 = 2, DT_I8 = 3, DT_I32 = 4, DT_F8E4M3 = 7 };
// The dtype code of an activation type.
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr int value = DT_F32; };
template <> struct dtype_of<__half> { static constexpr int value = DT_F16; };
template <> struct dtype_of<__nv_bfloat16> { static constexpr int value = DT_BF16; };
// Element i of a row of run-time float dtype dt as a float (NaN for any other dtype).
__device__ __forceinline__ float load_any(int dt, const void *row, int64_t i)
{
    switch (dt) {
    case DT_F32:
        return ((const float *)row)[i];
    case DT_F16:
        return __half2float(((const __half *)row)[i]);
    case DT_BF16:
        return __bfloat162float(((const __nv_bfloat16 *)row)[i]);
    case DT_F8E4M3:
        return to_f32(((const f8e4m3 *)row)[i]);
    default:
        return __int_as_float(0x7fc00000);
    }
}
// Store v as element i of a row of run-time float dtype dt (f32, f16, bf16 or f8e4m3;
// rounding to nearest even).
__device__ __forceinline__ void store_any(int dt, void *row, int64_t i, float v)
{
    if (dt == DT_F32)
        static_cast<float *>(row)[i] = v;
    else if (dt == DT_F8E4M3)
        static_cast<f8e4m3 *>(row)[i] = from_f32<f8e4m3>(v);
    else if (dt == DT_F16)
        static_cast<__half *>(row)[i] = __float2half_rn(v);
    else
        static_cast<__nv_bfloat16 *>(row)[i] = __float2bfloat16_rn(v);
}

// Four E4M3 values (the bytes of x, lowest first) as two pairs of T (f16 or bf16) for the
// tensor cores: lo holds elements 0 and 1, hi 2 and 3. Exact, NaN kept.
template <typename T> __device__ __forceinline__ void f8x4_to(uint32_t x, uint32_t &lo, uint32_t &hi)
{
    // Each byte at the top of a 16-bit half, then the sign kept and the rest shifted into the
    // exponent and mantissa fields of T, and scaled by the bias difference (2^8 or 2^120).
    uint32_t a = __byte_perm(x, 0, 0x1404), b = __byte_perm(x, 0, 0x3424);
    uint32_t nan = __vcmpeq4(x & 0x7f7f7f7fu, 0x7f7f7f7fu);
    if constexpr (dtype_of<T>::value == DT_F16) {
        a = (a & 0x80008000u) | ((a >> 1) & 0x3f803f80u);
        b = (b & 0x80008000u) | ((b >> 1) & 0x3f803f80u);
        __half2 s = __half2half2(__ushort_as_half(0x5c00)); // 256
        __half2 ra = __hmul2(*reinterpret_cast<__half2 *>(&a), s), rb = __hmul2(*reinterpret_cast<__half2 *>(&b), s);
        lo = *reinterpret_cast<uint32_t *>(&ra);
        hi = *reinterpret_cast<uint32_t *>(&rb);
    } else {
        a = (a & 0x80008000u) | ((a >> 4) & 0x07f007f0u);
        b = (b & 0x80008000u) | ((b >> 4) & 0x07f007f0u);
        __nv_bfloat162 s = __bfloat162bfloat162(__ushort_as_bfloat16(0x7b80)); // 2^120
        __nv_bfloat162 ra = __hmul2(*reinterpret_cast<__nv_bfloat162 *>(&a), s),
                       rb = __hmul2(*reinterpret_cast<__nv_bfloat162 *>(&b), s);
        lo = *reinterpret_cast<uint32_t *>(&ra);
        hi = *reinterpret_cast<uint32_t *>(&rb);
    }
    lo |= __byte_perm(nan, 0, 0x1100);
    hi |= __byte_perm(nan, 0, 0x3322);
}

} // namespace tc
