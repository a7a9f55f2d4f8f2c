/* server/batches_impl.h: what the Files and Batch APIs' files share:
 * files.c (the /v1/files routes), batches.c (the /v1/batches routes),
 * batch_run.c (running a batch's lines) and responses.c (the Responses
 * API's stored responses, in the same store). Loop thread. */
#ifndef COLO_SERVER_BATCHES_IMPL_H
#define COLO_SERVER_BATCHES_IMPL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/batch_store.h"
#include "server/batches.h"
#include "server/http/metrics.h"

struct event;
typedef struct run_batch run_batch; /* responses.c */
colo_status colo_responses_routes(colo_batches *b);

/* Who sent a request (colo_batches_owner): the owner of what it stores
 * and reads, and its key's index. */
typedef struct colo_batches_caller {
    colo_batch_owner owner;
    int key;
} colo_batches_caller;
/* A route of the Files, Batch and Responses APIs: fn runs once the caller
 * is known (one without a key was answered 401). */
typedef void colo_batches_handler(colo_batches *b, colo_http_req *req, const colo_batches_caller *c);
typedef struct colo_batches_route {
    const char *method, *pattern;
    colo_batches_handler *fn;
} colo_batches_route;
/* A route added: the user data its handler is called with. */
typedef struct colo_batches_bound {
    colo_batches *b;
    const colo_batches_route *route;
} colo_batches_bound;

struct colo_batches {
    colo_server *srv;
    colo_http_server *http;
    colo_registry *reg;
    struct colo_tenants *tenants;
    colo_batch_store *store;
    colo_batches_cfg cfg;
    colo_responses_cfg rcfg;
    int64_t purged_s;   /* when stored responses past their retention were last removed */
    run_batch *running; /* the batches being validated, run or finalized */
    struct event *tick; /* retries, expiry, and work handed to the next loop turn */
    bool tick_armed;
    bool resumed;       /* the batches of an earlier process were taken up */
    bool stopping;
    colo_metric *m_queued, *m_running, *m_completed, *m_batches;
    colo_batches_bound bound[16]; /* the routes added (colo_batches_add_routes) */
    int n_bound;
};

/* The caller of req as an owner (its key's organization, project and
 * name) and its key's index; false when it has none (answered 401). */
bool colo_batches_owner(colo_batches *b, colo_http_req *req, colo_batch_owner *o, int *key);
/* A fresh id: prefix and 24 hex digits. */
void colo_batches_new_id(const char *prefix, char *out, size_t cap);
/* Reads a stored file's bytes (malloc'd, NUL-terminated); NULL when it
 * cannot be read. */
char *colo_batches_read_file(colo_batches *b, const char *id, size_t *len);
/* Writes data as a new file of o with purpose and filename, and its
 * object (new reference; NULL when it could not be written). */
json_t *colo_batches_write_file(colo_batches *b, const colo_batch_owner *o, const char *purpose, const char *filename,
                                const char *data, size_t len);
/* A query parameter's value into buf (percent-decoded); false when absent or too long. */
bool colo_batches_query(const char *query, const char *name, char *buf, size_t cap);
/* Adds routes[0..n) (a static table); COLO_ENOMEM when one could not be
 * added. */
colo_status colo_batches_add_routes(colo_batches *b, const colo_batches_route *routes, size_t n);
/* The query's limit (1 to 100; 20 when absent) into *limit; false after
 * answering 400. */
bool colo_batches_query_limit(colo_http_req *req, int *limit);
/* Answers 200 with the list object of data (taken: its items' ids as
 * first_id and last_id) and has_more. */
void colo_batches_respond_list(colo_http_req *req, json_t *data, bool more);

/* files.c */
colo_status colo_files_routes(colo_batches *b);

/* responses.c */
colo_status colo_responses_routes(colo_batches *b);

/* batch_run.c */
/* Runs batch obj (its status says where it is) of o, whose lines run as
 * key key; takes a reference to obj. */
colo_status colo_batch_run(colo_batches *b, const colo_batch_owner *o, int key, json_t *obj);
/* The object of a batch being run (borrowed), or NULL. */
json_t *colo_batch_running(colo_batches *b, const colo_batch_owner *o, const char *id);
/* Cancels a batch being run: it finishes the lines in flight, then
 * ends cancelled. */
void colo_batch_cancel(colo_batches *b, const char *id);
/* Takes up what an earlier process left once the loop runs (the models
 * are loaded then). */
void colo_batch_start(colo_batches *b);
void colo_batch_resume(colo_batches *b);
void colo_batch_run_free(colo_batches *b);
/* Wall-clock seconds (the objects' times). */
int64_t colo_batches_now_s(void);

#endif
