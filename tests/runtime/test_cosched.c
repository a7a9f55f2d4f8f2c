/* Co-scheduler policies: ordering guarantees and partition plans. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "runtime/cosched.h"

static colo_cosched *make(colo_sched_policy p, int be_steps, int be_ops)
{
    colo_cosched_config cfg = {.policy = p, .best_effort_max_steps = be_steps, .best_effort_max_ops = be_ops};
    char err[256];
    colo_cosched *cs = colo_cosched_create(&cfg, err, sizeof err);
    assert_non_null(cs);
    return cs;
}

/* ---- timeslice: steps never overlap, nobody starves ---------------------- */

typedef struct {
    colo_cosched_member *m;
    int steps;
    int *active;
    int *max_active;
    pthread_mutex_t *mu;
    pthread_barrier_t *in_step; /* spatial: both members must be inside a step at once */
} worker_arg;

static void *step_loop(void *p)
{
    worker_arg *a = p;
    for (int i = 0; i < a->steps; i++) {
        colo_cosched_step_begin(a->m);
        pthread_mutex_lock(a->mu);
        int now = ++*a->active;
        if (now > *a->max_active)
            *a->max_active = now;
        pthread_mutex_unlock(a->mu);
        if (a->in_step)
            pthread_barrier_wait(a->in_step);
        else
            usleep(100);
        pthread_mutex_lock(a->mu);
        --*a->active;
        pthread_mutex_unlock(a->mu);
        colo_cosched_step_end(a->m);
    }
    return NULL;
}

static void run_two(colo_cosched *cs, colo_priority pa, colo_priority pb, int steps, pthread_barrier_t *bar,
                    int *max_active)
{
    int active = 0;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    colo_cosched_member *ma = colo_cosched_join(cs, "a", pa);
    colo_cosched_member *mb = colo_cosched_join(cs, "b", pb);
    worker_arg a = {ma, steps, &active, max_active, &mu, bar};
    worker_arg b = {mb, steps, &active, max_active, &mu, bar};
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, step_loop, &a), 0);
    assert_int_equal(pthread_create(&tb, NULL, step_loop, &b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    colo_cosched_member_stats sa, sb;
    colo_cosched_member_get_stats(ma, &sa);
    colo_cosched_member_get_stats(mb, &sb);
    assert_int_equal(sa.steps, (uint64_t)steps);
    assert_int_equal(sb.steps, (uint64_t)steps);
    colo_cosched_leave(ma);
    colo_cosched_leave(mb);
}

static void test_timeslice_serializes(void **state)
{
    (void)state;
    colo_cosched *cs = make(COLO_SCHED_TIMESLICE, 0, 0);
    int max_active = 0;
    run_two(cs, COLO_PRIO_HIGH, COLO_PRIO_LOW, 200, NULL, &max_active);
    assert_int_equal(max_active, 1);
    colo_cosched_destroy(cs);
}

/* Under spatial sharing both members are inside a step at the same time
 * (the barrier inside the step would deadlock otherwise). */
static void test_spatial_overlaps(void **state)
{
    (void)state;
    colo_cosched *cs = make(COLO_SCHED_SPATIAL, 0, 0);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    int max_active = 0;
    run_two(cs, COLO_PRIO_HIGH, COLO_PRIO_LOW, 50, &bar, &max_active);
    assert_int_equal(max_active, 2);
    pthread_barrier_destroy(&bar);
    colo_cosched_destroy(cs);
}

static void test_partition_overlaps(void **state)
{
    (void)state;
    colo_cosched *cs = make(COLO_SCHED_PARTITION, 0, 0);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    int max_active = 0;
    run_two(cs, COLO_PRIO_NORMAL, COLO_PRIO_NORMAL, 20, &bar, &max_active);
    assert_int_equal(max_active, 2);
    pthread_barrier_destroy(&bar);
    colo_cosched_destroy(cs);
}

/* Under fair sharing steps overlap too (the shares act in the worker pool). */
static void test_fair_overlaps(void **state)
{
    (void)state;
    colo_cosched *cs = make(COLO_SCHED_FAIR, 0, 0);
    assert_int_equal(colo_cosched_policy(cs), COLO_SCHED_FAIR);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    int max_active = 0;
    run_two(cs, COLO_PRIO_NORMAL, COLO_PRIO_NORMAL, 20, &bar, &max_active);
    assert_int_equal(max_active, 2);
    pthread_barrier_destroy(&bar);
    colo_cosched_destroy(cs);
}

/* ---- priority: best-effort held back while a high step is in flight ------ */

typedef struct {
    colo_cosched_member *m;
    int throttle_ops; /* 0: just begin a step; >0: begin, then throttle that many ops */
    volatile int began;
    volatile int passed;
} be_arg;

static void *be_thread(void *p)
{
    be_arg *a = p;
    colo_cosched_step_begin(a->m);
    __atomic_store_n(&a->began, 1, __ATOMIC_SEQ_CST);
    if (a->throttle_ops)
        colo_cosched_throttle(a->m, a->throttle_ops);
    __atomic_store_n(&a->passed, 1, __ATOMIC_SEQ_CST);
    colo_cosched_step_end(a->m);
    return NULL;
}

static void test_priority_holds_best_effort_start(void **state)
{
    (void)state;
    colo_cosched *cs = make(COLO_SCHED_PRIORITY, 0, 4);
    colo_cosched_member *hi = colo_cosched_join(cs, "hi", COLO_PRIO_HIGH);
    colo_cosched_member *be = colo_cosched_join(cs, "be", COLO_PRIO_LOW);
    colo_cosched_step_begin(hi);
    be_arg a = {.m = be};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, be_thread, &a), 0);
    usleep(50 * 1000);
    assert_int_equal(__atomic_load_n(&a.began, __ATOMIC_SEQ_CST), 0);
    colo_cosched_step_end(hi);
    pthread_join(t, NULL);
    assert_int_equal(a.began, 1);
    colo_cosched_member_stats st;
    colo_cosched_member_get_stats(be, &st);
    assert_true(st.wait_ns > 0);
    colo_cosched_leave(hi);
    colo_cosched_leave(be);
    colo_cosched_destroy(cs);
}

