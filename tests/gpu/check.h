/* Shared by the GPU test and benchmark programs: stop at the first failing call, saying
 * which call, where, and the thread's last error. */
#ifndef TC_TESTS_GPU_CHECK_H
#define TC_TESTS_GPU_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "tc_bindings.h"

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        tc_status s_ = (expr);                                                                     \
        if (s_ != TC_OK) {                                                                         \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, tc_last_error()); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#endif /* TC_TESTS_GPU_CHECK_H */
