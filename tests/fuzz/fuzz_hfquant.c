/* libFuzzer harness for Hugging Face quantised folders (GPTQ, AWQ, compressed-tensors):
 * config.json's quantization_config, the quantised parts' checks and their repacking into
 * blocks, then the Llama load on the CPU backend and three tokens of forward pass.
 * Input: a little-endian u32 L, then L & 0x3fffffff bytes of config.json, then the bytes of
 * model.safetensors; bit 30 of L opens with tc_hf_open (repacked at open) instead of
 * tc_hf_open_packed_ex, bit 31 holds 4-bit matrices in blocks of at most 64 (as tensor
 * parallelism does). Each input is written to a per-process folder under /tmp.
 * Build and run: tools/fuzz hfquant [seconds]; make seeds with tests/fuzz/make_seeds.py. */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_model.h"
#include "model/hf.h"

static char dir[64], cfg_path[96], st_path[96];

static void cleanup(void)
{
    unlink(cfg_path);
    unlink(st_path);
    rmdir(dir);
}

static void put(const char *path, const uint8_t *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/fuzz-hfquant-XXXXXX");
        if (!mkdtemp(dir))
            abort();
        snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
        snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
        atexit(cleanup);
    }
    if (size < 4)
        return 0;
    uint32_t word;
    memcpy(&word, data, 4);
    size_t n = word & 0x3fffffffu;
    if (n > size - 4)
        n = size - 4;
    put(cfg_path, data + 4, n);
    put(st_path, data + 4 + n, size - 4 - n);
    tc_hf hf;
    tc_status st =
        word >> 30 & 1 ? tc_hf_open(&hf, dir) : tc_hf_open_packed_ex(&hf, dir, word >> 31 ? 64 : 0);
    fuzz_say("open", st);
    if (st != TC_OK)
        return 0;
    fuzz_run_model(&hf.view, &hf.cfg);
    tc_hf_close(&hf);
    return 0;
}
