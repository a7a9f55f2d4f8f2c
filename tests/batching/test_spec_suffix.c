/* The suffix cache (batching/spec_suffix.h): its drafts against a
 * brute-force search of what it should still hold, on fresh random
 * outputs; tenants kept apart (also once a tenant is forgotten and its
 * slot taken); its memory bound and the ring's; and, in the engine on a
 * small synthetic model, greedy and seeded output the same bits with its
 * drafts as without, drafts from a tenant's own earlier outputs accepted
 * and never from another tenant's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "batching/engine.h"
#include "batching/spec.h"
#include "batching/spec_suffix.h"
#include "engine_fixture.h"

/* ---- the cache alone ---------------------------------------------------- */

/* What was written, every position ever, with its tenant (0: a separator's
 * tenant does not matter), to search by brute force. */
typedef struct {
    int32_t tok[1 << 16];
    int tenant[1 << 16];
    int w;
} history;

static void hist_add(history *h, int tenant, const int32_t *t, int n, int cap)
{
    if (n > cap - 1) {
        t += n - (cap - 1);
        n = cap - 1;
    }
    for (int i = 0; i < n; i++, h->w++)
        h->tok[h->w] = t[i], h->tenant[h->w] = tenant;
    h->tok[h->w] = -1, h->tenant[h->w] = tenant;
    h->w++;
}

/* The longest match (>= COLO_SPEC_SUFFIX_NGRAM, latest among equals) of the
 * end of q in what the ring still holds of tenant's outputs: its draft of
 * up to k into out, its length into *match. */
static int hist_lookup(const history *h, int cap, int tenant, const int32_t *q, int nq, int k, int32_t *out,
                       int *match)
{
    int lo = h->w > cap ? h->w - cap : 0, best = -1, best_m = 0;
    for (int p = h->w - 1; p > lo; p--) {
        if (h->tok[p] < 0 || h->tenant[p] != tenant)
            continue;
        int m = 0;
        while (m < COLO_SPEC_SUFFIX_MAX_MATCH && m < nq && p - 1 - m >= lo && h->tok[p - 1 - m] >= 0 &&
               h->tenant[p - 1 - m] == tenant && h->tok[p - 1 - m] == q[nq - 1 - m])
            m++;
        if (m >= COLO_SPEC_SUFFIX_NGRAM && m > best_m)
            best = p, best_m = m;
    }
    *match = best_m;
    int n = 0;
    while (best >= 0 && n < k && best + n < h->w && h->tok[best + n] >= 0) {
        out[n] = h->tok[best + n];
        n++;
    }
    return n;
}

static const char *const tenant_names[] = {"acme/search", "acme/chat", "globex/search", ""};

/* Random outputs of four tenants, more than the ring holds; queries that
 * end like a stored output (or like nothing): the same draft and match as
 * the brute-force search, and never a token of another tenant's. */
