/* `thincuda bench`: the engine's speed on a model file or a named shape with random weights.
 *
 * Latency mode (default): --batch sequences of --prompt-len random tokens, each generating
 * --gen-len tokens, submitted together. Throughput mode (--requests R): R requests with prompt
 * and output lengths drawn from [len/2, 3 len/2], all queued at once. Both report prefill and
 * decode rates, time to first token and inter-token latency percentiles, and peak device
 * memory; batch-1 decode also reports the fraction of the bandwidth bound. With a grammar
 * (--json-object, --json-schema FILE) the measured run is repeated under it, each request with
 * its own grammar compiled as the server compiles one, and the decode rates compared. */
#define _GNU_SOURCE
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "inference/engine.h"
#include "inference/tp_engine.h"
#include "model/hf.h"
#include "model/llama.h"
#include "runtime/runtime.h"
#include "server/schema.h"

/* The bandwidth the bound is computed with: GPU.md's measured H100 figure, or --bandwidth. */
static const double default_bandwidth = 3.0e12;

typedef struct bench_opts {
    const char *model, *shape, *device, *dtype;
    const char *json_schema; /* a schema file to constrain a second run with */
    bool json_object;        /* ... or any JSON object */
    const char *tokenizer;   /* the grammar's token texts for a --shape run */
    long batch, prompt_len, gen_len, requests, threads, ctx, step_tokens, kv_tokens, seed;
    double kv_fraction, bandwidth;
    bool no_graphs, no_prefix_cache, kv_fp8;
    bool profile;        /* print the kernel profile of the measured steps */
    int tensor_parallel; /* GPUs; 1: one backend, no NCCL (see tc_cli_tp_wanted) */
} bench_opts;

typedef struct req_times {
    double submit, first, last, done;
    int64_t n_out, want;
    double *itl; /* [want] gaps between tokens */
    int64_t n_itl;
    tc_finish_reason finish;
} req_times;

typedef struct run_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t remaining;
    req_times *t;
    const tc_tokenizer *tok; /* constrained runs: counts control tokens */
    int64_t n_control;       /* tokens generated after a document ended (control tokens) */
} run_state;

/* Prompts of real text, for runs with a grammar: random tokens make a model close its
 * document at once, after which every step is the same cached state. */
typedef struct text_prompt {
    const int32_t *ids;
    int64_t n;
} text_prompt;

static const char json_request[] =
    "Write a long JSON object that describes a public library: its name, address, opening "
    "hours for each day, its staff, and a list of twenty books, each with title, author, year, "
    "ISBN, genres and a two-sentence summary.\n";

static int fail(const char *what)
{
    fprintf(stderr, "thincuda bench: %s: %s\n", what, tc_last_error());
    return 1;
}

typedef struct cb_ctx {
    run_state *rs;
    req_times *t;
} cb_ctx;

static void on_token(void *user, const tc_engine_event *ev)
{
    cb_ctx *c = user;
    req_times *t = c->t;
    double n = tc_host_seconds();
    if (ev->token >= 0) {
        if (t->n_out == 0)
            t->first = n;
        else if (t->n_itl < t->want)
            t->itl[t->n_itl++] = n - t->last;
        t->last = n;
        t->n_out++;
        if (c->rs->tok && tc_tokenizer_is_control(c->rs->tok, ev->token))
            c->rs->n_control++;
    }
    if (ev->finish != TC_FINISH_NONE) {
        t->done = n;
        t->finish = ev->finish;
        pthread_mutex_lock(&c->rs->mu);
        c->rs->remaining--;
        pthread_cond_signal(&c->rs->cv);
        pthread_mutex_unlock(&c->rs->mu);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, int64_t n, double p)
{
    if (n == 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int64_t i = (int64_t)(p * (double)(n - 1) + 0.5);
    return v[i];
}

static uint64_t rng;
static uint32_t rnd(uint32_t n)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33) % n;
}

/* Submit n requests (prompt and output lengths from plen/glen, exact or varied; prompts of
 * random tokens, or of the text repeated to the length and ending with it whole where it fits;
 * request i constrained by grammars[i] when grammars is not NULL, with tok counting the
 * control tokens into *n_control), wait for all and fill t. Returns the wall time. */
