/* Streams: creation with priority, synchronisation, cross-stream waits, async copies. */
#include "runtime/stream.h"

#include "runtime/error.h"
#include "runtime/event.h"
#include "runtime/host.h"
#include "runtime/internal.h"

tc_status tc_stream_priority_range(tc_context *ctx, int *least, int *greatest)
{
    TC_TRY(tc__context_enter(ctx));
    return tc_cuCtxGetStreamPriorityRange(least, greatest);
}

tc_status tc_stream_create(tc_context *ctx, int priority, tc_stream **out)
{
    int least = 0, greatest = 0;
    *out = NULL;
    TC_TRY(tc_stream_priority_range(ctx, &least, &greatest));
    if (priority > least)
        priority = least;
    if (priority < greatest)
        priority = greatest;
    tc_stream *s = tc_host_calloc(1, sizeof *s);
    if (s == NULL)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_stream_create", "out of host memory");
    tc_status st = tc_cuStreamCreateWithPriority(&s->cu, CU_STREAM_NON_BLOCKING, priority);
    if (st != TC_OK) {
        tc_host_free(s);
        return st;
    }
    s->ctx = ctx;
    s->priority = priority;
    *out = s;
    return TC_OK;
}

/* TC_ERR_UNSUPPORTED from fn, saying what needs compute capability 9.0, on older devices. */
static tc_status need_cc9(const tc_stream *s, const char *fn, const char *what)
{
    if (s->ctx->cc_major >= 9)
        return TC_OK;
    return tc_set_error(TC_ERR_UNSUPPORTED, fn,
                        "%s need compute capability 9.0; this device is %d.%d", what,
                        s->ctx->cc_major, s->ctx->cc_minor);
}

tc_status tc_stream_set_overlap(tc_stream *s, bool on)
{
    if (on)
        TC_TRY(need_cc9(s, "tc_stream_set_overlap", "overlapped launches"));
    s->overlap = on;
    return TC_OK;
}

bool tc_stream_overlap(const tc_stream *s)
{
    return s->overlap;
}

tc_status tc_stream_set_cluster(tc_stream *s, tc_dim3 cluster)
{
    const char *fn = "tc_stream_set_cluster";
    uint64_t blocks = (uint64_t)cluster.x * cluster.y * cluster.z;
    if ((cluster.x | cluster.y | cluster.z) == 0) {
        s->cluster = cluster;
        return TC_OK;
    }
    if (blocks == 0 || blocks > 8)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, fn,
                            "a cluster of %u x %u x %u blocks; each extent must be at least 1 and "
                            "all of them at most 8 blocks",
                            cluster.x, cluster.y, cluster.z);
    if (blocks > 1)
        TC_TRY(need_cc9(s, fn, "thread-block clusters"));
    s->cluster = cluster;
    return TC_OK;
}

tc_dim3 tc_stream_cluster(const tc_stream *s)
{
    return s->cluster;
}

void tc_stream_destroy(tc_stream *s)
{
    if (s == NULL)
        return;
    if (tc__context_enter(s->ctx) != TC_OK || tc_cuStreamDestroy(s->cu) != TC_OK)
        TC_WARN("destroying stream %p: %s", (void *)s->cu, tc_last_error());
    tc_host_free(s);
}

tc_status tc_stream_synchronize(tc_stream *s)
{
    TC_TRY(tc__context_enter(s->ctx));
    return tc_cuStreamSynchronize(s->cu);
}

tc_status tc_stream_query(tc_stream *s, bool *done)
{
    TC_TRY(tc__context_enter(s->ctx));
    tc_status st = tc_cuStreamQuery(s->cu);
    *done = st == TC_OK;
    if (st == TC_CUDA_ERROR_NOT_READY) {
        tc_clear_error();
        return TC_OK;
    }
    return st;
}

tc_status tc_stream_wait_event(tc_stream *s, tc_event *ev)
{
    TC_TRY(tc__context_enter(s->ctx));
    return tc_cuStreamWaitEvent(s->cu, ev->cu, CU_EVENT_WAIT_DEFAULT);
}

tc_status tc_stream_copy_h2d(tc_stream *s, CUdeviceptr dst, const void *src, size_t bytes)
{
    TC_TRY(tc__context_enter(s->ctx));
    return tc_cuMemcpyHtoDAsync(dst, src, bytes, s->cu);
}

tc_status tc_stream_copy_d2h(tc_stream *s, void *dst, CUdeviceptr src, size_t bytes)
{
    TC_TRY(tc__context_enter(s->ctx));
    return tc_cuMemcpyDtoHAsync(dst, src, bytes, s->cu);
}

tc_status tc_stream_copy_d2d(tc_stream *s, CUdeviceptr dst, CUdeviceptr src, size_t bytes)
{
    TC_TRY(tc__context_enter(s->ctx));
    return tc_cuMemcpyDtoDAsync(dst, src, bytes, s->cu);
}

tc_status tc_stream_memset(tc_stream *s, CUdeviceptr dst, unsigned char value, size_t bytes)
{
    TC_TRY(tc__context_enter(s->ctx));
    return tc_cuMemsetD8Async(dst, value, bytes, s->cu);
}

tc_context *tc_stream_context(const tc_stream *s)
{
    return s->ctx;
}

int tc_stream_priority(const tc_stream *s)
{
    return s->priority;
}

CUstream tc_stream_handle(const tc_stream *s)
{
    return s->cu;
}
