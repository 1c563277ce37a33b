/* Loading the embedded fatbins into a context, once, and checking each kernel against the
 * launcher the generator wrote for it. */
#include "runtime/module.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/internal.h"

/* Written by the build (kernels/meson.build, tools/build/embed.py) from nvcc's fatbins: the
 * parts' images and sizes, the kernels/ files each holds (comma-separated; empty: every file
 * no other part names), and all parts' targets in one line. */
extern const int tc__fatbin_count;
extern const unsigned char *const tc__fatbin_images[];
extern const size_t tc__fatbin_sizes[];
extern const char *const tc__fatbin_part_files[];
extern const char tc__fatbin_targets[];

size_t tc_module_fatbin_size(void)
{
    size_t n = 0;
    for (int p = 0; p < tc__fatbin_count; p++)
        n += tc__fatbin_sizes[p];
    return n;
}

/* The part holding kernel file `file`: the one that names it, else the one that names none. */
static int part_of(const char *file)
{
    int rest = 0;
    size_t len = strlen(file);
    for (int p = 0; p < tc__fatbin_count; p++) {
        const char *f = tc__fatbin_part_files[p];
        if (!*f)
            rest = p;
        for (const char *at = f; *at;) {
            const char *end = strchr(at, ',');
            size_t n = end ? (size_t)(end - at) : strlen(at);
            if (n == len && strncmp(at, file, n) == 0)
                return p;
            at += n + (end != NULL);
        }
    }
    return rest;
}

const char *tc_module_targets(void)
{
    return tc__fatbin_targets;
}

/* Record why loading failed (reported by every later load or launch) and return st. */
__attribute__((format(printf, 3, 4))) static tc_status fail_load(tc_context *c, tc_status st,
                                                                 const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->module_error, sizeof c->module_error, fmt, ap);
    va_end(ap);
    c->module_status = st;
    return st;
}

tc_status tc__param_sizes(CUfunction f, size_t *sizes, unsigned cap, unsigned *count)
{
    unsigned n = 0;
    for (;; n++) {
        size_t off = 0, size = 0;
        tc_status s = tc_cuFuncGetParamInfo(f, n, &off, &size);
        if (s == TC_CUDA_ERROR_INVALID_VALUE)
            break; /* past the last parameter */
        if (s != TC_OK)
            return s;
        if (n < cap)
            sizes[n] = size;
    }
    tc_clear_error();
    *count = n;
    return TC_OK;
}

/* Compare the fatbin's parameter list of kernel i with the generated one. */
static tc_status check_params(tc_context *c, int i)
{
    const tc_kernel_info *k = &tc_kernel_table[i];
    size_t have[TC__PARAMS_MAX];
    unsigned n = 0;
    char why[160] = "";
    TC_TRY(tc__param_sizes(c->funcs[i], have, TC__PARAMS_MAX, &n));
    for (unsigned j = 0; j < n && j < k->nparams && j < TC__PARAMS_MAX && why[0] == '\0'; j++)
        if (have[j] != k->param_sizes[j])
            snprintf(why, sizeof why,
                     "parameter %u (%s) is %zu bytes in the fatbin, %u in the "
                     "launcher",
                     j + 1, k->param_names[j], have[j], (unsigned)k->param_sizes[j]);
    if (n != k->nparams && why[0] == '\0')
        snprintf(why, sizeof why, "the fatbin's kernel takes %u parameters, the launcher %u", n,
                 k->nparams);
    if (why[0] == '\0')
        return TC_OK;
    return fail_load(c, TC_ERR_KERNEL_MISMATCH,
                     "kernel %s (%s:%u): %s; the fatbin and generated/tc_kernels.h come from "
                     "different kernels/ sources: run tools/regen and rebuild",
                     k->name, k->file, k->line, why);
}

