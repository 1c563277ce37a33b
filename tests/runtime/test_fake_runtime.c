/* The runtime against the stand-in driver (fake_driver.c), no GPU needed: device queries,
 * context sharing, launches through generated launchers (argument packing, configuration
 * checks naming the kernel), and the load-time checks that catch a stale or foreign fatbin.
 * argv[1] picks the scenario the fake was told to play: normal, skew, drop or nobinary. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fake_driver.h"
#include "runtime/runtime.h"

/* Internal (runtime/internal.h): one timed launch added to the profile table. */
void tc__profile_add(tc_kernel_id id, double ms, double occupancy);

static fake_launch *launches(void)
{
    void *h = dlopen(getenv("THINCUDA_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    fake_launch *l = dlsym(h, "fake_launch_v");
    assert_non_null(l);
    return l;
}

static tc_context *ctx;
static tc_stream *stream;

static int setup(void **state)
{
    (void)state;
    if (tc_context_retain(0, &ctx) != TC_OK)
        return -1;
    return tc_stream_create(ctx, 0, &stream) == TC_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tc_stream_destroy(stream);
    tc_context_release(ctx);
    return 0;
}

static void device_info_and_attributes_come_from_the_driver(void **state)
{
    (void)state;
    tc_device_info d;
    assert_int_equal(tc_device_info_get(0, &d), TC_OK);
    assert_string_equal(d.name, "Fake GPU");
    assert_int_equal(d.cc_major, 9);
    assert_int_equal(d.sm_count, 132);
    assert_string_equal(d.uuid_str, "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f");
    assert_string_equal(d.pci_bus_id, "0000:42:00.0");
    size_t cap = tc_device_attribute_max(), n = 0;
    tc_device_attribute *a = calloc(cap, sizeof *a);
    assert_int_equal(tc_device_attributes(0, a, cap, &n), TC_OK);
    /* The fake knows attributes 1..120: each is listed once, with its value, in order. */
    size_t expect = 0;
    for (size_t i = 0; i < cap; i++)
        expect += tc_enum_CUdevice_attribute[i].value <= 120;
    assert_int_equal(n, expect);
    assert_true(n > 100);
    for (size_t i = 0; i < n; i++) {
        if (a[i].attr == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            assert_int_equal(a[i].value, 132);
        assert_true(i == 0 || a[i].attr > a[i - 1].attr);
        assert_non_null(strstr(a[i].name, "CU_DEVICE_ATTRIBUTE_"));
    }
    free(a);
    tc_device_info bad;
    assert_int_equal(tc_device_info_get(3, &bad), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "no device 3"));
}

static void contexts_are_shared_per_device(void **state)
{
    (void)state;
    tc_context *again = NULL;
    assert_int_equal(tc_context_retain(0, &again), TC_OK);
    assert_ptr_equal(again, ctx);
    tc_context_release(again);
    tc_context *none = NULL;
    assert_int_equal(tc_context_retain(1, &none), TC_ERR_INVALID_ARGUMENT);
    assert_null(none);
    tc_context_release(NULL);
}

static void stream_priorities_are_clamped_to_the_device_range(void **state)
{
    (void)state;
    tc_stream *hi = NULL, *lo = NULL;
    assert_int_equal(tc_stream_create(ctx, -100, &hi), TC_OK);
    assert_int_equal(tc_stream_create(ctx, 100, &lo), TC_OK);
    assert_int_equal(tc_stream_priority(hi), -5);
    assert_int_equal(tc_stream_priority(lo), 0);
    tc_stream_destroy(hi);
    tc_stream_destroy(lo);
    tc_stream_destroy(NULL);
}

static void launcher_passes_each_argument_at_its_abi_offset(void **state)
{
    (void)state;
    fake_launch *l = launches();
    tc_launch_config cfg = { tc_dim1(3), tc_dim1(64), 0, stream };
    tc_half g = { 0x3C00 };
    tc_bf16 h = { 0x4049 };
    uint64_t *out = (uint64_t *)(uintptr_t)0xDEADBEEF00ull;
    assert_int_equal(tc_launch_selftest_params(cfg, (int8_t)-3, (int16_t)-300, (int32_t)123456,
                                               (int64_t)-9000000000ll, 1.5f, 2.25, g, h,
                                               (uint8_t)250, out),
                     TC_OK);
    assert_string_equal(l->kernel, "tc_k_selftest_params");
    assert_int_equal(l->grid[0], 3);
    assert_int_equal(l->block[0], 64);
    assert_ptr_equal(l->stream, tc_stream_handle(stream));
    /* CUDA aligns each parameter to its size: a@0 b@2 c@4 d@8 e@16 f@24 g@32 h@34 i@36 out@40 */
    const unsigned char *p = l->params;
    int8_t a;
    int16_t b;
    int32_t c;
    int64_t d;
    float e;
    double f;
    uint16_t gb, hb;
    uint8_t i;
    uint64_t *o;
    memcpy(&a, p + 0, 1);
    memcpy(&b, p + 2, 2);
    memcpy(&c, p + 4, 4);
    memcpy(&d, p + 8, 8);
    memcpy(&e, p + 16, 4);
    memcpy(&f, p + 24, 8);
    memcpy(&gb, p + 32, 2);
    memcpy(&hb, p + 34, 2);
    memcpy(&i, p + 36, 1);
    memcpy(&o, p + 40, 8);
    assert_int_equal(a, -3);
    assert_int_equal(b, -300);
    assert_int_equal(c, 123456);
    assert_true(d == -9000000000ll);
    assert_true(e == 1.5f);
    assert_true(f == 2.25);
    assert_int_equal(gb, 0x3C00);
    assert_int_equal(hb, 0x4049);
    assert_int_equal(i, 250);
    assert_ptr_equal(o, out);
    assert_int_equal(l->params_bytes, 48);
}

static void bad_configurations_fail_naming_the_kernel(void **state)
{
    (void)state;
    fake_launch *l = launches();
    int before = l->count;
    float *out = (float *)(uintptr_t)0x1000;
    tc_launch_config cfg = { tc_dim1(1), tc_dim1(2048), 0, stream };
    assert_int_equal(tc_launch_fill_f32(cfg, out, 1.0f, (size_t)10), TC_ERR_LAUNCH);
    assert_non_null(strstr(tc_last_error(), "tc_k_fill_f32"));
    assert_non_null(strstr(tc_last_error(), "kernels/copy.cu"));
    assert_non_null(strstr(tc_last_error(), "block extent x is 2048"));
    cfg.block = (tc_dim3){ 32, 32, 2 };
    assert_int_equal(tc_launch_fill_f32(cfg, out, 1.0f, (size_t)10), TC_ERR_LAUNCH);
    assert_non_null(strstr(tc_last_error(), "2048 threads per block"));
    cfg.block = tc_dim1(128);
    cfg.grid = tc_dim1(0);
    assert_int_equal(tc_launch_fill_f32(cfg, out, 1.0f, (size_t)10), TC_ERR_LAUNCH);
    cfg.grid = (tc_dim3){ 1, 70000, 1 };
    assert_int_equal(tc_launch_fill_f32(cfg, out, 1.0f, (size_t)10), TC_ERR_LAUNCH);
    assert_non_null(strstr(tc_last_error(), "grid extent y"));
    cfg.grid = tc_dim1(1);
    cfg.shared_bytes = 300000;
    assert_int_equal(tc_launch_fill_f32(cfg, out, 1.0f, (size_t)10), TC_ERR_LAUNCH);
    assert_non_null(strstr(tc_last_error(), "shared memory"));
    cfg.stream = NULL;
    cfg.shared_bytes = 0;
    assert_int_equal(tc_launch_fill_f32(cfg, out, 1.0f, (size_t)10), TC_ERR_INVALID_ARGUMENT);
    assert_int_equal(l->count, before);
}

static void clusters_reach_the_launch_and_are_checked(void **state)
{
    (void)state;
    fake_launch *l = launches();
    float *out = (float *)(uintptr_t)0x1000;
    tc_launch_config cfg = { { 6, 4, 1 }, tc_dim1(256), 0, stream };
    /* No cluster: the plain launch. */
    assert_int_equal(tc_launch_fill_f32(cfg, out, 1.0f, (size_t)10), TC_OK);
    assert_int_equal(l->ex, 0);
    /* Blocks 4 along y a cluster: the attribute, through cuLaunchKernelEx. */
    assert_int_equal(tc_stream_set_cluster(stream, (tc_dim3){ 1, 4, 1 }), TC_OK);
    assert_int_equal(tc_stream_cluster(stream).y, 4);
    int before = l->count;
    assert_int_equal(tc_launch_fill_f32(cfg, out, 1.0f, (size_t)10), TC_OK);
    assert_int_equal(l->count, before + 1);
    assert_int_equal(l->ex, 1);
    assert_int_equal(l->overlap, 0);
    assert_int_equal(l->cluster[0], 1);
    assert_int_equal(l->cluster[1], 4);
    assert_int_equal(l->cluster[2], 1);
    assert_int_equal(l->grid[0], 6);
    assert_int_equal(l->grid[1], 4);
    /* 8 GPCs of 16 SMs, 8 blocks of 256 threads an SM: 32 clusters of 4 in each. */
    int clusters = 0;
    assert_int_equal(tc_launch_max_clusters(TC_KERNEL_FILL_F32, &cfg, &clusters), TC_OK);
    assert_int_equal(clusters, 256);
    /* With programmatic launches as well: both attributes. */
    assert_int_equal(tc_stream_set_overlap(stream, true), TC_OK);
    assert_int_equal(tc_launch_fill_f32(cfg, out, 1.0f, (size_t)10), TC_OK);
    assert_int_equal(l->overlap, 1);
    assert_int_equal(l->cluster[1], 4);
    assert_int_equal(tc_stream_set_overlap(stream, false), TC_OK);
    /* An extent that does not divide the grid fails, naming the kernel; nothing launches. */
    before = l->count;
    cfg.grid = (tc_dim3){ 6, 3, 1 };
    assert_int_equal(tc_launch_fill_f32(cfg, out, 1.0f, (size_t)10), TC_ERR_LAUNCH);
    assert_non_null(strstr(tc_last_error(), "tc_k_fill_f32"));
    assert_non_null(strstr(tc_last_error(), "cluster extent y is 4"));
    assert_int_equal(tc_launch_max_clusters(TC_KERNEL_FILL_F32, &cfg, &clusters), TC_ERR_LAUNCH);
    assert_int_equal(l->count, before);
    /* Bad extents are refused when set, and leave the stream's as it was. */
    assert_int_equal(tc_stream_set_cluster(stream, (tc_dim3){ 3, 3, 1 }), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "3 x 3 x 1"));
    assert_int_equal(tc_stream_set_cluster(stream, (tc_dim3){ 0, 2, 1 }), TC_ERR_INVALID_ARGUMENT);
    assert_int_equal(tc_stream_cluster(stream).y, 4);
    /* Set back: plain launches again, and no cluster to count. */
    assert_int_equal(tc_stream_set_cluster(stream, (tc_dim3){ 0, 0, 0 }), TC_OK);
    assert_int_equal(tc_launch_fill_f32(cfg, out, 1.0f, (size_t)10), TC_OK);
    assert_int_equal(l->ex, 0);
    assert_int_equal(tc_launch_max_clusters(TC_KERNEL_FILL_F32, &cfg, &clusters),
                     TC_ERR_INVALID_ARGUMENT);
}

static void large_shared_memory_opts_in_once(void **state)
{
    (void)state;
    fake_launch *l = launches();
    int calls = l->set_attribute_calls;
    float *out = (float *)(uintptr_t)0x1000;
    tc_launch_config cfg = { tc_dim1(1), tc_dim1(128), 100000, stream };
    assert_int_equal(tc_launch_fill_f32(cfg, out, 1.0f, (size_t)10), TC_OK);
    assert_int_equal(tc_launch_fill_f32(cfg, out, 1.0f, (size_t)10), TC_OK);
    assert_int_equal(l->set_attribute_calls, calls + 1);
    assert_int_equal(l->last_dyn_shared, 100000);
    assert_int_equal(l->shared, 100000);
}

static void carveout_preference_reaches_the_kernel(void **state)
{
    (void)state;
    fake_launch *l = launches();
    l->last_carveout = 55;
    assert_int_equal(tc_launch_set_carveout(ctx, TC_KERNEL_FILL_F32, 0), TC_OK);
    assert_int_equal(l->last_carveout, 0);
    assert_string_equal(l->carveout_kernel, "tc_k_fill_f32");
    assert_int_equal(tc_launch_set_carveout(ctx, TC_KERNEL_FILL_F32, -1), TC_OK);
    assert_int_equal(l->last_carveout, -1);
    assert_int_equal(tc_launch_set_carveout(ctx, TC_KERNEL_FILL_F32, 101), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "101"));
    assert_int_equal(tc_launch_set_carveout(ctx, TC_KERNEL_FILL_F32, -2), TC_ERR_INVALID_ARGUMENT);
    assert_int_equal(tc_launch_set_carveout(ctx, (tc_kernel_id)-1, 0), TC_ERR_INVALID_ARGUMENT);
    assert_int_equal(l->last_carveout, -1);
}

