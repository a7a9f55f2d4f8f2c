/* server/tenants/ledger.h: the usage ledger, an SQLite database (WAL) with one row
 * per (hour, organization, project, key, model, HTTP status) that sums the
 * requests ending in that hour: count, prompt and completion tokens, queue
 * and device seconds.
 *
 * Writing never waits for a lock. colo_ledger_record commits the request
 * at once when nothing is waiting and the database is free (a WAL append:
 * a request answered after the call survives kill -9); when another
 * process holds a write transaction (an operator's sqlite3 session, a
 * backup, a second colo-server), or earlier rows still wait, it queues the
 * row instead and returns. The ledger's writer thread commits the queue,
 * retrying with backoff (10 ms doubling to 1 s) for as long as the process
 * lives; queued rows of one (hour, organization, project, key, model,
 * status) are summed into one, so the queue's size is bounded by the
 * number of such rows, not of requests. colo_ledger_close waits for the
 * queue at most lock_wait_ms and logs every row it could not write. Rows
 * still queued are lost to kill -9.
 *
 * The writer thread also copies the WAL into the database once a second
 * (a checkpoint syncs the files; no recording thread waits for a flush).
 *
 * Threads: open, record, query and close on one thread (the server's loop
 * thread; colo-usage); colo_ledger_backlog and colo_ledger_flush from any. */
#ifndef COLO_SERVER_LEDGER_H
#define COLO_SERVER_LEDGER_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#include "runtime/status.h"

typedef struct colo_ledger colo_ledger;

typedef struct colo_usage_row {
    int64_t hour_s;            /* start of the hour (Unix seconds); when grouped by day, of the day */
    char organization[64], project[64], key[64], model[64]; /* "" when not grouped by it */
    int status;                /* HTTP status; 0 when not grouped by it */
    int64_t requests, errors;  /* errors: status >= 400 */
    int64_t prompt_tokens, completion_tokens;
    double queue_seconds, device_seconds;
    /* of them, lines of batches (POST /v1/batches) and their prompt plus
     * completion tokens */
    int64_t batch_requests, batch_tokens;
} colo_usage_row;

/* Opens (creating when write and missing) the database at path, waiting
 * up to lock_wait_ms for a lock another process holds. A writing ledger
 * whose database stays locked still opens: it logs a warning naming the
 * lock's holder and the writer thread sets the database up once the lock
 * is released (queries fail until then). NULL with a message for anything
 * else (a missing folder, a file that is not a database). */
colo_ledger *colo_ledger_open(const char *path, bool write, int lock_wait_ms, char *err, size_t errlen);
/* Commits what is queued, waiting at most the open's lock_wait_ms, logs
 * each row it could not write, and frees l. Accepts NULL. */
void colo_ledger_close(colo_ledger *l);

/* Adds one finished request ending at time end_s (Unix seconds): r's
 * requests, tokens and seconds are added to its hour's row, now or by the
 * writer thread (above). COLO_EINVAL on a read-only ledger; COLO_ENOMEM
 * when the row can be neither written nor queued (it is logged). */
colo_status colo_ledger_record(colo_ledger *l, int64_t end_s, const colo_usage_row *r, char *err, size_t errlen);

/* Adds r, ending at end_s, to the ledger's table in db, a connection of
 * the caller's to the ledger's database, inside the caller's transaction:
 * a batch line's row is committed with the line's result (server/batch_store.h).
 * COLO_EIO when SQLite fails (the caller rolls back). */
struct sqlite3;
colo_status colo_ledger_add_on(struct sqlite3 *db, int64_t end_s, const colo_usage_row *r);

typedef struct colo_ledger_backlog {
    int64_t rows;     /* queued rows (each sums requests of one hour, tenant key, model, status) */
    int64_t requests; /* requests in them: answered, not yet in the database */
    int64_t retries;  /* failed attempts to commit the queue since open */
} colo_ledger_backlog;
/* Any thread. */
void colo_ledger_get_backlog(colo_ledger *l, colo_ledger_backlog *out);
/* Any thread: waits until nothing is queued, at most timeout_ms.
 * COLO_ETIMEDOUT when rows are still queued. */
colo_status colo_ledger_flush(colo_ledger *l, int timeout_ms);

/* What holds a lock on the SQLite database at path, for messages: "process
 * 1234 (sqlite3)" from the kernel's lock table (/proc/locks), or "another
 * connection" when no other process is found. */
void colo_ledger_lock_holder(const char *path, char *out, size_t cap);

/* Grouping for colo_ledger_query (OR them); 0 = one total. */
enum {
    COLO_USAGE_BY_ORGANIZATION = 1 << 0,
    COLO_USAGE_BY_PROJECT = 1 << 1,
    COLO_USAGE_BY_KEY = 1 << 2,
    COLO_USAGE_BY_MODEL = 1 << 3,
    COLO_USAGE_BY_STATUS = 1 << 4,
    COLO_USAGE_BY_HOUR = 1 << 5,
    COLO_USAGE_BY_DAY = 1 << 6,
};
/* "organization,model,day" -> flags (tenant = organization,project). COLO_EINVAL on an unknown name. */
colo_status colo_usage_parse_group(const char *s, unsigned *flags);

/* Sums the hours in [from_s, to_s) by group, only organization/project
 * when they are non-NULL; fn(ud, row) per group, ordered by the grouped
 * columns. */
colo_status colo_ledger_query(colo_ledger *l, int64_t from_s, int64_t to_s, unsigned group, const char *organization,
                              const char *project, void (*fn)(void *ud, const colo_usage_row *row), void *ud,
                              char *err, size_t errlen);

/* "2026-11-23", "2026-11-23T10", "2026-11-23T10:30:00Z" (UTC) or Unix
 * seconds -> Unix seconds. COLO_EINVAL otherwise. */
colo_status colo_usage_parse_time(const char *s, int64_t *out);

#endif
