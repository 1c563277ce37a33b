/* A stand-in libcuda for runtime tests without a GPU: one sm_90 device, a primary context,
 * modules holding thincuda's kernels (from generated/tc_kernels.c) as the build splits them
 * (kernels/quant.cu's in an image of their own: a module that gave out a kernel of one side
 * does not have those of the other), and a cuLaunchKernel (and cuLaunchKernelEx, with its
 * attributes) that records what it was given.
 * Environment switches make it misbehave on purpose:
 *   FAKE_CUDA_SKEW=<kernel>   cuFuncGetParamInfo reports that kernel's last parameter 4 bytes
 *                             wider (a stale fatbin)
 *   FAKE_CUDA_DROP=<kernel>   the module lacks that kernel
 *   FAKE_CUDA_NO_BINARY=1     cuModuleLoadData finds no code for the GPU
 *   FAKE_CUDA_MEM=<bytes>     device memory size (default 1 GiB)
 *   FAKE_CUDA_BACKED=1        device memory is host memory (zeroed), so that copies, sets and
 *                             pinned host buffers work and an ops backend runs on the fake
 *                             (kernels still compute nothing); otherwise allocations are bare
 *                             handles and copies fail
 *   FAKE_CUDA_CLUSTERS=<n>:<c>,...  at most c clusters of n blocks resident at once at one
 *                             block an SM (c times the blocks an SM at more), as a GPU whose
 *                             GPCs leave some SMs out of clusters of n
 * Events time nothing: every pair is 0.25 ms apart. Streams are never being captured.
 * Occupancy counts the 2048 threads and the 228 KiB of shared memory of an SM (1 KiB of it
 * reserved for each block). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "fake_driver.h"
#include "tc_kernels.h"

#define EXPORT __attribute__((visibility("default")))

EXPORT fake_launch fake_launch_v;

static int primary_refs;
static int current_set; /* is the fake context current on this thread */
static size_t mem_total = (size_t)1 << 30, mem_used;

