/* Arenas: limits, reuse, coalescing, isolation between arenas. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static size_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%lu %lu", &size, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* 64 arenas of 1 GiB each: address space only, no memory until touched. */
static void test_many_arenas_cost_nothing(void **state)
{
    (void)state;
    char err[256];
    colo_arena *as[64];
    size_t rss0 = rss_bytes();
    assert_true(rss0 > 0);
    for (int i = 0; i < 64; i++) {
        char name[16];
        snprintf(name, sizeof name, "m%d", i);
        as[i] = colo_arena_create(dev, name, 1.0 / 128, 0, err, sizeof err);
        assert_non_null(as[i]);
        void *p;
        assert_int_equal(colo_arena_alloc(as[i], 512 << 20, 0, &p), COLO_OK);
        ((char *)p)[0] = 1; /* one page touched */
    }
    colo_device_info info;
    assert_int_equal(colo_device_get_info(dev, &info), COLO_OK);
    assert_int_equal(info.total_bytes - info.free_bytes, 64ull << 30); /* all 64 GiB held */
    /* Resident memory grew by the 64 touched pages and bookkeeping, not 32 GiB. */
    assert_true(rss_bytes() < rss0 + (32 << 20));
    for (int i = 0; i < 64; i++)
        colo_arena_destroy(as[i]);
}

static unsigned test_seed(void)
{
    const char *env = getenv("COLO_TEST_SEED");
    unsigned seed = env ? (unsigned)strtoul(env, NULL, 0) : 4242u;
    printf("seed %u (COLO_TEST_SEED)\n", seed);
    return seed;
}

/* The model: live allocations as [off, off + size) intervals of the arena. */
typedef struct {
    size_t off, size;
} ivl;

static int ivl_cmp(const void *x, const void *y)
{
    const ivl *a = x, *b = y;
    return a->off < b->off ? -1 : a->off > b->off;
}

/* Largest gap between live intervals (sorted copies), 0 if none. */
static size_t model_largest_gap(const ivl *live, int n, size_t limit)
{
    ivl tmp[512];
    memcpy(tmp, live, (size_t)n * sizeof *tmp);
    qsort(tmp, (size_t)n, sizeof *tmp, ivl_cmp);
    size_t at = 0, best = 0;
    for (int i = 0; i < n; i++) {
        assert_true(tmp[i].off >= at); /* no two live allocations overlap */
        if (tmp[i].off - at > best)
            best = tmp[i].off - at;
        at = tmp[i].off + tmp[i].size;
    }
    assert_true(at <= limit);
    return limit - at > best ? limit - at : best;
}

/* Random alloc/free with 256-byte alignment, where the model is exact: an
 * allocation succeeds exactly when some gap fits it, and every statistic
 * (used, peak, live count, largest free) equals the model's. */