static void occupancy_helpers_size_grid_stride_launches(void **state)
{
    (void)state;
    tc_launch_config cfg;
    assert_int_equal(tc_launch_config_1d(stream, TC_KERNEL_FILL_F32, 1000000, &cfg), TC_OK);
    assert_int_equal(cfg.block.x, 768);
    assert_int_equal(cfg.grid.x, 264);
    assert_int_equal(tc_launch_config_1d(stream, TC_KERNEL_FILL_F32, 1000, &cfg), TC_OK);
    assert_int_equal(cfg.grid.x, 2);
}

static void profiling_counts_times_and_tabulates_each_kernel(void **state)
{
    (void)state;
    char table[4096];
    tc_profile_enable(true);
    tc_profile_reset();
    assert_int_equal(tc_profile_format(table, sizeof table), 0);
    tc_launch_config cfg = { tc_dim1(4), tc_dim1(256), 0, stream };
    for (int i = 0; i < 3; i++)
        assert_int_equal(tc_launch_fill_f32(cfg, (float *)(uintptr_t)0x1000, 1.0f, (size_t)1024),
                         TC_OK);
    cfg.block = tc_dim1(1024);
    assert_int_equal(tc_launch_fill_f32(cfg, (float *)(uintptr_t)0x1000, 1.0f, (size_t)1024),
                     TC_OK);
    tc_profile_enable(false);
    assert_int_equal(tc_launch_fill_f32(cfg, (float *)(uintptr_t)0x1000, 1.0f, (size_t)1024),
                     TC_OK); /* not profiled */
    size_t need = tc_profile_format(table, sizeof table);
    assert_true(need > 0 && need < sizeof table);
    assert_int_equal(strlen(table), need);
    /* Four launches of 0.25 ms (the fake's events); occupancy 8 blocks of 256 threads and 2 of
     * 1024 over 2048 threads: 100% both, so the mean is 100%. */
    assert_non_null(strstr(table, "thincuda profile: 4 kernel launches timed, 1.000 ms"));
    assert_non_null(strstr(table, "theor. occ."));
    char want[160];
    snprintf(want, sizeof want, "%-40s %9d %8d %11.3f %10.2f %6.1f%% %12s\n", "tc_k_fill_f32", 4, 0,
             1.0, 250.0, 100.0, "100.0%");
    assert_non_null(strstr(table, want));
    /* A table cut short still says how long it is, and stays a string. */
    char small[32];
    assert_int_equal(tc_profile_format(small, sizeof small), need);
    assert_int_equal(strlen(small), sizeof small - 1);
    tc_profile_reset();
    assert_int_equal(tc_profile_format(table, sizeof table), 0);
    assert_string_equal(table, "");
}

