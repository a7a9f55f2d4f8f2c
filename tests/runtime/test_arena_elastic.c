/* Elastic arenas: guarantees, borrowing up to the ceiling, reclaim requests,
 * and physical memory that follows use (pages given back on decommit). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "runtime/arena.h"
#include "tests/test_seed.h"

#define MiB ((size_t)1 << 20)

static colo_device *dev;

static int setup(void **state)
{
    (void)state;
    char err[256];
    /* A small device budget: elastic ceilings are address space outside it. */
    colo_device_config cfg = {.want = "cpu", .cpu_threads = 2, .cpu_memory_bytes = 16 * MiB};
    dev = colo_device_open(&cfg, err, sizeof err);
    return dev ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    colo_device_close(dev);
    return 0;
}

static colo_arena_stats stats(colo_arena *a)
{
    colo_arena_stats st;
    colo_arena_get_stats(a, &st);
    return st;
}

static void test_guarantee_borrow_reclaim(void **state)
{
    (void)state;
    char err[256];
    colo_mem_pool *pool = colo_mem_pool_create(10 * MiB);
    assert_non_null(pool);
    /* Ceilings add up past the device budget: they are address space only. */
    colo_arena *a = colo_arena_create_elastic(dev, "a", pool, 4 * MiB, 12 * MiB, err, sizeof err);
    colo_arena *b = colo_arena_create_elastic(dev, "b", pool, 4 * MiB, 12 * MiB, err, sizeof err);
    assert_non_null(a);
    assert_non_null(b);
    assert_true(colo_arena_is_elastic(a));
    assert_int_equal(colo_mem_pool_guaranteed(pool), 8 * MiB);
    /* A third guarantee past what is left is refused with the numbers. */
    assert_null(colo_arena_create_elastic(dev, "c", pool, 3 * MiB, 3 * MiB, err, sizeof err));
    assert_non_null(strstr(err, "2097152"));

    void *store = NULL;
    assert_int_equal(colo_arena_reserve(a, 11 * MiB, 0, &store), COLO_OK);
    assert_int_equal(stats(a).used_bytes, 0); /* reserved, not charged */
    assert_int_equal(stats(a).reserved_bytes, 11 * MiB);

    /* A: its guarantee, then the 2 MiB nobody is guaranteed, then B's idle guarantee. */
    assert_int_equal(colo_arena_charge(a, 4 * MiB), COLO_OK);
    assert_int_equal(colo_arena_charge(a, 2 * MiB), COLO_OK);
    assert_int_equal(stats(b).lent_bytes, 0);
    assert_int_equal(colo_arena_charge(a, 2 * MiB), COLO_OK);
    assert_int_equal(stats(a).borrowed_bytes, 4 * MiB);
    assert_int_equal(stats(b).lent_bytes, 2 * MiB);
    assert_int_equal(colo_arena_charge(a, 4 * MiB), COLO_ENOMEM); /* the ceiling */
    assert_int_equal(colo_arena_charge(a, 2 * MiB), COLO_OK);     /* the last of B's idle guarantee */
    assert_int_equal(colo_mem_pool_used(pool), 10 * MiB);
    assert_int_equal(colo_arena_charge(a, MiB), COLO_ENOMEM);     /* the pool is full */

    /* B wants 1 MiB of its guarantee: A is asked for exactly that, once. */
    assert_int_equal(colo_arena_charge(b, MiB), COLO_EAGAIN);
    assert_int_equal(colo_arena_reclaim_wanted_bytes(a), MiB);
    assert_int_equal(colo_arena_reclaim_wanted_bytes(b), 0);
    assert_int_equal(colo_arena_charge(b, MiB), COLO_EAGAIN);
    assert_int_equal(colo_arena_reclaim_wanted_bytes(a), MiB);
    assert_int_equal(stats(a).reclaims, 1);
    /* A gives back; while B waits, A cannot borrow it again. */
    colo_arena_uncharge(a, MiB);
    assert_int_equal(colo_arena_reclaim_wanted_bytes(a), 0);
    assert_int_equal(colo_arena_charge(a, MiB), COLO_ENOMEM);
    assert_int_equal(colo_arena_charge(b, MiB), COLO_OK);
    assert_int_equal(colo_mem_pool_used(pool), 10 * MiB);
    /* B asks for the rest of its guarantee: A must give 3 MiB. */
    assert_int_equal(colo_arena_charge(b, 3 * MiB), COLO_EAGAIN);
    assert_int_equal(colo_arena_reclaim_wanted_bytes(a), 3 * MiB);
    assert_int_equal(stats(a).reclaims, 2);
    colo_arena_uncharge(a, 3 * MiB);
    assert_int_equal(colo_arena_charge(b, 3 * MiB), COLO_OK);
    assert_int_equal(stats(b).used_bytes, 4 * MiB);
    assert_int_equal(stats(a).used_bytes, 6 * MiB); /* 2 MiB borrowed from what nobody is guaranteed */
    assert_int_equal(stats(b).lent_bytes, 0);
    /* Past its guarantee with the pool full, B gets nothing and asks nothing. */
    assert_int_equal(colo_arena_charge(b, MiB), COLO_ENOMEM);
    assert_int_equal(colo_arena_reclaim_wanted_bytes(a), 0);

    colo_arena_uncharge(a, 6 * MiB);
    colo_arena_uncharge(b, 4 * MiB);
    colo_arena_free(a, store);
    assert_int_equal(stats(a).reserved_bytes, 0);
    /* Ordinary allocations are charged as they are made. */
    void *p = NULL;
    assert_int_equal(colo_arena_alloc(a, 9 * MiB, 0, &p), COLO_OK);
    assert_int_equal(colo_mem_pool_used(pool), 9 * MiB);
    void *q = NULL;
    assert_int_equal(colo_arena_alloc(b, 2 * MiB, 0, &q), COLO_ENOMEM); /* not granted: nothing taken */
    assert_null(q);
    assert_int_equal(stats(b).used_bytes, 0);
    colo_arena_free(a, p);
    assert_int_equal(colo_mem_pool_used(pool), 0);
    colo_arena_destroy(a);
    colo_arena_destroy(b);
    assert_int_equal(colo_mem_pool_guaranteed(pool), 0);
    colo_mem_pool_destroy(pool);
}

