/* The CUDA backend's launches for batched quantised products, on the fake driver
 * (tests/runtime/fake_driver.c, FAKE_CUDA_BACKED=1: device memory is host memory and kernels
 * compute nothing). What is checked is how each product is launched: its kernel, its grid
 * (tiles of 128 rows by shares of k) and its cluster, with the fake's roomy clusters and with
 * the H200's counts (cuOccupancyMaxActiveClusters there at one block an SM: 66 clusters of 2,
 * 39 of 3, 30 of 4, 15 of 8; FAKE_CUDA_CLUSTERS). A backend asks once for each size and
 * keeps the answer, so each case has a backend of its own. */
#define _GNU_SOURCE /* RTLD_NOLOAD, setenv */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../runtime/fake_driver.h"
#include "thincuda.h"

static fake_launch *last;
static tc_backend *gpu;

/* A backend on the fake, whose clusters are as `clusters` says (NULL: the fake's own). */
static void open_gpu(const char *clusters)
{
    if (clusters)
        setenv("FAKE_CUDA_CLUSTERS", clusters, 1);
    else
        unsetenv("FAKE_CUDA_CLUSTERS");
    assert_int_equal(tc_backend_create_cuda(0, 0, &gpu), TC_OK);
    void *h = dlopen(getenv("THINCUDA_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    last = dlsym(h, "fake_launch_v");
    assert_non_null(last);
}
static void close_gpu(void)
{
    tc_backend_destroy(gpu);
    gpu = NULL;
    unsetenv("FAKE_CUDA_CLUSTERS");
}
static const char *const h200 = "2:66,3:39,4:30,8:15";

/* out = x w^T for m rows of bf16 x and an n x k matrix of type dt (zero blocks: the fake
 * computes nothing); the product's launch is left in *last. */
static void product(tc_dtype dt, int64_t m, int64_t n, int64_t k)
{
    size_t bytes = tc_dtype_bytes(dt, n * k);
    void *host = calloc(1, bytes);
    assert_non_null(host);
    tc_tensor w, x, out;
    assert_int_equal(tc_tensor_init_from_host(&w, gpu, dt, TC_SHAPE(n, k), host, bytes), TC_OK);
    assert_int_equal(tc_tensor_init(&x, gpu, TC_DTYPE_BF16, TC_SHAPE(m, k)), TC_OK);
    assert_int_equal(tc_tensor_init(&out, gpu, TC_DTYPE_BF16, TC_SHAPE(m, n)), TC_OK);
    int before = last->count;
    assert_int_equal(tc_matmul(&out, &x, &w), TC_OK);
    assert_int_equal(last->count, before + 1);
    tc_tensor_deinit(&w), tc_tensor_deinit(&x), tc_tensor_deinit(&out);
    free(host);
}

static void expect(const char *kernel, unsigned tiles, unsigned shares, unsigned cluster)
{
    assert_string_equal(last->kernel, kernel);
    assert_int_equal(last->grid[0], tiles);
    assert_int_equal(last->grid[1], shares);
    assert_int_equal(last->block[0], 256);
    assert_int_equal(last->cluster[1], cluster);
    if (cluster)
        assert_true(last->cluster[0] == 1 && last->cluster[2] == 1);
}

static void shares_of_k_are_one_cluster_where_they_fit(void **state)
{
    (void)state;
    /* Clusters of 4 fit: 4096 x 4096 at 64 rows fills the wave as 4 shares, one cluster. */
    open_gpu(NULL);
    product(TC_DTYPE_Q4_K, 64, 4096, 4096);
    expect("tc_k_qmm_q4_k_bf16", 32, 4, 4);
    product(TC_DTYPE_Q8_0, 64, 4096, 4096);
    expect("tc_k_qmm_q8_0_bf16", 32, 4, 4);
    close_gpu();
}

static void fewer_shares_where_the_clusters_of_more_do_not_fit(void **state)
{
    (void)state;
    /* The H200: 30 clusters of 4 for 32 tiles, so 3 shares in clusters of 3 for the 4- and
     * 5-bit types that take x in its own order; the others add their 4 shares through ws. */
    open_gpu(h200);
    product(TC_DTYPE_Q4_K, 64, 4096, 4096);
    expect("tc_k_qmm_q4_k_bf16", 32, 3, 3);
    product(TC_DTYPE_Q4_1_G128, 64, 4096, 4096);
    expect("tc_k_qmm_q4_1_g128_bf16", 32, 3, 3);
    product(TC_DTYPE_Q8_0, 64, 4096, 4096);
    expect("tc_k_qmm_q8_0_bf16", 32, 4, 0);
    product(TC_DTYPE_Q6_K, 64, 4096, 4096);
    expect("tc_k_qmm_q6_k_bf16", 32, 4, 0);
    /* 4096 x 11008: 3 shares would cost four steps more a block. */
    product(TC_DTYPE_Q4_K, 64, 4096, 11008);
    expect("tc_k_qmm_q4_k_bf16", 32, 4, 0);
    /* 11008 x 4096 at two blocks an SM: 3 shares, whose 86 clusters of 3 (78 fit) would take
     * two waves, added through ws. */
    product(TC_DTYPE_Q4_K, 64, 11008, 4096);
    expect("tc_k_qmm_q4_k_bf16", 86, 3, 0);
    assert_true(last->shared * 2 <= FAKE_SM_SHARED);
    /* A thousand rows: 8 tiles, whose 4 shares' clusters fit. */
    product(TC_DTYPE_Q4_K, 64, 1000, 4096);
    expect("tc_k_qmm_q4_k_bf16", 8, 4, 4);
    close_gpu();
}

static void two_blocks_an_sm_only_past_a_wave(void **state)
{
    (void)state;
    open_gpu(h200);
    /* 32 rows of 4096 x 11008: 32 tiles of 4 shares fill one wave at one block an SM (up to
     * four stages, more than half the SM's shared memory); 30 clusters of 4 fit, so ws. */
    product(TC_DTYPE_Q4_K, 32, 4096, 11008);
    expect("tc_k_qmm32_q4_k_bf16", 32, 4, 0);
    assert_true(last->shared * 2 > FAKE_SM_SHARED);
    /* 22016 x 4096 (gate and up): 172 tiles take more than a wave at one an SM, so two, and
     * 3 shares fill two waves of those. */
    product(TC_DTYPE_Q4_K, 32, 22016, 4096);
    expect("tc_k_qmm32_q4_k_bf16", 172, 3, 0);
    assert_true(last->shared * 2 <= FAKE_SM_SHARED);
    close_gpu();
}

static void a_cluster_is_the_products_alone(void **state)
{
    (void)state;
    open_gpu(h200);
    product(TC_DTYPE_Q4_K, 64, 4096, 4096);
    expect("tc_k_qmm_q4_k_bf16", 32, 3, 3);
    /* The stream's cluster is set back: the next launches, a product of 64 rows through ws
     * and a plain kernel, have none. */
    product(TC_DTYPE_Q8_0, 64, 4096, 4096);
    expect("tc_k_qmm_q8_0_bf16", 32, 4, 0);
    tc_tensor t;
    assert_int_equal(tc_tensor_init(&t, gpu, TC_DTYPE_F32, TC_SHAPE(1000)), TC_OK);
    int before = last->count;
    assert_int_equal(tc_fill_random(&t, 1, 0.0f, 1.0f), TC_OK);
    assert_true(last->count > before);
    assert_int_equal(last->cluster[1], 0);
    tc_tensor_deinit(&t);
    close_gpu();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shares_of_k_are_one_cluster_where_they_fit),
        cmocka_unit_test(fewer_shares_where_the_clusters_of_more_do_not_fit),
        cmocka_unit_test(two_blocks_an_sm_only_past_a_wave),
        cmocka_unit_test(a_cluster_is_the_products_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
