/* The replaceable host allocator behind tc_host_alloc and friends. */
#include "runtime/host.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>

static void *std_alloc(void *user, size_t bytes)
{
    (void)user;
    return malloc(bytes ? bytes : 1);
}

static void *std_realloc(void *user, void *ptr, size_t bytes)
{
    (void)user;
    return realloc(ptr, bytes ? bytes : 1);
}

static void std_free(void *user, void *ptr)
{
    (void)user;
    free(ptr);
}

static const tc_allocator std_allocator = { std_alloc, std_realloc, std_free, NULL };
static tc_allocator current = { std_alloc, std_realloc, std_free, NULL };

void tc_host_set_allocator(const tc_allocator *a)
{
    current = a ? *a : std_allocator;
}

void *tc_host_alloc(size_t bytes)
{
    return current.alloc(current.user, bytes);
}

void *tc_host_calloc(size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size)
        return NULL;
    void *p = current.alloc(current.user, n * size);
    if (p != NULL)
        memset(p, 0, n * size);
    return p;
}

void *tc_host_realloc(void *ptr, size_t bytes)
{
    return current.realloc(current.user, ptr, bytes);
}

void tc_host_free(void *ptr)
{
    if (ptr != NULL)
        current.free(current.user, ptr);
}

double tc_host_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The first unsigned number in file `path` (after the first line that starts with `key`, when
 * given), or false ("max" and missing files are false). */
static bool read_number(const char *path, const char *key, uint64_t *v)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[256];
    bool found = false;
    size_t klen = key ? strlen(key) : 0;
    while (!found && fgets(line, sizeof line, f)) {
        if (key && strncmp(line, key, klen) != 0)
            continue;
        unsigned long long n;
        found = sscanf(line + klen, " %llu", &n) == 1;
        if (found)
            *v = (uint64_t)n;
    }
    fclose(f);
    return found;
}

bool tc_host_memory_available(uint64_t *bytes)
{
    uint64_t kib, limit, used;
    bool known = read_number("/proc/meminfo", "MemAvailable:", &kib);
    if (known)
        *bytes = kib * 1024;
    if (read_number("/sys/fs/cgroup/memory.max", NULL, &limit) &&
        read_number("/sys/fs/cgroup/memory.current", NULL, &used)) {
        /* (the page cache charged to the group, a mapped model file's included, is reclaimed
         * before the limit bites: not counted as used) */
        uint64_t cache;
        if (read_number("/sys/fs/cgroup/memory.stat", "file ", &cache))
            used -= cache < used ? cache : used;
        uint64_t left = limit > used ? limit - used : 0;
        if (!known || left < *bytes)
            *bytes = left;
        known = true;
    }
    return known;
}
