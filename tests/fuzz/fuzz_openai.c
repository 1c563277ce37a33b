/* libFuzzer harness for the OpenAI request parser: any body parses or fails with an error
 * that has a status, a type and a message; a parsed request's fields are within the ranges
 * the engine accepts; a response_format's schema compiles to a grammar or fails with a
 * reason. Build and run: tools/fuzz openai [seconds]. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/openai.h"
#include "server/schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int kind = 0; kind < 2; kind++) {
        tc_oai_request r;
        tc_oai_error e;
        if (tc_oai_parse((tc_oai_kind)kind, (const char *)data, size, &r, &e)) {
            if (r.n < 1 || r.n > TC_OAI_MAX_N || r.max_tokens < 0 || r.n_stop > TC_OAI_MAX_STOP ||
                r.top_logprobs < 0 || r.top_logprobs > 20 || !(r.sample.temperature >= 0) ||
                (kind == TC_OAI_CHAT && r.n_messages == 0) ||
                (kind == TC_OAI_COMPLETION && !r.prompt && r.n_prompt_tokens == 0))
                abort();
            for (size_t i = 0; i < r.n_messages; i++)
                if (!r.messages[i].role || !r.messages[i].content)
                    abort();
            for (int i = 0; i < r.n_stop; i++)
                if (!r.stop[i][0])
                    abort();
            if (r.json_schema || r.json_object) {
                char why[320] = "";
                tc_grammar *g = tc_schema_grammar(r.json_schema, NULL, why, sizeof why);
                if (!g && !why[0])
                    abort();
                tc_grammar_state_free(g ? tc_grammar_start(g) : NULL);
                tc_grammar_unref(g);
            }
        } else if (e.status < 400 || !e.message[0] || !e.type[0]) {
            abort();
        }
        tc_oai_request_free(&r);
    }
    return 0;
}