static void test_lookup_matches_search(void **state)
{
    (void)state;
    unsigned seed = (unsigned)time(NULL);
    srand(seed);
    static history h;
    memset(&h, 0, sizeof h);
    colo_spec_suffix *c = colo_spec_suffix_create(64 << 10);
    assert_non_null(c);
    int cap = colo_spec_suffix_capacity(c);
    assert_true(cap >= COLO_SPEC_SUFFIX_MIN_TOKENS);
    int32_t out[2][COLO_SPEC_MAX_TOKENS], t[200];
    int found = 0;
    for (int round = 0; round < 400; round++) {
        int tenant = rand() % 4, n = 5 + rand() % 60;
        for (int i = 0; i < n; i++)
            t[i] = rand() % 40; /* a small vocabulary: repeated 3-grams, ties */
        colo_spec_suffix_add(c, tenant_names[tenant], t, n);
        hist_add(&h, tenant, t, n, cap);
        for (int qi = 0; qi < 4; qi++) {
            /* a query: noise, then (mostly) a piece of stored text, asked
             * (half the time) by the tenant that wrote it */
            int nq = 3 + rand() % 20, from = rand() % h.w, who = rand() % 4;
            int32_t q[32];
            for (int i = 0; i < nq; i++)
                q[i] = rand() % 40;
            if (rand() % 4) {
                int len = 0;
                while (len < nq && from + len < h.w && h.tok[from + len] >= 0)
                    len++;
                memcpy(q + nq - len, h.tok + from, (size_t)len * 4);
                if (rand() % 2)
                    who = h.tenant[from];
            }
            int k = 1 + rand() % COLO_SPEC_MAX_TOKENS, m0, m1;
            uint32_t tag = colo_spec_suffix_tenant(c, tenant_names[who]);
            int n0 = colo_spec_suffix_lookup(c, tag, q, nq, k, out[0], &m0);
            int n1 = hist_lookup(&h, cap, who, q, nq, k, out[1], &m1);
            if (n0 != n1 || m0 != m1)
                fail_msg("seed %u round %d: draft %d match %d, the search %d match %d", seed, round, n0, m0, n1, m1);
            assert_memory_equal(out[0], out[1], (size_t)n0 * 4);
            found += n0 > 0;
        }
    }
    assert_true(h.w > 2 * cap); /* the ring went round */
    assert_true(found > 100);
    colo_spec_suffix_free(c);
}

/* One tenant's output is drafted for it and for nobody else, whatever
 * their names have in common. */
static void test_tenants_apart(void **state)
{
    (void)state;
    colo_spec_suffix *c = colo_spec_suffix_create(COLO_SPEC_SUFFIX_DEFAULT_BYTES);
    assert_non_null(c);
    int32_t text[] = {10, 11, 12, 13, 14, 15, 16, 17}, q[] = {99, 10, 11, 12}, out[8];
    int m;
    colo_spec_suffix_add(c, "acme/search", text, 8);
    uint32_t a = colo_spec_suffix_tenant(c, "acme/search");
    assert_int_equal(colo_spec_suffix_lookup(c, a, q, 4, 8, out, &m), 5);
    assert_int_equal(m, 3);
    assert_memory_equal(out, text + 3, 5 * 4);
    const char *others[] = {"acme/searc", "acme/search2", "acme", "", "globex/search", "ACME/search"};
    for (int i = 0; i < 6; i++) {
        uint32_t b = colo_spec_suffix_tenant(c, others[i]);
        assert_true(b != 0 && b != a);
        assert_int_equal(colo_spec_suffix_lookup(c, b, q, 4, 8, out, &m), 0);
        assert_int_equal(m, 0);
    }
    /* a name too long to keep exactly neither stores nor drafts */
    char longname[COLO_SPEC_SUFFIX_TENANT_LEN + 8];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    assert_int_equal(colo_spec_suffix_tenant(c, longname), 0);
    colo_spec_suffix_add(c, longname, text, 8);
    assert_int_equal(colo_spec_suffix_lookup(c, 0, q, 4, 8, out, &m), 0);
    colo_spec_suffix_free(c);
}

/* More tenants than the table holds: the first is forgotten, and neither
 * it (back under a new tag) nor the tenant that took its slot drafts from
 * its old outputs. */
static void test_forgotten_tenant(void **state)
{
    (void)state;
    colo_spec_suffix *c = colo_spec_suffix_create(COLO_SPEC_SUFFIX_DEFAULT_BYTES);
    assert_non_null(c);
    int32_t text[] = {20, 21, 22, 23, 24}, q[] = {20, 21, 22}, out[8];
    int m;
    colo_spec_suffix_add(c, "t/0", text, 5);
    uint32_t old = colo_spec_suffix_tenant(c, "t/0");
    assert_int_equal(colo_spec_suffix_lookup(c, old, q, 3, 8, out, &m), 2);
    char name[32];
    for (int i = 1; i <= COLO_SPEC_SUFFIX_TENANTS; i++) {
        snprintf(name, sizeof name, "t/%d", i);
        uint32_t tag = colo_spec_suffix_tenant(c, name);
        assert_true(tag != 0 && tag != old);
        assert_int_equal(colo_spec_suffix_lookup(c, tag, q, 3, 8, out, &m), 0);
    }
    uint32_t again = colo_spec_suffix_tenant(c, "t/0");
    assert_true(again != old);
    assert_int_equal(colo_spec_suffix_lookup(c, again, q, 3, 8, out, &m), 0);
    colo_spec_suffix_free(c);
}

