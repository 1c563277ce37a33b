/* Devices: cuInit once, enumeration, identity and attributes (no context needed). */
#include "runtime/device.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "runtime/error.h"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static tc_status init_status;
static char init_message[512];

static void init_driver(void)
{
    tc_status s = tc_cuInit(0);
    if (s == TC_OK) {
        int n = 0;
        s = tc_cuDeviceGetCount(&n);
        if (s == TC_OK && n == 0)
            s = TC_ERR_NO_DEVICE;
    }
    if (s == TC_ERR_LIBRARY_NOT_FOUND) {
        snprintf(init_message, sizeof init_message, "no NVIDIA driver: %s", tc_last_error_detail());
    } else if (s == TC_CUDA_ERROR_NO_DEVICE || s == TC_ERR_NO_DEVICE) {
        s = TC_ERR_NO_DEVICE;
        snprintf(init_message, sizeof init_message,
                 "the NVIDIA driver is installed but reports no CUDA device");
    } else if (s == TC_ERR_SYMBOL_NOT_FOUND || s == TC_ERR_DRIVER_TOO_OLD) {
        snprintf(init_message, sizeof init_message, "the NVIDIA driver is unusable: %s",
                 tc_last_error_detail());
    } else if (s != TC_OK) {
        snprintf(init_message, sizeof init_message, "the NVIDIA driver failed to start: %s (%s)",
                 tc_status_name(s), tc_status_string(s));
    }
    init_status = s;
}

tc_status tc_device_init(void)
{
    pthread_once(&init_once, init_driver);
    if (init_status != TC_OK)
        return tc_set_error(init_status, "tc_device_init", "%s", init_message);
    return TC_OK;
}

tc_status tc_device_driver_version(int *version)
{
    TC_TRY(tc_device_init());
    return tc_cuDriverGetVersion(version);
}

tc_status tc_device_count(int *count)
{
    TC_TRY(tc_device_init());
    return tc_cuDeviceGetCount(count);
}

static tc_status get_device(int ordinal, CUdevice *dev)
{
    int n = 0;
    TC_TRY(tc_device_count(&n));
    if (ordinal < 0 || ordinal >= n)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_device",
                            "no device %d (this machine has %d)", ordinal, n);
    return tc_cuDeviceGet(dev, ordinal);
}

static tc_status attr(CUdevice dev, CUdevice_attribute a, int *out)
{
    return tc_cuDeviceGetAttribute(out, a, dev);
}

tc_status tc_device_info_get(int ordinal, tc_device_info *out)
{
    CUdevice dev;
    memset(out, 0, sizeof *out);
    TC_TRY(get_device(ordinal, &dev));
    out->ordinal = ordinal;
    TC_TRY(tc_cuDeviceGetName(out->name, (int)sizeof out->name, dev));
    CUuuid uuid;
    TC_TRY(tc_cuDeviceGetUuid(&uuid, dev));
    memcpy(out->uuid, uuid.bytes, 16);
    const uint8_t *u = out->uuid;
    snprintf(out->uuid_str, sizeof out->uuid_str,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
             u[15]);
    TC_TRY(tc_cuDeviceGetPCIBusId(out->pci_bus_id, (int)sizeof out->pci_bus_id, dev));
    TC_TRY(tc_cuDeviceTotalMem(&out->total_bytes, dev));
    TC_TRY(attr(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &out->cc_major));
    TC_TRY(attr(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &out->cc_minor));
    TC_TRY(attr(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &out->sm_count));
    TC_TRY(attr(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &out->max_threads_per_block));
    TC_TRY(attr(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                &out->max_shared_per_block_optin));
    TC_TRY(attr(dev, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, &out->l2_bytes));
    TC_TRY(attr(dev, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, &out->memory_bus_bits));
    TC_TRY(attr(dev, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, &out->memory_clock_khz));
    return TC_OK;
}

size_t tc_device_attribute_max(void)
{
    return TC_ENUM_CUDEVICE_ATTRIBUTE_COUNT;
}

tc_status tc_device_attributes(int ordinal, tc_device_attribute *out, size_t cap, size_t *count)
{
    CUdevice dev;
    *count = 0;
    TC_TRY(get_device(ordinal, &dev));
    for (size_t i = 0; i < TC_ENUM_CUDEVICE_ATTRIBUTE_COUNT && *count < cap; i++) {
        const tc_enum_value *e = &tc_enum_CUdevice_attribute[i];
        int v = 0;
        tc_status s = attr(dev, (CUdevice_attribute)e->value, &v);
        if (s == TC_CUDA_ERROR_INVALID_VALUE)
            continue; /* newer than this driver */
        if (s != TC_OK)
            return s;
        out[*count].attr = (CUdevice_attribute)e->value;
        out[*count].name = e->name;
        out[*count].value = v;
        (*count)++;
    }
    tc_clear_error();
    return TC_OK;
}
