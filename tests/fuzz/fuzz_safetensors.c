/* libFuzzer harness for the safetensors header parser: any input gives TC_OK or a clean
 * error. Build and run: tools/fuzz safetensors [seconds]. */
#include <stddef.h>
#include <stdint.h>

#include "model/hf.h"

static tc_status touch(void *ctx, const tc_safetensor *t)
{
    /* Read the first and last byte of each tensor: they must lie inside the input. */
    volatile uint8_t *sum = ctx;
    if (t->bytes)
        *sum ^= ((const uint8_t *)t->data)[0] ^ ((const uint8_t *)t->data)[t->bytes - 1];
    return TC_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t sum = 0;
    (void)tc_safetensors_parse(data, size, "fuzz", touch, &sum);
    return 0;
}
