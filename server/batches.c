/* OpenAI's Batch API: the /v1/batches routes, and the life of the Files
 * and Batch APIs (server/batches.h). */
#include "server/batches_impl.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/log.h"
#include "server/http/http_json.h"
#include "server/tenants/tenants.h"

/* The endpoints a batch's lines may name. */
static const char *const endpoints[] = {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses",
                                        NULL};

static bool endpoint_ok(const char *e)
{
    for (int i = 0; e && endpoints[i]; i++)
        if (!strcmp(e, endpoints[i]))
            return true;
    return false;
}

/* metadata: at most 16 pairs of strings (keys up to 64, values up to 512 characters), or null. */
static bool metadata_ok(const json_t *m)
{
    if (!m || json_is_null(m))
        return true;
    if (!json_is_object(m) || json_object_size(m) > 16)
        return false;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)m, k, v) if (strlen(k) > 64 || !json_is_string(v) || json_string_length(v) > 512)
        return false;
    return true;
}

/* The batch object of a new batch, or NULL after answering 400/404. */
static json_t *new_batch(colo_batches *b, colo_http_req *req, const colo_batch_owner *o, json_t *body)
{
    const char *input = json_string_value(json_object_get(body, "input_file_id"));
    const char *endpoint = json_string_value(json_object_get(body, "endpoint"));
    const char *window = json_string_value(json_object_get(body, "completion_window"));
    json_t *metadata = json_object_get(body, "metadata");
    if (!input) {
        colo_http_error(req, 400, "invalid_request", "input_file_id: missing, or not a string");
        return NULL;
    }
    if (!endpoint_ok(endpoint)) {
        colo_http_error(req, 400, "invalid_request",
                        "endpoint: must be /v1/chat/completions, /v1/completions, /v1/embeddings or /v1/responses");
        return NULL;
    }
    if (!window || strcmp(window, "24h")) {
        colo_http_error(req, 400, "invalid_request", "completion_window: must be '24h'");
        return NULL;
    }
    if (!metadata_ok(metadata)) {
        colo_http_error(req, 400, "invalid_request",
                        "metadata: at most 16 pairs of strings (keys up to 64 characters, values up to 512)");
        return NULL;
    }
    json_t *file = colo_batch_store_get_file(b->store, o, input);
    if (!file) {
        colo_http_error(req, 404, "not_found", "input_file_id: no such File object: %.64s", input);
        return NULL;
    }
    const char *purpose = json_string_value(json_object_get(file, "purpose"));
    bool batch_file = purpose && !strcmp(purpose, "batch");
    json_decref(file);
    if (!batch_file) {
        colo_http_error(req, 400, "invalid_request", "input_file_id: %.64s was not uploaded with purpose 'batch'",
                        input);
        return NULL;
    }
    char id[64];
    colo_batches_new_id("batch_", id, sizeof id);
    int64_t now = colo_batches_now_s();
    json_t *obj = json_pack(
        "{s:s,s:s,s:s,s:n,s:s,s:s,s:s,s:n,s:n,s:I,s:n,s:n,s:I,s:n,s:n,s:n,s:n,s:n,s:n,s:{s:i,s:i,s:i},s:O}", "id", id,
        "object", "batch", "endpoint", endpoint, "errors", "input_file_id", input, "completion_window", "24h", "status",
        "validating", "output_file_id", "error_file_id", "created_at", (json_int_t)now, "in_progress_at",
        "finalizing_at", "expires_at", (json_int_t)(now + b->cfg.window_s), "completed_at", "failed_at", "expired_at",
        "cancelling_at", "cancelled_at", "model", "request_counts", "total", 0, "completed", 0, "failed", 0,
        "metadata", metadata && json_is_object(metadata) ? metadata : json_null());
    if (!obj)
        colo_http_error(req, 500, "internal_error", "out of memory");
    return obj;
}

static void h_create(colo_batches *b, colo_http_req *req, const colo_batches_caller *c)
{
    json_t *body = colo_http_req_json(req);
    if (!body)
        return; /* answered 400 */
    json_t *obj = new_batch(b, req, &c->owner, body);
    json_decref(body);
    if (!obj)
        return;
    if (colo_batch_store_put_batch(b->store, &c->owner, obj) != COLO_OK ||
        colo_batch_run(b, &c->owner, c->key, obj) != COLO_OK) {
        json_decref(obj);
        colo_http_error(req, 500, "internal_error", "the batch could not be stored");
        return;
    }
    colo_http_respond_json(req, 200, obj); /* its state when created: validating */
}

/* The caller's batch of the path's id (new reference): the running one's
 * object when it runs, else the stored one; NULL after answering 404. */
static json_t *caller_batch(colo_batches *b, colo_http_req *req, const colo_batch_owner *o)
{
    const char *id = colo_http_req_param(req, "id");
    json_t *running = id ? colo_batch_running(b, o, id) : NULL;
    json_t *obj = running ? json_incref(running) : id ? colo_batch_store_get_batch(b->store, o, id) : NULL;
    if (!obj)
        colo_http_error(req, 404, "not_found", "No such Batch object: %.64s", id ? id : "");
    return obj;
}

static void h_get(colo_batches *b, colo_http_req *req, const colo_batches_caller *c)
{
    json_t *obj = caller_batch(b, req, &c->owner);
    if (obj)
        colo_http_respond_json(req, 200, json_deep_copy(obj));
    json_decref(obj);
}

