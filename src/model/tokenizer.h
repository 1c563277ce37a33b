/* Tokenizers: byte-level BPE (GPT-2, Llama 3, SmolLM2 pre-tokenisation through PCRE2 with
 * Unicode properties) built from a GGUF vocabulary, special tokens matched in text, and
 * decoding that streams whole UTF-8 characters. */
#ifndef TC_TOKENIZER_H
#define TC_TOKENIZER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "model/gguf.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef struct tc_tokenizer tc_tokenizer;

/* Build the tokenizer stored in a GGUF file (tokenizer.ggml.*: model "gpt2", tokens, merges,
 * token types, bos/eos ids, add_bos_token, pre). An unsupported model or pre-tokeniser is
 * TC_ERR_UNSUPPORTED naming it; inconsistent data is TC_ERR_PARSE. */
TC_API tc_status tc_tokenizer_from_gguf(const tc_gguf *g, tc_tokenizer **out);
/* Build a BPE tokenizer from a Hugging Face tokenizer.json (model BPE, vocab, merges as
 * strings or pairs, added_tokens): byte-level (pre-tokenisers Sequence/Split/Digits/ByteLevel)
 * or SentencePiece-style (byte_fallback; Metaspace or Prepend+Replace, Strip), with its
 * tokenizer_config.json (bos_token, eos_token, add_bos_token; NULL for none). */
TC_API tc_status tc_tokenizer_from_json(const char *tokenizer_json, const char *tokenizer_config,
                                        tc_tokenizer **out);
/* Free the tokenizer; NULL is a no-op. */
TC_API void tc_tokenizer_destroy(tc_tokenizer *t);

/* Tokenise `len` bytes of text (any bytes: invalid UTF-8 is kept, byte by byte). With
 * `special`, control and user-defined tokens written in the text ("<|im_start|>") become
 * their ids (from a GGUF also unknown-type ones such as "<unk>", as llama.cpp matches them); with
 * `add_bos`, the BOS token is prepended when the model asks for one and the text does not already
 * begin with it. *ids (free with tc_host_free) gets *n ids. */
TC_API tc_status tc_tokenizer_encode(const tc_tokenizer *t, const char *text, size_t len,
                                     bool special, bool add_bos, int32_t **ids, size_t *n);
/* What tc_tokenizer_encode_with does beyond tokenising the text. */
typedef struct tc_encode_options {
    bool special; /* control and user-defined tokens written in the text become their ids */
    bool add_bos; /* prepend BOS as tc_tokenizer_encode does */
    /* Byte ranges [plain[2i], plain[2i + 1]) of the text, ascending and not overlapping, where
     * special tokens are plain text even with `special` (what users wrote inside a chat
     * template); a special token must lie wholly outside them to count. */
    const size_t *plain;
    size_t n_plain;
    /* Stop with TC_ERR_LIMIT once the ids outnumber this (a prompt past the context need not
     * be tokenised to its end); 0: no limit. */
    size_t max_ids;
    /* Asked between chunks of the text (every 64 KiB or so): true stops with
     * TC_ERR_CANCELLED (a server's client has gone). NULL: never. */
    bool (*cancelled)(void *user);
    void *user;
} tc_encode_options;

/* Tokenise as tc_tokenizer_encode does, with options. The work is linear in len: special
 * tokens are found in one pass over the text through a trie of their texts (at each byte, a
 * walk no longer than the longest special text), whatever their number and occurrences. */
TC_API tc_status tc_tokenizer_encode_with(const tc_tokenizer *t, const char *text, size_t len,
                                          const tc_encode_options *o, int32_t **ids, size_t *n);
/* The bytes a token stands for (not NUL-terminated; *len bytes), or NULL for an invalid id. */
TC_API const char *tc_tokenizer_piece(const tc_tokenizer *t, int32_t id, size_t *len);
/* Vocabulary size, and the BOS and EOS ids (-1 when the model has none). */
TC_API int32_t tc_tokenizer_vocab(const tc_tokenizer *t);
TC_API int32_t tc_tokenizer_bos(const tc_tokenizer *t);
TC_API int32_t tc_tokenizer_eos(const tc_tokenizer *t);
/* Whether the model prepends BOS to a prompt (tokenizer.ggml.add_bos_token). */
TC_API bool tc_tokenizer_adds_bos(const tc_tokenizer *t);
/* Whether id is a control token (BOS, EOS, <|im_end|>): generation stops on the end ones. */
TC_API bool tc_tokenizer_is_control(const tc_tokenizer *t, int32_t id);
/* The id of a token written exactly as `text`, or -1. */
TC_API int32_t tc_tokenizer_find(const tc_tokenizer *t, const char *text);

/* Streaming decoder: push ids one at a time and receive text that always ends on a whole
 * UTF-8 character; bytes of a character split across tokens wait for the rest. Bytes that can
 * never form a valid character come out as U+FFFD. */
typedef struct tc_detok {
    uint8_t pending[4];
    int n_pending;
    int stripped; /* leading spaces dropped so far (SentencePiece decoders) */
    bool started; /* some text came out */
} tc_detok;
/* Append the text of token id to out (capacity cap, at least 64 + the piece's length) and
 * return the bytes written. Control tokens are written as their text only with `special`. */
TC_API size_t tc_detok_push(const tc_tokenizer *t, tc_detok *d, int32_t id, bool special, char *out,
                            size_t cap);
/* Flush what is pending at the end of the stream (as U+FFFD) and return the bytes written. */
TC_API size_t tc_detok_flush(tc_detok *d, char *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* TC_TOKENIZER_H */
