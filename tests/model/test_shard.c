/* Tensor-parallel sharding plans (src/model/shard.c) against a straightforward reference: for
 * every shape the tests and the issue name, N = 1, 2, 3, 4, 8 ranks and weights of floats, of
 * the legacy 32-element quantisation blocks and of K-quants' 256, the plan exists exactly when
 * the reference's rules allow it, and then each rank's rows and columns of every tensor are
 * the ones found by asking, row by row and column by column, which rank owns it. A column
 * split keeps the quantisation blocks whole: Llama-2-7B's feed-forward width (43 blocks of
 * 256) goes 22 and 21 blocks to 2 ranks. */
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

/* The weights' quantisation: the block of the tensors whose columns are split (attn_output,
 * ffn_down), in elements. */
typedef struct weights {
    const char *name;
    int64_t block;
    tc_ggml_type type;
} weights;

static const weights kinds[] = {
    { "floats", 1, TC_GGML_F16 },
    { "legacy blocks of 32", 32, TC_GGML_Q8_0 },
    { "K-quants", 256, TC_GGML_Q4_K },
};

static tc__shard_blocks blocks_of(const weights *w)
{
    return (tc__shard_blocks){ w->block, w->block, w->type, w->type };
}

/* ---------------------------------------------------------------- the reference */

/* The rules, as the issue states them: N divides the query heads; KV heads split across the
 * ranks or, when there are fewer than ranks, each rank holds the one its query heads use (so N
 * must be a multiple of them); a vocabulary row for every rank. A column split must not cut a
 * quantisation block: a rank's heads are whole blocks of wo's columns, and every rank gets at
 * least one whole block of the feed-forward width. */
static bool possible(const shape *s, int n, const weights *w)
{
    return s->n_heads % n == 0 && (s->n_kv_heads % n == 0 || n % s->n_kv_heads == 0) &&
           (n == 1 || (int64_t)s->n_heads / n * s->head_dim % w->block == 0) &&
           s->ffn % w->block == 0 && s->ffn / w->block >= n && s->vocab >= n;
}

/* Which rank owns query head h: blocks in rank order. */
static int q_owner(const shape *s, int n, int h)
{
    return h / (s->n_heads / n);
}

/* Which rank owns feed-forward column f: the width's quantisation blocks are dealt out in rank
 * order, as many to each rank as evenly possible, the first ranks one more where they do not
 * divide (so where N-th of the width is whole blocks, each rank has N-th). */
