/* batching/evictor.h: room for a model's guarantee, made by putting others
 * to sleep.
 *
 * Every served model of one memory pool (runtime/arena.h) may be asked;
 * the evictor asks through the model's own functions (batching/served.h,
 * "eviction") and never writes its state.
 * When a load, a wake or a model's guarantee does not fit what the pool
 * has that no one is guaranteed, colo_evictor_claim makes room:
 *  1. When the idle models' unused guarantees (the part of its guarantee
 *     a model does not charge, once its cached KV blocks are dropped)
 *     cover the shortfall, those models lend them, staying awake (the
 *     kind's trim, then colo_arena_lend_guarantee); nobody sleeps. A
 *     model that lent takes its guarantee back before it runs again.
 *  2. Else models are put to sleep (a sleeping model gives its whole
 *     guarantee back), in tiers: idle models first; then, for a cold
 *     start (a load or a wake), busy models of lower priority than the
 *     claimant (preempted: a model asked to sleep admits nothing new,
 *     finishes what it runs, then sleeps; its queued requests stay queued
 *     and wake it again, they are never refused for memory); last, idle
 *     models woken less than the minimum residency ago whose priority is
 *     above the claimant's (so that a preempted model does not evict the
 *     one that preempted it straight back while anything else could make
 *     room; among equals least recently used decides). A claimant
 *     that holds requests (a wake for queued requests, a model taking a
 *     lent guarantee back) does not take those at all: it is refused and
 *     tries again (served.c) until their window is over; a load, or a
 *     wake with nothing queued, takes them last. Within a tier: lowest
 *     priority first, then least recently used.
 * Never a pinned model, one that is loading, waking, draining or failed,
 * or one whose kind cannot sleep; never a busy one for a claimant of its
 * priority or lower. When even all of them would not make room, nothing
 * is put to sleep and the claim is refused with the bytes needed and
 * available.
 *
 * Thread safety: every function may be called from any thread. A claim
 * waits (up to 10 s) for its victims to fall asleep, so the event loop
 * never claims; it asks colo_evictor_available instead. */
#ifndef COLO_BATCHING_EVICTOR_H
#define COLO_BATCHING_EVICTOR_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/arena.h"
#include "runtime/status.h"

typedef struct colo_evictor colo_evictor;
typedef struct colo_served colo_served;

/* The models an evictor chooses among are its owner's table of served
 * models (server/core/registry.c), not a list of its own: walk calls visit(m,
 * arg) for each model listed there, from any thread, holding whatever
 * keeps them from being freed meanwhile (it must not call the evictor).
 * Models that are not READY (loading, failed, unloaded) are passed over. */
typedef void (*colo_evictor_visit_fn)(colo_served *m, void *arg);
typedef void (*colo_evictor_walk_fn)(void *walk_ud, colo_evictor_visit_fn visit, void *arg);

/* NULL without memory. walk may be NULL (no model may be put to sleep).
 * Free it after the models are gone. */
colo_evictor *colo_evictor_create(colo_mem_pool *pool, colo_evictor_walk_fn walk, void *walk_ud);
void colo_evictor_free(colo_evictor *ev); /* accepts NULL */
colo_mem_pool *colo_evictor_pool(const colo_evictor *ev);

/* A model woken (or loaded) less than this long ago is evicted last, by a
 * claimant of its priority or lower (above). 0: no such window. */
#define COLO_EVICTOR_MIN_RESIDENCY_MS 2000
void colo_evictor_set_min_residency_ms(colo_evictor *ev, int ms);

/* Bytes of guarantee that a claim by `except` (NULL: a claim for no
 * model, which preempts nobody) could make free: what no one is
 * guaranteed plus the guarantees of every model it may put to sleep. */
size_t colo_evictor_available(colo_evictor *ev, const colo_served *except);
/* The same for the load of a model of that priority not made yet. */
size_t colo_evictor_available_for_load(colo_evictor *ev, colo_priority priority);

/* Bytes of guarantee that could be had once every model that runs or has
 * requests queued now is idle: what no one is guaranteed plus the
 * guarantees of every awake model but `except`. Pinned, loading, waking,
 * draining or failed models, and those whose kind cannot sleep, count
 * for nothing. */
size_t colo_evictor_available_later(colo_evictor *ev, const colo_served *except);

/* Makes bytes of guarantee free in the pool. COLO_OK: they are, and the
 * caller holds the evictor until colo_evictor_unclaim (take the guarantee
 * in between, so that no other claim takes it first). COLO_ENOMEM with
 * "needs N bytes, A available (...)" in err: nothing was put to sleep, or
 * the victims did not make room in time (10 s); the evictor is not held.
 * A claim's priority and whether it is a cold start are except's (its
 * state LOADING, SLEEPING or WAKING). */
colo_status colo_evictor_claim(colo_evictor *ev, size_t bytes, const colo_served *except, const char *for_whom,
                               char *err, size_t errlen);
void colo_evictor_unclaim(colo_evictor *ev);

#endif
