/* Op benchmarks on the GPU: achieved GB/s (memory-bound ops, decode) or TFLOP/s (prefill)
 * against the ceilings of GPU.md (3.0 TB/s measured copy bandwidth; cuBLAS for products).
 * Inputs rotate through copies larger than L2 so the cache is not what is measured; each
 * figure is the median of 7 timings (CUDA events) of several repetitions after a warm-up.
 * Usage: bench_ops [all|norm|matvec|gemm|attention [HEAD_DIM]|quant [TYPE [ROWS [N K]]]|iq], or
 * bench_ops decode H KV BATCH LEN [fp8] (attention: head_dim 128 unless given: 64 and 128 have
 * kernels of their own, the other even sizes up to 256 the generic ones; quant: ROWS one of 1, 2,
 * 8, 16, 32, 64, 512, and weights [N x K] instead of Llama-2-7B's three shapes, K a multiple of
 * 256, N x K at most 2^30). Where nvcc built tools/floor.cu, each quantised product's weights are
 * first read by kernels that only read (the "read floor": the least time any kernel takes for
 * those bytes, launched the same way), and each product's time is given as a multiple of it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../tests/ops/oracle.h"
#include "check.h"

#define SKIP 77
#define BANDWIDTH_GBS 3000.0
#define SETS 4

static tc_backend *gpu;
static tc_event *ev0, *ev1;

typedef tc_status (*run_fn)(void *ctx, int set);

/* Median milliseconds of one run. */
static double time_ms(run_fn fn, void *ctx, int reps)
{
    tc_stream *s = tc_backend_stream(gpu);
    for (int i = 0; i < 3; i++)
        CHECK(fn(ctx, i % SETS));
    double t[7];
    for (int k = 0; k < 7; k++) {
        CHECK(tc_event_record(ev0, s));
        for (int i = 0; i < reps; i++)
            CHECK(fn(ctx, i % SETS));
        CHECK(tc_event_record(ev1, s));
        CHECK(tc_event_synchronize(ev1));
        float ms;
        CHECK(tc_event_elapsed_ms(ev0, ev1, &ms));
        t[k] = ms / reps;
    }
    return median(t, 7);
}

/* Median milliseconds of one run when `reps` runs are replayed as one CUDA graph, as the engine
 * replays a decode step: what the kernels cost without the host's launch overhead. */
