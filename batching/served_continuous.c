/* The executor of generative kinds: continuous batching. Requests are
 * admitted from the queue while fewer than max_batch_size are live; the
 * kind's step runs the batch; cancellations and queue deadlines are
 * applied between steps. */
#include "batching/served_internal.h"
#include "batching/share.h"
#include "runtime/clock.h"
#include "runtime/log.h"

#include <stdlib.h>
#include <string.h>

static void admit_one(colo_served *m, colo_request *r)
{
    if (atomic_load(&r->canceled)) {
        colo_served_finish(m, r, COLO_ECANCELED, "canceled");
        return;
    }
    char e[256];
    colo_status st = m->kind->admit(m->inst, r, e, sizeof e);
    if (st != COLO_OK) {
        const char *msg = colo_pool_strndup(r->pool, e, strlen(e));
        colo_served_finish(m, r, st, msg ? msg : "out of memory");
        return;
    }
    m->live[m->n_live++] = r;
}

/* Ends what was canceled, and what still waits for cache space past its
 * queue deadline. A request leaves m->live as it ends (swapped with the
 * last one), so the walk goes from the end. */
static void apply_cancellations(colo_served *m)
{
    uint64_t now = colo_now_ns();
    for (int i = m->n_live - 1; i >= 0; i--) {
        if (i >= m->n_live)
            continue;
        colo_request *r = m->live[i];
        if (atomic_load(&r->canceled))
            m->kind->cancel(m->inst, r, COLO_ECANCELED, "canceled");
        else if (r->qi.deadline_ns && now > r->qi.deadline_ns && !m->kind->started(m->inst, r))
            m->kind->cancel(m->inst, r, COLO_ETIMEDOUT, "the KV cache stayed full past the request's queue deadline");
    }
}

static void cancel_all(colo_served *m, colo_status st, const char *msg)
{
    while (m->n_live > 0) {
        int before = m->n_live;
        m->kind->cancel(m->inst, m->live[m->n_live - 1], st, msg);
        if (m->n_live == before)
            m->n_live--; /* the kind no longer knew it */
    }
}

/* Drops the KV cache and the weights; false when the kind could not. */
static bool go_to_sleep(colo_served *m)
{
    char e[256] = "";
    colo_status st = m->kind->sleep(m->inst, e, sizeof e);
    if (st != COLO_OK) {
        COLO_WARN("model %s: cannot sleep: %s", m->cfg.name, e[0] ? e : colo_status_str(st));
        return false;
    }
    m->state = COLO_SERVED_SLEEPING;
    atomic_fetch_add(&m->sleeps, 1);
    colo_served_refresh_info(m);
    COLO_INFO("model %s: asleep (KV cache and weights dropped)", m->cfg.name);
    return true;
}

/* Loads the weights again. A wake that finds memory short (others borrowed
 * the model's guarantee and are giving it back) is retried; any other
 * failure fails the model. */
static bool wake_up(colo_served *m)
{
    uint64_t t0 = colo_now_ns();
    m->state = COLO_SERVED_WAKING;
    char e[512] = "";
    for (;;) {
        e[0] = 0;
        colo_status st = m->kind->wake(m->inst, e, sizeof e);
        if (st == COLO_OK)
            break;
        if (st != COLO_ENOMEM || atomic_load(&m->stopping) ||
            colo_now_ns() - t0 > (uint64_t)(m->cfg.batching.queue_timeout_ms > 0 ? m->cfg.batching.queue_timeout_ms
                                                                                   : 30000) * 1000000u) {
            COLO_ERROR("model %s: cannot wake: %s", m->cfg.name, e[0] ? e : colo_status_str(st));
            colo_served_mark_failed(m, "the model could not wake");
            colo_served_drain_queue(m, COLO_ENOMEM, "the model could not wake: not enough memory");
            return false;
        }
        colo_sleep_ns(2 * 1000 * 1000);
    }
    uint64_t dt = colo_now_ns() - t0;
    atomic_store(&m->last_wake_ns, dt);
    atomic_fetch_add(&m->wakes, 1);
    atomic_store(&m->want_wake, false);
    m->state = atomic_load(&m->draining) ? COLO_SERVED_DRAINING : COLO_SERVED_READY;
    colo_served_refresh_info(m);
    if (m->env.hooks.on_wake)
        m->env.hooks.on_wake(m->env.hooks.ud, m->cfg.name, (double)dt / 1e9);
    COLO_INFO("model %s: awake in %.1f ms", m->cfg.name, (double)dt / 1e6);
    return true;
}

