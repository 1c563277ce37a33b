// Causal prefill attention over a paged KV cache (flash-attention style online softmax over
// key tiles held in shared memory; Dao et al. 2022), f32 arithmetic throughout: 16-bit and FP8
// E4M3 caches on the tensor cores (an FP8 tile widened in shared memory to the activations'
// type, exactly), head_dim 64 and 128 with kernels of their own (and 80, 96, 112 and 256 over
// bf16 caches under bf16 activations) and every other even size up to 256 on one generic
// kernel (bf16 activations, a bf16 or FP8 cache chosen at run time); f32
// activations (a check of the others, not a fast path) on one simple kernel for prefill and
// decode. With a sliding window, keys before a query's window are
// never read (their blocks may be freed).
#include "attention.cuh"

namespace attention_cu {

// Widen rows x HD FP8 values (rows kv_ld<f8e4m3, HD> bytes apart) to T (rows kv_ld<T, HD>
// apart), eight values a step, thread `t` of `n`.
template <typename T, int HD>
__device__ __forceinline__ void widen(T *dst, const tc::f8e4m3 *src, int rows, int t, int n)
{
    constexpr int LS = kv_ld<tc::f8e4m3, HD>(), LD = kv_ld<T, HD>(), P = HD / 8;
    for (int e = t; e < rows * P; e += n) {
        int r = e / P, c = e % P;
        uint2 x = *reinterpret_cast<const uint2 *>(src + r * LS + 8 * c);
        uint4 y;
        tc::f8x4_to<T>(x.x, y.x, y.y);
        tc::f8x4_to<T>(x.y, y.z, y.w);
        *reinterpret_cast<uint4 *>(dst + r * LD + 8 * c) = y;
    }
}

// The (sequence, query tile) of prefill block blockIdx.x, tiles of bq rows, found by thread 0
// and shared through seq_tile (seq -1: a block past the last tile). With `longest_first` the
// sequence's tiles go in reverse order (the last tiles have the most keys).
__device__ __forceinline__ void prefill_tile(const int32_t *q_start, int n_seqs, int bq, bool longest_first,
                                             int *seq_tile)
{
    if (threadIdx.x == 0) {
        int found = -1, tile = 0, cum = 0;
        for (int s = 0; s < n_seqs; s++) {
            int tiles = (q_start[s + 1] - q_start[s] + bq - 1) / bq;
            if ((int)blockIdx.x < cum + tiles) {
                found = s;
                tile = longest_first ? tiles - 1 - ((int)blockIdx.x - cum) : (int)blockIdx.x - cum;
                break;
            }
            cum += tiles;
        }
        seq_tile[0] = found;
        seq_tile[1] = tile;
    }
    __syncthreads();
}

// f32 caches, any head_dim hd up to kMaxHD: block (tile of BQ query rows of one sequence,
// head); 128 threads, TPR per query row (so that each holds kMaxHD / TPR output dimensions:
// few registers and little code, as this kernel checks the others rather than runs models
// fast). With q_start NULL a decode (block x is sequence x, whose query is row x). window > 0:
// a query at position p sees keys from p - window + 1 on.
constexpr int kPrefillThreads = 128, TPR = 16, BQ = kPrefillThreads / TPR, BK = 32;

template <typename T>
__device__ void prefill_simt(T *out, const T *q, const T *k_cache, const T *v_cache, const int32_t *table,
                             const int32_t *seq_lens, const int32_t *q_start, int n_seqs, int n_heads,
                             int n_kv_heads, int block_size, int max_blocks, int64_t q_stride, int64_t out_stride,
                             float scale, int window, int hd)
{
    const int HS = hd + 1;
    extern __shared__ float sh[];
    float *qs = sh, *ks = qs + BQ * HS, *vs = ks + BK * HS, *ps = vs + BK * HS;
    __shared__ int seq_tile[2];
    __shared__ const T *krow[BK], *vrow[BK];
    if (!q_start) {
        if (threadIdx.x == 0) {
            seq_tile[0] = blockIdx.x;
            seq_tile[1] = 0;
        }
        __syncthreads();
    } else {
        prefill_tile(q_start, n_seqs, BQ, false, seq_tile);
    }
    int s_seq = seq_tile[0], s_tile = seq_tile[1];
    if (s_seq < 0)
        return;
    int seq = s_seq, head = blockIdx.y;
    int kvh = head / (n_heads / n_kv_heads);
    bool one = !q_start; // decode: one query per sequence
    int64_t qbeg = one ? seq : q_start[seq], m = one ? 1 : q_start[seq + 1] - qbeg, len = seq_lens[seq];
    int64_t r0 = (int64_t)s_tile * BQ; // first row of the tile within the sequence
    int rows = (int)min((int64_t)BQ, m - r0);
    int64_t first_pos = len - m + r0; // position of the tile's first query
    const int32_t *tbl = table + (int64_t)seq * max_blocks;

    for (int e = threadIdx.x; e < BQ * hd; e += kPrefillThreads) {
        int r = e / hd, d = e % hd;
        qs[r * HS + d] = r < rows ? tc::to_f32(q[(qbeg + r0 + r) * q_stride + (int64_t)head * hd + d]) * scale : 0.0f;
    }
    int r = threadIdx.x / TPR, sub = threadIdx.x % TPR;
    constexpr int DJ = kMaxHD / TPR;
    float o[DJ], mrow = -INFINITY, lrow = 0.0f;
#pragma unroll
    for (int j = 0; j < DJ; j++)
        o[j] = 0.0f;
    int64_t qpos = first_pos + r;
    int64_t kend = first_pos + rows; // keys [lo, kend) are visible to some row of the tile
    int64_t lo = window > 0 && first_pos - window + 1 > 0 ? first_pos - window + 1 : 0;
    for (int64_t k0 = lo / BK * BK; k0 < kend; k0 += BK) {
        __syncthreads();
        if (threadIdx.x < BK) {
            int64_t t = k0 + threadIdx.x;
            bool in = t < kend && t >= lo;
            krow[threadIdx.x] = in ? kv_row(k_cache, tbl, t, block_size, n_kv_heads, hd, kvh) : nullptr;
            vrow[threadIdx.x] = in ? kv_row(v_cache, tbl, t, block_size, n_kv_heads, hd, kvh) : nullptr;
        }
        __syncthreads();
        for (int e = threadIdx.x; e < BK * hd; e += kPrefillThreads) {
            int c = e / hd, d = e % hd;
            ks[c * HS + d] = krow[c] ? tc::to_f32(krow[c][d]) : 0.0f;
            vs[c * HS + d] = vrow[c] ? tc::to_f32(vrow[c][d]) : 0.0f;
        }
        __syncthreads();
        // The row's TPR threads (lanes of one warp) score keys sub, sub + TPR, ...
        float s[BK / TPR], smax = -INFINITY;
#pragma unroll
        for (int j = 0; j < BK / TPR; j++) {
            int c = sub + TPR * j;
            float d = 0.0f;
#pragma unroll 8
            for (int x = 0; x < hd; x++)
                d = fmaf(qs[r * HS + x], ks[c * HS + x], d);
            int64_t key = k0 + c;
            s[j] = (r < rows && key <= qpos && (window <= 0 || key > qpos - window)) ? d : -INFINITY;
            smax = fmaxf(smax, s[j]);
        }
#pragma unroll
        for (int o2 = TPR / 2; o2 > 0; o2 >>= 1)
            smax = fmaxf(smax, __shfl_xor_sync(0xffffffffu, smax, o2));
        float mn = fmaxf(mrow, smax);
        float corr = mn == -INFINITY ? 1.0f : __expf(mrow - mn);
        float psum = 0.0f;
#pragma unroll
        for (int j = 0; j < BK / TPR; j++) {
            float p = s[j] == -INFINITY ? 0.0f : __expf(s[j] - mn);
            psum += p;
            ps[r * (BK + 1) + sub + TPR * j] = p;
        }
#pragma unroll
        for (int o2 = TPR / 2; o2 > 0; o2 >>= 1)
            psum += __shfl_xor_sync(0xffffffffu, psum, o2);
        lrow = lrow * corr + psum;
        mrow = mn;
        __syncwarp();
#pragma unroll
        for (int j = 0; j < DJ; j++)
            o[j] *= corr;
        for (int c = 0; c < BK; c++) {
            float p = ps[r * (BK + 1) + c];
#pragma unroll
            for (int j = 0; j < DJ; j++)
                if (sub + TPR * j < hd)
                    o[j] = fmaf(p, vs[c * HS + sub + TPR * j], o[j]);
        }
    }
    if (r < rows) {
        float inv = lrow > 0.0f ? 1.0f / lrow : 0.0f;
        T *orow = out + (qbeg + r0 + r) * out_stride + (int64_t)head * hd;
#pragma unroll
        for (int j = 0; j < DJ; j++)
            if (sub + TPR * j < hd)
                orow[sub + TPR * j] = tc::from_f32<T>(o[j] * inv);
    }
}


// Prefill of 16-bit caches on the tensor cores (flash attention 2's arrangement, Dao 2023):
// block (tile of 64 query rows of one sequence, head) of 4 warps, 16 rows each. Key and value
// tiles of 64 tokens go through shared memory (cp.async, double-buffered); each warp keeps its
// queries as A fragments, computes its 16 x 64 scores with m16n8k16 products, updates its
// rows' online softmax in registers (lane l holds rows l / 4 and l / 4 + 8) and multiplies the
// probabilities, rounded to T, by the values straight from the score registers. Warps whose
// rows all precede a key tile skip it. The sequence's last query tiles (the longest) go first.
constexpr int kPBQ = 64, kPBK = 64;
static_assert(kPBK == kWarps * kTile, "each warp of a prefill block loads kTile rows of a key tile");

// A masked score: finite, so that a row whose keys in a tile are all masked (before its
// window) gets no NaN; the garbage it sums there is scaled away by exp(-1e30 - m) = 0 at its
// first visible key, which every row meets (its own position).
constexpr float kMasked = -1e30f;

template <typename T, typename C, int HD>
__device__ void prefill_mma(T *out, const T *q, const C *k_cache, const C *v_cache, const int32_t *table,
                            const int32_t *seq_lens, const int32_t *q_start, int n_seqs, int n_heads,
                            int n_kv_heads, int block_size, int max_blocks, int64_t q_stride, int64_t out_stride,
                            float scale, int window, const float *k_scale, const float *v_scale)
{
    constexpr int LD = kv_ld<T, HD>(), KS = HD / 16, NT = HD / 8, NK = kPBK / 8;
    constexpr int STAGE = 2 * kPBK * kv_ld<C, HD>();
    extern __shared__ float sh[];
    // The two stages of the cache's tiles, then (FP8 cache) the current tile widened to T.
    C *smem = reinterpret_cast<C *>(sh);
    T *wide = reinterpret_cast<T *>(smem + 2 * STAGE);
    __shared__ int seq_tile[2];
    prefill_tile(q_start, n_seqs, kPBQ, true, seq_tile);
    int s_seq = seq_tile[0], s_tile = seq_tile[1];
    if (s_seq < 0)
        return;
    int seq = s_seq, head = blockIdx.y, kvh = head / (n_heads / n_kv_heads);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gr = lane >> 2, pos = lane & 3;
    int64_t qbeg = q_start[seq], m = q_start[seq + 1] - qbeg, len = seq_lens[seq];
    int64_t r0 = (int64_t)s_tile * kPBQ;
    int rows = (int)min((int64_t)kPBQ, m - r0);
    int64_t first_pos = len - m + r0, kend = first_pos + rows;
    // keys [lo, kend) are visible to some row of the tile (with a window, lo is the first row's
    // first key: earlier blocks may be freed, never read)
    int64_t lo = window > 0 && first_pos - window + 1 > 0 ? first_pos - window + 1 : 0;
    int kt0 = (int)(lo / kPBK), n_kt = (int)((kend + kPBK - 1) / kPBK);
    const int32_t *tbl = table + (int64_t)seq * max_blocks;
    float vsc = 1.0f;
    if constexpr (sizeof(C) == 1) {
        if (k_scale)
            scale *= k_scale[kvh];
        if (v_scale)
            vsc = v_scale[kvh];
    }

    auto load = [&](int kt) { // warp w copies rows 16 w .. 16 w + 15 of key tile kt
        if (kt < n_kt) {
            constexpr int LC = kv_ld<C, HD>();
            C *ks = smem + (kt & 1) * STAGE + kTile * warp * LC;
            load_kv_rows<C, HD>(ks, ks + kPBK * LC, k_cache, v_cache, tbl, kt * kPBK + kTile * warp, (int)kend,
                                (int)lo, block_size, n_kv_heads, kvh, lane);
        }
        tc::cp_commit();
    };
    load(kt0);

    // The warp's queries as A fragments: registers 0, 2 hold row gr, 1, 3 row gr + 8.
    int wrow = 16 * warp; // the warp's first row within the tile
    uint32_t qa[KS][4];
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        int rr = wrow + gr + 8 * hr;
        const T *qp = q + (qbeg + r0 + rr) * q_stride + (int64_t)head * HD + 2 * pos;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            qa[kk][hr] = rr < rows ? *reinterpret_cast<const uint32_t *>(qp + 16 * kk) : 0u;
            qa[kk][2 + hr] = rr < rows ? *reinterpret_cast<const uint32_t *>(qp + 16 * kk + 8) : 0u;
        }
    }
    float o[NT][4], mr[2] = { -INFINITY, -INFINITY }, lr[2] = { 0.0f, 0.0f };
