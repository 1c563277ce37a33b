/* Streams: ordered queues of device work (non-blocking with respect to the legacy default
 * stream), with priorities, cross-stream waits and asynchronous copies. */
#ifndef TC_STREAM_H
#define TC_STREAM_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/context.h"
#include "tc_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tc_stream tc_stream;
typedef struct tc_event tc_event;

/* Create a stream on ctx. `priority` 0 is the default; lower numbers are higher priority and
 * are clamped into the device's range (tc_stream_priority_range). */
TC_API tc_status tc_stream_create(tc_context *ctx, int priority, tc_stream **out);

/* Destroy a stream after its queued work finishes (the driver lets it drain); NULL is a no-op. */
TC_API void tc_stream_destroy(tc_stream *s);

/* The device's priority range: *greatest is the highest priority (the most negative). */
TC_API tc_status tc_stream_priority_range(tc_context *ctx, int *least, int *greatest);

/* Block the calling thread until all work queued on s has finished. */
TC_API tc_status tc_stream_synchronize(tc_stream *s);

/* Set *done to whether all work queued on s has finished, without blocking. */
TC_API tc_status tc_stream_query(tc_stream *s, bool *done);

/* Make work queued on s after this call wait until ev has completed (no host blocking). */
TC_API tc_status tc_stream_wait_event(tc_stream *s, tc_event *ev);

/* Queue a copy of `bytes` from host src to device dst on s (src pinned for true asynchrony). */
TC_API tc_status tc_stream_copy_h2d(tc_stream *s, CUdeviceptr dst, const void *src, size_t bytes);

/* Queue a copy of `bytes` from device src to host dst on s. */
TC_API tc_status tc_stream_copy_d2h(tc_stream *s, void *dst, CUdeviceptr src, size_t bytes);

/* Queue a device-to-device copy of `bytes` on s. */
TC_API tc_status tc_stream_copy_d2d(tc_stream *s, CUdeviceptr dst, CUdeviceptr src, size_t bytes);

/* Queue setting `bytes` bytes at dst to `value` on s. */
TC_API tc_status tc_stream_memset(tc_stream *s, CUdeviceptr dst, unsigned char value, size_t bytes);

/* Overlapped launches (programmatic dependent launch, compute capability 9.0 and up): when on,
 * each of our kernels launched on s may start while the previous one finishes; they wait for
 * their predecessor (tc::await_inputs in kernels/common.cuh) before reading anything it wrote
 * or writing anything it reads, so results are unchanged (the user's kernels overlap only
 * where their module allows it: tc_kmodule_set_overlap). Two exceptions, read before the wait:
 * weights, and the rotary kernels' pos and slots (tc_rope_store, tc_linear_rope_store): on an
 * overlapped stream those must come from the host or a copy (as the engine's index upload
 * does), not from a kernel. Returns TC_ERR_UNSUPPORTED on older devices when on is true. Off
 * by default. */
TC_API tc_status tc_stream_set_overlap(tc_stream *s, bool on);
TC_API bool tc_stream_overlap(const tc_stream *s);

/* Thread-block clusters (compute capability 9.0 and up): while set to an extent of more than
 * one block, each kernel launched on s runs its blocks in clusters of that extent, whose blocks
 * are resident together and may read and write each other's shared memory; each extent must
 * then divide the launch's grid (the launch fails, naming the kernel, where one does not). At
 * most 8 blocks. {0, 0, 0} or {1, 1, 1} sets it back (the default). Returns TC_ERR_UNSUPPORTED
 * on older devices and TC_ERR_INVALID_ARGUMENT for a zero extent or more than 8 blocks. */
TC_API tc_status tc_stream_set_cluster(tc_stream *s, tc_dim3 cluster);
TC_API tc_dim3 tc_stream_cluster(const tc_stream *s);

/* The stream's context, priority and driver handle. */
TC_API tc_context *tc_stream_context(const tc_stream *s);
TC_API int tc_stream_priority(const tc_stream *s);
TC_API CUstream tc_stream_handle(const tc_stream *s);

#ifdef __cplusplus
}
#endif

#endif /* TC_STREAM_H */
