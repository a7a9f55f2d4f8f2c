/* safetensors reader: a valid file written here reads back exactly; every
 * kind of corruption is a clean COLO_EFORMAT with a message naming the file
 * (and the tensor), never a crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/format/safetensors.h"

static char g_path[64];

/* Writes an 8-byte length (hlen, or strlen(header) when hlen is
 * UINT64_MAX), the header, then data_len bytes of data. */
static void write_file(uint64_t hlen, const char *header, const void *data, size_t data_len)
{
    FILE *f = fopen(g_path, "wb");
    assert_non_null(f);
    if (hlen == UINT64_MAX)
        hlen = strlen(header);
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(hlen >> (8 * i));
    assert_int_equal(fwrite(le, 1, 8, f), 8);
    size_t hl = strlen(header);
    assert_int_equal(fwrite(header, 1, hl, f), hl);
    if (data_len)
        assert_int_equal(fwrite(data, 1, data_len, f), data_len);
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_path, sizeof g_path, "/tmp/colo_st_XXXXXX");
    int fd = mkstemp(g_path);
    if (fd < 0)
        return -1;
    close(fd);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(g_path);
    return 0;
}

static void test_valid_file(void **state)
{
    (void)state;
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[3] = {0x3C00, 0x4000, 0xC000}; /* F16 1, 2, -2 */
    unsigned char data[24 + 6 + 8];
    memcpy(data, a, 24);
    memcpy(data + 24, b, 6);
    int64_t pos = 7;
    memcpy(data + 30, &pos, 8);
    write_file(UINT64_MAX,
               "{\"__metadata__\":{\"format\":\"pt\"},"
               "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
               "\"b\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[24,30]},"
               "\"p\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[30,38]},"
               "\"e\":{\"dtype\":\"BF16\",\"shape\":[0,4],\"data_offsets\":[38,38]}}",
               data, sizeof data);
    colo_safetensors *f;
    char err[256] = "";
    assert_int_equal(colo_safetensors_open(g_path, &f, err, sizeof err), COLO_OK);
    assert_int_equal(colo_safetensors_n_tensors(f), 4);
    const colo_safetensors_tensor *w = colo_safetensors_find(f, "w"), *bt = colo_safetensors_find(f, "b"),
                                  *p = colo_safetensors_find(f, "p"), *e = colo_safetensors_find(f, "e");
    assert_non_null(w);
    assert_non_null(bt);
    assert_non_null(p);
    assert_non_null(e);
    assert_null(colo_safetensors_find(f, "__metadata__"));
    assert_null(colo_safetensors_find(f, "x"));
    assert_true(w->computable && w->type == COLO_F32);
    assert_int_equal(w->n_dims, 2);
    assert_int_equal(w->shape[0], 2);
    assert_int_equal(w->shape[1], 3);
    assert_int_equal(w->n_elements, 6);
    assert_int_equal(w->bytes, 24);
    assert_memory_equal(w->data, a, 24);
    assert_true(bt->computable && bt->type == COLO_F16);
    assert_memory_equal(bt->data, b, 6);
    assert_false(p->computable);
    assert_string_equal(p->dtype_name, "I64");
    assert_int_equal(p->n_dims, 0);
    assert_int_equal(p->n_elements, 1);
    assert_memory_equal(p->data, &pos, 8);
    assert_true(e->computable && e->type == COLO_BF16);
    assert_int_equal(e->n_elements, 0);
    /* iteration is in data order */
    int64_t last = -1;
    for (int i = 0; i < colo_safetensors_n_tensors(f); i++) {
        const colo_safetensors_tensor *t = colo_safetensors_tensor_at(f, i);
        assert_true((int64_t)t->offset >= last);
        last = (int64_t)t->offset;
    }
    assert_null(colo_safetensors_tensor_at(f, 4));
    colo_safetensors_release(f, w);
    assert_memory_equal(w->data, a, 24); /* released pages read back from the file */
    colo_safetensors_close(f);
    colo_safetensors_close(NULL);
}

/* Opens the file written last; expects COLO_EFORMAT and a message naming the
 * file and containing want. */
static void expect_format_error(const char *want)
{
    colo_safetensors *f = (colo_safetensors *)1;
    char err[512] = "";
    assert_int_equal(colo_safetensors_open(g_path, &f, err, sizeof err), COLO_EFORMAT);
    assert_null(f);
    if (!strstr(err, g_path) || !strstr(err, want))
        fail_msg("message \"%s\" lacks \"%s\"", err, want);
}

static const char valid_hdr[] = "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";

static void test_truncated_header(void **state)
{
    (void)state;
    FILE *fp = fopen(g_path, "wb");
    assert_non_null(fp);
    fwrite("\x10\x00\x00", 1, 3, fp);
    fclose(fp);
    expect_format_error("header length");
    /* the header cut short: its length runs past the end */
    float d[2] = {0};
    write_file(strlen(valid_hdr) + 9, valid_hdr, d, 0);
    expect_format_error("past the end");
    /* data cut short */
    write_file(UINT64_MAX, valid_hdr, d, 4);
    expect_format_error("tensor t");
}

