/* Leveled logging to stderr, one line per event (THINCUDA_LOG=debug|info|warn|error|off).
 * Messages below the level are never formatted. */
#ifndef TC_LOG_H
#define TC_LOG_H

#include <stdatomic.h>

#include "tc_bindings.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tc_log_level {
    TC_LOG_DEBUG = 0,
    TC_LOG_INFO = 1,
    TC_LOG_WARN = 2,
    TC_LOG_ERROR = 3,
    TC_LOG_OFF = 4,
} tc_log_level;

/* Receives each formatted line (no trailing newline); replaces the stderr writer. */
typedef void (*tc_log_sink)(tc_log_level level, const char *line, void *user);

/* Set the level, overriding THINCUDA_LOG. */
TC_API void tc_log_set_level(tc_log_level level);

/* Return the level in effect (THINCUDA_LOG read on first use; warn by default). */
TC_API tc_log_level tc_log_get_level(void);

/* Parse "debug", "info", "warn", "error" or "off"; returns false for anything else. */
TC_API bool tc_log_parse_level(const char *text, tc_log_level *out);

/* Send lines to `sink` instead of stderr; NULL restores stderr. */
TC_API void tc_log_set_sink(tc_log_sink sink, void *user);

/* The name of a level ("debug" ...). */
TC_API const char *tc_log_level_name(tc_log_level level);

/* Format and emit one line; use TC_LOG, which skips the call below the level. */
TC_API void tc__log(tc_log_level level, const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

extern TC_API _Atomic int tc__log_threshold; /* -1 until THINCUDA_LOG has been read */

static inline int tc__log_enabled(tc_log_level level)
{
    int t = atomic_load_explicit(&tc__log_threshold, memory_order_relaxed);
    if (t < 0)
        t = (int)tc_log_get_level();
    return (int)level >= t;
}

#define TC_LOG(level, ...)                                     \
    do {                                                       \
        if (tc__log_enabled(level))                            \
            tc__log((level), __FILE__, __LINE__, __VA_ARGS__); \
    } while (0)
#define TC_DEBUG(...) TC_LOG(TC_LOG_DEBUG, __VA_ARGS__)
#define TC_INFO(...) TC_LOG(TC_LOG_INFO, __VA_ARGS__)
#define TC_WARN(...) TC_LOG(TC_LOG_WARN, __VA_ARGS__)
#define TC_ERROR(...) TC_LOG(TC_LOG_ERROR, __VA_ARGS__)

#ifdef __cplusplus
}
#endif

#endif /* TC_LOG_H */
