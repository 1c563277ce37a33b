/* A GPU's live figures from NVML (temperature, power, utilisation, ECC, memory, processes).
 * NVML comes with the driver (libnvidia-ml.so.1) and is loaded on first use; without it every
 * call fails with a status and a sentence, and callers carry on without the figures. */
#ifndef TC_RUNTIME_TELEMETRY_H
#define TC_RUNTIME_TELEMETRY_H

#include <stdbool.h>
#include <stddef.h>

#include "tc_bindings.h"

#define TC_TELEMETRY_MAX_PROCS 16

/* One process with a compute context on the GPU. */
typedef struct tc_telemetry_proc {
    unsigned pid;
    long long used_bytes; /* device memory; -1 when NVML cannot say (no permission) */
    char name[64];        /* the executable's name, "" when NVML cannot say */
} tc_telemetry_proc;

/* What NVML reported for one GPU. Each figure it does not report on this GPU (not supported,
 * no permission) is -1. */
typedef struct tc_telemetry {
    int temperature_c;       /* GPU core */
    double power_w;          /* drawn now */
    double power_limit_w;    /* enforced limit */
    int util_gpu_pct;        /* time a kernel ran, last sample period */
    int util_mem_pct;        /* time device memory was read or written */
    int ecc_enabled;         /* 1 on, 0 off, -1 not supported */
    long long ecc_corrected; /* volatile (since boot) totals */
    long long ecc_uncorrected;
    long long mem_total_bytes; /* device memory as NVML counts it */
    long long mem_used_bytes;
    int n_procs; /* processes with a compute context (all, even beyond procs) */
    tc_telemetry_proc procs[TC_TELEMETRY_MAX_PROCS];
} tc_telemetry;

/* Fill *out with the figures of the GPU at `pci_bus_id` ("0000:18:00.0", as tc_device_info
 * has it; CUDA and NVML number devices differently). Initialises NVML on the first call; no
 * NVML gives TC_ERR_LIBRARY_NOT_FOUND, an unknown GPU an NVML status. */
TC_API tc_status tc_telemetry_get(const char *pci_bus_id, tc_telemetry *out);

/* Device memory only, cheap enough for every /health request: bytes used and total on the
 * GPU, and those this process holds (-1 when NVML cannot list processes). */
TC_API tc_status tc_telemetry_memory(const char *pci_bus_id, long long *used_bytes,
                                     long long *total_bytes, long long *process_bytes);

#endif /* TC_RUNTIME_TELEMETRY_H */
