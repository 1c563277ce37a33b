/* The runtime on a real GPU: generated launchers with results checked on poisoned outputs,
 * argument packing of every scalar width, stream/event ordering, event timing, a deliberately
 * bad launch, and a pool stress test after which the device's free memory is what it was.
 * Exits 77 (skip) where there is no driver or GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/runtime.h"

#define SKIP 77

static int failures;

static void expect(int ok, const char *what)
{
    printf("%-64s %s\n", what, ok ? "ok" : "FAIL");
    if (!ok)
        failures++;
}

static tc_context *ctx;
static tc_stream *s1, *s2;
static tc_pool *pool;

static uint32_t rng = 2463534242u;
static uint32_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

static void fill_writes_exactly_its_range(void)
{
    const size_t n = 1000003, cut = 7;
    CUdeviceptr d;
    CHECK(tc_pool_alloc(pool, n * sizeof(float), s1, &d));
    CHECK(tc_stream_memset(s1, d, 0xFF, n * sizeof(float))); /* poison: NaN bits */
    tc_launch_config cfg;
    CHECK(tc_launch_config_1d(s1, TC_KERNEL_FILL_F32, n - cut, &cfg));
    CHECK(tc_launch_fill_f32(cfg, (float *)d, 3.25f, n - cut));
    float *h = malloc(n * sizeof(float));
    CHECK(tc_stream_copy_d2h(s1, h, d, n * sizeof(float)));
    CHECK(tc_stream_synchronize(s1));
    size_t good = 0, poison = 0;
    for (size_t i = 0; i < n - cut; i++)
        good += h[i] == 3.25f;
    for (size_t i = n - cut; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &h[i], 4);
        poison += bits == 0xFFFFFFFFu;
    }
    printf("  fill_f32: grid %u x block %u, %zu/%zu written, %zu/%zu poison kept\n", cfg.grid.x,
           cfg.block.x, good, n - cut, poison, cut);
    expect(good == n - cut && poison == cut, "fill_f32 launcher writes its range and no further");
    free(h);
    CHECK(tc_pool_free(pool, d));
}

static void copy_matches_bytes_at_any_alignment(void)
{
    const size_t n = (size_t)33 << 20;
    unsigned char *src = malloc(n), *back = malloc(n);
    for (size_t i = 0; i < n; i++)
        src[i] = (unsigned char)(next_rand() | 1);
    CUdeviceptr a, b;
    CHECK(tc_pool_alloc(pool, n, s1, &a));
    CHECK(tc_pool_alloc(pool, n, s1, &b));
    CHECK(tc_stream_copy_h2d(s1, a, src, n));
    int ok = 1;
    const size_t offs[][3] = {
        { 0, 0, n }, { 0, 0, 12345 }, { 3, 5, n - 100 }, { 16, 32, n - 64 }
    };
    for (int k = 0; k < 4 && ok; k++) {
        size_t so = offs[k][0], dof = offs[k][1], len = offs[k][2];
        CHECK(tc_stream_memset(s1, b, 0xA5, n));
        tc_launch_config cfg;
        CHECK(tc_launch_config_1d(s1, TC_KERNEL_COPY_U8, len / 16 + 1, &cfg));
        CHECK(tc_launch_copy_u8(cfg, (uint8_t *)(b + dof), (const uint8_t *)(a + so), len));
        CHECK(tc_stream_copy_d2h(s1, back, b, n));
        CHECK(tc_stream_synchronize(s1));
        ok = memcmp(back + dof, src + so, len) == 0;
        for (size_t i = 0; i < dof && ok; i++)
            ok = back[i] == 0xA5;
        for (size_t i = dof + len; i < n && ok; i++)
            ok = back[i] == 0xA5;
    }
    expect(ok, "copy_u8 launcher copies exactly, aligned and unaligned");
    CHECK(tc_pool_free(pool, a));
    CHECK(tc_pool_free(pool, b));
    free(src);
    free(back);
}

