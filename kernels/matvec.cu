// Decode matrix products: out[m, n] = x[m, k] w[n, k]^T for m <= 8 rows and float weights
// (quantised ones: quant.cu), where every weight byte is read once and speed is set by memory
// bandwidth. One warp per weight row: lanes read
// the row in 16-byte vectors (streamed past L2 so that x stays cached), eight vectors in flight
// each, and reduce with shuffles. 2 to 8 rows with 16-bit weights of x's dtype go through the
// tensor cores instead (mma_rows), which leaves the loads as the only work per weight.
#include "common.cuh"

namespace matvec_cu {

constexpr int kUnroll = 8;

// N weights from p, as stored: a 16-byte streaming load when N * sizeof(TW) == 16. That one is
// volatile asm so that the compiler keeps a loop's loads in program order, all issued before
// their first use: left to itself, ptxas sinks each load to just before its use, which keeps
// two in flight instead of sixteen and cost a fifth of the bandwidth on small matrices.
template <typename TW, int N> __device__ __forceinline__ tc::Vec<TW, N> load_w(const TW *p)
{
    tc::Vec<TW, N> v;
    if constexpr (N * sizeof(TW) == 16) {
        uint4 raw;
        asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(raw.x), "=r"(raw.y), "=r"(raw.z), "=r"(raw.w)
                     : "l"(p));
        v = *reinterpret_cast<const tc::Vec<TW, N> *>(&raw);
    } else {
#pragma unroll
        for (int i = 0; i < N; i++)
            v.v[i] = p[i];
    }
    return v;
}

template <typename TX, int N> __device__ __forceinline__ void load_x(const TX *p, float (&out)[N])
{
    if constexpr (N > 1) {
        tc::load_f32<TX, N>(p, out);
    } else {
#pragma unroll
        for (int i = 0; i < N; i++)
            out[i] = tc::to_f32(p[i]);
    }
}

// What a fused linear layer does around the product (tc_linear_opts). With kNorm (one row of
// x, weights of its dtype) x is RMS-normalised first, the norm's weight folded into w: the
// lanes sum its squares beside the product, from the values they load for it anyway, and the
// sums are scaled at the end.
enum : int { kSwiglu = 1, kAccumulate = 2, kNorm = 4, kRope = 8, kOutF32 = 16 };

// Reduce the lanes' partial sums and write row `row` of out (lane 0): scaled by the row's RMS
// norm (NORM: ss holds the sums of squares), SwiGLU of the gate and up sums, and added to
// out's old value, as the flags ask.
template <typename TX, int M, bool NORM>
__device__ __forceinline__ void finish(float (&acc)[M], float (&up)[M], float (&ss)[M], TX *out, int m,
                                       int64_t row, int64_t k, int64_t os, int flags, float eps)
{
#pragma unroll
    for (int r = 0; r < M; r++) {
        acc[r] = tc::warp_sum(acc[r]);
        if (flags & kSwiglu)
            up[r] = tc::warp_sum(up[r]);
        if constexpr (NORM) {
            float scale = rsqrtf(tc::warp_sum(ss[r]) / (float)k + eps);
            acc[r] *= scale;
            up[r] *= scale;
        }
    }
    if ((threadIdx.x & 31) == 0)
#pragma unroll
        for (int r = 0; r < M; r++) {
            if (r >= m)
                break;
            float v = acc[r];
            if (flags & kSwiglu)
                v = v / (1.0f + expf(-v)) * up[r];
            if (flags & kAccumulate)
                v += tc::to_f32(out[r * os + row]);
            out[r * os + row] = tc::from_f32<TX>(v);
        }
}

