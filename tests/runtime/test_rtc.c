/* Run-time compilation (runtime/rtc.h) against the fake driver and the fake NVRTC: the
 * architecture option, the disk cache (a second create compiles nothing), compile errors with
 * the log, and argument sizes checked at launch. The fake driver "holds" thincuda's kernels, so
 * the source declares one of them. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "fake_driver.h"
#include "runtime/runtime.h"

typedef struct fake_nvrtc_stats {
    int creates, compiles, destroys;
    char last_name[64];
    char last_options[256];
    const char *last_source;
} fake_nvrtc_stats;

static void *sym(const char *env, const char *name)
{
    void *h = dlopen(getenv(env), RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    void *p = dlsym(h, name);
    assert_non_null(p);
    return p;
}

static const char source[] = "extern \"C\" __global__ void tc_k_fill_f32(float *out, float value,\n"
                             "                                          size_t n) {}\n";
static tc_context *ctx;
static tc_stream *stream;
static char cache[64] = "/tmp/tc_rtc_test_XXXXXX";

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(cache) || setenv("XDG_CACHE_HOME", cache, 1) != 0)
        return -1;
    if (tc_context_retain(0, &ctx) != TC_OK)
        return -1;
    return tc_stream_create(ctx, 0, &stream) == TC_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tc_stream_destroy(stream);
    tc_context_release(ctx);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", cache);
    return system(cmd) == 0 ? 0 : -1;
}

static void a_program_compiles_once_for_this_gpu_then_comes_from_the_cache(void **state)
{
    (void)state;
    const char *opts[] = { "--std=c++17" };
    tc_rtc *p = NULL;
    int compiles = 0; /* the first test: NVRTC is loaded by this create */
    assert_int_equal(tc_rtc_create(ctx, source, "fill.cu", opts, 1, &p), TC_OK);
    fake_nvrtc_stats *s = sym("THINCUDA_LIBNVRTC", "fake_nvrtc_stats_v");
    assert_false(tc_rtc_cached(p));
    assert_int_equal(s->compiles, compiles + 1);
    assert_string_equal(s->last_options, "--std=c++17 --gpu-architecture=sm_90");
    assert_non_null(strstr(tc_rtc_cache_path(p), "/thincuda/rtc/"));
    assert_int_equal(access(tc_rtc_cache_path(p), R_OK), 0);
    tc_rtc_destroy(p);

    assert_int_equal(tc_rtc_create(ctx, source, "fill.cu", opts, 1, &p), TC_OK);
    assert_true(tc_rtc_cached(p));
    assert_int_equal(s->compiles, compiles + 1);
    tc_rtc_destroy(p);

    /* Other options are another cubin. */
    assert_int_equal(tc_rtc_create(ctx, source, "fill.cu", NULL, 0, &p), TC_OK);
    assert_false(tc_rtc_cached(p));
    assert_int_equal(s->compiles, compiles + 2);
    tc_rtc_destroy(p);
    tc_rtc_destroy(NULL);
}

static void launches_check_the_argument_sizes(void **state)
{
    (void)state;
    tc_rtc *p = NULL;
    assert_int_equal(tc_rtc_create(ctx, source, "fill.cu", NULL, 0, &p), TC_OK);
    float *out = (float *)(uintptr_t)0x7000;
    float value = 1.0f;
    size_t n = 10;
    void *args[] = { &out, &value, &n };
    const size_t right[] = { sizeof out, sizeof value, sizeof n };
    tc_launch_config cfg = { tc_dim1(1), tc_dim1(32), 0, stream };
    fake_launch *l = sym("THINCUDA_LIBCUDA", "fake_launch_v");
    int before = l->count;
    assert_int_equal(tc_rtc_launch(p, "tc_k_fill_f32", &cfg, args, right, 3), TC_OK);
    assert_int_equal(l->count, before + 1);
    assert_string_equal(l->kernel, "tc_k_fill_f32");

    double wide = 1.0;
    void *wrong_args[] = { &out, &wide, &n };
    const size_t wrong[] = { sizeof out, sizeof wide, sizeof n };
    assert_int_equal(tc_rtc_launch(p, "tc_k_fill_f32", &cfg, wrong_args, wrong, 3),
                     TC_ERR_KERNEL_MISMATCH);
    assert_non_null(strstr(tc_last_error(), "argument 2 is 8 bytes, the kernel's parameter 4"));
    assert_int_equal(tc_rtc_launch(p, "tc_k_fill_f32", &cfg, args, right, 2),
                     TC_ERR_KERNEL_MISMATCH);
    assert_int_equal(l->count, before + 1);
    assert_int_equal(tc_rtc_launch(p, "no_such_kernel", &cfg, args, right, 3), TC_ERR_NOT_FOUND);
    /* The stream's cluster extent reaches the launch, its overlap does not (the kernel need
     * not wait for its predecessor); an extent that does not divide the grid stops it. */
    assert_int_equal(tc_stream_set_overlap(stream, true), TC_OK);
    assert_int_equal(tc_stream_set_cluster(stream, (tc_dim3){ 2, 1, 1 }), TC_OK);
    cfg.grid = tc_dim1(6);
    assert_int_equal(tc_rtc_launch(p, "tc_k_fill_f32", &cfg, args, right, 3), TC_OK);
    assert_int_equal(l->ex, 1);
    assert_int_equal(l->overlap, 0);
    assert_int_equal(l->cluster[0], 2);
    cfg.grid = tc_dim1(5);
    assert_int_equal(tc_rtc_launch(p, "tc_k_fill_f32", &cfg, args, right, 3), TC_ERR_LAUNCH);
    assert_non_null(strstr(tc_last_error(), "cluster extent x is 2"));
    assert_int_equal(l->count, before + 2);
    assert_int_equal(tc_stream_set_cluster(stream, (tc_dim3){ 0, 0, 0 }), TC_OK);
    assert_int_equal(tc_stream_set_overlap(stream, false), TC_OK);
    tc_rtc_destroy(p);
}

static void a_compile_error_carries_the_log(void **state)
{
    (void)state;
    tc_rtc *p = NULL;
    assert_int_equal(tc_rtc_create(ctx, "int x;\n#error broken\n", "bad.cu", NULL, 0, &p),
                     TC_NVRTC_ERROR_COMPILATION);
    assert_null(p);
    assert_non_null(strstr(tc_last_error(), "bad.cu did not compile for sm_90"));
    assert_non_null(strstr(tc_last_error(), "bad.cu(2): error"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_program_compiles_once_for_this_gpu_then_comes_from_the_cache),
        cmocka_unit_test(launches_check_the_argument_sizes),
        cmocka_unit_test(a_compile_error_carries_the_log),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
