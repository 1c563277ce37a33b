/* `thincuda serve`: the OpenAI-compatible HTTP server over the engine.
 *
 * The server listens first (so /health says 503 while loading), a loader thread places the
 * weights and starts the engine, and the main thread waits for SIGINT or SIGTERM, then stops
 * gracefully: no new connections, requests under way get --shutdown-timeout seconds to
 * finish, the rest are cancelled; exit status 0. */
#define _GNU_SOURCE
#include <getopt.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "inference/engine.h"
#include "inference/tp_engine.h"
#include "model/chat.h"
#include "model/hf.h"
#include "model/llama.h"
#include "model/tokenizer.h"
#include "runtime/runtime.h"
#include "server/server.h"

typedef struct serve_opts {
    const char *model, *shape, *host, *api_key, *device, *dtype, *template_name, *name;
    long port, threads, ctx, max_queue, max_running, step_tokens, max_body, max_conns;
    long read_timeout, max_messages, max_prompt_bytes, max_conns_ip;
    double kv_fraction, kv_tokens, shutdown_s;
    bool kv_fp8, allow_special;
    int tensor_parallel; /* GPUs; 1: one backend, no NCCL (see tc_cli_tp_wanted) */
} serve_opts;

typedef struct served {
    serve_opts o;
    tc_server *srv;
    tc_cli_model f;
    tc_chat_template chat;
    bool has_chat;
    tc_backend *b;
    tc_llama *m;  /* the model, or rank 0's shard of tp's */
    tc_cli_tp tp; /* --tensor-parallel: the ranks (tp.tp NULL otherwise) */
    tc_kv_cache kv;
    bool kv_made;
    tc_engine *e;
    int32_t *stops;
    tc_device_info dev; /* the GPU on CUDA: /health names it by PCI bus id */
    bool loaded, failed;
} served;

static const char usage[] =
    "usage: thincuda serve --model PATH [options]\n"
    "Serve the OpenAI API (/v1/chat/completions, /v1/completions, /v1/models) with /health,\n"
    "/metrics, /tokenize and /detokenize. SIGINT or SIGTERM stops it gracefully.\n"
    "  --model PATH           a GGUF file or a Hugging Face folder (Llama family)\n"
    "  --host ADDR            address to listen on (default 127.0.0.1; 0.0.0.0 or :: for all)\n"
    "  --port N               port (default 8080; 0 picks a free one, printed at start)\n"
    "  --api-key KEY          require 'Authorization: Bearer KEY' on /v1 routes (or set\n"
    "                         THINCUDA_API_KEY, which keeps the key out of the process list)\n"
    "  --model-name NAME      the model's id in the API (default: the file name)\n"
    "  --shape NAME           random weights of a named shape (smollm2-135m, llama3.2-1b,\n"
    "                         llama2-7b, qwen2.5-1.5b, mistral-7b, llama3.1-70b) with --model's\n"
    "                         tokenizer and vocabulary: for load tests\n"
    "  --template NAME        chat template chatml, llama3, llama3.1, llama2, zephyr, mistral,\n"
    "                         mistral-v3, mistral-tekken or mistral-v7 instead of the model's\n"
    "  --max-queue N          requests waiting at most; beyond it 503 (default 256)\n"
    "  --max-running N        sequences generating at once (default 256 on cuda, 16 on cpu)\n"
    "  --ctx N                context per sequence (default: the model's, at most 8192 on cuda\n"
    "                         and 2048 on cpu)\n"
    "  --kv-tokens N          KV-cache size in tokens (default: --kv-fraction of free GPU memory;\n"
    "                         on cpu, --max-running sequences of --ctx)\n"
    "  --kv-fraction F        share of free GPU memory for weights' neighbour, the KV cache (0.9)\n"
    "  --step-tokens N        tokens per engine step (default 2048 on cuda, 512 on cpu)\n"
    "  --max-body BYTES       largest request body (default 4194304); larger get 413\n"
    "  --max-messages N       messages a chat request may have (default 2048); more get 400\n"
    "  --max-prompt-bytes N   bytes of prompt or message text a request may have (default\n"
    "                         1048576); more get 400\n"
    "  --allow-special-in-messages  control tokens written in chat messages (<|im_end|>) are\n"
    "                         tokens, as the template's markers are; by default they are text\n"
    "  --max-connections N    open connections at most (default 1024)\n"
    "  --max-connections-per-ip N  open connections from one address (default 512)\n"
    "  --read-timeout S       seconds a client has to send a request's head and body, however\n"
    "                         slowly it sends them (default 30); then the connection closes\n"
    "  --shutdown-timeout S   seconds running requests get to finish on SIGTERM (default 5)\n"
    "  --device D             cpu, cuda or auto (default)\n"
    "  --dtype T              activations on cuda: bf16 (default), f16 or f32\n"
    "  --kv-cache-dtype D     auto (the activations' dtype) or fp8 (E4M3: half the bytes)\n"
    "  --tensor-parallel N    split the model over N GPUs through NCCL (default 1: one GPU)\n"
    "  --threads N            CPU threads (default: all cores)\n";

