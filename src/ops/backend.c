/* CPU and CUDA backends: the CPU thread pool, and the CUDA context, stream, pool and lazily
 * created cuBLAS handle that every op on a CUDA tensor uses. */
#include <stdio.h>
#include <unistd.h>
#include "ops/internal.h"
#include "runtime/host.h"

static void *worker_main(void *arg)
{
    tc__workers *w = arg;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&w->lock);
        while (!w->stop && w->generation == seen)
            pthread_cond_wait(&w->wake, &w->lock);
        if (w->stop) {
            pthread_mutex_unlock(&w->lock);
            return NULL;
        }
        seen = w->generation;
        pthread_mutex_unlock(&w->lock);
        for (;;) {
            int64_t begin = atomic_fetch_add(&w->next, w->chunk);
            if (begin >= w->n)
                break;
            int64_t end = begin + w->chunk < w->n ? begin + w->chunk : w->n;
            w->fn(w->ctx, begin, end);
        }
        pthread_mutex_lock(&w->lock);
        if (--w->busy == 0)
            pthread_cond_signal(&w->done);
        pthread_mutex_unlock(&w->lock);
    }
}

tc_status tc__workers_start(tc__workers *w, int count)
{
    memset(w, 0, sizeof *w);
    pthread_mutex_init(&w->lock, NULL);
    pthread_mutex_init(&w->submit, NULL);
    pthread_cond_init(&w->wake, NULL);
    pthread_cond_init(&w->done, NULL);
    if (count <= 0)
        return TC_OK;
    w->threads = tc_host_calloc((size_t)count, sizeof *w->threads);
    if (!w->threads)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_backend_create_cpu",
                            "no memory for %d threads", count);
    for (int i = 0; i < count; i++) {
        if (pthread_create(&w->threads[i], NULL, worker_main, w) != 0) {
            tc__workers_stop(w);
            return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_backend_create_cpu",
                                "could not start worker thread %d of %d", i + 1, count);
        }
        w->count++;
    }
    return TC_OK;
}

void tc__workers_stop(tc__workers *w)
{
    pthread_mutex_lock(&w->lock);
    w->stop = true;
    pthread_cond_broadcast(&w->wake);
    pthread_mutex_unlock(&w->lock);
    for (int i = 0; i < w->count; i++)
        pthread_join(w->threads[i], NULL);
    tc_host_free(w->threads);
    pthread_cond_destroy(&w->wake);
    pthread_cond_destroy(&w->done);
    pthread_mutex_destroy(&w->lock);
    pthread_mutex_destroy(&w->submit);
    w->threads = NULL;
    w->count = 0;
}

void tc__parallel_for(tc_backend *b, int64_t n, int64_t grain, tc__range_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    tc__workers *w = &b->workers;
    if (grain < 1)
        grain = 1;
    /* About four chunks per thread balance uneven rows without much claiming traffic. */
    int64_t chunk = n / ((int64_t)(w->count + 1) * 4);
    if (chunk < grain)
        chunk = grain;
    if (w->count == 0 || chunk >= n) {
        fn(ctx, 0, n);
        return;
    }
    pthread_mutex_lock(&w->submit);
    pthread_mutex_lock(&w->lock);
    w->fn = fn;
    w->ctx = ctx;
    w->n = n;
    w->chunk = chunk;
    atomic_store(&w->next, 0);
    w->busy = w->count;
    w->generation++;
    pthread_cond_broadcast(&w->wake);
    pthread_mutex_unlock(&w->lock);
    for (;;) {
        int64_t begin = atomic_fetch_add(&w->next, chunk);
        if (begin >= n)
            break;
        fn(ctx, begin, begin + chunk < n ? begin + chunk : n);
    }
    pthread_mutex_lock(&w->lock);
    while (w->busy > 0)
        pthread_cond_wait(&w->done, &w->lock);
    pthread_mutex_unlock(&w->lock);
    pthread_mutex_unlock(&w->submit);
}

