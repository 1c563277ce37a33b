/* The completion routes: a request checked, its prompt rendered and tokenised within bounds,
 * submitted to the engine and answered; /tokenize and /detokenize beside them. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/host.h"
#include "server/internal.h"
#include "server/schema.h"
#include "server/tools.h"

/* tc_encode_options.cancelled: whether the connection's client has gone. */
static bool encode_cancelled(void *user)
{
    return tc__client_gone(*(const int *)user);
}

/* Whether the request's prompt is within the bounds on the work it may cause before
 * generation: the number of messages and the bytes of text to tokenise. */
static bool prompt_bounded(const tc_server *s, const tc_oai_request *q, tc_oai_error *err)
{
    if (q->n_messages > s->o.max_messages)
        return tc_oai_fail(err, 400, "invalid_request_error", "messages", "array_above_max_length",
                           "'messages' has %zu messages; this server takes at most %zu "
                           "(--max-messages)",
                           q->n_messages, s->o.max_messages);
    size_t bytes = q->prompt ? strlen(q->prompt) : 0;
    for (size_t i = 0; i < q->n_messages; i++)
        bytes += strlen(q->messages[i].content);
    if (q->tools_text)
        bytes += strlen(q->tools_text);
    if (bytes > s->o.max_prompt_bytes)
        return tc_oai_fail(
            err, 400, "invalid_request_error", q->kind == TC_OAI_CHAT ? "messages" : "prompt",
            "string_above_max_length",
            "the %s hold %zu bytes of text; this server takes at most %zu "
            "(--max-prompt-bytes)",
            q->kind == TC_OAI_CHAT ? "messages" : "prompt", bytes, s->o.max_prompt_bytes);
    return true;
}

/* The client went away before its request was answered: count it and close. */
static enum MHD_Result client_left(tc_server *s)
{
    pthread_mutex_lock(&s->mu);
    s->met.disconnects++;
    pthread_mutex_unlock(&s->mu);
    return MHD_NO;
}

/* Tokens of the request's prompt: the chat rendered in the model's template, or the text.
 * With max_ids, a prompt of more tokens is context_length_exceeded as soon as tokenising gets
 * that far. No tokens is an error unless allow_empty (/tokenize answers [] for an empty text,
 * as tokenizers and llama.cpp do). The client at fd is watched while the text is tokenised:
 * when it has gone, err's status is 0 and the connection is to be closed. */
