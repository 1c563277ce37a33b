/* Kernel profiling. Each launch through tc_launch_kernel gets an event before and after it on
 * its stream; the pairs are resolved (cuEventElapsedTime) in batches, so a profiled run waits
 * for the GPU every PENDING_MAX launches and at flush. Launches captured into a CUDA graph
 * cannot be timed this way (a graph replays them without our events), so they are counted
 * apart; the engine turns its graphs off while profiling. Occupancy is the theoretical one:
 * resident blocks per multiprocessor from cuOccupancyMaxActiveBlocksPerMultiprocessor, times
 * threads per block, over the multiprocessor's thread limit; measuring achieved occupancy
 * would take CUPTI's counters. */
#include "runtime/profile.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/host.h"
#include "runtime/internal.h"
#include "tc_nvtx.h"

enum { PENDING_MAX = 4096 };

typedef struct pending {
    tc_context *ctx;
    tc_kernel_id id;
    CUevent start, end;
    double occupancy; /* theoretical, 0..1; -1 when the calculator did not answer */
} pending;

static struct {
    pthread_mutex_t mu;
    tc__profile_kernel k[TC_KERNEL_COUNT > 0 ? TC_KERNEL_COUNT : 1];
    pending p[PENDING_MAX];
    size_t n;
} prof = { .mu = PTHREAD_MUTEX_INITIALIZER };

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static _Atomic int enabled;
static _Atomic int exit_hook;

static void report_at_exit(void)
{
    size_t need = tc_profile_format(NULL, 0);
    char *buf = need ? malloc(need + 1) : NULL;
    if (buf) {
        tc_profile_format(buf, need + 1);
        fputs(buf, stderr);
        free(buf);
    }
}

static void set_enabled(bool on)
{
    atomic_store(&enabled, on ? 1 : 0);
    if (on && atomic_exchange(&exit_hook, 1) == 0)
        atexit(report_at_exit);
}

static void read_env(void)
{
    const char *v = getenv("THINCUDA_PROFILE");
    if (v && *v && strcmp(v, "0") != 0)
        set_enabled(true);
}

bool tc_profile_enabled(void)
{
    pthread_once(&env_once, read_env);
    return atomic_load(&enabled) != 0;
}

void tc_profile_enable(bool on)
{
    pthread_once(&env_once, read_env);
    set_enabled(on);
}

/* Theoretical occupancy of one configuration, remembered per kernel for its last one. */
static double occupancy(tc_context *c, tc_kernel_id id, const tc_launch_config *cfg)
{
    tc__profile_kernel *k = &prof.k[id];
    int threads = (int)(cfg->block.x * cfg->block.y * cfg->block.z);
    if (k->occ_threads == threads && k->occ_shared == cfg->shared_bytes && k->occ_ctx == c)
        return k->occ_last;
    int blocks = 0, per_sm = 0;
    double occ = -1;
    if (tc_cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, c->funcs[id], threads,
                                                       cfg->shared_bytes) == TC_OK &&
        tc_cuDeviceGetAttribute(&per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
                                c->dev) == TC_OK &&
        per_sm > 0) {
        occ = (double)blocks * threads / per_sm;
        occ = occ > 1 ? 1 : occ;
    }
    k->occ_threads = threads;
    k->occ_shared = cfg->shared_bytes;
    k->occ_ctx = c;
    k->occ_last = occ;
    return occ;
}

/* Resolve every pending pair: wait for its end event, add its time. Called with mu held. */
static tc_status drain(tc_context *only)
{
    tc_status first = TC_OK;
    size_t keep = 0;
    for (size_t i = 0; i < prof.n; i++) {
        pending *p = &prof.p[i];
        if (only && p->ctx != only) {
            prof.p[keep++] = *p;
            continue;
        }
        float ms = 0;
        tc_status st = tc__context_enter(p->ctx);
        if (st == TC_OK)
            st = tc_cuEventSynchronize(p->end);
        if (st == TC_OK)
            st = tc_cuEventElapsedTime(&ms, p->start, p->end);
        if (st == TC_OK)
            tc__profile_add(p->id, ms, p->occupancy);
        else
            prof.k[p->id].untimed++;
        if (st != TC_OK && first == TC_OK)
            first = st;
        tc_cuEventDestroy(p->start);
        tc_cuEventDestroy(p->end);
    }
    prof.n = keep;
    return first;
}

void tc__profile_add(tc_kernel_id id, double ms, double occ)
{
    tc__profile_kernel *k = &prof.k[id];
    k->launches++;
    k->total_ms += ms;
    if (occ >= 0) {
        k->occ_sum += occ;
        k->occ_count++;
    }
}

tc_status tc__profile_begin(tc_context *c, tc_kernel_id id, const tc_launch_config *cfg,
                            tc__profile_token *t)
{
    t->active = false;
    CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
    TC_TRY(tc_cuStreamIsCapturing(cfg->stream->cu, &cap));
    pthread_mutex_lock(&prof.mu);
    if (cap != CU_STREAM_CAPTURE_STATUS_NONE) {
        prof.k[id].untimed++;
        pthread_mutex_unlock(&prof.mu);
        return TC_OK;
    }
    if (prof.n == PENDING_MAX)
        drain(NULL);
    t->occupancy = occupancy(c, id, cfg);
    pthread_mutex_unlock(&prof.mu);
    TC_TRY(tc_cuEventCreate(&t->start, CU_EVENT_DEFAULT));
    tc_status st = tc_cuEventCreate(&t->end, CU_EVENT_DEFAULT);
    if (st == TC_OK)
        st = tc_cuEventRecord(t->start, cfg->stream->cu);
    if (st != TC_OK) {
        tc_cuEventDestroy(t->start);
        if (t->end)
            tc_cuEventDestroy(t->end);
        return st;
    }
    t->active = true;
    t->ctx = c;
    t->id = id;
    t->stream = cfg->stream->cu;
    return TC_OK;
}

