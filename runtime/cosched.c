/* runtime/cosched.c: what every scheduling policy shares: members, the
 * lock, the statistics; the policy's own rules are its row's slots
 * (runtime/cosched_impl.h, runtime/sched_*.c). */
#include "runtime/clock.h"
#include "runtime/cosched_impl.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

colo_cosched *colo_cosched_create(const colo_cosched_config *cfg, char *err, size_t errlen)
{
    if (!cfg || !colo_sched_policy_ops_of(cfg->policy) || cfg->best_effort_max_steps < 0 ||
        cfg->best_effort_max_ops < 0 || cfg->best_effort_max_us < 0 || cfg->quantum_us < 0 ||
        !(cfg->best_effort_min_share >= 0 && cfg->best_effort_min_share < 1) ||
        !(cfg->batch_min_share >= 0 && cfg->batch_min_share < 1)) {
        colo_set_err(err, errlen, "invalid co-scheduler configuration");
        return NULL;
    }
    colo_cosched *cs = calloc(1, sizeof *cs);
    if (!cs) {
        colo_set_err(err, errlen, "out of memory");
        return NULL;
    }
    cs->cfg = *cfg;
    cs->policy = colo_sched_policy_ops_of(cfg->policy);
    cs->floor_by_steps = cfg->best_effort_min_share > 0 && colo_device_best_effort_owed(cfg->device) < 0;
    pthread_mutex_init(&cs->mu, NULL);
    pthread_cond_init(&cs->cv, NULL);
    return cs;
}

void colo_cosched_destroy(colo_cosched *cs)
{
    if (!cs)
        return;
    COLO_ASSERT(cs->n_members == 0);
    pthread_cond_destroy(&cs->cv);
    pthread_mutex_destroy(&cs->mu);
    free(cs);
}

colo_sched_policy colo_cosched_policy(const colo_cosched *cs) { return cs->cfg.policy; }

colo_cosched_member *colo_cosched_join(colo_cosched *cs, const char *name, colo_priority priority)
{
    colo_cosched_member *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->cs = cs;
    snprintf(m->name, sizeof m->name, "%s", name ? name : "");
    m->priority = priority;
    m->idle = true; /* nothing run yet, nothing held */
    m->st.idle = 1;
    if (cs->policy->join)
        cs->policy->join(cs, m);
    pthread_mutex_lock(&cs->mu);
    cs->n_members++;
    m->next_member = cs->members;
    cs->members = m;
    pthread_mutex_unlock(&cs->mu);
    return m;
}

void colo_cosched_leave(colo_cosched_member *m)
{
    if (!m)
        return;
    colo_cosched *cs = m->cs;
    COLO_ASSERT(!m->inflight);
    pthread_mutex_lock(&cs->mu);
    cs->n_members--;
    for (colo_cosched_member **p = &cs->members; *p; p = &(*p)->next_member)
        if (*p == m) {
            *p = m->next_member;
            break;
        }
    if (cs->holder == m)
        cs->holder = NULL;
    pthread_mutex_unlock(&cs->mu);
    free(m);
}

uint64_t colo_cosched_step_begin(colo_cosched_member *m) { return colo_cosched_step_begin_as(m, COLO_STEP_INTERACTIVE); }

uint64_t colo_cosched_step_begin_as(colo_cosched_member *m, colo_step_class cls)
{
    colo_cosched *cs = m->cs;
    uint64_t t0 = colo_now_ns();
    COLO_ASSERT(!m->inflight);
    pthread_mutex_lock(&cs->mu);
    m->step_batch = cls == COLO_STEP_BATCH;
    m->step_cold = m->cold && !m->step_batch; /* lines stay below everything, woken or not */
    m->st.waiting = 1;
    colo_sched_batch_begin(cs, m);
    if (cs->policy->step_begin)
        cs->policy->step_begin(cs, m);
    m->st.waiting = 0;
    if (m->step_cold) {
        m->cold = false;
        m->st.cold_steps++;
    }
    m->idle = false;
    m->st.idle = 0;
    colo_sched_batch_started(cs, m);
    m->inflight = true;
    m->step_t0_ns = colo_now_ns();
    m->ops_since_high = 0;
    m->st.steps++;
    m->st.inflight = 1;
    uint64_t waited = colo_now_ns() - t0;
    m->st.wait_ns += waited;
    pthread_mutex_unlock(&cs->mu);
    return waited / 1000;
}

