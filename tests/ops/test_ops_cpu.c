/* The CPU reference ops against straightforward double-precision computations on random
 * inputs, odd sizes included, and every op's argument checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "oracle.h"

static tc_backend *cpu;  /* several threads */
static tc_backend *cpu1; /* one thread */
static const tc_dtype floats[] = { TC_DTYPE_F32, TC_DTYPE_BF16, TC_DTYPE_F16 };
static const int64_t odd[] = { 1, 3, 127, 4097 };

static int setup(void **state)
{
    (void)state;
    if (tc_backend_create_cpu(4, &cpu) != TC_OK || tc_backend_create_cpu(1, &cpu1) != TC_OK)
        return -1;
    return 0;
}
static int teardown(void **state)
{
    (void)state;
    tc_backend_destroy(cpu);
    tc_backend_destroy(cpu1);
    return 0;
}

#define EXPECT_CLOSE(got, want, n, tol, ...)                                  \
    do {                                                                      \
        double e_ = rel_error((got), (want), (n));                            \
        if (!(e_ <= (tol))) {                                                 \
            print_error(__VA_ARGS__);                                         \
            print_error(": relative error %.3g > %.3g\n", e_, (double)(tol)); \
            fail();                                                           \
        }                                                                     \
    } while (0)

static void conversions_round_to_nearest_even(void **state)
{
    (void)state;
    /* Every f16 widens to the compiler's _Float16 value (sign of zero included), and every f16
     * and bf16 survives a round trip through f32 (NaNs stay NaN). */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = tc__f16_to_f32((uint16_t)h);
        uint16_t h16 = (uint16_t)h;
        _Float16 hv;
        memcpy(&hv, &h16, 2);
        assert_true(isnan(f) == isnan((float)hv));
        if (!isnan(f))
            assert_true(f == (float)hv && !signbit(f) == !signbit((float)hv));
        if (isnan(f))
            assert_true(isnan(tc__f16_to_f32(tc__f32_to_f16(f))));
        else
            assert_int_equal(tc__f32_to_f16(f), h);
        float g = tc__bf16_to_f32((uint16_t)h);
        if (isnan(g))
            assert_true(isnan(tc__bf16_to_f32(tc__f32_to_bf16(g))));
        else
            assert_int_equal(tc__f32_to_bf16(g), h);
    }
    /* Random floats: the compiler's _Float16 conversion is the oracle for f16; for bf16 the
     * result is a nearest bf16 (ties to an even mantissa). */
    rng_t r = { 1 };
    for (int i = 0; i < 1000000; i++) {
        uint32_t u = (uint32_t)rng_next(&r);
        float f;
        memcpy(&f, &u, 4);
        if (isnan(f))
            continue;
        _Float16 h = (_Float16)f;
        uint16_t hb;
        memcpy(&hb, &h, 2);
        assert_int_equal(tc__f32_to_f16(f), hb);
        uint16_t b = tc__f32_to_bf16(f);
        double got = tc__bf16_to_f32(b);
        if (isinf(got) && !isinf(f))
            continue; /* rounding past the largest bf16 */
        double up = tc__bf16_to_f32((uint16_t)(b + 1)), down = tc__bf16_to_f32((uint16_t)(b - 1));
        double e = fabs(got - f);
        if (!isnan(up) && !isinf(up))
            assert_true(e <= fabs(up - f));
        if (!isnan(down) && !isinf(down))
            assert_true(e <= fabs(down - f));
    }
}

/* FP8 E4M3 against its definition: every code's value (bias 7, 3 mantissa bits, subnormals
 * m/8 2^-6, 0x7f and 0xff NaN); every finite code survives a round trip; random floats go to
 * a nearest code (ties to an even mantissa), beyond 448 saturate, NaN stays NaN. */
static void fp8_e4m3_matches_its_definition(void **state)
{
    (void)state;
    double value[256];
    for (int b = 0; b < 256; b++) {
        int e = (b >> 3) & 15, m = b & 7;
        double v = e ? ldexp(8 + m, e - 10) : ldexp(m, -9);
        value[b] = (b & 0x80) ? -v : v;
        float got = tc__f8e4m3_to_f32((uint8_t)b);
        if ((b & 0x7f) == 0x7f) {
            assert_true(isnan(got));
            continue;
        }
        assert_true(got == value[b]);
        assert_true(!signbit(got) == !(b & 0x80));
        assert_int_equal(tc__f32_to_f8e4m3(got), b);
    }
    assert_true(value[0x7e] == 448.0 && value[0x01] == ldexp(1, -9));
    assert_int_equal(tc__f32_to_f8e4m3(448.5f), 0x7e);
    assert_int_equal(tc__f32_to_f8e4m3(1e30f), 0x7e);
    assert_int_equal(tc__f32_to_f8e4m3(-INFINITY), 0xfe);
    assert_int_equal(tc__f32_to_f8e4m3(NAN) & 0x7f, 0x7f);
    assert_int_equal(tc__f32_to_f8e4m3(ldexpf(1, -11)), 0x00); /* a quarter step: down */
    assert_int_equal(tc__f32_to_f8e4m3(ldexpf(3, -10)), 0x02); /* 1.5 steps: to even */
    assert_int_equal(tc__f32_to_f8e4m3(1.0625f), 0x38);        /* tie between 1 and 1.125 */
    assert_int_equal(tc__f32_to_f8e4m3(1.1875f), 0x3a);        /* tie: up to the even 1.25 */
    rng_t r = { 3 };
    for (int i = 0; i < 200000; i++) {
        double x = rng_uniform(&r, -1, 1) * ldexp(1, (int)rng_int(&r, 24) - 14);
        uint8_t c = tc__f32_to_f8e4m3((float)x);
        double got = value[c], e = fabs(got - (float)x);
        if (fabs(x) >= 448)
            continue;
        for (int b = 0; b < 256; b++)
            if ((b & 0x7f) != 0x7f) {
                double d = fabs(value[b] - (float)x);
                assert_true(e <= d);
                if (e == d && value[b] != got)
                    assert_true((c & 1) == 0); /* a tie went to the even mantissa */
            }
    }
}

static void tensors_copy_slice_and_reshape(void **state)
{
    (void)state;
    rng_t r = { 2 };
    double *vals;
    tc_tensor t, s, v;
    assert_int_equal(random_tensor(&r, cpu, &t, TC_DTYPE_BF16, TC_SHAPE(5, 7), -1, 1, &vals),
                     TC_OK);
    assert_int_equal(tc_tensor_bytes(&t), 70);
    assert_true(tc_tensor_is_contiguous(&t));
    assert_int_equal(tc_tensor_slice(&t, 0, 2, 3, &s), TC_OK);
    assert_true(tc_tensor_is_contiguous(&s));
    double *sv = tensor_values(&s);
    for (int i = 0; i < 21; i++)
        assert_true(sv[i] == vals[14 + i]);
    free(sv);
    assert_int_equal(tc_tensor_slice(&t, 1, 1, 4, &s), TC_OK);
    assert_false(tc_tensor_is_contiguous(&s));
    assert_true(tc_tensor_rows_dense(&s));
    assert_int_equal(tc_tensor_copy_to_host(&s, (uint16_t[20]){ 0 }, 40), TC_ERR_INVALID_ARGUMENT);
    assert_int_equal(tc_tensor_slice(&t, 1, 5, 3, &s), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "outside dimension 1"));
    assert_int_equal(tc_tensor_reshape(&t, TC_SHAPE(7, 5), &v), TC_OK);
    assert_int_equal(tc_tensor_reshape(&t, TC_SHAPE(6, 6), &v), TC_ERR_INVALID_ARGUMENT);
    assert_int_equal(tc_tensor_copy_from_host(&t, (uint16_t[34]){ 0 }, 68),
                     TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "bf16[5, 7] cpu"));
    tc_tensor q;
    assert_int_equal(tc_tensor_init(&q, cpu, TC_DTYPE_Q4_0, TC_SHAPE(2, 33)),
                     TC_ERR_INVALID_ARGUMENT);
    assert_int_equal(tc_tensor_init(&q, cpu, TC_DTYPE_Q4_0, TC_SHAPE(2, 64)), TC_OK);
    assert_int_equal(tc_tensor_bytes(&q), 2 * 2 * 18);
    tc_tensor_deinit(&q);
    tc_tensor_deinit(&t);
    tc_tensor_deinit(&s); /* a view: only cleared */
    free(vals);
}

/* A host tensor larger than the memory available now is refused with the sizes, instead of
 * being granted and killing the process when its pages are touched; one that fits is not. */
static void host_tensors_beyond_available_memory_are_refused(void **state)
{
    (void)state;
    uint64_t avail;
    if (!tc_host_memory_available(&avail))
        skip();
    assert_true(avail > 0);
    tc_tensor t;
    int64_t n = (int64_t)((avail + ((uint64_t)1 << 30)) / 4);
    assert_int_equal(tc_tensor_init(&t, cpu, TC_DTYPE_F32, TC_SHAPE(n)), TC_ERR_OUT_OF_MEMORY);
    assert_non_null(strstr(tc_last_error(), "GiB available"));
    if (avail > ((uint64_t)512 << 20)) {
        assert_int_equal(tc_tensor_init(&t, cpu, TC_DTYPE_F32, TC_SHAPE((int64_t)64 << 20)), TC_OK);
        tc_tensor_deinit(&t);
    }
}

/* q4_1_g64 and q4_1_g128 (ours, src/ops/qblock.c) are two and four q4_1 blocks (whose
 * dequantisation tests/model/test_dequant.py checks against gguf-py) sharing d and m: random
 * blocks, with random d and m too, give the same bits both ways; a row of odd count of them,
 * and rows that are not whole blocks refused. */
static void grouped_q4_1_is_q4_1_blocks(tc_dtype dt, int share, uint64_t seed)
{
    rng_t r = { seed };
    enum { BLOCKS = 7 };
    const int be = 32 * share, bb = 4 + 16 * share;
    uint8_t g[BLOCKS * 68], q41[BLOCKS * 4 * 20];
    for (int i = 0; i < BLOCKS * bb; i++)
        g[i] = (uint8_t)rng_next(&r);
    for (int b = 0; b < BLOCKS; b++) {
        uint16_t d = tc__f32_to_f16((float)rng_uniform(&r, 0.001, 0.2)),
                 m = tc__f32_to_f16((float)rng_uniform(&r, -2.0, 2.0));
        memcpy(g + bb * b, &d, 2), memcpy(g + bb * b + 2, &m, 2);
        for (int h = 0; h < share; h++) {
            uint8_t *o = q41 + 20 * (share * b + h);
            memcpy(o, g + bb * b, 4);
            memcpy(o + 4, g + bb * b + 4 + 16 * h, 16);
        }
    }
    float got[BLOCKS * 128], want[BLOCKS * 128];
    assert_true(tc__dequant_row(dt, g, BLOCKS * be, got));
    assert_true(tc__dequant_row(TC_DTYPE_Q4_1, q41, BLOCKS * be, want));
    assert_memory_equal(got, want, sizeof(float) * BLOCKS * be);
    bool varied = false;
    for (int i = 1; i < BLOCKS * be; i++)
        varied |= got[i] != got[0];
    assert_true(varied);
    assert_int_equal(tc_dtype_block(dt), be);
    assert_int_equal(tc_dtype_bytes(dt, 2 * be), 2 * bb);
    assert_false(tc__dequant_row(dt, g, be + 32, got));
}

static void q4_1_g64_and_g128_are_q4_1_blocks_sharing_d_and_m(void **state)
{
    (void)state;
    grouped_q4_1_is_q4_1_blocks(TC_DTYPE_Q4_1_G64, 2, 41);
    grouped_q4_1_is_q4_1_blocks(TC_DTYPE_Q4_1_G128, 4, 43);
}

/* Every dtype a product's or an embedding's weights may have. */
static const tc_dtype weight_dtypes[] = { TC_DTYPE_F32,  TC_DTYPE_BF16,     TC_DTYPE_F16,
                                          TC_DTYPE_Q8_0, TC_DTYPE_Q4_0,     TC_DTYPE_Q4_1,
                                          TC_DTYPE_Q5_0, TC_DTYPE_Q5_1,     TC_DTYPE_Q2_K,
                                          TC_DTYPE_Q3_K, TC_DTYPE_Q4_K,     TC_DTYPE_Q5_K,
                                          TC_DTYPE_Q6_K, TC_DTYPE_Q4_1_G64, TC_DTYPE_Q4_1_G128 };
#define N_WEIGHT_DTYPES (sizeof weight_dtypes / sizeof weight_dtypes[0])

static void embedding_gathers_rows_of_every_dtype(void **state)
{
    (void)state;
    rng_t r = { 3 };
    const tc_dtype *tables = weight_dtypes;
    for (size_t ti = 0; ti < N_WEIGHT_DTYPES; ti++)
        for (size_t oi = 0; oi < 3; oi++) {
            int64_t vocab = 131,
                    dim = tc_dtype_is_block(tables[ti]) ? 3 * tc_dtype_block(tables[ti]) : 127,
                    n = 37;
            double *tv, *ignored;
            tc_tensor table, ids, out;
            assert_int_equal(
                random_tensor(&r, cpu, &table, tables[ti], TC_SHAPE(vocab, dim), -1, 1, &tv),
                TC_OK);
            assert_int_equal(
                random_tensor(&r, cpu, &ids, TC_DTYPE_I32, TC_SHAPE(n), 0, (double)vocab, &ignored),
                TC_OK);
            assert_int_equal(tc_tensor_init(&out, cpu, floats[oi], TC_SHAPE(n, dim)), TC_OK);
            assert_int_equal(tc_embedding(&out, &table, &ids), TC_OK);
            double *got = tensor_values(&out), *want = malloc(sizeof(double) * (size_t)(n * dim));
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < dim; j++)
                    want[i * dim + j] = tv[(int64_t)ignored[i] * dim + j];
            EXPECT_CLOSE(got, want, n * dim, tolerance(floats[oi]), "embedding %s -> %s",
                         tc_dtype_name(tables[ti]), tc_dtype_name(floats[oi]));
            ((int32_t *)ids.data)[5] = (int32_t)vocab;
            assert_int_equal(tc_embedding(&out, &table, &ids), TC_ERR_INVALID_ARGUMENT);
            assert_non_null(strstr(tc_last_error(), "ids[5]"));
            free(got), free(want), free(tv), free(ignored);
            tc_tensor_deinit(&table), tc_tensor_deinit(&ids), tc_tensor_deinit(&out);
        }
}