static void the_profile_table_ranks_kernels_by_time(void **state)
{
    (void)state;
    char table[4096];
    tc_profile_reset();
    tc__profile_add(TC_KERNEL_FILL_F32, 1.0, 0.5);
    tc__profile_add(TC_KERNEL_COPY_U8, 3.0, 0.25);
    tc__profile_add(TC_KERNEL_COPY_U8, 1.0, -1); /* occupancy unknown: not averaged */
    tc_profile_format(table, sizeof table);
    const char *copy = strstr(table, "tc_k_copy_u8"), *fill = strstr(table, "tc_k_fill_f32");
    assert_non_null(copy);
    assert_non_null(fill);
    assert_true(copy < fill);
    char want[160];
    snprintf(want, sizeof want, "%-40s %9d %8d %11.3f %10.2f %6.1f%% %12s\n", "tc_k_copy_u8", 2, 0,
             4.0, 2000.0, 80.0, "25.0%");
    assert_non_null(strstr(table, want));
    tc_profile_reset();
}

static void device_pool_out_of_memory_names_request_and_state(void **state)
{
    (void)state;
    tc_pool *pool = NULL;
    assert_int_equal(tc_pool_create_device(ctx, 0, &pool), TC_OK);
    CUdeviceptr a = 0, b = 0;
    assert_int_equal(tc_pool_alloc(pool, 600u << 20, stream, &a), TC_OK);
    assert_int_equal(tc_pool_alloc(pool, 600u << 20, stream, &b), TC_ERR_OUT_OF_MEMORY);
    const char *msg = tc_last_error();
    assert_non_null(strstr(msg, "629145600 bytes"));
    assert_non_null(strstr(msg, "in use 600.00 MiB in 1 blocks"));
    assert_non_null(strstr(msg, "free of 1.00 GiB on device 0"));
    assert_int_equal(tc_pool_free(pool, a), TC_OK);
    tc_pool_destroy(pool);
}