/* The memory stays within what it was given; the ring keeps the newest
 * outputs and forgets the oldest; an output longer than the ring keeps
 * its end. */
static void test_bound(void **state)
{
    (void)state;
    size_t sizes[] = {COLO_SPEC_SUFFIX_MIN_BYTES, 100000, 1 << 20, COLO_SPEC_SUFFIX_DEFAULT_BYTES, 5000000};
    for (int i = 0; i < 5; i++) {
        colo_spec_suffix *c = colo_spec_suffix_create(sizes[i]);
        assert_non_null(c);
        assert_true(colo_spec_suffix_bytes(c) <= sizes[i]);
        assert_true(colo_spec_suffix_bytes(c) * 2 > sizes[i]); /* and uses a fair part of it */
        colo_spec_suffix_free(c);
    }
    colo_spec_suffix *c = colo_spec_suffix_create(COLO_SPEC_SUFFIX_MIN_BYTES);
    int cap = colo_spec_suffix_capacity(c);
    uint32_t tag = colo_spec_suffix_tenant(c, "a/b");
    int32_t t[64], out[8];
    int m;
    /* output j: 1000 + j, then 60 tokens of its own */
    int outputs = 3 * cap / 64;
    for (int j = 0; j < outputs; j++) {
        for (int i = 0; i < 64; i++)
            t[i] = i < 3 ? 1000 + 3 * j + i : (j * 64 + i) % 900;
        colo_spec_suffix_add(c, "a/b", t, 64);
    }
    for (int j = 0; j < outputs; j++) {
        int32_t q[3] = {1000 + 3 * j, 1001 + 3 * j, 1002 + 3 * j};
        int n = colo_spec_suffix_lookup(c, tag, q, 3, 4, out, &m);
        /* 65 positions an output: the newest cap / 65 are held whole */
        if (j >= outputs - cap / 65)
            assert_int_equal(n, 4);
        else if (j < outputs - cap / 65 - 1)
            assert_int_equal(n, 0);
    }
    /* longer than the ring: its last cap - 1 tokens */
    int32_t *big = malloc((size_t)(cap + 100) * 4);
    assert_non_null(big);
    for (int i = 0; i < cap + 100; i++)
        big[i] = 2000 + i;
    colo_spec_suffix_add(c, "a/b", big, cap + 100);
    int32_t q_old[3] = {2000, 2001, 2002}, q_new[3] = {2000 + cap, 2001 + cap, 2002 + cap};
    assert_int_equal(colo_spec_suffix_lookup(c, tag, q_old, 3, 4, out, &m), 0);
    assert_int_equal(colo_spec_suffix_lookup(c, tag, q_new, 3, 4, out, &m), 4);
    assert_int_equal(out[0], 2003 + cap);
    free(big);
    colo_spec_suffix_free(c);
}

/* ---- in the engine -------------------------------------------------------- */

static colo_engine *engine_of(engine_rig *r, int spec_tokens, bool lookup)
{
    memset(r, 0, sizeof *r);
    engine_rig_arena(r, dev, "suffix", 64 << 20);
    colo_engine_config gc = {.max_running = 4, .max_step_tokens = 256, .block_size = 4, .kv_type = COLO_F32,
                             .spec_tokens = spec_tokens, .spec_always = true,
                             .spec_suffix_bytes = spec_tokens ? COLO_SPEC_SUFFIX_MIN_BYTES : 0,
                             .spec_no_lookup = !lookup};
    engine_rig_start(r, &gc);
    return r->e;
}

