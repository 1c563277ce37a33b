/* Every status code of the three headers and of thincuda has a distinct name and words. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>
#include <cublas_api.h>
#include <cuda.h>
#include <curand.h>

#include "tc_bindings.h"

static void every_code_has_a_name_and_a_string(void **state)
{
    (void)state;
    size_t n = tc_status_count();
    assert_true(n > 100); /* CUresult alone has over 100 codes */
    for (size_t i = 0; i < n; i++) {
        tc_status s = tc_status_at(i);
        const char *name = tc_status_name(s);
        const char *words = tc_status_string(s);
        assert_non_null(strstr(name, "_"));
        assert_null(strstr(name, "unknown"));
        assert_true(strlen(words) > 3);
        if (i > 0) {
            assert_true((unsigned)tc_status_at(i - 1) < (unsigned)s);
            assert_string_not_equal(tc_status_name(tc_status_at(i - 1)), name);
        }
    }
}

static void codes_keep_library_and_value(void **state)
{
    (void)state;
    tc_status s = TC_CUDA_ERROR_OUT_OF_MEMORY;
    assert_int_equal(tc_status_lib(s), TC_LIB_CUDA);
    assert_int_equal(tc_status_code(s), CUDA_ERROR_OUT_OF_MEMORY);
    assert_string_equal(tc_status_name(s), "CUDA_ERROR_OUT_OF_MEMORY");
    assert_int_equal(tc_status_lib(TC_CUBLAS_STATUS_INVALID_VALUE), TC_LIB_CUBLAS);
    assert_int_equal(tc_status_code(TC_CUBLAS_STATUS_INVALID_VALUE), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(tc_status_code(TC_CURAND_STATUS_LAUNCH_FAILURE), CURAND_STATUS_LAUNCH_FAILURE);
    assert_string_equal(tc_status_name(TC_CURAND_STATUS_LAUNCH_FAILURE),
                        "CURAND_STATUS_LAUNCH_FAILURE");
    assert_int_equal(TC_OK, 0);
    assert_string_equal(tc_status_name(TC_OK), "TC_OK");
    assert_true(tc_status_lib(TC_ERR_LIBRARY_NOT_FOUND) == TC_LIB_THINCUDA);
}

static void the_cuda_words_come_from_the_header(void **state)
{
    (void)state;
    /* cuda.h documents CUDA_ERROR_OUT_OF_MEMORY as failing to allocate enough memory. */
    assert_non_null(strstr(tc_status_string(TC_CUDA_ERROR_OUT_OF_MEMORY), "memory"));
    assert_non_null(strstr(tc_status_string(TC_CURAND_STATUS_LAUNCH_FAILURE), "launch"));
}

static void an_unknown_code_is_named_not_crashed(void **state)
{
    (void)state;
    tc_status s = TC_STATUS_MAKE(TC_LIB_CUDA, 123456);
    assert_non_null(strstr(tc_status_name(s), "123456"));
    assert_non_null(strstr(tc_status_string(s), "123456"));
    assert_string_equal(tc_lib_name(TC_LIB_CUBLAS), "cuBLAS");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_code_has_a_name_and_a_string),
        cmocka_unit_test(codes_keep_library_and_value),
        cmocka_unit_test(the_cuda_words_come_from_the_header),
        cmocka_unit_test(an_unknown_code_is_named_not_crashed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