static void module_load_reports(tc_status want, const char *words)
{
    tc_status st = tc_module_load(ctx);
    assert_int_equal(st, want);
    assert_non_null(strstr(tc_last_error(), words));
    /* The verdict sticks, and launches report it too. */
    float *out = (float *)(uintptr_t)0x1000;
    tc_launch_config cfg = { tc_dim1(1), tc_dim1(32), 0, stream };
    assert_int_equal(tc_launch_fill_f32(cfg, out, 1.0f, (size_t)1), want);
    assert_non_null(strstr(tc_last_error(), words));
}

static void stale_fatbin_is_caught_at_load(void **state)
{
    (void)state;
    char words[128];
    snprintf(words, sizeof words, "tc_k_fill_f32 (kernels/copy.cu:%u): parameter 3 (n) is 12 bytes",
             tc_kernel_table[TC_KERNEL_FILL_F32].line);
    module_load_reports(TC_ERR_KERNEL_MISMATCH, words);
}

static void missing_kernel_is_caught_at_load(void **state)
{
    (void)state;
    module_load_reports(TC_ERR_KERNEL_MISMATCH, "tc_k_copy_u8 is missing");
}

static void gpu_without_code_gets_no_kernel_image(void **state)
{
    (void)state;
    /* What the build compiled (-Dkernel_archs): sm_80 first by default, sm_90a alone in a
     * development build. */
    char words[256];
    snprintf(words, sizeof words, "no code this GPU (sm_90) can run: built for %s",
             tc_module_targets());
    module_load_reports(TC_ERR_NO_KERNEL_IMAGE, words);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "normal";
    if (tc_module_fatbin_size() == 0) {
        printf("SKIP: this build has no kernels (nvcc was not found)\n");
        return 77;
    }
    const struct CMUnitTest normal[] = {
        cmocka_unit_test(device_info_and_attributes_come_from_the_driver),
        cmocka_unit_test(contexts_are_shared_per_device),
        cmocka_unit_test(stream_priorities_are_clamped_to_the_device_range),
        cmocka_unit_test(launcher_passes_each_argument_at_its_abi_offset),
        cmocka_unit_test(bad_configurations_fail_naming_the_kernel),
        cmocka_unit_test(clusters_reach_the_launch_and_are_checked),
        cmocka_unit_test(large_shared_memory_opts_in_once),
        cmocka_unit_test(carveout_preference_reaches_the_kernel),
        cmocka_unit_test(occupancy_helpers_size_grid_stride_launches),
        cmocka_unit_test(device_pool_out_of_memory_names_request_and_state),
        cmocka_unit_test(profiling_counts_times_and_tabulates_each_kernel),
        cmocka_unit_test(the_profile_table_ranks_kernels_by_time),
    };
    const struct CMUnitTest skew[] = { cmocka_unit_test(stale_fatbin_is_caught_at_load) };
    const struct CMUnitTest drop[] = { cmocka_unit_test(missing_kernel_is_caught_at_load) };
    const struct CMUnitTest nobin[] = { cmocka_unit_test(gpu_without_code_gets_no_kernel_image) };
    if (strcmp(mode, "skew") == 0)
        return cmocka_run_group_tests(skew, setup, teardown);
    if (strcmp(mode, "drop") == 0)
        return cmocka_run_group_tests(drop, setup, teardown);
    if (strcmp(mode, "nobinary") == 0)
        return cmocka_run_group_tests(nobin, setup, teardown);
    return cmocka_run_group_tests(normal, setup, teardown);
}
