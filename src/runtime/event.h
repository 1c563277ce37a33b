/* Events: markers recorded on a stream, for ordering between streams and for GPU timing. */
#ifndef TC_EVENT_H
#define TC_EVENT_H

#include <stdbool.h>

#include "runtime/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Create an event on ctx; `timing` false makes a cheaper event for ordering only. */
TC_API tc_status tc_event_create(tc_context *ctx, bool timing, tc_event **out);

/* Destroy an event; NULL is a no-op. */
TC_API void tc_event_destroy(tc_event *ev);

/* Record ev at the current end of stream s. */
TC_API tc_status tc_event_record(tc_event *ev, tc_stream *s);

/* Block the calling thread until ev has completed. */
TC_API tc_status tc_event_synchronize(tc_event *ev);

/* Set *done to whether ev has completed, without blocking. */
TC_API tc_status tc_event_query(tc_event *ev, bool *done);

/* Milliseconds of GPU time between two completed timing events. */
TC_API tc_status tc_event_elapsed_ms(tc_event *start, tc_event *end, float *ms);

/* The driver handle behind ev. */
TC_API CUevent tc_event_handle(const tc_event *ev);

#ifdef __cplusplus
}
#endif

#endif /* TC_EVENT_H */
