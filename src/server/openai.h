/* Parsing and validating OpenAI-style request bodies (chat completions and completions).
 *
 * Everything the body says is checked here, before a sequence exists: types, ranges, the
 * parameters this server does not implement. A failure fills a tc_oai_error with the HTTP
 * status and the OpenAI error fields (message, type, param, code) naming what is wrong. */
#ifndef TC_SERVER_OPENAI_H
#define TC_SERVER_OPENAI_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/chat.h"
#include "ops/ops.h"

typedef enum tc_oai_kind { TC_OAI_CHAT, TC_OAI_COMPLETION } tc_oai_kind;

/* What tool_choice asks: no call, the model's choice, at least one call, or one call of a
 * named function. */
typedef enum tc_oai_tool_choice {
    TC_OAI_TOOLS_NONE,
    TC_OAI_TOOLS_AUTO,
    TC_OAI_TOOLS_REQUIRED,
    TC_OAI_TOOLS_NAMED,
} tc_oai_tool_choice;

enum {
    TC_OAI_MAX_STOP = 4,       /* stop strings, as OpenAI allows */
    TC_OAI_MAX_STOP_LEN = 256, /* bytes each */
    TC_OAI_MAX_N = 16,         /* choices per request */
    TC_OAI_MAX_BIAS = 1024,    /* logit_bias entries */
    TC_OAI_MAX_TOOLS = 128,    /* tools, and tool calls of one message, as OpenAI allows */
    TC_OAI_MAX_NAME = 64,      /* bytes of a function's name ([A-Za-z0-9_-]) */
};

typedef struct tc_oai_error {
    int status;     /* HTTP status */
    char type[32];  /* "invalid_request_error", "server_error", ... */
    char param[64]; /* the parameter at fault; empty: null */
    char code[48];  /* empty: null */
    char message[512];
} tc_oai_error;

typedef struct tc_oai_request {
    tc_oai_kind kind;
    void *root;        /* the parsed JSON (json_t), which owns the strings below */
    const char *model; /* NULL when not given */
    /* Chat: the messages, each content the concatenation of its text parts (owned). */
    tc_chat_message *messages;
    size_t n_messages;
    /* [n_messages] each message's tool calls (NULL when no message makes one; owned, their
     * strings owned by root). */
    tc_chat_calls *calls;
    /* Tools (chat): the "tools" array (a json_t owned by root; NULL: none) and its JSON text
     * (owned), what tool_choice asks (NONE when there are no tools), the function it names,
     * and whether one reply may make several calls. */
    void *tools;
    size_t n_tools;
    char *tools_text;
    tc_oai_tool_choice tool_choice;
    const char *tool_name;
    bool parallel_tool_calls;
    bool add_generation_prompt;
    /* Completions: a prompt as text, or as token ids. */
    const char *prompt;
    int32_t *prompt_tokens;
    size_t n_prompt_tokens;
    int64_t max_tokens; /* 0: up to the context */
    int n;
    tc_sample_params sample;
    bool seed_set;
    const char *stop[TC_OAI_MAX_STOP];
    int n_stop;
    bool stream, include_usage;
    bool logprobs;
    int top_logprobs;
    bool json_object; /* response_format {"type": "json_object"}: any JSON object */
    /* response_format {"type": "json_schema", "json_schema": {"schema": ...}}: the schema
     * (a json_t owned by root), enforced by constrained decoding. NULL: none. */
    void *json_schema;
    bool ignore_eos;
    /* logit_bias: token ids (checked against the vocabulary by the server) and biases in
     * [-100, 100] (owned). */
    int32_t *bias_ids;
    float *bias;
    int n_bias;
} tc_oai_request;

/* Parse `body` (len bytes, any content) as a request of `kind` into *out (free it with
 * tc_oai_request_free, also after a failure). False with *err filled when it is not valid. */
bool tc_oai_parse(tc_oai_kind kind, const char *body, size_t len, tc_oai_request *out,
                  tc_oai_error *err);
void tc_oai_request_free(tc_oai_request *r);

/* Fill *err (printf-style message). Returns false, for `return tc_oai_fail(...)`. */
bool tc_oai_fail(tc_oai_error *err, int status, const char *type, const char *param,
                 const char *code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#endif /* TC_SERVER_OPENAI_H */
