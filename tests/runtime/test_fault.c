/* Fault injection (runtime/fault.h): the configuration's grammar, skip and
 * count, and that each kind hits only its target: the named arena, the
 * stream labelled with the model's name, matrix ops for "blas", and the
 * whole device for "poison". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "runtime/arena.h"
#include "runtime/fault.h"

static colo_device *open_cpu(void)
{
    char err[256];
    colo_device_config cfg = {.want = "cpu", .cpu_threads = 2, .cpu_memory_bytes = 1ull << 30};
    colo_device *dev = colo_device_open(&cfg, err, sizeof err);
    assert_non_null(dev);
    return dev;
}

static colo_stream *labelled_stream(colo_device *dev, const char *label)
{
    char err[256];
    colo_stream *s = colo_stream_create(dev, NULL, err, sizeof err);
    assert_non_null(s);
    colo_stream_set_label(s, label);
    return s;
}

static void test_grammar(void **state)
{
    (void)state;
    char err[256];
    assert_int_equal(colo_fault_configure("", err, sizeof err), COLO_OK);
    assert_int_equal(colo_fault_configure(NULL, err, sizeof err), COLO_OK);
    assert_int_equal(colo_fault_configure("blas@m:skip=3:count=2,arena@n,poison@x:count=0", err, sizeof err),
                     COLO_OK);
    assert_int_equal(colo_fault_configure("gone@ad,stall@m", err, sizeof err), COLO_OK);
    assert_true(colo_fault_hit(COLO_FAULT_GONE, "ad"));
    assert_false(colo_fault_hit(COLO_FAULT_GONE, "ad")); /* count 1 */
    static const struct {
        const char *spec, *want;
    } bad[] = {
        {"boom@m", "boom@m"},
        {"boom@m", "arena, alloc, launch, blas, poison, stall, kill, gone"}, /* the kinds, from the table */
        {"blas", "KIND@TARGET"},
        {"blas@", "target"},
        {"blas@m:skip=x", "skip=x"},
        {"blas@m:often=2", "often=2"},
        {"blas@m,", "KIND@TARGET"},
        {"launch@m:count=-1", "count=-1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        assert_int_equal(colo_fault_configure(bad[i].spec, err, sizeof err), COLO_EINVAL);
        if (!strstr(err, bad[i].want))
            fail_msg("spec '%s': message '%s' does not name '%s'", bad[i].spec, err, bad[i].want);
    }
    /* A bad spec leaves faults off. */
    assert_false(colo_fault_hit(COLO_FAULT_BLAS, "m"));
    assert_int_equal(colo_fault_configure(NULL, err, sizeof err), COLO_OK);
}

static void test_skip_and_count(void **state)
{
    (void)state;
    char err[256];
    assert_int_equal(colo_fault_configure("launch@m:skip=2:count=3,alloc@k:count=0", err, sizeof err), COLO_OK);
    bool want[] = {false, false, true, true, true, false, false};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        assert_int_equal(colo_fault_hit(COLO_FAULT_LAUNCH, "m"), want[i]);
        assert_false(colo_fault_hit(COLO_FAULT_BLAS, "m")); /* another kind */
        assert_false(colo_fault_hit(COLO_FAULT_LAUNCH, "mm")); /* another target */
        assert_false(colo_fault_hit(COLO_FAULT_LAUNCH, NULL));
    }
    for (int i = 0; i < 5; i++)
        assert_true(colo_fault_hit(COLO_FAULT_ALLOC, "k")); /* count=0: always */
    assert_int_equal(colo_fault_fired(COLO_FAULT_LAUNCH), 3);
    assert_int_equal(colo_fault_fired(COLO_FAULT_ALLOC), 5);
    assert_int_equal(colo_fault_configure(NULL, err, sizeof err), COLO_OK);
    assert_false(colo_fault_hit(COLO_FAULT_ALLOC, "k"));
    assert_int_equal(colo_fault_fired(COLO_FAULT_ALLOC), 0);
}

