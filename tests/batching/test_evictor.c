/* Eviction (batching/evictor.h) on served models sharing one memory pool:
 * a claim puts idle models to sleep lowest priority first, least recently
 * used within a priority; never a pinned or a busy one; a sleeping model's
 * guarantee goes back to the pool and is taken again to wake; a claim that
 * cannot be met puts nobody to sleep and names the bytes. A model woken
 * within the minimum residency is put to sleep last; idle models lend
 * their unused guarantee before anyone sleeps; a higher-priority model's
 * wake preempts a busy lower-priority one, whose queued requests wait for
 * it to wake again and are answered. The model's weights (14 MB, F32)
 * fill most of a 0.3 guarantee, so that lending alone cannot make room
 * for a whole guarantee. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batching/evictor.h"
#include "batching/served_impl.h"
#include "tools/mkmodel.h"
#include "runtime/clock.h"

#define BUDGET (64u << 20)

static char model_path[300];
static colo_device *dev;

static int setup(void **state)
{
    (void)state;
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(model_path, sizeof model_path, "%s/colo-test-evict-%d.gguf", tmp, (int)getpid());
    colo_mkmodel_config c = {.n_layer = 4, .n_embd = 256, .n_head = 4, .n_kv_head = 2, .n_ff = 896,
                             .n_vocab = 320, .n_ctx = 128, .type = COLO_F32, .seed = 13};
    char err[256];
    if (colo_mkmodel_write(model_path, &c, err, sizeof err) != COLO_OK)
        return -1;
    colo_device_config dc = {.want = "cpu", .cpu_threads = 2};
    return (dev = colo_device_open(&dc, err, sizeof err)) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    colo_device_close(dev);
    unlink(model_path);
    return 0;
}

/* The models the evictor walks: what the registry's table is to colo-server. */
static pthread_mutex_t listed_mu = PTHREAD_MUTEX_INITIALIZER;
static colo_served *listed[16];
static int n_listed;

static void walk_listed(void *ud, colo_evictor_visit_fn visit, void *arg)
{
    (void)ud;
    pthread_mutex_lock(&listed_mu);
    for (int i = 0; i < n_listed; i++)
        visit(listed[i], arg);
    pthread_mutex_unlock(&listed_mu);
}

static colo_evictor *evictor_create(colo_mem_pool *pool)
{
    n_listed = 0;
    return colo_evictor_create(pool, walk_listed, NULL);
}

/* Unlisted, then freed, as the registry does. */
static void drop(colo_served *m)
{
    pthread_mutex_lock(&listed_mu);
    for (int i = 0; i < n_listed; i++)
        if (listed[i] == m)
            listed[i] = listed[--n_listed];
    pthread_mutex_unlock(&listed_mu);
    colo_served_free(m);
}

static colo_served *load_f(colo_mem_pool *pool, colo_evictor *ev, const char *name, colo_priority prio, bool pinned,
                           double fraction)
{
    colo_model_cfg mc = {.kind = "llama", .memory_fraction = fraction, .kv_block_size = 16, .kv_dtype = COLO_F32,
                         .priority = prio, .pinned = pinned,
                         .batching = {.max_batch_size = 4, .max_queue = 8, .queue_timeout_ms = 30000,
                                      .max_batch_prefill_tokens = 64}};
    snprintf(mc.name, sizeof mc.name, "%s", name);
    snprintf(mc.path, sizeof mc.path, "%s", model_path);
    colo_served_env env = {.dev = dev, .budget_bytes = BUDGET, .pool = pool, .evictor = ev};
    char err[512];
    colo_served *m = colo_served_load(&mc, &env, err, sizeof err);
    if (!m)
        fail_msg("%s", err);
    assert_int_equal(colo_served_start(m, err, sizeof err), COLO_OK);
    pthread_mutex_lock(&listed_mu);
    assert_true(n_listed < 16);
    listed[n_listed++] = m;
    pthread_mutex_unlock(&listed_mu);
    return m;
}

static colo_served *load(colo_mem_pool *pool, colo_evictor *ev, const char *name, colo_priority prio, bool pinned)
{
    return load_f(pool, ev, name, prio, pinned, 0.3);
}