static int ffn_owner(const shape *s, int n, const weights *w, int64_t f)
{
    int64_t blocks = s->ffn / w->block, end = 0;
    for (int r = 0; r < n; r++) {
        end += blocks / n + (r < blocks % n ? 1 : 0);
        if (f / w->block < end)
            return r;
    }
    fail_msg("column %lld past the width", (long long)f);
    return -1;
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
/* The weights of the plan under check (owns_fn takes none). */
static const weights *cur;
static bool owns_ffn(const shape *s, int n, int r, int64_t f)
{
    return ffn_owner(s, n, cur, f) == r;
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

static void check_plan(const shape *s, int n, const weights *w, const tc__shard_plan *p)
{
    int64_t hd = s->head_dim, qd = (int64_t)s->n_heads * hd, kvd = (int64_t)s->n_kv_heads * hd;
    assert_int_equal(p->n_ranks, n);
    cur = w;
    /* Every KV head on exactly kv_replicas ranks: 1, or N / kv_heads when they are fewer. */
    int want_replicas = n > s->n_kv_heads ? n / s->n_kv_heads : 1;
    assert_int_equal(p->kv_replicas, want_replicas);
    for (int j = 0; j < s->n_kv_heads; j++) {
        int holders = 0;
        for (int r = 0; r < n; r++)
            holders += needs_kv(s, n, r, j);
        assert_int_equal(holders, want_replicas);
    }
    int64_t vocab_seen = 0, vmin = s->vocab, vmax = 0, ffn_seen = 0, fmin = s->ffn, fmax = 0;
    for (int r = 0; r < n; r++) {
        const tc_llama_config *lc = &p->rank[r].local;
        assert_int_equal(lc->n_heads, s->n_heads / n);
        assert_int_equal(lc->head_dim, s->head_dim);
        assert_int_equal(lc->dim, s->dim);
        assert_int_equal(lc->vocab, p->vocab_rows);
        assert_int_equal(lc->n_layers, s->layers);
        int64_t start, len;
        /* q: rows of wq and bq, columns of wo */
        block_of(owns_q_row, s, n, r, qd, &start, &len);
        check_slice("wq", s, n, r, tc__shard_slice_of(p, r, TC__SHARD_Q, qd, s->dim), 0, start, len,
                    len, s->dim);
        check_slice("bq", s, n, r, tc__shard_slice_of(p, r, TC__SHARD_Q, 0, qd), 1, start, len, 0,
                    len);
        check_slice("wo", s, n, r, tc__shard_slice_of(p, r, TC__SHARD_O, s->dim, qd), 1, start, len,
                    s->dim, len);
        assert_int_equal(len, lc->n_heads * hd);
        assert_int_equal(n > 1 ? len % w->block : 0, 0);
        /* k, v: the KV heads its query heads read, the same number on every rank */
        block_of(owns_kv_row, s, n, r, kvd, &start, &len);
        check_slice("wk", s, n, r, tc__shard_slice_of(p, r, TC__SHARD_KV, kvd, s->dim), 0, start,
                    len, len, s->dim);
        check_slice("bv", s, n, r, tc__shard_slice_of(p, r, TC__SHARD_KV, 0, kvd), 1, start, len, 0,
                    len);
        assert_int_equal(len, lc->n_kv_heads * hd);
        /* gate, up: rows; down: columns */
        block_of(owns_ffn, s, n, r, s->ffn, &start, &len);
        check_slice("w_gate", s, n, r, tc__shard_slice_of(p, r, TC__SHARD_FFN_OUT, s->ffn, s->dim),
                    0, start, len, len, s->dim);
        check_slice("w_down", s, n, r, tc__shard_slice_of(p, r, TC__SHARD_FFN_IN, s->dim, s->ffn),
                    1, start, len, s->dim, len);
        assert_int_equal(start, ffn_seen);
        assert_int_equal(len % w->block, 0);
        assert_int_equal(lc->ffn_dim, len);
        ffn_seen += len;
        fmin = len < fmin ? len : fmin;
        fmax = len > fmax ? len : fmax;
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
    assert_int_equal(ffn_seen, s->ffn);
    assert_true(fmax - fmin <= w->block); /* balanced in whole blocks */
    if (s->ffn % n == 0 && s->ffn / n % w->block == 0)
        assert_int_equal(fmax, fmin); /* the even split where it is whole blocks */
    assert_int_equal(p->vocab_rows, (s->vocab + n - 1) / n + 1);
}

static void plans_match_the_reference_for_every_shape(void **state)
{
    (void)state;
    const int ns[] = { 1, 2, 3, 4, 8 };
    int planned = 0, refused = 0, uneven = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
            for (size_t j = 0; j < sizeof ns / sizeof *ns; j++) {
                const shape *s = &shapes[i];
                const weights *w = &kinds[k];
                int n = ns[j];
                tc_llama_config c = config_of(s);
                tc__shard_blocks b = blocks_of(w);
                tc__shard_plan p;
                tc_status st = tc__shard_plan_init(&p, &c, n, &b);
                if (!possible(s, n, w)) {
                    if (st != TC_ERR_INVALID_ARGUMENT)
                        fail_msg("%s, %s over %d ranks: planned, but the rules forbid it", s->name,
                                 w->name, n);
                    char want[64];
                    snprintf(want, sizeof want, "tensor parallelism over %d ranks", n);
                    if (!strstr(tc_last_error(), want))
                        fail_msg("%s, %s over %d ranks: unclear error '%s'", s->name, w->name, n,
                                 tc_last_error());
                    refused++;
                    continue;
                }
                if (st != TC_OK)
                    fail_msg("%s, %s over %d ranks: %s", s->name, w->name, n, tc_last_error());
                check_plan(s, n, w, &p);
                planned++;
                uneven += p.rank[0].n_ffn != p.rank[n - 1].n_ffn;
            }
    print_message("%d plans checked (%d with uneven feed-forward shares), %d refused with an "
                  "error\n",
                  planned, uneven, refused);
    assert_true(planned >= 100);
    assert_true(uneven >= 6);
}

/* Llama-2-7B's feed-forward width, 11008 = 43 blocks of 256: K-quants split it 22 / 21 blocks
 * at N = 2 (5632 and 5376 columns) and 11 / 11 / 11 / 10 at N = 4; floats and the legacy
 * 32-element types keep the even split (5504 each; 1376 each at N = 8). */
static void llama2_7b_k_quants_split_in_whole_blocks(void **state)
{
    (void)state;
    tc_llama_config c = config_of(&shapes[8]);
    tc__shard_blocks k = blocks_of(&kinds[2]), legacy = blocks_of(&kinds[1]);
    tc__shard_plan p;
    assert_int_equal(tc__shard_plan_init(&p, &c, 2, &k), TC_OK);
    assert_int_equal(p.rank[0].ffn0, 0);
    assert_int_equal(p.rank[0].n_ffn, 5632);
    assert_int_equal(p.rank[1].ffn0, 5632);
    assert_int_equal(p.rank[1].n_ffn, 5376);
    assert_int_equal(p.rank[0].local.ffn_dim, 5632);
    assert_int_equal(p.rank[1].local.ffn_dim, 5376);
    tc__shard_slice down = tc__shard_slice_of(&p, 1, TC__SHARD_FFN_IN, 4096, 11008);
    assert_int_equal(down.start, 5632);
    assert_int_equal(down.cols, 5376);
    assert_int_equal(tc__shard_plan_init(&p, &c, 4, &k), TC_OK);
    const int64_t want4[] = { 2816, 2816, 2816, 2560 };
    for (int r = 0; r < 4; r++)
        assert_int_equal(p.rank[r].n_ffn, want4[r]);
    assert_int_equal(tc__shard_plan_init(&p, &c, 8, &k), TC_OK);
    assert_int_equal(p.rank[2].n_ffn, 1536);
    assert_int_equal(p.rank[3].n_ffn, 1280);
    assert_int_equal(tc__shard_plan_init(&p, &c, 2, NULL), TC_OK);
    assert_int_equal(p.rank[0].n_ffn, 5504);
    assert_int_equal(p.rank[1].n_ffn, 5504);
    assert_int_equal(tc__shard_plan_init(&p, &c, 8, &legacy), TC_OK);
    for (int r = 0; r < 8; r++)
        assert_int_equal(p.rank[r].n_ffn, 1376);
    /* 32 heads: 3 ranks stay refused, whatever the weights */
    assert_int_equal(tc__shard_plan_init(&p, &c, 3, &k), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "32 attention heads"));
}

/* Splits that would cut a block are refused naming the tensor or width and the type: the
 * quantised test files' tiny shape (4 heads of 64) puts 128 of wo's columns on each of 2
 * ranks, half a q4_k block (one rank cuts nothing); with heads of 256, its 512 feed-forward
 * columns are 2 blocks, enough for 2 ranks but not for 4. */
static void block_cuts_are_refused(void **state)
{
    (void)state;
    tc_llama_config c = config_of(&shapes[4]);
    tc__shard_blocks k = blocks_of(&kinds[2]);
    tc__shard_plan p;
    assert_int_equal(tc__shard_plan_init(&p, &c, 2, &k), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "2 attention heads are 128 columns of attn_output, "
                                            "not whole q4_k blocks of 256"));
    assert_int_equal(tc__shard_plan_init(&p, &c, 1, &k), TC_OK);
    /* heads of 256 columns but 2 blocks of feed-forward width for 4 ranks */
    c.dim = 1024;
    c.head_dim = 256;
    assert_int_equal(tc__shard_plan_init(&p, &c, 4, &k), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "feed-forward width 512 is not a whole q4_k block for "
                                            "each of them"));
    assert_int_equal(tc__shard_plan_init(&p, &c, 2, &k), TC_OK);
    assert_int_equal(p.rank[1].n_ffn, 256);
}