void colo_cosched_step_end(colo_cosched_member *m)
{
    colo_cosched *cs = m->cs;
    COLO_ASSERT(m->inflight);
    pthread_mutex_lock(&cs->mu);
    if (cs->policy->step_end)
        cs->policy->step_end(cs, m);
    colo_sched_batch_end(cs, m);
    m->inflight = false;
    m->st.inflight = 0;
    pthread_cond_broadcast(&cs->cv);
    pthread_mutex_unlock(&cs->mu);
}

void colo_cosched_throttle(colo_cosched_member *m, int n_ops)
{
    colo_sched_batch_throttle(m);
    if (m->cs->policy->throttle)
        m->cs->policy->throttle(m, n_ops);
}

void colo_cosched_idle(colo_cosched_member *m, colo_stream *s)
{
    if (!m)
        return;
    colo_cosched *cs = m->cs;
    COLO_ASSERT(!m->inflight);
    pthread_mutex_lock(&cs->mu);
    bool was_idle = m->idle;
    if (!was_idle) {
        m->idle = true;
        m->st.idle = 1;
        m->st.idles++;
    }
    m->cold = false; /* the request it was woken for is gone */
    if (cs->policy->idle)
        cs->policy->idle(cs, m);
    pthread_mutex_unlock(&cs->mu);
    if (!was_idle) /* a deadline set since it was last idle: the next one comes with the next step */
        colo_cosched_set_deadline(m, s, 0);
}

void colo_cosched_cold(colo_cosched_member *m, colo_stream *s, uint64_t deadline_ns)
{
    if (!m)
        return;
    colo_cosched *cs = m->cs;
    pthread_mutex_lock(&cs->mu);
    m->cold = true;
    /* it holds a deadline from now on: the next colo_cosched_idle clears it */
    m->idle = false;
    m->st.idle = 0;
    pthread_mutex_unlock(&cs->mu);
    colo_cosched_set_deadline(m, s, deadline_ns);
}

void colo_cosched_set_deadline(colo_cosched_member *m, colo_stream *s, uint64_t deadline_ns)
{
    if (m && m->cs->policy->deadline)
        m->cs->policy->deadline(m, s, deadline_ns);
}

void colo_cosched_floor_times(colo_cosched *cs, uint64_t *be_ns, uint64_t *hi_ns)
{
    pthread_mutex_lock(&cs->mu);
    *be_ns = cs->be_step_ns;
    *hi_ns = cs->hi_step_ns;
    pthread_mutex_unlock(&cs->mu);
}

void colo_cosched_batch_times(colo_cosched *cs, uint64_t *batch_ns, uint64_t *interactive_ns)
{
    pthread_mutex_lock(&cs->mu);
    *batch_ns = cs->batch_step_ns;
    *interactive_ns = cs->inter_step_ns;
    pthread_mutex_unlock(&cs->mu);
}

double colo_cosched_batch_min_share(const colo_cosched_member *m) { return m ? m->cs->cfg.batch_min_share : 0; }

void colo_cosched_member_get_stats(colo_cosched_member *m, colo_cosched_member_stats *st)
{
    pthread_mutex_lock(&m->cs->mu);
    *st = m->st;
    st->turn = m->cs->holder == m;
    pthread_mutex_unlock(&m->cs->mu);
}

const char *colo_cosched_member_name(const colo_cosched_member *m) { return m->name; }
colo_priority colo_cosched_member_priority(const colo_cosched_member *m) { return m->priority; }
