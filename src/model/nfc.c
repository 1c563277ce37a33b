/* Unicode NFC normalisation for the tokenizers that declare it (Qwen2's tokenizer.json has a
 * normalizer of type NFC), by libutf8proc loaded at run time: a static copy of its tables would
 * add 340 KB to a binary that must stay under 5 MB, and most models never need it. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer_internal.h"
#include "runtime/log.h"

/* utf8proc_map() and its options, as utf8proc.h (2.x) declares them: UTF8PROC_STABLE |
 * UTF8PROC_COMPOSE is its utf8proc_NFC. The result is malloc'd by the library. */
typedef ptrdiff_t (*utf8proc_map_fn)(const uint8_t *str, ptrdiff_t len, uint8_t **dst, int options);
enum { UTF8PROC_STABLE = 1 << 1, UTF8PROC_COMPOSE = 1 << 3 };

static pthread_once_t once = PTHREAD_ONCE_INIT;
static utf8proc_map_fn map_fn;

static void load(void)
{
    /* Debian 12 ships the library as .so.2, Debian 13 as .so.3; the ABI of utf8proc_map is
     * the same. THINCUDA_LIBUTF8PROC names the one file to load instead. */
    const char *env = getenv("THINCUDA_LIBUTF8PROC");
    const char *names[] = { env && *env ? env : "libutf8proc.so.3", "libutf8proc.so.2" };
    size_t n_names = env && *env ? 1 : 2;
    for (size_t i = 0; i < n_names && !map_fn; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h && !(map_fn = (utf8proc_map_fn)dlsym(h, "utf8proc_map")))
            dlclose(h);
    }
    if (!map_fn)
        TC_WARN(
            "this tokenizer normalises text to Unicode NFC, which needs libutf8proc (Debian 12: "
            "apt-get install libutf8proc2, 13: libutf8proc3; or set THINCUDA_LIBUTF8PROC to its "
            "path); text that is not already NFC is tokenised as given");
}

bool tc__nfc_available(void)
{
    pthread_once(&once, load);
    return map_fn != NULL;
}

bool tc__nfc(const uint8_t *s, size_t n, uint8_t **out, size_t *n_out)
{
    *out = NULL;
    size_t i = 0;
    while (i < n && s[i] < 0x80)
        i++;
    if (i == n || !tc__nfc_available())
        return false; /* ASCII is NFC already */
    uint8_t *r = NULL;
    /* Invalid UTF-8 (which tokenizers never sees: Python strings are code points) is
     * tokenised as given. */
    ptrdiff_t k = map_fn(s, (ptrdiff_t)n, &r, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (k < 0 || !r) {
        free(r);
        return false;
    }
    if ((size_t)k == n && !memcmp(r, s, n)) {
        free(r);
        return false;
    }
    *out = r;
    *n_out = (size_t)k;
    return true;
}
