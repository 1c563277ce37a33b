// Kernels that test the runtime itself: argument packing of every scalar width through the
// generated launchers, and a timed delay for stream and event ordering tests.
#include "common.cuh"

/** Write each argument's bits to out[0..8] (one 64-bit slot each), so a test can compare
 *  what arrived on the device with what the C launcher was given. */
extern "C" __global__ void tc_k_selftest_params(int8_t a, int16_t b, int32_t c, int64_t d, float e,
                                                double f, __half g, __nv_bfloat16 h, uint8_t i,
                                                uint64_t *out)
{
    tc::await_inputs();
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    out[0] = (uint64_t)(int64_t)a;
    out[1] = (uint64_t)(int64_t)b;
    out[2] = (uint64_t)(int64_t)c;
    out[3] = (uint64_t)d;
    out[4] = (uint64_t)__float_as_uint(e);
    out[5] = (uint64_t)__double_as_longlong(f);
    out[6] = (uint64_t)__half_as_ushort(g);
    out[7] = (uint64_t)__bfloat16_as_ushort(h);
    out[8] = (uint64_t)i;
}

/** Wait about `ns` nanoseconds of GPU time, then store value at *dst (one thread). */
extern "C" __global__ void tc_k_selftest_delay_store(int32_t *dst, int32_t value, uint64_t ns)
{
    tc::await_inputs();
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    uint64_t start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
    *(volatile int32_t *)dst = value;
}
