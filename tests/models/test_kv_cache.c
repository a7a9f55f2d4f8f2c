/* The paged KV cache: storage sizes from the arena, the block allocator
 * (all or nothing, exhaustion is a status, every id held once),
 * per-sequence block tables (growth, context limit, release), and shared
 * blocks with the prefix cache (references, hash-chained lookup, LRU
 * eviction of cached blocks, which count as free and are charged to the
 * elastic arena while cached). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/cache/kv_cache.h"
#include "models/cache/prefix_cache.h"

static colo_device *dev;
static unsigned seed;

static int setup(void **state)
{
    (void)state;
    const char *e = getenv("COLO_TEST_SEED");
    seed = e ? (unsigned)strtoul(e, NULL, 10) : 12345u;
    printf("COLO_TEST_SEED=%u\n", seed);
    char err[256];
    colo_device_config dc = {.want = "cpu", .cpu_threads = 1};
    dev = colo_device_open(&dc, err, sizeof err);
    return dev ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    colo_device_close(dev);
    return 0;
}

static colo_kv_cache_config small_cfg(void)
{
    return (colo_kv_cache_config){.n_layer = 3, .kv_dim = 8, .block_size = 4, .n_blocks = 10, .dtype = COLO_F16};
}

static void test_storage(void **state)
{
    (void)state;
    char err[256];
    colo_arena *a = colo_arena_create_bytes(dev, "kv", 1 << 20, err, sizeof err);
    assert_non_null(a);
    colo_kv_cache_config cfg = small_cfg();
    assert_int_equal(colo_kv_cache_block_bytes(&cfg), 2 * 3 * 4 * 8 * 2);
    assert_int_equal(colo_kv_cache_token_bytes(3, 8, COLO_F32), 2 * 3 * 8 * 4);
    colo_kv_cache *c = colo_kv_cache_create(a, &cfg, err, sizeof err);
    assert_non_null(c);
    assert_int_equal(colo_kv_cache_bytes(c), 10 * colo_kv_cache_block_bytes(&cfg));
    assert_true(colo_arena_used(a) >= colo_kv_cache_bytes(c));
    /* K and V of every layer are distinct arrays of the full size. */
    size_t arr = (size_t)10 * 4 * 8 * 2;
    for (int l = 0; l < 3; l++) {
        char *k = colo_kv_cache_k(c, l), *v = colo_kv_cache_v(c, l);
        for (int j = 0; j < 3; j++) {
            char *k2 = colo_kv_cache_k(c, j), *v2 = colo_kv_cache_v(c, j);
            assert_true(k + arr <= v2 || v2 + arr <= k);
            if (j != l)
                assert_true(k + arr <= k2 || k2 + arr <= k);
        }
        memset(k, 1, arr); /* writable */
        memset(v, 2, arr);
    }
    colo_kv_cache_destroy(c);
    assert_int_equal(colo_arena_used(a), 0);

    /* Default block size. */
    cfg.block_size = 0;
    c = colo_kv_cache_create(a, &cfg, err, sizeof err);
    assert_non_null(c);
    assert_int_equal(colo_kv_cache_block_size(c), COLO_KV_DEFAULT_BLOCK_SIZE);
    colo_kv_cache_destroy(c);

    /* Too big for the arena: NULL, a message with the sizes, nothing left allocated. */
    cfg = small_cfg();
    cfg.n_blocks = 100000;
    err[0] = 0;
    assert_null(colo_kv_cache_create(a, &cfg, err, sizeof err));
    assert_non_null(strstr(err, "bytes"));
    assert_int_equal(colo_arena_used(a), 0);

    /* Invalid configurations. */
    cfg = small_cfg();
    cfg.dtype = COLO_Q4_1;
    assert_null(colo_kv_cache_create(a, &cfg, err, sizeof err));
    cfg = small_cfg();
    cfg.n_blocks = 0;
    assert_null(colo_kv_cache_create(a, &cfg, err, sizeof err));
    assert_int_equal(colo_arena_used(a), 0);
    colo_kv_cache_destroy(NULL);
    colo_arena_destroy(a);
}