typedef struct {
    colo_cosched_member *m;
    int n_ops;
    volatile int passed;
} throttle_arg;

static void *throttle_thread(void *p)
{
    throttle_arg *a = p;
    colo_cosched_throttle(a->m, a->n_ops);
    __atomic_store_n(&a->passed, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* A high-priority member never waits for best-effort work, and a best-effort
 * step already running is held at its next throttle point once it has queued
 * more than best_effort_max_ops ops while the high step runs. */
static void test_priority_throttles_inflight_best_effort(void **state)
{
    (void)state;
    colo_cosched *cs = make(COLO_SCHED_PRIORITY, 0, 4);
    colo_cosched_member *hi = colo_cosched_join(cs, "hi", COLO_PRIO_HIGH);
    colo_cosched_member *be = colo_cosched_join(cs, "be", COLO_PRIO_LOW);

    colo_cosched_step_begin(be);
    colo_cosched_step_begin(hi); /* returns although be is in flight */
    colo_cosched_throttle(be, 4); /* within the cap */
    colo_cosched_member_stats st;
    colo_cosched_member_get_stats(be, &st);
    assert_int_equal(st.throttled, 0);

    throttle_arg a = {.m = be, .n_ops = 1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, throttle_thread, &a), 0);
    usleep(50 * 1000);
    assert_int_equal(__atomic_load_n(&a.passed, __ATOMIC_SEQ_CST), 0);
    colo_cosched_step_end(hi);
    pthread_join(t, NULL);
    assert_int_equal(a.passed, 1);
    colo_cosched_member_get_stats(be, &st);
    assert_int_equal(st.throttled, 1);

    /* With no high step in flight, best-effort work is never held. */
    colo_cosched_throttle(be, 1000);
    colo_cosched_step_end(be);
    colo_cosched_member_get_stats(be, &st);
    assert_int_equal(st.throttled, 1);

    /* Normal and high members are never throttled. */
    colo_cosched_step_begin(hi);
    colo_cosched_throttle(hi, 1000);
    colo_cosched_step_end(hi);
    colo_cosched_leave(hi);
    colo_cosched_leave(be);
    colo_cosched_destroy(cs);
}

/* best_effort_max_steps lets that many best-effort steps start beside a high one. */
static void test_priority_best_effort_step_cap(void **state)
{
    (void)state;
    colo_cosched *cs = make(COLO_SCHED_PRIORITY, 1, 0);
    colo_cosched_member *hi = colo_cosched_join(cs, "hi", COLO_PRIO_HIGH);
    colo_cosched_member *be1 = colo_cosched_join(cs, "be1", COLO_PRIO_LOW);
    colo_cosched_member *be2 = colo_cosched_join(cs, "be2", COLO_PRIO_LOW);
    colo_cosched_step_begin(hi);
    colo_cosched_step_begin(be1); /* the one allowed */
    be_arg a = {.m = be2};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, be_thread, &a), 0);
    usleep(50 * 1000);
    assert_int_equal(__atomic_load_n(&a.began, __ATOMIC_SEQ_CST), 0);
    colo_cosched_step_end(be1); /* frees the slot */
    pthread_join(t, NULL);
    assert_int_equal(a.began, 1);
    colo_cosched_step_end(hi);
    colo_cosched_leave(hi);
    colo_cosched_leave(be1);
    colo_cosched_leave(be2);
    colo_cosched_destroy(cs);
}

/* Under timeslice, a high-priority member waits for a running best-effort step
 * like anyone else: that is the baseline's cost. */
/* best_effort_max_us: once a high step has been in flight that long, the
 * best-effort step is held at its next throttle point even under the ops cap. */
