/* The usage ledger on SQLite, with a writer thread for what cannot be
 * committed at once. */
#include "server/tenants/ledger.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/log.h"

/* The writer thread copies the WAL into the database every
 * CHECKPOINT_INTERVAL_MS on its own connection: a checkpoint syncs the
 * files, and the loop thread that records requests must not wait for a
 * disk flush (with synchronous=NORMAL its commits only append to the WAL). */
#define CHECKPOINT_INTERVAL_MS 1000
/* Retries of the queue back off from RETRY_MIN_MS, doubling, to RETRY_MAX_MS. */
#define RETRY_MIN_MS 10
#define RETRY_MAX_MS 1000
/* The writer's own busy timeout: short, so that it notices a stop. */
#define WRITER_BUSY_MS 100

/* A queued row: the sums of the requests of one hour and key. */
typedef struct pending {
    int64_t hour_s;
    colo_usage_row r;
    struct pending *next;
} pending;

struct colo_ledger {
    char *path;
    bool write;
    int lock_wait_ms;
    /* the opening thread's connection: records at once, and queries */
    sqlite3 *db;
    sqlite3_stmt *upsert; /* NULL until the database is set up (read-only: always) */
    atomic_bool ready;    /* the database is set up (by open or by the writer) */
    /* the writer thread */
    pthread_t writer;
    bool writer_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* rows queued, stop; and (broadcast) the queue emptied */
    pending *queue;         /* under mu */
    int64_t n_rows, n_requests, n_retries; /* under mu */
    bool committing;        /* under mu: the writer holds rows it is committing */
    bool stop;              /* under mu */
    struct timespec stop_by; /* under mu: the writer gives up at this time (CLOCK_REALTIME) */
};

static const char SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS usage_hourly ("
    " hour INTEGER NOT NULL, organization TEXT NOT NULL, project TEXT NOT NULL, key TEXT NOT NULL,"
    " model TEXT NOT NULL, status INTEGER NOT NULL,"
    " requests INTEGER NOT NULL DEFAULT 0, prompt_tokens INTEGER NOT NULL DEFAULT 0,"
    " completion_tokens INTEGER NOT NULL DEFAULT 0, queue_seconds REAL NOT NULL DEFAULT 0,"
    " device_seconds REAL NOT NULL DEFAULT 0,"
    " batch_requests INTEGER NOT NULL DEFAULT 0, batch_tokens INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY (hour, organization, project, key, model, status)) WITHOUT ROWID;";

/* A ledger made before batches had no batch columns: they are added. */
static const char *const BATCH_COLUMNS[] = {
    "ALTER TABLE usage_hourly ADD COLUMN batch_requests INTEGER NOT NULL DEFAULT 0;",
    "ALTER TABLE usage_hourly ADD COLUMN batch_tokens INTEGER NOT NULL DEFAULT 0;",
};

static const char UPSERT[] =
    "INSERT INTO usage_hourly (hour, organization, project, key, model, status, requests, prompt_tokens,"
    " completion_tokens, queue_seconds, device_seconds, batch_requests, batch_tokens)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
    " ON CONFLICT (hour, organization, project, key, model, status) DO UPDATE SET"
    " requests = requests + excluded.requests, prompt_tokens = prompt_tokens + excluded.prompt_tokens,"
    " completion_tokens = completion_tokens + excluded.completion_tokens,"
    " queue_seconds = queue_seconds + excluded.queue_seconds,"
    " device_seconds = device_seconds + excluded.device_seconds,"
    " batch_requests = batch_requests + excluded.batch_requests, batch_tokens = batch_tokens + excluded.batch_tokens;";

static bool is_lock_error(int rc)
{
    rc &= 0xff;
    return rc == SQLITE_BUSY || rc == SQLITE_LOCKED;
}

static struct timespec deadline_after_ms(int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

static bool passed(const struct timespec *t)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return now.tv_sec > t->tv_sec || (now.tv_sec == t->tv_sec && now.tv_nsec >= t->tv_nsec);
}

/* ---- who holds the lock ------------------------------------------------------------ */

void colo_ledger_lock_holder(const char *path, char *out, size_t cap)
{
    snprintf(out, cap, "another connection");
    char shm[1100];
    snprintf(shm, sizeof shm, "%s-shm", path);
    struct stat sd, ss;
    bool have_db = stat(path, &sd) == 0, have_shm = stat(shm, &ss) == 0;
    FILE *f = fopen("/proc/locks", "r");
    if (!f)
        return;
    /* "1: POSIX  ADVISORY  WRITE 1234 08:02:131 120 120"; a WAL writer's lock
     * is a write lock on the -shm file (byte 120), a rollback journal's one
     * on the database file. */
    char line[256];
    long best = -1;
    bool best_write = false;
    while (fgets(line, sizeof line, f)) {
        char type[16], rw[16], dev[64];
        long pid;
        unsigned long long ino;
        unsigned maj, min;
        if (sscanf(line, "%*[^:]: %15s %*s %15s %ld %63s", type, rw, &pid, dev) != 4 || pid <= 0 ||
            pid == (long)getpid() || sscanf(dev, "%x:%x:%llu", &maj, &min, &ino) != 3)
            continue;
        bool ours = (have_db && ino == (unsigned long long)sd.st_ino) ||
                    (have_shm && ino == (unsigned long long)ss.st_ino);
        bool w = !strcmp(rw, "WRITE");
        if (ours && (best < 0 || (w && !best_write))) {
            best = pid;
            best_write = w;
        }
    }
    fclose(f);
    if (best < 0)
        return;
    char comm_path[64], comm[64] = "?";
    snprintf(comm_path, sizeof comm_path, "/proc/%ld/comm", best);
    FILE *c = fopen(comm_path, "r");
    if (c) {
        if (fgets(comm, sizeof comm, c))
            comm[strcspn(comm, "\n")] = 0;
        fclose(c);
    }
    snprintf(out, cap, "process %ld (%s)", best, comm);
}

/* ---- statements ---------------------------------------------------------------------- */

/* Whether usage_hourly has column name (on db). */
static bool has_column(sqlite3 *db, const char *name)
{
    sqlite3_stmt *s = NULL;
    bool found = false;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM pragma_table_info('usage_hourly') WHERE name = ?1;", -1, &s, NULL) ==
            SQLITE_OK &&
        sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC) == SQLITE_OK)
        found = sqlite3_step(s) == SQLITE_ROW;
    sqlite3_finalize(s);
    return found;
}