static double time_graph_ms(run_fn fn, void *ctx, int reps)
{
    CUstream cs = tc_stream_handle(tc_backend_stream(gpu));
    for (int i = 0; i < 3; i++)
        CHECK(fn(ctx, i % SETS));
    CHECK(tc_cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    for (int i = 0; i < reps; i++)
        CHECK(fn(ctx, i % SETS));
    CUgraph graph = NULL;
    CHECK(tc_cuStreamEndCapture(cs, &graph));
    CUgraphExec exec = NULL;
    CHECK(tc_cuGraphInstantiateWithFlags(&exec, graph, 0));
    CHECK(tc_cuGraphDestroy(graph));
    CHECK(tc_cuGraphLaunch(exec, cs));
    double t[7];
    for (int k = 0; k < 7; k++) {
        CHECK(tc_event_record(ev0, tc_backend_stream(gpu)));
        CHECK(tc_cuGraphLaunch(exec, cs));
        CHECK(tc_event_record(ev1, tc_backend_stream(gpu)));
        CHECK(tc_event_synchronize(ev1));
        float ms;
        CHECK(tc_event_elapsed_ms(ev0, ev1, &ms));
        t[k] = ms / reps;
    }
    CHECK(tc_cuGraphExecDestroy(exec));
    return median(t, 7);
}

static void random_gpu(rng_t *r, tc_tensor *t, tc_dtype dt, int ndim, const int64_t *shape)
{
    double *v;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    /* Random bytes generated on the host once per size would be slow for GiB tensors: fill a
     * 16 MiB pattern and repeat it (values stay random-looking and finite). */
    size_t bytes = tc_dtype_bytes(dt, n), chunk = 16u << 20;
    int64_t pn = n < (int64_t)(chunk / 2) ? n : (int64_t)(chunk / 4 / 32 * 32);
    void *pat = random_data(r, dt, pn, -1, 1, &v);
    size_t pbytes = tc_dtype_bytes(dt, pn);
    free(v);
    CHECK(tc_tensor_init(t, gpu, dt, ndim, shape));
    for (size_t off = 0; off < bytes; off += pbytes) {
        size_t len = bytes - off < pbytes ? bytes - off : pbytes;
        CHECK(tc_stream_copy_h2d(tc_backend_stream(gpu), (CUdeviceptr)(uintptr_t)t->data + off, pat,
                                 len));
    }
    CHECK(tc_backend_synchronize(gpu));
    free(pat);
}

static void report_bw(const char *name, const char *shape, double ms, double bytes)
{
    double gbs = bytes / (ms * 1e-3) / 1e9;
    printf("%-22s %-28s %9.4f ms %8.0f GB/s  %5.1f%% of %.0f GB/s\n", name, shape, ms, gbs,
           100 * gbs / BANDWIDTH_GBS, BANDWIDTH_GBS);
}

/* Memory-bound ops, prefill-sized: 4096 tokens of a Llama-3-8B-shaped layer. */
typedef struct {
    tc_tensor x[SETS], res[SETS], out[SETS], w, q[SETS], k[SETS], pos, gu[SETS], table, ids;
} norm_ctx;
static tc_status run_norm(void *c, int s)
{
    norm_ctx *n = c;
    return tc_rmsnorm(&n->out[s], &n->res[s], &n->x[s], &n->w, 1e-5f);
}
static tc_status run_bias(void *c, int s)
{
    norm_ctx *n = c;
    return tc_add_bias(&n->res[s], &n->w);
}
static tc_status run_rope(void *c, int s)
{
    norm_ctx *n = c;
    tc_rope_config rc = { .head_dim = 128,
                          .theta = 500000,
                          .scaling = TC_ROPE_LLAMA3,
                          .factor = 8,
                          .low_freq_factor = 1,
                          .high_freq_factor = 4,
                          .original_max_position = 8192 };
    return tc_rope(&n->q[s], &n->k[s], &n->pos, &rc);
}
static tc_status run_swiglu(void *c, int s)
{
    norm_ctx *n = c;
    tc_tensor g, u;
    TC_TRY(tc_tensor_slice(&n->gu[s], 1, 0, 14336, &g));
    TC_TRY(tc_tensor_slice(&n->gu[s], 1, 14336, 14336, &u));
    return tc_swiglu(&n->out[s], &g, &u);
}
static tc_status run_embedding(void *c, int s)
{
    norm_ctx *n = c;
    return tc_embedding(&n->x[s], &n->table, &n->ids);
}

static void bench_norm(rng_t *r)
{
    norm_ctx *c = calloc(1, sizeof *c);
    const int64_t T = 4096, D = 4096, F = 14336;
    for (int s = 0; s < SETS; s++) {
        random_gpu(r, &c->x[s], TC_DTYPE_BF16, TC_SHAPE(T, D));
        random_gpu(r, &c->res[s], TC_DTYPE_BF16, TC_SHAPE(T, D));
        random_gpu(r, &c->q[s], TC_DTYPE_BF16, TC_SHAPE(T, 32, 128));
        random_gpu(r, &c->k[s], TC_DTYPE_BF16, TC_SHAPE(T, 8, 128));
    }
    random_gpu(r, &c->w, TC_DTYPE_BF16, TC_SHAPE(D));
    int32_t *pos = malloc(sizeof(int32_t) * T);
    for (int i = 0; i < T; i++)
        pos[i] = i;
    CHECK(tc_tensor_init_from_host(&c->pos, gpu, TC_DTYPE_I32, TC_SHAPE(T), pos,
                                   sizeof(int32_t) * T));
    for (int s = 0; s < SETS; s++)
        CHECK(tc_tensor_init(&c->out[s], gpu, TC_DTYPE_BF16, TC_SHAPE(T, D)));
    double ms = time_ms(run_norm, c, 10);
    report_bw("rmsnorm+residual bf16", "[4096 x 4096]", ms, 4.0 * T * D * 2 + D * 2);
    ms = time_ms(run_bias, c, 10);
    report_bw("add_bias bf16", "[4096 x 4096]", ms, 2.0 * T * D * 2 + D * 2);
    ms = time_ms(run_rope, c, 10);
    report_bw("rope llama3 bf16", "q [4096,32,128] k [4096,8,128]", ms,
              2.0 * T * 40 * 128 * 2 + T * 4);
    for (int s = 0; s < SETS; s++) {
        tc_tensor_deinit(&c->out[s]);
        tc_tensor_deinit(&c->q[s]);
        tc_tensor_deinit(&c->k[s]);
        random_gpu(r, &c->gu[s], TC_DTYPE_BF16, TC_SHAPE(T / 4, 2 * F));
        CHECK(tc_tensor_init(&c->out[s], gpu, TC_DTYPE_BF16, TC_SHAPE(T / 4, F)));
    }
    ms = time_ms(run_swiglu, c, 10);
    report_bw("swiglu bf16", "[1024 x 14336] (fused halves)", ms, 3.0 * (T / 4) * F * 2);
    random_gpu(r, &c->table, TC_DTYPE_BF16, TC_SHAPE(128256, D));
    for (int i = 0; i < T; i++)
        pos[i] = (int32_t)rng_int(r, 128256);
    CHECK(tc_tensor_init_from_host(&c->ids, gpu, TC_DTYPE_I32, TC_SHAPE(T), pos,
                                   sizeof(int32_t) * T));
    ms = time_ms(run_embedding, c, 10);
    report_bw("embedding bf16", "4096 ids of [128256 x 4096]", ms, 2.0 * T * D * 2 + T * 4);
    for (int s = 0; s < SETS; s++) {
        tc_tensor_deinit(&c->x[s]), tc_tensor_deinit(&c->res[s]), tc_tensor_deinit(&c->out[s]);
        tc_tensor_deinit(&c->gu[s]);
    }
    tc_tensor_deinit(&c->w), tc_tensor_deinit(&c->pos), tc_tensor_deinit(&c->table),
        tc_tensor_deinit(&c->ids);
    free(pos);
    free(c);
}

typedef struct {
    tc_tensor x, w[SETS], out;
} mm_ctx;
static tc_status run_mm(void *c, int s)
{
    mm_ctx *m = c;
    return tc_matmul(&m->out, &m->x, &m->w[s]);
}

static void bench_matvec(rng_t *r)
{
    const int64_t shapes[][2] = {
        { 4096, 4096 }, { 14336, 4096 }, { 4096, 14336 }, { 128256, 2048 }
    };
    /* Replayed in a graph, as the engine runs decode steps (16 and 64 rows run cuBLAS: what the
     * batched quantised products are measured against). */
    const int64_t rows[] = { 1, 8, 16, 64 };
    for (int si = 0; si < 4; si++)
        for (int ri = 0; ri < 4; ri++) {
            mm_ctx c;
            int64_t n = shapes[si][0], k = shapes[si][1], m = rows[ri];
            random_gpu(r, &c.x, TC_DTYPE_BF16, TC_SHAPE(m, k));
            for (int s = 0; s < SETS; s++)
                random_gpu(r, &c.w[s], TC_DTYPE_BF16, TC_SHAPE(n, k));
            CHECK(tc_tensor_init(&c.out, gpu, TC_DTYPE_BF16, TC_SHAPE(m, n)));
            double ms = time_graph_ms(run_mm, &c, 20);
            char name[32], shape[48];
            snprintf(name, sizeof name, "matvec bf16 m=%lld", (long long)m);
            snprintf(shape, sizeof shape, "w [%lld x %lld]", (long long)n, (long long)k);
            report_bw(name, shape, ms, 2.0 * n * k + 2.0 * m * (n + k));
            tc_tensor_deinit(&c.x), tc_tensor_deinit(&c.out);
            for (int s = 0; s < SETS; s++)
                tc_tensor_deinit(&c.w[s]);
        }
}

/* A block-quantised tensor of random blocks: a 1 MiB pattern of them repeated, copied up in
 * the file layout (the backend converts it to its planes). */
static void random_quant(rng_t *r, tc_tensor *t, tc_dtype dt, int64_t n, int64_t k)
{
    double *v;
    int64_t be = tc_dtype_block(dt), pn = (int64_t)((1u << 20) / tc_dtype_bytes(dt, be)) * be;
    pn = pn < n * k ? pn : n * k;
    void *pat = random_data(r, dt, pn, -1, 1, &v);
    size_t bytes = tc_dtype_bytes(dt, n * k), pbytes = tc_dtype_bytes(dt, pn);
    char *all = malloc(bytes);
    for (size_t off = 0; off < bytes; off += pbytes)
        memcpy(all + off, pat, bytes - off < pbytes ? bytes - off : pbytes);
    CHECK(tc_tensor_init_from_host(t, gpu, dt, TC_SHAPE(n, k), all, bytes));
    CHECK(tc_backend_synchronize(gpu));
    free(all), free(pat), free(v);
}

/* Quantised weights are small: 16 copies, so that even 4096 x 4096 in 4 bits (9 MiB) rotates
 * through more than L2 holds. */
#define QSETS 16
typedef struct {
    tc_tensor x, w[QSETS], out;
    int next;
} qmm_ctx;
static tc_status run_qmm(void *c, int s)
{
    qmm_ctx *m = c;
    (void)s;
    return tc_matmul(&m->out, &m->x, &m->w[m->next++ % QSETS]);
}

/* Each quantised type's products at Llama-2-7B's shapes: decode (1 and 8 rows) and batched
 * decode (16, 32 and 64 rows, which read the weights once too) against the bandwidth, and a
 * 512-row prefill product (dequantised tiles and cuBLAS) in TFLOP/s. `bench_ops quant [type
 * [rows]]`: one type, one row count of x. */
/* The rows of x each quantised product is timed at. */
static const int64_t quant_rows[] = { 1, 2, 8, 16, 32, 64, 512 };
#define N_QUANT_ROWS (sizeof quant_rows / sizeof quant_rows[0])

#ifdef TC_BENCH_FLOOR
#include "fl_kernels.h"

/* Read floors (tools/floor.cu): the least time in which a kernel that only reads reads a
 * product's weight bytes, timed as the products are (a graph of overlapped launches, QSETS
 * buffers in rotation), as the best of several ways: 16-byte loads at 1-8 blocks of 256
 * threads an SM, and on Hopper bulk copies into rings of 8-32 KiB chunks at 1-4 blocks an SM. */
typedef struct {
    tc_kmodule *mod;
    tc_tensor buf[QSETS], sink;
    size_t bytes;
    int bulk, next;
    unsigned grid;
    int32_t chunk, stages;
} floor_ctx;
static floor_ctx floors;

static tc_status run_floor(void *c, int s)
{
    floor_ctx *f = c;
    (void)s;
    const tc_tensor *b = &f->buf[f->next++ % QSETS];
    tc_launch_config cfg = { tc_dim1(f->grid), tc_dim1(f->bulk ? 32 : 256),
                             f->bulk ? (uint32_t)(f->chunk * f->stages) : 0,
                             tc_backend_stream(gpu) };
    if (f->bulk)
        return fl_launch_floor_bulk(f->mod, cfg, (const uint8_t *)b->data,
                                    (int64_t)(f->bytes / (size_t)f->chunk), f->chunk, f->stages,
                                    0x9e3779b9u, (uint32_t *)f->sink.data);
    return fl_launch_floor_read(f->mod, cfg, (const uint32_t *)b->data, (int64_t)(f->bytes / 16),
                                0x9e3779b9u, (uint32_t *)f->sink.data);
}

/* The least milliseconds reading `bytes` (a multiple of 32 KiB, at most `most`) takes, and in
 * how[] which way gave it; overlapped (each launch starting as the one before it ends: they
 * wait before their one store) or each starting once the one before has finished. The buffers
 * are made on the first call, `most` bytes each. */
static double read_floor(size_t bytes, size_t most, bool overlap, char *how, size_t how_size)
{
    floor_ctx *f = &floors;
    tc_device_info info;
    CHECK(tc_device_info_get(0, &info));
    if (!f->mod) {
        CHECK(tc_kmodule_create(tc_backend_context(gpu), &fl_kernels, &f->mod));
        for (int s = 0; s < QSETS; s++) {
            CHECK(tc_tensor_init(&f->buf[s], gpu, TC_DTYPE_I32, TC_SHAPE((int64_t)(most / 4))));
            CHECK(tc_stream_memset(tc_backend_stream(gpu), (CUdeviceptr)(uintptr_t)f->buf[s].data,
                                   0x5a, most));
        }
        CHECK(tc_tensor_init(&f->sink, gpu, TC_DTYPE_I32, TC_SHAPE(1)));
    }
    static const int32_t rings[][3] = { /* chunk KiB, stages, blocks an SM */
                                        { 16, 4, 1 }, { 16, 4, 2 }, { 16, 4, 3 }, { 32, 4, 1 },
                                        { 32, 3, 2 }, { 8, 8, 2 },  { 8, 4, 4 },  { 8, 8, 3 }
    };
    const int n_read = 4, n_bulk = info.cc_major >= 9 ? (int)(sizeof rings / sizeof rings[0]) : 0;
    double best = 1e30;
    f->bytes = bytes;
    tc_kmodule_set_overlap(f->mod, overlap);
    for (int i = 0; i < n_read + n_bulk; i++) {
        f->bulk = i >= n_read;
        if (f->bulk) {
            f->chunk = rings[i - n_read][0] * 1024;
            f->stages = rings[i - n_read][1];
            f->grid = (unsigned)(rings[i - n_read][2] * info.sm_count);
        } else
            f->grid = (unsigned)((1 << i) * info.sm_count);
        double ms = time_graph_ms(run_floor, f, 32);
        if (ms < best) {
            best = ms;
            if (f->bulk)
                snprintf(how, how_size, "bulk %d KiB x %d, %d/SM", f->chunk / 1024, f->stages,
                         rings[i - n_read][2]);
            else
                snprintf(how, how_size, "loads, %d/SM", 1 << i);
        }
    }
    return best;
}

static void floors_free(void)
{
    if (!floors.mod)
        return;
    for (int s = 0; s < QSETS; s++)
        tc_tensor_deinit(&floors.buf[s]);
    tc_tensor_deinit(&floors.sink);
    tc_kmodule_destroy(floors.mod);
    floors.mod = NULL;
}
#endif

static void bench_quant(rng_t *r, const char *only, int64_t only_m, int64_t only_n, int64_t only_k)
{
    const tc_dtype qs[] = { TC_DTYPE_Q4_0, TC_DTYPE_Q4_1, TC_DTYPE_Q5_0,     TC_DTYPE_Q5_1,
                            TC_DTYPE_Q8_0, TC_DTYPE_Q2_K, TC_DTYPE_Q3_K,     TC_DTYPE_Q4_K,
                            TC_DTYPE_Q5_K, TC_DTYPE_Q6_K, TC_DTYPE_Q4_1_G64, TC_DTYPE_Q4_1_G128 };
    int64_t shapes[][2] = { { 4096, 4096 }, { 11008, 4096 }, { 4096, 11008 } };
    int n_shapes = 3;
    if (only_n > 0)
        shapes[0][0] = only_n, shapes[0][1] = only_k, n_shapes = 1;
#ifdef TC_BENCH_FLOOR
    /* The floor's buffers (made at its first use) hold the largest weights of the shapes, as
     * Q8_0 (8.5 bits a weight). */
    size_t most = 0;
    for (int si = 0; si < n_shapes; si++) {
        size_t b = (size_t)shapes[si][0] * (size_t)shapes[si][1] * 17 / 16;
        most = b > most ? b : most;
    }
#endif
    for (size_t qi = 0; qi < sizeof qs / sizeof qs[0]; qi++) {
        if (only && strcmp(only, tc_dtype_name(qs[qi])))
            continue;
        for (int si = 0; si < n_shapes; si++) {
            int64_t n = shapes[si][0], k = shapes[si][1];
            qmm_ctx c = { .next = 0 };
            for (int s = 0; s < QSETS; s++)
                random_quant(r, &c.w[s], qs[qi], n, k);
            double wbytes = (double)tc_dtype_bytes(qs[qi], n * k);
#ifdef TC_BENCH_FLOOR
            /* The floor of these bytes overlapped, and serial (each launch waiting for the one
             * before: what a kernel pays whose successor cannot start beside it, as the
             * products' register use keeps theirs from doing). */
            char how[48], fshape[96];
            size_t fb = (size_t)wbytes / 32768 * 32768;
            double serial_ms = read_floor(fb, most, false, how, sizeof how);
            snprintf(fshape, sizeof fshape, "%zu bytes (%s)", fb, how);
            report_bw("read floor, serial", fshape, serial_ms, (double)fb);
            double floor_ms = read_floor(fb, most, true, how, sizeof how);
            snprintf(fshape, sizeof fshape, "%zu bytes (%s)", fb, how);
            report_bw("read floor", fshape, floor_ms, (double)fb);
#endif
            for (size_t mi = 0; mi < N_QUANT_ROWS; mi++) {
                int64_t m = quant_rows[mi];
                if (only_m > 0 && m != only_m)
                    continue;
                random_gpu(r, &c.x, TC_DTYPE_BF16, TC_SHAPE(m, k));
                CHECK(tc_tensor_init(&c.out, gpu, TC_DTYPE_BF16, TC_SHAPE(m, n)));
                /* Decode products as the engine runs them (replayed in a graph): a 4-bit
                 * 4096 x 4096 product takes about 3 us, less than a launch from the host. */
                double ms_ = m > 64 ? time_ms(run_qmm, &c, 5) : time_graph_ms(run_qmm, &c, 32);
                char name[32], shape[48];
                snprintf(name, sizeof name, "%s m=%lld", tc_dtype_name(qs[qi]), (long long)m);
                snprintf(shape, sizeof shape, "w [%lld x %lld]", (long long)n, (long long)k);
                if (m <= 64) {
                    report_bw(name, shape, ms_, wbytes + 2.0 * m * (n + k));
#ifdef TC_BENCH_FLOOR
                    printf("%-22s %-28s %9.2fx the read floor\n", "", "", ms_ / floor_ms);
#endif
                } else
                    printf("%-22s %-28s %9.4f ms %8.1f TFLOP/s\n", name, shape, ms_,
                           2.0 * m * n * k / ms_ / 1e9);
                tc_tensor_deinit(&c.x), tc_tensor_deinit(&c.out);
            }
            for (int s = 0; s < QSETS; s++)
                tc_tensor_deinit(&c.w[s]);
        }
    }
}

static void bench_gemm(rng_t *r)
{
    const int64_t shapes[][3] = {
        { 512, 4096, 4096 }, { 4096, 4096, 4096 }, { 4096, 14336, 4096 }, { 4096, 4096, 14336 }
    };
    for (int si = 0; si < 4; si++) {
        mm_ctx c;
        int64_t m = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
        random_gpu(r, &c.x, TC_DTYPE_BF16, TC_SHAPE(m, k));
        for (int s = 0; s < SETS; s++)
            random_gpu(r, &c.w[s], TC_DTYPE_BF16, TC_SHAPE(n, k));
        CHECK(tc_tensor_init(&c.out, gpu, TC_DTYPE_BF16, TC_SHAPE(m, n)));
        double flop = 2.0 * m * n * k;
        tc_backend_set_gemm(gpu, TC_GEMM_CUBLAS);
        double cub = time_ms(run_mm, &c, 10);
        tc_backend_set_gemm(gpu, TC_GEMM_OWN);
        double own = time_ms(run_mm, &c, 10);
        tc_backend_set_gemm(gpu, TC_GEMM_OWN_PORTABLE);
        double port = time_ms(run_mm, &c, 10);
        tc_backend_set_gemm(gpu, TC_GEMM_AUTO);
        printf("gemm bf16 [%5lld x %5lld x %5lld]  cublas %8.4f ms %6.1f TFLOP/s   own %8.4f ms "
               "%6.1f TFLOP/s  own = %5.1f%% of cublas  (portable kernel %6.1f TFLOP/s, %5.1f%%)\n",
               (long long)m, (long long)n, (long long)k, cub, flop / cub / 1e9, own,
               flop / own / 1e9, 100 * cub / own, flop / port / 1e9, 100 * cub / port);
        tc_tensor_deinit(&c.x), tc_tensor_deinit(&c.out);
        for (int s = 0; s < SETS; s++)
            tc_tensor_deinit(&c.w[s]);
    }
}

/* Caches of several sets, so that the small ones (16 MiB for batch 1 with 8 KV heads) are read
 * from memory rather than from L2. */
typedef struct {
    tc_tensor q, out, kc[SETS], vc[SETS], table, lens, qstart;
    float scale;
} at_ctx;
static tc_status run_decode(void *c, int s)
{
    at_ctx *a = c;
    /* As in a decode step (the kernel before wrote at most the newest rows; here it is the
     * previous decode, which writes none). */
    const tc_attention_opts opts = { .fresh_rows = 1 };
    return tc_attention_decode_ex(&a->out, &a->q, &a->kc[s], &a->vc[s], &a->table, &a->lens,
                                  a->scale, &opts);
}
static tc_status run_prefill(void *c, int s)
{
    at_ctx *a = c;
    return tc_attention_prefill(&a->out, &a->q, &a->kc[s], &a->vc[s], &a->table, &a->lens,
                                &a->qstart, a->scale);
}

static void make_cache(rng_t *r, at_ctx *a, int64_t batch, int64_t len, int64_t q_rows, int64_t H,
                       int64_t KV, int64_t hd, tc_dtype kv_dt)
{
    const int64_t bs = 16, mb = (len + bs - 1) / bs;
    for (int s = 0; s < SETS; s++) {
        random_gpu(r, &a->kc[s], kv_dt, TC_SHAPE(batch * mb, bs, KV, hd));
        random_gpu(r, &a->vc[s], kv_dt, TC_SHAPE(batch * mb, bs, KV, hd));
    }
    random_gpu(r, &a->q, TC_DTYPE_BF16, TC_SHAPE(q_rows, H, hd));
    CHECK(tc_tensor_init(&a->out, gpu, TC_DTYPE_BF16, TC_SHAPE(q_rows, H, hd)));
    int32_t *tbl = malloc(sizeof(int32_t) * (size_t)(batch * mb)),
            *lens = malloc(sizeof(int32_t) * (size_t)batch);
    int32_t qs[2] = { 0, (int32_t)q_rows };
    for (int64_t i = 0; i < batch * mb; i++)
        tbl[i] = (int32_t)i;
    for (int64_t i = 0; i < batch; i++)
        lens[i] = (int32_t)len;
    CHECK(tc_tensor_init_from_host(&a->table, gpu, TC_DTYPE_I32, TC_SHAPE(batch, mb), tbl,
                                   sizeof(int32_t) * (size_t)(batch * mb)));
    CHECK(tc_tensor_init_from_host(&a->lens, gpu, TC_DTYPE_I32, TC_SHAPE(batch), lens,
                                   sizeof(int32_t) * (size_t)batch));
    CHECK(tc_tensor_init_from_host(&a->qstart, gpu, TC_DTYPE_I32, TC_SHAPE(2), qs, sizeof qs));
    a->scale = (float)(1 / sqrt((double)hd));
    free(tbl), free(lens);
}
static void free_cache(at_ctx *a)
{
    tc_tensor_deinit(&a->q), tc_tensor_deinit(&a->out);
    for (int s = 0; s < SETS; s++)
        tc_tensor_deinit(&a->kc[s]), tc_tensor_deinit(&a->vc[s]);
    tc_tensor_deinit(&a->table), tc_tensor_deinit(&a->lens), tc_tensor_deinit(&a->qstart);
}

/* One decode case (H KV batch len, bf16 or FP8 cache), timed from a graph: for a profiler. */
static void bench_decode_case(rng_t *r, int argc, char **argv)
{
    if (argc < 6 || (argc > 6 && strcmp(argv[6], "fp8"))) {
        fprintf(stderr, "usage: bench_ops decode H KV BATCH LEN [fp8]\n");
        exit(2);
    }
    int64_t H = atoll(argv[2]), KV = atoll(argv[3]), B = atoll(argv[4]), len = atoll(argv[5]);
    if (H < 1 || KV < 1 || H % KV || B < 1 || len < 1) {
        fprintf(stderr, "bench_ops decode: bad H KV BATCH LEN\n");
        exit(2);
    }
    tc_dtype kv_dt = argc > 6 ? TC_DTYPE_F8E4M3 : TC_DTYPE_BF16;
    at_ctx a;
    make_cache(r, &a, B, len, B, H, KV, 128, kv_dt);
    report_bw(argc > 6 ? "attn decode graph, fp8 cache" : "attn decode graph", argv[5],
              time_graph_ms(run_decode, &a, 16),
              2.0 * B * len * KV * 128 * (double)tc_dtype_bytes(kv_dt, 1));
    free_cache(&a);
}

static void bench_attention(rng_t *r, int64_t hd)
{
    /* The cases (a 4096-token cache), then the short caches of batch-1 decode steps;
     * each timed launch by launch and replayed from a graph (as the engine's decode step). */
    const int64_t cases[][5] = { { 32, 32, 1, 4096, 0 },  { 32, 32, 32, 4096, 0 },
                                 { 32, 8, 1, 4096, 0 },   { 32, 8, 32, 4096, 0 },
                                 { 32, 32, 1, 256, 0 },   { 32, 8, 1, 256, 0 },
                                 { 32, 32, 32, 4096, 1 }, { 32, 8, 1, 4096, 1 } };
    for (int ci = 0; ci < 8; ci++) {
        at_ctx a;
        int64_t H = cases[ci][0], KV = cases[ci][1], B = cases[ci][2], len = cases[ci][3];
        tc_dtype kv_dt = cases[ci][4] ? TC_DTYPE_F8E4M3 : TC_DTYPE_BF16;
        make_cache(r, &a, B, len, B, H, KV, hd, kv_dt);
        double bytes = 2.0 * B * len * KV * hd * (double)tc_dtype_bytes(kv_dt, 1);
        char name[40], shape[56];
        snprintf(shape, sizeof shape, "H %lld KV %lld hd %lld len %lld%s", (long long)H,
                 (long long)KV, (long long)hd, (long long)len, cases[ci][4] ? " fp8" : "");
        snprintf(name, sizeof name, "attn decode batch %lld", (long long)B);
        report_bw(name, shape, time_ms(run_decode, &a, 20), bytes);
        snprintf(name, sizeof name, "  graph, batch %lld", (long long)B);
        report_bw(name, shape, time_graph_ms(run_decode, &a, 64), bytes);
        free_cache(&a);
    }
    at_ctx a;
    make_cache(r, &a, 1, 4096, 4096, 32, 8, hd, TC_DTYPE_BF16);
    double ms = time_ms(run_prefill, &a, 3);
    double flop = 4.0 * 4096.0 * 4096.0 / 2 * 32 * (double)hd;
    char shape[56];
    snprintf(shape, sizeof shape, "4096 tokens H 32 KV 8 hd %lld", (long long)hd);
    printf("%-22s %-28s %9.4f ms %8.1f TFLOP/s (causal)\n", "attn prefill bf16", shape, ms,
           flop / ms / 1e9);
    free_cache(&a);
}

/* The load-time dequantisation of the IQ and TQ types (kernels/iq.cu) into bf16, a
 * Llama-3-8B feed-forward matrix (14336 x 4096) of random blocks already on the GPU: bytes
 * read and written against the bandwidth (it runs once per load, so a fraction of it is
 * plenty). */
typedef struct {
    tc_tensor out;
    void *raw;
    int32_t type;
    int64_t blocks;
    tc_launch_config cfg;
} iq_ctx;
static tc_status run_iq(void *c, int s)
{
    (void)s;
    iq_ctx *q = c;
    return tc_launch_iq_dequant(q->cfg, q->out.data, (int32_t)q->out.dtype, (const uint8_t *)q->raw,
                                q->type, q->blocks);
}
static void bench_iq(rng_t *r)
{
    static const struct {
        const char *name;
        int32_t type;
        int64_t be, bb;
    } types[] = {
        { "iq2_xxs", 16, 256, 66 }, { "iq2_xs", 17, 256, 74 },  { "iq3_xxs", 18, 256, 98 },
        { "iq1_s", 19, 256, 50 },   { "iq4_nl", 20, 32, 18 },   { "iq3_s", 21, 256, 110 },
        { "iq2_s", 22, 256, 82 },   { "iq4_xs", 23, 256, 136 }, { "iq1_m", 29, 256, 56 },
        { "tq1_0", 34, 256, 54 },   { "tq2_0", 35, 256, 66 },
    };
    int64_t rows = 14336, cols = 4096, n = rows * cols;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        iq_ctx q = { .type = types[i].type, .blocks = n / types[i].be };
        size_t bytes = (size_t)(q.blocks * types[i].bb);
        uint8_t *host = malloc(bytes);
        for (size_t j = 0; j < bytes; j++)
            host[j] = (uint8_t)rng_next(r);
        CHECK(tc_backend_alloc(gpu, bytes, &q.raw));
        CHECK(
            tc_stream_copy_h2d(tc_backend_stream(gpu), (CUdeviceptr)(uintptr_t)q.raw, host, bytes));
        CHECK(tc_tensor_init(&q.out, gpu, TC_DTYPE_BF16, TC_SHAPE(rows, cols)));
        CHECK(tc_launch_config_1d(tc_backend_stream(gpu), TC_KERNEL_IQ_DEQUANT, n / 32, &q.cfg));
        double ms = time_ms(run_iq, &q, 3);
        char what[64];
        snprintf(what, sizeof what, "iq dequant %s", types[i].name);
        report_bw(what, "14336x4096 -> bf16", ms, (double)bytes + 2.0 * (double)n);
        tc_tensor_deinit(&q.out);
        tc_backend_free(gpu, q.raw);
        free(host);
    }
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "all";
    int64_t rows = 0, qn = 0, qk = 0;
    if (!strcmp(what, "quant") && argc > 4) {
        char *end_n, *end_k;
        qn = strtoll(argv[4], &end_n, 10);
        qk = argc > 5 ? strtoll(argv[5], &end_k, 10) : 0;
        /* (16 copies of the weights and as many of the floor's: 2^30 weights take 34 GiB) */
        if (argc != 6 || *end_n || *end_k || qn < 1 || qn > (1 << 20) || qk < 256 ||
            qk > (1 << 20) || qk % 256 || qn * qk > (1LL << 30)) {
            fprintf(stderr, "bench_ops quant TYPE ROWS N K: N from 1 to 1048576, K a multiple of "
                            "256 up to 1048576, N x K at most 2^30\n");
            return 2;
        }
    }
    if (!strcmp(what, "quant") && argc > 3) {
        rows = atoll(argv[3]);
        bool known = false;
        for (size_t i = 0; i < N_QUANT_ROWS; i++)
            known |= quant_rows[i] == rows;
        if (!known) {
            fprintf(stderr, "bench_ops quant: ROWS is one of 1, 2, 8, 16, 32, 64, 512 (got %s)\n",
                    argv[3]);
            return 2;
        }
    }
    tc_status st = tc_backend_create_cuda(0, 0, &gpu);
    if (st == TC_ERR_LIBRARY_NOT_FOUND || st == TC_ERR_NO_DEVICE) {
        printf("skipped: %s\n", tc_last_error());
        return SKIP;
    }
    CHECK(st);
    CHECK(tc_event_create(tc_backend_context(gpu), true, &ev0));
    CHECK(tc_event_create(tc_backend_context(gpu), true, &ev1));
    tc_device_info info;
    CHECK(tc_device_info_get(0, &info));
    printf("bench_ops on %s: ceilings %.0f GB/s (measured copy), cuBLAS for products\n", info.name,
           BANDWIDTH_GBS);
    rng_t r = { 77 };
    if (!strcmp(what, "all") || !strcmp(what, "norm"))
        bench_norm(&r);
    if (!strcmp(what, "all") || !strcmp(what, "matvec"))
        bench_matvec(&r);
    if (!strcmp(what, "all") || !strcmp(what, "gemm"))
        bench_gemm(&r);
    if (!strcmp(what, "all") || !strcmp(what, "attention"))
        bench_attention(&r, !strcmp(what, "attention") && argc > 2 ? atoll(argv[2]) : 128);
    if (!strcmp(what, "decode"))
        bench_decode_case(&r, argc, argv);
    if (!strcmp(what, "all") || !strcmp(what, "quant"))
        bench_quant(&r, !strcmp(what, "quant") && argc > 2 ? argv[2] : NULL, rows, qn, qk);
    if (!strcmp(what, "iq"))
        bench_iq(&r);
#ifdef TC_BENCH_FLOOR
    floors_free();
#endif
    tc_event_destroy(ev0);
    tc_event_destroy(ev1);
    tc_backend_destroy(gpu);
    return 0;
}
