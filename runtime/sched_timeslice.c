/* runtime/sched_timeslice.c: policy timeslice, one member's step at a
 * time, granted round-robin (runtime/cosched.h has the rules). What
 * time-slicing separate servers gives: the baseline. */
#include "runtime/clock.h"
#include "runtime/cosched_impl.h"

#include <time.h>

/* Does a cold step (colo_cosched_cold) that goes before m's wait? Cold
 * steps go first, the oldest of them first. */
static bool cold_waiter_before(const colo_cosched *cs, const colo_cosched_member *m)
{
    for (const colo_cosched_member *o = cs->members; o; o = o->next_member)
        if (o != m && o->waiting && o->step_cold && (!m->step_cold || o->ticket < m->ticket))
            return true;
    return false;
}

/* May m take the device now? Else *until gets when to look again without a
 * wake-up (0: only on a wake-up). A cold step takes it at the next step
 * boundary: the holder's turn and grace do not keep it waiting, nor do
 * waiters that are not cold (a model woken for a request would otherwise
 * wait behind as many turns as there are waiters, each up to quantum_us,
 * on top of its wake). */
static bool slice_may_take(const colo_cosched *cs, const colo_cosched_member *m, uint64_t now, uint64_t *until)
{
    *until = 0;
    if (cs->slice_busy || cold_waiter_before(cs, m))
        return false;
    if (m->step_cold)
        return true;
    if (cs->holder == m && now < cs->turn_end_ns)
        return true;
    if (cs->holder && cs->holder != m && now < cs->hold_until_ns && now < cs->turn_end_ns) {
        *until = cs->hold_until_ns < cs->turn_end_ns ? cs->hold_until_ns : cs->turn_end_ns;
        return false;
    }
    for (const colo_cosched_member *o = cs->members; o; o = o->next_member)
        if (o != m && o->waiting && o->ticket < m->ticket)
            return false; /* an older waiter goes first */
    return true;
}

static void wait_until(colo_cosched *cs, uint64_t until_ns)
{
    if (!until_ns) {
        pthread_cond_wait(&cs->cv, &cs->mu);
        return;
    }
    /* The condition variable uses CLOCK_REALTIME: convert the monotonic deadline. */
    uint64_t now = colo_now_ns(), d = until_ns > now ? until_ns - now : 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + d;
    ts.tv_sec = (time_t)(t / 1000000000ull);
    ts.tv_nsec = (long)(t % 1000000000ull);
    pthread_cond_timedwait(&cs->cv, &cs->mu, &ts);
}

static void step_begin(colo_cosched *cs, colo_cosched_member *m)
{
    m->ticket = cs->next_ticket++;
    m->waiting = true;
    uint64_t until;
    while (!slice_may_take(cs, m, colo_now_ns(), &until))
        wait_until(cs, until);
    m->waiting = false;
    cs->slice_busy = true;
    if (cs->holder != m) { /* a new turn */
        cs->holder = m;
        cs->turn_end_ns = colo_now_ns() + (uint64_t)cs->cfg.quantum_us * 1000u;
    }
}

static void step_end(colo_cosched *cs, colo_cosched_member *m)
{
    (void)m;
    cs->slice_busy = false;
    cs->hold_until_ns = colo_now_ns() + COLO_COSCHED_TURN_GRACE_US * 1000u;
}

/* A holder with no next step ends its turn at once: the grace is for a
 * holder between two steps of work it has, not for one that has none. */
static void idle(colo_cosched *cs, colo_cosched_member *m)
{
    if (cs->holder != m)
        return;
    cs->holder = NULL;
    pthread_cond_broadcast(&cs->cv);
}

const colo_sched_policy_ops colo_sched_timeslice = {
    .name = "timeslice", .validate = colo_sched_validate_plain, .stream = colo_sched_stream_alike,
    .idle = idle, .step_begin = step_begin, .step_end = step_end,
};