// The lane's partial dot products of one float weight row with the m rows of x, and with SS
// (one row only) the partial sum of squares of x beside them. One row of x uses each weight
// once: the weights stay as stored until used, and twice as many loads are in flight (a
// 4096-wide bf16 row in one go). More rows reuse each weight: converted once. With f32 x (the
// reference activations, not a speed target) one row keeps 4 vectors in flight, not 16, and
// several rows 2, not 8: the same sums in the same order, a quarter of the unrolled code (the
// binary is held under 5 MB).
template <typename TX, typename TW, int M, int N, bool SS>
__device__ __forceinline__ void dot_float_row(float (&acc)[M], float (&ss)[M], const TX *x, const TW *wr, int m,
                                              int64_t k, int64_t xs)
{
    int lane = threadIdx.x & 31;
    constexpr int64_t step = 32 * N;
    constexpr int U = (M == 1 ? 2 * kUnroll : kUnroll) / (sizeof(TX) == 4 ? 4 : 1);
    int64_t kk = lane * N;
    for (; kk + (U - 1) * step < k; kk += U * step) {
        tc::Vec<TW, N> raw[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            raw[u] = load_w<TW, N>(wr + kk + u * step);
        if constexpr (M == 1) {
#pragma unroll
            for (int u = 0; u < U; u++) {
                float xv[N];
                load_x<TX, N>(x + kk + u * step, xv);
#pragma unroll
                for (int j = 0; j < N; j++) {
                    acc[0] = fmaf(tc::to_f32(raw[u].v[j]), xv[j], acc[0]);
                    if constexpr (SS)
                        ss[0] = fmaf(xv[j], xv[j], ss[0]);
                }
            }
        } else {
            float wv[U][N];
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int j = 0; j < N; j++)
                    wv[u][j] = tc::to_f32(raw[u].v[j]);
#pragma unroll
            for (int r = 0; r < M; r++) {
                if (r >= m)
                    break;
#pragma unroll
                for (int u = 0; u < U; u++) {
                    float xv[N];
                    load_x<TX, N>(x + r * xs + kk + u * step, xv);
#pragma unroll
                    for (int j = 0; j < N; j++)
                        acc[r] = fmaf(wv[u][j], xv[j], acc[r]);
                }
            }
        }
    }
    for (; kk < k; kk += step) {
        tc::Vec<TW, N> wv = load_w<TW, N>(wr + kk);
#pragma unroll
        for (int r = 0; r < M; r++) {
            if (r >= m)
                break;
            float xv[N];
            load_x<TX, N>(x + r * xs + kk, xv);
#pragma unroll
            for (int j = 0; j < N; j++) {
                acc[r] = fmaf(tc::to_f32(wv.v[j]), xv[j], acc[r]);
                if constexpr (SS)
                    ss[r] = fmaf(xv[j], xv[j], ss[r]);
            }
        }
    }
}

