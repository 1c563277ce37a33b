/* tc_launch_kernel: the one place every kernel launch goes through. */
#include "runtime/launch.h"

#include <stdio.h>

#include "runtime/error.h"
#include "runtime/internal.h"
#include "runtime/module.h"
#include "runtime/profile.h"

static tc_status bad_launch(tc_kernel_id id, const tc_launch_config *cfg, tc_status st,
                            const char *why)
{
    const tc_kernel_info *k = &tc_kernel_table[id];
    return tc_set_error(st, k->name,
                        "launching %s (%s:%u) with grid %ux%ux%u, block %ux%ux%u, %u shared "
                        "bytes: %s",
                        k->name, k->file, k->line, cfg->grid.x, cfg->grid.y, cfg->grid.z,
                        cfg->block.x, cfg->block.y, cfg->block.z, cfg->shared_bytes, why);
}

/* Above the default 48 KiB a kernel must opt in to its dynamic shared memory, for launches and
 * for the occupancy calculator alike; done once for each larger size. */
static tc_status allow_shared(tc_context *c, tc_kernel_id id, uint32_t bytes)
{
    if ((int64_t)bytes <= atomic_load(&c->func_dyn_shared[id]))
        return TC_OK;
    TC_TRY(tc_cuFuncSetAttribute(c->funcs[id], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                 (int)bytes));
    atomic_store(&c->func_dyn_shared[id], (int)bytes);
    return TC_OK;
}

/* The blocks of a cluster of cfg's launch (its stream's; 0 or 1 where it has none). */
static uint64_t cluster_blocks(const tc_launch_config *cfg)
{
    return (uint64_t)cfg->stream->cluster.x * cfg->stream->cluster.y * cfg->stream->cluster.z;
}

bool tc__cluster_misfit(const tc_launch_config *cfg, char *why, size_t size)
{
    if (cluster_blocks(cfg) <= 1)
        return false;
    const tc_dim3 cl = cfg->stream->cluster;
    const uint32_t g[3] = { cfg->grid.x, cfg->grid.y, cfg->grid.z }, q[3] = { cl.x, cl.y, cl.z };
    for (int i = 0; i < 3; i++)
        if (g[i] % q[i]) {
            snprintf(why, size,
                     "the stream's cluster extent %c is %u, which does not divide the grid's %u",
                     "xyz"[i], q[i], g[i]);
            return true;
        }
    return false;
}

/* Check the configuration against the device's and the kernel's limits. */
static tc_status check_config(tc_context *c, tc_kernel_id id, const tc_launch_config *cfg)
{
    char why[160];
    const uint32_t g[3] = { cfg->grid.x, cfg->grid.y, cfg->grid.z };
    const uint32_t b[3] = { cfg->block.x, cfg->block.y, cfg->block.z };
    for (int i = 0; i < 3; i++) {
        if (g[i] == 0 || b[i] == 0)
            return bad_launch(id, cfg, TC_ERR_LAUNCH, "a grid or block extent is 0");
        if (g[i] > (uint32_t)c->max_grid[i]) {
            snprintf(why, sizeof why, "grid extent %c is %u; the device allows %d", "xyz"[i], g[i],
                     c -> max_grid[i]);
            return bad_launch(id, cfg, TC_ERR_LAUNCH, why);
        }
        if (b[i] > (uint32_t)c->max_block[i]) {
            snprintf(why, sizeof why, "block extent %c is %u; the device allows %d", "xyz"[i], b[i],
                     c -> max_block[i]);
            return bad_launch(id, cfg, TC_ERR_LAUNCH, why);
        }
    }
    if (tc__cluster_misfit(cfg, why, sizeof why))
        return bad_launch(id, cfg, TC_ERR_LAUNCH, why);
    uint64_t threads = (uint64_t)b[0] * b[1] * b[2];
    if (threads > (uint64_t)c->func_max_threads[id]) {
        snprintf(why, sizeof why, "%llu threads per block; this kernel can run at most %d here",
                 (unsigned long long)threads, c->func_max_threads[id]);
        return bad_launch(id, cfg, TC_ERR_LAUNCH, why);
    }
    if ((int64_t)cfg->shared_bytes > atomic_load(&c->func_dyn_shared[id])) {
        int room = c->max_shared_optin - c->func_static_shared[id];
        if ((int64_t)cfg->shared_bytes > room) {
            snprintf(why, sizeof why,
                     "the device allows at most %d bytes of dynamic shared "
                     "memory for this kernel (%d per block, %d static)",
                     room, c->max_shared_optin, c->func_static_shared[id]);
            return bad_launch(id, cfg, TC_ERR_LAUNCH, why);
        }
        TC_TRY(allow_shared(c, id, cfg->shared_bytes));
    }
    return TC_OK;
}

/* What a launch of kernel id with cfg (and a query about one) checks first: the id, the stream,
 * where need_cluster the stream's cluster extent, the module, the configuration; then makes the
 * stream's context current. *out: that context. */
static tc_status launch_context(const char *fn, tc_kernel_id id, const tc_launch_config *cfg,
                                bool need_cluster, tc_context **out)
{
    if ((unsigned)id >= (unsigned)TC_KERNEL_COUNT)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, fn, "no kernel id %d", (int)id);
    if (cfg->stream == NULL)
        return bad_launch(id, cfg, TC_ERR_INVALID_ARGUMENT,
                          "no stream: work always goes on an explicit stream");
    if (need_cluster && cluster_blocks(cfg) < 1)
        return bad_launch(id, cfg, TC_ERR_INVALID_ARGUMENT, "the stream has no cluster extent");
    tc_context *c = cfg->stream->ctx;
    TC_TRY(tc__module_ensure(c));
    TC_TRY(check_config(c, id, cfg));
    TC_TRY(tc__context_enter(c));
    *out = c;
    return TC_OK;
}