tc_status tc_backend_create_cpu(int threads, tc_backend **out)
{
    *out = NULL;
    if (threads < 0)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_backend_create_cpu",
                            "threads is %d; want 0 (one per core) or more", threads);
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    tc_backend *b = tc_host_calloc(1, sizeof *b);
    if (!b)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_backend_create_cpu",
                            "no memory for the backend");
    b->kind = TC_BACKEND_CPU;
    b->threads = threads;
    snprintf(b->name, sizeof b->name, "cpu");
    tc_status st = tc__workers_start(&b->workers, threads - 1);
    if (st != TC_OK) {
        tc_host_free(b);
        return st;
    }
    *out = b;
    return TC_OK;
}

tc_status tc_backend_create_cuda(int ordinal, size_t limit_bytes, tc_backend **out)
{
    *out = NULL;
    tc_status st;
    tc_backend *b = tc_host_calloc(1, sizeof *b);
    if (!b)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_backend_create_cuda",
                            "no memory for the backend");
    b->kind = TC_BACKEND_CUDA;
    b->threads = 1;
    snprintf(b->name, sizeof b->name, "cuda:%d", ordinal);
    /* Threads that fill the staging of large uploads (placing weights): a few are enough to
     * outrun the host-to-device link. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    TC_CHECK(st, tc__workers_start(&b->workers, cores > 8 ? 7 : cores > 1 ? (int)cores - 1 : 0));
    TC_CHECK(st, tc_context_retain(ordinal, &b->ctx));
    TC_CHECK(st, tc_stream_create(b->ctx, 0, &b->stream));
    /* Overlapped launches where the device has them (compute capability 9.0+): each kernel's
     * blocks start while the previous kernel finishes. THINCUDA_OVERLAP=0 turns them off. */
    const char *overlap = getenv("THINCUDA_OVERLAP");
    if (!(overlap && !strcmp(overlap, "0")) && tc_stream_set_overlap(b->stream, true) != TC_OK)
        tc_clear_error();
    TC_CHECK(st, tc_pool_create_device(b->ctx, limit_bytes, &b->pool));
    TC_INFO("%s: backend ready (context, stream, pool)", b->name);
    *out = b;
    return TC_OK;
fail:
    tc_backend_destroy(b);
    return st;
}

void tc_backend_destroy(tc_backend *b)
{
    if (!b)
        return;
    if (b->kind == TC_BACKEND_CUDA) {
        if (b->stream) {
            tc_status st = tc_stream_synchronize(b->stream);
            if (st != TC_OK)
                TC_WARN("%s: waiting for queued work failed: %s", b->name, tc_last_error());
        }
        if (b->cublas) {
            tc_context_make_current(b->ctx);
            tc_cublasDestroy((cublasHandle_t)b->cublas);
        }
        if (b->cublas_workspace)
            tc_pool_free(b->pool, (CUdeviceptr)(uintptr_t)b->cublas_workspace);
        if (b->ws)
            tc_pool_free(b->pool, b->ws);
        if (b->counters)
            tc_pool_free(b->pool, b->counters);
        for (int i = 0; i < 3; i++) {
            tc_event_destroy(b->stage_done[i]);
            if (b->stage[i])
                tc_pinned_free(b->ctx, b->stage[i]);
        }
        if (b->pool && b->stream)
            tc_pool_release_stream(b->pool, b->stream);
        tc_pool_destroy(b->pool);
        tc_stream_destroy(b->stream);
        tc_context_release(b->ctx);
    }
    tc__workers_stop(&b->workers);
    tc_host_free(b);
}

tc_backend_kind tc_backend_get_kind(const tc_backend *b)
{
    return b->kind;
}
const char *tc_backend_name(const tc_backend *b)
{
    return b->name;
}
int tc_backend_threads(const tc_backend *b)
{
    return b->threads;
}
tc_stream *tc_backend_stream(const tc_backend *b)
{
    return b->stream;
}
tc_pool *tc_backend_pool(const tc_backend *b)
{
    return b->pool;
}
tc_context *tc_backend_context(const tc_backend *b)
{
    return b->ctx;
}
void tc_backend_set_gemm(tc_backend *b, tc_gemm_mode mode)
{
    b->gemm = mode;
}

tc_status tc_backend_synchronize(tc_backend *b)
{
    return b->kind == TC_BACKEND_CUDA ? tc_stream_synchronize(b->stream) : TC_OK;
}

