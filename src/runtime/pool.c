/* The size-classed caching device allocator (see pool.h) and its cuMemAlloc backend.
 *
 * Requests round up to a size class (4 classes per power of two, 512 B minimum, steps of at
 * most 2 MiB), and a cached block serves only requests of its own class, so blocks are never
 * split or merged and the waste is bounded (< 25 % small, < 2 MiB large). Cached blocks sit in
 * one list per class (newest first, preferring the requesting stream's own blocks) and in one
 * list across classes, oldest first, from which trim gives memory back. */
#include "runtime/pool.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/host.h"
#include "runtime/internal.h"
#include "runtime/map.h"

#define MIN_CLASS 512u
#define MAX_STEP (2u << 20)
#define SMALL_LIMIT ((size_t)16 << 20) /* classes up to here are indexed, not hashed */
#define SMALL_CLASSES 56

typedef struct bucket bucket;

typedef struct block {
    CUdeviceptr ptr;
    bucket *bk;                  /* the block's size class */
    size_t size;                 /* class bytes */
    size_t requested;            /* bytes asked for */
    tc_stream *stream;           /* allocated for; NULL once released (any stream may reuse) */
    struct block *prev, *next;   /* the class's cached list, newest first */
    struct block *older, *newer; /* all cached blocks, oldest first */
} block;

struct bucket {
    block *head;
};

struct tc_pool {
    tc_pool_backend be;
    pthread_mutex_t lock;
    tc__map live;                /* ptr -> block, in use */
    bucket small[SMALL_CLASSES]; /* classes up to 16 MiB, by class index */
    tc__map classes;             /* larger class bytes -> bucket */
    block *oldest, *newest;      /* cached, across classes */
    tc_pool_stats st;
};

size_t tc_pool_round(size_t bytes)
{
    if (bytes <= MIN_CLASS)
        return MIN_CLASS;
    int top = 63 - __builtin_clzll((unsigned long long)(bytes - 1));
    size_t step = (size_t)1 << (top >= 2 ? top - 2 : 0);
    if (step < MIN_CLASS)
        step = MIN_CLASS;
    if (step > MAX_STEP)
        step = MAX_STEP;
    if (bytes > SIZE_MAX - step)
        return 0;
    return (bytes + step - 1) & ~(step - 1); /* step is a power of two */
}

/* The index of a class of at most SMALL_LIMIT bytes: 512..2048 are 0..3, then four per
 * power of two. */
static size_t small_index(size_t size)
{
    if (size <= 2048)
        return size / MIN_CLASS - 1;
    int top = 63 - __builtin_clzll((unsigned long long)(size - 1));
    size_t step = (size_t)1 << (top - 2);
    return 4 + (size_t)(top - 11) * 4 + (size - ((size_t)1 << top)) / step - 1;
}

/* The bucket of class `size`, created when `create` (NULL when absent or out of memory). */
static bucket *get_bucket(tc_pool *p, size_t size, bool create)
{
    if (size <= SMALL_LIMIT)
        return &p->small[small_index(size)];
    bucket *bk = tc__map_get(&p->classes, size);
    if (bk == NULL && create) {
        bk = tc_host_calloc(1, sizeof *bk);
        if (bk != NULL && !tc__map_put(&p->classes, size, bk)) {
            tc_host_free(bk);
            bk = NULL;
        }
    }
    return bk;
}

static void human(char *buf, size_t len, size_t bytes)
{
    static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%zu B", bytes);
    else
        snprintf(buf, len, "%.2f %s", v, units[u]);
}

/* ---- cached lists (lock held) ---- */

static void cache_push(tc_pool *p, block *b)
{
    bucket *bk = b->bk;
    b->prev = NULL;
    b->next = bk->head;
    if (bk->head)
        bk->head->prev = b;
    bk->head = b;
    b->newer = NULL;
    b->older = p->newest;
    if (p->newest)
        p->newest->newer = b;
    else
        p->oldest = b;
    p->newest = b;
    p->st.bytes_cached += b->size;
    p->st.blocks_cached++;
}

