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

#include "models/format/gguf.h"
#include "tools/gguf_write.h"
#include "tools/mkmodel.h"

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

/* Random byte flips in the first header_len bytes of path: never a crash,
 * and whatever is accepted lies inside the file. */
static void flip_fuzz(const char *path, size_t header_len, int iters)
{
    char bad[300], err[512];
    snprintf(bad, sizeof bad, "%s/flip.gguf", dir);
    size_t n;
    uint8_t *b = slurp(path, &n);
    unsigned seed = getenv("COLO_TEST_SEED") ? (unsigned)atoi(getenv("COLO_TEST_SEED")) : 99u;
    printf("seed %u (COLO_TEST_SEED)\n", seed);
    srand(seed);
    uint8_t *c = malloc(n);
    assert_non_null(c);
    size_t header = header_len < n ? header_len : n;
    int refused = 0;
    for (int it = 0; it < iters; it++) {
        memcpy(c, b, n);
        int flips = 1 + rand() % 4;
        for (int k = 0; k < flips; k++)
            c[(size_t)rand() % header] ^= (uint8_t)(1u << (rand() % 8));
        spill(bad, c, n);
        err[0] = 0;
        colo_gguf *g = colo_gguf_open(bad, err, sizeof err);
        if (g) {
            for (int i = 0; i < colo_gguf_n_tensors(g); i++) {
                const colo_gguf_tensor *t = colo_gguf_tensor_at(g, i);
                volatile uint8_t x = ((const uint8_t *)t->data)[t->bytes - 1];
                (void)x;
            }
            colo_gguf_close(g);
        } else {
            assert_true(strlen(err) > 0);
            refused++;
        }
    }
    assert_true(refused > 0);
    free(c);
    free(b);
}

static void test_random_corruption(void **state)
{
    (void)state;
    char path[300];
    snprintf(path, sizeof path, "%s/sample.gguf", dir);
    write_sample(path);
    char err[512];
    colo_gguf *g = colo_gguf_open(path, err, sizeof err);
    assert_non_null(g);
    size_t header = colo_gguf_data_offset(g);
    colo_gguf_close(g);
    flip_fuzz(path, header, 2000);
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
    type = 16; /* an i-quant: named */
    memcpy(p + 5 + 4 + 8, &type, 4);
    spill(bad, c, n);
    assert_null(colo_gguf_open(bad, err, sizeof err));
    assert_non_null(strstr(err, "tensor t.f32: type 16 (IQ2_XXS) is not supported"));

    assert_null(colo_gguf_open("/nonexistent/x.gguf", err, sizeof err));
    assert_non_null(strstr(err, "cannot open"));
    free(b);
    free(c);
}

static void put_le(uint8_t **p, const void *v, size_t n)
{
    memcpy(*p, v, n);
    *p += n;
}

/* Every scalar type, arrays of each, string arrays and arrays of arrays;
 * a key after each nested value proves the reader walked past it. */
