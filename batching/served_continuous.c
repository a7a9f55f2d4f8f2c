/* The executor of generative kinds: continuous batching. Requests are
 * admitted from the queue while fewer than max_batch_size are live; lines
 * of batches (the batch class) only take places nothing else wants: an
 * interactive request is admitted while fewer than max_batch_size
 * interactive ones are live, whatever the batch holds, and the planner
 * (batching/continuous.h) preempts batch sequences to run it. The kind's
 * step runs the batch; cancellations and queue deadlines are applied
 * between steps. */
#include "batching/served_impl.h"
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

/* Admits what the queue holds while there is room: max_live requests, of
 * which the batch class's are counted apart (see above). */
static void admit_queued(colo_served *m, int max_live)
{
    int n_batch = 0;
    for (int i = 0; i < m->n_live; i++)
        n_batch += m->live[i]->qi.batch;
    /* asked to sleep: what runs finishes, nothing new starts */
    while (!atomic_load(&m->want_sleep) && m->n_live - n_batch < max_live) {
        colo_queue_item *it = m->n_live < max_live ? colo_queue_pop(m->q) : colo_queue_pop_interactive(m->q);
        if (!it)
            break;
        bool batch = it->batch;
        int before = m->n_live;
        admit_one(m, it->owner);
        n_batch += batch && m->n_live > before;
    }
    atomic_store(&m->running_batch, n_batch);
}

void colo_served_run_continuous(colo_served *m)
{
    int max_live = m->cfg.batching.max_batch_size > 0 ? m->cfg.batching.max_batch_size : 32;
    /* room for max_live interactive requests beside max_live batch lines */
    m->live = calloc((size_t)max_live * 2, sizeof *m->live);
    m->n_live = 0;
    if (!m->live) {
        colo_served_mark_failed(m, "out of memory");
        colo_served_drain_queue(m, COLO_ENOMEM, "out of memory");
        return;
    }
    while (!atomic_load(&m->stopping)) {
        colo_served_adapters_work(m);
        colo_served_expire_queued(m);
        apply_cancellations(m);
        if (!colo_served_sleep_or_wake(m)) {
            if (m->state == COLO_SERVED_FAILED)
                break;
            continue;
        }
        admit_queued(m, max_live);
        colo_served_refresh_info(m); /* cancellations free blocks at once */
        m->running = m->n_live;      /* after: a reader that sees it sees the blocks of the admission too */
        if (!m->n_live) {
            colo_served_idle(m);
            if (colo_served_device_lost(m)) {
                colo_served_drain_queue(m, COLO_EFATAL, "the device context was lost");
                break;
            }
            if (colo_arena_evict_wanted_bytes(m->arena) || colo_arena_reclaim_wanted_bytes(m->arena)) {
                int n_idle = 0; /* idle, the step only gives cached or borrowed memory back */
                pthread_mutex_lock(&m->exec_mu);
                m->kind->step(m->inst, NULL, &n_idle);
                pthread_mutex_unlock(&m->exec_mu);
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
        colo_cosched_set_deadline(m->member, m->stream,
                                  colo_admission_latest_start(m->adm, &m->cfg.sla, m->live, m->n_live));
        colo_step_share share;
        colo_share_step_begin(&share, m->live, m->n_live, t0, m->kind->started, m->inst);
        pthread_mutex_lock(&m->exec_mu);
        colo_status st = m->kind->step(m->inst, m->member, &n_tokens);
        pthread_mutex_unlock(&m->exec_mu);
        uint64_t t1 = colo_now_ns();
        colo_share_step_end(&share, m->live, m->n_live, t1);
        if (m->member)
            colo_cosched_member_get_stats(m->member, &after);
        m->running = m->n_live;
        colo_served_refresh_info(m);
        if (after.batch_steps > before.batch_steps) { /* a step of lines: its holds for others' steps are not its time */
            uint64_t held = after.wait_ns - before.wait_ns + after.throttle_ns - before.throttle_ns;
            t1 = t1 - t0 > held ? t1 - held : t0;
        }
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
        } else if (n_tokens == 0 && !colo_queue_len_interactive(m->q)) {
            colo_served_idle(m); /* no step to run: nothing of the device is kept from the others */
            colo_sleep_ns(1000 * 1000); /* every live sequence waits for cache space */
        }
    }
    cancel_all(m, COLO_ECANCELED, "the server is shutting down");
    m->running = 0;
}