static CUresult f_init(unsigned int flags)
{
    const char *m = getenv("FAKE_CUDA_MEM");
    if (m)
        mem_total = (size_t)strtoull(m, NULL, 10);
    return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult f_driver_version(int *v)
{
    *v = 13000;
    return CUDA_SUCCESS;
}

static CUresult f_device_count(int *n)
{
    *n = 1;
    return CUDA_SUCCESS;
}

static CUresult f_device_get(CUdevice *d, int ordinal)
{
    if (ordinal != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = 0;
    return CUDA_SUCCESS;
}

static CUresult f_device_name(char *name, int len, CUdevice dev)
{
    (void)dev;
    snprintf(name, (size_t)len, "Fake GPU");
    return CUDA_SUCCESS;
}

static CUresult f_device_uuid(CUuuid *u, CUdevice dev)
{
    (void)dev;
    for (int i = 0; i < 16; i++)
        u->bytes[i] = (char)(0x10 + i);
    return CUDA_SUCCESS;
}

static CUresult f_pci_bus_id(char *id, int len, CUdevice dev)
{
    (void)dev;
    snprintf(id, (size_t)len, "0000:42:00.0");
    return CUDA_SUCCESS;
}

static CUresult f_total_mem(size_t *bytes, CUdevice dev)
{
    (void)dev;
    *bytes = mem_total;
    return CUDA_SUCCESS;
}

static CUresult f_attribute(int *v, CUdevice_attribute a, CUdevice dev)
{
    (void)dev;
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = 232448; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = FAKE_SM_SHARED; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *v = 2048; break;
    default:
        /* An old driver: it knows the first 120 attributes only. */
        if ((int)a > 120)
            return CUDA_ERROR_INVALID_VALUE;
        *v = (int)a * 3;
    }
    return CUDA_SUCCESS;
}

static CUresult f_primary_retain(CUcontext *c, CUdevice dev)
{
    (void)dev;
    primary_refs++;
    *c = (CUcontext)(uintptr_t)0xC0;
    return CUDA_SUCCESS;
}

static CUresult f_primary_release(CUdevice dev)
{
    (void)dev;
    return primary_refs-- > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

static CUresult f_ctx_get_current(CUcontext *c)
{
    *c = current_set ? (CUcontext)(uintptr_t)0xC0 : NULL;
    return CUDA_SUCCESS;
}

static CUresult f_ctx_set_current(CUcontext c)
{
    current_set = c != NULL;
    return CUDA_SUCCESS;
}

static CUresult need_ctx(void)
{
    return current_set ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

static CUresult f_priority_range(int *least, int *greatest)
{
    *least = 0;
    *greatest = -5;
    return need_ctx();
}

static uintptr_t next_handle = 0x5000;

static CUresult f_stream_create(CUstream *s, unsigned flags, int priority)
{
    (void)flags, (void)priority;
    *s = (CUstream)(next_handle += 16);
    return need_ctx();
}

static CUresult f_handle_destroy(void *h)
{
    return h ? need_ctx() : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult f_event_create(CUevent *e, unsigned flags)
{
    (void)flags;
    *e = (CUevent)(next_handle += 16);
    return need_ctx();
}

static CUresult f_event_record(CUevent e, CUstream s)
{
    (void)e, (void)s;
    return need_ctx();
}

static CUresult f_event_synchronize(CUevent e)
{
    (void)e;
    return CUDA_SUCCESS;
}

static CUresult f_event_elapsed(float *ms, CUevent start, CUevent end)
{
    if (!start || !end)
        return CUDA_ERROR_INVALID_HANDLE;
    *ms = 0.25f;
    return CUDA_SUCCESS;
}

static CUresult f_is_capturing(CUstream s, CUstreamCaptureStatus *st)
{
    (void)s;
    *st = CU_STREAM_CAPTURE_STATUS_NONE;
    return need_ctx();
}

static CUresult f_stream_wait_event(CUstream s, CUevent e, unsigned flags)
{
    (void)s, (void)e, (void)flags;
    return need_ctx();
}

/* Each module handed out, and which side of the build's split it has given kernels of (0
 * none yet, 1 kernels/quant.cu's, 2 the others'). */
static unsigned n_modules;
static unsigned char module_side[4096];

static CUresult f_module_load(CUmodule *m, const void *image)
{
    if (image == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    const char *nb = getenv("FAKE_CUDA_NO_BINARY");
    if (nb && *nb == '1')
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    *m = (CUmodule)(uintptr_t)(0xA0 + n_modules++);
    return need_ctx();
}

static CUresult f_module_unload(CUmodule m)
{
    return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* A CUfunction is 1 + the kernel's index in tc_kernel_table. */
static int kernel_of(CUfunction f)
{
    intptr_t i = (intptr_t)f - 1;
    return i >= 0 && i < TC_KERNEL_COUNT ? (int)i : -1;
}

static CUresult f_module_get_function(CUfunction *f, CUmodule m, const char *name)
{
    const char *drop = getenv("FAKE_CUDA_DROP");
    if (drop && strcmp(drop, name) == 0)
        return CUDA_ERROR_NOT_FOUND;
    uintptr_t mi = (uintptr_t)m - 0xA0;
    for (int i = 0; i < TC_KERNEL_COUNT; i++) {
        if (strcmp(tc_kernel_table[i].name, name) == 0) {
            unsigned char side = strcmp(tc_kernel_table[i].file, "kernels/quant.cu") == 0 ? 1 : 2;
            if (mi < sizeof module_side) {
                if (module_side[mi] && module_side[mi] != side)
                    return CUDA_ERROR_NOT_FOUND;
                module_side[mi] = side;
            }
            *f = (CUfunction)(intptr_t)(i + 1);
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_NOT_FOUND;
}

static size_t param_size(int k, unsigned i)
{
    const char *skew = getenv("FAKE_CUDA_SKEW");
    size_t s = tc_kernel_table[k].param_sizes[i];
    if (skew && strcmp(skew, tc_kernel_table[k].name) == 0 && i + 1 == tc_kernel_table[k].nparams)
        s += 4;
    return s;
}

static CUresult f_param_info(CUfunction f, size_t index, size_t *offset, size_t *size)
{
    int k = kernel_of(f);
    if (k < 0)
        return CUDA_ERROR_INVALID_HANDLE;
    if (index >= tc_kernel_table[k].nparams)
        return CUDA_ERROR_INVALID_VALUE;
    size_t off = 0;
    for (unsigned i = 0; i <= index; i++) {
        size_t s = param_size(k, i);
        off = (off + s - 1) / s * s;
        if (i < index)
            off += s;
    }
    *offset = off;
    *size = param_size(k, (unsigned)index);
    return CUDA_SUCCESS;
}

static CUresult f_func_get_attribute(int *v, CUfunction_attribute a, CUfunction f)
{
    if (kernel_of(f) < 0)
        return CUDA_ERROR_INVALID_HANDLE;
    switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *v = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *v = 49152; break;
    default: *v = 0;
    }
    return CUDA_SUCCESS;
}

static CUresult f_func_set_attribute(CUfunction f, CUfunction_attribute a, int v)
{
    if (kernel_of(f) >= 0 && a == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT && v >= -1 &&
        v <= 100) {
        fake_launch_v.last_carveout = v;
        snprintf(fake_launch_v.carveout_kernel, sizeof fake_launch_v.carveout_kernel, "%s",
                 tc_kernel_table[kernel_of(f)].name);
        return CUDA_SUCCESS;
    }
    if (kernel_of(f) < 0 || a != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES || v > 232448)
        return CUDA_ERROR_INVALID_VALUE;
    fake_launch_v.set_attribute_calls++;
    fake_launch_v.last_dyn_shared = v;
    return CUDA_SUCCESS;
}

static CUresult f_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned by, unsigned bz, unsigned shared, CUstream s, void **params,
                         void **extra)
{
    int k = kernel_of(f);
    if (k < 0 || extra != NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (need_ctx() != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_CONTEXT;
    fake_launch_v.count++;
    fake_launch_v.ex = fake_launch_v.overlap = 0;
    memset(fake_launch_v.cluster, 0, sizeof fake_launch_v.cluster);
    snprintf(fake_launch_v.kernel, sizeof fake_launch_v.kernel, "%s", tc_kernel_table[k].name);
    unsigned g[3] = { gx, gy, gz }, b[3] = { bx, by, bz };
    memcpy(fake_launch_v.grid, g, sizeof g);
    memcpy(fake_launch_v.block, b, sizeof b);
    fake_launch_v.shared = shared;
    fake_launch_v.stream = s;
    memset(fake_launch_v.params, 0, sizeof fake_launch_v.params);
    size_t off = 0;
    for (unsigned i = 0; i < tc_kernel_table[k].nparams; i++) {
        size_t sz = tc_kernel_table[k].param_sizes[i];
        off = (off + sz - 1) / sz * sz;
        memcpy(fake_launch_v.params + off, params[i], sz);
        off += sz;
    }
    fake_launch_v.params_bytes = off;
    return CUDA_SUCCESS;
}

static CUresult f_launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    CUresult r = f_launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
                          c->blockDimZ, c->sharedMemBytes, c->hStream, params, extra);
    if (r != CUDA_SUCCESS)
        return r;
    fake_launch_v.ex = 1;
    for (unsigned i = 0; i < c->numAttrs; i++) {
        const CUlaunchAttribute *a = &c->attrs[i];
        if (a->id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
            fake_launch_v.overlap = a->value.programmaticStreamSerializationAllowed;
        else if (a->id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
            fake_launch_v.cluster[0] = a->value.clusterDim.x;
            fake_launch_v.cluster[1] = a->value.clusterDim.y;
            fake_launch_v.cluster[2] = a->value.clusterDim.z;
        } else
            return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* Blocks of `threads` threads and `shared` bytes of dynamic shared memory resident on an SM. */
static int per_sm(unsigned threads, size_t shared)
{
    int by_threads = (int)(2048 / threads), by_shared = (int)(FAKE_SM_SHARED / (shared + 1024));
    int n = by_threads < by_shared ? by_threads : by_shared;
    return n < 32 ? n : 32;
}

/* Clusters resident at once: 8 GPCs of 16 SMs, a cluster within a GPC (or FAKE_CUDA_CLUSTERS's
 * count for that size). */
static CUresult f_max_clusters(int *n, CUfunction f, const CUlaunchConfig *c)
{
    if (kernel_of(f) < 0 || c->numAttrs != 1 ||
        c->attrs[0].id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned threads = c->blockDimX * c->blockDimY * c->blockDimZ,
             blocks = c->attrs[0].value.clusterDim.x * c->attrs[0].value.clusterDim.y *
                      c->attrs[0].value.clusterDim.z;
    int sm = per_sm(threads, c->sharedMemBytes);
    *n = (int)(8 * (16 * sm / blocks));
    const char *caps = getenv("FAKE_CUDA_CLUSTERS");
    for (const char *at = caps; at && *at;) {
        char *end;
        unsigned long size = strtoul(at, &end, 10), count;
        if (*end != ':')
            break;
        count = strtoul(end + 1, &end, 10);
        if (size == blocks)
            *n = (int)count * sm;
        at = *end == ',' ? end + 1 : "";
    }
    return CUDA_SUCCESS;
}

static CUresult f_occupancy(int *min_grid, int *block, CUfunction f, CUoccupancyB2DSize fn,
                            size_t shared, int limit)
{
    (void)fn, (void)shared;
    if (kernel_of(f) < 0)
        return CUDA_ERROR_INVALID_HANDLE;
    *block = limit > 0 && limit < 768 ? limit : 768;
    *min_grid = 132 * 2;
    return CUDA_SUCCESS;
}

/* Resident blocks per multiprocessor. */
static CUresult f_blocks_per_sm(int *blocks, CUfunction f, int block, size_t shared)
{
    if (kernel_of(f) < 0 || block <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    *blocks = per_sm((unsigned)block, shared);
    return CUDA_SUCCESS;
}

static bool backed(void)
{
    const char *b = getenv("FAKE_CUDA_BACKED");
    return b && b[0] == '1';
}

static CUresult f_mem_alloc(CUdeviceptr *p, size_t bytes)
{
    if (need_ctx() != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (bytes > mem_total - mem_used)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (backed()) {
        void *m = calloc(1, bytes ? bytes : 1);
        if (!m)
            return CUDA_ERROR_OUT_OF_MEMORY;
        *p = (CUdeviceptr)(uintptr_t)m;
    } else
        *p = 0x7f0000000000ull + (next_handle += 0x100000);
    mem_used += bytes;
    return CUDA_SUCCESS;
}

static CUresult f_mem_free(CUdeviceptr p)
{
    if (backed())
        free((void *)(uintptr_t)p);
    return need_ctx();
}

static CUresult f_host_alloc(void **p, size_t bytes, unsigned flags)
{
    (void)flags;
    if (!backed())
        return CUDA_ERROR_NOT_SUPPORTED;
    *p = calloc(1, bytes ? bytes : 1);
    return *p ? need_ctx() : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult f_host_free(void *p)
{
    free(p);
    return need_ctx();
}

static CUresult f_copy(void *to, const void *from, size_t bytes)
{
    if (!backed())
        return CUDA_ERROR_NOT_SUPPORTED;
    memmove(to, from, bytes);
    return need_ctx();
}
static CUresult f_copy_htod(CUdeviceptr to, const void *from, size_t bytes, CUstream s)
{
    (void)s;
    return f_copy((void *)(uintptr_t)to, from, bytes);
}
static CUresult f_copy_dtoh(void *to, CUdeviceptr from, size_t bytes, CUstream s)
{
    (void)s;
    return f_copy(to, (const void *)(uintptr_t)from, bytes);
}
static CUresult f_copy_dtod(CUdeviceptr to, CUdeviceptr from, size_t bytes, CUstream s)
{
    (void)s;
    return f_copy((void *)(uintptr_t)to, (const void *)(uintptr_t)from, bytes);
}
static CUresult f_set8(CUdeviceptr to, unsigned char v, size_t n, CUstream s)
{
    (void)s;
    if (!backed())
        return CUDA_ERROR_NOT_SUPPORTED;
    memset((void *)(uintptr_t)to, v, n);
    return need_ctx();
}

/* Streams, events and the context finish at once: nothing runs. */
static CUresult f_done(void *h)
{
    (void)h;
    return need_ctx();
}
static CUresult f_ctx_synchronize(void)
{
    return need_ctx();
}

static CUresult f_mem_info(size_t *free_b, size_t *total_b)
{
    *free_b = mem_total - mem_used;
    *total_b = mem_total;
    return need_ctx();
}

#define FN(name, f)               \
    {                             \
        name, (void (*)(void))(f) \
    }
static const struct {
    const char *name;
    void (*fn)(void);
} table[] = {
    FN("cuInit", f_init),
    FN("cuDriverGetVersion", f_driver_version),
    FN("cuDeviceGetCount", f_device_count),
    FN("cuDeviceGet", f_device_get),
    FN("cuDeviceGetName", f_device_name),
    FN("cuDeviceGetUuid", f_device_uuid),
    FN("cuDeviceGetPCIBusId", f_pci_bus_id),
    FN("cuDeviceTotalMem", f_total_mem),
    FN("cuDeviceGetAttribute", f_attribute),
    FN("cuDevicePrimaryCtxRetain", f_primary_retain),
    FN("cuDevicePrimaryCtxRelease", f_primary_release),
    FN("cuCtxGetCurrent", f_ctx_get_current),
    FN("cuCtxSetCurrent", f_ctx_set_current),
    FN("cuCtxGetStreamPriorityRange", f_priority_range),
    FN("cuStreamCreateWithPriority", f_stream_create),
    FN("cuStreamDestroy", f_handle_destroy),
    FN("cuEventCreate", f_event_create),
    FN("cuEventDestroy", f_handle_destroy),
    FN("cuEventRecord", f_event_record),
    FN("cuEventSynchronize", f_event_synchronize),
    FN("cuEventElapsedTime", f_event_elapsed),
    FN("cuStreamIsCapturing", f_is_capturing),
    FN("cuStreamWaitEvent", f_stream_wait_event),
    FN("cuModuleLoadData", f_module_load),
    FN("cuModuleUnload", f_module_unload),
    FN("cuModuleGetFunction", f_module_get_function),
    FN("cuFuncGetParamInfo", f_param_info),
    FN("cuFuncGetAttribute", f_func_get_attribute),
    FN("cuFuncSetAttribute", f_func_set_attribute),
    FN("cuLaunchKernel", f_launch),
    FN("cuLaunchKernelEx", f_launch_ex),
    FN("cuOccupancyMaxActiveClusters", f_max_clusters),
    FN("cuOccupancyMaxPotentialBlockSize", f_occupancy),
    FN("cuOccupancyMaxActiveBlocksPerMultiprocessor", f_blocks_per_sm),
    FN("cuMemAlloc", f_mem_alloc),
    FN("cuMemFree", f_mem_free),
    FN("cuMemHostAlloc", f_host_alloc),
    FN("cuMemFreeHost", f_host_free),
    FN("cuMemcpyHtoDAsync", f_copy_htod),
    FN("cuMemcpyDtoHAsync", f_copy_dtoh),
    FN("cuMemcpyDtoDAsync", f_copy_dtod),
    FN("cuMemsetD8Async", f_set8),
    FN("cuStreamSynchronize", f_done),
    FN("cuStreamQuery", f_done),
    FN("cuEventQuery", f_done),
    FN("cuCtxSynchronize", f_ctx_synchronize),
    FN("cuMemGetInfo", f_mem_info),
};

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status)
{
    (void)version, (void)flags;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(table[i].name, symbol) == 0) {
            memcpy(pfn, &table[i].fn, sizeof table[i].fn);
            if (status)
                *status = CU_GET_PROC_ADDRESS_SUCCESS;
            return CUDA_SUCCESS;
        }
    }
    if (status)
        *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    *pfn = NULL;
    return CUDA_ERROR_NOT_FOUND;
}
