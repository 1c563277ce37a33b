/* Force-included by gen/kernels.py when libclang reads kernels/*.cu. The generator needs only
 * the kernels' declarations (function bodies are skipped), so this stands in for the CUDA
 * runtime headers: the execution-space keywords and the 16-bit float types that kernel
 * signatures may use. nvcc never sees this file. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
/* A parameter kept in the kernel's parameter space (not copied to local memory): what a tensor
 * map passed by value must be. Marked so that gen/kernels.py can check it. */
#define __grid_constant__ __attribute__((annotate("tc_grid_constant")))
struct __align__(2) __half { unsigned short x; };
struct __align__(2) __nv_bfloat16 { unsigned short x; };
struct __align__(4) __half2 { __half x, y; };
struct __align__(4) __nv_bfloat162 { __nv_bfloat16 x, y; };
typedef __half half;
typedef __half2 half2;
/* CUDA's built-in vector types (vector_types.h), for device helpers' signatures. */
#define TC_PRELUDE_VEC(name, T, a2, a4)                               \
    struct __align__(a2) name##2 { T x, y; };                         \
    struct name##3 { T x, y, z; };                                    \
    struct __align__(a4) name##4 { T x, y, z, w; };
TC_PRELUDE_VEC(char, signed char, 2, 4)
TC_PRELUDE_VEC(uchar, unsigned char, 2, 4)
TC_PRELUDE_VEC(short, short, 4, 8)
TC_PRELUDE_VEC(ushort, unsigned short, 4, 8)
TC_PRELUDE_VEC(int, int, 8, 16)
TC_PRELUDE_VEC(uint, unsigned int, 8, 16)
TC_PRELUDE_VEC(longlong, long long, 16, 16)
TC_PRELUDE_VEC(ulonglong, unsigned long long, 16, 16)
TC_PRELUDE_VEC(float, float, 8, 16)
TC_PRELUDE_VEC(double, double, 16, 16)
