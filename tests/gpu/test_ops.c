/* Every CUDA op against the CPU op and a double-precision reference on random inputs, outputs
 * poisoned (all bits set: NaN) before each run so that unwritten elements fail. With
 * TC_OPS_DUMP=DIR the inputs and CUDA outputs of each case are also written there, with a
 * manifest.jsonl, for tests/gpu/ops_vs_torch.py. Exits 77 (skip) without a GPU. */
#include <stdio.h>
#include "../ops/oracle.h"
#include "check.h"
#include "model/quant.h"

#define SKIP 77

static tc_backend *gpu, *cpu;
static int failures, cases;
static const char *dump_dir;
static FILE *manifest;
static char entry[4096];
static size_t entry_len;
static int dump_id;

static void begin_case(const char *op, const char *params_json)
{
    entry_len = (size_t)snprintf(
        entry, sizeof entry, "{\"op\": \"%s\", \"params\": %s, \"tensors\": {", op, params_json);
}
static void dump(const char *name, const tc_tensor *t)
{
    if (!dump_dir)
        return;
    char path[512];
    snprintf(path, sizeof path, "%s/t%05d.bin", dump_dir, dump_id);
    size_t bytes = tc_tensor_bytes(t);
    void *buf = malloc(bytes + 1);
    CHECK(tc_tensor_copy_to_host(t, buf, bytes));
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, bytes, f) != bytes) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
    free(buf);
    entry_len += (size_t)snprintf(
        entry + entry_len, sizeof entry - entry_len,
        "%s\"%s\": {\"file\": \"t%05d.bin\", \"dtype\": \"%s\", \"shape\": [",
        entry[entry_len - 1] == '{' ? "" : ", ", name, dump_id, tc_dtype_name(t->dtype));
    for (int i = 0; i < t->ndim; i++)
        entry_len += (size_t)snprintf(entry + entry_len, sizeof entry - entry_len, "%s%lld",
                                      i ? ", " : "", (long long)t->shape[i]);
    entry_len += (size_t)snprintf(entry + entry_len, sizeof entry - entry_len, "]}");
    dump_id++;
}
static void end_case(void)
{
    if (manifest)
        fprintf(manifest, "%s}}\n", entry);
}

/* The same random tensor on the GPU and the CPU. */
static double *twin(rng_t *r, tc_dtype dt, int ndim, const int64_t *shape, double lo, double hi,
                    tc_tensor *g, tc_tensor *c)
{
    double *v;
    CHECK(random_tensor(r, cpu, c, dt, ndim, shape, lo, hi, &v));
    CHECK(tc_tensor_init(g, gpu, dt, ndim, shape));
    CHECK(tc_tensor_copy(g, c));
    return v;
}
static void poisoned(tc_tensor *t, tc_backend *b, tc_dtype dt, int ndim, const int64_t *shape)
{
    CHECK(tc_tensor_init(t, b, dt, ndim, shape));
    if (b == gpu)
        CHECK(tc_stream_memset(tc_backend_stream(gpu), (CUdeviceptr)(uintptr_t)t->data, 0xFF,
                               tc_tensor_bytes(t)));
    else
        memset(t->data, 0xFF, tc_tensor_bytes(t));
}

/* Compare the CUDA result with the reference and with the CPU op. */
static void expect_close(const char *what, const tc_tensor *g, const double *want,
                         const tc_tensor *c, double tol)
{
    CHECK(tc_backend_synchronize(gpu));
    int64_t n = tc_tensor_numel(g);
    double *got = tensor_values(g);
    double e_ref = rel_error(got, want, n), e_cpu = c ? INFINITY : 0.0;
    if (c) {
        double *cv = tensor_values(c);
        e_cpu = rel_error(got, cv, n);
        free(cv);
    }
    bool ok = e_ref <= tol && e_cpu <= tol;
    printf("%-58s vs ref %.2e  vs cpu %.2e  (tol %.0e)  %s\n", what, e_ref, c ? e_cpu : 0.0, tol,
           ok ? "ok" : "FAIL");
    failures += !ok;
    cases++;
    free(got);
}

static void embedding(rng_t *r)
{
    const tc_dtype tables[] = { TC_DTYPE_BF16, TC_DTYPE_F32, TC_DTYPE_F16, TC_DTYPE_Q8_0,
                                TC_DTYPE_Q4_0 };
    const tc_dtype outs[] = { TC_DTYPE_BF16, TC_DTYPE_F32 };
    for (int ti = 0; ti < 5; ti++)
        for (int oi = 0; oi < 2; oi++) {
            int64_t vocab = 32000, dim = 2048, n = 37;
            tc_tensor gt, ct, gi, ci, go, co;
            double *tv = twin(r, tables[ti], TC_SHAPE(vocab, dim), -1, 1, &gt, &ct);
            double *iv = twin(r, TC_DTYPE_I32, TC_SHAPE(n), 0, vocab, &gi, &ci);
            poisoned(&go, gpu, outs[oi], TC_SHAPE(n, dim));
            poisoned(&co, cpu, outs[oi], TC_SHAPE(n, dim));
            CHECK(tc_embedding(&go, &gt, &gi));
            CHECK(tc_embedding(&co, &ct, &ci));
            double *want = malloc(sizeof(double) * (size_t)(n * dim));
            for (int64_t i = 0; i < n; i++)
                memcpy(want + i * dim, tv + (int64_t)iv[i] * dim, sizeof(double) * (size_t)dim);
            char what[96];
            snprintf(what, sizeof what, "embedding %s -> %s [%lld x %lld]",
                     tc_dtype_name(tables[ti]), tc_dtype_name(outs[oi]), (long long)n,
                     (long long)dim);
            expect_close(what, &go, want, &co, tolerance(outs[oi]));
            if (ti == 0 && oi == 0) {
                begin_case("embedding", "{}");
                dump("table", &gt), dump("ids", &gi), dump("out", &go);
                end_case();
            }
            free(tv), free(iv), free(want);
            tc_tensor_deinit(&gt), tc_tensor_deinit(&ct), tc_tensor_deinit(&gi),
                tc_tensor_deinit(&ci);
            tc_tensor_deinit(&go), tc_tensor_deinit(&co);
        }
}

/* x's columns in a random order (a GPTQ act-order matrix's inputs), one row to 70 of rows
 * strided or not. */
static void gather_columns(rng_t *r)
{
    const tc_dtype dts[] = { TC_DTYPE_BF16, TC_DTYPE_F32, TC_DTYPE_F16 };
    const struct {
        int64_t m, k, width;
    } shapes[] = { { 1, 4096, 4096 }, { 7, 11008, 11008 }, { 70, 4096, 4160 } };
    for (int di = 0; di < 3; di++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            int64_t m = shapes[si].m, k = shapes[si].k, w = shapes[si].width;
            tc_tensor gw, cw, gx, cx, gi, ci, go, co;
            double *xv = twin(r, dts[di], TC_SHAPE(m, w), -1, 1, &gw, &cw);
            CHECK(tc_tensor_slice(&gw, 1, 0, k, &gx));
            CHECK(tc_tensor_slice(&cw, 1, 0, k, &cx));
            int32_t *order = malloc(sizeof(int32_t) * (size_t)k);
            rng_permutation(r, order, k);
            CHECK(tc_tensor_init_from_host(&gi, gpu, TC_DTYPE_I32, TC_SHAPE(k), order,
                                           sizeof(int32_t) * (size_t)k));
            CHECK(tc_tensor_init_from_host(&ci, cpu, TC_DTYPE_I32, TC_SHAPE(k), order,
                                           sizeof(int32_t) * (size_t)k));
            poisoned(&go, gpu, dts[di], TC_SHAPE(m, k));
            poisoned(&co, cpu, dts[di], TC_SHAPE(m, k));
            CHECK(tc_gather_columns(&go, &gx, &gi));
            CHECK(tc_gather_columns(&co, &cx, &ci));
            double *want = malloc(sizeof(double) * (size_t)(m * k));
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < k; j++)
                    want[i * k + j] = xv[i * w + order[j]];
            char what[96];
            snprintf(what, sizeof what, "gather_columns %s [%lld x %lld of %lld]",
                     tc_dtype_name(dts[di]), (long long)m, (long long)k, (long long)w);
            expect_close(what, &go, want, &co, 0.0);
            free(xv), free(order), free(want);
            tc_tensor_deinit(&gw), tc_tensor_deinit(&cw), tc_tensor_deinit(&gi),
                tc_tensor_deinit(&ci), tc_tensor_deinit(&go), tc_tensor_deinit(&co);
        }
}

static void rmsnorm(rng_t *r)
{
    const tc_dtype dts[] = { TC_DTYPE_BF16, TC_DTYPE_F32, TC_DTYPE_F16 };
    const int64_t dims[] = { 4096, 2048, 127, 576 };
    for (int di = 0; di < 3; di++)
        for (int si = 0; si < 4; si++)
            for (int res = 0; res < 2; res++) {
                tc_dtype dt = dts[di];
                int64_t n = 37, d = dims[si];
                tc_tensor gx, cx, gw, cw, gr, cr, go, co;
                double *xv = twin(r, dt, TC_SHAPE(n, d), -2, 2, &gx, &cx);
                double *wv = twin(r, dt, TC_SHAPE(d), 0.5, 1.5, &gw, &cw);
                double *rv = res ? twin(r, dt, TC_SHAPE(n, d), -2, 2, &gr, &cr) : NULL;
                if (res && dump_dir && si == 0) {
                    begin_case("rmsnorm", "{\"eps\": 1e-5}");
                    dump("x", &gx), dump("weight", &gw), dump("residual", &gr);
                }
                poisoned(&go, gpu, dt, TC_SHAPE(n, d));
                poisoned(&co, cpu, dt, TC_SHAPE(n, d));
                CHECK(tc_rmsnorm(&go, res ? &gr : NULL, &gx, &gw, 1e-5f));
                CHECK(tc_rmsnorm(&co, res ? &cr : NULL, &cx, &cw, 1e-5f));
                double *want = malloc(sizeof(double) * (size_t)(n * d));
                ref_rmsnorm(want, rv, xv, wv, n, d, 1e-5, dt);
                char what[96];
                snprintf(what, sizeof what, "rmsnorm %s [%lld x %lld]%s", tc_dtype_name(dt),
                         (long long)n, (long long)d, res ? " + residual" : "");
                expect_close(what, &go, want, &co, tolerance(dt));
                if (res) {
                    snprintf(what, sizeof what, "  its residual sum %s", tc_dtype_name(dt));
                    expect_close(what, &gr, rv, &cr, tolerance(dt));
                    if (dump_dir && si == 0) {
                        dump("out", &go), dump("residual_out", &gr);
                        end_case();
                    }
                    tc_tensor_deinit(&gr), tc_tensor_deinit(&cr);
                }
                free(xv), free(wv), free(rv), free(want);
                tc_tensor_deinit(&gx), tc_tensor_deinit(&cx), tc_tensor_deinit(&gw),
                    tc_tensor_deinit(&cw);
                tc_tensor_deinit(&go), tc_tensor_deinit(&co);
            }
}

static void rope(rng_t *r)
{
    /* (variants 4 to 6: head sizes of the generic attention kernels) */
    const int head_dims[7] = { 128, 128, 128, 64, 80, 96, 256 };
    for (int variant = 0; variant < 7; variant++)
        for (int di = 0; di < 2; di++) {
            tc_dtype dt = di ? TC_DTYPE_F32 : TC_DTYPE_BF16;
            tc_rope_config c = { .head_dim = head_dims[variant],
                                 .theta = variant ? 500000.0 : 10000.0,
                                 .interleaved = variant == 2 || variant == 5,
                                 .scaling = variant ? TC_ROPE_LLAMA3 : TC_ROPE_PLAIN,
                                 .factor = 32,
                                 .low_freq_factor = 1,
                                 .high_freq_factor = 4,
                                 .original_max_position = 8192 };
            int64_t n = 37, H = 32, KV = 8;
            tc_tensor gq, cq, gk, ck, gp, cp;
            double *qv = twin(r, dt, TC_SHAPE(n, H, c.head_dim), -1, 1, &gq, &cq);
            double *kv = twin(r, dt, TC_SHAPE(n, KV, c.head_dim), -1, 1, &gk, &ck);
            double *pv = twin(r, TC_DTYPE_I32, TC_SHAPE(n), 0, 131072, &gp, &cp);
            char params[256];
            snprintf(
                params, sizeof params,
                "{\"head_dim\": %d, \"theta\": %g, \"interleaved\": %d, \"llama3\": %d, "
                "\"factor\": 32, "
                "\"low_freq_factor\": 1, \"high_freq_factor\": 4, \"original_max_position\": 8192}",
                c.head_dim, c.theta, (int)c.interleaved, (int)c.scaling);
            begin_case("rope", params);
            dump("q", &gq), dump("k", &gk), dump("pos", &gp);
            CHECK(tc_rope(&gq, &gk, &gp, &c));
            CHECK(tc_rope(&cq, &ck, &cp, &c));
            dump("q_out", &gq), dump("k_out", &gk);
            end_case();
            ref_rope(qv, n, H, cp.data, &c);
            ref_rope(kv, n, KV, cp.data, &c);
            char what[96];
            snprintf(what, sizeof what, "rope %s hd %d %s%s q", tc_dtype_name(dt), c.head_dim,
                     variant ? "llama3" : "plain", c.interleaved ? " interleaved" : "");
            expect_close(what, &gq, qv, &cq, tolerance(dt));
            snprintf(what, sizeof what, "  and k");
            expect_close(what, &gk, kv, &ck, tolerance(dt));
            free(qv), free(kv), free(pv);
            tc_tensor_deinit(&gq), tc_tensor_deinit(&cq), tc_tensor_deinit(&gk),
                tc_tensor_deinit(&ck);
            tc_tensor_deinit(&gp), tc_tensor_deinit(&cp);
        }
}

/* rope fused with the cache store, over q, k, v slices of one [n, H + 2 KV, hd] product as
 * the model passes them, then tc_attention_store alone into other slots; a negative slot
 * skips its row. f32 takes head_dim 6: the kernels' one-element paths. */
/* Llama 3.1-style rope (factor 32 as Llama 3.2) with head_dim hd. */
static tc_rope_config llama3_rope(int hd, bool interleaved)
{
    return (tc_rope_config){ .head_dim = hd,
                             .theta = 500000.0,
                             .interleaved = interleaved,
                             .scaling = TC_ROPE_LLAMA3,
                             .factor = 32,
                             .low_freq_factor = 1,
                             .high_freq_factor = 4,
                             .original_max_position = 8192 };
}

/* With fp8 the caches are FP8 E4M3 (16-bit activations): rounding to its 3-bit mantissa, half
 * a step of 1/8 for the rotated values up to sqrt(2), or a whole step where the GPU's rotated
 * value and the CPU's (a unit of the 16-bit type apart) round to neighbouring codes. */
