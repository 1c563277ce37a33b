/* GGUF reader: every count, length and offset is checked against the bytes that remain before
 * it is used, so a truncated or hostile file is an error, never an out-of-bounds read. */
#define _GNU_SOURCE
#include "model/gguf.h"
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include "model/internal.h"
#include "runtime/error.h"
#include "runtime/host.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define MAX_ARRAY_DEPTH 2

typedef struct reader {
    const uint8_t *base, *p, *end;
    const char *what; /* file name, for messages */
} reader;

/* Each type's name, elements and bytes per block (ggml-common.h's block_q4_0 ... block_tq2_0). */
static const struct {
    const char *name;
    uint64_t elems, bytes;
} ggml_types[TC_GGML_TYPE_LIMIT] = {
    [TC_GGML_F32] = { "f32", 1, 4 },
    [TC_GGML_F16] = { "f16", 1, 2 },
    [TC_GGML_Q4_0] = { "q4_0", 32, 18 },
    [TC_GGML_Q4_1] = { "q4_1", 32, 20 },
    [TC_GGML_Q5_0] = { "q5_0", 32, 22 },
    [TC_GGML_Q5_1] = { "q5_1", 32, 24 },
    [TC_GGML_Q8_0] = { "q8_0", 32, 34 },
    [TC_GGML_Q8_1] = { "q8_1", 32, 36 },
    [TC_GGML_Q2_K] = { "q2_k", 256, 84 },
    [TC_GGML_Q3_K] = { "q3_k", 256, 110 },
    [TC_GGML_Q4_K] = { "q4_k", 256, 144 },
    [TC_GGML_Q5_K] = { "q5_k", 256, 176 },
    [TC_GGML_Q6_K] = { "q6_k", 256, 210 },
    [TC_GGML_Q8_K] = { "q8_k", 256, 292 },
    [TC_GGML_IQ2_XXS] = { "iq2_xxs", 256, 66 },
    [TC_GGML_IQ2_XS] = { "iq2_xs", 256, 74 },
    [TC_GGML_IQ3_XXS] = { "iq3_xxs", 256, 98 },
    [TC_GGML_IQ1_S] = { "iq1_s", 256, 50 },
    [TC_GGML_IQ4_NL] = { "iq4_nl", 32, 18 },
    [TC_GGML_IQ3_S] = { "iq3_s", 256, 110 },
    [TC_GGML_IQ2_S] = { "iq2_s", 256, 82 },
    [TC_GGML_IQ4_XS] = { "iq4_xs", 256, 136 },
    [TC_GGML_I8] = { "i8", 1, 1 },
    [TC_GGML_I16] = { "i16", 1, 2 },
    [TC_GGML_I32] = { "i32", 1, 4 },
    [TC_GGML_I64] = { "i64", 1, 8 },
    [TC_GGML_F64] = { "f64", 1, 8 },
    [TC_GGML_IQ1_M] = { "iq1_m", 256, 56 },
    [TC_GGML_BF16] = { "bf16", 1, 2 },
    [TC_GGML_TQ1_0] = { "tq1_0", 256, 54 },
    [TC_GGML_TQ2_0] = { "tq2_0", 256, 66 },
    [TC_GGML_Q4_1_G64] = { "q4_1_g64", 64, 36 },
    [TC_GGML_Q4_1_G128] = { "q4_1_g128", 128, 68 },
};

const char *tc_ggml_type_name(tc_ggml_type t)
{
    return (unsigned)t < TC_GGML_TYPE_LIMIT && ggml_types[t].name ? ggml_types[t].name : "unknown";
}

bool tc_ggml_type_block(tc_ggml_type t, uint64_t *block_elems, uint64_t *block_bytes)
{
    if ((unsigned)t >= TC_GGML_TYPE_LIMIT || !ggml_types[t].name)
        return false;
    *block_elems = ggml_types[t].elems;
    *block_bytes = ggml_types[t].bytes;
    return true;
}

