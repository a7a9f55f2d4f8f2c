/* The batches' store (server/batch_store.h) beside a usage ledger: a
 * line's result, the batch's object and the line's usage row commit
 * together or not at all (a line done twice is refused, and bills
 * nothing the second time); what a tenant stores is found only with its
 * owner; a ledger made before batches gets its batch columns. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/batch_store.h"
#include "server/tenants/ledger.h"
#include "tests/test_seed.h"

typedef struct fx {
    char dir[256], db[300], files[300];
} fx;

static void fx_make(fx *f)
{
    const char *t = getenv("TMPDIR");
    snprintf(f->dir, sizeof f->dir, "%s/colo-bs-XXXXXX", t && *t ? t : "/tmp");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->db, sizeof f->db, "%s/usage.sqlite", f->dir);
    snprintf(f->files, sizeof f->files, "%s/files", f->dir);
}

static void fx_free(fx *f)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    assert_int_equal(system(cmd), 0);
}

static int64_t one_int(const char *db, const char *sql)
{
    sqlite3 *h = NULL;
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(h, sql, -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    sqlite3_close(h);
    return v;
}

static void test_old_ledger_gets_batch_columns(void **state)
{
    (void)state;
    fx f;
    fx_make(&f);
    sqlite3 *h = NULL;
    assert_int_equal(sqlite3_open(f.db, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h,
                                  "CREATE TABLE usage_hourly (hour INTEGER NOT NULL, organization TEXT NOT NULL,"
                                  " project TEXT NOT NULL, key TEXT NOT NULL, model TEXT NOT NULL, status INTEGER NOT NULL,"
                                  " requests INTEGER NOT NULL DEFAULT 0, prompt_tokens INTEGER NOT NULL DEFAULT 0,"
                                  " completion_tokens INTEGER NOT NULL DEFAULT 0, queue_seconds REAL NOT NULL DEFAULT 0,"
                                  " device_seconds REAL NOT NULL DEFAULT 0,"
                                  " PRIMARY KEY (hour, organization, project, key, model, status)) WITHOUT ROWID;"
                                  "INSERT INTO usage_hourly VALUES (3600, 'o', 'p', 'k', 'm', 200, 7, 1, 2, 0, 0);",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(h);
    char err[256];
    colo_ledger *l = colo_ledger_open(f.db, true, 100, err, sizeof err);
    assert_non_null(l);
    colo_usage_row r = {.status = 200, .requests = 1, .prompt_tokens = 3, .completion_tokens = 4, .batch_requests = 1,
                        .batch_tokens = 7};
    strcpy(r.organization, "o"), strcpy(r.project, "p"), strcpy(r.key, "k"), strcpy(r.model, "m");
    assert_int_equal(colo_ledger_record(l, 3600 + 5, &r, err, sizeof err), COLO_OK);
    colo_ledger_close(l);
    assert_int_equal(one_int(f.db, "SELECT requests FROM usage_hourly"), 8);
    assert_int_equal(one_int(f.db, "SELECT batch_requests FROM usage_hourly"), 1);
    assert_int_equal(one_int(f.db, "SELECT batch_tokens FROM usage_hourly"), 7);
    fx_free(&f);
}

static void test_line_done_once(void **state)
{
    (void)state;
    fx f;
    fx_make(&f);
    char err[256];
    colo_ledger *l = colo_ledger_open(f.db, true, 100, err, sizeof err);
    assert_non_null(l);
    colo_batch_store *bs = colo_batch_store_open(f.db, f.files, true, err, sizeof err);
    assert_non_null(bs);
    colo_batch_owner a = {"acme", "search", "a"}, b = {"globex", "bi", "b"};
    json_t *obj = json_pack("{s:s,s:s,s:{s:i,s:i,s:i}}", "id", "batch_1", "status", "in_progress", "request_counts",
                            "total", 9, "completed", 0, "failed", 0);
    assert_int_equal(colo_batch_store_put_batch(bs, &a, obj), COLO_OK);
    uint64_t seed = colo_test_seed("test_line_done_once", 53);
    srand((unsigned)seed);
    int n = 1 + rand() % 9, billed = 0;
    for (int i = 0; i < n; i++) {
        colo_usage_row u = {.status = 200, .requests = 1, .prompt_tokens = 1 + rand() % 50, .batch_requests = 1};
        u.batch_tokens = u.prompt_tokens;
        strcpy(u.organization, "acme"), strcpy(u.project, "search"), strcpy(u.key, "a"), strcpy(u.model, "m");
        json_object_set_new(json_object_get(obj, "request_counts"), "completed", json_integer(i + 1));
        assert_int_equal(colo_batch_store_line_done(bs, &a, obj, i, true, "{\"custom_id\":\"x\"}", &u), COLO_OK);
        billed += (int)u.prompt_tokens;
        /* the same line again: refused whole, nothing billed, the object unchanged */
        json_object_set_new(json_object_get(obj, "request_counts"), "completed", json_integer(100));
        assert_int_equal(colo_batch_store_line_done(bs, &a, obj, i, true, "{}", &u), COLO_EIO);
        json_object_set_new(json_object_get(obj, "request_counts"), "completed", json_integer(i + 1));
    }
    assert_int_equal(one_int(f.db, "SELECT SUM(batch_requests) FROM usage_hourly"), n);
    assert_int_equal(one_int(f.db, "SELECT SUM(prompt_tokens) FROM usage_hourly"), billed);
    assert_int_equal(one_int(f.db, "SELECT COUNT(*) FROM batch_lines"), n);
    json_t *got = colo_batch_store_get_batch(bs, &a, "batch_1");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(got, "request_counts"), "completed")), n);
    json_decref(got);
    /* another tenant finds nothing */
    assert_null(colo_batch_store_get_batch(bs, &b, "batch_1"));
    bool more = true;
    json_t *list = colo_batch_store_list_batches(bs, &b, NULL, 10, &more);
    assert_int_equal(json_array_size(list), 0);
    assert_false(more);
    json_decref(list);
    json_t *file = json_pack("{s:s,s:s,s:i}", "id", "file-1", "purpose", "batch", "created_at", 1);
    assert_int_equal(colo_batch_store_put_file(bs, &a, file), COLO_OK);
    assert_null(colo_batch_store_get_file(bs, &b, "file-1"));
    assert_int_equal(colo_batch_store_delete_file(bs, &b, "file-1"), COLO_EINVAL);
    json_t *mine = colo_batch_store_get_file(bs, &a, "file-1");
    assert_non_null(mine);
    json_decref(mine);
    assert_int_equal(colo_batch_store_delete_file(bs, &a, "file-1"), COLO_OK);
    assert_null(colo_batch_store_get_file(bs, &a, "file-1"));
    json_decref(file);
    json_decref(obj);
    colo_batch_store_close(bs);
    colo_ledger_close(l);
    fx_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_old_ledger_gets_batch_columns),
        cmocka_unit_test(test_line_done_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
