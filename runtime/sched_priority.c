/* runtime/sched_priority.c: policy priority, streams of each model's
 * priority, and best-effort (LOW) members throttled while a higher step is
 * in flight, in the manner of Orion, with an optional floor
 * (runtime/cosched.h has the rules). Stream priority alone never preempts
 * running work: the throttle is what bounds the delay. */
#include "runtime/clock.h"
#include "runtime/cosched_impl.h"

#include <time.h>

/* The floor is kept by the device where it accounts its own time (the CPU
 * pool), else by the co-scheduler from step times. */
static colo_status plan(colo_sched_plan *pl, char *err, size_t errlen)
{
    double f = pl->best_effort_min_share;
    if (f <= 0)
        return COLO_OK;
    pl->cc->best_effort_min_share = f;
    colo_status st = colo_device_set_best_effort_floor(pl->dev, f);
    if (st != COLO_OK && st != COLO_EUNSUPPORTED) {
        colo_set_err(err, errlen, "scheduler.best_effort_min_share %g: %s", f, colo_status_str(st));
        return st;
    }
    pl->cc->device = st == COLO_OK ? pl->dev : NULL;
    pl->floor_by = st == COLO_OK ? "the device (worker time)" : "the co-scheduler (step time)";
    return COLO_OK;
}

static void join(colo_cosched *cs, colo_cosched_member *m)
{
    (void)cs;
    m->best_effort = m->priority == COLO_PRIO_LOW;
}

/* Is the best-effort class below its floor? */
static bool be_owed(const colo_cosched *cs)
{
    if (cs->cfg.best_effort_min_share <= 0)
        return false;
    if (cs->floor_by_steps)
        return cs->be_clock < cs->hi_clock;
    return colo_device_best_effort_owed(cs->cfg.device) == 1;
}

/* Floor by step time: charges a finished step to its class. A class
 * without work (no step in flight or waiting) banks at most
 * COLO_FLOOR_LAG_NS of credit; one with work, 50 times that (a step is
 * charged whole, in one lump). */
static void floor_charge(colo_cosched *cs, bool best_effort, uint64_t ns)
{
    double f = cs->cfg.best_effort_min_share, lag = (double)COLO_FLOOR_LAG_NS;
    if (best_effort) {
        cs->be_clock += (double)ns / f;
        cs->be_step_ns += ns;
    } else {
        cs->hi_clock += (double)ns / (1.0 - f);
        cs->hi_step_ns += ns;
    }
    double be_lag = cs->be_inflight + cs->be_waiting > 0 ? 50 * lag : lag;
    double hi_lag = cs->high_inflight > 0 ? 50 * lag : lag;
    if (cs->be_clock < cs->hi_clock - be_lag)
        cs->be_clock = cs->hi_clock - be_lag;
    if (cs->hi_clock < cs->be_clock - hi_lag)
        cs->hi_clock = cs->be_clock - hi_lag;
}

/* May a best-effort member start a step now? */
static bool be_may_start(const colo_cosched *cs)
{
    return cs->high_inflight == 0 || cs->be_inflight < cs->cfg.best_effort_max_steps || be_owed(cs);
}

/* Waits for a wake-up; with a floor the device's account changes without
 * one, so look again every millisecond. */
static void wait_be(colo_cosched *cs)
{
    if (cs->cfg.best_effort_min_share > 0 && !cs->floor_by_steps) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&cs->cv, &cs->mu, &ts);
        return;
    }
    pthread_cond_wait(&cs->cv, &cs->mu);
}

/* A batch step of a member that is not best-effort is neither: the batch
 * class (runtime/sched_batch.c) already holds it below every interactive
 * step, and it must not hold a best-effort member's interactive steps. */
static bool outside_classes(const colo_cosched_member *m) { return m->step_batch && !m->best_effort; }

static void step_begin(colo_cosched *cs, colo_cosched_member *m)
{
    if (outside_classes(m))
        return;
    if (m->best_effort) {
        cs->be_waiting++;
        while (!be_may_start(cs))
            wait_be(cs);
        cs->be_waiting--;
        cs->be_inflight++;
    } else if (cs->high_inflight++ == 0) {
        cs->high_since_ns = colo_now_ns();
    }
}

static void step_end(colo_cosched *cs, colo_cosched_member *m)
{
    if (outside_classes(m))
        return;
    if (m->best_effort)
        cs->be_inflight--;
    else
        cs->high_inflight--;
    if (cs->floor_by_steps)
        floor_charge(cs, m->best_effort, colo_now_ns() - m->step_t0_ns);
}

static void throttle(colo_cosched_member *m, int n_ops)
{
    if (!m->best_effort)
        return;
    colo_cosched *cs = m->cs;
    pthread_mutex_lock(&cs->mu);
    bool over_time = cs->cfg.best_effort_max_us > 0 && cs->high_inflight > 0 &&
                     colo_now_ns() - cs->high_since_ns > (uint64_t)cs->cfg.best_effort_max_us * 1000u;
    if (cs->high_inflight > 0 && !be_owed(cs) &&
        (over_time || m->ops_since_high + n_ops > cs->cfg.best_effort_max_ops)) {
        uint64_t t0 = colo_now_ns();
        m->st.throttled++;
        while (cs->high_inflight > 0 && !be_owed(cs))
            wait_be(cs);
        m->st.throttle_ns += colo_now_ns() - t0;
        m->ops_since_high = 0;
    }
    if (cs->high_inflight > 0)
        m->ops_since_high += n_ops;
    else
        m->ops_since_high = 0;
    pthread_mutex_unlock(&cs->mu);
}

const colo_sched_policy_ops colo_sched_priority = {
    .name = "priority", .validate = colo_sched_validate_plain, .stream = colo_sched_stream_by_priority,
    .plan = plan, .join = join, .step_begin = step_begin, .step_end = step_end, .throttle = throttle,
};