static size_t scalar_size(uint32_t type)
{
    switch (type) {
    case TC_GGUF_UINT8:
    case TC_GGUF_INT8:
    case TC_GGUF_BOOL: return 1;
    case TC_GGUF_UINT16:
    case TC_GGUF_INT16: return 2;
    case TC_GGUF_UINT32:
    case TC_GGUF_INT32:
    case TC_GGUF_FLOAT32: return 4;
    case TC_GGUF_UINT64:
    case TC_GGUF_INT64:
    case TC_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* One TC_ERR_PARSE sentence: the file, what is wrong, and where. */
__attribute__((format(printf, 2, 3))) static tc_status fail(const reader *r, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tc_set_error(TC_ERR_PARSE, "tc_gguf", "%s: %s (at byte %llu)", r->what, msg,
                        (unsigned long long)(r->p - r->base));
}

static bool take(reader *r, size_t n, const uint8_t **out)
{
    if ((size_t)(r->end - r->p) < n)
        return false;
    *out = r->p;
    r->p += n;
    return true;
}
static bool u32(reader *r, uint32_t *v)
{
    const uint8_t *p;
    if (!take(r, 4, &p))
        return false;
    memcpy(v, p, 4);
    return true;
}
static bool u64(reader *r, uint64_t *v)
{
    const uint8_t *p;
    if (!take(r, 8, &p))
        return false;
    memcpy(v, p, 8);
    return true;
}
static bool str(reader *r, tc_gguf_str *s)
{
    const uint8_t *p;
    if (!u64(r, &s->len) || s->len > (uint64_t)(r->end - r->p) || !take(r, (size_t)s->len, &p))
        return false;
    s->ptr = (const char *)p;
    return true;
}

/* Skip over one value of `type` (arrays recursively), checking that it fits. */
static tc_status skip_value(reader *r, uint32_t type, int depth, const char *key)
{
    size_t size = scalar_size(type);
    if (size) {
        const uint8_t *p;
        return take(r, size, &p) ? TC_OK : fail(r, "value of '%s' runs past the end", key);
    }
    if (type == TC_GGUF_STRING) {
        tc_gguf_str s;
        return str(r, &s) ? TC_OK : fail(r, "string in '%s' runs past the end", key);
    }
    if (type != TC_GGUF_ARRAY)
        return fail(r, "'%s' has unknown value type %llu", key, (unsigned long long)type);
    if (depth >= MAX_ARRAY_DEPTH)
        return fail(r, "arrays in '%s' nest deeper than %llu", key,
                    (unsigned long long)MAX_ARRAY_DEPTH);
    uint32_t et;
    uint64_t n;
    if (!u32(r, &et) || !u64(r, &n))
        return fail(r, "array header of '%s' runs past the end", key);
    size_t es = scalar_size(et);
    if (es) {
        const uint8_t *p;
        if (n > (uint64_t)(r->end - r->p) / es || !take(r, (size_t)(n * es), &p))
            return fail(r, "array '%s' of %llu elements runs past the end", key,
                        (unsigned long long)n);
        return TC_OK;
    }
    /* Each string or array element takes at least 8 bytes: bound n before looping. */
    if (n > (uint64_t)(r->end - r->p) / 8)
        return fail(r, "array '%s' of %llu elements runs past the end", key, (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++)
        TC_TRY(skip_value(r, et, depth + 1, key));
    return TC_OK;
}

static bool number(tc_gguf_type type, const uint8_t *p, double *d, int64_t *i);

static bool str_eq(tc_gguf_str s, const char *c)
{
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}

/* Tensor entries ordered by name (length first). */
static int by_name(const void *a, const void *b)
{
    const tc_gguf_tensor *x = *(const tc_gguf_tensor *const *)a,
                         *y = *(const tc_gguf_tensor *const *)b;
    if (x->name.len != y->name.len)
        return x->name.len < y->name.len ? -1 : 1;
    return memcmp(x->name.ptr, y->name.ptr, x->name.len);
}
/* Up to 80 bytes of a tensor's name, for messages. */
#define SHORT_NAME(t) (int)((t)->name.len < 80 ? (t)->name.len : 80), (t)->name.ptr

/* Every tensor name once (checked on the entries sorted by name, so that a file of many
 * tensors costs n log n), and no two tensors' data sharing a byte (tc__spans_overlap). */
static tc_status check_tensors(tc_gguf *g, const reader *r)
{
    if (g->n_tensors < 2)
        return TC_OK;
    size_t n = (size_t)g->n_tensors;
    const tc_gguf_tensor **v = tc_host_alloc(sizeof *v * n);
    tc__span *spans = tc_host_alloc(sizeof *spans * n);
    if (!v || !spans) {
        tc_host_free(v), tc_host_free(spans);
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_gguf", "%s: %llu tensor entries", r->what,
                            (unsigned long long)g->n_tensors);
    }
    for (size_t i = 0; i < n; i++) {
        const tc_gguf_tensor *t = &g->tensors[i];
        v[i] = t;
        spans[i] = (tc__span){ (uintptr_t)t->data, (uintptr_t)t->data + t->bytes, i };
    }
    tc_status st = TC_OK;
    qsort(v, n, sizeof *v, by_name);
    for (size_t i = 1; i < n && st == TC_OK; i++)
        if (!by_name(&v[i - 1], &v[i]))
            st = fail(r, "tensor '%.*s' appears twice", SHORT_NAME(v[i]));
    size_t i = st == TC_OK ? tc__spans_overlap(spans, n) : 0;
    if (i)
        st = fail(r, "tensors '%.*s' and '%.*s' share bytes of the data section",
                  SHORT_NAME(&g->tensors[spans[i - 1].ref]), SHORT_NAME(&g->tensors[spans[i].ref]));
    tc_host_free(v), tc_host_free(spans);
    return st;
}
#undef SHORT_NAME

static tc_status parse(tc_gguf *g, reader *r)
{
    uint32_t magic;
    if (!u32(r, &magic) || magic != GGUF_MAGIC)
        return fail(r, "not a GGUF file (no 'GGUF' magic)");
    if (!u32(r, &g->version))
        return fail(r, "truncated header");
    if (g->version == 1 || g->version > 3)
        return fail(r, "GGUF version %llu is not supported (2 and 3 are)",
                    (unsigned long long)g->version);
    if (g->version == 0)
        return fail(r, "GGUF version 0 is invalid (a big-endian file?)");
    if (!u64(r, &g->n_tensors) || !u64(r, &g->n_kv))
        return fail(r, "truncated header");
    /* A kv entry takes at least 8 + 4 + 1 bytes and a tensor entry 8 + 4 + 8 + 4 + 8. */
    size_t left = (size_t)(r->end - r->p);
    if (g->n_kv > left / 13)
        return fail(r, "header claims %llu metadata entries, more than the file holds",
                    (unsigned long long)g->n_kv);
    if (g->n_tensors > left / 32)
        return fail(r, "header claims %llu tensors, more than the file holds",
                    (unsigned long long)g->n_tensors);
    g->kv = tc_host_calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv);
    g->tensors = tc_host_calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_gguf", "%s: no host memory for the directory",
                            r->what);
    g->alignment = 32;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        tc_gguf_kv *kv = &g->kv[i];
        uint32_t type;
        if (!str(r, &kv->key) || !u32(r, &type))
            return fail(r, "metadata entry %llu runs past the end", (unsigned long long)i);
        kv->type = (tc_gguf_type)type;
        kv->data = r->p;
        char key[96];
        snprintf(key, sizeof key, "%.*s", (int)(kv->key.len < 80 ? kv->key.len : 80), kv->key.ptr);
        if (type == TC_GGUF_ARRAY) {
            uint32_t et;
            const uint8_t *save = r->p;
            if (!u32(r, &et) || !u64(r, &kv->array_len))
                return fail(r, "array header of '%s' runs past the end", key);
            kv->array_type = (tc_gguf_type)et;
            kv->data = r->p;
            r->p = save;
        }
        TC_TRY(skip_value(r, type, 0, key));
        if (str_eq(kv->key, "general.alignment")) {
            int64_t a = 0;
            double d;
            if (type == TC_GGUF_FLOAT32 || type == TC_GGUF_FLOAT64 ||
                !number(kv->type, kv->data, &d, &a) || a <= 0 || a > 65536 || (a & (a - 1)))
                return fail(r, "'%s' must be a power of two up to 65536", key);
            g->alignment = (uint64_t)a;
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        tc_gguf_tensor *t = &g->tensors[i];
        uint32_t nd, type;
        uint64_t offset;
        if (!str(r, &t->name) || !u32(r, &nd))
            return fail(r, "tensor entry %llu runs past the end", (unsigned long long)i);
        char name[96];
        snprintf(name, sizeof name, "%.*s", (int)(t->name.len < 80 ? t->name.len : 80),
                 t->name.ptr);
        if (nd < 1 || nd > 4)
            return fail(r, "tensor '%s' has %llu dimensions (1 to 4 allowed)", name,
                        (unsigned long long)nd);
        t->n_dims = (int)nd;
        t->n_elements = 1;
        for (uint32_t d = 0; d < nd; d++) {
            if (!u64(r, &t->dims[d]))
                return fail(r, "tensor '%s' entry runs past the end", name);
            if (t->dims[d] == 0 || t->dims[d] > (UINT64_MAX >> 2) / t->n_elements)
                return fail(r, "tensor '%s' has an invalid dimension %llu", name,
                            (unsigned long long)t->dims[d]);
            t->n_elements *= t->dims[d];
        }
        for (uint32_t d = nd; d < 4; d++)
            t->dims[d] = 1;
        if (!u32(r, &type) || !u64(r, &offset))
            return fail(r, "tensor '%s' entry runs past the end", name);
        t->type = (tc_ggml_type)type;
        uint64_t be, bb;
        if (t->type == TC_GGML_Q4_1_G64 || t->type == TC_GGML_Q4_1_G128 ||
            !tc_ggml_type_block(t->type, &be, &bb))
            return fail(r, "tensor '%s' has unknown ggml type %llu", name,
                        (unsigned long long)type);
        if (t->dims[0] % be)
            return fail(r, "tensor '%s': a row of %llu elements is not whole blocks", name,
                        (unsigned long long)t->dims[0]);
        if (t->n_elements / be > UINT64_MAX / bb)
            return fail(r, "tensor '%s' of %llu elements has more bytes than 64 bits count", name,
                        (unsigned long long)t->n_elements);
        t->bytes = t->n_elements / be * bb;
        t->data = (const void *)(uintptr_t)offset; /* relative until the data section is known */
    }
    uint64_t pos = (uint64_t)(r->p - r->base);
    uint64_t data_start = (pos + g->alignment - 1) / g->alignment * g->alignment;
    uint64_t total = (uint64_t)(r->end - r->base);
    if (g->n_tensors && data_start > total)
        return fail(r, "the tensor data section is missing");
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        tc_gguf_tensor *t = &g->tensors[i];
        uint64_t off = (uint64_t)(uintptr_t)t->data;
        char name[96];
        snprintf(name, sizeof name, "%.*s", (int)(t->name.len < 80 ? t->name.len : 80),
                 t->name.ptr);
        if (off % g->alignment)
            return fail(r, "tensor '%s' data offset %llu is not aligned", name,
                        (unsigned long long)off);
        if (off > total - data_start || t->bytes > total - data_start - off)
            return fail(r, "tensor '%s' data (%llu bytes) runs past the end of the file", name,
                        (unsigned long long)t->bytes);
        t->data = r->base + data_start + off;
    }
    return check_tensors(g, r);
}