static void test_every_type(void **state)
{
    (void)state;
    char path[300], err[512];
    snprintf(path, sizeof path, "%s/types.gguf", dir);
    colo_gguf_writer *w = colo_gguf_writer_create();
    assert_non_null(w);
    assert_int_equal(colo_gguf_writer_set_alignment(w, 64), COLO_OK);
    assert_int_equal(colo_gguf_writer_set_alignment(w, 64), COLO_EINVAL); /* once */
    assert_int_equal(colo_gguf_writer_add_u8(w, "t.u8", 250), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_i8(w, "t.i8", -100), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_u16(w, "t.u16", 65000), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_i16(w, "t.i16", -30000), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_u32(w, "t.u32", 4000000000u), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_i32(w, "t.i32", -2000000000), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_u64(w, "t.u64", UINT64_MAX), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_i64(w, "t.i64", INT64_MIN), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_f32(w, "t.f32", -0.125f), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_f64(w, "t.f64", 1e-300), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_bool(w, "t.bool", false), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_str(w, "t.str", ""), COLO_OK);
    /* Arrays of every scalar type (3 elements each, 8 bytes apiece is enough). */
    static const colo_gguf_type scal[] = {COLO_GGUF_U8,  COLO_GGUF_I8,  COLO_GGUF_U16, COLO_GGUF_I16,
                                          COLO_GGUF_U32, COLO_GGUF_I32, COLO_GGUF_F32, COLO_GGUF_BOOL,
                                          COLO_GGUF_U64, COLO_GGUF_I64, COLO_GGUF_F64};
    uint8_t raw[24];
    for (int i = 0; i < 24; i++)
        raw[i] = (uint8_t)(i % 2);
    for (size_t i = 0; i < sizeof scal / sizeof *scal; i++) {
        char k[32];
        snprintf(k, sizeof k, "arr.%s", colo_gguf_type_name(scal[i]));
        assert_int_equal(colo_gguf_writer_add_arr(w, k, scal[i], raw, 3), COLO_OK);
    }
    assert_int_equal(colo_gguf_writer_add_arr(w, "arr.bad", COLO_GGUF_STRING, raw, 1), COLO_EINVAL);
    assert_int_equal(colo_gguf_writer_add_arr(w, "arr.empty", COLO_GGUF_U32, NULL, 0), COLO_OK);
    /* [[1, 2], [3]] of i32, then [["x"], [], ["yz", ""]] of strings, then [[[7]]]. */
    uint8_t nest[256], *p = nest;
    uint32_t t_arr = COLO_GGUF_ARRAY, t_i32 = COLO_GGUF_I32, t_str = COLO_GGUF_STRING;
    uint64_t two = 2, one = 1, three = 3, zero = 0;
    int32_t v1 = 1, v2 = 2, v3 = 3, v7 = 7;
    put_le(&p, &t_arr, 4), put_le(&p, &two, 8);
    put_le(&p, &t_i32, 4), put_le(&p, &two, 8), put_le(&p, &v1, 4), put_le(&p, &v2, 4);
    put_le(&p, &t_i32, 4), put_le(&p, &one, 8), put_le(&p, &v3, 4);
    assert_int_equal(colo_gguf_writer_add_raw(w, "nest.i32", COLO_GGUF_ARRAY, nest, (size_t)(p - nest)), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_u32(w, "after.1", 11), COLO_OK);
    p = nest;
    put_le(&p, &t_arr, 4), put_le(&p, &three, 8);
    put_le(&p, &t_str, 4), put_le(&p, &one, 8), put_le(&p, &one, 8), put_le(&p, "x", 1);
    put_le(&p, &t_str, 4), put_le(&p, &zero, 8);
    put_le(&p, &t_str, 4), put_le(&p, &two, 8), put_le(&p, &two, 8), put_le(&p, "yz", 2), put_le(&p, &zero, 8);
    assert_int_equal(colo_gguf_writer_add_raw(w, "nest.str", COLO_GGUF_ARRAY, nest, (size_t)(p - nest)), COLO_OK);
    p = nest;
    put_le(&p, &t_arr, 4), put_le(&p, &one, 8);
    put_le(&p, &t_arr, 4), put_le(&p, &one, 8);
    put_le(&p, &t_i32, 4), put_le(&p, &one, 8), put_le(&p, &v7, 4);
    assert_int_equal(colo_gguf_writer_add_raw(w, "nest.3", COLO_GGUF_ARRAY, nest, (size_t)(p - nest)), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_str(w, "after.2", "end"), COLO_OK);
    int64_t ne4[4] = {32, 2, 3, 2}, ne1[1] = {5};
    assert_int_equal(colo_gguf_writer_add_tensor(w, "four.d", COLO_Q8_0, 4, ne4), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_tensor(w, "ids", COLO_I32, 1, ne1), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_tensor(w, "five.d", COLO_F32, 5, ne4), COLO_EINVAL);
    assert_int_equal(colo_gguf_writer_finish(w, path, fill_pattern, NULL, err, sizeof err), COLO_OK);
    colo_gguf_writer_free(w);

    colo_gguf *g = colo_gguf_open(path, err, sizeof err);
    if (!g)
        fail_msg("%s", err);
    assert_int_equal(colo_gguf_alignment(g), 64);
    assert_int_equal(colo_gguf_data_offset(g) % 64, 0);
    int64_t i64;
    uint32_t u32;
    float f;
    bool b = true;
    colo_gguf_str s;
    assert_int_equal(colo_gguf_get_i64(g, "t.u8", &i64), COLO_OK), assert_int_equal(i64, 250);
    assert_int_equal(colo_gguf_get_i64(g, "t.i8", &i64), COLO_OK), assert_int_equal(i64, -100);
    assert_int_equal(colo_gguf_get_u32(g, "t.u16", &u32), COLO_OK), assert_int_equal(u32, 65000);
    assert_int_equal(colo_gguf_get_i64(g, "t.i16", &i64), COLO_OK), assert_int_equal(i64, -30000);
    assert_int_equal(colo_gguf_get_u32(g, "t.u32", &u32), COLO_OK), assert_int_equal(u32, 4000000000u);
    assert_int_equal(colo_gguf_get_i64(g, "t.i32", &i64), COLO_OK), assert_int_equal(i64, -2000000000);
    assert_int_equal(colo_gguf_get_i64(g, "t.u64", &i64), COLO_EFORMAT); /* does not fit */
    assert_int_equal(colo_gguf_get_i64(g, "t.i64", &i64), COLO_OK), assert_true(i64 == INT64_MIN);
    assert_int_equal(colo_gguf_get_u32(g, "t.i64", &u32), COLO_EFORMAT);
    assert_int_equal(colo_gguf_get_f32(g, "t.f32", &f), COLO_OK), assert_true(f == -0.125f);
    assert_int_equal(colo_gguf_get_f32(g, "t.f64", &f), COLO_OK), assert_true(f == (float)1e-300);
    assert_int_equal(colo_gguf_get_f32(g, "t.u8", &f), COLO_EFORMAT);
    assert_int_equal(colo_gguf_get_bool(g, "t.bool", &b), COLO_OK), assert_false(b);
    assert_int_equal(colo_gguf_get_bool(g, "t.u8", &b), COLO_EFORMAT);
    assert_int_equal(colo_gguf_get_str(g, "t.str", &s), COLO_OK), assert_int_equal(s.len, 0);
    assert_int_equal(colo_gguf_get_str(g, "after.2", &s), COLO_OK);
    assert_int_equal(s.len, 3), assert_memory_equal(s.ptr, "end", 3);
    assert_int_equal(colo_gguf_get_u32(g, "after.1", &u32), COLO_OK), assert_int_equal(u32, 11);
    assert_int_equal(colo_gguf_get_u32(g, "general.alignment", &u32), COLO_OK), assert_int_equal(u32, 64);
    for (size_t i = 0; i < sizeof scal / sizeof *scal; i++) {
        char k[32];
        snprintf(k, sizeof k, "arr.%s", colo_gguf_type_name(scal[i]));
        colo_gguf_type t;
        uint64_t n;
        const uint8_t *d;
        assert_int_equal(colo_gguf_get_arr(g, k, &t, &n, &d), COLO_OK);
        assert_int_equal(t, scal[i]);
        assert_int_equal(n, 3);
        assert_int_equal(d[0], 0);
        assert_int_equal(d[1], 1);
        assert_int_equal(colo_gguf_get_i64(g, k, &i64), COLO_EFORMAT);
        assert_int_equal(colo_gguf_arr_str(g, k, 0, &s), COLO_EFORMAT);
    }
    colo_gguf_type t;
    uint64_t n;
    const uint8_t *d;
    assert_int_equal(colo_gguf_get_arr(g, "arr.empty", &t, &n, &d), COLO_OK), assert_int_equal(n, 0);
    assert_int_equal(colo_gguf_get_arr(g, "nest.i32", &t, &n, &d), COLO_OK);
    assert_int_equal(t, COLO_GGUF_ARRAY), assert_int_equal(n, 2);
    uint32_t inner_t;
    uint64_t inner_n;
    int32_t x;
    memcpy(&inner_t, d, 4), memcpy(&inner_n, d + 4, 8), memcpy(&x, d + 16, 4);
    assert_int_equal(inner_t, COLO_GGUF_I32), assert_int_equal(inner_n, 2), assert_int_equal(x, 2);
    assert_int_equal(colo_gguf_get_arr(g, "nest.str", &t, &n, &d), COLO_OK), assert_int_equal(n, 3);
    assert_int_equal(colo_gguf_arr_str(g, "nest.str", 0, &s), COLO_EFORMAT);
    assert_int_equal(colo_gguf_get_arr(g, "nest.3", &t, &n, &d), COLO_OK), assert_int_equal(n, 1);
    const colo_gguf_tensor *q = colo_gguf_find_tensor(g, "four.d");
    assert_non_null(q);
    assert_int_equal(q->n_dims, 4);
    assert_int_equal(q->ne[3], 2);
    assert_int_equal(q->bytes, 12 * 34);
    assert_int_equal(q->offset % 64, 0);
    const colo_gguf_tensor *ids = colo_gguf_find_tensor(g, "ids");
    assert_int_equal(ids->type, COLO_I32);
    assert_int_equal(ids->bytes, 20);
    assert_int_equal(ids->offset % 64, 0);
    assert_int_equal(((const uint8_t *)ids->data)[3], (uint8_t)(3 * 7 + 1));
    int seen = 0;
    for (int i = 0; i < colo_gguf_n_kv(g); i++)
        seen += colo_gguf_kv_at(g, i) != NULL;
    assert_int_equal(seen, colo_gguf_n_kv(g));
    assert_null(colo_gguf_kv_at(g, colo_gguf_n_kv(g)));
    assert_null(colo_gguf_tensor_at(g, -1));
    assert_string_equal(colo_gguf_type_name(COLO_GGUF_F64), "f64");
    assert_string_equal(colo_gguf_type_name((colo_gguf_type)13), "?");
    colo_gguf_close(g);

    /* Version 2 has the same layout and is accepted. */
    size_t len;
    uint8_t *bytes = slurp(path, &len);
    bytes[4] = 2;
    char v2path[300];
    snprintf(v2path, sizeof v2path, "%s/v2.gguf", dir);
    spill(v2path, bytes, len);
    g = colo_gguf_open(v2path, err, sizeof err);
    assert_non_null(g);
    assert_int_equal(colo_gguf_version(g), 2);
    size_t header = colo_gguf_data_offset(g);
    colo_gguf_close(g);
    free(bytes);
    /* Flips in a header full of nested arrays. */
    flip_fuzz(path, header, 1000);
}

