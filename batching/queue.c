#include "batching/queue.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* levels: the batch class (0), then the priorities low, normal, high */
#define N_PRIO 4

struct colo_queue {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    colo_queue_item head[N_PRIO]; /* circular list sentinels, one per priority */
    int len[N_PRIO];
    int total;
    int max_len;
    int64_t tokens;     /* sum of the queued items' lengths */
    int64_t batch_tokens; /* of them, the batch class's */
    int64_t max_tokens; /* 0 = no bound */
    bool closed;
    bool woken;
    /* fair share: each class's decayed use (tokens) at use_ns */
    double use[COLO_QUEUE_MAX_CLASSES];
    uint64_t use_ns[COLO_QUEUE_MAX_CLASSES];
};

colo_queue *colo_queue_create(int max_len)
{
    if (max_len <= 0)
        return NULL;
    colo_queue *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    pthread_mutex_init(&q->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->cv, &ca);
    pthread_condattr_destroy(&ca);
    for (int p = 0; p < N_PRIO; p++)
        q->head[p].prev = q->head[p].next = &q->head[p];
    q->max_len = max_len;
    return q;
}

void colo_queue_destroy(colo_queue *q)
{
    if (!q)
        return;
    COLO_ASSERT(q->total == 0);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

static int prio_index(colo_priority p)
{
    return p == COLO_PRIO_HIGH ? 3 : p == COLO_PRIO_LOW ? 1 : 2;
}

/* An item's level: the batch class below every priority. */
static int level_of(const colo_queue_item *it) { return it->batch ? 0 : prio_index(it->priority); }

static void unlink_item(colo_queue *q, colo_queue_item *it)
{
    it->prev->next = it->next;
    it->next->prev = it->prev;
    it->prev = it->next = NULL;
    it->queued = false;
    q->len[level_of(it)]--;
    q->total--;
    q->tokens -= it->length;
    if (it->batch)
        q->batch_tokens -= it->length;
}

colo_status colo_queue_push(colo_queue *q, colo_queue_item *it)
{
    pthread_mutex_lock(&q->mu);
    /* The batch class never fills the queue for the others: an interactive
     * item is held to the bounds by the interactive items alone. An item
     * longer than the whole bound still gets in alone. */
    int n = it->batch ? q->total : q->total - q->len[0];
    int64_t tokens = it->batch ? q->tokens : q->tokens - q->batch_tokens;
    bool over_tokens = q->max_tokens > 0 && n > 0 && tokens + it->length > q->max_tokens;
    if (q->closed || n >= q->max_len || over_tokens) {
        pthread_mutex_unlock(&q->mu);
        return COLO_EAGAIN;
    }
    int p = level_of(it);
    colo_queue_item *h = &q->head[p];
    it->enqueue_ns = colo_now_ns();
    it->prev = h->prev;
    it->next = h;
    h->prev->next = it;
    h->prev = it;
    it->queued = true;
    q->len[p]++;
    q->total++;
    q->tokens += it->length;
    if (it->batch)
        q->batch_tokens += it->length;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    return COLO_OK;
}

static int class_of(const colo_queue_item *it)
{
    return it->share_class < 0 ? 0 : it->share_class >= COLO_QUEUE_MAX_CLASSES ? COLO_QUEUE_MAX_CLASSES - 1
                                                                               : it->share_class;
}

static double weight_of(const colo_queue_item *it) { return it->share_weight > 0 ? it->share_weight : 1.0; }

static double decayed_locked(colo_queue *q, int c, uint64_t now_ns)
{
    if (q->use[c] == 0 || now_ns <= q->use_ns[c])
        return q->use[c];
    return q->use[c] * exp2(-(double)(now_ns - q->use_ns[c]) / (double)COLO_QUEUE_SHARE_HALFLIFE_NS);
}

/* The class of an item leaving the queue for the executor pays for it. */
static void charge_locked(colo_queue *q, const colo_queue_item *it, uint64_t now_ns)
{
    int c = class_of(it);
    q->use[c] = decayed_locked(q, c, now_ns) + (double)it->length + (double)(it->share_extra > 0 ? it->share_extra : 0);
    q->use_ns[c] = now_ns;
}

/* The next item of the highest non-empty level from min_level up: the
 * oldest item of the class with the least use per weight (the list is in
 * arrival order, so the first item seen of a class is its oldest). */
static colo_queue_item *first_locked(colo_queue *q, int min_level)
{
    for (int p = N_PRIO - 1; p >= min_level; p--) {
        colo_queue_item *h = &q->head[p];
        if (h->next == h)
            continue;
        colo_queue_item *best = h->next;
        if (q->len[p] == 1)
            return best;
        uint64_t now = colo_now_ns();
        double best_v = decayed_locked(q, class_of(best), now) / weight_of(best);
        for (colo_queue_item *it = best->next; it != h; it = it->next) {
            if (class_of(it) == class_of(best))
                continue;
            double v = decayed_locked(q, class_of(it), now) / weight_of(it);
            if (v < best_v) {
                best = it;
                best_v = v;
            }
        }
        return best;
    }
    return NULL;
}

static colo_queue_item *pop_from(colo_queue *q, int min_level)
{
    pthread_mutex_lock(&q->mu);
    colo_queue_item *it = first_locked(q, min_level);
    if (it) {
        unlink_item(q, it);
        charge_locked(q, it, colo_now_ns());
    }
    pthread_mutex_unlock(&q->mu);
    return it;
}

colo_queue_item *colo_queue_pop(colo_queue *q) { return pop_from(q, 0); }

colo_queue_item *colo_queue_pop_interactive(colo_queue *q) { return pop_from(q, 1); }

bool colo_queue_remove(colo_queue *q, colo_queue_item *it)
{
    pthread_mutex_lock(&q->mu);
    bool was = it->queued;
    if (was)
        unlink_item(q, it);
    pthread_mutex_unlock(&q->mu);
    return was;
}

int colo_queue_take_expired(colo_queue *q, uint64_t now_ns, colo_queue_item **out, int max)
{
    int n = 0;
    pthread_mutex_lock(&q->mu);
    for (int p = 0; p < N_PRIO && n < max; p++) {
        colo_queue_item *h = &q->head[p];
        for (colo_queue_item *it = h->next, *nx; it != h && n < max; it = nx) {
            nx = it->next;
            if (it->deadline_ns && it->deadline_ns <= now_ns) {
                unlink_item(q, it);
                out[n++] = it;
            }
        }
    }
    pthread_mutex_unlock(&q->mu);
    return n;
}

static uint64_t oldest_enqueue_locked(colo_queue *q)
{
    uint64_t oldest = UINT64_MAX;
    for (int p = 0; p < N_PRIO; p++)
        if (q->head[p].next != &q->head[p] && q->head[p].next->enqueue_ns < oldest)
            oldest = q->head[p].next->enqueue_ns;
    return oldest;
}

int colo_queue_form_batch(colo_queue *q, const colo_batch_policy *pol, uint64_t now_ns, colo_queue_item **out,
                          uint64_t *wait_ns)
{
    int max = pol->max_batch_size > 0 ? pol->max_batch_size : 1;
    pthread_mutex_lock(&q->mu);
    *wait_ns = UINT64_MAX;
    if (q->total == 0) {
        pthread_mutex_unlock(&q->mu);
        return 0;
    }
    int target = 0;
    if (q->total >= max)
        target = max;
    for (int i = pol->n_preferred - 1; !target && i >= 0; i--)
        if (pol->preferred_sizes[i] <= max && q->total >= pol->preferred_sizes[i])
            target = pol->preferred_sizes[i];
    uint64_t oldest = oldest_enqueue_locked(q);
    uint64_t waited = now_ns > oldest ? now_ns - oldest : 0;
    if (!target && waited >= pol->max_queue_delay_ns)
        target = q->total < max ? q->total : max;
    if (!target) {
        *wait_ns = pol->max_queue_delay_ns - waited;
        pthread_mutex_unlock(&q->mu);
        return 0;
    }

    /* Anchor: the oldest item of the highest priority. Then, level by level
     * from the highest, the items closest in length to the anchor. */
    colo_queue_item *anchor = first_locked(q, 0);
    int n = 0;
    out[n++] = anchor;
    unlink_item(q, anchor);
    charge_locked(q, anchor, now_ns);
    for (int p = N_PRIO - 1; p >= 0 && n < target; p--) {
        while (n < target && q->head[p].next != &q->head[p]) {
            colo_queue_item *best = NULL;
            int best_d = 0;
            for (colo_queue_item *it = q->head[p].next; it != &q->head[p]; it = it->next) {
                int d = abs(it->length - anchor->length);
                if (!best || d < best_d) {
                    best = it;
                    best_d = d;
                }
            }
            unlink_item(q, best);
            charge_locked(q, best, now_ns);
            out[n++] = best;
        }
    }
    pthread_mutex_unlock(&q->mu);
    return n;
}

double colo_queue_share_use(colo_queue *q, int share_class, uint64_t now_ns)
{
    colo_queue_item probe = {.share_class = share_class};
    pthread_mutex_lock(&q->mu);
    double v = decayed_locked(q, class_of(&probe), now_ns);
    pthread_mutex_unlock(&q->mu);
    return v;
}

int colo_queue_len(colo_queue *q)
{
    pthread_mutex_lock(&q->mu);
    int n = q->total;
    pthread_mutex_unlock(&q->mu);
    return n;
}

void colo_queue_visit(colo_queue *q, void (*fn)(const colo_queue_item *it, void *ud), void *ud)
{
    pthread_mutex_lock(&q->mu);
    for (int p = 0; p < N_PRIO; p++)
        for (const colo_queue_item *it = q->head[p].next; it != &q->head[p]; it = it->next)
            fn(it, ud);
    pthread_mutex_unlock(&q->mu);
}

int colo_queue_len_interactive(colo_queue *q)
{
    pthread_mutex_lock(&q->mu);
    int n = q->total - q->len[0];
    pthread_mutex_unlock(&q->mu);
    return n;
}

int colo_queue_len_prio(colo_queue *q, colo_priority prio)
{
    pthread_mutex_lock(&q->mu);
    int n = q->len[prio_index(prio)];
    pthread_mutex_unlock(&q->mu);
    return n;
}

int colo_queue_max_len(const colo_queue *q) { return q->max_len; }

void colo_queue_set_max_tokens(colo_queue *q, int64_t max_tokens)
{
    pthread_mutex_lock(&q->mu);
    q->max_tokens = max_tokens > 0 ? max_tokens : 0;
    pthread_mutex_unlock(&q->mu);
}

int64_t colo_queue_tokens(colo_queue *q)
{
    pthread_mutex_lock(&q->mu);
    int64_t n = q->tokens;
    pthread_mutex_unlock(&q->mu);
    return n;
}

bool colo_queue_wait(colo_queue *q, uint64_t timeout_ns)
{
    pthread_mutex_lock(&q->mu);
    if (q->total == 0 && !q->woken && !q->closed) {
        if (timeout_ns == UINT64_MAX) {
            pthread_cond_wait(&q->cv, &q->mu);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            uint64_t t = (uint64_t)ts.tv_nsec + timeout_ns % 1000000000ull;
            ts.tv_sec += (time_t)(timeout_ns / 1000000000ull + t / 1000000000ull);
            ts.tv_nsec = (long)(t % 1000000000ull);
            pthread_cond_timedwait(&q->cv, &q->mu, &ts);
        }
    }
    q->woken = false;
    bool nonempty = q->total > 0;
    pthread_mutex_unlock(&q->mu);
    return nonempty;
}

void colo_queue_wake(colo_queue *q)
{
    pthread_mutex_lock(&q->mu);
    q->woken = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

void colo_queue_close(colo_queue *q)
{
    pthread_mutex_lock(&q->mu);
    q->closed = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

bool colo_queue_closed(colo_queue *q)
{
    pthread_mutex_lock(&q->mu);
    bool c = q->closed;
    pthread_mutex_unlock(&q->mu);
    return c;
}
