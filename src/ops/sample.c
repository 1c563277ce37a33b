/* Sampling one token per row of logits: repetition (Keskar et al. 2019, CTRL), presence and
 * frequency penalties (OpenAI's definitions), temperature, top-k, top-p (Holtzman et al. 2019,
 * nucleus), min-p (Nguyen et al. 2024), then one draw from a counter-based generator so that
 * the same seed and counter always give the same token. CUDA logits are read back to the host
 * (greedy rows without penalties use the argmax kernel and read back only the ids). */
#include <stdlib.h>
#include "ops/internal.h"

tc_sample_params tc_sample_defaults(void)
{
    tc_sample_params p = { 0 };
    p.temperature = 0.0f;
    p.top_p = 1.0f;
    p.repetition_penalty = 1.0f;
    return p;
}

/* splitmix64 (Steele, Lea & Flood 2014) over seed and counter: a uniform double in [0, 1). */
static double uniform(uint64_t seed, uint64_t counter)
{
    uint64_t z = seed ^ (counter * 0x9e3779b97f4a7c15ull) ^ 0x5851f42d4c957f2dull;
    for (int i = 0; i < 2; i++)
        z = tc__mix64(z + 0x9e3779b97f4a7c15ull);
    return (double)(z >> 11) * 0x1.0p-53;
}

static bool penalised(const tc_sample_params *p)
{
    return p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f ||
           p->frequency_penalty != 0.0f;
}

static tc_status check_row(int64_t r, const tc_sample_row *row, int64_t vocab)
{
    const char *op = "tc_sample";
    const tc_sample_params *p = &row->params;
    if (!(p->temperature >= 0.0f) || isinf(p->temperature))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "row %lld: temperature %g; want a finite value >= 0", (long long)r,
                            (double)p->temperature);
    if (p->top_k < 0)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "row %lld: top_k %d; want >= 0",
                            (long long)r, p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "row %lld: top_p %g; want (0, 1]",
                            (long long)r, (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "row %lld: min_p %g; want [0, 1]",
                            (long long)r, (double)p->min_p);
    if (!(p->repetition_penalty > 0.0f) || isinf(p->repetition_penalty))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "row %lld: repetition_penalty %g; want a finite value > 0",
                            (long long)r, (double)p->repetition_penalty);
    if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "row %lld: penalties must be finite",
                            (long long)r);
    if (row->history_len < 0 || row->n_prompt < 0 || row->n_prompt > row->history_len ||
        (row->history_len > 0 && !row->history))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "row %lld: history of %lld tokens with %lld of prompt", (long long)r,
                            (long long)row->history_len, (long long)row->n_prompt);
    for (int64_t i = 0; i < row->history_len; i++)
        if (row->history[i] < 0 || row->history[i] >= vocab)
            return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                                "row %lld: history[%lld] = %d is outside the vocabulary",
                                (long long)r, (long long)i, row->history[i]);
    return TC_OK;
}

typedef struct {
    float p;
    int32_t id;
} cand;

/* Larger probability first, then lower id: a total order, so results never depend on qsort. */
static int by_prob(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->p != y->p)
        return x->p > y->p ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Restore the min-heap order (least probable at the root) of c[0..k) below position j. */
static void sift_down(cand *c, int64_t k, int64_t j)
{
    for (;;) {
        int64_t l = 2 * j + 1, r = l + 1, m = j;
        if (l < k && by_prob(&c[l], &c[m]) > 0)
            m = l;
        if (r < k && by_prob(&c[r], &c[m]) > 0)
            m = r;
        if (m == j)
            return;
        cand t = c[j];
        c[j] = c[m];
        c[m] = t;
        j = m;
    }
}

/* Keep the k most probable of n candidates at the front of c (a binary min-heap). */
static int64_t keep_top_k(cand *c, int64_t n, int64_t k)
{
    if (k >= n)
        return n;
    for (int64_t s = k / 2 - 1; s >= 0; s--)
        sift_down(c, k, s);
    for (int64_t i = k; i < n; i++)
        if (by_prob(&c[i], &c[0]) < 0) { /* better than the heap's worst */
            c[0] = c[i];
            sift_down(c, k, 0);
        }
    return k;
}

/* Sample one row of logits v[vocab] (modified in place); work holds vocab candidates and
 * vocab int32 counts. */
