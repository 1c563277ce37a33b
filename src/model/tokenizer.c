/* Byte-level BPE (Radford et al. 2019, GPT-2): text is split by the model's pre-tokenisation
 * regexes, each piece's bytes are mapped to printable code points, and merges are applied in
 * rank order, lowest first, leftmost first among equals (a heap of candidate pairs, so that a
 * long piece costs O(n log n), not O(n^2)). */
#define _GNU_SOURCE
#include "model/tokenizer_internal.h"
#include "model/tokenizer_trie.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "runtime/error.h"
#include "model/unicode_classes.h"
#include "runtime/host.h"

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

int32_t tc__tok_find(const tc_tokenizer *t, const char *s, size_t n)
{
    size_t mask = t->index_cap - 1;
    for (size_t i = hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        int32_t id = t->index[i];
        if (id < 0)
            return -1;
        if (t->tokens[id].text_len == n && memcmp(t->tokens[id].text, s, n) == 0)
            return id;
    }
}

static uint64_t mix(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    return k ^ (k >> 33);
}

static bool find_pair(const tc_tokenizer *t, int32_t a, int32_t b, uint32_t *rank, int32_t *merged)
{
    if (t->score_rank) {
        const token *x = &t->tokens[a], *y = &t->tokens[b];
        char buf[512];
        if (x->text_len + y->text_len > sizeof buf)
            return false;
        memcpy(buf, x->text, x->text_len);
        memcpy(buf + x->text_len, y->text, y->text_len);
        int32_t id = tc__tok_find(t, buf, x->text_len + y->text_len);
        if (id < 0 || t->tokens[id].type != TOKEN_NORMAL)
            return false;
        *rank = t->score_rank[id];
        *merged = id;
        return true;
    }
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    size_t mask = t->pair_cap - 1;
    for (size_t i = mix(key) & mask;; i = (i + 1) & mask) {
        if (t->pair_keys[i] == 0)
            return false;
        if (t->pair_keys[i] == key) {
            *rank = (uint32_t)(t->pair_vals[i] >> 32);
            *merged = (int32_t)(uint32_t)t->pair_vals[i];
            return true;
        }
    }
}

static size_t utf8_put(uint32_t cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 63));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 63));
        o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63));
    o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* Decode one UTF-8 character of s[0..n); its length in *len, or 0 when invalid. */
static uint32_t utf8_get(const uint8_t *s, size_t n, size_t *len)
{
    *len = 0;
    if (!n)
        return 0;
    uint32_t c = s[0];
    size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!k || k > n)
        return 0;
    if (k == 1) {
        *len = 1;
        return c;
    }
    c &= 0x7fu >> k;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = c << 6 | (s[i] & 63);
    }
    static const uint32_t min[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (c < min[k] || c > 0x10ffff || (c >= 0xd800 && c < 0xe000))
        return 0;
    *len = k;
    return c;
}

/* GPT-2's reversible map of bytes to printable code points: printable Latin-1 maps to itself,
 * the other 68 bytes to 256, 257, ... in order. */
static void byte_map(tc_tokenizer *t)
{
    uint32_t next = 256;
    for (int i = 0; i < 512; i++)
        t->cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        t->byte_cp[b] = keep ? (uint32_t)b : next++;
        t->cp_byte[t->byte_cp[b]] = (int16_t)b;
    }
}

/* Append s to the growing string *out (NULL once memory ran out). */
static void append(char **out, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (!*out)
        return;
    if (*len + n + 1 > *cap) {
        size_t c = (*len + n + 1) * 2;
        char *p = tc_host_realloc(*out, c);
        if (!p) {
            tc_host_free(*out);
            *out = NULL;
            return;
        }
        *out = p;
        *cap = c;
    }
    memcpy(*out + *len, s, n);
    *len += n;
    (*out)[*len] = 0;
}

/* The pattern with \s, \S, \p{L} and \p{N} drawn as tokenizers draws them
 * (unicode_classes.h): its White_Space, and PCRE2's letters and numbers with those of the
 * Unicode versions after PCRE2's. Inside a bracketed class the pieces join that class; outside,
 * they become one. (A \S inside a class stays PCRE2's.) NULL when memory ran out. */