/* The blocks come from the file's attn_output and ffn_down tensors, the largest of each kind
 * over the layers (Q4_K_M puts q6_k in some layers' ffn_down); other tensors do not count. */
static void blocks_are_read_from_the_tensors(void **state)
{
    (void)state;
    tc_gguf_tensor t[5] = { 0 };
    const char *names[5] = { "blk.0.attn_output.weight", "blk.1.attn_output.weight",
                             "blk.0.ffn_down.weight", "blk.1.ffn_down.weight",
                             "blk.0.ffn_gate.weight" };
    const tc_ggml_type types[5] = { TC_GGML_Q8_0, TC_GGML_F16, TC_GGML_Q4_K, TC_GGML_Q6_K,
                                    TC_GGML_Q2_K };
    for (int i = 0; i < 5; i++) {
        t[i].name = (tc_gguf_str){ names[i], strlen(names[i]) };
        t[i].type = types[i];
    }
    tc_gguf g = { .n_tensors = 5, .tensors = t };
    tc__shard_blocks b = tc__shard_blocks_of(&g, 2);
    assert_int_equal(b.heads, 32);
    assert_int_equal(b.heads_type, TC_GGML_Q8_0);
    assert_int_equal(b.ffn, 256);
    assert_int_equal(b.ffn_type, TC_GGML_Q4_K);
    b = tc__shard_blocks_of(&g, 1); /* layer 0 only */
    assert_int_equal(b.ffn, 256);
    b = tc__shard_blocks_of(NULL, 2);
    assert_int_equal(b.heads, 1);
    assert_int_equal(b.ffn, 1);
}

