/* Read-only memory maps of model files (GGUF, safetensors): the loaders read tensors in place. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "model/internal.h"

static int by_begin(const void *a, const void *b)
{
    const tc__span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

size_t tc__spans_overlap(tc__span *s, size_t n)
{
    if (n < 2)
        return 0;
    qsort(s, n, sizeof *s, by_begin);
    for (size_t i = 1; i < n; i++)
        if (s[i].begin < s[i - 1].end)
            return i;
    return 0;
}

tc_status tc__map_file(const char *op, const char *path, const char *what, size_t min_bytes,
                       void **map, size_t *bytes)
{
    *map = NULL;
    *bytes = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tc_set_error(TC_ERR_IO, op, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return tc_set_error(TC_ERR_IO, op, "%s is not a regular file", path);
    }
    if ((size_t)sb.st_size < (min_bytes ? min_bytes : 1)) {
        close(fd);
        return tc_set_error(TC_ERR_PARSE, op, "%s is %s", path, sb.st_size ? what : "empty");
    }
    void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return tc_set_error(TC_ERR_IO, op, "cannot map %s: %s", path, strerror(errno));
    *map = m;
    *bytes = (size_t)sb.st_size;
    return TC_OK;
}

void tc__unmap_file(void *map, size_t bytes)
{
    if (map)
        munmap(map, bytes);
}
