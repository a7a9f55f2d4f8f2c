/* Fair share between tenants inside one model's queue (batching/queue.c):
 * service in proportion to weights, a newcomer served before a flooding
 * tenant, FIFO within a tenant, priorities still first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "batching/queue.h"
#include "tests/test_seed.h"

#define N 60

static colo_queue_item item(int cls, double weight, int length, colo_priority p)
{
    colo_queue_item it = {.priority = p, .length = length, .share_class = cls, .share_weight = weight};
    return it;
}

/* Two tenants with weights 1 and 2, both with more work queued than is
 * served: of every 3 items served, the heavier gets 2 (within one item at
 * any prefix of the order). */
static void test_weights_divide_service(void **state)
{
    (void)state;
    colo_queue *q = colo_queue_create(2 * N);
    colo_queue_item a[N], b[N];
    int len = 1 + rand() % 64; /* equal sizes: service counts are token shares */
    for (int i = 0; i < N; i++) {
        a[i] = item(1, 1.0, len, COLO_PRIO_NORMAL);
        b[i] = item(2, 2.0, len, COLO_PRIO_NORMAL);
    }
    for (int i = 0; i < N; i++) /* a floods first */
        assert_int_equal(colo_queue_push(q, &a[i]), COLO_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(colo_queue_push(q, &b[i]), COLO_OK);
    int na = 0, nb = 0, next_a = 0, next_b = 0;
    for (int k = 1; k <= N; k++) {
        colo_queue_item *it = colo_queue_pop(q);
        assert_non_null(it);
        if (it->share_class == 1) {
            assert_ptr_equal(it, &a[next_a++]); /* FIFO within a tenant */
            na++;
        } else {
            assert_ptr_equal(it, &b[next_b++]);
            nb++;
        }
        /* b's share of the first k items is 2/3 of them, within one item */
        assert_true(nb * 3 >= 2 * k - 3 && nb * 3 <= 2 * k + 3);
    }
    assert_int_equal(na + nb, N);
    while (colo_queue_pop(q))
        ;
    colo_queue_destroy(q);
}

/* A tenant with 16 queued requests that has been served cannot delay a
 * newcomer's request beyond the next pop: the newcomer has no recent use. */
static void test_newcomer_not_starved(void **state)
{
    (void)state;
    colo_queue *q = colo_queue_create(64);
    colo_queue_item a[16], b = item(2, 1.0, 8, COLO_PRIO_NORMAL);
    for (int i = 0; i < 16; i++) {
        a[i] = item(1, 1.0, 8, COLO_PRIO_NORMAL);
        a[i].share_extra = 16;
        assert_int_equal(colo_queue_push(q, &a[i]), COLO_OK);
    }
    assert_ptr_equal(colo_queue_pop(q), &a[0]); /* a is served alone: FIFO */
    assert_ptr_equal(colo_queue_pop(q), &a[1]);
    assert_int_equal(colo_queue_push(q, &b), COLO_OK);
    assert_ptr_equal(colo_queue_pop(q), &b);
    assert_true(colo_queue_share_use(q, 1, colo_now_ns()) > colo_queue_share_use(q, 2, colo_now_ns()));
    assert_ptr_equal(colo_queue_pop(q), &a[2]);
    while (colo_queue_pop(q))
        ;
    colo_queue_destroy(q);
}

/* Priorities order before fair share: a high-priority item of a tenant
 * that used much is still served before a normal one of an idle tenant. */
static void test_priority_before_share(void **state)
{
    (void)state;
    colo_queue *q = colo_queue_create(8);
    colo_queue_item heavy = item(1, 1.0, 1000, COLO_PRIO_NORMAL), h = item(1, 1.0, 4, COLO_PRIO_HIGH),
                    idle = item(2, 1.0, 4, COLO_PRIO_NORMAL);
    assert_int_equal(colo_queue_push(q, &heavy), COLO_OK);
    assert_ptr_equal(colo_queue_pop(q), &heavy);
    assert_int_equal(colo_queue_push(q, &idle), COLO_OK);
    assert_int_equal(colo_queue_push(q, &h), COLO_OK);
    assert_ptr_equal(colo_queue_pop(q), &h);
    assert_ptr_equal(colo_queue_pop(q), &idle);
    colo_queue_destroy(q);
}

/* Cost is tokens: a tenant sending items 4x as long gets a quarter as
 * many items served at equal weights. */
static void test_cost_is_tokens(void **state)
{
    (void)state;
    colo_queue *q = colo_queue_create(2 * N);
    colo_queue_item a[N], b[N];
    for (int i = 0; i < N; i++) {
        a[i] = item(1, 1.0, 40, COLO_PRIO_NORMAL);
        b[i] = item(2, 1.0, 10, COLO_PRIO_NORMAL);
        assert_int_equal(colo_queue_push(q, &a[i]), COLO_OK);
        assert_int_equal(colo_queue_push(q, &b[i]), COLO_OK);
    }
    int na = 0, nb = 0;
    for (int k = 0; k < 50; k++) {
        colo_queue_item *it = colo_queue_pop(q);
        if (it->share_class == 1)
            na++;
        else
            nb++;
    }
    /* tokens served: 40 na vs 10 nb, equal within one item of a */
    assert_true(abs(40 * na - 10 * nb) <= 40);
    while (colo_queue_pop(q))
        ;
    colo_queue_destroy(q);
}

/* The dynamic batcher's anchor is the fair share's choice too. */
static void test_batch_anchor_fair(void **state)
{
    (void)state;
    colo_queue *q = colo_queue_create(16);
    colo_queue_item a[4], b = item(2, 1.0, 5, COLO_PRIO_NORMAL);
    for (int i = 0; i < 4; i++) {
        a[i] = item(1, 1.0, 5, COLO_PRIO_NORMAL);
        assert_int_equal(colo_queue_push(q, &a[i]), COLO_OK);
    }
    colo_batch_policy pol = {.max_batch_size = 1};
    colo_queue_item *out[1];
    uint64_t wait;
    assert_int_equal(colo_queue_form_batch(q, &pol, colo_now_ns(), out, &wait), 1);
    assert_ptr_equal(out[0], &a[0]);
    assert_int_equal(colo_queue_push(q, &b), COLO_OK);
    assert_int_equal(colo_queue_form_batch(q, &pol, colo_now_ns(), out, &wait), 1);
    assert_ptr_equal(out[0], &b);
    while (colo_queue_pop(q))
        ;
    colo_queue_destroy(q);
}

int main(void)
{
    srand((unsigned)colo_test_seed("test_queue_share", 153));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_weights_divide_service), cmocka_unit_test(test_newcomer_not_starved),
        cmocka_unit_test(test_priority_before_share),  cmocka_unit_test(test_cost_is_tokens),
        cmocka_unit_test(test_batch_anchor_fair),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