#pragma unroll
    for (int n = 0; n < NT; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    int64_t wpos = first_pos + wrow; // position of the warp's first row
    bool active = wrow < rows;
    int wlen = window > 0 ? window : INT_MAX; // keys after qpos - wlen are in a row's window

    for (int kt = kt0; kt < n_kt; kt++) {
        load(kt + 1);
        tc::cp_wait<1>();
        __syncthreads();
        const T *ks;
        if constexpr (sizeof(C) == 1) {
            widen<T, HD>(wide, smem + (kt & 1) * STAGE, 2 * kPBK, threadIdx.x, blockDim.x);
            __syncthreads();
            ks = wide;
        } else {
            ks = smem + (kt & 1) * STAGE;
        }
        const T *vs = ks + kPBK * LD;
        int64_t k0 = (int64_t)kt * kPBK;
        // (skipped by a warp whose rows all precede the tile, or whose first row's window starts
        // after it)
        if (active && k0 <= wpos + 15 && (window <= 0 || k0 + kPBK > wpos - window + 1)) {
            float s[NK][4];
#pragma unroll
            for (int nt = 0; nt < NK; nt++) {
                s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
                for (int kp = 0; kp < KS / 2; kp++) {
                    uint32_t kb[4];
                    tc::ldmatrix_x4(kb, ks + (8 * nt + (lane & 7)) * LD + 32 * kp + 8 * (lane >> 3));
                    tc::mma16816<T>(s[nt], qa[2 * kp][0], qa[2 * kp][1], qa[2 * kp][2], qa[2 * kp][3], kb[0],
                                    kb[1]);
                    tc::mma16816<T>(s[nt], qa[2 * kp + 1][0], qa[2 * kp + 1][1], qa[2 * kp + 1][2],
                                    qa[2 * kp + 1][3], kb[2], kb[3]);
                }
                if constexpr (KS % 2 != 0) { // (80 and 112: the last 16 dimensions alone)
                    uint32_t kb[2];
                    tc::ldmatrix_x2(kb, ks + (8 * nt + (lane & 7)) * LD + 16 * (KS - 1) + 8 * ((lane >> 3) & 1));
                    tc::mma16816<T>(s[nt], qa[KS - 1][0], qa[KS - 1][1], qa[KS - 1][2], qa[KS - 1][3], kb[0],
                                    kb[1]);
                }
            }
            // Element e of s[nt]: row gr + 8 (e / 2), key k0 + 8 nt + 2 pos + e % 2.
            float mx[2] = { -INFINITY, -INFINITY };
#pragma unroll
            for (int nt = 0; nt < NK; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    // (32-bit: positions stay below 2^31)
                    int key = (int)k0 + 8 * nt + 2 * pos + (e & 1), qpos = (int)wpos + gr + 8 * (e >> 1);
                    bool seen = key <= qpos && key > qpos - wlen;
                    s[nt][e] = seen ? s[nt][e] * scale : kMasked;
                    mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
                }
            float corr[2];
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
                mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
                float mn = fmaxf(mr[hr], mx[hr]); // finite (kMasked at least)
                corr[hr] = __expf(mr[hr] - mn);
                mr[hr] = mn;
                lr[hr] *= corr[hr];
            }
#pragma unroll
            for (int nt = 0; nt < NK; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[nt][e] = __expf(s[nt][e] - mr[e >> 1]);
                    lr[e >> 1] += s[nt][e];
                }
#pragma unroll
            for (int n = 0; n < NT; n++) {
                o[n][0] *= corr[0];
                o[n][1] *= corr[0];
                o[n][2] *= corr[1];
                o[n][3] *= corr[1];
            }
#pragma unroll
            for (int kk = 0; kk < kPBK / 16; kk++) {
                uint32_t a0 = tc::pack2<T>(s[2 * kk][0], s[2 * kk][1]), a1 = tc::pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                         a2 = tc::pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                         a3 = tc::pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
                for (int np = 0; np < NT / 2; np++) {
                    uint32_t vb[4];
                    tc::ldmatrix_x4<true>(vb, vs + (16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1)) * LD +
                                                  8 * (2 * np + (lane >> 4)));
                    tc::mma16816<T>(o[2 * np], a0, a1, a2, a3, vb[0], vb[1]);
                    tc::mma16816<T>(o[2 * np + 1], a0, a1, a2, a3, vb[2], vb[3]);
                }
            }
        }
        __syncthreads(); // the stage is refilled by the next iteration's load
    }
    tc::cp_wait<0>();
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        lr[hr] += __shfl_xor_sync(0xffffffffu, lr[hr], 1);
        lr[hr] += __shfl_xor_sync(0xffffffffu, lr[hr], 2);
        int rr = wrow + gr + 8 * hr;
        if (rr >= rows)
            continue;
        float inv = lr[hr] > 0.0f ? vsc / lr[hr] : 0.0f;
        T *orow = out + (qbeg + r0 + rr) * out_stride + (int64_t)head * HD + 2 * pos;
