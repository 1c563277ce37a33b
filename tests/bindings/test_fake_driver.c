/* The wrappers against stand-in libraries (fake_cuda.c, fake_cublas.c): lazy one-symbol
 * resolution with the right ABI version and stream flag, status mapping, tracing. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tc_cublas.h"
#include "tc_cuda.h"

typedef struct fake_cuda_stats {
    int lookups;
    char last_symbol[64];
    int last_version;
    unsigned long long last_flags;
    int ptds_calls;
    int legacy_calls;
} fake_cuda_stats;

static fake_cuda_stats *stats(void)
{
    void *h = dlopen(getenv("THINCUDA_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    fake_cuda_stats *s = dlsym(h, "fake_cuda_stats_v");
    assert_non_null(s);
    return s;
}

static void symbols_resolve_one_at_a_time_and_once(void **state)
{
    (void)state;
    assert_int_equal(tc_cuInit(0), TC_OK);
    fake_cuda_stats *s = stats();
    assert_int_equal(s->lookups, 1);
    assert_string_equal(s->last_symbol, "cuInit");
    assert_int_equal(s->last_version, 2000);
    for (int i = 0; i < 10; i++)
        assert_int_equal(tc_cuInit(0), TC_OK);
    assert_int_equal(s->lookups, 1);
    int n = 0;
    assert_int_equal(tc_cuDeviceGetCount(&n), TC_OK);
    assert_int_equal(n, 2);
    assert_int_equal(s->lookups, 2);
}

static void versioned_names_ask_for_their_abi_version(void **state)
{
    (void)state;
    CUdeviceptr p = 0;
    assert_int_equal(tc_cuMemAlloc(&p, 4096), TC_OK);
    assert_string_equal(stats()->last_symbol, "cuMemAlloc");
    assert_int_equal(stats()->last_version, 3020); /* cuMemAlloc_v2: PFN_cuMemAlloc_v3020 */
    assert_true(p == 0x7f0000001000ull + 4096);
}

static void failing_calls_map_to_tc_status_and_last_error(void **state)
{
    (void)state;
    CUdeviceptr p = 0;
    tc_clear_error();
    assert_int_equal(tc_cuMemAlloc(&p, (size_t)1 << 40), TC_CUDA_ERROR_OUT_OF_MEMORY);
    assert_string_equal(tc_last_error_function(), "cuMemAlloc");
    assert_non_null(strstr(tc_last_error(), "CUDA_ERROR_OUT_OF_MEMORY"));
    assert_int_equal(tc_cuInit(1), TC_CUDA_ERROR_INVALID_VALUE);
    assert_string_equal(tc_last_error_function(), "cuInit");
}