static void cache_unlink(tc_pool *p, block *b)
{
    bucket *bk = b->bk;
    if (b->prev)
        b->prev->next = b->next;
    else
        bk->head = b->next;
    if (b->next)
        b->next->prev = b->prev;
    if (b->older)
        b->older->newer = b->newer;
    else
        p->oldest = b->newer;
    if (b->newer)
        b->newer->older = b->older;
    else
        p->newest = b->older;
    b->prev = b->next = b->older = b->newer = NULL;
    p->st.bytes_cached -= b->size;
    p->st.blocks_cached--;
}

static void release_block(tc_pool *p, block *b)
{
    p->be.free(p->be.user, b->ptr, b->size);
    p->st.backend_frees++;
    p->st.bytes_reserved -= b->size;
    tc_host_free(b);
}

/* Give back oldest-first until at most keep bytes stay cached. */
static void trim_locked(tc_pool *p, size_t keep)
{
    while (p->oldest != NULL && p->st.bytes_cached > keep) {
        block *b = p->oldest;
        cache_unlink(p, b);
        release_block(p, b);
    }
}

static void note_peaks(tc_pool *p)
{
    if (p->st.bytes_in_use > p->st.peak_bytes_in_use)
        p->st.peak_bytes_in_use = p->st.bytes_in_use;
    if (p->st.bytes_reserved > p->st.peak_bytes_reserved)
        p->st.peak_bytes_reserved = p->st.bytes_reserved;
}

static tc_status out_of_memory(tc_pool *p, size_t bytes, size_t size, const char *why)
{
    char req[32], use[32], cached[32], peak[32], limit[32], dev[96] = "";
    human(req, sizeof req, bytes);
    human(use, sizeof use, p->st.bytes_in_use);
    human(cached, sizeof cached, p->st.bytes_cached);
    human(peak, sizeof peak, p->st.peak_bytes_in_use);
    if (p->st.limit_bytes)
        human(limit, sizeof limit, p->st.limit_bytes);
    else
        snprintf(limit, sizeof limit, "none");
    if (p->be.describe) {
        char d[80] = "";
        p->be.describe(p->be.user, d, sizeof d);
        if (d[0])
            snprintf(dev, sizeof dev, "; device: %s", d);
    }
    p->st.oom++;
    return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_pool_alloc",
                        "out of device memory (%s) allocating %s (%zu bytes, class %zu); pool: "
                        "in use %s in %zu blocks, cached %s, peak %s, limit %s%s",
                        why, req, bytes, size, use, p->st.blocks_in_use, cached, peak, limit, dev);
}

static bool is_oom(tc_status s)
{
    return s == TC_ERR_OUT_OF_MEMORY || s == TC_CUDA_ERROR_OUT_OF_MEMORY;
}

/* ---- public API ---- */

tc_status tc_pool_create(const tc_pool_backend *backend, size_t limit_bytes, tc_pool **out)
{
    *out = NULL;
    if (backend == NULL || backend->alloc == NULL || backend->free == NULL ||
        backend->order == NULL)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_pool_create",
                            "a pool backend needs alloc, free and order functions");
    tc_pool *p = tc_host_calloc(1, sizeof *p);
    if (p == NULL)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_pool_create", "out of host memory");
    p->be = *backend;
    p->st.limit_bytes = limit_bytes;
    pthread_mutex_init(&p->lock, NULL);
    *out = p;
    return TC_OK;
}

void tc_pool_destroy(tc_pool *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    trim_locked(p, 0);
    if (p->live.count) {
        char use[32];
        human(use, sizeof use, p->st.bytes_in_use);
        TC_WARN("pool destroyed with %zu blocks (%s) still in use; freeing them", p->live.count,
                use);
        for (size_t i = 0; i < p->live.cap; i++)
            if (p->live.keys[i])
                release_block(p, p->live.vals[i]);
    }
    for (size_t i = 0; i < p->classes.cap; i++)
        if (p->classes.keys[i])
            tc_host_free(p->classes.vals[i]);
    tc__map_deinit(&p->live);
    tc__map_deinit(&p->classes);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_destroy(&p->lock);
    if (p->be.destroy)
        p->be.destroy(p->be.user);
    tc_host_free(p);
}

