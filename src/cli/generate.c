/* `thincuda generate`, `chat` and `info`: a model file, one sequence at a time through the
 * engine (stepped on this thread), streamed text. Each chat turn re-renders the conversation
 * and the engine's prefix cache finds the turns before it. */
#define _GNU_SOURCE
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "inference/engine.h"
#include "inference/tp_engine.h"
#include "model/chat.h"
#include "model/hf.h"
#include "model/llama.h"
#include "model/tokenizer.h"
#include "runtime/log.h"
#include "runtime/runtime.h"

typedef struct options {
    const char *model, *prompt, *device, *dtype, *template_name, *system;
    long n_predict, threads, ctx;
    int tensor_parallel; /* ranks (GPUs); 1: one backend, no NCCL (see tc_cli_tp_wanted) */
    tc_sample_params sp;
    bool chat_prompt, seed_set, show_special, kv_fp8;
    bool temperature_set, n_predict_set; /* given on the command line (chat's defaults differ) */
} options;

typedef struct session {
    options o;
    tc_cli_model f;
    tc_backend *b;
    tc_llama *m;  /* the model on one backend, or rank 0's shard of tp's */
    tc_cli_tp tp; /* --tensor-parallel: the ranks (tp.tp NULL otherwise) */
    tc_kv_cache kv;
    bool kv_made;
    int64_t ctx;
    int32_t *stops; /* EOS and the other control tokens but BOS */
    tc_engine *e;
    double t_start;
    /* The GPU backend is created on a second thread while the files and tokenizer load. */
    pthread_t gpu_thread;
    bool gpu_started;
    tc_status gpu_status;
    char gpu_error[512];
} session;

static int fail(const char *what)
{
    fprintf(stderr, "thincuda: %s: %s\n", what, tc_last_error());
    return 1;
}

static bool num(const char *flag, const char *s, double lo, double hi, double *v)
{
    return tc_cli_num("thincuda", flag, s, lo, hi, v);
}
static bool whole(const char *flag, const char *s, double lo, double hi, double *v)
{
    return tc_cli_int("thincuda", flag, s, lo, hi, v);
}

static const char common_usage[] =
    "  --model PATH         a GGUF file (Llama family)\n"
    "  --device D           cpu, cuda or auto (default: cuda when a GPU answers, else cpu)\n"
    "  --dtype T            activations on cuda: bf16 (default), f16 or f32\n"
    "  --kv-cache-dtype D   auto (the activations' dtype) or fp8 (E4M3: half the bytes)\n"
    "  --threads N          CPU threads (default: all cores)\n"
    "  --ctx N              context length to reserve (default: prompt + tokens to generate)\n"
    "  --tensor-parallel N  split the model over N GPUs through NCCL (default 1: one GPU)\n";
static const char sample_usage[] =
    "  -n, --n-predict N    tokens to generate (default 128)\n"
    "  --temperature T      0 is greedy (generate's default; chat's is 0.7)\n"
    "  --top-k K, --top-p P, --min-p P\n"
    "  --repeat-penalty R, --presence-penalty P, --frequency-penalty F\n"
    "  --seed S             random seed (default: from the clock)\n";

enum {
    OPT_DEVICE = 256,
    OPT_DTYPE,
    OPT_KVDT,
    OPT_THREADS,
    OPT_CTX,
    OPT_TEMP,
    OPT_TOPK,
    OPT_TOPP,
    OPT_MINP,
    OPT_REP,
    OPT_PRES,
    OPT_FREQ,
    OPT_SEED,
    OPT_CHAT,
    OPT_TEMPLATE,
    OPT_SYSTEM,
    OPT_SPECIAL,
    OPT_TP,
};

