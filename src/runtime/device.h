/* Devices: driver start-up, enumeration, identity, memory and every attribute the driver
 * reports. Everything here works without creating a context. */
#ifndef TC_DEVICE_H
#define TC_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "tc_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What identifies a device and sizes work for it. */
typedef struct tc_device_info {
    int ordinal;
    char name[256];
    uint8_t uuid[16];
    char uuid_str[48];      /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    char pci_bus_id[32];    /* "0000:18:00.0" */
    size_t total_bytes;     /* device memory */
    int cc_major, cc_minor; /* compute capability */
    int sm_count;
    int max_threads_per_block;
    int max_shared_per_block_optin; /* bytes, with the opt-in attribute set */
    int l2_bytes;
    int memory_bus_bits;
    int memory_clock_khz;
} tc_device_info;

/* One attribute as the driver reported it. */
typedef struct tc_device_attribute {
    CUdevice_attribute attr;
    const char *name; /* "CU_DEVICE_ATTRIBUTE_..." */
    int value;
} tc_device_attribute;

/* Load the driver and run cuInit once; later calls return the first call's status. No driver
 * gives TC_ERR_LIBRARY_NOT_FOUND, a driver without GPUs TC_ERR_NO_DEVICE, each with a
 * one-sentence tc_last_error(). */
TC_API tc_status tc_device_init(void);

/* The driver's CUDA version as 1000 * major + 10 * minor (e.g. 13000). */
TC_API tc_status tc_device_driver_version(int *version);

/* Number of CUDA devices (at least 1 on success: no device is TC_ERR_NO_DEVICE). */
TC_API tc_status tc_device_count(int *count);

/* Fill `out` for device `ordinal`. */
TC_API tc_status tc_device_info_get(int ordinal, tc_device_info *out);

/* Query every attribute thincuda's headers name; those the driver does not know are left out.
 * Writes at most `cap` entries to `out` and the number found to `*count`. */
TC_API tc_status tc_device_attributes(int ordinal, tc_device_attribute *out, size_t cap,
                                      size_t *count);

/* Upper bound of the entries tc_device_attributes writes. */
TC_API size_t tc_device_attribute_max(void);

#ifdef __cplusplus
}
#endif

#endif /* TC_DEVICE_H */
