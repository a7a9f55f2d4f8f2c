/* models/arch/alloc_set.h: the arena allocations one model owns, so that freeing
 * the model returns every one of them (weights, caches, activations).
 * Not thread-safe: a model's allocations change on its owner's thread. */
#ifndef COLO_MODELS_ALLOC_SET_H
#define COLO_MODELS_ALLOC_SET_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/arena.h"

typedef struct colo_alloc_set {
    void **p;
    int n, cap;
} colo_alloc_set;

/* Allocates bytes (256-aligned; 0 counts as 1) from a and records it. */
colo_status colo_alloc_set_take(colo_alloc_set *s, colo_arena *a, size_t bytes, void **out);
/* Returns p (recorded in s) to a. Accepts NULL. */
void colo_alloc_set_give(colo_alloc_set *s, colo_arena *a, void *p);
/* Replaces a model's activation scratch: gives *act back (NULL: none),
 * takes bytes for a new one and grows the host array *host (malloc'd) to
 * host_n int32s. On failure *act is NULL and *host is as it was. */
colo_status colo_alloc_set_replace(colo_alloc_set *s, colo_arena *a, void **act, size_t bytes, int32_t **host,
                                   size_t host_n);
/* Returns every recorded allocation to a and frees the record. */
void colo_alloc_set_clear(colo_alloc_set *s, colo_arena *a);

/* Hands out the next piece of bytes from *cur, one allocation cut into
 * 256-byte-aligned pieces (size the allocation with 256 spare bytes per
 * piece), and advances *cur past it. */
static inline void *colo_carve(char **cur, size_t bytes)
{
    void *p = *cur;
    *cur += (bytes + 255) & ~(size_t)255;
    return p;
}

#endif