tc_status tc_backend_alloc(tc_backend *b, size_t bytes, void **out)
{
    *out = NULL;
    if (b->kind == TC_BACKEND_CUDA) {
        CUdeviceptr p = 0;
        TC_TRY(tc_pool_alloc(b->pool, bytes, b->stream, &p));
        *out = (void *)(uintptr_t)p;
        return TC_OK;
    }
    if (bytes == 0)
        return TC_OK;
    /* 64-byte alignment keeps rows on cache lines and suits any vector width. */
    size_t rounded = (bytes + 63) & ~(size_t)63;
    /* Linux grants more than it has and kills the process when the pages are touched: a large
     * block must fit in what is available now, less a margin for everything else. */
    uint64_t avail;
    const uint64_t large = (uint64_t)64 << 20, margin = (uint64_t)256 << 20;
    if (rounded >= large && tc_host_memory_available(&avail) && rounded + margin > avail)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_backend_alloc",
                            "no host memory for %.2f GiB: %.2f GiB available (less 0.25 kept "
                            "free)",
                            (double)rounded / (1 << 30), (double)avail / (1 << 30));
    void *p = aligned_alloc(64, rounded);
    if (!p)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_backend_alloc",
                            "no host memory for %zu bytes", bytes);
    *out = p;
    return TC_OK;
}

void tc_backend_free(tc_backend *b, void *ptr)
{
    if (!ptr)
        return;
    if (b->kind == TC_BACKEND_CUDA) {
        tc_status st = tc_pool_free(b->pool, (CUdeviceptr)(uintptr_t)ptr);
        if (st != TC_OK)
            TC_WARN("%s: freeing a tensor failed: %s", b->name, tc_last_error());
        return;
    }
    free(ptr);
}

tc_status tc__backend_cublas(tc_backend *b, void **handle)
{
    *handle = b->cublas;
    if (b->cublas)
        return TC_OK;
    if (b->cublas_tried)
        return tc_set_error(TC_ERR_LIBRARY_NOT_FOUND, "cuBLAS",
                            "cuBLAS could not be loaded earlier");
    b->cublas_tried = true;
    cublasHandle_t h = NULL;
    TC_TRY(tc_context_make_current(b->ctx));
    TC_TRY(tc_cublasCreate(&h));
    tc_status st;
    TC_CHECK(st, tc_cublasSetStream(h, (cudaStream_t)tc_stream_handle(b->stream)));
    /* A workspace from our pool keeps cuBLAS off cudaMalloc (it has no runtime to call). */
    b->cublas_workspace_bytes = 32u << 20;
    CUdeviceptr ws = 0;
    TC_CHECK(st, tc_pool_alloc(b->pool, b->cublas_workspace_bytes, b->stream, &ws));
    b->cublas_workspace = (void *)(uintptr_t)ws;
    TC_CHECK(st, tc_cublasSetWorkspace(h, b->cublas_workspace, b->cublas_workspace_bytes));
    b->cublas = h;
    *handle = h;
    TC_INFO("%s: cuBLAS loaded", b->name);
    return TC_OK;
fail:
    tc_cublasDestroy(h);
    return st;
}

tc_status tc_backend_prepare_gemm(tc_backend *b)
{
    void *handle;
    if (b->kind != TC_BACKEND_CUDA || b->gemm == TC_GEMM_OWN || b->gemm == TC_GEMM_OWN_PORTABLE)
        return TC_OK;
    return tc__backend_cublas(b, &handle);
}

enum { STAGE_BYTES = 16 << 20, STAGE_SLICE = 1 << 20 };

typedef struct stage_copy {
    char *dst;
    const char *src;
    size_t bytes;
} stage_copy;

static void copy_slices(void *ctx, int64_t lo, int64_t hi)
{
    stage_copy *c = ctx;
    size_t from = (size_t)lo * STAGE_SLICE, to = (size_t)hi * STAGE_SLICE;
    if (to > c->bytes)
        to = c->bytes;
    memcpy(c->dst + from, c->src + from, to - from);
}

/* Host to device. Small copies go straight from the caller's memory and are waited for.
 * Larger ones go through three pinned stages that the worker threads fill in parallel, each
 * stage's transfer overlapping the filling of the next; the call returns once the caller's
 * memory has been read, and a stage is refilled (in this call or a later one) only after its
 * last transfer (an event) has finished. Later work on the backend's stream is ordered after
 * the transfers; a model's weights thus stream in without a wait per tensor. */