static char *tokenizers_classes(const char *p)
{
    size_t len = 0, cap = strlen(p) * 2 + 64;
    char *out = tc_host_alloc(cap);
    if (out)
        out[0] = 0;
    bool in_class = false;
    for (size_t i = 0; p[i] && out;) {
        const char *piece = NULL, *open = "[", *close = "]";
        size_t skip = 2;
        if (p[i] == '\\' && p[i + 1] == 's')
            piece = TC__UNI_SPACE;
        else if (p[i] == '\\' && p[i + 1] == 'S' && !in_class)
            piece = TC__UNI_SPACE, open = "[^";
        else if (!strncmp(p + i, "\\p{L}", 5))
            piece = "\\p{L}" TC__UNI_LETTER_EXTRA, skip = 5;
        else if (!strncmp(p + i, "\\p{N}", 5))
            piece = "\\p{N}" TC__UNI_NUMBER_EXTRA, skip = 5;
        if (piece) {
            if (!in_class)
                append(&out, &len, &cap, open, strlen(open));
            append(&out, &len, &cap, piece, strlen(piece));
            if (!in_class)
                append(&out, &len, &cap, close, 1);
            i += skip;
            continue;
        }
        size_t n = 1;
        if (p[i] == '\\' && p[i + 1]) {
            n = 2;
        } else if (!in_class && p[i] == '[') {
            in_class = true;
            /* a ']' first (after '^') is a member, not the end */
            n += p[i + n] == '^';
            n += p[i + n] == ']';
        } else if (in_class && p[i] == '[' && p[i + 1] == ':') {
            const char *e = strstr(p + i + 2, ":]");
            n = e ? (size_t)(e - (p + i)) + 2 : 1;
        } else if (in_class && p[i] == ']') {
            in_class = false;
        }
        append(&out, &len, &cap, p + i, n);
        i += n;
    }
    return out;
}

tc_status tc__tok_add_regex(tc_tokenizer *t, const char *pattern)
{
    int err;
    PCRE2_SIZE off;
    char *drawn = tokenizers_classes(pattern);
    if (!drawn)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_tokenizer", "no host memory");
    pcre2_code *re =
        pcre2_compile((PCRE2_SPTR)drawn, PCRE2_ZERO_TERMINATED,
                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, NULL);
    tc_host_free(drawn);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        return tc_set_error(TC_ERR_INTERNAL, "tc_tokenizer", "pre-tokeniser regex: %s at %zu",
                            (const char *)msg, (size_t)off);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: matching works without JIT */
    t->regex[t->n_regex++] = re;
    return TC_OK;
}

/* Whether a token of this type is found in text as a whole where special tokens are parsed:
 * control and user-defined tokens, and (as llama.cpp matches them in a GGUF vocabulary)
 * unknown-type ones such as SentencePiece's <unk>. */
static bool matched_as_special(uint8_t type)
{
    return type == TOKEN_CONTROL || type == TOKEN_USER || type == TOKEN_UNKNOWN;
}

static size_t pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

/* The child of trie node `node` by byte b, or -1. */
static int32_t trie_next(const tc_tokenizer *t, int32_t node, uint8_t b)
{
    if (node == 0)
        return t->trie_root[b];
    uint64_t key = ((uint64_t)(uint32_t)node << 8 | b) + 1;
    size_t mask = t->trie_cap - 1;
    for (size_t i = mix(key) & mask;; i = (i + 1) & mask) {
        if (t->trie_keys[i] == 0)
            return -1;
        if (t->trie_keys[i] == key)
            return t->trie_child[i];
    }
}

/* Put the texts of the control and user-defined tokens (`bytes` of them together) into the
 * trie. Where two such tokens have one text, the lower id keeps it, as in the index. */
