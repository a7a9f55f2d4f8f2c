#include "runtime/cosched.h"
#include "runtime/clock.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct colo_cosched_member {
    colo_cosched *cs;
    char name[64];
    colo_priority priority;
    bool best_effort;          /* PRIORITY policy and LOW priority */
    bool inflight;
    int ops_since_high;        /* ops queued by this best-effort step while a higher one ran */
    uint64_t step_t0_ns;       /* when its step began */
    uint64_t ticket;           /* TIMESLICE: ticket taken in step_begin */
    bool waiting;              /* TIMESLICE: in step_begin */
    colo_cosched_member *next_member;
    colo_cosched_member_stats st;
};

struct colo_cosched {
    colo_cosched_config cfg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_members;
    int high_inflight;         /* non-best-effort steps running (PRIORITY) */
    int be_inflight;           /* best-effort steps running (PRIORITY) */
    uint64_t high_since_ns;    /* PRIORITY: when high_inflight last became non-zero */
    /* TIMESLICE: whole steps granted in arrival order (tickets), except that
     * the member whose turn it is keeps the device until its turn ends. */
    uint64_t next_ticket;
    bool slice_busy;
    colo_cosched_member *holder; /* whose turn it is (NULL: nobody's) */
    uint64_t turn_end_ns;        /* holder's turn ends */
    uint64_t hold_until_ns;      /* holder's claim lapses (grace after its last step) */
    colo_cosched_member *members;
    /* PRIORITY floor by step time: each class's step time over its part. */
    bool floor_by_steps;
    int be_waiting;            /* best-effort members in step_begin */
    double be_clock, hi_clock;
    uint64_t be_step_ns, hi_step_ns;
};

static const char *const policy_names[] = {"timeslice", "spatial", "priority", "partition", "fair", "deadline"};
#define N_POLICIES 6

colo_status colo_sched_policy_parse(const char *s, colo_sched_policy *out)
{
    for (int i = 0; s && i < N_POLICIES; i++) {
        if (!strcmp(s, policy_names[i])) {
            *out = (colo_sched_policy)i;
            return COLO_OK;
        }
    }
    return COLO_EINVAL;
}

const char *colo_sched_policy_name(colo_sched_policy p)
{
    return (unsigned)p < N_POLICIES ? policy_names[p] : "unknown";
}