// One row of x against a gate row and an up row at once (SwiGLU): eight loads of each in flight
// together, where one row after the other would drain the loads between the two.
template <typename TX, typename TW, int N, bool SS>
__device__ __forceinline__ void dot_pair_row1(float &a, float &b, float &ss, const TX *x, const TW *wg,
                                              const TW *wu, int64_t k)
{
    int lane = threadIdx.x & 31;
    constexpr int64_t step = 32 * N;
    constexpr int U = kUnroll / (sizeof(TX) == 4 ? 4 : 1); // (f32 x: as dot_float_row)
    int64_t kk = lane * N;
    for (; kk + (U - 1) * step < k; kk += U * step) {
        tc::Vec<TW, N> rg[U], ru[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            rg[u] = load_w<TW, N>(wg + kk + u * step);
#pragma unroll
        for (int u = 0; u < U; u++)
            ru[u] = load_w<TW, N>(wu + kk + u * step);
#pragma unroll
        for (int u = 0; u < U; u++) {
            float xv[N];
            load_x<TX, N>(x + kk + u * step, xv);
#pragma unroll
            for (int j = 0; j < N; j++) {
                a = fmaf(tc::to_f32(rg[u].v[j]), xv[j], a);
                b = fmaf(tc::to_f32(ru[u].v[j]), xv[j], b);
                if constexpr (SS)
                    ss = fmaf(xv[j], xv[j], ss);
            }
        }
    }
    for (; kk < k; kk += step) {
        tc::Vec<TW, N> g = load_w<TW, N>(wg + kk), u = load_w<TW, N>(wu + kk);
        float xv[N];
        load_x<TX, N>(x + kk, xv);
#pragma unroll
        for (int j = 0; j < N; j++) {
            a = fmaf(tc::to_f32(g.v[j]), xv[j], a);
            b = fmaf(tc::to_f32(u.v[j]), xv[j], b);
            if constexpr (SS)
                ss = fmaf(xv[j], xv[j], ss);
        }
    }
}

// Float weights, N per access (16 bytes of weights, or 1 for unaligned shapes). With SwiGLU
// the warp of output row `row` reads weight rows row (gate) and n + row (up). SS: the norm's
// sums of squares come beside the product (one row: a decode step's norm costs no loads).
template <typename TX, typename TW, int M, int N, bool SS>
__device__ void float_rows(TX *out, const TX *x, const TW *w, int m, int64_t n, int64_t k, int64_t xs,
                           int64_t os, int flags, float eps)
{
    int64_t warps = blockDim.x >> 5;
    for (int64_t row = blockIdx.x * warps + (threadIdx.x >> 5); row < n; row += gridDim.x * warps) {
        float acc[M] = {}, up[M] = {}, ss[M] = {}, unused[M];
        if (M == 1 && (flags & kSwiglu)) {
            dot_pair_row1<TX, TW, N, SS>(acc[0], up[0], ss[0], x, w + row * k, w + (n + row) * k, k);
        } else {
            dot_float_row<TX, TW, M, N, SS>(acc, ss, x, w + row * k, m, k, xs);
            if (flags & kSwiglu)
                dot_float_row<TX, TW, M, N, false>(up, unused, x, w + (n + row) * k, m, k, xs);
        }
        finish<TX, M, SS>(acc, up, ss, out, m, row, k, os, flags, eps);
    }
}

// The rotation fused after a layer's q/k/v product (kRope: one row of x, weights of x's dtype
// in 16-byte rows): out holds n_heads q heads, then n_kv_heads k heads and as many v heads.
struct Rope {
    const int32_t *pos, *slots;
    void *k_cache, *v_cache;
    int n_heads, n_kv_heads, head_dim, interleaved, scaling;
    double theta, factor, low_ff, high_ff, orig_max;
};

// A warp's unit is a pair of rows that rotate together (i and i + head_dim / 2 of a head, or
// 2i and 2i + 1 interleaved): it sums both, rotates q and k heads by pos[0] as tc_rope does,
// and writes the pair to out and, for k and v heads, to cache slot slots[0] as
// tc_attention_store does (a negative slot writes no cache). Lane j works out the angle of
// the warp's j-th pair at the start, in double as tc_rope does, all lanes at once.
template <typename TX>
__device__ void rope_rows(TX *out, const TX *x, const TX *w, int64_t n, int64_t k, int flags, float eps,
                          const Rope &r)
{
    constexpr int N = 16 / (int)sizeof(TX);
    const int lane = threadIdx.x & 31, hd = r.head_dim, half = hd / 2;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
    const int64_t warp = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5), pairs = n / 2;
    const double pos = (double)r.pos[0];
    const int64_t slot = r.slots[0];
    auto angle = [&](int64_t pr, float &c, float &s) {
        double sd, cd;
        sincos(pos * tc::rope_frequency((int)(pr % half), hd, r.theta, r.scaling, r.factor, r.low_ff, r.high_ff,
                                        r.orig_max),
               &sd, &cd);
        c = (float)cd;
        s = (float)sd;
    };
    float lc = 1.0f, ls = 0.0f;
    if (warp + lane * warps < pairs)
        angle(warp + lane * warps, lc, ls);
    int j = 0;
    for (int64_t pr = warp; pr < pairs; pr += warps, j++) {
        int64_t u = pr / half, i = pr % half;
        int64_t ra = u * hd + (r.interleaved ? 2 * i : i), rb = ra + (r.interleaved ? 1 : half);
        float a = 0.0f, b = 0.0f, ss = 0.0f;
        dot_pair_row1<TX, TX, N, true>(a, b, ss, x, w + ra * k, w + rb * k, k);
        a = tc::warp_sum(a);
        b = tc::warp_sum(b);
        if (flags & kNorm) {
            float scale = rsqrtf(tc::warp_sum(ss) / (float)k + eps);
            a *= scale;
            b *= scale;
        }
        float c = __shfl_sync(0xffffffffu, lc, j & 31), s = __shfl_sync(0xffffffffu, ls, j & 31);
        if (j >= 32)
            angle(pr, c, s);
        if (lane == 0) {
            if (u < r.n_heads + r.n_kv_heads)
                tc::rope_rotate(a, b, c, s);
            TX ta = tc::from_f32<TX>(a), tb = tc::from_f32<TX>(b);
            out[ra] = ta;
            out[rb] = tb;
            if (u >= r.n_heads && slot >= 0) {
                bool is_k = u < r.n_heads + r.n_kv_heads;
                int64_t h = u - r.n_heads - (is_k ? 0 : r.n_kv_heads);
                TX *dst = (TX *)(is_k ? r.k_cache : r.v_cache) + (slot * r.n_kv_heads + h) * hd - u * hd;
                dst[ra] = ta;
                dst[rb] = tb;
            }
        }
    }
}