static void rope_store(rng_t *r, bool fp8)
{
    const tc_dtype dts[] = { TC_DTYPE_BF16, TC_DTYPE_F16, TC_DTYPE_F32 };
    for (int di = 0; di < (fp8 ? 2 : 3); di++)
        for (int il = 0; il < 2; il++) {
            tc_dtype dt = dts[di], ct = fp8 ? TC_DTYPE_F8E4M3 : dt;
            double ctol = fp8 ? 0.1 : tolerance(dt);
            tc_rope_config c = llama3_rope(di == 2 ? 6 : di == 1 ? 64 : 128, il);
            int64_t n = 37, H = di == 2 ? 9 : 32, KV = di == 2 ? 3 : 8, hd = c.head_dim,
                    U = H + 2 * KV, bs = 16, nb = 5, row = KV * hd;
            tc_tensor gx, cx, gkc, ckc, gvc, cvc, gp, cp, gs, cs;
            double *xv = twin(r, dt, TC_SHAPE(n, U, hd), -1, 1, &gx, &cx);
            double *kcv = twin(r, ct, TC_SHAPE(nb, bs, KV, hd), -1, 1, &gkc, &ckc);
            double *vcv = twin(r, ct, TC_SHAPE(nb, bs, KV, hd), -1, 1, &gvc, &cvc);
            double *pv = twin(r, TC_DTYPE_I32, TC_SHAPE(n), 0, 131072, &gp, &cp);
            int32_t sl[37];
            for (int64_t i = 0; i < n; i++)
                sl[i] = (int32_t)((i * 29 + 3) % (nb * bs));
            sl[5] = -1;
            CHECK(tc_tensor_init_from_host(&gs, gpu, TC_DTYPE_I32, TC_SHAPE(n), sl, sizeof sl));
            CHECK(tc_tensor_init_from_host(&cs, cpu, TC_DTYPE_I32, TC_SHAPE(n), sl, sizeof sl));
            tc_tensor gq, gk, gv, cq, ck, cv;
            CHECK(tc_tensor_slice(&gx, 1, 0, H, &gq));
            CHECK(tc_tensor_slice(&gx, 1, H, KV, &gk));
            CHECK(tc_tensor_slice(&gx, 1, H + KV, KV, &gv));
            CHECK(tc_tensor_slice(&cx, 1, 0, H, &cq));
            CHECK(tc_tensor_slice(&cx, 1, H, KV, &ck));
            CHECK(tc_tensor_slice(&cx, 1, H + KV, KV, &cv));
            CHECK(tc_rope_store(&gq, &gk, &gv, &gp, &c, &gkc, &gvc, &gs));
            CHECK(tc_rope_store(&cq, &ck, &cv, &cp, &c, &ckc, &cvc, &cs));
            /* the reference: q and k heads rotated (as one [n, H + KV] set), k and v cached */
            double *qk = malloc(sizeof(double) * (size_t)(n * (H + KV) * hd));
            for (int64_t i = 0; i < n; i++)
                memcpy(qk + i * (H + KV) * hd, xv + i * U * hd,
                       sizeof(double) * (size_t)((H + KV) * hd));
            ref_rope(qk, n, H + KV, cp.data, &c);
            for (int64_t i = 0; i < n; i++) {
                memcpy(xv + i * U * hd, qk + i * (H + KV) * hd,
                       sizeof(double) * (size_t)((H + KV) * hd));
                if (sl[i] < 0)
                    continue;
                memcpy(kcv + sl[i] * row, xv + (i * U + H) * hd, sizeof(double) * (size_t)row);
                memcpy(vcv + sl[i] * row, xv + (i * U + H + KV) * hd, sizeof(double) * (size_t)row);
            }
            char what[96];
            snprintf(what, sizeof what, "rope_store %s hd %lld%s%s: q, k, v rows",
                     tc_dtype_name(dt), (long long)hd, il ? " interleaved" : "",
                     fp8 ? ", f8e4m3 cache" : "");
            expect_close(what, &gx, xv, &cx, tolerance(dt));
            expect_close("  the k cache", &gkc, kcv, &ckc, ctol);
            expect_close("  the v cache", &gvc, vcv, &cvc, ctol);
            /* the plain store of the same rows, to other slots */
            for (int64_t i = 0; i < n; i++)
                sl[i] = (int32_t)((i * 31 + 40) % (nb * bs));
            sl[0] = -1;
            CHECK(tc_tensor_copy_from_host(&gs, sl, sizeof sl));
            CHECK(tc_tensor_copy_from_host(&cs, sl, sizeof sl));
            CHECK(tc_attention_store(&gkc, &gvc, &gk, &gv, &gs));
            CHECK(tc_attention_store(&ckc, &cvc, &ck, &cv, &cs));
            for (int64_t i = 1; i < n; i++) {
                memcpy(kcv + sl[i] * row, xv + (i * U + H) * hd, sizeof(double) * (size_t)row);
                memcpy(vcv + sl[i] * row, xv + (i * U + H + KV) * hd, sizeof(double) * (size_t)row);
            }
            snprintf(what, sizeof what, "attention store %s to %s, %lld-element rows",
                     tc_dtype_name(dt), tc_dtype_name(ct), (long long)row);
            expect_close(what, &gkc, kcv, &ckc, ctol);
            expect_close("  and v", &gvc, vcv, &cvc, ctol);
            free(qk), free(xv), free(kcv), free(vcv), free(pv);
            tc_tensor_deinit(&gx), tc_tensor_deinit(&cx), tc_tensor_deinit(&gkc),
                tc_tensor_deinit(&ckc), tc_tensor_deinit(&gvc), tc_tensor_deinit(&cvc);
            tc_tensor_deinit(&gp), tc_tensor_deinit(&cp), tc_tensor_deinit(&gs),
                tc_tensor_deinit(&cs);
        }
}

static void matmul_case(rng_t *r, tc_dtype xt, tc_dtype wt, int64_t m, int64_t n, int64_t k,
                        tc_gemm_mode mode, const char *path, bool dump_it)
{
    tc_backend_set_gemm(gpu, mode);
    tc_tensor gx, cx, gw, cw, go, co;
    double *xv = twin(r, xt, TC_SHAPE(m, k), -1, 1, &gx, &cx);
    double *wv = twin(r, wt, TC_SHAPE(n, k), -1, 1, &gw, &cw);
    poisoned(&go, gpu, xt, TC_SHAPE(m, n));
    poisoned(&co, cpu, xt, TC_SHAPE(m, n));
    CHECK(tc_matmul(&go, &gx, &gw));
    CHECK(tc_matmul(&co, &cx, &cw));
    double *want = malloc(sizeof(double) * (size_t)(m * n));
    ref_matmul(want, xv, wv, m, n, k);
    char what[96];
    snprintf(what, sizeof what, "matmul %s x %s [%lld x %lld x %lld] %s", tc_dtype_name(xt),
             tc_dtype_name(wt), (long long)m, (long long)n, (long long)k, path);
    expect_close(what, &go, want, &co, tolerance(xt));
    if (dump_it) {
        begin_case("matmul", "{}");
        dump("x", &gx), dump("w", &gw), dump("out", &go);
        end_case();
    }
    free(xv), free(wv), free(want);
    tc_tensor_deinit(&gx), tc_tensor_deinit(&cx), tc_tensor_deinit(&gw), tc_tensor_deinit(&cw);
    tc_tensor_deinit(&go), tc_tensor_deinit(&co);
    tc_backend_set_gemm(gpu, TC_GEMM_AUTO);
}

/* The logits' product of several rows: 16-bit x and w, f32 out (tc__matmul_widen) through
 * cuBLAS, and for 2 and 8 rows of it through the tensor-core decode kernel, against the reference
 * and the CPU's product of x widened to f32; refused for one row. */
static void matmul_widen(rng_t *r, tc_dtype dt, int64_t m, int64_t n, int64_t k)
{
    tc_tensor gx, cx, gw, cw, go, co, cxf;
    double *xv = twin(r, dt, TC_SHAPE(m, k), -1, 1, &gx, &cx);
    double *wv = twin(r, dt, TC_SHAPE(n, k), -1, 1, &gw, &cw);
    poisoned(&go, gpu, TC_DTYPE_F32, TC_SHAPE(m, n));
    poisoned(&co, cpu, TC_DTYPE_F32, TC_SHAPE(m, n));
    CHECK(tc_tensor_init(&cxf, cpu, TC_DTYPE_F32, TC_SHAPE(m, k)));
    CHECK(tc_convert(&cxf, &cx));
    tc_status st = tc__matmul_widen(&go, &gx, &gw);
    CHECK(tc_matmul(&co, &cxf, &cw));
    double *want = malloc(sizeof(double) * (size_t)(m * n));
    ref_matmul(want, xv, wv, m, n, k);
    char what[96];
    snprintf(what, sizeof what, "matmul %s -> f32 [%lld x %lld x %lld] cuBLAS", tc_dtype_name(dt),
             (long long)m, (long long)n, (long long)k);
    if (st != TC_OK) {
        printf("%-58s %s  FAIL\n", what, tc_last_error());
        failures++, cases++;
    } else {
        expect_close(what, &go, want, &co, 1e-4);
    }
    /* (the first rows again, their part of out poisoned first: the decode kernel) */
    const int64_t few[] = { 2, 8 };
    for (int i = 0; i < 2; i++) {
        tc_tensor xs, os;
        CHECK(tc_tensor_slice(&gx, 0, 0, few[i], &xs));
        CHECK(tc_tensor_slice(&go, 0, 0, few[i], &os));
        CHECK(tc_stream_memset(tc_backend_stream(gpu), (CUdeviceptr)(uintptr_t)os.data, 0xFF,
                               tc_tensor_bytes(&os)));
        snprintf(what, sizeof what, "  %lld rows: the tensor-core decode kernel",
                 (long long)few[i]);
        if ((st = tc__matmul_widen(&os, &xs, &gw)) != TC_OK) {
            printf("%-58s %s  FAIL\n", what, tc_last_error());
            failures++, cases++;
        } else {
            expect_close(what, &os, want, NULL, 1e-4);
        }
    }
    tc_tensor one, go1;
    CHECK(tc_tensor_slice(&gx, 0, 0, 1, &one));
    CHECK(tc_tensor_slice(&go, 0, 0, 1, &go1));
    bool refused = tc__matmul_widen(&go1, &one, &gw) == TC_ERR_UNSUPPORTED;
    printf("%-58s %s\n", "  one row: refused (the caller widens x)", refused ? "ok" : "FAIL");
    failures += !refused;
    cases++;
    free(xv), free(wv), free(want);
    tc_tensor_deinit(&gx), tc_tensor_deinit(&cx), tc_tensor_deinit(&gw), tc_tensor_deinit(&cw);
    tc_tensor_deinit(&go), tc_tensor_deinit(&co), tc_tensor_deinit(&cxf);
}

static void matmul(rng_t *r)
{
    matmul_widen(r, TC_DTYPE_BF16, 37, 1001, 576);
    matmul_widen(r, TC_DTYPE_F16, 256, 3000, 2048);
    const tc_dtype ws[] = { TC_DTYPE_BF16, TC_DTYPE_F16, TC_DTYPE_F32, TC_DTYPE_Q8_0,
                            TC_DTYPE_Q4_0 };
    const int64_t ms[] = { 1, 3, 8 };
    for (int wi = 0; wi < 5; wi++)
        for (int mi = 0; mi < 3; mi++) {
            matmul_case(r, TC_DTYPE_BF16, ws[wi], ms[mi], 1000, 4096, TC_GEMM_AUTO, "matvec",
                        wi == 0 && mi == 0);
            matmul_case(r, TC_DTYPE_F32, ws[wi], ms[mi], 999, 2048, TC_GEMM_AUTO, "matvec", false);
        }
    matmul_case(r, TC_DTYPE_BF16, TC_DTYPE_BF16, 2, 77, 127, TC_GEMM_AUTO, "matvec (scalar)",
                false);
    /* The tensor-core kernel of 2 to 8 rows (f16 and bf16, k a multiple of 32): SmolLM2's
     * width, which leaves two of the eight warps no chunk; a partial tile of 16 rows; one chunk. */
    matmul_case(r, TC_DTYPE_F16, TC_DTYPE_F16, 2, 333, 576, TC_GEMM_AUTO, "matvec (tensor cores)",
                false);
    matmul_case(r, TC_DTYPE_BF16, TC_DTYPE_BF16, 8, 40, 32, TC_GEMM_AUTO, "matvec (tensor cores)",
                false);
    const int64_t gm[] = { 9, 127, 300 };
    for (int i = 0; i < 3; i++) {
        matmul_case(r, TC_DTYPE_BF16, TC_DTYPE_BF16, gm[i], 513, 4096, TC_GEMM_CUBLAS, "cublas",
                    i == 2);
        matmul_case(r, TC_DTYPE_BF16, TC_DTYPE_BF16, gm[i], 513, 4096, TC_GEMM_OWN,
                    "own tensor core", false);
        matmul_case(r, TC_DTYPE_F16, TC_DTYPE_F16, gm[i], 513, 1024, TC_GEMM_OWN, "own tensor core",
                    false);
        matmul_case(r, TC_DTYPE_BF16, TC_DTYPE_BF16, gm[i], 77, 1000, TC_GEMM_OWN,
                    "own tensor core (k 1000, odd n)", false);
        /* On Hopper the above run the wgmma kernel; these the one of other GPUs. */
        matmul_case(r, TC_DTYPE_BF16, TC_DTYPE_BF16, gm[i], 513, 4096, TC_GEMM_OWN_PORTABLE,
                    "own tensor core, portable", false);
        matmul_case(r, TC_DTYPE_F16, TC_DTYPE_F16, gm[i], 77, 1000, TC_GEMM_OWN_PORTABLE,
                    "own tensor core, portable (k 1000, odd n)", false);
        matmul_case(r, TC_DTYPE_F32, TC_DTYPE_F32, gm[i], 257, 1000, TC_GEMM_CUBLAS, "cublas",
                    false);
        matmul_case(r, TC_DTYPE_F32, TC_DTYPE_F32, gm[i], 257, 1000, TC_GEMM_OWN, "own simt",
                    false);
        matmul_case(r, TC_DTYPE_BF16, TC_DTYPE_BF16, gm[i], 65, 127, TC_GEMM_OWN,
                    "own simt (k 127)", false);
    }
    /* Enough tiles for the wgmma kernel's 128 x 256 ones (blocks >= SMs), with partial tiles on
     * both edges and a K tail; and a K of one step, shorter than the pipeline. */
    matmul_case(r, TC_DTYPE_BF16, TC_DTYPE_BF16, 1000, 4100, 520, TC_GEMM_OWN,
                "own tensor core (wide tiles)", false);
    matmul_case(r, TC_DTYPE_F16, TC_DTYPE_F16, 1000, 4099, 264, TC_GEMM_OWN,
                "own tensor core (wide tiles, odd n)", false);
    matmul_case(r, TC_DTYPE_BF16, TC_DTYPE_BF16, 130, 300, 8, TC_GEMM_OWN, "own tensor core (k 8)",
                false);
}

/* tc_linear (the decode step's fused layer) with each combination of its options (bit 0
 * SwiGLU, bit 1 accumulate, bit 2 the RMS norm of x's rows). For accumulate, out starts as
 * random values, so unwritten elements still fail. */
static void linear_case(rng_t *r, tc_dtype xt, tc_dtype wt, int64_t m, int64_t n, int64_t k,
                        int mode, bool dump_it)
{
    bool swiglu = mode & 1, acc = mode & 2, norm = mode & 4, nwt = mode & 8;
    const float eps = 1e-5f;
    tc_tensor gx, cx, gw, cw, go, co, old, gg, cg;
    double *xv = twin(r, xt, TC_SHAPE(m, k), -1, 1, &gx, &cx);
    double *wv = twin(r, wt, TC_SHAPE(swiglu ? 2 * n : n, k), -0.05, 0.05, &gw, &cw);
    double *ov = NULL;
    if (acc) {
        ov = twin(r, xt, TC_SHAPE(m, n), -1, 1, &go, &co);
        CHECK(tc_tensor_init(&old, gpu, xt, TC_SHAPE(m, n)));
        CHECK(tc_tensor_copy(&old, &go));
    } else {
        poisoned(&go, gpu, xt, TC_SHAPE(m, n));
        poisoned(&co, cpu, xt, TC_SHAPE(m, n));
    }
    double *gv = nwt ? twin(r, xt, TC_SHAPE(k), 0.5, 1.5, &gg, &cg) : NULL;
    tc_linear_opts o = { .swiglu = swiglu,
                         .accumulate = acc,
                         .rms_norm = norm,
                         .norm_eps = eps,
                         .norm_weight = nwt ? &gg : NULL };
    CHECK(tc_linear(&go, &gx, &gw, &o));
    o.norm_weight = nwt ? &cg : NULL;
    CHECK(tc_linear(&co, &cx, &cw, &o));
    double *want = calloc((size_t)(m * n), sizeof(double)),
           *xn = norm ? ref_rms_rows(xv, m, k, eps) : NULL;
    for (int64_t i = 0; nwt && i < m * k; i++)
        xn[i] *= gv[i % k];
    ref_linear(want, norm ? xn : xv, wv, swiglu, ov, m, n, k);
    char what[112];
    snprintf(what, sizeof what, "linear %s x %s [%lld x %lld x %lld] swiglu %d acc %d norm %d%s",
             tc_dtype_name(xt), tc_dtype_name(wt), (long long)m, (long long)n, (long long)k, swiglu,
             acc, norm, nwt ? " weight" : "");
    expect_close(what, &go, want, &co, tolerance(xt));
    free(xn), free(gv);
    if (nwt)
        tc_tensor_deinit(&gg), tc_tensor_deinit(&cg);
    if (dump_it) {
        char params[96];
        snprintf(params, sizeof params, "{\"swiglu\": %s, \"norm_eps\": %s}",
                 swiglu ? "true" : "false", norm ? "1e-5" : "null");
        begin_case("linear", params);
        dump("x", &gx), dump("w", &gw), dump("out", &go);
        if (acc)
            dump("acc", &old);
        end_case();
    }
    free(xv), free(wv), free(ov), free(want);
    tc_tensor_deinit(&gx), tc_tensor_deinit(&cx), tc_tensor_deinit(&gw), tc_tensor_deinit(&cw);
    tc_tensor_deinit(&go), tc_tensor_deinit(&co);
    if (acc)
        tc_tensor_deinit(&old);
}

/* tc_linear_pair: two products of one x (a layer's q/k beside its v), in one launch where the
 * weights' types have a kernel for it (one row of bf16 x over Q4_K and Q6_K), else as two
 * tc_linear; each output against the reference and the CPU op, both poisoned first. */
