/* tc_rtc: NVRTC compilation for the context's GPU, a disk cache of the cubins, and launches
 * checked against the compiled kernels' parameters. */
#define _GNU_SOURCE
#include "runtime/rtc.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/host.h"
#include "runtime/internal.h"
#include "tc_nvrtc.h"

struct tc_rtc {
    tc_context *ctx;
    CUmodule module;
    bool cached;
    char name[64];
    char path[512]; /* the cache file */
};

/* Two 64-bit FNV-1a sums (different offsets) over everything the cubin depends on. */
typedef struct key {
    uint64_t a, b;
} key;

static void mix(key *k, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        k->a = (k->a ^ p[i]) * 0x100000001b3ull;
        k->b = (k->b ^ p[i]) * 0x100000001b3ull;
    }
    unsigned char sep = 0xff; /* so that "ab","c" and "a","bc" differ */
    k->a = (k->a ^ sep) * 0x100000001b3ull;
    k->b = (k->b ^ sep) * 0x100000001b3ull;
}

/* $XDG_CACHE_HOME/thincuda/rtc (or ~/.cache/...), created; false when there is none. */
static bool cache_dir(char *out, size_t cap)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && *xdg)
        n = snprintf(out, cap, "%s/thincuda/rtc", xdg);
    else if (home && *home)
        n = snprintf(out, cap, "%s/.cache/thincuda/rtc", home);
    else
        return false;
    if (n < 0 || (size_t)n >= cap)
        return false;
    for (char *s = out + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        bool ok = mkdir(out, 0755) == 0 || errno == EEXIST;
        *s = '/';
        if (!ok)
            return false;
    }
    return mkdir(out, 0755) == 0 || errno == EEXIST;
}

static unsigned char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    unsigned char *buf = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = tc_host_alloc((size_t)n)) != NULL &&
        fread(buf, 1, (size_t)n, f) != (size_t)n) {
        tc_host_free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = n > 0 ? (size_t)n : 0;
    return buf;
}

/* Write through a temporary file and rename, so that a reader never sees half a cubin. */
static void write_cache(const char *path, const void *data, size_t size)
{
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return;
    bool ok = fwrite(data, 1, size, f) == size;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        TC_WARN("rtc: could not write the cache file %s", path);
    }
}

/* Compile with NVRTC; on success *cubin (host allocation) holds the result. */
static tc_status compile(tc_rtc *p, const char *source, const char *const *options, int n_options,
                         const char *arch_opt, char **cubin, size_t *size)
{
    nvrtcProgram prog = NULL;
    const char **opts = tc_host_calloc((size_t)n_options + 1, sizeof *opts);
    if (!opts)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_rtc_create", "no host memory");
    for (int i = 0; i < n_options; i++)
        opts[i] = options[i];
    opts[n_options] = arch_opt;
    tc_status st = tc_nvrtcCreateProgram(&prog, source, p->name, 0, NULL, NULL);
    if (st == TC_OK) {
        st = tc_nvrtcCompileProgram(prog, n_options + 1, opts);
        if (st == TC_NVRTC_ERROR_COMPILATION) {
            size_t n = 0;
            char *log = NULL;
            if (tc_nvrtcGetProgramLogSize(prog, &n) == TC_OK && (log = tc_host_alloc(n + 1)))
                log[tc_nvrtcGetProgramLog(prog, log) == TC_OK ? n : 0] = '\0';
            tc_set_error(st, "tc_rtc_create", "%s did not compile for %s: %s", p->name,
                         arch_opt + strlen("--gpu-architecture="), log ? log : "(no log)");
            tc_host_free(log);
        }
    }
    if (st == TC_OK)
        st = tc_nvrtcGetCUBINSize(prog, size);
    if (st == TC_OK) {
        *cubin = tc_host_alloc(*size);
        st = *cubin ? tc_nvrtcGetCUBIN(prog, *cubin)
                    : tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_rtc_create", "no host memory");
    }
    if (prog)
        tc_nvrtcDestroyProgram(&prog);
    tc_host_free(opts);
    return st;
}

