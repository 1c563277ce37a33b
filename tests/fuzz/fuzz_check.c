/* libFuzzer harness for the server front's check of a connection (src/server/check.c): the
 * input's first byte picks a piece size, its first half is the client's bytes and its second
 * the daemon's, fed in pieces with whatever is ready sent on at once. The offsets must stay
 * within the bytes held, a refused request must come with a whole JSON error of a status the
 * front uses, and ASan and UBSan catch the rest. Build and run: tools/fuzz check [seconds]. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t step = data[0] % 16 + 1;
    const char *p = (const char *)data + 1;
    size_t n = size - 1, half = n / 2;
    char *in = malloc(half + 1);
    if (!in)
        return 0;
    size_t len = 0;
    tc__check k;
    tc__check_init(&k);
    for (size_t at = 0, r = half; at < half || r < n; at += step, r += step) {
        if (at < half && !k.closed) {
            size_t m = half - at < step ? half - at : step;
            memcpy(in + len, p + at, m);
            len += m;
            tc__check_requests(&k, in, len);
            if (k.closed && len > k.ready)
                len = k.ready;
        }
        if (r < n)
            tc__check_responses(&k, p + r, n - r < step ? n - r : step);
        tc__check_requests(&k, in, len);
        if (k.closed && len > k.ready)
            len = k.ready;
        if (k.ready > len || k.parsed > len || k.answered > k.heads || k.done > k.heads ||
            k.heads > k.done + 1)
            abort();
        memmove(in, in + k.ready, len - k.ready);
        len -= k.ready;
        tc__check_sent(&k, k.ready);
    }
    (void)tc__check_finish(&k);
    if (k.err) {
        int s = k.err_status;
        if ((s != 400 && s != 414 && s != 431 && s != 505) || k.err_len < 20 ||
            memcmp(k.err, "HTTP/1.1 ", 9) != 0 || k.err[k.err_len - 1] != '}')
            abort();
    }
    tc__check_deinit(&k);
    free(in);
    return 0;
}
