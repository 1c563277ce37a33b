/* One weight of a Hugging Face folder as the loader sees it (quantised matrices repacked into
 * GGUF blocks), dequantised to f32, for checks against a reference unpacking
 * (tests/model/test_gptq_awq.py). Prints the held type's name.
 * With `cuda` (tests/gpu/hf_pack_check.py), a matrix that tc_hf_open_packed leaves packed is
 * packed on the GPU as the loader does it, into the second half of a matrix twice its height
 * (a row block, as fused matrices take it), read back as blocks and compared byte for byte
 * with the host's packing ("identical" is printed after the type); the GPU's blocks are what
 * is dequantised then.
 * Usage: hfweight DIR GGUF_NAME OUT [cuda] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/hf.h"
#include "model/hfquant.h"
#include "model/quant.h"
#include "thincuda.h"

/* The GPU's blocks of a packed matrix into *blocks (t->bytes); false with a message. */
static bool gpu_blocks(const tc_gguf_tensor *t, uint8_t **blocks)
{
    tc_backend *b = NULL;
    tc_tensor w = { 0 };
    tc_dtype dt;
    int64_t rows = (int64_t)t->dims[1], cols = (int64_t)t->dims[0];
    uint8_t *both = malloc(2 * t->bytes);
    bool ok = both && tc_ggml_dtype(t->type, &dt) && tc_backend_create_cuda(0, 0, &b) == TC_OK &&
              tc_tensor_init(&w, b, dt, TC_SHAPE(2 * rows, cols)) == TC_OK &&
              tc__hfq_pack_device(t->packed, &w, rows) == TC_OK &&
              tc_tensor_copy_to_host(&w, both, 2 * t->bytes) == TC_OK;
    if (!ok)
        fprintf(stderr, "hfweight: packing on the GPU: %s\n", tc_last_error());
    else
        memmove(both, both + t->bytes, t->bytes);
    tc_tensor_deinit(&w);
    tc_backend_destroy(b);
    if (!ok) {
        free(both);
        return false;
    }
    *blocks = both;
    return true;
}

/* *w (t's shape) put back in the checkpoint's order where the view holds the matrix's orders:
 * its columns where it has an input order ("blk.N.attn_q.in_perm" for "blk.N.attn_q.weight",
 * or "in_order"), its rows where it has an output order ("...out_perm"); false if one is
 * malformed. */
static bool in_checkpoint_order(const tc_hf *hf, const char *name, const tc_gguf_tensor *t,
                                float **w)
{
    uint64_t cols = t->dims[0], rows = t->n_elements / cols;
    for (int which = 0; which < 3; which++) {
        char n[96];
        size_t stem = strlen(name) > 7 ? strlen(name) - 7 : 0;
        static const char *const kind[3] = { "in_perm", "in_order", "out_perm" };
        snprintf(n, sizeof n, "%.*s.%s", (int)stem, name, kind[which]);
        const tc_gguf_tensor *p = tc_gguf_tensor_find(&hf->view, n);
        if (!p)
            continue;
        const int32_t *perm = p->data;
        bool by_rows = which == 2;
        uint64_t len = by_rows ? rows : cols;
        float *back = p->n_elements == len ? malloc(t->n_elements * sizeof *back) : NULL;
        if (!back)
            return false;
        for (uint64_t i = 0; i < len; i++)
            if (perm[i] < 0 || (uint64_t)perm[i] >= len) {
                free(back);
                return false;
            }
        for (uint64_t j = 0; j < rows; j++)
            for (uint64_t i = 0; i < cols; i++)
                if (by_rows)
                    back[(uint64_t)perm[j] * cols + i] = (*w)[j * cols + i];
                else
                    back[j * cols + (uint64_t)perm[i]] = (*w)[j * cols + i];
        free(*w);
        *w = back;
    }
    return true;
}

int main(int argc, char **argv)
{
    bool cuda = argc == 5 && !strcmp(argv[4], "cuda");
    if (argc != 4 && !cuda) {
        fprintf(stderr, "usage: hfweight DIR GGUF_NAME OUT [cuda]\n");
        return 2;
    }
    tc_hf hf;
    if ((cuda ? tc_hf_open_packed(&hf, argv[1]) : tc_hf_open(&hf, argv[1])) != TC_OK)
        return fprintf(stderr, "hfweight: %s\n", tc_last_error()), 1;
    const tc_gguf_tensor *t = tc_gguf_tensor_find(&hf.view, argv[2]);
    float *out = t ? malloc(t->n_elements * sizeof(float)) : NULL;
    uint8_t *host = NULL, *dev = NULL;
    const void *data = t ? t->data : NULL;
    const char *same = "";
    int rc = 1;
    FILE *f = NULL;
    if (t && t->packed) {
        host = malloc(t->bytes);
        if (!host || tc__hfq_pack_host(t->packed, host) != TC_OK || !gpu_blocks(t, &dev))
            goto done;
        if (memcmp(host, dev, t->bytes)) {
            size_t i = 0;
            while (host[i] == dev[i])
                i++;
            fprintf(stderr, "hfweight: %s: the GPU's blocks differ from the host's at byte %zu\n",
                    argv[2], i);
            for (size_t k = i / 20 * 20; k < i / 20 * 20 + 20; k++)
                fprintf(stderr, "%02x/%02x ", host[k], dev[k]);
            fprintf(stderr, "\n");
            goto done;
        }
        data = dev;
        same = " identical";
    }
    if (!t)
        fprintf(stderr, "hfweight: no tensor %s\n", argv[2]);
    else if (!out || !tc_dequantize(t->type, data, t->n_elements, out))
        fprintf(stderr, "hfweight: cannot dequantise %s (%s)\n", argv[2],
                tc_ggml_type_name(t->type));
    else if (!in_checkpoint_order(&hf, argv[2], t, &out))
        fprintf(stderr, "hfweight: %s's input or output order is malformed\n", argv[2]);
    else if (!(f = fopen(argv[3], "wb")) ||
             fwrite(out, sizeof(float), t->n_elements, f) != t->n_elements)
        fprintf(stderr, "hfweight: cannot write %s\n", argv[3]);
    else {
        printf("%s%s\n", tc_ggml_type_name(t->type), same);
        rc = 0;
    }
done:
    if (f)
        fclose(f);
    free(out);
    free(host);
    free(dev);
    tc_hf_close(&hf);
    return rc;
}
