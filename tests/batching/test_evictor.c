/* Eviction (batching/evictor.h) on served models sharing one memory pool:
 * a claim puts idle models to sleep lowest priority first, least recently
 * used within a priority; never a pinned or a busy one; a sleeping model's
 * guarantee goes back to the pool and is taken again to wake; a claim that
 * cannot be met puts nobody to sleep and names the bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batching/evictor.h"
#include "batching/served_impl.h"
#include "models/mkmodel.h"
#include "runtime/clock.h"

#define BUDGET (64u << 20)

static char model_path[300];
static colo_device *dev;

static int setup(void **state)
{
    (void)state;
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(model_path, sizeof model_path, "%s/colo-test-evict-%d.gguf", tmp, (int)getpid());
    colo_mkmodel_config c = {.n_layer = 2, .n_embd = 64, .n_head = 4, .n_kv_head = 2, .n_ff = 128,
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

static colo_served *load(colo_mem_pool *pool, colo_evictor *ev, const char *name, colo_priority prio, bool pinned)
{
    colo_model_cfg mc = {.kind = "llama", .memory_fraction = 0.3, .kv_block_size = 16, .kv_dtype = COLO_F32,
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
    return m;
}

static bool wait_state(colo_served *m, colo_served_state want)
{
    for (int i = 0; i < 2000 && colo_served_get_state(m) != want; i++)
        colo_sleep_ns(2 * 1000 * 1000);
    return colo_served_get_state(m) == want;
}

static void test_order_pinned_and_refusal(void **state)
{
    (void)state;
    colo_mem_pool *pool = colo_mem_pool_create(BUDGET);
    colo_evictor *ev = colo_evictor_create(pool);
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

    colo_served_free(pin);
    colo_served_free(n1);
    colo_served_free(n2);
    colo_served_free(n3);
    colo_evictor_free(ev);
    colo_mem_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_pinned_and_refusal),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