static void linear_pair_case(rng_t *r, tc_dtype wa, tc_dtype wb, int64_t m, int64_t na, int64_t nb,
                             int64_t k, bool norm, bool nwt)
{
    const float eps = 1e-5f;
    tc_tensor gx, cx, gwa, cwa, gwb, cwb, goa, coa, gob, cob, gg, cg;
    double *xv = twin(r, TC_DTYPE_BF16, TC_SHAPE(m, k), -1, 1, &gx, &cx);
    double *wav = twin(r, wa, TC_SHAPE(na, k), -0.05, 0.05, &gwa, &cwa);
    double *wbv = twin(r, wb, TC_SHAPE(nb, k), -0.05, 0.05, &gwb, &cwb);
    double *gv = nwt ? twin(r, TC_DTYPE_BF16, TC_SHAPE(k), 0.5, 1.5, &gg, &cg) : NULL;
    poisoned(&goa, gpu, TC_DTYPE_BF16, TC_SHAPE(m, na));
    poisoned(&coa, cpu, TC_DTYPE_BF16, TC_SHAPE(m, na));
    poisoned(&gob, gpu, TC_DTYPE_BF16, TC_SHAPE(m, nb));
    poisoned(&cob, cpu, TC_DTYPE_BF16, TC_SHAPE(m, nb));
    tc_linear_opts o = { .rms_norm = norm, .norm_eps = eps, .norm_weight = nwt ? &gg : NULL };
    CHECK(tc_linear_pair(&goa, &gob, &gx, &gwa, &gwb, &o));
    o.norm_weight = nwt ? &cg : NULL;
    CHECK(tc_linear_pair(&coa, &cob, &cx, &cwa, &cwb, &o));
    double *xn = norm ? ref_rms_rows(xv, m, k, eps) : NULL;
    for (int64_t i = 0; nwt && i < m * k; i++)
        xn[i] *= gv[i % k];
    double *wanta = calloc((size_t)(m * na), sizeof(double)),
           *wantb = calloc((size_t)(m * nb), sizeof(double));
    ref_linear(wanta, norm ? xn : xv, wav, false, NULL, m, na, k);
    ref_linear(wantb, norm ? xn : xv, wbv, false, NULL, m, nb, k);
    char what[112];
    snprintf(what, sizeof what, "linear_pair bf16 x %s, %s [%lld x %lld, %lld x %lld] norm %d%s",
             tc_dtype_name(wa), tc_dtype_name(wb), (long long)m, (long long)na, (long long)nb,
             (long long)k, norm, nwt ? " weight" : "");
    expect_close(what, &goa, wanta, &coa, tolerance(TC_DTYPE_BF16));
    expect_close("  the second product", &gob, wantb, &cob, tolerance(TC_DTYPE_BF16));
    free(xv), free(wav), free(wbv), free(gv), free(xn), free(wanta), free(wantb);
    if (nwt)
        tc_tensor_deinit(&gg), tc_tensor_deinit(&cg);
    tc_tensor_deinit(&gx), tc_tensor_deinit(&cx), tc_tensor_deinit(&gwa), tc_tensor_deinit(&cwa);
    tc_tensor_deinit(&gwb), tc_tensor_deinit(&cwb), tc_tensor_deinit(&goa), tc_tensor_deinit(&coa);
    tc_tensor_deinit(&gob), tc_tensor_deinit(&cob);
}

/* The batched pair kernel (tc__quant_batch_pair: 33-64 rows of bf16 x, Q4_K or Q5_K beside
 * Q6_K, one launch): each product against the reference and the CPU's, outputs poisoned; where
 * the GPU has no such kernel, refused. */
static void batch_pair_case(rng_t *r, tc_dtype wa, tc_dtype wb, int64_t m, int64_t na, int64_t nb,
                            int64_t k)
{
    tc_tensor gx, cx, gwa, cwa, gwb, cwb, goa, coa, gob, cob;
    double *xv = twin(r, TC_DTYPE_BF16, TC_SHAPE(m, k), -1, 1, &gx, &cx);
    double *wav = twin(r, wa, TC_SHAPE(na, k), -0.05, 0.05, &gwa, &cwa);
    double *wbv = twin(r, wb, TC_SHAPE(nb, k), -0.05, 0.05, &gwb, &cwb);
    poisoned(&goa, gpu, TC_DTYPE_BF16, TC_SHAPE(m, na));
    poisoned(&coa, cpu, TC_DTYPE_BF16, TC_SHAPE(m, na));
    poisoned(&gob, gpu, TC_DTYPE_BF16, TC_SHAPE(m, nb));
    poisoned(&cob, cpu, TC_DTYPE_BF16, TC_SHAPE(m, nb));
    char what[112];
    snprintf(what, sizeof what, "batched pair bf16 x %s, %s [%lld x %lld, %lld x %lld]",
             tc_dtype_name(wa), tc_dtype_name(wb), (long long)m, (long long)na, (long long)nb,
             (long long)k);
    tc_device_info info;
    CHECK(tc_device_info_get(0, &info));
    if (!tc__quant_batch_pair_fits(&gx, &gwa, &gwb)) {
        tc_status st = tc__quant_batch_pair(&goa, &gob, &gx, &gwa, &gwb);
        bool ok = info.cc_major != 9 && st == TC_ERR_UNSUPPORTED;
        printf("%-58s %s\n", what, ok ? "not on this GPU: refused  ok" : "FAIL (not taken)");
        failures += !ok;
        cases++;
    } else {
        CHECK(tc__quant_batch_pair(&goa, &gob, &gx, &gwa, &gwb));
        CHECK(tc_matmul(&coa, &cx, &cwa));
        CHECK(tc_matmul(&cob, &cx, &cwb));
        double *wanta = malloc(sizeof(double) * (size_t)(m * na)),
               *wantb = malloc(sizeof(double) * (size_t)(m * nb));
        ref_matmul(wanta, xv, wav, m, na, k);
        ref_matmul(wantb, xv, wbv, m, nb, k);
        expect_close(what, &goa, wanta, &coa, tolerance(TC_DTYPE_BF16));
        expect_close("  the second product", &gob, wantb, &cob, tolerance(TC_DTYPE_BF16));
        free(wanta), free(wantb);
    }
    free(xv), free(wav), free(wbv);
    tc_tensor_deinit(&gx), tc_tensor_deinit(&cx), tc_tensor_deinit(&gwa), tc_tensor_deinit(&cwa);
    tc_tensor_deinit(&gwb), tc_tensor_deinit(&cwb), tc_tensor_deinit(&goa), tc_tensor_deinit(&coa);
    tc_tensor_deinit(&gob), tc_tensor_deinit(&cob);
}

static void linear_pair(rng_t *r)
{
    /* The kernel: tiles not a multiple of 16 rows, several tiles a block (more tiles than the
     * GPU's blocks), a block a side; then pairs without one (other types, two rows). */
    linear_pair_case(r, TC_DTYPE_Q4_K, TC_DTYPE_Q6_K, 1, 1000, 600, 7 * 256, true, true);
    linear_pair_case(r, TC_DTYPE_Q4_K, TC_DTYPE_Q6_K, 1, 8192, 4096, 4096, true, true);
    linear_pair_case(r, TC_DTYPE_Q4_K, TC_DTYPE_Q6_K, 1, 5000, 3000, 2048, true, false);
    linear_pair_case(r, TC_DTYPE_Q4_K, TC_DTYPE_Q6_K, 1, 16, 8, 256, false, false);
    linear_pair_case(r, TC_DTYPE_Q5_K, TC_DTYPE_Q6_K, 1, 1000, 600, 7 * 256, true, true);
    linear_pair_case(r, TC_DTYPE_Q5_K, TC_DTYPE_Q6_K, 1, 8192, 4096, 4096, true, false);
    linear_pair_case(r, TC_DTYPE_Q4_0, TC_DTYPE_Q8_0, 1, 500, 300, 1024, true, true);
    linear_pair_case(r, TC_DTYPE_Q4_K, TC_DTYPE_Q6_K, 2, 500, 300, 1024, true, true);
    /* The batched pair: one share and several (clusters or ws), partial tiles, 33-64 rows. */
    batch_pair_case(r, TC_DTYPE_Q4_K, TC_DTYPE_Q6_K, 64, 8192, 4096, 4096);
    batch_pair_case(r, TC_DTYPE_Q4_K, TC_DTYPE_Q6_K, 40, 1000, 600, 7 * 256);
    batch_pair_case(r, TC_DTYPE_Q5_K, TC_DTYPE_Q6_K, 64, 4096, 4096, 11008);
    batch_pair_case(r, TC_DTYPE_Q5_K, TC_DTYPE_Q6_K, 33, 300, 1000, 512);
}

/* A product of quantised weights with f32 out (the logits: tc__matmul_widen; one row of bf16
 * x on the integer kernel, two over K-quants on the two-row one, up to 8 on the 2-8 row ones,
 * more on the batched ones) against the reference and the CPU's product of x widened to f32. */
static void linear_rope_case(rng_t *r, tc_dtype dt, tc_dtype wt, int64_t m, int64_t H, int64_t KV,
                             int hd, bool interleaved, bool norm, bool nwt, int32_t first_slot,
                             bool plain);

static void quant_widen_case(rng_t *r, tc_dtype xt, tc_dtype q, int64_t m, int64_t n, int64_t k)
{
    tc_tensor gx, cx, gw, cw, go, co, cxf;
    double *xv = twin(r, xt, TC_SHAPE(m, k), -1, 1, &gx, &cx);
    double *wv = twin(r, q, TC_SHAPE(n, k), -1, 1, &gw, &cw);
    poisoned(&go, gpu, TC_DTYPE_F32, TC_SHAPE(m, n));
    poisoned(&co, cpu, TC_DTYPE_F32, TC_SHAPE(m, n));
    CHECK(tc_tensor_init(&cxf, cpu, TC_DTYPE_F32, TC_SHAPE(m, k)));
    CHECK(tc_convert(&cxf, &cx));
    tc_status st = tc__matmul_widen(&go, &gx, &gw);
    CHECK(tc_matmul(&co, &cxf, &cw));
    double *want = malloc(sizeof(double) * (size_t)(m * n));
    ref_matmul(want, xv, wv, m, n, k);
    char what[96];
    snprintf(what, sizeof what, "matmul %s x %s -> f32 [%lld x %lld x %lld]", tc_dtype_name(xt),
             tc_dtype_name(q), (long long)m, (long long)n, (long long)k);
    if (st != TC_OK) {
        printf("%-58s %s  FAIL\n", what, tc_last_error());
        failures++, cases++;
    } else {
        expect_close(what, &go, want, &co, tolerance(xt));
    }
    free(xv), free(wv), free(want);
    tc_tensor_deinit(&gx), tc_tensor_deinit(&cx), tc_tensor_deinit(&gw), tc_tensor_deinit(&cw);
    tc_tensor_deinit(&go), tc_tensor_deinit(&co), tc_tensor_deinit(&cxf);
}

/* Two rows of bf16 x on the two-row integer kernel (where the GPU and type have one) give each
 * row's outputs bit for bit as that row alone on the one-row kernel does: the same digits, the
 * same products and the same order of sums, the RMSNorm in the product (mode as linear_case's
 * bits 1-8). */
static void two_rows_exact(rng_t *r, tc_dtype q, int64_t n, int64_t k, int mode)
{
    tc_tensor gx, cx, gw, cw, gg, cg, two, one[2], xr;
    double *xv = twin(r, TC_DTYPE_BF16, TC_SHAPE(2, k), -1, 1, &gx, &cx);
    bool swiglu = mode & 1;
    double *wv = twin(r, q, TC_SHAPE(swiglu ? 2 * n : n, k), -0.05, 0.05, &gw, &cw);
    double *gv = twin(r, TC_DTYPE_BF16, TC_SHAPE(k), 0.5, 1.5, &gg, &cg);
    char what[96];
    snprintf(what, sizeof what, "linear bf16 x %s [2 x %lld x %lld] mode %d: rows alone",
             tc_dtype_name(q), (long long)n, (long long)k, mode);
    if (!tc__quant_int_rows(&gx, &gw, 2)) {
        printf("%-58s skipped: no two-row kernel here\n", what);
    } else {
        tc_linear_opts o = { .swiglu = swiglu,
                             .accumulate = (mode & 2) != 0,
                             .rms_norm = (mode & 4) != 0,
                             .norm_eps = 1e-5f,
                             .norm_weight = mode & 8 ? &gg : NULL };
        size_t bytes = (size_t)n * 2 * sizeof(uint16_t);
        uint16_t *a = malloc(bytes), *b = malloc(bytes);
        tc_tensor *outs[3] = { &two, &one[0], &one[1] };
        for (int i = 0; i < 3; i++) {
            CHECK(tc_tensor_init(outs[i], gpu, TC_DTYPE_BF16, TC_SHAPE(i ? 1 : 2, n)));
            /* (the same start under accumulate: ones) */
            CHECK(tc_stream_memset(tc_backend_stream(gpu), (CUdeviceptr)(uintptr_t)outs[i]->data,
                                   o.accumulate ? 0x3F : 0xFF, tc_tensor_bytes(outs[i])));
        }
        CHECK(tc_linear(&two, &gx, &gw, &o));
        for (int i = 0; i < 2; i++) {
            CHECK(tc_tensor_slice(&gx, 0, i, 1, &xr));
            CHECK(tc_linear(&one[i], &xr, &gw, &o));
        }
        CHECK(tc_tensor_copy_to_host(&two, a, bytes));
        CHECK(tc_tensor_copy_to_host(&one[0], b, bytes / 2));
        CHECK(tc_tensor_copy_to_host(&one[1], b + n, bytes / 2));
        int64_t diff = 0, nan = 0;
        for (int64_t i = 0; i < 2 * n; i++) {
            diff += a[i] != b[i];
            nan += (a[i] & 0x7F80) == 0x7F80;
        }
        bool ok = diff == 0 && nan == 0;
        printf("%-58s %lld of %lld differ, %lld not finite  %s\n", what, (long long)diff,
               (long long)(2 * n), (long long)nan, ok ? "ok" : "FAIL");
        failures += !ok;
        cases++;
        free(a), free(b);
        for (int i = 0; i < 3; i++)
            tc_tensor_deinit(outs[i]);
    }
    free(xv), free(wv), free(gv);
    tc_tensor_deinit(&gx), tc_tensor_deinit(&cx), tc_tensor_deinit(&gw), tc_tensor_deinit(&cw);
    tc_tensor_deinit(&gg), tc_tensor_deinit(&cg);
}

/* Whether one row of bf16 x over type q (k columns) takes the integer kernel: every type on
 * Hopper, all but Q2_K and Q3_K elsewhere (a case of its own: a type that lost its kernel would
 * pass the other cases on another one). */
static bool one_row_integer(tc_dtype q, int64_t k)
{
    tc_tensor x, w;
    CHECK(tc_tensor_init(&x, gpu, TC_DTYPE_BF16, TC_SHAPE(1, k)));
    CHECK(tc_tensor_init(&w, gpu, q, TC_SHAPE(16, k)));
    tc_device_info info;
    CHECK(tc_device_info_get(0, &info));
    bool on = tc__quant_int_rows(&x, &w, 1),
         want = info.cc_major == 9 || (q != TC_DTYPE_Q2_K && q != TC_DTYPE_Q3_K);
    char what[96];
    snprintf(what, sizeof what, "one row of bf16 x over %s [%lld]: integer kernel %s",
             tc_dtype_name(q), (long long)k, want ? "taken" : "not here");
    printf("%-58s %s\n", what, on == want ? "ok" : "FAIL");
    failures += on != want;
    cases++;
    tc_tensor_deinit(&x), tc_tensor_deinit(&w);
    return on;
}

/* Every block-quantised type on CUDA (held as planes) against the reference over its
 * dequantised values and the CPU's product on the same blocks: the decode kernels of 1 to 8
 * rows (tensor cores for 16-bit x, f32 arithmetic for f32 x; partial tiles of 16 rows; K
 * types over 7 blocks a row), SwiGLU and accumulate, longer products through tiles of
 * dequantised rows and cuBLAS (several tiles), the embedding gather, and the file layout
 * coming back unchanged from the GPU. */
