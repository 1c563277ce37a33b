/* Leveled logging: THINCUDA_LOG picks the level, each event is one line written with one
 * call so that lines from several threads never interleave. */
#include "runtime/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

_Atomic int tc__log_threshold = -1;

static pthread_mutex_t sink_lock = PTHREAD_MUTEX_INITIALIZER;
static tc_log_sink sink_fn;
static void *sink_user;
static struct timespec t0;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static const char *bad_env; /* a THINCUDA_LOG value we could not read, reported once */

static const char *const names[] = { "debug", "info", "warn", "error", "off" };

const char *tc_log_level_name(tc_log_level level)
{
    return (unsigned)level <= TC_LOG_OFF ? names[level] : "?";
}

bool tc_log_parse_level(const char *text, tc_log_level *out)
{
    if (text == NULL)
        return false;
    for (int i = 0; i <= TC_LOG_OFF; i++) {
        if (strcasecmp(text, names[i]) == 0) {
            *out = (tc_log_level)i;
            return true;
        }
    }
    if (strcasecmp(text, "warning") == 0) {
        *out = TC_LOG_WARN;
        return true;
    }
    return false;
}

static void init_from_env(void)
{
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tc_log_level level = TC_LOG_WARN;
    const char *env = getenv("THINCUDA_LOG");
    if (env != NULL && *env != '\0' && !tc_log_parse_level(env, &level))
        bad_env = env;
    int expected = -1;
    atomic_compare_exchange_strong(&tc__log_threshold, &expected, (int)level);
}

tc_log_level tc_log_get_level(void)
{
    pthread_once(&init_once, init_from_env);
    if (bad_env != NULL) {
        const char *v = bad_env;
        bad_env = NULL;
        tc__log(TC_LOG_WARN, __FILE__, __LINE__,
                "THINCUDA_LOG=%s is not one of debug, info, warn, error, off; using warn", v);
    }
    return (tc_log_level)atomic_load(&tc__log_threshold);
}

void tc_log_set_level(tc_log_level level)
{
    pthread_once(&init_once, init_from_env);
    atomic_store(&tc__log_threshold, (int)level);
}

void tc_log_set_sink(tc_log_sink sink, void *user)
{
    pthread_mutex_lock(&sink_lock);
    sink_fn = sink;
    sink_user = user;
    pthread_mutex_unlock(&sink_lock);
}

void tc__log(tc_log_level level, const char *file, int line, const char *fmt, ...)
{
    pthread_once(&init_once, init_from_env);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double secs = (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9;
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "thincuda %.3f %s %s:%d: ", secs, tc_log_level_name(level),
                     base, line);
    if (n < 0 || (size_t)n >= sizeof buf)
        n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    for (char *p = buf; *p; p++)
        if (*p == '\n')
            *p = ' ';
    pthread_mutex_lock(&sink_lock);
    if (sink_fn != NULL) {
        sink_fn(level, buf, sink_user);
    } else {
        size_t len = strlen(buf);
        buf[len < sizeof buf - 1 ? len : sizeof buf - 2] = '\n';
        buf[len < sizeof buf - 1 ? len + 1 : sizeof buf - 1] = '\0';
        fputs(buf, stderr);
    }
    pthread_mutex_unlock(&sink_lock);
}
