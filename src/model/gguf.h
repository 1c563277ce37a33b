/* GGUF files (llama.cpp's format, versions 2 and 3; docs/gguf.md of ggml): a memory-mapped,
 * fully bounds-checked reader of the metadata and the tensor directory. */
#ifndef TC_GGUF_H
#define TC_GGUF_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tc_bindings.h"
#ifdef __cplusplus
extern "C" {
#endif

/* Metadata value types (gguf_metadata_value_type). */
typedef enum tc_gguf_type {
    TC_GGUF_UINT8 = 0,
    TC_GGUF_INT8 = 1,
    TC_GGUF_UINT16 = 2,
    TC_GGUF_INT16 = 3,
    TC_GGUF_UINT32 = 4,
    TC_GGUF_INT32 = 5,
    TC_GGUF_FLOAT32 = 6,
    TC_GGUF_BOOL = 7,
    TC_GGUF_STRING = 8,
    TC_GGUF_ARRAY = 9,
    TC_GGUF_UINT64 = 10,
    TC_GGUF_INT64 = 11,
    TC_GGUF_FLOAT64 = 12,
} tc_gguf_type;

/* Tensor element types (ggml_type) that the directory may name. */
typedef enum tc_ggml_type {
    TC_GGML_F32 = 0,
    TC_GGML_F16 = 1,
    TC_GGML_Q4_0 = 2,
    TC_GGML_Q4_1 = 3,
    TC_GGML_Q5_0 = 6,
    TC_GGML_Q5_1 = 7,
    TC_GGML_Q8_0 = 8,
    TC_GGML_Q8_1 = 9,
    TC_GGML_Q2_K = 10,
    TC_GGML_Q3_K = 11,
    TC_GGML_Q4_K = 12,
    TC_GGML_Q5_K = 13,
    TC_GGML_Q6_K = 14,
    TC_GGML_Q8_K = 15,
    TC_GGML_IQ2_XXS = 16,
    TC_GGML_IQ2_XS = 17,
    TC_GGML_IQ3_XXS = 18,
    TC_GGML_IQ1_S = 19,
    TC_GGML_IQ4_NL = 20,
    TC_GGML_IQ3_S = 21,
    TC_GGML_IQ2_S = 22,
    TC_GGML_IQ4_XS = 23,
    TC_GGML_I8 = 24,
    TC_GGML_I16 = 25,
    TC_GGML_I32 = 26,
    TC_GGML_I64 = 27,
    TC_GGML_F64 = 28,
    TC_GGML_IQ1_M = 29,
    TC_GGML_BF16 = 30,
    TC_GGML_TQ1_0 = 34,
    TC_GGML_TQ2_0 = 35,
    /* Not ggml types and never read from a file: thincuda's q4_1 with one d and m for 64 or
     * 128 elements (tc_dtype TC_DTYPE_Q4_1_G64, TC_DTYPE_Q4_1_G128), what GPTQ and AWQ groups
     * of 64 and of multiples of 128 are packed into. */
    TC_GGML_Q4_1_G64 = 36,
    TC_GGML_Q4_1_G128 = 37,
} tc_ggml_type;
/* One more than the largest type id the tables know (a bound for tables by type). */
#define TC_GGML_TYPE_LIMIT 38

/* A string inside the mapped file: not NUL-terminated. */
typedef struct tc_gguf_str {
    const char *ptr;
    uint64_t len; /* bytes */
} tc_gguf_str;

/* One metadata entry. For arrays, `data` is the first element and elements of fixed size are
 * packed; string elements are (u64 length, bytes) records (see tc_gguf_strings). */
typedef struct tc_gguf_kv {
    tc_gguf_str key;
    tc_gguf_type type;
    tc_gguf_type array_type; /* arrays only */
    uint64_t array_len;      /* arrays only */
    const uint8_t *data;
} tc_gguf_kv;

typedef struct tc_gguf_tensor {
    tc_gguf_str name;
    int n_dims;
    uint64_t dims[4]; /* dims[0] is the innermost (fastest-varying), as GGUF stores them */
    tc_ggml_type type;
    uint64_t n_elements;
    const void *data; /* inside the mapping, aligned */
    uint64_t bytes;
    /* A Hugging Face folder's quantised matrix opened by tc_hf_open_packed: NULL data, `bytes`
     * of `type` blocks that tc_llama_load packs from the module's parts itself (on the GPU
     * for CUDA). NULL otherwise. */
    const struct tc__hfq_linear *packed;
} tc_gguf_tensor;

typedef struct tc_gguf {
    void *map; /* the mapping (NULL when parsing a caller's buffer) */
    size_t map_bytes;
    uint32_t version;
    uint64_t n_kv;
    tc_gguf_kv *kv; /* [n_kv] */
    uint64_t n_tensors;
    tc_gguf_tensor *tensors; /* [n_tensors] */
    uint64_t alignment;      /* general.alignment, 32 by default */
} tc_gguf;

/* Map `path` and parse it into g. A file that is not GGUF, truncated, or inconsistent (an
 * offset, size or count outside the file, an unknown type) is TC_ERR_PARSE with a sentence
 * naming the file and what is wrong; nothing is kept then. */
TC_API tc_status tc_gguf_open(tc_gguf *g, const char *path);
/* Parse a GGUF image already in memory (kept by the caller while g is used); the fuzz entry. */
TC_API tc_status tc_gguf_parse(tc_gguf *g, const void *buf, size_t bytes);
/* Release what open/parse allocated and unmap the file. Closing a zeroed g is a no-op. */
TC_API void tc_gguf_close(tc_gguf *g);

/* The entry with this key, or NULL. */
TC_API const tc_gguf_kv *tc_gguf_find(const tc_gguf *g, const char *key);
/* The tensor with this name, or NULL. */
TC_API const tc_gguf_tensor *tc_gguf_tensor_find(const tc_gguf *g, const char *name);
/* Typed reads of a scalar entry: false when it is missing or not a number (integers of any
 * width and sign convert; a float read accepts integers). */
TC_API bool tc_gguf_get_i64(const tc_gguf *g, const char *key, int64_t *out);
TC_API bool tc_gguf_get_f64(const tc_gguf *g, const char *key, double *out);
TC_API bool tc_gguf_get_bool(const tc_gguf *g, const char *key, bool *out);
/* A string entry, or false. */
TC_API bool tc_gguf_get_str(const tc_gguf *g, const char *key, tc_gguf_str *out);
/* Fill out[0..array_len) with the elements of a string array (validated when parsed). */
TC_API void tc_gguf_strings(const tc_gguf_kv *kv, tc_gguf_str *out);
/* Element i of a numeric array as a double (the array's type checked by the caller). */
TC_API double tc_gguf_array_number(const tc_gguf_kv *kv, uint64_t i);
/* The ggml type's name ("q4_k"), or "unknown". */
TC_API const char *tc_ggml_type_name(tc_ggml_type t);
/* Elements per block and bytes per block of a ggml type; false for types we do not know. */
TC_API bool tc_ggml_type_block(tc_ggml_type t, uint64_t *block_elems, uint64_t *block_bytes);

#ifdef __cplusplus
}
#endif
#endif /* TC_GGUF_H */
