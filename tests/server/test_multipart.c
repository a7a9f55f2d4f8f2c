/* multipart/form-data bodies (server/multipart.h): random parts, with
 * random bytes (CR, LF and dashes among them), come back whole; broken
 * forms are refused with a message, never read past their end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/multipart.h"
#include "tests/test_seed.h"

#define CT "multipart/form-data; boundary=\"b0undary-x\""
#define DELIM "--b0undary-x"

static void test_random_parts_round_trip(void **state)
{
    (void)state;
    srand((unsigned)colo_test_seed("test_random_parts_round_trip", 53));
    for (int round = 0; round < 200; round++) {
        int n = 1 + rand() % 6;
        char *data[6];
        size_t len[6];
        char *body = malloc(64 * 1024);
        size_t o = 0;
        for (int i = 0; i < n; i++) {
            len[i] = (size_t)(rand() % 2000);
            data[i] = malloc(len[i] + 1);
            static const char alphabet[] = "ab-\r\n\0x-";
            for (size_t k = 0; k < len[i]; k++)
                data[i][k] = alphabet[rand() % (sizeof alphabet - 1)];
            o += (size_t)sprintf(body + o, "%s" DELIM "\r\nContent-Disposition: form-data; name=\"p%d\"%s\r\n\r\n",
                                 i ? "\r\n" : "", i, i % 2 ? "; filename=\"dir/f.jsonl\"" : "");
            memcpy(body + o, data[i], len[i]);
            o += len[i];
        }
        o += (size_t)sprintf(body + o, "\r\n" DELIM "--\r\n");
        colo_multipart_part parts[8];
        char err[128];
        assert_int_equal(colo_multipart_parse(CT, body, o, parts, 8, err, sizeof err), n);
        for (int i = 0; i < n; i++) {
            char name[8];
            snprintf(name, sizeof name, "p%d", i);
            const colo_multipart_part *p = colo_multipart_find(parts, n, name);
            assert_non_null(p);
            assert_int_equal(p->len, len[i]);
            assert_memory_equal(p->data, data[i], len[i]);
            if (i % 2) {
                assert_int_equal(p->filename_len, 11);
                assert_memory_equal(p->filename, "dir/f.jsonl", 11);
            } else {
                assert_null(p->filename);
            }
            free(data[i]);
        }
        /* every cut short form is refused */
        size_t cut = (size_t)rand() % o;
        assert_int_equal(colo_multipart_parse(CT, body, cut, parts, 8, err, sizeof err), -1);
        assert_true(strlen(err) > 0);
        free(body);
    }
}

static void test_refusals(void **state)
{
    (void)state;
    colo_multipart_part parts[2];
    char err[128];
    const char *one = DELIM "\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n" DELIM "--\r\n";
    assert_int_equal(colo_multipart_parse(CT, one, strlen(one), parts, 2, err, sizeof err), 1);
    assert_int_equal(colo_multipart_parse("application/json", one, strlen(one), parts, 2, err, sizeof err), -1);
    assert_int_equal(colo_multipart_parse(NULL, one, strlen(one), parts, 2, err, sizeof err), -1);
    assert_int_equal(colo_multipart_parse("multipart/form-data", one, strlen(one), parts, 2, err, sizeof err), -1);
    assert_int_equal(colo_multipart_parse(CT, one, strlen(one), parts, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "parts"));
    const char *no_end = DELIM "\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx";
    assert_int_equal(colo_multipart_parse(CT, no_end, strlen(no_end), parts, 2, err, sizeof err), -1);
    assert_int_equal(colo_multipart_parse(CT, "", 0, parts, 2, err, sizeof err), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_parts_round_trip),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
