/* colo-loadtest's speculative decoding rows (loadtest/spec_stats.h): the
 * counters read from a /v1/stats body, per model and by source, and their
 * change over a run; the table and the JSON report them, a model without
 * counters has no row, a source the server does not list no line. */
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

/* big drafts by lookup (l_d drafted, l_a accepted) and with its draft
 * model (the rest); chat lists no sources. */
static const char *stats_at(int drafted, int accepted, int l_d, int l_a)
{
    static char body[1024];
    snprintf(body, sizeof body,
             "{\"seq\":3,\"models\":[{\"name\":\"emb\"},"
             "{\"name\":\"big\",\"speculative\":{\"drafted_tokens\":%d,\"accepted_tokens\":%d,\"draft\":\"small\","
             "\"sources\":{\"lookup\":{\"drafted_tokens\":%d,\"accepted_tokens\":%d},"
             "\"draft\":{\"drafted_tokens\":%d,\"accepted_tokens\":%d}}}},"
             "{\"name\":\"chat\",\"speculative\":{\"drafted_tokens\":10,\"accepted_tokens\":4}}]}",
             drafted, accepted, l_d, l_a, drafted - l_d, accepted - l_a);
    return body;
}

static void test_parse_and_delta(void **state)
{
    (void)state;
    lt_spec_row r = {.model = "x"};
    assert_true(lt_spec_parse(stats_at(120, 90, 20, 5), "big", &r));
    assert_true(r.has);
    assert_int_equal(r.drafted, 120);
    assert_int_equal(r.accepted, 90);
    assert_string_equal(r.draft, "small");
    assert_string_equal(r.model, "x");
    assert_true(r.src[LT_SPEC_LOOKUP].has);
    assert_int_equal(r.src[LT_SPEC_LOOKUP].drafted, 20);
    assert_int_equal(r.src[LT_SPEC_LOOKUP].accepted, 5);
    assert_false(r.src[LT_SPEC_SUFFIX].has);
    assert_true(r.src[LT_SPEC_DRAFT].has);
    assert_int_equal(r.src[LT_SPEC_DRAFT].drafted, 100);
    assert_int_equal(r.src[LT_SPEC_DRAFT].accepted, 85);
    assert_true(lt_spec_parse(stats_at(120, 90, 20, 5), "chat", &r));
    assert_int_equal(r.drafted, 10);
    assert_string_equal(r.draft, "");
    for (int k = 0; k < LT_SPEC_SOURCES; k++)
        assert_false(r.src[k].has);
    assert_false(lt_spec_parse(stats_at(1, 1, 0, 0), "emb", &r));
    assert_false(lt_spec_parse(stats_at(1, 1, 0, 0), "none", &r));
    assert_false(lt_spec_parse("not json", "big", &r));
    assert_false(lt_spec_parse(stats_at(-1, 3, 0, 0), "big", &r));
    /* a source's negative count: that source has none, the model its row */
    assert_true(lt_spec_parse(stats_at(10, 3, 11, 0), "big", &r));
    assert_true(r.src[LT_SPEC_LOOKUP].has);
    assert_false(r.src[LT_SPEC_DRAFT].has);

    lt_spec_row before[2] = {{.model = "big", .has = true, .drafted = 100, .accepted = 60,
                              .src = {[LT_SPEC_LOOKUP] = {true, 40, 10}, [LT_SPEC_DRAFT] = {true, 60, 50}}},
                             {.model = "emb", .has = false}};
    lt_spec_row after[2] = {{.model = "big", .draft = "small", .has = true, .drafted = 340, .accepted = 240,
                             .src = {[LT_SPEC_LOOKUP] = {true, 100, 40}, [LT_SPEC_SUFFIX] = {true, 5, 5},
                                     [LT_SPEC_DRAFT] = {true, 235, 195}}},
                            {.model = "emb", .has = false}};
    lt_spec_row run[2];
    lt_spec_delta(before, after, 2, run);
    assert_true(run[0].has);
    assert_int_equal(run[0].drafted, 240);
    assert_int_equal(run[0].accepted, 180);
    assert_string_equal(run[0].draft, "small");
    assert_true(run[0].src[LT_SPEC_LOOKUP].has);
    assert_int_equal(run[0].src[LT_SPEC_LOOKUP].drafted, 60);
    assert_int_equal(run[0].src[LT_SPEC_LOOKUP].accepted, 30);
    assert_false(run[0].src[LT_SPEC_SUFFIX].has); /* not there before */
    assert_int_equal(run[0].src[LT_SPEC_DRAFT].drafted, 175);
    assert_int_equal(run[0].src[LT_SPEC_DRAFT].accepted, 145);
    assert_false(run[1].has);
    /* counters that went back (the model reloaded): no row */
    after[0].drafted = 50;
    lt_spec_delta(before, after, 2, run);
    assert_false(run[0].has);
}

static void test_reported(void **state)
{
    (void)state;
    lt_spec_row rows[2] = {{.model = "big", .draft = "small", .has = true, .drafted = 240, .accepted = 180,
                            .src = {[LT_SPEC_LOOKUP] = {true, 40, 10}, [LT_SPEC_DRAFT] = {true, 200, 170}}},
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
    assert_non_null(strstr(row, " all "));
    const char *lookup = strstr(row + 1, "\nbig ");
    assert_non_null(lookup);
    assert_non_null(strstr(lookup, " lookup "));
    assert_non_null(strstr(lookup, "25.0%"));
    const char *draft = strstr(lookup + 1, "\nbig ");
    assert_non_null(draft);
    assert_true(strstr(draft, " draft ") && strstr(draft, "170") && strstr(draft, "85.0%"));
    assert_null(strstr(text, " suffix "));
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
    json_t *by = json_object_get(r0, "sources");
    assert_int_equal(json_object_size(by), 2);
    json_t *l = json_object_get(by, "lookup"), *d = json_object_get(by, "draft");
    assert_int_equal(json_integer_value(json_object_get(l, "drafted_tokens")), 40);
    assert_true(json_real_value(json_object_get(l, "acceptance_rate")) == 0.25);
    assert_int_equal(json_integer_value(json_object_get(d, "accepted_tokens")), 170);
    assert_null(json_object_get(by, "suffix"));
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_parse_and_delta), cmocka_unit_test(test_reported)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