#pragma unroll
        for (int n = 0; n < NT; n++) {
            orow[8 * n] = tc::from_f32<T>(o[n][2 * hr] * inv);
            orow[8 * n + 1] = tc::from_f32<T>(o[n][2 * hr + 1] * inv);
        }
    }
}


// The generic prefill of 16-bit and FP8 caches (head_dim hd up to kMaxHD and the cache's type,
// read at run time; the cache as bytes):
// prefill_mma's arrangement with key tiles of 32 tokens, and the warps' query fragments read
// from the block's query tile in shared memory at each k step instead of held in registers
// (at 256 the registers would not hold them beside the output's).
constexpr int kAnyBK = 32;

template <typename T>
__device__ void prefill_any(T *out, const T *q, const uint8_t *k_cache, const uint8_t *v_cache, const int32_t *table,
                            const int32_t *seq_lens, const int32_t *q_start, int n_seqs, int n_heads,
                            int n_kv_heads, int block_size, int max_blocks, int64_t q_stride, int64_t out_stride,
                            float scale, int window, const float *k_scale, const float *v_scale, bool fp8, int hd)
{
    constexpr int KM = kMaxHD / 16, NK = kAnyBK / 8;
    // (the cache's rows in bytes: LC; a 16-bit cache's are LD elements)
    const int hp = (hd + 15) / 16 * 16, LD = hp + 8, esz = fp8 ? 1 : (int)sizeof(T), LC = hp * esz + 16,
              KS = hp / 16;
    const int STAGE = 2 * kAnyBK * LC;
    extern __shared__ float sh[];
    // The query tile [64][LD], the two stages of the cache's tiles, then (FP8 cache) the
    // current tile widened to T.
    T *qs = reinterpret_cast<T *>(sh);
    uint8_t *smem = reinterpret_cast<uint8_t *>(qs + kPBQ * LD);
    T *wide = reinterpret_cast<T *>(smem + 2 * STAGE);
    __shared__ int seq_tile[2];
    prefill_tile(q_start, n_seqs, kPBQ, true, seq_tile);
    int s_seq = seq_tile[0], s_tile = seq_tile[1];
    if (s_seq < 0)
        return;
    int seq = s_seq, head = blockIdx.y, kvh = head / (n_heads / n_kv_heads);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gr = lane >> 2, pos = lane & 3;
    int64_t qbeg = q_start[seq], m = q_start[seq + 1] - qbeg, len = seq_lens[seq];
    int64_t r0 = (int64_t)s_tile * kPBQ;
    int rows = (int)min((int64_t)kPBQ, m - r0);
    int64_t first_pos = len - m + r0, kend = first_pos + rows;
    int64_t lo = window > 0 && first_pos - window + 1 > 0 ? first_pos - window + 1 : 0;
    int kt0 = (int)(lo / kAnyBK), n_kt = (int)((kend + kAnyBK - 1) / kAnyBK);
    const int32_t *tbl = table + (int64_t)seq * max_blocks;
    float vsc = 1.0f; // (the scales are NULL over a 16-bit cache)
    if (k_scale)
        scale *= k_scale[kvh];
    if (v_scale)
        vsc = v_scale[kvh];
    // The stages' columns past head_dim stay zero (the copies write only head_dim).
    zero_pad(smem, 4 * kAnyBK, hd * esz, hp * esz, LC, threadIdx.x, blockDim.x);
    auto load = [&](int kt) { // warp w copies rows 8 w .. 8 w + 7 of key tile kt
        if (kt < n_kt) {
            constexpr int R = kAnyBK / kWarps;
            uint8_t *ks = smem + (kt & 1) * STAGE + R * warp * LC;
            load_rows_any(ks, ks + kAnyBK * LC, k_cache, v_cache, tbl, kt * kAnyBK + R * warp, R, (int)kend, (int)lo,
                          block_size, n_kv_heads, kvh, hd, esz, LC, lane, 0, INT_MAX);
        }
        tc::cp_commit();
    };
    load(kt0);
    // The query tile, rows past the sequence's and columns past head_dim zero (pairs of
    // elements: head_dim is even).
    for (int e = threadIdx.x; e < kPBQ * (hp / 2); e += blockDim.x) {
        int r = e / (hp / 2), d = 2 * (e - r * (hp / 2));
        uint32_t v = r < rows && d < hd
                         ? *reinterpret_cast<const uint32_t *>(q + (qbeg + r0 + r) * q_stride + (int64_t)head * hd + d)
                         : 0u;
        *reinterpret_cast<uint32_t *>(qs + r * LD + d) = v;
    }
    float o[2 * KM][4], mr[2] = { -INFINITY, -INFINITY }, lr[2] = { 0.0f, 0.0f };
#pragma unroll
    for (int n = 0; n < 2 * KM; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    int wrow = 16 * warp;
    int64_t wpos = first_pos + wrow;
    bool active = wrow < rows;
    int wlen = window > 0 ? window : INT_MAX;
    // A fragments of the warp's 16 rows at k step kk: matrices (rows 0-7, dims 16 kk + 0-7),
    // (8-15, +0-7), (0-7, +8-15), (8-15, +8-15).
    const T *qa_row = qs + (wrow + (lane & 7) + 8 * ((lane >> 3) & 1)) * LD + 8 * (lane >> 4);
    for (int kt = kt0; kt < n_kt; kt++) {
        load(kt + 1);
        tc::cp_wait<1>();
        __syncthreads();
        const T *ks = reinterpret_cast<const T *>(smem + (kt & 1) * STAGE);
        if (fp8) {
            widen_any<T>(wide, smem + (kt & 1) * STAGE, 2 * kAnyBK, hp, LD, LC, threadIdx.x, blockDim.x);
            __syncthreads();
            ks = wide;
        }
        const T *vs = ks + kAnyBK * LD;
        int64_t k0 = (int64_t)kt * kAnyBK;
        if (active && k0 <= wpos + 15 && (window <= 0 || k0 + kAnyBK > wpos - window + 1)) {
            float s[NK][4];
#pragma unroll
            for (int nt = 0; nt < NK; nt++)
                s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KM; kk++) {
                if (kk < KS) {
                    uint32_t a[4];
                    tc::ldmatrix_x4(a, qa_row + 16 * kk);
#pragma unroll
                    for (int np = 0; np < NK / 2; np++) {
                        uint32_t kb[4];
                        tc::ldmatrix_x4(kb, ks + (16 * np + 8 * (lane >> 4) + (lane & 7)) * LD + 16 * kk +
                                                8 * ((lane >> 3) & 1));
                        tc::mma16816<T>(s[2 * np], a[0], a[1], a[2], a[3], kb[0], kb[1]);
                        tc::mma16816<T>(s[2 * np + 1], a[0], a[1], a[2], a[3], kb[2], kb[3]);
                    }
                }
            }
            float mx[2] = { -INFINITY, -INFINITY };
#pragma unroll
            for (int nt = 0; nt < NK; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    // (32-bit: positions stay below 2^31)
                    int key = (int)k0 + 8 * nt + 2 * pos + (e & 1), qpos = (int)wpos + gr + 8 * (e >> 1);
                    bool seen = key <= qpos && key > qpos - wlen;
                    s[nt][e] = seen ? s[nt][e] * scale : kMasked;
                    mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
                }
            float corr[2];
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
                mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
                float mn = fmaxf(mr[hr], mx[hr]);
                corr[hr] = __expf(mr[hr] - mn);
                mr[hr] = mn;
                lr[hr] *= corr[hr];
            }
#pragma unroll
            for (int nt = 0; nt < NK; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[nt][e] = __expf(s[nt][e] - mr[e >> 1]);
                    lr[e >> 1] += s[nt][e];
                }
#pragma unroll
            for (int n = 0; n < 2 * KM; n++) {
                o[n][0] *= corr[0];
                o[n][1] *= corr[0];
                o[n][2] *= corr[1];
                o[n][3] *= corr[1];
            }
#pragma unroll
            for (int kk = 0; kk < kAnyBK / 16; kk++) {
                uint32_t a0 = tc::pack2<T>(s[2 * kk][0], s[2 * kk][1]), a1 = tc::pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                         a2 = tc::pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                         a3 = tc::pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
                for (int np = 0; np < KM; np++) {
                    if (np < KS) {
                        uint32_t vb[4];
                        tc::ldmatrix_x4<true>(vb, vs + (16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1)) * LD +
                                                      8 * (2 * np + (lane >> 4)));
                        tc::mma16816<T>(o[2 * np], a0, a1, a2, a3, vb[0], vb[1]);
                        tc::mma16816<T>(o[2 * np + 1], a0, a1, a2, a3, vb[2], vb[3]);
                    }
                }
            }
        }
        __syncthreads(); // the stage (and the widened tile) is refilled next
    }
    tc::cp_wait<0>();
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        lr[hr] += __shfl_xor_sync(0xffffffffu, lr[hr], 1);
        lr[hr] += __shfl_xor_sync(0xffffffffu, lr[hr], 2);
        int rr = wrow + gr + 8 * hr;
        if (rr >= rows)
            continue;
        float inv = lr[hr] > 0.0f ? vsc / lr[hr] : 0.0f;
        T *orow = out + (qbeg + r0 + rr) * out_stride + (int64_t)head * hd + 2 * pos;