/* WAL, the table; on db. An SQLite result code. */
static int setup(sqlite3 *db, char **msg)
{
    int rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL;", NULL, NULL, msg);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, SCHEMA, NULL, NULL, msg);
    if (rc == SQLITE_OK && !has_column(db, "batch_requests"))
        rc = sqlite3_exec(db, BATCH_COLUMNS[0], NULL, NULL, msg);
    if (rc == SQLITE_OK && !has_column(db, "batch_tokens"))
        rc = sqlite3_exec(db, BATCH_COLUMNS[1], NULL, NULL, msg);
    return rc;
}

/* Per connection: synchronous=NORMAL, no checkpoints by the committer
 * (the writer thread runs them), the upsert prepared. */
static int prepare_writes(sqlite3 *db, sqlite3_stmt **upsert)
{
    int rc = sqlite3_exec(db, "PRAGMA synchronous=NORMAL;", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, "PRAGMA wal_autocheckpoint=0;", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db, UPSERT, -1, upsert, NULL);
    return rc;
}

/* One upsert in the current transaction (or its own). An SQLite result code. */
static int upsert_row(sqlite3_stmt *s, int64_t hour_s, const colo_usage_row *r)
{
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    int rc = sqlite3_bind_int64(s, 1, hour_s);
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
    rc = rc ? rc : sqlite3_bind_int64(s, 12, r->batch_requests);
    rc = rc ? rc : sqlite3_bind_int64(s, 13, r->batch_tokens);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(s);
    sqlite3_reset(s);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* ---- the queue (under mu) -------------------------------------------------------------- */

static bool same_key(const pending *p, int64_t hour_s, const colo_usage_row *r)
{
    return p->hour_s == hour_s && p->r.status == r->status && !strcmp(p->r.organization, r->organization) &&
           !strcmp(p->r.project, r->project) && !strcmp(p->r.key, r->key) && !strcmp(p->r.model, r->model);
}

/* Adds r to the queue, summed into its key's row; false when out of memory. */
static bool queue_add(colo_ledger *l, int64_t hour_s, const colo_usage_row *r)
{
    for (pending *p = l->queue; p; p = p->next)
        if (same_key(p, hour_s, r)) {
            p->r.requests += r->requests;
            p->r.prompt_tokens += r->prompt_tokens;
            p->r.completion_tokens += r->completion_tokens;
            p->r.queue_seconds += r->queue_seconds;
            p->r.device_seconds += r->device_seconds;
            p->r.batch_requests += r->batch_requests;
            p->r.batch_tokens += r->batch_tokens;
            l->n_requests += r->requests;
            return true;
        }
    pending *p = malloc(sizeof *p);
    if (!p)
        return false;
    p->hour_s = hour_s;
    p->r = *r;
    p->next = l->queue;
    l->queue = p;
    l->n_rows++;
    l->n_requests += r->requests;
    return true;
}

static void log_lost(const colo_ledger *l, int64_t hour_s, const colo_usage_row *r)
{
    COLO_ERROR("usage ledger %s: row not written: hour=%lld organization=%s project=%s key=%s model=%s status=%d "
               "requests=%lld prompt_tokens=%lld completion_tokens=%lld queue_seconds=%.6f device_seconds=%.6f",
               l->path, (long long)hour_s, r->organization, r->project, r->key, r->model, r->status,
               (long long)r->requests, (long long)r->prompt_tokens, (long long)r->completion_tokens,
               r->queue_seconds, r->device_seconds);
}

/* ---- the writer thread ------------------------------------------------------------------ */

/* Commits rows in one transaction on db. An SQLite result code. */
static int commit_rows(sqlite3 *db, sqlite3_stmt *upsert, const pending *rows)
{
    int rc = sqlite3_exec(db, "BEGIN IMMEDIATE;", NULL, NULL, NULL);
    for (const pending *p = rows; rc == SQLITE_OK && p; p = p->next)
        rc = upsert_row(upsert, p->hour_s, &p->r);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, "COMMIT;", NULL, NULL, NULL);
    if (rc != SQLITE_OK && !sqlite3_get_autocommit(db))
        sqlite3_exec(db, "ROLLBACK;", NULL, NULL, NULL);
    return rc;
}

