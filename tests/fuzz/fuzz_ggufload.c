/* libFuzzer harness for GGUF models whose tensors are read: the Llama load of a GGUF image on
 * the CPU backend (block-quantised tensors used as stored or dequantised) and three tokens of
 * forward pass. Build and run: tools/fuzz ggufload [seconds]; make seeds with
 * tests/fuzz/make_seeds.py. */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_model.h"
#include "model/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tc_gguf g;
    tc_status st = tc_gguf_parse(&g, data, size);
    fuzz_say("parse", st);
    if (st != TC_OK)
        return 0;
    tc_llama_config c;
    st = tc_llama_config_from_gguf(&g, &c);
    fuzz_say("config", st);
    if (st == TC_OK)
        fuzz_run_model(&g, &c);
    tc_gguf_close(&g);
    return 0;
}
