/* runtime/arena.h: a model's memory, a fixed fraction of a device.
 *
 * Every allocation of a model (weights, activations, KV cache, library
 * workspaces) comes from its arena. An arena owns one device buffer of
 * limit_bytes = fraction * budget (CUDA: one cudaMalloc; CPU: address space
 * committed lazily) and sub-allocates it. Past the limit an allocation
 * returns COLO_ENOMEM and changes nothing: not this arena, not any other.
 *
 * Thread safety: alloc/free/stats may be called from any thread. */
#ifndef COLO_RUNTIME_ARENA_H
#define COLO_RUNTIME_ARENA_H

#include <stddef.h>

#include "runtime/backend.h"

typedef struct colo_arena colo_arena;

typedef struct colo_arena_stats {
    size_t limit_bytes; /* capacity */
    size_t used_bytes;  /* held by live allocations (alignment padding included) */
    size_t peak_bytes;  /* highest used_bytes since creation or the last reset_peak */
    size_t n_allocs;    /* live allocations */
    size_t largest_free_bytes; /* largest single allocation that would succeed now */
} colo_arena_stats;

/* Budget an arena fraction applies to: CUDA: the device's total memory;
 * CPU: colo_device_config.cpu_memory_bytes or physical memory. */
size_t colo_arena_device_budget(colo_device *dev);

/* Creates an arena of fraction (0, 1] of budget_bytes (0 = the device budget
 * above). name is copied (for logs and errors). Returns NULL with err set when
 * the device cannot provide the memory. */
colo_arena *colo_arena_create(colo_device *dev, const char *name, double fraction, size_t budget_bytes, char *err,
                              size_t errlen);
/* Same, with an exact byte limit. */
colo_arena *colo_arena_create_bytes(colo_device *dev, const char *name, size_t limit_bytes, char *err,
                                    size_t errlen);
/* Frees the arena's buffer. Every allocation becomes invalid. Accepts NULL. */
void colo_arena_destroy(colo_arena *a);

/* Allocates bytes aligned to align (a power of two, 0 = 256) into *out (a
 * device pointer). COLO_ENOMEM past the limit or when fragmented; *out is
 * then NULL and the arena unchanged. */
colo_status colo_arena_alloc(colo_arena *a, size_t bytes, size_t align, void **out);
/* Returns p (from colo_arena_alloc on a) to the arena. Accepts NULL. */
void colo_arena_free(colo_arena *a, void *p);

void colo_arena_get_stats(colo_arena *a, colo_arena_stats *st);
size_t colo_arena_used(colo_arena *a);
size_t colo_arena_peak(colo_arena *a);
size_t colo_arena_limit(const colo_arena *a);
void colo_arena_reset_peak(colo_arena *a);
const char *colo_arena_name(const colo_arena *a);
colo_device *colo_arena_device(const colo_arena *a);

#endif