static tc_status build_trie(tc_tokenizer *t, size_t bytes)
{
    t->trie_cap = pow2_at_least(bytes * 2 + 1);
    t->trie_token = tc_host_alloc(sizeof *t->trie_token * (bytes + 1));
    t->trie_keys = tc_host_calloc(t->trie_cap, sizeof *t->trie_keys);
    t->trie_child = tc_host_alloc(sizeof *t->trie_child * t->trie_cap);
    if (!t->trie_token || !t->trie_keys || !t->trie_child)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_tokenizer", "no host memory");
    for (int b = 0; b < 256; b++)
        t->trie_root[b] = -1;
    t->trie_token[0] = -1;
    t->n_trie = 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const token *tk = &t->tokens[id];
        if (!matched_as_special(tk->type) || !tk->text_len)
            continue;
        int32_t node = 0;
        for (uint32_t k = 0; k < tk->text_len; k++) {
            uint8_t b = (uint8_t)tk->text[k];
            int32_t next = trie_next(t, node, b);
            if (next < 0) {
                next = t->n_trie++;
                t->trie_token[next] = -1;
                if (node == 0) {
                    t->trie_root[b] = next;
                } else {
                    uint64_t key = ((uint64_t)(uint32_t)node << 8 | b) + 1;
                    size_t mask = t->trie_cap - 1, i = mix(key) & mask;
                    while (t->trie_keys[i])
                        i = (i + 1) & mask;
                    t->trie_keys[i] = key;
                    t->trie_child[i] = next;
                }
            }
            node = next;
        }
        if (t->trie_token[node] < 0)
            t->trie_token[node] = id;
    }
    return TC_OK;
}

/* The longest special token whose text starts s[0..n): its id and length, or -1. The walk
 * stops at the first byte no special text continues with, so it reads at most the longest
 * special text's length. */
static int32_t special_at(const tc_tokenizer *t, const uint8_t *s, size_t n, size_t *len)
{
    int32_t best = -1, node = 0;
    for (size_t k = 0; k < n; k++) {
        node = trie_next(t, node, s[k]);
        if (node < 0)
            break;
        if (t->trie_token[node] >= 0) {
            best = t->trie_token[node];
            *len = k + 1;
        }
    }
    return best;
}

/* Fill one token's decoded bytes: control and user-defined tokens are their text, byte tokens
 * ("<0x0A>") their byte, others the inverse byte map of each code point. */
static size_t decode_text(const tc_tokenizer *t, const token *tk, char *o)
{
    const uint8_t *s = (const uint8_t *)tk->text;
    size_t n = tk->text_len;
    unsigned v;
    if (tk->type == TOKEN_CONTROL || tk->type == TOKEN_USER) {
        memcpy(o, s, n);
        return n;
    }
    if (tk->type == TOKEN_BYTE && n == 6 && sscanf((const char *)s, "<0x%2X>", &v) == 1) {
        o[0] = (char)v;
        return 1;
    }
    size_t w = 0;
    if (t->spm) {
        if (n == 6 && sscanf((const char *)s, "<0x%2X>", &v) == 1 && s[5] == '>') {
            o[0] = (char)v;
            return 1;
        }
        for (size_t i = 0; i < n;)
            if (i + 3 <= n && !memcmp(s + i, "\xe2\x96\x81", 3)) {
                o[w++] = ' ';
                i += 3;
            } else {
                o[w++] = (char)s[i++];
            }
        return w;
    }
    for (size_t i = 0; i < n;) {
        size_t k;
        uint32_t cp = utf8_get(s + i, n - i, &k);
        if (!k) {
            o[w++] = (char)s[i++];
            continue;
        }
        if (cp < 512 && t->cp_byte[cp] >= 0)
            o[w++] = (char)t->cp_byte[cp];
        else
            w += utf8_put(cp, o + w);
        i += k;
    }
    return w;
}

/* Build the vocabulary (texts and types by id; a missing id has an empty text), its index,
 * the merges ("left right", rank = position) and the special-token list. */
