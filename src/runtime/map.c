/* Open-addressing hash map (see map.h). */
#include "runtime/map.h"

#include "runtime/host.h"

static size_t slot_of(uint64_t key, size_t cap)
{
    /* Device pointers and size classes share low zero bits: mix before masking. */
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

void *tc__map_get(const tc__map *m, uint64_t key)
{
    if (m->cap == 0 || key == 0)
        return NULL;
    for (size_t i = slot_of(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == key)
            return m->vals[i];
        if (m->keys[i] == 0)
            return NULL;
    }
}

static bool grow(tc__map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    uint64_t *keys = tc_host_calloc(cap, sizeof *keys);
    void **vals = tc_host_calloc(cap, sizeof *vals);
    if (keys == NULL || vals == NULL) {
        tc_host_free(keys);
        tc_host_free(vals);
        return false;
    }
    for (size_t j = 0; j < m->cap; j++) {
        if (m->keys[j] == 0)
            continue;
        size_t i = slot_of(m->keys[j], cap);
        while (keys[i] != 0)
            i = (i + 1) & (cap - 1);
        keys[i] = m->keys[j];
        vals[i] = m->vals[j];
    }
    tc_host_free(m->keys);
    tc_host_free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    return true;
}

bool tc__map_put(tc__map *m, uint64_t key, void *val)
{
    if (key == 0)
        return false;
    if ((m->count + 1) * 4 > m->cap * 3 && !grow(m))
        return false;
    size_t i = slot_of(key, m->cap);
    while (m->keys[i] != 0 && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    if (m->keys[i] == 0)
        m->count++;
    m->keys[i] = key;
    m->vals[i] = val;
    return true;
}

void *tc__map_remove(tc__map *m, uint64_t key)
{
    if (m->cap == 0 || key == 0)
        return NULL;
    size_t mask = m->cap - 1, i = slot_of(key, m->cap);
    while (m->keys[i] != key) {
        if (m->keys[i] == 0)
            return NULL;
        i = (i + 1) & mask;
    }
    void *val = m->vals[i];
    /* Backward-shift: move later entries of the probe run into the hole. */
    for (size_t j = (i + 1) & mask; m->keys[j] != 0; j = (j + 1) & mask) {
        size_t home = slot_of(m->keys[j], m->cap);
        if (((j - home) & mask) >= ((j - i) & mask)) {
            m->keys[i] = m->keys[j];
            m->vals[i] = m->vals[j];
            i = j;
        }
    }
    m->keys[i] = 0;
    m->vals[i] = NULL;
    m->count--;
    return val;
}

void tc__map_deinit(tc__map *m)
{
    tc_host_free(m->keys);
    tc_host_free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    m->cap = m->count = 0;
}