static void prompt_of(int i, int32_t *ids, int *n)
{
    *n = 12;
    for (int j = 0; j < 12; j++)
        ids[j] = (int32_t)((i * 41 + j * 13 + 7) % 256);
}

/* Runs prompt i for tenant on e, alone; the step counters it added into *st. */
static void run_one(colo_engine *e, int i, const char *tenant, float temperature, engine_result *res,
                    colo_engine_step_stats *st)
{
    colo_engine_step_stats before, after;
    colo_engine_get_step_stats(e, &before);
    colo_engine_callbacks cb;
    engine_results_reset(res, &cb, 1);
    int32_t ids[16];
    int n;
    prompt_of(i, ids, &n);
    colo_engine_params p = {.max_tokens = 40, .temperature = temperature, .top_p = 1, .seed = 7 + (uint64_t)i,
                            .logprobs = true, .tenant = tenant};
    char err[256];
    assert_non_null(colo_engine_add(e, ids, n, &p, &cb, err, sizeof err));
    engine_run_all(e);
    colo_engine_get_step_stats(e, &after);
    st->spec_drafted = after.spec_drafted - before.spec_drafted;
    st->spec_accepted = after.spec_accepted - before.spec_accepted;
}

static void assert_same(const engine_result *a, const engine_result *b)
{
    engine_assert_same(a, b);
    assert_memory_equal(a->lps, b->lps, (size_t)a->n * 4);
}

/* A tenant's second run of a prompt drafts its first run's output and
 * keeps it; another tenant's run of the same prompt drafts nothing from
 * it; every output, greedy and seeded, the same bits as plain decoding. */
static void check_tenants(float temperature, bool lookup)
{
    engine_rig plain_rig, spec_rig;
    colo_engine *plain = engine_of(&plain_rig, 0, false), *spec = engine_of(&spec_rig, 8, lookup);
    engine_result want[3], got;
    colo_engine_step_stats st;
    for (int i = 0; i < 3; i++)
        run_one(plain, i, "acme/a", temperature, &want[i], &st);
    /* the first run of each prompt: nothing of its own cached yet */
    for (int i = 0; i < 3; i++) {
        run_one(spec, i, "acme/a", temperature, &got, &st);
        assert_same(&want[i], &got);
    }
    /* another tenant: the same prompts, the cache holds none of its outputs */
    for (int i = 0; i < 3; i++) {
        run_one(spec, i, "acme/b", temperature, &got, &st);
        assert_same(&want[i], &got);
        if (!lookup)
            assert_int_equal(st.spec_drafted, 0);
    }
    /* the first tenant again: its own output drafted, and (greedy) all kept */
    for (int i = 0; i < 3; i++) {
        run_one(spec, i, "acme/a", temperature, &got, &st);
        assert_same(&want[i], &got);
        assert_true(st.spec_accepted > 0);
        if (temperature == 0 && !lookup)
            assert_int_equal(st.spec_accepted, st.spec_drafted);
    }
    engine_rig_close(&plain_rig);
    engine_rig_close(&spec_rig);
}

static void test_engine_greedy(void **state)
{
    (void)state;
    check_tenants(0, false);
    check_tenants(0, true);
}

static void test_engine_sampled(void **state)
{
    (void)state;
    check_tenants(0.8f, false);
}

static int setup(void **state)
{
    (void)state;
    return engine_fixture_open("spec-suffix", 31);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lookup_matches_search),
        cmocka_unit_test(test_tenants_apart),
        cmocka_unit_test(test_forgotten_tenant),
        cmocka_unit_test(test_bound),
        cmocka_unit_test(test_engine_greedy),
        cmocka_unit_test(test_engine_sampled),
    };
    return cmocka_run_group_tests(tests, setup, engine_fixture_close);
}
