/* Prometheus metrics: latency histograms and the /metrics route. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "server/internal.h"

static const double ttft_buckets[] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                       1,     2.5,  5,     10,   30,  60 };
static const double itl_buckets[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                      0.1,   0.25,   0.5,   1,    2.5 };
enum { N_TTFT = sizeof ttft_buckets / sizeof ttft_buckets[0] };
enum { N_ITL = sizeof itl_buckets / sizeof itl_buckets[0] };

static void observe(histogram *h, const double *bounds, int nb, double v)
{
    int i = 0;
    while (i < nb && v > bounds[i])
        i++;
    h->counts[i]++;
    h->n++;
    h->sum += v;
}

void tc__observe_ttft(metrics *m, double seconds)
{
    observe(&m->ttft, ttft_buckets, N_TTFT, seconds);
}

void tc__observe_itl(metrics *m, double seconds)
{
    observe(&m->itl, itl_buckets, N_ITL, seconds);
}

static void append(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(*buf ? *buf + *len : NULL, *buf ? *cap - *len : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if (*buf && *len + (size_t)n < *cap) {
            *len += (size_t)n;
            return;
        }
        size_t cap2 = (*cap + (size_t)n + 1) * 2;
        char *b = realloc(*buf, cap2);
        if (!b)
            return;
        *buf = b;
        *cap = cap2;
    }
}

static void histogram_text(char **b, size_t *len, size_t *cap, const char *name, const char *help,
                           const histogram *h, const double *bounds, int nb)
{
    append(b, len, cap, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < nb; i++) {
        cum += h->counts[i];
        append(b, len, cap, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i],
               (unsigned long long)cum);
    }
    append(b, len, cap, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
           (unsigned long long)h->n, name, h->sum, name, (unsigned long long)h->n);
}

enum MHD_Result tc__handle_metrics(tc_server *s, struct MHD_Connection *c)
{
    tc_engine_stats es = { 0 };
    if (s->m.engine)
        tc_engine_get_stats(s->m.engine, &es);
    pthread_mutex_lock(&s->mu);
    metrics m = s->met;
    int jobs = s->n_jobs;
    bool ready = s->ready;
    pthread_mutex_unlock(&s->mu);
    char *b = NULL;
    size_t len = 0, cap = 0;
    append(&b, &len, &cap,
           "# HELP thincuda_requests_total HTTP requests answered, by route and status.\n"
           "# TYPE thincuda_requests_total counter\n");
    for (int i = 0; i < m.n_rows; i++)
        append(&b, &len, &cap, "thincuda_requests_total{route=\"%s\",code=\"%d\"} %llu\n",
               m.by_status[i].route, m.by_status[i].code, (unsigned long long)m.by_status[i].n);
#define COUNTER(name, help, v)                                                                   \
    append(&b, &len, &cap, "# HELP " name " " help "\n# TYPE " name " counter\n" name " %llu\n", \
           (unsigned long long)(v))
#define GAUGE(name, help, fmt, v) \
    append(&b, &len, &cap, "# HELP " name " " help "\n# TYPE " name " gauge\n" name " " fmt "\n", v)
    COUNTER("thincuda_prompt_tokens_total", "Prompt tokens of accepted requests.", m.prompt_tokens);
    COUNTER("thincuda_generation_tokens_total", "Tokens generated.", m.generation_tokens);
    COUNTER("thincuda_prefix_cache_hit_tokens_total",
            "Prompt tokens found in the prefix cache instead of computed.",
            es.cached_prompt_tokens);
    COUNTER("thincuda_prefix_cache_queries_total", "KV blocks looked up in the prefix cache.",
            es.prefix_lookups);
    COUNTER("thincuda_prefix_cache_hits_total", "KV blocks found in the prefix cache.",
            es.prefix_hits);
    COUNTER("thincuda_preemptions_total", "Sequences preempted for want of KV blocks.",
            es.preemptions);
    COUNTER("thincuda_engine_steps_total", "Engine steps (forward passes).", es.steps);
    COUNTER("thincuda_client_disconnects_total", "Requests cancelled because the client went away.",
            m.disconnects);
    uint64_t grammar_hits, grammar_misses;
    tc__grammars_counts(s->grammars, &grammar_hits, &grammar_misses);
    COUNTER("thincuda_grammar_cache_hits_total",
            "Requests whose response format or tools found their grammar compiled.", grammar_hits);
    COUNTER("thincuda_grammar_cache_misses_total",
            "Requests whose response format or tools had their grammar compiled.", grammar_misses);
    COUNTER("thincuda_request_deadline_closes_total",
            "Connections closed because a request had not arrived by its deadline.",
            s->watch ? tc__watch_expired(s->watch) : 0);
    GAUGE("thincuda_ready", "1 once the model is loaded.", "%d", ready ? 1 : 0);
    GAUGE("thincuda_requests_in_flight", "Requests with an engine sequence.", "%d", jobs);
    GAUGE("thincuda_queue_length", "Sequences waiting to start.", "%d", es.waiting);
    GAUGE("thincuda_running_sequences", "Sequences running.", "%d", es.running);
    GAUGE("thincuda_kv_cache_blocks_total", "KV-cache blocks.", "%d", es.blocks_total);
    GAUGE("thincuda_kv_cache_blocks_used", "KV-cache blocks held by sequences.", "%d",
          es.blocks_used);
    GAUGE("thincuda_kv_cache_usage_ratio", "Fraction of the KV cache held by sequences.", "%.6f",
          es.blocks_total ? (double)es.blocks_used / es.blocks_total : 0.0);
#undef COUNTER
#undef GAUGE
    histogram_text(&b, &len, &cap, "thincuda_time_to_first_token_seconds",
                   "From a request's arrival to its first token.", &m.ttft, ttft_buckets, N_TTFT);
    histogram_text(&b, &len, &cap, "thincuda_inter_token_latency_seconds",
                   "Between consecutive tokens of one choice.", &m.itl, itl_buckets, N_ITL);
    tc__count_status(s, "/metrics", b ? 200 : 500);
    enum MHD_Result r =
        b ? tc__send_body(s, c, 200, "text/plain; version=0.0.4", b, len, NULL) : MHD_NO;
    free(b);
    return r;
}