tc_status tc_gguf_parse(tc_gguf *g, const void *buf, size_t bytes)
{
    memset(g, 0, sizeof *g);
    reader r = { buf, buf, (const uint8_t *)buf + bytes, "gguf" };
    tc_status st = parse(g, &r);
    if (st != TC_OK)
        tc_gguf_close(g);
    return st;
}

tc_status tc_gguf_open(tc_gguf *g, const char *path)
{
    memset(g, 0, sizeof *g);
    void *map;
    size_t bytes;
    TC_TRY(tc__map_file("tc_gguf_open", path, "too short for GGUF", 1, &map, &bytes));
    reader r = { map, map, (const uint8_t *)map + bytes, path };
    tc_status st = parse(g, &r);
    g->map = map;
    g->map_bytes = bytes;
    if (st != TC_OK)
        tc_gguf_close(g);
    return st;
}

void tc_gguf_close(tc_gguf *g)
{
    if (!g)
        return;
    tc_host_free(g->kv);
    tc_host_free(g->tensors);
    tc__unmap_file(g->map, g->map_bytes);
    memset(g, 0, sizeof *g);
}

const tc_gguf_kv *tc_gguf_find(const tc_gguf *g, const char *key)
{
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (str_eq(g->kv[i].key, key))
            return &g->kv[i];
    return NULL;
}

