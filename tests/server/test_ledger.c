/* The usage ledger: rows summed per hour, grouping, a tenant's filter,
 * the range, reopening, and the time and group_by parsers; and a database
 * another process holds locked (a child process with a write transaction
 * open): recording does not wait for it, no row is lost once the lock is
 * released, opening does not fail on it, and closing waits for it only so
 * long. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server/tenants/ledger.h"
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
    colo_ledger *l = colo_ledger_open(db, true, 5000, err, sizeof err);
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

    l = colo_ledger_open(db, false, 5000, err, sizeof err); /* what was committed is there after reopening */
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
    assert_null(colo_ledger_open("/nonexistent-dir/x/u.sqlite", true, 100, err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent-dir/x/u.sqlite"));
    assert_null(colo_ledger_open("/nonexistent-dir/u.sqlite", false, 100, err, sizeof err));
}

/* ---- a lock held by another process ---------------------------------------------------- */

typedef struct locker {
    pid_t pid;
    int release_fd; /* write (or close) to let it go */
} locker;

/* A child process that opens db and holds a write transaction (BEGIN
 * IMMEDIATE) until released, as an operator's sqlite3 session would. */
static locker lock_db(const char *db)
{
    int ready[2], release[2];
    assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
    assert_int_equal(pipe2(release, O_CLOEXEC), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        close(release[1]);
        sqlite3 *h = NULL;
        char ok = sqlite3_open(db, &h) == SQLITE_OK && sqlite3_exec(h, "BEGIN IMMEDIATE;", NULL, NULL, NULL) == SQLITE_OK
                      ? 'y'
                      : 'n';
        if (write(ready[1], &ok, 1) != 1)
            _exit(2);
        char c;
        while (read(release[0], &c, 1) < 0 && errno == EINTR)
            ;
        sqlite3_exec(h, "ROLLBACK;", NULL, NULL, NULL);
        sqlite3_close(h);
        _exit(0);
    }
    close(ready[1]);
    close(release[0]);
    char ok = 0;
    assert_int_equal(read(ready[0], &ok, 1), 1);
    close(ready[0]);
    assert_int_equal(ok, 'y');
    return (locker){pid, release[1]};
}

static void unlock_db(locker *k)
{
    close(k->release_fd);
    int st = 0;
    assert_int_equal(waitpid(k->pid, &st, 0), k->pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void tmp_db(char *dir, size_t dcap, char *db, size_t cap)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, dcap, "%s/colo-ledger-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(dir));
    snprintf(db, cap, "%s/u.sqlite", dir);
}

static void rm_dir(const char *dir)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

typedef struct totals {
    int64_t requests, prompt, completion;
} totals;

static void add_totals(void *ud, const colo_usage_row *row)
{
    totals *t = ud;
    t->requests += row->requests;
    t->prompt += row->prompt_tokens;
    t->completion += row->completion_tokens;
}

static totals query_totals(colo_ledger *l)
{
    totals t = {0};
    char err[256];
    assert_int_equal(colo_ledger_query(l, 0, INT64_MAX / 2, 0, NULL, NULL, add_totals, &t, err, sizeof err), COLO_OK);
    return t;
}

/* Records while another process holds the write lock: every call returns
 * at once with COLO_OK and queues its row (summed per hour and key); the
 * backlog says so; reads still work; the holder is named; once the lock is
 * gone the writer thread commits the queue and the sums are exact. */
static void test_locked_ledger_queues_rows(void **state)
{
    (void)state;
    char dir[256], db[300], err[256];
    tmp_db(dir, sizeof dir, db, sizeof db);
    colo_ledger *l = colo_ledger_open(db, true, 100, err, sizeof err);
    assert_non_null(l);
    colo_usage_row first = row("acme", "search", "chat", 200, 3, 4, 0.1);
    assert_int_equal(colo_ledger_record(l, 1795471200, &first, err, sizeof err), COLO_OK);
    colo_ledger_close(l);

    locker k = lock_db(db);
    l = colo_ledger_open(db, true, 100, err, sizeof err);
    assert_non_null(l);
    char holder[128];
    colo_ledger_lock_holder(db, holder, sizeof holder);
    char want[64];
    snprintf(want, sizeof want, "process %d ", (int)k.pid);
    assert_non_null(strstr(holder, want));

    const char *orgs[] = {"acme", "globex"}, *models[] = {"chat", "emb", "code"};
    int n = 20 + rand() % 30;
    totals sent = {1, 3, 4};
    for (int i = 0; i < n; i++) {
        int prompt = rand() % 100, completion = rand() % 300;
        colo_usage_row r = row(orgs[rand() % 2], "p", models[rand() % 3], rand() % 2 ? 200 : 499, prompt, completion, 0.5);
        assert_int_equal(colo_ledger_record(l, 1795471200 + 60 * (rand() % 120), &r, err, sizeof err), COLO_OK);
        sent.requests++, sent.prompt += prompt, sent.completion += completion;
    }
    colo_ledger_backlog b;
    colo_ledger_get_backlog(l, &b);
    assert_int_equal(b.requests, n);
    /* summed: organizations x models x statuses x hours, twice at most (the
     * rows of a commit attempt in flight, and the same keys queued behind it
     * until the attempt fails and they are summed again) */
    assert_true(b.rows >= 1 && b.rows <= 2 * (2 * 3 * 2 * 2));
    assert_int_equal(query_totals(l).requests, 1); /* readers are not blocked: what was committed before */

    unlock_db(&k);
    assert_int_equal(colo_ledger_flush(l, 30000), COLO_OK);
    colo_ledger_get_backlog(l, &b);
    assert_int_equal(b.requests, 0);
    assert_int_equal(b.rows, 0);
    totals got = query_totals(l);
    assert_int_equal(got.requests, sent.requests);
    assert_int_equal(got.prompt, sent.prompt);
    assert_int_equal(got.completion, sent.completion);
    /* nothing waits now: the next row is committed at once */
    assert_int_equal(colo_ledger_record(l, 1795471200, &first, err, sizeof err), COLO_OK);
    colo_ledger_get_backlog(l, &b);
    assert_int_equal(b.requests, 0);
    assert_int_equal(query_totals(l).requests, sent.requests + 1);
    colo_ledger_close(l);
    rm_dir(dir);
}

/* A new database another process holds locked: opening waits its bounded
 * time and succeeds anyway (reads say it is not set up yet); rows recorded
 * meanwhile are written once the lock is released. Closing while the lock
 * is held again gives up after lock_wait_ms (the rows are logged). */
static void test_open_locked_then_close_locked(void **state)
{
    (void)state;
    char dir[256], db[300], err[256] = "";
    tmp_db(dir, sizeof dir, db, sizeof db);
    locker k = lock_db(db);
    colo_ledger *l = colo_ledger_open(db, true, 100, err, sizeof err);
    assert_non_null(l);
    totals t;
    assert_int_equal(colo_ledger_query(l, 0, 1, 0, NULL, NULL, add_totals, &t, err, sizeof err), COLO_EAGAIN);
    int n = 1 + rand() % 8;
    for (int i = 0; i < n; i++) {
        colo_usage_row r = row("acme", "search", "chat", 200, 1, 2, 0);
        assert_int_equal(colo_ledger_record(l, 1795471200, &r, err, sizeof err), COLO_OK);
    }
    colo_ledger_backlog b;
    colo_ledger_get_backlog(l, &b);
    assert_int_equal(b.requests, n);
    assert_int_equal(b.rows, 1);
    unlock_db(&k);
    assert_int_equal(colo_ledger_flush(l, 30000), COLO_OK);
    assert_int_equal(query_totals(l).requests, n);

    k = lock_db(db);
    colo_usage_row r = row("acme", "search", "chat", 503, 1, 2, 0);
    assert_int_equal(colo_ledger_record(l, 1795471200, &r, err, sizeof err), COLO_OK);
    assert_int_equal(colo_ledger_flush(l, 50), COLO_ETIMEDOUT);
    colo_ledger_close(l); /* returns: the wait is bounded */
    unlock_db(&k);
    l = colo_ledger_open(db, false, 100, err, sizeof err);
    assert_non_null(l);
    assert_int_equal(query_totals(l).requests, n);
    colo_ledger_close(l);
    rm_dir(dir);
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
        cmocka_unit_test(test_locked_ledger_queues_rows),
        cmocka_unit_test(test_open_locked_then_close_locked),
        cmocka_unit_test(test_parsers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
