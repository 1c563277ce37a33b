/* Status propagation for hand-written code: TC_TRY returns a failing status to the caller,
 * TC_CHECK jumps to the function's one cleanup label; both log where it happened (debug). */
#ifndef TC_ERROR_H
#define TC_ERROR_H

#include "runtime/log.h"

/* Log (debug) that `expr` failed here with `s`; the failing call already set tc_last_error(). */
#define tc__propagate(s, expr) \
    TC_DEBUG("%s failed in %s: %s: %s", (expr), __func__, tc_status_name(s), tc_last_error())

/* Evaluate a tc_status expression; on failure log the place and return it. */
#define TC_TRY(expr)                         \
    do {                                     \
        tc_status tc_try_s_ = (expr);        \
        if (tc_try_s_ != TC_OK) {            \
            tc__propagate(tc_try_s_, #expr); \
            return tc_try_s_;                \
        }                                    \
    } while (0)

/* Evaluate a tc_status expression into `st`; on failure log the place and goto fail. */
#define TC_CHECK(st, expr)              \
    do {                                \
        if (((st) = (expr)) != TC_OK) { \
            tc__propagate((st), #expr); \
            goto fail;                  \
        }                               \
    } while (0)

#endif /* TC_ERROR_H */
