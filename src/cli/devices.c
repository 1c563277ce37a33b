/* `thincuda devices`: a table (or JSON) of every CUDA device and its attributes. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "runtime/runtime.h"

static void print_table(const tc_device_info *d, const tc_device_attribute *attrs, size_t n,
                        int driver, size_t free_b)
{
    printf("device %d: %s\n", d->ordinal, d->name);
    printf("  %-28s %s\n", "uuid", d->uuid_str);
    printf("  %-28s %s\n", "pci bus id", d->pci_bus_id);
    printf("  %-28s sm_%d%d\n", "compute capability", d->cc_major, d->cc_minor);
    printf("  %-28s %.2f GiB (%zu bytes)\n", "memory total", (double)d->total_bytes / 1073741824.0,
           d->total_bytes);
    if (free_b)
        printf("  %-28s %.2f GiB\n", "memory free", (double)free_b / 1073741824.0);
    printf("  %-28s %d\n", "multiprocessors", d->sm_count);
    printf("  %-28s %d.%d\n", "driver CUDA version", driver / 1000, driver % 1000 / 10);
    printf("  %-60s %s\n", "attribute", "value");
    for (size_t i = 0; i < n; i++)
        printf("  %-60s %d\n", attrs[i].name + strlen("CU_DEVICE_ATTRIBUTE_"), attrs[i].value);
}

static json_t *device_json(const tc_device_info *d, const tc_device_attribute *attrs, size_t n,
                           size_t free_b)
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
                 "compute capability and every attribute the driver reports.");
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
        if (as_json)
            json_array_append_new(list, device_json(&info, attrs, n, free_b));
        else
            print_table(&info, attrs, n, driver, free_b);
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