// Bytes of one weight row of run-time float dtype dt.
__device__ __forceinline__ int64_t row_bytes(int dt, int64_t k)
{
    return dt == tc::DT_F32 ? k * 4 : k * 2;
}

template <typename TX, int M>
__device__ void by_weight(TX *out, const TX *x, const void *w, int dt, int m, int64_t n, int64_t k,
                          int64_t xs, int64_t os, int flags, float eps)
{
    // 16-byte vectors need every row start aligned: k, the x stride and the pointers.
    bool vec = xs % (16 / (int)sizeof(TX)) == 0 && tc::aligned(x, w, w, 16);
    switch (dt) {
    case tc::DT_F32:
        if (k % 4 == 0 && vec)
            float_rows<TX, float, M, 4, false>(out, x, (const float *)w, m, n, k, xs, os, flags, eps);
        else
            float_rows<TX, float, M, 1, false>(out, x, (const float *)w, m, n, k, xs, os, flags, eps);
        break;
    case tc::DT_F16:
        if (k % 8 == 0 && vec)
            float_rows<TX, __half, M, 8, false>(out, x, (const __half *)w, m, n, k, xs, os, flags, eps);
        else
            float_rows<TX, __half, M, 1, false>(out, x, (const __half *)w, m, n, k, xs, os, flags, eps);
        break;
    case tc::DT_BF16:
        if (k % 8 == 0 && vec)
            float_rows<TX, __nv_bfloat16, M, 8, false>(out, x, (const __nv_bfloat16 *)w, m, n, k, xs, os, flags, eps);
        else
            float_rows<TX, __nv_bfloat16, M, 1, false>(out, x, (const __nv_bfloat16 *)w, m, n, k, xs, os, flags, eps);
        break;
    }
}

// MIN_M..8 rows of x (MIN_M 1: exactly one row, a kernel of its own, because registers are
// allocated for a kernel's largest path: the many-row paths would cost the one-row path, the
// decode step of a single sequence, a third of its resident warps).
template <typename TX, int MIN_M>
__device__ void by_rows(TX *out, const TX *x, const void *w, int dt, int m, int64_t n, int64_t k,
                        int64_t xs, int64_t os, int flags, float eps, const Rope &rope)
{
    // The weights are never written by a kernel: ask for the start of this warp's first row
    // (up to 4 KiB, a line per lane) while the previous kernel finishes, then wait for x.
    int64_t first = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    if (MIN_M == 1 && (flags & kRope)) {
        int64_t half = rope.head_dim / 2, u = first / half, i = first % half;
        first = u * rope.head_dim + (rope.interleaved ? 2 * i : i);
    }
    if (first < n) {
        int64_t rb = row_bytes(dt, k), off = (int64_t)(threadIdx.x & 31) * 128;
        if (off < rb)
            tc::prefetch_l2((const char *)w + first * rb + off);
    }
    tc::await_inputs();
    // 2 to 8 rows share one instantiation: with 2 and 4 as well the binary passed 5 MB.
    // A decode step's normed product (the host checks for weights of x's dtype and 16-byte
    // rows): its own instantiation, summing squares beside the product (summing them in every
    // product cost a plain 4096 x 4096 one 6% of its bandwidth).
    if (MIN_M == 1 && (flags & kRope))
        rope_rows<TX>(out, x, (const TX *)w, n, k, flags, eps, rope);
    else if (MIN_M == 1 && (flags & kNorm))
        float_rows<TX, TX, 1, 16 / (int)sizeof(TX), true>(out, x, (const TX *)w, 1, n, k, xs, os, flags, eps);
    else if (MIN_M == 1)
        by_weight<TX, 1>(out, x, w, dt, 1, n, k, xs, os, flags, eps);
    else
        by_weight<TX, 8>(out, x, w, dt, m, n, k, xs, os, flags, eps);
}

