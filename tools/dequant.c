/* Dequantise raw GGUF blocks of one ggml type from a file to f32 (for checks against
 * gguf-py: tests/model/test_dequant.py). Usage: dequant TYPE_ID N_ELEMENTS IN OUT */
#include <stdio.h>
#include <stdlib.h>

#include "model/quant.h"

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: dequant TYPE_ID N_ELEMENTS IN OUT\n");
        return 2;
    }
    tc_ggml_type t = (tc_ggml_type)atoi(argv[1]);
    uint64_t n = strtoull(argv[2], NULL, 10), be, bb;
    if (!tc_ggml_type_block(t, &be, &bb) || n % be)
        return fprintf(stderr, "dequant: bad type or count\n"), 2;
    size_t bytes = n / be * bb;
    void *in = malloc(bytes);
    float *out = malloc(n * sizeof(float));
    FILE *f = fopen(argv[3], "rb");
    if (!in || !out || !f || fread(in, 1, bytes, f) != bytes)
        return fprintf(stderr, "dequant: cannot read %s\n", argv[3]), 1;
    fclose(f);
    if (!tc_dequantize(t, in, n, out))
        return fprintf(stderr, "dequant: type %s not supported\n", tc_ggml_type_name(t)), 1;
    f = fopen(argv[4], "wb");
    if (!f || fwrite(out, sizeof(float), n, f) != n)
        return fprintf(stderr, "dequant: cannot write %s\n", argv[4]), 1;
    fclose(f);
    free(in);
    free(out);
    return 0;
}
