/* Deterministic pseudo-random fills: the same numbers on every backend (see kernels/random.cu). */
#include "ops/internal.h"

typedef struct {
    tc_tensor *t;
    uint64_t key;
    float offset, scale;
} fill_job;

static void fill_range(void *ctx, int64_t begin, int64_t end)
{
    fill_job *j = ctx;
    for (int64_t i = begin; i < end; i++) {
        float u = (float)(tc__mix64(j->key ^ (uint64_t)i) >> 40) * (1.0f / 16777216.0f);
        tc__store(j->t->dtype, j->t->data, i, j->offset + j->scale * (2.0f * u - 1.0f));
    }
}

tc_status tc_fill_random(tc_tensor *t, uint64_t seed, float offset, float scale)
{
    const char *op = "tc_fill_random";
    TC_TRY(tc__check_dtype(op, "t", t, TC__FLOATS));
    if (!tc_tensor_is_contiguous(t))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "t must be contiguous");
    int64_t n = tc_tensor_numel(t);
    if (n == 0)
        return TC_OK;
    tc_backend *b = t->backend;
    fill_job j = { t, tc__mix64(seed + 0x9e3779b97f4a7c15ull), offset, scale };
    if (b->kind == TC_BACKEND_CPU) {
        tc__parallel_for(b, n, 1 << 16, fill_range, &j);
        return TC_OK;
    }
    tc_launch_config cfg;
    TC_TRY(tc_launch_config_1d(b->stream, TC_KERNEL_FILL_RANDOM_F32, (size_t)n, &cfg));
    tc_status st;
#define LAUNCH(sfx) tc_launch_fill_random_##sfx(cfg, TC__DEV(T, t), n, seed, offset, scale)
    TC__BY_DTYPE(st, t->dtype, LAUNCH);
#undef LAUNCH
    return st;
}