/* A random permutation of 0..k-1 in a new I32 tensor on b. */
static void random_order(rng_t *r, tc_backend *b, int64_t k, tc_tensor *t)
{
    assert_int_equal(tc_tensor_init(t, b, TC_DTYPE_I32, TC_SHAPE(k)), TC_OK);
    rng_permutation(r, t->data, k);
}

static void gather_columns_in_any_order(void **state)
{
    (void)state;
    rng_t r = { 5 };
    for (size_t di = 0; di < 3; di++) {
        /* x: the first 300 of 333 columns of each row (strided rows) */
        int64_t m = 7, k = 300;
        double *xv;
        tc_tensor wide, x, idx, out;
        assert_int_equal(random_tensor(&r, cpu, &wide, floats[di], TC_SHAPE(m, 333), -1, 1, &xv),
                         TC_OK);
        assert_int_equal(tc_tensor_slice(&wide, 1, 0, k, &x), TC_OK);
        random_order(&r, cpu, k, &idx);
        assert_int_equal(tc_tensor_init(&out, cpu, floats[di], TC_SHAPE(m, k)), TC_OK);
        assert_int_equal(tc_gather_columns(&out, &x, &idx), TC_OK);
        const int32_t *iv = idx.data;
        double *got = tensor_values(&out), *want = malloc(sizeof(double) * (size_t)(m * k));
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < k; j++)
                want[i * k + j] = xv[i * 333 + iv[j]];
        /* (a copy: exact) */
        EXPECT_CLOSE(got, want, m * k, 0.0, "gather_columns %s", tc_dtype_name(floats[di]));
        bool moved = false;
        for (int64_t j = 0; j < k; j++)
            moved |= iv[j] != j;
        assert_true(moved);
        ((int32_t *)idx.data)[9] = (int32_t)k;
        assert_int_equal(tc_gather_columns(&out, &x, &idx), TC_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(tc_last_error(), "idx[9]"));
        ((int32_t *)idx.data)[9] = 0;
        assert_int_equal(tc_gather_columns(&wide, &x, &idx), TC_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(tc_last_error(), "one column per index"));
        tc_tensor over;
        assert_int_equal(tc_tensor_slice(&wide, 1, 33, k, &over), TC_OK);
        assert_int_equal(tc_gather_columns(&over, &x, &idx), TC_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(tc_last_error(), "overlaps"));
        free(got), free(want), free(xv);
        tc_tensor_deinit(&wide), tc_tensor_deinit(&idx), tc_tensor_deinit(&out);
    }
}

static void rmsnorm_with_and_without_residual(void **state)
{
    (void)state;
    rng_t r = { 4 };
    for (size_t di = 0; di < 3; di++)
        for (size_t si = 0; si < 4; si++)
            for (int with_res = 0; with_res < 2; with_res++) {
                tc_dtype dt = floats[di];
                int64_t n = si == 3 ? 3 : 5, d = odd[si];
                double *xv, *wv, *rv = NULL;
                tc_tensor x, w, res, out;
                assert_int_equal(random_tensor(&r, cpu, &x, dt, TC_SHAPE(n, d), -2, 2, &xv), TC_OK);
                assert_int_equal(random_tensor(&r, cpu, &w, dt, TC_SHAPE(d), 0.5, 1.5, &wv), TC_OK);
                if (with_res)
                    assert_int_equal(random_tensor(&r, cpu, &res, dt, TC_SHAPE(n, d), -2, 2, &rv),
                                     TC_OK);
                assert_int_equal(tc_tensor_init(&out, cpu, dt, TC_SHAPE(n, d)), TC_OK);
                assert_int_equal(tc_rmsnorm(&out, with_res ? &res : NULL, &x, &w, 1e-5f), TC_OK);
                double *want = malloc(sizeof(double) * (size_t)(n * d)), *got = tensor_values(&out);
                ref_rmsnorm(want, rv, xv, wv, n, d, 1e-5, dt);
                EXPECT_CLOSE(got, want, n * d, tolerance(dt), "rmsnorm %s d=%lld res=%d",
                             tc_dtype_name(dt), (long long)d, with_res);
                if (with_res) {
                    double *rgot = tensor_values(&res);
                    EXPECT_CLOSE(rgot, rv, n * d, tolerance(dt), "rmsnorm residual %s",
                                 tc_dtype_name(dt));
                    free(rgot);
                    tc_tensor_deinit(&res);
                }
                free(want), free(got), free(xv), free(wv), free(rv);
                tc_tensor_deinit(&x), tc_tensor_deinit(&w), tc_tensor_deinit(&out);
            }
}

static void rope_plain_llama3_and_interleaved(void **state)
{
    (void)state;
    rng_t r = { 5 };
    for (int variant = 0; variant < 4; variant++)
        for (size_t di = 0; di < 3; di++) {
            tc_dtype dt = floats[di];
            tc_rope_config c = { .head_dim = variant == 3 ? 6 : 64,
                                 .theta = variant ? 500000.0 : 10000.0,
                                 .interleaved = variant == 2,
                                 .scaling = variant ? TC_ROPE_LLAMA3 : TC_ROPE_PLAIN,
                                 .factor = 8,
                                 .low_freq_factor = 1,
                                 .high_freq_factor = 4,
                                 .original_max_position = 8192 };
            int64_t n = 37, H = 3, KV = 1;
            double *qv, *kv, *pv;
            tc_tensor q, k, pos;
            assert_int_equal(random_tensor(&r, cpu, &q, dt, TC_SHAPE(n, H, c.head_dim), -1, 1, &qv),
                             TC_OK);
            assert_int_equal(
                random_tensor(&r, cpu, &k, dt, TC_SHAPE(n, KV, c.head_dim), -1, 1, &kv), TC_OK);
            assert_int_equal(
                random_tensor(&r, cpu, &pos, TC_DTYPE_I32, TC_SHAPE(n), 0, 131072, &pv), TC_OK);
            assert_int_equal(tc_rope(&q, &k, &pos, &c), TC_OK);
            ref_rope(qv, n, H, pos.data, &c);
            ref_rope(kv, n, KV, pos.data, &c);
            double *qg = tensor_values(&q), *kg = tensor_values(&k);
            EXPECT_CLOSE(qg, qv, n * H * c.head_dim, tolerance(dt), "rope q variant %d %s", variant,
                         tc_dtype_name(dt));
            EXPECT_CLOSE(kg, kv, n * KV * c.head_dim, tolerance(dt), "rope k variant %d %s",
                         variant, tc_dtype_name(dt));
            free(qg), free(kg), free(qv), free(kv), free(pv);
            tc_tensor_deinit(&q), tc_tensor_deinit(&k), tc_tensor_deinit(&pos);
        }
}

static void matmul_every_weight_dtype_and_odd_shapes(void **state)
{
    (void)state;
    rng_t r = { 6 };
    const tc_dtype *ws = weight_dtypes;
    const int64_t shapes[][3] = {
        { 1, 1, 1 }, { 3, 5, 3 }, { 127, 33, 127 }, { 2, 3, 4097 }, { 9, 127, 96 }
    };
    for (size_t wi = 0; wi < N_WEIGHT_DTYPES; wi++)
        for (size_t xi = 0; xi < 3; xi++)
            for (size_t si = 0; si < 5; si++) {
                int64_t m = shapes[si][0], n = shapes[si][1], k = shapes[si][2],
                        be = tc_dtype_block(ws[wi]);
                /* Block types: k a multiple of the block (the K types' odd counts of 256). */
                k = (k + be - 1) / be * be;
                double *xv, *wv;
                tc_tensor x, w, out;
                assert_int_equal(random_tensor(&r, cpu, &x, floats[xi], TC_SHAPE(m, k), -1, 1, &xv),
                                 TC_OK);
                assert_int_equal(random_tensor(&r, cpu, &w, ws[wi], TC_SHAPE(n, k), -1, 1, &wv),
                                 TC_OK);
                assert_int_equal(tc_tensor_init(&out, cpu, floats[xi], TC_SHAPE(m, n)), TC_OK);
                assert_int_equal(tc_matmul(&out, &x, &w), TC_OK);
                double *want = malloc(sizeof(double) * (size_t)(m * n)), *got = tensor_values(&out);
                ref_matmul(want, xv, wv, m, n, k);
                EXPECT_CLOSE(got, want, m * n, tolerance(floats[xi]),
                             "matmul x %s w %s %lldx%lldx%lld", tc_dtype_name(floats[xi]),
                             tc_dtype_name(ws[wi]), (long long)m, (long long)n, (long long)k);
                free(want), free(got), free(xv), free(wv);
                tc_tensor_deinit(&x), tc_tensor_deinit(&w), tc_tensor_deinit(&out);
            }
}

/* tc__quant_batch_split, the batched quantised products' shares of k and clusters, on a device
 * shaped like the H200 (132 SMs) whose resident clusters of 2, 3, 4 and 8 blocks are those that
 * cuOccupancyMaxActiveClusters reported there at one block an SM (66, 39, 30 and 15; those of
 * 5, 6 and 7 are set in between, not measured): the cases the host's measurements decided
 * (qweights.c). */
static int h200_fits(int64_t blocks, void *ctx)
{
    int *asked = ctx;
    assert_true(blocks >= 2 && blocks <= 8);
    asked[blocks]++;
    static const int n[9] = { 0, 0, 66, 39, 30, 24, 19, 16, 15 };
    return n[blocks];
}
static int no_fits(int64_t blocks, void *ctx)
{
    (void)blocks, (void)ctx;
    return -1;
}
/* tc__quant_batch_split of a product of dt on the H200's clusters (asked counts the
 * questions) takes `shares` shares of k in clusters of `cluster` (1: none). */
static void expect_split(tc_dtype dt, int64_t tiles, int64_t steps, int64_t wave, bool two,
                         int *asked, int64_t shares, int64_t cluster)
{
    tc__qmm_split sp = tc__quant_batch_split(dt, tiles, steps, wave, two, h200_fits, asked);
    assert_int_equal(sp.shares, shares);
    assert_int_equal(sp.cluster, cluster);
}
static void batched_products_split_k_as_measured(void **state)
{
    (void)state;
    int asked[9] = { 0 };
    tc__qmm_split sp;
    /* 4096 x 4096 at 64 rows: 4 shares fill the wave, whose 32 clusters of 4 find 30 places;
     * Q4_K takes 3 shares in clusters of 3 (two steps more), Q8_0 keeps 4 through ws. */
    expect_split(TC_DTYPE_Q4_K, 32, 16, 132, false, asked, 3, 3);
    assert_true(asked[4] == 1 && asked[3] == 1 && asked[2] == 0);
    expect_split(TC_DTYPE_Q4_1_G128, 32, 16, 132, false, asked, 3, 3);
    expect_split(TC_DTYPE_Q8_0, 32, 16, 132, false, asked, 4, 1);
    expect_split(TC_DTYPE_Q6_K, 32, 16, 132, false, asked, 4, 1);
    /* 4096 x 11008: 3 shares would be four steps more a block. */
    expect_split(TC_DTYPE_Q4_K, 32, 43, 132, false, asked, 4, 1);
    /* 11008 x 4096 at two blocks an SM (a wave of 264): 3 shares, not fewer. */
    expect_split(TC_DTYPE_Q4_K, 86, 16, 264, true, asked, 3, 1);
    /* The same at one block an SM: 3 shares in two waves; 2 shares' clusters would take two
     * waves of 8 steps against two of 6 plus ws. */
    expect_split(TC_DTYPE_Q5_K, 86, 16, 132, false, asked, 3, 1);
    /* Eight tiles (1000 rows): their 4 shares' 8 clusters of 4 fit at once. */
    expect_split(TC_DTYPE_Q6_K, 8, 16, 132, false, asked, 4, 4);
    /* Llama-3.2-1B's down product (2048 x 8192): 8 shares, whose 16 clusters of 8 find 15
     * places; 7 shares of 5 steps each (one more) in clusters of 7 fit. */
    expect_split(TC_DTYPE_Q4_K, 16, 32, 132, false, asked, 7, 7);
    /* 120 tiles fill the wave in one share: no question asked. No clusters on the device, or
     * none resident: the shares that fill the wave. */
    memset(asked, 0, sizeof asked);
    expect_split(TC_DTYPE_Q4_K, 120, 16, 132, false, asked, 1, 1);
    for (int i = 0; i < 9; i++)
        assert_int_equal(asked[i], 0);
    sp = tc__quant_batch_split(TC_DTYPE_Q4_K, 32, 16, 132, false, NULL, NULL);
    assert_true(sp.shares == 4 && sp.cluster == 1);
    sp = tc__quant_batch_split(TC_DTYPE_Q4_K, 32, 16, 132, false, no_fits, NULL);
    assert_true(sp.shares == 4 && sp.cluster == 1);
}

