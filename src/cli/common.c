/* What the subcommands share: number flags, opening a model's files, choosing a backend and
 * the tokens that end generation. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "runtime/runtime.h"

bool tc_cli_num(const char *who, const char *flag, const char *s, double lo, double hi, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    if (errno || end == s || *end || !(*v >= lo && *v <= hi)) {
        fprintf(stderr, "%s: %s wants a number in [%.15g, %.15g], got '%s'\n", who, flag, lo, hi,
                s);
        return false;
    }
    return true;
}

bool tc_cli_int(const char *who, const char *flag, const char *s, double lo, double hi, double *v)
{
    if (!tc_cli_num(who, flag, s, lo, hi, v))
        return false;
    if (floor(*v) != *v) {
        fprintf(stderr, "%s: %s wants a whole number, got '%s'\n", who, flag, s);
        return false;
    }
    return true;
}

bool tc_cli_choice(const char *who, const char *flag, const char *s, const char *const *choices)
{
    int n = 0;
    while (choices[n])
        n++;
    for (int i = 0; i < n; i++)
        if (!strcmp(s, choices[i]))
            return true;
    fprintf(stderr, "%s: %s wants ", who, flag);
    for (int i = 0; i < n; i++)
        fprintf(stderr, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ", choices[i]);
    fprintf(stderr, ", got '%s'\n", s);
    return false;
}

bool tc_cli_device(const char *who, const char *s)
{
    static const char *const devices[] = { "cpu", "cuda", "auto", NULL };
    return tc_cli_choice(who, "--device", s, devices);
}

bool tc_cli_dtype(const char *who, const char *s)
{
    static const char *const dtypes[] = { "bf16", "f16", "f32", NULL };
    return tc_cli_choice(who, "--dtype", s, dtypes);
}

bool tc_cli_kv_dtype(const char *who, const char *s, bool *fp8)
{
    static const char *const kv[] = { "auto", "fp8", NULL };
    if (!tc_cli_choice(who, "--kv-cache-dtype", s, kv))
        return false;
    *fp8 = !strcmp(s, "fp8");
    return true;
}

static bool model_fail(const char *who, const char *what)
{
    fprintf(stderr, "%s: %s: %s\n", who, what, tc_last_error());
    return false;
}

bool tc_cli_model_open(tc_cli_model *f, const char *path, bool config, bool tokenizer,
                       int tensor_parallel, const char *who)
{
    memset(f, 0, sizeof *f);
    struct stat sb;
    f->is_hf = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    if (f->is_hf) {
        int max_block = tc_cli_tp_wanted(tensor_parallel) ? 64 : 0;
        if (tc_hf_open_packed_ex(&f->hf, path, max_block) != TC_OK)
            return model_fail(who, "cannot load the model");
        f->src = &f->hf.view;
        f->cfg = f->hf.cfg;
        if (!tokenizer)
            return true;
        if (!f->hf.tokenizer_json) {
            fprintf(stderr, "%s: %s has no tokenizer.json\n", who, path);
            return false;
        }
        if (tc_tokenizer_from_json(f->hf.tokenizer_json, f->hf.tokenizer_config, &f->tok) != TC_OK)
            return model_fail(who, "cannot load the tokenizer");
        return true;
    }
    if (tc_gguf_open(&f->g, path) != TC_OK)
        return model_fail(who, "cannot load the model");
    f->src = &f->g;
    if (config && tc_llama_config_from_gguf(&f->g, &f->cfg) != TC_OK)
        return model_fail(who, "cannot load the model");
    if (tokenizer && tc_tokenizer_from_gguf(&f->g, &f->tok) != TC_OK)
        return model_fail(who, "cannot load the tokenizer");
    return true;
}

tc_gguf_str tc_cli_model_template(const tc_cli_model *f)
{
    tc_gguf_str src = { NULL, 0 };
    if (f->is_hf && f->hf.chat_template)
        src = (tc_gguf_str){ f->hf.chat_template, strlen(f->hf.chat_template) };
    else if (!f->is_hf)
        tc_gguf_get_str(&f->g, "tokenizer.chat_template", &src);
    return src;
}

void tc_cli_model_close(tc_cli_model *f)
{
    tc_tokenizer_destroy(f->tok);
    tc_gguf_close(&f->g);
    tc_hf_close(&f->hf);
    memset(f, 0, sizeof *f);
}

tc_backend *tc_cli_backend(const char *who, const char *device, int threads, tc_status cuda_status,
                           tc_backend *cuda, const char *cuda_error)
{
    if (strcmp(device, "cpu") != 0) {
        if (cuda_status == TC_OK)
            return cuda;
        if (!strcmp(device, "cuda")) {
            fprintf(stderr, "%s: cannot use the GPU: %s\n", who, cuda_error);
            return NULL;
        }
        fprintf(stderr, "%s: no GPU (%s); running on the CPU\n", who,
                tc_status_string(cuda_status));
    }
    tc_backend *b = NULL;
    if (tc_backend_create_cpu(threads, &b) != TC_OK) {
        fprintf(stderr, "%s: cannot start the CPU backend: %s\n", who, tc_last_error());
        return NULL;
    }
    return b;
}

tc_backend *tc_cli_backend_create(const char *who, const char *device, int threads)
{
    tc_backend *cuda = NULL;
    tc_status st = TC_ERR_NO_DEVICE;
    if (strcmp(device, "cpu") != 0)
        st = tc_backend_create_cuda(0, 0, &cuda);
    return tc_cli_backend(who, device, threads, st, cuda, st == TC_OK ? "" : tc_last_error());
}

int32_t tc_cli_stop_tokens(const tc_tokenizer *t, int32_t **out)
{
    int32_t vocab = tc_tokenizer_vocab(t), n = 0;
    *out = calloc((size_t)vocab, sizeof **out);
    if (!*out)
        return -1;
    for (int32_t id = 0; id < vocab; id++)
        if (id == tc_tokenizer_eos(t) ||
            (tc_tokenizer_is_control(t, id) && id != tc_tokenizer_bos(t)))
            (*out)[n++] = id;
    return n;
}

bool tc_cli_kv_cache(const char *who, tc_llama *m, int64_t tokens, double fraction, tc_kv_cache *kv,
                     char *line, size_t len)
{
    int64_t ctx = m->s.max_blocks * 16, blocks = tc_engine_kv_blocks(m, tokens, fraction, 16);
    if (blocks < m->s.max_blocks) {
        fprintf(stderr,
                "%s: room for %lld KV blocks, less than one sequence of %lld tokens; lower "
                "--ctx or raise --kv-tokens / --kv-fraction\n",
                who, (long long)blocks, (long long)ctx);
        return false;
    }
    if (tc_kv_cache_init(kv, m, blocks, 16) != TC_OK) {
        fprintf(stderr, "%s: cannot allocate the KV cache: %s\n", who, tc_last_error());
        return false;
    }
    char left[64] = "";
    size_t free_b = 0, total_b = 0;
    tc_backend *b = m->backend;
    if (tc_backend_get_kind(b) == TC_BACKEND_CUDA &&
        tc_context_mem_info(tc_backend_context(b), &free_b, &total_b) == TC_OK)
        snprintf(left, sizeof left, "; %.2f GiB of device memory left", (double)free_b / (1 << 30));
    snprintf(line, len,
             "%lld blocks x 16 = %lld tokens, %lld sequences of %lld tokens at once, "
             "%.2f GiB of %s%s",
             (long long)blocks, (long long)blocks * 16, (long long)(blocks * 16 / ctx),
             (long long)ctx, (double)tc_kv_cache_bytes(m, blocks, 16) / (1 << 30),
             tc_dtype_name(m->kv_dtype), left);
    return true;
}
