/* Test helpers shared by the CPU op tests and the GPU op checks: random tensors and
 * straightforward double-precision references for every op. */
#ifndef TC_TEST_ORACLE_H
#define TC_TEST_ORACLE_H
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "ops/internal.h"

typedef struct {
    uint64_t s;
} rng_t;

static inline uint64_t rng_next(rng_t *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
/* Uniform in [lo, hi). */
static inline double rng_uniform(rng_t *r, double lo, double hi)
{
    return lo + (hi - lo) * ((double)(rng_next(r) >> 11) * 0x1.0p-53);
}
static inline int64_t rng_int(rng_t *r, int64_t n)
{
    return (int64_t)(rng_next(r) % (uint64_t)n);
}

/* v[0..k) = a random permutation of 0..k-1 (Fisher-Yates). */
static inline void rng_permutation(rng_t *r, int32_t *v, int64_t k)
{
    for (int64_t i = 0; i < k; i++)
        v[i] = (int32_t)i;
    for (int64_t i = k - 1; i > 0; i--) {
        int64_t j = rng_int(r, i + 1);
        int32_t x = v[i];
        v[i] = v[j], v[j] = x;
    }
}

/* Fill a host buffer of n elements of dtype dt with uniform values in [lo, hi) and return
 * the values actually stored (after rounding to dt) as doubles in *vals (malloc'ed). Block
 * types get random scales and quants, their values computed here from the integers. */
static inline void *random_data(rng_t *r, tc_dtype dt, int64_t n, double lo, double hi,
                                double **vals)
{
    size_t bytes = tc_dtype_bytes(dt, n);
    uint8_t *buf = malloc(bytes + 1);
    double *v = malloc(sizeof(double) * (size_t)(n + 1));
    if (tc_dtype_is_block(dt) && dt != TC_DTYPE_Q4_0 && dt != TC_DTYPE_Q8_0 &&
        dt != TC_DTYPE_Q4_1) {
        /* The other block types: random bytes with finite f16 scales at the offsets the
         * format keeps them, the values from the host dequantisation (checked against gguf-py
         * by tests/model/test_dequant.py). */
        int be = tc_dtype_block(dt);
        size_t bb = tc_dtype_bytes(dt, be);
        int offs[2] = { -1, -1 };
        double lo_d = be == 256 ? 0.0002 : 0.01, hi_d = be == 256 ? 0.002 : 0.1;
        switch (dt) {
        case TC_DTYPE_Q5_0: offs[0] = 0; break;
        case TC_DTYPE_Q5_1: offs[0] = 0, offs[1] = 2; break;
        case TC_DTYPE_Q2_K: offs[0] = 80, offs[1] = 82; break;
        case TC_DTYPE_Q3_K: offs[0] = 108; break;
        case TC_DTYPE_Q6_K: offs[0] = 208; break;
        default: offs[0] = 0, offs[1] = 2; break; /* Q4_K, Q5_K: d, dmin */
        }
        for (size_t i = 0; i < bytes; i++)
            buf[i] = (uint8_t)rng_next(r);
        for (int64_t b = 0; b < n / be; b++)
            for (int f = 0; f < 2; f++)
                if (offs[f] >= 0) {
                    uint16_t h = tc__f32_to_f16((float)rng_uniform(r, lo_d, hi_d));
                    memcpy(buf + (size_t)b * bb + offs[f], &h, 2);
                }
        float *tmp = malloc(sizeof(float) * (size_t)(n + 1));
        if (!tmp || !tc__dequant_row(dt, buf, n, tmp))
            abort();
        for (int64_t i = 0; i < n; i++)
            v[i] = tmp[i];
        free(tmp);
    } else if (tc_dtype_is_block(dt)) {
        size_t bb = tc_dtype_bytes(dt, TC_QBLOCK);
        for (int64_t b = 0; b < n / TC_QBLOCK; b++) {
            uint8_t *blk = buf + (size_t)b * bb;
            uint16_t dh = tc__f32_to_f16((float)rng_uniform(r, 0.01, 0.1));
            memcpy(blk, &dh, 2);
            double d = tc__f16_to_f32(dh), m = 0.0;
            if (dt == TC_DTYPE_Q4_1) {
                /* An offset m after d: values q d + m. */
                uint16_t mh = tc__f32_to_f16((float)rng_uniform(r, -0.8, 0.0));
                memcpy(blk + 2, &mh, 2);
                m = tc__f16_to_f32(mh);
            }
            for (int j = 0; j < TC_QBLOCK; j++) {
                int q;
                if (dt == TC_DTYPE_Q4_1) {
                    q = (int)rng_int(r, 16);
                    uint8_t *byte = blk + 4 + (j % 16);
                    *byte = j < 16 ? (uint8_t)((*byte & 0xf0) | q)
                                   : (uint8_t)((*byte & 0x0f) | (q << 4));
                    v[b * TC_QBLOCK + j] = q * d + m;
                } else if (dt == TC_DTYPE_Q4_0) {
                    q = (int)rng_int(r, 16);
                    uint8_t *byte = blk + 2 + (j % 16);
                    *byte = j < 16 ? (uint8_t)((*byte & 0xf0) | q)
                                   : (uint8_t)((*byte & 0x0f) | (q << 4));
                    v[b * TC_QBLOCK + j] = (q - 8) * d;
                } else {
                    q = (int)rng_int(r, 255) - 127;
                    blk[2 + j] = (uint8_t)(int8_t)q;
                    v[b * TC_QBLOCK + j] = q * d;
                }
            }
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            double x = rng_uniform(r, lo, hi);
            switch (dt) {
            case TC_DTYPE_F32:
                ((float *)buf)[i] = (float)x;
                v[i] = (float)x;
                break;
            case TC_DTYPE_BF16:
                ((uint16_t *)buf)[i] = tc__f32_to_bf16((float)x);
                v[i] = tc__bf16_to_f32(((uint16_t *)buf)[i]);
                break;
            case TC_DTYPE_F16:
                ((uint16_t *)buf)[i] = tc__f32_to_f16((float)x);
                v[i] = tc__f16_to_f32(((uint16_t *)buf)[i]);
                break;
            case TC_DTYPE_F8E4M3:
                buf[i] = tc__f32_to_f8e4m3((float)x);
                v[i] = tc__f8e4m3_to_f32(buf[i]);
                break;
            case TC_DTYPE_I32:
                ((int32_t *)buf)[i] = (int32_t)floor(x);
                v[i] = floor(x);
                break;
            default: abort();
            }
        }
    }
    *vals = v;
    return buf;
}

/* A tensor on b holding random values (returned as doubles in *vals, malloc'ed). */
static inline tc_status random_tensor(rng_t *r, tc_backend *b, tc_tensor *t, tc_dtype dt, int ndim,
                                      const int64_t *shape, double lo, double hi, double **vals)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    void *buf = random_data(r, dt, n, lo, hi, vals);
    tc_status st = tc_tensor_init_from_host(t, b, dt, ndim, shape, buf, tc_dtype_bytes(dt, n));
    free(buf);
    return st;
}