static void test_alloc_all_or_nothing(void **state)
{
    (void)state;
    char err[256];
    colo_arena *a = colo_arena_create_bytes(dev, "kv", 1 << 20, err, sizeof err);
    colo_kv_cache_config cfg = small_cfg();
    colo_kv_cache *c = colo_kv_cache_create(a, &cfg, err, sizeof err);
    assert_non_null(c);
    int32_t x[10], y[10], z[10];
    assert_int_equal(colo_kv_cache_n_free(c), 10);
    assert_int_equal(colo_kv_cache_alloc(c, 4, x), COLO_OK);
    assert_int_equal(colo_kv_cache_n_free(c), 6);
    assert_int_equal(colo_kv_cache_n_used(c), 4);
    for (int i = 0; i < 7; i++)
        y[i] = -7;
    assert_int_equal(colo_kv_cache_alloc(c, 7, y), COLO_ENOMEM); /* nothing taken */
    assert_int_equal(colo_kv_cache_n_free(c), 6);
    assert_int_equal(y[0], -7);
    assert_int_equal(colo_kv_cache_alloc(c, -1, y), COLO_EINVAL);
    assert_int_equal(colo_kv_cache_alloc(c, 0, y), COLO_OK);
    assert_int_equal(colo_kv_cache_alloc(c, 6, y), COLO_OK);
    assert_int_equal(colo_kv_cache_n_free(c), 0);
    assert_int_equal(colo_kv_cache_alloc(c, 1, z), COLO_ENOMEM); /* exhausted: a status */
    /* The ten ids are 0..9, each once. */
    int seen[10] = {0};
    for (int i = 0; i < 4; i++)
        seen[x[i]]++;
    for (int i = 0; i < 6; i++)
        seen[y[i]]++;
    for (int i = 0; i < 10; i++)
        assert_int_equal(seen[i], 1);
    colo_kv_cache_release(c, x, 4);
    assert_int_equal(colo_kv_cache_n_free(c), 4);
    assert_int_equal(colo_kv_cache_alloc(c, 4, z), COLO_OK);
    for (int i = 0; i < 4; i++) { /* the released ids come back, no others */
        bool found = false;
        for (int j = 0; j < 4; j++)
            found |= z[i] == x[j];
        assert_true(found);
    }
    colo_kv_cache_release(c, z, 4);
    colo_kv_cache_release(c, y, 6);
    assert_int_equal(colo_kv_cache_n_free(c), 10);
    colo_kv_cache_destroy(c);
    colo_arena_destroy(a);
}

/* Random allocations and releases against a model of who holds what. */
static void test_alloc_random(void **state)
{
    (void)state;
    char err[256];
    colo_arena *a = colo_arena_create_bytes(dev, "kv", 4 << 20, err, sizeof err);
    colo_kv_cache_config cfg = small_cfg();
    cfg.n_blocks = 64;
    colo_kv_cache *c = colo_kv_cache_create(a, &cfg, err, sizeof err);
    assert_non_null(c);
    int32_t held[8][64];
    int n_held[8] = {0};
    int owner[64];
    for (int i = 0; i < 64; i++)
        owner[i] = -1;
    srand(seed);
    for (int it = 0; it < 5000; it++) {
        int s = rand() % 8;
        if (rand() % 3 == 0 && n_held[s]) {
            for (int i = 0; i < n_held[s]; i++)
                owner[held[s][i]] = -1;
            colo_kv_cache_release(c, held[s], n_held[s]);
            n_held[s] = 0;
        } else {
            int n = rand() % 9, before = colo_kv_cache_n_free(c);
            int32_t ids[8];
            colo_status st = colo_kv_cache_alloc(c, n, ids);
            if (n > before) {
                assert_int_equal(st, COLO_ENOMEM);
                assert_int_equal(colo_kv_cache_n_free(c), before);
                continue;
            }
            assert_int_equal(st, COLO_OK);
            if (n_held[s] + n > 64) {
                colo_kv_cache_release(c, ids, n);
                continue;
            }
            for (int i = 0; i < n; i++) {
                assert_true(ids[i] >= 0 && ids[i] < 64);
                assert_int_equal(owner[ids[i]], -1);
                owner[ids[i]] = s;
                held[s][n_held[s]++] = ids[i];
            }
        }
        int used = 0;
        for (int i = 0; i < 64; i++)
            used += owner[i] >= 0;
        assert_int_equal(colo_kv_cache_n_used(c), used);
    }
    for (int s = 0; s < 8; s++)
        colo_kv_cache_release(c, held[s], n_held[s]);
    assert_int_equal(colo_kv_cache_n_free(c), 64);
    colo_kv_cache_destroy(c);
    colo_arena_destroy(a);
}

