/* libFuzzer harness for the GGUF reader and what reads its metadata first: the tokenizer
 * builder and the Llama configuration. Any input must give TC_OK or a clean error; ASan
 * and UBSan catch the rest. Build and run: tools/fuzz gguf [seconds]. */
#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"
#include "model/llama.h"
#include "model/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tc_gguf g;
    if (tc_gguf_parse(&g, data, size) != TC_OK)
        return 0;
    tc_llama_config c;
    (void)tc_llama_config_from_gguf(&g, &c);
    tc_tokenizer *t;
    if (tc_tokenizer_from_gguf(&g, &t) == TC_OK) {
        int32_t *ids;
        size_t n;
        static const char text[] = "Hello <|im_start|> world 123 \xe4\xb8\xad\xff";
        if (tc_tokenizer_encode(t, text, sizeof text - 1, true, true, &ids, &n) == TC_OK) {
            tc_detok d = { 0 };
            char out[4096];
            for (size_t i = 0; i < n; i++)
                (void)tc_detok_push(t, &d, ids[i], true, out, sizeof out);
            tc_host_free(ids);
        }
        tc_tokenizer_destroy(t);
    }
    for (uint64_t i = 0; i < g.n_kv; i++)
        if (g.kv[i].type == TC_GGUF_ARRAY && g.kv[i].array_type == TC_GGUF_STRING &&
            g.kv[i].array_len < 100000) {
            tc_gguf_str *s = tc_host_alloc(sizeof *s * (g.kv[i].array_len + 1));
            if (s) {
                tc_gguf_strings(&g.kv[i], s);
                tc_host_free(s);
            }
        }
    tc_gguf_close(&g);
    return 0;
}
