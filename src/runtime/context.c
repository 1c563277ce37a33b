/* Contexts: a process-wide registry of retained primary contexts, one per device. */
#include "runtime/context.h"

#include <string.h>

#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/host.h"
#include "runtime/internal.h"

#define MAX_DEVICES 64

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static tc_context *registry[MAX_DEVICES];

tc_status tc__context_enter(tc_context *ctx)
{
    CUcontext cur = NULL;
    TC_TRY(tc_cuCtxGetCurrent(&cur));
    if (cur != ctx->cu)
        TC_TRY(tc_cuCtxSetCurrent(ctx->cu));
    return TC_OK;
}

static tc_status read_limits(tc_context *c)
{
    static const CUdevice_attribute block[3] = { CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
                                                 CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
                                                 CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z };
    static const CUdevice_attribute grid[3] = { CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
                                                CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
                                                CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z };
    TC_TRY(tc_cuDeviceGetAttribute(&c->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                   c->dev));
    TC_TRY(tc_cuDeviceGetAttribute(&c->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                   c->dev));
    TC_TRY(tc_cuDeviceGetAttribute(&c->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, c->dev));
    TC_TRY(tc_cuDeviceGetAttribute(&c->max_threads_per_block,
                                   CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, c->dev));
    TC_TRY(tc_cuDeviceGetAttribute(&c->max_shared_optin,
                                   CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, c->dev));
    TC_TRY(tc_cuDeviceGetAttribute(
        &c->max_shared_sm, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, c->dev));
    for (int i = 0; i < 3; i++) {
        TC_TRY(tc_cuDeviceGetAttribute(&c->max_block[i], block[i], c->dev));
        TC_TRY(tc_cuDeviceGetAttribute(&c->max_grid[i], grid[i], c->dev));
    }
    return TC_OK;
}

static tc_status create(int ordinal, tc_context **out)
{
    tc_status st;
    tc_context *c = tc_host_calloc(1, sizeof *c);
    if (c == NULL)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_context_retain", "out of host memory");
    c->ordinal = ordinal;
    pthread_mutex_init(&c->module_lock, NULL);
    TC_CHECK(st, tc_cuDeviceGet(&c->dev, ordinal));
    TC_CHECK(st, read_limits(c));
    TC_CHECK(st, tc_cuDevicePrimaryCtxRetain(&c->cu, c->dev));
    TC_DEBUG("device %d: primary context %p retained (sm_%d%d, %d SMs)", ordinal, (void *)c->cu,
             c->cc_major, c->cc_minor, c->sm_count);
    *out = c;
    return TC_OK;
fail:
    pthread_mutex_destroy(&c->module_lock);
    tc_host_free(c);
    return st;
}

tc_status tc_context_retain(int ordinal, tc_context **out)
{
    int n = 0;
    *out = NULL;
    TC_TRY(tc_device_count(&n));
    if (ordinal < 0 || ordinal >= n || ordinal >= MAX_DEVICES)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_context_retain",
                            "no device %d (this machine has %d)", ordinal, n);
    tc_status st = TC_OK;
    pthread_mutex_lock(&registry_lock);
    if (registry[ordinal] == NULL)
        st = create(ordinal, &registry[ordinal]);
    if (st == TC_OK) {
        registry[ordinal]->refs++;
        *out = registry[ordinal];
    }
    pthread_mutex_unlock(&registry_lock);
    if (st != TC_OK)
        return st;
    return tc_context_make_current(*out);
}

void tc_context_release(tc_context *ctx)
{
    if (ctx == NULL)
        return;
    pthread_mutex_lock(&registry_lock);
    bool last = --ctx->refs == 0;
    if (last)
        registry[ctx->ordinal] = NULL;
    pthread_mutex_unlock(&registry_lock);
    if (!last)
        return;
    tc__profile_forget_context(ctx);
    tc__module_unload(ctx);
    tc_status s = tc_cuDevicePrimaryCtxRelease(ctx->dev);
    if (s != TC_OK)
        TC_WARN("releasing device %d's primary context: %s", ctx->ordinal, tc_last_error());
    pthread_mutex_destroy(&ctx->module_lock);
    tc_host_free(ctx);
}

tc_status tc_context_make_current(tc_context *ctx)
{
    return tc__context_enter(ctx);
}

tc_status tc_context_synchronize(tc_context *ctx)
{
    TC_TRY(tc__context_enter(ctx));
    return tc_cuCtxSynchronize();
}

tc_status tc_context_mem_info(tc_context *ctx, size_t *free_bytes, size_t *total_bytes)
{
    TC_TRY(tc__context_enter(ctx));
    return tc_cuMemGetInfo(free_bytes, total_bytes);
}

int tc_context_ordinal(const tc_context *ctx)
{
    return ctx->ordinal;
}

CUcontext tc_context_handle(const tc_context *ctx)
{
    return ctx->cu;
}