static void test_tables(void **state)
{
    (void)state;
    char err[256];
    colo_arena *a = colo_arena_create_bytes(dev, "kv", 1 << 20, err, sizeof err);
    colo_kv_cache_config cfg = small_cfg(); /* 10 blocks of 4 tokens */
    colo_kv_cache *c = colo_kv_cache_create(a, &cfg, err, sizeof err);
    assert_non_null(c);
    int ctx = 22; /* context length: 6 blocks at most */
    colo_kv_table t, u;
    assert_int_equal(colo_kv_table_init(&t, 0), COLO_EINVAL);
    assert_int_equal(colo_kv_table_init(&t, colo_kv_blocks_for(ctx, 4)), COLO_OK);
    assert_int_equal(colo_kv_table_init(&u, colo_kv_blocks_for(ctx, 4)), COLO_OK);
    assert_int_equal(t.max_blocks, 6);

    assert_int_equal(colo_kv_table_ensure(c, &t, 5), COLO_OK);
    assert_int_equal(t.n_blocks, 2);
    assert_int_equal(colo_kv_table_ensure(c, &t, 8), COLO_OK); /* still fits */
    assert_int_equal(t.n_blocks, 2);
    assert_int_equal(colo_kv_table_ensure(c, &t, 9), COLO_OK);
    assert_int_equal(t.n_blocks, 3);
    assert_int_equal(colo_kv_cache_n_free(c), 7);
    /* Past the context limit: EINVAL, unchanged. */
    assert_int_equal(colo_kv_table_ensure(c, &t, 25), COLO_EINVAL);
    assert_int_equal(t.n_blocks, 3);
    assert_int_equal(colo_kv_cache_n_free(c), 7);
    /* Slots follow the table. */
    for (int p = 0; p < 12; p++)
        assert_int_equal(colo_kv_table_slot(&t, 4, p), t.ids[p / 4] * 4 + p % 4);
    /* Another sequence takes 6; t then cannot grow by 2: ENOMEM, unchanged. */
    assert_int_equal(colo_kv_table_ensure(c, &u, 24), COLO_OK);
    assert_int_equal(colo_kv_cache_n_free(c), 1);
    assert_int_equal(colo_kv_table_ensure(c, &t, 20), COLO_ENOMEM);
    assert_int_equal(t.n_blocks, 3);
    assert_int_equal(colo_kv_cache_n_free(c), 1);
    /* Preempting u frees its blocks; t grows. */
    colo_kv_table_release(c, &u);
    assert_int_equal(u.n_blocks, 0);
    assert_int_equal(colo_kv_cache_n_free(c), 7);
    assert_int_equal(colo_kv_table_ensure(c, &t, 20), COLO_OK);
    assert_int_equal(t.n_blocks, 5);
    colo_kv_table_release(c, &t);
    assert_int_equal(colo_kv_cache_n_free(c), 10);
    colo_kv_table_free(&t);
    colo_kv_table_free(&u);
    colo_kv_table_free(NULL);
    colo_kv_cache_destroy(c);
    colo_arena_destroy(a);
}