#pragma unroll
        for (int n = 0; n < 2 * KM; n++) {
            if (8 * n + 2 * pos < hd) {
                orow[8 * n] = tc::from_f32<T>(o[n][2 * hr] * inv);
                orow[8 * n + 1] = tc::from_f32<T>(o[n][2 * hr + 1] * inv);
            }
        }
    }
}

template <typename T, typename C, int HD>
__device__ void prefill(T *out, const T *q, const C *k_cache, const C *v_cache, const int32_t *table,
                        const int32_t *seq_lens, const int32_t *q_start, int n_seqs, int n_heads, int n_kv_heads,
                        int block_size, int max_blocks, int64_t q_stride, int64_t out_stride, float scale, int window,
                        const float *k_scale = nullptr, const float *v_scale = nullptr, int hd = HD)
{
    if constexpr (sizeof(T) == 4)
        prefill_simt<T>(out, q, k_cache, v_cache, table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size,
                        max_blocks, q_stride, out_stride, scale, window, hd);
    else
        prefill_mma<T, C, HD>(out, q, k_cache, v_cache, table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads,
                              block_size, max_blocks, q_stride, out_stride, scale, window, k_scale, v_scale);
}

} // namespace attention_cu

/** Attention over f32 caches of any head_dim up to 256 (f32 on CUDA is a check of the 16-bit
 *  paths, kept to one simple kernel): causal prefill with grid (n_tokens / 8 + n_seqs,
 *  n_heads), 128 threads, 4 * (72 * (head_dim + 1) + 8 * 33) bytes of dynamic shared memory;
 *  or with q_start NULL a decode: grid (n_seqs, n_heads), row s of q is sequence s's query. window > 0: a query at position p attends only to positions p - window + 1 .. p. */