/* tc__qdot, the CPU products' inner loop: for every weight dtype, rows of random weights
 * against 1 to 4 random rows of x give each row's dot product with the weights as dequantised
 * (qblock.c) and summed in double, to within f32's rounding; the same bits for a row of x
 * alone and among others (a sequence's tokens do not depend on its batch), and from the
 * baseline build as from the one tc__qdot takes on this CPU (AVX2 where it has it). Rows of
 * part of a block and R out of 1..4 are refused. */
static void qdot_is_batch_invariant_and_the_same_on_every_build(void **state)
{
    (void)state;
    rng_t r = { 71 };
    const tc_dtype *ws = weight_dtypes;
    enum { W = 5 };
    for (size_t wi = 0; wi < N_WEIGHT_DTYPES; wi++) {
        tc_dtype dt = ws[wi];
        int64_t be = tc_dtype_block(dt), k = be > 1 ? 3 * be : 331; /* odd for the floats */
        double *wv, *xv;
        void *w = random_data(&r, dt, W * k, -1, 1, &wv);
        float *x = random_data(&r, TC_DTYPE_F32, 4 * k, -1, 1, &xv);
        const float *rows[4] = { x, x + k, x + 2 * k, x + 3 * k };
        float got[W][4], base[W][4], one[W][4];
        for (int R = 1; R <= 4; R++) {
            assert_true(tc__qdot(dt, w, W, rows, R, k, got));
            assert_true(tc__qdot_baseline(dt, w, W, rows, R, k, base));
            for (int i = 0; i < W; i++)
                for (int a = 0; a < R; a++) {
                    double want = 0.0, mag = 0.0;
                    for (int64_t e = 0; e < k; e++) {
                        want += xv[a * k + e] * wv[i * k + e];
                        mag += fabs(xv[a * k + e] * wv[i * k + e]);
                    }
                    if (!(fabs(got[i][a] - want) <= 1e-6 * mag))
                        fail_msg("qdot %s row %d of %d: %.9g, want %.9g", tc_dtype_name(dt), a, R,
                                 (double)got[i][a], want);
                    const float *alone[1] = { rows[a] };
                    assert_true(tc__qdot(dt, w, W, alone, 1, k, one));
                    if (memcmp(&got[i][a], &base[i][a], 4) || memcmp(&got[i][a], &one[i][0], 4))
                        fail_msg("qdot %s row %d of %d: %.9g, baseline build %.9g, alone %.9g",
                                 tc_dtype_name(dt), a, R, (double)got[i][a], (double)base[i][a],
                                 (double)one[i][0]);
                }
        }
        assert_false(tc__qdot(dt, w, W, rows, 0, k, got));
        assert_false(tc__qdot(dt, w, W, rows, 5, k, got));
        if (be > 1)
            assert_false(tc__qdot(dt, w, W, rows, 1, k - be / 2, got));
        free(w), free(wv), free(x), free(xv);
    }
}

/* A product's rows are the same bits in a batch of 9 (block types: each weight row dequantised
 * once for the batch) as each alone (one row: the weights read in place), for every weight
 * dtype: a sequence's tokens do not depend on its batch. */
static void matmul_rows_are_the_same_alone_and_in_a_batch(void **state)
{
    (void)state;
    rng_t r = { 73 };
    const tc_dtype *ws = weight_dtypes;
    const int64_t m = 9, n = 7;
    for (size_t wi = 0; wi < N_WEIGHT_DTYPES; wi++) {
        int64_t be = tc_dtype_block(ws[wi]), k = be > 1 ? 2 * be : 75;
        double *xv, *wv;
        tc_tensor x, w, out, x1, o1;
        assert_int_equal(random_tensor(&r, cpu, &x, TC_DTYPE_F32, TC_SHAPE(m, k), -1, 1, &xv),
                         TC_OK);
        assert_int_equal(random_tensor(&r, cpu, &w, ws[wi], TC_SHAPE(n, k), -1, 1, &wv), TC_OK);
        assert_int_equal(tc_tensor_init(&out, cpu, TC_DTYPE_F32, TC_SHAPE(m, n)), TC_OK);
        assert_int_equal(tc_tensor_init(&o1, cpu, TC_DTYPE_F32, TC_SHAPE(1, n)), TC_OK);
        assert_int_equal(tc_matmul(&out, &x, &w), TC_OK);
        for (int64_t i = 0; i < m; i++) {
            assert_int_equal(tc_tensor_slice(&x, 0, i, 1, &x1), TC_OK);
            assert_int_equal(tc_matmul(&o1, &x1, &w), TC_OK);
            if (memcmp((const float *)out.data + i * n, o1.data, (size_t)n * sizeof(float)))
                fail_msg("matmul %s: row %lld differs alone and in a batch of %lld",
                         tc_dtype_name(ws[wi]), (long long)i, (long long)m);
        }
        free(xv), free(wv);
        tc_tensor_deinit(&x), tc_tensor_deinit(&w), tc_tensor_deinit(&out), tc_tensor_deinit(&o1);
    }
}

static void matmul_is_the_same_on_one_and_many_threads(void **state)
{
    (void)state;
    rng_t r = { 7 };
    double *xv, *wv;
    tc_tensor x, w, o1, o4, x1, w1;
    assert_int_equal(random_tensor(&r, cpu, &x, TC_DTYPE_F32, TC_SHAPE(17, 300), -1, 1, &xv),
                     TC_OK);
    assert_int_equal(random_tensor(&r, cpu, &w, TC_DTYPE_BF16, TC_SHAPE(513, 300), -1, 1, &wv),
                     TC_OK);
    assert_int_equal(tc_tensor_wrap(&x1, cpu1, TC_DTYPE_F32, TC_SHAPE(17, 300), x.data), TC_OK);
    assert_int_equal(tc_tensor_wrap(&w1, cpu1, TC_DTYPE_BF16, TC_SHAPE(513, 300), w.data), TC_OK);
    assert_int_equal(tc_tensor_init(&o1, cpu1, TC_DTYPE_F32, TC_SHAPE(17, 513)), TC_OK);
    assert_int_equal(tc_tensor_init(&o4, cpu, TC_DTYPE_F32, TC_SHAPE(17, 513)), TC_OK);
    assert_int_equal(tc_matmul(&o1, &x1, &w1), TC_OK);
    assert_int_equal(tc_matmul(&o4, &x, &w), TC_OK);
    assert_memory_equal(o1.data, o4.data, 17 * 513 * 4);
    free(xv), free(wv);
    tc_tensor_deinit(&x), tc_tensor_deinit(&w), tc_tensor_deinit(&o1), tc_tensor_deinit(&o4);
}

static void linear_fuses_norm_swiglu_and_residual(void **state)
{
    (void)state;
    rng_t r = { 61 };
    const tc_dtype ws[] = { TC_DTYPE_F32,      TC_DTYPE_BF16,     TC_DTYPE_Q8_0, TC_DTYPE_Q4_0,
                            TC_DTYPE_Q4_1,     TC_DTYPE_Q5_1,     TC_DTYPE_Q3_K, TC_DTYPE_Q6_K,
                            TC_DTYPE_Q4_1_G64, TC_DTYPE_Q4_1_G128 };
    const int64_t shapes[][3] = { { 1, 1, 32 }, { 3, 5, 96 }, { 9, 33, 4097 }, { 2, 127, 64 } };
    for (size_t wi = 0; wi < sizeof ws / sizeof ws[0]; wi++)
        for (size_t xi = 0; xi < 3; xi++)
            for (size_t si = 0; si < 4; si++)
                for (int mode = 0; mode < 16; mode++) {
                    /* bit 3: the norm's weight given (quantised weights cannot fold it) */
                    bool swiglu = mode & 1, acc = mode & 2, norm = mode & 4, nwt = mode & 8;
                    if (nwt && !norm)
                        continue;
                    /* (Cases with a norm over quantised weights or with its weight draw from
                     * their own stream: the others keep the inputs they always had) */
                    rng_t own = { 7000 + (uint64_t)(wi * 100 + xi * 10 + si) };
                    rng_t *rr = nwt || (norm && tc_dtype_is_block(ws[wi])) ? &own : &r;
                    int64_t m = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
                    /* (nor do they take the one-output shape: one sum, whose cancellation
                     * the error relative to the largest output does not allow for) */
                    if (rr == &own && m * n == 1)
                        continue;
                    int64_t be = tc_dtype_block(ws[wi]);
                    k = (k + be - 1) / be * be;
                    /* gate * up of these random weights passes f16's largest value at 4097 */
                    if (floats[xi] == TC_DTYPE_F16 && swiglu && k > 1000)
                        continue;
                    double *xv, *wv, *ov;
                    tc_tensor x, w, out;
                    assert_int_equal(
                        random_tensor(rr, cpu, &x, floats[xi], TC_SHAPE(m, k), -1, 1, &xv), TC_OK);
                    assert_int_equal(random_tensor(rr, cpu, &w, ws[wi],
                                                   TC_SHAPE(swiglu ? 2 * n : n, k), -1, 1, &wv),
                                     TC_OK);
                    assert_int_equal(
                        random_tensor(rr, cpu, &out, floats[xi], TC_SHAPE(m, n), -1, 1, &ov),
                        TC_OK);
                    tc_tensor g;
                    double *gv = NULL;
                    if (nwt)
                        assert_int_equal(
                            random_tensor(rr, cpu, &g, floats[xi], TC_SHAPE(k), 0.5, 1.5, &gv),
                            TC_OK);
                    tc_linear_opts o = { .swiglu = swiglu,
                                         .accumulate = acc,
                                         .rms_norm = norm,
                                         .norm_eps = 1e-5f,
                                         .norm_weight = nwt ? &g : NULL };
                    assert_int_equal(tc_linear(&out, &x, &w, &o), TC_OK);
                    double *want = malloc(sizeof(double) * (size_t)(m * n)),
                           *got = tensor_values(&out),
                           *xn = norm ? ref_rms_rows(xv, m, k, 1e-5) : NULL;
                    for (int64_t i = 0; nwt && i < m * k; i++)
                        xn[i] *= gv[i % k];
                    ref_linear(want, norm ? xn : xv, wv, swiglu, acc ? ov : NULL, m, n, k);
                    EXPECT_CLOSE(got, want, m * n, tolerance(floats[xi]),
                                 "linear x %s w %s %lldx%lldx%lld swiglu %d acc %d norm %d "
                                 "weight %d",
                                 tc_dtype_name(floats[xi]), tc_dtype_name(ws[wi]), (long long)m,
                                 (long long)n, (long long)k, swiglu, acc, norm, nwt);
                    free(want), free(got), free(xv), free(wv), free(ov), free(xn), free(gv);
                    if (nwt)
                        tc_tensor_deinit(&g);
                    tc_tensor_deinit(&x), tc_tensor_deinit(&w), tc_tensor_deinit(&out);
                }
    /* Argument checks: the gate/up height, and aliasing. */
    tc_tensor x, w, out;
    assert_int_equal(tc_tensor_init(&x, cpu, TC_DTYPE_F32, TC_SHAPE(2, 8)), TC_OK);
    assert_int_equal(tc_tensor_init(&w, cpu, TC_DTYPE_F32, TC_SHAPE(6, 8)), TC_OK);
    assert_int_equal(tc_tensor_init(&out, cpu, TC_DTYPE_F32, TC_SHAPE(2, 6)), TC_OK);
    tc_linear_opts o = { .swiglu = true };
    assert_int_equal(tc_linear(&out, &x, &w, &o), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "twice out's width"));
    tc_tensor sq, self;
    assert_int_equal(tc_tensor_init(&sq, cpu, TC_DTYPE_F32, TC_SHAPE(8, 8)), TC_OK);
    assert_int_equal(tc_tensor_slice(&x, 1, 0, 8, &self), TC_OK);
    o = (tc_linear_opts){ .accumulate = true };
    assert_int_equal(tc_linear(&self, &x, &sq, &o), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "must not overlap"));
    assert_int_equal(tc_linear(&out, &x, &w, NULL), TC_OK);
    /* The fused norm: a real epsilon, and a norm weight only with rms_norm, as wide as x. */
    tc_tensor g7, g8;
    assert_int_equal(tc_tensor_init(&g7, cpu, TC_DTYPE_F32, TC_SHAPE(7)), TC_OK);
    assert_int_equal(tc_tensor_init(&g8, cpu, TC_DTYPE_F32, TC_SHAPE(8)), TC_OK);
    o = (tc_linear_opts){ .norm_weight = &g8 };
    assert_int_equal(tc_linear(&out, &x, &w, &o), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "without rms_norm"));
    o = (tc_linear_opts){ .rms_norm = true, .norm_eps = 1e-5f, .norm_weight = &g7 };
    assert_int_equal(tc_linear(&out, &x, &w, &o), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "norm_weight"));
    o = (tc_linear_opts){ .rms_norm = true, .norm_eps = NAN };
    assert_int_equal(tc_linear(&out, &x, &w, &o), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "norm_eps"));
    tc_tensor_deinit(&g7), tc_tensor_deinit(&g8);
    tc_tensor_deinit(&x), tc_tensor_deinit(&w), tc_tensor_deinit(&out), tc_tensor_deinit(&sq);
}

/* tc_scale_columns against double products rounded once; then a norm folded into the weights
 * and normalised inside tc_linear equals the separate RMSNorm and product. */
