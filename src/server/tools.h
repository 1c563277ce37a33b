/* Tool calling: how a chat template's family writes a call, the grammar that makes the model
 * write valid calls when they are forced or strict, and the parser that turns a choice's text
 * back into OpenAI tool_calls, incrementally, for streamed deltas and whole messages alike. */
#ifndef TC_SERVER_TOOLS_H
#define TC_SERVER_TOOLS_H
#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "inference/grammar.h"
#include "model/chat.h"
#include "server/openai.h"

/* A call as the template writes it: open NAME mid ARGUMENTS close, calls separated by sep.
 * The parser reads them leniently after open's first word, which it matches exactly
 * (whitespace outside strings may differ there); the grammar makes the model write them
 * exactly. A list format (Mistral's JSON array) opens later calls with
 * next instead of open and ends the list with end; its parser skips members a call object has
 * after its arguments (the "id" the template writes into earlier calls). */
typedef struct tc__tool_format {
    const char *open;  /* ChatML: "<tool_call>\n{\"name\": \"" */
    const char *mid;   /* "\", \"arguments\": " */
    const char *close; /* "}\n</tool_call>" */
    const char *sep;   /* "\n" */
    const char *next;  /* a later call's opening in a list (NULL: open, not a list) */
    const char *end;   /* what closes a list ("]") */
    int id_len;        /* the calls' ids: 0 for OpenAI's "call_" and 24 letters and digits,
                          else this many letters and digits (Mistral's template takes 9) */
} tc__tool_format;

/* The call format of a template family; false when the template has no tool calling. */
bool tc__tool_format_of(const tc_chat_template *t, tc__tool_format *f);

/* The grammar for the request's tool calls, or *out NULL when none is needed (tool_choice
 * auto without a strict function, or none). Forced calls (required, a named function) must be
 * written from the first byte; with auto and a strict function the model may write text, but
 * once it opens a call the call must be valid. Arguments follow each function's parameters
 * schema (a schema that uses what schema.c does not support is a 400 when the function is
 * strict, any JSON object otherwise). False with *err filled on failure. */
bool tc__tool_grammar(const tc_oai_request *q, const tc__tool_format *f, const tc_tokenizer *tok,
                      tc_grammar **out, tc_oai_error *err);
/* Whether the request's tool calls need a grammar (what tc__tool_grammar decides first). */
bool tc__tool_grammar_needed(const tc_oai_request *q);

typedef struct tc__tool_parser tc__tool_parser;

/* A parser for one choice's text; NULL when out of memory. Without parallel, what follows the
 * first call is dropped (parallel_tool_calls false promises one call at most, and a reply
 * not constrained by a grammar may make more). */
tc__tool_parser *tc__tool_parser_create(const tc__tool_format *f, bool parallel);
void tc__tool_parser_destroy(tc__tool_parser *p);
/* Feed the next n bytes of the choice's text. */
void tc__tool_parser_feed(tc__tool_parser *p, const char *text, size_t n);
/* The text has ended: what is held back as a possible call's start becomes content (a call
 * cut short keeps the arguments it has). */
void tc__tool_parser_end(tc__tool_parser *p);
/* The number of calls found so far. */
int tc__tool_parser_calls(const tc__tool_parser *p);
/* What is new since the last drain, as a streamed chat delta needs it: *content the new
 * content text (NULL: none) and *calls the tool_calls entries (NULL: none), the first of each
 * call with its index, id, type and name, later ones with argument fragments. Bytes of an
 * unfinished UTF-8 character wait for the rest, unless the text has ended. */
void tc__tool_parser_drain(tc__tool_parser *p, json_t **content, json_t **calls);
/* The whole message's content (NULL when it is only whitespace around calls) and its
 * tool_calls array (NULL when there is no call). */
void tc__tool_parser_message(const tc__tool_parser *p, json_t **content, json_t **calls);

#endif /* TC_SERVER_TOOLS_H */