static void *writer_loop(void *arg)
{
    colo_ledger *l = arg;
    sqlite3 *db = NULL;
    sqlite3_stmt *upsert = NULL;
    int backoff_ms = 0;
    bool warned = false;
    struct timespec next_checkpoint = deadline_after_ms(CHECKPOINT_INTERVAL_MS);
    pthread_mutex_lock(&l->mu);
    for (;;) {
        /* wait for rows, a stop, the next checkpoint or the end of a backoff */
        struct timespec until = backoff_ms ? deadline_after_ms(backoff_ms) : next_checkpoint;
        while (!l->stop && (!l->queue || backoff_ms) && !passed(&until))
            if (pthread_cond_timedwait(&l->cv, &l->mu, &until) == ETIMEDOUT)
                break;
        if (l->stop && (!l->queue || passed(&l->stop_by)))
            break;
        backoff_ms = l->queue ? backoff_ms : 0;
        pending *rows = l->queue;
        int64_t n_rows = l->n_rows, n_requests = l->n_requests;
        l->queue = NULL;
        l->committing = rows != NULL;
        pthread_mutex_unlock(&l->mu);

        int rc = SQLITE_OK;
        char *msg = NULL;
        if (!db) {
            rc = sqlite3_open_v2(l->path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
            if (rc == SQLITE_OK)
                sqlite3_busy_timeout(db, WRITER_BUSY_MS);
        }
        if (rc == SQLITE_OK && !upsert) {
            rc = atomic_load(&l->ready) ? SQLITE_OK : setup(db, &msg);
            if (rc == SQLITE_OK)
                rc = prepare_writes(db, &upsert);
            if (rc == SQLITE_OK && !atomic_load(&l->ready)) {
                atomic_store(&l->ready, true);
                COLO_INFO("usage ledger %s: the lock was released: the ledger is set up", l->path);
            }
        }
        if (rc == SQLITE_OK && rows)
            rc = commit_rows(db, upsert, rows);
        if (rc == SQLITE_OK && passed(&next_checkpoint)) {
            sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL); /* busy: next time */
            next_checkpoint = deadline_after_ms(CHECKPOINT_INTERVAL_MS);
        }
        if (rc != SQLITE_OK && !warned) {
            char holder[128] = "";
            if (is_lock_error(rc))
                colo_ledger_lock_holder(l->path, holder, sizeof holder);
            COLO_WARN("usage ledger %s: %s%s%s: %lld request(s) wait, retrying", l->path,
                      msg ? msg : db ? sqlite3_errmsg(db) : sqlite3_errstr(rc), holder[0] ? ", held by " : "", holder,
                      (long long)n_requests);
            warned = true;
        }
        sqlite3_free(msg);
        if (rc != SQLITE_OK && db && !upsert) { /* reopen next time: the file may have been replaced */
            sqlite3_close(db);
            db = NULL;
        }

        pthread_mutex_lock(&l->mu);
        l->committing = false;
        if (rc == SQLITE_OK) {
            l->n_rows -= rows ? n_rows : 0;
            l->n_requests -= rows ? n_requests : 0;
            while (rows) {
                pending *next = rows->next;
                free(rows);
                rows = next;
            }
            if (warned && rows == NULL && !l->queue)
                COLO_INFO("usage ledger %s: the waiting rows are written", l->path);
            warned = warned && l->queue;
            backoff_ms = 0;
        } else {
            /* back at the head of the queue, summed with what came meanwhile */
            pending *p = rows;
            while (p) {
                pending *next = p->next;
                pending *q = l->queue;
                while (q && !same_key(q, p->hour_s, &p->r))
                    q = q->next;
                if (q) {
                    q->r.requests += p->r.requests;
                    q->r.prompt_tokens += p->r.prompt_tokens;
                    q->r.completion_tokens += p->r.completion_tokens;
                    q->r.queue_seconds += p->r.queue_seconds;
                    q->r.device_seconds += p->r.device_seconds;
                    l->n_rows--;
                    free(p);
                } else {
                    p->next = l->queue;
                    l->queue = p;
                }
                p = next;
            }
            if (rows)
                l->n_retries++;
            backoff_ms = backoff_ms ? (backoff_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : backoff_ms * 2) : RETRY_MIN_MS;
        }
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    sqlite3_finalize(upsert);
    sqlite3_close(db);
    return NULL;
}

/* ---- life --------------------------------------------------------------------------------- */

colo_ledger *colo_ledger_open(const char *path, bool write, int lock_wait_ms, char *err, size_t errlen)
{
    colo_ledger *l = calloc(1, sizeof *l);
    if (!l || !(l->path = strdup(path))) {
        free(l);
        colo_set_err(err, errlen, "out of memory");
        return NULL;
    }
    l->write = write;
    l->lock_wait_ms = lock_wait_ms > 0 ? lock_wait_ms : 0;
    atomic_init(&l->ready, false);
    if (pthread_mutex_init(&l->mu, NULL)) {
        free(l->path);
        free(l);
        colo_set_err(err, errlen, "out of memory");
        return NULL;
    }
    if (pthread_cond_init(&l->cv, NULL)) {
        pthread_mutex_destroy(&l->mu);
        free(l->path);
        free(l);
        colo_set_err(err, errlen, "out of memory");
        return NULL;
    }
    int flags = write ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READONLY;
    if (sqlite3_open_v2(path, &l->db, flags | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        colo_set_err(err, errlen, "%s: %s", path, l->db ? sqlite3_errmsg(l->db) : "cannot open");
        goto out_close;
    }
    sqlite3_busy_timeout(l->db, l->lock_wait_ms);
    if (!write) {
        atomic_store(&l->ready, true);
        return l;
    }
    char *msg = NULL;
    int rc = setup(l->db, &msg);
    if (rc == SQLITE_OK) {
        atomic_store(&l->ready, true);
        rc = prepare_writes(l->db, &l->upsert);
    }
    if (rc != SQLITE_OK && !is_lock_error(rc)) {
        colo_set_err(err, errlen, "%s: %s", path, msg ? msg : sqlite3_errmsg(l->db));
        sqlite3_free(msg);
        goto out_close;
    }
    if (rc != SQLITE_OK) {
        char holder[128];
        colo_ledger_lock_holder(path, holder, sizeof holder);
        COLO_WARN("usage ledger %s: %s, held by %s for over %d ms: serving without waiting; the ledger's rows wait "
                  "in memory until the lock is released",
                  path, msg ? msg : sqlite3_errmsg(l->db), holder, l->lock_wait_ms);
        sqlite3_finalize(l->upsert);
        l->upsert = NULL;
    }
    sqlite3_free(msg);
    if (pthread_create(&l->writer, NULL, writer_loop, l) != 0) {
        colo_set_err(err, errlen, "%s: cannot start the ledger's writer thread", path);
        goto out_close;
    }
    l->writer_started = true;
    return l;

out_close:
    colo_ledger_close(l);
    return NULL;
}

void colo_ledger_close(colo_ledger *l)
{
    if (!l)
        return;
    if (l->writer_started) {
        pthread_mutex_lock(&l->mu);
        l->stop = true;
        l->stop_by = deadline_after_ms(l->lock_wait_ms);
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->writer, NULL);
    }
    for (pending *p = l->queue, *next; p; p = next) { /* what the wait could not write */
        next = p->next;
        log_lost(l, p->hour_s, &p->r);
        free(p);
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
    if (!l->write) {
        colo_set_err(err, errlen, "the ledger is read-only");
        return COLO_EINVAL;
    }
    int64_t hour_s = end_s - end_s % 3600;
    if (!l->upsert && atomic_load(&l->ready) && prepare_writes(l->db, &l->upsert) != SQLITE_OK) {
        sqlite3_finalize(l->upsert);
        l->upsert = NULL;
    }
    pthread_mutex_lock(&l->mu);
    bool direct = l->upsert && !l->queue && !l->committing;
    pthread_mutex_unlock(&l->mu);
    if (direct) {
        /* nothing waits: commit now, unless that would wait for a lock */
        sqlite3_busy_timeout(l->db, 0);
        int rc = upsert_row(l->upsert, hour_s, r);
        if (rc == SQLITE_OK)
            return COLO_OK;
        if (!sqlite3_get_autocommit(l->db))
            sqlite3_exec(l->db, "ROLLBACK;", NULL, NULL, NULL);
    }
    pthread_mutex_lock(&l->mu);
    bool queued = queue_add(l, hour_s, r);
    if (queued)
        pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    if (!queued) {
        log_lost(l, hour_s, r);
        colo_set_err(err, errlen, "usage ledger: out of memory");
        return COLO_ENOMEM;
    }
    return COLO_OK;
}

colo_status colo_ledger_add_on(sqlite3 *db, int64_t end_s, const colo_usage_row *r)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(db, UPSERT, -1, &s, NULL);
    if (rc == SQLITE_OK)
        rc = upsert_row(s, end_s - end_s % 3600, r);
    sqlite3_finalize(s);
    return rc == SQLITE_OK ? COLO_OK : COLO_EIO;
}

void colo_ledger_get_backlog(colo_ledger *l, colo_ledger_backlog *out)
{
    pthread_mutex_lock(&l->mu);
    out->rows = l->n_rows;
    out->requests = l->n_requests;
    out->retries = l->n_retries;
    pthread_mutex_unlock(&l->mu);
}

colo_status colo_ledger_flush(colo_ledger *l, int timeout_ms)
{
    struct timespec until = deadline_after_ms(timeout_ms > 0 ? timeout_ms : 0);
    pthread_mutex_lock(&l->mu);
    while ((l->queue || l->committing) && !passed(&until))
        if (pthread_cond_timedwait(&l->cv, &l->mu, &until) == ETIMEDOUT)
            break;
    bool empty = !l->queue && !l->committing;
    pthread_mutex_unlock(&l->mu);
    return empty ? COLO_OK : COLO_ETIMEDOUT;
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
    if (!atomic_load(&l->ready)) {
        colo_set_err(err, errlen, "usage ledger: %s is locked by another process and not set up yet", l->path);
        return COLO_EAGAIN;
    }
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