// 16 bytes from p where `in`, else zeros (no load), streamed past L2 as load_w does.
__device__ __forceinline__ uint4 load16_if(const void *p, bool in)
{
    uint4 r;
    asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.b32 q, %5, 0;\n\tmov.b32 %0, 0;\n\tmov.b32 %1, 0;\n\t"
                 "mov.b32 %2, 0;\n\tmov.b32 %3, 0;\n\t@q ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p), "r"((int)in));
    return r;
}

// 2 to 8 rows of x against weights of x's 16-bit dtype, on the tensor cores: a block of kMmaWarps
// warps takes 16 weight rows (the rows of an m16n8k16 product; x's rows are its columns) and
// each warp an eighth of k, in chunks of 32. Lane (g, p) = (l / 4, l % 4) reads 16 bytes of
// weight rows g and g + 8 and of x row g at 8p of each chunk; its fragment slots {2p, 2p + 1,
// 2p + 8, 2p + 9} of the chunk's first product stand for those 16 bytes' elements 0-3, of the
// second for 4-7. Weights and x are permuted alike, so the products are the dot products, and
// every weight is read in 16-byte vectors with U chunks' loads in flight. The warps' sums meet
// in shared memory, in a fixed order. With SWIGLU the block also takes the 16 up rows (n on).
constexpr int kMmaWarps = 8;
template <typename T, bool SWIGLU>
__device__ void mma_rows(void *out, const T *x, const T *w, int m, int64_t n, int64_t k, int64_t xs, int64_t os,
                         int flags)
{
    constexpr int U = SWIGLU ? 4 : 8, NW = SWIGLU ? 4 : 2;
    __shared__ float red[SWIGLU ? 2 : 1][kMmaWarps][16][8];
    const int lane = threadIdx.x & 31, g = lane >> 2, p = lane & 3, warp = threadIdx.x >> 5;
    const int64_t chunks = k / 32, per = (chunks + kMmaWarps - 1) / kMmaWarps, c0 = warp * per,
                  c1 = min(chunks, c0 + per), tiles = (n + 15) / 16;
    if (blockIdx.x < tiles && blockIdx.x * 16 + g < n && c0 < c1)
        tc::prefetch_l2(w + (blockIdx.x * 16 + g) * k + c0 * 32 + p * 8);
    tc::await_inputs();
    const bool xin = g < m;
    const T *xr = x + (xin ? g : 0) * xs + p * 8;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int64_t ra = tile * 16 + g, rb = ra + 8;
        const bool ina = ra < n, inb = rb < n;
        const T *wr[NW] = { w + (ina ? ra : 0) * k + p * 8, w + (inb ? rb : 0) * k + p * 8 };
        bool in_row[NW] = { ina, inb };
        if constexpr (SWIGLU) {
            wr[2] = wr[0] + n * k;
            wr[3] = wr[1] + n * k;
            in_row[2] = ina;
            in_row[3] = inb;
        }
        float acc[NW / 2][4] = {};
        for (int64_t c = c0; c < c1; c += U) {
            uint4 wv[U][NW], xv[U];
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int i = 0; i < NW; i++)
                    wv[u][i] = load16_if(wr[i] + (c + u) * 32, in_row[i] && c + u < c1);
#pragma unroll
            for (int u = 0; u < U; u++)
                xv[u] = xin && c + u < c1 ? *reinterpret_cast<const uint4 *>(xr + (c + u) * 32)
                                          : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int h = 0; h < NW / 2; h++) {
                    const uint4 &a = wv[u][2 * h], &b = wv[u][2 * h + 1];
                    tc::mma16816<T>(acc[h], a.x, b.x, a.y, b.y, xv[u].x, xv[u].y);
                    tc::mma16816<T>(acc[h], a.z, b.z, a.w, b.w, xv[u].z, xv[u].w);
                }
        }
