/* tc_kmodule: the user's own kernels, loaded from the image and table the generator wrote for
 * them, with the same checks as thincuda's own (module.c, launch.c). */
#include "runtime/kmodule.h"

#include <stdio.h>

#include "runtime/error.h"
#include "runtime/host.h"
#include "runtime/internal.h"

struct tc_kmodule {
    tc_context *ctx;
    const tc_kmodule_spec *spec;
    CUmodule module;
    CUfunction *funcs;  /* [spec->count] */
    int *max_threads;   /* [spec->count] threads per block this kernel can run with */
    int *static_shared; /* [spec->count] bytes */
    bool overlap;       /* its kernels may launch overlapped (tc_kmodule_set_overlap) */
};

/* Compare the image's parameter sizes of kernel i with the table's; TC_OK or a mismatch. */
static tc_status check_params(tc_kmodule *m, unsigned i)
{
    const tc_kernel_info *k = &m->spec->kernels[i];
    size_t have[TC__PARAMS_MAX];
    char why[160] = "";
    unsigned n = 0;
    TC_TRY(tc__param_sizes(m->funcs[i], have, TC__PARAMS_MAX, &n));
    for (unsigned j = 0; j < n && j < k->nparams && j < TC__PARAMS_MAX && why[0] == '\0'; j++)
        if (have[j] != k->param_sizes[j])
            snprintf(why, sizeof why,
                     "parameter %u (%s) is %zu bytes in the image, %u in the launcher", j + 1,
                     k->param_names[j], have[j], (unsigned)k->param_sizes[j]);
    if (n != k->nparams && why[0] == '\0')
        snprintf(why, sizeof why, "the image's kernel takes %u parameters, the launcher %u", n,
                 k->nparams);
    if (why[0] == '\0')
        return TC_OK;
    return tc_set_error(TC_ERR_KERNEL_MISMATCH, "tc_kmodule_create",
                        "module %s: kernel %s (%s:%u): %s; regenerate the launchers and rebuild "
                        "the image from the same sources",
                        m->spec->name, k->name, k->file, k->line, why);
}

static tc_status load(tc_kmodule *m)
{
    const tc_kmodule_spec *spec = m->spec;
    tc_context *c = m->ctx;
    if (spec->image_bytes == 0)
        return tc_set_error(TC_ERR_NO_KERNEL_IMAGE, "tc_kmodule_create",
                            "module %s was generated without an image (pass --image)", spec->name);
    TC_TRY(tc__context_enter(c));
    tc_status st = tc_cuModuleLoadData(&m->module, spec->image);
    if (st == TC_CUDA_ERROR_NO_BINARY_FOR_GPU || st == TC_CUDA_ERROR_INVALID_PTX ||
        st == TC_CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
        return tc_set_error(TC_ERR_NO_KERNEL_IMAGE, "tc_kmodule_create",
                            "module %s has no code this GPU (sm_%d%d) can run: built for %s",
                            spec->name, c->cc_major, c->cc_minor, spec->targets);
    TC_TRY(st);
    bool param_info = tc_available("cuFuncGetParamInfo");
    for (unsigned i = 0; i < spec->count; i++) {
        const tc_kernel_info *k = &spec->kernels[i];
        st = tc_cuModuleGetFunction(&m->funcs[i], m->module, k->name);
        if (st == TC_CUDA_ERROR_NOT_FOUND)
            return tc_set_error(TC_ERR_KERNEL_MISMATCH, "tc_kmodule_create",
                                "module %s: kernel %s (%s:%u) is missing from its image",
                                spec->name, k->name, k->file, k->line);
        TC_TRY(st);
        if (param_info)
            TC_TRY(check_params(m, i));
        TC_TRY(tc_cuFuncGetAttribute(&m->max_threads[i], CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                     m->funcs[i]));
        TC_TRY(tc_cuFuncGetAttribute(&m->static_shared[i], CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                                     m->funcs[i]));
    }
    TC_DEBUG("module %s: %u kernels loaded on device %d%s", spec->name, spec->count, c->ordinal,
             param_info ? ", parameters checked" : "; driver lacks cuFuncGetParamInfo");
    return TC_OK;
}

tc_status tc_kmodule_create(tc_context *ctx, const tc_kmodule_spec *spec, tc_kmodule **out)
{
    *out = NULL;
    if (ctx == NULL || spec == NULL || (spec->count > 0 && spec->kernels == NULL))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_kmodule_create",
                            "a context and a generated module spec are required");
    tc_kmodule *m = tc_host_calloc(1, sizeof *m);
    unsigned n = spec->count > 0 ? spec->count : 1;
    if (m) {
        m->funcs = tc_host_calloc(n, sizeof *m->funcs);
        m->max_threads = tc_host_calloc(n, sizeof *m->max_threads);
        m->static_shared = tc_host_calloc(n, sizeof *m->static_shared);
    }
    if (!m || !m->funcs || !m->max_threads || !m->static_shared) {
        tc_kmodule_destroy(m);
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_kmodule_create", "module %s: no host memory",
                            spec->name);
    }
    m->ctx = ctx;
    m->spec = spec;
    tc_status st = load(m);
    if (st != TC_OK) {
        tc_kmodule_destroy(m);
        return st;
    }
    *out = m;
    return TC_OK;
}

