/* The pool's bookkeeping against a fake backend: 100,000 random allocations, frees, trims and
 * limit changes over four streams, with every invariant checked after each step (no two live
 * blocks overlap, statistics equal a recount, the limit is never exceeded, a block changes
 * streams only after the backend ordered the streams), plus the documented edge cases. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/pool.h"

/* ---- the fake backend: device memory as a set of address ranges ---- */

#define MAX_RANGES 4096

typedef struct range {
    CUdeviceptr ptr;
    size_t bytes;
} range;

typedef struct fake {
    range live[MAX_RANGES]; /* what the backend has handed out */
    size_t nlive;
    size_t live_bytes;
    size_t capacity; /* device memory size */
    CUdeviceptr next;
    int fail_next_alloc; /* a non-OOM failure, once */
    uint64_t orders;
    tc_stream *last_from, *last_to;
} fake;

static tc_status fake_alloc(void *user, size_t bytes, CUdeviceptr *out)
{
    fake *f = user;
    if (f->fail_next_alloc) {
        f->fail_next_alloc = 0;
        return TC_CUDA_ERROR_LAUNCH_FAILED;
    }
    if (f->live_bytes + bytes > f->capacity || f->nlive == MAX_RANGES)
        return TC_CUDA_ERROR_OUT_OF_MEMORY;
    /* Leave a gap so that an off-by-one overlap would be visible. */
    *out = f->next;
    f->next += (bytes + 4096 + 255) / 256 * 256;
    f->live[f->nlive++] = (range){ *out, bytes };
    f->live_bytes += bytes;
    return TC_OK;
}

static void fake_free(void *user, CUdeviceptr ptr, size_t bytes)
{
    fake *f = user;
    for (size_t i = 0; i < f->nlive; i++) {
        if (f->live[i].ptr == ptr) {
            assert_int_equal(f->live[i].bytes, bytes);
            f->live_bytes -= bytes;
            f->live[i] = f->live[--f->nlive];
            return;
        }
    }
    fail_msg("the pool freed 0x%llx, which the backend never gave it", (unsigned long long)ptr);
}

static tc_status fake_order(void *user, tc_stream *from, tc_stream *to)
{
    fake *f = user;
    f->orders++;
    f->last_from = from;
    f->last_to = to;
    return TC_OK;
}

static void fake_describe(void *user, char *buf, size_t len)
{
    fake *f = user;
    snprintf(buf, len, "%zu of %zu bytes used", f->live_bytes, f->capacity);
}

static tc_pool *new_pool(fake *f, size_t capacity, size_t limit)
{
    memset(f, 0, sizeof *f);
    f->capacity = capacity;
    f->next = 0x100000000ull;
    tc_pool_backend be = { fake_alloc, fake_free, fake_order, fake_describe, NULL, f };
    tc_pool *p = NULL;
    assert_int_equal(tc_pool_create(&be, limit, &p), TC_OK);
    return p;
}

/* Streams are opaque keys to the pool: fake addresses are enough. */
static tc_stream *stream_n(int i)
{
    return (tc_stream *)(uintptr_t)(0x1000 + 64 * i);
}

/* ---- the model the test keeps of what callers hold ---- */

typedef struct held {
    CUdeviceptr ptr;
    size_t bytes;
    int stream;
} held;

#define MAX_HELD 512