static const struct option long_opts[] = {
    { "model", required_argument, 0, 'm' },
    { "prompt", required_argument, 0, 'p' },
    { "n-predict", required_argument, 0, 'n' },
    { "device", required_argument, 0, OPT_DEVICE },
    { "dtype", required_argument, 0, OPT_DTYPE },
    { "kv-cache-dtype", required_argument, 0, OPT_KVDT },
    { "threads", required_argument, 0, OPT_THREADS },
    { "ctx", required_argument, 0, OPT_CTX },
    { "temperature", required_argument, 0, OPT_TEMP },
    { "temp", required_argument, 0, OPT_TEMP },
    { "top-k", required_argument, 0, OPT_TOPK },
    { "top-p", required_argument, 0, OPT_TOPP },
    { "min-p", required_argument, 0, OPT_MINP },
    { "repeat-penalty", required_argument, 0, OPT_REP },
    { "presence-penalty", required_argument, 0, OPT_PRES },
    { "frequency-penalty", required_argument, 0, OPT_FREQ },
    { "seed", required_argument, 0, OPT_SEED },
    { "chat", no_argument, 0, OPT_CHAT },
    { "template", required_argument, 0, OPT_TEMPLATE },
    { "system", required_argument, 0, OPT_SYSTEM },
    { "special", no_argument, 0, OPT_SPECIAL },
    { "tensor-parallel", required_argument, 0, OPT_TP },
    { "help", no_argument, 0, 'h' },
    { 0, 0, 0, 0 },
};