static void scalar_arguments_arrive_bit_exact(void)
{
    CUdeviceptr d;
    CHECK(tc_pool_alloc(pool, 9 * 8, s1, &d));
    tc_half g = { 0xC248 }; /* -3.140625 */
    tc_bf16 h = { 0x3FC0 }; /* 1.5 */
    tc_launch_config cfg = { tc_dim1(1), tc_dim1(32), 0, s1 };
    CHECK(tc_launch_selftest_params(cfg, (int8_t)-100, (int16_t)-30000, (int32_t)-2000000000,
                                    (int64_t)-8000000000000000000ll, -1.25e-3f, 6.02214076e23, g, h,
                                    (uint8_t)201, (uint64_t *)d));
    uint64_t out[9];
    CHECK(tc_stream_copy_d2h(s1, out, d, sizeof out));
    CHECK(tc_stream_synchronize(s1));
    float e = -1.25e-3f;
    double f = 6.02214076e23;
    uint32_t eb;
    uint64_t fb;
    memcpy(&eb, &e, 4);
    memcpy(&fb, &f, 8);
    int ok = (int64_t)out[0] == -100 && (int64_t)out[1] == -30000 &&
             (int64_t)out[2] == -2000000000 && (int64_t)out[3] == -8000000000000000000ll &&
             out[4] == eb && out[5] == fb && out[6] == 0xC248 && out[7] == 0x3FC0 && out[8] == 201;
    expect(ok, "every scalar width reaches the kernel bit-exact");
    CHECK(tc_pool_free(pool, d));
}

static void streams_and_events_order_work(void)
{
    CUdeviceptr x, y;
    CHECK(tc_pool_alloc(pool, 4, s1, &x));
    CHECK(tc_pool_alloc(pool, 4, s1, &y));
    CHECK(tc_stream_memset(s1, x, 0, 4));
    CHECK(tc_stream_memset(s1, y, 0, 4));
    CHECK(tc_stream_synchronize(s1));
    tc_event *start, *done;
    CHECK(tc_event_create(ctx, true, &start));
    CHECK(tc_event_create(ctx, true, &done));
    CHECK(tc_event_record(start, s1));
    tc_launch_config one = { tc_dim1(1), tc_dim1(1), 0, s1 };
    CHECK(tc_launch_selftest_delay_store(one, (int32_t *)x, (int32_t)1, (uint64_t)50000000));
    CHECK(tc_event_record(done, s1));
    bool finished = true;
    CHECK(tc_event_query(done, &finished));
    /* s2 must see x == 1: it waits for `done`, queued after the 50 ms store on s1. */
    CHECK(tc_stream_wait_event(s2, done));
    CHECK(tc_stream_copy_d2d(s2, y, x, 4));
    int32_t seen = -1;
    CHECK(tc_stream_copy_d2h(s2, &seen, y, 4));
    CHECK(tc_stream_synchronize(s2));
    bool now = false;
    CHECK(tc_event_query(done, &now));
    float ms = 0;
    CHECK(tc_event_elapsed_ms(start, done, &ms));
    printf("  delay kernel: %.2f ms by events; pending right after launch: %s\n", ms,
           finished ? "no" : "yes");
    expect(!finished && now, "event query: pending during the delay, complete after");
    expect(seen == 1, "a stream waiting on an event sees the other stream's store");
    expect(ms >= 49.0f && ms < 500.0f, "event elapsed time covers the 50 ms delay");
    tc_event_destroy(start);
    tc_event_destroy(done);
    CHECK(tc_pool_free(pool, x));
    CHECK(tc_pool_free(pool, y));
}

static void bad_launches_fail_and_leave_the_context_usable(void)
{
    CUdeviceptr d;
    CHECK(tc_pool_alloc(pool, 1024, s1, &d));
    tc_launch_config cfg = { tc_dim1(1), tc_dim1(2048), 0, s1 };
    tc_status st = tc_launch_fill_f32(cfg, (float *)d, 1.0f, (size_t)256);
    printf("  block 2048: %s\n", tc_last_error());
    expect(st == TC_ERR_LAUNCH && strstr(tc_last_error(), "tc_k_fill_f32"),
           "too many threads per block: TC_ERR_LAUNCH naming the kernel");
    cfg.block = tc_dim1(256);
    cfg.shared_bytes = 1u << 20;
    st = tc_launch_fill_f32(cfg, (float *)d, 1.0f, (size_t)256);
    printf("  1 MiB shared: %s\n", tc_last_error());
    expect(st == TC_ERR_LAUNCH && strstr(tc_last_error(), "shared memory"),
           "too much shared memory: TC_ERR_LAUNCH naming the kernel");
    cfg.shared_bytes = 200000; /* above 48 KiB: the runtime opts in */
    st = tc_launch_fill_f32(cfg, (float *)d, 2.0f, (size_t)256);
    float h[256];
    CHECK(tc_stream_copy_d2h(s1, h, d, sizeof h));
    CHECK(tc_stream_synchronize(s1));
    expect(st == TC_OK && h[0] == 2.0f && h[255] == 2.0f,
           "200 KB of dynamic shared memory opts in and runs");
    CHECK(tc_pool_free(pool, d));
}

