/* Shared by the files of src/model: mapping model files. Not installed. */
#ifndef TC_MODEL_INTERNAL_H
#define TC_MODEL_INTERNAL_H
#include <stddef.h>
#include "tc_bindings.h"

/* Map the regular file `path` read-only: *map and *bytes on success. A missing or unreadable
 * file is TC_ERR_IO, one shorter than min_bytes TC_ERR_PARSE ("what" names the kind of file
 * expected); `op` names the caller in the message. */
tc_status tc__map_file(const char *op, const char *path, const char *what, size_t min_bytes,
                       void **map, size_t *bytes);
/* Unmap what tc__map_file mapped (NULL is a no-op). */
void tc__unmap_file(void *map, size_t bytes);

#endif /* TC_MODEL_INTERNAL_H */
