/* The executor of encoder kinds: the dynamic batcher. A batch forms when
 * max_batch_size requests wait, a preferred size is reached, or the oldest
 * request has waited max_queue_delay_us; the kind runs it. */
#include "batching/served_impl.h"
#include "batching/share.h"
#include "runtime/clock.h"

#include <stdlib.h>

static void run_batch(colo_served *m, colo_request **rs, int n)
{
    colo_cosched_member_stats before = {0}, after = {0};
    if (m->member)
        colo_cosched_member_get_stats(m->member, &before);
    int tokens = 0, steps = 0;
    for (int i = 0; i < n; i++)
        tokens += rs[i]->tok.n;
    uint64_t t0 = colo_now_ns();
    colo_status st = m->kind->run_batch(m->inst, rs, n, m->member, &steps);
    uint64_t t1 = colo_now_ns();
    colo_share_batch(rs, n, t1 - t0);
    if (m->member)
        colo_cosched_member_get_stats(m->member, &after);
    if (steps > 0) {
        colo_served_count_step(m, n, tokens, t0, t1, after.wait_ns - before.wait_ns);
        m->steps += (uint64_t)steps - 1;
    }
    if (st != COLO_OK && (colo_device_poisoned(m->env.dev) || st == COLO_EFATAL))
        colo_served_mark_failed(m, "the device context was lost");
    m->running = 0; /* before the answers are out: a client that has one sees the model idle */
    for (int i = 0; i < n; i++) {
        colo_req_outcome *o = &rs[i]->out;
        o->queue_ms = rs[i]->submit_ns < t0 ? (double)(t0 - rs[i]->submit_ns) / 1e6 : 0;
        o->prefill_ms = (double)(t1 - t0) / 1e6;
        o->total_ms = (double)(colo_now_ns() - rs[i]->submit_ns) / 1e6;
        rs[i]->cb.on_done(rs[i]);
    }
}

void colo_served_run_dynamic(colo_served *m)
{
    const colo_batching_cfg *b = &m->cfg.batching;
    colo_batch_policy pol = {.max_batch_size = b->max_batch_size > 0 ? b->max_batch_size : 32,
                             .preferred_sizes = b->preferred_batch_size,
                             .n_preferred = b->n_preferred,
                             .max_queue_delay_ns = (uint64_t)(b->max_queue_delay_us > 0 ? b->max_queue_delay_us : 0) * 1000};
    colo_queue_item **items = malloc((size_t)pol.max_batch_size * sizeof *items);
    colo_request **rs = malloc((size_t)pol.max_batch_size * sizeof *rs);
    if (!items || !rs) {
        colo_served_mark_failed(m, "out of memory");
        colo_served_drain_queue(m, COLO_ENOMEM, "out of memory");
        free(items);
        free(rs);
        return;
    }
    while (!atomic_load(&m->stopping) && m->state != COLO_SERVED_FAILED) {
        colo_served_expire_queued(m);
        if (!colo_served_sleep_or_wake(m))
            continue;
        if (atomic_load(&m->want_sleep)) { /* sleeps at the next turn: nothing runs now */
            colo_sleep_ns(1000 * 1000);
            continue;
        }
        uint64_t wait = 0;
        int n = colo_queue_form_batch(m->q, &pol, colo_now_ns(), items, &wait);
        if (n == 0) {
            colo_served_idle(m);
            if (colo_served_device_lost(m))
                break;
            if (colo_queue_len(m->q) == 0)
                colo_queue_wait(m->q, 100u * 1000 * 1000);
            else
                colo_sleep_ns(wait < 200000 ? (wait ? wait : 1000) : 200000);
            continue;
        }
        int k = 0;
        for (int i = 0; i < n; i++) {
            colo_request *r = items[i]->owner;
            if (atomic_load(&r->canceled))
                colo_served_finish(m, r, COLO_ECANCELED, "canceled");
            else
                rs[k++] = r;
        }
        if (k) {
            m->running = k;
            run_batch(m, rs, k);
            m->running = 0;
        }
    }
    if (m->state == COLO_SERVED_FAILED)
        colo_served_drain_queue(m, COLO_EFATAL, "the device context was lost");
    free(items);
    free(rs);
}
