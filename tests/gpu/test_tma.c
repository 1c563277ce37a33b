/* A tensor map passed by value through a generated launcher (thincuda_gen.py kernels, module
 * tt_ from tests/gpu/tma.cu): a 200 x 100 tensor of 16-bit elements (neither side a multiple of
 * the 64 x 32 box), each box loaded by the tensor memory accelerator in a block of its own and
 * written out densely over a poisoned buffer. Every element must equal the host's, and those
 * past the tensor's edges 0. Exits 77 (skip) without a driver, a GPU, or compute capability 9.0. */
#include <stdint.h>
#include <stdio.h>

#include "thincuda.h"
#include "tt_kernels.h"

#define SKIP 77
enum { W = 200, H = 100, BW = 64, BH = 32, BX = (W + BW - 1) / BW, BY = (H + BH - 1) / BH };

static uint16_t in[W * H], out[BX * BY * BW * BH];

static tc_status run(tc_context *ctx)
{
    tc_stream *s = NULL;
    tc_kmodule *mod = NULL;
    CUdeviceptr din = 0, dout = 0;
    CUtensorMap map;
    const cuuint64_t dims[2] = { W, H }, strides[1] = { W * sizeof(uint16_t) };
    const cuuint32_t box[2] = { BW, BH }, step[2] = { 1, 1 };
    tc_status st = tc_stream_create(ctx, 0, &s);
    if (st == TC_OK)
        st = tc_kmodule_create(ctx, &tt_kernels, &mod);
    if (st == TC_OK)
        st = tc_cuMemAlloc(&din, sizeof in);
    if (st == TC_OK)
        st = tc_cuMemAlloc(&dout, sizeof out);
    if (st == TC_OK)
        st = tc_stream_copy_h2d(s, din, in, sizeof in);
    if (st == TC_OK)
        st = tc_stream_memset(s, dout, 0xff, sizeof out);
    if (st == TC_OK)
        st = tc_cuTensorMapEncodeTiled(
            &map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, (void *)(uintptr_t)din, dims, strides, box,
            step, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
            CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (st == TC_OK) {
        tc_launch_config cfg = { tc_dim1(BX * BY), tc_dim1(128), 0, s };
        st = tt_launch_tma_boxes(mod, cfg, map, (uint16_t *)(uintptr_t)dout, (int32_t)BW,
                                 (int32_t)BH, (int32_t)BX);
    }
    if (st == TC_OK)
        st = tc_stream_copy_d2h(s, out, dout, sizeof out);
    if (st == TC_OK)
        st = tc_stream_synchronize(s);
    if (dout)
        tc_cuMemFree(dout);
    if (din)
        tc_cuMemFree(din);
    tc_kmodule_destroy(mod);
    tc_stream_destroy(s);
    return st;
}

int main(void)
{
    tc_context *ctx = NULL;
    CUdevice dev;
    int major = 0;
    if (tc_context_retain(0, &ctx) != TC_OK ||
        tc_cuDeviceGet(&dev, tc_context_ordinal(ctx)) != TC_OK ||
        tc_cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) !=
            TC_OK) {
        printf("gpu/tma: skipped: %s\n", tc_last_error());
        return SKIP;
    }
    if (major < 9) {
        printf("gpu/tma: skipped: tensor maps need compute capability 9.0 (this GPU: %d.x)\n",
               major);
        tc_context_release(ctx);
        return SKIP;
    }
    uint32_t r = 12345u;
    for (int i = 0; i < W * H; i++) {
        r = r * 1664525u + 1013904223u;
        in[i] = (uint16_t)(1u + (r >> 17)); /* never 0, never the poison */
    }
    tc_status st = run(ctx);
    tc_context_release(ctx);
    if (st != TC_OK) {
        fprintf(stderr, "gpu/tma: %s\n", tc_last_error());
        return 1;
    }
    int bad = 0, edge = 0;
    for (int b = 0; b < BX * BY; b++)
        for (int j = 0; j < BH; j++)
            for (int i = 0; i < BW; i++) {
                int x = (b % BX) * BW + i, y = (b / BX) * BH + j;
                uint16_t want = x < W && y < H ? in[y * W + x] : 0;
                edge += x >= W || y >= H;
                bad += out[(b * BH + j) * BW + i] != want;
            }
    printf("gpu/tma: %d of %d elements wrong (%d past the edges)\n", bad, BX * BY * BW * BH, edge);
    return bad ? 1 : 0;
}
