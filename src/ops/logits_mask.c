/* Constrained sampling's edit of the logits: a grammar's allowed-token bits and a request's
 * logit bias applied to the rows that have them, in place. The CPU loops here are the CUDA
 * kernel's twin (kernels/logits_mask.cu); both see the same packed, merged bias entries. */
#include <stdlib.h>
#include "ops/internal.h"

typedef struct {
    int32_t id;
    int32_t at; /* position in the request's list: equal ids keep their order */
    float b;
} bias_entry;

static int by_id(const void *a, const void *b)
{
    const bias_entry *x = a, *y = b;
    if (x->id != y->id)
        return (x->id > y->id) - (x->id < y->id);
    return (x->at > y->at) - (x->at < y->at);
}

/* Merge a row's bias entries into distinct ids (sorted): the sum of a token's biases in list
 * order, or -inf where one of them is -100 or less. Returns how many remain in ids/vals. */
static int32_t merge_bias(const tc_logits_constraint *c, bias_entry *scratch, int32_t *ids,
                          float *vals)
{
    for (int32_t k = 0; k < c->n_bias; k++)
        scratch[k] = (bias_entry){ c->bias_ids[k], k, c->bias[k] };
    if (c->n_bias > 1)
        qsort(scratch, (size_t)c->n_bias, sizeof *scratch, by_id);
    int32_t n = 0;
    for (int32_t k = 0; k < c->n_bias; k++) {
        float b = scratch[k].b <= -100.0f ? -INFINITY : scratch[k].b;
        if (n > 0 && ids[n - 1] == scratch[k].id)
            vals[n - 1] += b;
        else {
            ids[n] = scratch[k].id;
            vals[n++] = b;
        }
    }
    return n;
}

/* A packed constraint, as the kernel reads it (desc[4] per row). */
typedef struct {
    float *x; /* logits */
    int64_t cols, stride;
    const int32_t *desc; /* [n][4]: row, word offset or -1, first bias, bias count */
    const uint32_t *words;
    const int32_t *ids;
    const float *vals;
} packed;

static void apply_rows(void *ctx, int64_t begin, int64_t end)
{
    const packed *p = ctx;
    for (int64_t c = begin; c < end; c++) {
        const int32_t *d = p->desc + 4 * c;
        float *x = p->x + d[0] * p->stride;
        const uint32_t *m = d[1] < 0 ? NULL : p->words + d[1];
        if (m)
            for (int64_t t = 0; t < p->cols; t++)
                if (!(m[t >> 5] >> (t & 31) & 1u))
                    x[t] = -INFINITY;
        for (int32_t k = 0; k < d[3]; k++) {
            int32_t t = p->ids[d[2] + k];
            float b = p->vals[d[2] + k];
            /* -inf bans even a logit of +inf, which the sum would make NaN. */
            if (!m || (m[t >> 5] >> (t & 31) & 1u))
                x[t] = b == -INFINITY ? -INFINITY : x[t] + b;
        }
    }
}

static tc_status check_rows(const char *op, const tc_logits_constraint *rows, int32_t n,
                            int64_t n_logits, int64_t vocab, uint8_t *seen, int64_t *n_bias,
                            int64_t *n_words)
{
    int64_t need = (vocab + 31) / 32;
    *n_bias = *n_words = 0;
    for (int32_t i = 0; i < n; i++) {
        const tc_logits_constraint *c = &rows[i];
        if (c->row < 0 || c->row >= n_logits)
            return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                                "constraint %d: row %lld of logits with %lld rows", i,
                                (long long)c->row, (long long)n_logits);
        if (seen[c->row]++)
            return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                                "constraint %d: row %lld is constrained twice", i,
                                (long long)c->row);
        if (c->allowed && c->n_words < need)
            return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                                "constraint %d: a mask of %lld words; a vocabulary of %lld "
                                "needs %lld",
                                i, (long long)c->n_words, (long long)vocab, (long long)need);
        if (c->n_bias < 0 || (c->n_bias > 0 && (!c->bias_ids || !c->bias)))
            return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                                "constraint %d: a bias of %d tokens without its arrays", i,
                                c->n_bias);
        for (int32_t k = 0; k < c->n_bias; k++)
            if (c->bias_ids[k] < 0 || c->bias_ids[k] >= vocab || isnan(c->bias[k]))
                return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                                    "constraint %d: bias %d is %g for token %d (vocabulary "
                                    "%lld)",
                                    i, k, (double)c->bias[k], c->bias_ids[k], (long long)vocab);
        *n_bias += c->n_bias;
        *n_words += c->allowed ? need : 0;
    }
    if (*n_words + *n_bias + 4 * (int64_t)n > INT32_MAX)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "%lld mask words and %lld biases: too many", (long long)*n_words,
                            (long long)*n_bias);
    return TC_OK;
}