#pragma unroll
        for (int h = 0; h < NW / 2; h++)
            tc::put_sums(red[h], warp, acc[h]);
        __syncthreads();
        tc::store_tile<T>(out, red[0], red[NW / 2 - 1], tile, m, n, os, SWIGLU, flags & kAccumulate, 1.0f,
                          flags & kOutF32);
        __syncthreads();
    }
}

} // namespace matvec_cu

/** out[m, n] = x[m, k] w[n, k]^T for 2 <= m <= 8, w of run-time dtype w_dtype (tc_dtype);
 *  one warp per output row, grid-stride over rows. Fused options (tc_linear): flags bit 0:
 *  SwiGLU, w holds 2n rows (gate, then up) and out = silu(gate) * up; bit 1: out += the
 *  result. The one-row kernel also takes bit 2: x RMS-normalised first, x / sqrt(mean(x^2) +
 *  norm_eps), for weights of x's dtype with k, x and w 16-byte aligned. */
extern "C" __global__ void tc_k_matvec_f32(float *out, const float *x, const void *w, int32_t w_dtype,
                                           int32_t m, int64_t n, int64_t k, int64_t x_stride,
                                           int64_t out_stride, int32_t flags, float norm_eps)
{
    matvec_cu::by_rows<float, 2>(out, x, w, w_dtype, m, n, k, x_stride, out_stride, flags, norm_eps, {});
}
extern "C" __global__ void tc_k_matvec_f16(__half *out, const __half *x, const void *w,
                                           int32_t w_dtype, int32_t m, int64_t n, int64_t k,
                                           int64_t x_stride, int64_t out_stride, int32_t flags, float norm_eps)
{
    matvec_cu::by_rows<__half, 2>(out, x, w, w_dtype, m, n, k, x_stride, out_stride, flags, norm_eps, {});
}
extern "C" __global__ void tc_k_matvec_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *x,
                                            const void *w, int32_t w_dtype, int32_t m, int64_t n,
                                            int64_t k, int64_t x_stride, int64_t out_stride, int32_t flags, float norm_eps)
{
    matvec_cu::by_rows<__nv_bfloat16, 2>(out, x, w, w_dtype, m, n, k, x_stride, out_stride, flags, norm_eps, {});
}
/** The same for one row of x (m must be 1), which also takes bit 3: rotate and store a layer's
 *  q/k/v product (out holds n_heads q heads, then n_kv_heads k and v heads of head_dim; weights
 *  of x's dtype, k, x and w 16-byte aligned): q and k heads rotated by pos[0] as tc_k_rope_*
 *  does (theta, scaling 1: Llama 3's, with its factors), and k and v heads also written to
 *  cache slot slots[0] of k_cache and v_cache ([slots, n_kv_heads, head_dim]; a negative slot
 *  writes none). Without bit 3 those arguments are not read. The launch bounds (64 threads, 8 blocks per SM)
 *  let ptxas spend registers on keeping a row's sixteen weight loads in flight: by itself it
 *  chose 43 registers and issued each load just before its use. */
