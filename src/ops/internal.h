/* Shared by the files of src/ops: the backend's layout, the CPU thread pool, element
 * conversions and the argument checks every op starts with. Not installed. */
#ifndef TC_OPS_INTERNAL_H
#define TC_OPS_INTERNAL_H
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include "ops/ops.h"
#include "runtime/internal.h"
#include "tc_cublas.h"

/* The CPU backend's workers: one job at a time, split into chunks that workers and the
 * calling thread claim from an atomic counter. */
typedef void (*tc__range_fn)(void *ctx, int64_t begin, int64_t end);
typedef struct tc__workers {
    pthread_t *threads;
    int count; /* worker threads, besides the caller */
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    uint64_t generation; /* bumped for each job */
    int busy;            /* workers still on the current job */
    bool stop;
    pthread_mutex_t submit; /* one job at a time */
    tc__range_fn fn;
    void *ctx;
    int64_t n, chunk;
    atomic_int_fast64_t next;
} tc__workers;

struct tc_backend {
    tc_backend_kind kind;
    char name[16];
    int threads;
    tc__workers workers; /* CPU */
    tc_context *ctx;     /* CUDA */
    tc_stream *stream;
    tc_pool *pool;
    tc_gemm_mode gemm;
    void *cublas;           /* cublasHandle_t, created at first use */
    bool cublas_tried;      /* a failed load is not retried */
    void *cublas_workspace; /* device address */
    size_t cublas_workspace_bytes;
    /* Scratch of ops' temporaries (CUDA), kept between calls so that a CUDA graph captured
     * over ops stays valid; ws_generation changes whenever the buffer moves. */
    CUdeviceptr ws;
    size_t ws_bytes;
    uint64_t ws_generation;
    /* Zeroed counters of kernels that hand work to the last block to finish (decode attention's
     * merge); every kernel leaves the counters it used at zero. Moving them bumps ws_generation. */
    CUdeviceptr counters;
    size_t counters_bytes;
    size_t shared_limit; /* tc_backend_set_shared_limit; 0: the device's */
    /* Pinned staging for large host-to-device copies (CUDA), made at the first one: the
     * workers copy a slot while the previous slot's transfer runs. */
    void *stage[3];
    tc_event *stage_done[3];
    int stage_next; /* the stage that the next upload fills first */
    bool matvec_l1; /* the matrix-vector kernels' carveouts are set and their waves known (matmul.c)
                     */
    int64_t matvec_wave[8]; /* blocks of each matrix-vector kernel resident at once, GPU-wide */
    int64_t qwave[1]; /* the same for the quantised f32 kernel (qweights.c; 0: not yet known) */
    int64_t qwave_mma[TC_DTYPE_COUNT][2]; /* and its tensor-core ones, f16 and bf16 x */
    int64_t qwave_q8[TC_DTYPE_COUNT];     /* and the integer batch-1 ones' (bf16 x; 0: none) */
    int64_t qwave_q8x2[TC_DTYPE_COUNT];   /* and the integer two-row ones' (0: none) */
    int64_t qwave_pair[4];                /* and the two-product ones' (tc__quant_pair) */
    unsigned qmv_shared;  /* the tensor-core ones' dynamic shared memory (their weight pipeline) */
    unsigned qmv2_shared; /* the two-row integer ones' (x's two rows of digits, the pipeline) */
    /* Blocks an SM of the batched quantised kernels (qweights.c), by type, f16/bf16 x, x's
     * 8-row tiles (their shared memory grows with them) and the stages' sizing (for one block
     * an SM or two); 0: not yet known. */
    int qmm_per_sm[TC_DTYPE_COUNT][2][8][2];
    /* And their clusters of 2 to 8 blocks (the shares of k) resident at once, GPU-wide; 0: not
     * yet known, -1: none (no clusters on the device, or the query failed). */
    int qmm_clusters[TC_DTYPE_COUNT][2][8][2][7];
    /* The same for the pair kernels (tc__quant_batch_pair), by pair. */
    int qmm_pair_per_sm[2][8][2];
    int qmm_pair_clusters[2][8][2][7];
};