tc_status tc__tok_build(tc_tokenizer *t, int32_t n, const tc_gguf_str *strs, const uint8_t *types,
                        uint64_t n_merges, const tc_gguf_str *merges)
{
    const char *op = "tc_tokenizer";
    size_t trie_bytes = 0; /* the special tokens' texts together: at most this many edges */
    t->n_vocab = n;
    byte_map(t);
    t->tokens = tc_host_calloc((size_t)n, sizeof *t->tokens);
    /* Arena: each text with its NUL, then the decoded bytes (never longer than the text). */
    size_t arena = 0;
    for (int32_t i = 0; i < n; i++)
        arena += 2 * strs[i].len + 1;
    t->arena = tc_host_alloc(arena ? arena : 1);
    t->index_cap = pow2_at_least((size_t)n * 2);
    t->index = tc_host_alloc(sizeof *t->index * t->index_cap);
    if (!t->tokens || !t->arena || !t->index)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory");
    memset(t->index, 0xff, sizeof *t->index * t->index_cap);
    char *a = t->arena;
    for (int32_t i = 0; i < n; i++) {
        token *k = &t->tokens[i];
        memcpy(a, strs[i].ptr, strs[i].len);
        a[strs[i].len] = 0;
        k->text = a;
        k->text_len = (uint32_t)strs[i].len;
        a += strs[i].len + 1;
        k->type = types ? types[i] : TOKEN_NORMAL;
        k->bytes = a;
        k->bytes_len = (uint32_t)decode_text(t, k, a);
        a += k->bytes_len;
        if (matched_as_special(k->type) && k->text_len)
            trie_bytes += k->text_len;
        if (!k->text_len)
            continue;
        /* Index by text; a duplicate text keeps its first id. */
        size_t mask = t->index_cap - 1;
        size_t slot = hash_bytes(k->text, k->text_len) & mask;
        for (;; slot = (slot + 1) & mask) {
            int32_t o = t->index[slot];
            if (o < 0) {
                t->index[slot] = i;
                break;
            }
            if (t->tokens[o].text_len == k->text_len &&
                !memcmp(t->tokens[o].text, k->text, k->text_len))
                break;
        }
    }
    char buf[8];
    for (int b = 0; b < 256; b++)
        t->byte_token[b] =
            t->spm ? tc__tok_find(t, buf, (size_t)snprintf(buf, sizeof buf, "<0x%02X>", b))
                   : tc__tok_find(t, buf, utf8_put(t->byte_cp[b], buf));
    /* Merges "left right" -> (rank, id of "leftright"); a merge whose parts or result are not
     * in the vocabulary can never apply and is skipped, as in the reference implementations. */
    t->pair_cap = pow2_at_least((size_t)n_merges * 2);
    t->pair_keys = tc_host_calloc(t->pair_cap, sizeof *t->pair_keys);
    t->pair_vals = tc_host_alloc(t->pair_cap * sizeof *t->pair_vals);
    char *joined = tc_host_alloc(1024);
    if (!t->pair_keys || !t->pair_vals || !joined) {
        tc_host_free(joined);
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory");
    }
    for (uint64_t r = 0; r < n_merges; r++) {
        const char *m = merges[r].ptr, *sp = memchr(m, ' ', merges[r].len);
        if (!sp || merges[r].len > 1000)
            continue;
        size_t ll = (size_t)(sp - m), rl = merges[r].len - ll - 1;
        int32_t left = tc__tok_find(t, m, ll), right = tc__tok_find(t, sp + 1, rl);
        memcpy(joined, m, ll);
        memcpy(joined + ll, sp + 1, rl);
        int32_t merged = tc__tok_find(t, joined, ll + rl);
        if (left < 0 || right < 0 || merged < 0)
            continue;
        uint64_t key = ((uint64_t)(uint32_t)left << 32 | (uint32_t)right) + 1;
        size_t mask = t->pair_cap - 1;
        for (size_t i = mix(key) & mask;; i = (i + 1) & mask) {
            if (t->pair_keys[i] == key)
                break; /* the lower rank came first */
            if (t->pair_keys[i] == 0) {
                t->pair_keys[i] = key;
                t->pair_vals[i] = r << 32 | (uint32_t)merged;
                break;
            }
        }
    }
    tc_host_free(joined);
    return build_trie(t, trie_bytes);
}