/* A tensor's elements as doubles (malloc'ed), read back from any backend. */
static inline double *tensor_values(const tc_tensor *t)
{
    int64_t n = tc_tensor_numel(t);
    size_t bytes = tc_tensor_bytes(t);
    void *buf = malloc(bytes + 1);
    double *v = malloc(sizeof(double) * (size_t)(n + 1));
    if (tc_tensor_copy_to_host(t, buf, bytes) != TC_OK) {
        for (int64_t i = 0; i < n; i++)
            v[i] = NAN;
    } else {
        for (int64_t i = 0; i < n; i++)
            v[i] = t->dtype == TC_DTYPE_I32 ? ((int32_t *)buf)[i] : tc__load(t->dtype, buf, i);
    }
    free(buf);
    return v;
}

/* max |got - want| / max |want| (NaN anywhere gives infinity). */
static inline double rel_error(const double *got, const double *want, int64_t n)
{
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(got[i]) || isnan(want[i]))
            return INFINITY;
        num = fmax(num, fabs(got[i] - want[i]));
        den = fmax(den, fabs(want[i]));
    }
    return den > 0.0 ? num / den : num;
}

/* Tolerance for results stored in dt (f32 1e-5; the 16-bit types a few units of their
 * rounding: bf16 8 bits, f16 11 bits of precision). */