static void quantised(rng_t *r)
{
    const tc_dtype qs[] = { TC_DTYPE_Q4_0, TC_DTYPE_Q4_1, TC_DTYPE_Q5_0,     TC_DTYPE_Q5_1,
                            TC_DTYPE_Q8_0, TC_DTYPE_Q2_K, TC_DTYPE_Q3_K,     TC_DTYPE_Q4_K,
                            TC_DTYPE_Q5_K, TC_DTYPE_Q6_K, TC_DTYPE_Q4_1_G64, TC_DTYPE_Q4_1_G128 };
    for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
        tc_dtype q = qs[i];
        /* (q4_1_g64: 33 blocks, the last step of four a short one; q4_1_g128: 17, of two) */
        int64_t be = tc_dtype_block(q), k = be == 256   ? 7 * 256
                                            : be == 128 ? 2176
                                            : be == 64  ? 2112
                                                        : 2080;
        /* (2 rows of bf16 x over a K-quant: the two-row integer kernel on Hopper, the batched
         * one elsewhere; 8 rows: the batched kernel, tc__quant_batch_from) */
        const int64_t ms[] = { 1, 2, 8 };
        for (int mi = 0; mi < 3; mi++) {
            matmul_case(r, TC_DTYPE_BF16, q, ms[mi], 1000, k, TC_GEMM_AUTO, "decode", false);
            matmul_case(r, TC_DTYPE_F32, q, ms[mi], 999, k, TC_GEMM_AUTO, "decode, f32", false);
        }
        matmul_case(r, TC_DTYPE_F16, q, 5, 333, k, TC_GEMM_AUTO, "decode", false);
        matmul_case(r, TC_DTYPE_F16, q, 1, 333, k, TC_GEMM_AUTO, "decode", false);
        /* One row of bf16 x, rounded to 8 bits for the integer products, over a Llama-2-7B row
         * (11008: x's copy takes 16.5 KiB of the pipeline's shared memory). */
        matmul_case(r, TC_DTYPE_BF16, q, 1, 700, 11008, TC_GEMM_AUTO, "decode, long rows", false);
        /* Two rows over those (on Hopper Q4_K's two-row kernel with two stages of the pipeline
         * beside x's 55 KB of digits; Q5_K and Q6_K, whose two stages do not fit, the 2-8 row
         * kernel) and over several tiles a block, the norm in the product, the sums added. */
        matmul_case(r, TC_DTYPE_BF16, q, 2, 700, 11008, TC_GEMM_AUTO, "decode, long rows", false);
        linear_case(r, TC_DTYPE_BF16, q, 2, 5000, k, 6, false);
        if (q == TC_DTYPE_Q4_K || q == TC_DTYPE_Q5_K || q == TC_DTYPE_Q6_K) {
            two_rows_exact(r, q, 1000, k, 4);
            two_rows_exact(r, q, 5000, 4096, 13);
            two_rows_exact(r, q, 700, 11008, 2);
        }
        for (int mode = 2; mode < 4; mode++)
            linear_case(r, TC_DTYPE_BF16, q, 1, 600, k, mode, false);
        /* The RMSNorm in the product (one row), times its weight or not; two rows normalise
         * into scratch first. The logits' product: one row with f32 out. */
        for (int mode = 4; mode < 16; mode += mode == 7 ? 5 : 1)
            linear_case(r, TC_DTYPE_BF16, q, mode == 13 ? 2 : 1, 600, k, mode, false);
        /* A layer's q/k/v of one row: the norm and its weight in the integer kernel, then the
         * rotation and store (both orders of pairs). */
        const bool integer = one_row_integer(q, k);
        for (int mode = 0; integer && mode < 2; mode++)
            linear_rope_case(r, TC_DTYPE_BF16, q, 1, 8, 2, mode ? 64 : 128, !mode, true, true,
                             mode ? -1 : 3, false);
        /* The logits' product with f32 out (one row on the integer kernel: Q2_K's and Q3_K's
         * on the 2-8 row kernel before Hopper) */
        quant_widen_case(r, TC_DTYPE_BF16, q, 1, 700, k);
        quant_widen_case(r, TC_DTYPE_BF16, q, 2, 700, k);
        quant_widen_case(r, TC_DTYPE_BF16, q, 5, 700, k);
        quant_widen_case(r, TC_DTYPE_F16, q, 3, 700, k);
        /* More 16-row tiles than blocks (264 on the H100): blocks that take several, their
         * copies running ahead from one tile into the next. */
        matmul_case(r, TC_DTYPE_BF16, q, 1, 5000, k, TC_GEMM_AUTO, "decode, tiles a block", false);
        linear_case(r, TC_DTYPE_BF16, q, 2, 4500, k, 1, false);
        matmul_case(r, TC_DTYPE_BF16, q, 77, 5000, 4096, TC_GEMM_CUBLAS, "dequantised tiles",
                    false);
        matmul_case(r, TC_DTYPE_F32, q, 9, 300, k, TC_GEMM_AUTO, "dequantised tiles, f32", false);
        matmul_case(r, TC_DTYPE_BF16, q, 65, 300, k, TC_GEMM_OWN, "dequantised tiles, own", false);
        /* Batched decode, 9 to 64 rows (up to 32: the kernels of two blocks an SM): the
         * weights read and dequantised once for all rows, over shares of k that the last block
         * of each tile adds (1000 rows: 8 tiles, the last partial; it adds four rows at a time,
         * 999 and 702 rows leave a short last four), or in one share (120 tiles of one block an
         * SM fill an H100's wave); f32 logits. On Hopper a tile's shares are one cluster that
         * adds them in shared memory: four shares of 4096 (every type, the K types' only case of
         * several), three of 3072 with f16 x over a partial last tile. */
        matmul_case(r, TC_DTYPE_BF16, q, 64, 1000, 4096, TC_GEMM_AUTO, "batched, four shares",
                    false);
        matmul_case(r, TC_DTYPE_F16, q, 33, 999, 3072, TC_GEMM_AUTO, "batched, three shares",
                    false);
        /* 4096 x 4096 at 64 rows (Llama-2-7B's q, k, v and o in batched decode): on an H200 the
         * four shares' clusters of four do not all fit at once; Q4_K then takes three shares in
         * clusters of three, Q6_K four shares added through ws (tc__quant_batch). */
        if (q == TC_DTYPE_Q4_K || q == TC_DTYPE_Q6_K)
            matmul_case(r, TC_DTYPE_BF16, q, 64, 4096, 4096, TC_GEMM_AUTO, "batched, 4096 x 4096",
                        false);
        const int64_t bs[] = { 9, 16, 32, 33, 64 };
        for (int bi = 0; bi < 5; bi++)
            matmul_case(r, TC_DTYPE_BF16, q, bs[bi], 1000, k, TC_GEMM_AUTO, "batched", false);
        matmul_case(r, TC_DTYPE_F16, q, 24, 1000, k, TC_GEMM_AUTO, "batched", false);
        /* (f16 x up to 16 rows: Hopper's mma16816 loop, Q4_1's grouped types' raw sums under
         * f16's magic number) */
        matmul_case(r, TC_DTYPE_F16, q, 12, 1000, k, TC_GEMM_AUTO, "batched", false);
        matmul_case(r, TC_DTYPE_F16, q, 40, 15360, k, TC_GEMM_AUTO, "batched, one share", false);
        matmul_case(r, TC_DTYPE_BF16, q, 17, 999, k, TC_GEMM_AUTO, "batched", false);
        quant_widen_case(r, TC_DTYPE_BF16, q, 40, 700, k);
        quant_widen_case(r, TC_DTYPE_BF16, q, 12, 702, k);
        for (int mode = 1; mode < 4; mode++) {
            linear_case(r, TC_DTYPE_BF16, q, 1 + 3 * (mode - 1), 600, k, mode, false);
            linear_case(r, TC_DTYPE_F32, q, 3, 200, k, mode, false);
        }
        /* Embedding rows, and the blocks back as they went up. */
        tc_tensor gt, ct, gi, ci, go, co;
        int64_t vocab = 300, n = 37;
        double *tv = twin(r, q, TC_SHAPE(vocab, k), -1, 1, &gt, &ct);
        double *iv = twin(r, TC_DTYPE_I32, TC_SHAPE(n), 0, vocab, &gi, &ci);
        poisoned(&go, gpu, TC_DTYPE_BF16, TC_SHAPE(n, k));
        poisoned(&co, cpu, TC_DTYPE_BF16, TC_SHAPE(n, k));
        CHECK(tc_embedding(&go, &gt, &gi));
        CHECK(tc_embedding(&co, &ct, &ci));
        double *want = malloc(sizeof(double) * (size_t)(n * k));
        for (int64_t a = 0; a < n; a++)
            memcpy(want + a * k, tv + (int64_t)iv[a] * k, sizeof(double) * (size_t)k);
        char what[96];
        snprintf(what, sizeof what, "embedding %s -> bf16", tc_dtype_name(q));
        expect_close(what, &go, want, &co, tolerance(TC_DTYPE_BF16));
        size_t bytes = tc_tensor_bytes(&ct);
        void *back = malloc(bytes);
        CHECK(tc_tensor_copy_to_host(&gt, back, bytes));
        bool same = memcmp(back, ct.data, bytes) == 0;
        printf("%-58s %s\n", "  its blocks back from the GPU's planes", same ? "ok" : "FAIL");
        failures += !same;
        cases++;
        free(back), free(want), free(tv), free(iv);
        tc_tensor_deinit(&gt), tc_tensor_deinit(&ct), tc_tensor_deinit(&gi), tc_tensor_deinit(&ci);
        tc_tensor_deinit(&go), tc_tensor_deinit(&co);
    }
}

/* Whether the CUDA value `got` is the CPU's `want` (the same dtype's bits) or one unit in the
 * last place from it; NaN never passes. */
static bool within_ulp(tc_dtype dt, const void *got, const void *want, int64_t i)
{
    uint32_t a, b, sign = dt == TC_DTYPE_F32 ? 0x80000000u : 0x8000u;
    float fa, fb;
    if (dt == TC_DTYPE_F32) {
        memcpy(&a, (const float *)got + i, 4), memcpy(&b, (const float *)want + i, 4);
        memcpy(&fa, &a, 4), memcpy(&fb, &b, 4);
    } else {
        a = ((const uint16_t *)got)[i], b = ((const uint16_t *)want)[i];
        fa = dt == TC_DTYPE_BF16 ? tc__bf16_to_f32((uint16_t)a) : tc__f16_to_f32((uint16_t)a);
        fb = dt == TC_DTYPE_BF16 ? tc__bf16_to_f32((uint16_t)b) : tc__f16_to_f32((uint16_t)b);
    }
    if (isnan(fa) || isnan(fb))
        return false;
    uint32_t ma = a & ~sign, mb = b & ~sign;
    if ((a ^ b) & sign) /* only zeros of both signs */
        return ma == 0 && mb == 0;
    return (ma > mb ? ma - mb : mb - ma) <= 1;
}

/* The IQ family and the ternary types (kernels/iq.cu, through tc__iq_upload, as the loader
 * runs it) against the CPU's dequantisation of the same random blocks (src/model/quant.c,
 * itself checked against gguf-py), rounded to each activation dtype: every element the same
 * or one unit in the last place apart. The output is a row block inside a poisoned (NaN)
 * tensor, whose rows around it must stay poisoned; wrong byte counts and other types are
 * errors. */
static void iq_dequant(rng_t *r)
{
    /* ggml type, name, elements and bytes per block, the f16 d's offset (-1: IQ1_M's nibbles) */
    static const struct {
        tc_ggml_type type;
        int64_t be, bb;
        int d_at;
    } types[] = {
        { TC_GGML_IQ2_XXS, 256, 66, 0 }, { TC_GGML_IQ2_XS, 256, 74, 0 },
        { TC_GGML_IQ2_S, 256, 82, 0 },   { TC_GGML_IQ3_XXS, 256, 98, 0 },
        { TC_GGML_IQ3_S, 256, 110, 0 },  { TC_GGML_IQ1_S, 256, 50, 0 },
        { TC_GGML_IQ1_M, 256, 56, -1 },  { TC_GGML_IQ4_NL, 32, 18, 0 },
        { TC_GGML_IQ4_XS, 256, 136, 0 }, { TC_GGML_TQ1_0, 256, 54, 52 },
        { TC_GGML_TQ2_0, 256, 66, 64 },
    };
    const tc_dtype acts[] = { TC_DTYPE_BF16, TC_DTYPE_F16, TC_DTYPE_F32 };
    const int64_t shapes[][2] = { { 1, 256 }, { 3, 768 }, { 37, 2048 } }; /* rows, cols */
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (int si = 0; si < 3; si++) {
            int64_t rows = shapes[si][0], cols = shapes[si][1], n = rows * cols;
            int64_t blocks = n / types[ti].be;
            size_t bytes = (size_t)(blocks * types[ti].bb);
            uint8_t *raw = malloc(bytes);
            float *ref = malloc(sizeof(float) * (size_t)n);
            for (size_t i = 0; i < bytes; i++)
                raw[i] = (uint8_t)rng_next(r);
            for (int64_t b = 0; b < blocks; b++) {
                uint8_t *blk = raw + b * types[ti].bb;
                float d = (float)rng_uniform(r, -2.0, 2.0);
                uint16_t h = tc__f32_to_f16(d);
                if (types[ti].d_at >= 0) {
                    blk[types[ti].d_at] = (uint8_t)h, blk[types[ti].d_at + 1] = (uint8_t)(h >> 8);
                } else {
                    for (int w = 0; w < 4; w++) /* the top nibble of the u16 at 48 + 2 w */
                        blk[49 + 2 * w] =
                            (uint8_t)((blk[49 + 2 * w] & 0x0f) | ((h >> 4 * w) & 15) << 4);
                }
            }
            if (!tc_dequantize(types[ti].type, raw, (uint64_t)n, ref)) {
                printf("%s: no CPU dequantisation  FAIL\n", tc_ggml_type_name(types[ti].type));
                failures++, cases++;
                free(raw), free(ref);
                continue;
            }
            for (size_t ai = 0; ai < sizeof acts / sizeof acts[0]; ai++) {
                tc_dtype act = acts[ai];
                size_t es = tc_dtype_bytes(act, 1);
                uint8_t *want = malloc(es * (size_t)n), *got = malloc(es * (size_t)(n + 4 * cols));
                for (int64_t i = 0; i < n; i++) {
                    if (act == TC_DTYPE_F32)
                        memcpy(want + 4 * i, &ref[i], 4);
                    else {
                        uint16_t h =
                            act == TC_DTYPE_BF16 ? tc__f32_to_bf16(ref[i]) : tc__f32_to_f16(ref[i]);
                        memcpy(want + 2 * i, &h, 2);
                    }
                }
                tc_tensor whole, part;
                poisoned(&whole, gpu, act, TC_SHAPE(rows + 4, cols));
                CHECK(tc_tensor_slice(&whole, 0, 2, rows, &part));
                CHECK(tc__iq_upload(&part, (int32_t)types[ti].type, raw, bytes));
                CHECK(tc_tensor_copy_to_host(&whole, got, tc_tensor_bytes(&whole)));
                int64_t bad = 0, exact = 0, kept = 0;
                for (int64_t i = 0; i < n; i++) {
                    bad += !within_ulp(act, got + es * (size_t)(2 * cols), want, i);
                    exact +=
                        memcmp(got + es * (size_t)(2 * cols + i), want + es * (size_t)i, es) == 0;
                }
                for (size_t i = 0; i < es * (size_t)(2 * cols); i++) /* the rows around it */
                    kept += got[i] == 0xFF && got[es * (size_t)((rows + 2) * cols) + i] == 0xFF;
                bool ok = bad == 0 && kept == (int64_t)es * 2 * cols;
                printf("iq dequant %-8s -> %-4s [%3lld, %4lld]: %lld of %lld exact, %lld beyond 1 "
                       "ulp, "
                       "rows around %s  %s\n",
                       tc_ggml_type_name(types[ti].type), tc_dtype_name(act), (long long)rows,
                       (long long)cols, (long long)exact, (long long)n, (long long)bad,
                       kept == (int64_t)es * 2 * cols ? "kept" : "WRITTEN", ok ? "ok" : "FAIL");
                failures += !ok;
                cases++;
                tc_tensor_deinit(&whole);
                free(want), free(got);
            }
            free(raw), free(ref);
        }
    /* A byte short, and a type with no dequantising kernel: errors, nothing launched. */
    tc_tensor t;
    uint8_t raw[66] = { 0 };
    poisoned(&t, gpu, TC_DTYPE_BF16, TC_SHAPE(1, 256));
    tc_status short_st = tc__iq_upload(&t, TC_GGML_IQ2_XXS, raw, 65);
    tc_status other_st = tc__iq_upload(&t, TC_GGML_Q4_K, raw, 66);
    bool ok = short_st == TC_ERR_INVALID_ARGUMENT && other_st == TC_ERR_UNSUPPORTED;
    printf("%-58s %s\n", "iq dequant: a byte short, a type without a kernel: errors",
           ok ? "ok" : "FAIL");
    failures += !ok;
    cases++;
    tc_tensor_deinit(&t);
}

/* tc_linear_rope_store: one row runs the fused kernel, three rows the product and then
 * tc_rope_store; both against the double reference and the CPU op, with poisoned outputs and
 * a cache whose other rows must stay as they were. */
