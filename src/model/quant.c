/* Dequantisation of GGUF tensors to f32 (the block types through the ops layer's
 * src/ops/qblock.c). */
#include "model/quant.h"
#include "ops/internal.h"

bool tc_ggml_dtype(tc_ggml_type type, tc_dtype *dt)
{
    static const struct {
        tc_ggml_type g;
        tc_dtype d;
    } map[] = {
        { TC_GGML_F32, TC_DTYPE_F32 },   { TC_GGML_F16, TC_DTYPE_F16 },
        { TC_GGML_BF16, TC_DTYPE_BF16 }, { TC_GGML_Q4_0, TC_DTYPE_Q4_0 },
        { TC_GGML_Q4_1, TC_DTYPE_Q4_1 }, { TC_GGML_Q5_0, TC_DTYPE_Q5_0 },
        { TC_GGML_Q5_1, TC_DTYPE_Q5_1 }, { TC_GGML_Q8_0, TC_DTYPE_Q8_0 },
        { TC_GGML_Q2_K, TC_DTYPE_Q2_K }, { TC_GGML_Q3_K, TC_DTYPE_Q3_K },
        { TC_GGML_Q4_K, TC_DTYPE_Q4_K }, { TC_GGML_Q5_K, TC_DTYPE_Q5_K },
        { TC_GGML_Q6_K, TC_DTYPE_Q6_K },
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (map[i].g == type) {
            *dt = map[i].d;
            return true;
        }
    return false;
}

bool tc_dequantize(tc_ggml_type type, const void *src, uint64_t n, float *out)
{
    uint64_t be, bb;
    tc_dtype dt;
    if (!tc_ggml_type_block(type, &be, &bb) || n % be || !tc_ggml_dtype(type, &dt))
        return false;
    tc__load_row(dt, src, (int64_t)n, out);
    return true;
}