static void test_prefix_cache(void **state)
{
    (void)state;
    char err[256];
    colo_kv_cache_config cfg = small_cfg(); /* 10 blocks of 4 tokens */
    size_t bb = colo_kv_cache_block_bytes(&cfg);
    /* the pool charges 6 blocks at most; the cache has ids for 10 */
    colo_mem_pool *pool = colo_mem_pool_create(6 * bb);
    colo_arena *a = colo_arena_create_elastic(dev, "kv", pool, 6 * bb, 1 << 20, err, sizeof err);
    assert_non_null(a);
    colo_kv_cache *c = colo_kv_cache_create(a, &cfg, err, sizeof err);
    assert_non_null(c);
    assert_false(colo_kv_cache_prefix_enabled(c));
    int32_t toks[16], ids[10], got[10];
    srand(seed);
    for (int i = 0; i < 16; i++)
        toks[i] = rand() % 1000;
    uint64_t key;
    /* off: nothing is found, nothing is kept */
    assert_int_equal(colo_kv_cache_prefix_match(c, toks, 16, 4, got, &key), 0);
    assert_int_equal(colo_kv_cache_prefix_enable(c), COLO_OK);

    /* A sequence of 4 blocks publishes its first 3, then ends: 3 stay cached
     * (charged), one is free (uncharged); all 10 count as free. */
    assert_int_equal(colo_kv_cache_alloc(c, 4, ids), COLO_OK);
    uint64_t parent = COLO_PREFIX_ROOT;
    for (int b = 0; b < 3; b++)
        parent = colo_kv_cache_prefix_publish(c, ids[b], parent, toks + 4 * b);
    colo_kv_cache_release(c, ids, 4);
    assert_int_equal(colo_kv_cache_n_cached(c), 3);
    assert_int_equal(colo_kv_cache_n_evictable(c), 3);
    assert_int_equal(colo_kv_cache_n_free(c), 10);
    assert_int_equal(colo_mem_pool_used(pool), 3 * bb);

    /* The chain is found in order, up to the limit asked, with references. */
    assert_int_equal(colo_kv_cache_prefix_match(c, toks, 16, 4, got, &key), 3);
    assert_int_equal(key, parent);
    for (int b = 0; b < 3; b++) {
        assert_int_equal(got[b], ids[b]);
        assert_int_equal(colo_kv_cache_refs(c, got[b]), 1);
    }
    assert_int_equal(colo_kv_cache_n_evictable(c), 0);
    assert_int_equal(colo_kv_cache_n_free(c), 7);
    colo_kv_cache_release(c, got, 3);
    assert_int_equal(colo_kv_cache_prefix_match(c, toks, 16, 2, got, NULL), 2);
    colo_kv_cache_release(c, got, 2);
    /* Another first block: nothing, though later blocks match. */
    int32_t other[16];
    memcpy(other, toks, sizeof other);
    other[1] ^= 1;
    assert_int_equal(colo_kv_cache_prefix_match(c, other, 16, 4, got, &key), 0);
    assert_int_equal(key, COLO_PREFIX_ROOT);

    /* Shared references: the block goes with the last one. */
    int32_t one;
    assert_int_equal(colo_kv_cache_alloc(c, 1, &one), COLO_OK);
    colo_kv_cache_share(c, &one, 1);
    assert_int_equal(colo_kv_cache_refs(c, one), 2);
    colo_kv_cache_release(c, &one, 1);
    assert_int_equal(colo_kv_cache_refs(c, one), 1);
    colo_kv_cache_release(c, &one, 1);
    assert_int_equal(colo_kv_cache_refs(c, one), 0);
    assert_int_equal(colo_mem_pool_used(pool), 3 * bb);

    /* The pool full: 3 free blocks charged, 3 cached; 2 more come from the
     * cache, deepest blocks first, and the chain's first block stays. */
    int32_t three[3], two[2];
    assert_int_equal(colo_kv_cache_alloc(c, 3, three), COLO_OK);
    assert_int_equal(colo_mem_pool_used(pool), 6 * bb);
    assert_int_equal(colo_kv_cache_alloc(c, 4, ids), COLO_ENOMEM); /* only 3 cached to take */
    assert_int_equal(colo_kv_cache_alloc(c, 2, two), COLO_OK);
    assert_int_equal(colo_mem_pool_used(pool), 6 * bb);
    assert_int_equal(colo_kv_cache_n_cached(c), 1);
    assert_int_equal(colo_kv_cache_n_evicted(c), 2);
    assert_int_equal(colo_kv_cache_prefix_match(c, toks, 16, 4, got, NULL), 1);
    colo_kv_cache_release(c, got, 1);
    colo_kv_cache_release(c, two, 2);
    colo_kv_cache_release(c, three, 3);
    /* a flush gives every charge back */
    assert_int_equal(colo_kv_cache_prefix_evict(c, 100), 1);
    assert_int_equal(colo_kv_cache_n_cached(c), 0);
    assert_int_equal(colo_mem_pool_used(pool), 0);
    assert_int_equal(colo_kv_cache_n_free(c), 10);
    for (int i = 0; i < 10; i++)
        assert_int_equal(colo_kv_cache_refs(c, i), 0);

    /* Cached blocks left at destroy go back too. */
    assert_int_equal(colo_kv_cache_alloc(c, 1, &one), COLO_OK);
    colo_kv_cache_prefix_publish(c, one, COLO_PREFIX_ROOT, toks);
    colo_kv_cache_release(c, &one, 1);
    assert_int_equal(colo_mem_pool_used(pool), bb);
    colo_kv_cache_destroy(c);
    assert_int_equal(colo_mem_pool_used(pool), 0);
    colo_arena_destroy(a);
    colo_mem_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_cache),
        cmocka_unit_test(test_storage),
        cmocka_unit_test(test_alloc_all_or_nothing),
        cmocka_unit_test(test_alloc_random),
        cmocka_unit_test(test_tables),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