tc_status tc_rtc_create(tc_context *ctx, const char *source, const char *name,
                        const char *const *options, int n_options, tc_rtc **out)
{
    *out = NULL;
    if (!ctx || !source || n_options < 0 || (n_options > 0 && !options))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_rtc_create",
                            "a context, a source and a valid option list are required");
    tc_rtc *p = tc_host_calloc(1, sizeof *p);
    if (!p)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_rtc_create", "no host memory");
    p->ctx = ctx;
    snprintf(p->name, sizeof p->name, "%s", name ? name : "program.cu");
    char arch_opt[48];
    snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=sm_%d%d", ctx->cc_major, ctx->cc_minor);

    int nv_major = 0, nv_minor = 0, driver = 0;
    tc_status st = tc_nvrtcVersion(&nv_major, &nv_minor);
    if (st == TC_OK)
        st = tc_device_driver_version(&driver);
    char *cubin = NULL;
    size_t size = 0;
    char dir[400];
    bool have_dir = st == TC_OK && cache_dir(dir, sizeof dir);
    if (have_dir) {
        key k = { 0xcbf29ce484222325ull, 0x84222325cbf29ce4ull };
        mix(&k, source, strlen(source));
        for (int i = 0; i < n_options; i++)
            mix(&k, options[i], strlen(options[i]));
        int versions[3] = { driver, nv_major, nv_minor };
        mix(&k, arch_opt, strlen(arch_opt));
        mix(&k, versions, sizeof versions);
        snprintf(p->path, sizeof p->path, "%s/%016llx%016llx.cubin", dir, (unsigned long long)k.a,
                 (unsigned long long)k.b);
        cubin = (char *)read_file(p->path, &size);
    }
    if (st == TC_OK && cubin) {
        st = tc__context_enter(ctx);
        if (st == TC_OK && tc_cuModuleLoadData(&p->module, cubin) == TC_OK)
            p->cached = true;
        else if (st == TC_OK)
            TC_WARN("rtc: %s: the cached cubin %s did not load; compiling again", p->name, p->path);
        tc_host_free(cubin);
        cubin = NULL;
    }
    if (st == TC_OK && !p->cached) {
        st = compile(p, source, options, n_options, arch_opt, &cubin, &size);
        if (st == TC_OK) {
            st = tc__context_enter(ctx);
            if (st == TC_OK)
                st = tc_cuModuleLoadData(&p->module, cubin);
            if (st == TC_OK && have_dir)
                write_cache(p->path, cubin, size);
        }
        tc_host_free(cubin);
    }
    if (st != TC_OK) {
        tc_rtc_destroy(p);
        return st;
    }
    TC_DEBUG("rtc: %s %s (%s)", p->name, p->cached ? "loaded from the cache" : "compiled",
             p->path[0] ? p->path : "no cache directory");
    *out = p;
    return TC_OK;
}

void tc_rtc_destroy(tc_rtc *p)
{
    if (!p)
        return;
    if (p->module && tc__context_enter(p->ctx) == TC_OK && tc_cuModuleUnload(p->module) != TC_OK)
        TC_WARN("rtc: %s: unloading failed: %s", p->name, tc_last_error());
    tc_host_free(p);
}

bool tc_rtc_cached(const tc_rtc *p)
{
    return p && p->cached;
}

const char *tc_rtc_cache_path(const tc_rtc *p)
{
    return p ? p->path : "";
}

tc_status tc_rtc_function(tc_rtc *p, const char *kernel, CUfunction *out)
{
    *out = NULL;
    if (!p || !kernel)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_rtc_function", "no program or kernel");
    TC_TRY(tc__context_enter(p->ctx));
    tc_status st = tc_cuModuleGetFunction(out, p->module, kernel);
    if (st == TC_CUDA_ERROR_NOT_FOUND)
        return tc_set_error(TC_ERR_NOT_FOUND, "tc_rtc_function",
                            "%s has no kernel %s (declare it extern \"C\")", p->name, kernel);
    return st;
}

tc_status tc_rtc_launch(tc_rtc *p, const char *kernel, const tc_launch_config *cfg, void **args,
                        const size_t *sizes, unsigned n_args)
{
    CUfunction f;
    TC_TRY(tc_rtc_function(p, kernel, &f));
    if (!cfg->stream || cfg->stream->ctx != p->ctx)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, kernel,
                            "launching %s: the stream is missing or of another context", kernel);
    if (tc_available("cuFuncGetParamInfo")) {
        size_t have[TC__PARAMS_MAX];
        unsigned n = 0;
        TC_TRY(tc__param_sizes(f, have, TC__PARAMS_MAX, &n));
        for (unsigned j = 0; j < n && j < n_args && j < TC__PARAMS_MAX; j++)
            if (sizes[j] != have[j])
                return tc_set_error(TC_ERR_KERNEL_MISMATCH, kernel,
                                    "launching %s (%s): argument %u is %zu bytes, the kernel's "
                                    "parameter %zu",
                                    kernel, p->name, j + 1, sizes[j], have[j]);
        if (n != n_args)
            return tc_set_error(TC_ERR_KERNEL_MISMATCH, kernel,
                                "launching %s (%s) with %u arguments; the kernel takes %u", kernel,
                                p->name, n_args, n);
    }
    if (!cfg->grid.x || !cfg->grid.y || !cfg->grid.z || !cfg->block.x || !cfg->block.y ||
        !cfg->block.z)
        return tc_set_error(TC_ERR_LAUNCH, kernel, "launching %s: a grid or block extent is 0",
                            kernel);
    char why[160];
    if (tc__cluster_misfit(cfg, why, sizeof why))
        return tc_set_error(TC_ERR_LAUNCH, kernel, "launching %s: %s", kernel, why);
    TC_TRY(tc__context_enter(p->ctx));
    return tc__launch_function(f, cfg, args, false);
}