/* Block-quantised tensors on CUDA (qweights.c): device bytes of n elements held as planes;
 * rows of file-layout blocks copied in (row0 on) and the whole tensor copied out; an
 * embedding gather; rows [r0, r0 + rows) of a product of at most TC_MATVEC_MAX_ROWS rows with
 * tc_linear's flags (bit 0 SwiGLU, bit 1 accumulate); and a product of any rows through row
 * tiles of dequantised weights handed to `gemm`: TC__QUANT_TILE_BYTES at most, which holds a
 * 7B model's largest matrix in one or two tiles (16 MiB tiles, which stayed in L2, made
 * products too narrow for cuBLAS: 137 TFLOP/s for 512 x 4096 x 11008 on the H100; the
 * products of more than a few rows are bound by arithmetic, not by reading the tile). */
#define TC__QUANT_TILE_BYTES ((size_t)96 << 20)
size_t tc__quant_device_bytes(tc_dtype dt, int64_t n);
tc_status tc__quant_upload(tc_tensor *t, int64_t row0, int64_t rows, const void *src);
/* One integer-packed matrix (a GPTQ, AWQ or compressed-tensors module's parts as its file holds
 * them, host memory) to be packed into GGUF blocks on the GPU; kernels/hfpack.cu's
 * tc_k_hfq_pack describes each field. */
typedef struct tc__quant_pack_desc {
    tc_dtype dtype; /* TC_DTYPE_Q4_0, Q4_1, Q4_1_G64, Q4_1_G128 or Q8_0 */
    int64_t out, in;
    const void *qw, *qz, *sc, *g_idx; /* qz and g_idx may be NULL */
    const uint32_t *perm; /* act-order: block input i is input perm[i] ([in]; NULL: in order) */
    const uint32_t *rows; /* row j is the parts' output rows[j] ([out]; NULL: in order) */
    size_t qw_bytes, qz_bytes, sc_bytes, g_idx_bytes;
    int64_t wk, wj, zg, zj, sg, sj, group;
    int kpack, jpack, bits, zpack, zero_offset, sc_type; /* sc_type: 0 f16, 1 bf16, 2 f32 */
    bool awq;
} tc__quant_pack_desc;
/* Rows [row0, row0 + d->out) of the CUDA block tensor t (d->in columns, of d->dtype) from d's
 * parts: uploaded, packed into blocks and repacked into planes on the GPU. */
tc_status tc__quant_pack(tc_tensor *t, int64_t row0, const tc__quant_pack_desc *d);
tc_status tc__quant_download(const tc_tensor *t, void *dst);
tc_status tc__quant_embedding(tc_tensor *out, const tc_tensor *table, const tc_tensor *ids);
/* Products of up to TC_MATVEC_MAX_ROWS rows of x from row r0 (flags: 1 SwiGLU, 2 accumulate,
 * 8 out f32 for 16-bit x). tc__quant_one_row says whether one row runs on the integer kernel,
 * which also takes flags 4 (x RMS-normalised first, times norm [k] of x's dtype where norm is
 * not NULL, with eps); tc__quant_matvec refuses flag 4 elsewhere. */
bool tc__quant_one_row(const tc_tensor *x, const tc_tensor *w, int64_t rows);
/* Whether `rows` rows of x run on an integer kernel (one row, or two where the type has a
 * two-row kernel on this GPU and x's digits fit its shared memory), which takes flags 4 and 8
 * (each row normalised by its own rms). */
bool tc__quant_int_rows(const tc_tensor *x, const tc_tensor *w, int64_t rows);
/* Two one-row products of the same x (flags 0 or 4, norm and eps as tc__quant_matvec) in one
 * launch, where the two weights' types have a kernel for it: tc__quant_pair gives its index
 * (-1: none, or x is not one row of bf16 for both). */
int tc__quant_pair(const tc_tensor *x, const tc_tensor *w_a, const tc_tensor *w_b);
tc_status tc__quant_matvec_pair(tc_tensor *out_a, tc_tensor *out_b, const tc_tensor *x,
                                const tc_tensor *w_a, const tc_tensor *w_b, int32_t flags,
                                const tc_tensor *norm, float eps);