static void test_priority_time_cap(void **state)
{
    (void)state;
    colo_cosched_config cfg = {.policy = COLO_SCHED_PRIORITY, .best_effort_max_ops = 1000,
                               .best_effort_max_us = 20000};
    char err[256];
    colo_cosched *cs = colo_cosched_create(&cfg, err, sizeof err);
    assert_non_null(cs);
    colo_cosched_member *hi = colo_cosched_join(cs, "hi", COLO_PRIO_HIGH);
    colo_cosched_member *be = colo_cosched_join(cs, "be", COLO_PRIO_LOW);
    colo_cosched_step_begin(be);
    colo_cosched_step_begin(hi);
    colo_cosched_throttle(be, 1); /* within both caps */
    colo_cosched_member_stats st;
    colo_cosched_member_get_stats(be, &st);
    assert_int_equal(st.throttled, 0);
    usleep(40 * 1000); /* past the time cap */
    throttle_arg a = {.m = be, .n_ops = 1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, throttle_thread, &a), 0);
    usleep(50 * 1000);
    assert_int_equal(__atomic_load_n(&a.passed, __ATOMIC_SEQ_CST), 0);
    colo_cosched_step_end(hi);
    pthread_join(t, NULL);
    colo_cosched_member_get_stats(be, &st);
    assert_int_equal(st.throttled, 1);
    colo_cosched_step_end(be);
    colo_cosched_leave(hi);
    colo_cosched_leave(be);
    colo_cosched_destroy(cs);
}

/* quantum_us: the member whose turn it is keeps the device for its next
 * steps while the turn lasts, and a waiter gets it once the turn is over. */
static void test_timeslice_quantum(void **state)
{
    (void)state;
    colo_cosched_config cfg = {.policy = COLO_SCHED_TIMESLICE, .quantum_us = 200000};
    char err[256];
    colo_cosched *cs = colo_cosched_create(&cfg, err, sizeof err);
    assert_non_null(cs);
    colo_cosched_member *a = colo_cosched_join(cs, "a", COLO_PRIO_NORMAL);
    colo_cosched_member *b = colo_cosched_join(cs, "b", COLO_PRIO_NORMAL);
    colo_cosched_step_begin(a);
    be_arg w = {.m = b};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, be_thread, &w), 0);
    usleep(20 * 1000); /* b waits */
    for (int i = 0; i < 5; i++) { /* a's next steps within its turn come first */
        colo_cosched_step_end(a);
        colo_cosched_step_begin(a);
        assert_int_equal(__atomic_load_n(&w.began, __ATOMIC_SEQ_CST), 0);
    }
    colo_cosched_step_end(a);
    pthread_join(t, NULL); /* a took no next step: b gets the device after the grace */
    assert_int_equal(w.began, 1);

    colo_cosched_leave(a);
    colo_cosched_leave(b);
    colo_cosched_destroy(cs);
}

static void test_timeslice_makes_high_wait(void **state)
{
    (void)state;
    colo_cosched *cs = make(COLO_SCHED_TIMESLICE, 0, 0);
    colo_cosched_member *hi = colo_cosched_join(cs, "hi", COLO_PRIO_HIGH);
    colo_cosched_member *be = colo_cosched_join(cs, "be", COLO_PRIO_LOW);
    colo_cosched_step_begin(be);
    be_arg a = {.m = hi};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, be_thread, &a), 0);
    usleep(50 * 1000);
    assert_int_equal(__atomic_load_n(&a.began, __ATOMIC_SEQ_CST), 0);
    colo_cosched_step_end(be);
    pthread_join(t, NULL);
    assert_int_equal(a.began, 1);
    colo_cosched_leave(hi);
    colo_cosched_leave(be);
    colo_cosched_destroy(cs);
}

/* ---- partition plans ------------------------------------------------------ */

static void check_disjoint(int n, const int *first, const int *count, int total, int gran)
{
    int at = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(first[i], at);
        assert_true(count[i] >= gran);
        assert_int_equal(count[i] % gran, 0);
        at += count[i];
    }
    assert_true(at <= total);
}

static void test_partition_plan(void **state)
{
    (void)state;
    int first[4], count[4];
    char err[256];

    /* H100 SXM: 132 SMs in granules of 8 -> 16 granules. */
    double half[2] = {0.5, 0};
    assert_int_equal(colo_partition_plan(132, 8, 2, half, first, count, err, sizeof err), COLO_OK);
    check_disjoint(2, first, count, 132, 8);
    assert_int_equal(count[0], 64);
    assert_int_equal(count[1], 64);

    double q[2] = {0.75, 0.25};
    assert_int_equal(colo_partition_plan(132, 8, 2, q, first, count, err, sizeof err), COLO_OK);
    check_disjoint(2, first, count, 132, 8);
    assert_int_equal(count[0], 96);
    assert_int_equal(count[1], 32);

    double three[3] = {0, 0, 0};
    assert_int_equal(colo_partition_plan(132, 8, 3, three, first, count, err, sizeof err), COLO_OK);
    check_disjoint(3, first, count, 132, 8);
    assert_int_equal(count[0] + count[1] + count[2], 128);

    /* CPU: 2 cores, 2 members. */
    double cpu[2] = {0, 0};
    assert_int_equal(colo_partition_plan(2, 1, 2, cpu, first, count, err, sizeof err), COLO_OK);
    assert_int_equal(count[0], 1);
    assert_int_equal(count[1], 1);
    assert_int_equal(first[1], 1);

    /* A tiny share still gets a granule. */
    double tiny[2] = {0.01, 0};
    assert_int_equal(colo_partition_plan(132, 8, 2, tiny, first, count, err, sizeof err), COLO_OK);
    check_disjoint(2, first, count, 132, 8);
    assert_int_equal(count[0], 8);

    double over[2] = {0.7, 0.6};
    assert_int_equal(colo_partition_plan(132, 8, 2, over, first, count, err, sizeof err), COLO_EINVAL);
    assert_non_null(strstr(err, "past 1"));
    double many[4] = {0, 0, 0, 0};
    assert_int_equal(colo_partition_plan(2, 1, 4, many, first, count, err, sizeof err), COLO_EINVAL);
}