static void linear_rope_case(rng_t *r, tc_dtype dt, tc_dtype wt, int64_t m, int64_t H, int64_t KV,
                             int hd, bool interleaved, bool norm, bool nwt, int32_t first_slot,
                             bool plain)
{
    const float eps = 1e-5f;
    tc_rope_config c = llama3_rope(hd, interleaved);
    if (plain)
        c.scaling = TC_ROPE_PLAIN, c.theta = 10000.0;
    int64_t U = H + 2 * KV, n = U * hd, k = 1024, bs = 16, nb = 3, row = KV * hd;
    tc_tensor gx, cx, gw, cw, go, co, gkc, ckc, gvc, cvc, gp, cp, gs, cs;
    double *xv = twin(r, dt, TC_SHAPE(m, k), -1, 1, &gx, &cx);
    double *wv = twin(r, wt, TC_SHAPE(n, k), -0.05, 0.05, &gw, &cw);
    tc_tensor gg, cg;
    double *gv = nwt ? twin(r, dt, TC_SHAPE(k), 0.5, 1.5, &gg, &cg) : NULL;
    double *kcv = twin(r, dt, TC_SHAPE(nb, bs, KV, hd), -1, 1, &gkc, &ckc);
    double *vcv = twin(r, dt, TC_SHAPE(nb, bs, KV, hd), -1, 1, &gvc, &cvc);
    double *pv = twin(r, TC_DTYPE_I32, TC_SHAPE(m), 0, 131072, &gp, &cp);
    int32_t sl[3] = { first_slot, 17, 40 };
    CHECK(tc_tensor_init_from_host(&gs, gpu, TC_DTYPE_I32, TC_SHAPE(m), sl, sizeof(int32_t) * m));
    CHECK(tc_tensor_init_from_host(&cs, cpu, TC_DTYPE_I32, TC_SHAPE(m), sl, sizeof(int32_t) * m));
    poisoned(&go, gpu, dt, TC_SHAPE(m, n));
    poisoned(&co, cpu, dt, TC_SHAPE(m, n));
    tc_linear_opts o = { .rms_norm = norm, .norm_eps = eps, .norm_weight = nwt ? &gg : NULL };
    CHECK(tc_linear_rope_store(&go, &gx, &gw, &o, &gp, &c, &gkc, &gvc, &gs));
    o.norm_weight = nwt ? &cg : NULL;
    CHECK(tc_linear_rope_store(&co, &cx, &cw, &o, &cp, &c, &ckc, &cvc, &cs));
    double *want = malloc(sizeof(double) * (size_t)(m * n)),
           *xn = norm ? ref_rms_rows(xv, m, k, eps) : NULL;
    for (int64_t i = 0; nwt && i < m * k; i++)
        xn[i] *= gv[i % k];
    ref_linear(want, norm ? xn : xv, wv, false, NULL, m, n, k);
    double *qk = malloc(sizeof(double) * (size_t)(m * (H + KV) * hd));
    for (int64_t i = 0; i < m; i++)
        memcpy(qk + i * (H + KV) * hd, want + i * n, sizeof(double) * (size_t)((H + KV) * hd));
    ref_rope(qk, m, H + KV, cp.data, &c);
    for (int64_t i = 0; i < m; i++) {
        memcpy(want + i * n, qk + i * (H + KV) * hd, sizeof(double) * (size_t)((H + KV) * hd));
        if (sl[i] < 0)
            continue;
        memcpy(kcv + sl[i] * row, want + i * n + H * hd, sizeof(double) * (size_t)row);
        memcpy(vcv + sl[i] * row, want + i * n + (H + KV) * hd, sizeof(double) * (size_t)row);
    }
    char what[112];
    snprintf(what, sizeof what,
             "linear_rope_store %s x %s m %lld %lld/%lld heads of %d%s%s%s%s slot %d",
             tc_dtype_name(dt), tc_dtype_name(wt), (long long)m, (long long)H, (long long)KV, hd,
             interleaved ? " interleaved" : "", norm ? " norm" : "", nwt ? " weight" : "",
             plain ? " plain" : "", first_slot);
    expect_close(what, &go, want, &co, tolerance(dt));
    expect_close("  the k cache", &gkc, kcv, &ckc, tolerance(dt));
    expect_close("  the v cache", &gvc, vcv, &cvc, tolerance(dt));
    free(xv), free(wv), free(kcv), free(vcv), free(pv), free(want), free(xn), free(qk), free(gv);
    if (nwt)
        tc_tensor_deinit(&gg), tc_tensor_deinit(&cg);
    tc_tensor_deinit(&gx), tc_tensor_deinit(&cx), tc_tensor_deinit(&gw), tc_tensor_deinit(&cw);
    tc_tensor_deinit(&go), tc_tensor_deinit(&co), tc_tensor_deinit(&gkc), tc_tensor_deinit(&ckc);
    tc_tensor_deinit(&gvc), tc_tensor_deinit(&cvc), tc_tensor_deinit(&gp), tc_tensor_deinit(&cp);
    tc_tensor_deinit(&gs), tc_tensor_deinit(&cs);
}

static void linear_rope_store(rng_t *r)
{
    const tc_dtype dts[] = { TC_DTYPE_BF16, TC_DTYPE_F16, TC_DTYPE_F32 };
    for (int di = 0; di < 3; di++)
        for (int mode = 0; mode < 4; mode++) {
            bool il = mode & 1, norm = mode & 2;
            linear_rope_case(r, dts[di], dts[di], 1, 32, 8, 128, il, norm, false, 21, false);
            linear_rope_case(r, dts[di], dts[di], 1, 9, 3, 64, il, norm, false, mode == 3 ? -1 : 5,
                             false);
            linear_rope_case(r, dts[di], dts[di], 3, 4, 2, 32, il, norm, false, 2, false);
        }
    /* Quantised weights (the product, then tc_rope_store): one row of bf16 x (the integer
     * kernel, with the norm and its weight) and three; both orders of pairs, heads of 64 to
     * 256, plain frequencies and Llama 3's, no slot. */
    const tc_dtype qs[] = { TC_DTYPE_Q8_0, TC_DTYPE_Q4_0, TC_DTYPE_Q4_1 };
    for (int qi = 0; qi < 3; qi++) {
        linear_rope_case(r, TC_DTYPE_BF16, qs[qi], 1, 32, 8, 128, true, true, qi == 1, 21, false);
        linear_rope_case(r, TC_DTYPE_BF16, qs[qi], 1, 9, 3, 64, true, qi != 2, false, qi ? 5 : -1,
                         true);
        linear_rope_case(r, TC_DTYPE_BF16, qs[qi], 1, 32, 8, 80, true, true, qi == 2, 7, false);
        linear_rope_case(r, TC_DTYPE_BF16, qs[qi], 1, 8, 1, 256, true, true, true, 11, qi == 0);
        linear_rope_case(r, TC_DTYPE_BF16, qs[qi], 1, 32, 8, 128, false, true, false, 3, false);
        linear_rope_case(r, TC_DTYPE_BF16, qs[qi], 3, 4, 2, 32, true, true, false, 2, false);
    }
    /* head sizes of the generic attention kernels */
    for (int mode = 0; mode < 2; mode++) {
        linear_rope_case(r, TC_DTYPE_BF16, TC_DTYPE_BF16, 1, 32, 8, 80, mode, mode, false, 7,
                         false);
        linear_rope_case(r, TC_DTYPE_BF16, TC_DTYPE_BF16, 1, 32, 32, 96, mode, !mode, false, 3,
                         false);
        linear_rope_case(r, TC_DTYPE_BF16, TC_DTYPE_BF16, 1, 8, 1, 256, mode, mode, false, 11,
                         false);
        linear_rope_case(r, TC_DTYPE_F16, TC_DTYPE_F16, 1, 6, 2, 34, mode, mode, false, 1, false);
    }
}

static void linear(rng_t *r)
{
    const tc_dtype ws[] = { TC_DTYPE_BF16, TC_DTYPE_Q8_0, TC_DTYPE_Q4_0, TC_DTYPE_F32 };
    const int64_t ms[] = { 1, 5, 11 };
    for (int mode = 0; mode < 8; mode++)
        for (int mi = 0; mi < 3; mi++) {
            /* mode 4-7 repeat 0-3 with the other weight dtypes */
            /* PyTorch sees the float weights (it has no GGUF block types). */
            linear_case(r, TC_DTYPE_BF16, ws[mode % 4], ms[mi], 1000, 4096, mode & 3,
                        mi == 0 && !tc_dtype_is_block(ws[mode % 4]));
            linear_case(r, TC_DTYPE_F32, ws[(mode + 1) % 4], ms[mi], 999, 2048, mode & 3,
                        mi == 1 && !tc_dtype_is_block(ws[(mode + 1) % 4]));
        }
    linear_case(r, TC_DTYPE_F16, TC_DTYPE_F16, 2, 77, 127, 3, false);
    /* The tensor-core kernel with SwiGLU and accumulate: chunks not a multiple of the warps
     * (65 over 8) nor of the loads in flight; one chunk. */
    linear_case(r, TC_DTYPE_F16, TC_DTYPE_F16, 7, 100, 2080, 3, false);
    linear_case(r, TC_DTYPE_BF16, TC_DTYPE_BF16, 2, 17, 32, 1, false);
    /* The fused RMS norm (float weights), with each other option, one row and several, and
     * the one-element path (k 127). */
    const tc_dtype fw[] = { TC_DTYPE_BF16, TC_DTYPE_F32 };
    for (int mode = 4; mode < 8; mode++)
        for (int mi = 0; mi < 3; mi++) {
            linear_case(r, TC_DTYPE_BF16, fw[mode % 2], ms[mi], 1000, 4096, mode, mi < 2);
            linear_case(r, TC_DTYPE_F32, fw[(mode + 1) % 2], ms[mi], 999, 2048, mode, false);
        }
    linear_case(r, TC_DTYPE_F16, TC_DTYPE_F16, 1, 77, 127, 7, false);
    linear_case(r, TC_DTYPE_F16, TC_DTYPE_F16, 3, 77, 127, 5, false);
    /* tc_convert between every pair of float dtypes (the logits' bf16 to f32 among them). */
    const tc_dtype cvt[] = { TC_DTYPE_BF16, TC_DTYPE_F32, TC_DTYPE_F16 };
    for (int si = 0; si < 3; si++)
        for (int di = 0; di < 3; di++) {
            tc_tensor gx, cx, go, co;
            double *xv = twin(r, cvt[si], TC_SHAPE(37, 1001), -3, 3, &gx, &cx);
            poisoned(&go, gpu, cvt[di], TC_SHAPE(37, 1001));
            poisoned(&co, cpu, cvt[di], TC_SHAPE(37, 1001));
            CHECK(tc_convert(&go, &gx));
            CHECK(tc_convert(&co, &cx));
            char what[64];
            snprintf(what, sizeof what, "convert %s to %s [37 x 1001]", tc_dtype_name(cvt[si]),
                     tc_dtype_name(cvt[di]));
            expect_close(what, &go, xv, &co, tolerance(cvt[di]));
            free(xv);
            tc_tensor_deinit(&gx), tc_tensor_deinit(&cx), tc_tensor_deinit(&go),
                tc_tensor_deinit(&co);
        }
    /* to and from FP8 E4M3 (the KV caches' 8-bit type): rounding at most half its step of 1/16
     * below 1, 1/4 below 4, so at most 0.125 off for |x| < 4: against the largest |x| drawn
     * (the error measure's denominator; 0.125 / 3 failed where that was just under 3) */
    for (int si = 0; si < 3; si++)
        for (int back = 0; back < 2; back++) {
            tc_dtype from = back ? TC_DTYPE_F8E4M3 : cvt[si], to = back ? cvt[si] : TC_DTYPE_F8E4M3;
            tc_tensor gx, cx, go, co;
            double *xv = twin(r, from, TC_SHAPE(37, 1001), -3, 3, &gx, &cx), top = 0.0;
            for (int64_t i = 0; i < 37 * 1001; i++)
                top = fmax(top, fabs(xv[i]));
            poisoned(&go, gpu, to, TC_SHAPE(37, 1001));
            poisoned(&co, cpu, to, TC_SHAPE(37, 1001));
            CHECK(tc_convert(&go, &gx));
            CHECK(tc_convert(&co, &cx));
            char what[64];
            snprintf(what, sizeof what, "convert %s to %s [37 x 1001]", tc_dtype_name(from),
                     tc_dtype_name(to));
            expect_close(what, &go, xv, &co, back ? tolerance(to) : 0.125 / top);
            free(xv);
            tc_tensor_deinit(&gx), tc_tensor_deinit(&cx), tc_tensor_deinit(&go),
                tc_tensor_deinit(&co);
        }
    /* every FP8 code to f32 and f32 to FP8 bit for bit as the CPU's (NaN codes stay NaN) */
    {
        uint8_t codes[256];
        float vals[256], back[256];
        for (int i = 0; i < 256; i++)
            codes[i] = (uint8_t)i;
        tc_tensor g8, g32, g8b;
        CHECK(tc_tensor_init_from_host(&g8, gpu, TC_DTYPE_F8E4M3, TC_SHAPE(1, 256), codes,
                                       sizeof codes));
        poisoned(&g32, gpu, TC_DTYPE_F32, TC_SHAPE(1, 256));
        poisoned(&g8b, gpu, TC_DTYPE_F8E4M3, TC_SHAPE(1, 256));
        CHECK(tc_convert(&g32, &g8));
        CHECK(tc_tensor_copy_to_host(&g32, vals, sizeof vals));
        int bad = 0;
        for (int i = 0; i < 256; i++) {
            float want = tc__f8e4m3_to_f32((uint8_t)i);
            bad += isnan(want) ? !isnan(vals[i]) : memcmp(&want, &vals[i], 4) != 0;
            back[i] = want * (i % 3 == 0 ? 1.0f : 1.03125f); /* codes, and between them */
        }
        CHECK(tc_tensor_copy_from_host(&g32, back, sizeof back));
        CHECK(tc_convert(&g8b, &g32));
        CHECK(tc_tensor_copy_to_host(&g8b, codes, sizeof codes));
        for (int i = 0; i < 256; i++)
            bad += codes[i] != tc__f32_to_f8e4m3(back[i]);
        printf("%-58s %d differ  %s\n", "convert f8e4m3 <-> f32, every code, bit for bit", bad,
               bad ? "FAIL" : "ok");
        failures += bad != 0;
        cases++;
        tc_tensor_deinit(&g8), tc_tensor_deinit(&g32), tc_tensor_deinit(&g8b);
    }
    /* tc_scale_columns on the GPU against the CPU's (both round the same f32 product). */
    const tc_dtype dts[] = { TC_DTYPE_BF16, TC_DTYPE_F32, TC_DTYPE_F16 };
    for (int di = 0; di < 3; di++) {
        int64_t n = 3001, k = 577;
        tc_tensor gw, cw, gs, cs;
        double *wv = twin(r, dts[di], TC_SHAPE(n, k), -1, 1, &gw, &cw);
        double *sv = twin(r, dts[di], TC_SHAPE(k), 0.5, 1.5, &gs, &cs);
        CHECK(tc_scale_columns(&gw, &gs));
        CHECK(tc_scale_columns(&cw, &cs));
        double *want = malloc(sizeof(double) * (size_t)(n * k));
        for (int64_t i = 0; i < n * k; i++)
            want[i] = wv[i] * sv[i % k];
        char what[64];
        snprintf(what, sizeof what, "scale_columns %s [%lld x %lld]", tc_dtype_name(dts[di]),
                 (long long)n, (long long)k);
        expect_close(what, &gw, want, &cw, tolerance(dts[di]));
        free(wv), free(sv), free(want);
        tc_tensor_deinit(&gw), tc_tensor_deinit(&cw), tc_tensor_deinit(&gs), tc_tensor_deinit(&cs);
    }
}

static void swiglu_softmax_argmax(rng_t *r)
{
    const tc_dtype dts[] = { TC_DTYPE_BF16, TC_DTYPE_F32, TC_DTYPE_F16 };
    const int64_t fs[] = { 14336, 1536, 127 };
    for (int di = 0; di < 3; di++)
        for (int fi = 0; fi < 3; fi++) {
            tc_dtype dt = dts[di];
            int64_t n = 9, f = fs[fi];
            tc_tensor gb, cb, gg, gu, cg, cu, go, co;
            double *bv = twin(r, dt, TC_SHAPE(n, 2 * f), -4, 4, &gb, &cb);
            CHECK(tc_tensor_slice(&gb, 1, 0, f, &gg));
            CHECK(tc_tensor_slice(&gb, 1, f, f, &gu));
            CHECK(tc_tensor_slice(&cb, 1, 0, f, &cg));
            CHECK(tc_tensor_slice(&cb, 1, f, f, &cu));
            poisoned(&go, gpu, dt, TC_SHAPE(n, f));
            poisoned(&co, cpu, dt, TC_SHAPE(n, f));
            CHECK(tc_swiglu(&go, &gg, &gu));
            CHECK(tc_swiglu(&co, &cg, &cu));
            double *want = malloc(sizeof(double) * (size_t)(n * f));
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < f; j++) {
                    double g = bv[i * 2 * f + j], u = bv[i * 2 * f + f + j];
                    want[i * f + j] = g / (1 + exp(-g)) * u;
                }
            char what[96];
            snprintf(what, sizeof what, "swiglu %s [%lld x %lld] halves of one tensor",
                     tc_dtype_name(dt), (long long)n, (long long)f);
            expect_close(what, &go, want, &co, tolerance(dt));
            if (di == 0 && fi == 0) {
                begin_case("swiglu", "{}");
                dump("gate_up", &gb), dump("out", &go);
                end_case();
            }
            /* softmax over the same rows as logits */
            tc_tensor gs, cs;
            poisoned(&gs, gpu, dt, TC_SHAPE(n, f));
            poisoned(&cs, cpu, dt, TC_SHAPE(n, f));
            CHECK(tc_softmax(&gs, &gg));
            CHECK(tc_softmax(&cs, &cg));
            for (int64_t i = 0; i < n; i++) {
                double mx = -INFINITY, s = 0;
                for (int64_t j = 0; j < f; j++)
                    mx = fmax(mx, bv[i * 2 * f + j]);
                for (int64_t j = 0; j < f; j++)
                    s += exp(bv[i * 2 * f + j] - mx);
                for (int64_t j = 0; j < f; j++)
                    want[i * f + j] = exp(bv[i * 2 * f + j] - mx) / s;
            }
            snprintf(what, sizeof what, "softmax %s [%lld x %lld]", tc_dtype_name(dt), (long long)n,
                     (long long)f);
            expect_close(what, &gs, want, &cs, tolerance(dt));
            if (di == 1 && fi == 0) {
                begin_case("softmax", "{\"of\": \"gate half\"}");
                dump("gate_up", &gb), dump("out", &gs);
                end_case();
            }
            /* argmax of the gate half, with a planted tie in each row: the lower index wins */
            double *tie = malloc(sizeof(double) * (size_t)n);
            for (int64_t i = 0; i < n; i++) {
                int64_t j1 = (i * 37) % f, j2 = j1 + (f - j1) / 2;
                tc__store(dt, tc__row(&cg, i), j1, 100.0f);
                tc__store(dt, tc__row(&cg, i), j2, 100.0f);
                tie[i] = (double)j1;
            }
            CHECK(tc_tensor_copy(&gb, &cb));
            tc_tensor ga, ca;
            poisoned(&ga, gpu, TC_DTYPE_I32, TC_SHAPE(n));
            poisoned(&ca, cpu, TC_DTYPE_I32, TC_SHAPE(n));
            CHECK(tc_argmax(&ga, &gg));
            CHECK(tc_argmax(&ca, &cg));
            snprintf(what, sizeof what, "  argmax %s, tied rows (the lower index)",
                     tc_dtype_name(dt));
            expect_close(what, &ga, tie, &ca, 0.0);
            free(tie);
            free(bv), free(want);
            tc_tensor_deinit(&gs), tc_tensor_deinit(&cs), tc_tensor_deinit(&ga),
                tc_tensor_deinit(&ca);
            tc_tensor_deinit(&gb), tc_tensor_deinit(&cb), tc_tensor_deinit(&go),
                tc_tensor_deinit(&co);
        }
}