static void scale_columns_folds_a_norm(void **state)
{
    (void)state;
    rng_t r = { 67 };
    for (size_t di = 0; di < 3; di++) {
        tc_dtype dt = floats[di];
        int64_t n = 37, k = 129;
        double *wv, *sv;
        tc_tensor w, s;
        assert_int_equal(random_tensor(&r, cpu, &w, dt, TC_SHAPE(n, k), -1, 1, &wv), TC_OK);
        assert_int_equal(random_tensor(&r, cpu, &s, dt, TC_SHAPE(k), 0.5, 1.5, &sv), TC_OK);
        assert_int_equal(tc_scale_columns(&w, &s), TC_OK);
        double *got = tensor_values(&w), *want = malloc(sizeof(double) * (size_t)(n * k));
        for (int64_t i = 0; i < n * k; i++)
            want[i] = wv[i] * sv[i % k];
        EXPECT_CLOSE(got, want, n * k, tolerance(dt), "scale_columns %s", tc_dtype_name(dt));
        free(got), free(want), free(wv), free(sv);
        tc_tensor_deinit(&w), tc_tensor_deinit(&s);
    }
    /* Folded norm == norm then product (f32: only rounding differs). */
    int64_t m = 3, n = 19, k = 200;
    double *xv, *wv, *gv;
    tc_tensor x, w, g, h, a, b;
    assert_int_equal(random_tensor(&r, cpu, &x, TC_DTYPE_F32, TC_SHAPE(m, k), -2, 2, &xv), TC_OK);
    assert_int_equal(random_tensor(&r, cpu, &w, TC_DTYPE_F32, TC_SHAPE(n, k), -1, 1, &wv), TC_OK);
    assert_int_equal(random_tensor(&r, cpu, &g, TC_DTYPE_F32, TC_SHAPE(k), 0.5, 1.5, &gv), TC_OK);
    assert_int_equal(tc_tensor_init(&h, cpu, TC_DTYPE_F32, TC_SHAPE(m, k)), TC_OK);
    assert_int_equal(tc_tensor_init(&a, cpu, TC_DTYPE_F32, TC_SHAPE(m, n)), TC_OK);
    assert_int_equal(tc_tensor_init(&b, cpu, TC_DTYPE_F32, TC_SHAPE(m, n)), TC_OK);
    assert_int_equal(tc_rmsnorm(&h, NULL, &x, &g, 1e-6f), TC_OK);
    assert_int_equal(tc_matmul(&a, &h, &w), TC_OK);
    assert_int_equal(tc_scale_columns(&w, &g), TC_OK);
    tc_linear_opts o = { .rms_norm = true, .norm_eps = 1e-6f };
    assert_int_equal(tc_linear(&b, &x, &w, &o), TC_OK);
    double *av = tensor_values(&a), *bv = tensor_values(&b);
    EXPECT_CLOSE(bv, av, m * n, 1e-5, "folded norm");
    /* The norm without a weight (what a folded layer's prompt pass runs). */
    assert_int_equal(tc_rmsnorm(&h, NULL, &x, NULL, 1e-6f), TC_OK);
    double *hv = tensor_values(&h), *hw = ref_rms_rows(xv, m, k, 1e-6);
    EXPECT_CLOSE(hv, hw, m * k, 1e-5, "rmsnorm without a weight");
    free(hv), free(hw);
    free(av), free(bv), free(xv), free(wv), free(gv);
    /* Argument checks: s's length and dtype. */
    tc_tensor s3, sb;
    assert_int_equal(tc_tensor_init(&s3, cpu, TC_DTYPE_F32, TC_SHAPE(3)), TC_OK);
    assert_int_equal(tc_scale_columns(&w, &s3), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "w's width"));
    assert_int_equal(tc_tensor_init(&sb, cpu, TC_DTYPE_BF16, TC_SHAPE(k)), TC_OK);
    assert_int_equal(tc_scale_columns(&w, &sb), TC_ERR_INVALID_ARGUMENT);
    tc_tensor_deinit(&s3), tc_tensor_deinit(&sb);
    tc_tensor_deinit(&x), tc_tensor_deinit(&w), tc_tensor_deinit(&g), tc_tensor_deinit(&h);
    tc_tensor_deinit(&a), tc_tensor_deinit(&b);
}

static void swiglu_and_softmax_on_strided_rows(void **state)
{
    (void)state;
    rng_t r = { 8 };
    for (size_t di = 0; di < 3; di++)
        for (size_t si = 0; si < 4; si++) {
            tc_dtype dt = floats[di];
            int64_t n = 3, f = odd[si];
            double *gu, *xv;
            tc_tensor both, gate, up, out, x, sm;
            /* gate and up are the two halves of one [n, 2f] product, as a fused layer makes */
            assert_int_equal(random_tensor(&r, cpu, &both, dt, TC_SHAPE(n, 2 * f), -4, 4, &gu),
                             TC_OK);
            assert_int_equal(tc_tensor_slice(&both, 1, 0, f, &gate), TC_OK);
            assert_int_equal(tc_tensor_slice(&both, 1, f, f, &up), TC_OK);
            assert_int_equal(tc_tensor_init(&out, cpu, dt, TC_SHAPE(n, f)), TC_OK);
            assert_int_equal(tc_swiglu(&out, &gate, &up), TC_OK);
            double *got = tensor_values(&out), *want = malloc(sizeof(double) * (size_t)(n * f));
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < f; j++) {
                    double g = gu[i * 2 * f + j], u = gu[i * 2 * f + f + j];
                    want[i * f + j] = g / (1 + exp(-g)) * u;
                }
            EXPECT_CLOSE(got, want, n * f, tolerance(dt), "swiglu %s f=%lld", tc_dtype_name(dt),
                         (long long)f);
            free(got), free(want);
            assert_int_equal(random_tensor(&r, cpu, &x, dt, TC_SHAPE(n, f), -30, 30, &xv), TC_OK);
            assert_int_equal(tc_tensor_init(&sm, cpu, dt, TC_SHAPE(n, f)), TC_OK);
            assert_int_equal(tc_softmax(&sm, &x), TC_OK);
            assert_int_equal(tc_softmax(&x, &x), TC_OK); /* in place gives the same */
            got = tensor_values(&sm);
            double *inplace = tensor_values(&x);
            want = malloc(sizeof(double) * (size_t)(n * f));
            for (int64_t i = 0; i < n; i++) {
                double mx = -INFINITY, s = 0;
                for (int64_t j = 0; j < f; j++)
                    mx = fmax(mx, xv[i * f + j]);
                for (int64_t j = 0; j < f; j++)
                    s += exp(xv[i * f + j] - mx);
                for (int64_t j = 0; j < f; j++)
                    want[i * f + j] = exp(xv[i * f + j] - mx) / s;
            }
            EXPECT_CLOSE(got, want, n * f, tolerance(dt), "softmax %s f=%lld", tc_dtype_name(dt),
                         (long long)f);
            assert_memory_equal(got, inplace, sizeof(double) * (size_t)(n * f));
            free(got), free(want), free(inplace), free(gu), free(xv);
            tc_tensor_deinit(&both), tc_tensor_deinit(&out), tc_tensor_deinit(&x),
                tc_tensor_deinit(&sm);
        }
}

/* A linear layer's bias added to every row, on rows strided as the q, k and v parts of one
 * fused product are: the sum rounded once to the rows' dtype; a bias of another width or
 * dtype is refused. */
static void add_bias_on_strided_rows(void **state)
{
    (void)state;
    rng_t r = { 29 };
    for (size_t di = 0; di < 3; di++) {
        tc_dtype dt = floats[di];
        int64_t n = 5, wide = 40, d = 24;
        double *xv, *bv;
        tc_tensor all, x, bias;
        assert_int_equal(random_tensor(&r, cpu, &all, dt, TC_SHAPE(n, wide), -2, 2, &xv), TC_OK);
        assert_int_equal(random_tensor(&r, cpu, &bias, dt, TC_SHAPE(d), -2, 2, &bv), TC_OK);
        assert_int_equal(tc_tensor_slice(&all, 1, 8, d, &x), TC_OK);
        assert_int_equal(tc_add_bias(&x, &bias), TC_OK);
        double *got = tensor_values(&all);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 8; j < 8 + d; j++)
                xv[i * wide + j] += bv[j - 8];
        EXPECT_CLOSE(got, xv, n * wide, tolerance(dt), "add_bias %s", tc_dtype_name(dt));
        free(got), free(xv), free(bv);
        tc_tensor_deinit(&bias);
        assert_int_equal(tc_tensor_init(&bias, cpu, dt, TC_SHAPE(d + 1)), TC_OK);
        assert_int_equal(tc_add_bias(&x, &bias), TC_ERR_INVALID_ARGUMENT);
        tc_tensor_deinit(&bias);
        assert_int_equal(tc_tensor_init(&bias, cpu,
                                        dt == TC_DTYPE_F32 ? TC_DTYPE_BF16 : TC_DTYPE_F32,
                                        TC_SHAPE(d)),
                         TC_OK);
        assert_int_equal(tc_add_bias(&x, &bias), TC_ERR_INVALID_ARGUMENT);
        tc_tensor_deinit(&bias), tc_tensor_deinit(&all);
    }
}

static void convert_between_float_dtypes(void **state)
{
    (void)state;
    rng_t r = { 9 };
    /* to FP8 E4M3 and back: each element as the scalar conversion rounds it */
    for (size_t a = 0; a < 3; a++) {
        int64_t n = 3, f = 127;
        double *xv;
        tc_tensor x, e8, back;
        assert_int_equal(random_tensor(&r, cpu, &x, floats[a], TC_SHAPE(n, f), -500, 500, &xv),
                         TC_OK);
        assert_int_equal(tc_tensor_init(&e8, cpu, TC_DTYPE_F8E4M3, TC_SHAPE(n, f)), TC_OK);
        assert_int_equal(tc_tensor_init(&back, cpu, floats[a], TC_SHAPE(n, f)), TC_OK);
        assert_int_equal(tc_convert(&e8, &x), TC_OK);
        assert_int_equal(tc_convert(&back, &e8), TC_OK);
        double *bv = tensor_values(&back);
        for (int64_t i = 0; i < n * f; i++) {
            uint8_t want = tc__f32_to_f8e4m3((float)xv[i]);
            assert_int_equal(((uint8_t *)e8.data)[i], want);
            assert_true(bv[i] == tc__f8e4m3_to_f32(want));
        }
        free(xv), free(bv);
        tc_tensor_deinit(&x), tc_tensor_deinit(&e8), tc_tensor_deinit(&back);
    }
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 3; b++) {
            int64_t n = 3, f = 127;
            double *xv;
            tc_tensor x, out;
            assert_int_equal(random_tensor(&r, cpu, &x, floats[a], TC_SHAPE(n, f), -3, 3, &xv),
                             TC_OK);
            assert_int_equal(tc_tensor_init(&out, cpu, floats[b], TC_SHAPE(n, f)), TC_OK);
            assert_int_equal(tc_convert(&out, &x), TC_OK);
            double *got = tensor_values(&out);
            /* The source values are exact in their dtype; the result rounds once to out's. */
            EXPECT_CLOSE(got, xv, n * f, tolerance(floats[b]), "convert %s -> %s",
                         tc_dtype_name(floats[a]), tc_dtype_name(floats[b]));
            free(got), free(xv);
            tc_tensor_deinit(&out);
            assert_int_equal(tc_tensor_init(&out, cpu, floats[b], TC_SHAPE(n, f + 1)), TC_OK);
            assert_int_equal(tc_convert(&out, &x), TC_ERR_INVALID_ARGUMENT);
            tc_tensor_deinit(&out), tc_tensor_deinit(&x);
        }
}

static void attention_prefill_and_decode_over_paged_cache(void **state)
{
    (void)state;
    rng_t r = { 9 };
    struct {
        int64_t H, KV, hd, bs;
    } shapes[] = { { 4, 4, 16, 16 }, { 6, 2, 7, 4 }, { 8, 1, 64, 16 }, { 3, 3, 128, 5 } };
    for (size_t si = 0; si < 4; si++)
        for (size_t di = 0; di < 3; di++) {
            tc_dtype dt = floats[di];
            int64_t len[] = { 1, 3, 127, 300 }, m[] = { 1, 3, 20, 300 };
            paged_case c;
            assert_int_equal(paged_build(&c, &r, cpu, dt, 4, len, m, shapes[si].H, shapes[si].KV,
                                         shapes[si].hd, shapes[si].bs),
                             TC_OK);
            double scale = 1.0 / sqrt((double)c.hd);
            tc_tensor out;
            assert_int_equal(tc_tensor_init(&out, cpu, dt, TC_SHAPE(c.n_tokens, c.H, c.hd)), TC_OK);
            assert_int_equal(tc_attention_prefill(&out, &c.tq, &c.tk, &c.tv, &c.ttable, &c.tlens,
                                                  &c.tqstart, (float)scale),
                             TC_OK);
            double *got = tensor_values(&out), *want = paged_reference(&c, scale);
            EXPECT_CLOSE(got, want, c.n_tokens * c.H * c.hd, tolerance(dt),
                         "prefill %s H=%lld KV=%lld hd=%lld", tc_dtype_name(dt), (long long)c.H,
                         (long long)c.KV, (long long)c.hd);
            free(got), free(want);
            tc_tensor_deinit(&out);
            paged_free(&c);

            /* decode: one query per sequence */
            int64_t ones[] = { 1, 1, 1, 1 };
            assert_int_equal(paged_build(&c, &r, cpu, dt, 4, len, ones, shapes[si].H, shapes[si].KV,
                                         shapes[si].hd, shapes[si].bs),
                             TC_OK);
            assert_int_equal(tc_tensor_init(&out, cpu, dt, TC_SHAPE(4, c.H, c.hd)), TC_OK);
            assert_int_equal(
                tc_attention_decode(&out, &c.tq, &c.tk, &c.tv, &c.ttable, &c.tlens, (float)scale),
                TC_OK);
            got = tensor_values(&out);
            want = paged_reference(&c, scale);
            EXPECT_CLOSE(got, want, 4 * c.H * c.hd, tolerance(dt), "decode %s", tc_dtype_name(dt));
            free(got), free(want);
            /* with the early-read option the same (the CPU has nothing to overlap); a count
             * below -1 is refused */
            tc_attention_opts early = { .fresh_rows = 1 };
            assert_int_equal(tc_attention_decode_ex(&out, &c.tq, &c.tk, &c.tv, &c.ttable, &c.tlens,
                                                    (float)scale, &early),
                             TC_OK);
            got = tensor_values(&out);
            want = paged_reference(&c, scale);
            EXPECT_CLOSE(got, want, 4 * c.H * c.hd, tolerance(dt), "decode_ex %s",
                         tc_dtype_name(dt));
            free(got), free(want);
            early.fresh_rows = -2;
            assert_int_equal(tc_attention_decode_ex(&out, &c.tq, &c.tk, &c.tv, &c.ttable, &c.tlens,
                                                    (float)scale, &early),
                             TC_ERR_INVALID_ARGUMENT);
            assert_non_null(strstr(tc_last_error(), "fresh_rows"));
            /* a bad block id is reported, never followed */
            ((int32_t *)c.ttable.data)[c.max_blocks * 2] = (int32_t)c.n_blocks;
            assert_int_equal(
                tc_attention_decode(&out, &c.tq, &c.tk, &c.tv, &c.ttable, &c.tlens, (float)scale),
                TC_ERR_INVALID_ARGUMENT);
            assert_non_null(strstr(tc_last_error(), "block_table[2, 0]"));
            tc_tensor_deinit(&out);
            paged_free(&c);
        }
}

