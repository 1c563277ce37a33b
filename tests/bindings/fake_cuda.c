/* A stand-in libcuda for tests without a GPU: exports cuGetProcAddress_v2 and a handful of
 * driver functions whose behaviour the tests know, and counts how it is asked. */
#include <stdio.h>
#include <string.h>

#include <cuda.h>

typedef struct fake_cuda_stats {
    int lookups; /* cuGetProcAddress calls */
    char last_symbol[64];
    int last_version;
    unsigned long long last_flags;
    int ptds_calls;   /* cuMemcpyHtoD per-thread variant calls */
    int legacy_calls; /* cuMemcpyHtoD legacy variant calls */
} fake_cuda_stats;

__attribute__((visibility("default"))) fake_cuda_stats fake_cuda_stats_v;

static CUresult f_init(unsigned int flags)
{
    return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult f_driver_version(int *v)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    *v = 12040;
    return CUDA_SUCCESS;
}

static CUresult f_device_count(int *n)
{
    *n = 2;
    return CUDA_SUCCESS;
}

static CUresult f_device_name(char *name, int len, CUdevice dev)
{
    if (dev < 0 || dev > 1)
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "Fake GPU %d", dev);
    return CUDA_SUCCESS;
}

static CUresult f_mem_alloc(CUdeviceptr *p, size_t bytes)
{
    if (bytes > ((size_t)1 << 30))
        return CUDA_ERROR_OUT_OF_MEMORY;
    *p = 0x7f0000001000ull + bytes;
    return CUDA_SUCCESS;
}

static CUresult f_htod_legacy(CUdeviceptr dst, const void *src, size_t n)
{
    (void)dst, (void)src, (void)n;
    fake_cuda_stats_v.legacy_calls++;
    return CUDA_SUCCESS;
}

static CUresult f_htod_ptds(CUdeviceptr dst, const void *src, size_t n)
{
    (void)dst, (void)src, (void)n;
    fake_cuda_stats_v.ptds_calls++;
    return CUDA_SUCCESS;
}

static CUresult f_ctx_get_device_v1(CUdevice *d)
{
    *d = 0;
    return CUDA_SUCCESS;
}

/* Hands back a function the way the driver does: its address in a void *. */
#define RETURN_FN(f)                            \
    do {                                        \
        void (*g_)(void) = (void (*)(void))(f); \
        memcpy(pfn, &g_, sizeof g_);            \
        return CUDA_SUCCESS;                    \
    } while (0)

/* The driver's entry point: symbol, ABI version and per-thread flag select an implementation. */
__attribute__((visibility("default"))) CUresult
cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                    CUdriverProcAddressQueryResult *status)
{
    fake_cuda_stats_v.lookups++;
    snprintf(fake_cuda_stats_v.last_symbol, sizeof fake_cuda_stats_v.last_symbol, "%s", symbol);
    fake_cuda_stats_v.last_version = version;
    fake_cuda_stats_v.last_flags = flags;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    if (!strcmp(symbol, "cuInit"))
        RETURN_FN(f_init);
    if (!strcmp(symbol, "cuDriverGetVersion"))
        RETURN_FN(f_driver_version);
    if (!strcmp(symbol, "cuDeviceGetCount"))
        RETURN_FN(f_device_count);
    if (!strcmp(symbol, "cuDeviceGetName"))
        RETURN_FN(f_device_name);
    if (!strcmp(symbol, "cuMemAlloc") && version >= 3020)
        RETURN_FN(f_mem_alloc);
    if (!strcmp(symbol, "cuMemcpyHtoD")) {
        if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
            RETURN_FN(f_htod_ptds);
        RETURN_FN(f_htod_legacy);
    }
    if (!strcmp(symbol, "cuCtxGetDevice")) {
        /* A 12.x driver: it has the v1 ABI but not cuCtxGetDevice_v2 (13.0). */
        if (version < 13000)
            RETURN_FN(f_ctx_get_device_v1);
        if (status)
            *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
        *pfn = NULL;
        return CUDA_ERROR_NOT_FOUND;
    }
    if (status)
        *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    *pfn = NULL;
    return CUDA_ERROR_NOT_FOUND;
}
