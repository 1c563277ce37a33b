/* libmicrohttpd, loaded when the server starts (dlopen) rather than linked: the other
 * subcommands then need nothing beyond libc and the NVIDIA driver, and a machine without the
 * library gets a clear message instead of a loader error. The declarations come from
 * microhttpd.h, so every call is type-checked against the installed API. */
#ifndef TC_SERVER_MHD_H
#define TC_SERVER_MHD_H
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include <microhttpd.h>

typedef struct tc_mhd {
    __typeof__(MHD_start_daemon) *start_daemon;
    __typeof__(MHD_stop_daemon) *stop_daemon;
    __typeof__(MHD_add_connection) *add_connection;
    __typeof__(MHD_create_response_from_buffer) *create_response_from_buffer;
    __typeof__(MHD_create_response_from_callback) *create_response_from_callback;
    __typeof__(MHD_add_response_header) *add_response_header;
    __typeof__(MHD_queue_response) *queue_response;
    __typeof__(MHD_destroy_response) *destroy_response;
    __typeof__(MHD_lookup_connection_value) *lookup_connection_value;
    __typeof__(MHD_get_connection_values) *get_connection_values;
    __typeof__(MHD_get_connection_info) *get_connection_info;
    __typeof__(MHD_set_connection_option) *set_connection_option;
} tc_mhd;

/* Load the library (THINCUDA_LIBMICROHTTPD, else libmicrohttpd.so.12). False with a sentence
 * in msg when it or one of its functions is missing. */
bool tc_mhd_load(tc_mhd *m, char *msg, size_t len);

#endif /* TC_SERVER_MHD_H */