tc_status tc__quant_matvec(tc_tensor *out, const tc_tensor *x, const tc_tensor *w, int64_t r0,
                           int64_t rows, int32_t flags, const tc_tensor *norm, float eps);
/* Products of tc__quant_batch_from(w's type) to TC__QUANT_BATCH_ROWS rows of 16-bit x
 * (batched decode) read and dequantise the weights once, on the tensor cores: out of x's dtype
 * or f32. tc__quant_batch_fits says whether the kernel takes x and w (on this GPU's shared
 * memory); tc__quant_batch is TC_ERR_UNSUPPORTED where it does not. */
#define TC__QUANT_BATCH_ROWS 64
bool tc__quant_batch_fits(const tc_tensor *x, const tc_tensor *w);
/* The rows of x of x_dtype from which products of weights of block type dt take the batched
 * kernels on b: 2 for the K-quants, whose 2-8 row kernels are the slower (H200, bench_ops quant,
 * 8 rows: Q4_K 11008 x 4096 23.4 -> 17.2 us, Q6_K 31.3 -> 18.1; 7B Q4_K_M at 2 / 3 / 4
 * sequences 572-578 / 806-808 / 1,015-1,016 -> 587-588 / 818-823 / 1,045-1,046 tokens/s with 2
 * instead of 5), or 3 where a K-quant has a two-row integer kernel for such x on b (Hopper,
 * bf16 x: qweights.c); 9 for the others (Q4_0, Q8_0, q4_1_g64 equal or slower in the batched
 * kernels at 8 rows). */
int tc__quant_batch_from(tc_backend *b, tc_dtype dt, tc_dtype x_dtype);
tc_status tc__quant_batch(tc_tensor *out, const tc_tensor *x, const tc_tensor *w);
/* x w_a^T into out_a and x w_b^T into out_b in one launch (tc_k_qmm_pair_*: 33-64 rows of bf16
 * x on Hopper, w_a Q4_K or Q5_K and w_b Q6_K, as a Q4_K_M or Q5_K_M layer's q/k and v): whether
 * it takes them, and the products (TC_ERR_UNSUPPORTED where it does not). */
bool tc__quant_batch_pair_fits(const tc_tensor *x, const tc_tensor *w_a, const tc_tensor *w_b);
tc_status tc__quant_batch_pair(tc_tensor *out_a, tc_tensor *out_b, const tc_tensor *x,
                               const tc_tensor *w_a, const tc_tensor *w_b);
/* How tc__quant_batch splits a product of `tiles` tiles of 128 weight rows and `steps` steps of
 * 256 of k of block type dt, launched `wave` blocks at once (two: at two blocks an SM): into
 * `shares` equal shares of k (grid.y), of which `cluster` (1: none) are one thread-block
 * cluster that adds its sums in shared memory. fits(blocks, ctx) says how many clusters of
 * that many blocks can be resident at once (<= 0: none); without it no clusters are taken. */
typedef struct {
    int64_t shares, cluster;
} tc__qmm_split;
tc__qmm_split tc__quant_batch_split(tc_dtype dt, int64_t tiles, int64_t steps, int64_t wave,
                                    bool two, int (*fits)(int64_t blocks, void *ctx), void *ctx);
/* Dequantise `bytes` of GGUF blocks of ggml type `ggml_type` (an IQ type, TQ1_0 or TQ2_0:
 * kernels/iq.cu) at src (host) into the contiguous CUDA tensor out (f32, f16 or bf16), whose
 * elements they must be exactly: the bytes go up as they are through the pinned staging and
 * the kernel converts them. TC_ERR_UNSUPPORTED for another type. */
tc_status tc__iq_upload(tc_tensor *out, int32_t ggml_type, const void *src, size_t bytes);
/* Workspace bytes tc__quant_gemm takes for rows of k elements of dtype act. */
size_t tc__quant_gemm_workspace(int64_t k, tc_dtype act);
tc_status tc__quant_gemm(tc_tensor *out, const tc_tensor *x, const tc_tensor *w,
                         tc_status (*gemm)(tc_tensor *, const tc_tensor *, const tc_tensor *));

