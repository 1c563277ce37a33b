/* GGUF block dequantisation to f32 (for weight types the kernels do not read directly). */
#ifndef TC_QUANT_H
#define TC_QUANT_H
#include "model/gguf.h"
#include "ops/tensor.h"
#ifdef __cplusplus
extern "C" {
#endif

/* The tensor dtype that holds ggml type `type` as it is stored; false for types the ops layer
 * has no dtype for (the IQ family, among others). */
TC_API bool tc_ggml_dtype(tc_ggml_type type, tc_dtype *dt);
/* Convert n elements (whole blocks) of ggml type `type` at src to f32. Supported: f32, f16,
 * bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k; false for any other. */
TC_API bool tc_dequantize(tc_ggml_type type, const void *src, uint64_t n, float *out);

#ifdef __cplusplus
}
#endif
#endif /* TC_QUANT_H */
