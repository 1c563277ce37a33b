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

/* The room a cgroup directory's limit leaves: the limit less what is charged, its page cache
 * (reclaimed before the limit bites: a mapped model file's pages among it) not counted. v2:
 * memory.max, memory.current, memory.stat's "file"; v1: memory.limit_in_bytes,
 * memory.usage_in_bytes, memory.stat's "total_cache". False where the directory sets none. */
static bool cgroup_room(const char *dir, bool v1, uint64_t *left)
{
    char path[512];
    uint64_t limit, used, cache;
    snprintf(path, sizeof path, "%.480s/%s", dir, v1 ? "memory.limit_in_bytes" : "memory.max");
    if (!read_number(path, NULL, &limit))
        return false;
    snprintf(path, sizeof path, "%.480s/%s", dir, v1 ? "memory.usage_in_bytes" : "memory.current");
    if (!read_number(path, NULL, &used))
        return false;
    snprintf(path, sizeof path, "%.480s/memory.stat", dir);
    if (read_number(path, v1 ? "total_cache " : "file ", &cache))
        used -= cache < used ? cache : used;
    *left = limit > used ? limit - used : 0;
    return true;
}

/* The tightest room over the process's group of one hierarchy (its /proc/self/cgroup path
 * under root) and each group above it. */
static void hierarchy_room(const char *root, const char *group, bool v1, bool *known,
                           uint64_t *bytes)
{
    char g[400], dir[460];
    snprintf(g, sizeof g, "%s", strcmp(group, "/") == 0 ? "" : group);
    for (;;) {
        snprintf(dir, sizeof dir, "%s%.400s", root, g);
        uint64_t left;
        if (cgroup_room(dir, v1, &left) && (!*known || left < *bytes)) {
            *bytes = left;
            *known = true;
        }
        char *slash = strrchr(g, '/');
        if (!slash)
            break;
        *slash = 0; /* the parent ("" for the root) */
    }
}

bool tc_host_memory_available(uint64_t *bytes)
{
    uint64_t kib;
    bool known = read_number("/proc/meminfo", "MemAvailable:", &kib);
    if (known)
        *bytes = kib * 1024;
    /* The groups of the unified hierarchy ("0::path") and of v1's memory controller
     * ("N:memory:path"), where mounted at the usual places. */
    char line[512];
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return known;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        const char *v1 = strstr(line, ":memory:");
        if (strncmp(line, "0::", 3) == 0)
            hierarchy_room("/sys/fs/cgroup", line + 3, false, &known, bytes);
        else if (v1)
            hierarchy_room("/sys/fs/cgroup/memory", v1 + 8, true, &known, bytes);
    }
    fclose(f);
    return known;
}
