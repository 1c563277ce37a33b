/* Shared by the GPU test and benchmark programs: stop at the first failing call, saying
 * which call, where, and the thread's last error; the median of timings. */
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

static inline int check_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of n timings (sorts v). */
static inline double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, check_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif /* TC_TESTS_GPU_CHECK_H */