static void test_header_length_past_eof(void **state)
{
    (void)state;
    float d[2] = {0};
    write_file(1ull << 40, valid_hdr, d, sizeof d);
    expect_format_error("header length");
    write_file(UINT64_MAX - 1, valid_hdr, d, sizeof d);
    expect_format_error("header length");
}

static void test_bad_json(void **state)
{
    (void)state;
    float d[2] = {0};
    write_file(UINT64_MAX, "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],", d, sizeof d);
    expect_format_error("JSON");
    write_file(UINT64_MAX, "[1, 2]", d, sizeof d);
    expect_format_error("object");
    write_file(UINT64_MAX, "{\"t\": 5}", d, sizeof d);
    expect_format_error("tensor t");
    write_file(UINT64_MAX, "{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", d, sizeof d);
    expect_format_error("tensor t");
    write_file(UINT64_MAX, "{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", d, sizeof d);
    expect_format_error("tensor t");
    write_file(UINT64_MAX, "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", d, sizeof d);
    expect_format_error("tensor t");
    /* duplicate keys */
    write_file(UINT64_MAX,
               "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               d, sizeof d);
    expect_format_error("JSON");
    /* the length covers only part of the JSON */
    write_file(10, valid_hdr, d, sizeof d);
    expect_format_error("JSON");
}

static void test_bad_offsets(void **state)
{
    (void)state;
    float d[4] = {0};
    write_file(UINT64_MAX, "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,24]}}", d, sizeof d);
    expect_format_error("tensor t"); /* past the data section (16 bytes) */
    write_file(UINT64_MAX, "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", d, sizeof d);
    expect_format_error("tensor t"); /* begin > end */
    write_file(UINT64_MAX, "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}", d, sizeof d);
    expect_format_error("tensor t"); /* wrong size */
    write_file(UINT64_MAX,
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               d, sizeof d);
    expect_format_error("overlaps");
    write_file(UINT64_MAX,
               "{\"t\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,16]}}", d,
               sizeof d);
    expect_format_error("tensor t"); /* element count overflows */
    write_file(UINT64_MAX, "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,9223372036854775807]}}",
               d, sizeof d);
    expect_format_error("tensor t");
    /* offsets past int64 are refused by the JSON parser itself */
    write_file(UINT64_MAX, "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,18446744073709551615]}}",
               d, sizeof d);
    expect_format_error("JSON");
}

static void test_bad_dtype_and_dims(void **state)
{
    (void)state;
    float d[2] = {0};
    write_file(UINT64_MAX, "{\"t\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", d, sizeof d);
    expect_format_error("unknown dtype");
    write_file(UINT64_MAX, "{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}", d,
               sizeof d);
    expect_format_error("dimensions");
}

static void test_missing_file(void **state)
{
    (void)state;
    colo_safetensors *f;
    char err[256] = "";
    assert_int_equal(colo_safetensors_open("/nonexistent/model.safetensors", &f, err, sizeof err), COLO_EIO);
    assert_null(f);
    assert_non_null(strstr(err, "/nonexistent/model.safetensors"));
}

/* Random corruption of a valid file: open either succeeds with every
 * tensor inside the file or fails with COLO_EFORMAT. */
static void test_random_corruption(void **state)
{
    (void)state;
    unsigned seed = 12345;
    const char *env = getenv("COLO_TEST_SEED");
    if (env)
        seed = (unsigned)strtoul(env, NULL, 10);
    printf("seed %u\n", seed);
    srand(seed);
    const char *hdr = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                      "\"b\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[16,24]}}";
    size_t hl = strlen(hdr), size = 8 + hl + 24;
    unsigned char *buf = calloc(1, size);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, hdr, hl);
    for (int iter = 0; iter < 500; iter++) {
        unsigned char *c = malloc(size);
        assert_non_null(c);
        memcpy(c, buf, size);
        int flips = 1 + rand() % 3;
        for (int k = 0; k < flips; k++)
            c[(size_t)rand() % (8 + hl)] = (unsigned char)(rand() % 2 ? rand() : "0123456789[]{},:\""[rand() % 17]);
        size_t len = rand() % 4 ? size : (size_t)rand() % size;
        FILE *f = fopen(g_path, "wb");
        assert_non_null(f);
        fwrite(c, 1, len, f);
        fclose(f);
        colo_safetensors *st;
        char err[512];
        colo_status rc = colo_safetensors_open(g_path, &st, err, sizeof err);
        assert_true(rc == COLO_OK || rc == COLO_EFORMAT);
        if (rc == COLO_OK) {
            for (int i = 0; i < colo_safetensors_n_tensors(st); i++) {
                const colo_safetensors_tensor *t = colo_safetensors_tensor_at(st, i);
                assert_true(t->offset + t->bytes <= len);
                volatile unsigned char sum = 0;
                for (size_t b = 0; b < t->bytes; b++)
                    sum ^= ((const unsigned char *)t->data)[b];
                (void)sum;
            }
        }
        colo_safetensors_close(st);
        free(c);
    }
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_file),
        cmocka_unit_test(test_truncated_header),
        cmocka_unit_test(test_header_length_past_eof),
        cmocka_unit_test(test_bad_json),
        cmocka_unit_test(test_bad_offsets),
        cmocka_unit_test(test_bad_dtype_and_dims),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_random_corruption),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
