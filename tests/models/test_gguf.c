/* GGUF reader: every value type round-trips through the writer, and corrupt
 * files (truncations, flipped bytes, bad counts and offsets) are refused with
 * a message, never a crash (the ASan build checks for stray reads). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/gguf.h"
#include "models/mkmodel.h"

static char dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/colo-test-gguf-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static colo_status fill_pattern(void *ctx, int index, void *buf, size_t bytes)
{
    (void)ctx;
    for (size_t i = 0; i < bytes; i++)
        ((uint8_t *)buf)[i] = (uint8_t)(i * 7 + (size_t)index);
    return COLO_OK;
}

static void write_sample(const char *path)
{
    colo_gguf_writer *w = colo_gguf_writer_create();
    const char *strs[] = {"alpha", "", "γάμμα"};
    int32_t ints[] = {1, -2, 3};
    float fl[] = {0.5f, -1.25f};
    assert_int_equal(colo_gguf_writer_add_u32(w, "a.u32", 42), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_i32(w, "a.i32", -7), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_u64(w, "a.u64", 1ull << 40), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_f32(w, "a.f32", 3.5f), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_bool(w, "a.bool", true), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_str(w, "a.str", "hello"), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_str_arr(w, "a.strs", strs, 3), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_i32_arr(w, "a.ints", ints, 3), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_f32_arr(w, "a.floats", fl, 2), COLO_OK);
    int64_t ne1[2] = {64, 3}, ne2[1] = {10}, ne3[2] = {32, 5};
    assert_int_equal(colo_gguf_writer_add_tensor(w, "t.q41", COLO_Q4_1, 2, ne1), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_tensor(w, "t.f32", COLO_F32, 1, ne2), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_tensor(w, "t.q80", COLO_Q8_0, 2, ne3), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_tensor(w, "bad", COLO_Q4_1, 1, ne2), COLO_EINVAL); /* 10 % 32 */
    char err[256];
    assert_int_equal(colo_gguf_writer_finish(w, path, fill_pattern, NULL, err, sizeof err), COLO_OK);
    colo_gguf_writer_free(w);
}

