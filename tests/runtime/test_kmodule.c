/* Modules of the user's own kernels (runtime/kmodule.h) against the fake driver: the fake
 * "holds" thincuda's kernels, so a spec written like the generator's for tc_k_fill_f32 loads,
 * checks and launches, and specs that disagree with it fail naming the kernel. */
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

static fake_launch *launches(void)
{
    void *h = dlopen(getenv("THINCUDA_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    fake_launch *l = dlsym(h, "fake_launch_v");
    assert_non_null(l);
    return l;
}

static const unsigned char image[16] = { 0x50, 0xed, 0x55, 0xba };
static const uint16_t fill_sizes[] = { 8, 4, 8 };
static const char *const fill_names[] = { "out", "value", "n" };
static const uint16_t skewed_sizes[] = { 8, 8, 8 };
static const tc_kernel_info good[] = {
    { "tc_k_fill_f32", "mine.cu", 3, 3, fill_sizes, fill_names },
};
static const tc_kernel_info skewed[] = {
    { "tc_k_fill_f32", "mine.cu", 3, 3, skewed_sizes, fill_names },
};
static const tc_kernel_info absent[] = {
    { "my_missing_kernel", "mine.cu", 9, 3, fill_sizes, fill_names },
};

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

static void a_matching_module_loads_and_launches_with_arguments_in_place(void **state)
{
    (void)state;
    const tc_kmodule_spec spec = { "my", image, sizeof image, "sm_80", 1, good };
    tc_kmodule *m = NULL;
    assert_int_equal(tc_kmodule_create(ctx, &spec, &m), TC_OK);
    CUfunction f = NULL;
    assert_int_equal(tc_kmodule_function(m, 0, &f), TC_OK);
    assert_non_null(f);
    int before = launches()->count;
    float *out = (float *)(uintptr_t)0x7000;
    float value = 2.5f;
    size_t n = 1000;
    void *args[] = { &out, &value, &n };
    tc_launch_config cfg = { tc_dim1(4), tc_dim1(256), 0, stream };
    assert_int_equal(tc_kmodule_launch(m, 0, &cfg, args), TC_OK);
    fake_launch *l = launches();
    assert_int_equal(l->count, before + 1);
    assert_string_equal(l->kernel, "tc_k_fill_f32");
    assert_int_equal(l->grid[0], 4);
    assert_int_equal(l->block[0], 256);
    assert_memory_equal(l->params + 8, &value, 4);
    assert_memory_equal(l->params + 16, &n, 8);

    cfg.block = tc_dim1(0);
    assert_int_equal(tc_kmodule_launch(m, 0, &cfg, args), TC_ERR_LAUNCH);
    assert_non_null(strstr(tc_last_error(), "tc_k_fill_f32 (mine.cu:3)"));
    assert_int_equal(tc_kmodule_launch(m, 1, &cfg, args), TC_ERR_INVALID_ARGUMENT);
    tc_kmodule_destroy(m);
    tc_kmodule_destroy(NULL);
}

/* The stream's launch attributes reach the user's kernels: its cluster extent (which must
 * divide the grid) always, programmatic serialization where the stream overlaps only for a
 * module that allows it (its kernels wait for their predecessor). */
static void launches_carry_the_streams_overlap_and_cluster(void **state)
{
    (void)state;
    const tc_kmodule_spec spec = { "my", image, sizeof image, "sm_80", 1, good };
    tc_kmodule *m = NULL;
    assert_int_equal(tc_kmodule_create(ctx, &spec, &m), TC_OK);
    float *out = (float *)(uintptr_t)0x7000;
    float value = 2.5f;
    size_t n = 1000;
    void *args[] = { &out, &value, &n };
    tc_launch_config cfg = { { 8, 3, 1 }, tc_dim1(128), 0, stream };
    fake_launch *l = launches();
    assert_int_equal(tc_kmodule_launch(m, 0, &cfg, args), TC_OK);
    assert_int_equal(l->ex, 0);
    assert_int_equal(tc_stream_set_overlap(stream, true), TC_OK);
    assert_int_equal(tc_kmodule_launch(m, 0, &cfg, args), TC_OK);
    assert_int_equal(l->ex, 0);
    assert_int_equal(tc_stream_set_cluster(stream, (tc_dim3){ 4, 1, 1 }), TC_OK);
    assert_int_equal(tc_kmodule_launch(m, 0, &cfg, args), TC_OK);
    assert_int_equal(l->ex, 1);
    assert_int_equal(l->overlap, 0);
    assert_int_equal(l->cluster[0], 4);
    tc_kmodule_set_overlap(m, true);
    assert_int_equal(tc_kmodule_launch(m, 0, &cfg, args), TC_OK);
    assert_int_equal(l->ex, 1);
    assert_int_equal(l->overlap, 1);
    assert_int_equal(l->cluster[0], 4);
    assert_int_equal(l->cluster[1], 1);
    assert_int_equal(l->grid[1], 3);
    assert_memory_equal(l->params + 16, &n, 8);
    /* A cluster extent that does not divide the grid: no launch, the kernel named. */
    int before = l->count;
    assert_int_equal(tc_stream_set_cluster(stream, (tc_dim3){ 1, 2, 1 }), TC_OK);
    assert_int_equal(tc_kmodule_launch(m, 0, &cfg, args), TC_ERR_LAUNCH);
    assert_non_null(strstr(tc_last_error(), "tc_k_fill_f32 (mine.cu:3)"));
    assert_non_null(strstr(tc_last_error(), "cluster extent y is 2"));
    assert_int_equal(l->count, before);
    assert_int_equal(tc_stream_set_cluster(stream, (tc_dim3){ 0, 0, 0 }), TC_OK);
    assert_int_equal(tc_stream_set_overlap(stream, false), TC_OK);
    assert_int_equal(tc_kmodule_launch(m, 0, &cfg, args), TC_OK);
    assert_int_equal(l->ex, 0);
    tc_kmodule_destroy(m);
}

static void disagreeing_modules_fail_naming_the_kernel(void **state)
{
    (void)state;
    tc_kmodule *m = NULL;
    const tc_kmodule_spec wrong = { "my", image, sizeof image, "sm_80", 1, skewed };
    assert_int_equal(tc_kmodule_create(ctx, &wrong, &m), TC_ERR_KERNEL_MISMATCH);
    assert_null(m);
    assert_non_null(strstr(tc_last_error(), "parameter 2 (value) is 4 bytes in the image, 8"));
    const tc_kmodule_spec missing = { "my", image, sizeof image, "sm_80", 1, absent };
    assert_int_equal(tc_kmodule_create(ctx, &missing, &m), TC_ERR_KERNEL_MISMATCH);
    assert_non_null(strstr(tc_last_error(), "my_missing_kernel (mine.cu:9) is missing"));
    const tc_kmodule_spec empty = { "my", NULL, 0, "", 1, good };
    assert_int_equal(tc_kmodule_create(ctx, &empty, &m), TC_ERR_NO_KERNEL_IMAGE);
    assert_non_null(strstr(tc_last_error(), "without an image"));
}

static void an_image_without_code_for_the_gpu_says_what_it_was_built_for(void **state)
{
    (void)state;
    setenv("FAKE_CUDA_NO_BINARY", "1", 1);
    tc_kmodule *m = NULL;
    const tc_kmodule_spec spec = { "my", image, sizeof image, "sm_75 compute_75", 1, good };
    assert_int_equal(tc_kmodule_create(ctx, &spec, &m), TC_ERR_NO_KERNEL_IMAGE);
    assert_non_null(strstr(tc_last_error(), "built for sm_75 compute_75"));
    unsetenv("FAKE_CUDA_NO_BINARY");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_matching_module_loads_and_launches_with_arguments_in_place),
        cmocka_unit_test(launches_carry_the_streams_overlap_and_cluster),
        cmocka_unit_test(disagreeing_modules_fail_naming_the_kernel),
        cmocka_unit_test(an_image_without_code_for_the_gpu_says_what_it_was_built_for),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
