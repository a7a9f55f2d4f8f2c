/* Room for a guarantee, made by putting idle models to sleep (batching/evictor.h). */
#include "batching/evictor.h"
#include "batching/queue.h"
#include "batching/served.h"
#include "runtime/clock.h"
#include "runtime/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define CLAIM_WAIT_NS (10ull * 1000 * 1000 * 1000)
#define MAX_CANDIDATES 256

struct colo_evictor {
    colo_mem_pool *pool;
    colo_evictor_walk_fn walk; /* the served models: the owner's table */
    void *walk_ud;
    pthread_mutex_t claim_mu; /* one claim at a time, held from claim to unclaim */
    pthread_mutex_t mu;       /* a walk and the choices made on it */
    uint64_t min_residency_ns; /* a model woken more recently is evicted last */
};

colo_evictor *colo_evictor_create(colo_mem_pool *pool, colo_evictor_walk_fn walk, void *walk_ud)
{
    colo_evictor *ev = calloc(1, sizeof *ev);
    if (!ev)
        return NULL;
    ev->pool = pool;
    ev->walk = walk;
    ev->walk_ud = walk_ud;
    ev->min_residency_ns = (uint64_t)COLO_EVICTOR_MIN_RESIDENCY_MS * 1000000u;
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

void colo_evictor_set_min_residency_ms(colo_evictor *ev, int ms)
{
    pthread_mutex_lock(&ev->mu);
    ev->min_residency_ns = ms > 0 ? (uint64_t)ms * 1000000u : 0;
    pthread_mutex_unlock(&ev->mu);
}

/* A model the walk found, as the evictor sees it. */
typedef struct member {
    colo_served *m;
    colo_served_evict_view v;
} member;

/* May it be put to sleep once it is idle? */
static bool sleepable(const member *x, const colo_served *except) { return x->m != except && x->v.sleepable; }

/* Who claims: its priority; whether it is a cold start (a load or a
 * wake), which may preempt models of lower priority; whether it claims for
 * requests it holds, and so tries again until models within their minimum
 * residency may go (rather than evict them at once). A claim for no model
 * is of the lowest priority, preempts nobody and does not wait. */
typedef struct claimant {
    colo_priority prio;
    bool cold, patient;
} claimant;

static claimant claimant_of(const colo_served *except)
{
    if (!except)
        return (claimant){COLO_PRIO_LOW, false, false};
    colo_served_evict_view v;
    colo_served_evict_view_of((colo_served *)except, &v);
    int s = v.state;
    return (claimant){v.priority, s == COLO_SERVED_LOADING || s == COLO_SERVED_SLEEPING || s == COLO_SERVED_WAKING,
                      (s == COLO_SERVED_SLEEPING || s == COLO_SERVED_READY) && v.busy};
}

/* Eviction tiers, in the order they are drawn on. */
enum {
    TIER_IDLE,       /* idle, awake past its minimum residency (or of no higher priority than the claimant) */
    TIER_PREEMPT,    /* busy, of lower priority than a cold-starting claimant */
    TIER_PROTECTED,  /* idle, woken within the minimum residency, of higher priority than the claimant
                        (not for a claimant holding requests: it tries again once the window is over) */
    TIER_NONE,
};

/* Under ev->mu. */
static int tier_of(const colo_evictor *ev, const member *x, const colo_served *except, claimant cl, uint64_t now)
{
    if (!sleepable(x, except) || x->v.asked)
        return TIER_NONE;
    if (x->v.busy)
        return cl.cold && x->v.priority < cl.prio ? TIER_PREEMPT : TIER_NONE;
    /* The window shields a model from claimants of lower priority only:
     * among equals, least recently used decides, and a cold request does
     * not wait for a window (under a bursty trace the waits cost more SLO
     * attainment than the swaps they save). */
    bool recent = ev->min_residency_ns && now - x->v.resident_since_ns < ev->min_residency_ns;
    if (!recent || x->v.priority <= cl.prio)
        return TIER_IDLE;
    return cl.patient ? TIER_NONE : TIER_PROTECTED;
}

typedef struct cand {
    member x;
    int tier;
    size_t sleep_bytes; /* its guarantee now: what it gives back asleep */
    size_t trim_bytes;  /* of which, unused: what it lends awake once its cache is dropped */
} cand;

static bool before(const cand *a, const cand *b)
{
    if (a->tier != b->tier)
        return a->tier < b->tier;
    if (a->x.v.priority != b->x.v.priority)
        return a->x.v.priority < b->x.v.priority;
    return a->x.v.last_used_ns < b->x.v.last_used_ns;
}

/* What one walk gathers: every served model's view. */
typedef struct gathered {
    member x[MAX_CANDIDATES];
    int n;
} gathered;

static void gather_one(colo_served *m, void *arg)
{
    gathered *g = arg;
    if (g->n == MAX_CANDIDATES)
        return;
    g->x[g->n].m = m;
    colo_served_evict_view_of(m, &g->x[g->n].v);
    g->n++;
}

/* Under ev->mu. */
static void gather(colo_evictor *ev, gathered *g)
{
    g->n = 0;
    if (ev->walk)
        ev->walk(ev->walk_ud, gather_one, g);
}

/* Under ev->mu: the candidates, in eviction order (tier, lowest priority,
 * least recently used). */
static int candidates_for(colo_evictor *ev, const colo_served *except, claimant cl, cand *out)
{
    uint64_t now = colo_now_ns();
    gathered *g = malloc(sizeof *g);
    int n = 0;
    if (!g)
        return 0; /* nobody to ask: the claim is refused */
    gather(ev, g);
    for (int i = 0; i < g->n; i++) {
        int t = tier_of(ev, &g->x[i], except, cl, now);
        if (t == TIER_NONE)
            continue;
        cand c = {g->x[i], t, g->x[i].v.guarantee_now, 0};
        if (t != TIER_PREEMPT)
            c.trim_bytes = g->x[i].v.guarantee_idle;
        out[n++] = c;
    }
    free(g);
    for (int i = 1; i < n; i++) /* insertion sort: a few models */
        for (int j = i; j > 0 && before(&out[j], &out[j - 1]); j--) {
            cand t = out[j - 1];
            out[j - 1] = out[j], out[j] = t;
        }
    return n;
}

static int candidates(colo_evictor *ev, const colo_served *except, cand *out)
{
    return candidates_for(ev, except, claimant_of(except), out);
}

static size_t available_for(colo_evictor *ev, const colo_served *except, claimant cl)
{
    cand c[MAX_CANDIDATES];
    pthread_mutex_lock(&ev->mu);
    size_t avail = colo_mem_pool_unguaranteed(ev->pool);
    int n = candidates_for(ev, except, cl, c);
    for (int i = 0; i < n; i++)
        avail += c[i].sleep_bytes;
    pthread_mutex_unlock(&ev->mu);
    return avail;
}

size_t colo_evictor_available(colo_evictor *ev, const colo_served *except)
{
    return available_for(ev, except, claimant_of(except));
}

size_t colo_evictor_available_for_load(colo_evictor *ev, colo_priority priority)
{
    return available_for(ev, NULL, (claimant){priority, true, false});
}

size_t colo_evictor_available_later(colo_evictor *ev, const colo_served *except)
{
    gathered *g = malloc(sizeof *g);
    if (!g)
        return 0;
    pthread_mutex_lock(&ev->mu);
    size_t avail = colo_mem_pool_unguaranteed(ev->pool);
    gather(ev, g);
    for (int i = 0; i < g->n; i++)
        if (sleepable(&g->x[i], except))
            avail += g->x[i].v.guarantee_now;
    pthread_mutex_unlock(&ev->mu);
    free(g);
    return avail;
}

/* What a claim asks of its victims. */
typedef struct plan {
    const member *v[MAX_CANDIDATES];
    bool trim[MAX_CANDIDATES]; /* lend its unused guarantee, staying awake (else: sleep) */
    int n;
} plan;

/* Under ev->mu: the victims that make free_g up to bytes, or none when
 * every candidate together would not. Idle models lend their unused
 * guarantee (their KV cache dropped) before any model is put to sleep. */
static void make_plan(const cand *c, int n, size_t free_g, size_t bytes, plan *p, size_t *all)
{
    size_t trims = 0, sleeps = 0;
    for (int i = 0; i < n; i++)
        trims += c[i].trim_bytes, sleeps += c[i].sleep_bytes;
    *all = free_g + sleeps;
    p->n = 0;
    size_t got = free_g;
    if (free_g + trims >= bytes) {
        for (int i = 0; i < n && got < bytes; i++)
            if (c[i].trim_bytes) {
                p->v[p->n] = &c[i].x, p->trim[p->n++] = true;
                got += c[i].trim_bytes;
            }
        return;
    }
    if (free_g + sleeps < bytes)
        return;
    for (int i = 0; i < n && got < bytes; i++) {
        p->v[p->n] = &c[i].x, p->trim[p->n++] = false;
        got += c[i].sleep_bytes;
    }
}

/* Asks victim x, through its model's own functions, to lend or to sleep. */
static void ask(const member *x, bool trim, const char *for_whom, claimant cl)
{
    const char *whom = for_whom ? for_whom : "a model";
    if (trim) {
        COLO_INFO("evict: model %s (idle) lends its unused memory guarantee (KV cache dropped) to make room for %s",
                  x->v.name, whom);
        colo_served_evict_trim(x->m);
        return;
    }
    if (x->v.busy)
        COLO_INFO("evict: preempting model %s (priority %s, %d running, %d queued): it sleeps once what runs "
                  "finishes, to make room for %s (priority %s); its queued requests wait for it to wake",
                  x->v.name, colo_priority_name(x->v.priority), x->v.running, x->v.queued, whom, colo_priority_name(cl.prio));
    else
        COLO_INFO("evict: putting model %s (priority %s, idle %.1f s) to sleep to make room for %s", x->v.name,
                  colo_priority_name(x->v.priority), (double)(colo_now_ns() - x->v.last_used_ns) / 1e9, whom);
    colo_served_evict_sleep(x->m);
}

/* Is m still to do what it was asked? Is it being stopped? */
static bool pending(colo_served *m)
{
    colo_served_evict_view v;
    colo_served_evict_view_of(m, &v);
    return v.asked;
}

static bool stopping(const colo_served *m)
{
    colo_served_evict_view v;
    colo_served_evict_view_of((colo_served *)m, &v);
    return v.stopping;
}

/* Waits until the pool has bytes unguaranteed, every victim asked has
 * done what it was asked, the claimant stops, or the time is up. */
static size_t wait_victims(colo_evictor *ev, size_t bytes, const plan *p, const colo_served *except, uint64_t until)
{
    for (;;) {
        size_t free_g = colo_mem_pool_unguaranteed(ev->pool);
        bool waiting = false;
        for (int i = 0; i < p->n && !waiting; i++)
            waiting = pending(p->v[i]->m);
        /* (a claimant that is being stopped gives up: shutdown does not wait on victims) */
        if (free_g >= bytes || !waiting || colo_now_ns() >= until || (except && stopping(except)))
            return free_g;
        colo_sleep_ns(2 * 1000 * 1000);
    }
}

colo_status colo_evictor_claim(colo_evictor *ev, size_t bytes, const colo_served *except, const char *for_whom,
                               char *err, size_t errlen)
{
    pthread_mutex_lock(&ev->claim_mu);
    size_t free_g = colo_mem_pool_unguaranteed(ev->pool);
    uint64_t until = colo_now_ns() + CLAIM_WAIT_NS;
    /* a few rounds: a model that lent less than it seemed to have unused
     * is put to sleep in the next */
    for (int round = 0; free_g < bytes && round < 3 && colo_now_ns() < until; round++) {
        cand c[MAX_CANDIDATES];
        plan p;
        size_t all = 0;
        pthread_mutex_lock(&ev->mu);
        int n = candidates(ev, except, c);
        make_plan(c, n, free_g, bytes, &p, &all);
        for (int i = 0; i < p.n; i++)
            ask(p.v[i], p.trim[i], for_whom, claimant_of(except));
        pthread_mutex_unlock(&ev->mu);
        if (!p.n) {
            colo_set_err(err, errlen,
                         "needs %zu bytes of guaranteed memory, %zu available (%zu not guaranteed to any model, %zu "
                         "held by models that may sleep)",
                         bytes, all, free_g, all - free_g);
            pthread_mutex_unlock(&ev->claim_mu);
            return COLO_ENOMEM;
        }
        free_g = wait_victims(ev, bytes, &p, except, until);
    }
    if (free_g >= bytes)
        return COLO_OK;
    colo_set_err(err, errlen,
                 "needs %zu bytes of guaranteed memory, %zu available: the models asked to make room did not in time",
                 bytes, free_g);
    pthread_mutex_unlock(&ev->claim_mu);
    return COLO_ENOMEM;
}

void colo_evictor_unclaim(colo_evictor *ev) { pthread_mutex_unlock(&ev->claim_mu); }