static inline double tolerance(tc_dtype dt)
{
    return dt == TC_DTYPE_F32 ? 1e-5 : dt == TC_DTYPE_F16 ? 2e-3 : 1e-2;
}

/* References. */

static inline void ref_rmsnorm(double *out, double *res_io, const double *x, const double *w,
                               int64_t n, int64_t d, double eps, tc_dtype dt)
{
    for (int64_t r = 0; r < n; r++) {
        double ss = 0.0;
        for (int64_t i = 0; i < d; i++) {
            double v = x[r * d + i];
            if (res_io) {
                v += res_io[r * d + i];
                /* the stored residual is rounded to dt before it is normalised */
                v = dt == TC_DTYPE_F32    ? (float)v
                    : dt == TC_DTYPE_BF16 ? tc__bf16_to_f32(tc__f32_to_bf16((float)v))
                                          : tc__f16_to_f32(tc__f32_to_f16((float)v));
                res_io[r * d + i] = v;
            }
            ss += v * v;
        }
        double inv = 1.0 / sqrt(ss / d + eps);
        for (int64_t i = 0; i < d; i++)
            out[r * d + i] = (res_io ? res_io[r * d + i] : x[r * d + i]) * inv * w[i];
    }
}

static inline void ref_frequencies(const tc_rope_config *c, double *inv)
{
    for (int i = 0; i < c->head_dim / 2; i++) {
        double f = pow(c->theta, -2.0 * i / c->head_dim);
        if (c->scaling == TC_ROPE_LLAMA3) {
            double wl = 2 * 3.14159265358979323846 / f;
            double lw = c->original_max_position / c->low_freq_factor;
            double hw = c->original_max_position / c->high_freq_factor;
            if (wl > lw)
                f = f / c->factor;
            else if (wl >= hw) {
                double sm = (c->original_max_position / wl - c->low_freq_factor) /
                            (c->high_freq_factor - c->low_freq_factor);
                f = (1 - sm) * f / c->factor + sm * f;
            }
        }
        inv[i] = f;
    }
}

/* Rotate x [n, heads, hd] in place. */
static inline void ref_rope(double *x, int64_t n, int64_t heads, const int32_t *pos,
                            const tc_rope_config *c)
{
    int hd = c->head_dim, half = hd / 2;
    double inv[256];
    ref_frequencies(c, inv);
    for (int64_t r = 0; r < n; r++)
        for (int64_t h = 0; h < heads; h++)
            for (int i = 0; i < half; i++) {
                double *e = x + (r * heads + h) * hd;
                int a = c->interleaved ? 2 * i : i, b = c->interleaved ? 2 * i + 1 : i + half;
                double cs = cos(pos[r] * inv[i]), sn = sin(pos[r] * inv[i]);
                double x0 = e[a], x1 = e[b];
                e[a] = x0 * cs - x1 * sn;
                e[b] = x1 * cs + x0 * sn;
            }
}

static inline void ref_matmul(double *out, const double *x, const double *w, int64_t m, int64_t n,
                              int64_t k)
{
    for (int64_t r = 0; r < m; r++)
        for (int64_t c = 0; c < n; c++) {
            double s = 0.0;
            for (int64_t i = 0; i < k; i++)
                s += x[r * k + i] * w[c * k + i];
            out[r * n + c] = s;
        }
}

/* tc_linear: out [m, n] = x w^T, SwiGLU over w's gate and up halves [2n, k] when asked, plus
 * out's old values (acc, or NULL). */
