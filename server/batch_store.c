/* The Files and Batch APIs' tables and files (server/batch_store.h). */
#include "server/batch_store.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/log.h"

struct colo_batch_store {
    sqlite3 *db;
    bool ready; /* the tables exist (another process's lock may delay them) */
    char files_dir[1024];
    bool ledger;
};

static const char SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS batch_files (id TEXT PRIMARY KEY, organization TEXT NOT NULL,"
    " project TEXT NOT NULL, purpose TEXT NOT NULL, created_at INTEGER NOT NULL, object TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS batches (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, organization TEXT NOT NULL,"
    " project TEXT NOT NULL, key TEXT NOT NULL, status TEXT NOT NULL, object TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS batches_by_owner ON batches (organization, project, seq);"
    "CREATE TABLE IF NOT EXISTS batch_lines (batch_id TEXT NOT NULL, line INTEGER NOT NULL, ok INTEGER NOT NULL,"
    " result TEXT NOT NULL, PRIMARY KEY (batch_id, line)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS stored_responses (id TEXT PRIMARY KEY, organization TEXT NOT NULL,"
    " project TEXT NOT NULL, created_at INTEGER NOT NULL, object TEXT NOT NULL, own TEXT NOT NULL,"
    " context TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS stored_responses_by_age ON stored_responses (created_at);";

/* How long a statement waits for another connection's write (the ledger's
 * writer thread commits in milliseconds). */
#define BUSY_MS 2000

/* WAL and the tables; an SQLite result code. */
static int set_up(colo_batch_store *bs)
{
    if (bs->ready)
        return SQLITE_OK;
    int rc = sqlite3_exec(bs->db, "PRAGMA journal_mode=WAL;", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(bs->db, SCHEMA, NULL, NULL, NULL);
    bs->ready = rc == SQLITE_OK;
    return rc;
}

colo_batch_store *colo_batch_store_open(const char *db_path, const char *files_dir, bool ledger, char *err,
                                        size_t errlen)
{
    colo_batch_store *bs = calloc(1, sizeof *bs);
    if (!bs) {
        colo_set_err(err, errlen, "out of memory");
        return NULL;
    }
    bs->ledger = ledger;
    snprintf(bs->files_dir, sizeof bs->files_dir, "%s", files_dir);
    if (mkdir(files_dir, 0700) != 0 && errno != EEXIST) {
        colo_set_err(err, errlen, "batches: cannot make the folder %s: %s", files_dir, strerror(errno));
        goto out_free;
    }
    if (sqlite3_open_v2(db_path, &bs->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL) !=
        SQLITE_OK) {
        colo_set_err(err, errlen, "batches: cannot open %s: %s", db_path,
                     bs->db ? sqlite3_errmsg(bs->db) : "out of memory");
        goto out_free;
    }
    sqlite3_busy_timeout(bs->db, BUSY_MS);
    char *msg = NULL;
    int rc = sqlite3_exec(bs->db, "PRAGMA synchronous=NORMAL;", NULL, NULL, &msg);
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(bs->db, 0);
        rc = set_up(bs);
        sqlite3_busy_timeout(bs->db, BUSY_MS);
        if ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED) {
            COLO_WARN("batches: %s is locked by another process: the batches' tables are made at their first use",
                      db_path);
            rc = SQLITE_OK;
        }
    }
    if (rc != SQLITE_OK) {
        colo_set_err(err, errlen, "batches: %s: %s", db_path, msg ? msg : sqlite3_errmsg(bs->db));
        sqlite3_free(msg);
        goto out_free;
    }
    return bs;

out_free:
    colo_batch_store_close(bs);
    return NULL;
}

void colo_batch_store_close(colo_batch_store *bs)
{
    if (!bs)
        return;
    sqlite3_close(bs->db);
    free(bs);
}

void colo_batch_store_file_path(const colo_batch_store *bs, const char *id, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", bs->files_dir, id);
}

/* ---- statements ------------------------------------------------------------------------ */

/* Prepares sql and binds the strings of args (NULL-terminated) as ?1...;
 * NULL when that fails (logged). */
