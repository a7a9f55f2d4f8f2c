/* Per-model queues and dynamic batch formation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "batching/queue.h"

static colo_queue_item item(colo_priority p, int length)
{
    colo_queue_item it = {.priority = p, .length = length};
    return it;
}

static void test_priority_then_fifo(void **state)
{
    (void)state;
    colo_queue *q = colo_queue_create(16);
    colo_queue_item l1 = item(COLO_PRIO_LOW, 1), n1 = item(COLO_PRIO_NORMAL, 1), h1 = item(COLO_PRIO_HIGH, 1),
                    n2 = item(COLO_PRIO_NORMAL, 1);
    assert_int_equal(colo_queue_push(q, &l1), COLO_OK);
    assert_int_equal(colo_queue_push(q, &n1), COLO_OK);
    assert_int_equal(colo_queue_push(q, &h1), COLO_OK);
    assert_int_equal(colo_queue_push(q, &n2), COLO_OK);
    assert_int_equal(colo_queue_len(q), 4);
    assert_int_equal(colo_queue_len_prio(q, COLO_PRIO_NORMAL), 2);
    assert_ptr_equal(colo_queue_pop(q), &h1);
    assert_ptr_equal(colo_queue_pop(q), &n1);
    assert_ptr_equal(colo_queue_pop(q), &n2);
    assert_ptr_equal(colo_queue_pop(q), &l1);
    assert_null(colo_queue_pop(q));
    colo_queue_destroy(q);
}

static void test_bounded_and_closed(void **state)
{
    (void)state;
    colo_queue *q = colo_queue_create(2);
    colo_queue_item a = item(COLO_PRIO_NORMAL, 1), b = a, c = a;
    assert_int_equal(colo_queue_push(q, &a), COLO_OK);
    assert_int_equal(colo_queue_push(q, &b), COLO_OK);
    assert_int_equal(colo_queue_push(q, &c), COLO_EAGAIN);
    assert_false(c.queued);
    assert_int_equal(colo_queue_len(q), 2);
    colo_queue_pop(q);
    colo_queue_close(q);
    assert_int_equal(colo_queue_push(q, &c), COLO_EAGAIN);
    assert_true(colo_queue_closed(q));
    colo_queue_pop(q);
    colo_queue_destroy(q);
    assert_null(colo_queue_create(0));
}

/* A token bound counts the queued lengths; a long item still enters an
 * empty queue alone; removal gives its tokens back. */
static void test_token_bound(void **state)
{
    (void)state;
    colo_queue *q = colo_queue_create(16);
    colo_queue_set_max_tokens(q, 100);
    colo_queue_item a = item(COLO_PRIO_NORMAL, 60), b = item(COLO_PRIO_NORMAL, 50), c = item(COLO_PRIO_HIGH, 40),
                    big = item(COLO_PRIO_NORMAL, 500);
    assert_int_equal(colo_queue_push(q, &a), COLO_OK);
    assert_int_equal(colo_queue_push(q, &b), COLO_EAGAIN); /* 110 > 100 */
    assert_int_equal(colo_queue_push(q, &c), COLO_OK);     /* 100 */
    assert_int_equal(colo_queue_tokens(q), 100);
    assert_true(colo_queue_remove(q, &a));
    assert_int_equal(colo_queue_tokens(q), 40);
    assert_int_equal(colo_queue_push(q, &b), COLO_OK); /* 90 */
    assert_int_equal(colo_queue_push(q, &big), COLO_EAGAIN);
    assert_ptr_equal(colo_queue_pop(q), &c);
    assert_ptr_equal(colo_queue_pop(q), &b);
    assert_int_equal(colo_queue_tokens(q), 0);
    assert_int_equal(colo_queue_push(q, &big), COLO_OK); /* alone */
    assert_ptr_equal(colo_queue_pop(q), &big);
    colo_queue_destroy(q);
}

