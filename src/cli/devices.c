/* `thincuda devices`: a table (or JSON) of every CUDA device and its attributes, with NVML's
 * live figures (temperature, power, utilisation, ECC, processes) when NVML loads. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "runtime/runtime.h"

#define GIB 1073741824.0

/* NVML's figures as table rows; "-" for each one the GPU does not report. */
static void print_nvml(const tc_telemetry *t, tc_status st)
{
    if (st != TC_OK) {
        printf("  %-28s %s\n", "nvml", tc_last_error_detail());
        return;
    }
    char v[160];
    if (t->temperature_c >= 0)
        printf("  %-28s %d C\n", "temperature", t->temperature_c);
    else
        printf("  %-28s -\n", "temperature");
    int k = snprintf(v, sizeof v, "-");
    if (t->power_w >= 0)
        k = snprintf(v, sizeof v, "%.1f W", t->power_w);
    if (t->power_limit_w >= 0 && k > 0 && (size_t)k < sizeof v)
        snprintf(v + k, sizeof v - (size_t)k, " (limit %.1f W)", t->power_limit_w);
    printf("  %-28s %s\n", "power", v);
    if (t->util_gpu_pct >= 0)
        printf("  %-28s gpu %d%%, memory %d%%\n", "utilisation", t->util_gpu_pct, t->util_mem_pct);
    else
        printf("  %-28s -\n", "utilisation");
    if (t->ecc_enabled == 1)
        printf("  %-28s on: %lld corrected, %lld uncorrected since boot\n", "ecc", t->ecc_corrected,
               t->ecc_uncorrected);
    else
        printf("  %-28s %s\n", "ecc", t->ecc_enabled == 0 ? "off" : "-");
    if (t->mem_total_bytes >= 0)
        printf("  %-28s %.2f GiB of %.2f GiB\n", "memory used (nvml)",
               (double)t->mem_used_bytes / GIB, (double)t->mem_total_bytes / GIB);
    if (t->n_procs < 0) {
        printf("  %-28s -\n", "processes");
        return;
    }
    printf("  %-28s %d\n", "processes", t->n_procs);
    for (int i = 0; i < t->n_procs && i < TC_TELEMETRY_MAX_PROCS; i++) {
        const tc_telemetry_proc *p = &t->procs[i];
        if (p->used_bytes >= 0)
            snprintf(v, sizeof v, "%.2f GiB", (double)p->used_bytes / GIB);
        else
            snprintf(v, sizeof v, "memory not reported");
        printf("    pid %-8u %-24s %s\n", p->pid, p->name[0] ? p->name : "?", v);
    }
}

static json_t *nvml_json(const tc_telemetry *t, tc_status st)
{
    if (st != TC_OK)
        return json_pack("{s:s}", "unavailable", tc_last_error_detail());
    json_t *o = json_object();
    /* A figure the GPU does not report is null. */
#define NUM(key, v, ok) \
    json_object_set_new(o, key, (ok) ? json_integer((json_int_t)(v)) : json_null())
    NUM("temperature_c", t->temperature_c, t->temperature_c >= 0);
    json_object_set_new(o, "power_w", t->power_w >= 0 ? json_real(t->power_w) : json_null());
    json_object_set_new(o, "power_limit_w",
                        t->power_limit_w >= 0 ? json_real(t->power_limit_w) : json_null());
    NUM("utilization_gpu_pct", t->util_gpu_pct, t->util_gpu_pct >= 0);
    NUM("utilization_memory_pct", t->util_mem_pct, t->util_mem_pct >= 0);
    json_object_set_new(o, "ecc_enabled",
                        t->ecc_enabled >= 0 ? json_boolean(t->ecc_enabled) : json_null());
    NUM("ecc_corrected", t->ecc_corrected, t->ecc_corrected >= 0);
    NUM("ecc_uncorrected", t->ecc_uncorrected, t->ecc_uncorrected >= 0);
    NUM("memory_used_bytes", t->mem_used_bytes, t->mem_used_bytes >= 0);
    NUM("memory_total_bytes", t->mem_total_bytes, t->mem_total_bytes >= 0);
    json_t *procs = t->n_procs >= 0 ? json_array() : json_null();
    for (int i = 0; i < t->n_procs && i < TC_TELEMETRY_MAX_PROCS; i++) {
        const tc_telemetry_proc *p = &t->procs[i];
        json_t *j = json_object();
        json_object_set_new(j, "pid", json_integer(p->pid));
        json_object_set_new(j, "name", p->name[0] ? json_string(p->name) : json_null());
        json_object_set_new(j, "used_bytes",
                            p->used_bytes >= 0 ? json_integer(p->used_bytes) : json_null());
        json_array_append_new(procs, j);
    }
#undef NUM
    json_object_set_new(o, "processes", procs);
    return o;
}