static void check_invariants(tc_pool *p, fake *f, const held *h, size_t n)
{
    tc_pool_stats st;
    tc_pool_get_stats(p, &st);
    size_t in_use = 0, requested = 0;
    for (size_t i = 0; i < n; i++) {
        in_use += tc_pool_round(h[i].bytes);
        requested += h[i].bytes;
        assert_true(h[i].ptr % 256 == 0);
    }
    assert_int_equal(st.bytes_in_use, in_use);
    assert_int_equal(st.bytes_requested, requested);
    assert_int_equal(st.blocks_in_use, n);
    assert_int_equal(st.bytes_reserved, st.bytes_in_use + st.bytes_cached);
    assert_int_equal(st.bytes_reserved, f->live_bytes);
    assert_int_equal(st.blocks_in_use + st.blocks_cached, f->nlive);
    assert_int_equal(st.hits + st.misses, st.allocs);
    assert_int_equal(st.backend_allocs - st.backend_frees, f->nlive);
    assert_true(st.peak_bytes_in_use >= st.bytes_in_use);
    assert_true(st.peak_bytes_reserved >= st.bytes_reserved);
    if (st.limit_bytes)
        assert_true(st.bytes_reserved <= st.limit_bytes);
}

/* A new block must lie inside one backend range and overlap no block already held. */
static void check_new_block(fake *f, const held *h, size_t n, held b)
{
    bool inside = false;
    for (size_t r = 0; r < f->nlive && !inside; r++)
        inside = b.ptr >= f->live[r].ptr && b.ptr + b.bytes <= f->live[r].ptr + f->live[r].bytes;
    assert_true(inside);
    for (size_t j = 0; j < n; j++)
        assert_true(b.ptr + b.bytes <= h[j].ptr || h[j].ptr + h[j].bytes <= b.ptr);
}

static size_t random_size(unsigned *seed)
{
    switch (rand_r(seed) % 8) {
    case 0: return 1 + (size_t)(rand_r(seed) % 512);
    case 1: return 512;
    case 2: return 1 + (size_t)(rand_r(seed) % 65536);
    case 3: return (size_t)(1 + rand_r(seed) % 8) << 20;
    case 4: return (size_t)(rand_r(seed) % 3 + 1) * 4096;
    default: return 1 + (size_t)(rand_r(seed) % 4096);
    }
}

static void random_operations_keep_every_invariant(void **state)
{
    (void)state;
    fake f;
    tc_pool *p = new_pool(&f, (size_t)256 << 20, 0);
    held h[MAX_HELD];
    size_t n = 0;
    unsigned seed = 12345;
    uint64_t ooms = 0, order_before;
    for (int op = 0; op < 100000; op++) {
        int r = rand_r(&seed) % 100;
        if (r < 50 && n < MAX_HELD) {
            size_t bytes = random_size(&seed);
            int s = rand_r(&seed) % 4;
            CUdeviceptr ptr = 0;
            tc_pool_stats before;
            tc_pool_get_stats(p, &before);
            order_before = f.orders;
            tc_status st = tc_pool_alloc(p, bytes, stream_n(s), &ptr);
            if (st == TC_ERR_OUT_OF_MEMORY) {
                ooms++;
                assert_int_equal(ptr, 0);
                char want[64];
                snprintf(want, sizeof want, "(%zu bytes, class %zu)", bytes, tc_pool_round(bytes));
                assert_non_null(strstr(tc_last_error(), want));
            } else {
                assert_int_equal(st, TC_OK);
                tc_pool_stats after;
                tc_pool_get_stats(p, &after);
                if (after.cross_stream > before.cross_stream) {
                    /* Reused from another stream: the backend ordered it onto this one. */
                    assert_int_equal(f.orders, order_before + 1);
                    assert_ptr_equal(f.last_to, stream_n(s));
                    assert_ptr_not_equal(f.last_from, stream_n(s));
                }
                held b = { ptr, bytes, s };
                check_new_block(&f, h, n, b);
                h[n++] = b;
            }
        } else if (r < 92 && n > 0) {
            size_t i = (size_t)rand_r(&seed) % n;
            assert_int_equal(tc_pool_free(p, h[i].ptr), TC_OK);
            h[i] = h[--n];
        } else if (r < 95) {
            tc_pool_trim(p, (size_t)(rand_r(&seed) % 4) << 20);
        } else if (r < 98) {
            size_t limit = (size_t)(rand_r(&seed) % 300) << 20;
            tc_status st = tc_pool_set_limit(p, limit);
            if (st != TC_OK) {
                assert_int_equal(st, TC_ERR_LIMIT);
                tc_pool_stats s;
                tc_pool_get_stats(p, &s);
                assert_true(s.bytes_in_use > limit);
            }
        } else {
            tc_pool_set_limit(p, 0);
        }
        check_invariants(p, &f, h, n);
    }
    tc_pool_stats st;
    tc_pool_get_stats(p, &st);
    printf("pool: %llu allocs, hit rate %.3f, %llu cross-stream, %llu backend allocs, %llu OOM\n",
           (unsigned long long)st.allocs, st.hit_rate, (unsigned long long)st.cross_stream,
           (unsigned long long)st.backend_allocs, (unsigned long long)ooms);
    assert_true(st.hits > 0 && st.misses > 0 && st.cross_stream > 0 && ooms > 0);
    assert_int_equal(st.oom, ooms);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(tc_pool_free(p, h[i].ptr), TC_OK);
    tc_pool_destroy(p);
    assert_int_equal(f.nlive, 0);
    assert_int_equal(f.live_bytes, 0);
}

