/* runtime/arena.h: a model's memory: a guaranteed share of a device, and
 * what it may borrow beyond it.
 *
 * Every allocation of a model (weights, activations, KV cache, library
 * workspaces) comes from its arena. An arena owns one device buffer of
 * limit_bytes (CUDA: one allocation; CPU: address space committed lazily)
 * and sub-allocates it. Past the limit an allocation returns COLO_ENOMEM
 * and changes nothing: not this arena, not any other.
 *
 * Fixed arenas (colo_arena_create*) hold limit_bytes = fraction * budget;
 * everything allocated is charged at once.
 *
 * Elastic arenas (colo_arena_create_elastic) share a device-wide memory
 * pool (colo_mem_pool). limit_bytes is the ceiling (address space); what
 * counts is what is charged: ordinary allocations are charged when made,
 * and storage taken with colo_arena_reserve (the KV cache's blocks) is
 * charged piece by piece with colo_arena_charge as it is used and
 * uncharged (its physical pages released) as it is freed. The pool grants
 * a charge while the sum of every member's charges stays within its
 * budget; up to its guarantee a member always gets its memory: when the
 * pool is full, members charged past their own guarantee (borrowers) are
 * asked to give memory back (colo_arena_reclaim_wanted_bytes) and the
 * charge answers COLO_EAGAIN until they have; while such a request is
 * open nobody borrows more. A charge past the ceiling, or past the
 * guarantee when the pool is full, is COLO_ENOMEM.
 *
 * Thread safety: alloc/free/stats may be called from any thread. */
#ifndef COLO_RUNTIME_ARENA_H
#define COLO_RUNTIME_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/backend.h"

typedef struct colo_arena colo_arena;
typedef struct colo_mem_pool colo_mem_pool;