static double run_requests(tc_engine *e, int32_t vocab, int64_t n, const int64_t *plen,
                           const int64_t *glen, req_times *t, const text_prompt *text,
                           tc_grammar *const *grammars, const tc_tokenizer *tok, int64_t *n_control,
                           int *rc)
{
    run_state rs = { 0 };
    pthread_mutex_init(&rs.mu, NULL);
    pthread_cond_init(&rs.cv, NULL);
    rs.remaining = n;
    rs.t = t;
    rs.tok = grammars ? tok : NULL;
    cb_ctx *ctx = calloc((size_t)n, sizeof *ctx);
    int64_t max_p = 0;
    for (int64_t i = 0; i < n; i++)
        max_p = plen[i] > max_p ? plen[i] : max_p;
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)(max_p + 1));
    if (!ctx || !prompt) {
        free(ctx);
        free(prompt);
        *rc = 1;
        return 0;
    }
    double t0 = tc_host_seconds();
    for (int64_t i = 0; i < n; i++) {
        for (int64_t j = 0; j < plen[i]; j++)
            prompt[j] = text && text->n ? text->ids[(text->n - 1) - (plen[i] - 1 - j) % text->n]
                                        : (int32_t)(1 + rnd((uint32_t)vocab - 1));
        ctx[i] = (cb_ctx){ &rs, &t[i] };
        t[i].want = glen[i];
        t[i].itl = malloc(sizeof(double) * (size_t)(glen[i] + 1));
        tc_request q = { 0 };
        q.prompt = prompt;
        q.n_prompt = plen[i];
        q.max_tokens = glen[i];
        q.sample = tc_sample_defaults();
        q.ignore_eos = true;
        q.grammar = grammars ? grammars[i] : NULL;
        q.callback = on_token;
        q.user = &ctx[i];
        t[i].submit = tc_host_seconds();
        if (tc_engine_submit(e, &q, NULL) != TC_OK) {
            *rc = fail("submit");
            pthread_mutex_lock(&rs.mu);
            rs.remaining -= n - i;
            pthread_mutex_unlock(&rs.mu);
            break;
        }
    }
    pthread_mutex_lock(&rs.mu);
    while (rs.remaining > 0)
        pthread_cond_wait(&rs.cv, &rs.mu);
    pthread_mutex_unlock(&rs.mu);
    double wall = tc_host_seconds() - t0;
    if (n_control)
        *n_control = rs.n_control;
    free(ctx);
    free(prompt);
    return wall;
}

static const char usage[] =
    "usage: thincuda bench (--model PATH | --shape NAME) [options]\n"
    "  --model PATH         a GGUF file or a Hugging Face folder (Llama family)\n"
    "  --shape NAME         random weights of a known shape: smollm2-135m, llama3.2-1b,\n"
    "                       llama2-7b, qwen2.5-1.5b, mistral-7b, llama3.1-70b (nothing to\n"
    "                       download)\n"
    "  --batch N            sequences at once in latency mode (default 1)\n"
    "  --prompt-len P       prompt tokens (default 128)\n"
    "  --gen-len G          tokens to generate (default 128)\n"
    "  --requests R         throughput mode: R requests of varied lengths, all queued at once\n"
    "  --device D           cpu, cuda or auto (default auto)\n"
    "  --dtype T            activations on cuda: bf16 (default), f16 or f32\n"
    "  --kv-cache-dtype D   auto (the activations' dtype) or fp8 (E4M3: half the bytes)\n"
    "  --threads N          CPU threads (default: all cores)\n"
    "  --ctx N              longest sequence (default: prompt + generated, rounded up)\n"
    "  --step-tokens N      tokens per engine step, the prefill chunk (default 2048; 512 on cpu)\n"
    "  --kv-tokens N        KV cache size in tokens (default: from --kv-fraction)\n"
    "  --kv-fraction F      of the GPU's memory the process may fill (default 0.9)\n"
    "  --no-graphs          decode op by op instead of CUDA graphs\n"
    "  --tensor-parallel N  split the model over N GPUs through NCCL (default 1: one GPU)\n"
    "  --profile            time each kernel of the measured steps (events around every\n"
    "                       launch, so graphs are off) and print a table of them\n"
    "  --no-prefix-cache    do not reuse cached prompt blocks\n"
    "  --bandwidth B        bytes/s of the bound (default 3.0e12, H100 measured)\n"
    "  --seed N             random weights and prompts (default 1)\n"
    "  --json-object        run the measured requests twice, free and then constrained to a\n"
    "                       JSON object (response_format json_object: each request compiles\n"
    "                       its grammar, as the server does), and print both decode rates and\n"
    "                       the constrained one's overhead in %; needs --model with a tokenizer\n"
    "  --json-schema FILE   the same, constrained to the JSON schema in FILE (json_schema)\n"
    "  --tokenizer PATH     with --shape and a grammar: the token texts of a GGUF file (one\n"
    "                       with only a vocabulary will do; tokens past it are never allowed)\n"
    "examples: thincuda bench --model SmolLM2-135M-Instruct.Q4_1.gguf --json-object --batch 32\n"
    "          thincuda bench --shape llama3.2-1b --tokenizer "
    "tests/model/data/mistral-v1.vocab.gguf\n"
    "                         --json-object\n";