extern "C" __global__ void tc_k_attn_prefill_f32(float *out, const float *q, const float *k_cache,
        const float *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window, int32_t head_dim)
{
    tc::await_inputs();
    attention_cu::prefill<float, float, 0>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window, nullptr, nullptr, head_dim);
}
/** Causal prefill attention, head_dim 64: grid (n_tokens / 64 + n_seqs, n_heads), 128 threads,
 *  36864 bytes of dynamic shared memory. window > 0: a query at position p attends only to positions p - window + 1 .. p. */
extern "C" __global__ void tc_k_attn_prefill64_f16(__half *out, const __half *q, const __half *k_cache,
        const __half *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window)
{
    tc::await_inputs();
    attention_cu::prefill<__half, __half, 64>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window);
}
/** Causal prefill attention, head_dim 128: grid (n_tokens / 64 + n_seqs, n_heads), 128 threads,
 *  69632 bytes of dynamic shared memory. window > 0: a query at position p attends only to positions p - window + 1 .. p. */
extern "C" __global__ void tc_k_attn_prefill128_f16(__half *out, const __half *q, const __half *k_cache,
        const __half *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window)
{
    tc::await_inputs();
    attention_cu::prefill<__half, __half, 128>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window);
}
/** Causal prefill attention, head_dim 64: grid (n_tokens / 64 + n_seqs, n_heads), 128 threads,
 *  36864 bytes of dynamic shared memory. window > 0: a query at position p attends only to positions p - window + 1 .. p. */