static void h_cancel(colo_batches *b, colo_http_req *req, const colo_batches_caller *c)
{
    json_t *obj = caller_batch(b, req, &c->owner);
    if (!obj)
        return;
    const char *status = json_string_value(json_object_get(obj, "status"));
    const char *id = json_string_value(json_object_get(obj, "id"));
    if (!status || !id || (strcmp(status, "validating") && strcmp(status, "in_progress") && strcmp(status, "cancelling"))) {
        colo_http_error(req, 409, "conflict", "Cannot cancel a batch with status '%s'", status ? status : "?");
        json_decref(obj);
        return;
    }
    colo_batch_cancel(b, id);
    json_t *now = colo_batch_running(b, &c->owner, id);
    colo_http_respond_json(req, 200, json_deep_copy(now ? now : obj));
    json_decref(obj);
}

static void h_list(colo_batches *b, colo_http_req *req, const colo_batches_caller *c)
{
    char after[80] = "";
    int limit;
    if (!colo_batches_query_limit(req, &limit))
        return;
    bool has_after = colo_batches_query(colo_http_req_query(req), "after", after, sizeof after);
    bool more = false;
    json_t *data = colo_batch_store_list_batches(b->store, &c->owner, has_after ? after : NULL, limit, &more);
    if (!data) {
        colo_http_error(req, 500, "internal_error", "the batches could not be listed");
        return;
    }
    /* a batch being run is newer in memory than in its last commit */
    size_t i;
    json_t *v;
    json_array_foreach(data, i, v)
    {
        const char *id = json_string_value(json_object_get(v, "id"));
        json_t *running = id ? colo_batch_running(b, &c->owner, id) : NULL;
        if (running && json_array_set_new(data, i, json_deep_copy(running))) {
            json_decref(data);
            colo_http_error(req, 500, "internal_error", "out of memory");
            return;
        }
    }
    colo_batches_respond_list(req, data, more);
}

/* ---- life ------------------------------------------------------------------------------------- */

static colo_status register_metrics(colo_batches *b)
{
    colo_metrics *m = colo_server_metrics(b->srv);
    b->m_queued = colo_metrics_gauge(m, "colo_batch_lines_queued",
                                     "Lines of batches in progress waiting to be run, by model.", 1,
                                     (const char *const[]){"model"});
    b->m_running = colo_metrics_gauge(m, "colo_batch_lines_running", "Lines of batches running now, by model.", 1,
                                      (const char *const[]){"model"});
    b->m_completed = colo_metrics_counter(m, "colo_batch_lines_completed_total",
                                          "Lines of batches answered and recorded, by model and outcome (ok, failed).",
                                          2, (const char *const[]){"model", "outcome"});
    b->m_batches = colo_metrics_counter(m, "colo_batches_total", "Batches that ended, by final status.", 1,
                                        (const char *const[]){"status"});
    return b->m_queued && b->m_running && b->m_completed && b->m_batches ? COLO_OK : COLO_ENOMEM;
}

/* The folder the ledger's database is in (usage.db's). */
static void state_dir(const colo_config *cfg, char *out, size_t cap)
{
    snprintf(out, cap, "%s", cfg->usage.db);
    char *slash = strrchr(out, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(out, cap, ".");
}

colo_batches *colo_batches_create(colo_server *srv, colo_registry *reg, const colo_config *cfg, char *err,
                                  size_t errlen)
{
    colo_batches *b = calloc(1, sizeof *b);
    if (!b) {
        colo_set_err(err, errlen, "out of memory");
        return NULL;
    }
    b->srv = srv;
    b->http = colo_server_http(srv);
    b->reg = reg;
    b->tenants = colo_server_tenants(srv);
    b->cfg = cfg->batches;
    b->rcfg = cfg->responses;
    if ((!cfg->batches.enabled && !cfg->responses.enabled) || !cfg->usage.db[0])
        return b;
    char dir[1024], files[1100];
    state_dir(cfg, dir, sizeof dir);
    snprintf(files, sizeof files, "%s/files", dir);
    bool ledger = cfg->usage.enabled && colo_server_ledger(srv);
    if (!(b->store = colo_batch_store_open(cfg->usage.db, files, ledger, err, errlen)))
        goto out_free;
    if (cfg->responses.enabled && colo_responses_routes(b) != COLO_OK) {
        colo_set_err(err, errlen, "cannot add the routes of /v1/responses/{id}");
        goto out_free;
    }
    if (!cfg->batches.enabled)
        return b;
    static const colo_batches_route routes[] = {
        {"POST", "/v1/batches", h_create},
        {"GET", "/v1/batches", h_list},
        {"GET", "/v1/batches/{id}", h_get},
        {"POST", "/v1/batches/{id}/cancel", h_cancel},
    };
    if (register_metrics(b) != COLO_OK || colo_files_routes(b) != COLO_OK ||
        colo_batches_add_routes(b, routes, sizeof routes / sizeof *routes) != COLO_OK) {
        colo_set_err(err, errlen, "cannot add the routes of /v1/files and /v1/batches");
        goto out_free;
    }
    colo_batch_start(b);
    return b;

out_free:
    colo_batches_free(b);
    return NULL;
}

bool colo_batches_line_metrics(colo_batches *b, colo_metric **queued, colo_metric **running, colo_metric **completed)
{
    if (!b || !b->m_queued)
        return false;
    *queued = b->m_queued;
    *running = b->m_running;
    *completed = b->m_completed;
    return true;
}

void colo_batches_stop(colo_batches *b)
{
    if (!b)
        return;
    b->stopping = true;
    if (b->tick) /* on the loop's base, freed with the server */
        event_free(b->tick);
    b->tick = NULL;
}

void colo_batches_free(colo_batches *b)
{
    if (!b)
        return;
    colo_batch_run_free(b);
    if (b->tick)
        event_free(b->tick);
    colo_batch_store_close(b->store);
    free(b);
}
