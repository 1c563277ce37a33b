/* Runtime benchmarks on a GPU (figures, never pass/fail):
 *   pool      allocate+free pairs: the pool's cached path vs cuMemAlloc+cuMemFree vs the
 *             driver's stream-ordered cuMemAllocAsync+cuMemFreeAsync, ns per pair
 *   copy      host<->device with pinned memory, device-to-device by cuMemcpy and by our
 *             copy kernel, GB/s and the fraction of the 3.0 TB/s device bandwidth
 *   startup   process start to a ready context with the kernels loaded, median of 10 runs
 * Usage: bench_runtime [pool|copy|startup|all] ; bench_runtime --child (used by startup) */
#define _GNU_SOURCE
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "runtime/runtime.h"

extern char **environ;

#define DEVICE_BW_GBS 3000.0 /* measured D2D bandwidth of the H100 target (GPU.md) */

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static tc_context *ctx;
static tc_stream *stream;

enum { REPS = 5 };

static double bench_raw(size_t bytes, int iters)
{
    double t[REPS];
    for (int r = 0; r < REPS; r++) {
        double t0 = now_ns();
        for (int i = 0; i < iters; i++) {
            CUdeviceptr p;
            CHECK(tc_cuMemAlloc(&p, bytes));
            CHECK(tc_cuMemFree(p));
        }
        t[r] = (now_ns() - t0) / iters;
    }
    return median(t, REPS);
}

static double bench_async(size_t bytes, int iters)
{
    CUstream cs = tc_stream_handle(stream);
    double t[REPS];
    for (int r = 0; r < REPS; r++) {
        double t0 = now_ns();
        for (int i = 0; i < iters; i++) {
            CUdeviceptr p;
            CHECK(tc_cuMemAllocAsync(&p, bytes, cs));
            CHECK(tc_cuMemFreeAsync(p, cs));
        }
        CHECK(tc_stream_synchronize(stream));
        t[r] = (now_ns() - t0) / iters;
    }
    return median(t, REPS);
}

static double bench_pool(tc_pool *pool, size_t bytes, int iters)
{
    double t[REPS];
    CUdeviceptr warm;
    CHECK(tc_pool_alloc(pool, bytes, stream, &warm));
    CHECK(tc_pool_free(pool, warm));
    for (int r = 0; r < REPS; r++) {
        double t0 = now_ns();
        for (int i = 0; i < iters; i++) {
            CUdeviceptr p;
            CHECK(tc_pool_alloc(pool, bytes, stream, &p));
            CHECK(tc_pool_free(pool, p));
        }
        t[r] = (now_ns() - t0) / iters;
    }
    return median(t, REPS);
}