static void test_policy_names(void **state)
{
    (void)state;
    colo_sched_policy p;
    const char *names[] = {"timeslice", "spatial", "priority", "partition", "fair", "deadline"};
    for (int i = 0; i < 6; i++) {
        assert_int_equal(colo_sched_policy_parse(names[i], &p), COLO_OK);
        assert_string_equal(colo_sched_policy_name(p), names[i]);
    }
    assert_int_equal(colo_sched_policy_parse("edf", &p), COLO_EINVAL);
    assert_int_equal(colo_sched_policy_parse(NULL, &p), COLO_EINVAL);
}

/* The table: every row is named in order, and takes exactly the keys of
 * its own (share: fair, sm_share: partition, neither at run time), and
 * sets on streams what its policy reads. */
static void test_policy_table(void **state)
{
    (void)state;
    int n = 0;
    while (colo_sched_policy_name_at(n))
        n++;
    assert_int_equal(n, 6);
    assert_string_equal(colo_sched_policy_name((colo_sched_policy)n), "unknown");
    colo_sched_key key;
    char err[256];
    for (int i = 0; i < n; i++) {
        colo_sched_policy p = (colo_sched_policy)i;
        const char *name = colo_sched_policy_name_at(i);
        colo_sched_model m = {.priority = COLO_PRIO_HIGH, .share = 2};
        colo_status want = !strcmp(name, "fair") ? COLO_OK : COLO_EINVAL;
        assert_int_equal(colo_sched_policy_validate(p, &m, &key, err, sizeof err), want);
        if (want != COLO_OK) {
            assert_int_equal(key, COLO_SCHED_KEY_SHARE);
            assert_string_equal(err, "only used with scheduler.policy: fair");
        }
        m = (colo_sched_model){.sm_share = 0.5};
        want = !strcmp(name, "partition") ? COLO_OK : COLO_EINVAL;
        assert_int_equal(colo_sched_policy_validate(p, &m, &key, err, sizeof err), want);
        m.at_run_time = true;
        assert_int_equal(colo_sched_policy_validate(p, &m, &key, err, sizeof err), COLO_EINVAL);
        assert_string_equal(colo_sched_key_name(key), "sm_share");
        m = (colo_sched_model){.priority = COLO_PRIO_HIGH, .share = 2};
        colo_stream_config sc = {.unit_count = 3};
        colo_sched_policy_stream(p, &m, &sc);
        bool by_prio = !strcmp(name, "priority") || !strcmp(name, "partition");
        assert_int_equal(sc.priority, by_prio ? COLO_PRIO_HIGH : COLO_PRIO_NORMAL);
        assert_true(sc.share == (!strcmp(name, "fair") ? 2 : 0));
        assert_int_equal(sc.unit_count, 3);
    }
}

/* best_effort_min_share without a device account (CUDA's case): step time
 * is charged to each class, and a best-effort member is let through beside
 * high steps while its class is behind, so that it holds its floor of the
 * step time (within 10%) while two high members keep a step in flight
 * (one alone leaves gaps between its steps, which best-effort work fills:
 * the floor is a minimum). */
typedef struct {
    colo_cosched_member *m;
    volatile int *stop;
    int step_us;
} floor_arg;

static void *floor_loop(void *p)
{
    floor_arg *a = p;
    while (!__atomic_load_n(a->stop, __ATOMIC_SEQ_CST)) {
        colo_cosched_step_begin(a->m);
        usleep((useconds_t)a->step_us);
        colo_cosched_step_end(a->m);
    }
    return NULL;
}

