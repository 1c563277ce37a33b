/* The device memory pool: a size-classed caching allocator. Freed blocks stay cached for
 * reuse by later allocations of the same size class, in stream order; a limit caps the bytes
 * held from the device, trim returns cached blocks, and statistics say how it went. */
#ifndef TC_POOL_H
#define TC_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tc_pool tc_pool;

/* Where a pool's memory comes from. The device backend (tc_pool_create_device) uses
 * cuMemAlloc/cuMemFree; tests plug in a fake. */
typedef struct tc_pool_backend {
    /* Allocate `bytes` of device memory; an out-of-memory failure returns
     * TC_ERR_OUT_OF_MEMORY or TC_CUDA_ERROR_OUT_OF_MEMORY, so the pool can trim and retry. */
    tc_status (*alloc)(void *user, size_t bytes, CUdeviceptr *out);
    /* Give a block back (the pool only does so when its work may be pending: see trim). */
    void (*free)(void *user, CUdeviceptr ptr, size_t bytes);
    /* Make work queued on `to` from now on wait for the work already queued on `from`. */
    tc_status (*order)(void *user, tc_stream *from, tc_stream *to);
    /* Optional: describe the device's memory for error messages ("1.2 GiB free of 80 GiB"). */
    void (*describe)(void *user, char *buf, size_t len);
    /* Optional: called last by tc_pool_destroy, to free `user`. */
    void (*destroy)(void *user);
    void *user;
} tc_pool_backend;

/* Counters since the pool was created. bytes_* count size-class (rounded) bytes. */
typedef struct tc_pool_stats {
    size_t bytes_in_use;    /* handed out and not yet freed */
    size_t bytes_requested; /* what callers asked for, of bytes_in_use (before rounding) */
    size_t bytes_cached;    /* freed, held for reuse */
    size_t bytes_reserved;  /* in use + cached: what the pool holds from the device */
    size_t peak_bytes_in_use;
    size_t peak_bytes_reserved;
    size_t limit_bytes; /* 0: none */
    size_t blocks_in_use;
    size_t blocks_cached;
    uint64_t allocs; /* successful tc_pool_alloc calls with bytes > 0 */
    uint64_t frees;
    uint64_t hits;         /* allocations served from the cache */
    uint64_t misses;       /* allocations that went to the backend */
    uint64_t cross_stream; /* hits that reused a block freed on another stream */
    uint64_t backend_allocs;
    uint64_t backend_frees;
    uint64_t oom;    /* allocations that failed for lack of memory */
    double hit_rate; /* hits / allocs, 0 when no allocations */
} tc_pool_stats;

/* Create a pool over `backend` (copied). `limit_bytes` caps bytes_reserved; 0 means none. */
TC_API tc_status tc_pool_create(const tc_pool_backend *backend, size_t limit_bytes, tc_pool **out);

/* Create a pool over ctx's device memory (cuMemAlloc). */
TC_API tc_status tc_pool_create_device(tc_context *ctx, size_t limit_bytes, tc_pool **out);

/* Free every block back to the backend (logging any still in use) and the pool; NULL is a
 * no-op. */
TC_API void tc_pool_destroy(tc_pool *pool);

/* Allocate at least `bytes` (256-byte aligned) for use on stream s; 0 bytes gives 0. The
 * block may be reused from the cache: a block freed on another stream is ordered after that
 * stream's queued work, so use on s is safe without host synchronisation. Out of memory
 * (device or limit) returns TC_ERR_OUT_OF_MEMORY with the request and the pool's state in
 * tc_last_error(). */
TC_API tc_status tc_pool_alloc(tc_pool *pool, size_t bytes, tc_stream *s, CUdeviceptr *out);

/* Return a block to the cache: work already queued on its stream may still use it, and only
 * work queued later can get it back. 0 is a no-op; an address the pool did not hand out is
 * TC_ERR_INVALID_ARGUMENT (a double free, for instance). */
TC_API tc_status tc_pool_free(tc_pool *pool, CUdeviceptr ptr);

/* Forget stream s before it is destroyed: wait for its work, then let cached blocks freed
 * on it be reused by any stream without ordering. Blocks in use on s keep working. */
TC_API tc_status tc_pool_release_stream(tc_pool *pool, tc_stream *s);

/* Give cached blocks back to the backend until at most `keep_bytes` stay cached. cuMemFree
 * waits for the device, so pending work on a cached block is never cut short. */
TC_API void tc_pool_trim(tc_pool *pool, size_t keep_bytes);

/* Change the limit (0: none), trimming the cache to fit; TC_ERR_LIMIT when the bytes in use
 * already exceed it (the limit is then unchanged). */
TC_API tc_status tc_pool_set_limit(tc_pool *pool, size_t limit_bytes);

/* Copy the pool's counters. */
TC_API void tc_pool_get_stats(tc_pool *pool, tc_pool_stats *out);

/* The size class that a request of `bytes` is rounded to. */
TC_API size_t tc_pool_round(size_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* TC_POOL_H */