tc_status tc_logits_mask(tc_tensor *logits, const tc_logits_constraint *rows, int32_t n_rows)
{
    const char *op = "tc_logits_mask";
    TC_TRY(tc__check_dtype(op, "logits", logits, TC__MASK(TC_DTYPE_F32)));
    TC_TRY(tc__check_ndim(op, "logits", logits, 2));
    TC_TRY(tc__check_rows_dense(op, "logits", logits));
    if (n_rows == 0)
        return TC_OK;
    if (n_rows < 0 || !rows)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "%d constraints at %p", n_rows,
                            (const void *)rows);
    int64_t R = logits->shape[0], V = logits->shape[1], W = (V + 31) / 32;
    if (V == 0 || V > INT32_MAX)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "a vocabulary of %lld", (long long)V);
    uint8_t *seen = tc_host_alloc((size_t)R);
    if (!seen)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory for %lld rows", (long long)R);
    memset(seen, 0, (size_t)R);
    int64_t n_bias, n_words;
    tc_status st = check_rows(op, rows, n_rows, R, V, seen, &n_bias, &n_words);
    tc_host_free(seen);
    if (st != TC_OK)
        return st;
    /* One buffer, in the order it goes up: desc, bias ids, bias values, mask words (all
     * 4-byte items); then the sort's scratch. */
    int32_t max_bias = 0;
    for (int32_t i = 0; i < n_rows; i++)
        max_bias = rows[i].n_bias > max_bias ? rows[i].n_bias : max_bias;
    size_t up = sizeof(int32_t) * (size_t)(4 * (int64_t)n_rows + 2 * n_bias + n_words);
    char *buf = tc_host_alloc(up + sizeof(bias_entry) * (size_t)max_bias);
    if (!buf)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory for %zu bytes of masks", up);
    int32_t *desc = (int32_t *)buf, *ids = desc + 4 * n_rows;
    float *vals = (float *)(ids + n_bias);
    uint32_t *words = (uint32_t *)(vals + n_bias);
    bias_entry *scratch = (bias_entry *)(buf + up);
    int32_t at_bias = 0, at_word = 0;
    for (int32_t i = 0; i < n_rows; i++) {
        const tc_logits_constraint *c = &rows[i];
        int32_t nb = merge_bias(c, scratch, ids + at_bias, vals + at_bias);
        desc[4 * i] = (int32_t)c->row;
        desc[4 * i + 1] = c->allowed ? at_word : -1;
        desc[4 * i + 2] = at_bias;
        desc[4 * i + 3] = nb;
        at_bias += nb;
        if (c->allowed) {
            memcpy(words + at_word, c->allowed, sizeof *words * (size_t)W);
            at_word += (int32_t)W;
        }
    }
    tc_backend *b = logits->backend;
    if (b->kind == TC_BACKEND_CPU) {
        packed p = { logits->data, V, logits->stride[0], desc, words, ids, vals };
        tc__parallel_for(b, n_rows, 1, apply_rows, &p);
        tc_host_free(buf);
        return TC_OK;
    }
    /* Pageable memory: the driver stages it before the call returns, so buf may go at once,
     * and nothing waits for the device. */
    CUdeviceptr dev;
    st = tc__backend_workspace(b, up, &dev);
    if (st == TC_OK)
        st = tc_stream_copy_h2d(b->stream, dev, buf, up);
    tc_host_free(buf);
    if (st != TC_OK)
        return st;
    /* Chunks of 8,192 tokens, 256 threads (32 tokens each): 16 blocks a row at Llama 3's
     * vocabulary, so even one row spreads over the SMs. */
    int64_t chunk = 8192;
    tc_launch_config cfg = tc__cfg(b, (unsigned)n_rows, 256, 0);
    cfg.grid.y = (uint32_t)((V + chunk - 1) / chunk);
    const int32_t *d_desc = (const int32_t *)(uintptr_t)dev;
    const int32_t *d_ids = d_desc + 4 * n_rows;
    const float *d_vals = (const float *)(d_ids + n_bias);
    const uint32_t *d_words = (const uint32_t *)(d_vals + n_bias);
    return tc_launch_logits_mask_f32(cfg, TC__DEV(float, logits), V, logits->stride[0], d_desc,
                                     d_words, d_ids, d_vals, chunk);
}