extern "C" __global__ void tc_k_attn_prefill64_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *k_cache,
        const __nv_bfloat16 *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window)
{
    tc::await_inputs();
    attention_cu::prefill<__nv_bfloat16, __nv_bfloat16, 64>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window);
}
/** Causal prefill attention, head_dim 128: grid (n_tokens / 64 + n_seqs, n_heads), 128 threads,
 *  69632 bytes of dynamic shared memory. window > 0: a query at position p attends only to positions p - window + 1 .. p. */
extern "C" __global__ void tc_k_attn_prefill128_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *k_cache,
        const __nv_bfloat16 *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window)
{
    tc::await_inputs();
    attention_cu::prefill<__nv_bfloat16, __nv_bfloat16, 128>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window);
}
/** Causal prefill attention, head_dim 80, bf16 activations and cache: grid (n_tokens / 64 +
 *  n_seqs, n_heads), 128 threads, 45056 bytes of dynamic shared memory. window > 0: a query at
 *  position p attends only to positions p - window + 1 .. p. */
extern "C" __global__ void tc_k_attn_prefill80_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *k_cache,
        const __nv_bfloat16 *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window)
{
    tc::await_inputs();
    attention_cu::prefill<__nv_bfloat16, __nv_bfloat16, 80>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window);
}
/** Causal prefill attention, head_dim 96, bf16 activations and cache: grid (n_tokens / 64 +
 *  n_seqs, n_heads), 128 threads, 53248 bytes of dynamic shared memory. window > 0: a query at
 *  position p attends only to positions p - window + 1 .. p. */