static inline void ref_linear(double *out, const double *x, const double *w, bool swiglu,
                              const double *acc, int64_t m, int64_t n, int64_t k)
{
    for (int64_t r = 0; r < m; r++) {
        for (int64_t c = 0; c < n; c++) {
            double a = 0.0, b = 0.0;
            for (int64_t i = 0; i < k; i++) {
                double xv = x[r * k + i];
                a += xv * w[c * k + i];
                if (swiglu)
                    b += xv * w[(n + c) * k + i];
            }
            double v = swiglu ? a / (1.0 + exp(-a)) * b : a;
            out[r * n + c] = v + (acc ? acc[r * n + c] : 0.0);
        }
    }
}

/* Rows [m, k] of x divided by their RMS, x / sqrt(mean(x^2) + eps), as a new array (the norm
 * that tc_linear_opts.rms_norm fuses, its weight folded into the product). */
static inline double *ref_rms_rows(const double *x, int64_t m, int64_t k, double eps)
{
    double *y = malloc(sizeof(double) * (size_t)(m * k));
    for (int64_t r = 0; r < m; r++) {
        double ss = 0.0;
        for (int64_t i = 0; i < k; i++)
            ss += x[r * k + i] * x[r * k + i];
        double scale = 1.0 / sqrt(ss / (double)k + eps);
        for (int64_t i = 0; i < k; i++)
            y[r * k + i] = x[r * k + i] * scale;
    }
    return y;
}

/* Causal attention of one sequence's m newest queries q [m, H, hd] over contiguous keys and
 * values [len, KV, hd]; with window > 0 the query at position p sees positions
 * p - window + 1 .. p only; ks, vs (NULL: 1) multiply kv head g's keys and values (an FP8
 * cache's scales). */
static inline void ref_attention_ex(double *out, const double *q, const double *k, const double *v,
                                    int64_t m, int64_t len, int64_t H, int64_t KV, int64_t hd,
                                    double scale, int64_t window, const double *ks,
                                    const double *vs)
{
    double *p = malloc(sizeof(double) * (size_t)(len + 1));
    for (int64_t j = 0; j < m; j++) {
        int64_t qpos = len - m + j, t0 = window > 0 && qpos - window + 1 > 0 ? qpos - window + 1 : 0;
        for (int64_t h = 0; h < H; h++) {
            int64_t g = h / (H / KV);
            double kf = ks ? ks[g] : 1.0, vf = vs ? vs[g] : 1.0;
            double mx = -INFINITY, sum = 0.0;
            for (int64_t t = t0; t <= qpos; t++) {
                double d = 0.0;
                for (int64_t i = 0; i < hd; i++)
                    d += q[(j * H + h) * hd + i] * k[(t * KV + g) * hd + i] * kf;
                p[t] = d * scale;
                mx = fmax(mx, p[t]);
            }
            for (int64_t t = t0; t <= qpos; t++)
                sum += (p[t] = exp(p[t] - mx));
            for (int64_t i = 0; i < hd; i++) {
                double a = 0.0;
                for (int64_t t = t0; t <= qpos; t++)
                    a += p[t] * v[(t * KV + g) * hd + i] * vf;
                out[(j * H + h) * hd + i] = a / sum;
            }
        }
    }
    free(p);
}
static inline void ref_attention(double *out, const double *q, const double *k, const double *v,
                                 int64_t m, int64_t len, int64_t H, int64_t KV, int64_t hd,
                                 double scale)
{
    ref_attention_ex(out, q, k, v, m, len, H, KV, hd, scale, 0, NULL, NULL);
}

/* A batch of sequences in a paged cache, with the contiguous copies the reference reads. */
typedef struct {
    int64_t n_seqs, H, KV, hd, bs, max_blocks, n_blocks, n_tokens;
    int64_t *len, *m;                /* per sequence: cached tokens, queries */
    double **k, **v;                 /* per sequence [len, KV, hd] */
    double *q;                       /* [n_tokens, H, hd] */
    int32_t *table, *lens, *q_start; /* host copies of the index tensors */
    tc_tensor tq, tk, tv, ttable, tlens, tqstart;
} paged_case;

/* Build a case on backend b: sequence s has len[s] cached tokens of which the last m[s] are
 * queries; blocks are handed out in a shuffled order so that the table matters. Queries are
 * of dtype dt, the caches of kv_dt, with values in [-amp, amp). */