/* Run fn over [0, n) in chunks of at least `grain` items on b's threads; returns when done. */
void tc__parallel_for(tc_backend *b, int64_t n, int64_t grain, tc__range_fn fn, void *ctx);
tc_status tc__workers_start(tc__workers *w, int count);
void tc__workers_stop(tc__workers *w);
/* The cuBLAS handle of a CUDA backend, created on first use (bound to its stream); NULL with
 * the loader's status when cuBLAS cannot be loaded. */
tc_status tc__backend_cublas(tc_backend *b, void **handle);
/* out (f32) = x w^T for x and w of one 16-bit dtype, more than TC_MATVEC_MAX_ROWS rows, on
 * cuBLAS (f32 accumulation and output): many rows' logits in one product; or for w quantised
 * and rows that tc__quant_batch takes. TC_ERR_UNSUPPORTED elsewhere (the caller then widens x
 * and runs tc_matmul). */
tc_status tc__matmul_widen(tc_tensor *out, const tc_tensor *x, const tc_tensor *w);
/* At least `bytes` of the CUDA backend's op scratch (one op's temporaries at a time: valid
 * until the next call, in stream order). */
tc_status tc__backend_workspace(tc_backend *b, size_t bytes, CUdeviceptr *out);
/* Bytes of dynamic shared memory a kernel of the CUDA backend may ask for per block (the
 * device's opt-in limit less room for static shared memory, or tc_backend_set_shared_limit's). */
size_t tc__backend_shared_room(const tc_backend *b);
/* At least `count` zeroed int32 counters of the CUDA backend (see tc_backend.counters). */
tc_status tc__backend_counters(tc_backend *b, size_t count, CUdeviceptr *out);
/* Copy bytes from host memory (pageable: a mapped file, say) to device memory of a CUDA
 * backend; src may be reused on return. Large copies go through pinned staging filled by the
 * backend's threads and may still be in flight, ordered before later work on its stream. */
tc_status tc__backend_upload(tc_backend *b, CUdeviceptr dst, const void *src, size_t bytes);

/* splitmix64's finaliser (Steele, Lea & Flood 2014): a 64-bit mix for random streams and
 * hashes. */
static inline uint64_t tc__mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Element conversions (round to nearest even; NaN stays NaN). */
static inline float tc__bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t tc__f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}
/* f16 to f32 without branches on the value's class: the exponent and mantissa bits moved into
 * place read as a float 2^112 too small, for subnormals too, so one exact multiply rebiases
 * them; infinities and NaNs are set apart. */
static inline float tc__f16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)(h & 0x7fff) << 13;
    float f;
    memcpy(&f, &u, 4);
    f *= 0x1p112f;
    memcpy(&u, &f, 4);
    if ((h & 0x7c00) == 0x7c00)
        u = 0x7f800000u | ((uint32_t)(h & 0x3ff) << 13);
    u |= (uint32_t)(h & 0x8000) << 16;
    memcpy(&f, &u, 4);
    return f;
}
uint16_t tc__f32_to_f16(float f);
/* OCP FP8 E4M3 (TC_DTYPE_F8E4M3): round to nearest even, finite values saturating at 448. */
float tc__f8e4m3_to_f32(uint8_t b);
uint8_t tc__f32_to_f8e4m3(float f);
/* Element i of a row of dtype dt (f32, f16, bf16, f8e4m3, i8 or a block type) as a float. */
float tc__load(tc_dtype dt, const void *row, int64_t i);
/* Store v as element i of a row of dtype dt (f32, f16, bf16 or f8e4m3). */
void tc__store(tc_dtype dt, void *row, int64_t i, float v);
/* Convert n elements of a row of dtype dt to floats. */
void tc__load_row(tc_dtype dt, const void *row, int64_t n, float *out);
/* n elements (whole blocks) of a block type's row in the file layout as f32 (qblock.c);
 * false for another dtype or a partial block. */