static bool prompt_tokens(tc_server *s, const tc_oai_request *q, bool add_bos, size_t max_ids,
                          bool allow_empty, int fd, int32_t **ids, size_t *n, tc_oai_error *err)
{
    const char *what = q->kind == TC_OAI_CHAT ? "messages" : "prompt";
    if (q->prompt_tokens) {
        *ids = tc_host_alloc(sizeof(int32_t) * q->n_prompt_tokens);
        if (!*ids)
            return tc_oai_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        memcpy(*ids, q->prompt_tokens, sizeof(int32_t) * q->n_prompt_tokens);
        *n = q->n_prompt_tokens;
        for (size_t i = 0; i < *n; i++)
            if ((*ids)[i] >= s->m.vocab)
                return tc_oai_fail(err, 400, "invalid_request_error", "prompt", NULL,
                                   "'prompt[%zu]' is token %d, outside the vocabulary of %d", i,
                                   (*ids)[i], s->m.vocab);
        return true;
    }
    if (!prompt_bounded(s, q, err))
        return false;
    char *text = NULL;
    size_t *plain = NULL, n_plain = 0;
    const char *p = q->prompt;
    if (q->kind == TC_OAI_CHAT) {
        if (!s->m.chat)
            return tc_oai_fail(
                err, 400, "invalid_request_error", "messages", NULL,
                "the model has no chat template; restart the server with "
                "--template chatml|llama3|llama2|zephyr|mistral|mistral-v3|mistral-tekken|"
                "mistral-v7, or use /v1/completions");
        /* What the messages say is text: a control token written in one ("<|im_end|>")
         * cannot end its turn and forge another, unless the server allows it. */
        /* With tool_choice none the tools are left out of the prompt, as vLLM does: the
         * model is not to call them. */
        const char *tools = q->tool_choice != TC_OAI_TOOLS_NONE ? q->tools_text : NULL;
        tc_status st = tc_chat_format_tools(s->m.chat, q->messages, q->calls, q->n_messages, tools,
                                            q->add_generation_prompt, &text, &plain, &n_plain);
        if (st == TC_ERR_UNSUPPORTED)
            return tc_oai_fail(err, 400, "invalid_request_error", tools ? "tools" : "messages",
                               NULL, "this model cannot take tools: %s", tc_last_error());
        if (st != TC_OK)
            return tc_oai_fail(err, 400, "invalid_request_error", "messages", NULL,
                               "the messages cannot be rendered in the chat template: %s",
                               tc_last_error());
        p = text;
    }
    tc_encode_options eo = { .special = true,
                             .add_bos = add_bos,
                             .plain = plain,
                             .n_plain = s->o.allow_special_in_messages ? 0 : n_plain,
                             .max_ids = max_ids,
                             .cancelled = encode_cancelled,
                             .user = &fd };
    tc_status st = tc_tokenizer_encode_with(s->m.tok, p, strlen(p), &eo, ids, n);
    tc_host_free(text);
    tc_host_free(plain);
    if (st == TC_ERR_CANCELLED) {
        err->status = 0;
        return false;
    }
    if (st == TC_ERR_LIMIT)
        return tc_oai_fail(err, 400, "invalid_request_error", what, "context_length_exceeded",
                           "this model's context holds %lld tokens; the %s have more",
                           (long long)s->m.context, what);
    if (st != TC_OK)
        return tc_oai_fail(err, 400, "invalid_request_error", what, NULL,
                           "the prompt cannot be tokenized: %s", tc_last_error());
    if (*n == 0 && !allow_empty)
        return tc_oai_fail(err, 400, "invalid_request_error", what, NULL, "the prompt is empty");
    return true;
}

/* Check, tokenize and submit; on success the job is on the server's list. */
/* The text a request's grammar is compiled from, as the key of the server's shared grammars
 * (malloc'd, *len bytes; NULL when out of memory): the schema as sent (its properties' order
 * is the documents'), or the tools with what tool_choice asks. */
static char *grammar_key(const tc_oai_request *q, bool tools, size_t *len)
{
    json_t *k = tools ? json_pack("{s:s, s:i, s:s?, s:b, s:O}", "kind", "tools", "choice",
                                  (int)q->tool_choice, "name", q->tool_name, "parallel",
                                  q->parallel_tool_calls, "tools", q->tools)
                      : json_pack("{s:s, s:O?}", "kind", q->json_schema ? "schema" : "object",
                                  "schema", q->json_schema);
    char *text = k ? json_dumps(k, JSON_COMPACT) : NULL;
    json_decref(k);
    *len = text ? strlen(text) : 0;
    return text;
}