static void freed_block_is_reused_by_the_same_class_on_the_same_stream(void **state)
{
    (void)state;
    fake f;
    tc_pool *p = new_pool(&f, (size_t)1 << 30, 0);
    CUdeviceptr a, b, c;
    assert_int_equal(tc_pool_alloc(p, 1000, stream_n(0), &a), TC_OK);
    assert_int_equal(tc_pool_free(p, a), TC_OK);
    assert_int_equal(tc_pool_alloc(p, 1024, stream_n(0), &b), TC_OK);
    assert_int_equal(b, a); /* 1000 and 1024 share the 1024 class */
    assert_int_equal(tc_pool_alloc(p, 1000, stream_n(0), &c), TC_OK);
    assert_int_not_equal(c, a);
    assert_int_equal(f.orders, 0);
    tc_pool_stats st;
    tc_pool_get_stats(p, &st);
    assert_int_equal(st.hits, 1);
    assert_int_equal(st.misses, 2);
    assert_int_equal(tc_pool_free(p, b), TC_OK);
    assert_int_equal(tc_pool_free(p, c), TC_OK);
    tc_pool_destroy(p);
}

static void reuse_across_streams_is_ordered(void **state)
{
    (void)state;
    fake f;
    tc_pool *p = new_pool(&f, (size_t)1 << 30, 0);
    CUdeviceptr a, b;
    assert_int_equal(tc_pool_alloc(p, 4096, stream_n(1), &a), TC_OK);
    assert_int_equal(tc_pool_free(p, a), TC_OK);
    assert_int_equal(tc_pool_alloc(p, 4096, stream_n(2), &b), TC_OK);
    assert_int_equal(b, a);
    assert_int_equal(f.orders, 1);
    assert_ptr_equal(f.last_from, stream_n(1));
    assert_ptr_equal(f.last_to, stream_n(2));
    assert_int_equal(tc_pool_free(p, b), TC_OK);
    tc_pool_destroy(p);
}

static void limit_is_honoured_and_trims_the_cache_first(void **state)
{
    (void)state;
    fake f;
    tc_pool *p = new_pool(&f, (size_t)1 << 30, (size_t)10 << 20);
    CUdeviceptr a, b, c;
    assert_int_equal(tc_pool_alloc(p, (size_t)6 << 20, stream_n(0), &a), TC_OK);
    assert_int_equal(tc_pool_free(p, a), TC_OK); /* cached: 6 MiB */
    assert_int_equal(tc_pool_alloc(p, (size_t)5 << 20, stream_n(0), &b), TC_OK);
    tc_pool_stats st;
    tc_pool_get_stats(p, &st);
    assert_int_equal(st.bytes_cached, 0);
    assert_int_equal(st.backend_frees, 1);
    assert_int_equal(tc_pool_alloc(p, (size_t)6 << 20, stream_n(0), &c), TC_ERR_OUT_OF_MEMORY);
    assert_non_null(strstr(tc_last_error(), "pool limit"));
    assert_non_null(strstr(tc_last_error(), "limit 10.00 MiB"));
    assert_int_equal(tc_pool_set_limit(p, (size_t)1 << 20), TC_ERR_LIMIT);
    assert_int_equal(tc_pool_free(p, b), TC_OK);
    tc_pool_destroy(p);
}

