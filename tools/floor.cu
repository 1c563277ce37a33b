// Read floors for bench_ops: kernels that do nothing but read a buffer, so that a product's
// time can be set beside the least time in which any kernel reads as many bytes, launched the
// same way (a graph of programmatic launches, buffers rotating through more than L2 holds).
// Two ways of reading: 16-byte loads, eight in flight a thread, the grid striding through the
// buffer; and, on Hopper, the bulk copy engine filling a ring of shared memory, one thread a
// block issuing copies and waiting on an mbarrier a stage. Both read before waiting for the
// previous grid (as the products read their weights), and let the next one start at once. A
// module of its own (thincuda_gen.py kernels --prefix fl_), linked into bench_ops alone; the
// programmatic-launch calls are kernels/common.cuh's.
#include <stdint.h>

#include "../kernels/common.cuh"

__device__ __forceinline__ uint32_t load_xor(const uint4 *p)
{
    uint32_t a, b, c, d;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(a), "=r"(b), "=r"(c), "=r"(d)
                 : "l"(p));
    return a ^ b ^ c ^ d;
}

/** Read n16 16-byte words at `data` (16-byte aligned), eight loads in flight a thread; the xor
 *  of every word goes to *out only where it equals `never`, which keeps the loads. */
extern "C" __global__ void floor_read(const uint32_t *data, int64_t n16, uint32_t never, uint32_t *out)
{
    const uint4 *words = reinterpret_cast<const uint4 *>(data);
    tc::launch_next();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t acc = 0;
    for (; i + 7 * stride < n16; i += 8 * stride) {
        uint32_t v[8];
#pragma unroll
        for (int u = 0; u < 8; u++)
            v[u] = load_xor(words + i + u * stride);
#pragma unroll
        for (int u = 0; u < 8; u++)
            acc ^= v[u];
    }
    for (; i < n16; i += stride)
        acc ^= load_xor(words + i);
    tc::await_grids();
    if (acc == never)
        *out = acc;
}

/** Read chunks[0..n_chunks) of chunk_bytes (a multiple of 16) with bulk copies into a ring of
 *  `stages` chunks of dynamic shared memory (at most 16), block b taking chunks b, b + grid,
 *  ...; thread 0 of each block issues and waits, the first word of each chunk xored as in
 *  floor_read. Hopper and later; elsewhere it returns at once. */
extern "C" __global__ void floor_bulk(const uint8_t *chunks, int64_t n_chunks, int32_t chunk_bytes,
                                   int32_t stages, uint32_t never, uint32_t *out)
{
    tc::launch_next();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t ring[];
    __shared__ __align__(8) uint64_t full[16];
    uint32_t acc = 0;
    if (threadIdx.x == 0) {
        const uint32_t ring_s = (uint32_t)__cvta_generic_to_shared(ring),
                       full_s = (uint32_t)__cvta_generic_to_shared(full);
        for (int s = 0; s < stages; s++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(full_s + 8 * s));
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        auto issue = [&](int s, int64_t c) {
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(full_s + 8 * s),
                         "r"(chunk_bytes)
                         : "memory");
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
                         "[%3];\n" ::"r"(ring_s + (uint32_t)(s * chunk_bytes)),
                         "l"(chunks + c * chunk_bytes), "r"(chunk_bytes), "r"(full_s + 8 * s)
                         : "memory");
        };
        const int64_t first = blockIdx.x, step = gridDim.x;
        for (int s = 0; s < stages && first + s * step < n_chunks; s++)
            issue(s, first + s * step);
        for (int64_t k = 0; first + k * step < n_chunks; k++) {
            const int s = (int)(k % stages);
            const uint32_t parity = (uint32_t)(k / stages) & 1u;
            asm volatile("{\n.reg .pred done;\nFL_WAIT_%=:\n"
                         "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                         "@!done bra FL_WAIT_%=;\n}\n" ::"r"(full_s + 8 * s),
                         "r"(parity)
                         : "memory");
            acc ^= *(volatile uint32_t *)(ring + s * chunk_bytes);
            const int64_t next = first + (k + stages) * step;
            if (next < n_chunks)
                issue(s, next);
        }
    }
    tc::await_grids();
    if (threadIdx.x == 0 && acc == never)
        *out = acc;
#endif
}
