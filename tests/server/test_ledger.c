/* The usage ledger: rows summed per hour, grouping, a tenant's filter,
 * the range, reopening, and the time and group_by parsers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/ledger.h"
#include "tests/test_seed.h"

typedef struct rows {
    colo_usage_row r[32];
    int n;
} rows;

static void collect(void *ud, const colo_usage_row *row)
{
    rows *s = ud;
    if (s->n < 32)
        s->r[s->n++] = *row;
}

static colo_usage_row row(const char *org, const char *project, const char *model, int status, int prompt,
                          int completion, double device_s)
{
    colo_usage_row r = {.status = status, .requests = 1, .prompt_tokens = prompt, .completion_tokens = completion,
                        .queue_seconds = 0.5, .device_seconds = device_s};
    snprintf(r.organization, sizeof r.organization, "%s", org);
    snprintf(r.project, sizeof r.project, "%s", project);
    snprintf(r.key, sizeof r.key, "k");
    snprintf(r.model, sizeof r.model, "%s", model);
    return r;
}

static void test_record_and_query(void **state)
{
    (void)state;
    char path[256], db[300], err[256];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/colo-ledger-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(path));
    snprintf(db, sizeof db, "%s/u.sqlite", path);
    colo_ledger *l = colo_ledger_open(db, true, err, sizeof err);
    assert_non_null(l);
    const int64_t h = 1795471200; /* an hour's start */
    int n1 = 3 + rand() % 10, n2 = 1 + rand() % 5;
    for (int i = 0; i < n1; i++) {
        colo_usage_row r = row("acme", "search", "chat", 200, 10 + i, 5, 0.25);
        assert_int_equal(colo_ledger_record(l, h + 60 * i, &r, err, sizeof err), COLO_OK);
    }
    for (int i = 0; i < n2; i++) {
        colo_usage_row r = row("acme", "ads", "chat", 429, 0, 0, 0);
        assert_int_equal(colo_ledger_record(l, h + 3600 + i, &r, err, sizeof err), COLO_OK);
    }
    colo_usage_row r = row("globex", "bi", "emb", 200, 7, 0, 1.5);
    assert_int_equal(colo_ledger_record(l, h + 7200, &r, err, sizeof err), COLO_OK);
    colo_ledger_close(l);

    l = colo_ledger_open(db, false, err, sizeof err); /* what was committed is there after reopening */
    assert_non_null(l);
    rows s = {0};
    assert_int_equal(colo_ledger_query(l, 0, h + 100000, 0, NULL, NULL, collect, &s, err, sizeof err), COLO_OK);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.r[0].requests, n1 + n2 + 1);
    assert_int_equal(s.r[0].errors, n2);
    assert_int_equal(s.r[0].prompt_tokens, 10 * n1 + n1 * (n1 - 1) / 2 + 7);
    assert_int_equal(s.r[0].completion_tokens, 5 * n1);
    assert_true(s.r[0].device_seconds > 0.25 * n1 + 1.5 - 1e-9 && s.r[0].device_seconds < 0.25 * n1 + 1.5 + 1e-9);

    memset(&s, 0, sizeof s);
    assert_int_equal(colo_ledger_query(l, 0, h + 100000, COLO_USAGE_BY_ORGANIZATION | COLO_USAGE_BY_PROJECT, NULL,
                                       NULL, collect, &s, err, sizeof err),
                     COLO_OK);
    assert_int_equal(s.n, 3);
    assert_string_equal(s.r[0].project, "ads");
    assert_int_equal(s.r[0].requests, n2);
    assert_string_equal(s.r[1].project, "search");
    assert_int_equal(s.r[1].requests, n1);
    assert_string_equal(s.r[2].organization, "globex");
    assert_string_equal(s.r[2].model, ""); /* not grouped by model */

    memset(&s, 0, sizeof s); /* a tenant sees its own rows only */
    assert_int_equal(colo_ledger_query(l, 0, h + 100000, COLO_USAGE_BY_HOUR, "acme", "search", collect, &s, err,
                                       sizeof err),
                     COLO_OK);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.r[0].hour_s, h);
    assert_int_equal(s.r[0].requests, n1);

    memset(&s, 0, sizeof s); /* hours starting inside [from, to) */
    assert_int_equal(colo_ledger_query(l, h + 3600, h + 7200, COLO_USAGE_BY_HOUR, NULL, NULL, collect, &s, err,
                                       sizeof err),
                     COLO_OK);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.r[0].requests, n2);
    assert_int_equal(s.r[0].status, 0);
    colo_ledger_close(l);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
}

static void test_open_errors(void **state)
{
    (void)state;
    char err[256] = "";
    assert_null(colo_ledger_open("/nonexistent-dir/x/u.sqlite", true, err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent-dir/x/u.sqlite"));
    assert_null(colo_ledger_open("/nonexistent-dir/u.sqlite", false, err, sizeof err));
}

static void test_parsers(void **state)
{
    (void)state;
    int64_t t;
    assert_int_equal(colo_usage_parse_time("2026-11-23", &t), COLO_OK);
    assert_int_equal(t, 1795392000);
    assert_int_equal(colo_usage_parse_time("2026-11-23T10", &t), COLO_OK);
    assert_int_equal(t, 1795392000 + 36000);
    assert_int_equal(colo_usage_parse_time("2026-11-23T10:30:05Z", &t), COLO_OK);
    assert_int_equal(t, 1795392000 + 36000 + 1805);
    assert_int_equal(colo_usage_parse_time("1795392000", &t), COLO_OK);
    assert_int_equal(t, 1795392000);
    assert_int_equal(colo_usage_parse_time("2026-13-01", &t), COLO_EINVAL);
    assert_int_equal(colo_usage_parse_time("yesterday", &t), COLO_EINVAL);
    assert_int_equal(colo_usage_parse_time("2026-11-23T10:30:05Zx", &t), COLO_EINVAL);
    unsigned g;
    assert_int_equal(colo_usage_parse_group("tenant,model,day", &g), COLO_OK);
    assert_int_equal(g, COLO_USAGE_BY_ORGANIZATION | COLO_USAGE_BY_PROJECT | COLO_USAGE_BY_MODEL | COLO_USAGE_BY_DAY);
    assert_int_equal(colo_usage_parse_group("hour,day", &g), COLO_EINVAL);
    assert_int_equal(colo_usage_parse_group("model,;drop", &g), COLO_EINVAL);
    assert_int_equal(colo_usage_parse_group("", &g), COLO_OK);
    assert_int_equal(g, 0u);
}

int main(void)
{
    srand((unsigned)colo_test_seed("test_ledger", 143));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_and_query),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_parsers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
