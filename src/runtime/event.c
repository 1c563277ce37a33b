/* Events: points recorded on a stream, for ordering and GPU timing. */
#include "runtime/event.h"

#include "runtime/error.h"
#include "runtime/host.h"
#include "runtime/internal.h"

tc_status tc_event_create(tc_context *ctx, bool timing, tc_event **out)
{
    *out = NULL;
    TC_TRY(tc__context_enter(ctx));
    tc_event *ev = tc_host_calloc(1, sizeof *ev);
    if (ev == NULL)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_event_create", "out of host memory");
    tc_status st = tc_cuEventCreate(&ev->cu, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING);
    if (st != TC_OK) {
        tc_host_free(ev);
        return st;
    }
    ev->ctx = ctx;
    *out = ev;
    return TC_OK;
}

void tc_event_destroy(tc_event *ev)
{
    if (ev == NULL)
        return;
    if (tc__context_enter(ev->ctx) != TC_OK || tc_cuEventDestroy(ev->cu) != TC_OK)
        TC_WARN("destroying event %p: %s", (void *)ev->cu, tc_last_error());
    tc_host_free(ev);
}

tc_status tc_event_record(tc_event *ev, tc_stream *s)
{
    TC_TRY(tc__context_enter(s->ctx));
    return tc_cuEventRecord(ev->cu, s->cu);
}

tc_status tc_event_synchronize(tc_event *ev)
{
    TC_TRY(tc__context_enter(ev->ctx));
    return tc_cuEventSynchronize(ev->cu);
}

tc_status tc_event_query(tc_event *ev, bool *done)
{
    TC_TRY(tc__context_enter(ev->ctx));
    tc_status st = tc_cuEventQuery(ev->cu);
    *done = st == TC_OK;
    if (st == TC_CUDA_ERROR_NOT_READY) {
        tc_clear_error();
        return TC_OK;
    }
    return st;
}

tc_status tc_event_elapsed_ms(tc_event *start, tc_event *end, float *ms)
{
    TC_TRY(tc__context_enter(start->ctx));
    return tc_cuEventElapsedTime(ms, start->cu, end->cu);
}

CUevent tc_event_handle(const tc_event *ev)
{
    return ev->cu;
}