void tc_tokenizer_destroy(tc_tokenizer *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->n_regex; i++)
        pcre2_code_free(t->regex[i]);
    tc_host_free(t->tokens);
    tc_host_free(t->arena);
    tc_host_free(t->index);
    tc_host_free(t->pair_keys);
    tc_host_free(t->pair_vals);
    tc_host_free(t->trie_token);
    tc_host_free(t->trie_keys);
    tc_host_free(t->trie_child);
    tc_host_free(t->score_rank);
    tc__tok_trie_free(t->vocab_trie);
    tc_host_free(t);
}

/* Growable id list. */
typedef struct ids {
    int32_t *v;
    size_t n, cap;
    bool oom;
    /* Where tc_tokenizer_encode_with may stop the work (NULL: never), the text's start, the
     * offset of the last check, and why it stopped (TC_OK: it did not). */
    const tc_encode_options *opt;
    const uint8_t *base;
    size_t base_at; /* the offset in the text of base (a normalised copy's segment: its start) */
    size_t checked;
    tc_status st;
} ids;
static void push(ids *o, int32_t id)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 64;
        int32_t *v = tc_host_realloc(o->v, cap * sizeof *v);
        if (!v) {
            o->oom = true;
            return;
        }
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = id;
}

/* Between two checks for cancellation and for the id limit, about this many bytes of text
 * are tokenised. */
enum { ENCODE_CHUNK = 64 << 10 };

/* Check, where the text reaches offset `at`, whether the work must stop: the ids outnumber
 * the limit or the caller cancels. Sets o->st; true when the work goes on. */
static bool keep_going(ids *o, size_t at)
{
    const tc_encode_options *x = o->opt;
    if (o->st != TC_OK || o->oom)
        return false;
    if (!x || at - o->checked < ENCODE_CHUNK)
        return true;
    o->checked = at;
    if (x->max_ids && o->n > x->max_ids)
        o->st = TC_ERR_LIMIT;
    else if (x->cancelled && x->cancelled(x->user))
        o->st = TC_ERR_CANCELLED;
    return o->st == TC_OK;
}