static sqlite3_stmt *prepare(colo_batch_store *bs, const char *sql, const char *const *args)
{
    sqlite3_stmt *s = NULL;
    int rc = set_up(bs);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(bs->db, sql, -1, &s, NULL);
    for (int i = 0; rc == SQLITE_OK && args && args[i]; i++)
        rc = sqlite3_bind_text(s, i + 1, args[i], -1, SQLITE_TRANSIENT);
    if (rc != SQLITE_OK) {
        COLO_ERROR("batches: %s", sqlite3_errmsg(bs->db));
        sqlite3_finalize(s);
        return NULL;
    }
    return s;
}

/* Runs s to its end; an SQLite result code (SQLITE_OK when done). */
static int run(sqlite3_stmt *s)
{
    int rc = s ? sqlite3_step(s) : SQLITE_ERROR;
    sqlite3_finalize(s);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

/* Column col of the current row as a JSON object (new reference), or NULL. */
static json_t *column_json(sqlite3_stmt *s, int col)
{
    const char *t = (const char *)sqlite3_column_text(s, col);
    return t ? json_loads(t, 0, NULL) : NULL;
}

/* The JSON objects of column 0 of every row of s (finalized), as an array. */
static json_t *rows_json(sqlite3_stmt *s, int limit, bool *more)
{
    json_t *a = s ? json_array() : NULL;
    int rc = SQLITE_ERROR;
    if (more)
        *more = false;
    while (a && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (limit >= 0 && (int)json_array_size(a) == limit) {
            if (more)
                *more = true;
            rc = SQLITE_DONE;
            break;
        }
        json_t *o = column_json(s, 0);
        if (!o || json_array_append_new(a, o)) {
            rc = SQLITE_NOMEM;
            break;
        }
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) {
        json_decref(a);
        return NULL;
    }
    return a;
}

/* The JSON object of column 0 of s's first row (s finalized; new
 * reference), or NULL. */
static json_t *first_json(sqlite3_stmt *s)
{
    json_t *a = rows_json(s, -1, NULL);
    json_t *obj = a && json_array_size(a) ? json_incref(json_array_get(a, 0)) : NULL;
    json_decref(a);
    return obj;
}

static char *dump(const json_t *obj) { return json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(9)); }

static const char *str_of(const json_t *obj, const char *key)
{
    const char *v = json_string_value(json_object_get(obj, key));
    return v ? v : "";
}

/* Runs sql, which stores obj of o: bound are ?1 its id, ?2 and ?3 o's
 * organization and project, ?4 its created_at, ?5 its text and ?6... the
 * strings of more (NULL-terminated, at most 2). */
static colo_status put_owned(colo_batch_store *bs, const char *sql, const colo_batch_owner *o, const json_t *obj,
                             const char *const *more)
{
    char *text = dump(obj), created[32];
    if (!text)
        return COLO_ENOMEM;
    snprintf(created, sizeof created, "%lld", (long long)json_integer_value(json_object_get(obj, "created_at")));
    const char *args[8] = {str_of(obj, "id"), o->organization, o->project, created, text};
    for (int i = 0; i < 2 && more[i]; i++)
        args[5 + i] = more[i];
    int rc = run(prepare(bs, sql, args));
    free(text);
    return rc == SQLITE_OK ? COLO_OK : COLO_EIO;
}

/* Runs sql, which deletes the row of ?1 id owned by ?2 and ?3 (o's
 * organization and project); COLO_EINVAL when there was none. */
static colo_status delete_owned(colo_batch_store *bs, const char *sql, const colo_batch_owner *o, const char *id)
{
    sqlite3_stmt *s = prepare(bs, sql, (const char *const[]){id, o->organization, o->project, NULL});
    if (run(s) != SQLITE_OK)
        return COLO_EIO;
    return sqlite3_changes(bs->db) ? COLO_OK : COLO_EINVAL;
}

/* ---- files ------------------------------------------------------------------------------- */

colo_status colo_batch_store_put_file(colo_batch_store *bs, const colo_batch_owner *o, const json_t *obj)
{
    return put_owned(bs,
                     "INSERT OR REPLACE INTO batch_files (id, organization, project, created_at, object, purpose)"
                     " VALUES (?1, ?2, ?3, CAST(?4 AS INTEGER), ?5, ?6);",
                     o, obj, (const char *const[]){str_of(obj, "purpose"), NULL});
}

