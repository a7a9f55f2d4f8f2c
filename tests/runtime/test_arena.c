/* Arenas: limits, reuse, coalescing, isolation between arenas. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/arena.h"

static colo_device *dev;

static int setup(void **state)
{
    (void)state;
    char err[256];
    colo_device_config cfg = {.want = "cpu", .cpu_threads = 2, .cpu_memory_bytes = 128ull << 30};
    dev = colo_device_open(&cfg, err, sizeof err);
    return dev ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    colo_device_close(dev);
    return 0;
}

static void test_alloc_free_reuse(void **state)
{
    (void)state;
    char err[256];
    colo_arena *a = colo_arena_create_bytes(dev, "a", 1 << 20, err, sizeof err);
    assert_non_null(a);
    assert_int_equal(colo_arena_limit(a), 1 << 20);
    void *p, *q;
    assert_int_equal(colo_arena_alloc(a, 1000, 0, &p), COLO_OK);
    assert_int_equal((uintptr_t)p % 256, 0);
    memset(p, 0xab, 1000); /* the memory is usable (CPU) */
    assert_int_equal(colo_arena_used(a), 1024);
    assert_int_equal(colo_arena_alloc(a, 4096, 4096, &q), COLO_OK);
    assert_int_equal((uintptr_t)q % 4096, 0);
    colo_arena_free(a, p);
    colo_arena_free(a, q);
    assert_int_equal(colo_arena_used(a), 0);
    assert_true(colo_arena_peak(a) >= 1024 + 4096);
    /* Everything coalesced back: the whole arena is one allocation again. */
    void *all;
    assert_int_equal(colo_arena_alloc(a, 1 << 20, 0, &all), COLO_OK);
    colo_arena_free(a, all);
    colo_arena_reset_peak(a);
    assert_int_equal(colo_arena_peak(a), 0);
    assert_int_equal(colo_arena_alloc(a, 0, 0, &p), COLO_EINVAL);
    assert_int_equal(colo_arena_alloc(a, 16, 3, &p), COLO_EINVAL);
    colo_arena_free(a, NULL);
    colo_arena_destroy(a);
    colo_arena_destroy(NULL);
}

static void test_over_limit_isolated(void **state)
{
    (void)state;
    char err[256];
    colo_arena *a = colo_arena_create(dev, "model-a", 0.25, 8 << 20, err, sizeof err);
    colo_arena *b = colo_arena_create(dev, "model-b", 0.25, 8 << 20, err, sizeof err);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(colo_arena_limit(a), 2 << 20);
    void *p;
    assert_int_equal(colo_arena_alloc(a, 1536 << 10, 0, &p), COLO_OK);
    colo_arena_stats before, after;
    colo_arena_get_stats(a, &before);
    void *q = (void *)1;
    assert_int_equal(colo_arena_alloc(a, 1 << 20, 0, &q), COLO_ENOMEM);
    assert_null(q);
    assert_int_equal(colo_arena_alloc(a, 3 << 20, 0, &q), COLO_ENOMEM);
    colo_arena_get_stats(a, &after);
    assert_memory_equal(&before, &after, sizeof before);
    /* b is untouched and keeps allocating up to its own limit. */
    for (int i = 0; i < 8; i++)
        assert_int_equal(colo_arena_alloc(b, 256 << 10, 0, &q), COLO_OK);
    assert_int_equal(colo_arena_used(b), 2 << 20);
    assert_int_equal(colo_arena_alloc(b, 256, 0, &q), COLO_ENOMEM);
    colo_arena_destroy(a);
    colo_arena_destroy(b);
}

static void test_fragmentation_fails_cleanly(void **state)
{
    (void)state;
    char err[256];
    colo_arena *a = colo_arena_create_bytes(dev, "frag", 64 << 10, err, sizeof err);
    void *p[16];
    for (int i = 0; i < 16; i++)
        assert_int_equal(colo_arena_alloc(a, 4 << 10, 0, &p[i]), COLO_OK);
    for (int i = 0; i < 16; i += 2)
        colo_arena_free(a, p[i]);
    colo_arena_stats st;
    colo_arena_get_stats(a, &st);
    assert_int_equal(st.used_bytes, 32 << 10);
    assert_int_equal(st.largest_free_bytes, 4 << 10);
    void *big;
    assert_int_equal(colo_arena_alloc(a, 8 << 10, 0, &big), COLO_ENOMEM); /* 32 KiB free, in 4 KiB holes */
    colo_arena_free(a, p[1]);                                              /* joins holes 0, 1, 2 */
    assert_int_equal(colo_arena_alloc(a, 12 << 10, 0, &big), COLO_OK);
    colo_arena_destroy(a);
}