extern "C" __global__ void tc_k_attn_prefill96_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *k_cache,
        const __nv_bfloat16 *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window)
{
    tc::await_inputs();
    attention_cu::prefill<__nv_bfloat16, __nv_bfloat16, 96>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window);
}
/** Causal prefill attention, head_dim 112, bf16 activations and cache: grid (n_tokens / 64 +
 *  n_seqs, n_heads), 128 threads, 61440 bytes of dynamic shared memory. window > 0: a query at
 *  position p attends only to positions p - window + 1 .. p. */
extern "C" __global__ void tc_k_attn_prefill112_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *k_cache,
        const __nv_bfloat16 *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window)
{
    tc::await_inputs();
    attention_cu::prefill<__nv_bfloat16, __nv_bfloat16, 112>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window);
}
/** Causal prefill attention, head_dim 256, bf16 activations and cache: grid (n_tokens / 64 +
 *  n_seqs, n_heads), 128 threads, 135168 bytes of dynamic shared memory. window > 0: a query at
 *  position p attends only to positions p - window + 1 .. p. */
extern "C" __global__ void tc_k_attn_prefill256_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *k_cache,
        const __nv_bfloat16 *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window)
{
    tc::await_inputs();
    attention_cu::prefill<__nv_bfloat16, __nv_bfloat16, 256>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window);
}
/** Causal prefill attention of any even head_dim from 16 to 256 (rounded up to 16: hp) over a
 *  bf16 cache, or with fp8 set an FP8 E4M3 one (k_scale, v_scale: each kv head's scales, f32
 *  [n_kv_heads]; NULL: 1): grid (n_tokens / 64 + n_seqs, n_heads), 128 threads,
 *  384 * (hp + 8) bytes of dynamic shared memory over a bf16 cache, 256 * (hp + 8) + 128 *
 *  (hp + 16) over an FP8 one. (f16 activations: 64 and 128 only.) window > 0: a query at
 *  position p attends only to positions p - window + 1 .. p. */