tc_status tc__backend_upload(tc_backend *b, CUdeviceptr dst, const void *src, size_t bytes)
{
    if (bytes < 4 * (size_t)STAGE_SLICE || b->workers.count == 0) {
        TC_TRY(tc_stream_copy_h2d(b->stream, dst, src, bytes));
        return tc_stream_synchronize(b->stream);
    }
    for (int i = 0; i < 3; i++) {
        if (!b->stage[i])
            TC_TRY(tc_pinned_alloc(b->ctx, STAGE_BYTES, &b->stage[i]));
        if (!b->stage_done[i])
            TC_TRY(tc_event_create(b->ctx, false, &b->stage_done[i]));
    }
    const char *p = src;
    tc_status st = TC_OK;
    for (size_t off = 0; off < bytes && st == TC_OK; off += STAGE_BYTES) {
        int slot = b->stage_next;
        b->stage_next = (slot + 1) % 3;
        size_t n = bytes - off < STAGE_BYTES ? bytes - off : STAGE_BYTES;
        st = tc_event_synchronize(b->stage_done[slot]); /* its last transfer is done */
        if (st != TC_OK)
            break;
        stage_copy c = { b->stage[slot], p + off, n };
        tc__parallel_for(b, (int64_t)((n + STAGE_SLICE - 1) / STAGE_SLICE), 1, copy_slices, &c);
        st = tc_stream_copy_h2d(b->stream, dst + off, b->stage[slot], n);
        if (st == TC_OK)
            st = tc_event_record(b->stage_done[slot], b->stream);
    }
    return st;
}

/* Grow one of the backend's kept buffers to at least `bytes` (floor bytes at least, half as much
 * again beyond), zeroed when asked; any move bumps ws_generation. */
static tc_status grow_kept(tc_backend *b, CUdeviceptr *buf, size_t *have, size_t bytes,
                           size_t floor, bool zero)
{
    if (bytes <= *have)
        return TC_OK;
    size_t want = bytes < floor ? floor : bytes + bytes / 2;
    CUdeviceptr p;
    TC_TRY(tc_pool_alloc(b->pool, want, b->stream, &p));
    tc_status st = zero ? tc_stream_memset(b->stream, p, 0, want) : TC_OK;
    if (st != TC_OK) {
        tc_pool_free(b->pool, p);
        return st;
    }
    if (*buf)
        tc_pool_free(b->pool, *buf);
    *buf = p;
    *have = want;
    b->ws_generation++;
    return TC_OK;
}

tc_status tc__backend_workspace(tc_backend *b, size_t bytes, CUdeviceptr *out)
{
    TC_TRY(grow_kept(b, &b->ws, &b->ws_bytes, bytes, (size_t)1 << 20, false));
    *out = b->ws;
    return TC_OK;
}

void tc_backend_set_shared_limit(tc_backend *b, size_t bytes)
{
    b->shared_limit = bytes;
    /* The batched kernels' shared memory follows the limit, and with it their occupancy and
     * the clusters that fit. */
    memset(b->qmm_per_sm, 0, sizeof b->qmm_per_sm);
    memset(b->qmm_clusters, 0, sizeof b->qmm_clusters);
    memset(b->qmm_pair_per_sm, 0, sizeof b->qmm_pair_per_sm);
    memset(b->qmm_pair_clusters, 0, sizeof b->qmm_pair_clusters);
}

size_t tc__backend_shared_room(const tc_backend *b)
{
    size_t room =
        b->ctx && b->ctx->max_shared_optin > 1024 ? (size_t)b->ctx->max_shared_optin - 1024 : 0;
    return b->shared_limit && b->shared_limit < room ? b->shared_limit : room;
}

tc_status tc__backend_counters(tc_backend *b, size_t count, CUdeviceptr *out)
{
    TC_TRY(grow_kept(b, &b->counters, &b->counters_bytes, count * sizeof(int32_t), 4096, true));
    *out = b->counters;
    return TC_OK;
}

uint64_t tc_backend_workspace_generation(const tc_backend *b)
{
    return b->ws_generation;
}

size_t tc_backend_workspace_bytes(const tc_backend *b)
{
    return b->ws_bytes + b->counters_bytes;
}