static void test_round_trip(void **state)
{
    (void)state;
    char path[300], err[512];
    snprintf(path, sizeof path, "%s/sample.gguf", dir);
    write_sample(path);
    colo_gguf *g = colo_gguf_open(path, err, sizeof err);
    assert_non_null(g);
    assert_int_equal(colo_gguf_version(g), 3);
    assert_int_equal(colo_gguf_n_kv(g), 9);
    uint32_t u;
    int64_t i64;
    float f;
    bool b;
    colo_gguf_str s;
    assert_int_equal(colo_gguf_get_u32(g, "a.u32", &u), COLO_OK);
    assert_int_equal(u, 42);
    assert_int_equal(colo_gguf_get_i64(g, "a.i32", &i64), COLO_OK);
    assert_int_equal(i64, -7);
    assert_int_equal(colo_gguf_get_u32(g, "a.i32", &u), COLO_EFORMAT); /* negative */
    assert_int_equal(colo_gguf_get_i64(g, "a.u64", &i64), COLO_OK);
    assert_int_equal(i64, 1ll << 40);
    assert_int_equal(colo_gguf_get_f32(g, "a.f32", &f), COLO_OK);
    assert_true(f == 3.5f);
    assert_int_equal(colo_gguf_get_bool(g, "a.bool", &b), COLO_OK);
    assert_true(b);
    assert_int_equal(colo_gguf_get_str(g, "a.str", &s), COLO_OK);
    assert_int_equal(s.len, 5);
    assert_memory_equal(s.ptr, "hello", 5);
    assert_int_equal(colo_gguf_get_str(g, "a.u32", &s), COLO_EFORMAT);
    assert_int_equal(colo_gguf_get_str(g, "missing", &s), COLO_EINVAL);
    assert_int_equal(colo_gguf_arr_str(g, "a.strs", 2, &s), COLO_OK);
    assert_int_equal(s.len, strlen("γάμμα"));
    assert_int_equal(colo_gguf_arr_str(g, "a.strs", 1, &s), COLO_OK);
    assert_int_equal(s.len, 0);
    assert_int_equal(colo_gguf_arr_str(g, "a.strs", 3, &s), COLO_EINVAL);
    colo_gguf_type t;
    uint64_t n;
    const uint8_t *d;
    assert_int_equal(colo_gguf_get_arr(g, "a.ints", &t, &n, &d), COLO_OK);
    assert_int_equal(t, COLO_GGUF_I32);
    assert_int_equal(n, 3);
    int32_t v;
    memcpy(&v, d + 4, 4);
    assert_int_equal(v, -2);
    assert_int_equal(colo_gguf_n_tensors(g), 3);
    const colo_gguf_tensor *q = colo_gguf_find_tensor(g, "t.q41");
    assert_non_null(q);
    assert_int_equal(q->type, COLO_Q4_1);
    assert_int_equal(q->ne[0], 64);
    assert_int_equal(q->ne[1], 3);
    assert_int_equal(q->bytes, 3 * 40);
    assert_int_equal(((const uint8_t *)q->data)[5], (uint8_t)(5 * 7 + 0));
    const colo_gguf_tensor *q8 = colo_gguf_find_tensor(g, "t.q80");
    assert_int_equal(((const uint8_t *)q8->data)[9], (uint8_t)(9 * 7 + 2));
    assert_null(colo_gguf_find_tensor(g, "nope"));
    colo_gguf_close(g);
    colo_gguf_close(NULL);
}

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void spill(const char *path, const uint8_t *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* Every truncation length: each open fails cleanly (or, for a cut inside
 * the padding after the last tensor, still succeeds). */
static void test_truncations(void **state)
{
    (void)state;
    char path[300], bad[300], err[512];
    snprintf(path, sizeof path, "%s/sample.gguf", dir);
    snprintf(bad, sizeof bad, "%s/bad.gguf", dir);
    write_sample(path);
    size_t n;
    uint8_t *b = slurp(path, &n);
    int refused = 0;
    for (size_t cut = 0; cut < n; cut++) {
        spill(bad, b, cut);
        err[0] = 0;
        colo_gguf *g = colo_gguf_open(bad, err, sizeof err);
        if (g) {
            colo_gguf_close(g);
        } else {
            assert_true(strlen(err) > 0);
            assert_non_null(strstr(err, bad));
            refused++;
        }
    }
    assert_true(refused >= (int)n - 32);
    free(b);
}

/* Random byte flips in the header and metadata: never a crash. */
static void test_random_corruption(void **state)
{
    (void)state;
    char path[300], bad[300], err[512];
    snprintf(path, sizeof path, "%s/sample.gguf", dir);
    snprintf(bad, sizeof bad, "%s/flip.gguf", dir);
    write_sample(path);
    size_t n;
    uint8_t *b = slurp(path, &n);
    unsigned seed = getenv("COLO_TEST_SEED") ? (unsigned)atoi(getenv("COLO_TEST_SEED")) : 99u;
    printf("seed %u (COLO_TEST_SEED)\n", seed);
    srand(seed);
    uint8_t *c = malloc(n);
    size_t header = n > 600 ? 600 : n;
    for (int it = 0; it < 2000; it++) {
        memcpy(c, b, n);
        int flips = 1 + rand() % 4;
        for (int k = 0; k < flips; k++)
            c[(size_t)rand() % header] ^= (uint8_t)(1u << (rand() % 8));
        spill(bad, c, n);
        colo_gguf *g = colo_gguf_open(bad, err, sizeof err);
        if (g) { /* whatever it accepted must be in bounds */
            for (int i = 0; i < colo_gguf_n_tensors(g); i++) {
                const colo_gguf_tensor *t = colo_gguf_tensor_at(g, i);
                volatile uint8_t x = ((const uint8_t *)t->data)[t->bytes - 1];
                (void)x;
            }
            colo_gguf_close(g);
        }
    }
    free(c);
    free(b);
}

static void put_u64_at(uint8_t *b, size_t at, uint64_t v) { memcpy(b + at, &v, 8); }

static void test_specific_errors(void **state)
{
    (void)state;
    char path[300], bad[300], err[512];
    snprintf(path, sizeof path, "%s/sample.gguf", dir);
    snprintf(bad, sizeof bad, "%s/spec.gguf", dir);
    write_sample(path);
    size_t n;
    uint8_t *b = slurp(path, &n), *c = malloc(n);

    memcpy(c, b, n);
    c[0] = 'X';
    spill(bad, c, n);
    assert_null(colo_gguf_open(bad, err, sizeof err));
    assert_non_null(strstr(err, "magic"));

    memcpy(c, b, n);
    c[4] = 9; /* version */
    spill(bad, c, n);
    assert_null(colo_gguf_open(bad, err, sizeof err));
    assert_non_null(strstr(err, "version"));

    memcpy(c, b, n);
    put_u64_at(c, 8, 1ull << 60); /* tensor count */
    spill(bad, c, n);
    assert_null(colo_gguf_open(bad, err, sizeof err));
    assert_non_null(strstr(err, "cannot fit"));

    memcpy(c, b, n);
    put_u64_at(c, 24, 1ull << 50); /* length of the first key's name */
    spill(bad, c, n);
    assert_null(colo_gguf_open(bad, err, sizeof err));
    assert_non_null(strstr(err, "truncated"));

    /* Tensor offsets: the last 8 bytes of each tensor info. Find "t.f32". */
    uint8_t *p = memmem(c, n, "t.f32", 5);
    memcpy(c, b, n);
    p = memmem(c, n, "t.f32", 5);
    assert_non_null(p);
    size_t off_at = (size_t)(p - c) + 5 + 4 + 8 + 4; /* name, n_dims, ne0, type */
    put_u64_at(c, off_at, 1ull << 40);
    spill(bad, c, n);
    assert_null(colo_gguf_open(bad, err, sizeof err));
    assert_non_null(strstr(err, "t.f32"));
    put_u64_at(c, off_at, 3); /* misaligned */
    spill(bad, c, n);
    assert_null(colo_gguf_open(bad, err, sizeof err));
    assert_non_null(strstr(err, "aligned"));
    put_u64_at(c, off_at, 0); /* overlaps t.q41 */
    spill(bad, c, n);
    assert_null(colo_gguf_open(bad, err, sizeof err));
    assert_non_null(strstr(err, "overlap"));

    memcpy(c, b, n);
    p = memmem(c, n, "t.f32", 5);
    uint32_t type = 99;
    memcpy(p + 5 + 4 + 8, &type, 4);
    spill(bad, c, n);
    assert_null(colo_gguf_open(bad, err, sizeof err));
    assert_non_null(strstr(err, "type 99"));

    assert_null(colo_gguf_open("/nonexistent/x.gguf", err, sizeof err));
    assert_non_null(strstr(err, "cannot open"));
    free(b);
    free(c);
}

static void test_mkmodel_files_load(void **state)
{
    (void)state;
    const colo_dtype types[] = {COLO_F32, COLO_F16, COLO_Q4_1, COLO_Q8_0};
    for (int i = 0; i < 4; i++) {
        char path[300], err[512];
        snprintf(path, sizeof path, "%s/m%d.gguf", dir, i);
        colo_mkmodel_config c = {.n_layer = 2, .n_embd = 64, .n_head = 4, .n_kv_head = 2, .n_ff = 96,
                                 .n_vocab = 300, .n_ctx = 128, .type = types[i], .seed = 5};
        assert_int_equal(colo_mkmodel_write(path, &c, err, sizeof err), COLO_OK);
        colo_gguf *g = colo_gguf_open(path, err, sizeof err);
        assert_non_null(g);
        assert_int_equal(colo_gguf_n_tensors(g), 2 + 2 * 9);
        const colo_gguf_tensor *t = colo_gguf_find_tensor(g, "blk.1.ffn_down.weight");
        assert_int_equal(t->type, types[i]);
        assert_int_equal(t->ne[0], 96);
        assert_int_equal(t->ne[1], 64);
        colo_gguf_close(g);
    }
    char err[512];
    colo_mkmodel_config c = {.n_layer = 2, .n_embd = 64, .n_head = 5, .n_kv_head = 1, .n_ff = 96, .n_vocab = 300,
                             .n_ctx = 128, .type = COLO_F16};
    assert_int_equal(colo_mkmodel_write("/tmp/x", &c, err, sizeof err), COLO_EINVAL);
    c.n_head = 4;
    c.n_vocab = 10;
    assert_int_equal(colo_mkmodel_write("/tmp/x", &c, err, sizeof err), COLO_EINVAL);
    assert_non_null(strstr(err, "vocab"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),      cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_random_corruption), cmocka_unit_test(test_specific_errors),
        cmocka_unit_test(test_mkmodel_files_load),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