static void test_random_against_model(void **state)
{
    (void)state;
    srand(test_seed());
    char err[256];
    const size_t limit = 2 << 20;
    colo_arena *a = colo_arena_create_bytes(dev, "rand", limit, err, sizeof err);
    assert_non_null(a);
    char *base = NULL;
    assert_int_equal(colo_arena_alloc(a, 256, 0, (void **)&base), COLO_OK); /* the first fit is offset 0 */
    colo_arena_free(a, base);
    enum { N = 256 };
    void *ptr[N] = {0};
    ivl live[N];
    int slot_of[N]; /* live index of each slot */
    int n_live = 0;
    size_t used = 0, peak = 0;
    int n_fail = 0;
    for (int it = 0; it < 20000; it++) {
        int i = rand() % N;
        if (ptr[i]) {
            colo_arena_free(a, ptr[i]);
            used -= live[slot_of[i]].size;
            live[slot_of[i]] = live[--n_live];
            for (int j = 0; j < N; j++)
                if (ptr[j] && slot_of[j] == n_live)
                    slot_of[j] = slot_of[i];
            ptr[i] = NULL;
        } else {
            size_t want = 1 + (size_t)rand() % (48 << 10);
            size_t rounded = (want + 255) & ~(size_t)255;
            bool fits = model_largest_gap(live, n_live, limit) >= rounded;
            colo_status st = colo_arena_alloc(a, want, 0, &ptr[i]);
            if (fits) {
                assert_int_equal(st, COLO_OK);
                size_t off = (size_t)((char *)ptr[i] - base);
                assert_int_equal(off % 256, 0);
                live[n_live] = (ivl){off, rounded};
                slot_of[i] = n_live++;
                used += rounded;
                if (used > peak)
                    peak = used;
                memset(ptr[i], i, want);
            } else {
                assert_int_equal(st, COLO_ENOMEM);
                assert_null(ptr[i]);
                n_fail++;
            }
        }
        colo_arena_stats st;
        colo_arena_get_stats(a, &st);
        assert_int_equal(st.used_bytes, used);
        assert_int_equal(st.peak_bytes, peak);
        assert_int_equal(st.n_allocs, (size_t)n_live);
        assert_int_equal(st.largest_free_bytes, model_largest_gap(live, n_live, limit));
    }
    assert_true(n_fail > 0); /* the sequence did reach the limit */
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

/* Mixed alignments: every pointer aligned, no allocation overwrites another
 * (each keeps its whole fill), and everything coalesces back at the end. */
static void test_random_alignments(void **state)
{
    (void)state;
    srand(test_seed() + 1);
    char err[256];
    const size_t limit = 4 << 20;
    colo_arena *a = colo_arena_create_bytes(dev, "align", limit, err, sizeof err);
    assert_non_null(a);
    enum { N = 128 };
    unsigned char *ptr[N] = {0};
    size_t sz[N] = {0};
    for (int it = 0; it < 5000; it++) {
        int i = rand() % N;
        if (ptr[i]) {
            for (size_t k = 0; k < sz[i]; k += 97)
                assert_int_equal(ptr[i][k], (unsigned char)i);
            colo_arena_free(a, ptr[i]);
            ptr[i] = NULL;
        } else {
            size_t want = 1 + (size_t)rand() % (32 << 10);
            size_t align = (size_t)1 << (rand() % 14); /* 1 B .. 8 KiB */
            colo_status st = colo_arena_alloc(a, want, align, (void **)&ptr[i]);
            if (st != COLO_OK) {
                assert_int_equal(st, COLO_ENOMEM);
                continue;
            }
            assert_int_equal((uintptr_t)ptr[i] % align, 0);
            assert_int_equal((uintptr_t)ptr[i] % 256, 0); /* never less than 256 */
            sz[i] = want;
            memset(ptr[i], i, want);
        }
    }
    for (int i = 0; i < N; i++) {
        for (size_t k = 0; ptr[i] && k < sz[i]; k++)
            assert_int_equal(ptr[i][k], (unsigned char)i);
        colo_arena_free(a, ptr[i]);
    }
    colo_arena_stats st;
    colo_arena_get_stats(a, &st);
    assert_int_equal(st.used_bytes, 0);
    assert_int_equal(st.n_allocs, 0);
    assert_int_equal(st.largest_free_bytes, limit);
    colo_arena_destroy(a);
}

typedef struct {
    colo_arena *a;
    unsigned seed;
    int id;
    int n_ok;
} worker_arg;

static void *arena_worker(void *p)
{
    worker_arg *w = p;
    unsigned char *held[8] = {0};
    size_t held_sz[8] = {0};
    for (int it = 0; it < 4000; it++) {
        int k = (int)(rand_r(&w->seed) % 8);
        if (held[k]) {
            for (size_t j = 0; j < held_sz[k]; j++)
                if (held[k][j] != (unsigned char)w->id)
                    return (void *)1; /* another thread wrote into this block */
            colo_arena_free(w->a, held[k]);
            held[k] = NULL;
        } else {
            size_t want = 1 + rand_r(&w->seed) % 8192;
            if (colo_arena_alloc(w->a, want, 0, (void **)&held[k]) == COLO_OK) {
                memset(held[k], w->id, want);
                held_sz[k] = want;
                w->n_ok++;
            }
        }
    }
    for (int k = 0; k < 8; k++)
        colo_arena_free(w->a, held[k]);
    return NULL;
}

/* Threads allocating and freeing in one arena never get overlapping blocks,
 * and the accounting comes back to zero. */
static void test_threads_share_an_arena(void **state)
{
    (void)state;
    char err[256];
    colo_arena *a = colo_arena_create_bytes(dev, "shared", 256 << 10, err, sizeof err);
    assert_non_null(a);
    unsigned seed = test_seed();
    pthread_t th[4];
    worker_arg w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker_arg){a, seed + (unsigned)i, i + 1, 0};
        assert_int_equal(pthread_create(&th[i], NULL, arena_worker, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        void *rc;
        pthread_join(th[i], &rc);
        assert_null(rc);
        assert_true(w[i].n_ok > 0);
    }
    colo_arena_stats st;
    colo_arena_get_stats(a, &st);
    assert_int_equal(st.used_bytes, 0);
    assert_int_equal(st.n_allocs, 0);
    assert_int_equal(st.largest_free_bytes, 256 << 10);
    assert_true(st.peak_bytes > 0 && st.peak_bytes <= 256 << 10);
    colo_arena_destroy(a);
}

/* A long run of alloc/free (a server's steady state) over offsets all across
 * the arena keeps the allocator's host memory bounded by what is live. */
static void test_churn_keeps_host_memory_bounded(void **state)
{
    (void)state;
    char err[256];
    const size_t limit = 16 << 20;
    colo_arena *a = colo_arena_create_bytes(dev, "churn", limit, err, sizeof err);
    assert_non_null(a);
    unsigned seed = test_seed();
    enum { LIVE = 8 };
    void *held[LIVE] = {0};
    struct mallinfo2 before = mallinfo2();
    for (int it = 0; it < 200000; it++) {
        int k = it % LIVE;
        colo_arena_free(a, held[k]);
        size_t want = 256 * (1 + rand_r(&seed) % 256); /* up to 64 KiB: offsets wander */
        assert_int_equal(colo_arena_alloc(a, want, 0, &held[k]), COLO_OK);
    }
    struct mallinfo2 after = mallinfo2();
    /* 200,000 allocations at thousands of distinct offsets; at most 8 live,
     * so host metadata stays a few KiB. */
    assert_true(after.uordblks < before.uordblks + (64 << 10));
    for (int k = 0; k < LIVE; k++)
        colo_arena_free(a, held[k]);
    void *p = (void *)1;
    assert_int_equal(colo_arena_alloc(a, 16, 0, NULL), COLO_EINVAL);
    assert_int_equal(colo_arena_alloc(a, limit + 1, 0, &p), COLO_ENOMEM);
    assert_null(p);
    assert_int_equal(colo_arena_alloc(a, limit, 0, &p), COLO_OK);
    colo_arena_destroy(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_free_reuse),         cmocka_unit_test(test_over_limit_isolated),
        cmocka_unit_test(test_fragmentation_fails_cleanly), cmocka_unit_test(test_bad_free_is_ignored),
        cmocka_unit_test(test_bad_fraction),             cmocka_unit_test(test_many_arenas_cost_nothing),
        cmocka_unit_test(test_random_against_model),    cmocka_unit_test(test_random_alignments),
        cmocka_unit_test(test_threads_share_an_arena),  cmocka_unit_test(test_churn_keeps_host_memory_bounded),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