static void device_out_of_memory_trims_then_retries(void **state)
{
    (void)state;
    fake f;
    tc_pool *p = new_pool(&f, (size_t)8 << 20, 0);
    CUdeviceptr a, b;
    assert_int_equal(tc_pool_alloc(p, (size_t)6 << 20, stream_n(0), &a), TC_OK);
    assert_int_equal(tc_pool_free(p, a), TC_OK);
    /* 4 MiB does not fit next to the cached 6 MiB; the pool frees the cache and retries. */
    assert_int_equal(tc_pool_alloc(p, (size_t)4 << 20, stream_n(0), &b), TC_OK);
    assert_int_equal(tc_pool_alloc(p, (size_t)6 << 20, stream_n(0), &a), TC_ERR_OUT_OF_MEMORY);
    assert_non_null(strstr(tc_last_error(), "device: 4194304 of 8388608 bytes used"));
    f.fail_next_alloc = 1;
    assert_int_equal(tc_pool_alloc(p, 100, stream_n(0), &a), TC_CUDA_ERROR_LAUNCH_FAILED);
    assert_int_equal(tc_pool_free(p, b), TC_OK);
    tc_pool_destroy(p);
}

static void edge_cases_are_errors_not_crashes(void **state)
{
    (void)state;
    fake f;
    tc_pool *p = new_pool(&f, (size_t)1 << 30, 0);
    CUdeviceptr a = 1;
    assert_int_equal(tc_pool_alloc(p, 0, stream_n(0), &a), TC_OK);
    assert_int_equal(a, 0);
    assert_int_equal(tc_pool_free(p, 0), TC_OK);
    assert_int_equal(tc_pool_alloc(p, 10, NULL, &a), TC_ERR_INVALID_ARGUMENT);
    assert_int_equal(tc_pool_alloc(p, SIZE_MAX - 10, stream_n(0), &a), TC_ERR_OUT_OF_MEMORY);
    assert_int_equal(tc_pool_alloc(p, 10, stream_n(0), &a), TC_OK);
    assert_int_equal(tc_pool_free(p, a), TC_OK);
    assert_int_equal(tc_pool_free(p, a), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "already freed"));
    assert_int_equal(tc_pool_free(p, 0xabcdef00), TC_ERR_INVALID_ARGUMENT);
    /* A block still in use at destroy is returned to the backend (with a warning). */
    assert_int_equal(tc_pool_alloc(p, 10, stream_n(0), &a), TC_OK);
    tc_pool_destroy(p);
    assert_int_equal(f.nlive, 0);
    tc_pool_destroy(NULL);
    tc_pool_backend incomplete = { fake_alloc, NULL, fake_order, NULL, NULL, &f };
    assert_int_equal(tc_pool_create(&incomplete, 0, &p), TC_ERR_INVALID_ARGUMENT);
}

static void size_classes_bound_the_waste(void **state)
{
    (void)state;
    size_t prev = 0;
    for (size_t b = 1; b < ((size_t)64 << 20); b += 1 + b / 7) {
        size_t c = tc_pool_round(b);
        assert_true(c >= b);
        assert_true(c % 256 == 0);
        assert_true(c >= prev);
        if (b > 2048)
            assert_true((double)(c - b) < 0.25 * (double)b);
        assert_true(c - b < ((size_t)2 << 20));
        prev = c;
    }
    assert_int_equal(tc_pool_round(1), 512);
    assert_int_equal(tc_pool_round(513), 1024);
    assert_int_equal(tc_pool_round(1025), 1536);
    assert_int_equal(tc_pool_round(((size_t)1 << 30) + 1), ((size_t)1 << 30) + ((size_t)2 << 20));
}