static bool num(const char *flag, const char *s, double lo, double hi, double *v)
{
    return tc_cli_num("thincuda bench", flag, s, lo, hi, v);
}
static bool whole(const char *flag, const char *s, double lo, double hi, double *v)
{
    return tc_cli_int("thincuda bench", flag, s, lo, hi, v);
}

static int parse(int argc, char **argv, bench_opts *o)
{
    *o = (bench_opts){ .device = "auto",
                       .batch = 1,
                       .prompt_len = 128,
                       .gen_len = 128,
                       .seed = 1,
                       .kv_fraction = 0.9,
                       .tensor_parallel = 1,
                       .bandwidth = default_bandwidth };
    enum {
        MODEL = 256,
        SHAPE,
        BATCH,
        PLEN,
        GLEN,
        REQS,
        DEVICE,
        DTYPE,
        KVDT,
        THREADS,
        CTX,
        STEP,
        KVT,
        KVF,
        NOGRAPH,
        PROFILE,
        NOPREFIX,
        BW,
        SEED,
        JOBJ,
        JSCHEMA,
        TOKENIZER,
        TP,
        HELP
    };
    static const struct option longs[] = { { "model", required_argument, 0, MODEL },
                                           { "shape", required_argument, 0, SHAPE },
                                           { "batch", required_argument, 0, BATCH },
                                           { "prompt-len", required_argument, 0, PLEN },
                                           { "gen-len", required_argument, 0, GLEN },
                                           { "requests", required_argument, 0, REQS },
                                           { "device", required_argument, 0, DEVICE },
                                           { "dtype", required_argument, 0, DTYPE },
                                           { "kv-cache-dtype", required_argument, 0, KVDT },
                                           { "threads", required_argument, 0, THREADS },
                                           { "ctx", required_argument, 0, CTX },
                                           { "step-tokens", required_argument, 0, STEP },
                                           { "kv-tokens", required_argument, 0, KVT },
                                           { "kv-fraction", required_argument, 0, KVF },
                                           { "no-graphs", no_argument, 0, NOGRAPH },
                                           { "profile", no_argument, 0, PROFILE },
                                           { "no-prefix-cache", no_argument, 0, NOPREFIX },
                                           { "bandwidth", required_argument, 0, BW },
                                           { "seed", required_argument, 0, SEED },
                                           { "json-object", no_argument, 0, JOBJ },
                                           { "json-schema", required_argument, 0, JSCHEMA },
                                           { "tokenizer", required_argument, 0, TOKENIZER },
                                           { "tensor-parallel", required_argument, 0, TP },
                                           { "help", no_argument, 0, HELP },
                                           { 0, 0, 0, 0 } };
    opterr = 0;
    optind = 1;
    int c;
    double v;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case MODEL: o->model = optarg; break;
        case SHAPE: o->shape = optarg; break;
        case DEVICE:
            if (!tc_cli_device("thincuda bench", optarg))
                return 2;
            o->device = optarg;
            break;
        case DTYPE:
            if (!tc_cli_dtype("thincuda bench", optarg))
                return 2;
            o->dtype = optarg;
            break;
        case KVDT:
            if (!tc_cli_kv_dtype("thincuda bench", optarg, &o->kv_fp8))
                return 2;
            break;
        case NOGRAPH: o->no_graphs = true; break;
        case PROFILE: o->profile = true; break;
        case NOPREFIX: o->no_prefix_cache = true; break;
        case JOBJ: o->json_object = true; break;
        case JSCHEMA: o->json_schema = optarg; break;
        case TOKENIZER: o->tokenizer = optarg; break;
        case TP:
            if (!tc_cli_tensor_parallel("thincuda bench", optarg, &o->tensor_parallel))
                return 2;
            break;
        case HELP: fputs(usage, stdout); return 0;
#define NUM(K, flag, field, lo, hi)           \
    case K:                                   \
        if (!whole(flag, optarg, lo, hi, &v)) \
            return 2;                         \
        o->field = (long)v;                   \
        break;
            NUM(BATCH, "--batch", batch, 1, 4096)
            NUM(PLEN, "--prompt-len", prompt_len, 1, 1 << 20)
            NUM(GLEN, "--gen-len", gen_len, 1, 1 << 20)
            NUM(REQS, "--requests", requests, 1, 1 << 20)
            NUM(THREADS, "--threads", threads, 0, 1024)
            NUM(CTX, "--ctx", ctx, 16, 1 << 20)
            NUM(STEP, "--step-tokens", step_tokens, 1, 1 << 20)
            NUM(KVT, "--kv-tokens", kv_tokens, 16, 1L << 40)
            NUM(SEED, "--seed", seed, 0, 1e15)
#undef NUM
        case KVF:
            if (!num("--kv-fraction", optarg, 0.01, 1.0, &o->kv_fraction))
                return 2;
            break;
        case BW:
            if (!num("--bandwidth", optarg, 1e6, 1e15, &o->bandwidth))
                return 2;
            break;
        default:
            fprintf(stderr, "thincuda bench: unknown or incomplete option '%s'\n%s",
                    argv[optind - 1], usage);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "thincuda bench: unexpected argument '%s'\n%s", argv[optind], usage);
        return 2;
    }
    if (!o->model == !o->shape) {
        fprintf(stderr, "thincuda bench: give one of --model PATH or --shape NAME\n%s", usage);
        return 2;
    }
    if (o->json_object && o->json_schema) {
        fprintf(stderr, "thincuda bench: give one of --json-object or --json-schema\n");
        return 2;
    }
    if ((o->json_object || o->json_schema) && !o->model && !o->tokenizer) {
        fprintf(stderr, "thincuda bench: a grammar needs the token texts: give --model PATH (a "
                        "GGUF file or a folder with a tokenizer), or --tokenizer PATH with "
                        "--shape\n");
        return 2;
    }
    if (o->tokenizer && (o->model || !(o->json_object || o->json_schema))) {
        fprintf(stderr, "thincuda bench: --tokenizer goes with --shape and a grammar "
                        "(--json-object or --json-schema)\n");
        return 2;
    }
    return -1;
}