bool tc__dequant_row(tc_dtype dt, const void *row, int64_t n, float *out);
/* Element i of such a row (NaN for a dtype that is not a block type). */
float tc__dequant_one(tc_dtype dt, const void *row, int64_t i);
/* out[i][r] = x[r] . w_i for R (1 to 4) f32 rows x[r] of k elements and the W consecutive rows
 * w_i from w of a float type (f32, bf16, f16) or a block type in the file layout (k whole
 * blocks): the CPU products' inner loop (qdot.c). The same bits for a row whatever R is. False
 * for another dtype, a partial block or R out of range. */
bool tc__qdot(tc_dtype dt, const void *w, int W, const float *const *x, int R, int64_t k,
              float (*out)[4]);
/* The same from the baseline build, where tc__qdot may take the AVX2 one (for the tests: both
 * give the same bits). */
bool tc__qdot_baseline(tc_dtype dt, const void *w, int W, const float *const *x, int R, int64_t k,
                       float (*out)[4]);
/* out[r] = x[r] . w for the row w of block type dt dequantised (tc__dequant_row) to k floats:
 * the same bits as tc__qdot on the row itself, for products of many rows of x, which dequantise
 * each weight row once. */
bool tc__qdot_dequantised(tc_dtype dt, const float *w, const float *const *x, int R, int64_t k,
                          float out[4]);

/* Four lanes of f32 (GCC's and Clang's vector extension; SSE or NEON registers) for the CPU
 * paths' inner loops, which the compiler does not vectorise by itself at -O2. */
typedef float tc__f32x4 __attribute__((vector_size(16)));

