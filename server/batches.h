/* server/batches.h: OpenAI's Files and Batch APIs (docs/API.md, "Files
 * and batches").
 *
 *   POST   /v1/files                 multipart/form-data: purpose=batch, file
 *   GET    /v1/files                 the caller's files (?purpose=)
 *   GET    /v1/files/{id}            one
 *   GET    /v1/files/{id}/content    its bytes
 *   DELETE /v1/files/{id}
 *   POST   /v1/batches               input_file_id, endpoint, completion_window, metadata
 *   GET    /v1/batches               newest first (?after=, ?limit=)
 *   GET    /v1/batches/{id}
 *   POST   /v1/batches/{id}/cancel
 *   GET    /v1/responses/{id}         a response kept by POST /v1/responses (store)
 *   DELETE /v1/responses/{id}
 *   GET    /v1/responses/{id}/input_items
 *
 * What a tenant (organization/project) stores is its own: another
 * tenant's ids answer 404. A batch's lines run through the server's own
 * front door (colo_http_local_new) as requests of the key that created
 * it, in the batch class below every interactive request
 * (batching/queue.h), at most batches.concurrency of a batch at once;
 * each line's result is committed with its usage row
 * (server/batch_store.h), so a batch survives kill -9 and resumes on the
 * next start.
 *
 * Metrics: colo_batch_lines_queued{model}, colo_batch_lines_running{model},
 * colo_batch_lines_completed_total{model,outcome}, colo_batches_total{status}.
 *
 * Threads: the loop thread (create, stop and free on the controlling
 * thread before and after the loop runs). */
#ifndef COLO_SERVER_BATCHES_H
#define COLO_SERVER_BATCHES_H

#include "config/config.h"
#include "server/api/api.h"
#include "server/core/registry.h"
#include "server/core/server.h"

typedef struct colo_batches colo_batches;

/* Registers the routes on srv and resumes the batches a previous process
 * left unfinished; NULL with a message (the store cannot be opened).
 * With batches.enabled false, registers nothing and answers a batches
 * object that does nothing. */
colo_batches *colo_batches_create(colo_server *srv, colo_registry *reg, const colo_config *cfg, char *err,
                                  size_t errlen);
/* The Responses API's store (stored responses, previous_response_id,
 * GET / DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items) in
 * *out for colo_api_set_response_store; false when responses.enabled is
 * false (or there is no store). */
bool colo_batches_response_store(colo_batches *b, colo_api_response_store *out);
/* For colo_api_set_batch_metrics: false when batches are off. */
bool colo_batches_line_metrics(colo_batches *b, colo_metric **queued, colo_metric **running, colo_metric **completed);
/* Before the models stop: answers that come back from now on (lines
 * canceled by the shutdown) are dropped, not recorded, so that they run
 * again on the next start. */
void colo_batches_stop(colo_batches *b);
/* After the server is freed. Accepts NULL. */
void colo_batches_free(colo_batches *b);

#endif