/* Take a cached block of `size` for stream s, ordering it after its old stream if needed. */
static tc_status take_cached(tc_pool *p, size_t size, tc_stream *s, block **out)
{
    *out = NULL;
    bucket *bk = get_bucket(p, size, false);
    if (bk == NULL || bk->head == NULL)
        return TC_OK;
    block *b = bk->head;
    for (block *c = bk->head; c != NULL; c = c->next) {
        if (c->stream == s || c->stream == NULL) {
            b = c;
            break;
        }
    }
    if (b->stream != s && b->stream != NULL) {
        TC_TRY(p->be.order(p->be.user, b->stream, s));
        p->st.cross_stream++;
    }
    cache_unlink(p, b);
    *out = b;
    return TC_OK;
}

static tc_status new_block(tc_pool *p, size_t bytes, size_t size, block **out)
{
    if (p->st.limit_bytes && p->st.bytes_reserved + size > p->st.limit_bytes) {
        size_t need = p->st.bytes_reserved + size - p->st.limit_bytes;
        trim_locked(p, p->st.bytes_cached > need ? p->st.bytes_cached - need : 0);
        if (p->st.bytes_reserved + size > p->st.limit_bytes)
            return out_of_memory(p, bytes, size, "pool limit");
    }
    block *b = tc_host_calloc(1, sizeof *b);
    if (b == NULL)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_pool_alloc", "out of host memory");
    tc_status st = p->be.alloc(p->be.user, size, &b->ptr);
    if (is_oom(st) && p->st.bytes_cached) {
        TC_INFO("device allocation of %zu bytes failed; trimming the pool's cache and retrying",
                size);
        trim_locked(p, 0);
        st = p->be.alloc(p->be.user, size, &b->ptr);
    }
    if (st != TC_OK) {
        tc_host_free(b);
        return is_oom(st) ? out_of_memory(p, bytes, size, tc_status_name(st)) : st;
    }
    p->st.backend_allocs++;
    p->st.bytes_reserved += size;
    b->size = size;
    *out = b;
    return TC_OK;
}

tc_status tc_pool_alloc(tc_pool *p, size_t bytes, tc_stream *s, CUdeviceptr *out)
{
    *out = 0;
    if (bytes == 0)
        return TC_OK;
    if (s == NULL)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_pool_alloc",
                            "a stream is required: the block is ordered on it");
    size_t size = tc_pool_round(bytes);
    if (size == 0)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_pool_alloc",
                            "cannot allocate %zu bytes: larger than any device", bytes);
    tc_status st;
    block *b = NULL;
    pthread_mutex_lock(&p->lock);
    TC_CHECK(st, take_cached(p, size, s, &b));
    if (b != NULL) {
        p->st.hits++;
    } else {
        TC_CHECK(st, new_block(p, bytes, size, &b));
        p->st.misses++;
        b->bk = get_bucket(p, size, true);
        if (b->bk == NULL) {
            release_block(p, b);
            st = tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_pool_alloc", "out of host memory");
            goto fail;
        }
    }
    if (!tc__map_put(&p->live, b->ptr, b)) {
        release_block(p, b);
        st = tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_pool_alloc", "out of host memory");
        goto fail;
    }
    b->stream = s;
    b->requested = bytes;
    p->st.allocs++;
    p->st.bytes_in_use += size;
    p->st.bytes_requested += bytes;
    p->st.blocks_in_use++;
    note_peaks(p);
    pthread_mutex_unlock(&p->lock);
    *out = b->ptr;
    return TC_OK;
fail:
    pthread_mutex_unlock(&p->lock);
    return st;
}

tc_status tc_pool_free(tc_pool *p, CUdeviceptr ptr)
{
    if (ptr == 0)
        return TC_OK;
    pthread_mutex_lock(&p->lock);
    block *b = tc__map_remove(&p->live, ptr);
    if (b == NULL) {
        pthread_mutex_unlock(&p->lock);
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_pool_free",
                            "0x%llx was not allocated by this pool or was already freed",
                            (unsigned long long)ptr);
    }
    p->st.frees++;
    p->st.bytes_in_use -= b->size;
    p->st.bytes_requested -= b->requested;
    p->st.blocks_in_use--;
    cache_push(p, b);
    pthread_mutex_unlock(&p->lock);
    return TC_OK;
}

tc_status tc_pool_release_stream(tc_pool *p, tc_stream *s)
{
    if (s == NULL)
        return TC_OK;
    TC_TRY(tc_stream_synchronize(s));
    pthread_mutex_lock(&p->lock);
    for (block *b = p->oldest; b != NULL; b = b->newer)
        if (b->stream == s)
            b->stream = NULL;
    pthread_mutex_unlock(&p->lock);
    return TC_OK;
}

