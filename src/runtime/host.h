/* Host memory: every allocation the library makes goes through one replaceable allocator,
 * so that tests can inject failures. */
#ifndef TC_HOST_H
#define TC_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tc_bindings.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A host allocator: the same contracts as malloc, realloc and free, plus a user pointer. */
typedef struct tc_allocator {
    void *(*alloc)(void *user, size_t bytes);
    void *(*realloc)(void *user, void *ptr, size_t bytes);
    void (*free)(void *user, void *ptr);
    void *user;
} tc_allocator;

/* Use `a` for every later host allocation (NULL restores malloc); set it before any object
 * exists, since memory is freed by the allocator current at the time. */
TC_API void tc_host_set_allocator(const tc_allocator *a);

/* Allocate `bytes` (NULL when out of memory). */
TC_API void *tc_host_alloc(size_t bytes);

/* Allocate n * size zeroed bytes (NULL when out of memory or on overflow). */
TC_API void *tc_host_calloc(size_t n, size_t size);

/* Resize an allocation (NULL when out of memory; the old block is then untouched). */
TC_API void *tc_host_realloc(void *ptr, size_t bytes);

/* Free an allocation; NULL is a no-op. */
TC_API void tc_host_free(void *ptr);

/* Seconds on the monotonic clock, for timing. */
TC_API double tc_host_seconds(void);

/* The host memory this process could still take, in bytes: the kernel's MemAvailable
 * (/proc/meminfo), or less where a memory limit of the process's cgroup or one above it (v2,
 * or v1's memory controller) leaves less, its page cache counted as free. False where
 * neither can be read (then nothing is known). Allocations on Linux succeed beyond it and the
 * process is killed when it touches the pages; large ones check it first. */
TC_API bool tc_host_memory_available(uint64_t *bytes);

#ifdef __cplusplus
}
#endif

#endif /* TC_HOST_H */
