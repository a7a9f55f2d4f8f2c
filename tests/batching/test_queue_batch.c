/* The batch class of a model's queue (batching/queue.h): lines of batches
 * wait below every priority, so an interactive request of any priority
 * that arrives after a backlog of lines is taken first, whatever the
 * tenants' use; lines among themselves stay in arrival order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "batching/queue.h"
#include "tests/test_seed.h"

static void test_batch_below_every_priority(void **state)
{
    (void)state;
    srand((unsigned)colo_test_seed("test_batch_below_every_priority", 53));
    enum { N = 64 };
    colo_queue *q = colo_queue_create(2 * N);
    colo_queue_item lines[N], live[N];
    int n_lines = 1 + rand() % N, n_live = 1 + rand() % N;
    /* the interactive tenant (class 2) has used much, the lines' (class 1) nothing */
    colo_queue_item heavy = {.priority = COLO_PRIO_NORMAL, .length = 100000, .share_class = 2};
    assert_int_equal(colo_queue_push(q, &heavy), COLO_OK);
    assert_ptr_equal(colo_queue_pop(q), &heavy);
    /* a backlog of lines first */
    for (int i = 0; i < n_lines; i++) {
        lines[i] = (colo_queue_item){.priority = COLO_PRIO_LOW, .length = 1 + rand() % 100, .batch = true,
                                     .share_class = 1};
        assert_int_equal(colo_queue_push(q, &lines[i]), COLO_OK);
    }
    /* then interactive requests of every priority */
    for (int i = 0; i < n_live; i++) {
        live[i] = (colo_queue_item){.priority = (colo_priority)(rand() % 3), .length = 1 + rand() % 100,
                                    .share_class = 2};
        assert_int_equal(colo_queue_push(q, &live[i]), COLO_OK);
    }
    assert_int_equal(colo_queue_len(q), n_lines + n_live);
    int low = 0;
    for (int i = 0; i < n_live; i++)
        low += live[i].priority == COLO_PRIO_LOW;
    assert_int_equal(colo_queue_len_prio(q, COLO_PRIO_LOW), low); /* the lines are no priority's */
    for (int i = 0; i < n_live; i++) {
        colo_queue_item *it = colo_queue_pop(q);
        assert_non_null(it);
        assert_false(it->batch);
    }
    for (int i = 0; i < n_lines; i++)
        assert_ptr_equal(colo_queue_pop(q), &lines[i]);
    assert_null(colo_queue_pop(q));
    colo_queue_destroy(q);
}

/* An encoder's batch takes lines only to fill what interactive requests leave. */
static void test_batch_formation_fills_with_lines(void **state)
{
    (void)state;
    colo_queue *q = colo_queue_create(16);
    colo_queue_item l[4], r[2];
    for (int i = 0; i < 4; i++) {
        l[i] = (colo_queue_item){.priority = COLO_PRIO_HIGH, .length = 5, .batch = true};
        assert_int_equal(colo_queue_push(q, &l[i]), COLO_OK);
    }
    for (int i = 0; i < 2; i++) {
        r[i] = (colo_queue_item){.priority = COLO_PRIO_LOW, .length = 50};
        assert_int_equal(colo_queue_push(q, &r[i]), COLO_OK);
    }
    colo_batch_policy pol = {.max_batch_size = 3, .max_queue_delay_ns = 0};
    colo_queue_item *out[3];
    uint64_t wait;
    assert_int_equal(colo_queue_form_batch(q, &pol, colo_now_ns(), out, &wait), 3);
    int lines = 0;
    for (int i = 0; i < 3; i++)
        lines += out[i]->batch;
    assert_int_equal(lines, 1);
    assert_false(out[0]->batch);
    while (colo_queue_pop(q))
        ;
    colo_queue_destroy(q);
}

/* Lines never fill the queue for interactive requests: an interactive
 * item is held to the bounds (length, tokens) by interactive items alone,
 * lines by everything queued; an executor whose places lines hold takes
 * interactive items only. */
static void test_batch_bounds_and_interactive_pop(void **state)
{
    (void)state;
    srand((unsigned)colo_test_seed("test_batch_bounds_and_interactive_pop", 53));
    enum { MAX = 8 };
    colo_queue *q = colo_queue_create(MAX);
    colo_queue_set_max_tokens(q, 1000);
    colo_queue_item lines[MAX + 1], live[MAX + 1];
    int n_lines = 1 + rand() % MAX;
    for (int i = 0; i < n_lines; i++) {
        lines[i] = (colo_queue_item){.priority = COLO_PRIO_LOW, .length = 1000 / MAX, .batch = true};
        assert_int_equal(colo_queue_push(q, &lines[i]), COLO_OK);
    }
    /* the lines fill the queue to its length for lines ... */
    for (int i = n_lines; i < MAX; i++) {
        lines[i] = (colo_queue_item){.priority = COLO_PRIO_LOW, .length = 1, .batch = true};
        assert_int_equal(colo_queue_push(q, &lines[i]), COLO_OK);
    }
    lines[MAX] = (colo_queue_item){.priority = COLO_PRIO_LOW, .length = 1, .batch = true};
    assert_int_equal(colo_queue_push(q, &lines[MAX]), COLO_EAGAIN);
    /* ... and interactive requests still get MAX places and 1000 tokens */
    for (int i = 0; i < MAX; i++) {
        live[i] = (colo_queue_item){.priority = (colo_priority)(rand() % 3), .length = 1000 / MAX};
        assert_int_equal(colo_queue_push(q, &live[i]), COLO_OK);
    }
    live[MAX] = (colo_queue_item){.priority = COLO_PRIO_HIGH, .length = 1};
    assert_int_equal(colo_queue_push(q, &live[MAX]), COLO_EAGAIN);
    assert_int_equal(colo_queue_len(q), 2 * MAX);
    assert_int_equal(colo_queue_len_interactive(q), MAX);
    for (int i = 0; i < MAX; i++) {
        colo_queue_item *it = colo_queue_pop_interactive(q);
        assert_non_null(it);
        assert_false(it->batch);
    }
    assert_null(colo_queue_pop_interactive(q)); /* only lines are left */
    assert_int_equal(colo_queue_len_interactive(q), 0);
    for (int i = 0; i < MAX; i++)
        assert_ptr_equal(colo_queue_pop(q), &lines[i]);
    assert_int_equal(colo_queue_tokens(q), 0);
    colo_queue_destroy(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_below_every_priority),
        cmocka_unit_test(test_batch_formation_fills_with_lines),
        cmocka_unit_test(test_batch_bounds_and_interactive_pop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