static void test_priority_floor_by_step_time(void **state)
{
    (void)state;
    const double floors[] = {0.2, 0.3};
    for (int k = 0; k < 2; k++) {
        colo_cosched_config cfg = {.policy = COLO_SCHED_PRIORITY, .best_effort_max_ops = 8,
                                   .best_effort_min_share = floors[k]};
        char err[256];
        colo_cosched *cs = colo_cosched_create(&cfg, err, sizeof err);
        assert_non_null(cs);
        colo_cosched_member *h1 = colo_cosched_join(cs, "h1", COLO_PRIO_HIGH);
        colo_cosched_member *h2 = colo_cosched_join(cs, "h2", COLO_PRIO_HIGH);
        colo_cosched_member *be = colo_cosched_join(cs, "be", COLO_PRIO_LOW);
        volatile int stop = 0;
        /* best-effort steps of 12 ms: each one charged in a lump larger than COLO_FLOOR_LAG_NS */
        floor_arg a[3] = {{h1, &stop, 3000}, {h2, &stop, 2000}, {be, &stop, 12000}};
        pthread_t t[3];
        for (int i = 0; i < 3; i++)
            assert_int_equal(pthread_create(&t[i], NULL, floor_loop, &a[i]), 0);
        usleep(800 * 1000);
        __atomic_store_n(&stop, 1, __ATOMIC_SEQ_CST);
        for (int i = 0; i < 3; i++)
            pthread_join(t[i], NULL);
        uint64_t be_ns, hi_ns;
        colo_cosched_floor_times(cs, &be_ns, &hi_ns);
        double share = (double)be_ns / (double)(be_ns + hi_ns);
        printf("floor %.2f: best-effort steps %.1f ms, high steps %.1f ms, share %.3f\n", floors[k], be_ns / 1e6,
               hi_ns / 1e6, share);
        assert_true(be_ns > 0 && hi_ns > 0);
        /* The floor is a minimum: at least 90% of it. Above it, the last
         * best-effort step let through is charged in one lump when it ends,
         * and a loaded machine oversleeps the 12 ms steps: up to 25% over. */
        assert_true(share >= 0.9 * floors[k] && share <= 1.25 * floors[k]);
        colo_cosched_leave(h1);
        colo_cosched_leave(h2);
        colo_cosched_leave(be);
        colo_cosched_destroy(cs);
    }
    /* without a floor the best-effort member starts no step beside the high
     * one (the old behaviour), and no step time is accounted */
    colo_cosched *cs = make(COLO_SCHED_PRIORITY, 0, 8);
    uint64_t be_ns = 1, hi_ns = 1;
    colo_cosched_floor_times(cs, &be_ns, &hi_ns);
    assert_true(be_ns == 0 && hi_ns == 0);
    colo_cosched_destroy(cs);
    /* a floor of 1 or more leaves nothing to the others: refused */
    colo_cosched_config bad = {.policy = COLO_SCHED_PRIORITY, .best_effort_min_share = 1.0};
    char err[256];
    assert_null(colo_cosched_create(&bad, err, sizeof err));
}

/* ---- the batch class, under every policy -------------------------------- */

typedef struct {
    colo_cosched_member *m;
    colo_step_class cls;
    int steps;          /* steps to run */
    int throttles;      /* throttle points in each */
    volatile int began; /* steps begun */
    volatile int done;  /* steps ended */
} class_arg;

static void *class_loop(void *p)
{
    class_arg *a = p;
    for (int i = 0; i < a->steps; i++) {
        colo_cosched_step_begin_as(a->m, a->cls);
        __atomic_add_fetch(&a->began, 1, __ATOMIC_SEQ_CST);
        for (int k = 0; k < a->throttles; k++)
            colo_cosched_throttle(a->m, 4);
        colo_cosched_step_end(a->m);
        __atomic_add_fetch(&a->done, 1, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

static colo_cosched *make_batch_floor(colo_sched_policy p, double floor_share)
{
    colo_cosched_config cfg = {.policy = p, .best_effort_max_ops = 8, .batch_min_share = floor_share};
    char err[256];
    colo_cosched *cs = colo_cosched_create(&cfg, err, sizeof err);
    assert_non_null(cs);
    return cs;
}

/* A step of batch lines alone waits for another member's interactive step,
 * whatever the two members' priorities (a high model's lines wait for a low
 * model's interactive step), under every policy that lets steps overlap;
 * a step that carries interactive work (alone or beside lines) waits for
 * nothing of the batch class. */
static void test_batch_step_waits_for_interactive(void **state)
{
    (void)state;
    const colo_sched_policy policies[] = {COLO_SCHED_SPATIAL, COLO_SCHED_PRIORITY, COLO_SCHED_FAIR,
                                          COLO_SCHED_DEADLINE, COLO_SCHED_PARTITION};
    for (int k = 0; k < 5; k++) {
        colo_cosched *cs = make_batch_floor(policies[k], 0);
        colo_cosched_member *lo = colo_cosched_join(cs, "lo", COLO_PRIO_LOW);
        colo_cosched_member *hi = colo_cosched_join(cs, "hi", COLO_PRIO_HIGH);
        colo_cosched_step_begin(lo); /* an interactive step of the low model */
        class_arg a = {.m = hi, .cls = COLO_STEP_BATCH, .steps = 1};
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, class_loop, &a), 0);
        usleep(50 * 1000);
        assert_int_equal(__atomic_load_n(&a.began, __ATOMIC_SEQ_CST), 0);
        colo_cosched_step_end(lo);
        pthread_join(t, NULL);
        assert_int_equal(a.done, 1);
        colo_cosched_member_stats st;
        colo_cosched_member_get_stats(hi, &st);
        assert_int_equal(st.batch_steps, 1);
        assert_int_equal(st.batch_held, 1);

        /* a mixed step of the high model (interactive class) starts beside
         * the low model's interactive step, and a low model's interactive
         * step starts beside the high model's batch step and is never
         * throttled for it */
        colo_cosched_step_begin(lo);
        colo_cosched_step_begin_as(hi, COLO_STEP_INTERACTIVE);
        colo_cosched_step_end(hi);
        colo_cosched_step_end(lo);
        colo_cosched_step_begin_as(hi, COLO_STEP_BATCH);
        colo_cosched_step_begin(lo);
        colo_cosched_throttle(lo, 1000);
        colo_cosched_member_stats lst;
        colo_cosched_member_get_stats(lo, &lst);
        assert_int_equal(lst.throttled, 0);
        colo_cosched_step_end(lo);
        colo_cosched_step_end(hi);
        colo_cosched_member_get_stats(hi, &st);
        assert_int_equal(st.batch_steps, 2);
        assert_int_equal(st.batch_held, 1);
        assert_int_equal(st.steps, 3);
        colo_cosched_leave(lo);
        colo_cosched_leave(hi);
        colo_cosched_destroy(cs);
    }
}

/* A batch step already running is held at its next throttle point while
 * another member's interactive step is in flight, and goes on when it ends. */
static void test_batch_step_held_inside(void **state)
{
    (void)state;
    colo_cosched *cs = make_batch_floor(COLO_SCHED_SPATIAL, 0);
    colo_cosched_member *a = colo_cosched_join(cs, "a", COLO_PRIO_NORMAL);
    colo_cosched_member *b = colo_cosched_join(cs, "b", COLO_PRIO_HIGH);
    colo_cosched_step_begin_as(b, COLO_STEP_BATCH);
    colo_cosched_throttle(b, 4); /* nothing interactive in flight: passes */
    colo_cosched_step_begin(a);
    throttle_arg ta = {.m = b, .n_ops = 4};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, throttle_thread, &ta), 0);
    usleep(50 * 1000);
    assert_int_equal(__atomic_load_n(&ta.passed, __ATOMIC_SEQ_CST), 0);
    colo_cosched_step_end(a);
    pthread_join(t, NULL);
    assert_int_equal(ta.passed, 1);
    colo_cosched_step_end(b);
    colo_cosched_member_stats st;
    colo_cosched_member_get_stats(b, &st);
    assert_int_equal(st.throttled, 1);
    assert_int_equal(st.batch_held, 0);
    colo_cosched_leave(a);
    colo_cosched_leave(b);
    colo_cosched_destroy(cs);
}