static void test_bad_free_is_ignored(void **state)
{
    (void)state;
    char err[256];
    colo_arena *a = colo_arena_create_bytes(dev, "bad", 64 << 10, err, sizeof err);
    void *p;
    assert_int_equal(colo_arena_alloc(a, 1024, 0, &p), COLO_OK);
    int x;
    colo_arena_free(a, &x);                /* not the arena's */
    colo_arena_free(a, (char *)p + 256);   /* inside, but not an allocation */
    assert_int_equal(colo_arena_used(a), 1024);
    colo_arena_free(a, p);
    colo_arena_free(a, p); /* double free: reported, ignored */
    assert_int_equal(colo_arena_used(a), 0);
    colo_arena_destroy(a);
}

static void test_bad_fraction(void **state)
{
    (void)state;
    char err[256];
    assert_null(colo_arena_create(dev, "x", 0, 0, err, sizeof err));
    assert_non_null(strstr(err, "fraction"));
    assert_null(colo_arena_create(dev, "x", 1.5, 0, err, sizeof err));
    /* Past the device's budget. */
    assert_null(colo_arena_create_bytes(dev, "huge", (size_t)1 << 50, err, sizeof err));
    assert_non_null(strstr(err, "huge"));
}

/* 64 arenas of 1 GiB each: address space only, no memory until touched. */
static void test_many_arenas_cost_nothing(void **state)
{
    (void)state;
    char err[256];
    colo_arena *as[64];
    for (int i = 0; i < 64; i++) {
        char name[16];
        snprintf(name, sizeof name, "m%d", i);
        as[i] = colo_arena_create(dev, name, 1.0 / 128, 0, err, sizeof err);
        assert_non_null(as[i]);
        void *p;
        assert_int_equal(colo_arena_alloc(as[i], 512 << 20, 0, &p), COLO_OK);
        ((char *)p)[0] = 1; /* one page touched */
    }
    for (int i = 0; i < 64; i++)
        colo_arena_destroy(as[i]);
}

/* Random alloc/free against a simple model: no overlap, exact accounting. */
static void test_random_against_model(void **state)
{
    (void)state;
    unsigned seed = getenv("COLO_TEST_SEED") ? (unsigned)strtoul(getenv("COLO_TEST_SEED"), NULL, 0) : 4242u;
    printf("seed %u (COLO_TEST_SEED)\n", seed);
    srand(seed);
    char err[256];
    const size_t limit = 4 << 20;
    colo_arena *a = colo_arena_create_bytes(dev, "rand", limit, err, sizeof err);
    enum { N = 256 };
    void *ptr[N] = {0};
    size_t sz[N] = {0};
    size_t used = 0;
    for (int it = 0; it < 20000; it++) {
        int i = rand() % N;
        if (ptr[i]) {
            colo_arena_free(a, ptr[i]);
            used -= sz[i];
            ptr[i] = NULL;
        } else {
            size_t want = 1 + (size_t)rand() % (64 << 10);
            size_t align = (size_t)1 << (8 + rand() % 5);
            colo_status st = colo_arena_alloc(a, want, align, &ptr[i]);
            if (st == COLO_OK) {
                assert_int_equal((uintptr_t)ptr[i] % align, 0);
                sz[i] = (want + 255) & ~(size_t)255;
                used += sz[i];
                memset(ptr[i], i, want);
            } else {
                assert_int_equal(st, COLO_ENOMEM);
                assert_null(ptr[i]);
            }
        }
        assert_true(colo_arena_used(a) >= used); /* plus alignment padding */
        assert_true(colo_arena_used(a) <= limit);
    }
    /* No two live allocations overlap: each still holds its own fill. */
    for (int i = 0; i < N; i++)
        if (ptr[i])
            assert_int_equal(((unsigned char *)ptr[i])[0], (unsigned char)i);
    for (int i = 0; i < N; i++)
        colo_arena_free(a, ptr[i]);
    assert_int_equal(colo_arena_used(a), 0);
    void *all;
    assert_int_equal(colo_arena_alloc(a, limit, 0, &all), COLO_OK);
    colo_arena_destroy(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_free_reuse),         cmocka_unit_test(test_over_limit_isolated),
        cmocka_unit_test(test_fragmentation_fails_cleanly), cmocka_unit_test(test_bad_free_is_ignored),
        cmocka_unit_test(test_bad_fraction),             cmocka_unit_test(test_many_arenas_cost_nothing),
        cmocka_unit_test(test_random_against_model),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