void tc_pool_trim(tc_pool *p, size_t keep_bytes)
{
    pthread_mutex_lock(&p->lock);
    trim_locked(p, keep_bytes);
    pthread_mutex_unlock(&p->lock);
}

tc_status tc_pool_set_limit(tc_pool *p, size_t limit_bytes)
{
    tc_status st = TC_OK;
    pthread_mutex_lock(&p->lock);
    if (limit_bytes && p->st.bytes_in_use > limit_bytes) {
        char use[32], lim[32];
        human(use, sizeof use, p->st.bytes_in_use);
        human(lim, sizeof lim, limit_bytes);
        st = tc_set_error(TC_ERR_LIMIT, "tc_pool_set_limit",
                          "cannot lower the limit to %s: %s are in use", lim, use);
    } else {
        p->st.limit_bytes = limit_bytes;
        if (limit_bytes && p->st.bytes_reserved > limit_bytes)
            trim_locked(p, limit_bytes - p->st.bytes_in_use);
    }
    pthread_mutex_unlock(&p->lock);
    return st;
}

void tc_pool_get_stats(tc_pool *p, tc_pool_stats *out)
{
    pthread_mutex_lock(&p->lock);
    *out = p->st;
    pthread_mutex_unlock(&p->lock);
    out->hit_rate = out->allocs ? (double)out->hits / (double)out->allocs : 0.0;
}

/* ---- the device backend ---- */

typedef struct device_backend {
    tc_context *ctx;
    CUevent order_event; /* reused: cuStreamWaitEvent captures the event's state at the call */
} device_backend;

static tc_status dev_alloc(void *user, size_t bytes, CUdeviceptr *out)
{
    device_backend *d = user;
    TC_TRY(tc__context_enter(d->ctx));
    return tc_cuMemAlloc(out, bytes);
}

static void dev_free(void *user, CUdeviceptr ptr, size_t bytes)
{
    device_backend *d = user;
    if (tc__context_enter(d->ctx) != TC_OK || tc_cuMemFree(ptr) != TC_OK)
        TC_WARN("cuMemFree of %zu bytes at 0x%llx failed: %s", bytes, (unsigned long long)ptr,
                tc_last_error());
}

static tc_status dev_order(void *user, tc_stream *from, tc_stream *to)
{
    device_backend *d = user;
    TC_TRY(tc__context_enter(d->ctx));
    TC_TRY(tc_cuEventRecord(d->order_event, tc_stream_handle(from)));
    return tc_cuStreamWaitEvent(tc_stream_handle(to), d->order_event, CU_EVENT_WAIT_DEFAULT);
}

static void dev_describe(void *user, char *buf, size_t len)
{
    device_backend *d = user;
    size_t free_b = 0, total_b = 0;
    if (tc_context_mem_info(d->ctx, &free_b, &total_b) != TC_OK)
        return;
    char f[32], t[32];
    human(f, sizeof f, free_b);
    human(t, sizeof t, total_b);
    snprintf(buf, len, "%s free of %s on device %d", f, t, tc_context_ordinal(d->ctx));
}

static void dev_destroy(void *user)
{
    device_backend *d = user;
    if (tc__context_enter(d->ctx) == TC_OK)
        tc_cuEventDestroy(d->order_event);
    tc_host_free(d);
}

tc_status tc_pool_create_device(tc_context *ctx, size_t limit_bytes, tc_pool **out)
{
    *out = NULL;
    device_backend *d = tc_host_calloc(1, sizeof *d);
    if (d == NULL)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_pool_create_device", "out of host memory");
    d->ctx = ctx;
    tc_status st;
    TC_CHECK(st, tc__context_enter(ctx));
    TC_CHECK(st, tc_cuEventCreate(&d->order_event, CU_EVENT_DISABLE_TIMING));
    tc_pool_backend be = { dev_alloc, dev_free, dev_order, dev_describe, dev_destroy, d };
    st = tc_pool_create(&be, limit_bytes, out);
    if (st != TC_OK) {
        dev_destroy(d);
        return st;
    }
    return TC_OK;
fail:
    tc_host_free(d);
    return st;
}