/* Sliding-window attention: prefill and decode see only the last `window` positions up to
 * their own (a window of one: the query's own token; a window past the longest sequence: all
 * of them); a negative window is refused. */
static void attention_with_a_sliding_window(void **state)
{
    (void)state;
    rng_t r = { 23 };
    const int32_t windows[] = { 1, 5, 64, 1000 };
    for (size_t wi = 0; wi < 4; wi++)
        for (size_t di = 0; di < 3; di++) {
            tc_dtype dt = floats[di];
            int64_t len[] = { 1, 9, 127, 300 }, m[] = { 1, 9, 20, 300 }, ones[] = { 1, 1, 1, 1 };
            tc_attention_opts opts = { .fresh_rows = -1, .window = windows[wi] };
            for (int decode = 0; decode < 2; decode++) {
                paged_case c;
                assert_int_equal(
                    paged_build(&c, &r, cpu, dt, 4, len, decode ? ones : m, 6, 2, 16, 16), TC_OK);
                double scale = 1.0 / sqrt((double)c.hd);
                tc_tensor out;
                assert_int_equal(tc_tensor_init(&out, cpu, dt, TC_SHAPE(c.n_tokens, c.H, c.hd)),
                                 TC_OK);
                tc_status st =
                    decode ? tc_attention_decode_ex(&out, &c.tq, &c.tk, &c.tv, &c.ttable, &c.tlens,
                                                    (float)scale, &opts)
                           : tc_attention_prefill_ex(&out, &c.tq, &c.tk, &c.tv, &c.ttable, &c.tlens,
                                                     &c.tqstart, (float)scale, &opts);
                assert_int_equal(st, TC_OK);
                double *got = tensor_values(&out),
                       *want = paged_reference_window(&c, scale, windows[wi]);
                EXPECT_CLOSE(got, want, c.n_tokens * c.H * c.hd, tolerance(dt), "%s %s window %d",
                             decode ? "decode" : "prefill", tc_dtype_name(dt), (int)windows[wi]);
                free(got), free(want);
                tc_attention_opts bad = { .fresh_rows = -1, .window = -1 };
                st = decode ? tc_attention_decode_ex(&out, &c.tq, &c.tk, &c.tv, &c.ttable, &c.tlens,
                                                     (float)scale, &bad)
                            : tc_attention_prefill_ex(&out, &c.tq, &c.tk, &c.tv, &c.ttable,
                                                      &c.tlens, &c.tqstart, (float)scale, &bad);
                assert_int_equal(st, TC_ERR_INVALID_ARGUMENT);
                assert_non_null(strstr(tc_last_error(), "window"));
                tc_tensor_deinit(&out);
                paged_free(&c);
            }
        }
}

/* Caches of FP8 E4M3 under queries of every float dtype: the same reference over the values
 * the caches hold (of size 1, and of size 0.01 where FP8 is subnormal); a v cache of another
 * dtype than k's is refused. */
static void attention_over_fp8_caches(void **state)
{
    (void)state;
    rng_t r = { 19 };
    for (size_t di = 0; di < 3; di++)
        for (int ai = 0; ai < 2; ai++) {
            tc_dtype dt = floats[di];
            double amp = ai ? 0.01 : 1.0, scale = 1.0 / sqrt(64.0);
            int64_t len[] = { 1, 40, 300 }, m[] = { 1, 40, 7 }, ones[] = { 1, 1, 1 };
            paged_case c;
            tc_tensor out;
            assert_int_equal(
                paged_build_kv(&c, &r, cpu, dt, TC_DTYPE_F8E4M3, amp, 3, len, m, 8, 2, 64, 16),
                TC_OK);
            assert_int_equal(tc_tensor_init(&out, cpu, dt, TC_SHAPE(c.n_tokens, 8, 64)), TC_OK);
            assert_int_equal(tc_attention_prefill(&out, &c.tq, &c.tk, &c.tv, &c.ttable, &c.tlens,
                                                  &c.tqstart, (float)scale),
                             TC_OK);
            double *got = tensor_values(&out), *want = paged_reference(&c, scale);
            EXPECT_CLOSE(got, want, c.n_tokens * 8 * 64, tolerance(dt), "prefill %s, fp8 +-%g",
                         tc_dtype_name(dt), amp);
            free(got), free(want);
            tc_tensor_deinit(&out);
            paged_free(&c);
            assert_int_equal(
                paged_build_kv(&c, &r, cpu, dt, TC_DTYPE_F8E4M3, amp, 3, len, ones, 8, 2, 64, 16),
                TC_OK);
            assert_int_equal(tc_tensor_init(&out, cpu, dt, TC_SHAPE(3, 8, 64)), TC_OK);
            assert_int_equal(
                tc_attention_decode(&out, &c.tq, &c.tk, &c.tv, &c.ttable, &c.tlens, (float)scale),
                TC_OK);
            got = tensor_values(&out);
            want = paged_reference(&c, scale);
            EXPECT_CLOSE(got, want, 3 * 8 * 64, tolerance(dt), "decode %s, fp8 +-%g",
                         tc_dtype_name(dt), amp);
            free(got), free(want);
            assert_int_equal(
                tc_attention_decode(&out, &c.tq, &c.tk, &c.tq, &c.ttable, &c.tlens, (float)scale),
                TC_ERR_INVALID_ARGUMENT);
            assert_non_null(strstr(tc_last_error(), "v_cache"));
            tc_tensor_deinit(&out);
            paged_free(&c);
        }
}

/* Sliding windows and FP8 scales: prefill chunks and decodes of several head sizes against the
 * plain reference. Each sequence's blocks before its first query's window point at a block of
 * NaN, as in a cache that freed them: an op that read one would return NaN (shown first with
 * the window off). An FP8 cache with per-head scales reads code * scale. */
static void attention_window_and_scales(void **state)
{
    (void)state;
    rng_t r = { 23 };
    struct {
        int64_t H, KV, hd, bs, window;
    } shapes[] = {
        { 8, 2, 80, 16, 37 }, { 4, 4, 96, 5, 200 }, { 6, 3, 24, 16, 1 }, { 8, 8, 64, 7, 64 }
    };
    for (size_t si = 0; si < 4; si++)
        for (size_t di = 0; di < 3; di++)
            for (int f8 = 0; f8 < 2; f8++) {
                tc_dtype dt = floats[di], kt = f8 ? TC_DTYPE_F8E4M3 : dt;
                int64_t H = shapes[si].H, KV = shapes[si].KV, hd = shapes[si].hd,
                        W = shapes[si].window;
                double scale = 1.0 / sqrt((double)hd), ksd[8], vsd[8];
                float ksf[8], vsf[8];
                for (int64_t h = 0; h < KV; h++) {
                    ksf[h] = (float)rng_uniform(&r, 0.25, 8),
                    vsf[h] = (float)rng_uniform(&r, 0.25, 8);
                    ksd[h] = ksf[h], vsd[h] = vsf[h];
                }
                tc_tensor tks, tvs;
                assert_int_equal(tc_tensor_init_from_host(&tks, cpu, TC_DTYPE_F32, TC_SHAPE(KV),
                                                          ksf, sizeof(float) * (size_t)KV),
                                 TC_OK);
                assert_int_equal(tc_tensor_init_from_host(&tvs, cpu, TC_DTYPE_F32, TC_SHAPE(KV),
                                                          vsf, sizeof(float) * (size_t)KV),
                                 TC_OK);
                tc_attention_opts o = { .fresh_rows = -1,
                                        .window = (int32_t)W,
                                        .k_scale = f8 ? &tks : NULL,
                                        .v_scale = f8 ? &tvs : NULL };
                for (int dec = 0; dec < 2; dec++) {
                    int64_t len[] = { 3, 150, 500 }, m[] = { 3, 40, 129 }, ones[] = { 1, 1, 1 };
                    paged_case c;
                    assert_int_equal(paged_build_kv(&c, &r, cpu, dt, kt, 1.0, 3, len,
                                                    dec ? ones : m, H, KV, hd, shapes[si].bs),
                                     TC_OK);
                    assert_int_equal(paged_forget_before_window(&c, W), TC_OK);
                    tc_tensor out;
                    assert_int_equal(tc_tensor_init(&out, cpu, dt, TC_SHAPE(c.n_tokens, H, hd)),
                                     TC_OK);
                    tc_attention_opts none = o;
                    none.window = 0;
                    assert_int_equal(
                        dec ? tc_attention_decode_ex(&out, &c.tq, &c.tk, &c.tv, &c.ttable, &c.tlens,
                                                     (float)scale, &none)
                            : tc_attention_prefill_ex(&out, &c.tq, &c.tk, &c.tv, &c.ttable,
                                                      &c.tlens, &c.tqstart, (float)scale, &none),
                        TC_OK);
                    double *got = tensor_values(&out),
                           *want =
                               paged_reference_ex(&c, scale, W, f8 ? ksd : NULL, f8 ? vsd : NULL);
                    assert_true(rel_error(got, want, c.n_tokens * H * hd) == INFINITY);
                    free(got);
                    assert_int_equal(
                        dec ? tc_attention_decode_ex(&out, &c.tq, &c.tk, &c.tv, &c.ttable, &c.tlens,
                                                     (float)scale, &o)
                            : tc_attention_prefill_ex(&out, &c.tq, &c.tk, &c.tv, &c.ttable,
                                                      &c.tlens, &c.tqstart, (float)scale, &o),
                        TC_OK);
                    got = tensor_values(&out);
                    EXPECT_CLOSE(got, want, c.n_tokens * H * hd, tolerance(dt),
                                 "%s %s, %s cache, hd %lld, window %lld",
                                 dec ? "decode" : "prefill", tc_dtype_name(dt), tc_dtype_name(kt),
                                 (long long)hd, (long long)W);
                    free(got), free(want);
                    tc_tensor_deinit(&out);
                    paged_free(&c);
                }
                o.window = -1;
                tc_tensor dummy;
                assert_int_equal(tc_tensor_init(&dummy, cpu, dt, TC_SHAPE(1, H, hd)), TC_OK);
                int64_t l1[] = { 4 }, m1[] = { 1 };
                paged_case c;
                assert_int_equal(paged_build_kv(&c, &r, cpu, dt, kt, 1.0, 1, l1, m1, H, KV, hd, 16),
                                 TC_OK);
                assert_int_equal(tc_attention_decode_ex(&dummy, &c.tq, &c.tk, &c.tv, &c.ttable,
                                                        &c.tlens, 1.0f, &o),
                                 TC_ERR_INVALID_ARGUMENT);
                assert_non_null(strstr(tc_last_error(), "window"));
                paged_free(&c);
                tc_tensor_deinit(&dummy), tc_tensor_deinit(&tks), tc_tensor_deinit(&tvs);
            }
}

/* tc_kv_scales: per kv head the power of two 2^(ceil(log2 amax) - 5) (1 for a head of zeros);
 * the FP8 store with them holds each value divided by its head's scale, rounded once (and
 * saturated); tc_rope_store_ex is tc_rope then tc_attention_store_ex, bit for bit. */
