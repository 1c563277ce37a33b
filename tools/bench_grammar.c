/* Host time of constrained decoding's token masks: JSON documents written token by token (the
 * real SmolLM2 tokenizer) under their schemas, timing tc_grammar_allowed at every step, for a
 * freshly compiled grammar (cold), for further documents under the same grammar (warm: what a
 * later request with the same schema meets) and for the same documents again (repeat). */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "inference/grammar.h"
#include "inference/grammar_internal.h"
#include "model/tokenizer.h"
#include "runtime/host.h"
#include "server/schema.h"

/* Each schema with documents it takes; NULL schema: json_object (any object). */
static const struct {
    const char *name, *schema, *docs[4];
} cases[] = {
    { "person",
      "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":"
      "\"integer\"},\"email\":{\"type\":\"string\"},\"address\":{\"type\":\"object\","
      "\"properties\":{\"street\":{\"type\":\"string\"},\"city\":{\"type\":\"string\"},\"zip\":"
      "{\"type\":\"string\",\"maxLength\":10}},\"required\":[\"street\",\"city\"]},\"tags\":{"
      "\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":8},\"active\":{\"type\":"
      "\"boolean\"}},\"required\":[\"name\",\"age\",\"address\"]}",
      { "{\"name\": \"Ada Lovelace\", \"age\": 36, \"email\": \"ada@example.org\", \"address\": "
        "{\"street\": \"12 St James's Square\", \"city\": \"London\", \"zip\": \"SW1Y 4JH\"}, "
        "\"tags\": [\"mathematician\", \"writer\", \"analytical engine\"], \"active\": false}",
        "{\"name\": \"Grace Hopper\", \"age\": 85, \"address\": {\"street\": \"1 Navy Yard\", "
        "\"city\": \"Arlington\"}, \"tags\": [\"admiral\", \"COBOL\"], \"active\": true}",
        "{\"name\": \"Zo\u00eb Ng\", \"age\": 29, \"email\": \"zoe.ng@mail.example\", "
        "\"address\": {\"street\": \"Rue de Rivoli 99\", \"city\": \"Paris\", \"zip\": "
        "\"75001\"}, \"tags\": [], \"active\": true}" } },
    { "catalogue",
      "{\"type\":\"object\",\"properties\":{\"items\":{\"type\":\"array\",\"items\":{\"type\":"
      "\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},\"title\":{\"type\":\"string\"},"
      "\"price\":{\"type\":\"number\"},\"in_stock\":{\"type\":\"boolean\"}},\"required\":[\"id\","
      "\"title\",\"price\",\"in_stock\"]},\"maxItems\":10},\"total\":{\"type\":\"number\"},"
      "\"currency\":{\"enum\":[\"EUR\",\"USD\",\"GBP\"]}},\"required\":[\"items\",\"total\","
      "\"currency\"]}",
      { "{\"items\": [{\"id\": 1, \"title\": \"Espresso cup\", \"price\": 4.5, \"in_stock\": "
        "true}, {\"id\": 2, \"title\": \"Milk jug, stainless\", \"price\": 12.99, \"in_stock\": "
        "false}, {\"id\": 17, \"title\": \"Grinder\", \"price\": 89, \"in_stock\": true}], "
        "\"total\": 106.49, \"currency\": \"EUR\"}",
        "{\"items\": [{\"id\": 301, \"title\": \"Notebook A5 dotted\", \"price\": 7.25, "
        "\"in_stock\": true}], \"total\": 7.25, \"currency\": \"GBP\"}",
        "{\"items\": [], \"total\": 0, \"currency\": \"USD\"}" } },
    { "event",
      "{\"type\":\"object\",\"properties\":{\"kind\":{\"enum\":[\"meeting\",\"call\",\"deadline\"]"
      "},\"at\":{\"type\":\"string\",\"format\":\"date-time\"},\"value\":{\"anyOf\":[{\"type\":"
      "\"integer\"},{\"type\":\"string\"}]},\"who\":{\"type\":[\"string\",\"null\"]},\"notes\":{"
      "\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":40}}},\"required\":["
      "\"kind\","
      "\"at\"]}",
      { "{\"kind\": \"meeting\", \"at\": \"2024-05-17T09:30:00Z\", \"value\": 3, \"who\": "
        "\"Team Blue\", \"notes\": [\"bring the quarterly numbers\", \"room 4.12\"]}",
        "{\"kind\": \"deadline\", \"at\": \"2025-01-31T23:59:59Z\", \"value\": \"tax "
        "return\", \"who\": null}",
        "{\"kind\": \"call\", \"at\": \"2024-11-02T14:00:00Z\", \"notes\": [\"ask about the "
        "invoice\"]}" } },
    { "json_object",
      NULL,
      { "{\"query\": \"weather in Lyon\", \"results\": [{\"day\": \"Mon\", \"high\": 21.5, "
        "\"low\": 12, \"rain\": false}, {\"day\": \"Tue\", \"high\": 18, \"low\": 11.25, "
        "\"rain\": true}], \"source\": {\"name\": \"M\u00e9t\u00e9o\", \"id\": 7}, \"ok\": true}",
        "{\"a\": [1, 2, [3, {\"b\": null}]], \"c\": \"d e f\", \"g\": -0.5e3}",
        "{\"message\": \"Hello, world! This is a longer string with punctuation: yes, "
        "really.\", \"count\": 42}" } },
};

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

typedef struct times {
    double *v; /* ms, one per mask */
    size_t n, cap;
} times;

