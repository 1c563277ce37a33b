/* A GPU's live figures through the generated NVML wrappers: NVML is initialised once, on the
 * first request, and each figure the GPU does not report is left at -1. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/telemetry.h"
#include "tc_nvml.h"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static tc_status init_status;
static char init_error[512]; /* why NVML could not start, for every later call */

static void init(void)
{
    init_status = tc_nvmlInit();
    if (init_status != TC_OK)
        snprintf(init_error, sizeof init_error, "%s", tc_last_error());
}

static tc_status open_device(const char *pci_bus_id, const char *func, nvmlDevice_t *dev)
{
    if (pci_bus_id == NULL)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, func, "pci_bus_id is NULL");
    pthread_once(&init_once, init);
    if (init_status != TC_OK)
        return tc_set_error(init_status, func, "NVML is unavailable: %s", init_error);
    tc_status st = tc_nvmlDeviceGetHandleByPciBusId(pci_bus_id, dev);
    if (st != TC_OK)
        return tc_set_error(st, func, "NVML knows no GPU at %s: %s", pci_bus_id,
                            tc_status_string(st));
    return TC_OK;
}

static void reset(tc_telemetry *t)
{
    memset(t, 0, sizeof *t);
    t->temperature_c = t->util_gpu_pct = t->util_mem_pct = t->ecc_enabled = t->n_procs = -1;
    t->power_w = t->power_limit_w = -1;
    t->ecc_corrected = t->ecc_uncorrected = t->mem_total_bytes = t->mem_used_bytes = -1;
}

/* NVML's "no value" for a process's memory (NVML_VALUE_NOT_AVAILABLE, -1 as unsigned). */
static long long proc_bytes(unsigned long long v)
{
    return v == (unsigned long long)NVML_VALUE_NOT_AVAILABLE ? -1 : (long long)v;
}

/* The processes with a compute context; n_procs stays -1 when NVML cannot list them. */
/* The device's memory in use and in all, as nvidia-smi counts it: version 2 of the query
 * leaves out what the driver reserves (about 0.5 GiB on an H100, which version 1 counts as
 * used); drivers without it answer version 1. */
static tc_status memory_of(nvmlDevice_t dev, long long *used, long long *total)
{
    nvmlMemory_v2_t m2 = { .version = nvmlMemory_v2 };
    if (tc_nvmlDeviceGetMemoryInfo_v2(dev, &m2) == TC_OK) {
        *used = (long long)m2.used;
        *total = (long long)m2.total;
        return TC_OK;
    }
    nvmlMemory_t m;
    TC_TRY(tc_nvmlDeviceGetMemoryInfo(dev, &m));
    *used = (long long)m.used;
    *total = (long long)m.total;
    return TC_OK;
}

static void read_procs(nvmlDevice_t dev, tc_telemetry *t)
{
    nvmlProcessInfo_t infos[64];
    unsigned n = sizeof infos / sizeof infos[0];
    if (tc_nvmlDeviceGetComputeRunningProcesses(dev, &n, infos) != TC_OK)
        return;
    t->n_procs = (int)n;
    for (unsigned i = 0; i < n && i < TC_TELEMETRY_MAX_PROCS; i++) {
        tc_telemetry_proc *p = &t->procs[i];
        p->pid = infos[i].pid;
        p->used_bytes = proc_bytes(infos[i].usedGpuMemory);
        if (tc_nvmlSystemGetProcessName(infos[i].pid, p->name, sizeof p->name) != TC_OK)
            p->name[0] = '\0';
    }
}

tc_status tc_telemetry_get(const char *pci_bus_id, tc_telemetry *out)
{
    nvmlDevice_t dev;
    if (out == NULL)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_telemetry_get", "out is NULL");
    reset(out);
    tc_status st = open_device(pci_bus_id, "tc_telemetry_get", &dev);
    if (st != TC_OK)
        return st;
    unsigned v = 0;
    if (tc_nvmlDeviceGetTemperature(dev, NVML_TEMPERATURE_GPU, &v) == TC_OK)
        out->temperature_c = (int)v;
    if (tc_nvmlDeviceGetPowerUsage(dev, &v) == TC_OK)
        out->power_w = v / 1000.0; /* NVML reports milliwatts */
    if (tc_nvmlDeviceGetEnforcedPowerLimit(dev, &v) == TC_OK)
        out->power_limit_w = v / 1000.0;
    nvmlUtilization_t u;
    if (tc_nvmlDeviceGetUtilizationRates(dev, &u) == TC_OK) {
        out->util_gpu_pct = (int)u.gpu;
        out->util_mem_pct = (int)u.memory;
    }
    nvmlEnableState_t cur, pending;
    if (tc_nvmlDeviceGetEccMode(dev, &cur, &pending) == TC_OK) {
        out->ecc_enabled = cur == NVML_FEATURE_ENABLED;
        unsigned long long n;
        if (out->ecc_enabled &&
            tc_nvmlDeviceGetTotalEccErrors(dev, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC,
                                           &n) == TC_OK)
            out->ecc_corrected = (long long)n;
        if (out->ecc_enabled &&
            tc_nvmlDeviceGetTotalEccErrors(dev, NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                           NVML_VOLATILE_ECC, &n) == TC_OK)
            out->ecc_uncorrected = (long long)n;
    }
    long long used, total;
    if (memory_of(dev, &used, &total) == TC_OK) {
        out->mem_total_bytes = total;
        out->mem_used_bytes = used;
    }
    read_procs(dev, out);
    tc_clear_error();
    return TC_OK;
}

tc_status tc_telemetry_memory(const char *pci_bus_id, long long *used_bytes, long long *total_bytes,
                              long long *process_bytes)
{
    nvmlDevice_t dev;
    if (!used_bytes || !total_bytes || !process_bytes)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_telemetry_memory",
                            "an out-pointer is NULL");
    *used_bytes = *total_bytes = *process_bytes = -1;
    TC_TRY(open_device(pci_bus_id, "tc_telemetry_memory", &dev));
    TC_TRY(memory_of(dev, used_bytes, total_bytes));
    nvmlProcessInfo_t infos[64];
    unsigned n = sizeof infos / sizeof infos[0];
    if (tc_nvmlDeviceGetComputeRunningProcesses(dev, &n, infos) == TC_OK) {
        unsigned self = (unsigned)getpid();
        *process_bytes = 0;
        for (unsigned i = 0; i < n; i++)
            if (infos[i].pid == self)
                *process_bytes = proc_bytes(infos[i].usedGpuMemory);
    }
    tc_clear_error();
    return TC_OK;
}