static void pool_stress_returns_all_memory(void)
{
    size_t free0 = 0, total = 0, free1 = 0, free2 = 0;
    CHECK(tc_context_synchronize(ctx));
    CHECK(tc_context_mem_info(ctx, &free0, &total));
    tc_pool *p;
    CHECK(tc_pool_create_device(ctx, (size_t)8 << 30, &p));
    enum { HELD = 256 };
    CUdeviceptr held[HELD] = { 0 };
    size_t sizes[HELD] = { 0 };
    tc_stream *on[HELD] = { 0 };
    int ooms = 0, checked = 0, bad = 0;
    for (int op = 0; op < 20000; op++) {
        int i = (int)(next_rand() % HELD);
        if (held[i]) {
            if (op % 97 == 0) {
                /* Verify a block's contents survive until it is freed. */
                uint32_t first = 0;
                CHECK(tc_stream_copy_d2h(on[i], &first, held[i], 4));
                CHECK(tc_stream_synchronize(on[i]));
                bad += first != (uint32_t)(0x01010101u * (unsigned)(i & 0x7F));
                checked++;
            }
            CHECK(tc_pool_free(p, held[i]));
            held[i] = 0;
        } else {
            size_t shift = next_rand() % 5;
            sizes[i] = (size_t)(1 + next_rand() % 4096) << (shift * 4);
            on[i] = next_rand() % 2 ? s1 : s2;
            tc_status st = tc_pool_alloc(p, sizes[i], on[i], &held[i]);
            if (st == TC_ERR_OUT_OF_MEMORY) {
                ooms++;
                continue;
            }
            CHECK(st);
            CHECK(tc_stream_memset(on[i], held[i], (unsigned char)(i & 0x7F), sizes[i]));
        }
    }
    tc_pool_stats st;
    tc_pool_get_stats(p, &st);
    CHECK(tc_context_mem_info(ctx, &free1, &total));
    for (int i = 0; i < HELD; i++)
        if (held[i])
            CHECK(tc_pool_free(p, held[i]));
    CHECK(tc_stream_synchronize(s1));
    CHECK(tc_stream_synchronize(s2));
    tc_pool_destroy(p);
    CHECK(tc_context_mem_info(ctx, &free2, &total));
    printf("  pool stress: %llu allocs, hit rate %.3f, %llu cross-stream, peak reserved %.1f MiB, "
           "%d over the 8 GiB limit, %d blocks verified\n",
           (unsigned long long)st.allocs, st.hit_rate, (unsigned long long)st.cross_stream,
           (double)st.peak_bytes_reserved / 1048576.0, ooms, checked);
    printf("  device free: before %zu, during %zu, after %zu bytes\n", free0, free1, free2);
    expect(bad == 0, "pooled blocks keep their contents until freed");
    expect(free2 == free0, "device free memory after the pool equals before");
}

static void kernel_parameters_checked_at_load(void)
{
    bool has = tc_available("cuFuncGetParamInfo");
    printf("  driver has cuFuncGetParamInfo: %s; fatbin %zu bytes for %s\n", has ? "yes" : "no",
           tc_module_fatbin_size(), tc_module_targets());
    expect(tc_module_load(ctx) == TC_OK, "embedded kernels load (parameter lists checked)");
}

int main(void)
{
    tc_status st = tc_device_init();
    if (st == TC_ERR_LIBRARY_NOT_FOUND || st == TC_ERR_NO_DEVICE) {
        printf("SKIP: %s\n", tc_last_error_detail());
        return SKIP;
    }
    CHECK(st);
    CHECK(tc_context_retain(0, &ctx));
    CHECK(tc_stream_create(ctx, 0, &s1));
    CHECK(tc_stream_create(ctx, -1, &s2));
    CHECK(tc_pool_create_device(ctx, 0, &pool));
    kernel_parameters_checked_at_load();
    fill_writes_exactly_its_range();
    copy_matches_bytes_at_any_alignment();
    scalar_arguments_arrive_bit_exact();
    streams_and_events_order_work();
    bad_launches_fail_and_leave_the_context_usable();
    tc_pool_destroy(pool);
    pool_stress_returns_all_memory();
    tc_stream_destroy(s1);
    tc_stream_destroy(s2);
    tc_context_release(ctx);
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
