/* server/batch_store.h: what the Files and Batch APIs keep (docs/API.md,
 * "Files and batches"), in tables of the usage ledger's SQLite database
 * (server/ledger.h) and a folder of files beside it.
 *
 *   batch_files(id, organization, project, object)     a file's OpenAI object
 *   batches(id, seq, organization, project, key, status, object)
 *   batch_lines(batch_id, line, ok, result)            a line's output line, once
 *
 * Objects are OpenAI's, kept as JSON text; a file's bytes are the file
 * "<files_dir>/<id>". Everything a tenant sees is looked up with its
 * organization and project: another tenant's id is not found.
 *
 * A line's result, the batch's object (its counts) and the line's usage
 * row (colo_ledger_add_on) are committed in one transaction
 * (colo_batch_store_line_done), so a process killed at any point has
 * either all three or none: a batch resumed after a restart runs exactly
 * the lines not done, and none is billed twice.
 *
 * Threads: every function on one thread (the server's loop). */
#ifndef COLO_SERVER_BATCH_STORE_H
#define COLO_SERVER_BATCH_STORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "runtime/status.h"
#include "server/tenants/ledger.h"

typedef struct colo_batch_store colo_batch_store;

/* The owner of what is stored: a tenant's organization, project and key
 * (the key a batch's lines run as). */
typedef struct colo_batch_owner {
    char organization[64], project[64], key[64];
} colo_batch_owner;

/* Opens (creating) the tables in the database at db_path and the folder
 * files_dir (mode 0700). ledger: usage rows are written with lines (the
 * ledger is on and its table is in that database). NULL with a message. */
colo_batch_store *colo_batch_store_open(const char *db_path, const char *files_dir, bool ledger, char *err,
                                        size_t errlen);
void colo_batch_store_close(colo_batch_store *bs); /* accepts NULL */
/* "<files_dir>/<id>" into out. */
void colo_batch_store_file_path(const colo_batch_store *bs, const char *id, char *out, size_t cap);

/* Files: obj is the file's object (its "id" set). put replaces. get and
 * list answer new references (NULL: none / out of memory); list is
 * newest first, only purpose's when purpose is not NULL. */
colo_status colo_batch_store_put_file(colo_batch_store *bs, const colo_batch_owner *o, const json_t *obj);
json_t *colo_batch_store_get_file(colo_batch_store *bs, const colo_batch_owner *o, const char *id);
json_t *colo_batch_store_list_files(colo_batch_store *bs, const colo_batch_owner *o, const char *purpose);
/* Removes the row and the file's bytes; COLO_EINVAL when o has no such file. */
colo_status colo_batch_store_delete_file(colo_batch_store *bs, const colo_batch_owner *o, const char *id);

/* Batches: put inserts or replaces obj (its "id" and "status" read). */
colo_status colo_batch_store_put_batch(colo_batch_store *bs, const colo_batch_owner *o, const json_t *obj);
json_t *colo_batch_store_get_batch(colo_batch_store *bs, const colo_batch_owner *o, const char *id);
/* Newest first, at most limit, after the batch with id after (NULL: from
 * the newest); *more tells whether others follow. */
json_t *colo_batch_store_list_batches(colo_batch_store *bs, const colo_batch_owner *o, const char *after, int limit,
                                      bool *more);
/* Each batch whose status is not final (validating, in_progress,
 * finalizing, cancelling), oldest first: fn(ud, owner, object) (object
 * borrowed). */
colo_status colo_batch_store_each_open(colo_batch_store *bs,
                                       void (*fn)(void *ud, const colo_batch_owner *o, json_t *obj), void *ud);

/* Line `line` (0-based) of batch obj is done: its output line result
 * (JSON text; ok: for the output file, else the error file), the batch's
 * object as it is now, and usage (NULL: none) in one transaction.
 * COLO_EIO when it could not be committed (nothing of it was). */
colo_status colo_batch_store_line_done(colo_batch_store *bs, const colo_batch_owner *o, const json_t *obj, int line,
                                       bool ok, const char *result, const colo_usage_row *usage);
/* Each line of batch id done so far, in line order: fn(ud, line, ok, result). */
colo_status colo_batch_store_each_line(colo_batch_store *bs, const char *id,
                                       void (*fn)(void *ud, int line, bool ok, const char *result), void *ud);

/* Stored responses (the Responses API's store): the response object,
 * its own input items and its context (every item its model was given),
 * JSON arrays as text. get answers new references (NULL: none, or made
 * before since_s). */
colo_status colo_batch_store_put_response(colo_batch_store *bs, const colo_batch_owner *o, const json_t *obj,
                                          const char *own, const char *context);
bool colo_batch_store_get_response(colo_batch_store *bs, const colo_batch_owner *o, const char *id, int64_t since_s,
                                   json_t **obj, json_t **own, json_t **context);
/* COLO_EINVAL when o has no such response. */
colo_status colo_batch_store_delete_response(colo_batch_store *bs, const colo_batch_owner *o, const char *id);
/* Removes every response made before before_s. */
colo_status colo_batch_store_purge_responses(colo_batch_store *bs, int64_t before_s);

#endif