/* Decode tokens/s of a measured run: in latency mode the tokens after each request's first
 * over the time from the last first token to the end; in throughput mode every output token
 * over the wall time. */
static double decode_rate(const req_times *t, int64_t n, bool throughput, double wall)
{
    int64_t out = 0;
    double last_first = 0, end = 0;
    for (int64_t i = 0; i < n; i++) {
        out += t[i].n_out;
        last_first = t[i].first > last_first ? t[i].first : last_first;
        end = t[i].done > end ? t[i].done : end;
    }
    if (throughput)
        return wall > 0 ? (double)out / wall : 0.0;
    return end > last_first ? (double)(out - n) / (end - last_first) : 0.0;
}

/* Milliseconds a decode-only step took on average between two snapshots of the stats. */
static double decode_step_ms(const tc_engine_stats *a, const tc_engine_stats *b)
{
    uint64_t steps = (b->steps - a->steps) - (b->prefill_steps - a->prefill_steps);
    return steps ? (b->decode_step_seconds - a->decode_step_seconds) * 1e3 / (double)steps : 0.0;
}

/* The measured requests again, each under its own grammar from `schema` (NULL: any JSON
 * object) compiled before the clock starts, as the server compiles one per request; prints
 * both decode rates and the overhead. */
static void compare_constrained(tc_engine *e, const tc_cli_model *f, int32_t vocab, json_t *schema,
                                const char *what, const text_prompt *text, int64_t n,
                                const int64_t *plen, const int64_t *glen, req_times *t,
                                bool throughput, double free_rate, double free_ms, int *rc)
{
    tc_grammar **g = calloc((size_t)n, sizeof *g);
    if (!g) {
        *rc = 1;
        return;
    }
    char why[320] = "";
    double t0 = tc_host_seconds();
    for (int64_t i = 0; i < n; i++)
        if (!(g[i] = tc_schema_grammar(schema, f->tok, why, sizeof why))) {
            fprintf(stderr, "thincuda bench: %s: %s\n", what, why);
            *rc = 1;
            goto out;
        }
    double compile_ms = (tc_host_seconds() - t0) * 1e3 / (double)n;
    for (int64_t i = 0; i < n; i++) {
        free(t[i].itl);
        t[i] = (req_times){ 0 };
    }
    tc_engine_stats s0, s1;
    tc_engine_get_stats(e, &s0);
    int64_t n_control = 0;
    double wall = run_requests(e, vocab, n, plen, glen, t, text, g, f->tok, &n_control, rc);
    tc_engine_get_stats(e, &s1);
    double rate = decode_rate(t, n, throughput, wall), ms = decode_step_ms(&s0, &s1);
    int64_t out = 0, errors = 0;
    for (int64_t i = 0; i < n; i++) {
        out += t[i].n_out;
        errors += t[i].finish == TC_FINISH_ERROR;
    }
    printf("\ngrammar          %s: compiled in %.1f ms a request (not timed below)\n", what,
           compile_ms);
    printf("decode free      %.1f tokens/s (%.3f ms a decode-only step)\n", free_rate, free_ms);
    printf("decode grammar   %.1f tokens/s (%.3f ms a decode-only step)\n", rate, ms);
    printf("overhead         %.1f%% more time a token under the grammar\n",
           rate > 0 ? (free_rate / rate - 1.0) * 100.0 : 0.0);
    printf("documents        %lld of %lld tokens were control tokens after a document ended"
           "%s\n",
           (long long)n_control, (long long)out, errors ? "; some requests ended in an error" : "");
out:
    for (int64_t i = 0; i < n; i++)
        tc_grammar_unref(g[i]);
    free(g);
}