static bool submit(tc_server *s, job *j, tc_oai_error *err)
{
    tc_oai_request *q = &j->req;
    if (q->model && strcmp(q->model, s->o.model_id))
        return tc_oai_fail(err, 404, "invalid_request_error", "model", "model_not_found",
                           "the model '%.200s' does not exist; this server has '%.200s'", q->model,
                           s->o.model_id);
    int32_t *ids = NULL;
    size_t n = 0;
    /* A prompt that fills the context is refused whatever its length, so tokenising stops
     * there. */
    if (!prompt_tokens(s, q, true, (size_t)s->m.context - 1, false, j->fd, &ids, &n, err)) {
        tc_host_free(ids);
        return false;
    }
    const char *what = q->kind == TC_OAI_CHAT ? "messages" : "prompt";
    for (int i = 0; i < q->n_bias; i++)
        if (q->bias_ids[i] >= s->m.vocab) {
            tc_host_free(ids);
            return tc_oai_fail(err, 400, "invalid_request_error", "logit_bias", NULL,
                               "'logit_bias' has token %d, outside the vocabulary of %d",
                               q->bias_ids[i], s->m.vocab);
        }
    bool explicit_max = q->max_tokens > 0 &&
                        !(q->kind == TC_OAI_COMPLETION && !json_object_get(q->root, "max_tokens"));
    int64_t max = q->max_tokens;
    if ((int64_t)n >= s->m.context) {
        tc_host_free(ids);
        return tc_oai_fail(err, 400, "invalid_request_error", what, "context_length_exceeded",
                           "this model's context holds %lld tokens; the %s have %zu",
                           (long long)s->m.context, what, n);
    }
    if (explicit_max && (int64_t)n + max > s->m.context) {
        tc_host_free(ids);
        return tc_oai_fail(
            err, 400, "invalid_request_error", "max_tokens", "context_length_exceeded",
            "this model's context holds %lld tokens; you asked for %lld (%zu in "
            "the %s, %lld to generate)",
            (long long)s->m.context, (long long)((int64_t)n + max), n, what, (long long)max);
    }
    if (max > s->m.context - (int64_t)n)
        max = s->m.context - (int64_t)n;
    tc_request r = { .prompt = ids,
                     .n_prompt = (int64_t)n,
                     .max_tokens = max,
                     .n = q->n,
                     .sample = q->sample,
                     .stop = q->stop,
                     .n_stop = q->n_stop,
                     .ignore_eos = q->ignore_eos,
                     .logprobs = q->logprobs,
                     .top_logprobs = q->top_logprobs,
                     .bias_ids = q->bias_ids,
                     .bias = q->bias,
                     .n_bias = q->n_bias,
                     .callback = tc__job_event,
                     .user = j };
    bool tool_calls = q->kind == TC_OAI_CHAT && q->tool_choice != TC_OAI_TOOLS_NONE;
    if (tool_calls && (q->json_object || q->json_schema)) {
        tc_host_free(ids);
        return tc_oai_fail(err, 400, "invalid_request_error", "response_format", NULL,
                           "'response_format' with tools is not supported; use tool_choice "
                           "\"none\" or leave response_format out");
    }
    if (tool_calls && !tc__tool_format_of(s->m.chat, &j->tool_format)) {
        tc_host_free(ids);
        return tc_oai_fail(err, 400, "invalid_request_error", "tools", NULL,
                           "this model's chat template has no tool calling; use tool_choice "
                           "\"none\" to send the conversation without the tools");
    }
    if (tool_calls) {
        /* The template renders tools (checked as the prompt was made), so it has a format. */
        j->tools = calloc((size_t)j->n, sizeof *j->tools);
        bool ok = j->tools != NULL;
        for (int i = 0; ok && i < j->n; i++)
            ok = (j->tools[i] = tc__tool_parser_create(
                      &j->tool_format,
                      q->parallel_tool_calls && q->tool_choice != TC_OAI_TOOLS_NAMED)) != NULL;
        size_t klen = 0;
        char *key = ok && tc__tool_grammar_needed(q) ? grammar_key(q, true, &klen) : NULL;
        r.grammar = key ? tc__grammars_get(s->grammars, key, klen) : NULL;
        if (!r.grammar &&
            (!ok || !tc__tool_grammar(q, &j->tool_format, s->m.tok, &r.grammar, err))) {
            free(key);
            tc_host_free(ids);
            return ok ? false : tc_oai_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        }
        if (key && r.grammar)
            r.grammar = tc__grammars_put(s->grammars, key, klen, r.grammar);
        free(key);
    }
    if (q->json_object || q->json_schema) {
        char why[320];
        size_t klen = 0;
        char *key = grammar_key(q, false, &klen);
        r.grammar = key ? tc__grammars_get(s->grammars, key, klen) : NULL;
        if (!r.grammar) {
            r.grammar = tc_schema_grammar(q->json_schema, s->m.tok, why, sizeof why);
            if (r.grammar && key)
                r.grammar = tc__grammars_put(s->grammars, key, klen, r.grammar);
        }
        free(key);
        if (!r.grammar) {
            tc_host_free(ids);
            return tc_oai_fail(err, 400, "invalid_request_error",
                               q->json_schema ? "response_format.json_schema.schema"
                                              : "response_format",
                               NULL, "the response format cannot be enforced: %s", why);
        }
    }
    if (!q->seed_set) {
        uint64_t seed;
        if (getentropy(&seed, sizeof seed) != 0)
            seed = (uint64_t)(tc_host_seconds() * 1e9);
        r.sample.seed = seed;
    }
    /* On the list before the engine can call back. */
    pthread_mutex_lock(&s->mu);
    bool stopping = s->stopping;
    if (!stopping) {
        j->next = s->jobs;
        if (s->jobs)
            s->jobs->prev = j;
        s->jobs = j;
        s->n_jobs++;
    }
    pthread_mutex_unlock(&s->mu);
    if (stopping) {
        tc_host_free(ids);
        tc_grammar_unref(r.grammar);
        return tc_oai_fail(err, 503, "server_error", NULL, "shutting_down",
                           "the server is shutting down");
    }
    pthread_mutex_lock(&j->mu);
    tc_status st = tc_engine_submit(s->m.engine, &r, &j->id);
    j->submitted = st == TC_OK;
    pthread_mutex_unlock(&j->mu);
    tc_host_free(ids);
    tc_grammar_unref(r.grammar); /* the engine holds its own reference */
    if (st != TC_OK) {
        tc__job_unlink(s, j);
        if (st == TC_ERR_LIMIT)
            return tc_oai_fail(err, 503, "server_error", NULL, "queue_full",
                               "the server is busy: its queue is full; retry later");
        if (st == TC_ERR_INVALID_ARGUMENT)
            return tc_oai_fail(err, 400, "invalid_request_error", NULL, NULL, "%s",
                               tc_last_error());
        return tc_oai_fail(err, 500, "server_error", NULL, NULL, "%s", tc_last_error());
    }
    pthread_mutex_lock(&s->mu);
    s->met.prompt_tokens += n;
    pthread_mutex_unlock(&s->mu);
    return true;
}

