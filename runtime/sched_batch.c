/* runtime/sched_batch.c: the batch class under every policy: a step that
 * carries only lines of OpenAI batches is below any member's interactive
 * step, with a floor of step time (runtime/cosched.h has the rules). The
 * policy's own rules come after these: a batch step of a best-effort member
 * under priority is also throttled as that member is. */
#include "runtime/clock.h"
#include "runtime/cosched_impl.h"

/* Is the batch class below its floor? */
static bool batch_owed(const colo_cosched *cs)
{
    return cs->cfg.batch_min_share > 0 && cs->batch_clock < cs->inter_clock;
}

static bool batch_may_run(const colo_cosched *cs) { return cs->inter_inflight == 0 || batch_owed(cs); }

/* Charges a finished step to its class. A class without work (no step in
 * flight or held) banks at most COLO_FLOOR_LAG_NS of credit, one with work
 * 50 times that (a step is charged whole, in one lump): so batch work that
 * ran alone for an hour is not owed nothing for the next hour, and batch
 * work that arrives after an hour of interactive steps is not owed an hour. */
static void charge(colo_cosched *cs, bool batch, uint64_t ns)
{
    double f = cs->cfg.batch_min_share, lag = (double)COLO_FLOOR_LAG_NS;
    if (batch)
        cs->batch_step_ns += ns;
    else
        cs->inter_step_ns += ns;
    if (f <= 0)
        return;
    if (batch)
        cs->batch_clock += (double)ns / f;
    else
        cs->inter_clock += (double)ns / (1.0 - f);
    double batch_lag = cs->batch_inflight + cs->batch_waiting > 0 ? 50 * lag : lag;
    double inter_lag = cs->inter_inflight > 0 ? 50 * lag : lag;
    if (cs->batch_clock < cs->inter_clock - batch_lag)
        cs->batch_clock = cs->inter_clock - batch_lag;
    if (cs->inter_clock < cs->batch_clock - inter_lag)
        cs->inter_clock = cs->batch_clock - inter_lag;
}

void colo_sched_batch_begin(colo_cosched *cs, colo_cosched_member *m)
{
    m->step_held_ns = 0;
    if (!m->step_batch)
        return;
    m->st.batch_steps++;
    if (!batch_may_run(cs)) {
        m->st.batch_held++;
        cs->batch_waiting++;
        while (!batch_may_run(cs))
            pthread_cond_wait(&cs->cv, &cs->mu);
        cs->batch_waiting--;
    }
}

void colo_sched_batch_started(colo_cosched *cs, colo_cosched_member *m)
{
    if (m->step_batch)
        cs->batch_inflight++;
    else
        cs->inter_inflight++;
}

void colo_sched_batch_end(colo_cosched *cs, colo_cosched_member *m)
{
    if (m->step_batch)
        cs->batch_inflight--;
    else
        cs->inter_inflight--;
    uint64_t ns = colo_now_ns() - m->step_t0_ns;
    charge(cs, m->step_batch, ns > m->step_held_ns ? ns - m->step_held_ns : 0);
}

void colo_sched_batch_throttle(colo_cosched_member *m)
{
    if (!m->step_batch)
        return;
    colo_cosched *cs = m->cs;
    pthread_mutex_lock(&cs->mu);
    if (!batch_may_run(cs)) {
        uint64_t t0 = colo_now_ns();
        m->st.throttled++;
        cs->batch_waiting++;
        while (!batch_may_run(cs))
            pthread_cond_wait(&cs->cv, &cs->mu);
        cs->batch_waiting--;
        uint64_t held = colo_now_ns() - t0;
        m->step_held_ns += held;
        m->st.throttle_ns += held;
    }
    pthread_mutex_unlock(&cs->mu);
}