typedef struct worker {
    tc_pool *pool;
    int id;
    int errors;
    CUdeviceptr *owner; /* shared: one slot per 256-byte unit of the fake address space */
} worker;

#define UNITS (1u << 20)

static pthread_mutex_t owner_lock = PTHREAD_MUTEX_INITIALIZER;

/* Claim (or release) every 256-byte unit of a block; a unit already claimed is an overlap. */
static int claim(worker *w, CUdeviceptr ptr, size_t bytes, bool take)
{
    int bad = 0;
    pthread_mutex_lock(&owner_lock);
    for (CUdeviceptr u = (ptr - 0x100000000ull) / 256;
         u < (ptr - 0x100000000ull + bytes + 255) / 256; u++) {
        if (u >= UNITS) {
            bad++;
            break;
        }
        if (take) {
            bad += w->owner[u] != 0;
            w->owner[u] = (CUdeviceptr)(w->id + 1);
        } else {
            bad += w->owner[u] != (CUdeviceptr)(w->id + 1);
            w->owner[u] = 0;
        }
    }
    pthread_mutex_unlock(&owner_lock);
    return bad;
}

static void *work(void *arg)
{
    worker *w = arg;
    unsigned seed = 77u + (unsigned)w->id;
    CUdeviceptr held[32] = { 0 };
    size_t sizes[32] = { 0 };
    for (int op = 0; op < 20000; op++) {
        int i = rand_r(&seed) % 32;
        if (held[i]) {
            w->errors += claim(w, held[i], sizes[i], false);
            w->errors += tc_pool_free(w->pool, held[i]) != TC_OK;
            held[i] = 0;
        } else {
            sizes[i] = 1 + (size_t)(rand_r(&seed) % 20000);
            /* Two streams per thread, and some shared with the next thread. */
            tc_stream *s = stream_n((w->id + rand_r(&seed) % 2) % 5);
            if (tc_pool_alloc(w->pool, sizes[i], s, &held[i]) != TC_OK) {
                w->errors++;
                held[i] = 0;
                continue;
            }
            w->errors += claim(w, held[i], sizes[i], true);
        }
    }
    for (int i = 0; i < 32; i++)
        if (held[i]) {
            w->errors += claim(w, held[i], sizes[i], false);
            w->errors += tc_pool_free(w->pool, held[i]) != TC_OK;
        }
    return NULL;
}

static void threads_share_a_pool_without_overlap(void **state)
{
    (void)state;
    fake f;
    tc_pool *p = new_pool(&f, (size_t)1 << 30, 0);
    CUdeviceptr *owner = calloc(UNITS, sizeof *owner);
    assert_non_null(owner);
    worker w[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker){ p, i, 0, owner };
        assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].errors, 0);
    }
    tc_pool_stats st;
    tc_pool_get_stats(p, &st);
    assert_int_equal(st.bytes_in_use, 0);
    assert_int_equal(st.blocks_in_use, 0);
    assert_int_equal(st.allocs, st.frees);
    assert_int_equal(st.bytes_reserved, f.live_bytes);
    assert_true(st.hits > 0 && st.cross_stream > 0);
    tc_pool_destroy(p);
    assert_int_equal(f.nlive, 0);
    free(owner);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(size_classes_bound_the_waste),
        cmocka_unit_test(freed_block_is_reused_by_the_same_class_on_the_same_stream),
        cmocka_unit_test(reuse_across_streams_is_ordered),
        cmocka_unit_test(limit_is_honoured_and_trims_the_cache_first),
        cmocka_unit_test(device_out_of_memory_trims_then_retries),
        cmocka_unit_test(edge_cases_are_errors_not_crashes),
        cmocka_unit_test(random_operations_keep_every_invariant),
        cmocka_unit_test(threads_share_a_pool_without_overlap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
