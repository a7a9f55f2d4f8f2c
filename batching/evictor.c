/* Room for a guarantee, made by putting idle models to sleep (batching/evictor.h). */
#include "batching/evictor.h"
#include "batching/served_impl.h"
#include "runtime/clock.h"
#include "runtime/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define CLAIM_WAIT_NS (10ull * 1000 * 1000 * 1000)

struct colo_evictor {
    colo_mem_pool *pool;
    pthread_mutex_t claim_mu; /* one claim at a time, held from claim to unclaim */
    pthread_mutex_t mu;       /* the members */
    colo_served *members[256];
    int n;
};

static const char *prio_name(colo_priority p)
{
    return p == COLO_PRIO_LOW ? "low" : p == COLO_PRIO_HIGH ? "high" : "normal";
}

colo_evictor *colo_evictor_create(colo_mem_pool *pool)
{
    colo_evictor *ev = calloc(1, sizeof *ev);
    if (!ev)
        return NULL;
    ev->pool = pool;
    pthread_mutex_init(&ev->claim_mu, NULL);
    pthread_mutex_init(&ev->mu, NULL);
    return ev;
}

void colo_evictor_free(colo_evictor *ev)
{
    if (!ev)
        return;
    pthread_mutex_destroy(&ev->claim_mu);
    pthread_mutex_destroy(&ev->mu);
    free(ev);
}

colo_mem_pool *colo_evictor_pool(const colo_evictor *ev) { return ev ? ev->pool : NULL; }

colo_status colo_evictor_join(colo_evictor *ev, colo_served *m)
{
    pthread_mutex_lock(&ev->mu);
    colo_status st = COLO_ENOMEM;
    if (ev->n < (int)(sizeof ev->members / sizeof *ev->members)) {
        ev->members[ev->n++] = m;
        st = COLO_OK;
    }
    pthread_mutex_unlock(&ev->mu);
    return st;
}

void colo_evictor_leave(colo_evictor *ev, colo_served *m)
{
    pthread_mutex_lock(&ev->mu);
    for (int i = 0; i < ev->n; i++)
        if (ev->members[i] == m) {
            ev->members[i] = ev->members[--ev->n];
            break;
        }
    pthread_mutex_unlock(&ev->mu);
}

/* Under ev->mu: may m be put to sleep once it is idle? */
static bool sleepable(const colo_served *m, const colo_served *except)
{
    return m != except && !atomic_load(&m->pinned) && atomic_load(&m->state) == COLO_SERVED_READY &&
           !atomic_load(&m->draining) && m->kind->sleep && m->kind->wake && colo_arena_guarantee_full(m->arena) > 0;
}

/* Under ev->mu: may m be put to sleep to make room now? */
static bool evictable(const colo_served *m, const colo_served *except)
{
    return sleepable(m, except) && !atomic_load(&m->evict_asked) && atomic_load(&m->running) == 0 &&
           colo_queue_len(((colo_served *)m)->q) == 0;
}

/* Under ev->mu: the candidates, in eviction order (lowest priority, then least recently used). */
static int candidates(colo_evictor *ev, const colo_served *except, colo_served **out)
{
    int n = 0;
    for (int i = 0; i < ev->n; i++)
        if (evictable(ev->members[i], except))
            out[n++] = ev->members[i];
    for (int i = 1; i < n; i++) /* insertion sort: a few models */
        for (int j = i; j > 0; j--) {
            colo_served *a = out[j - 1], *b = out[j];
            bool swap = a->cfg.priority > b->cfg.priority ||
                        (a->cfg.priority == b->cfg.priority &&
                         atomic_load(&a->last_used_ns) > atomic_load(&b->last_used_ns));
            if (!swap)
                break;
            out[j - 1] = b, out[j] = a;
        }
    return n;
}

size_t colo_evictor_available(colo_evictor *ev, const colo_served *except)
{
    colo_served *c[256];
    pthread_mutex_lock(&ev->mu);
    size_t avail = colo_mem_pool_unguaranteed(ev->pool);
    int n = candidates(ev, except, c);
    for (int i = 0; i < n; i++)
        avail += colo_arena_guarantee_full(c[i]->arena);
    pthread_mutex_unlock(&ev->mu);
    return avail;
}

size_t colo_evictor_available_later(colo_evictor *ev, const colo_served *except)
{
    pthread_mutex_lock(&ev->mu);
    size_t avail = colo_mem_pool_unguaranteed(ev->pool);
    for (int i = 0; i < ev->n; i++)
        if (sleepable(ev->members[i], except))
            avail += colo_arena_guarantee_full(ev->members[i]->arena);
    pthread_mutex_unlock(&ev->mu);
    return avail;
}

colo_status colo_evictor_claim(colo_evictor *ev, size_t bytes, const colo_served *except, const char *for_whom,
                               char *err, size_t errlen)
{
    pthread_mutex_lock(&ev->claim_mu);
    size_t free_g = colo_mem_pool_unguaranteed(ev->pool);
    if (free_g >= bytes)
        return COLO_OK;
    colo_served *c[256], *victims[256];
    int nv = 0;
    pthread_mutex_lock(&ev->mu);
    int n = candidates(ev, except, c);
    size_t idle = 0, got = free_g;
    for (int i = 0; i < n; i++)
        idle += colo_arena_guarantee_full(c[i]->arena);
    if (free_g + idle >= bytes)
        for (int i = 0; i < n && got < bytes; i++) {
            victims[nv++] = c[i];
            got += colo_arena_guarantee_full(c[i]->arena);
            atomic_store(&c[i]->evict_asked, true);
        }
    pthread_mutex_unlock(&ev->mu);
    if (!nv) {
        colo_set_err(err, errlen,
                     "needs %zu bytes of guaranteed memory, %zu available (%zu not guaranteed to any model, %zu held "
                     "by idle models that may sleep)",
                     bytes, free_g + idle, free_g, idle);
        pthread_mutex_unlock(&ev->claim_mu);
        return COLO_ENOMEM;
    }
    for (int i = 0; i < nv; i++) {
        colo_served *v = victims[i];
        atomic_fetch_add(&v->evictions, 1);
        COLO_INFO("evict: putting model %s (priority %s, idle %.1f s) to sleep to make room for %s", v->cfg.name,
                  prio_name(v->cfg.priority),
                  (double)(colo_now_ns() - atomic_load(&v->last_used_ns)) / 1e9, for_whom ? for_whom : "a model");
        atomic_store(&v->want_wake, false);
        atomic_store(&v->want_sleep, true);
        colo_queue_wake(v->q);
    }
    uint64_t until = colo_now_ns() + CLAIM_WAIT_NS;
    /* (a claimant that is being stopped gives up: shutdown does not wait on victims) */
    while ((free_g = colo_mem_pool_unguaranteed(ev->pool)) < bytes && colo_now_ns() < until &&
           !(except && atomic_load(&((colo_served *)except)->stopping)))
        colo_sleep_ns(2 * 1000 * 1000);
    if (free_g >= bytes)
        return COLO_OK;
    colo_set_err(err, errlen,
                 "needs %zu bytes of guaranteed memory, %zu available: the models asked to sleep did not in time", bytes,
                 free_g);
    pthread_mutex_unlock(&ev->claim_mu);
    return COLO_ENOMEM;
}

void colo_evictor_unclaim(colo_evictor *ev) { pthread_mutex_unlock(&ev->claim_mu); }