static void kv_scales_and_scaled_stores(void **state)
{
    (void)state;
    rng_t r = { 29 };
    const int64_t n = 5, KV = 4, hd = 8, row = KV * hd;
    const double amp[4] = { 300.0, 0.0, 0.003, 1.0 }; /* head 3 peaks at exactly 1: scale 1/32 */
    uint16_t kb[5 * 32], vb[5 * 32];
    float kf[5 * 32], vf[5 * 32];
    for (int64_t i = 0; i < n * row; i++) {
        double a = amp[(i % row) / hd];
        kf[i] = tc__bf16_to_f32(kb[i] = tc__f32_to_bf16((float)rng_uniform(&r, -a, a)));
        vf[i] = tc__bf16_to_f32(vb[i] = tc__f32_to_bf16((float)rng_uniform(&r, -a, a)));
    }
    kf[3 * row + 3 * hd + 1] = 1.0f, kb[3 * row + 3 * hd + 1] = tc__f32_to_bf16(1.0f);
    tc_tensor k, v, ks, vs;
    assert_int_equal(
        tc_tensor_init_from_host(&k, cpu, TC_DTYPE_BF16, TC_SHAPE(n, KV, hd), kb, sizeof kb),
        TC_OK);
    assert_int_equal(
        tc_tensor_init_from_host(&v, cpu, TC_DTYPE_BF16, TC_SHAPE(n, KV, hd), vb, sizeof vb),
        TC_OK);
    assert_int_equal(tc_tensor_init(&ks, cpu, TC_DTYPE_F32, TC_SHAPE(KV)), TC_OK);
    assert_int_equal(tc_tensor_init(&vs, cpu, TC_DTYPE_F32, TC_SHAPE(KV)), TC_OK);
    assert_int_equal(tc_kv_scales(&ks, &vs, &k, &v), TC_OK);
    const float *ksv = ks.data, *vsv = vs.data;
    for (int64_t h = 0; h < KV; h++) {
        double am[2] = { 0, 0 };
        for (int64_t i = 0; i < n; i++)
            for (int64_t d = 0; d < hd; d++) {
                am[0] = fmax(am[0], fabs(kf[i * row + h * hd + d]));
                am[1] = fmax(am[1], fabs(vf[i * row + h * hd + d]));
            }
        for (int c = 0; c < 2; c++) {
            double want = am[c] > 0 ? ldexp(1.0, (int)ceil(log2(am[c])) - 5) : 1.0;
            assert_true((c ? vsv : ksv)[h] == want);
            /* the batch's largest scaled value lands in (16, 32] */
            assert_true(am[c] == 0 || (am[c] / want > 16 && am[c] / want <= 32));
        }
    }
    assert_true(ksv[3] == 1.0f / 32);
    tc_tensor kc, vc, slots;
    assert_int_equal(tc_tensor_init(&kc, cpu, TC_DTYPE_F8E4M3, TC_SHAPE(2, 4, KV, hd)), TC_OK);
    assert_int_equal(tc_tensor_init(&vc, cpu, TC_DTYPE_F8E4M3, TC_SHAPE(2, 4, KV, hd)), TC_OK);
    int32_t sl[5] = { 7, 0, -1, 3, 5 };
    assert_int_equal(
        tc_tensor_init_from_host(&slots, cpu, TC_DTYPE_I32, TC_SHAPE(n), sl, sizeof sl), TC_OK);
    tc_attention_opts o = { .k_scale = &ks, .v_scale = &vs, .fresh_rows = -1 };
    assert_int_equal(tc_attention_store_ex(&kc, &vc, &k, &v, &slots, &o), TC_OK);
    for (int64_t i = 0; i < n; i++)
        for (int64_t e = 0; sl[i] >= 0 && e < row; e++) {
            assert_int_equal(((uint8_t *)kc.data)[sl[i] * row + e],
                             tc__f32_to_f8e4m3(kf[i * row + e] / ksv[e / hd]));
            assert_int_equal(((uint8_t *)vc.data)[sl[i] * row + e],
                             tc__f32_to_f8e4m3(vf[i * row + e] / vsv[e / hd]));
        }
    /* (what the scales are for: unscaled, head 2's values would be FP8 subnormals, 2^-9 apart:
     * 0.0031 would come back as 0.0039) */
    assert_true(tc__f8e4m3_to_f32(tc__f32_to_f8e4m3(0.0031f)) == 0.00390625f);
    tc_tensor bad;
    assert_int_equal(tc_tensor_init(&bad, cpu, TC_DTYPE_F32, TC_SHAPE(KV + 1)), TC_OK);
    o.v_scale = &bad;
    assert_int_equal(tc_attention_store_ex(&kc, &vc, &k, &v, &slots, &o), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "v_scale"));
    o.v_scale = &vs;
    /* rope_store_ex = rope, then store_ex */
    tc_rope_config rc = { .head_dim = (int)hd, .theta = 10000.0 };
    int32_t ps[5] = { 0, 9, 100, 3, 4000 };
    tc_tensor pos, q[2], kk[2], kc2, vc2;
    assert_int_equal(tc_tensor_init_from_host(&pos, cpu, TC_DTYPE_I32, TC_SHAPE(n), ps, sizeof ps),
                     TC_OK);
    assert_int_equal(tc_tensor_init(&kc2, cpu, TC_DTYPE_F8E4M3, TC_SHAPE(2, 4, KV, hd)), TC_OK);
    assert_int_equal(tc_tensor_init(&vc2, cpu, TC_DTYPE_F8E4M3, TC_SHAPE(2, 4, KV, hd)), TC_OK);
    memset(kc.data, 0, tc_tensor_bytes(&kc)), memset(vc.data, 0, tc_tensor_bytes(&vc));
    memset(kc2.data, 0, tc_tensor_bytes(&kc2)), memset(vc2.data, 0, tc_tensor_bytes(&vc2));
    for (int i = 0; i < 2; i++) {
        double *ig;
        rng_t rs = r;
        assert_int_equal(
            random_tensor(&rs, cpu, &q[i], TC_DTYPE_BF16, TC_SHAPE(n, 8, hd), -1, 1, &ig), TC_OK);
        free(ig);
        assert_int_equal(tc_tensor_init(&kk[i], cpu, TC_DTYPE_BF16, TC_SHAPE(n, KV, hd)), TC_OK);
        assert_int_equal(tc_tensor_copy(&kk[i], &k), TC_OK);
    }
    assert_int_equal(tc_rope_store_ex(&q[0], &kk[0], &v, &pos, &rc, &kc, &vc, &slots, &o), TC_OK);
    assert_int_equal(tc_rope(&q[1], &kk[1], &pos, &rc), TC_OK);
    assert_int_equal(tc_attention_store_ex(&kc2, &vc2, &kk[1], &v, &slots, &o), TC_OK);
    assert_memory_equal(q[0].data, q[1].data, tc_tensor_bytes(&q[0]));
    assert_memory_equal(kk[0].data, kk[1].data, tc_tensor_bytes(&kk[0]));
    assert_memory_equal(kc.data, kc2.data, tc_tensor_bytes(&kc));
    assert_memory_equal(vc.data, vc2.data, tc_tensor_bytes(&vc));
    for (int i = 0; i < 2; i++)
        tc_tensor_deinit(&q[i]), tc_tensor_deinit(&kk[i]);
    tc_tensor *all[] = { &k, &v, &ks, &vs, &kc, &vc, &slots, &bad, &pos, &kc2, &vc2 };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tc_tensor_deinit(all[i]);
}

static void attention_store_writes_slots(void **state)
{
    (void)state;
    rng_t r = { 10 };
    double *kv, *vv, *ig;
    tc_tensor kc, vc, k, v, slots;
    assert_int_equal(random_tensor(&r, cpu, &kc, TC_DTYPE_BF16, TC_SHAPE(3, 4, 2, 8), -1, 1, &ig),
                     TC_OK);
    free(ig);
    assert_int_equal(random_tensor(&r, cpu, &vc, TC_DTYPE_BF16, TC_SHAPE(3, 4, 2, 8), -1, 1, &ig),
                     TC_OK);
    free(ig);
    assert_int_equal(random_tensor(&r, cpu, &k, TC_DTYPE_BF16, TC_SHAPE(3, 2, 8), -1, 1, &kv),
                     TC_OK);
    assert_int_equal(random_tensor(&r, cpu, &v, TC_DTYPE_BF16, TC_SHAPE(3, 2, 8), -1, 1, &vv),
                     TC_OK);
    int32_t sl[3] = { 11, -1, 0 };
    assert_int_equal(
        tc_tensor_init_from_host(&slots, cpu, TC_DTYPE_I32, TC_SHAPE(3), sl, sizeof sl), TC_OK);
    assert_int_equal(tc_attention_store(&kc, &vc, &k, &v, &slots), TC_OK);
    double *kg = tensor_values(&kc), *vg = tensor_values(&vc);
    for (int i = 0; i < 16; i++) {
        assert_true(kg[11 * 16 + i] == kv[i] && vg[11 * 16 + i] == vv[i]);
        assert_true(kg[i] == kv[32 + i] && vg[i] == vv[32 + i]);
    }
    /* into FP8 caches: each element rounded once from k's and v's */
    tc_tensor kc8, vc8;
    assert_int_equal(tc_tensor_init(&kc8, cpu, TC_DTYPE_F8E4M3, TC_SHAPE(3, 4, 2, 8)), TC_OK);
    assert_int_equal(tc_tensor_init(&vc8, cpu, TC_DTYPE_F8E4M3, TC_SHAPE(3, 4, 2, 8)), TC_OK);
    assert_int_equal(tc_attention_store(&kc8, &vc8, &k, &v, &slots), TC_OK);
    for (int i = 0; i < 16; i++) {
        assert_int_equal(((uint8_t *)kc8.data)[11 * 16 + i], tc__f32_to_f8e4m3((float)kv[i]));
        assert_int_equal(((uint8_t *)vc8.data)[i], tc__f32_to_f8e4m3((float)vv[32 + i]));
    }
    assert_int_equal(tc_attention_store(&kc8, &vc, &k, &v, &slots), TC_ERR_INVALID_ARGUMENT);
    tc_tensor_deinit(&kc8), tc_tensor_deinit(&vc8);
    sl[1] = 12;
    assert_int_equal(tc_tensor_copy_from_host(&slots, sl, sizeof sl), TC_OK);
    assert_int_equal(tc_attention_store(&kc, &vc, &k, &v, &slots), TC_ERR_INVALID_ARGUMENT);
    free(kg), free(vg), free(kv), free(vv);
    tc_tensor_deinit(&kc), tc_tensor_deinit(&vc), tc_tensor_deinit(&k), tc_tensor_deinit(&v),
        tc_tensor_deinit(&slots);
}

/* tc_rope_store is tc_rope followed by tc_attention_store: every tensor comes out bit for bit
 * as the two ops leave it; its arguments are checked as theirs are. */
static void rope_store_is_rope_then_store(void **state)
{
    (void)state;
    rng_t r = { 12 };
    tc_rope_config c = { .head_dim = 8, .theta = 10000.0 };
    tc_tensor t[2][6];
    int32_t sl[3] = { 11, -1, 0 }, ps[3] = { 7, 0, 4095 };
    for (int set = 0; set < 2; set++) {
        rng_t rs = r;
        const int64_t shapes[6][4] = {
            { 3, 4, 8 }, { 3, 2, 8 }, { 3, 2, 8 }, { 3, 4, 2, 8 }, { 3, 4, 2, 8 }
        };
        for (int i = 0; i < 5; i++) {
            double *ig;
            assert_int_equal(random_tensor(&rs, cpu, &t[set][i], TC_DTYPE_BF16, i < 3 ? 3 : 4,
                                           shapes[i], -1, 1, &ig),
                             TC_OK);
            free(ig);
        }
        assert_int_equal(
            tc_tensor_init_from_host(&t[set][5], cpu, TC_DTYPE_I32, TC_SHAPE(3), sl, sizeof sl),
            TC_OK);
    }
    tc_tensor pos;
    assert_int_equal(tc_tensor_init_from_host(&pos, cpu, TC_DTYPE_I32, TC_SHAPE(3), ps, sizeof ps),
                     TC_OK);
    tc_tensor *a = t[0], *b = t[1];
    assert_int_equal(tc_rope_store(&a[0], &a[1], &a[2], &pos, &c, &a[3], &a[4], &a[5]), TC_OK);
    assert_int_equal(tc_rope(&b[0], &b[1], &pos, &c), TC_OK);
    assert_int_equal(tc_attention_store(&b[3], &b[4], &b[1], &b[2], &b[5]), TC_OK);
    for (int i = 0; i < 5; i++)
        assert_memory_equal(a[i].data, b[i].data, tc_tensor_bytes(&a[i]));
    assert_int_equal(tc_rope_store(&a[0], NULL, &a[2], &pos, &c, &a[3], &a[4], &a[5]),
                     TC_ERR_INVALID_ARGUMENT);
    assert_int_equal(tc_rope_store(&a[0], &a[1], &a[0], &pos, &c, &a[3], &a[4], &a[5]),
                     TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "tc_rope_store"));
    sl[1] = 12;
    assert_int_equal(tc_tensor_copy_from_host(&a[5], sl, sizeof sl), TC_OK);
    assert_int_equal(tc_rope_store(&a[0], &a[1], &a[2], &pos, &c, &a[3], &a[4], &a[5]),
                     TC_ERR_INVALID_ARGUMENT);
    for (int i = 0; i < 5; i++) /* nothing written before the bad slot was found */
        assert_memory_equal(a[i].data, b[i].data, tc_tensor_bytes(&a[i]));
    for (int set = 0; set < 2; set++)
        for (int i = 0; i < 6; i++)
            tc_tensor_deinit(&t[set][i]);
    tc_tensor_deinit(&pos);
}

/* tc_linear_pair is tc_linear of each weight on the same x (Q4_K and Q6_K, one row and three,
 * the RMSNorm and its weight): bit for bit; a bad second output is rejected before the first
 * is written. */
