/* server/ledger.h: the usage ledger, an SQLite database (WAL) with one row
 * per (hour, organization, project, key, model, HTTP status) that sums the
 * requests ending in that hour: count, prompt and completion tokens, queue
 * and device seconds.
 *
 * colo_ledger_record commits one request in its own transaction before it
 * returns, so a request whose answer was sent after the call survives a
 * crash of the process (kill -9): WAL with synchronous=NORMAL loses commits
 * only when the machine itself loses power.
 *
 * A writing ledger copies its WAL into the database from a thread of its
 * own once a second, so a record never waits for a disk flush.
 *
 * Threads: each function on the thread that opened the ledger (the
 * server's loop thread; colo-usage). */
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
} colo_usage_row;

/* Opens (creating when write and missing) the database at path. NULL with
 * a message. */
colo_ledger *colo_ledger_open(const char *path, bool write, char *err, size_t errlen);
void colo_ledger_close(colo_ledger *l); /* accepts NULL */

/* Adds one finished request ending at time end_s (Unix seconds): r's
 * requests, tokens and seconds are added to its hour's row. */
colo_status colo_ledger_record(colo_ledger *l, int64_t end_s, const colo_usage_row *r, char *err, size_t errlen);

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