typedef struct colo_arena_stats {
    size_t limit_bytes; /* capacity */
    size_t used_bytes;  /* held by live allocations (alignment padding included) */
    size_t peak_bytes;  /* highest used_bytes since creation or the last reset_peak */
    size_t n_allocs;    /* live allocations */
    size_t largest_free_bytes; /* largest single allocation that would succeed now */
    /* elastic arenas (fixed arenas: guaranteed = limit, the rest 0) */
    size_t guaranteed_bytes; /* the share the pool always grants */
    size_t borrowed_bytes;   /* charged past the guarantee */
    size_t lent_bytes;       /* of the unused guarantee, what others borrow now */
    size_t reserved_bytes;   /* address space taken with colo_arena_reserve (charged or not) */
    size_t reclaim_wanted_bytes; /* the pool asks this much back now */
    uint64_t reclaims;       /* times the pool asked this arena to give memory back */
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

/* Every allocation takes a multiple of this many bytes. */
#define COLO_ARENA_GRAIN_BYTES 256

/* Allocates bytes aligned to align (a power of two, 0 = 256) into *out (a
 * device pointer); it takes bytes rounded up to COLO_ARENA_GRAIN_BYTES.
 * COLO_ENOMEM past the limit or when fragmented; *out is then NULL and the
 * arena unchanged. */
colo_status colo_arena_alloc(colo_arena *a, size_t bytes, size_t align, void **out);
/* Returns p (from colo_arena_alloc on a) to the arena. Accepts NULL. */
void colo_arena_free(colo_arena *a, void *p);

void colo_arena_get_stats(colo_arena *a, colo_arena_stats *st);
size_t colo_arena_used(colo_arena *a);
size_t colo_arena_peak(colo_arena *a);
size_t colo_arena_limit(const colo_arena *a);
void colo_arena_reset_peak(colo_arena *a);
const char *colo_arena_name(const colo_arena *a);
bool colo_arena_is_elastic(const colo_arena *a);
colo_device *colo_arena_device(const colo_arena *a);

/* ---- elastic memory ------------------------------------------------------- */

/* A device-wide budget that elastic arenas share. NULL without host memory.
 * Destroy it after its arenas. Thread-safe. */
colo_mem_pool *colo_mem_pool_create(size_t budget_bytes);
void colo_mem_pool_destroy(colo_mem_pool *p); /* accepts NULL */
size_t colo_mem_pool_budget(const colo_mem_pool *p);
/* Bytes charged by every member now. */
size_t colo_mem_pool_used(colo_mem_pool *p);
/* Sum of the members' guarantees. */
size_t colo_mem_pool_guaranteed(colo_mem_pool *p);

/* An arena of pool with guarantee_bytes always granted and ceiling_bytes
 * (>= guarantee) of address space at most. NULL with err when the guarantee
 * does not fit what the other members are guaranteed, or the device cannot
 * reserve the address space. */
colo_arena *colo_arena_create_elastic(colo_device *dev, const char *name, colo_mem_pool *pool, size_t guarantee_bytes,
                                      size_t ceiling_bytes, char *err, size_t errlen);

/* Takes bytes of address space like colo_arena_alloc, without charging it
 * (fixed arenas: the same as colo_arena_alloc). Freed with colo_arena_free;
 * the caller uncharges what it charged first. */
colo_status colo_arena_reserve(colo_arena *a, size_t bytes, size_t align, void **out);
/* Charges bytes of reserved storage about to be used: COLO_OK, COLO_EAGAIN
 * (within the guarantee, the pool is full: borrowers were asked to give
 * memory back, try again after their next step; or past the guarantee,
 * the pool is full and other members were asked to drop cached memory:
 * colo_arena_set_evictable), COLO_ENOMEM (past the ceiling, or nothing to
 * borrow now). Fixed arenas: always COLO_OK. */
colo_status colo_arena_charge(colo_arena *a, size_t bytes);
/* Gives back a charge. */
void colo_arena_uncharge(colo_arena *a, size_t bytes);
/* Reserved storage [p, p + bytes) is about to be used / is no longer used.
 * The arena counts users per chunk of its buffer (CPU: a page; CUDA: 2
 * MiB): the first commit of a chunk backs it with physical memory (CUDA:
 * maps it; COLO_ENOMEM when the device has none), the last decommit gives
 * it back (CPU: madvise(MADV_DONTNEED); its contents are lost). Calls pair
 * up on the same ranges; ranges may share chunks. Ordinary allocations of
 * an elastic arena are committed and decommitted by alloc and free. Fixed
 * arenas: no-ops (everything is backed). */
colo_status colo_arena_commit(colo_arena *a, void *p, size_t bytes);
void colo_arena_decommit(colo_arena *a, void *p, size_t bytes);
/* A sleeping model's guarantee: colo_arena_release_guarantee gives it
 * back to the pool (what the arena still charges counts as borrowed);
 * colo_arena_restore_guarantee takes it again: COLO_ENOMEM when the pool
 * has not that much that no one is guaranteed (*need_bytes, *free_bytes:
 * the figures; either may be NULL). Fixed arenas: no-ops. Any thread. */
void colo_arena_release_guarantee(colo_arena *a);
colo_status colo_arena_restore_guarantee(colo_arena *a, size_t *need_bytes, size_t *free_bytes);
/* The guarantee it was created with (0 for a fixed arena). */
size_t colo_arena_guarantee_full(const colo_arena *a);
/* The guarantee it holds now (0 for a fixed arena). Any thread. */
size_t colo_arena_guarantee_now(colo_arena *a);
/* Of the guarantee it holds now, the bytes it does not charge, counting
 * its evictable charge as not charged: what colo_arena_lend_guarantee
 * would give back once that charge is dropped (0 for a fixed arena). */
size_t colo_arena_guarantee_idle(colo_arena *a);
/* An idle model's unused guarantee: keeps only what it charges now and
 * gives the rest back to the pool (what it charges later past that is
 * borrowed); returns the bytes given back. colo_arena_restore_guarantee
 * takes them again. Fixed arenas: 0. Any thread. */
size_t colo_arena_lend_guarantee(colo_arena *a);
/* Budget minus the sum of the members' guarantees (and of what is held). */
size_t colo_mem_pool_unguaranteed(colo_mem_pool *p);
/* Memory the process holds for a member outside its arena (a model's
 * tokenizer and executor state, kept while it sleeps). The first
 * allowance_bytes of it, over all members, are part of the process's
 * fixed overhead (colo_mem_pool_set_host_allowance; by default all of
 * it, so that nothing is counted); what
 * passes them is counted against the budget: guaranteed and charged at
 * once, as by a member that never gives it back, so that guarantees and
 * charges with it stay within the budget. COLO_ENOMEM (nothing held) when
 * the budget has not that much that no one is guaranteed. Any thread. */
colo_status colo_mem_pool_hold(colo_mem_pool *p, size_t bytes);
/* Gives back what colo_mem_pool_hold took. Accepts NULL. */
void colo_mem_pool_unhold(colo_mem_pool *p, size_t bytes);
void colo_mem_pool_set_host_allowance(colo_mem_pool *p, size_t allowance_bytes);
/* Of bytes more held now, those the budget would count (what a claim for
 * room must find). */
size_t colo_mem_pool_hold_cost(colo_mem_pool *p, size_t bytes);
/* Host bytes held in all, and of them the part counted against the budget. */
size_t colo_mem_pool_held(colo_mem_pool *p, size_t *in_budget_bytes);

/* Bytes the pool asks this arena to give back (0: none). Any thread. */
size_t colo_arena_reclaim_wanted_bytes(colo_arena *a);
/* Of this arena's charge, the bytes it can drop at once (a KV cache's
 * cached blocks nobody uses). When another member would borrow and the
 * pool is full, these count as free: the pool asks their holders to drop
 * them (colo_arena_evict_wanted_bytes) and answers the borrower
 * COLO_EAGAIN. Fixed arenas: no-op. Any thread. */
void colo_arena_set_evictable(colo_arena *a, size_t bytes);
/* Bytes of its evictable charge the pool asks this arena to drop now (0: none). */
size_t colo_arena_evict_wanted_bytes(colo_arena *a);

#endif
