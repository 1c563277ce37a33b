/* Negative compile test for the generated kernel launchers (run by compile_check.py): the
 * correct calls compile; each variant below must be rejected by the compiler.
 * variant 1: int * where the kernel takes float *
 * variant 2: a double where the kernel takes float (C would convert silently)
 * variant 3: one argument too few
 * variant 4: an int where the kernel takes size_t
 * variant 5: const uint8_t * where the kernel writes through uint8_t * */
#include <stddef.h>
#include <stdint.h>

#include "tc_kernels.h"

tc_status correct(tc_launch_config cfg, float *out, uint8_t *dst, const uint8_t *src, size_t n);

tc_status correct(tc_launch_config cfg, float *out, uint8_t *dst, const uint8_t *src, size_t n)
{
    tc_status s = tc_launch_fill_f32(cfg, out, 1.0f, n);
    if (s == TC_OK)
        s = tc_launch_copy_u8(cfg, dst, src, n);
    if (s == TC_OK)
        s = tc_launch_copy_u8(cfg, dst, dst, n); /* non-const for a const parameter is fine */
#if VARIANT == 1
    int *wrong = (int *)out;
    s = tc_launch_fill_f32(cfg, wrong, 1.0f, n);
#elif VARIANT == 2
    s = tc_launch_fill_f32(cfg, out, 1.0, n);
#elif VARIANT == 3
    s = tc_launch_fill_f32(cfg, out, 1.0f);
#elif VARIANT == 4
    s = tc_launch_fill_f32(cfg, out, 1.0f, (int)n);
#elif VARIANT == 5
    s = tc_launch_copy_u8(cfg, src, src, n);
#endif
    return s;
}
