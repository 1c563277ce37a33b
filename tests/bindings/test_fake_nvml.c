/* The NVML and cuBLASLt wrappers against a stand-in library (fake_nvml.c), loaded through
 * THINCUDA_LIBNVML / THINCUDA_LIBCUBLASLT: arguments in place, NVML statuses, the telemetry
 * helper; NVTX with no tool attached. With the argument "missing" the libraries are absent. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/telemetry.h"
#include "tc_cublaslt.h"
#include "tc_nvml.h"
#include "tc_nvtx.h"

#define GIB (1ll << 30)
#define THE_GPU "0000:42:00.0"

typedef struct fake_nvml_stats {
    int inits;
    int last_sensor;
    int last_error_type;
    int last_counter_type;
    uint64_t layout_rows, layout_cols;
    int64_t layout_ld;
    int layout_type;
} fake_nvml_stats;

static fake_nvml_stats *stats(void)
{
    void *h = dlopen(getenv("THINCUDA_LIBNVML"), RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    fake_nvml_stats *s = dlsym(h, "fake_nvml_stats_v");
    assert_non_null(s);
    return s;
}

static void nvml_loads_and_arguments_arrive_in_place(void **state)
{
    (void)state;
    assert_int_equal(tc_nvmlInit(), TC_OK);
    assert_int_equal(stats()->inits, 1);
    unsigned n = 0;
    assert_int_equal(tc_nvmlDeviceGetCount(&n), TC_OK);
    assert_int_equal(n, 1);
    nvmlDevice_t dev = NULL;
    assert_int_equal(tc_nvmlDeviceGetHandleByPciBusId(THE_GPU, &dev), TC_OK);
    assert_non_null(dev);
    unsigned t = 0;
    assert_int_equal(tc_nvmlDeviceGetTemperature(dev, NVML_TEMPERATURE_GPU, &t), TC_OK);
    assert_int_equal(stats()->last_sensor, NVML_TEMPERATURE_GPU);
    assert_int_equal(t, 61);
    unsigned long long e = 0;
    assert_int_equal(tc_nvmlDeviceGetTotalEccErrors(dev, NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                    NVML_AGGREGATE_ECC, &e),
                     TC_OK);
    assert_int_equal(stats()->last_error_type, NVML_MEMORY_ERROR_TYPE_UNCORRECTED);
    assert_int_equal(stats()->last_counter_type, NVML_AGGREGATE_ECC);
}

static void an_nvml_failure_is_an_nvml_status_with_words(void **state)
{
    (void)state;
    nvmlDevice_t dev = NULL;
    tc_status st = tc_nvmlDeviceGetHandleByPciBusId("0000:01:00.0", &dev);
    assert_int_equal(st, TC_NVML_ERROR_NOT_FOUND);
    assert_int_equal(tc_status_lib(st), TC_LIB_NVML);
    assert_string_equal(tc_lib_name(TC_LIB_NVML), "NVML");
    assert_string_equal(tc_status_name(st), "NVML_ERROR_NOT_FOUND");
    assert_string_equal(tc_last_error_function(), "nvmlDeviceGetHandleByPciBusId");
    assert_non_null(tc_status_hint(st));
    /* A count passed in and written back: too small, NVML says how many it needs. */
    assert_int_equal(tc_nvmlDeviceGetHandleByPciBusId(THE_GPU, &dev), TC_OK);
    nvmlProcessInfo_t one[1];
    unsigned count = 1;
    st = tc_nvmlDeviceGetComputeRunningProcesses(dev, &count, one);
    assert_int_equal(st, TC_NVML_ERROR_INSUFFICIENT_SIZE);
    assert_int_equal(count, 2);
    assert_true(tc_status_hint(st) != NULL);
    /* A symbol the library lacks is a status, not a crash. */
    assert_int_equal(tc_nvmlDeviceGetBoardId(dev, &count), TC_ERR_SYMBOL_NOT_FOUND);
}