enum MHD_Result tc__handle_completion(tc_server *s, struct MHD_Connection *c, const char *route,
                                      tc_oai_kind kind, const char *body, size_t len)
{
    tc_oai_request q;
    tc_oai_error err;
    if (!tc_oai_parse(kind, body, len, &q, &err)) {
        tc_oai_request_free(&q);
        return tc__send_error(s, c, route, &err, NULL);
    }
    job *j = tc__job_new(s, q.n);
    if (!j) {
        tc_oai_request_free(&q);
        return tc__send_fail(s, c, route, 500, "server_error", NULL, NULL, "out of memory");
    }
    j->req = q;
    uint64_t rid;
    pthread_mutex_lock(&s->mu);
    s->n_busy++;
    rid = ++s->next_rid;
    pthread_mutex_unlock(&s->mu);
    snprintf(j->rid, sizeof j->rid, "%s-%016llx", kind == TC_OAI_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)(rid * 0x9e3779b97f4a7c15ull));
    const union MHD_ConnectionInfo *ci =
        s->mhd.get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : -1;
    if (!submit(s, j, &err)) {
        tc__job_release(j);
        if (err.status == 0)
            return client_left(s);
        return tc__send_error(s, c, route, &err, NULL);
    }
    if (j->req.stream) {
        struct MHD_Response *r = s->mhd.create_response_from_callback(
            MHD_SIZE_UNKNOWN, 4096, tc__stream_read, j, tc__stream_free);
        if (!r) {
            tc__job_release(j);
            return MHD_NO;
        }
        s->mhd.add_response_header(r, "Content-Type", "text/event-stream");
        s->mhd.add_response_header(r, "Cache-Control", "no-cache");
        tc__count_status(s, route, 200);
        enum MHD_Result ret = s->mhd.queue_response(c, 200, r);
        s->mhd.destroy_response(r);
        return ret;
    }
    if (!tc__job_collect(j)) {
        pthread_mutex_lock(&s->mu);
        s->met.disconnects++;
        pthread_mutex_unlock(&s->mu);
        tc__job_release(j);
        return MHD_NO; /* the client is gone: close */
    }
    enum MHD_Result ret;
    bool cancelled = false, failed = false;
    for (int i = 0; i < j->n; i++) {
        cancelled |= j->finish[i] == TC_FINISH_CANCELLED;
        failed |= j->finish[i] == TC_FINISH_ERROR;
    }
    if (failed)
        ret = tc__send_fail(s, c, route, 500, "server_error", NULL, NULL, "%s", j->error);
    else if (cancelled)
        ret = tc__send_fail(s, c, route, 503, "server_error", NULL, "shutting_down",
                            "the server is shutting down");
    else
        ret = tc__send_json(s, c, route, 200, tc__job_json(j));
    tc__job_release(j);
    return ret;
}

