/* Stand-ins for libnvrtc and libnvJitLink in tests without the toolkit's libraries: a
 * "compiler" that records what it was given, fails on sources containing "#error" (with a log
 * naming the line), and otherwise returns a cubin made of the program's name. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvJitLink.h>
#include <nvrtc.h>

#define EXPORT __attribute__((visibility("default")))

/* What the tests read back (dlsym "fake_nvrtc_stats_v"). */
typedef struct fake_nvrtc_stats {
    int creates, compiles, destroys;
    char last_name[64];
    char last_options[256];  /* the options, space-separated */
    const char *last_source; /* the caller's pointer, to check it arrives in place */
} fake_nvrtc_stats;

EXPORT fake_nvrtc_stats fake_nvrtc_stats_v;

struct _nvrtcProgram {
    char *src, *name, *log, *cubin;
    size_t cubin_size;
};

EXPORT nvrtcResult nvrtcVersion(int *major, int *minor)
{
    if (!major || !minor)
        return NVRTC_ERROR_INVALID_INPUT;
    *major = 12;
    *minor = 9;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name,
                                      int numHeaders, const char *const *headers,
                                      const char *const *includeNames)
{
    (void)headers, (void)includeNames;
    if (!prog || !src || numHeaders < 0)
        return NVRTC_ERROR_INVALID_INPUT;
    struct _nvrtcProgram *p = calloc(1, sizeof *p);
    if (!p)
        return NVRTC_ERROR_OUT_OF_MEMORY;
    p->src = strdup(src);
    p->name = strdup(name ? name : "default_program");
    fake_nvrtc_stats_v.creates++;
    fake_nvrtc_stats_v.last_source = src;
    snprintf(fake_nvrtc_stats_v.last_name, sizeof fake_nvrtc_stats_v.last_name, "%s", p->name);
    *prog = p;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog)
{
    if (!prog || !*prog)
        return NVRTC_ERROR_INVALID_PROGRAM;
    free((*prog)->src);
    free((*prog)->name);
    free((*prog)->log);
    free((*prog)->cubin);
    free(*prog);
    *prog = NULL;
    fake_nvrtc_stats_v.destroys++;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions,
                                       const char *const *options)
{
    if (!prog)
        return NVRTC_ERROR_INVALID_PROGRAM;
    fake_nvrtc_stats_v.compiles++;
    char *o = fake_nvrtc_stats_v.last_options;
    o[0] = '\0';
    for (int i = 0; i < numOptions; i++) {
        if (strncmp(options[i], "--", 2) != 0)
            return NVRTC_ERROR_INVALID_OPTION;
        snprintf(o + strlen(o), sizeof fake_nvrtc_stats_v.last_options - strlen(o), "%s%s",
                 i ? " " : "", options[i]);
    }
    const char *err = strstr(prog->src, "#error");
    if (err) {
        int line = 1;
        for (const char *c = prog->src; c < err; c++)
            line += *c == '\n';
        char buf[160];
        snprintf(buf, sizeof buf, "%s(%d): error: #error directive: the test asked for it\n",
                 prog->name, line);
        prog->log = strdup(buf);
        return NVRTC_ERROR_COMPILATION;
    }
    prog->log = strdup("");
    prog->cubin_size = strlen(prog->name) + 16;
    prog->cubin = calloc(1, prog->cubin_size);
    snprintf(prog->cubin, prog->cubin_size, "FAKECUBIN %s", prog->name);
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *size)
{
    if (!prog || !size)
        return NVRTC_ERROR_INVALID_INPUT;
    *size = prog->log ? strlen(prog->log) + 1 : 1;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log)
{
    if (!prog || !log)
        return NVRTC_ERROR_INVALID_INPUT;
    strcpy(log, prog->log ? prog->log : "");
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *size)
{
    if (!prog || !size || !prog->cubin)
        return NVRTC_ERROR_INVALID_INPUT;
    *size = prog->cubin_size;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin)
{
    if (!prog || !cubin || !prog->cubin)
        return NVRTC_ERROR_INVALID_INPUT;
    memcpy(cubin, prog->cubin, prog->cubin_size);
    return NVRTC_SUCCESS;
}

EXPORT nvJitLinkResult nvJitLinkVersion(unsigned int *major, unsigned int *minor)
{
    if (!major || !minor)
        return NVJITLINK_ERROR_INVALID_INPUT;
    *major = 12;
    *minor = 8;
    return NVJITLINK_SUCCESS;
}