/* Under timeslice, an interactive step waiting for its turn behind a batch
 * step does not hold that batch step at its throttle points (it would wait
 * for the turn the batch step holds): the batch step ends, then the
 * interactive one runs. */
static void test_batch_step_under_timeslice(void **state)
{
    (void)state;
    colo_cosched *cs = make_batch_floor(COLO_SCHED_TIMESLICE, 0);
    colo_cosched_member *a = colo_cosched_join(cs, "a", COLO_PRIO_HIGH);
    colo_cosched_member *b = colo_cosched_join(cs, "b", COLO_PRIO_LOW);
    colo_cosched_step_begin_as(b, COLO_STEP_BATCH);
    class_arg ia = {.m = a, .cls = COLO_STEP_INTERACTIVE, .steps = 1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, class_loop, &ia), 0);
    usleep(50 * 1000);
    assert_int_equal(__atomic_load_n(&ia.began, __ATOMIC_SEQ_CST), 0); /* b holds the turn */
    colo_cosched_throttle(b, 4); /* not held: nothing interactive is in flight */
    colo_cosched_member_stats st;
    colo_cosched_member_get_stats(b, &st);
    assert_int_equal(st.throttled, 0);
    colo_cosched_step_end(b);
    pthread_join(t, NULL);
    assert_int_equal(ia.done, 1);
    colo_cosched_leave(a);
    colo_cosched_leave(b);
    colo_cosched_destroy(cs);
}

/* Two members whose interactive steps overlap keep one in flight at every
 * moment: up to n_turns hand-overs (until *until reaches until_n), each
 * with a short step, from this thread, starting with x's step in flight
 * (the caller began it). Returns the member whose step is still in flight,
 * for the caller to end. */
static colo_cosched_member *overlapping_steps(colo_cosched_member *x, colo_cosched_member *y, int n_turns,
                                              volatile int *until, int until_n)
{
    colo_cosched_member *cur = x;
    for (int i = 0; i < n_turns; i++) {
        colo_cosched_member *next = cur == x ? y : x;
        colo_cosched_step_begin(next);
        usleep(200);
        colo_cosched_step_end(cur);
        cur = next;
        if (until && __atomic_load_n(until, __ATOMIC_SEQ_CST) >= until_n)
            break;
    }
    return cur;
}

/* The floor: under interactive steps that never leave the device idle,
 * batch steps get none without a floor and progress with one (each let
 * through while the batch class's step time is below its share). */