void tc__profile_end(tc__profile_token *t, bool launched)
{
    if (!t->active)
        return;
    if (!launched || tc_cuEventRecord(t->end, t->stream) != TC_OK) {
        tc_cuEventDestroy(t->start);
        tc_cuEventDestroy(t->end);
        return;
    }
    pthread_mutex_lock(&prof.mu);
    if (prof.n == PENDING_MAX)
        drain(NULL);
    prof.p[prof.n++] = (pending){ t->ctx, t->id, t->start, t->end, t->occupancy };
    pthread_mutex_unlock(&prof.mu);
}

void tc__profile_forget_context(tc_context *c)
{
    pthread_mutex_lock(&prof.mu);
    drain(c);
    for (int i = 0; i < TC_KERNEL_COUNT; i++)
        if (prof.k[i].occ_ctx == c)
            prof.k[i].occ_ctx = NULL;
    pthread_mutex_unlock(&prof.mu);
}

tc_status tc_profile_flush(void)
{
    pthread_mutex_lock(&prof.mu);
    tc_status st = drain(NULL);
    pthread_mutex_unlock(&prof.mu);
    return st;
}

void tc_profile_reset(void)
{
    pthread_mutex_lock(&prof.mu);
    for (size_t i = 0; i < prof.n; i++) {
        tc__context_enter(prof.p[i].ctx);
        tc_cuEventDestroy(prof.p[i].start);
        tc_cuEventDestroy(prof.p[i].end);
    }
    prof.n = 0;
    for (int i = 0; i < TC_KERNEL_COUNT; i++) {
        tc__profile_kernel *k = &prof.k[i];
        k->launches = k->untimed = k->occ_count = 0;
        k->total_ms = k->occ_sum = 0;
    }
    pthread_mutex_unlock(&prof.mu);
}

/* snprintf into buf at *len, counting what the whole text needs even past the end. */
static void put(char *buf, size_t size, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void put(char *buf, size_t size, size_t *len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(*len < size ? buf + *len : NULL, *len < size ? size - *len : 0, fmt, ap);
    va_end(ap);
    if (n > 0)
        *len += (size_t)n;
}

static int by_time(const void *a, const void *b)
{
    const tc__profile_kernel *x = &prof.k[*(const int *)a], *y = &prof.k[*(const int *)b];
    if (x->total_ms != y->total_ms)
        return x->total_ms < y->total_ms ? 1 : -1;
    if (x->launches != y->launches)
        return x->launches < y->launches ? 1 : -1;
    return *(const int *)a - *(const int *)b;
}

size_t tc_profile_format(char *buf, size_t size)
{
    static int order[TC_KERNEL_COUNT > 0 ? TC_KERNEL_COUNT : 1];
    size_t len = 0;
    if (buf && size)
        buf[0] = '\0';
    tc_profile_flush();
    pthread_mutex_lock(&prof.mu);
    int n = 0;
    unsigned long long launches = 0, untimed = 0;
    double total = 0;
    for (int i = 0; i < TC_KERNEL_COUNT; i++) {
        if (prof.k[i].launches || prof.k[i].untimed)
            order[n++] = i;
        launches += prof.k[i].launches;
        untimed += prof.k[i].untimed;
        total += prof.k[i].total_ms;
    }
    if (n == 0) {
        pthread_mutex_unlock(&prof.mu);
        return 0;
    }
    qsort(order, (size_t)n, sizeof order[0], by_time);
    put(buf, size, &len,
        "thincuda profile: %llu kernel launches timed, %.3f ms of GPU time (an event pair "
        "around each launch)\n",
        launches, total);
    put(buf, size, &len, "%-40s %9s %8s %11s %10s %7s %12s\n", "kernel", "launches", "untimed",
        "total ms", "mean us", "share", "theor. occ.");
    for (int j = 0; j < n; j++) {
        const tc__profile_kernel *k = &prof.k[order[j]];
        const char *name = tc_kernel_table[order[j]].name;
        if (k->launches == 0) {
            put(buf, size, &len, "%-40s %9d %8llu %11s %10s %7s %12s\n", name, 0,
                (unsigned long long)k->untimed, "-", "-", "-", "-");
            continue;
        }
        char occ[16] = "-";
        if (k->occ_count)
            snprintf(occ, sizeof occ, "%.1f%%", 100.0 * k->occ_sum / (double)k->occ_count);
        put(buf, size, &len, "%-40s %9llu %8llu %11.3f %10.2f %6.1f%% %12s\n", name,
            (unsigned long long)k->launches, (unsigned long long)k->untimed, k->total_ms,
            1000.0 * k->total_ms / (double)k->launches,
            total > 0 ? 100.0 * k->total_ms / total : 0.0, occ);
    }
    if (untimed)
        put(buf, size, &len,
            "untimed: %llu launches captured into CUDA graphs (or whose events failed), "
            "counted but not timed\n",
            untimed);
    pthread_mutex_unlock(&prof.mu);
    return len;
}

static pthread_once_t nvtx_once = PTHREAD_ONCE_INIT;
static bool nvtx_on;

static void read_nvtx_env(void)
{
    const char *v = getenv("THINCUDA_NVTX");
    nvtx_on = v && *v && strcmp(v, "0") != 0;
}

void tc_profile_range_push(const char *name)
{
    pthread_once(&nvtx_once, read_nvtx_env);
    if (nvtx_on)
        tc_nvtxRangePushA(name, NULL);
}

void tc_profile_range_pop(void)
{
    pthread_once(&nvtx_once, read_nvtx_env);
    if (nvtx_on)
        tc_nvtxRangePop(NULL);
}
