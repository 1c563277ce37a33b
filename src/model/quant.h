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
/* Whether ggml type `type` is one of the IQ family (iq1_s, iq1_m, iq2_xxs, iq2_xs, iq2_s,
 * iq3_xxs, iq3_s, iq4_nl, iq4_xs) or the ternary tq1_0 and tq2_0: types no kernel reads as
 * stored, dequantised at load (on CUDA by kernels/iq.cu, from the file's bytes). */
TC_API bool tc_ggml_is_iq(tc_ggml_type type);
/* Convert n elements (whole blocks) of ggml type `type` at src to f32. Supported: f32, f16,
 * bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k and the tc_ggml_is_iq
 * types; false for any other. */
TC_API bool tc_dequantize(tc_ggml_type type, const void *src, uint64_t n, float *out);

#ifdef __cplusplus
}
#endif
#endif /* TC_QUANT_H */