static bool num(const char *flag, const char *s, double lo, double hi, double *v)
{
    return tc_cli_num("thincuda serve", flag, s, lo, hi, v);
}
static bool whole(const char *flag, const char *s, double lo, double hi, double *v)
{
    return tc_cli_int("thincuda serve", flag, s, lo, hi, v);
}

static int parse(int argc, char **argv, serve_opts *o)
{
    enum {
        MODEL = 256,
        SHAPE,
        HOST,
        PORT,
        KEY,
        NAME,
        TEMPLATE,
        QUEUE,
        RUNNING,
        CTX,
        KVT,
        KVF,
        STEP,
        BODY,
        CONNS,
        CONNS_IP,
        MSGS,
        PBYTES,
        SPECIAL,
        RTIME,
        STIME,
        DEVICE,
        DTYPE,
        KVDT,
        THREADS,
        TP,
        HELP
    };
    static const struct option longs[] = {
        { "model", required_argument, 0, MODEL },
        { "shape", required_argument, 0, SHAPE },
        { "host", required_argument, 0, HOST },
        { "port", required_argument, 0, PORT },
        { "api-key", required_argument, 0, KEY },
        { "model-name", required_argument, 0, NAME },
        { "template", required_argument, 0, TEMPLATE },
        { "max-queue", required_argument, 0, QUEUE },
        { "max-running", required_argument, 0, RUNNING },
        { "ctx", required_argument, 0, CTX },
        { "kv-tokens", required_argument, 0, KVT },
        { "kv-fraction", required_argument, 0, KVF },
        { "step-tokens", required_argument, 0, STEP },
        { "max-body", required_argument, 0, BODY },
        { "max-connections", required_argument, 0, CONNS },
        { "max-connections-per-ip", required_argument, 0, CONNS_IP },
        { "max-messages", required_argument, 0, MSGS },
        { "max-prompt-bytes", required_argument, 0, PBYTES },
        { "allow-special-in-messages", no_argument, 0, SPECIAL },
        { "read-timeout", required_argument, 0, RTIME },
        { "shutdown-timeout", required_argument, 0, STIME },
        { "device", required_argument, 0, DEVICE },
        { "dtype", required_argument, 0, DTYPE },
        { "kv-cache-dtype", required_argument, 0, KVDT },
        { "threads", required_argument, 0, THREADS },
        { "tensor-parallel", required_argument, 0, TP },
        { "help", no_argument, 0, HELP },
        { 0, 0, 0, 0 },
    };
    memset(o, 0, sizeof *o);
    o->port = 8080;
    o->device = "auto";
    o->max_queue = 256;
    o->shutdown_s = 5;
    o->max_body = 4 << 20;
    o->max_conns = 1024;
    o->read_timeout = 30;
    o->tensor_parallel = 1;
    o->api_key = getenv("THINCUDA_API_KEY");
    optind = 1;
    opterr = 0;
    int c;
    double v;
    while ((c = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
#define NUM(flag, lo, hi, field)              \
    do {                                      \
        if (!whole(flag, optarg, lo, hi, &v)) \
            return 2;                         \
        o->field = (__typeof__(o->field))v;   \
    } while (0)
        switch (c) {
        case MODEL: o->model = optarg; break;
        case SHAPE: o->shape = optarg; break;
        case HOST: o->host = optarg; break;
        case PORT: NUM("--port", 0, 65535, port); break;
        case KEY: o->api_key = optarg; break;
        case NAME: o->name = optarg; break;
        case TEMPLATE: o->template_name = optarg; break;
        case QUEUE: NUM("--max-queue", 1, 1 << 20, max_queue); break;
        case RUNNING: NUM("--max-running", 1, 4096, max_running); break;
        case CTX: NUM("--ctx", 16, 1 << 20, ctx); break;
        case KVT: NUM("--kv-tokens", 16, 1e9, kv_tokens); break;
        case KVF:
            if (!num("--kv-fraction", optarg, 0.01, 0.99, &v))
                return 2;
            o->kv_fraction = v;
            break;
        case STEP: NUM("--step-tokens", 16, 65536, step_tokens); break;
        case BODY: NUM("--max-body", 1024, 1 << 30, max_body); break;
        case CONNS: NUM("--max-connections", 1, 65536, max_conns); break;
        case CONNS_IP: NUM("--max-connections-per-ip", 1, 65536, max_conns_ip); break;
        case MSGS: NUM("--max-messages", 1, 1 << 24, max_messages); break;
        case PBYTES: NUM("--max-prompt-bytes", 1, 1 << 30, max_prompt_bytes); break;
        case SPECIAL: o->allow_special = true; break;
        case RTIME: NUM("--read-timeout", 1, 3600, read_timeout); break;
        case STIME:
            if (!num("--shutdown-timeout", optarg, 0, 3600, &v))
                return 2;
            o->shutdown_s = v;
            break;
        case THREADS: NUM("--threads", 1, 1024, threads); break;
        case DEVICE:
            if (!tc_cli_device("thincuda serve", optarg))
                return 2;
            o->device = optarg;
            break;
        case DTYPE:
            if (!tc_cli_dtype("thincuda serve", optarg))
                return 2;
            o->dtype = optarg;
            break;
        case KVDT:
            if (!tc_cli_kv_dtype("thincuda serve", optarg, &o->kv_fp8))
                return 2;
            break;
        case TP:
            if (!tc_cli_tensor_parallel("thincuda serve", optarg, &o->tensor_parallel))
                return 2;
            break;
        case HELP:
        case 'h': fputs(usage, stdout); return 0;
        case ':':
            fprintf(stderr, "thincuda serve: %s needs a value\n%s", argv[optind - 1], usage);
            return 2;
        default:
            fprintf(stderr, "thincuda serve: unknown option '%s'\n%s", argv[optind - 1], usage);
            return 2;
        }
#undef NUM
    }
    if (optind < argc) {
        fprintf(stderr, "thincuda serve: unexpected argument '%s'\n%s", argv[optind], usage);
        return 2;
    }
    if (!o->model) {
        fprintf(stderr, "thincuda serve: --model PATH is required\n%s", usage);
        return 2;
    }
    return -1;
}

static bool fail(served *s, const char *what)
{
    fprintf(stderr, "thincuda serve: %s: %s\n", what, tc_last_error());
    s->failed = true;
    return false;
}

/* Model files, tokenizer and chat template. */
static bool open_model(served *s)
{
    /* With --shape only the tokenizer is read: a GGUF may have no tensors. */
    if (!tc_cli_model_open(&s->f, s->o.model, !s->o.shape, true, s->o.tensor_parallel,
                           "thincuda serve")) {
        s->failed = true;
        return false;
    }
    tc_gguf_str tmpl = tc_cli_model_template(&s->f);
    if (s->o.template_name) {
        if (tc_chat_template_named(s->o.template_name, &s->chat) != TC_OK)
            return fail(s, "--template");
        s->has_chat = true;
    } else if (tmpl.ptr) {
        s->has_chat = tc_chat_template_detect(tmpl.ptr, tmpl.len, &s->chat) == TC_OK;
        if (!s->has_chat)
            fprintf(stderr, "thincuda serve: %s; /v1/chat/completions will answer 400\n",
                    tc_last_error());
    } else {
        fprintf(stderr, "thincuda serve: the model has no chat template (--template names one); "
                        "/v1/chat/completions will answer 400\n");
    }
    return true;
}

/* Backend, weights, KV cache and engine. */
static bool start_engine(served *s)
{
    s->b = tc_cli_backend_create("thincuda serve", s->o.device, (int)s->o.threads);
    if (!s->b) {
        s->failed = true;
        return false;
    }
    bool cuda = tc_backend_get_kind(s->b) == TC_BACKEND_CUDA;
    if (s->o.shape) {
        /* The named shape with the tokenizer's vocabulary; weights random below. */
        if (tc_llama_config_preset(s->o.shape, &s->f.cfg) != TC_OK)
            return fail(s, "--shape");
        s->f.cfg.vocab = tc_tokenizer_vocab(s->f.tok);
    }
    int64_t ctx = s->o.ctx ? s->o.ctx : s->f.cfg.max_positions;
    if (!s->o.ctx && ctx > (cuda ? 8192 : 2048))
        ctx = cuda ? 8192 : 2048;
    int64_t running = s->o.max_running ? s->o.max_running : cuda ? 256 : 16;
    tc_llama_options lo = { 0 };
    lo.max_context = ctx;
    lo.max_seqs = running;
    lo.max_tokens = s->o.step_tokens ? s->o.step_tokens : cuda ? 2048 : 512;
    if (lo.max_tokens < running)
        lo.max_tokens = running;
    lo.kv_fp8 = s->o.kv_fp8;
    if (s->o.dtype) {
        lo.act_set = true;
        lo.act = !strcmp(s->o.dtype, "f32")   ? TC_DTYPE_F32
                 : !strcmp(s->o.dtype, "f16") ? TC_DTYPE_F16
                                              : TC_DTYPE_BF16;
    }
    char kv_line[256];
    tc_engine_model em;
    if (tc_cli_tp_wanted(s->o.tensor_parallel)) {
        if (!tc_cli_tp_open(&s->tp, "thincuda serve", s->o.tensor_parallel, s->b,
                            s->o.shape ? NULL : s->f.src, &s->f.cfg, 1, &lo) ||
            !tc_cli_tp_kv(&s->tp, "thincuda serve", (int64_t)s->o.kv_tokens, s->o.kv_fraction,
                          kv_line, sizeof kv_line)) {
            s->failed = true;
            return false;
        }
        s->m = s->tp.tp->rank[0].m;
        em = tc_engine_model_tp(s->tp.tp, &s->tp.kv);
    } else {
        if (s->o.shape) {
            if (tc_llama_random(&s->f.cfg, 1, s->b, &lo, &s->m) != TC_OK)
                return fail(s, "cannot make the model");
        } else if (tc_llama_load(s->f.src, &s->f.cfg, s->b, &lo, &s->m) != TC_OK) {
            return fail(s, "cannot load the model");
        }
        if (!tc_cli_kv_cache("thincuda serve", s->m, (int64_t)s->o.kv_tokens, s->o.kv_fraction,
                             &s->kv, kv_line, sizeof kv_line)) {
            s->failed = true;
            return false;
        }
        s->kv_made = true;
        em = tc_engine_model_llama(s->m, &s->kv);
    }
    /* Generation ends at EOS and at every other control token but BOS (end of turn). */
    int32_t vocab = tc_tokenizer_vocab(s->f.tok), n_stops = tc_cli_stop_tokens(s->f.tok, &s->stops);
    if (n_stops < 0)
        return fail(s, "out of host memory");
    tc_engine_options eo = { .threaded = true,
                             .max_running = (int32_t)running,
                             .max_queue = (int32_t)s->o.max_queue,
                             .tok = s->f.tok,
                             .stop_tokens = s->stops,
                             .n_stop_tokens = n_stops };
    if (tc_engine_create(&em, &eo, &s->e) != TC_OK)
        return fail(s, "cannot start the engine");
    fprintf(stderr, "thincuda serve: %s on %s %s; kv cache %s\n", s->o.name, tc_backend_name(s->b),
            tc_dtype_name(s->m->act), kv_line);
    tc_server_model sm = {
        s->e, s->f.tok, s->has_chat ? &s->chat : NULL, s->m->s.max_blocks * 16, vocab, NULL, NULL
    };
    if (cuda &&
        tc_device_info_get(tc_context_ordinal(tc_backend_context(s->b)), &s->dev) == TC_OK) {
        sm.pci_bus_id = s->dev.pci_bus_id;
        sm.pool = tc_backend_pool(s->b);
    }
    tc_server_set_model(s->srv, &sm);
    return true;
}

static void *loader(void *arg)
{
    served *s = arg;
    s->loaded = open_model(s) && start_engine(s);
    if (s->loaded)
        fprintf(stderr, "thincuda serve: ready\n");
    else
        kill(getpid(), SIGUSR1); /* wake the main thread to exit */
    return NULL;
}

static void close_model(served *s)
{
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

int tc_cli_serve(int argc, char **argv)
{
    served s = { 0 };
    int rc = parse(argc, argv, &s.o);
    if (rc >= 0)
        return rc;
    char name[256];
    if (!s.o.name) {
        char path[4096];
        snprintf(path, sizeof path, "%s", s.o.model);
        size_t n = strlen(path);
        while (n > 1 && path[n - 1] == '/')
            path[--n] = 0;
        snprintf(name, sizeof name, "%s", basename(path));
        char *dot = strrchr(name, '.');
        if (dot && !strcmp(dot, ".gguf"))
            *dot = 0;
        s.o.name = name;
    }
    /* Signals are taken by sigwait here; every thread started below inherits the mask. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    tc_server_options so = { .host = s.o.host,
                             .port = (int)s.o.port,
                             .api_key = s.o.api_key && *s.o.api_key ? s.o.api_key : NULL,
                             .model_id = s.o.name,
                             .max_body = (size_t)s.o.max_body,
                             .max_connections = (unsigned)s.o.max_conns,
                             .max_connections_per_ip = (unsigned)s.o.max_conns_ip,
                             .read_timeout_s = (unsigned)s.o.read_timeout,
                             .max_messages = (size_t)s.o.max_messages,
                             .max_prompt_bytes = (size_t)s.o.max_prompt_bytes,
                             .allow_special_in_messages = s.o.allow_special };
    char msg[512];
    if (!tc_server_start(&so, &s.srv, msg, sizeof msg)) {
        fprintf(stderr, "thincuda serve: %s\n", msg);
        return 1;
    }
    const char *host = s.o.host ? s.o.host : "127.0.0.1";
    bool v6 = strchr(host, ':') != NULL;
    fprintf(stderr, "thincuda serve: listening on http://%s%s%s:%d (model %s loading)%s\n",
            v6 ? "[" : "", host, v6 ? "]" : "", tc_server_port(s.srv), s.o.name,
            so.api_key ? "; API key required" : "");
    pthread_t th;
    if (pthread_create(&th, NULL, loader, &s) != 0) {
        fprintf(stderr, "thincuda serve: cannot start a thread\n");
        tc_server_destroy(s.srv);
        return 1;
    }
    int sig = 0;
    sigwait(&set, &sig);
    if (sig != SIGUSR1)
        fprintf(stderr, "thincuda serve: %s: stopping (running requests get %g s)\n",
                strsignal(sig), s.o.shutdown_s);
    /* A signal during loading waits for the loader: it cannot be interrupted safely. */
    pthread_join(th, NULL);
    tc_server_stop(s.srv, s.o.shutdown_s);
    tc_server_destroy(s.srv);
    close_model(&s);
    if (s.failed)
        return 1;
    fprintf(stderr, "thincuda serve: stopped\n");
    return 0;
}