static void per_thread_variants_ask_for_the_per_thread_symbol(void **state)
{
    (void)state;
    char buf[16] = "0123456789";
    fake_cuda_stats *s = stats();
    int legacy = s->legacy_calls, ptds = s->ptds_calls;
    assert_int_equal(tc_cuMemcpyHtoD(1, buf, sizeof buf), TC_OK);
    assert_true((s->last_flags & CU_GET_PROC_ADDRESS_LEGACY_STREAM) != 0);
    assert_int_equal(tc_cuMemcpyHtoD_ptds(1, buf, sizeof buf), TC_OK);
    assert_true((s->last_flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0);
    assert_int_equal(s->legacy_calls, legacy + 1);
    assert_int_equal(s->ptds_calls, ptds + 1);
}

static void missing_and_too_new_symbols_get_distinct_statuses(void **state)
{
    (void)state;
    CUdevice d = -1;
    /* The fake driver is "12.x": it has cuCtxGetDevice but not the 13.0 _v2 ABI. */
    assert_int_equal(tc_cuCtxGetDevice(&d), TC_OK);
    assert_int_equal(d, 0);
#if CUDA_VERSION >= 13000 /* bindings from older headers have no _v2 ABI to refuse */
    assert_int_equal(tc_cuCtxGetDevice_v2(&d, NULL), TC_ERR_DRIVER_TOO_OLD);
    assert_string_equal(tc_last_error_function(), "cuCtxGetDevice_v2");
    assert_non_null(strstr(tc_last_error(), "installed driver: CUDA 12.4"));
#endif
    assert_non_null(strstr(tc_status_hint(TC_ERR_DRIVER_TOO_OLD), "(installed: CUDA 12.4)"));
    assert_int_equal(tc_cuCtxSynchronize(), TC_ERR_SYMBOL_NOT_FOUND);
    assert_non_null(strstr(tc_last_error(), "cuCtxSynchronize"));
    assert_true(tc_available("cuInit"));
    assert_false(tc_available("cuCtxSynchronize"));
    assert_false(tc_available("cuCtxGetDevice_v2"));
}

static void dlsym_libraries_pass_every_argument_in_place(void **state)
{
    (void)state;
    cublasHandle_t h = NULL;
    assert_int_equal(tc_cublasCreate(&h), TC_OK);
    assert_non_null(h);
    /* 2x3 times 3x2, column-major, random-looking non-zero values. */
    float A[6] = { 0.5f, -1.25f, 2.0f, 3.5f, -0.75f, 1.5f };
    float B[6] = { 1.5f, -2.0f, 0.25f, 4.0f, 1.0f, -3.0f };
    float C[4] = { 1.0f, 2.0f, -1.0f, 0.5f }, alpha = 2.0f, beta = -0.5f;
    float want[4];
    for (int j = 0; j < 2; j++)
        for (int i = 0; i < 2; i++) {
            double acc = 0;
            for (int p = 0; p < 3; p++)
                acc += (double)A[i + p * 2] * B[p + j * 3];
            want[i + j * 2] = (float)(alpha * acc + beta * C[i + j * 2]);
        }
    assert_int_equal(
        tc_cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &alpha, A, 2, B, 3, &beta, C, 2),
        TC_OK);
    for (int i = 0; i < 4; i++)
        assert_float_equal(C[i], want[i], 1e-6);
    assert_int_equal(
        tc_cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &alpha, A, 1, B, 3, &beta, C, 2),
        TC_CUBLAS_STATUS_INVALID_VALUE);
    assert_string_equal(tc_last_error_function(), "cublasSgemm");
    size_t v = 0;
    assert_int_equal(tc_cublasGetCudartVersion(&v), TC_OK);
    assert_int_equal(v, 12345);
    tc_half one = { 0x3C00 }, zero = { 0 }, out[1] = { { 0 } };
    assert_int_equal(
        tc_cublasHgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, &one, 1, &one, 1, &zero, out, 1),
        TC_OK);
    assert_int_equal(out[0].bits, 0x3C00);
    assert_int_equal(
        tc_cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, NULL, NULL, 1, NULL, 1, NULL, NULL, 1),
        TC_ERR_SYMBOL_NOT_FOUND);
    assert_int_equal(tc_cublasDestroy(h), TC_OK);
}

/* Run fn with stderr captured into buf. */
static void capture_stderr(void (*fn)(void), char *buf, size_t cap)
{
    fflush(stderr);
    int saved = dup(2);
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    dup2(fileno(tmp), 2);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(buf, 1, cap - 1, tmp);
    buf[n] = '\0';
    fclose(tmp);
}

static void traced_calls(void)
{
    tc_set_trace(true);
    int n = 0;
    char name[32];
    CUdeviceptr p;
    tc_cuDeviceGetCount(&n);
    tc_cuDeviceGetName(name, (int)sizeof name, 1);
    tc_cuMemAlloc(&p, (size_t)1 << 40);
    tc_set_trace(false);
    tc_cuDeviceGetCount(&n);
}

static void tracing_prints_arguments_status_and_out_values(void **state)
{
    (void)state;
    char buf[4096];
    capture_stderr(traced_calls, buf, sizeof buf);
    assert_non_null(strstr(buf, "[thincuda] cuDeviceGetCount(count=0x"));
    assert_non_null(strstr(buf, ") -> TC_OK {*count=2}\n"));
    assert_non_null(strstr(buf, "cuDeviceGetName(name=0x"));
    assert_non_null(strstr(buf, "len=32, dev=1) -> TC_OK {name=\"Fake GPU 1\"}\n"));
    assert_non_null(strstr(buf, "bytesize=0x10000000000) -> CUDA_ERROR_OUT_OF_MEMORY\n"));
    /* Tracing off: the last call printed nothing, so exactly three lines. */
    int lines = 0;
    for (const char *c = buf; *c; c++)
        lines += *c == '\n';
    assert_int_equal(lines, 3);
}

int main(void)
{
    if (!getenv("THINCUDA_LIBCUDA") || !getenv("THINCUDA_LIBCUBLAS")) {
        fprintf(stderr, "set THINCUDA_LIBCUDA and THINCUDA_LIBCUBLAS to the fake libraries\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(symbols_resolve_one_at_a_time_and_once),
        cmocka_unit_test(versioned_names_ask_for_their_abi_version),
        cmocka_unit_test(failing_calls_map_to_tc_status_and_last_error),
        cmocka_unit_test(per_thread_variants_ask_for_the_per_thread_symbol),
        cmocka_unit_test(missing_and_too_new_symbols_get_distinct_statuses),
        cmocka_unit_test(dlsym_libraries_pass_every_argument_in_place),
        cmocka_unit_test(tracing_prints_arguments_status_and_out_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