static void print_table(const tc_device_info *d, const tc_device_attribute *attrs, size_t n,
                        int driver, size_t free_b, const tc_telemetry *t, tc_status tst)
{
    printf("device %d: %s\n", d->ordinal, d->name);
    printf("  %-28s %s\n", "uuid", d->uuid_str);
    printf("  %-28s %s\n", "pci bus id", d->pci_bus_id);
    printf("  %-28s sm_%d%d\n", "compute capability", d->cc_major, d->cc_minor);
    printf("  %-28s %.2f GiB (%zu bytes)\n", "memory total", (double)d->total_bytes / GIB,
           d->total_bytes);
    if (free_b)
        printf("  %-28s %.2f GiB\n", "memory free", (double)free_b / GIB);
    printf("  %-28s %d\n", "multiprocessors", d->sm_count);
    printf("  %-28s %d.%d\n", "driver CUDA version", driver / 1000, driver % 1000 / 10);
    print_nvml(t, tst);
    printf("  %-60s %s\n", "attribute", "value");
    for (size_t i = 0; i < n; i++)
        printf("  %-60s %d\n", attrs[i].name + strlen("CU_DEVICE_ATTRIBUTE_"), attrs[i].value);
}

static json_t *device_json(const tc_device_info *d, const tc_device_attribute *attrs, size_t n,
                           size_t free_b, const tc_telemetry *t, tc_status tst)
{
    json_t *attr = json_object();
    for (size_t i = 0; i < n; i++)
        json_object_set_new(attr, attrs[i].name + strlen("CU_DEVICE_ATTRIBUTE_"),
                            json_integer(attrs[i].value));
    json_t *o = json_object();
    json_object_set_new(o, "ordinal", json_integer(d->ordinal));
    json_object_set_new(o, "name", json_string(d->name));
    json_object_set_new(o, "uuid", json_string(d->uuid_str));
    json_object_set_new(o, "pci_bus_id", json_string(d->pci_bus_id));
    char cc[16];
    snprintf(cc, sizeof cc, "%d.%d", d->cc_major, d->cc_minor);
    json_object_set_new(o, "compute_capability", json_string(cc));
    json_object_set_new(o, "total_bytes", json_integer((json_int_t)d->total_bytes));
    if (free_b)
        json_object_set_new(o, "free_bytes", json_integer((json_int_t)free_b));
    json_object_set_new(o, "multiprocessors", json_integer(d->sm_count));
    json_object_set_new(o, "nvml", nvml_json(t, tst));
    json_object_set_new(o, "attributes", attr);
    return o;
}

int tc_cli_devices(int argc, char **argv)
{
    bool as_json = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            as_json = true;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            puts("usage: thincuda devices [--json]\n\nList every CUDA device: identity, memory, "
                 "compute capability, every attribute the driver reports and, when NVML loads "
                 "(libnvidia-ml.so.1, or THINCUDA_LIBNVML), temperature, power, utilisation, "
                 "ECC and the processes using it.");
            return 0;
        } else {
            fprintf(stderr, "thincuda devices: unknown option '%s' (try --help)\n", argv[i]);
            return 2;
        }
    }
    int count = 0, driver = 0;
    if (tc_device_count(&count) != TC_OK || tc_device_driver_version(&driver) != TC_OK) {
        fprintf(stderr, "thincuda: %s\n", tc_last_error_detail());
        return 1;
    }
    size_t cap = tc_device_attribute_max();
    tc_device_attribute *attrs = calloc(cap, sizeof *attrs);
    json_t *list = json_array();
    int rc = 0;
    if (attrs == NULL || list == NULL) {
        fprintf(stderr, "thincuda: out of memory\n");
        rc = 1;
        goto done;
    }
    for (int i = 0; i < count; i++) {
        tc_device_info info;
        size_t n = 0, free_b = 0, total_b = 0;
        tc_context *ctx = NULL;
        if (tc_device_info_get(i, &info) != TC_OK ||
            tc_device_attributes(i, attrs, cap, &n) != TC_OK) {
            fprintf(stderr, "thincuda: device %d: %s\n", i, tc_last_error());
            rc = 1;
            goto done;
        }
        /* Free memory needs a context; a device that refuses one still gets listed. */
        if (tc_context_retain(i, &ctx) == TC_OK)
            tc_context_mem_info(ctx, &free_b, &total_b);
        tc_context_release(ctx);
        /* NVML is optional: without it the figures say why they are missing. */
        tc_telemetry t;
        tc_status tst = tc_telemetry_get(info.pci_bus_id, &t);
        if (as_json)
            json_array_append_new(list, device_json(&info, attrs, n, free_b, &t, tst));
        else
            print_table(&info, attrs, n, driver, free_b, &t, tst);
    }
    if (as_json) {
        json_t *root = json_object();
        char ver[16];
        snprintf(ver, sizeof ver, "%d.%d", driver / 1000, driver % 1000 / 10);
        json_object_set_new(root, "driver_cuda_version", json_string(ver));
        json_object_set(root, "devices", list);
        json_dumpf(root, stdout, JSON_INDENT(2));
        putchar('\n');
        json_decref(root);
    }
done:
    json_decref(list);
    free(attrs);
    return rc;
}