extern "C" __global__ void __launch_bounds__(64, 8) tc_k_matvec1_f32(float *out, const float *x, const void *w, int32_t w_dtype,
                                            int32_t m, int64_t n, int64_t k, int64_t x_stride,
                                            int64_t out_stride, int32_t flags, float norm_eps, const int32_t *pos, const int32_t *slots,
                                            void *k_cache, void *v_cache, int32_t n_heads, int32_t n_kv_heads,
                                            int32_t head_dim, int32_t interleaved, double theta, int32_t scaling,
                                            double factor, double low_freq_factor, double high_freq_factor,
                                            double original_max_position)
{
    matvec_cu::by_rows<float, 1>(out, x, w, w_dtype, m, n, k, x_stride, out_stride, flags, norm_eps,
                                  { pos, slots, k_cache, v_cache, n_heads, n_kv_heads, head_dim, interleaved, scaling, theta, factor, low_freq_factor, high_freq_factor, original_max_position });
}
extern "C" __global__ void __launch_bounds__(64, 8) tc_k_matvec1_f16(__half *out, const __half *x, const void *w,
                                            int32_t w_dtype, int32_t m, int64_t n, int64_t k,
                                            int64_t x_stride, int64_t out_stride, int32_t flags, float norm_eps, const int32_t *pos, const int32_t *slots,
                                            void *k_cache, void *v_cache, int32_t n_heads, int32_t n_kv_heads,
                                            int32_t head_dim, int32_t interleaved, double theta, int32_t scaling,
                                            double factor, double low_freq_factor, double high_freq_factor,
                                            double original_max_position)
{
    matvec_cu::by_rows<__half, 1>(out, x, w, w_dtype, m, n, k, x_stride, out_stride, flags, norm_eps,
                                  { pos, slots, k_cache, v_cache, n_heads, n_kv_heads, head_dim, interleaved, scaling, theta, factor, low_freq_factor, high_freq_factor, original_max_position });
}
extern "C" __global__ void __launch_bounds__(64, 8) tc_k_matvec1_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *x,
                                             const void *w, int32_t w_dtype, int32_t m, int64_t n,
                                             int64_t k, int64_t x_stride, int64_t out_stride, int32_t flags, float norm_eps, const int32_t *pos, const int32_t *slots,
                                            void *k_cache, void *v_cache, int32_t n_heads, int32_t n_kv_heads,
                                            int32_t head_dim, int32_t interleaved, double theta, int32_t scaling,
                                            double factor, double low_freq_factor, double high_freq_factor,
                                            double original_max_position)
{
    matvec_cu::by_rows<__nv_bfloat16, 1>(out, x, w, w_dtype, m, n, k, x_stride, out_stride, flags, norm_eps,
                                  { pos, slots, k_cache, v_cache, n_heads, n_kv_heads, head_dim, interleaved, scaling, theta, factor, low_freq_factor, high_freq_factor, original_max_position });
}
/** out[m, n] = x[m, k] w[n, k]^T for 2 <= m <= 8 on the tensor cores, w of x's dtype, k a
 *  multiple of 32, x, w and the x stride 16-byte aligned; blocks of 256 threads, each taking
 *  16 rows of out at a time (grid-stride). flags: bit 0 SwiGLU (w holds 2n rows, gate then up;
 *  out = silu(gate) * up), bit 1: out += the result, bit 4 (16): out is f32 (else of x's dtype: the
 *  logits of a few rows). The launch bounds (two blocks per SM) give
 *  ptxas the 126 registers that hold eight chunks' loads: left to itself it chose 64 and
 *  spilled. */
extern "C" __global__ void __launch_bounds__(256, 2) tc_k_matvec_mma_f16(void *out, const __half *x, const __half *w,
                                                                      int32_t m, int64_t n, int64_t k, int64_t x_stride,
                                                                      int64_t out_stride, int32_t flags)
{
    if (flags & matvec_cu::kSwiglu)
        matvec_cu::mma_rows<__half, true>(out, x, w, m, n, k, x_stride, out_stride, flags);
    else
        matvec_cu::mma_rows<__half, false>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
extern "C" __global__ void __launch_bounds__(256, 2) tc_k_matvec_mma_bf16(void *out, const __nv_bfloat16 *x,
                                                                       const __nv_bfloat16 *w, int32_t m, int64_t n,
                                                                       int64_t k, int64_t x_stride, int64_t out_stride,
                                                                       int32_t flags)
{
    if (flags & matvec_cu::kSwiglu)
        matvec_cu::mma_rows<__nv_bfloat16, true>(out, x, w, m, n, k, x_stride, out_stride, flags);
    else
        matvec_cu::mma_rows<__nv_bfloat16, false>(out, x, w, m, n, k, x_stride, out_stride, flags);
}
