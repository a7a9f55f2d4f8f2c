/* The usage ledger on SQLite. */
#include "server/ledger.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The WAL is copied into the database by a thread of its own every
 * CHECKPOINT_INTERVAL_MS, on its own connection: a checkpoint syncs the
 * files, and the loop thread that records requests must not wait for a
 * disk flush (with synchronous=NORMAL its commits only append to the WAL). */
#define CHECKPOINT_INTERVAL_MS 1000

struct colo_ledger {
    sqlite3 *db;
    sqlite3_stmt *upsert;
    char *path;
    pthread_t checkpointer;
    bool checkpointer_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop; /* under mu */
};

static const char SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS usage_hourly ("
    " hour INTEGER NOT NULL, organization TEXT NOT NULL, project TEXT NOT NULL, key TEXT NOT NULL,"
    " model TEXT NOT NULL, status INTEGER NOT NULL,"
    " requests INTEGER NOT NULL DEFAULT 0, prompt_tokens INTEGER NOT NULL DEFAULT 0,"
    " completion_tokens INTEGER NOT NULL DEFAULT 0, queue_seconds REAL NOT NULL DEFAULT 0,"
    " device_seconds REAL NOT NULL DEFAULT 0,"
    " PRIMARY KEY (hour, organization, project, key, model, status)) WITHOUT ROWID;";

static const char UPSERT[] =
    "INSERT INTO usage_hourly (hour, organization, project, key, model, status, requests, prompt_tokens,"
    " completion_tokens, queue_seconds, device_seconds) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
    " ON CONFLICT (hour, organization, project, key, model, status) DO UPDATE SET"
    " requests = requests + excluded.requests, prompt_tokens = prompt_tokens + excluded.prompt_tokens,"
    " completion_tokens = completion_tokens + excluded.completion_tokens,"
    " queue_seconds = queue_seconds + excluded.queue_seconds,"
    " device_seconds = device_seconds + excluded.device_seconds;";

static void *checkpoint_loop(void *arg)
{
    colo_ledger *l = arg;
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(l->path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        sqlite3_close(db);
        return NULL; /* the records still land in the WAL; closing the ledger checkpoints them */
    }
    sqlite3_busy_timeout(db, 1000);
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += CHECKPOINT_INTERVAL_MS / 1000;
        pthread_cond_timedwait(&l->cv, &l->mu, &ts);
        if (l->stop)
            break;
        pthread_mutex_unlock(&l->mu);
        sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL); /* busy: next time */
        pthread_mutex_lock(&l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    sqlite3_close(db);
    return NULL;
}

colo_ledger *colo_ledger_open(const char *path, bool write, char *err, size_t errlen)
{
    colo_ledger *l = calloc(1, sizeof *l);
    if (!l || !(l->path = strdup(path))) {
        free(l);
        colo_set_err(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    int flags = write ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READONLY;
    if (sqlite3_open_v2(path, &l->db, flags | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        colo_set_err(err, errlen, "%s: %s", path, l->db ? sqlite3_errmsg(l->db) : "cannot open");
        goto out_close;
    }
    sqlite3_busy_timeout(l->db, 5000);
    char *msg = NULL;
    if (write && (sqlite3_exec(l->db, "PRAGMA journal_mode=WAL;", NULL, NULL, &msg) != SQLITE_OK ||
                  sqlite3_exec(l->db, "PRAGMA synchronous=NORMAL;", NULL, NULL, &msg) != SQLITE_OK ||
                  sqlite3_exec(l->db, SCHEMA, NULL, NULL, &msg) != SQLITE_OK)) {
        colo_set_err(err, errlen, "%s: %s", path, msg ? msg : sqlite3_errmsg(l->db));
        sqlite3_free(msg);
        goto out_close;
    }
    if (write && sqlite3_prepare_v2(l->db, UPSERT, -1, &l->upsert, NULL) != SQLITE_OK) {
        colo_set_err(err, errlen, "%s: %s", path, sqlite3_errmsg(l->db));
        goto out_close;
    }
    if (write && sqlite3_exec(l->db, "PRAGMA wal_autocheckpoint=0;", NULL, NULL, NULL) == SQLITE_OK) {
        if (pthread_create(&l->checkpointer, NULL, checkpoint_loop, l) == 0)
            l->checkpointer_started = true;
        else /* no thread: the writer checkpoints, as SQLite does by default */
            sqlite3_exec(l->db, "PRAGMA wal_autocheckpoint=1000;", NULL, NULL, NULL);
    }
    return l;

out_close:
    colo_ledger_close(l);
    return NULL;
}

void colo_ledger_close(colo_ledger *l)
{
    if (!l)
        return;
    if (l->checkpointer_started) {
        pthread_mutex_lock(&l->mu);
        l->stop = true;
        pthread_cond_signal(&l->cv);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->checkpointer, NULL);
    }
    sqlite3_finalize(l->upsert);
    sqlite3_close(l->db); /* the last connection: checkpoints and removes the WAL */
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free(l->path);
    free(l);
}

colo_status colo_ledger_record(colo_ledger *l, int64_t end_s, const colo_usage_row *r, char *err, size_t errlen)
{
    sqlite3_stmt *s = l->upsert;
    if (!s) {
        colo_set_err(err, errlen, "the ledger is read-only");
        return COLO_EINVAL;
    }
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    int rc = sqlite3_bind_int64(s, 1, end_s - end_s % 3600);
    rc = rc ? rc : sqlite3_bind_text(s, 2, r->organization, -1, SQLITE_TRANSIENT);
    rc = rc ? rc : sqlite3_bind_text(s, 3, r->project, -1, SQLITE_TRANSIENT);
    rc = rc ? rc : sqlite3_bind_text(s, 4, r->key, -1, SQLITE_TRANSIENT);
    rc = rc ? rc : sqlite3_bind_text(s, 5, r->model, -1, SQLITE_TRANSIENT);
    rc = rc ? rc : sqlite3_bind_int(s, 6, r->status);
    rc = rc ? rc : sqlite3_bind_int64(s, 7, r->requests);
    rc = rc ? rc : sqlite3_bind_int64(s, 8, r->prompt_tokens);
    rc = rc ? rc : sqlite3_bind_int64(s, 9, r->completion_tokens);
    rc = rc ? rc : sqlite3_bind_double(s, 10, r->queue_seconds);
    rc = rc ? rc : sqlite3_bind_double(s, 11, r->device_seconds);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(s);
    if (rc != SQLITE_DONE) {
        colo_set_err(err, errlen, "usage ledger: %s", sqlite3_errmsg(l->db));
        sqlite3_reset(s);
        return COLO_EIO;
    }
    sqlite3_reset(s);
    return COLO_OK;
}

colo_status colo_usage_parse_group(const char *s, unsigned *flags)
{
    static const struct {
        const char *name;
        unsigned flags;
    } names[] = {{"organization", COLO_USAGE_BY_ORGANIZATION},
                 {"project", COLO_USAGE_BY_PROJECT},
                 {"tenant", COLO_USAGE_BY_ORGANIZATION | COLO_USAGE_BY_PROJECT},
                 {"key", COLO_USAGE_BY_KEY},
                 {"model", COLO_USAGE_BY_MODEL},
                 {"status", COLO_USAGE_BY_STATUS},
                 {"hour", COLO_USAGE_BY_HOUR},
                 {"day", COLO_USAGE_BY_DAY}};
    *flags = 0;
    while (s && *s) {
        size_t n = strcspn(s, ",");
        bool found = false;
        for (size_t i = 0; i < sizeof names / sizeof *names && !found; i++)
            if (strlen(names[i].name) == n && !strncmp(names[i].name, s, n)) {
                *flags |= names[i].flags;
                found = true;
            }
        if (!found)
            return COLO_EINVAL;
        s += n;
        if (*s == ',')
            s++;
    }
    if ((*flags & COLO_USAGE_BY_HOUR) && (*flags & COLO_USAGE_BY_DAY))
        return COLO_EINVAL;
    return COLO_OK;
}

static void copy_col(sqlite3_stmt *s, int col, char *out, size_t cap)
{
    const unsigned char *t = sqlite3_column_text(s, col);
    snprintf(out, cap, "%s", t ? (const char *)t : "");
}

colo_status colo_ledger_query(colo_ledger *l, int64_t from_s, int64_t to_s, unsigned group, const char *organization,
                              const char *project, void (*fn)(void *ud, const colo_usage_row *row), void *ud,
                              char *err, size_t errlen)
{
    const char *when = group & COLO_USAGE_BY_HOUR  ? "hour"
                       : group & COLO_USAGE_BY_DAY ? "(hour - hour % 86400)"
                                                   : "0";
    char cols[512], by[512] = "";
    snprintf(cols, sizeof cols, "%s, %s, %s, %s, %s, %s", when,
             group & COLO_USAGE_BY_ORGANIZATION ? "organization" : "''",
             group & COLO_USAGE_BY_PROJECT ? "project" : "''", group & COLO_USAGE_BY_KEY ? "key" : "''",
             group & COLO_USAGE_BY_MODEL ? "model" : "''", group & COLO_USAGE_BY_STATUS ? "status" : "0");
    if (group)
        snprintf(by, sizeof by, " GROUP BY 1, 2, 3, 4, 5, 6 HAVING COUNT(*) > 0 ORDER BY 1, 2, 3, 4, 5, 6");
    else
        snprintf(by, sizeof by, " HAVING COUNT(*) > 0");
    char sql[1536];
    snprintf(sql, sizeof sql,
             "SELECT %s, SUM(requests), SUM(CASE WHEN status >= 400 THEN requests ELSE 0 END), SUM(prompt_tokens),"
             " SUM(completion_tokens), SUM(queue_seconds), SUM(device_seconds) FROM usage_hourly"
             " WHERE hour >= ?1 AND hour < ?2 AND (?3 IS NULL OR organization = ?3) AND (?4 IS NULL OR project = ?4)"
             "%s;",
             cols, by);
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(l->db, sql, -1, &s, NULL) != SQLITE_OK) {
        colo_set_err(err, errlen, "usage ledger: %s", sqlite3_errmsg(l->db));
        return COLO_EIO;
    }
    /* an hour counts when it starts inside the range */
    int rc = sqlite3_bind_int64(s, 1, from_s);
    rc = rc ? rc : sqlite3_bind_int64(s, 2, to_s);
    rc = rc ? rc : (organization ? sqlite3_bind_text(s, 3, organization, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(s, 3));
    rc = rc ? rc : (project ? sqlite3_bind_text(s, 4, project, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(s, 4));
    while (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        colo_usage_row r = {0};
        r.hour_s = sqlite3_column_int64(s, 0);
        copy_col(s, 1, r.organization, sizeof r.organization);
        copy_col(s, 2, r.project, sizeof r.project);
        copy_col(s, 3, r.key, sizeof r.key);
        copy_col(s, 4, r.model, sizeof r.model);
        r.status = sqlite3_column_int(s, 5);
        r.requests = sqlite3_column_int64(s, 6);
        r.errors = sqlite3_column_int64(s, 7);
        r.prompt_tokens = sqlite3_column_int64(s, 8);
        r.completion_tokens = sqlite3_column_int64(s, 9);
        r.queue_seconds = sqlite3_column_double(s, 10);
        r.device_seconds = sqlite3_column_double(s, 11);
        fn(ud, &r);
        rc = SQLITE_OK;
    }
    colo_status st = COLO_OK;
    if (rc != SQLITE_DONE) {
        colo_set_err(err, errlen, "usage ledger: %s", sqlite3_errmsg(l->db));
        st = COLO_EIO;
    }
    sqlite3_finalize(s);
    return st;
}

colo_status colo_usage_parse_time(const char *s, int64_t *out)
{
    if (!s || !*s)
        return COLO_EINVAL;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (!*end && s[0] >= '0' && s[0] <= '9' && strlen(s) != 4) {
        *out = v;
        return COLO_OK;
    }
    struct tm tm = {0};
    int n = 0, Y, M, D, h = 0, m = 0, sec = 0;
    if (sscanf(s, "%4d-%2d-%2d%n", &Y, &M, &D, &n) != 3)
        return COLO_EINVAL;
    const char *rest = s + n;
    if (*rest == 'T' || *rest == ' ') {
        int k = 0;
        if (sscanf(rest + 1, "%2d%n", &h, &k) != 1)
            return COLO_EINVAL;
        rest += 1 + k;
        if (*rest == ':' && sscanf(rest + 1, "%2d%n", &m, &k) == 1) {
            rest += 1 + k;
            if (*rest == ':' && sscanf(rest + 1, "%2d%n", &sec, &k) == 1)
                rest += 1 + k;
        }
    }
    if (*rest == 'Z')
        rest++;
    if (*rest || M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || sec > 60)
        return COLO_EINVAL;
    tm.tm_year = Y - 1900;
    tm.tm_mon = M - 1;
    tm.tm_mday = D;
    tm.tm_hour = h;
    tm.tm_min = m;
    tm.tm_sec = sec;
    *out = (int64_t)timegm(&tm);
    return COLO_OK;
}