static void run_pool(void)
{
    /* Keep the driver's default pool's memory across frees, as a caching allocator would. */
    CUmemoryPool mp;
    CHECK(tc_cuDeviceGetDefaultMemPool(&mp, 0));
    cuuint64_t keep = ~(cuuint64_t)0;
    CHECK(tc_cuMemPoolSetAttribute(mp, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
    tc_pool *pool;
    CHECK(tc_pool_create_device(ctx, 0, &pool));
    const size_t sizes[] = { 4096, (size_t)1 << 20, (size_t)64 << 20 };
    printf("\n%-10s %16s %18s %14s %12s %12s\n", "size", "cuMemAlloc+Free", "AllocAsync+Free",
           "tc_pool", "vs raw", "vs async");
    for (int k = 0; k < 3; k++) {
        double raw = bench_raw(sizes[k], 2000);
        double async = bench_async(sizes[k], 20000);
        double pooled = bench_pool(pool, sizes[k], 200000);
        char label[32];
        snprintf(label, sizeof label, "%zu KiB", sizes[k] >> 10);
        printf("%-10s %13.0f ns %15.0f ns %11.1f ns %11.0fx %11.1fx\n", label, raw, async, pooled,
               raw / pooled, async / pooled);
    }
    tc_pool_destroy(pool);
}

/* GB/s of one timed operation, median over REPS after a warm-up. */
typedef void (*op_fn)(void *arg);

static double time_op(op_fn op, void *arg, double bytes_moved)
{
    tc_event *a, *b;
    CHECK(tc_event_create(ctx, true, &a));
    CHECK(tc_event_create(ctx, true, &b));
    op(arg);
    double gbs[REPS];
    for (int r = 0; r < REPS; r++) {
        CHECK(tc_event_record(a, stream));
        op(arg);
        CHECK(tc_event_record(b, stream));
        CHECK(tc_event_synchronize(b));
        float ms;
        CHECK(tc_event_elapsed_ms(a, b, &ms));
        gbs[r] = bytes_moved / ((double)ms * 1e-3) / 1e9;
    }
    tc_event_destroy(a);
    tc_event_destroy(b);
    return median(gbs, REPS);
}

typedef struct copy_arg {
    void *host;
    CUdeviceptr a, b;
    size_t bytes;
    tc_launch_config cfg;
} copy_arg;

static void op_h2d(void *p)
{
    copy_arg *c = p;
    CHECK(tc_stream_copy_h2d(stream, c->a, c->host, c->bytes));
}

static void op_d2h(void *p)
{
    copy_arg *c = p;
    CHECK(tc_stream_copy_d2h(stream, c->host, c->a, c->bytes));
}

static void op_d2d(void *p)
{
    copy_arg *c = p;
    CHECK(tc_stream_copy_d2d(stream, c->b, c->a, c->bytes));
}

static void op_kernel(void *p)
{
    copy_arg *c = p;
    CHECK(tc_launch_copy_u8(c->cfg, (uint8_t *)c->b, (const uint8_t *)c->a, c->bytes));
}

static void run_copy(void)
{
    tc_pool *pool;
    CHECK(tc_pool_create_device(ctx, 0, &pool));
    copy_arg c = { 0 };
    c.bytes = (size_t)1 << 30;
    size_t host_bytes = (size_t)256 << 20;
    CHECK(tc_pinned_alloc(ctx, host_bytes, &c.host));
    memset(c.host, 0x5A, host_bytes);
    CHECK(tc_pool_alloc(pool, c.bytes, stream, &c.a));
    CHECK(tc_pool_alloc(pool, c.bytes, stream, &c.b));
    CHECK(tc_stream_memset(stream, c.a, 0x3C, c.bytes));
    size_t full = c.bytes;
    c.bytes = host_bytes;
    double h2d = time_op(op_h2d, &c, (double)host_bytes);
    double d2h = time_op(op_d2h, &c, (double)host_bytes);
    c.bytes = full;
    double d2d = time_op(op_d2d, &c, 2.0 * (double)full);
    /* The copy kernel at the occupancy block size, one full wave of blocks. */
    int min_grid = 0, block = 0;
    CHECK(tc_launch_block_size(ctx, TC_KERNEL_COPY_U8, 0, 0, &min_grid, &block));
    c.cfg = (tc_launch_config){ tc_dim1((uint32_t)min_grid), tc_dim1((uint32_t)block), 0, stream };
    double kern = time_op(op_kernel, &c, 2.0 * (double)full);
    printf("\n%-34s %10s %14s\n", "copy (1 GiB device, 256 MiB host)", "GB/s", "of 3.0 TB/s");
    printf("%-34s %10.1f %14s\n", "host->device, pinned", h2d, "-");
    printf("%-34s %10.1f %14s\n", "device->host, pinned", d2h, "-");
    printf("%-34s %10.1f %13.1f%%\n", "device->device, cuMemcpyDtoDAsync", d2d,
           100.0 * d2d / DEVICE_BW_GBS);
    printf("%-34s %10.1f %13.1f%%   (grid %d x block %d)\n", "device->device, tc_k_copy_u8", kern,
           100.0 * kern / DEVICE_BW_GBS, min_grid, block);
    CHECK(tc_pool_free(pool, c.a));
    CHECK(tc_pool_free(pool, c.b));
    tc_pinned_free(ctx, c.host);
    tc_pool_destroy(pool);
}

/* The child: get to a ready context with the kernels loaded, then print the clock. */
static int child(void)
{
    tc_context *c;
    CHECK(tc_context_retain(0, &c));
    CHECK(tc_module_load(c));
    printf("%.0f\n", now_ns());
    tc_context_release(c);
    return 0;
}

static void run_startup(const char *self)
{
    double ms[10];
    for (int r = 0; r < 10; r++) {
        int fd[2];
        if (pipe(fd) != 0)
            exit(1);
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
        posix_spawn_file_actions_addclose(&fa, fd[0]);
        char *argv[] = { (char *)self, "--child", NULL };
        pid_t pid;
        double t0 = now_ns();
        if (posix_spawn(&pid, self, &fa, NULL, argv, environ) != 0)
            exit(1);
        close(fd[1]);
        char buf[64] = { 0 };
        ssize_t n = read(fd[0], buf, sizeof buf - 1);
        close(fd[0]);
        int status;
        waitpid(pid, &status, 0);
        if (n <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "startup child failed\n");
            exit(1);
        }
        ms[r] = (strtod(buf, NULL) - t0) / 1e6;
        posix_spawn_file_actions_destroy(&fa);
    }
    double lo = ms[0], hi = ms[0];
    for (int r = 1; r < 10; r++) {
        lo = ms[r] < lo ? ms[r] : lo;
        hi = ms[r] > hi ? ms[r] : hi;
    }
    printf("\nstartup (spawn -> context + kernels loaded), 10 runs: median %.1f ms, min %.1f, "
           "max %.1f\n",
           median(ms, 10), lo, hi);
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "all";
    if (strcmp(what, "--child") == 0)
        return child();
    tc_status st = tc_device_init();
    if (st != TC_OK) {
        fprintf(stderr, "bench_runtime: %s\n", tc_last_error_detail());
        return 77;
    }
    bool all = strcmp(what, "all") == 0;
    if (all || strcmp(what, "startup") == 0)
        run_startup(argv[0]);
    CHECK(tc_context_retain(0, &ctx));
    CHECK(tc_stream_create(ctx, 0, &stream));
    tc_device_info info;
    CHECK(tc_device_info_get(0, &info));
    printf("\n%s, sm_%d%d, %d SMs\n", info.name, info.cc_major, info.cc_minor, info.sm_count);
    if (all || strcmp(what, "pool") == 0)
        run_pool();
    if (all || strcmp(what, "copy") == 0)
        run_copy();
    tc_stream_destroy(stream);
    tc_context_release(ctx);
    return 0;
}
