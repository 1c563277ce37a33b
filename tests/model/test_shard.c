/* Tensor-parallel sharding plans (src/model/shard.c) against a straightforward reference: for
 * every shape the tests and the issue name and N = 1, 2, 4, 8 ranks, the plan exists exactly
 * when the reference's rules allow it, and then each rank's rows and columns of every tensor
 * are the ones found by asking, row by row and column by column, which rank owns it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "model/shard.h"

typedef struct shape {
    const char *name;
    int dim, n_heads, n_kv_heads, head_dim, ffn, vocab, layers;
} shape;

/* dim, heads, KV heads, head size, feed-forward width, vocabulary, layers */
static const shape shapes[] = {
    { "tiny (test_bad_files)", 8, 2, 1, 4, 16, 4, 1 },
    { "window engine (head size 24)", 64, 4, 2, 24, 128, 97, 2 },
    { "tiny (model_vs_transformers)", 128, 4, 2, 32, 344, 1000, 2 },
    { "tiny-llama3 (1 KV head)", 256, 4, 1, 64, 512, 1000, 2 },
    { "tiny (quant files)", 256, 4, 2, 64, 512, 512, 2 },
    { "SmolLM2-135M", 576, 9, 3, 64, 1536, 49152, 30 },
    { "TinyLlama-1.1B", 2048, 32, 4, 64, 5632, 32000, 22 },
    { "Llama-3.2-1B", 2048, 32, 8, 64, 8192, 128256, 16 },
    { "Llama-2-7B", 4096, 32, 32, 128, 11008, 32000, 32 },
    { "Llama-3-8B", 4096, 32, 8, 128, 14336, 128256, 32 },
    { "Mistral-7B", 4096, 32, 8, 128, 14336, 32000, 32 },
    { "Qwen2.5-1.5B", 1536, 12, 2, 128, 8960, 151936, 28 },
    { "Llama-3-70B", 8192, 64, 8, 128, 28672, 128256, 80 },
};

static tc_llama_config config_of(const shape *s)
{
    tc_llama_config c = { .arch = "llama",
                          .n_layers = s->layers,
                          .dim = s->dim,
                          .n_heads = s->n_heads,
                          .n_kv_heads = s->n_kv_heads,
                          .head_dim = s->head_dim,
                          .ffn_dim = s->ffn,
                          .vocab = s->vocab,
                          .max_positions = 4096,
                          .norm_eps = 1e-5f };
    snprintf(c.name, sizeof c.name, "%s", s->name);
    return c;
}

/* ---------------------------------------------------------------- the reference */

/* The rules, as the issue states them: N divides the query heads and the feed-forward width;
 * KV heads split across the ranks or, when there are fewer than ranks, each rank holds the one
 * its query heads use (so N must be a multiple of them); a vocabulary row for every rank. */
static bool possible(const shape *s, int n)
{
    return s->n_heads % n == 0 && (s->n_kv_heads % n == 0 || n % s->n_kv_heads == 0) &&
           s->ffn % n == 0 && s->vocab >= n;
}

/* Which rank owns query head h, feed-forward column f: blocks in rank order. */
static int q_owner(const shape *s, int n, int h)
{
    return h / (s->n_heads / n);
}
static int ffn_owner(const shape *s, int n, int64_t f)
{
    return (int)(f / (s->ffn / n));
}

/* Whether rank r needs KV head j: one of its query heads reads it (heads / kv_heads query
 * heads share each KV head, in order). */
static bool needs_kv(const shape *s, int n, int r, int j)
{
    int group = s->n_heads / s->n_kv_heads;
    for (int h = 0; h < s->n_heads; h++)
        if (q_owner(s, n, h) == r && h / group == j)
            return true;
    return false;
}

/* The indices i < len with owns(i) true must be one contiguous block: its start and length. */
typedef bool (*owns_fn)(const shape *s, int n, int r, int64_t i);
static void block_of(owns_fn owns, const shape *s, int n, int r, int64_t len, int64_t *start,
                     int64_t *count)
{
    *start = -1;
    *count = 0;
    for (int64_t i = 0; i < len; i++) {
        if (!owns(s, n, r, i))
            continue;
        if (*start < 0)
            *start = i;
        else if (*start + *count != i)
            fail_msg("%s, %d ranks: rank %d's rows are not one block", s->name, n, r);
        (*count)++;
    }
}

static bool owns_q_row(const shape *s, int n, int r, int64_t i)
{
    return q_owner(s, n, (int)(i / s->head_dim)) == r;
}
static bool owns_kv_row(const shape *s, int n, int r, int64_t i)
{
    return needs_kv(s, n, r, (int)(i / s->head_dim));
}
static bool owns_ffn(const shape *s, int n, int r, int64_t f)
{
    return ffn_owner(s, n, f) == r;
}

