/* tc__map: an open-addressing hash map from nonzero 64-bit keys to pointers (linear probing,
 * backward-shift deletion). Internal to the runtime: the pool's block indexes. */
#ifndef TC_MAP_H
#define TC_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tc__map {
    uint64_t *keys; /* [cap]; 0 marks an empty slot */
    void **vals;    /* [cap] */
    size_t cap;     /* a power of two, or 0 before the first insert */
    size_t count;
} tc__map;

/* Return the value stored under key, or NULL. */
void *tc__map_get(const tc__map *m, uint64_t key);

/* Store val under key (replacing any value); false when out of host memory. */
bool tc__map_put(tc__map *m, uint64_t key, void *val);

/* Remove key and return its value, or NULL when absent. */
void *tc__map_remove(tc__map *m, uint64_t key);

/* Free the table (not the values). */
void tc__map_deinit(tc__map *m);

#endif /* TC_MAP_H */