/* Pages of [p, p + bytes) that are resident now. */
static size_t resident_pages(void *p, size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = (bytes + page - 1) / page, count = 0;
    unsigned char *vec = malloc(n);
    assert_non_null(vec);
    assert_int_equal(mincore(p, bytes, vec), 0);
    for (size_t i = 0; i < n; i++)
        count += vec[i] & 1;
    free(vec);
    return count;
}

static void test_physical_memory_follows_use(void **state)
{
    (void)state;
    char err[256];
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    colo_mem_pool *pool = colo_mem_pool_create(64 * MiB);
    colo_arena *a = colo_arena_create_elastic(dev, "rss", pool, 32 * MiB, 64 * MiB, err, sizeof err);
    assert_non_null(a);
    size_t bytes = 32 * MiB;
    char *p = NULL;
    assert_int_equal(colo_arena_reserve(a, bytes, page, (void **)&p), COLO_OK);
    assert_true(resident_pages(p, bytes) < 16); /* reserved: nothing backed yet */
    assert_int_equal(colo_arena_charge(a, bytes), COLO_OK);
    /* Three users of adjacent ranges whose ends are not on page boundaries,
     * as KV blocks are: [0, lo), [lo, hi), [hi, bytes). */
    size_t lo = 3 * MiB + 100, hi = 19 * MiB + 7;
    assert_int_equal(colo_arena_commit(a, p, lo), COLO_OK);
    assert_int_equal(colo_arena_commit(a, p + lo, hi - lo), COLO_OK);
    assert_int_equal(colo_arena_commit(a, p + hi, bytes - hi), COLO_OK);
    unsigned seed = (unsigned)colo_test_seed("test_arena_elastic", 159);
    for (size_t i = 0; i < bytes; i += page / 2)
        p[i] = (char)(1 + rand_r(&seed) % 100);
    assert_int_equal(resident_pages(p, bytes), bytes / page);
    /* The middle user leaves: the pages only it used go, the two pages it
     * shares with its neighbours stay, with their bytes. */
    char before_lo = p[lo - 1], before_hi = p[hi];
    colo_arena_decommit(a, p + lo, hi - lo);
    size_t gone = ((hi & ~(page - 1)) - ((lo + page - 1) & ~(page - 1))) / page;
    assert_int_equal(resident_pages(p, bytes), bytes / page - gone);
    assert_int_equal(p[lo - 1], before_lo);
    assert_int_equal(p[hi], before_hi);
    assert_int_equal(p[8 * MiB], 0); /* given back: it reads as zero and is backed again on touch */
    /* The other two leave: nothing stays resident. */
    colo_arena_decommit(a, p, lo);
    colo_arena_decommit(a, p + hi, bytes - hi);
    assert_true(resident_pages(p, bytes) <= 1); /* (the zero page read above may still be mapped) */
    colo_arena_uncharge(a, bytes);
    colo_arena_free(a, p);

    /* Ordinary allocations: backed while allocated, given back when freed. */
    char *w = NULL;
    assert_int_equal(colo_arena_alloc(a, 8 * MiB, page, (void **)&w), COLO_OK);
    memset(w, 7, 8 * MiB);
    assert_int_equal(resident_pages(w, 8 * MiB), 8 * MiB / page);
    colo_arena_free(a, w);
    assert_int_equal(resident_pages(w, 8 * MiB), 0);
    colo_arena_destroy(a);
    colo_mem_pool_destroy(pool);
}

/* Charges from several threads never take the pool past its budget and
 * add up to zero at the end. */
