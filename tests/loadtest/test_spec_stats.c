/* colo-loadtest's speculative decoding rows (loadtest/spec_stats.h): the
 * counters read from a /v1/stats body, per model, and their change over
 * a run; the table and the JSON report them, a model without counters
 * has no row. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loadtest/report.h"
#include "loadtest/spec_stats.h"

static const char *stats_at(int drafted, int accepted)
{
    static char body[512];
    snprintf(body, sizeof body,
             "{\"seq\":3,\"models\":[{\"name\":\"emb\"},"
             "{\"name\":\"big\",\"speculative\":{\"drafted_tokens\":%d,\"accepted_tokens\":%d,\"draft\":\"small\"}},"
             "{\"name\":\"chat\",\"speculative\":{\"drafted_tokens\":10,\"accepted_tokens\":4}}]}",
             drafted, accepted);
    return body;
}

static void test_parse_and_delta(void **state)
{
    (void)state;
    uint64_t d, a;
    char draft[128];
    assert_true(lt_spec_parse(stats_at(120, 90), "big", &d, &a, draft, sizeof draft));
    assert_int_equal(d, 120);
    assert_int_equal(a, 90);
    assert_string_equal(draft, "small");
    assert_true(lt_spec_parse(stats_at(120, 90), "chat", &d, &a, draft, sizeof draft));
    assert_int_equal(d, 10);
    assert_string_equal(draft, "");
    assert_false(lt_spec_parse(stats_at(1, 1), "emb", &d, &a, draft, sizeof draft));
    assert_false(lt_spec_parse(stats_at(1, 1), "none", &d, &a, draft, sizeof draft));
    assert_false(lt_spec_parse("not json", "big", &d, &a, draft, sizeof draft));
    assert_false(lt_spec_parse(stats_at(-1, 3), "big", &d, &a, draft, sizeof draft));

    lt_spec_row before[2] = {{.model = "big", .has = true, .drafted = 100, .accepted = 60},
                             {.model = "emb", .has = false}};
    lt_spec_row after[2] = {{.model = "big", .draft = "small", .has = true, .drafted = 340, .accepted = 240},
                            {.model = "emb", .has = false}};
    lt_spec_row run[2];
    lt_spec_delta(before, after, 2, run);
    assert_true(run[0].has);
    assert_int_equal(run[0].drafted, 240);
    assert_int_equal(run[0].accepted, 180);
    assert_string_equal(run[0].draft, "small");
    assert_false(run[1].has);
    /* counters that went back (the model reloaded): no row */
    after[0].drafted = 50;
    lt_spec_delta(before, after, 2, run);
    assert_false(run[0].has);
}

static void test_reported(void **state)
{
    (void)state;
    lt_spec_row rows[2] = {{.model = "big", .draft = "small", .has = true, .drafted = 240, .accepted = 180},
                           {.model = "emb", .has = false}};
    lt_report rep = {.url = "http://x", .scenario = "single", .spec = rows, .n_spec = 2};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    lt_report_table(f, &rep);
    fclose(f);
    assert_non_null(strstr(text, "speculative decoding"));
    const char *row = strstr(text, "\nbig ");
    assert_non_null(row);
    assert_non_null(strstr(row, "small"));
    assert_non_null(strstr(row, "240"));
    assert_non_null(strstr(row, "180"));
    assert_non_null(strstr(row, "75.0%"));
    assert_null(strstr(text, "\nemb "));
    free(text);

    char path[] = "/tmp/colo-test-spec-stats-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char err[256];
    assert_int_equal(lt_report_json(path, &rep, err, sizeof err), LT_OK);
    json_t *j = json_load_file(path, 0, NULL);
    unlink(path);
    assert_non_null(j);
    json_t *sp = json_object_get(j, "speculative");
    assert_int_equal(json_array_size(sp), 1);
    json_t *r0 = json_array_get(sp, 0);
    assert_string_equal(json_string_value(json_object_get(r0, "model")), "big");
    assert_string_equal(json_string_value(json_object_get(r0, "draft")), "small");
    assert_int_equal(json_integer_value(json_object_get(r0, "drafted_tokens")), 240);
    assert_int_equal(json_integer_value(json_object_get(r0, "accepted_tokens")), 180);
    assert_true(json_real_value(json_object_get(r0, "acceptance_rate")) == 0.75);
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_parse_and_delta), cmocka_unit_test(test_reported)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