/* A file with one raw value (and one tensor): the open must fail naming what. */
static void expect_bad_value(const char *key, colo_gguf_type t, const void *v, size_t n, const char *want)
{
    char path[300], err[512] = "";
    snprintf(path, sizeof path, "%s/badval.gguf", dir);
    colo_gguf_writer *w = colo_gguf_writer_create();
    assert_int_equal(colo_gguf_writer_add_u32(w, "ok.before", 1), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_raw(w, key, t, v, n), COLO_OK);
    int64_t ne[1] = {8};
    assert_int_equal(colo_gguf_writer_add_tensor(w, "w", COLO_F32, 1, ne), COLO_OK);
    assert_int_equal(colo_gguf_writer_finish(w, path, fill_pattern, NULL, err, sizeof err), COLO_OK);
    colo_gguf_writer_free(w);
    colo_gguf *g = colo_gguf_open(path, err, sizeof err);
    if (g)
        fail_msg("%s was accepted", key);
    if (!strstr(err, want))
        fail_msg("'%s' not in '%s'", want, err);
}

static void test_bad_values(void **state)
{
    (void)state;
    uint8_t b[64], *p;
    uint32_t et;
    uint64_t n;
    /* A string longer than the file. */
    n = 1ull << 40;
    expect_bad_value("k.longstr", COLO_GGUF_STRING, &n, 8, "k.longstr");
    /* An unknown value type. */
    expect_bad_value("k.type", (colo_gguf_type)13, "", 0, "unknown value type 13");
    /* An array whose element count cannot fit (scalars, strings, arrays). */
    static const uint32_t ets[] = {COLO_GGUF_U8, COLO_GGUF_F64, COLO_GGUF_STRING, COLO_GGUF_ARRAY};
    for (int i = 0; i < 4; i++) {
        p = b, et = ets[i], n = UINT64_MAX / (i + 1);
        put_le(&p, &et, 4), put_le(&p, &n, 8);
        expect_bad_value("k.hugearr", COLO_GGUF_ARRAY, b, (size_t)(p - b), "k.hugearr");
    }
    /* An array of an unknown element type. */
    p = b, et = 77, n = 1;
    put_le(&p, &et, 4), put_le(&p, &n, 8);
    expect_bad_value("k.elt", COLO_GGUF_ARRAY, b, (size_t)(p - b), "element type 77");
    /* A string element running past the end of the file. */
    p = b, et = COLO_GGUF_STRING, n = 2;
    put_le(&p, &et, 4), put_le(&p, &n, 8);
    n = 1, put_le(&p, &n, 8), put_le(&p, "a", 1);
    n = 1ull << 33, put_le(&p, &n, 8);
    expect_bad_value("k.strs", COLO_GGUF_ARRAY, b, (size_t)(p - b), "k.strs");
    /* Arrays nested without end (each level one element of type array). */
    uint8_t deep[12 * 40];
    p = deep;
    for (int i = 0; i < 40; i++)
        et = COLO_GGUF_ARRAY, n = 1, put_le(&p, &et, 4), put_le(&p, &n, 8);
    expect_bad_value("k.deep", COLO_GGUF_ARRAY, deep, sizeof deep, "nested");
    /* general.alignment of the wrong type or not a power of two. */
    float fa = 32.0f;
    expect_bad_value("general.alignment", COLO_GGUF_F32, &fa, 4, "general.alignment");
    uint32_t a = 48;
    expect_bad_value("general.alignment", COLO_GGUF_U32, &a, 4, "power of two");
    /* The same key twice. */
    uint32_t one = 1;
    expect_bad_value("ok.before", COLO_GGUF_U32, &one, 4, "twice");
}

