/* The NVRTC and nvJitLink wrappers against stand-in libraries (fake_nvrtc.c): loading through
 * THINCUDA_LIBNVRTC / THINCUDA_LIBNVJITLINK, arguments in place, status mapping. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tc_nvjitlink.h"
#include "tc_nvrtc.h"

typedef struct fake_nvrtc_stats {
    int creates, compiles, destroys;
    char last_name[64];
    char last_options[256];
    const char *last_source;
} fake_nvrtc_stats;

static fake_nvrtc_stats *stats(void)
{
    void *h = dlopen(getenv("THINCUDA_LIBNVRTC"), RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    fake_nvrtc_stats *s = dlsym(h, "fake_nvrtc_stats_v");
    assert_non_null(s);
    return s;
}

static void the_library_loads_and_out_parameters_arrive(void **state)
{
    (void)state;
    int major = 0, minor = 0;
    assert_int_equal(tc_nvrtcVersion(&major, &minor), TC_OK);
    assert_int_equal(major, 12);
    assert_int_equal(minor, 9);
    unsigned jmajor = 0, jminor = 0;
    assert_int_equal(tc_nvJitLinkVersion(&jmajor, &jminor), TC_OK);
    assert_int_equal(jmajor, 12);
    assert_int_equal(jminor, 8);
}

static void a_program_compiles_with_its_arguments_in_place(void **state)
{
    (void)state;
    const char *src = "extern \"C\" __global__ void k(int x) {}\n";
    nvrtcProgram prog = NULL;
    assert_int_equal(tc_nvrtcCreateProgram(&prog, src, "k.cu", 0, NULL, NULL), TC_OK);
    assert_non_null(prog);
    assert_ptr_equal(stats()->last_source, src);
    assert_string_equal(stats()->last_name, "k.cu");
    const char *opts[] = { "--gpu-architecture=sm_90", "--std=c++17" };
    assert_int_equal(tc_nvrtcCompileProgram(prog, 2, opts), TC_OK);
    assert_string_equal(stats()->last_options, "--gpu-architecture=sm_90 --std=c++17");
    size_t n = 0;
    assert_int_equal(tc_nvrtcGetCUBINSize(prog, &n), TC_OK);
    char cubin[64];
    assert_true(n <= sizeof cubin);
    assert_int_equal(tc_nvrtcGetCUBIN(prog, cubin), TC_OK);
    assert_string_equal(cubin, "FAKECUBIN k.cu");
    assert_int_equal(tc_nvrtcDestroyProgram(&prog), TC_OK);
    assert_null(prog);
}

static void a_compile_error_is_an_nvrtc_status_with_a_log(void **state)
{
    (void)state;
    nvrtcProgram prog = NULL;
    assert_int_equal(tc_nvrtcCreateProgram(&prog, "int x;\n#error no\n", "bad.cu", 0, NULL, NULL),
                     TC_OK);
    tc_status st = tc_nvrtcCompileProgram(prog, 0, NULL);
    assert_int_equal(st, TC_NVRTC_ERROR_COMPILATION);
    assert_int_equal(tc_status_lib(st), TC_LIB_NVRTC);
    assert_string_equal(tc_status_name(st), "NVRTC_ERROR_COMPILATION");
    assert_string_equal(tc_last_error_function(), "nvrtcCompileProgram");
    assert_non_null(tc_status_hint(st));
    size_t n = 0;
    assert_int_equal(tc_nvrtcGetProgramLogSize(prog, &n), TC_OK);
    char log[256];
    assert_true(n <= sizeof log);
    assert_int_equal(tc_nvrtcGetProgramLog(prog, log), TC_OK);
    assert_non_null(strstr(log, "bad.cu(2): error"));
    tc_nvrtcDestroyProgram(&prog);
    assert_int_equal(tc_nvrtcGetPTXSize(NULL, &n), TC_ERR_SYMBOL_NOT_FOUND);
    assert_string_equal(tc_lib_name(TC_LIB_NVJITLINK), "nvJitLink");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_library_loads_and_out_parameters_arrive),
        cmocka_unit_test(a_program_compiles_with_its_arguments_in_place),
        cmocka_unit_test(a_compile_error_is_an_nvrtc_status_with_a_log),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
