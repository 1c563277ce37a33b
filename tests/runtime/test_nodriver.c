/* The runtime on a machine without the NVIDIA driver: every entry point returns a status with
 * one clear sentence, nothing crashes, and host-only parts (the pool over a fake backend,
 * logging) keep working. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/runtime.h"

static void device_queries_say_there_is_no_driver(void **state)
{
    (void)state;
    int n = -1;
    assert_int_equal(tc_device_count(&n), TC_ERR_LIBRARY_NOT_FOUND);
    assert_non_null(strstr(tc_last_error_detail(), "no NVIDIA driver"));
    assert_non_null(strstr(tc_last_error_detail(), "libcuda"));
    tc_device_info info;
    assert_int_equal(tc_device_info_get(0, &info), TC_ERR_LIBRARY_NOT_FOUND);
    int v = 0;
    assert_int_equal(tc_device_driver_version(&v), TC_ERR_LIBRARY_NOT_FOUND);
}

static void contexts_fail_cleanly(void **state)
{
    (void)state;
    tc_context *ctx = (tc_context *)1;
    assert_int_equal(tc_context_retain(0, &ctx), TC_ERR_LIBRARY_NOT_FOUND);
    assert_null(ctx);
    tc_context_release(NULL);
    tc_stream_destroy(NULL);
    tc_event_destroy(NULL);
    tc_pool_destroy(NULL);
    tc_pinned_free(NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(device_queries_say_there_is_no_driver),
        cmocka_unit_test(contexts_fail_cleanly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