static inline tc_status paged_build_kv(paged_case *c, rng_t *r, tc_backend *b, tc_dtype dt,
                                       tc_dtype kv_dt, double amp, int64_t n_seqs,
                                       const int64_t *len, const int64_t *m, int64_t H, int64_t KV,
                                       int64_t hd, int64_t bs)
{
    memset(c, 0, sizeof *c);
    c->n_seqs = n_seqs, c->H = H, c->KV = KV, c->hd = hd, c->bs = bs;
    c->len = malloc(sizeof(int64_t) * (size_t)n_seqs);
    c->m = malloc(sizeof(int64_t) * (size_t)n_seqs);
    c->k = calloc((size_t)n_seqs, sizeof(double *));
    c->v = calloc((size_t)n_seqs, sizeof(double *));
    c->lens = malloc(sizeof(int32_t) * (size_t)n_seqs);
    c->q_start = malloc(sizeof(int32_t) * (size_t)(n_seqs + 1));
    int64_t total_blocks = 0;
    c->q_start[0] = 0;
    for (int64_t s = 0; s < n_seqs; s++) {
        c->len[s] = len[s];
        c->m[s] = m[s];
        c->lens[s] = (int32_t)len[s];
        c->q_start[s + 1] = c->q_start[s] + (int32_t)m[s];
        int64_t nb = (len[s] + bs - 1) / bs;
        if (nb > c->max_blocks)
            c->max_blocks = nb;
        total_blocks += nb;
    }
    if (c->max_blocks == 0)
        c->max_blocks = 1;
    c->n_tokens = c->q_start[n_seqs];
    c->n_blocks = total_blocks + 3; /* a few unused blocks */
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)c->n_blocks);
    for (int64_t i = 0; i < c->n_blocks; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = c->n_blocks - 1; i > 0; i--) {
        int64_t j = rng_int(r, i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    c->table = malloc(sizeof(int32_t) * (size_t)(n_seqs * c->max_blocks));
    for (int64_t i = 0; i < n_seqs * c->max_blocks; i++)
        c->table[i] = -1; /* unused entries: never read */
    int64_t row = KV * hd, next = 0;
    size_t cache_elems = (size_t)(c->n_blocks * bs * row);
    size_t eb = tc_dtype_bytes(kv_dt, 1);
    uint8_t *kc = calloc(cache_elems, eb), *vc = calloc(cache_elems, eb);
    for (int64_t s = 0; s < n_seqs; s++) {
        double *kv, *vv;
        void *kb = random_data(r, kv_dt, len[s] * row + 1, -amp, amp, &kv);
        void *vb = random_data(r, kv_dt, len[s] * row + 1, -amp, amp, &vv);
        c->k[s] = kv;
        c->v[s] = vv;
        for (int64_t blk = 0; blk < (len[s] + bs - 1) / bs; blk++)
            c->table[s * c->max_blocks + blk] = perm[next++];
        for (int64_t t = 0; t < len[s]; t++) {
            int64_t slot = (int64_t)c->table[s * c->max_blocks + t / bs] * bs + t % bs;
            memcpy(kc + (size_t)(slot * row) * eb, (uint8_t *)kb + (size_t)(t * row) * eb,
                   (size_t)row * eb);
            memcpy(vc + (size_t)(slot * row) * eb, (uint8_t *)vb + (size_t)(t * row) * eb,
                   (size_t)row * eb);
        }
        free(kb);
        free(vb);
    }
    free(perm);
    tc_status st;
    int64_t cshape[4] = { c->n_blocks, bs, KV, hd };
    TC_CHECK(st, tc_tensor_init_from_host(&c->tk, b, kv_dt, 4, cshape, kc, cache_elems * eb));
    TC_CHECK(st, tc_tensor_init_from_host(&c->tv, b, kv_dt, 4, cshape, vc, cache_elems * eb));
    TC_CHECK(st, random_tensor(r, b, &c->tq, dt, TC_SHAPE(c->n_tokens > 0 ? c->n_tokens : 1, H, hd),
                               -1.0, 1.0, &c->q));
    TC_CHECK(st, tc_tensor_init_from_host(&c->ttable, b, TC_DTYPE_I32,
                                          TC_SHAPE(n_seqs, c->max_blocks), c->table,
                                          sizeof(int32_t) * (size_t)(n_seqs * c->max_blocks)));
    TC_CHECK(st, tc_tensor_init_from_host(&c->tlens, b, TC_DTYPE_I32, TC_SHAPE(n_seqs), c->lens,
                                          sizeof(int32_t) * (size_t)n_seqs));
    TC_CHECK(st, tc_tensor_init_from_host(&c->tqstart, b, TC_DTYPE_I32, TC_SHAPE(n_seqs + 1),
                                          c->q_start, sizeof(int32_t) * (size_t)(n_seqs + 1)));
fail:
    free(kc);
    free(vc);
    return st;
}

/* paged_build_kv with caches of the queries' dtype, values in [-1, 1). */
static inline tc_status paged_build(paged_case *c, rng_t *r, tc_backend *b, tc_dtype dt,
                                    int64_t n_seqs, const int64_t *len, const int64_t *m, int64_t H,
                                    int64_t KV, int64_t hd, int64_t bs)
{
    return paged_build_kv(c, r, b, dt, dt, 1.0, n_seqs, len, m, H, KV, hd, bs);
}

/* The reference output [n_tokens, H, hd] of the case (malloc'ed), with a window and scales as
 * ref_attention_ex. */
static inline double *paged_reference_ex(const paged_case *c, double scale, int64_t window,
                                         const double *ks, const double *vs)
{
    double *out = malloc(sizeof(double) * (size_t)(c->n_tokens * c->H * c->hd + 1));
    for (int64_t s = 0; s < c->n_seqs; s++)
        ref_attention_ex(out + (int64_t)c->q_start[s] * c->H * c->hd,
                         c->q + (int64_t)c->q_start[s] * c->H * c->hd, c->k[s], c->v[s], c->m[s],
                         c->len[s], c->H, c->KV, c->hd, scale, window, ks, vs);
    return out;
}
static inline double *paged_reference(const paged_case *c, double scale)
{
    return paged_reference_ex(c, scale, 0, NULL, NULL);
}
static inline double *paged_reference_window(const paged_case *c, double scale, int64_t window)
{
    return paged_reference_ex(c, scale, window, NULL, NULL);
}

/* As a sliding window lets the cache free blocks: each sequence's blocks that end before its
 * first query's window point at one block (not otherwise used) whose keys and values are all
 * NaN, so that an op that reads a position before a window (or weighs one) returns NaN. */
static inline tc_status paged_forget_before_window(paged_case *c, int64_t window)
{
    int32_t spare = -1;
    for (int32_t u = 0; u < c->n_blocks && spare < 0; u++) {
        bool used = false;
        for (int64_t i = 0; i < c->n_seqs * c->max_blocks; i++)
            used |= c->table[i] == u;
        if (!used)
            spare = u;
    }
    if (spare < 0)
        return TC_ERR_INVALID_ARGUMENT;
    size_t bytes = tc_dtype_bytes(c->tk.dtype, c->bs * c->KV * c->hd);
    void *nan = malloc(bytes);
    memset(nan, 0xFF, bytes); /* NaN in every float dtype */
    tc_tensor kb, vb;
    tc_status st = tc_tensor_slice(&c->tk, 0, spare, 1, &kb);
    if (st == TC_OK)
        st = tc_tensor_slice(&c->tv, 0, spare, 1, &vb);
    if (st == TC_OK)
        st = tc_tensor_copy_from_host(&kb, nan, bytes);
    if (st == TC_OK)
        st = tc_tensor_copy_from_host(&vb, nan, bytes);
    free(nan);
    for (int64_t s = 0; s < c->n_seqs && st == TC_OK; s++) {
        int64_t first = c->len[s] - c->m[s] - window + 1;
        for (int64_t b = 0; first > 0 && b < first / c->bs; b++)
            c->table[s * c->max_blocks + b] = spare;
    }
    if (st == TC_OK)
        st = tc_tensor_copy_from_host(&c->ttable, c->table,
                                      sizeof(int32_t) * (size_t)(c->n_seqs * c->max_blocks));
    return st;
}

static inline void paged_free(paged_case *c)
{
    for (int64_t s = 0; s < c->n_seqs; s++) {
        free(c->k[s]);
        free(c->v[s]);
    }
    free(c->k);
    free(c->v);
    free(c->q);
    free(c->len);
    free(c->m);
    free(c->table);
    free(c->lens);
    free(c->q_start);
    tc_tensor_deinit(&c->tq);
    tc_tensor_deinit(&c->tk);
    tc_tensor_deinit(&c->tv);
    tc_tensor_deinit(&c->ttable);
    tc_tensor_deinit(&c->tlens);
    tc_tensor_deinit(&c->tqstart);
}

/* What tc_logits_mask should leave in row x[V] for constraint c, done the plain way: each
 * token the mask forbids is -inf; each allowed token gets its biases summed in list order
 * (float), or -inf when one of them is -100 or less. */
static inline void ref_logits_mask(float *x, int64_t V, const tc_logits_constraint *c)
{
    for (int64_t t = 0; t < V; t++) {
        if (c->allowed && !(c->allowed[t / 32] & (1u << (t % 32)))) {
            x[t] = -INFINITY;
            continue;
        }
        bool listed = false, banned = false;
        float sum = 0.0f;
        for (int32_t k = 0; k < c->n_bias; k++)
            if (c->bias_ids[k] == t) {
                listed = true;
                banned |= c->bias[k] <= -100.0f;
                sum += c->bias[k];
            }
        if (banned)
            x[t] = -INFINITY;
        else if (listed)
            x[t] += sum;
    }
}

/* Random constraints on some rows of logits [n, V]: masks with about `density` of the tokens
 * allowed (stray bits past V set, which must be ignored), some rows all banned, biases with
 * repeated ids and bans. The arrays live in *mem (free it). */
static inline int32_t random_constraints(rng_t *r, int64_t n, int64_t V, int64_t extra_words,
                                  tc_logits_constraint *c, void **mem)
{
    int64_t W = (V + 31) / 32 + extra_words;
    enum { NB = 12 };
    char *m = calloc((size_t)n, sizeof(uint32_t) * (size_t)W + NB * (sizeof(int32_t) + sizeof(float)));
    *mem = m;
    int32_t k = 0;
    for (int64_t row = 0; row < n; row++) {
        int kind = (int)rng_int(r, 5); /* 0: none, 1: mask, 2: bias, 3: both, 4: all banned */
        if (kind == 0)
            continue;
        uint32_t *words = (uint32_t *)(m + (size_t)row * (sizeof(uint32_t) * (size_t)W +
                                                             NB * (sizeof(int32_t) + sizeof(float))));
        int32_t *ids = (int32_t *)(words + W);
        float *bias = (float *)(ids + NB);
        double density = rng_uniform(r, 0.0, 1.0);
        for (int64_t t = 0; t < 32 * W; t++)
            if (t >= V ? rng_int(r, 2) : kind != 4 && rng_uniform(r, 0, 1) < density)
                words[t / 32] |= 1u << (t % 32);
        int32_t nb = kind == 2 || kind == 3 ? (int32_t)rng_int(r, NB + 1) : 0;
        for (int32_t j = 0; j < nb; j++) {
            ids[j] = j > 0 && rng_int(r, 4) == 0 ? ids[rng_int(r, j)] : (int32_t)rng_int(r, V);
            bias[j] = rng_int(r, 5) == 0 ? -100.0f : (float)rng_uniform(r, -60, 60);
        }
        c[k++] = (tc_logits_constraint){ row, kind == 2 ? NULL : words, W, ids, bias, nb };
    }
    /* In a shuffled order: the op must not care. */
    for (int32_t i = k - 1; i > 0; i--) {
        int32_t j = (int32_t)rng_int(r, i + 1);
        tc_logits_constraint t = c[i];
        c[i] = c[j];
        c[j] = t;
    }
    return k;
}

#endif /* TC_TEST_ORACLE_H */