static void test_arena_fault_hits_one_arena(void **state)
{
    (void)state;
    char err[256];
    colo_device *dev = open_cpu();
    colo_arena *a = colo_arena_create_bytes(dev, "victim", 1 << 20, err, sizeof err);
    colo_arena *b = colo_arena_create_bytes(dev, "bystander", 1 << 20, err, sizeof err);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(colo_fault_configure("arena@victim:skip=1", err, sizeof err), COLO_OK);
    void *p, *q, *r;
    assert_int_equal(colo_arena_alloc(a, 1000, 0, &p), COLO_OK); /* skipped */
    assert_int_equal(colo_arena_alloc(a, 1000, 0, &q), COLO_ENOMEM);
    assert_null(q);
    assert_int_equal(colo_arena_alloc(b, 1000, 0, &r), COLO_OK);
    assert_int_equal(colo_arena_alloc(a, 1000, 0, &q), COLO_OK); /* count 1: over */
    assert_int_equal(colo_arena_used(a), 2048);
    colo_arena_free(a, p);
    colo_arena_free(a, q);
    colo_arena_free(b, r);
    assert_int_equal(colo_fault_configure(NULL, err, sizeof err), COLO_OK);
    colo_arena_destroy(a);
    colo_arena_destroy(b);
    colo_device_close(dev);
}

static void test_op_faults_hit_one_stream(void **state)
{
    (void)state;
    char err[256];
    colo_device *dev = open_cpu();
    colo_stream *s = labelled_stream(dev, "victim"), *o = labelled_stream(dev, "bystander");
    colo_stream *u = labelled_stream(dev, NULL); /* unlabelled: never hit */
    float x[64], y[64], w[64 * 64];
    for (int i = 0; i < 64; i++)
        x[i] = (float)i;
    memset(w, 0, sizeof w);
    assert_int_equal(colo_fault_configure("launch@victim,blas@victim:count=2,launch@bystander:skip=100", err,
                                          sizeof err),
                     COLO_OK);
    assert_int_equal(colo_op_add(s, x, x, y, 64), COLO_EDEVICE);           /* launch */
    assert_int_equal(colo_op_add(s, x, x, y, 64), COLO_OK);                /* not a matrix op: no blas fault */
    assert_int_equal(colo_op_linear(o, w, COLO_F32, NULL, x, 0, y, 0, 1, 64, 64), COLO_OK);
    assert_int_equal(colo_op_linear(u, w, COLO_F32, NULL, x, 0, y, 0, 1, 64, 64), COLO_OK);
    assert_int_equal(colo_op_linear(s, w, COLO_F32, NULL, x, 0, y, 0, 1, 64, 64), COLO_EDEVICE); /* blas */
    assert_int_equal(colo_op_linear(s, w, COLO_F32, NULL, x, 0, y, 0, 1, 64, 64), COLO_EDEVICE);
    assert_int_equal(colo_op_linear(s, w, COLO_F32, NULL, x, 0, y, 0, 1, 64, 64), COLO_OK);
    assert_int_equal(colo_stream_sync(s), COLO_OK);
    assert_int_equal(colo_stream_sync(o), COLO_OK);
    assert_false(colo_device_poisoned(dev));
    assert_int_equal(colo_fault_configure(NULL, err, sizeof err), COLO_OK);
    colo_stream_destroy(s);
    colo_stream_destroy(o);
    colo_stream_destroy(u);
    colo_device_close(dev);
}

/* poison on one stream fails every later op on every stream of the device,
 * and leaves another device alone. */
static void test_poison_takes_the_device(void **state)
{
    (void)state;
    char err[256];
    colo_device *dev = open_cpu(), *other = open_cpu();
    colo_stream *s = labelled_stream(dev, "victim"), *o = labelled_stream(dev, "bystander");
    colo_stream *t = labelled_stream(other, "victim2");
    float x[16], y[16];
    memset(x, 0, sizeof x);
    assert_int_equal(colo_fault_configure("poison@victim:skip=1", err, sizeof err), COLO_OK);
    assert_int_equal(colo_op_add(s, x, x, y, 16), COLO_OK);
    assert_false(colo_device_poisoned(dev));
    assert_int_equal(colo_op_add(s, x, x, y, 16), COLO_EFATAL);
    assert_true(colo_device_poisoned(dev));
    assert_int_equal(colo_op_add(o, x, x, y, 16), COLO_EFATAL);
    assert_int_equal(colo_op_add(s, x, x, y, 16), COLO_EFATAL);
    assert_false(colo_device_poisoned(other));
    assert_int_equal(colo_op_add(t, x, x, y, 16), COLO_OK);
    assert_int_equal(colo_fault_configure(NULL, err, sizeof err), COLO_OK);
    colo_stream_destroy(s);
    colo_stream_destroy(o);
    colo_stream_destroy(t);
    colo_device_close(dev);
    colo_device_close(other);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grammar),
        cmocka_unit_test(test_skip_and_count),
        cmocka_unit_test(test_arena_fault_hits_one_arena),
        cmocka_unit_test(test_op_faults_hit_one_stream),
        cmocka_unit_test(test_poison_takes_the_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