typedef struct {
    colo_arena *a;
    colo_mem_pool *pool;
    unsigned seed;
    bool over;
} worker;

static void *charge_loop(void *arg)
{
    worker *w = arg;
    size_t held = 0;
    for (int i = 0; i < 20000; i++) {
        size_t n = (size_t)(1 + rand_r(&w->seed) % 64) << 12;
        if (rand_r(&w->seed) % 2 && colo_arena_charge(w->a, n) == COLO_OK) {
            held += n;
        } else if (held) {
            size_t back = held < n ? held : n;
            colo_arena_uncharge(w->a, back);
            held -= back;
        }
        if (colo_mem_pool_used(w->pool) > colo_mem_pool_budget(w->pool))
            w->over = true;
    }
    colo_arena_uncharge(w->a, held);
    return NULL;
}

/* Host memory held for members: the first allowance bytes over all of
 * them are the overhead's and cost the budget nothing; past them it is
 * guaranteed and charged, refused when no unguaranteed room is left, and
 * given back in the same order. */
static void test_host_memory_held(void **state)
{
    (void)state;
    char err[256];
    colo_mem_pool *pool = colo_mem_pool_create(10 * MiB);
    assert_non_null(pool);
    assert_int_equal(colo_mem_pool_hold_cost(pool, 64 * MiB), 0); /* no allowance set: nothing counts */
    colo_mem_pool_set_host_allowance(pool, 2 * MiB);
    assert_int_equal(colo_mem_pool_hold_cost(pool, 1 * MiB), 0);
    assert_int_equal(colo_mem_pool_hold(pool, 1 * MiB), COLO_OK);
    assert_int_equal(colo_mem_pool_used(pool), 0);
    assert_int_equal(colo_mem_pool_hold_cost(pool, 3 * MiB), 2 * MiB);
    assert_int_equal(colo_mem_pool_hold(pool, 3 * MiB), COLO_OK); /* 4 held, 2 of them in the budget */
    size_t in_budget = 0;
    assert_int_equal(colo_mem_pool_held(pool, &in_budget), 4 * MiB);
    assert_int_equal(in_budget, 2 * MiB);
    assert_int_equal(colo_mem_pool_used(pool), 2 * MiB);
    assert_int_equal(colo_mem_pool_guaranteed(pool), 2 * MiB);
    /* a guarantee sees only what the held memory left */
    assert_null(colo_arena_create_elastic(dev, "big", pool, 9 * MiB, 9 * MiB, err, sizeof err));
    colo_arena *a = colo_arena_create_elastic(dev, "a", pool, 7 * MiB, 7 * MiB, err, sizeof err);
    assert_non_null(a);
    /* 1 MiB unguaranteed: a hold of 2 more is refused and changes nothing */
    assert_int_equal(colo_mem_pool_hold(pool, 2 * MiB), COLO_ENOMEM);
    assert_int_equal(colo_mem_pool_held(pool, NULL), 4 * MiB);
    assert_int_equal(colo_mem_pool_hold(pool, 1 * MiB), COLO_OK);
    assert_int_equal(colo_mem_pool_unguaranteed(pool), 0);
    /* a charge within its guarantee still fits the budget */
    void *p = NULL;
    assert_int_equal(colo_arena_alloc(a, 7 * MiB, 0, &p), COLO_OK);
    assert_int_equal(colo_mem_pool_used(pool), 10 * MiB);
    colo_arena_free(a, p);
    colo_mem_pool_unhold(pool, 1 * MiB);
    colo_mem_pool_unhold(pool, 3 * MiB);
    assert_int_equal(colo_mem_pool_used(pool), 0); /* 1 MiB held, within the allowance */
    colo_mem_pool_unhold(pool, 1 * MiB);
    assert_int_equal(colo_mem_pool_held(pool, NULL), 0);
    assert_int_equal(colo_mem_pool_guaranteed(pool), 7 * MiB);
    colo_arena_destroy(a);
    colo_mem_pool_destroy(pool);
}

static void test_threads_share_a_pool(void **state)
{
    (void)state;
    char err[256];
    colo_mem_pool *pool = colo_mem_pool_create(4 * MiB);
    worker w[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        char name[8];
        snprintf(name, sizeof name, "t%d", i);
        w[i] = (worker){colo_arena_create_elastic(dev, name, pool, MiB, 4 * MiB, err, sizeof err), pool,
                        230u + (unsigned)i, false};
        assert_non_null(w[i].a);
    }
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, charge_loop, &w[i]), 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_false(w[i].over);
    }
    assert_int_equal(colo_mem_pool_used(pool), 0);
    for (int i = 0; i < 4; i++)
        colo_arena_destroy(w[i].a);
    colo_mem_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_guarantee_borrow_reclaim),
        cmocka_unit_test(test_physical_memory_follows_use),
        cmocka_unit_test(test_host_memory_held),
        cmocka_unit_test(test_threads_share_a_pool),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