static void linear_pair_is_two_linears(void **state)
{
    (void)state;
    rng_t r = { 17 };
    int64_t k = 512;
    tc_tensor x, wa, wb, g, oa[2], ob[2];
    double *ig;
    assert_int_equal(random_tensor(&r, cpu, &wa, TC_DTYPE_Q4_K, TC_SHAPE(40, k), -1, 1, &ig),
                     TC_OK);
    free(ig);
    assert_int_equal(random_tensor(&r, cpu, &wb, TC_DTYPE_Q6_K, TC_SHAPE(24, k), -1, 1, &ig),
                     TC_OK);
    free(ig);
    assert_int_equal(random_tensor(&r, cpu, &g, TC_DTYPE_BF16, TC_SHAPE(k), 0.5, 1.5, &ig), TC_OK);
    free(ig);
    for (int64_t m = 1; m <= 3; m += 2) {
        assert_int_equal(random_tensor(&r, cpu, &x, TC_DTYPE_BF16, TC_SHAPE(m, k), -1, 1, &ig),
                         TC_OK);
        free(ig);
        for (int set = 0; set < 2; set++) {
            assert_int_equal(tc_tensor_init(&oa[set], cpu, TC_DTYPE_BF16, TC_SHAPE(m, 40)), TC_OK);
            assert_int_equal(tc_tensor_init(&ob[set], cpu, TC_DTYPE_BF16, TC_SHAPE(m, 24)), TC_OK);
        }
        tc_linear_opts o = { .rms_norm = true, .norm_eps = 1e-5f, .norm_weight = &g };
        assert_int_equal(tc_linear_pair(&oa[0], &ob[0], &x, &wa, &wb, &o), TC_OK);
        assert_int_equal(tc_linear(&oa[1], &x, &wa, &o), TC_OK);
        assert_int_equal(tc_linear(&ob[1], &x, &wb, &o), TC_OK);
        assert_memory_equal(oa[0].data, oa[1].data, tc_tensor_bytes(&oa[0]));
        assert_memory_equal(ob[0].data, ob[1].data, tc_tensor_bytes(&ob[0]));
        /* The second output one column short: an error naming the op, the first untouched. */
        memset(oa[0].data, 0x5a, tc_tensor_bytes(&oa[0]));
        memcpy(oa[1].data, oa[0].data, tc_tensor_bytes(&oa[0]));
        tc_tensor short_b;
        assert_int_equal(tc_tensor_slice(&ob[0], 1, 0, 23, &short_b), TC_OK);
        assert_int_equal(tc_linear_pair(&oa[0], &short_b, &x, &wa, &wb, &o),
                         TC_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(tc_last_error(), "tc_linear_pair"));
        assert_memory_equal(oa[0].data, oa[1].data, tc_tensor_bytes(&oa[0]));
        for (int set = 0; set < 2; set++)
            tc_tensor_deinit(&oa[set]), tc_tensor_deinit(&ob[set]);
        tc_tensor_deinit(&x);
    }
    tc_tensor_deinit(&wa), tc_tensor_deinit(&wb), tc_tensor_deinit(&g);
}

/* tc_linear_rope_store is tc_linear followed by tc_rope_store on the product's q, k and v
 * heads: bit for bit, and it rejects what neither takes (before writing anything). */
static void linear_rope_store_is_linear_then_rope_store(void **state)
{
    (void)state;
    rng_t r = { 13 };
    tc_rope_config c = { .head_dim = 8, .theta = 10000.0, .interleaved = true };
    int64_t H = 4, KV = 2, n = (H + 2 * KV) * 8, k = 24;
    tc_tensor x, w, out[2], kc[2], vc[2], pos, slots, q, kk, v, prod;
    double *ig;
    int32_t sl[3] = { 11, -1, 0 }, ps[3] = { 7, 0, 4095 };
    assert_int_equal(random_tensor(&r, cpu, &x, TC_DTYPE_BF16, TC_SHAPE(3, k), -1, 1, &ig), TC_OK);
    free(ig);
    assert_int_equal(random_tensor(&r, cpu, &w, TC_DTYPE_BF16, TC_SHAPE(n, k), -1, 1, &ig), TC_OK);
    free(ig);
    for (int set = 0; set < 2; set++) {
        rng_t rs = r;
        assert_int_equal(tc_tensor_init(&out[set], cpu, TC_DTYPE_BF16, TC_SHAPE(3, n)), TC_OK);
        assert_int_equal(
            random_tensor(&rs, cpu, &kc[set], TC_DTYPE_BF16, TC_SHAPE(3, 4, KV, 8), -1, 1, &ig),
            TC_OK);
        free(ig);
        assert_int_equal(
            random_tensor(&rs, cpu, &vc[set], TC_DTYPE_BF16, TC_SHAPE(3, 4, KV, 8), -1, 1, &ig),
            TC_OK);
        free(ig);
    }
    assert_int_equal(tc_tensor_init_from_host(&pos, cpu, TC_DTYPE_I32, TC_SHAPE(3), ps, sizeof ps),
                     TC_OK);
    assert_int_equal(
        tc_tensor_init_from_host(&slots, cpu, TC_DTYPE_I32, TC_SHAPE(3), sl, sizeof sl), TC_OK);
    tc_linear_opts o = { .rms_norm = true, .norm_eps = 1e-5f };
    assert_int_equal(tc_linear_rope_store(&out[0], &x, &w, &o, &pos, &c, &kc[0], &vc[0], &slots),
                     TC_OK);
    assert_int_equal(tc_linear(&out[1], &x, &w, &o), TC_OK);
    assert_int_equal(tc_tensor_reshape(&out[1], TC_SHAPE(3, H + 2 * KV, 8), &prod), TC_OK);
    assert_int_equal(tc_tensor_slice(&prod, 1, 0, H, &q), TC_OK);
    assert_int_equal(tc_tensor_slice(&prod, 1, H, KV, &kk), TC_OK);
    assert_int_equal(tc_tensor_slice(&prod, 1, H + KV, KV, &v), TC_OK);
    assert_int_equal(tc_rope_store(&q, &kk, &v, &pos, &c, &kc[1], &vc[1], &slots), TC_OK);
    assert_memory_equal(out[0].data, out[1].data, tc_tensor_bytes(&out[0]));
    assert_memory_equal(kc[0].data, kc[1].data, tc_tensor_bytes(&kc[0]));
    assert_memory_equal(vc[0].data, vc[1].data, tc_tensor_bytes(&vc[0]));
    /* Rejected: SwiGLU, columns that are not whole heads, a head_dim the caches do not have,
     * a bad slot; out and the caches stay as they were. */
    memset(out[0].data, 0x5a, tc_tensor_bytes(&out[0]));
    memcpy(out[1].data, out[0].data, tc_tensor_bytes(&out[0]));
    tc_linear_opts sw = { .swiglu = true };
    assert_int_equal(tc_linear_rope_store(&out[0], &x, &w, &sw, &pos, &c, &kc[0], &vc[0], &slots),
                     TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "tc_linear_rope_store"));
    tc_tensor narrow;
    assert_int_equal(tc_tensor_slice(&w, 0, 0, n - 4, &narrow), TC_OK);
    tc_tensor out_narrow;
    assert_int_equal(tc_tensor_slice(&out[0], 1, 0, n - 4, &out_narrow), TC_OK);
    assert_int_equal(
        tc_linear_rope_store(&out_narrow, &x, &narrow, &o, &pos, &c, &kc[0], &vc[0], &slots),
        TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "not q, k and v heads"));
    tc_rope_config c16 = c;
    c16.head_dim = 16;
    assert_int_equal(tc_linear_rope_store(&out[0], &x, &w, &o, &pos, &c16, &kc[0], &vc[0], &slots),
                     TC_ERR_INVALID_ARGUMENT);
    sl[1] = 12;
    assert_int_equal(tc_tensor_copy_from_host(&slots, sl, sizeof sl), TC_OK);
    assert_int_equal(tc_linear_rope_store(&out[0], &x, &w, &o, &pos, &c, &kc[0], &vc[0], &slots),
                     TC_ERR_INVALID_ARGUMENT);
    assert_memory_equal(out[0].data, out[1].data, tc_tensor_bytes(&out[0]));
    assert_memory_equal(kc[0].data, kc[1].data, tc_tensor_bytes(&kc[0]));
    tc_tensor_deinit(&x), tc_tensor_deinit(&w), tc_tensor_deinit(&pos), tc_tensor_deinit(&slots);
    for (int set = 0; set < 2; set++)
        tc_tensor_deinit(&out[set]), tc_tensor_deinit(&kc[set]), tc_tensor_deinit(&vc[set]);
}

static void argmax_prefers_lowest_index_and_skips_nan(void **state)
{
    (void)state;
    rng_t r = { 11 };
    for (size_t di = 0; di < 3; di++) {
        int64_t n = 5, d = 4097;
        double *xv;
        tc_tensor x, out;
        assert_int_equal(random_tensor(&r, cpu, &x, floats[di], TC_SHAPE(n, d), -1, 1, &xv), TC_OK);
        /* row 1: a tie between 100 and 7; row 2: a NaN bigger than everything */
        tc__store(x.dtype, tc__row(&x, 1), 100, 5.0f);
        tc__store(x.dtype, tc__row(&x, 1), 7, 5.0f);
        tc__store(x.dtype, tc__row(&x, 2), 0, NAN);
        assert_int_equal(tc_tensor_init(&out, cpu, TC_DTYPE_I32, TC_SHAPE(n)), TC_OK);
        assert_int_equal(tc_argmax(&out, &x), TC_OK);
        double *vals = tensor_values(&x);
        for (int64_t i = 0; i < n; i++) {
            int64_t best = -1;
            for (int64_t j = 0; j < d; j++)
                if (!isnan(vals[i * d + j]) && (best < 0 || vals[i * d + j] > vals[i * d + best]))
                    best = j;
            assert_int_equal(((int32_t *)out.data)[i], best);
        }
        assert_int_equal(((int32_t *)out.data)[1], 7);
        free(vals), free(xv);
        tc_tensor_deinit(&x), tc_tensor_deinit(&out);
    }
}

static void logits_mask_matches_a_plain_loop(void **state)
{
    (void)state;
    rng_t r = { 41 };
    static const int64_t vocabs[] = { 1, 31, 32, 1000, 49152 + 17 };
    for (size_t vi = 0; vi < sizeof vocabs / sizeof *vocabs; vi++)
        for (int trial = 0; trial < 4; trial++) {
            int64_t n = 1 + rng_int(&r, 9), V = vocabs[vi];
            tc_tensor x, y;
            double *xv;
            assert_int_equal(random_tensor(&r, cpu, &x, TC_DTYPE_F32, TC_SHAPE(n, V), -8, 8, &xv),
                             TC_OK);
            assert_int_equal(tc_tensor_init(&y, cpu1, TC_DTYPE_F32, TC_SHAPE(n, V)), TC_OK);
            memcpy(y.data, x.data, sizeof(float) * (size_t)(n * V));
            tc_logits_constraint c[16];
            void *mem;
            int32_t k = random_constraints(&r, n, V, trial & 1, c, &mem);
            float *want = malloc(sizeof(float) * (size_t)(n * V));
            memcpy(want, x.data, sizeof(float) * (size_t)(n * V));
            for (int32_t i = 0; i < k; i++)
                ref_logits_mask(want + c[i].row * V, V, &c[i]);
            assert_int_equal(tc_logits_mask(&x, c, k), TC_OK);
            assert_int_equal(tc_logits_mask(&y, c, k), TC_OK); /* one thread: the same */
            assert_memory_equal(x.data, want, sizeof(float) * (size_t)(n * V));
            assert_memory_equal(y.data, want, sizeof(float) * (size_t)(n * V));
            for (int64_t i = 0; i < n * V; i++)
                assert_false(isnan(((float *)x.data)[i]));
            free(want), free(mem), free(xv);
            tc_tensor_deinit(&x), tc_tensor_deinit(&y);
        }
}

/* A row that allows nothing comes out all -inf (not NaN), and the sampler still answers:
 * token 0, greedy or not; the engine then finds that the grammar refuses it. */
static void logits_mask_all_banned_row_samples_without_nan(void **state)
{
    (void)state;
    int64_t V = 100;
    tc_tensor x;
    assert_int_equal(tc_tensor_init(&x, cpu, TC_DTYPE_F32, TC_SHAPE(2, V)), TC_OK);
    for (int64_t i = 0; i < 2 * V; i++)
        ((float *)x.data)[i] = (float)(i % 7);
    uint32_t none[4] = { 0 };
    int32_t id = 5;
    float ban = -100.0f;
    uint32_t only5[4] = { 1u << 5 };
    tc_logits_constraint c[2] = { { 1, none, 4, NULL, NULL, 0 }, { 0, only5, 4, &id, &ban, 1 } };
    assert_int_equal(tc_logits_mask(&x, c, 2), TC_OK);
    for (int64_t i = 0; i < 2 * V; i++)
        assert_true(isinf(((float *)x.data)[i]) && ((float *)x.data)[i] < 0);
    tc_sample_row rows[2] = { { tc_sample_defaults(), NULL, 0, 0, 0 },
                              { tc_sample_defaults(), NULL, 0, 0, 0 } };
    rows[1].params.temperature = 1.0f;
    rows[1].params.top_p = 0.9f;
    int32_t out[2] = { -1, -1 };
    assert_int_equal(tc_sample(out, &x, rows), TC_OK);
    assert_int_equal(out[0], 0);
    assert_int_equal(out[1], 0);
    tc_tensor_deinit(&x);
}

