/* batching/served_evict.c: a served model's side of eviction
 * (batching/served.h, "eviction"): what the evictor may read of it, and
 * its requests to lend or to sleep, which the executor carries out between
 * steps (served.c). The evictor never writes a model's state itself. */
#include "batching/served_impl.h"

void colo_served_evict_view_of(colo_served *m, colo_served_evict_view *v)
{
    int state = atomic_load(&m->state);
    *v = (colo_served_evict_view){
        .name = m->cfg.name,
        .priority = m->cfg.priority,
        .state = (colo_served_state)state,
        .asked = atomic_load(&m->evict_asked),
        .stopping = atomic_load(&m->stopping),
        .running = atomic_load(&m->running),
        .queued = colo_queue_len(m->q),
        .last_used_ns = atomic_load(&m->last_used_ns),
        .resident_since_ns = atomic_load(&m->resident_since_ns),
    };
    v->busy = v->running != 0 || v->queued != 0;
    v->sleepable = !atomic_load(&m->pinned) && state == COLO_SERVED_READY && !atomic_load(&m->draining) &&
                   colo_kind_can(m->kind, COLO_KIND_CAN_SLEEP) && colo_arena_guarantee_full(m->arena) > 0;
    if (v->sleepable) { /* (an arena exists while the model is READY) */
        v->can_trim = m->kind->trim != NULL;
        v->guarantee_now = colo_arena_guarantee_now(m->arena);
        v->guarantee_idle = v->can_trim ? colo_arena_guarantee_idle(m->arena) : 0;
    }
}

void colo_served_evict_trim(colo_served *m)
{
    atomic_store(&m->evict_asked, true);
    atomic_store(&m->want_trim, true);
    colo_queue_wake(m->q);
}

bool colo_served_evict_sleep(colo_served *m)
{
    bool preempt = atomic_load(&m->running) != 0 || colo_queue_len(m->q) != 0;
    atomic_store(&m->evict_asked, true);
    atomic_fetch_add(&m->evictions, 1);
    if (preempt) {
        atomic_fetch_add(&m->sleep_preemptions, 1);
        atomic_store(&m->preempted, true);
    }
    colo_served_wish_sleep(m); /* served's own sleep path */
    return preempt;
}