static void test_cancel_removes(void **state)
{
    (void)state;
    colo_queue *q = colo_queue_create(8);
    colo_queue_item a = item(COLO_PRIO_NORMAL, 1), b = a, c = a;
    colo_queue_push(q, &a);
    colo_queue_push(q, &b);
    colo_queue_push(q, &c);
    assert_true(colo_queue_remove(q, &b));
    assert_false(colo_queue_remove(q, &b));
    assert_ptr_equal(colo_queue_pop(q), &a);
    assert_ptr_equal(colo_queue_pop(q), &c);
    assert_false(colo_queue_remove(q, &c)); /* already taken by the executor */
    colo_queue_destroy(q);
}

static void test_deadlines(void **state)
{
    (void)state;
    colo_queue *q = colo_queue_create(8);
    colo_queue_item a = item(COLO_PRIO_HIGH, 1), b = item(COLO_PRIO_LOW, 1), c = item(COLO_PRIO_NORMAL, 1);
    a.deadline_ns = 100;
    b.deadline_ns = 300;
    c.deadline_ns = 0; /* none */
    colo_queue_push(q, &a);
    colo_queue_push(q, &b);
    colo_queue_push(q, &c);
    colo_queue_item *out[8];
    assert_int_equal(colo_queue_take_expired(q, 99, out, 8), 0);
    assert_int_equal(colo_queue_take_expired(q, 200, out, 8), 1);
    assert_ptr_equal(out[0], &a);
    assert_int_equal(colo_queue_take_expired(q, UINT64_MAX, out, 8), 1);
    assert_ptr_equal(out[0], &b);
    assert_int_equal(colo_queue_len(q), 1);
    colo_queue_pop(q);
    colo_queue_destroy(q);
}

static void test_batch_full_size(void **state)
{
    (void)state;
    colo_queue *q = colo_queue_create(64);
    colo_queue_item its[10];
    for (int i = 0; i < 10; i++) {
        its[i] = item(COLO_PRIO_NORMAL, 5);
        colo_queue_push(q, &its[i]);
    }
    colo_batch_policy pol = {.max_batch_size = 4, .max_queue_delay_ns = 1000000000ull};
    colo_queue_item *out[16];
    uint64_t wait;
    uint64_t t0 = its[0].enqueue_ns;
    assert_int_equal(colo_queue_form_batch(q, &pol, t0, out, &wait), 4);
    assert_ptr_equal(out[0], &its[0]);
    assert_int_equal(colo_queue_form_batch(q, &pol, t0, out, &wait), 4);
    /* 2 left, under the max, delay not passed: wait for the rest of it. */
    assert_int_equal(colo_queue_form_batch(q, &pol, its[8].enqueue_ns, out, &wait), 0);
    assert_true(wait > 0 && wait <= pol.max_queue_delay_ns);
    assert_int_equal(colo_queue_form_batch(q, &pol, its[8].enqueue_ns + pol.max_queue_delay_ns, out, &wait), 2);
    assert_int_equal(colo_queue_form_batch(q, &pol, UINT64_MAX / 2, out, &wait), 0);
    assert_int_equal(wait, UINT64_MAX);
    colo_queue_destroy(q);
}

static void test_batch_preferred_and_delay(void **state)
{
    (void)state;
    colo_queue *q = colo_queue_create(64);
    colo_queue_item its[5];
    int preferred[] = {2, 4};
    colo_batch_policy pol = {.max_batch_size = 8, .preferred_sizes = preferred, .n_preferred = 2,
                             .max_queue_delay_ns = 5000000};
    colo_queue_item *out[16];
    uint64_t wait;
    its[0] = item(COLO_PRIO_NORMAL, 1);
    colo_queue_push(q, &its[0]);
    uint64_t t0 = its[0].enqueue_ns;
    assert_int_equal(colo_queue_form_batch(q, &pol, t0 + 1000, out, &wait), 0);
    assert_int_equal(wait, pol.max_queue_delay_ns - 1000);
    for (int i = 1; i < 5; i++) {
        its[i] = item(COLO_PRIO_NORMAL, 1);
        colo_queue_push(q, &its[i]);
    }
    /* 5 queued: the largest preferred size reached (4) is formed at once. */
    assert_int_equal(colo_queue_form_batch(q, &pol, t0 + 1000, out, &wait), 4);
    /* 1 left: the oldest has waited its delay -> a batch of 1. */
    assert_int_equal(colo_queue_form_batch(q, &pol, its[4].enqueue_ns + pol.max_queue_delay_ns, out, &wait), 1);
    assert_ptr_equal(out[0], &its[4]);
    colo_queue_destroy(q);
}