json_t *colo_batch_store_get_file(colo_batch_store *bs, const colo_batch_owner *o, const char *id)
{
    return first_json(prepare(bs,
                              "SELECT object FROM batch_files WHERE id = ?1 AND organization = ?2 AND project = ?3;",
                              (const char *const[]){id, o->organization, o->project, NULL}));
}

json_t *colo_batch_store_list_files(colo_batch_store *bs, const colo_batch_owner *o, const char *purpose)
{
    sqlite3_stmt *s = prepare(bs,
                              "SELECT object FROM batch_files WHERE organization = ?1 AND project = ?2"
                              " AND (?3 = '' OR purpose = ?3) ORDER BY created_at DESC, rowid DESC;",
                              (const char *const[]){o->organization, o->project, purpose ? purpose : "", NULL});
    return rows_json(s, -1, NULL);
}

colo_status colo_batch_store_delete_file(colo_batch_store *bs, const colo_batch_owner *o, const char *id)
{
    colo_status st =
        delete_owned(bs, "DELETE FROM batch_files WHERE id = ?1 AND organization = ?2 AND project = ?3;", o, id);
    if (st != COLO_OK)
        return st;
    char path[1200];
    colo_batch_store_file_path(bs, id, path, sizeof path);
    if (unlink(path) != 0 && errno != ENOENT)
        COLO_WARN("batches: cannot remove %s: %s", path, strerror(errno));
    return COLO_OK;
}

/* ---- batches ---------------------------------------------------------------------------- */

static int put_batch_rc(colo_batch_store *bs, const colo_batch_owner *o, const json_t *obj)
{
    char *text = dump(obj);
    if (!text)
        return SQLITE_NOMEM;
    sqlite3_stmt *s = prepare(
        bs,
        "INSERT INTO batches (id, seq, organization, project, key, status, object)"
        " VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM batches), ?2, ?3, ?4, ?5, ?6)"
        " ON CONFLICT (id) DO UPDATE SET status = excluded.status, object = excluded.object;",
        (const char *const[]){str_of(obj, "id"), o->organization, o->project, o->key, str_of(obj, "status"), text,
                              NULL});
    int rc = run(s);
    free(text);
    return rc;
}

colo_status colo_batch_store_put_batch(colo_batch_store *bs, const colo_batch_owner *o, const json_t *obj)
{
    return put_batch_rc(bs, o, obj) == SQLITE_OK ? COLO_OK : COLO_EIO;
}

json_t *colo_batch_store_get_batch(colo_batch_store *bs, const colo_batch_owner *o, const char *id)
{
    return first_json(prepare(bs, "SELECT object FROM batches WHERE id = ?1 AND organization = ?2 AND project = ?3;",
                              (const char *const[]){id, o->organization, o->project, NULL}));
}

json_t *colo_batch_store_list_batches(colo_batch_store *bs, const colo_batch_owner *o, const char *after, int limit,
                                      bool *more)
{
    sqlite3_stmt *s = prepare(bs,
                              "SELECT object FROM batches WHERE organization = ?1 AND project = ?2 AND"
                              " (?3 = '' OR seq < (SELECT seq FROM batches WHERE id = ?3)) ORDER BY seq DESC;",
                              (const char *const[]){o->organization, o->project, after ? after : "", NULL});
    return rows_json(s, limit, more);
}

colo_status colo_batch_store_each_open(colo_batch_store *bs,
                                       void (*fn)(void *ud, const colo_batch_owner *o, json_t *obj), void *ud)
{
    sqlite3_stmt *s = prepare(bs,
                              "SELECT organization, project, key, object FROM batches WHERE status IN"
                              " ('validating', 'in_progress', 'finalizing', 'cancelling') ORDER BY seq;",
                              NULL);
    if (!s)
        return COLO_EIO;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        colo_batch_owner o;
        snprintf(o.organization, sizeof o.organization, "%s", (const char *)sqlite3_column_text(s, 0));
        snprintf(o.project, sizeof o.project, "%s", (const char *)sqlite3_column_text(s, 1));
        snprintf(o.key, sizeof o.key, "%s", (const char *)sqlite3_column_text(s, 2));
        json_t *obj = column_json(s, 3);
        if (obj)
            fn(ud, &o, obj);
        json_decref(obj);
    }
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? COLO_OK : COLO_EIO;
}