static void add(times *t, double ms)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 1024;
        t->v = realloc(t->v, sizeof *t->v * t->cap);
        if (!t->v) {
            fprintf(stderr, "bench_grammar: out of memory\n");
            exit(1);
        }
    }
    t->v[t->n++] = ms;
}

static void report(const char *what, times *t)
{
    if (!t->n)
        return;
    double sum = 0;
    for (size_t i = 0; i < t->n; i++)
        sum += t->v[i];
    qsort(t->v, t->n, sizeof *t->v, cmp);
    printf("%-34s %6zu masks  mean %8.4f ms  p50 %8.4f ms  p99 %8.4f ms  max %8.3f ms\n", what,
           t->n, sum / (double)t->n, t->v[t->n / 2], t->v[(size_t)((double)t->n * 0.99)],
           t->v[t->n - 1]);
}

/* Write one document token by token, timing the mask before each token (and before the end).
 * False when the grammar refuses the document. */
static bool write_doc(tc_grammar *g, const tc_tokenizer *tok, const char *doc, uint32_t *words,
                      int64_t n_words, times *t)
{
    int32_t *ids;
    size_t n;
    if (tc_tokenizer_encode(tok, doc, strlen(doc), false, false, &ids, &n) != TC_OK)
        return false;
    tc_grammar_state *s = tc_grammar_start(g);
    bool ok = s != NULL;
    for (size_t i = 0; ok && i <= n; i++) {
        double t0 = now_ms();
        ok = tc_grammar_allowed(s, words, n_words);
        add(t, now_ms() - t0);
        int32_t next = i < n ? ids[i] : tc_tokenizer_eos(tok);
        ok = ok && (words[next >> 5] >> (next & 31) & 1) && tc_grammar_accept(s, next);
    }
    tc_grammar_state_free(s);
    tc_host_free(ids);
    return ok;
}

int main(int argc, char **argv)
{
    char path[4096];
    const char *cache = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (argc > 1)
        snprintf(path, sizeof path, "%s", argv[1]);
    else if (cache)
        snprintf(path, sizeof path, "%s/thincuda/SmolLM2-135M-Instruct.Q4_1.gguf", cache);
    else
        snprintf(path, sizeof path, "%s/.cache/thincuda/SmolLM2-135M-Instruct.Q4_1.gguf",
                 home ? home : ".");
    tc_gguf gguf;
    tc_tokenizer *tok;
    if (tc_gguf_open(&gguf, path) != TC_OK || tc_tokenizer_from_gguf(&gguf, &tok) != TC_OK) {
        fprintf(stderr, "bench_grammar: %s (tools/fetch-model gets SmolLM2)\n", tc_last_error());
        return 1;
    }
    int64_t n_words = (tc_tokenizer_vocab(tok) + 31) / 32;
    uint32_t *words = malloc(sizeof *words * (size_t)n_words);
    times all_cold = { 0 }, all_warm = { 0 }, all_repeat = { 0 };
    printf("SmolLM2 tokenizer, %d tokens; per mask (one per token written)\n",
           tc_tokenizer_vocab(tok));
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        json_t *schema = cases[c].schema ? json_loads(cases[c].schema, 0, NULL) : NULL;
        char why[320];
        double t0 = now_ms();
        tc_grammar *g = tc_schema_grammar(schema, tok, why, sizeof why);
        double compile = now_ms() - t0;
        json_decref(schema);
        if (!g || !words) {
            fprintf(stderr, "bench_grammar: %s: %s\n", cases[c].name, g ? "out of memory" : why);
            return 1;
        }
        times cold = { 0 }, warm = { 0 }, repeat = { 0 };
        for (int d = 0; d < 4 && cases[c].docs[d]; d++)
            if (!write_doc(g, tok, cases[c].docs[d], words, n_words, d ? &warm : &cold)) {
                fprintf(stderr, "bench_grammar: %s refuses document %d\n", cases[c].name, d);
                return 1;
            }
        for (int d = 0; d < 4 && cases[c].docs[d]; d++)
            write_doc(g, tok, cases[c].docs[d], words, n_words, &repeat);
        tc__grammar_mask_stats st;
        tc__grammar_mask_stats_get(g, &st);
        printf("%s (grammar compiled in %.2f ms; %llu new states: %llu walks from new tops, %llu "
               "tops found, %llu full walks, %.0f unsure tokens a state)\n",
               cases[c].name, compile, (unsigned long long)st.states,
               (unsigned long long)st.tops_walks, (unsigned long long)st.tops_hits,
               (unsigned long long)st.whole_walks,
               st.states ? (double)st.unsure_tokens / (double)st.states : 0.0);
        report("  cold (first document)", &cold);
        report("  warm (other documents)", &warm);
        report("  repeat (same documents again)", &repeat);
        for (size_t i = 0; i < cold.n; i++)
            add(&all_cold, cold.v[i]);
        for (size_t i = 0; i < warm.n; i++)
            add(&all_warm, warm.v[i]);
        for (size_t i = 0; i < repeat.n; i++)
            add(&all_repeat, repeat.v[i]);
        free(cold.v);
        free(warm.v);
        free(repeat.v);
        tc_grammar_unref(g);
    }
    printf("all schemas\n");
    report("  cold (first document)", &all_cold);
    report("  warm (other documents)", &all_warm);
    report("  repeat (same documents again)", &all_repeat);
    free(all_cold.v);
    free(all_warm.v);
    free(all_repeat.v);
    free(words);
    tc_tokenizer_destroy(tok);
    tc_gguf_close(&gguf);
    return 0;
}