/* Heap of candidate merges ordered by (rank, position). */
typedef struct cand {
    uint32_t rank;
    int32_t pos;
} cand;
static bool before(cand a, cand b)
{
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}
static void heap_push(cand *h, size_t *n, cand c)
{
    size_t i = (*n)++;
    while (i && before(c, h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
}
static cand heap_pop(cand *h, size_t *n)
{
    cand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && before(h[c + 1], h[c]))
            c++;
        if (!before(h[c], last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = last;
    return top;
}

/* BPE of one piece of raw bytes. Byte-level: each byte starts as its token (bytes without one
 * are dropped). SentencePiece
 * style: each UTF-8 character starts as its token; a character without one becomes its
 * bytes' <0xXX> tokens (or <unk>), which take part in no merge. */
static void bpe(const tc_tokenizer *t, const uint8_t *s, size_t n, ids *o)
{
    if (!n)
        return;
    if (t->ignore_merges && n <= 256) {
        char buf[1024];
        size_t w = 0;
        for (size_t i = 0; i < n; i++)
            w += utf8_put(t->byte_cp[s[i]], buf + w);
        int32_t id = tc__tok_find(t, buf, w);
        if (id >= 0) {
            push(o, id);
            return;
        }
    }
    int32_t *sym = tc_host_alloc(n * sizeof *sym), *next = tc_host_alloc(n * sizeof *next),
            *prev = tc_host_alloc(n * sizeof *prev);
    cand *heap = tc_host_alloc(2 * n * sizeof *heap);
    if (!sym || !next || !prev || !heap) {
        o->oom = true;
        goto done;
    }
    size_t hn = 0;
    if (t->spm) {
        size_t m = 0;
        for (size_t i = 0; i < n;) {
            size_t k;
            utf8_get(s + i, n - i, &k);
            int32_t id = k ? tc__tok_find(t, (const char *)s + i, k) : -1;
            if (id >= 0) {
                sym[m++] = id;
                i += k;
                continue;
            }
            for (size_t b = 0; b < (k ? k : 1); b++, i++)
                sym[m++] = t->byte_token[s[i]] >= 0 ? t->byte_token[s[i]] : t->unk;
        }
        n = m;
    } else {
        /* A byte the vocabulary lacks is dropped before merging, so that its neighbours may
         * merge across it, as Hugging Face's tokenizers does (it skips characters without a
         * token when the model has no unknown token). */
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (t->byte_token[s[i]] >= 0)
                sym[m++] = t->byte_token[s[i]];
        n = m;
        if (!n)
            goto done;
    }
    for (size_t i = 0; i < n; i++) {
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        prev[i] = (int32_t)i - 1;
    }
    uint32_t rank;
    int32_t merged;
    for (size_t i = 0; i + 1 < n; i++)
        if (sym[i] >= 0 && sym[i + 1] >= 0 && find_pair(t, sym[i], sym[i + 1], &rank, &merged))
            heap_push(heap, &hn, (cand){ rank, (int32_t)i });
    while (hn) {
        cand c = heap_pop(heap, &hn);
        int32_t i = c.pos, j = next[i];
        if (sym[i] < 0 || j < 0 || sym[j] < 0 || !find_pair(t, sym[i], sym[j], &rank, &merged) ||
            rank != c.rank)
            continue; /* stale: one side merged since */
        sym[i] = merged;
        sym[j] = -2; /* dead */
        next[i] = next[j];
        if (next[j] >= 0)
            prev[next[j]] = i;
        if (prev[i] >= 0 && sym[prev[i]] >= 0 && find_pair(t, sym[prev[i]], sym[i], &rank, &merged))
            heap_push(heap, &hn, (cand){ rank, prev[i] });
        if (next[i] >= 0 && sym[next[i]] >= 0 && find_pair(t, sym[i], sym[next[i]], &rank, &merged))
            heap_push(heap, &hn, (cand){ rank, i });
    }
    for (int32_t i = 0; i >= 0; i = next[i])
        if (sym[i] >= 0)
            push(o, sym[i]);
done:
    tc_host_free(sym);
    tc_host_free(next);
    tc_host_free(prev);
    tc_host_free(heap);
}

/* A SentencePiece-style segment: spaces as U+2581, one prepended as configured, then BPE. */
static void spm_segment(const tc_tokenizer *t, const uint8_t *s, size_t n, bool first, ids *o)
{
    if (!n)
        return;
    bool pre = (t->prepend == PREPEND_ALWAYS || (t->prepend == PREPEND_FIRST && first)) &&
               !(t->metaspace && s[0] == ' ');
    size_t spaces = 0;
    for (size_t i = 0; i < n; i++)
        spaces += s[i] == ' ';
    uint8_t *w = tc_host_alloc(n + 2 * spaces + 3), *p = w;
    if (!w) {
        o->oom = true;
        return;
    }
    if (pre)
        memcpy(p, "\xe2\x96\x81", 3), p += 3;
    for (size_t i = 0; i < n; i++)
        if (s[i] == ' ')
            memcpy(p, "\xe2\x96\x81", 3), p += 3;
        else
            *p++ = s[i];
    bpe(t, w, (size_t)(p - w), o);
    tc_host_free(w);
}

/* Split s by regex `level` into matches and the gaps between them, recursing into the next
 * regex; the last level's pieces go to BPE. */
static void split(const tc_tokenizer *t, int level, const uint8_t *s, size_t n,
                  pcre2_match_data *md, ids *o)
{
    if (level == t->n_regex) {
        bpe(t, s, n, o);
        return;
    }
    size_t start = 0;
    while (start < n && keep_going(o, (size_t)(s + start - o->base) + o->base_at)) {
        int rc = pcre2_match(t->regex[level], s, n, start, 0, md, NULL);
        if (rc < 0)
            break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t m0 = ov[0], m1 = ov[1];
        if (m0 > start)
            split(t, level + 1, s + start, m0 - start, md, o);
        if (m1 == m0) {
            /* An empty match: take one byte as a gap so that the scan moves on. */
            split(t, level + 1, s + m0, 1, md, o);
            start = m0 + 1;
            continue;
        }
        split(t, level + 1, s + m0, m1 - m0, md, o);
        start = m1;
    }
    if (start < n && keep_going(o, (size_t)(s + start - o->base) + o->base_at))
        split(t, level + 1, s + start, n - start, md, o);
}

/* Tokenise s[from, to), which holds no special token, as ordinary text: normalised first where
 * the tokenizer says (tokenizers normalises the text between added tokens). */
static void encode_plain(const tc_tokenizer *t, const uint8_t *s, size_t from, size_t to,
                         pcre2_match_data *md, ids *o)
{
    uint8_t *norm = NULL;
    size_t n = 0;
    if (t->spm) {
        spm_segment(t, s + from, to - from, from == 0, o);
    } else if (t->nfc && tc__nfc(s + from, to - from, &norm, &n)) {
        const uint8_t *base = o->base;
        o->base = norm;
        o->base_at = from;
        split(t, 0, norm, n, md, o);
        o->base = base;
        o->base_at = 0;
        free(norm);
    } else {
        split(t, 0, s + from, to - from, md, o);
    }
}

tc_status tc_tokenizer_encode_with(const tc_tokenizer *t, const char *text, size_t len,
                                   const tc_encode_options *opt, int32_t **out, size_t *n_out)
{
    const char *op = "tc_tokenizer_encode";
    *out = NULL;
    *n_out = 0;
    const uint8_t *s = (const uint8_t *)text;
    ids o = { .opt = opt, .base = s };
    pcre2_match_data *md = pcre2_match_data_create(4, NULL);
    if (!md)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory");
    bool leading_bos = false;
    size_t start = 0; /* the ordinary text not yet tokenised begins here */
    size_t plain = 0; /* the first plain range that does not end at or before i */
    /* One pass: at each byte, the longest special token that starts there (the earliest
     * special token wins, the longest where several start at one byte). */
    for (size_t i = 0; opt->special && i < len && keep_going(&o, i);) {
        while (plain < opt->n_plain && opt->plain[2 * plain + 1] <= i)
            plain++;
        size_t plain_from = plain < opt->n_plain ? opt->plain[2 * plain] : len;
        if (plain_from <= i) {
            i = opt->plain[2 * plain + 1]; /* no special token starts inside a plain range */
            continue;
        }
        size_t k = 0;
        int32_t id = t->trie_root[s[i]] < 0 ? -1 : special_at(t, s + i, plain_from - i, &k);
        if (id < 0) {
            i++;
            continue;
        }
        encode_plain(t, s, start, i, md, &o);
        if (i == 0 && id == t->bos)
            leading_bos = true;
        push(&o, id);
        i += k;
        start = i;
    }
    if (keep_going(&o, start))
        encode_plain(t, s, start, len, md, &o);
    pcre2_match_data_free(md);
    if (!o.oom && !o.st && opt->add_bos && t->add_bos && t->bos >= 0 && !leading_bos) {
        push(&o, t->bos);
        if (!o.oom) {
            memmove(o.v + 1, o.v, (o.n - 1) * sizeof *o.v);
            o.v[0] = t->bos;
        }
    }
    tc_status st = o.st;
    if (o.oom)
        st = tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory");
    else if (!st && opt->max_ids && o.n > opt->max_ids)
        st = TC_ERR_LIMIT;
    if (st == TC_ERR_LIMIT)
        tc_set_error(st, op, "the text has more than %zu tokens", opt->max_ids);
    else if (st == TC_ERR_CANCELLED)
        tc_set_error(st, op, "cancelled by the caller");
    if (st != TC_OK) {
        tc_host_free(o.v);
        return st;
    }
    *out = o.v;
    *n_out = o.n;
    return TC_OK;
}

tc_status tc_tokenizer_encode(const tc_tokenizer *t, const char *text, size_t len, bool special,
                              bool add_bos, int32_t **ids, size_t *n)
{
    tc_encode_options o = { .special = special, .add_bos = add_bos };
    return tc_tokenizer_encode_with(t, text, len, &o, ids, n);
}

const char *tc_tokenizer_piece(const tc_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab) {
        *len = 0;
        return NULL;
    }
    *len = t->tokens[id].bytes_len;
    return t->tokens[id].bytes;
}

int32_t tc_tokenizer_vocab(const tc_tokenizer *t)
{
    return t->n_vocab;
}
int32_t tc_tokenizer_bos(const tc_tokenizer *t)
{
    return t->bos;
}
int32_t tc_tokenizer_eos(const tc_tokenizer *t)
{
    return t->eos;
}
bool tc_tokenizer_adds_bos(const tc_tokenizer *t)
{
    return t->add_bos;
}
bool tc_tokenizer_is_control(const tc_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && t->tokens[id].type == TOKEN_CONTROL;
}
int32_t tc_tokenizer_find(const tc_tokenizer *t, const char *text)
{
    return tc__tok_find(t, text, strlen(text));
}

/* Bytes a valid character starting with lead byte c needs, 0 for a byte that cannot lead. */
static int utf8_need(uint8_t c)
{
    return c < 0x80                   ? 1
           : (c >= 0xc2 && c <= 0xdf) ? 2
           : (c >> 4) == 14           ? 3
           : (c >= 0xf0 && c <= 0xf4) ? 4
                                      : 0;
}
/* Whether b may follow the pending bytes p[0..k) (k >= 1) of a character (no overlongs,
 * surrogates or code points past U+10FFFF). */
static bool utf8_continues(const uint8_t *p, int k, uint8_t b)
{
    if ((b & 0xc0) != 0x80)
        return false;
    if (k == 1) {
        if (p[0] == 0xe0)
            return b >= 0xa0;
        if (p[0] == 0xed)
            return b < 0xa0;
        if (p[0] == 0xf0)
            return b >= 0x90;
        if (p[0] == 0xf4)
            return b < 0x90;
    }
    return true;
}

static const char replacement[] = "\xef\xbf\xbd";

size_t tc_detok_push(const tc_tokenizer *t, tc_detok *d, int32_t id, bool special, char *out,
                     size_t cap)
{
    size_t len, w = 0;
    const char *p = tc_tokenizer_piece(t, id, &len);
    if (!p || (!special && (t->tokens[id].type == TOKEN_CONTROL)))
        return 0;
    size_t i = 0;
    /* A decoder's Strip: the text's first spaces (SentencePiece's prepended one). */
    for (; i < len && d->stripped < t->strip && !d->started && p[i] == ' '; i++)
        d->stripped++;
    if (len)
        d->started = true;
    for (; i < len; i++) {
        uint8_t b = (uint8_t)p[i];
        if (w + 8 > cap)
            break;
        if (d->n_pending) {
            if (utf8_continues(d->pending, d->n_pending, b)) {
                d->pending[d->n_pending++] = b;
                if (d->n_pending == utf8_need(d->pending[0])) {
                    memcpy(out + w, d->pending, (size_t)d->n_pending);
                    w += (size_t)d->n_pending;
                    d->n_pending = 0;
                }
                continue;
            }
            memcpy(out + w, replacement, 3);
            w += 3;
            d->n_pending = 0;
        }
        int need = utf8_need(b);
        if (need == 1)
            out[w++] = (char)b;
        else if (need == 0) {
            memcpy(out + w, replacement, 3);
            w += 3;
        } else
            d->pending[d->n_pending++] = b;
    }
    return w;
}

size_t tc_detok_flush(tc_detok *d, char *out, size_t cap)
{
    if (!d->n_pending || cap < 3)
        return 0;
    d->n_pending = 0;
    memcpy(out, replacement, 3);
    return 3;
}