/* The cluster-dimension attribute of cfg's stream. */
static CUlaunchAttribute cluster_attr(const tc_launch_config *cfg)
{
    CUlaunchAttribute a = { 0 };
    a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    a.value.clusterDim.x = cfg->stream->cluster.x;
    a.value.clusterDim.y = cfg->stream->cluster.y;
    a.value.clusterDim.z = cfg->stream->cluster.z;
    return a;
}

/* cfg as the driver's launch configuration, with n attributes. */
static CUlaunchConfig driver_config(const tc_launch_config *cfg, CUlaunchAttribute *attr,
                                    unsigned n)
{
    CUlaunchConfig lc = {
        cfg->grid.x,  cfg->grid.y,       cfg->grid.z,     cfg->block.x, cfg->block.y,
        cfg->block.z, cfg->shared_bytes, cfg->stream->cu, attr,         n
    };
    return lc;
}

tc_status tc__launch_function(CUfunction f, const tc_launch_config *cfg, void **args, bool awaits)
{
    bool cluster = cluster_blocks(cfg) > 1, overlap = awaits && cfg->stream->overlap;
    if (!overlap && !cluster)
        return tc_cuLaunchKernel(f, cfg->grid.x, cfg->grid.y, cfg->grid.z, cfg->block.x,
                                 cfg->block.y, cfg->block.z, cfg->shared_bytes, cfg->stream->cu,
                                 args, NULL);
    CUlaunchAttribute attr[2] = { { 0 } };
    unsigned n = 0;
    if (overlap) {
        attr[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr[n++].value.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster)
        attr[n++] = cluster_attr(cfg);
    CUlaunchConfig lc = driver_config(cfg, attr, n);
    return tc_cuLaunchKernelEx(&lc, f, args, NULL);
}

tc_status tc_launch_kernel(tc_kernel_id id, const tc_launch_config *cfg, void **args)
{
    tc_context *c;
    TC_TRY(launch_context("tc_launch_kernel", id, cfg, false, &c));
    tc_status st;
    tc__profile_token prof = { 0 };
    if (tc_profile_enabled())
        TC_TRY(tc__profile_begin(c, id, cfg, &prof));
    st = tc__launch_function(c->funcs[id], cfg, args, true);
    if (prof.active)
        tc__profile_end(&prof, st == TC_OK);
    if (st != TC_OK)
        return bad_launch(id, cfg, st, tc_status_string(st));
    return TC_OK;
}

tc_status tc_launch_block_size(tc_context *ctx, tc_kernel_id id, size_t shared_bytes,
                               int block_limit, int *min_grid, int *block)
{
    CUfunction f;
    TC_TRY(tc_module_function(ctx, id, &f));
    TC_TRY(tc__context_enter(ctx));
    return tc_cuOccupancyMaxPotentialBlockSize(min_grid, block, f, NULL, shared_bytes, block_limit);
}

tc_status tc_launch_blocks_per_sm(tc_context *ctx, tc_kernel_id id, int block, size_t shared_bytes,
                                  int *blocks)
{
    CUfunction f;
    TC_TRY(tc_module_function(ctx, id, &f));
    TC_TRY(tc__context_enter(ctx));
    /* The calculator counts no block of a kernel not yet allowed that much shared memory. */
    if ((int64_t)shared_bytes <= ctx->max_shared_optin - ctx->func_static_shared[id])
        TC_TRY(allow_shared(ctx, id, (uint32_t)shared_bytes));
    return tc_cuOccupancyMaxActiveBlocksPerMultiprocessor(blocks, f, block, shared_bytes);
}

tc_status tc_launch_max_clusters(tc_kernel_id id, const tc_launch_config *cfg, int *clusters)
{
    *clusters = 0;
    tc_context *c;
    TC_TRY(launch_context("tc_launch_max_clusters", id, cfg, true, &c));
    CUlaunchAttribute attr = cluster_attr(cfg);
    CUlaunchConfig lc = driver_config(cfg, &attr, 1);
    return tc_cuOccupancyMaxActiveClusters(clusters, c->funcs[id], &lc);
}

tc_status tc_launch_set_carveout(tc_context *ctx, tc_kernel_id id, int percent)
{
    if (percent < -1 || percent > 100)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_launch_set_carveout",
                            "carveout %d%% is not -1 or 0 to 100", percent);
    CUfunction f;
    TC_TRY(tc_module_function(ctx, id, &f));
    TC_TRY(tc__context_enter(ctx));
    return tc_cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, percent);
}

tc_status tc_launch_config_1d(tc_stream *s, tc_kernel_id id, size_t n, tc_launch_config *out)
{
    int min_grid = 0, block = 0;
    TC_TRY(tc_launch_block_size(s->ctx, id, 0, 0, &min_grid, &block));
    size_t need = (n + (size_t)block - 1) / (size_t)block;
    size_t grid = need < (size_t)min_grid ? need : (size_t)min_grid;
    out->grid = tc_dim1((uint32_t)(grid ? grid : 1));
    out->block = tc_dim1((uint32_t)block);
    out->shared_bytes = 0;
    out->stream = s;
    return TC_OK;
}