static inline tc__f32x4 tc__load4(const float *p)
{
    tc__f32x4 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void tc__store4(float *p, tc__f32x4 v)
{
    memcpy(p, &v, sizeof v);
}

/* y += a x, n long. */
static inline void tc__axpy(float *y, float a, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        tc__store4(y + i, tc__load4(y + i) + a * tc__load4(x + i));
    for (; i < n; i++)
        y[i] += a * x[i];
}

/* The f32 dot product of the CPU paths: eight partial sums let the compiler vectorise without
 * reassociating by itself. */
static inline float tc__dot(const float *a, const float *b, int64_t n)
{
    float s[8] = { 0 };
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            s[j] += a[i + j] * b[i + j];
    float t = 0.0f;
    for (; i < n; i++)
        t += a[i] * b[i];
    return t + ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

/* Address of row r of a tensor whose rows (dimension 0) may be strided and whose other
 * dimensions are dense. */
static inline void *tc__row(const tc_tensor *t, int64_t r)
{
    return (char *)t->data + (size_t)(r * t->stride[0]) * tc_dtype_bytes(t->dtype, 1);
}

/* Argument checks: each records "op: what is wrong" (naming the tensor and its description)
 * as the last error and returns TC_ERR_INVALID_ARGUMENT. */
tc_status tc__check_tensor(const char *op, const char *name, const tc_tensor *t);
tc_status tc__check_dtype(const char *op, const char *name, const tc_tensor *t,
                          unsigned dtype_mask);
tc_status tc__check_ndim(const char *op, const char *name, const tc_tensor *t, int ndim);
tc_status tc__check_dim(const char *op, const char *name, const tc_tensor *t, int dim, int64_t want,
                        const char *what);
tc_status tc__check_same_backend(const char *op, const tc_tensor *a, const tc_tensor *b);
/* tc_rope's checks of q, k (may be NULL), pos and cfg. */
tc_status tc__check_rope(const char *op, const tc_tensor *q, const tc_tensor *k,
                         const tc_tensor *pos, const tc_rope_config *cfg);
/* k_cache's dtype is x's or f8e4m3 (on CUDA with 16-bit x). */
tc_status tc__check_kv_dtype(const char *op, const tc_tensor *k_cache, const tc_tensor *x);
/* tc_attention_store's argument checks (src/ops/attention.c), shared with tc_rope_store; on
 * the CPU they include every slot against the cache's size, so nothing is written before a
 * bad one is found. */
tc_status tc__check_store(const char *op, const tc_tensor *k_cache, const tc_tensor *v_cache,
                          const tc_tensor *k, const tc_tensor *v, const tc_tensor *slots);
/* The FP8 scales of opts (may be NULL) for caches like k_cache: checked (f32 [n_kv_heads],
 * contiguous, on the caches' backend) and their data in *ks and *vs; NULL where a scale is not
 * given or the cache is not f8e4m3. */
tc_status tc__kv_scales(const char *op, const tc_tensor *k_cache,
                        const struct tc_attention_opts *opts, const float **ks, const float **vs);
/* tc_attention_store's CPU body, for arguments tc__check_store accepted; ks, vs: the FP8 scales
 * per kv head (NULL: 1). */
void tc__attention_store_cpu(tc_tensor *k_cache, tc_tensor *v_cache, const tc_tensor *k,
                             const tc_tensor *v, const tc_tensor *slots, const float *ks,
                             const float *vs);
tc_status tc__check_rows_dense(const char *op, const char *name, const tc_tensor *t);
#define TC__MASK(dt) (1u << (dt))
#define TC__FLOATS (TC__MASK(TC_DTYPE_F32) | TC__MASK(TC_DTYPE_F16) | TC__MASK(TC_DTYPE_BF16))
/* Every block-quantised dtype. */
#define TC__QUANTS                                                                 \
    (TC__MASK(TC_DTYPE_Q4_0) | TC__MASK(TC_DTYPE_Q8_0) | TC__MASK(TC_DTYPE_Q4_1) | \
     TC__MASK(TC_DTYPE_Q5_0) | TC__MASK(TC_DTYPE_Q5_1) | TC__MASK(TC_DTYPE_Q2_K) | \
     TC__MASK(TC_DTYPE_Q3_K) | TC__MASK(TC_DTYPE_Q4_K) | TC__MASK(TC_DTYPE_Q5_K) | \
     TC__MASK(TC_DTYPE_Q6_K) | TC__MASK(TC_DTYPE_Q4_1_G64) | TC__MASK(TC_DTYPE_Q4_1_G128))
/* The dtypes a product's or an embedding's weights may have (on both backends). */
static inline unsigned tc__weight_dtypes(const tc_tensor *t)
{
    (void)t;
    return TC__FLOATS | TC__QUANTS;
}
/* What a KV cache may hold beside the activations' dtype. */
#define TC__KV_FP8 TC__MASK(TC_DTYPE_F8E4M3)

/* A launch configuration for `blocks` x `threads` on b's stream. */
static inline tc_launch_config tc__cfg(tc_backend *b, unsigned blocks, unsigned threads,
                                       uint32_t shared)
{
    tc_launch_config c = { { blocks, 1, 1 }, { threads, 1, 1 }, shared, b->stream };
    return c;
}
#endif /* TC_OPS_INTERNAL_H */

/* Run LAUNCH(suffix) with T typedef'd to the C type of float dtype dt (f32, f16 or bf16). */
#define TC__BY_DTYPE(st, dt, LAUNCH)                                                         \
    switch (dt) {                                                                            \
    case TC_DTYPE_F32: {                                                                     \
        typedef float T;                                                                     \
        (st) = LAUNCH(f32);                                                                  \
        break;                                                                               \
    }                                                                                        \
    case TC_DTYPE_F16: {                                                                     \
        typedef tc_half T;                                                                   \
        (st) = LAUNCH(f16);                                                                  \
        break;                                                                               \
    }                                                                                        \
    case TC_DTYPE_BF16: {                                                                    \
        typedef tc_bf16 T;                                                                   \
        (st) = LAUNCH(bf16);                                                                 \
        break;                                                                               \
    }                                                                                        \
    default:                                                                                 \
        (st) = tc_set_error(TC_ERR_INTERNAL, __func__, "no kernel for dtype %d", (int)(dt)); \
        break;                                                                               \
    }
/* The device address in a CUDA tensor as a typed pointer. */
#define TC__DEV(T, t) ((T *)(t)->data)