colo_status colo_batch_store_line_done(colo_batch_store *bs, const colo_batch_owner *o, const json_t *obj, int line,
                                       bool ok, const char *result, const colo_usage_row *usage)
{
    char n[16];
    snprintf(n, sizeof n, "%d", line);
    int rc = sqlite3_exec(bs->db, "BEGIN IMMEDIATE;", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = run(prepare(bs,
                         "INSERT INTO batch_lines (batch_id, line, ok, result) VALUES (?1, CAST(?2 AS INTEGER),"
                         " CAST(?3 AS INTEGER), ?4);",
                         (const char *const[]){str_of(obj, "id"), n, ok ? "1" : "0", result, NULL}));
    if (rc == SQLITE_OK)
        rc = put_batch_rc(bs, o, obj);
    if (rc == SQLITE_OK && usage && bs->ledger && colo_ledger_add_on(bs->db, (int64_t)time(NULL), usage) != COLO_OK)
        rc = SQLITE_ERROR;
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(bs->db, "COMMIT;", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        COLO_ERROR("batches: batch %s line %d: %s", str_of(obj, "id"), line + 1, sqlite3_errmsg(bs->db));
        if (!sqlite3_get_autocommit(bs->db))
            sqlite3_exec(bs->db, "ROLLBACK;", NULL, NULL, NULL);
        return COLO_EIO;
    }
    return COLO_OK;
}

colo_status colo_batch_store_each_line(colo_batch_store *bs, const char *id,
                                       void (*fn)(void *ud, int line, bool ok, const char *result), void *ud)
{
    sqlite3_stmt *s = prepare(bs, "SELECT line, ok, result FROM batch_lines WHERE batch_id = ?1 ORDER BY line;",
                              (const char *const[]){id, NULL});
    if (!s)
        return COLO_EIO;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW)
        fn(ud, sqlite3_column_int(s, 0), sqlite3_column_int(s, 1) != 0, (const char *)sqlite3_column_text(s, 2));
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? COLO_OK : COLO_EIO;
}

/* ---- stored responses ------------------------------------------------------------------- */

colo_status colo_batch_store_put_response(colo_batch_store *bs, const colo_batch_owner *o, const json_t *obj,
                                          const char *own, const char *context)
{
    return put_owned(bs,
                     "INSERT OR REPLACE INTO stored_responses (id, organization, project, created_at, object,"
                     " own, context) VALUES (?1, ?2, ?3, CAST(?4 AS INTEGER), ?5, ?6, ?7);",
                     o, obj, (const char *const[]){own, context, NULL});
}

bool colo_batch_store_get_response(colo_batch_store *bs, const colo_batch_owner *o, const char *id, int64_t since_s,
                                   json_t **obj, json_t **own, json_t **context)
{
    char since[32];
    snprintf(since, sizeof since, "%lld", (long long)since_s);
    sqlite3_stmt *s = prepare(bs,
                              "SELECT object, own, context FROM stored_responses WHERE id = ?1 AND organization = ?2"
                              " AND project = ?3 AND created_at >= CAST(?4 AS INTEGER);",
                              (const char *const[]){id, o->organization, o->project, since, NULL});
    *obj = *own = *context = NULL;
    if (s && sqlite3_step(s) == SQLITE_ROW) {
        *obj = column_json(s, 0);
        *own = column_json(s, 1);
        *context = column_json(s, 2);
    }
    sqlite3_finalize(s);
    if (*obj && *own && *context)
        return true;
    json_decref(*obj), json_decref(*own), json_decref(*context);
    *obj = *own = *context = NULL;
    return false;
}

colo_status colo_batch_store_delete_response(colo_batch_store *bs, const colo_batch_owner *o, const char *id)
{
    return delete_owned(bs, "DELETE FROM stored_responses WHERE id = ?1 AND organization = ?2 AND project = ?3;", o,
                        id);
}

colo_status colo_batch_store_purge_responses(colo_batch_store *bs, int64_t before_s)
{
    char before[32];
    snprintf(before, sizeof before, "%lld", (long long)before_s);
    sqlite3_stmt *s = prepare(bs, "DELETE FROM stored_responses WHERE created_at < CAST(?1 AS INTEGER);",
                              (const char *const[]){before, NULL});
    return run(s) == SQLITE_OK ? COLO_OK : COLO_EIO;
}
