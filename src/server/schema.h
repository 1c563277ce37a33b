/* JSON schemas (response_format json_schema, and json_object) as grammars for constrained
 * decoding. Supported: type (one or a list), properties, required, additionalProperties
 * (false, true or absent: only the listed properties are written, in their order), items,
 * minItems, maxItems, minLength, maxLength (up to 256), enum, const, anyOf, $ref to #/$defs
 * or #/definitions (recursion included), format date, time and date-time; annotations
 * (title, description, default, examples, ...) are ignored. Any other keyword is refused by
 * name. Numbers have at most 16 digits before and after the point, and whitespace between
 * tokens is at most one space, so that a model cannot pad or lengthen a document for ever. */
#ifndef TC_SERVER_SCHEMA_H
#define TC_SERVER_SCHEMA_H
#include <stddef.h>

#include <jansson.h>

#include "inference/grammar.h"
#include "model/tokenizer.h"

/* The grammar of documents valid under `schema` (NULL: any JSON object, for json_object),
 * for tokenizer tok; NULL with a sentence in why (naming the keyword and where it is) when
 * the schema uses what is not supported or is malformed, or memory runs out. */
tc_grammar *tc_schema_grammar(json_t *schema, const tc_tokenizer *tok, char *why, size_t cap);
/* Add the rules of documents valid under `schema` (NULL: any JSON object) to g, which is being
 * built, and return the rule's id; -1 with a sentence in why as tc_schema_grammar says (rules
 * already added then stay, unreferenced). */
int tc__schema_rule(tc_grammar *g, json_t *schema, char *why, size_t cap);

#endif /* TC_SERVER_SCHEMA_H */