/* Argmax of a few long rows, cut into chunks (decode's vocabularies, an odd width too): ties
 * planted in two chunks (the lower index wins) and a NaN after the maximum (NaN loses), twice
 * in a row (the chunks' arrival counters must come back to zero). */
/* A linear layer's bias added to rows of one fused product's middle part (strided rows, as
 * Qwen2's k part of the q/k/v product), widths that are and are not a multiple of the
 * 16-byte vector, against the double sum and the CPU op. */
static void add_bias(rng_t *r)
{
    const tc_dtype dts[] = { TC_DTYPE_BF16, TC_DTYPE_F32, TC_DTYPE_F16 };
    const int64_t ws[][3] = {
        { 37, 1536, 256 }, { 3, 2048, 512 }, { 9, 131, 17 }, { 300, 896, 128 }
    };
    for (int di = 0; di < 3; di++)
        for (int wi = 0; wi < 4; wi++) {
            tc_dtype dt = dts[di];
            int64_t n = ws[wi][0], d = ws[wi][2], wide = ws[wi][1] + 2 * d;
            tc_tensor ga, ca, gx, cx, gb, cb;
            double *av = twin(r, dt, TC_SHAPE(n, wide), -2, 2, &ga, &ca);
            double *bv = twin(r, dt, TC_SHAPE(d), -2, 2, &gb, &cb);
            CHECK(tc_tensor_slice(&ga, 1, ws[wi][1], d, &gx));
            CHECK(tc_tensor_slice(&ca, 1, ws[wi][1], d, &cx));
            CHECK(tc_add_bias(&gx, &gb));
            CHECK(tc_add_bias(&cx, &cb));
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < d; j++)
                    av[i * wide + ws[wi][1] + j] += bv[j];
            char what[96];
            snprintf(what, sizeof what, "add_bias %s [%lld x %lld] of rows %lld wide",
                     tc_dtype_name(dt), (long long)n, (long long)d, (long long)wide);
            /* the whole tensor: the columns beside the part must stay as they were */
            expect_close(what, &ga, av, &ca, tolerance(dt));
            free(av), free(bv);
            tc_tensor_deinit(&ga), tc_tensor_deinit(&ca), tc_tensor_deinit(&gb),
                tc_tensor_deinit(&cb);
        }
}

static void argmax_long_rows(rng_t *r)
{
    const tc_dtype dts[] = { TC_DTYPE_F32, TC_DTYPE_BF16, TC_DTYPE_F16 };
    const int64_t ds[] = { 128256, 32000, 49153 };
    for (int di = 0; di < 3; di++)
        for (int wi = 0; wi < 3; wi++) {
            int64_t n = wi == 0 ? 1 : 3, d = ds[wi];
            tc_tensor gx, cx, ga, ca;
            double *xv = twin(r, dts[di], TC_SHAPE(n, d), -4, 4, &gx, &cx);
            double *want = malloc(sizeof(double) * (size_t)n);
            for (int64_t i = 0; i < n; i++) {
                int64_t j1 = 5000 + i * 977, j2 = d - 1 - i * 31;
                tc__store(dts[di], tc__row(&cx, i), j1, 100.0f);
                tc__store(dts[di], tc__row(&cx, i), j2, 100.0f);
                tc__store(dts[di], tc__row(&cx, i), j1 + 4096, NAN);
                want[i] = (double)j1;
            }
            CHECK(tc_tensor_copy(&gx, &cx));
            for (int rep = 0; rep < 2; rep++) {
                poisoned(&ga, gpu, TC_DTYPE_I32, TC_SHAPE(n));
                poisoned(&ca, cpu, TC_DTYPE_I32, TC_SHAPE(n));
                CHECK(tc_argmax(&ga, &gx));
                CHECK(tc_argmax(&ca, &cx));
                char what[96];
                snprintf(what, sizeof what, "argmax %s [%lld x %lld] in chunks, run %d",
                         tc_dtype_name(dts[di]), (long long)n, (long long)d, rep + 1);
                expect_close(what, &ga, want, &ca, 0.0);
                tc_tensor_deinit(&ga), tc_tensor_deinit(&ca);
            }
            free(xv), free(want);
            tc_tensor_deinit(&gx), tc_tensor_deinit(&cx);
        }
}

/* Constrained rows of logits (grammar masks, logit bias with repeats and bans, rows that allow
 * nothing, masks with stray bits past the vocabulary and extra words) against the CPU op and a
 * plain loop, bit for bit: the rows left unconstrained are poisoned and must stay so. Then the
 * time of a step's constraints (upload and kernel, what the engine waits for in stream order)
 * at Llama 3's vocabulary. */
static void logits_mask(rng_t *r)
{
    static const int64_t vocabs[] = { 1, 1000, 32000, 49152 + 17, 128256 };
    for (size_t vi = 0; vi < sizeof vocabs / sizeof *vocabs; vi++)
        for (int trial = 0; trial < 3; trial++) {
            int64_t n = trial == 0 ? 1 : 1 + rng_int(r, 9), V = vocabs[vi];
            tc_logits_constraint c[16];
            void *mem;
            int32_t k = random_constraints(r, n, V, trial & 1, c, &mem);
            tc_tensor gx, cx;
            double *xv = twin(r, TC_DTYPE_F32, TC_SHAPE(n, V), -8, 8, &gx, &cx);
            bool *constrained = calloc((size_t)n, 1);
            for (int32_t i = 0; i < k; i++)
                constrained[c[i].row] = true;
            for (int64_t i = 0; i < n; i++)
                if (!constrained[i])
                    memset(tc__row(&cx, i), 0xFF, sizeof(float) * (size_t)V);
            CHECK(tc_tensor_copy(&gx, &cx));
            float *want = malloc(sizeof(float) * (size_t)(n * V)),
                  *got = malloc(sizeof(float) * (size_t)(n * V));
            memcpy(want, cx.data, sizeof(float) * (size_t)(n * V));
            for (int32_t i = 0; i < k; i++)
                ref_logits_mask(want + c[i].row * V, V, &c[i]);
            CHECK(tc_logits_mask(&gx, c, k));
            CHECK(tc_logits_mask(&cx, c, k));
            CHECK(tc_tensor_copy_to_host(&gx, got, sizeof(float) * (size_t)(n * V)));
            int64_t bad = -1;
            for (int64_t i = 0; i < n * V && bad < 0; i++)
                if (memcmp(&got[i], &want[i], 4) || memcmp(&got[i], (float *)cx.data + i, 4))
                    bad = i;
            cases++;
            if (bad >= 0) {
                failures++;
                printf("FAIL logits_mask [%lld x %lld], %d constrained rows: element %lld is %g, "
                       "want %g (CPU op %g)\n",
                       (long long)n, (long long)V, k, (long long)bad, (double)got[bad],
                       (double)want[bad], (double)((float *)cx.data)[bad]);
            } else {
                printf("ok   logits_mask [%lld x %lld], %d constrained rows\n", (long long)n,
                       (long long)V, k);
            }
            free(want), free(got), free(constrained), free(mem), free(xv);
            tc_tensor_deinit(&gx), tc_tensor_deinit(&cx);
        }
    /* Timing: every row masked (about half the tokens allowed) with 8 biases. */
    for (int64_t n = 1; n <= 32; n *= 32) {
        int64_t V = 128256, W = (V + 31) / 32;
        tc_tensor gx;
        CHECK(tc_tensor_init(&gx, gpu, TC_DTYPE_F32, TC_SHAPE(n, V)));
        uint32_t *words = malloc(sizeof *words * (size_t)(W * n));
        int32_t ids[8];
        float bias[8];
        for (int64_t i = 0; i < W * n; i++)
            words[i] = (uint32_t)rng_next(r);
        for (int j = 0; j < 8; j++)
            ids[j] = (int32_t)rng_int(r, V), bias[j] = 1.0f;
        tc_logits_constraint c[32];
        for (int64_t i = 0; i < n; i++)
            c[i] = (tc_logits_constraint){ i, words + W * i, W, ids, bias, 8 };
        double t[21];
        for (int rep = 0; rep < 21; rep++) {
            CHECK(tc_backend_synchronize(gpu));
            double t0 = tc_host_seconds();
            CHECK(tc_logits_mask(&gx, c, (int32_t)n));
            CHECK(tc_backend_synchronize(gpu));
            t[rep] = tc_host_seconds() - t0;
        }
        printf("time logits_mask: %lld rows of %lld logits in %.1f us (median of 21: %.0f KiB up, "
               "one kernel, one wait)\n",
               (long long)n, (long long)V, median(t, 21) * 1e6,
               (double)(sizeof *words * (size_t)(W * n)) / 1024);
        free(words);
        tc_tensor_deinit(&gx);
    }
}

/* Record an attention case (inputs and the CUDA output) for the PyTorch comparison. */
static void dump_attention(const paged_case *c, const tc_tensor *out, double scale)
{
    if (!dump_dir)
        return;
    char params[128];
    snprintf(params, sizeof params, "{\"scale\": %.17g, \"block_size\": %lld}", scale,
             (long long)c->bs);
    begin_case("attention", params);
    dump("q", &c->tq), dump("k_cache", &c->tk), dump("v_cache", &c->tv),
        dump("block_table", &c->ttable);
    dump("seq_lens", &c->tlens), dump("q_start", &c->tqstart), dump("out", out);
    end_case();
}

/* Decode with cache blocks that are not a multiple of the kernels' 16-token tile, and twice in
 * a row: the second run finds the merge's arrival counters where the first left them; then
 * prefill over the same block sizes. */
static void decode_odd_blocks(rng_t *r, tc_dtype dt, const char *note)
{
    struct {
        int64_t H, KV, hd, bs;
    } shapes[] = { { 32, 8, 128, 24 }, { 16, 1, 64, 7 }, { 12, 12, 128, 40 } };
    for (int si = 0; si < 3; si++) {
        int64_t H = shapes[si].H, KV = shapes[si].KV, hd = shapes[si].hd;
        double scale = 1.0 / sqrt((double)hd);
        int64_t len[] = { 3, 200, 2999 }, ones[] = { 1, 1, 1 };
        paged_case gc, cc;
        rng_t r2 = *r;
        CHECK(paged_build(&gc, r, gpu, dt, 3, len, ones, H, KV, hd, shapes[si].bs));
        CHECK(paged_build(&cc, &r2, cpu, dt, 3, len, ones, H, KV, hd, shapes[si].bs));
        tc_tensor co;
        poisoned(&co, cpu, dt, TC_SHAPE(3, H, hd));
        CHECK(
            tc_attention_decode(&co, &cc.tq, &cc.tk, &cc.tv, &cc.ttable, &cc.tlens, (float)scale));
        double *want = paged_reference(&cc, scale);
        for (int run = 0; run < 2; run++) {
            tc_tensor go;
            poisoned(&go, gpu, dt, TC_SHAPE(3, H, hd));
            CHECK(tc_attention_decode(&go, &gc.tq, &gc.tk, &gc.tv, &gc.ttable, &gc.tlens,
                                      (float)scale));
            char what[128];
            snprintf(what, sizeof what,
                     "attention decode %s H %lld KV %lld hd %lld, block size %lld, run %d%s",
                     tc_dtype_name(dt), (long long)H, (long long)KV, (long long)hd,
                     (long long)shapes[si].bs, run + 1, note);
            expect_close(what, &go, want, &co, tolerance(dt));
            tc_tensor_deinit(&go);
        }
        free(want);
        tc_tensor_deinit(&co);
        paged_free(&gc), paged_free(&cc);

        /* prefill over the same block size: a whole prompt and chunks continuing a prefix */
        int64_t plen[] = { 3, 200, 777 }, pm[] = { 3, 150, 100 };
        r2 = *r;
        CHECK(paged_build(&gc, r, gpu, dt, 3, plen, pm, H, KV, hd, shapes[si].bs));
        CHECK(paged_build(&cc, &r2, cpu, dt, 3, plen, pm, H, KV, hd, shapes[si].bs));
        tc_tensor go;
        poisoned(&go, gpu, dt, TC_SHAPE(gc.n_tokens, H, hd));
        poisoned(&co, cpu, dt, TC_SHAPE(cc.n_tokens, H, hd));
        CHECK(tc_attention_prefill(&go, &gc.tq, &gc.tk, &gc.tv, &gc.ttable, &gc.tlens, &gc.tqstart,
                                   (float)scale));
        CHECK(tc_attention_prefill(&co, &cc.tq, &cc.tk, &cc.tv, &cc.ttable, &cc.tlens, &cc.tqstart,
                                   (float)scale));
        want = paged_reference(&cc, scale);
        char what[128];
        snprintf(what, sizeof what,
                 "attention prefill %s H %lld KV %lld hd %lld, block size %lld%s",
                 tc_dtype_name(dt), (long long)H, (long long)KV, (long long)hd,
                 (long long)shapes[si].bs, note);
        expect_close(what, &go, want, &co, tolerance(dt));
        free(want);
        tc_tensor_deinit(&go), tc_tensor_deinit(&co);
        paged_free(&gc), paged_free(&cc);
    }
}

/* A decode step's order: the kernel just before the decode stores each sequence's newest row,
 * and the decode (fresh_rows 1) reads the older rows while that kernel runs. Runs alternate
 * between two sets of new rows, each unlike the rows it replaces, so that a row read before
 * its store lands fails the comparison. The caches hold kv_dt (dt's, or FP8 E4M3). */
static void decode_after_store(rng_t *r, tc_dtype dt, int64_t H, int64_t KV, int64_t hd,
                               tc_dtype kv_dt)
{
    int64_t len[] = { 1, 77, 300, 4096 }, ones[] = { 1, 1, 1, 1 }, n = 4;
    double scale = 1.0 / sqrt((double)hd);
    paged_case gc, cc;
    rng_t r2 = *r;
    CHECK(paged_build_kv(&gc, r, gpu, dt, kv_dt, 1.0, n, len, ones, H, KV, hd, 16));
    CHECK(paged_build_kv(&cc, &r2, cpu, dt, kv_dt, 1.0, n, len, ones, H, KV, hd, 16));
    int32_t slots[4];
    for (int64_t s = 0; s < n; s++) {
        int64_t t = len[s] - 1;
        slots[s] = (int32_t)(cc.table[s * cc.max_blocks + t / 16] * 16 + t % 16);
    }
    tc_tensor gs, cs, gk[2], ck[2], gv[2], cv[2];
    CHECK(tc_tensor_init_from_host(&gs, gpu, TC_DTYPE_I32, TC_SHAPE(n), slots, sizeof slots));
    CHECK(tc_tensor_init_from_host(&cs, cpu, TC_DTYPE_I32, TC_SHAPE(n), slots, sizeof slots));
    double *kv[2], *vv[2];
    for (int i = 0; i < 2; i++) {
        kv[i] = twin(r, dt, TC_SHAPE(n, KV, hd), 2, 3, &gk[i], &ck[i]);
        vv[i] = twin(r, dt, TC_SHAPE(n, KV, hd), -3, -2, &gv[i], &cv[i]);
    }
    const tc_attention_opts early = { .fresh_rows = 1 };
    for (int run = 0; run < 4; run++) {
        int i = run % 2;
        tc_tensor go, co;
        poisoned(&go, gpu, dt, TC_SHAPE(n, H, hd));
        poisoned(&co, cpu, dt, TC_SHAPE(n, H, hd));
        CHECK(tc_attention_store(&gc.tk, &gc.tv, &gk[i], &gv[i], &gs));
        CHECK(tc_attention_decode_ex(&go, &gc.tq, &gc.tk, &gc.tv, &gc.ttable, &gc.tlens,
                                     (float)scale, &early));
        CHECK(tc_attention_store(&cc.tk, &cc.tv, &ck[i], &cv[i], &cs));
        CHECK(
            tc_attention_decode(&co, &cc.tq, &cc.tk, &cc.tv, &cc.ttable, &cc.tlens, (float)scale));
        /* the reference's newest rows: the new rows as the cache holds them */
        bool fp8 = kv_dt == TC_DTYPE_F8E4M3;
        for (int64_t s = 0; s < n; s++)
            for (int64_t e = 0; e < KV * hd; e++) {
                double k = kv[i][s * KV * hd + e], v = vv[i][s * KV * hd + e];
                cc.k[s][(len[s] - 1) * KV * hd + e] =
                    fp8 ? tc__f8e4m3_to_f32(tc__f32_to_f8e4m3((float)k)) : k;
                cc.v[s][(len[s] - 1) * KV * hd + e] =
                    fp8 ? tc__f8e4m3_to_f32(tc__f32_to_f8e4m3((float)v)) : v;
            }
        double *want = paged_reference(&cc, scale);
        char what[128];
        snprintf(what, sizeof what,
                 "attention decode after store %s H %lld KV %lld hd %lld%s, run %d",
                 tc_dtype_name(dt), (long long)H, (long long)KV, (long long)hd,
                 fp8 ? ", f8e4m3 cache" : "", run + 1);
        expect_close(what, &go, want, &co, tolerance(dt));
        free(want);
        tc_tensor_deinit(&go), tc_tensor_deinit(&co);
    }
    for (int i = 0; i < 2; i++) {
        free(kv[i]), free(vv[i]);
        tc_tensor_deinit(&gk[i]), tc_tensor_deinit(&ck[i]);
        tc_tensor_deinit(&gv[i]), tc_tensor_deinit(&cv[i]);
    }
    tc_tensor_deinit(&gs), tc_tensor_deinit(&cs);
    paged_free(&gc), paged_free(&cc);
}