/* The measured steps' kernel table on stdout; emptied, so that nothing prints again at exit. */
static void print_profile(bool cuda)
{
    size_t need = tc_profile_format(NULL, 0);
    char *table = need ? malloc(need + 1) : NULL;
    if (table) {
        tc_profile_format(table, need + 1);
        printf("\n%s(CUDA graphs were off; cuBLAS's kernels are not in the table)\n", table);
    } else {
        printf("\nprofile          no kernel of ours ran%s\n", cuda ? "" : " (CPU backend)");
    }
    free(table);
    tc_profile_reset();
}

int tc_cli_bench(int argc, char **argv)
{
    bench_opts o;
    int rc = parse(argc, argv, &o);
    if (rc >= 0)
        return rc;
    rc = 0;
    double t_start = tc_host_seconds(), t_first_token = 0;
    /* Before the model loads: it leaves its decode graphs off while profiling. */
    if (o.profile)
        tc_profile_enable(true);
    bool constrained = o.json_object || o.json_schema;
    json_t *schema = NULL;
    if (o.json_schema) {
        json_error_t jerr;
        schema = json_load_file(o.json_schema, 0, &jerr);
        if (!schema) {
            fprintf(stderr, "thincuda bench: --json-schema %s: line %d: %s\n", o.json_schema,
                    jerr.line, jerr.text);
            return 2;
        }
    }
    tc_llama_config cfg;
    tc_cli_model f = { 0 };
    if (o.shape) {
        if (tc_llama_config_preset(o.shape, &cfg) != TC_OK) {
            fprintf(stderr, "thincuda bench: %s\n", tc_last_error());
            json_decref(schema);
            return 2;
        }
        if (o.tokenizer && !tc_cli_model_open(&f, o.tokenizer, false, true, 1, "thincuda bench")) {
            tc_cli_model_close(&f);
            json_decref(schema);
            return 1;
        }
    } else {
        if (!tc_cli_model_open(&f, o.model, true, constrained, o.tensor_parallel,
                               "thincuda bench")) {
            tc_cli_model_close(&f);
            json_decref(schema);
            return 1;
        }
        cfg = f.cfg;
    }
    if (constrained) {
        /* The schema is checked before the weights load. */
        char why[320] = "";
        tc_grammar *g = tc_schema_grammar(schema, f.tok, why, sizeof why);
        if (!g) {
            fprintf(stderr, "thincuda bench: %s: %s\n",
                    o.json_schema ? o.json_schema : "--json-object", why);
            tc_cli_model_close(&f);
            json_decref(schema);
            return 2;
        }
        tc_grammar_unref(g);
    }
    /* With a grammar, both runs' prompts are a request for a long JSON document. */
    text_prompt text = { 0 };
    int32_t *text_ids = NULL;
    size_t n_text = 0;
    if (constrained && tc_tokenizer_encode(f.tok, json_request, sizeof json_request - 1, false,
                                           false, &text_ids, &n_text) == TC_OK) {
        text.ids = text_ids;
        text.n = (int64_t)n_text;
    }
    const tc_gguf *src = f.src;
    tc_backend *b = tc_cli_backend_create("thincuda bench", o.device, (int)o.threads);
    if (!b) {
        tc_cli_model_close(&f);
        json_decref(schema);
        tc_host_free(text_ids);
        return 1;
    }
    tc_status st;
    bool cuda = tc_backend_get_kind(b) == TC_BACKEND_CUDA;
    bool throughput = o.requests > 0;
    int64_t max_p = throughput ? o.prompt_len * 3 / 2 : o.prompt_len,
            max_g = throughput ? o.gen_len * 3 / 2 : o.gen_len;
    int64_t ctx = o.ctx ? o.ctx : (max_p + max_g + 15) / 16 * 16;
    int64_t seqs = throughput ? (o.requests < 256 ? o.requests : 256) : o.batch;
    tc_llama_options lo = { 0 };
    lo.max_context = ctx;
    lo.max_seqs = seqs;
    lo.max_tokens = o.step_tokens ? o.step_tokens : cuda ? 2048 : 512;
    if (lo.max_tokens < seqs)
        lo.max_tokens = seqs;
    lo.no_graphs = o.no_graphs;
    lo.kv_fp8 = o.kv_fp8;
    if (o.dtype) {
        lo.act_set = true;
        lo.act = !strcmp(o.dtype, "f32")   ? TC_DTYPE_F32
                 : !strcmp(o.dtype, "f16") ? TC_DTYPE_F16
                                           : TC_DTYPE_BF16;
    }
    tc_llama *m = NULL; /* the model, or rank 0's shard */
    tc_cli_tp tp = { 0 };
    tc_kv_cache kv = { 0 };
    char kv_line[256];
    double t_load = tc_host_seconds();
    if (tc_cli_tp_wanted(o.tensor_parallel)) {
        if (!tc_cli_tp_open(&tp, "thincuda bench", o.tensor_parallel, b, o.shape ? NULL : src, &cfg,
                            (uint64_t)o.seed, &lo)) {
            rc = 1;
            goto out;
        }
        m = tp.tp->rank[0].m;
        st = TC_OK;
        for (int r = 0; r < tp.n && st == TC_OK; r++)
            st = tc_backend_synchronize(tp.backends[r]);
    } else {
        st = o.shape ? tc_llama_random(&cfg, (uint64_t)o.seed, b, &lo, &m)
                     : tc_llama_load(src, &cfg, b, &lo, &m);
        if (st == TC_OK)
            st = tc_backend_synchronize(b);
    }
    if (st != TC_OK) {
        rc = fail("cannot load the model");
        goto out;
    }
    t_load = tc_host_seconds() - t_load;
    if (tp.tp ? !tc_cli_tp_kv(&tp, "thincuda bench", o.kv_tokens, o.kv_fraction, kv_line,
                              sizeof kv_line)
              : !tc_cli_kv_cache("thincuda bench", m, o.kv_tokens, o.kv_fraction, &kv, kv_line,
                                 sizeof kv_line)) {
        rc = 1;
        goto out;
    }
    fprintf(stderr, "[kv cache: %s]\n", kv_line);
    tc_engine_model em = tp.tp ? tc_engine_model_tp(tp.tp, &tp.kv) : tc_engine_model_llama(m, &kv);
    /* With a grammar both runs detokenise (the engine needs the tokenizer for it), so that
     * only the grammar differs between them. */
    tc_engine_options eo = { .threaded = true,
                             .max_queue = (int32_t)(throughput ? o.requests + 64 : 1024),
                             .no_prefix_cache = o.no_prefix_cache,
                             .tok = constrained ? f.tok : NULL };
    tc_engine *e;
    if (tc_engine_create(&em, &eo, &e) != TC_OK) {
        rc = fail("cannot start the engine");
        goto out;
    }
    rng = (uint64_t)o.seed * 0x9e3779b97f4a7c15ull + 7;
    int64_t n = throughput ? o.requests : o.batch;
    int64_t *plen = calloc((size_t)n, sizeof *plen), *glen = calloc((size_t)n, sizeof *glen);
    req_times *t = calloc((size_t)n, sizeof *t);
    double *all = NULL;
    if (!plen || !glen || !t) {
        rc = 1;
        goto done;
    }
    /* Warm-up (not counted): every decode batch size from `seqs` down to 1 (one request
     * finishing per step captures each graph bucket), and prefill at the measured length. */
    {
        int64_t wn = seqs, *wp = calloc((size_t)wn, sizeof *wp),
                *wg = calloc((size_t)wn, sizeof *wg);
        req_times *wt = calloc((size_t)wn, sizeof *wt);
        for (int64_t i = 0; wp && wg && wt && i < wn; i++) {
            wp[i] = i == 0 ? o.prompt_len : 4;
            wg[i] = 2 + i < max_g ? 2 + i : max_g;
        }
        if (wp && wg && wt)
            run_requests(e, cfg.vocab, wn, wp, wg, wt, &text, NULL, NULL, NULL, &rc);
        /* Start to first token as `generate` would see it (the weights loaded, the prompt
         * prefilled): the warm-up's first request, nothing run before it (exact at batch 1;
         * with more sequences the warm-up's short prompts may share its step). */
        if (wt && wt[0].n_out > 0)
            t_first_token = wt[0].first - t_start;
        for (int64_t i = 0; wt && i < wn; i++)
            free(wt[i].itl);
        free(wp);
        free(wg);
        free(wt);
    }
    for (int64_t i = 0; i < n; i++) {
        plen[i] = throughput ? o.prompt_len / 2 + rnd((uint32_t)o.prompt_len + 1) : o.prompt_len;
        glen[i] = throughput ? o.gen_len / 2 + rnd((uint32_t)o.gen_len + 1) : o.gen_len;
        if (plen[i] < 1)
            plen[i] = 1;
        if (glen[i] < 1)
            glen[i] = 1;
    }
    tc_pool_stats ps0 = { 0 };
    if (cuda)
        tc_pool_get_stats(tc_backend_pool(b), &ps0);
    tc_engine_stats es0;
    tc_engine_get_stats(e, &es0);
    if (tc_profile_enabled())
        tc_profile_reset(); /* the warm-up's launches are not the measured steps' */
    double wall = run_requests(e, cfg.vocab, n, plen, glen, t, &text, NULL, NULL, NULL, &rc);
    /* Figures. */
    int64_t total_out = 0, total_prompt = 0, n_itl = 0;
    double last_first = 0, first_submit = t[0].submit, end = 0;
    for (int64_t i = 0; i < n; i++) {
        total_out += t[i].n_out;
        total_prompt += plen[i];
        n_itl += t[i].n_itl;
        last_first = t[i].first > last_first ? t[i].first : last_first;
        end = t[i].done > end ? t[i].done : end;
    }
    double *ttft = malloc(sizeof(double) * (size_t)n);
    all = malloc(sizeof(double) * (size_t)(n_itl + 1));
    if (!ttft || !all) {
        fprintf(stderr, "thincuda bench: no host memory for the figures\n");
        free(ttft);
        rc = 1;
        goto done;
    }
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        ttft[i] = (t[i].first - t[i].submit) * 1e3;
        for (int64_t j = 0; j < t[i].n_itl; j++)
            all[k++] = t[i].itl[j] * 1e3;
    }
    tc_engine_stats es;
    tc_engine_get_stats(e, &es);
    tc_pool_stats ps = { 0 };
    if (cuda)
        tc_pool_get_stats(tc_backend_pool(b), &ps);
    printf("model            %s, %s %s, %.2f GiB of weights (loaded in %.2f s)\n", cfg.name,
           tc_backend_name(b), tc_dtype_name(m->act), (double)m->weight_bytes / (1 << 30), t_load);
    if (tp.tp)
        printf("tensor parallel  %d GPUs over NCCL; the figures below are rank 0's (its shard "
               "and device)\n",
               tp.n);
    /* Bytes a forward pass reads: every weight once (the embedding only its rows), and per
     * token of context its keys and values in every layer. */
    double emb = (double)tc_tensor_bytes(&m->tok_embd), kv_tok = (double)tc_kv_cache_bytes(m, 1, 1);
    double w_read = (double)m->weight_bytes - (cfg.tied_embeddings ? 0.0 : emb);
    if (throughput) {
        printf("requests         %lld (prompts %ld..%ld, outputs %ld..%ld tokens), %.2f s\n",
               (long long)n, o.prompt_len / 2, o.prompt_len / 2 + o.prompt_len, o.gen_len / 2,
               o.gen_len / 2 + o.gen_len, wall);
        printf("throughput       %.2f requests/s, %.0f output tokens/s, %.0f tokens/s in all\n",
               (double)n / wall, (double)total_out / wall,
               (double)(total_out + total_prompt) / wall);
        /* A floor under the run's time from what it must read: a request's decode steps read
         * its keys and values at every length from prompt + 1 to prompt + generated - 1, and
         * each engine step reads the weights once. Prefill's arithmetic is left out. */
        double kv_read = 0.0;
        for (int64_t i = 0; i < n; i++) {
            double p = (double)plen[i], g = (double)t[i].n_out;
            if (g > 1)
                kv_read += ((g - 1) * p + g * (g - 1) / 2) * kv_tok;
        }
        double steps = (double)(es.steps - es0.steps),
               floor_s = (kv_read + steps * w_read) / o.bandwidth;
        printf("bandwidth        %.3f GB of keys and values + %.3f GB of weights (%.0f steps) "
               "= %.2f s at %.2f TB/s, %.1f%% of the run; %.0f output tokens/s at most\n",
               kv_read / 1e9, steps * w_read / 1e9, steps, floor_s, o.bandwidth / 1e12,
               100.0 * floor_s / wall, (double)total_out / floor_s);
    } else {
        double pre = last_first - first_submit, dec = end - last_first;
        int64_t dec_tokens = total_out - n;
        printf("batch            %lld x (%ld prompt + %ld generated tokens)\n", (long long)n,
               o.prompt_len, o.gen_len);
        printf("prefill          %.0f tokens/s (%lld tokens in %.2f ms)\n",
               (double)total_prompt / pre, (long long)total_prompt, pre * 1e3);
        printf("decode           %.1f tokens/s (%.1f per sequence)\n",
               dec > 0 ? (double)dec_tokens / dec : 0.0,
               dec > 0 ? (double)dec_tokens / dec / (double)n : 0.0);
        if (n == 1 && dec > 0) {
            /* One decode step reads the weights and the keys and values of the average
             * context. */
            double avg_ctx = (double)o.prompt_len + (double)o.gen_len / 2;
            double per_tok = w_read + kv_tok * avg_ctx, rate = (double)dec_tokens / dec;
            printf("bandwidth        %.0f GB/s = %.1f%% of the bound (%.1f MB read per token; "
                   "bound %.0f tokens/s at %.2f TB/s)\n",
                   per_tok * rate / 1e9, 100.0 * per_tok * rate / o.bandwidth, per_tok / 1e6,
                   o.bandwidth / per_tok, o.bandwidth / 1e12);
        }
    }
    printf("time to first    p50 %.2f ms, p99 %.2f ms\n", pct(ttft, n, 0.5), pct(ttft, n, 0.99));
    printf("inter-token      p50 %.3f ms, p99 %.3f ms\n", pct(all, k, 0.5), pct(all, k, 0.99));
    if (cuda)
        printf("device memory    peak %.2f GiB in our pool (weights, KV cache, activations)\n",
               (double)ps.peak_bytes_reserved / (1 << 30));
    printf("engine           %llu steps, %llu preemptions, %lld graph captures, %lld graph "
           "launches\n",
           (unsigned long long)es.steps, (unsigned long long)es.preemptions,
           (long long)m->s.graph_captures, (long long)m->s.graph_launches);
    {
        uint64_t all_steps = es.steps - es0.steps, pre = es.prefill_steps - es0.prefill_steps;
        double pre_s = es.prefill_step_seconds - es0.prefill_step_seconds,
               dec_s = es.decode_step_seconds - es0.decode_step_seconds;
        printf("steps            %llu measured: %llu with prefill rows (%.3f s), %llu decode "
               "only (%.3f s, %.3f ms each)\n",
               (unsigned long long)all_steps, (unsigned long long)pre, pre_s,
               (unsigned long long)(all_steps - pre), dec_s,
               all_steps > pre ? dec_s * 1e3 / (double)(all_steps - pre) : 0.0);
    }
    if (tp.tp) {
        /* The collectives' share of a decode step: one sum of the batch's rows after the
         * embedding and two a layer. */
        int64_t ar_rows = n < m->s.max_tokens ? n : m->s.max_tokens;
        double ar = 0;
        if (tc_tp_time_all_reduce(tp.tp, ar_rows, 200, &ar) == TC_OK) {
            int calls = 2 * cfg.n_layers + 1;
            printf("all-reduce       %.1f us each over [%lld, %d] %s, %d a decode step: %.3f ms\n",
                   ar * 1e6, (long long)ar_rows, cfg.dim, tc_dtype_name(m->act), calls,
                   ar * calls * 1e3);
        } else {
            fprintf(stderr, "thincuda bench: timing the all-reduce: %s\n", tc_last_error());
            rc = 1;
        }
    }
    if (constrained && rc == 0)
        compare_constrained(e, &f, cfg.vocab, schema,
                            o.json_schema ? o.json_schema : "any JSON object", &text, n, plen, glen,
                            t, throughput, decode_rate(t, n, throughput, wall),
                            decode_step_ms(&es0, &es), &rc);
    if (t_first_token > 0)
        printf("first token      %.3f s from start (load, then the first %lld-token prompt)\n",
               t_first_token, (long long)o.prompt_len);
    printf("process          %.2f s from start\n", tc_host_seconds() - t_start);
    if (o.profile)
        print_profile(cuda);
    (void)ps0;
    free(ttft);
done:
    for (int64_t i = 0; t && i < n; i++)
        free(t[i].itl);
    free(t);
    free(plen);
    free(glen);
    free(all);
    tc_engine_destroy(e);
out:
    if (!tp.tp) {
        tc_kv_cache_deinit(&kv);
        tc_llama_destroy(m);
    }
    tc_cli_tp_close(&tp);
    tc_backend_destroy(b);
    tc_cli_model_close(&f);
    json_decref(schema);
    tc_host_free(text_ids);
    return rc;
}
