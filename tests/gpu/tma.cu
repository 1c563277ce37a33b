// A kernel that takes a tensor map by value (const __grid_constant__ CUtensorMap) through a
// launcher from thincuda_gen.py kernels: each block loads one box of a 2D 16-bit tensor with
// the tensor memory accelerator (cp.async.bulk.tensor, completion counted by an mbarrier)
// and writes it out densely, so that the host can compare every element, the zeros past the
// tensor's edges included (tests/gpu/test_tma.c). Built for sm_90 alone.
#include <cuda.h>
#include <stdint.h>

enum { kMaxBox = 64 * 64 };

extern "C" __global__ void tma_boxes(const __grid_constant__ CUtensorMap map, uint16_t *out, int32_t box_w,
                                     int32_t box_h, int32_t boxes_x)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ alignas(128) uint16_t tile[kMaxBox];
    __shared__ alignas(8) uint64_t bar;
    const uint32_t tile_s = (uint32_t)__cvta_generic_to_shared(tile), bar_s = (uint32_t)__cvta_generic_to_shared(&bar);
    const int32_t x0 = (int32_t)(blockIdx.x % boxes_x) * box_w, y0 = (int32_t)(blockIdx.x / boxes_x) * box_h;
    const uint32_t bytes = (uint32_t)(box_w * box_h) * 2u;
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar_s));
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar_s), "r"(bytes) : "memory");
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
                     "[%4];\n" ::"r"(tile_s),
                     "l"(reinterpret_cast<uint64_t>(&map)), "r"(x0), "r"(y0), "r"(bar_s)
                     : "memory");
    }
    __syncthreads();
    asm volatile("{\n.reg .pred done;\nTC_TMA_WAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
                 "@!done bra TC_TMA_WAIT_%=;\n}\n" ::"r"(bar_s)
                 : "memory");
    for (int32_t i = threadIdx.x; i < box_w * box_h; i += blockDim.x)
        out[(int64_t)blockIdx.x * box_w * box_h + i] = tile[i];
#endif
}