static void logits_mask_rejects_bad_constraints(void **state)
{
    (void)state;
    int64_t V = 100;
    tc_tensor x, h;
    assert_int_equal(tc_tensor_init(&x, cpu, TC_DTYPE_F32, TC_SHAPE(3, V)), TC_OK);
    assert_int_equal(tc_tensor_init(&h, cpu, TC_DTYPE_F16, TC_SHAPE(3, V)), TC_OK);
    memset(x.data, 0, sizeof(float) * 3 * (size_t)V);
    uint32_t words[4] = { 1, 2, 3, 4 };
    int32_t ids[2] = { 3, 100 };
    float bias[2] = { 1.0f, NAN };
    struct {
        tc_logits_constraint c[2];
        int32_t n;
        const char *says;
    } cases[] = {
        { { { 0, words, 3, NULL, NULL, 0 } }, 1, "a mask of 3 words; a vocabulary of 100 needs 4" },
        { { { 3, words, 4, NULL, NULL, 0 } }, 1, "row 3 of logits with 3 rows" },
        { { { -1, NULL, 0, ids, bias, 1 } }, 1, "row -1" },
        { { { 1, words, 4, NULL, NULL, 0 }, { 1, NULL, 0, ids, bias, 1 } },
          2,
          "constrained twice" },
        { { { 0, NULL, 0, ids, bias, 2 } }, 1, "token 100" },
        { { { 0, NULL, 0, ids + 1, bias + 1, 1 } }, 1, "is nan" },
        { { { 0, NULL, 0, NULL, NULL, 2 } }, 1, "without its arrays" },
        { { { 0, NULL, 0, ids, bias, -1 } }, 1, "without its arrays" },
        { { { 0 } }, -1, "-1 constraints" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (tc_logits_mask(&x, cases[i].c, cases[i].n) != TC_ERR_INVALID_ARGUMENT)
            fail_msg("case %zu was accepted", i);
        if (!strstr(tc_last_error(), cases[i].says))
            fail_msg("case %zu: '%s' does not say '%s'", i, tc_last_error(), cases[i].says);
    }
    /* Nothing was written by a call that failed. */
    for (int64_t i = 0; i < 3 * V; i++)
        assert_true(((float *)x.data)[i] == 0.0f);
    tc_logits_constraint ok = { 0, words, 4, NULL, NULL, 0 };
    assert_int_equal(tc_logits_mask(&h, &ok, 1), TC_ERR_INVALID_ARGUMENT);
    assert_int_equal(tc_logits_mask(&x, NULL, 0), TC_OK);
    tc_tensor_deinit(&x), tc_tensor_deinit(&h);
}

/* Probabilities the sampler should draw from, computed here in double. */
static void ref_sample_probs(const double *logits, int64_t V, const tc_sample_row *row, double *p)
{
    double *v = malloc(sizeof(double) * (size_t)V);
    memcpy(v, logits, sizeof(double) * (size_t)V);
    const tc_sample_params *sp = &row->params;
    for (int64_t t = 0; t < V; t++) {
        int seen = 0, gen = 0;
        for (int64_t i = 0; i < row->history_len; i++)
            if (row->history[i] == t) {
                seen = 1;
                gen += i >= row->n_prompt;
            }
        if (seen)
            v[t] = v[t] > 0 ? v[t] / sp->repetition_penalty : v[t] * sp->repetition_penalty;
        if (gen)
            v[t] -= sp->presence_penalty + sp->frequency_penalty * gen;
    }
    double mx = -INFINITY, s = 0;
    for (int64_t t = 0; t < V; t++)
        mx = fmax(mx, v[t]);
    for (int64_t t = 0; t < V; t++)
        s += (p[t] = exp((v[t] - mx) / sp->temperature));
    for (int64_t t = 0; t < V; t++)
        p[t] /= s;
    /* rank: top-k, then the nucleus, then min-p */
    int64_t *order = malloc(sizeof(int64_t) * (size_t)V);
    for (int64_t t = 0; t < V; t++)
        order[t] = t;
    for (int64_t i = 1; i < V; i++)
        for (int64_t j = i; j > 0 && p[order[j]] > p[order[j - 1]]; j--) {
            int64_t tmp = order[j];
            order[j] = order[j - 1];
            order[j - 1] = tmp;
        }
    int64_t keep = sp->top_k > 0 && sp->top_k < V ? sp->top_k : V;
    if (sp->top_p < 1) {
        double cum = 0;
        int64_t i = 0;
        while (i < keep) {
            cum += p[order[i++]];
            if (cum >= sp->top_p)
                break;
        }
        keep = i;
    }
    double pmax = p[order[0]], total = 0;
    for (int64_t i = 0; i < V; i++) {
        int64_t t = order[i];
        if (i >= keep || p[t] < sp->min_p * pmax)
            p[t] = 0;
        total += p[t];
    }
    for (int64_t t = 0; t < V; t++)
        p[t] /= total;
    free(order);
    free(v);
}

static void sampling_matches_its_distribution_and_repeats_with_a_seed(void **state)
{
    (void)state;
    rng_t r = { 12 };
    const int64_t V = 23;
    double *lv;
    tc_tensor logits;
    assert_int_equal(random_tensor(&r, cpu, &logits, TC_DTYPE_F32, TC_SHAPE(1, V), -3, 3, &lv),
                     TC_OK);
    int32_t hist[] = { 4, 9, 9, 4, 17, 17, 17 };
    struct {
        float t;
        int k;
        float p, minp, rep, pres, freq;
    } cases[] = { { 1.0f, 0, 1.0f, 0, 1, 0, 0 },
                  { 0.7f, 5, 1.0f, 0, 1, 0, 0 },
                  { 1.3f, 0, 0.6f, 0, 1, 0, 0 },
                  { 1.0f, 0, 1.0f, 0.2f, 1, 0, 0 },
                  { 1.0f, 8, 0.9f, 0.05f, 1.3f, 0.5f, 0.3f } };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        tc_sample_row row = {
            .params = tc_sample_defaults(), .history = hist, .history_len = 7, .n_prompt = 3
        };
        row.params.temperature = cases[ci].t;
        row.params.top_k = cases[ci].k;
        row.params.top_p = cases[ci].p;
        row.params.min_p = cases[ci].minp;
        row.params.repetition_penalty = cases[ci].rep;
        row.params.presence_penalty = cases[ci].pres;
        row.params.frequency_penalty = cases[ci].freq;
        row.params.seed = 1234 + ci;
        double p[23];
        ref_sample_probs(lv, V, &row, p);
        const int draws = 200000;
        int counts[23] = { 0 };
        for (int i = 0; i < draws; i++) {
            row.counter = (uint64_t)i;
            int32_t tok;
            assert_int_equal(tc_sample(&tok, &logits, &row), TC_OK);
            assert_true(tok >= 0 && tok < V);
            counts[tok]++;
        }
        for (int64_t t = 0; t < V; t++) {
            double f = (double)counts[t] / draws;
            if (p[t] == 0)
                assert_int_equal(counts[t], 0);
            /* five standard deviations of a binomial frequency */
            double sd = sqrt(p[t] * (1 - p[t]) / draws) + 1e-9;
            if (fabs(f - p[t]) > 5 * sd + 1e-4) {
                print_error("case %zu token %lld: frequency %.5f, probability %.5f\n", ci,
                            (long long)t, f, p[t]);
                fail();
            }
        }
        /* the same seed and counter give the same token; the draws differ across counters */
        int32_t a, b;
        row.counter = 99;
        assert_int_equal(tc_sample(&a, &logits, &row), TC_OK);
        assert_int_equal(tc_sample(&b, &logits, &row), TC_OK);
        assert_int_equal(a, b);
    }
    free(lv);
    tc_tensor_deinit(&logits);
}

static void sampling_greedy_penalties_and_bad_parameters(void **state)
{
    (void)state;
    float lg[2][6] = { { 1, 5, 4.5f, -1, 0, 2 }, { 0.5f, -2, -1.9f, 0.1f, 0.2f, 0.3f } };
    tc_tensor logits;
    assert_int_equal(
        tc_tensor_init_from_host(&logits, cpu, TC_DTYPE_F32, TC_SHAPE(2, 6), lg, sizeof lg), TC_OK);
    int32_t hist[] = { 1, 0 };
    tc_sample_row rows[2] = { { .params = tc_sample_defaults() },
                              { .params = tc_sample_defaults() } };
    int32_t out[2];
    assert_int_equal(tc_sample(out, &logits, rows), TC_OK);
    assert_int_equal(out[0], 1);
    assert_int_equal(out[1], 0);
    /* repetition 1.2 on token 1 (5 -> 4.17 < 4.5) and on token 0 (0.5 -> 0.42 > 0.3) */
    for (int i = 0; i < 2; i++) {
        rows[i].history = hist;
        rows[i].history_len = 2;
        rows[i].params.repetition_penalty = 1.2f;
    }
    assert_int_equal(tc_sample(out, &logits, rows), TC_OK);
    assert_int_equal(out[0], 2);
    assert_int_equal(out[1], 0);
    /* presence applies to generated tokens only: with n_prompt 2 nothing changes */
    rows[1].params.presence_penalty = 1.0f;
    rows[1].n_prompt = 2;
    assert_int_equal(tc_sample(out, &logits, rows), TC_OK);
    assert_int_equal(out[1], 0);
    rows[1].n_prompt = 0;
    assert_int_equal(tc_sample(out, &logits, rows), TC_OK);
    assert_int_equal(out[1], 5);
    /* bad parameters are named */
    rows[0].params.top_p = 0.0f;
    assert_int_equal(tc_sample(out, &logits, rows), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "row 0: top_p"));
    rows[0].params.top_p = 1.0f;
    rows[0].params.temperature = -1.0f;
    assert_int_equal(tc_sample(out, &logits, rows), TC_ERR_INVALID_ARGUMENT);
    rows[0].params.temperature = 0.0f;
    hist[0] = 6;
    assert_int_equal(tc_sample(out, &logits, rows), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "outside the vocabulary"));
    tc_tensor_deinit(&logits);
}

static void ops_reject_mismatched_shapes_and_dtypes(void **state)
{
    (void)state;
    tc_tensor a, b, w, i8;
    assert_int_equal(tc_tensor_init(&a, cpu, TC_DTYPE_F32, TC_SHAPE(3, 8)), TC_OK);
    assert_int_equal(tc_tensor_init(&b, cpu, TC_DTYPE_F32, TC_SHAPE(3, 9)), TC_OK);
    assert_int_equal(tc_tensor_init(&w, cpu, TC_DTYPE_BF16, TC_SHAPE(8)), TC_OK);
    assert_int_equal(tc_tensor_init(&i8, cpu, TC_DTYPE_I8, TC_SHAPE(3, 8)), TC_OK);
    assert_int_equal(tc_rmsnorm(&a, NULL, &a, &w, 1e-5f), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "tc_rmsnorm"));
    assert_non_null(strstr(tc_last_error(), "weight is bf16[8] cpu; want f32"));
    assert_int_equal(tc_swiglu(&a, &a, &b), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "up is f32[3, 9]"));
    assert_int_equal(tc_softmax(&i8, &i8), TC_ERR_INVALID_ARGUMENT);
    assert_int_equal(tc_matmul(&a, &b, &a), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "in_features"));
    assert_int_equal(tc_matmul(&b, &a, &a), TC_ERR_INVALID_ARGUMENT);
    tc_tensor uninit = { 0 };
    assert_int_equal(tc_softmax(&a, &uninit), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "not an initialised tensor"));
    tc_rope_config rc = { .head_dim = 7, .theta = 10000 };
    tc_tensor q3, pos;
    assert_int_equal(tc_tensor_init(&q3, cpu, TC_DTYPE_F32, TC_SHAPE(3, 1, 8)), TC_OK);
    assert_int_equal(tc_tensor_init(&pos, cpu, TC_DTYPE_I32, TC_SHAPE(3)), TC_OK);
    assert_int_equal(tc_rope(&q3, NULL, &pos, &rc), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "head_dim"));
    tc_tensor_deinit(&a), tc_tensor_deinit(&b), tc_tensor_deinit(&w), tc_tensor_deinit(&i8);
    tc_tensor_deinit(&q3), tc_tensor_deinit(&pos);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(conversions_round_to_nearest_even),
        cmocka_unit_test(fp8_e4m3_matches_its_definition),
        cmocka_unit_test(tensors_copy_slice_and_reshape),
        cmocka_unit_test(host_tensors_beyond_available_memory_are_refused),
        cmocka_unit_test(q4_1_g64_and_g128_are_q4_1_blocks_sharing_d_and_m),
        cmocka_unit_test(embedding_gathers_rows_of_every_dtype),
        cmocka_unit_test(gather_columns_in_any_order),
        cmocka_unit_test(rmsnorm_with_and_without_residual),
        cmocka_unit_test(rope_plain_llama3_and_interleaved),
        cmocka_unit_test(matmul_every_weight_dtype_and_odd_shapes),
        cmocka_unit_test(batched_products_split_k_as_measured),
        cmocka_unit_test(qdot_is_batch_invariant_and_the_same_on_every_build),
        cmocka_unit_test(matmul_rows_are_the_same_alone_and_in_a_batch),
        cmocka_unit_test(matmul_is_the_same_on_one_and_many_threads),
        cmocka_unit_test(linear_fuses_norm_swiglu_and_residual),
        cmocka_unit_test(scale_columns_folds_a_norm),
        cmocka_unit_test(swiglu_and_softmax_on_strided_rows),
        cmocka_unit_test(add_bias_on_strided_rows),
        cmocka_unit_test(convert_between_float_dtypes),
        cmocka_unit_test(attention_prefill_and_decode_over_paged_cache),
        cmocka_unit_test(attention_with_a_sliding_window),
        cmocka_unit_test(attention_over_fp8_caches),
        cmocka_unit_test(attention_store_writes_slots),
        cmocka_unit_test(attention_window_and_scales),
        cmocka_unit_test(kv_scales_and_scaled_stores),
        cmocka_unit_test(rope_store_is_rope_then_store),
        cmocka_unit_test(linear_pair_is_two_linears),
        cmocka_unit_test(linear_rope_store_is_linear_then_rope_store),
        cmocka_unit_test(argmax_prefers_lowest_index_and_skips_nan),
        cmocka_unit_test(logits_mask_matches_a_plain_loop),
        cmocka_unit_test(logits_mask_all_banned_row_samples_without_nan),
        cmocka_unit_test(logits_mask_rejects_bad_constraints),
        cmocka_unit_test(sampling_matches_its_distribution_and_repeats_with_a_seed),
        cmocka_unit_test(sampling_greedy_penalties_and_bad_parameters),
        cmocka_unit_test(ops_reject_mismatched_shapes_and_dtypes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