/* Tensor infos: dims, counts and types that are out of range. */
static void test_bad_tensor_infos(void **state)
{
    (void)state;
    char path[300], bad[300], err[512];
    snprintf(path, sizeof path, "%s/tinfo.gguf", dir);
    snprintf(bad, sizeof bad, "%s/tinfo-bad.gguf", dir);
    colo_gguf_writer *w = colo_gguf_writer_create();
    int64_t ne2[2] = {32, 4}, ne1[1] = {8};
    assert_int_equal(colo_gguf_writer_add_tensor(w, "mat", COLO_Q8_0, 2, ne2), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_tensor(w, "vec", COLO_F32, 1, ne1), COLO_OK);
    assert_int_equal(colo_gguf_writer_finish(w, path, fill_pattern, NULL, err, sizeof err), COLO_OK);
    colo_gguf_writer_free(w);
    size_t n;
    uint8_t *b = slurp(path, &n), *c = malloc(n);
    size_t mat = (size_t)((uint8_t *)memmem(b, n, "mat", 3) - b) + 3; /* n_dims of "mat" */
    struct {
        size_t at;
        uint64_t v[2]; /* written as bytes bytes */
        int bytes;
        const char *want;
    } cases[] = {
        {mat, {5}, 4, "5 dimensions"},
        {mat, {0}, 4, "0 dimensions"},
        {mat + 4, {0}, 8, "dimension 0"},                      /* ne0 = 0 */
        {mat + 4, {1ull << 41}, 8, "dimension 0"},             /* too large */
        {mat + 4, {1ull << 30, 1ull << 30}, 16, "dimension 1"}, /* the element count overflows the limit */
        {mat + 4, {1ull << 32, 1ull << 32}, 16, "dimension 1"}, /* ... and 64 bits */
        {mat + 4, {33}, 8, "whole number"},                    /* Q8_0 rows are blocks of 32 */
        {mat + 20, {1000}, 4, "type 1000"},
        {mat + 24, {1ull << 62}, 8, "mat"},                    /* offset past the file */
        {mat + 24, {UINT64_MAX - 31}, 8, "mat"},               /* offset + size wraps */
        {8, {3}, 8, "tensor 2"},                               /* one tensor more than written */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        memcpy(c, b, n);
        memcpy(c + cases[i].at, cases[i].v, (size_t)cases[i].bytes);
        spill(bad, c, n);
        err[0] = 0;
        colo_gguf *g = colo_gguf_open(bad, err, sizeof err);
        if (g)
            fail_msg("case %zu accepted", i);
        if (!strstr(err, cases[i].want))
            fail_msg("case %zu: '%s' not in '%s'", i, cases[i].want, err);
        assert_non_null(strstr(err, bad));
    }
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
        cmocka_unit_test(test_mkmodel_files_load), cmocka_unit_test(test_every_type),
        cmocka_unit_test(test_bad_values),        cmocka_unit_test(test_bad_tensor_infos),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