const tc_gguf_tensor *tc_gguf_tensor_find(const tc_gguf *g, const char *name)
{
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (str_eq(g->tensors[i].name, name))
            return &g->tensors[i];
    return NULL;
}

static bool number(tc_gguf_type type, const uint8_t *p, double *d, int64_t *i)
{
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        float f32;
        uint64_t u64;
        int64_t i64;
        double f64;
    } v;
    size_t size = scalar_size(type);
    if (!size)
        return false;
    memcpy(&v, p, size);
    switch (type) {
    case TC_GGUF_UINT8:
    case TC_GGUF_BOOL: *i = v.u8; break;
    case TC_GGUF_INT8: *i = v.i8; break;
    case TC_GGUF_UINT16: *i = v.u16; break;
    case TC_GGUF_INT16: *i = v.i16; break;
    case TC_GGUF_UINT32: *i = v.u32; break;
    case TC_GGUF_INT32: *i = v.i32; break;
    case TC_GGUF_UINT64: *i = v.u64 > INT64_MAX ? INT64_MAX : (int64_t)v.u64; break;
    case TC_GGUF_INT64: *i = v.i64; break;
    case TC_GGUF_FLOAT32:
    case TC_GGUF_FLOAT64:
        *d = type == TC_GGUF_FLOAT32 ? v.f32 : v.f64;
        /* Only in-range values convert (a cast of NaN or of +-1e300 is undefined). */
        *i = *d > -9.2e18 && *d < 9.2e18 ? (int64_t)*d : 0;
        return true;
    default: return false;
    }
    *d = (double)*i;
    return true;
}