/* Batch 1, as a decode step runs it (fresh_rows 1): the splits of one sequence (16 with 8 KV
 * heads on the H100, more with 1 or 2) over a table `cap` tokens wide holding `len` (splits
 * past len are empty; short splits prefetch their later tiles). Run twice: the arrival counters
 * a launch leaves must be reset for the next. */
static void decode_batch1(rng_t *r, tc_dtype dt, int64_t H, int64_t KV, int64_t hd, int64_t cap,
                          int64_t len)
{
    int64_t lens[] = { cap }, ones[] = { 1 };
    double scale = 1.0 / sqrt((double)hd);
    paged_case gc, cc;
    rng_t r2 = *r;
    CHECK(paged_build(&gc, r, gpu, dt, 1, lens, ones, H, KV, hd, 16));
    CHECK(paged_build(&cc, &r2, cpu, dt, 1, lens, ones, H, KV, hd, 16));
    int32_t l32 = (int32_t)len;
    CHECK(tc_tensor_copy_from_host(&gc.tlens, &l32, sizeof l32));
    CHECK(tc_tensor_copy_from_host(&cc.tlens, &l32, sizeof l32));
    cc.len[0] = len;
    cc.lens[0] = l32;
    double *want = paged_reference(&cc, scale);
    const tc_attention_opts early = { .fresh_rows = 1 };
    for (int run = 0; run < 2; run++) {
        tc_tensor go, co;
        poisoned(&go, gpu, dt, TC_SHAPE(1, H, hd));
        poisoned(&co, cpu, dt, TC_SHAPE(1, H, hd));
        CHECK(tc_attention_decode_ex(&go, &gc.tq, &gc.tk, &gc.tv, &gc.ttable, &gc.tlens,
                                     (float)scale, &early));
        CHECK(
            tc_attention_decode(&co, &cc.tq, &cc.tk, &cc.tv, &cc.ttable, &cc.tlens, (float)scale));
        char what[128];
        snprintf(what, sizeof what,
                 "attention decode batch 1 %s H %lld KV %lld hd %lld, %lld of %lld, run %d",
                 tc_dtype_name(dt), (long long)H, (long long)KV, (long long)hd, (long long)len,
                 (long long)cap, run + 1);
        expect_close(what, &go, want, &co, tolerance(dt));
        tc_tensor_deinit(&go), tc_tensor_deinit(&co);
    }
    free(want);
    paged_free(&gc), paged_free(&cc);
}

static void attention(rng_t *r)
{
    struct {
        int64_t H, KV, hd;
    } shapes[] = { { 32, 32, 128 }, { 32, 8, 128 }, { 9, 3, 64 }, { 16, 1, 64 }, { 64, 4, 128 } };
    const tc_dtype dts[] = { TC_DTYPE_BF16, TC_DTYPE_F32 };
    for (int si = 0; si < 5; si++)
        for (int di = 0; di < 2; di++) {
            tc_dtype dt = dts[di];
            int64_t H = shapes[si].H, KV = shapes[si].KV, hd = shapes[si].hd;
            double scale = 1.0 / sqrt((double)hd);
            /* decode: a batch of cache lengths up to 8192 */
            int64_t dlen[] = { 1, 17, 1000, 4096, 8192 }, ones[] = { 1, 1, 1, 1, 1 };
            paged_case gc, cc;
            rng_t r2 = *r;
            CHECK(paged_build(&gc, r, gpu, dt, 5, dlen, ones, H, KV, hd, 16));
            CHECK(paged_build(&cc, &r2, cpu, dt, 5, dlen, ones, H, KV, hd, 16));
            tc_tensor go, co;
            poisoned(&go, gpu, dt, TC_SHAPE(5, H, hd));
            poisoned(&co, cpu, dt, TC_SHAPE(5, H, hd));
            CHECK(tc_attention_decode(&go, &gc.tq, &gc.tk, &gc.tv, &gc.ttable, &gc.tlens,
                                      (float)scale));
            CHECK(tc_attention_decode(&co, &cc.tq, &cc.tk, &cc.tv, &cc.ttable, &cc.tlens,
                                      (float)scale));
            double *want = paged_reference(&cc, scale);
            char what[128];
            snprintf(what, sizeof what, "attention decode %s H %lld KV %lld hd %lld, lens 1..8192",
                     tc_dtype_name(dt), (long long)H, (long long)KV, (long long)hd);
            expect_close(what, &go, want, &co, tolerance(dt));
            free(want);
            if (di == 0)
                dump_attention(&gc, &go, scale);
            tc_tensor_deinit(&go), tc_tensor_deinit(&co);
            paged_free(&gc), paged_free(&cc);

            /* prefill: whole prompts and chunks that continue a cached prefix */
            int64_t plen[] = { 1, 77, 300, 600 }, pm[] = { 1, 77, 45, 600 };
            r2 = *r;
            CHECK(paged_build(&gc, r, gpu, dt, 4, plen, pm, H, KV, hd, 16));
            CHECK(paged_build(&cc, &r2, cpu, dt, 4, plen, pm, H, KV, hd, 16));
            poisoned(&go, gpu, dt, TC_SHAPE(gc.n_tokens, H, hd));
            poisoned(&co, cpu, dt, TC_SHAPE(cc.n_tokens, H, hd));
            CHECK(tc_attention_prefill(&go, &gc.tq, &gc.tk, &gc.tv, &gc.ttable, &gc.tlens,
                                       &gc.tqstart, (float)scale));
            CHECK(tc_attention_prefill(&co, &cc.tq, &cc.tk, &cc.tv, &cc.ttable, &cc.tlens,
                                       &cc.tqstart, (float)scale));
            want = paged_reference(&cc, scale);
            snprintf(what, sizeof what, "attention prefill %s H %lld KV %lld hd %lld, 4 seqs",
                     tc_dtype_name(dt), (long long)H, (long long)KV, (long long)hd);
            expect_close(what, &go, want, &co, tolerance(dt));
            free(want);
            if (di == 0)
                dump_attention(&gc, &go, scale);
            tc_tensor_deinit(&go), tc_tensor_deinit(&co);
            paged_free(&gc), paged_free(&cc);
        }
    /* one 8192-token prompt: checked against PyTorch's SDPA only (the double reference would
     * take minutes) */
    if (dump_dir) {
        int64_t len[] = { 8192 };
        paged_case gc;
        CHECK(paged_build(&gc, r, gpu, TC_DTYPE_BF16, 1, len, len, 32, 8, 128, 16));
        tc_tensor go;
        poisoned(&go, gpu, TC_DTYPE_BF16, TC_SHAPE(8192, 32, 128));
        CHECK(tc_attention_prefill(&go, &gc.tq, &gc.tk, &gc.tv, &gc.ttable, &gc.tlens, &gc.tqstart,
                                   (float)(1 / sqrt(128.0))));
        CHECK(tc_backend_synchronize(gpu));
        dump_attention(&gc, &go, 1 / sqrt(128.0));
        tc_tensor_deinit(&go);
        paged_free(&gc);
    }
}

/* Decode and prefill over FP8 E4M3 caches (f16 and bf16 queries) against the CPU op and the
 * double reference over the same cached values; values of size 1 and of size 0.01 (FP8's
 * subnormals start below 2^-6), several block sizes; then decode after a store of new rows
 * into the FP8 cache (as a decode step runs them). */
static void attention_fp8(rng_t *r)
{
    struct {
        int64_t H, KV, hd, bs;
    } shapes[] = { { 32, 8, 128, 16 }, { 32, 32, 128, 16 }, { 9, 3, 64, 16 }, { 16, 1, 64, 7 } };
    const tc_dtype dts[] = { TC_DTYPE_BF16, TC_DTYPE_F16 };
    for (int si = 0; si < 4; si++)
        for (int di = 0; di < 2; di++)
            for (int ai = 0; ai < 2; ai++) {
                tc_dtype dt = dts[di], kt = TC_DTYPE_F8E4M3;
                double amp = ai ? 0.01 : 1.0;
                int64_t H = shapes[si].H, KV = shapes[si].KV, hd = shapes[si].hd,
                        bs = shapes[si].bs;
                double scale = 1.0 / sqrt((double)hd);
                int64_t dlen[] = { 1, 17, 1000, 4096 }, ones[] = { 1, 1, 1, 1 };
                paged_case gc, cc;
                rng_t r2 = *r;
                CHECK(paged_build_kv(&gc, r, gpu, dt, kt, amp, 4, dlen, ones, H, KV, hd, bs));
                CHECK(paged_build_kv(&cc, &r2, cpu, dt, kt, amp, 4, dlen, ones, H, KV, hd, bs));
                tc_tensor go, co;
                poisoned(&co, cpu, dt, TC_SHAPE(4, H, hd));
                CHECK(tc_attention_decode(&co, &cc.tq, &cc.tk, &cc.tv, &cc.ttable, &cc.tlens,
                                          (float)scale));
                double *want = paged_reference(&cc, scale);
                char what[128];
                for (int run = 0; run < 2; run++) {
                    poisoned(&go, gpu, dt, TC_SHAPE(4, H, hd));
                    CHECK(tc_attention_decode(&go, &gc.tq, &gc.tk, &gc.tv, &gc.ttable, &gc.tlens,
                                              (float)scale));
                    snprintf(what, sizeof what,
                             "attention decode %s, f8e4m3 cache (+-%g) H %lld KV %lld hd %lld "
                             "bs %lld, run %d",
                             tc_dtype_name(dt), amp, (long long)H, (long long)KV, (long long)hd,
                             (long long)bs, run + 1);
                    expect_close(what, &go, want, &co, tolerance(dt));
                    tc_tensor_deinit(&go);
                }
                free(want);
                tc_tensor_deinit(&co);
                paged_free(&gc), paged_free(&cc);

                int64_t plen[] = { 1, 77, 300, 600 }, pm[] = { 1, 77, 45, 600 };
                r2 = *r;
                CHECK(paged_build_kv(&gc, r, gpu, dt, kt, amp, 4, plen, pm, H, KV, hd, bs));
                CHECK(paged_build_kv(&cc, &r2, cpu, dt, kt, amp, 4, plen, pm, H, KV, hd, bs));
                poisoned(&go, gpu, dt, TC_SHAPE(gc.n_tokens, H, hd));
                poisoned(&co, cpu, dt, TC_SHAPE(cc.n_tokens, H, hd));
                CHECK(tc_attention_prefill(&go, &gc.tq, &gc.tk, &gc.tv, &gc.ttable, &gc.tlens,
                                           &gc.tqstart, (float)scale));
                CHECK(tc_attention_prefill(&co, &cc.tq, &cc.tk, &cc.tv, &cc.ttable, &cc.tlens,
                                           &cc.tqstart, (float)scale));
                want = paged_reference(&cc, scale);
                snprintf(what, sizeof what,
                         "attention prefill %s, f8e4m3 cache (+-%g) H %lld KV %lld hd %lld bs %lld",
                         tc_dtype_name(dt), amp, (long long)H, (long long)KV, (long long)hd,
                         (long long)bs);
                expect_close(what, &go, want, &co, tolerance(dt));
                free(want);
                tc_tensor_deinit(&go), tc_tensor_deinit(&co);
                paged_free(&gc), paged_free(&cc);
            }
    /* a decode step's order over an FP8 cache: store the newest rows, then decode reading the
     * older ones early (fresh_rows 1) */
    decode_after_store(r, TC_DTYPE_BF16, 32, 8, 128, TC_DTYPE_F8E4M3);
    decode_after_store(r, TC_DTYPE_F16, 9, 3, 64, TC_DTYPE_F8E4M3);
}

/* One attention case for every head size (kernels of their own for 64, 80, 96, 112, 128 and 256
 * over 16-bit caches, the generic kernels for the rest and for FP8 caches but 64 and 128)
 * with a sliding window (0: none) and, over an FP8 cache, per-kv-head scales: decode (fresh_rows
 * 1, as a decode step runs it) or prefill chunks against the CPU op and the double reference,
 * outputs poisoned. With a window, each sequence's blocks before its first query's window
 * point at a block of NaN (as in a cache that freed them): reading one fails the case. */
static void attention_case(rng_t *r, tc_dtype dt, tc_dtype kt, int64_t H, int64_t KV, int64_t hd,
                           int64_t bs, int64_t window, bool decode, const char *note)
{
    bool f8 = kt == TC_DTYPE_F8E4M3;
    double scale = 1.0 / sqrt((double)hd), ksd[64], vsd[64];
    float ksf[64], vsf[64];
    for (int64_t h = 0; h < KV; h++) {
        ksf[h] = (float)rng_uniform(r, 0.05, 4), vsf[h] = (float)rng_uniform(r, 0.05, 4);
        ksd[h] = ksf[h], vsd[h] = vsf[h];
    }
    tc_tensor gks, gvs, cks, cvs;
    size_t sb = sizeof(float) * (size_t)KV;
    CHECK(tc_tensor_init_from_host(&gks, gpu, TC_DTYPE_F32, TC_SHAPE(KV), ksf, sb));
    CHECK(tc_tensor_init_from_host(&gvs, gpu, TC_DTYPE_F32, TC_SHAPE(KV), vsf, sb));
    CHECK(tc_tensor_init_from_host(&cks, cpu, TC_DTYPE_F32, TC_SHAPE(KV), ksf, sb));
    CHECK(tc_tensor_init_from_host(&cvs, cpu, TC_DTYPE_F32, TC_SHAPE(KV), vsf, sb));
    int64_t dlen[] = { 1, 17, 300, 2000 }, ones[] = { 1, 1, 1, 1 }, plen[] = { 1, 77, 300, 700 },
            pm[] = { 1, 77, 45, 250 };
    paged_case gc, cc;
    rng_t r2 = *r;
    CHECK(paged_build_kv(&gc, r, gpu, dt, kt, 1.0, 4, decode ? dlen : plen, decode ? ones : pm, H,
                         KV, hd, bs));
    CHECK(paged_build_kv(&cc, &r2, cpu, dt, kt, 1.0, 4, decode ? dlen : plen, decode ? ones : pm, H,
                         KV, hd, bs));
    if (window > 0) {
        CHECK(paged_forget_before_window(&gc, window));
        CHECK(paged_forget_before_window(&cc, window));
    }
    tc_attention_opts go = { .k_scale = f8 ? &gks : NULL,
                             .v_scale = f8 ? &gvs : NULL,
                             .fresh_rows = decode ? 1 : -1,
                             .window = (int32_t)window },
                      co = go;
    co.k_scale = f8 ? &cks : NULL, co.v_scale = f8 ? &cvs : NULL;
    tc_tensor gout, cout;
    poisoned(&gout, gpu, dt, TC_SHAPE(gc.n_tokens, H, hd));
    poisoned(&cout, cpu, dt, TC_SHAPE(cc.n_tokens, H, hd));
    if (decode) {
        CHECK(tc_attention_decode_ex(&gout, &gc.tq, &gc.tk, &gc.tv, &gc.ttable, &gc.tlens,
                                     (float)scale, &go));
        CHECK(tc_attention_decode_ex(&cout, &cc.tq, &cc.tk, &cc.tv, &cc.ttable, &cc.tlens,
                                     (float)scale, &co));
    } else {
        CHECK(tc_attention_prefill_ex(&gout, &gc.tq, &gc.tk, &gc.tv, &gc.ttable, &gc.tlens,
                                      &gc.tqstart, (float)scale, &go));
        CHECK(tc_attention_prefill_ex(&cout, &cc.tq, &cc.tk, &cc.tv, &cc.ttable, &cc.tlens,
                                      &cc.tqstart, (float)scale, &co));
    }
    double *want = paged_reference_ex(&cc, scale, window, f8 ? ksd : NULL, f8 ? vsd : NULL);
    char what[160];
    snprintf(what, sizeof what,
             "attention %s %s, %s cache H %lld KV %lld hd %lld bs %lld, window %lld%s",
             decode ? "decode" : "prefill", tc_dtype_name(dt), tc_dtype_name(kt), (long long)H,
             (long long)KV, (long long)hd, (long long)bs, (long long)window, note);
    expect_close(what, &gout, want, &cout, tolerance(dt));
    free(want);
    tc_tensor_deinit(&gout), tc_tensor_deinit(&cout);
    paged_free(&gc), paged_free(&cc);
    tc_tensor_deinit(&gks), tc_tensor_deinit(&gvs), tc_tensor_deinit(&cks), tc_tensor_deinit(&cvs);
}