/* The shapes: Llama-3-70B's 8 KV heads one per rank at N = 8, TinyLlama's 4 KV heads
 * twice each at N = 8, SmolLM2's 9 heads refused beyond one rank. */
static void kv_heads_split_or_replicated(void **state)
{
    (void)state;
    tc__shard_plan p;
    tc_llama_config c = config_of(&shapes[12]); /* Llama-3-70B */
    assert_int_equal(tc__shard_plan_init(&p, &c, 8, NULL), TC_OK);
    assert_int_equal(p.kv_replicas, 1);
    assert_int_equal(p.rank[0].local.n_kv_heads, 1);
    assert_int_equal(p.rank[5].kv_head0, 5);
    c = config_of(&shapes[6]); /* TinyLlama: 32 heads, 4 KV heads */
    assert_int_equal(tc__shard_plan_init(&p, &c, 8, NULL), TC_OK);
    assert_int_equal(p.kv_replicas, 2);
    assert_int_equal(p.rank[0].local.n_kv_heads, 1);
    assert_int_equal(p.rank[5].kv_head0, 2); /* query heads 20..23, group of 8 */
    assert_int_equal(p.rank[5].q_head0, 20);
    c = config_of(&shapes[5]); /* SmolLM2: 9 heads */
    assert_int_equal(tc__shard_plan_init(&p, &c, 2, NULL), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "9 attention heads"));
    assert_int_equal(tc__shard_plan_init(&p, &c, 3, NULL), TC_OK);
    assert_int_equal(p.rank[0].local.n_kv_heads, 1);
    c = config_of(&shapes[11]); /* Qwen2.5-1.5B: 12 heads, 2 KV heads */
    assert_int_equal(tc__shard_plan_init(&p, &c, 4, NULL), TC_OK);
    assert_int_equal(p.kv_replicas, 2);
    assert_int_equal(tc__shard_plan_init(&p, &c, 8, NULL), TC_ERR_INVALID_ARGUMENT);
    /* 6 heads over 3 KV heads on 2 ranks would split a KV head's group between ranks */
    tc_llama_config odd = config_of(&shapes[1]);
    odd.n_heads = 6;
    odd.n_kv_heads = 3;
    assert_int_equal(tc__shard_plan_init(&p, &odd, 2, NULL), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "3 KV heads"));
    assert_int_equal(tc__shard_plan_init(&p, &c, 0, NULL), TC_ERR_INVALID_ARGUMENT);
    assert_int_equal(tc__shard_plan_init(&p, &c, TC__SHARD_MAX_RANKS + 1, NULL),
                     TC_ERR_INVALID_ARGUMENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(plans_match_the_reference_for_every_shape),
        cmocka_unit_test(kv_heads_split_or_replicated),
        cmocka_unit_test(llama2_7b_k_quants_split_in_whole_blocks),
        cmocka_unit_test(block_cuts_are_refused),
        cmocka_unit_test(blocks_are_read_from_the_tensors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