colo_cosched *colo_cosched_create(const colo_cosched_config *cfg, char *err, size_t errlen)
{
    if (!cfg || (unsigned)cfg->policy >= N_POLICIES || cfg->best_effort_max_steps < 0 ||
        cfg->best_effort_max_ops < 0 || cfg->best_effort_max_us < 0 || cfg->quantum_us < 0 ||
        !(cfg->best_effort_min_share >= 0 && cfg->best_effort_min_share < 1)) {
        colo_set_err(err, errlen, "invalid co-scheduler configuration");
        return NULL;
    }
    colo_cosched *cs = calloc(1, sizeof *cs);
    if (!cs) {
        colo_set_err(err, errlen, "out of memory");
        return NULL;
    }
    cs->cfg = *cfg;
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
    m->best_effort = cs->cfg.policy == COLO_SCHED_PRIORITY && priority == COLO_PRIO_LOW;
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

/* PRIORITY: is the best-effort class below its floor? */
static bool be_owed(const colo_cosched *cs)
{
    if (cs->cfg.best_effort_min_share <= 0)
        return false;
    if (cs->floor_by_steps)
        return cs->be_clock < cs->hi_clock;
    return colo_device_best_effort_owed(cs->cfg.device) == 1;
}

/* PRIORITY floor by step time: charges a finished step to its class. A
 * class without work (no step in flight or waiting) banks at most
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

/* PRIORITY: may best-effort member m start a step now? */
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

/* TIMESLICE: may m take the device now? Else *until gets when to look again
 * without a wake-up (0: only on a wake-up). */
static bool slice_may_take(const colo_cosched *cs, const colo_cosched_member *m, uint64_t now, uint64_t *until)
{
    *until = 0;
    if (cs->slice_busy)
        return false;
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

uint64_t colo_cosched_step_begin(colo_cosched_member *m)
{
    colo_cosched *cs = m->cs;
    uint64_t t0 = colo_now_ns();
    COLO_ASSERT(!m->inflight);
    pthread_mutex_lock(&cs->mu);
    switch (cs->cfg.policy) {
    case COLO_SCHED_TIMESLICE: {
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
        break;
    }
    case COLO_SCHED_PRIORITY:
        if (m->best_effort) {
            cs->be_waiting++;
            while (!be_may_start(cs))
                wait_be(cs);
            cs->be_waiting--;
            cs->be_inflight++;
        } else if (cs->high_inflight++ == 0) {
            cs->high_since_ns = colo_now_ns();
        }
        break;
    case COLO_SCHED_SPATIAL:
    case COLO_SCHED_PARTITION:
    case COLO_SCHED_FAIR:
    case COLO_SCHED_DEADLINE:
        break;
    }
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
    switch (cs->cfg.policy) {
    case COLO_SCHED_TIMESLICE:
        cs->slice_busy = false;
        cs->hold_until_ns = colo_now_ns() + COLO_COSCHED_TURN_GRACE_US * 1000u;
        break;
    case COLO_SCHED_PRIORITY:
        if (m->best_effort)
            cs->be_inflight--;
        else
            cs->high_inflight--;
        if (cs->floor_by_steps)
            floor_charge(cs, m->best_effort, colo_now_ns() - m->step_t0_ns);
        break;
    case COLO_SCHED_SPATIAL:
    case COLO_SCHED_PARTITION:
    case COLO_SCHED_FAIR:
    case COLO_SCHED_DEADLINE:
        break;
    }
    m->inflight = false;
    m->st.inflight = 0;
    pthread_cond_broadcast(&cs->cv);
    pthread_mutex_unlock(&cs->mu);
}

void colo_cosched_throttle(colo_cosched_member *m, int n_ops)
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

void colo_cosched_set_deadline(colo_cosched_member *m, colo_stream *s, uint64_t deadline_ns)
{
    if (!m || m->cs->cfg.policy != COLO_SCHED_DEADLINE)
        return;
    static const double weight[] = {1, 2, 4}; /* low, normal, high */
    colo_stream_set_deadline(s, deadline_ns, (unsigned)m->priority < 3 ? weight[m->priority] : 1);
}

void colo_cosched_floor_times(colo_cosched *cs, uint64_t *be_ns, uint64_t *hi_ns)
{
    pthread_mutex_lock(&cs->mu);
    *be_ns = cs->be_step_ns;
    *hi_ns = cs->hi_step_ns;
    pthread_mutex_unlock(&cs->mu);
}

void colo_cosched_member_get_stats(colo_cosched_member *m, colo_cosched_member_stats *st)
{
    pthread_mutex_lock(&m->cs->mu);
    *st = m->st;
    pthread_mutex_unlock(&m->cs->mu);
}

const char *colo_cosched_member_name(const colo_cosched_member *m) { return m->name; }
colo_priority colo_cosched_member_priority(const colo_cosched_member *m) { return m->priority; }

colo_status colo_partition_plan(int total_units, int granularity, int n, const double *share, int *first, int *count,
                                char *err, size_t errlen)
{
    if (n <= 0 || total_units <= 0 || granularity <= 0) {
        colo_set_err(err, errlen, "partition: need members, units and a granularity");
        return COLO_EINVAL;
    }
    int granules = total_units / granularity;
    if (granules < n) {
        colo_set_err(err, errlen, "partition: %d units in granules of %d cannot give %d members one each",
                     total_units, granularity, n);
        return COLO_EINVAL;
    }
    double given = 0;
    int n_rest = 0;
    for (int i = 0; i < n; i++) {
        if (share[i] < 0 || share[i] > 1 || isnan(share[i])) {
            colo_set_err(err, errlen, "partition: share %g of member %d is outside (0, 1]", share[i], i);
            return COLO_EINVAL;
        }
        if (share[i] > 0)
            given += share[i];
        else
            n_rest++;
    }
    if (given > 1.0 + 1e-9) {
        colo_set_err(err, errlen, "partition: shares sum to %.3f, past 1", given);
        return COLO_EINVAL;
    }
    /* Granules per member: floor of the exact share, at least one; what
     * rounding leaves goes to the members with the largest remainders. */
    double rest_share = n_rest ? (1.0 - given) / n_rest : 0;
    int used = 0;
    double rem[n];
    for (int i = 0; i < n; i++) {
        double exact = (share[i] > 0 ? share[i] : rest_share) * granules;
        count[i] = (int)floor(exact + 1e-9);
        if (count[i] < 1)
            count[i] = 1;
        rem[i] = exact - count[i];
        used += count[i];
    }
    while (used > granules) { /* minimums pushed past the total: take from the largest */
        int big = 0;
        for (int i = 1; i < n; i++)
            if (count[i] > count[big])
                big = i;
        if (count[big] <= 1)
            break;
        count[big]--;
        used--;
    }
    /* Hand out leftovers only to members whose share asks for more. */
    while (used < granules) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (rem[i] > 1e-9 && (best < 0 || rem[i] > rem[best]))
                best = i;
        if (best < 0)
            break;
        count[best]++;
        rem[best] -= 1.0;
        used++;
    }
    int at = 0;
    for (int i = 0; i < n; i++) {
        first[i] = at * granularity;
        count[i] *= granularity;
        at += count[i] / granularity;
    }
    return COLO_OK;
}
