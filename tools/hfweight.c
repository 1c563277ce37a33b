/* One weight of a Hugging Face folder as the loader sees it (quantised matrices repacked into
 * GGUF blocks), dequantised to f32, for checks against a reference unpacking
 * (tests/model/test_gptq_awq.py). Prints the held type's name.
 * Usage: hfweight DIR GGUF_NAME OUT */
#include <stdio.h>
#include <stdlib.h>

#include "model/hf.h"
#include "model/quant.h"

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: hfweight DIR GGUF_NAME OUT\n");
        return 2;
    }
    tc_hf hf;
    if (tc_hf_open(&hf, argv[1]) != TC_OK)
        return fprintf(stderr, "hfweight: %s\n", tc_last_error()), 1;
    const tc_gguf_tensor *t = tc_gguf_tensor_find(&hf.view, argv[2]);
    float *out = t ? malloc(t->n_elements * sizeof(float)) : NULL;
    int rc = 1;
    FILE *f = NULL;
    if (!t)
        fprintf(stderr, "hfweight: no tensor %s\n", argv[2]);
    else if (!out || !tc_dequantize(t->type, t->data, t->n_elements, out))
        fprintf(stderr, "hfweight: cannot dequantise %s (%s)\n", argv[2],
                tc_ggml_type_name(t->type));
    else if (!(f = fopen(argv[3], "wb")) ||
             fwrite(out, sizeof(float), t->n_elements, f) != t->n_elements)
        fprintf(stderr, "hfweight: cannot write %s\n", argv[3]);
    else {
        printf("%s\n", tc_ggml_type_name(t->type));
        rc = 0;
    }
    if (f)
        fclose(f);
    free(out);
    tc_hf_close(&hf);
    return rc;
}
