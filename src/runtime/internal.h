/* Runtime objects' layouts, shared by src/runtime/ files only. */
#ifndef TC_RUNTIME_INTERNAL_H
#define TC_RUNTIME_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "runtime/context.h"
#include "tc_kernels.h"

enum { TC__MODULE_NONE = 0, TC__MODULE_READY = 1, TC__MODULE_FAILED = 2 };
/* The fatbins the build embeds (kernels/meson.build: quant.cu's and attention_decode.cu's apart
 * from the rest). */
#define TC__FATBIN_PARTS 3

struct tc_context {
    int ordinal;
    CUdevice dev;
    CUcontext cu; /* the device's primary context */
    int refs;     /* guarded by the registry lock in context.c */

    /* Device limits read once at retain. */
    int cc_major, cc_minor;
    int sm_count;
    int max_threads_per_block;
    int max_block[3], max_grid[3];
    int max_shared_optin; /* bytes per block with the opt-in attribute */
    int max_shared_sm;    /* bytes per multiprocessor */

    /* The embedded kernels, loaded on first use (module.c). */
    pthread_mutex_t module_lock;
    _Atomic int module_state; /* TC__MODULE_* */
    tc_status module_status;  /* why loading failed, when it did */
    char module_error[512];
    CUmodule modules[TC__FATBIN_PARTS]; /* one a fatbin part (kernels/meson.build) */
    CUfunction funcs[TC_KERNEL_COUNT > 0 ? TC_KERNEL_COUNT : 1];
    int func_max_threads[TC_KERNEL_COUNT > 0 ? TC_KERNEL_COUNT : 1];
    int func_static_shared[TC_KERNEL_COUNT > 0 ? TC_KERNEL_COUNT : 1];      /* bytes */
    _Atomic int func_dyn_shared[TC_KERNEL_COUNT > 0 ? TC_KERNEL_COUNT : 1]; /* bytes allowed now */
};

struct tc_stream {
    CUstream cu;
    tc_context *ctx;
    int priority;
    bool overlap;    /* launches carry the programmatic-serialization attribute */
    tc_dim3 cluster; /* and, where it has more than one block, the cluster-dimension one */
};

struct tc_event {
    CUevent cu;
    tc_context *ctx;
};

/* Make ctx current on this thread if it is not already. */
tc_status tc__context_enter(tc_context *ctx);

/* Launch f with cfg on cfg's stream (whose context is current), with the stream's launch
 * attributes: its cluster extent where that is more than one block, and programmatic
 * serialization where it overlaps and f waits for its predecessor (`awaits`: thincuda's
 * kernels, and the user's modules that say so) (launch.c). Every launcher goes through here:
 * thincuda's kernels, the user's modules (kmodule.c) and NVRTC's programs (rtc.c). */
tc_status tc__launch_function(CUfunction f, const tc_launch_config *cfg, void **args, bool awaits);

/* Whether cfg's stream has a cluster extent that does not divide cfg's grid; if so, why (in
 * why[0..size)). */
bool tc__cluster_misfit(const tc_launch_config *cfg, char *why, size_t size);

/* Load the embedded fatbin into ctx once (module.c); later calls return the first result. */
tc_status tc__module_ensure(tc_context *ctx);

/* Unload ctx's kernels (the last release). */
void tc__module_unload(tc_context *ctx);

/* f's parameter count and the sizes of its first `cap` parameters, from cuFuncGetParamInfo
 * (which the caller has checked the driver has): what the kernel checks of module.c, kmodule.c
 * and rtc.c compare with their launchers'. */
#define TC__PARAMS_MAX 256
tc_status tc__param_sizes(CUfunction f, size_t *sizes, unsigned cap, unsigned *count);

/* Profiling (profile.c): one kernel's figures, and what a launch carries from
 * tc__profile_begin to tc__profile_end. */
typedef struct tc__profile_kernel {
    unsigned long long launches, untimed; /* timed; captured into graphs or failed */
    double total_ms;
    double occ_sum; /* theoretical occupancy (0..1) summed over occ_count launches */
    unsigned long long occ_count;
    tc_context *occ_ctx; /* the last configuration's occupancy, remembered */
    int occ_threads;
    uint32_t occ_shared;
    double occ_last;
} tc__profile_kernel;

typedef struct tc__profile_token {
    bool active;
    tc_context *ctx;
    tc_kernel_id id;
    CUstream stream;
    CUevent start, end;
    double occupancy;
} tc__profile_token;

/* Record the start event of a launch about to happen (nothing while the stream is being
 * captured into a graph: the launch is counted untimed). */
tc_status tc__profile_begin(tc_context *c, tc_kernel_id id, const tc_launch_config *cfg,
                            tc__profile_token *t);

/* Record the end event, or drop the start event when the launch failed. */
void tc__profile_end(tc__profile_token *t, bool launched);

/* Add one timed launch to the table (the tests feed it directly). */
void tc__profile_add(tc_kernel_id id, double ms, double occupancy);

/* Resolve the context's pending launches before it goes away. */
void tc__profile_forget_context(tc_context *c);

#endif /* TC_RUNTIME_INTERNAL_H */