static tc_status load(tc_context *c)
{
    char arch[16];
    snprintf(arch, sizeof arch, "sm_%d%d", c->cc_major, c->cc_minor);
    if (tc_module_fatbin_size() == 0)
        return fail_load(c, TC_ERR_NO_KERNEL_IMAGE,
                         "thincuda was built without nvcc, so it has no kernels (%s)", arch);
    TC_TRY(tc__context_enter(c));
    tc_status st = TC_OK;
    for (int p = 0; p < tc__fatbin_count; p++) {
        st = tc_cuModuleLoadData(&c->modules[p], tc__fatbin_images[p]);
        if (st == TC_CUDA_ERROR_NO_BINARY_FOR_GPU || st == TC_CUDA_ERROR_INVALID_PTX ||
            st == TC_CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
            return fail_load(
                c, TC_ERR_NO_KERNEL_IMAGE,
                "the embedded kernels have no code this GPU (%s) can run: built for %s", arch,
                tc__fatbin_targets);
        if (st != TC_OK)
            return fail_load(c, st, "cuModuleLoadData: %s", tc_last_error());
    }
    bool param_info = tc_available("cuFuncGetParamInfo");
    for (int i = 0; i < TC_KERNEL_COUNT; i++) {
        const tc_kernel_info *k = &tc_kernel_table[i];
        st = tc_cuModuleGetFunction(&c->funcs[i], c->modules[part_of(k->file)], k->name);
        if (st == TC_CUDA_ERROR_NOT_FOUND)
            return fail_load(c, TC_ERR_KERNEL_MISMATCH,
                             "kernel %s is missing from the embedded fatbin (%s): run tools/regen "
                             "and rebuild",
                             k->name, k->file);
        if (st == TC_OK && param_info)
            st = check_params(c, i);
        if (st == TC_OK)
            st = tc_cuFuncGetAttribute(&c->func_max_threads[i],
                                       CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, c->funcs[i]);
        if (st == TC_OK)
            st = tc_cuFuncGetAttribute(&c->func_static_shared[i],
                                       CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, c->funcs[i]);
        int dyn = 0;
        if (st == TC_OK)
            st = tc_cuFuncGetAttribute(&dyn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                       c->funcs[i]);
        if (st == TC_ERR_KERNEL_MISMATCH)
            return st; /* check_params recorded why */
        if (st != TC_OK)
            return fail_load(c, st, "%s: %s", k->name, tc_last_error());
        atomic_store(&c->func_dyn_shared[i], dyn);
    }
    TC_DEBUG("device %d: %d kernels loaded from %d fatbins of %zu bytes (%s)%s", c->ordinal,
             TC_KERNEL_COUNT, tc__fatbin_count, tc_module_fatbin_size(), tc__fatbin_targets,
             param_info ? ", parameters checked" : "; driver lacks cuFuncGetParamInfo");
    return TC_OK;
}

tc_status tc__module_ensure(tc_context *c)
{
    int state = atomic_load_explicit(&c->module_state, memory_order_acquire);
    if (state == TC__MODULE_NONE) {
        pthread_mutex_lock(&c->module_lock);
        state = atomic_load(&c->module_state);
        if (state == TC__MODULE_NONE) {
            tc_status st = load(c);
            for (int p = 0; st != TC_OK && p < TC__FATBIN_PARTS; p++)
                if (c->modules[p] != NULL) {
                    tc_cuModuleUnload(c->modules[p]);
                    c->modules[p] = NULL;
                }
            state = st == TC_OK ? TC__MODULE_READY : TC__MODULE_FAILED;
            if (st != TC_OK && c->module_status == TC_OK)
                c->module_status = st;
            atomic_store_explicit(&c->module_state, state, memory_order_release);
        }
        pthread_mutex_unlock(&c->module_lock);
    }
    if (state == TC__MODULE_READY)
        return TC_OK;
    return tc_set_error(c->module_status, "tc_module_load", "%s", c->module_error);
}

tc_status tc_module_load(tc_context *ctx)
{
    return tc__module_ensure(ctx);
}

tc_status tc_module_function(tc_context *ctx, tc_kernel_id id, CUfunction *out)
{
    *out = NULL;
    if ((unsigned)id >= (unsigned)TC_KERNEL_COUNT)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_module_function", "no kernel id %d",
                            (int)id);
    TC_TRY(tc__module_ensure(ctx));
    *out = ctx->funcs[id];
    return TC_OK;
}

void tc__module_unload(tc_context *c)
{
    bool any = false;
    for (int p = 0; p < TC__FATBIN_PARTS; p++)
        any |= c->modules[p] != NULL;
    if (!any)
        return;
    bool entered = tc__context_enter(c) == TC_OK;
    for (int p = 0; p < TC__FATBIN_PARTS; p++) {
        if (c->modules[p] != NULL && (!entered || tc_cuModuleUnload(c->modules[p]) != TC_OK))
            TC_WARN("unloading device %d's kernels: %s", c->ordinal, tc_last_error());
        c->modules[p] = NULL;
    }
    atomic_store(&c->module_state, TC__MODULE_NONE);
}
