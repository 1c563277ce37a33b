/* Chat templates: the Jinja templates that models ship (tokenizer_config.json's or GGUF's
 * tokenizer.chat_template) are recognised by their markers and applied natively. */
#ifndef TC_CHAT_H
#define TC_CHAT_H
#include <stdbool.h>
#include <stddef.h>
#include "tc_bindings.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef enum tc_chat_kind {
    TC_CHAT_CHATML = 1, /* <|im_start|>role ... <|im_end|> (SmolLM2, Qwen) */
    TC_CHAT_LLAMA3,     /* <|start_header_id|>role<|end_header_id|> ... <|eot_id|> */
    TC_CHAT_LLAMA2,     /* <s>[INST] <<SYS>> ... [/INST] */
    TC_CHAT_ZEPHYR,     /* <|user|> ... </s> (Zephyr, TinyLlama) */
    TC_CHAT_MISTRAL,    /* <s> [INST] ... [/INST] answer</s> (Mistral 7B Instruct) */
    /* <s>[INST] ...[/INST] answer</s> with [AVAILABLE_TOOLS], [TOOL_CALLS] and [TOOL_RESULTS]
     * (Mistral's v3 tokenizers: 7B Instruct v0.3, Nemo; the system message in the last turn) */
    TC_CHAT_MISTRAL3,
    /* <s>[SYSTEM_PROMPT]...[/SYSTEM_PROMPT][INST]...[/INST]answer</s> (Mistral's v7 Tekken:
     * Mistral Small 3, with its default system message) */
    TC_CHAT_MISTRAL7,
} tc_chat_kind;

typedef struct tc_chat_template {
    tc_chat_kind kind;
    /* Used when the conversation has no system message ("" none). */
    char default_system[1024];
    /* MISTRAL7: where in default_system today's date goes (strftime_now("%Y-%m-%d") in the
     * template; -1 none). */
    int today_at;
    /* Llama 3: the 3.1+ format (a system turn that states the knowledge cut-off and the date,
     * and JSON tool calls); false: 3.0's, which has no tools. */
    bool llama31;
    bool today; /* llama31: today's date (Llama 3.2's strftime_now) instead of 26 Jul 2024 */
    /* Mistral: the first template of Mistral 7B Instruct v0.1 ("<s>[INST] q [/INST]a</s>",
     * no system message) instead of the one v0.1 and v0.2 ship now ("<s> [INST] system\n\nq
     * [/INST] a</s>"); eos_space: that first template's space after each answer's </s>. */
    bool mistral_legacy, eos_space;
    /* MISTRAL3: "[INST] " and " answer" with a space as v0.3's SentencePiece template writes
     * them (false: Tekken's "[INST]" and "answer", Nemo); trim: the answer trimmed (v0.3). */
    bool spaced, trim;
} tc_chat_template;

typedef struct tc_chat_message {
    const char *role;    /* "system", "user", "assistant" or "tool" (a tool's result) */
    const char *content; /* NULL only for an assistant message that makes tool calls */
    /* A tool message: the id of the call it answers (Mistral's v3 template writes it; NULL
     * none). */
    const char *tool_call_id;
} tc_chat_message;

/* A call an assistant message made (OpenAI's tool_calls[i]). */
typedef struct tc_chat_tool_call {
    const char *id;        /* "call_..." (the templates do not write it) */
    const char *name;      /* the function's name */
    const char *arguments; /* the arguments: the JSON text of an object */
} tc_chat_tool_call;

/* The tool calls of one message (n 0: none). */
typedef struct tc_chat_calls {
    const tc_chat_tool_call *call; /* [n] */
    size_t n;
} tc_chat_calls;

/* Recognise a template's source. An unrecognised one is TC_ERR_UNSUPPORTED naming the
 * fallback ("use --template chatml|llama3|llama2|zephyr|mistral|mistral-v3|mistral-tekken|
 * mistral-v7"). */
TC_API tc_status tc_chat_template_detect(const char *source, size_t len, tc_chat_template *out);
/* A template by name ("chatml", "llama3", "llama3.1", "llama2", "zephyr", "mistral",
 * "mistral-v3" (7B v0.3), "mistral-tekken" (Nemo), "mistral-v7" (Small 3, with no default
 * system message)), or TC_ERR_NOT_FOUND. */
TC_API tc_status tc_chat_template_named(const char *name, tc_chat_template *out);
/* Render messages as the model's prompt, ending with the assistant's turn opening when
 * add_generation_prompt. *out (NUL-terminated) is freed with tc_host_free. The prompt starts
 * with the BOS text where the template writes it, so the tokenizer must not add another. */
TC_API tc_status tc_chat_format(const tc_chat_template *t, const tc_chat_message *msgs, size_t n,
                                bool add_generation_prompt, char **out);
/* Render as tc_chat_format does and say where the messages' own text lies: *plain (freed
 * with tc_host_free; NULL when none) gets *n_plain ranges [plain[2i], plain[2i + 1]) of *out,
 * ascending, so that special tokens written by a user can be kept as text while the
 * template's markers stay special (tc_encode_options.plain). */
TC_API tc_status tc_chat_format_spans(const tc_chat_template *t, const tc_chat_message *msgs,
                                      size_t n, bool add_generation_prompt, char **out,
                                      size_t **plain, size_t *n_plain);
/* Whether the template renders tools, tool calls and tool results: ChatML in the manner of
 * Hermes and Qwen 2.5 (<tools> in the system turn, <tool_call> and <tool_response> blocks),
 * Llama 3.1+ (tools in the first user turn, JSON calls, results in ipython turns) and
 * Mistral v3 ([AVAILABLE_TOOLS] before the last user turn, [TOOL_CALLS] arrays with 9-character
 * ids, [TOOL_RESULTS] naming the call). */
TC_API bool tc_chat_template_tools(const tc_chat_template *t);
/* Render as tc_chat_format_spans does, with tool definitions and calls: calls (NULL: none) holds
 * each message's tool calls, tools is the JSON text of an array of OpenAI tools ({"type":
 * "function", "function": {...}}), NULL for none. Tools, calls
 * and results are written as transformers' apply_chat_template writes them with the model's
 * own template (JSON as Python's json.dumps, in the order given). A template without tool
 * support (tc_chat_template_tools) is TC_ERR_UNSUPPORTED when tools, calls or results are
 * given. plain may be NULL when the ranges are not wanted. */
TC_API tc_status tc_chat_format_tools(const tc_chat_template *t, const tc_chat_message *msgs,
                                      const tc_chat_calls *calls, size_t n, const char *tools,
                                      bool add_generation_prompt, char **out, size_t **plain,
                                      size_t *n_plain);

#ifdef __cplusplus
}
#endif
#endif /* TC_CHAT_H */
