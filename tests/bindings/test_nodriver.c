/* Without a driver or libraries every call fails with a clear status, never a crash.
 * Run with THINCUDA_LIBCUDA, THINCUDA_LIBCUBLAS and THINCUDA_LIBCURAND naming missing files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "tc_cublas.h"
#include "tc_cuda.h"
#include "tc_curand.h"

static void cuinit_without_driver_reports_library_not_found(void **state)
{
    (void)state;
    tc_clear_error();
    assert_int_equal(tc_cuInit(0), TC_ERR_LIBRARY_NOT_FOUND);
    assert_int_equal(tc_last_status(), TC_ERR_LIBRARY_NOT_FOUND);
    assert_string_equal(tc_last_error_function(), "cuInit");
    const char *msg = tc_last_error();
    assert_non_null(strstr(msg, "cuInit"));
    assert_non_null(strstr(msg, "TC_ERR_LIBRARY_NOT_FOUND"));
    assert_non_null(strstr(msg, "THINCUDA_LIBCUDA"));
    /* A second call gives the same answer without retrying the load. */
    assert_int_equal(tc_cuInit(0), TC_ERR_LIBRARY_NOT_FOUND);
}

static void every_library_is_missing_cleanly(void **state)
{
    (void)state;
    cublasHandle_t h = NULL;
    assert_int_equal(tc_cublasCreate(&h), TC_ERR_LIBRARY_NOT_FOUND);
    assert_null(h);
    assert_non_null(strstr(tc_last_error(), "THINCUDA_LIBCUBLAS"));
    curandGenerator_t g = NULL;
    assert_int_equal(tc_curandCreateGenerator(&g, CURAND_RNG_PSEUDO_DEFAULT),
                     TC_ERR_LIBRARY_NOT_FOUND);
    size_t v = 7;
    assert_int_equal(tc_cublasGetCudartVersion(&v), TC_ERR_LIBRARY_NOT_FOUND);
    assert_int_equal(v, 7);
}

static void availability_is_a_query(void **state)
{
    (void)state;
    assert_false(tc_available("cuMemAlloc"));
    assert_int_equal(tc_resolve("cuMemAlloc"), TC_ERR_LIBRARY_NOT_FOUND);
    assert_int_equal(tc_resolve("cuNoSuchFunction"), TC_ERR_UNKNOWN_FUNCTION);
    assert_int_equal(tc_resolve(NULL), TC_ERR_UNKNOWN_FUNCTION);
    assert_false(tc_available("cublasSgemm_64"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cuinit_without_driver_reports_library_not_found),
        cmocka_unit_test(every_library_is_missing_cleanly),
        cmocka_unit_test(availability_is_a_query),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
