/* batching/evictor.h: room for a model's guarantee, made by putting others
 * to sleep.
 *
 * Every served model of one memory pool (runtime/arena.h) is a member.
 * When a load, a wake or a model's guarantee does not fit what the pool
 * has that no one is guaranteed, colo_evictor_claim puts idle models to
 * sleep (a sleeping model gives its guarantee back to the pool): lowest
 * priority first, least recently used within a priority; never a pinned
 * model, one that runs or has queued requests, one that is loading,
 * waking, draining or failed, or one whose kind cannot sleep. When even
 * all of them would not make room, nothing is put to sleep and the claim
 * is refused with the bytes needed and available.
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

/* NULL without memory. Free it after its members have left. */
colo_evictor *colo_evictor_create(colo_mem_pool *pool);
void colo_evictor_free(colo_evictor *ev); /* accepts NULL */
colo_mem_pool *colo_evictor_pool(const colo_evictor *ev);

/* Membership: colo_served_start joins, colo_served_unload / free leave. */
colo_status colo_evictor_join(colo_evictor *ev, colo_served *m);
void colo_evictor_leave(colo_evictor *ev, colo_served *m);

/* Bytes of guarantee that could be had now without waiting on anyone:
 * what no one is guaranteed plus the guarantees of every model that may
 * be put to sleep (except `except`, which may be NULL). */
size_t colo_evictor_available(colo_evictor *ev, const colo_served *except);

/* Bytes of guarantee that could be had once every model that runs or has
 * requests queued now is idle: colo_evictor_available plus their
 * guarantees. Pinned, loading, waking, draining or failed models, and
 * those whose kind cannot sleep, count for nothing. */
size_t colo_evictor_available_later(colo_evictor *ev, const colo_served *except);

/* Makes bytes of guarantee free in the pool. COLO_OK: they are, and the
 * caller holds the evictor until colo_evictor_unclaim (take the guarantee
 * in between, so that no other claim takes it first). COLO_ENOMEM with
 * "needs N bytes, A available (...)" in err: nothing was put to sleep, or
 * the victims did not fall asleep in time; the evictor is not held. */
colo_status colo_evictor_claim(colo_evictor *ev, size_t bytes, const colo_served *except, const char *for_whom,
                               char *err, size_t errlen);
void colo_evictor_unclaim(colo_evictor *ev);

#endif
