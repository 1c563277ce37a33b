/* Launching thincuda's kernels: the generated launchers (generated/tc_kernels.h) call
 * tc_launch_kernel, which checks the configuration against the device and the kernel and
 * names the kernel in every failure; occupancy helpers pick block and grid sizes. */
#ifndef TC_LAUNCH_H
#define TC_LAUNCH_H

#include "runtime/context.h"
#include "runtime/stream.h"
#include "tc_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The block size that maximises occupancy for kernel id with `shared_bytes` of dynamic shared
 * memory per block (at most `block_limit` threads; 0 for no limit), and the smallest grid that
 * reaches it (cuOccupancyMaxPotentialBlockSize). */
TC_API tc_status tc_launch_block_size(tc_context *ctx, tc_kernel_id id, size_t shared_bytes,
                                      int block_limit, int *min_grid, int *block);

/* How many blocks of `block` threads fit on one SM at once. */
TC_API tc_status tc_launch_blocks_per_sm(tc_context *ctx, tc_kernel_id id, int block,
                                         size_t shared_bytes, int *blocks);

/* How many clusters of a launch of cfg (of the extent its stream sets: tc_stream_set_cluster)
 * can run at once on the device (cuOccupancyMaxActiveClusters); compute capability 9.0+. A
 * cluster's blocks must be resident together on one GPC, so this can be fewer than the blocks
 * an SM times the SMs, over the cluster's blocks. */
TC_API tc_status tc_launch_max_clusters(tc_kernel_id id, const tc_launch_config *cfg,
                                        int *clusters);

/* Kernel id's preferred split of each SM's combined L1 cache and shared memory: `percent` of
 * the most shared memory the SM can have (0: the largest L1, 100: the most shared memory), or
 * -1 to let the driver choose again (CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT). A
 * preference only: a launch that needs more shared memory still gets it. Anything else is
 * TC_ERR_INVALID_ARGUMENT. */
TC_API tc_status tc_launch_set_carveout(tc_context *ctx, tc_kernel_id id, int percent);

/* A one-dimensional configuration for a grid-stride kernel over `n` items: the occupancy
 * block size, and just enough blocks to fill the GPU once (fewer when n is small). */
TC_API tc_status tc_launch_config_1d(tc_stream *s, tc_kernel_id id, size_t n,
                                     tc_launch_config *out);

#ifdef __cplusplus
}
#endif

#endif /* TC_LAUNCH_H */