extern "C" __global__ void tc_k_attn_prefill_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *q, const uint8_t *k_cache,
                                                 const uint8_t *v_cache, const int32_t *block_table,
                                                 const int32_t *seq_lens, const int32_t *q_start, int32_t n_seqs,
                                                 int32_t n_heads, int32_t n_kv_heads, int32_t block_size,
                                                 int32_t max_blocks, int64_t q_stride, int64_t out_stride,
                                                 float scale, int32_t window, const float *k_scale,
                                                 const float *v_scale, int32_t fp8, int32_t head_dim)
{
    tc::await_inputs();
    attention_cu::prefill_any<__nv_bfloat16>(out, q, k_cache, v_cache, block_table, seq_lens, q_start, n_seqs,
                                             n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride,
                                             scale, window, k_scale, v_scale, fp8 != 0, head_dim);
}
/** Causal prefill attention over an FP8 E4M3 cache, head_dim 64: grid (n_tokens / 64 + n_seqs,
 *  n_heads), 128 threads, 38912 bytes of dynamic shared memory. window > 0: a query at position p attends only to positions p - window + 1 .. p. k_scale, v_scale
 *  (NULL: 1): each kv head's scales (f32 [n_kv_heads]); the cache holds values divided by them. */
extern "C" __global__ void tc_k_attn_prefill64_f16_f8(__half *out, const __half *q, const uint8_t *k_cache,
        const uint8_t *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window, const float *k_scale,
        const float *v_scale)
{
    tc::await_inputs();
    attention_cu::prefill<__half, tc::f8e4m3, 64>(out, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache), reinterpret_cast<const tc::f8e4m3 *>(v_cache), block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window, k_scale, v_scale);
}
/** Causal prefill attention over an FP8 E4M3 cache, head_dim 128: grid (n_tokens / 64 + n_seqs,
 *  n_heads), 128 threads, 71680 bytes of dynamic shared memory. window > 0: a query at position p attends only to positions p - window + 1 .. p. k_scale, v_scale
 *  (NULL: 1): each kv head's scales (f32 [n_kv_heads]); the cache holds values divided by them. */
extern "C" __global__ void tc_k_attn_prefill128_f16_f8(__half *out, const __half *q, const uint8_t *k_cache,
        const uint8_t *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window, const float *k_scale,
        const float *v_scale)
{
    tc::await_inputs();
    attention_cu::prefill<__half, tc::f8e4m3, 128>(out, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache), reinterpret_cast<const tc::f8e4m3 *>(v_cache), block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window, k_scale, v_scale);
}
/** Causal prefill attention over an FP8 E4M3 cache, head_dim 64: grid (n_tokens / 64 + n_seqs,
 *  n_heads), 128 threads, 38912 bytes of dynamic shared memory. window > 0: a query at position p attends only to positions p - window + 1 .. p. k_scale, v_scale
 *  (NULL: 1): each kv head's scales (f32 [n_kv_heads]); the cache holds values divided by them. */
extern "C" __global__ void tc_k_attn_prefill64_bf16_f8(__nv_bfloat16 *out, const __nv_bfloat16 *q, const uint8_t *k_cache,
        const uint8_t *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window, const float *k_scale,
        const float *v_scale)
{
    tc::await_inputs();
    attention_cu::prefill<__nv_bfloat16, tc::f8e4m3, 64>(out, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache), reinterpret_cast<const tc::f8e4m3 *>(v_cache), block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window, k_scale, v_scale);
}
/** Causal prefill attention over an FP8 E4M3 cache, head_dim 128: grid (n_tokens / 64 + n_seqs,
 *  n_heads), 128 threads, 71680 bytes of dynamic shared memory. window > 0: a query at position p attends only to positions p - window + 1 .. p. k_scale, v_scale
 *  (NULL: 1): each kv head's scales (f32 [n_kv_heads]); the cache holds values divided by them. */
extern "C" __global__ void tc_k_attn_prefill128_bf16_f8(__nv_bfloat16 *out, const __nv_bfloat16 *q, const uint8_t *k_cache,
        const uint8_t *v_cache, const int32_t *block_table, const int32_t *seq_lens, const int32_t *q_start,
        int32_t n_seqs, int32_t n_heads, int32_t n_kv_heads, int32_t block_size, int32_t max_blocks,
        int64_t q_stride, int64_t out_stride, float scale, int32_t window, const float *k_scale,
        const float *v_scale)
{
    tc::await_inputs();
    attention_cu::prefill<__nv_bfloat16, tc::f8e4m3, 128>(out, q, reinterpret_cast<const tc::f8e4m3 *>(k_cache), reinterpret_cast<const tc::f8e4m3 *>(v_cache), block_table, seq_lens, q_start, n_seqs, n_heads, n_kv_heads, block_size, max_blocks, q_stride, out_stride, scale, window, k_scale, v_scale);
}