static int32_t sample_row(float *v, int64_t vocab, const tc_sample_row *row, cand *c,
                          int32_t *counts)
{
    const tc_sample_params *p = &row->params;
    if (penalised(p)) {
        memset(counts, 0, (size_t)vocab * sizeof(int32_t));
        for (int64_t i = 0; i < row->history_len; i++) {
            int32_t t = row->history[i];
            if (i >= row->n_prompt)
                counts[t] += 2; /* generated: count in the upper bits, bit 0 marks "seen" */
            counts[t] |= 1;
        }
        for (int64_t i = 0; i < row->history_len; i++) {
            int32_t t = row->history[i];
            if (counts[t] == 0)
                continue;
            if (p->repetition_penalty != 1.0f)
                v[t] = v[t] > 0 ? v[t] / p->repetition_penalty : v[t] * p->repetition_penalty;
            int32_t generated = counts[t] >> 1;
            if (generated > 0)
                v[t] -= p->presence_penalty + p->frequency_penalty * (float)generated;
            counts[t] = 0; /* each distinct token once */
        }
    }
    int64_t best = 0;
    for (int64_t i = 1; i < vocab; i++)
        if (v[i] > v[best] || (isnan(v[best]) && !isnan(v[i])))
            best = i;
    /* A row with no finite maximum (every token banned: all -inf; or an infinite logit) has
     * no distribution to draw from, and NaN probabilities would keep top-p's threshold search
     * from ending: it gets its argmax, as greedy rows do. */
    if (p->temperature < 1e-6f || !isfinite(v[best]))
        return (int32_t)best;
    float mx = v[best];
    double sum = 0.0;
    for (int64_t i = 0; i < vocab; i++) {
        float e = isnan(v[i]) ? 0.0f : expf((v[i] - mx) / p->temperature);
        c[i].p = e;
        c[i].id = (int32_t)i;
        sum += e;
    }
    for (int64_t i = 0; i < vocab; i++)
        c[i].p = (float)(c[i].p / sum);
    float pmax = c[best].p;
    int64_t n = vocab;
    if (p->top_k > 0 && p->top_k < vocab) {
        n = keep_top_k(c, n, p->top_k);
        qsort(c, (size_t)n, sizeof *c, by_prob);
    } else if (p->top_p < 1.0f) {
        /* Only tokens at least as likely as some threshold can be in the nucleus once those
         * tokens alone reach top_p: lower the threshold until they do, then sort just them. */
        float t = pmax * 1e-3f;
        for (;;) {
            double mass = 0.0;
            for (int64_t i = 0; i < vocab; i++)
                if (c[i].p >= t)
                    mass += c[i].p;
            if (mass >= p->top_p || t < 1e-30f)
                break;
            t *= 1e-3f;
        }
        n = 0;
        for (int64_t i = 0; i < vocab; i++)
            if (c[i].p >= t)
                c[n++] = c[i];
        qsort(c, (size_t)n, sizeof *c, by_prob);
    }
    if (p->top_p < 1.0f) {
        double cum = 0.0;
        int64_t keep = 0;
        while (keep < n) {
            cum += c[keep++].p;
            if (cum >= p->top_p)
                break;
        }
        n = keep;
    }
    double total = 0.0;
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++)
        if (c[i].p >= p->min_p * pmax) {
            c[kept++] = c[i];
            total += c[i].p;
        }
    double u = uniform(p->seed, row->counter) * total, cum = 0.0;
    for (int64_t i = 0; i < kept; i++) {
        cum += c[i].p;
        if (u < cum)
            return c[i].id;
    }
    return kept ? c[kept - 1].id : (int32_t)best;
}

tc_status tc_sample(int32_t *out, const tc_tensor *logits, const tc_sample_row *rows)
{
    const char *op = "tc_sample";
    TC_TRY(tc__check_dtype(op, "logits", logits, TC__MASK(TC_DTYPE_F32)));
    TC_TRY(tc__check_ndim(op, "logits", logits, 2));
    TC_TRY(tc__check_rows_dense(op, "logits", logits));
    int64_t n = logits->shape[0], vocab = logits->shape[1];
    if (n == 0)
        return TC_OK;
    if (!out || !rows)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "out and rows are required");
    if (vocab == 0 || vocab > INT32_MAX)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "a vocabulary of %lld", (long long)vocab);
    bool plain_greedy = true;
    for (int64_t r = 0; r < n; r++) {
        TC_TRY(check_row(r, &rows[r], vocab));
        plain_greedy &= rows[r].params.temperature < 1e-6f && !penalised(&rows[r].params);
    }
    tc_backend *b = logits->backend;
    if (b->kind == TC_BACKEND_CUDA && plain_greedy) {
        tc_tensor ids;
        TC_TRY(tc_tensor_init(&ids, b, TC_DTYPE_I32, TC_SHAPE(n)));
        tc_status st = tc_argmax(&ids, logits);
        if (st == TC_OK)
            st = tc_tensor_copy_to_host(&ids, out, (size_t)n * sizeof(int32_t));
        tc_tensor_deinit(&ids);
        return st;
    }
    /* CUDA logits come back in one batch of copies and one wait; CPU rows are copied one at a
     * time, since sampling modifies them. */
    int64_t held = b->kind == TC_BACKEND_CUDA ? n : 1;
    float *v = tc_host_alloc((size_t)vocab *
                             ((size_t)held * sizeof(float) + sizeof(cand) + sizeof(int32_t)));
    if (!v)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory for %lld rows of %lld logits",
                            (long long)held, (long long)vocab);
    cand *c = (cand *)(v + held * vocab);
    int32_t *counts = (int32_t *)(c + vocab);
    tc_status st = TC_OK;
    if (b->kind == TC_BACKEND_CUDA) {
        for (int64_t r = 0; r < n; r++)
            TC_CHECK(st, tc_stream_copy_d2h(b->stream, v + r * vocab,
                                            (CUdeviceptr)(uintptr_t)tc__row(logits, r),
                                            (size_t)vocab * sizeof(float)));
        TC_CHECK(st, tc_stream_synchronize(b->stream));
    }
    for (int64_t r = 0; r < n; r++) {
        float *row = v;
        if (b->kind == TC_BACKEND_CUDA)
            row = v + r * vocab;
        else
            memcpy(v, tc__row(logits, r), (size_t)vocab * sizeof(float));
        out[r] = sample_row(row, vocab, &rows[r], c, counts);
    }
fail:
    tc_host_free(v);
    return st;
}