static void check_slice(const char *what, const shape *s, int n, int r, tc__shard_slice got,
                        int dim, int64_t start, int64_t len, int64_t rows, int64_t cols)
{
    if (got.dim != dim || got.start != start || got.len != len || got.rows != rows ||
        got.cols != cols)
        fail_msg("%s, %d ranks, rank %d, %s: dim %d [%lld, +%lld) held [%lld, %lld]; the "
                 "reference: dim %d [%lld, +%lld) held [%lld, %lld]",
                 s->name, n, r, what, got.dim, (long long)got.start, (long long)got.len,
                 (long long)got.rows, (long long)got.cols, dim, (long long)start, (long long)len,
                 (long long)rows, (long long)cols);
}

/* ---------------------------------------------------------------- the checks */

static void check_plan(const shape *s, int n, const tc__shard_plan *p)
{
    int64_t hd = s->head_dim, qd = (int64_t)s->n_heads * hd, kvd = (int64_t)s->n_kv_heads * hd;
    assert_int_equal(p->n_ranks, n);
    assert_int_equal(p->local.n_heads, s->n_heads / n);
    assert_int_equal(p->local.ffn_dim, s->ffn / n);
    assert_int_equal(p->local.head_dim, s->head_dim);
    assert_int_equal(p->local.dim, s->dim);
    assert_int_equal(p->local.vocab, p->vocab_rows);
    /* Every KV head on exactly kv_replicas ranks: 1, or N / kv_heads when they are fewer. */
    int want_replicas = n > s->n_kv_heads ? n / s->n_kv_heads : 1;
    assert_int_equal(p->kv_replicas, want_replicas);
    for (int j = 0; j < s->n_kv_heads; j++) {
        int holders = 0;
        for (int r = 0; r < n; r++)
            holders += needs_kv(s, n, r, j);
        assert_int_equal(holders, want_replicas);
    }
    int64_t vocab_seen = 0, vmin = s->vocab, vmax = 0;
    for (int r = 0; r < n; r++) {
        int64_t start, len;
        /* q: rows of wq and bq, columns of wo */
        block_of(owns_q_row, s, n, r, qd, &start, &len);
        check_slice("wq", s, n, r, tc__shard_slice_of(p, r, TC__SHARD_Q, qd, s->dim), 0, start, len,
                    len, s->dim);
        check_slice("bq", s, n, r, tc__shard_slice_of(p, r, TC__SHARD_Q, 0, qd), 1, start, len, 0,
                    len);
        check_slice("wo", s, n, r, tc__shard_slice_of(p, r, TC__SHARD_O, s->dim, qd), 1, start, len,
                    s->dim, len);
        assert_int_equal(len, p->local.n_heads * hd);
        /* k, v: the KV heads its query heads read, the same number on every rank */
        block_of(owns_kv_row, s, n, r, kvd, &start, &len);
        check_slice("wk", s, n, r, tc__shard_slice_of(p, r, TC__SHARD_KV, kvd, s->dim), 0, start,
                    len, len, s->dim);
        check_slice("bv", s, n, r, tc__shard_slice_of(p, r, TC__SHARD_KV, 0, kvd), 1, start, len, 0,
                    len);
        assert_int_equal(len, p->local.n_kv_heads * hd);
        /* gate, up: rows; down: columns */
        block_of(owns_ffn, s, n, r, s->ffn, &start, &len);
        check_slice("w_gate", s, n, r, tc__shard_slice_of(p, r, TC__SHARD_FFN_OUT, s->ffn, s->dim),
                    0, start, len, len, s->dim);
        check_slice("w_down", s, n, r, tc__shard_slice_of(p, r, TC__SHARD_FFN_IN, s->dim, s->ffn),
                    1, start, len, s->dim, len);
        /* norms: whole */
        check_slice("attn_norm", s, n, r, tc__shard_slice_of(p, r, TC__SHARD_WHOLE, 0, s->dim), -1,
                    0, 0, 0, s->dim);
        /* vocabulary: the rows whose token maps to a real row of this rank, in order after the
         * previous rank's; the padded table has room for them and a zero row after them */
        const tc__shard_rank *k = &p->rank[r];
        int64_t first = -1, count = 0;
        for (int32_t t = 0; t < s->vocab; t++) {
            int32_t row = tc__shard_local_token(p, r, t);
            if (row == p->vocab_rows - 1)
                continue;
            assert_true(row >= 0 && row < p->vocab_rows - 1);
            if (first < 0)
                first = t;
            assert_int_equal(row, t - first);
            count++;
        }
        assert_int_equal(first, vocab_seen);
        vocab_seen += count;
        vmin = count < vmin ? count : vmin;
        vmax = count > vmax ? count : vmax;
        assert_true(count + 1 <= p->vocab_rows);
        assert_int_equal(k->vocab0, first);
        assert_int_equal(k->n_vocab, count);
        check_slice("tok_embd", s, n, r,
                    tc__shard_slice_of(p, r, TC__SHARD_VOCAB, s->vocab, s->dim), 0, first, count,
                    p->vocab_rows, s->dim);
    }
    assert_int_equal(vocab_seen, s->vocab);
    assert_true(vmax - vmin <= 1); /* balanced */
    assert_int_equal(p->vocab_rows, (s->vocab + n - 1) / n + 1);
}