static bool wait_state(colo_served *m, colo_served_state want)
{
    for (int i = 0; i < 2000 && colo_served_get_state(m) != want; i++)
        colo_sleep_ns(2 * 1000 * 1000);
    return colo_served_get_state(m) == want;
}

/* A request's end, signalled to the test's thread; while hold is set, its
 * first token blocks the model's executor (the request keeps running). */
typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, tokens;
    bool hold;
} waiter;

static void on_done(colo_request *r)
{
    waiter *w = r->cb.ud;
    pthread_mutex_lock(&w->mu);
    w->done++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static bool on_token(colo_request *r, int32_t token, const char *piece, size_t len)
{
    (void)token, (void)piece, (void)len;
    waiter *w = r->cb.ud;
    pthread_mutex_lock(&w->mu);
    w->tokens++;
    pthread_cond_broadcast(&w->cv);
    while (w->hold)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    return true;
}

static void wait_done(waiter *w)
{
    pthread_mutex_lock(&w->mu);
    while (!w->done)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

static bool is_done(waiter *w)
{
    pthread_mutex_lock(&w->mu);
    bool d = w->done > 0;
    pthread_mutex_unlock(&w->mu);
    return d;
}

/* Waits until w's request has its first token (its executor then blocks
 * while w->hold). */
static void wait_first_token(waiter *w)
{
    pthread_mutex_lock(&w->mu);
    while (!w->tokens)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

static void release(waiter *w)
{
    pthread_mutex_lock(&w->mu);
    w->hold = false;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static colo_request *gen_request(waiter *w)
{
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->done = w->tokens = 0;
    w->hold = false;
    colo_request *r = colo_request_create();
    assert_non_null(r);
    r->task = COLO_TASK_GENERATE;
    r->in.prompt = colo_pool_strndup(r->pool, "hello", 5);
    r->in.prompt_len = 5;
    r->params.max_tokens = 4;
    r->params.max_tokens_set = true;
    r->params.temperature = 0;
    r->params.stream = true;
    r->cb = (colo_req_callbacks){on_token, on_done, w};
    return r;
}

static void test_order_pinned_and_refusal(void **state)
{
    (void)state;
    colo_mem_pool *pool = colo_mem_pool_create(BUDGET);
    colo_evictor *ev = evictor_create(pool);
    assert_non_null(pool);
    assert_non_null(ev);
    /* 0.9 of the budget guaranteed to three models */
    colo_served *pin = load(pool, ev, "pin", COLO_PRIO_LOW, true);
    colo_served *n1 = load(pool, ev, "n1", COLO_PRIO_NORMAL, false);
    colo_served *n2 = load(pool, ev, "n2", COLO_PRIO_NORMAL, false);
    size_t g = colo_arena_guarantee_full(n1->arena), free0 = colo_mem_pool_unguaranteed(pool);
    assert_true(g > 0 && free0 < g);
    /* n2 used longer ago than n1; pin (low) is pinned, so the order is n2, n1 */
    atomic_store(&n1->last_used_ns, colo_now_ns());
    atomic_store(&n2->last_used_ns, colo_now_ns() - 1000000000ull);
    assert_int_equal(colo_evictor_available(ev, NULL), free0 + 2 * g);

    char err[512] = "";
    assert_int_equal(colo_evictor_claim(ev, free0 + g, NULL, "test", err, sizeof err), COLO_OK);
    colo_evictor_unclaim(ev);
    assert_true(wait_state(n2, COLO_SERVED_SLEEPING));
    assert_int_equal(colo_served_get_state(n1), COLO_SERVED_READY);
    assert_int_equal(colo_served_get_state(pin), COLO_SERVED_READY);
    colo_served_info in;
    colo_served_get_info(n2, &in);
    assert_int_equal(in.evictions, 1);
    assert_int_equal(in.mem.guaranteed_bytes, 0); /* given back */
    assert_int_equal(colo_mem_pool_unguaranteed(pool), free0 + g);

    /* More than even n1 could give: refused with the bytes; nobody sleeps. */
    size_t want = free0 + 3 * g;
    assert_int_equal(colo_evictor_claim(ev, want, NULL, "test", err, sizeof err), COLO_ENOMEM);
    char num[32];
    snprintf(num, sizeof num, "needs %zu bytes", want);
    assert_non_null(strstr(err, num));
    snprintf(num, sizeof num, "%zu available", free0 + 2 * g);
    assert_non_null(strstr(err, num));
    colo_sleep_ns(50 * 1000 * 1000);
    assert_int_equal(colo_served_get_state(n1), COLO_SERVED_READY);

    /* n3 (pinned) takes the room n2 left; n2's wake then takes its
     * guarantee again by putting n1 to sleep, the only one that may. */
    colo_served *n3 = load(pool, ev, "n3", COLO_PRIO_HIGH, true);
    assert_int_equal(colo_mem_pool_unguaranteed(pool), free0);
    assert_int_equal(colo_served_wake(n2, err, sizeof err), COLO_OK);
    assert_true(wait_state(n2, COLO_SERVED_READY));
    assert_true(wait_state(n1, COLO_SERVED_SLEEPING));
    assert_int_equal(colo_served_get_state(pin), COLO_SERVED_READY);
    colo_served_get_info(n2, &in);
    assert_int_equal(in.mem.guaranteed_bytes, g);
    colo_served_get_info(pin, &in);
    assert_int_equal(in.evictions, 0);

    /* Every awake model pinned (n2 now too): n1's wake cannot make room. It is refused
     * (wake_fits for the admin route), and a wake asked anyway leaves it
     * asleep with its guarantee still given back. */
    colo_served_set_live(n2, 0, true);
    size_t need = 0, avail = 0;
    assert_int_equal(colo_served_wake_fits(n1, &need, &avail), COLO_ENOMEM);
    assert_int_equal(need, g);
    assert_int_equal(avail, colo_mem_pool_unguaranteed(pool));
    assert_true(avail < g);
    colo_served_get_info(n1, &in);
    uint64_t wakes = in.wakes;
    assert_int_equal(colo_served_wake(n1, err, sizeof err), COLO_OK);
    colo_sleep_ns(200 * 1000 * 1000);
    assert_int_equal(colo_served_get_state(n1), COLO_SERVED_SLEEPING);
    colo_served_get_info(n1, &in);
    assert_int_equal(in.wakes, wakes);
    assert_int_equal(in.mem.guaranteed_bytes, 0);
    assert_int_equal(colo_served_get_state(n2), COLO_SERVED_READY);
    assert_int_equal(colo_served_get_state(n3), COLO_SERVED_READY);

    drop(pin);
    drop(n1);
    drop(n2);
    drop(n3);
    colo_evictor_free(ev);
    colo_mem_pool_destroy(pool);
}

/* A request that wakes a model while the awake models that could make room
 * are busy (here: c, one request running) waits for memory instead of
 * being refused; once c is idle, the wake puts it to sleep and the request
 * is served. (Pinned models never make room: a wake behind them is refused
 * at once, as tests/server/test_serve_lifecycle.c checks.) */
static void test_wake_waits_for_room(void **state)
{
    (void)state;
    colo_mem_pool *pool = colo_mem_pool_create(BUDGET);
    colo_evictor *ev = evictor_create(pool);
    assert_non_null(pool);
    assert_non_null(ev);
    colo_served *a = load(pool, ev, "a", COLO_PRIO_NORMAL, false);
    colo_served *b = load(pool, ev, "b", COLO_PRIO_NORMAL, true);
    colo_served *c = load(pool, ev, "c", COLO_PRIO_NORMAL, false);
    /* c runs a request held at its first token */
    waiter wc;
    colo_request *rc = gen_request(&wc);
    wc.hold = true;
    char err[512] = "";
    assert_int_equal(colo_served_submit(c, rc, err, sizeof err), COLO_OK);
    pthread_mutex_lock(&wc.mu);
    while (!wc.tokens)
        pthread_cond_wait(&wc.cv, &wc.mu);
    pthread_mutex_unlock(&wc.mu);
    /* d's load puts a (the only idle one that may sleep) to sleep */
    colo_served *d = load(pool, ev, "d", COLO_PRIO_NORMAL, true);
    assert_true(wait_state(a, COLO_SERVED_SLEEPING));
    waiter w;
    colo_request *r = gen_request(&w);
    assert_int_equal(colo_served_submit(a, r, err, sizeof err), COLO_OK);
    colo_sleep_ns(200 * 1000 * 1000); /* several tries find no room */
    assert_false(is_done(&w));
    assert_int_equal(colo_served_get_state(a), COLO_SERVED_SLEEPING);
    assert_int_equal(colo_served_get_state(c), COLO_SERVED_READY);
    pthread_mutex_lock(&wc.mu); /* c's request ends: c may sleep now */
    wc.hold = false;
    pthread_cond_broadcast(&wc.cv);
    pthread_mutex_unlock(&wc.mu);
    wait_done(&wc);
    assert_int_equal(rc->out.status, COLO_OK);
    wait_done(&w);
    assert_int_equal(r->out.status, COLO_OK);
    assert_true(r->out.n_tokens >= 1);
    assert_int_equal(colo_served_get_state(c), COLO_SERVED_SLEEPING);
    assert_int_equal(colo_served_get_state(b), COLO_SERVED_READY);
    assert_int_equal(colo_served_get_state(d), COLO_SERVED_READY);
    colo_request_free(rc);
    colo_request_free(r);
    drop(a);
    drop(b);
    drop(c);
    drop(d);
    colo_evictor_free(ev);
    colo_mem_pool_destroy(pool);
}

#define SEC_NS 1000000000ull

/* Minimum residency: of two idle models of one priority, the one woken
 * within the window is put to sleep after the other even when it was used
 * less recently, and only when nothing else can make room. */
static void test_min_residency(void **state)
{
    (void)state;
    colo_mem_pool *pool = colo_mem_pool_create(BUDGET);
    colo_evictor *ev = evictor_create(pool);
    assert_non_null(pool);
    assert_non_null(ev);
    colo_served *fresh = load(pool, ev, "fresh", COLO_PRIO_NORMAL, false);
    colo_served *old1 = load(pool, ev, "old1", COLO_PRIO_NORMAL, false);
    colo_served *old2 = load(pool, ev, "old2", COLO_PRIO_NORMAL, false);
    size_t g = colo_arena_guarantee_full(fresh->arena), free0 = colo_mem_pool_unguaranteed(pool);
    assert_true(free0 < g);
    uint64_t now = colo_now_ns();
    /* fresh woke just now but was used longest ago: LRU alone would pick it first */
    atomic_store(&fresh->resident_since_ns, now);
    atomic_store(&fresh->last_used_ns, now - 30 * SEC_NS);
    atomic_store(&old1->resident_since_ns, now - 60 * SEC_NS);
    atomic_store(&old1->last_used_ns, now - 20 * SEC_NS);
    atomic_store(&old2->resident_since_ns, now - 60 * SEC_NS);
    atomic_store(&old2->last_used_ns, now - 10 * SEC_NS);
    char err[512] = "";
    assert_int_equal(colo_evictor_claim(ev, free0 + g, NULL, "test", err, sizeof err), COLO_OK);
    colo_evictor_unclaim(ev);
    assert_true(wait_state(old1, COLO_SERVED_SLEEPING));
    assert_int_equal(colo_served_get_state(fresh), COLO_SERVED_READY);
    assert_int_equal(colo_served_get_state(old2), COLO_SERVED_READY);
    /* then old2, still not fresh */
    assert_int_equal(colo_evictor_claim(ev, free0 + 2 * g, NULL, "test", err, sizeof err), COLO_OK);
    colo_evictor_unclaim(ev);
    assert_true(wait_state(old2, COLO_SERVED_SLEEPING));
    assert_int_equal(colo_served_get_state(fresh), COLO_SERVED_READY);
    /* nothing else can make room: fresh goes too */
    assert_int_equal(colo_evictor_claim(ev, free0 + 3 * g, NULL, "test", err, sizeof err), COLO_OK);
    colo_evictor_unclaim(ev);
    assert_true(wait_state(fresh, COLO_SERVED_SLEEPING));
    colo_served_info in;
    colo_served_get_info(fresh, &in);
    assert_int_equal(in.evictions, 1);
    assert_int_equal(in.sleep_preemptions, 0);

    /* Without the window the order is least recently used: fresh first. */
    char e2[512];
    for (colo_served **m = (colo_served *[]){fresh, old1, old2, NULL}; *m; m++) {
        assert_int_equal(colo_served_wake(*m, e2, sizeof e2), COLO_OK);
        assert_true(wait_state(*m, COLO_SERVED_READY));
    }
    colo_evictor_set_min_residency_ms(ev, 0);
    now = colo_now_ns();
    atomic_store(&fresh->last_used_ns, now - 30 * SEC_NS);
    atomic_store(&old1->last_used_ns, now - 20 * SEC_NS);
    atomic_store(&old2->last_used_ns, now - 10 * SEC_NS);
    assert_int_equal(colo_evictor_claim(ev, free0 + g, NULL, "test", err, sizeof err), COLO_OK);
    colo_evictor_unclaim(ev);
    assert_true(wait_state(fresh, COLO_SERVED_SLEEPING));
    assert_int_equal(colo_served_get_state(old1), COLO_SERVED_READY);
    drop(fresh);
    drop(old1);
    drop(old2);
    colo_evictor_free(ev);
    colo_mem_pool_destroy(pool);
}

/* An idle model whose unused guarantee covers a claim lends it and stays
 * awake (nobody sleeps); its next request takes the guarantee back and is
 * served without a wake. */
static void test_lend_before_sleep(void **state)
{
    (void)state;
    colo_mem_pool *pool = colo_mem_pool_create(BUDGET);
    colo_evictor *ev = evictor_create(pool);
    assert_non_null(pool);
    assert_non_null(ev);
    colo_served *a = load_f(pool, ev, "a", COLO_PRIO_NORMAL, false, 0.45);
    colo_served *b = load_f(pool, ev, "b", COLO_PRIO_NORMAL, false, 0.45);
    atomic_store(&a->resident_since_ns, colo_now_ns() - 60 * SEC_NS);
    atomic_store(&b->resident_since_ns, colo_now_ns() - 60 * SEC_NS);
    atomic_store(&a->last_used_ns, colo_now_ns() - 10 * SEC_NS); /* a first */
    /* a serves one request: its cache holds blocks, counted as unused */
    waiter w;
    colo_request *r = gen_request(&w);
    char err[512] = "";
    assert_int_equal(colo_served_submit(a, r, err, sizeof err), COLO_OK);
    wait_done(&w);
    assert_int_equal(r->out.status, COLO_OK);
    colo_request_free(r);
    atomic_store(&a->last_used_ns, colo_now_ns() - 10 * SEC_NS);
    size_t g = colo_arena_guarantee_full(a->arena), free0 = colo_mem_pool_unguaranteed(pool);
    size_t idle_a = colo_arena_guarantee_idle(a->arena);
    assert_true(idle_a > g / 4 && idle_a < g);
    size_t want = free0 + idle_a / 2;
    assert_int_equal(colo_evictor_claim(ev, want, NULL, "test", err, sizeof err), COLO_OK);
    colo_evictor_unclaim(ev);
    assert_true(colo_mem_pool_unguaranteed(pool) >= want);
    colo_served_info in;
    colo_served_get_info(a, &in);
    assert_int_equal(in.state, COLO_SERVED_READY);
    assert_int_equal(in.trims, 1);
    assert_int_equal(in.evictions, 0);
    assert_true(in.mem.guaranteed_bytes < g);
    assert_int_equal(in.mem.borrowed_bytes, 0);
    colo_served_get_info(b, &in);
    assert_int_equal(in.state, COLO_SERVED_READY);
    assert_int_equal(in.trims, 0);
    /* its next request takes the guarantee back; no wake */
    r = gen_request(&w);
    assert_int_equal(colo_served_submit(a, r, err, sizeof err), COLO_OK);
    wait_done(&w);
    assert_int_equal(r->out.status, COLO_OK);
    assert_true(r->out.n_tokens >= 1);
    colo_served_get_info(a, &in);
    assert_int_equal(in.mem.guaranteed_bytes, g);
    assert_int_equal(in.wakes, 0);
    assert_int_equal(in.sleeps, 0);
    colo_request_free(r);
    drop(a);
    drop(b);
    colo_evictor_free(ev);
    colo_mem_pool_destroy(pool);
}

/* A high-priority model's wake preempts a busy low-priority one: the low
 * one finishes the request it runs, sleeps with its other request still
 * queued, and answers it once it can wake again: not while the high one,
 * idle again, is within its minimum residency (the low one's wake waits),
 * and at once when there is no such window. */
static void test_priority_preempts(void **state)
{
    (void)state;
    colo_mem_pool *pool = colo_mem_pool_create(BUDGET);
    colo_evictor *ev = evictor_create(pool);
    assert_non_null(pool);
    assert_non_null(ev);
    colo_evictor_set_min_residency_ms(ev, 3600 * 1000);
    colo_served *hi = load(pool, ev, "hi", COLO_PRIO_HIGH, false);
    colo_served *lo = load(pool, ev, "lo", COLO_PRIO_LOW, false);
    colo_served *x = load(pool, ev, "x", COLO_PRIO_NORMAL, true);
    char err[512] = "";
    assert_int_equal(colo_served_sleep(hi, err, sizeof err), COLO_OK);
    assert_true(wait_state(hi, COLO_SERVED_SLEEPING));
    colo_served *y = load(pool, ev, "y", COLO_PRIO_NORMAL, true); /* takes hi's room */
    /* lo runs r1 (held at its first token) with r2 queued behind it */
    waiter w1, w2, wh;
    colo_request *r1 = gen_request(&w1), *r2 = gen_request(&w2), *rh = gen_request(&wh);
    w1.hold = true;
    assert_int_equal(colo_served_submit(lo, r1, err, sizeof err), COLO_OK);
    wait_first_token(&w1);
    assert_int_equal(colo_served_submit(lo, r2, err, sizeof err), COLO_OK);
    /* hi's request wakes it; only lo can make room */
    wh.hold = true;
    assert_int_equal(colo_served_submit(hi, rh, err, sizeof err), COLO_OK);
    colo_served_info in;
    for (int i = 0; i < 2000; i++) {
        colo_served_get_info(lo, &in);
        if (in.sleep_preemptions)
            break;
        colo_sleep_ns(2 * 1000 * 1000);
    }
    assert_int_equal(in.sleep_preemptions, 1);
    assert_int_equal(in.evictions, 1);
    assert_false(is_done(&w2));
    release(&w1); /* r1 finishes; lo sleeps; hi wakes and holds rh at its first token */
    wait_done(&w1);
    assert_int_equal(r1->out.status, COLO_OK);
    wait_first_token(&wh);
    assert_int_equal(colo_served_get_state(hi), COLO_SERVED_READY);
    assert_int_equal(colo_served_get_state(lo), COLO_SERVED_SLEEPING);
    colo_sleep_ns(100 * 1000 * 1000); /* lo's wake keeps finding no room; r2 stays queued */
    assert_false(is_done(&w2));
    assert_int_equal(colo_served_get_state(lo), COLO_SERVED_SLEEPING);
    colo_served_get_info(lo, &in);
    assert_int_equal(in.queue_depth, 1);
    release(&wh); /* hi idle, but woken within its window: lo keeps waiting */
    wait_done(&wh);
    assert_int_equal(rh->out.status, COLO_OK);
    colo_sleep_ns(100 * 1000 * 1000);
    assert_false(is_done(&w2));
    assert_int_equal(colo_served_get_state(hi), COLO_SERVED_READY);
    assert_int_equal(colo_served_get_state(lo), COLO_SERVED_SLEEPING);
    colo_evictor_set_min_residency_ms(ev, 0); /* no window: lo's wake puts hi to sleep, the only room there is */
    wait_done(&w2);
    assert_int_equal(r2->out.status, COLO_OK);
    assert_true(r2->out.n_tokens >= 1);
    assert_true(wait_state(hi, COLO_SERVED_SLEEPING));
    colo_served_get_info(hi, &in);
    assert_int_equal(in.sleep_preemptions, 0);
    colo_served_get_info(lo, &in);
    assert_int_equal(in.wakes, 1);
    colo_request_free(r1);
    colo_request_free(r2);
    colo_request_free(rh);
    drop(hi);
    drop(lo);
    drop(x);
    drop(y);
    colo_evictor_free(ev);
    colo_mem_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_pinned_and_refusal),
        cmocka_unit_test(test_wake_waits_for_room),
        cmocka_unit_test(test_min_residency),
        cmocka_unit_test(test_lend_before_sleep),
        cmocka_unit_test(test_priority_preempts),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