static void test_batch_groups_by_length(void **state)
{
    (void)state;
    colo_queue *q = colo_queue_create(64);
    int lens[] = {10, 100, 11, 50, 9, 200};
    colo_queue_item its[6];
    for (int i = 0; i < 6; i++) {
        its[i] = item(COLO_PRIO_NORMAL, lens[i]);
        colo_queue_push(q, &its[i]);
    }
    colo_batch_policy pol = {.max_batch_size = 3, .max_queue_delay_ns = 0};
    colo_queue_item *out[8];
    uint64_t wait;
    assert_int_equal(colo_queue_form_batch(q, &pol, its[5].enqueue_ns, out, &wait), 3);
    assert_ptr_equal(out[0], &its[0]);
    int got[3] = {out[0]->length, out[1]->length, out[2]->length};
    assert_true((got[1] == 11 && got[2] == 9) || (got[1] == 9 && got[2] == 11));
    /* Next batch anchors on the oldest left (100): 50 and 200 are closest. */
    assert_int_equal(colo_queue_form_batch(q, &pol, its[5].enqueue_ns, out, &wait), 3);
    assert_int_equal(out[0]->length, 100);
    colo_queue_destroy(q);
}

static void test_batch_high_priority_first(void **state)
{
    (void)state;
    colo_queue *q = colo_queue_create(64);
    colo_queue_item lo[4], hi = item(COLO_PRIO_HIGH, 500);
    for (int i = 0; i < 4; i++) {
        lo[i] = item(COLO_PRIO_LOW, 500);
        colo_queue_push(q, &lo[i]);
    }
    colo_queue_push(q, &hi);
    colo_batch_policy pol = {.max_batch_size = 2, .max_queue_delay_ns = 0};
    colo_queue_item *out[4];
    uint64_t wait;
    assert_int_equal(colo_queue_form_batch(q, &pol, hi.enqueue_ns, out, &wait), 2);
    assert_ptr_equal(out[0], &hi);
    assert_ptr_equal(out[1], &lo[0]);
    while (colo_queue_pop(q))
        ;
    colo_queue_destroy(q);
}

static void *push_later(void *p)
{
    usleep(20 * 1000);
    colo_queue_push(((void **)p)[0], ((void **)p)[1]);
    return NULL;
}

static void test_wait(void **state)
{
    (void)state;
    colo_queue *q = colo_queue_create(4);
    assert_false(colo_queue_wait(q, 1000000)); /* empty, 1 ms */
    colo_queue_item a = item(COLO_PRIO_NORMAL, 1);
    void *args[2] = {q, &a};
    pthread_t t;
    pthread_create(&t, NULL, push_later, args);
    assert_true(colo_queue_wait(q, 10ull * 1000000000ull));
    pthread_join(t, NULL);
    colo_queue_pop(q);
    colo_queue_wake(q);
    assert_false(colo_queue_wait(q, UINT64_MAX)); /* woken, still empty */
    colo_queue_destroy(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_priority_then_fifo),   cmocka_unit_test(test_bounded_and_closed),
        cmocka_unit_test(test_cancel_removes),       cmocka_unit_test(test_deadlines),
        cmocka_unit_test(test_batch_full_size),      cmocka_unit_test(test_batch_preferred_and_delay),
        cmocka_unit_test(test_batch_groups_by_length), cmocka_unit_test(test_batch_high_priority_first),
        cmocka_unit_test(test_wait),                 cmocka_unit_test(test_token_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