static void test_batch_floor_under_saturation(void **state)
{
    (void)state;
    for (int with_floor = 0; with_floor < 2; with_floor++) {
        colo_cosched *cs = make_batch_floor(COLO_SCHED_SPATIAL, with_floor ? 0.2 : 0);
        colo_cosched_member *x = colo_cosched_join(cs, "x", COLO_PRIO_NORMAL);
        colo_cosched_member *y = colo_cosched_join(cs, "y", COLO_PRIO_NORMAL);
        colo_cosched_member *b = colo_cosched_join(cs, "b", COLO_PRIO_HIGH);
        class_arg a = {.m = b, .cls = COLO_STEP_BATCH, .steps = 10, .throttles = 3};
        pthread_t t;
        colo_cosched_step_begin(x);
        assert_int_equal(pthread_create(&t, NULL, class_loop, &a), 0);
        if (!with_floor) {
            colo_cosched_member *last = overlapping_steps(x, y, 200, NULL, 0);
            assert_int_equal(__atomic_load_n(&a.began, __ATOMIC_SEQ_CST), 0);
            colo_cosched_step_end(last);
        } else {
            /* until the batch member's 10 steps are done (at most 20000 turns) */
            colo_cosched_member *last = overlapping_steps(x, y, 20000, &a.done, 10);
            assert_int_equal(__atomic_load_n(&a.done, __ATOMIC_SEQ_CST), 10);
            colo_cosched_step_end(last);
        }
        pthread_join(t, NULL); /* (without a floor, its steps run now that the device is free) */
        assert_int_equal(a.done, 10);
        uint64_t batch_ns, inter_ns;
        colo_cosched_batch_times(cs, &batch_ns, &inter_ns);
        assert_true(batch_ns > 0 && inter_ns > 0);
        colo_cosched_leave(x);
        colo_cosched_leave(y);
        colo_cosched_leave(b);
        colo_cosched_destroy(cs);
    }
    /* a floor of 1 or more leaves nothing to interactive work: refused */
    colo_cosched_config bad = {.policy = COLO_SCHED_SPATIAL, .batch_min_share = 1.0};
    char err[256];
    assert_null(colo_cosched_create(&bad, err, sizeof err));
    bad.batch_min_share = -0.1;
    assert_null(colo_cosched_create(&bad, err, sizeof err));
}

/* ---- idle members and cold steps ------------------------------------------ */

/* The order in which steps began, one letter per step. */
typedef struct {
    pthread_mutex_t mu;
    char order[16];
    int n;
} step_log;

static void log_step(step_log *l, char who)
{
    pthread_mutex_lock(&l->mu);
    if (l->n < (int)sizeof l->order - 1)
        l->order[l->n++] = who;
    pthread_mutex_unlock(&l->mu);
}

typedef struct {
    colo_cosched_member *m;
    step_log *log;
    char who;
    bool cold; /* woken for a request: colo_cosched_cold before the step */
} one_step_arg;

/* One step, logged as it begins, then nothing more to run. */
static void *one_step(void *p)
{
    one_step_arg *a = p;
    if (a->cold)
        colo_cosched_cold(a->m, NULL, 0);
    colo_cosched_step_begin(a->m);
    log_step(a->log, a->who);
    colo_cosched_step_end(a->m);
    colo_cosched_idle(a->m, NULL);
    return NULL;
}

static void wait_waiting(colo_cosched_member *m)
{
    colo_cosched_member_stats st;
    for (;;) {
        colo_cosched_member_get_stats(m, &st);
        if (st.waiting)
            return;
        usleep(1000);
    }
}

static colo_cosched *make_timeslice_long_turns(void)
{
    colo_cosched_config cfg = {.policy = COLO_SCHED_TIMESLICE, .quantum_us = 60 * 1000 * 1000};
    char err[256];
    colo_cosched *cs = colo_cosched_create(&cfg, err, sizeof err);
    assert_non_null(cs);
    return cs;
}

/* Timeslice: a member whose turn has a minute left but that has no next
 * step gives the turn up at once; the member waiting takes the device, and
 * the first member's next step (work came back) waits for it. Without the
 * release the first member's next step would keep its turn and go first. */
static void test_timeslice_idle_yields_turn(void **state)
{
    (void)state;
    colo_cosched *cs = make_timeslice_long_turns();
    colo_cosched_member *a = colo_cosched_join(cs, "a", COLO_PRIO_NORMAL);
    colo_cosched_member *b = colo_cosched_join(cs, "b", COLO_PRIO_NORMAL);
    step_log log = {.mu = PTHREAD_MUTEX_INITIALIZER};
    colo_cosched_step_begin(a);
    log_step(&log, 'a');
    one_step_arg wb = {b, &log, 'b', false};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, one_step, &wb), 0);
    wait_waiting(b);
    colo_cosched_step_end(a);
    colo_cosched_member_stats st;
    colo_cosched_member_get_stats(a, &st);
    assert_int_equal(st.idle, 0);
    colo_cosched_idle(a, NULL);
    colo_cosched_member_get_stats(a, &st);
    assert_int_equal(st.turn, 0);
    assert_int_equal(st.idle, 1);
    assert_int_equal(st.idles, 1);
    colo_cosched_step_begin(a);
    log_step(&log, 'a');
    colo_cosched_step_end(a);
    pthread_join(t, NULL);
    assert_string_equal(log.order, "aba");
    colo_cosched_member_get_stats(a, &st);
    assert_int_equal(st.turn, 1); /* still busy: it keeps its new turn */
    colo_cosched_idle(a, NULL);
    colo_cosched_leave(a);
    colo_cosched_leave(b);
    colo_cosched_destroy(cs);
}

/* Timeslice: a cold step (a model woken for a request) takes the device at
 * the holder's next step boundary, ahead of the holder's next steps (its
 * turn has a minute left) and of an older waiter that is not cold; then the
 * older waiter, then the holder. */
