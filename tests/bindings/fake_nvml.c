/* Stand-ins for libnvidia-ml and libcublasLt in tests without a GPU: one GPU at PCI bus id
 * 0000:42:00.0 with fixed figures and two processes (this one and pid 4194305), and a cuBLASLt
 * that records the matrix layout it was asked for. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cublasLt.h>
#include <nvml.h>

#define EXPORT __attribute__((visibility("default")))
#define GIB (1ull << 30)

/* What the tests read back (dlsym "fake_nvml_stats_v"). */
typedef struct fake_nvml_stats {
    int inits;
    int last_sensor;     /* nvmlDeviceGetTemperature's sensorType */
    int last_error_type; /* nvmlDeviceGetTotalEccErrors' errorType and counterType */
    int last_counter_type;
    uint64_t layout_rows, layout_cols; /* cublasLtMatrixLayoutCreate's arguments */
    int64_t layout_ld;
    int layout_type;
} fake_nvml_stats;

EXPORT fake_nvml_stats fake_nvml_stats_v;

static int the_gpu;
#define GPU ((nvmlDevice_t)(void *)&the_gpu)

EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    fake_nvml_stats_v.inits++;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
    *n = 1;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *id, nvmlDevice_t *dev)
{
    if (!id || !dev)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strcasecmp(id, "0000:42:00.0") != 0)
        return NVML_ERROR_NOT_FOUND;
    *dev = GPU;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned int length)
{
    if (dev != GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(name, length, "Fake H100");
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t dev, nvmlTemperatureSensors_t s,
                                             unsigned int *temp)
{
    fake_nvml_stats_v.last_sensor = (int)s;
    if (dev != GPU || s != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    *temp = 61;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t dev, unsigned int *mw)
{
    *mw = 123456;
    return dev == GPU ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t dev, unsigned int *mw)
{
    (void)dev, (void)mw;
    return NVML_ERROR_NOT_SUPPORTED; /* a figure this GPU does not report */
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t *u)
{
    u->gpu = 87;
    u->memory = 42;
    return dev == GPU ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t dev, nvmlEnableState_t *cur,
                                         nvmlEnableState_t *pending)
{
    *cur = *pending = NVML_FEATURE_ENABLED;
    return dev == GPU ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t dev, nvmlMemoryErrorType_t type,
                                                nvmlEccCounterType_t counter, unsigned long long *n)
{
    fake_nvml_stats_v.last_error_type = (int)type;
    fake_nvml_stats_v.last_counter_type = (int)counter;
    *n = type == NVML_MEMORY_ERROR_TYPE_CORRECTED ? 3 : 0;
    return dev == GPU ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *m)
{
    m->total = 80 * GIB;
    m->used = 10 * GIB;
    m->free = 70 * GIB;
    return dev == GPU ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned int *count,
                                                            nvmlProcessInfo_t *infos)
{
    if (dev != GPU || !count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (*count < 2) {
        *count = 2;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memset(infos, 0, 2 * sizeof *infos);
    infos[0].pid = (unsigned)getpid();
    infos[0].usedGpuMemory = 5 * GIB;
    infos[1].pid = 4194305; /* above Linux's largest pid_max: never this process's */
    infos[1].usedGpuMemory = (unsigned long long)NVML_VALUE_NOT_AVAILABLE;
    *count = 2;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length)
{
    if (pid != 4194305)
        return NVML_ERROR_NO_PERMISSION;
    snprintf(name, length, "python3");
    return NVML_SUCCESS;
}

static int lt_handle;

EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    *h = (cublasLtHandle_t)(void *)&lt_handle;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    return h == (cublasLtHandle_t)(void *)&lt_handle ? CUBLAS_STATUS_SUCCESS
                                                     : CUBLAS_STATUS_NOT_INITIALIZED;
}

EXPORT size_t cublasLtGetVersion(void)
{
    return 130001;
}

static int layout;

EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type,
                                                 uint64_t rows, uint64_t cols, int64_t ld)
{
    fake_nvml_stats_v.layout_type = (int)type;
    fake_nvml_stats_v.layout_rows = rows;
    fake_nvml_stats_v.layout_cols = cols;
    fake_nvml_stats_v.layout_ld = ld;
    if (ld < (int64_t)rows)
        return CUBLAS_STATUS_INVALID_VALUE;
    *l = (cublasLtMatrixLayout_t)(void *)&layout;
    return CUBLAS_STATUS_SUCCESS;
}