static void plans_match_the_reference_for_every_shape(void **state)
{
    (void)state;
    const int ns[] = { 1, 2, 4, 8 };
    int planned = 0, refused = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (size_t j = 0; j < sizeof ns / sizeof *ns; j++) {
            const shape *s = &shapes[i];
            int n = ns[j];
            tc_llama_config c = config_of(s);
            tc__shard_plan p;
            tc_status st = tc__shard_plan_init(&p, &c, n);
            if (!possible(s, n)) {
                if (st != TC_ERR_INVALID_ARGUMENT)
                    fail_msg("%s over %d ranks: planned, but the rules forbid it", s->name, n);
                char want[64];
                snprintf(want, sizeof want, "tensor parallelism over %d ranks", n);
                if (!strstr(tc_last_error(), want))
                    fail_msg("%s over %d ranks: unclear error '%s'", s->name, n, tc_last_error());
                refused++;
                continue;
            }
            if (st != TC_OK)
                fail_msg("%s over %d ranks: %s", s->name, n, tc_last_error());
            check_plan(s, n, &p);
            planned++;
        }
    print_message("%d plans checked, %d refused with an error\n", planned, refused);
    assert_true(planned >= 35);
}

/* The shapes: Llama-3-70B's 8 KV heads one per rank at N = 8, TinyLlama's 4 KV heads
 * twice each at N = 8, SmolLM2's 9 heads refused beyond one rank. */
static void kv_heads_split_or_replicated(void **state)
{
    (void)state;
    tc__shard_plan p;
    tc_llama_config c = config_of(&shapes[12]); /* Llama-3-70B */
    assert_int_equal(tc__shard_plan_init(&p, &c, 8), TC_OK);
    assert_int_equal(p.kv_replicas, 1);
    assert_int_equal(p.local.n_kv_heads, 1);
    assert_int_equal(p.rank[5].kv_head0, 5);
    c = config_of(&shapes[6]); /* TinyLlama: 32 heads, 4 KV heads */
    assert_int_equal(tc__shard_plan_init(&p, &c, 8), TC_OK);
    assert_int_equal(p.kv_replicas, 2);
    assert_int_equal(p.local.n_kv_heads, 1);
    assert_int_equal(p.rank[5].kv_head0, 2); /* query heads 20..23, group of 8 */
    assert_int_equal(p.rank[5].q_head0, 20);
    c = config_of(&shapes[5]); /* SmolLM2: 9 heads */
    assert_int_equal(tc__shard_plan_init(&p, &c, 2), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "9 attention heads"));
    assert_int_equal(tc__shard_plan_init(&p, &c, 3), TC_OK);
    assert_int_equal(p.local.n_kv_heads, 1);
    c = config_of(&shapes[11]); /* Qwen2.5-1.5B: 12 heads, 2 KV heads */
    assert_int_equal(tc__shard_plan_init(&p, &c, 4), TC_OK);
    assert_int_equal(p.kv_replicas, 2);
    assert_int_equal(tc__shard_plan_init(&p, &c, 8), TC_ERR_INVALID_ARGUMENT);
    /* 6 heads over 3 KV heads on 2 ranks would split a KV head's group between ranks */
    tc_llama_config odd = config_of(&shapes[1]);
    odd.n_heads = 6;
    odd.n_kv_heads = 3;
    assert_int_equal(tc__shard_plan_init(&p, &odd, 2), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "3 KV heads"));
    assert_int_equal(tc__shard_plan_init(&p, &c, 0), TC_ERR_INVALID_ARGUMENT);
    assert_int_equal(tc__shard_plan_init(&p, &c, TC__SHARD_MAX_RANKS + 1), TC_ERR_INVALID_ARGUMENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(plans_match_the_reference_for_every_shape),
        cmocka_unit_test(kv_heads_split_or_replicated),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