/* Every head size: GQA and MHA shapes, windows off and on (1: a query sees itself only; 100,
 * shorter than most sequences; 4096, longer than all), bf16, FP8 (with scales) and f32 caches,
 * several block sizes; hd 34 runs the copies of 4-byte (16-bit) and 2-byte (FP8) pieces. f16
 * activations: 64 and 128. */
static void attention_heads(rng_t *r)
{
    struct {
        int64_t H, KV, hd, bs;
    } shapes[] = { { 16, 4, 80, 16 }, { 12, 12, 96, 16 },  { 8, 2, 112, 7 },
                   { 8, 1, 256, 16 }, { 16, 16, 256, 16 }, { 6, 2, 48, 16 },
                   { 4, 2, 34, 16 },  { 32, 8, 128, 16 },  { 9, 3, 64, 5 } };
    const struct {
        tc_dtype dt, kt;
    } types[] = { { TC_DTYPE_BF16, TC_DTYPE_BF16 },
                  { TC_DTYPE_BF16, TC_DTYPE_F8E4M3 },
                  { TC_DTYPE_F32, TC_DTYPE_F32 } };
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (size_t ti = 0; ti < 3; ti++)
            for (int wi = 0; wi < 2; wi++)
                for (int dec = 0; dec < 2; dec++)
                    attention_case(r, types[ti].dt, types[ti].kt, shapes[si].H, shapes[si].KV,
                                   shapes[si].hd, shapes[si].bs, wi ? 100 : 0, dec, "");
    for (int dec = 0; dec < 2; dec++) {
        attention_case(r, TC_DTYPE_F16, TC_DTYPE_F16, 16, 4, 64, 16, 100, dec, "");
        attention_case(r, TC_DTYPE_F16, TC_DTYPE_F8E4M3, 16, 4, 64, 16, 0, dec, "");
        attention_case(r, TC_DTYPE_F16, TC_DTYPE_F8E4M3, 32, 8, 128, 16, 100, dec, "");
        attention_case(r, TC_DTYPE_BF16, TC_DTYPE_BF16, 8, 2, 96, 16, 1, dec, "");
        attention_case(r, TC_DTYPE_BF16, TC_DTYPE_F8E4M3, 32, 8, 128, 16, 1, dec, "");
        attention_case(r, TC_DTYPE_BF16, TC_DTYPE_BF16, 32, 8, 128, 16, 4096, dec, "");
        attention_case(r, TC_DTYPE_BF16, TC_DTYPE_F8E4M3, 8, 1, 256, 16, 4096, dec, "");
    }
    /* f16 activations have kernels for 64 and 128 only (the binary's size): other sizes are
     * refused, saying so */
    int64_t len[] = { 5 }, one[] = { 1 };
    paged_case gc;
    CHECK(paged_build(&gc, r, gpu, TC_DTYPE_F16, 1, len, one, 4, 2, 96, 16));
    tc_tensor go;
    poisoned(&go, gpu, TC_DTYPE_F16, TC_SHAPE(1, 4, 96));
    tc_status st = tc_attention_decode(&go, &gc.tq, &gc.tk, &gc.tv, &gc.ttable, &gc.tlens, 0.1f);
    bool ok = st == TC_ERR_UNSUPPORTED && strstr(tc_last_error(), "bf16");
    printf("%-58s %s\n", "attention decode f16 hd 96: refused (bf16 runs it)", ok ? "ok" : "FAIL");
    failures += !ok;
    cases++;
    tc_tensor_deinit(&go);
    paged_free(&gc);
}

/* tc_kv_scales on CUDA equals the CPU's (powers of two: exactly); the FP8 store with them, and
 * rope_store_ex, as the CPU ops store (the store: exactly; after the rotation within a step of
 * FP8, as rope_store's checks). */
static void kv_scales_and_scaled_stores(rng_t *r)
{
    const tc_dtype dts[] = { TC_DTYPE_BF16, TC_DTYPE_F16 };
    for (int di = 0; di < 2; di++) {
        tc_dtype dt = dts[di];
        int64_t n = 37, H = 16, KV = 8, hd = 96, U = H + 2 * KV, bs = 16, nb = 5;
        tc_tensor gx, cx, gks, gvs, cks, cvs;
        double *xv = twin(r, dt, TC_SHAPE(n, U, hd), -300, 300, &gx, &cx);
        free(xv);
        tc_tensor gq, gk, gv, cq, ck, cv;
        CHECK(tc_tensor_slice(&gx, 1, 0, H, &gq));
        CHECK(tc_tensor_slice(&gx, 1, H, KV, &gk));
        CHECK(tc_tensor_slice(&gx, 1, H + KV, KV, &gv));
        CHECK(tc_tensor_slice(&cx, 1, 0, H, &cq));
        CHECK(tc_tensor_slice(&cx, 1, H, KV, &ck));
        CHECK(tc_tensor_slice(&cx, 1, H + KV, KV, &cv));
        poisoned(&gks, gpu, TC_DTYPE_F32, TC_SHAPE(KV));
        poisoned(&gvs, gpu, TC_DTYPE_F32, TC_SHAPE(KV));
        poisoned(&cks, cpu, TC_DTYPE_F32, TC_SHAPE(KV));
        poisoned(&cvs, cpu, TC_DTYPE_F32, TC_SHAPE(KV));
        CHECK(tc_kv_scales(&gks, &gvs, &gk, &gv));
        CHECK(tc_kv_scales(&cks, &cvs, &ck, &cv));
        double *want = tensor_values(&cks);
        expect_close("kv_scales of k rows (+-300)", &gks, want, &cks, 0.0);
        free(want);
        want = tensor_values(&cvs);
        expect_close("  of v rows", &gvs, want, &cvs, 0.0);
        free(want);
        tc_tensor gkc, gvc, ckc, cvc, gs, cs, gp, cp;
        double *ig = twin(r, TC_DTYPE_F8E4M3, TC_SHAPE(nb, bs, KV, hd), -1, 1, &gkc, &ckc);
        free(ig);
        ig = twin(r, TC_DTYPE_F8E4M3, TC_SHAPE(nb, bs, KV, hd), -1, 1, &gvc, &cvc);
        free(ig);
        ig = twin(r, TC_DTYPE_I32, TC_SHAPE(n), 0, 131072, &gp, &cp);
        free(ig);
        int32_t sl[37];
        for (int64_t i = 0; i < n; i++)
            sl[i] = (int32_t)((i * 29 + 3) % (nb * bs));
        sl[5] = -1;
        CHECK(tc_tensor_init_from_host(&gs, gpu, TC_DTYPE_I32, TC_SHAPE(n), sl, sizeof sl));
        CHECK(tc_tensor_init_from_host(&cs, cpu, TC_DTYPE_I32, TC_SHAPE(n), sl, sizeof sl));
        tc_attention_opts go = { .k_scale = &gks, .v_scale = &gvs, .fresh_rows = -1 }, co = go;
        co.k_scale = &cks, co.v_scale = &cvs;
        CHECK(tc_attention_store_ex(&gkc, &gvc, &gk, &gv, &gs, &go));
        CHECK(tc_attention_store_ex(&ckc, &cvc, &ck, &cv, &cs, &co));
        char what[96];
        snprintf(what, sizeof what, "attention store_ex %s to f8e4m3, scaled", tc_dtype_name(dt));
        want = tensor_values(&ckc);
        expect_close(what, &gkc, want, &ckc, 0.0);
        free(want);
        want = tensor_values(&cvc);
        expect_close("  and v", &gvc, want, &cvc, 0.0);
        free(want);
        tc_rope_config c = llama3_rope((int)hd, false);
        CHECK(tc_rope_store_ex(&gq, &gk, &gv, &gp, &c, &gkc, &gvc, &gs, &go));
        CHECK(tc_rope_store_ex(&cq, &ck, &cv, &cp, &c, &ckc, &cvc, &cs, &co));
        snprintf(what, sizeof what, "rope_store_ex %s hd 96 to f8e4m3, scaled: q, k, v rows",
                 tc_dtype_name(dt));
        want = tensor_values(&cx);
        expect_close(what, &gx, want, &cx, tolerance(dt));
        free(want);
        want = tensor_values(&ckc);
        expect_close("  the k cache", &gkc, want, &ckc, 0.1);
        free(want);
        want = tensor_values(&cvc);
        expect_close("  the v cache", &gvc, want, &cvc, 0.1);
        free(want);
        tc_tensor *all[] = { &gx,  &cx,  &gks, &gvs, &cks, &cvs, &gkc,
                             &gvc, &ckc, &cvc, &gs,  &cs,  &gp,  &cp };
        for (size_t i = 0; i < sizeof all / sizeof *all; i++)
            tc_tensor_deinit(all[i]);
    }
}

static void sampling(rng_t *r)
{
    tc_tensor gl, cl;
    double *lv = twin(r, TC_DTYPE_F32, TC_SHAPE(4, 49152), -5, 5, &gl, &cl);
    tc_sample_row rows[4];
    for (int i = 0; i < 4; i++) {
        rows[i] = (tc_sample_row){ .params = tc_sample_defaults(), .counter = (uint64_t)i };
        rows[i].params.seed = 7;
    }
    int32_t a[4], b[4];
    CHECK(tc_sample(a, &gl, rows));
    CHECK(tc_sample(b, &cl, rows));
    int same = memcmp(a, b, sizeof a) == 0;
    for (int i = 0; i < 4; i++) {
        rows[i].params.temperature = 0.8f;
        rows[i].params.top_p = 0.9f;
        rows[i].params.top_k = 50;
    }
    CHECK(tc_sample(a, &gl, rows));
    CHECK(tc_sample(b, &cl, rows));
    same &= memcmp(a, b, sizeof a) == 0;
    printf("%-58s %s\n", "sample greedy and top-k/top-p: cuda tokens = cpu tokens",
           same ? "ok" : "FAIL");
    failures += !same;
    cases++;
    free(lv);
    tc_tensor_deinit(&gl), tc_tensor_deinit(&cl);
}

int main(void)
{
    tc_status st = tc_backend_create_cuda(0, 0, &gpu);
    if (st == TC_ERR_LIBRARY_NOT_FOUND || st == TC_ERR_NO_DEVICE || st == TC_CUDA_ERROR_NO_DEVICE) {
        printf("skipped: %s\n", tc_last_error());
        return SKIP;
    }
    CHECK(st);
    CHECK(tc_backend_create_cpu(0, &cpu));
    dump_dir = getenv("TC_OPS_DUMP");
    if (dump_dir) {
        char path[512];
        snprintf(path, sizeof path, "%s/manifest.jsonl", dump_dir);
        manifest = fopen(path, "w");
        if (!manifest) {
            fprintf(stderr, "cannot write %s\n", path);
            return 1;
        }
    }
    rng_t r = { 2024 };
    /* TC_OPS_ONLY=quantised, rope, attention or matmul: only those kernels' checks (a quicker
     * run while working on them). */
    const char *only = getenv("TC_OPS_ONLY");
    if (only && (!strcmp(only, "quantised") || !strcmp(only, "rope") ||
                 !strcmp(only, "attention") || !strcmp(only, "matmul"))) {
        if (!strcmp(only, "matmul")) {
            matmul(&r);
        } else if (!strcmp(only, "quantised")) {
            gather_columns(&r);
            quantised(&r);
            linear_pair(&r);
        } else if (!strcmp(only, "rope")) {
            rope(&r);
            rope_store(&r, false);
            rope_store(&r, true);
            linear_rope_store(&r);
            kv_scales_and_scaled_stores(&r);
        } else { /* TC_OPS_ONLY=attention: the attention kernels' checks */
            attention(&r);
            attention_fp8(&r);
            attention_heads(&r);
        }
        tc_backend_destroy(gpu);
        tc_backend_destroy(cpu);
        printf("%d of %d GPU op checks failed\n", failures, cases);
        return failures ? 1 : 0;
    }
    embedding(&r);
    gather_columns(&r);
    rmsnorm(&r);
    rope(&r);
    rope_store(&r, false);
    rope_store(&r, true);
    matmul(&r);
    /* The backend keeps cuBLAS's workspace from its first product on, and the ops' workspace
     * (attention's partial results) once an op needs it; everything else must come back. Bytes
     * as requested, since the pool rounds each allocation up to a size class. */
    tc_pool_stats ps;
    tc_pool_get_stats(tc_backend_pool(gpu), &ps);
    size_t baseline = ps.bytes_requested - tc_backend_workspace_bytes(gpu);
    swiglu_softmax_argmax(&r);
    add_bias(&r);
    argmax_long_rows(&r);
    logits_mask(&r);
    linear(&r);
    quantised(&r);
    linear_pair(&r);
    iq_dequant(&r);
    linear_rope_store(&r);
    attention(&r);
    attention_fp8(&r);
    attention_heads(&r);
    kv_scales_and_scaled_stores(&r);
    decode_after_store(&r, TC_DTYPE_BF16, 32, 32, 128, TC_DTYPE_BF16);
    decode_after_store(&r, TC_DTYPE_BF16, 32, 8, 128, TC_DTYPE_BF16);
    decode_after_store(&r, TC_DTYPE_F32, 9, 3, 64, TC_DTYPE_F32);
    {
        const struct {
            tc_dtype dt;
            int64_t H, KV, hd, cap, len;
        } b1[] = {
            { TC_DTYPE_BF16, 32, 8, 128, 4096, 4096 }, { TC_DTYPE_BF16, 32, 8, 128, 4096, 100 },
            { TC_DTYPE_F16, 32, 8, 128, 4096, 1000 },  { TC_DTYPE_F32, 32, 8, 128, 2048, 2048 },
            { TC_DTYPE_BF16, 32, 32, 128, 384, 257 },  { TC_DTYPE_BF16, 9, 3, 64, 384, 200 },
            { TC_DTYPE_BF16, 16, 1, 64, 8192, 8192 },  { TC_DTYPE_BF16, 32, 2, 128, 4096, 70 },
            { TC_DTYPE_F32, 16, 1, 64, 8192, 5000 }
        };
        for (size_t i = 0; i < sizeof b1 / sizeof b1[0]; i++)
            decode_batch1(&r, b1[i].dt, b1[i].H, b1[i].KV, b1[i].hd, b1[i].cap, b1[i].len);
    }
    decode_odd_blocks(&r, TC_DTYPE_F16, "");
    /* As on a GPU with 99 KiB of shared memory per block (compute capability 8.6, 8.9): decode
     * attention and the tensor-core product with fewer pipeline stages. */
    tc_backend_set_shared_limit(gpu, 100352);
    decode_odd_blocks(&r, TC_DTYPE_BF16, ", 99 KiB shared");
    decode_odd_blocks(&r, TC_DTYPE_F32, ", 99 KiB shared");
    for (int dec = 0; dec < 2; dec++) {
        attention_case(&r, TC_DTYPE_BF16, TC_DTYPE_BF16, 16, 4, 96, 16, 100, dec,
                       ", 99 KiB shared");
        attention_case(&r, TC_DTYPE_BF16, TC_DTYPE_F8E4M3, 16, 4, 96, 16, 0, dec,
                       ", 99 KiB shared");
    }
    attention_case(&r, TC_DTYPE_BF16, TC_DTYPE_BF16, 8, 2, 256, 16, 0, true, ", 99 KiB shared");
    attention_case(&r, TC_DTYPE_BF16, TC_DTYPE_F8E4M3, 8, 2, 256, 16, 0, true, ", 99 KiB shared");
    matmul_case(&r, TC_DTYPE_BF16, TC_DTYPE_BF16, 300, 513, 4096, TC_GEMM_OWN,
                "own tensor core, 99 KiB shared", false);
    tc_backend_set_shared_limit(gpu, 0);
    sampling(&r);
    if (manifest)
        fclose(manifest);
    tc_pool_get_stats(tc_backend_pool(gpu), &ps);
    size_t ws = tc_backend_workspace_bytes(gpu);
    printf("pool: %zu bytes requested and not freed after the checks (want the %zu of cuBLAS's "
           "workspace and the %zu of the ops' workspace), peak %.1f MiB\n",
           ps.bytes_requested, baseline, ws, ps.peak_bytes_in_use / 1048576.0);
    failures += ps.bytes_requested != baseline + ws;
    tc_backend_destroy(gpu);
    tc_backend_destroy(cpu);
    printf("%d of %d GPU op checks failed\n", failures, cases);
    return failures ? 1 : 0;
}