void tc_kmodule_destroy(tc_kmodule *m)
{
    if (m == NULL)
        return;
    if (m->module) {
        tc_status st = tc__context_enter(m->ctx);
        if (st == TC_OK)
            st = tc_cuModuleUnload(m->module);
        if (st != TC_OK)
            TC_WARN("module %s: unloading failed: %s", m->spec->name, tc_last_error());
    }
    tc_host_free(m->funcs);
    tc_host_free(m->max_threads);
    tc_host_free(m->static_shared);
    tc_host_free(m);
}

void tc_kmodule_set_overlap(tc_kmodule *m, bool on)
{
    if (m)
        m->overlap = on;
}

tc_status tc_kmodule_function(tc_kmodule *m, unsigned id, CUfunction *out)
{
    *out = NULL;
    if (m == NULL || id >= m->spec->count)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_kmodule_function", "no kernel id %u", id);
    *out = m->funcs[id];
    return TC_OK;
}

static tc_status bad_launch(tc_kmodule *m, unsigned id, const tc_launch_config *cfg, tc_status st,
                            const char *why)
{
    const tc_kernel_info *k = &m->spec->kernels[id];
    return tc_set_error(st, k->name,
                        "launching %s (%s:%u) with grid %ux%ux%u, block %ux%ux%u, %u shared "
                        "bytes: %s",
                        k->name, k->file, k->line, cfg->grid.x, cfg->grid.y, cfg->grid.z,
                        cfg->block.x, cfg->block.y, cfg->block.z, cfg->shared_bytes, why);
}

tc_status tc_kmodule_launch(tc_kmodule *m, unsigned id, const tc_launch_config *cfg, void **args)
{
    if (m == NULL || id >= m->spec->count)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_kmodule_launch", "no kernel id %u", id);
    if (cfg->stream == NULL || cfg->stream->ctx != m->ctx)
        return bad_launch(m, id, cfg, TC_ERR_INVALID_ARGUMENT,
                          "the stream is missing or belongs to another context than the module");
    tc_context *c = m->ctx;
    char why[160];
    const uint32_t g[3] = { cfg->grid.x, cfg->grid.y, cfg->grid.z };
    const uint32_t b[3] = { cfg->block.x, cfg->block.y, cfg->block.z };
    for (int i = 0; i < 3; i++) {
        if (g[i] == 0 || b[i] == 0)
            return bad_launch(m, id, cfg, TC_ERR_LAUNCH, "a grid or block extent is 0");
        if (g[i] > (uint32_t)c->max_grid[i] || b[i] > (uint32_t)c->max_block[i]) {
            snprintf(why, sizeof why, "extent %c exceeds the device's grid %d or block %d",
                     "xyz"[i], c -> max_grid[i], c -> max_block[i]);
            return bad_launch(m, id, cfg, TC_ERR_LAUNCH, why);
        }
    }
    if (tc__cluster_misfit(cfg, why, sizeof why))
        return bad_launch(m, id, cfg, TC_ERR_LAUNCH, why);
    uint64_t threads = (uint64_t)b[0] * b[1] * b[2];
    if (threads > (uint64_t)m->max_threads[id]) {
        snprintf(why, sizeof why, "%llu threads per block; this kernel can run at most %d here",
                 (unsigned long long)threads, m->max_threads[id]);
        return bad_launch(m, id, cfg, TC_ERR_LAUNCH, why);
    }
    if (cfg->shared_bytes > 48 * 1024) {
        int room = c->max_shared_optin - m->static_shared[id];
        if ((int64_t)cfg->shared_bytes > room) {
            snprintf(why, sizeof why,
                     "the device allows at most %d bytes of dynamic shared memory "
                     "for this kernel",
                     room);
            return bad_launch(m, id, cfg, TC_ERR_LAUNCH, why);
        }
        TC_TRY(tc_cuFuncSetAttribute(m->funcs[id], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     (int)cfg->shared_bytes));
    }
    TC_TRY(tc__context_enter(c));
    tc_status st = tc__launch_function(m->funcs[id], cfg, args, m->overlap);
    if (st != TC_OK)
        return bad_launch(m, id, cfg, st, tc_status_string(st));
    return TC_OK;
}