/* Between steps: sleep when asked (once nothing runs) or idle past
 * keep_alive_ms; wake when asked or when a request waits. False: the
 * executor has nothing to run now (it waited). */
static bool sleep_or_wake(colo_served *m)
{
    uint64_t now = colo_now_ns();
    bool queued = colo_queue_len(m->q) > 0;
    if (m->n_live || queued)
        m->idle_since_ns = 0;
    else if (!m->idle_since_ns)
        m->idle_since_ns = now;
    if (m->state == COLO_SERVED_READY && !m->n_live) {
        bool idle_long = m->cfg.keep_alive_ms > 0 && !queued && m->idle_since_ns &&
                         now - m->idle_since_ns >= (uint64_t)m->cfg.keep_alive_ms * 1000000u;
        if ((atomic_load(&m->want_sleep) || idle_long) && go_to_sleep(m))
            atomic_store(&m->want_sleep, false);
    }
    if (m->state == COLO_SERVED_SLEEPING) {
        if (!atomic_load(&m->want_wake) && !colo_queue_len(m->q)) {
            colo_queue_wait(m->q, 100u * 1000 * 1000);
            return false;
        }
        return wake_up(m);
    }
    return true;
}

void colo_served_run_continuous(colo_served *m)
{
    int max_live = m->cfg.batching.max_batch_size > 0 ? m->cfg.batching.max_batch_size : 32;
    m->live = calloc((size_t)max_live, sizeof *m->live);
    m->n_live = 0;
    if (!m->live) {
        colo_served_mark_failed(m, "out of memory");
        colo_served_drain_queue(m, COLO_ENOMEM, "out of memory");
        return;
    }
    while (!atomic_load(&m->stopping)) {
        colo_served_expire_queued(m);
        apply_cancellations(m);
        if (!sleep_or_wake(m)) {
            if (m->state == COLO_SERVED_FAILED)
                break;
            continue;
        }
        colo_queue_item *it;
        /* asked to sleep: what runs finishes, nothing new starts */
        while (!atomic_load(&m->want_sleep) && m->n_live < max_live && (it = colo_queue_pop(m->q)))
            admit_one(m, it->owner);
        m->running = m->n_live;
        colo_served_refresh_info(m); /* cancellations free blocks at once */
        if (!m->n_live) {
            if (colo_served_device_lost(m)) {
                colo_served_drain_queue(m, COLO_EFATAL, "the device context was lost");
                break;
            }
            if (colo_arena_evict_wanted_bytes(m->arena) || colo_arena_reclaim_wanted_bytes(m->arena)) {
                int n_idle = 0; /* idle, the step only gives cached or borrowed memory back */
                m->kind->step(m->inst, NULL, &n_idle);
                colo_served_refresh_info(m);
            }
            colo_queue_wait(m->q, 100u * 1000 * 1000);
            continue;
        }
        int n_tokens = 0, batch = m->n_live;
        uint64_t t0 = colo_now_ns();
        colo_cosched_member_stats before = {0}, after = {0};
        if (m->member)
            colo_cosched_member_get_stats(m->member, &before);
        colo_step_share share;
        colo_share_step_begin(&share, m->live, m->n_live, t0, m->kind->started, m->inst);
        colo_status st = m->kind->step(m->inst, m->member, &n_tokens);
        uint64_t t1 = colo_now_ns();
        colo_share_step_end(&share, m->live, m->n_live, t1);
        if (m->member)
            colo_cosched_member_get_stats(m->member, &after);
        m->running = m->n_live;
        colo_served_refresh_info(m);
        if (n_tokens > 0)
            colo_served_count_step(m, batch, n_tokens, t0, t1, after.wait_ns - before.wait_ns);
        if (st != COLO_OK) {
            COLO_WARN("model %s: step failed: %s", m->cfg.name, colo_status_str(st));
            if (colo_device_poisoned(m->env.dev) || st == COLO_EFATAL) {
                colo_served_mark_failed(m, "the device context was lost");
                cancel_all(m, COLO_EFATAL, "the device context was lost");
                colo_served_drain_queue(m, COLO_EFATAL, "the device context was lost");
                break;
            }
        } else if (n_tokens == 0) {
            colo_sleep_ns(1000 * 1000); /* every live sequence waits for cache space */
        }
    }
    cancel_all(m, COLO_ECANCELED, "the server is shutting down");
    m->running = 0;
}
