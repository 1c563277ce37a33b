/* Loading libmicrohttpd at run time. */
#include "server/mhd.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

bool tc_mhd_load(tc_mhd *m, char *msg, size_t len)
{
    const char *env = getenv("THINCUDA_LIBMICROHTTPD");
    const char *name = env && *env ? env : "libmicrohttpd.so.12";
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(msg, len,
                 "the HTTP server needs libmicrohttpd (%s: %s); install it (Debian/Ubuntu: "
                 "apt-get install libmicrohttpd12) or set THINCUDA_LIBMICROHTTPD to its path",
                 name, dlerror());
        return false;
    }
    struct {
        void **slot;
        const char *sym;
    } fns[] = {
#define FN(field, sym) { (void **)&m->field, #sym }
        FN(start_daemon, MHD_start_daemon),
        FN(stop_daemon, MHD_stop_daemon),
        FN(add_connection, MHD_add_connection),
        FN(create_response_from_buffer, MHD_create_response_from_buffer),
        FN(create_response_from_callback, MHD_create_response_from_callback),
        FN(add_response_header, MHD_add_response_header),
        FN(queue_response, MHD_queue_response),
        FN(destroy_response, MHD_destroy_response),
        FN(lookup_connection_value, MHD_lookup_connection_value),
        FN(get_connection_values, MHD_get_connection_values),
        FN(get_connection_info, MHD_get_connection_info),
        FN(set_connection_option, MHD_set_connection_option),
#undef FN
    };
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        *fns[i].slot = dlsym(h, fns[i].sym);
        if (!*fns[i].slot) {
            snprintf(msg, len, "%s has no %s; libmicrohttpd 0.9.71 or later is needed", name,
                     fns[i].sym);
            dlclose(h);
            return false;
        }
    }
    return true;
}
