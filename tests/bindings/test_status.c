/* Every status code of the wrapped headers and of thincuda has a distinct name and words. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>
#include <cublas_v2.h>
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
        assert_null(strchr(name, ' ')); /* the header's identifier (NCCL's are ncclSystemError) */
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

static void every_hint_is_a_sentence_or_none(void **state)
{
    (void)state;
    size_t n = tc_status_count(), with = 0;
    for (size_t i = 0; i < n; i++) {
        const char *hint = tc_status_hint(tc_status_at(i));
        if (!hint)
            continue; /* gen/hints.toml says "none" (the generator wants an entry per code) */
        with++;
        assert_true(strlen(hint) > 10);
        assert_null(strchr(hint, '{')); /* every placeholder filled in */
    }
    assert_true(with >= 50);
    assert_null(tc_status_hint(TC_OK));
    assert_null(tc_status_hint(TC_STATUS_MAKE(TC_LIB_CUDA, 0x7FFFFF)));
}

static void hints_name_the_installed_driver_and_the_cure(void **state)
{
    (void)state;
    /* No driver here (THINCUDA_LIBCUDA points nowhere). */
    const char *h = tc_status_hint(TC_CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
    assert_non_null(strstr(h, "update the NVIDIA driver to at least CUDA "));
    assert_non_null(strstr(h, "installed: no driver found"));
    assert_non_null(strstr(tc_status_hint(TC_ERR_OUT_OF_MEMORY), "--kv-fraction"));
    assert_non_null(strstr(tc_status_hint(TC_CUDA_ERROR_NO_BINARY_FOR_GPU), "rebuild"));
}

static void oom_and_sticky_codes_are_classified(void **state)
{
    (void)state;
    assert_true(tc_status_is_oom(TC_ERR_OUT_OF_MEMORY));
    assert_true(tc_status_is_oom(TC_CUDA_ERROR_OUT_OF_MEMORY));
    assert_true(tc_status_is_oom(TC_CUBLAS_STATUS_ALLOC_FAILED));
    assert_true(tc_status_is_oom(TC_CURAND_STATUS_ALLOCATION_FAILED));
    assert_false(tc_status_is_oom(TC_CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES));
    assert_false(tc_status_is_oom(TC_OK));
    const tc_status sticky[] = {
        TC_CUDA_ERROR_ILLEGAL_ADDRESS,      TC_CUDA_ERROR_LAUNCH_FAILED,
        TC_CUDA_ERROR_ILLEGAL_INSTRUCTION,  TC_CUDA_ERROR_MISALIGNED_ADDRESS,
        TC_CUDA_ERROR_HARDWARE_STACK_ERROR, TC_CUDA_ERROR_ASSERT,
        TC_CUDA_ERROR_LAUNCH_TIMEOUT,       TC_CUDA_ERROR_ECC_UNCORRECTABLE
    };
    for (size_t i = 0; i < sizeof sticky / sizeof sticky[0]; i++)
        assert_true(tc_status_is_sticky(sticky[i]));
    size_t n = tc_status_count(), count = 0;
    for (size_t i = 0; i < n; i++)
        count += tc_status_is_sticky(tc_status_at(i));
    assert_true(count >= 10 && count <= 20);
    assert_false(tc_status_is_sticky(TC_CUDA_ERROR_OUT_OF_MEMORY));
    assert_false(tc_status_is_sticky(TC_CUDA_ERROR_INVALID_VALUE));
    assert_false(tc_status_is_sticky(TC_ERR_LAUNCH));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_code_has_a_name_and_a_string),
        cmocka_unit_test(codes_keep_library_and_value),
        cmocka_unit_test(the_cuda_words_come_from_the_header),
        cmocka_unit_test(an_unknown_code_is_named_not_crashed),
        cmocka_unit_test(every_hint_is_a_sentence_or_none),
        cmocka_unit_test(hints_name_the_installed_driver_and_the_cure),
        cmocka_unit_test(oom_and_sticky_codes_are_classified),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