static void test_timeslice_cold_step_at_boundary(void **state)
{
    (void)state;
    colo_cosched *cs = make_timeslice_long_turns();
    colo_cosched_member *a = colo_cosched_join(cs, "a", COLO_PRIO_NORMAL);
    colo_cosched_member *b = colo_cosched_join(cs, "b", COLO_PRIO_NORMAL);
    colo_cosched_member *c = colo_cosched_join(cs, "c", COLO_PRIO_NORMAL);
    step_log log = {.mu = PTHREAD_MUTEX_INITIALIZER};
    colo_cosched_step_begin(a);
    log_step(&log, 'a');
    one_step_arg wc = {c, &log, 'c', false}, wb = {b, &log, 'b', true};
    pthread_t tc, tb;
    assert_int_equal(pthread_create(&tc, NULL, one_step, &wc), 0);
    wait_waiting(c);
    assert_int_equal(pthread_create(&tb, NULL, one_step, &wb), 0);
    wait_waiting(b);
    colo_cosched_step_end(a);
    colo_cosched_step_begin(a); /* a has work: its next step within its turn */
    log_step(&log, 'a');
    colo_cosched_step_end(a);
    colo_cosched_idle(a, NULL);
    pthread_join(tb, NULL);
    pthread_join(tc, NULL);
    assert_string_equal(log.order, "abca");
    colo_cosched_member_stats sa, sb, sc;
    colo_cosched_member_get_stats(a, &sa);
    colo_cosched_member_get_stats(b, &sb);
    colo_cosched_member_get_stats(c, &sc);
    assert_int_equal(sa.cold_steps, 0);
    assert_int_equal(sb.cold_steps, 1);
    assert_int_equal(sc.cold_steps, 0);
    colo_cosched_leave(a);
    colo_cosched_leave(b);
    colo_cosched_leave(c);
    colo_cosched_destroy(cs);
}

/* Under every policy an idle member holds nothing: no turn, and a second
 * member's step begins at once; saying idle again changes nothing, and a
 * member woken for a request whose request went away (idle before its
 * step) takes an ordinary step, not a cold one. */
static void test_idle_holds_nothing(void **state)
{
    (void)state;
    for (int p = 0; colo_sched_policy_name_at(p); p++) {
        colo_cosched_config cfg = {.policy = (colo_sched_policy)p, .quantum_us = 60 * 1000 * 1000};
        char err[256];
        colo_cosched *cs = colo_cosched_create(&cfg, err, sizeof err);
        assert_non_null(cs);
        colo_cosched_member *a = colo_cosched_join(cs, "a", COLO_PRIO_HIGH);
        colo_cosched_member *b = colo_cosched_join(cs, "b", COLO_PRIO_LOW);
        colo_cosched_member_stats st;
        colo_cosched_member_get_stats(a, &st);
        assert_int_equal(st.idle, 1); /* nothing run yet */
        colo_cosched_step_begin(a);
        colo_cosched_step_end(a);
        colo_cosched_idle(a, NULL);
        colo_cosched_idle(a, NULL);
        colo_cosched_member_get_stats(a, &st);
        assert_int_equal(st.turn, 0);
        assert_int_equal(st.idle, 1);
        assert_int_equal(st.idles, 1);
        colo_cosched_step_begin(b);
        colo_cosched_member_get_stats(b, &st);
        assert_int_equal(st.steps, 1);
        assert_int_equal(st.idle, 0);
        colo_cosched_step_end(b);
        colo_cosched_idle(b, NULL);
        colo_cosched_cold(a, NULL, 0);
        colo_cosched_idle(a, NULL);
        colo_cosched_step_begin(a);
        colo_cosched_step_end(a);
        colo_cosched_cold(b, NULL, 0);
        colo_cosched_step_begin_as(b, COLO_STEP_BATCH); /* lines are never cold */
        colo_cosched_step_end(b);
        colo_cosched_step_begin(b);
        colo_cosched_step_end(b);
        colo_cosched_member_get_stats(a, &st);
        assert_int_equal(st.cold_steps, 0);
        colo_cosched_member_get_stats(b, &st);
        assert_int_equal(st.cold_steps, 1);
        colo_cosched_idle(a, NULL);
        colo_cosched_idle(b, NULL);
        colo_cosched_leave(a);
        colo_cosched_leave(b);
        colo_cosched_destroy(cs);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timeslice_serializes),
        cmocka_unit_test(test_timeslice_makes_high_wait),
        cmocka_unit_test(test_timeslice_quantum),
        cmocka_unit_test(test_priority_time_cap),
        cmocka_unit_test(test_spatial_overlaps),
        cmocka_unit_test(test_partition_overlaps),
        cmocka_unit_test(test_fair_overlaps),
        cmocka_unit_test(test_priority_holds_best_effort_start),
        cmocka_unit_test(test_priority_throttles_inflight_best_effort),
        cmocka_unit_test(test_priority_best_effort_step_cap),
        cmocka_unit_test(test_priority_floor_by_step_time),
        cmocka_unit_test(test_batch_step_waits_for_interactive),
        cmocka_unit_test(test_batch_step_held_inside),
        cmocka_unit_test(test_batch_step_under_timeslice),
        cmocka_unit_test(test_batch_floor_under_saturation),
        cmocka_unit_test(test_partition_plan),
        cmocka_unit_test(test_policy_names),
        cmocka_unit_test(test_policy_table),
        cmocka_unit_test(test_timeslice_idle_yields_turn),
        cmocka_unit_test(test_timeslice_cold_step_at_boundary),
        cmocka_unit_test(test_idle_holds_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