static void telemetry_reads_every_figure_and_leaves_the_rest_at_minus_one(void **state)
{
    (void)state;
    tc_telemetry t;
    assert_int_equal(tc_telemetry_get(THE_GPU, &t), TC_OK);
    assert_int_equal(t.temperature_c, 61);
    assert_true(t.power_w > 123.45 && t.power_w < 123.46);
    assert_true(t.power_limit_w == -1); /* not supported by this GPU */
    assert_int_equal(t.util_gpu_pct, 87);
    assert_int_equal(t.util_mem_pct, 42);
    assert_int_equal(t.ecc_enabled, 1);
    assert_int_equal(t.ecc_corrected, 3);
    assert_int_equal(t.ecc_uncorrected, 0);
    assert_int_equal(stats()->last_counter_type, NVML_VOLATILE_ECC);
    assert_int_equal(t.mem_total_bytes, 80 * GIB);
    assert_int_equal(t.mem_used_bytes, 10 * GIB);
    assert_int_equal(t.n_procs, 2);
    assert_int_equal(t.procs[0].pid, (unsigned)getpid());
    assert_int_equal(t.procs[0].used_bytes, 5 * GIB);
    assert_string_equal(t.procs[0].name, "");
    assert_int_equal(t.procs[1].pid, 4194305);
    assert_int_equal(t.procs[1].used_bytes, -1);
    assert_string_equal(t.procs[1].name, "python3");
    long long used, total, mine;
    assert_int_equal(tc_telemetry_memory(THE_GPU, &used, &total, &mine), TC_OK);
    assert_int_equal(used, 10 * GIB);
    assert_int_equal(total, 80 * GIB);
    assert_int_equal(mine, 5 * GIB);
    assert_int_equal(tc_telemetry_get("0000:99:00.0", &t), TC_NVML_ERROR_NOT_FOUND);
    assert_non_null(strstr(tc_last_error(), "0000:99:00.0"));
    assert_int_equal(stats()->inits, 2); /* the first test's, and the helper's once */
}

static void cublaslt_arguments_arrive_and_fail_as_cublas_statuses(void **state)
{
    (void)state;
    cublasLtHandle_t h = NULL;
    assert_int_equal(tc_cublasLtCreate(&h), TC_OK);
    assert_non_null(h);
    size_t v = 0;
    assert_int_equal(tc_cublasLtGetVersion(&v), TC_OK);
    assert_int_equal(v, 130001);
    cublasLtMatrixLayout_t l = NULL;
    assert_int_equal(tc_cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, 4096, 11008, 4096), TC_OK);
    assert_non_null(l);
    assert_int_equal(stats()->layout_type, CUDA_R_16BF);
    assert_int_equal(stats()->layout_rows, 4096);
    assert_int_equal(stats()->layout_cols, 11008);
    assert_int_equal(stats()->layout_ld, 4096);
    tc_status st = tc_cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 64, 64, 8);
    assert_int_equal(st, TC_CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(tc_status_lib(st), TC_LIB_CUBLAS);
    assert_string_equal(tc_last_error_function(), "cublasLtMatrixLayoutCreate");
    assert_int_equal(tc_cublasLtDestroy(h), TC_OK);
}

static void nvtx_calls_do_nothing_without_a_tool(void **state)
{
    (void)state;
    int level = 0;
    assert_int_equal(tc_nvtxRangePushA("decode", &level), TC_OK);
    assert_true(level < 0); /* NVTX_NO_PUSH_POP_TRACKING: no tool is listening */
    assert_int_equal(tc_nvtxRangePop(&level), TC_OK);
    assert_int_equal(tc_nvtxMarkA("mark"), TC_OK);
}

static void without_the_libraries_each_call_says_why(void **state)
{
    (void)state;
    assert_int_equal(tc_nvmlInit(), TC_ERR_LIBRARY_NOT_FOUND);
    assert_non_null(strstr(tc_last_error(), "THINCUDA_LIBNVML"));
    tc_telemetry t;
    assert_int_equal(tc_telemetry_get(THE_GPU, &t), TC_ERR_LIBRARY_NOT_FOUND);
    assert_non_null(strstr(tc_last_error(), "NVML is unavailable"));
    assert_int_equal(t.temperature_c, -1);
    long long used, total, mine;
    assert_int_equal(tc_telemetry_memory(THE_GPU, &used, &total, &mine), TC_ERR_LIBRARY_NOT_FOUND);
    assert_int_equal(used, -1);
    cublasLtHandle_t h;
    assert_int_equal(tc_cublasLtCreate(&h), TC_ERR_LIBRARY_NOT_FOUND);
    int level = 0;
    assert_int_equal(tc_nvtxRangePushA("x", &level), TC_OK);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest present[] = {
        cmocka_unit_test(nvml_loads_and_arguments_arrive_in_place),
        cmocka_unit_test(an_nvml_failure_is_an_nvml_status_with_words),
        cmocka_unit_test(telemetry_reads_every_figure_and_leaves_the_rest_at_minus_one),
        cmocka_unit_test(cublaslt_arguments_arrive_and_fail_as_cublas_statuses),
        cmocka_unit_test(nvtx_calls_do_nothing_without_a_tool),
    };
    const struct CMUnitTest missing[] = {
        cmocka_unit_test(without_the_libraries_each_call_says_why),
    };
    if (argc > 1 && strcmp(argv[1], "missing") == 0)
        return cmocka_run_group_tests(missing, NULL, NULL);
    return cmocka_run_group_tests(present, NULL, NULL);
}
