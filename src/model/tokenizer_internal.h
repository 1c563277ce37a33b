/* Shared by the tokenizer's files: its layout and the pieces the loaders build it with
 * (tokenizer.c encodes and decodes, tokenizer_load.c reads GGUF and tokenizer.json). */
#ifndef TC_TOKENIZER_INTERNAL_H
#define TC_TOKENIZER_INTERNAL_H
#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>
#include "model/tokenizer.h"

/* GGUF token types (llama.cpp's llama_token_type). */
enum { TOKEN_NORMAL = 1, TOKEN_UNKNOWN = 2, TOKEN_CONTROL = 3, TOKEN_USER = 4, TOKEN_BYTE = 6 };

#define MAX_REGEX 3

typedef struct token {
    const char *text; /* as written in the vocabulary (byte-level code points), NUL-terminated */
    uint32_t text_len;
    const char *bytes; /* what it decodes to */
    uint32_t bytes_len;
    uint8_t type;
} token;

struct tc_tokenizer {
    int32_t n_vocab, bos, eos;
    bool add_bos, ignore_merges;
    /* Ordinary text is normalised to Unicode NFC before pre-tokenisation (tokenizer.json's
     * normalizer NFC, as Qwen2's; a GGUF vocabulary under llama.cpp's "qwen2"). */
    bool nfc;
    /* SentencePiece-style BPE (tokenizer.json with byte_fallback): spaces become U+2581,
     * which is prepended to a segment by `prepend` (never, the text's first segment, every
     * segment); characters start as symbols, unknown ones fall back to <0xXX> byte tokens;
     * decoding drops `strip` leading spaces of the text. */
    bool spm;
    enum { PREPEND_NEVER, PREPEND_FIRST, PREPEND_ALWAYS } prepend;
    bool metaspace; /* Metaspace prepends only where the segment does not start with a space */
    uint32_t *score_rank; /* GGUF SentencePiece: merges by the merged piece's score, highest
                             first (rank of each id in descending score order), no merge list */
    int strip;
    int32_t unk;
    token *tokens;  /* [n_vocab] */
    char *arena;    /* texts and bytes */
    int32_t *index; /* open addressing over texts: token ids, -1 empty; [index_cap] */
    size_t index_cap;
    uint64_t *pair_keys; /* (left << 32 | right) + 1, 0 empty; [pair_cap] */
    uint64_t *pair_vals; /* rank << 32 | merged id */
    size_t pair_cap;
    int32_t byte_token[256]; /* the token of each single byte */
    uint32_t byte_cp[256];   /* GPT-2's byte -> code point map */
    int16_t cp_byte[512];    /* its inverse for code points below 512, -1 elsewhere */
    /* The texts of the control and user-defined tokens as a trie, so that one pass over a
     * text finds every special token in it: node 0 is the root, an edge (node, byte) is the
     * key (node << 8 | byte) + 1 of an open-addressing table (0 empty) holding the child. */
    int32_t *trie_token; /* [n_trie] the special token whose text ends at the node, or -1 */
    int32_t n_trie;
    uint64_t *trie_keys; /* [trie_cap] */
    int32_t *trie_child; /* [trie_cap] */
    size_t trie_cap;
    int32_t trie_root[256]; /* the root's children by byte, -1 none (most bytes start none) */
    pcre2_code *regex[MAX_REGEX];
    int n_regex;
    struct tc__vocab_trie *vocab_trie; /* tokenizer_trie.c's, built on first use */
};

/* The id of the token written as s[0..n), or -1. */
int32_t tc__tok_find(const tc_tokenizer *t, const char *s, size_t n);
/* Add a pre-tokenisation regex (PCRE2, UTF and Unicode properties, JIT when available). */
tc_status tc__tok_add_regex(tc_tokenizer *t, const char *pattern);
/* Build the vocabulary (texts and types by id; a missing id has an empty text), its index,
 * the merges ("left right", rank = position) and the special-token list. t->spm must be set. */
tc_status tc__tok_build(tc_tokenizer *t, int32_t n, const tc_gguf_str *strs, const uint8_t *types,
                        uint64_t n_merges, const tc_gguf_str *merges);

/* Whether NFC normalisation is available (libutf8proc loads; a warning is logged once when it
 * does not). */
bool tc__nfc_available(void);
/* s[0..n) in Unicode NFC: true with *out (freed with free(), *n_out bytes) when that differs
 * from s; false when s is NFC already, is not valid UTF-8, or libutf8proc is missing. */
bool tc__nfc(const uint8_t *s, size_t n, uint8_t **out, size_t *n_out);

#endif /* TC_TOKENIZER_INTERNAL_H */