bool tc_gguf_get_i64(const tc_gguf *g, const char *key, int64_t *out)
{
    const tc_gguf_kv *kv = tc_gguf_find(g, key);
    double d;
    if (!kv || kv->type == TC_GGUF_FLOAT32 || kv->type == TC_GGUF_FLOAT64)
        return false;
    return number(kv->type, kv->data, &d, out);
}

bool tc_gguf_get_f64(const tc_gguf *g, const char *key, double *out)
{
    const tc_gguf_kv *kv = tc_gguf_find(g, key);
    int64_t i;
    return kv && number(kv->type, kv->data, out, &i);
}

bool tc_gguf_get_bool(const tc_gguf *g, const char *key, bool *out)
{
    const tc_gguf_kv *kv = tc_gguf_find(g, key);
    if (!kv || kv->type != TC_GGUF_BOOL)
        return false;
    *out = kv->data[0] != 0;
    return true;
}

bool tc_gguf_get_str(const tc_gguf *g, const char *key, tc_gguf_str *out)
{
    const tc_gguf_kv *kv = tc_gguf_find(g, key);
    if (!kv || kv->type != TC_GGUF_STRING)
        return false;
    memcpy(&out->len, kv->data, 8);
    out->ptr = (const char *)kv->data + 8;
    return true;
}

void tc_gguf_strings(const tc_gguf_kv *kv, tc_gguf_str *out)
{
    const uint8_t *p = kv->data;
    for (uint64_t i = 0; i < kv->array_len; i++) {
        memcpy(&out[i].len, p, 8);
        out[i].ptr = (const char *)p + 8;
        p += 8 + out[i].len;
    }
}

double tc_gguf_array_number(const tc_gguf_kv *kv, uint64_t i)
{
    double d = 0;
    int64_t v;
    if (!number(kv->array_type, kv->data + i * scalar_size(kv->array_type), &d, &v))
        return 0;
    return d;
}