enum MHD_Result tc__handle_tokenize(tc_server *s, struct MHD_Connection *c, const char *route,
                                    const char *body, size_t len)
{
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return tc__send_fail(s, c, route, 400, "invalid_request_error", NULL, NULL,
                             "the body must be a JSON object with 'prompt' or 'messages'%s%s",
                             root ? "" : ": ", root ? "" : je.text);
    }
    tc_oai_request q;
    tc_oai_error err;
    bool chat = json_object_get(root, "messages") != NULL;
    json_t *special = json_object_get(root, "add_special_tokens");
    bool bad_special = special && !json_is_boolean(special), add_bos = !json_is_false(special);
    json_decref(root);
    if (bad_special)
        return tc__send_fail(s, c, route, 400, "invalid_request_error", "add_special_tokens", NULL,
                             "'add_special_tokens' must be a boolean");
    if (!tc_oai_parse(chat ? TC_OAI_CHAT : TC_OAI_COMPLETION, body, len, &q, &err)) {
        tc_oai_request_free(&q);
        return tc__send_error(s, c, route, &err, NULL);
    }
    int32_t *ids = NULL;
    size_t n = 0;
    json_t *out = NULL;
    const union MHD_ConnectionInfo *ci =
        s->mhd.get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (prompt_tokens(s, &q, add_bos, 0, true, ci ? ci->connect_fd : -1, &ids, &n, &err)) {
        json_t *toks = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(toks, json_integer(ids[i]));
        out = json_pack("{s:I,s:I,s:o}", "count", (json_int_t)n, "max_model_len",
                        (json_int_t)s->m.context, "tokens", toks);
    }
    tc_host_free(ids);
    tc_oai_request_free(&q);
    if (!out && err.status == 0)
        return client_left(s);
    return out ? tc__send_json(s, c, route, 200, out) : tc__send_error(s, c, route, &err, NULL);
}

enum MHD_Result tc__handle_detokenize(tc_server *s, struct MHD_Connection *c, const char *route,
                                      const char *body, size_t len)
{
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    json_t *toks = root ? json_object_get(root, "tokens") : NULL;
    if (!json_is_array(toks)) {
        json_decref(root);
        return tc__send_fail(s, c, route, 400, "invalid_request_error", "tokens", NULL,
                             "the body must be a JSON object with 'tokens', an array of token ids");
    }
    size_t i;
    json_t *t;
    tc_detok d = { 0 };
    char buf[512];
    char *text = NULL;
    size_t text_len = 0;
    json_array_foreach(toks, i, t)
    {
        if (!json_is_integer(t) || json_integer_value(t) < 0 ||
            json_integer_value(t) >= s->m.vocab) {
            free(text);
            json_decref(root);
            return tc__send_fail(s, c, route, 400, "invalid_request_error", "tokens", NULL,
                                 "'tokens[%zu]' must be a token id in [0, %d)", i, s->m.vocab);
        }
        size_t w =
            tc_detok_push(s->m.tok, &d, (int32_t)json_integer_value(t), true, buf, sizeof buf);
        char *nt = realloc(text, text_len + w + sizeof buf);
        if (!nt)
            break;
        text = nt;
        memcpy(text + text_len, buf, w);
        text_len += w;
    }
    size_t w = tc_detok_flush(&d, buf, sizeof buf);
    char *nt = realloc(text, text_len + w + 1);
    if (nt) {
        text = nt;
        memcpy(text + text_len, buf, w);
        text_len += w;
    }
    json_decref(root);
    json_t *out = json_pack("{s:o}", "prompt", tc__json_text(text ? text : "", text_len));
    free(text);
    return tc__send_json(s, c, route, 200, out);
}

json_t *tc__model_json(const tc_server *s)
{
    return json_pack("{s:s,s:s,s:I,s:s,s:I}", "id", s->o.model_id, "object", "model", "created",
                     (json_int_t)0, "owned_by", "thincuda", "max_model_len",
                     (json_int_t)s->m.context);
}