/* Parse the flags shared by the subcommands; returns -1 to go on, else an exit code. */
static int parse(int argc, char **argv, options *o, const char *usage)
{
    memset(o, 0, sizeof *o);
    o->device = "auto";
    o->n_predict = 128;
    o->tensor_parallel = 1;
    o->sp = tc_sample_defaults();
    optind = 1;
    opterr = 0;
    int c;
    double v;
    while ((c = getopt_long(argc, argv, ":m:p:n:h", long_opts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'p': o->prompt = optarg; break;
        case 'n':
            if (!whole("--n-predict", optarg, 0, 1 << 20, &v))
                return 2;
            o->n_predict = (long)v;
            o->n_predict_set = true;
            break;
        case OPT_DEVICE:
            if (!tc_cli_device("thincuda", optarg))
                return 2;
            o->device = optarg;
            break;
        case OPT_DTYPE:
            if (!tc_cli_dtype("thincuda", optarg))
                return 2;
            o->dtype = optarg;
            break;
        case OPT_KVDT:
            if (!tc_cli_kv_dtype("thincuda", optarg, &o->kv_fp8))
                return 2;
            break;
        case OPT_THREADS:
            if (!whole("--threads", optarg, 1, 1024, &v))
                return 2;
            o->threads = (long)v;
            break;
        case OPT_CTX:
            if (!whole("--ctx", optarg, 1, 1 << 20, &v))
                return 2;
            o->ctx = (long)v;
            break;
        case OPT_TEMP:
            if (!num("--temperature", optarg, 0, 100, &v))
                return 2;
            o->sp.temperature = (float)v;
            o->temperature_set = true;
            break;
        case OPT_TOPK:
            if (!whole("--top-k", optarg, 0, 1 << 30, &v))
                return 2;
            o->sp.top_k = (int)v;
            break;
        case OPT_TOPP:
            if (!num("--top-p", optarg, 0, 1, &v))
                return 2;
            o->sp.top_p = (float)v;
            break;
        case OPT_MINP:
            if (!num("--min-p", optarg, 0, 1, &v))
                return 2;
            o->sp.min_p = (float)v;
            break;
        case OPT_REP:
            if (!num("--repeat-penalty", optarg, 0.01, 100, &v))
                return 2;
            o->sp.repetition_penalty = (float)v;
            break;
        case OPT_PRES:
            if (!num("--presence-penalty", optarg, -2, 2, &v))
                return 2;
            o->sp.presence_penalty = (float)v;
            break;
        case OPT_FREQ:
            if (!num("--frequency-penalty", optarg, -2, 2, &v))
                return 2;
            o->sp.frequency_penalty = (float)v;
            break;
        case OPT_SEED:
            if (!whole("--seed", optarg, 0, 18446744073709551615.0, &v))
                return 2;
            o->sp.seed = (uint64_t)v;
            o->seed_set = true;
            break;
        case OPT_CHAT: o->chat_prompt = true; break;
        case OPT_TEMPLATE: o->template_name = optarg; break;
        case OPT_SYSTEM: o->system = optarg; break;
        case OPT_SPECIAL: o->show_special = true; break;
        case OPT_TP:
            if (!tc_cli_tensor_parallel("thincuda", optarg, &o->tensor_parallel))
                return 2;
            break;
        case 'h': fputs(usage, stdout); return 0;
        case ':':
            fprintf(stderr, "thincuda: %s needs a value\n%s", argv[optind - 1], usage);
            return 2;
        default:
            fprintf(stderr, "thincuda: unknown option '%s'\n%s", argv[optind - 1], usage);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "thincuda: unexpected argument '%s'\n%s", argv[optind], usage);
        return 2;
    }
    if (!o->model) {
        fprintf(stderr, "thincuda: --model PATH is required\n%s", usage);
        return 2;
    }
    if (!o->seed_set)
        o->sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    return -1;
}

static void progress(void *ctx, uint64_t done, uint64_t total)
{
    (void)ctx;
    int w = 40, k = total ? (int)((double)done / (double)total * w) : w;
    fprintf(stderr, "\rloading [%.*s%*s] %3d%%", k,
            "========================================", w - k, "",
            total ? (int)(100.0 * (double)done / (double)total) : 100);
    if (done >= total)
        fputc('\n', stderr);
}

/* Open the model (a GGUF file or a Hugging Face folder), its configuration and tokenizer. */
static int open_files(session *s)
{
    if (s->t_start == 0)
        s->t_start = tc_host_seconds();
    return tc_cli_model_open(&s->f, s->o.model, true, true, s->o.tensor_parallel, "thincuda") ? 0
                                                                                              : 1;
}

/* Pick the backend, place the weights and allocate a KV cache of ctx tokens. */
static void *create_gpu(void *arg)
{
    session *s = arg;
    s->gpu_status = tc_backend_create_cuda(0, 0, &s->b);
    if (s->gpu_status != TC_OK)
        snprintf(s->gpu_error, sizeof s->gpu_error, "%s", tc_last_error());
    return NULL;
}

/* Start creating the GPU backend (driver, context: a few hundred ms) unless --device cpu. */
static void begin_backend(session *s)
{
    if (strcmp(s->o.device, "cpu") != 0)
        s->gpu_started = pthread_create(&s->gpu_thread, NULL, create_gpu, s) == 0;
}

static int load_weights(session *s, int64_t ctx)
{
    s->gpu_status = TC_ERR_NO_DEVICE;
    if (strcmp(s->o.device, "cpu") != 0) {
        if (!s->gpu_started)
            create_gpu(s);
        else
            pthread_join(s->gpu_thread, NULL);
        s->gpu_started = false;
    }
    s->b = tc_cli_backend("thincuda", s->o.device, (int)s->o.threads, s->gpu_status, s->b,
                          s->gpu_error);
    if (!s->b)
        return 1;
    tc_llama_options lo = { 0 };
    if (s->o.dtype) {
        lo.act_set = true;
        lo.act = !strcmp(s->o.dtype, "f32")   ? TC_DTYPE_F32
                 : !strcmp(s->o.dtype, "f16") ? TC_DTYPE_F16
                                              : TC_DTYPE_BF16;
    }
    lo.max_context = ctx;
    lo.max_tokens = 256;
    lo.kv_fp8 = s->o.kv_fp8;
    if (isatty(2))
        lo.progress = progress;
    tc_engine_model em;
    if (tc_cli_tp_wanted(s->o.tensor_parallel)) {
        if (!tc_cli_tp_open(&s->tp, "thincuda", s->o.tensor_parallel, s->b, s->f.src, &s->f.cfg, 0,
                            &lo))
            return 1;
        s->m = s->tp.tp->rank[0].m;
        s->ctx = s->m->s.max_blocks * 16;
        if (tc_tp_kv_init(&s->tp.kv, s->tp.tp, s->m->s.max_blocks, 16) != TC_OK)
            return fail("cannot allocate the KV caches");
        em = tc_engine_model_tp(s->tp.tp, &s->tp.kv);
    } else {
        if (tc_llama_load(s->f.src, &s->f.cfg, s->b, &lo, &s->m) != TC_OK)
            return fail("cannot load the model");
        s->ctx = s->m->s.max_blocks * 16;
        if (tc_kv_cache_init(&s->kv, s->m, s->m->s.max_blocks, 16) != TC_OK)
            return fail("cannot allocate the KV cache");
        s->kv_made = true;
        em = tc_engine_model_llama(s->m, &s->kv);
    }
    int32_t n_stops = tc_cli_stop_tokens(s->f.tok, &s->stops);
    if (n_stops < 0) {
        fprintf(stderr, "thincuda: out of host memory\n");
        return 1;
    }
    tc_engine_options eo = { .max_running = 1,
                             .tok = s->f.tok,
                             .show_special = s->o.show_special,
                             .stop_tokens = s->stops,
                             .n_stop_tokens = n_stops };
    if (tc_engine_create(&em, &eo, &s->e) != TC_OK)
        return fail("cannot start the engine");
    return 0;
}

static void close_session(session *s)
{
    if (s->gpu_started)
        pthread_join(s->gpu_thread, NULL);
    tc_engine_destroy(s->e);
    if (s->kv_made)
        tc_kv_cache_deinit(&s->kv);
    if (!s->tp.tp)
        tc_llama_destroy(s->m);
    tc_cli_tp_close(&s->tp);
    tc_backend_destroy(s->b);
    tc_cli_model_close(&s->f);
    free(s->stops);
}

/* What one generation collects from the engine's events. */
typedef struct gen_state {
    session *s;
    bool report;
    double t_first, t_end;
    int64_t generated, cached;
    char *reply;
    size_t reply_len;
    const char *error;
    char error_buf[256];
} gen_state;

static void on_event(void *user, const tc_engine_event *ev)
{
    gen_state *g = user;
    if (ev->token >= 0) {
        if (g->generated == 0) {
            g->t_first = tc_host_seconds();
            if (g->report)
                fprintf(stderr, "[first token ready %.3f s after start]\n",
                        g->t_first - g->s->t_start);
        }
        g->generated = ev->completion_tokens;
    }
    g->cached = ev->cached_tokens;
    if (ev->text_len) {
        fwrite(ev->text, 1, ev->text_len, stdout);
        fflush(stdout);
        char *r = realloc(g->reply, g->reply_len + ev->text_len + 1);
        if (r) {
            memcpy(r + g->reply_len, ev->text, ev->text_len);
            g->reply_len += ev->text_len;
            r[g->reply_len] = 0;
            g->reply = r;
        }
    }
    if (ev->finish == TC_FINISH_ERROR) {
        snprintf(g->error_buf, sizeof g->error_buf, "%s", ev->error ? ev->error : "failed");
        g->error = g->error_buf;
    }
    if (ev->finish != TC_FINISH_NONE)
        g->t_end = tc_host_seconds();
}

/* Generate up to n_predict tokens after the prompt tokens, streaming text to stdout; the
 * reply's text goes to *reply when asked. Returns 0 or an exit code. */
static int run(session *s, const int32_t *prompt, int64_t n_prompt, tc_sample_params sp,
               bool report, char **reply)
{
    if (n_prompt < 1) {
        fprintf(stderr, "thincuda: the prompt is empty\n");
        return 1;
    }
    if (n_prompt + s->o.n_predict > s->ctx) {
        fprintf(stderr,
                "thincuda: %lld prompt tokens + %ld to generate exceed the context of %lld\n",
                (long long)n_prompt, s->o.n_predict, (long long)s->ctx);
        return 1;
    }
    gen_state g = { .s = s, .report = report };
    if (s->o.n_predict > 0) {
        tc_request r = { .prompt = prompt,
                         .n_prompt = n_prompt,
                         .max_tokens = s->o.n_predict,
                         .sample = sp,
                         .callback = on_event,
                         .user = &g };
        double t0 = tc_host_seconds();
        if (tc_engine_submit(s->e, &r, NULL) != TC_OK)
            return fail("generation");
        int32_t active = 1;
        while (active > 0)
            if (tc_engine_step(s->e, &active) != TC_OK && !g.error)
                return fail("forward pass");
        if (g.error) {
            free(g.reply);
            fprintf(stderr, "thincuda: generation failed: %s\n", g.error);
            return 1;
        }
        if (report && g.generated > 0) {
            double pre = g.t_first - t0, dec = g.t_end - g.t_first;
            int64_t fed = n_prompt - g.cached;
            fprintf(stderr,
                    "\n[%s %s: prompt %lld tokens in %.3f s (%.1f tokens/s); generated %lld "
                    "tokens, %.1f tokens/s]\n",
                    tc_backend_name(s->b), tc_dtype_name(s->m->act), (long long)fed, pre,
                    (double)fed / (pre > 0 ? pre : 1e-9), (long long)g.generated,
                    g.generated > 1 ? (double)(g.generated - 1) / (dec > 0 ? dec : 1e-9) : 0.0);
        }
    }
    if (reply)
        *reply = g.reply ? g.reply : strdup("");
    else
        free(g.reply);
    return 0;
}

static int template_of(session *s, tc_chat_template *t)
{
    if (s->o.template_name)
        return tc_chat_template_named(s->o.template_name, t) == TC_OK ? 0 : fail("chat template");
    tc_gguf_str src = tc_cli_model_template(&s->f);
    if (!src.ptr) {
        fprintf(stderr,
                "thincuda: the model has no chat template; choose one with --template "
                "chatml|llama3|llama2|zephyr|mistral|mistral-v3|mistral-tekken|mistral-v7\n");
        return 1;
    }
    return tc_chat_template_detect(src.ptr, src.len, t) == TC_OK ? 0 : fail("chat template");
}

static const char generate_usage[] =
    "usage: thincuda generate --model PATH --prompt TEXT [options]\n"
    "Continue TEXT, streaming to stdout; tokens/s go to stderr at the end.\n"
    "  -p, --prompt TEXT    the prompt (special tokens such as <|im_start|> are recognised)\n"
    "  --chat               wrap the prompt as one user message in the model's chat template\n"
    "  --template NAME      chatml, llama3, llama3.1, llama2, zephyr, mistral, mistral-v3,\n"
    "                       mistral-tekken or mistral-v7 instead of the model's own\n"
    "  --special            print control tokens as text\n";

int tc_cli_generate(int argc, char **argv)
{
    session s = { 0 };
    s.t_start = tc_host_seconds(); /* start to first token counts the tokenizer built below */
    TC_INFO("generate: start");
    char usage[2048];
    snprintf(usage, sizeof usage, "%s%s%s", generate_usage, common_usage, sample_usage);
    int rc = parse(argc, argv, &s.o, usage);
    if (rc >= 0)
        return rc;
    if (!s.o.prompt) {
        fprintf(stderr, "thincuda: --prompt TEXT is required\n%s", usage);
        return 2;
    }
    /* The prompt is tokenised before the weights are placed, so that the KV cache can be sized
     * to prompt + tokens to generate (unless --ctx); the GPU starts meanwhile. */
    begin_backend(&s);
    if ((rc = open_files(&s)) != 0) {
        close_session(&s);
        return rc;
    }
    TC_INFO("generate: model files and tokenizer open");
    char *text = NULL;
    const char *prompt = s.o.prompt;
    if (s.o.chat_prompt) {
        tc_chat_template t;
        tc_chat_message msgs[2] = { { "system", s.o.system, NULL }, { "user", s.o.prompt, NULL } };
        bool sys = s.o.system != NULL;
        if ((rc = template_of(&s, &t)) != 0 ||
            (rc = tc_chat_format(&t, msgs + (sys ? 0 : 1), sys ? 2 : 1, true, &text) != TC_OK
                      ? fail("chat template")
                      : 0) != 0) {
            close_session(&s);
            return rc;
        }
        prompt = text;
    }
    int32_t *ids;
    size_t n;
    tc_status st = tc_tokenizer_encode(s.f.tok, prompt, strlen(prompt), true, true, &ids, &n);
    tc_host_free(text);
    if (st != TC_OK) {
        close_session(&s);
        return fail("tokenizer");
    }
    int64_t ctx = s.o.ctx ? s.o.ctx : (int64_t)n + s.o.n_predict;
    rc = load_weights(&s, ctx);
    TC_INFO("generate: weights, KV cache and engine ready");
    if (rc == 0)
        rc = run(&s, ids, (int64_t)n, s.o.sp, true, NULL);
    tc_host_free(ids);
    close_session(&s);
    return rc;
}

static const char chat_usage[] =
    "usage: thincuda chat --model PATH [options]\n"
    "Talk with the model in its chat template; an empty line or end of input quits.\n"
    "  --system TEXT        a system message\n"
    "  --template NAME      chatml, llama3, llama3.1, llama2, zephyr, mistral, mistral-v3,\n"
    "                       mistral-tekken or mistral-v7 instead of the model's own\n";

int tc_cli_chat(int argc, char **argv)
{
    session s = { 0 };
    char usage[2048];
    snprintf(usage, sizeof usage, "%s%s%s", chat_usage, common_usage, sample_usage);
    int rc = parse(argc, argv, &s.o, usage);
    if (rc >= 0)
        return rc;
    if (!s.o.temperature_set) {
        s.o.sp.temperature = 0.7f;
        s.o.sp.top_p = 0.9f;
    }
    if (!s.o.n_predict_set)
        s.o.n_predict = 512;
    begin_backend(&s);
    rc = open_files(&s);
    if (rc == 0)
        rc = load_weights(&s, s.o.ctx ? s.o.ctx : 4096);
    tc_chat_template t;
    if (rc == 0)
        rc = template_of(&s, &t);
    size_t n_msgs = 0, cap = 16;
    tc_chat_message *msgs = calloc(cap, sizeof *msgs);
    char *line = NULL, *prompt = NULL;
    size_t line_cap = 0;
    if (rc == 0 && s.o.system)
        msgs[n_msgs++] = (tc_chat_message){ "system", strdup(s.o.system), NULL };
    bool tty = isatty(0);
    while (rc == 0) {
        if (tty)
            fputs("> ", stdout), fflush(stdout);
        ssize_t k = getline(&line, &line_cap, stdin);
        if (k <= 0)
            break;
        while (k && (line[k - 1] == '\n' || line[k - 1] == '\r'))
            line[--k] = 0;
        if (!k)
            break;
        if (n_msgs + 2 > cap) {
            cap *= 2;
            tc_chat_message *nm = realloc(msgs, cap * sizeof *msgs);
            if (!nm)
                break;
            msgs = nm;
        }
        msgs[n_msgs++] = (tc_chat_message){ "user", strdup(line), NULL };
        if (tc_chat_format(&t, msgs, n_msgs, true, &prompt) != TC_OK) {
            rc = fail("chat template");
            break;
        }
        int32_t *ids;
        size_t n;
        if (tc_tokenizer_encode(s.f.tok, prompt, strlen(prompt), true, true, &ids, &n) != TC_OK) {
            rc = fail("tokenizer");
            break;
        }
        tc_host_free(prompt);
        prompt = NULL;
        char *reply = NULL;
        rc = run(&s, ids, (int64_t)n, s.o.sp, false, &reply);
        fputc('\n', stdout);
        msgs[n_msgs++] = (tc_chat_message){ "assistant", reply ? reply : strdup(""), NULL };
        tc_host_free(ids);
        /* The cache holds the prompt and all but the last generated token; the next prompt
         * re-renders the conversation and reuses the common prefix. */
    }
    for (size_t i = 0; i < n_msgs; i++)
        free((char *)msgs[i].content);
    free(msgs);
    free(line);
    tc_host_free(prompt);
    close_session(&s);
    return rc;
}

static const char info_usage[] =
    "usage: thincuda info --model PATH [--device cpu|cuda|auto] [--dtype T] [--ctx N]\n"
    "                     [--kv-cache-dtype auto|fp8]\n"
    "Print the model's architecture, size and a memory estimate.\n";

int tc_cli_info(int argc, char **argv)
{
    options o;
    int rc = parse(argc, argv, &o, info_usage);
    if (rc >= 0)
        return rc;
    if (o.tensor_parallel != 1) {
        fprintf(stderr,
                "thincuda: info takes no --tensor-parallel (generate, chat, bench and "
                "serve do)\n%s",
                info_usage);
        return 2;
    }
    session ss = { 0 };
    ss.o = o;
    if ((rc = open_files(&ss)) != 0) {
        close_session(&ss);
        return rc;
    }
    const tc_gguf g = *ss.f.src;
    tc_llama_config c = ss.f.cfg;
    uint64_t params = 0, file_bytes = 0, counts[TC_GGML_TYPE_LIMIT] = { 0 },
             type_bytes[TC_GGML_TYPE_LIMIT] = { 0 };
    for (uint64_t i = 0; i < g.n_tensors; i++) {
        params += g.tensors[i].n_elements;
        file_bytes += g.tensors[i].bytes;
        if ((unsigned)g.tensors[i].type < TC_GGML_TYPE_LIMIT) {
            counts[g.tensors[i].type]++;
            type_bytes[g.tensors[i].type] += g.tensors[i].bytes;
        }
    }
    bool cpu = !strcmp(o.device, "cpu");
    tc_dtype act = cpu ? TC_DTYPE_F32 : TC_DTYPE_BF16;
    if (o.dtype)
        act = !strcmp(o.dtype, "f32")   ? TC_DTYPE_F32
              : !strcmp(o.dtype, "f16") ? TC_DTYPE_F16
                                        : TC_DTYPE_BF16;
    uint64_t placed = tc_llama_weight_bytes(&g, cpu, act);
    int64_t ctx = o.ctx ? o.ctx : c.max_positions;
    tc_dtype kv = o.kv_fp8 ? TC_DTYPE_F8E4M3 : act;
    double kv_token = 2.0 * c.n_layers * c.n_kv_heads * c.head_dim * (double)tc_dtype_bytes(kv, 1);
    printf("model            %s\n", o.model);
    printf("name             %s\n", c.name[0] ? c.name : "(none)");
    printf("architecture     %s%s\n", c.arch, c.qkv_bias ? " (q, k and v biases)" : "");
    printf("layers           %d\n", c.n_layers);
    printf("dimension        %d (feed-forward %d)\n", c.dim, c.ffn_dim);
    printf("heads            %d query, %d key/value (head size %d)\n", c.n_heads, c.n_kv_heads,
           c.head_dim);
    printf("vocabulary       %d\n", c.vocab);
    printf("context          %d\n", c.max_positions);
    if (c.window)
        printf("attention        sliding window of %d tokens\n", c.window);
    printf("rope             theta %g%s%s\n", c.rope.theta,
           c.rope.scaling == TC_ROPE_LLAMA3 ? ", Llama 3 scaling" : "",
           c.tied_embeddings ? "; output tied to the embedding" : "");
    printf("parameters       %llu (%.1f M)\n", (unsigned long long)params, (double)params / 1e6);
    printf("tensor types    ");
    for (int t = 0; t < TC_GGML_TYPE_LIMIT; t++)
        if (counts[t])
            printf(" %s x%llu (%.1f MiB)", tc_ggml_type_name((tc_ggml_type)t),
                   (unsigned long long)counts[t], (double)type_bytes[t] / 1048576.0);
    printf("\n");
    const tc_hf_quant *q = ss.f.is_hf ? &ss.f.hf.quant : NULL;
    if (q && q->method != TC_HF_QUANT_NONE) {
        char group[32];
        snprintf(group, sizeof group, q->group_size < 0 ? "per column" : "group %d", q->group_size);
        printf("quantisation     %s %d-bit, %s, %s, act-order %s, format %s%s\n",
               q->method == TC_HF_QUANT_GPTQ  ? "GPTQ"
               : q->method == TC_HF_QUANT_AWQ ? "AWQ"
                                              : "compressed-tensors",
               q->bits, group, q->sym ? "symmetric" : "zero points", q->desc_act ? "yes" : "no",
               q->format, q->zero_offset ? " (zeros stored less 1)" : "");
        printf(
            "quantised        %u matrices, %.1f MiB in the checkpoint, held in %.1f MiB (%.2fx); "
            "repacked to the types above (%u dequantised to f32)\n",
            q->n_linear, (double)q->checkpoint_bytes / 1048576.0, (double)q->held_bytes / 1048576.0,
            q->checkpoint_bytes ? (double)q->held_bytes / (double)q->checkpoint_bytes : 0.0,
            q->n_dequantised);
    }
    printf("%s %llu bytes (%.1f MiB)\n",
           q && q->method != TC_HF_QUANT_NONE ? "weights repacked" : "weights in file ",
           (unsigned long long)file_bytes, (double)file_bytes / 1048576.0);
    printf("memory estimate  %s, %s activations: weights %.1f MiB + %s KV cache %.1f KiB/token "
           "(%.1f MiB at %lld tokens)\n",
           cpu ? "cpu" : "cuda", tc_dtype_name(act), (double)placed / 1048576.0, tc_dtype_name(kv),
           kv_token / 1024.0, kv_token * (double)ctx / 1048576.0, (long long)ctx);
    close_session(&ss);
    return 0;
}
