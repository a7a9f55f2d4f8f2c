/* The Responses API's stored responses: `store` keeps a response,
 * previous_response_id continues one, and GET / DELETE
 * /v1/responses/{id} and GET /v1/responses/{id}/input_items read them
 * (docs/API.md). Kept in the batches' store, owned by the tenant. */
#include "server/batches_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/log.h"

/* The input of a Responses body as items: a string is one user message;
 * items without an id get one (input_items lists them with it). New
 * reference, or NULL. */
static json_t *input_items(json_t *input)
{
    json_t *items = json_is_string(input)
                        ? json_pack("[{s:s,s:s,s:[{s:s,s:O}]}]", "type", "message", "role", "user", "content", "type",
                                    "input_text", "text", input)
                        : json_is_array(input) ? json_deep_copy(input) : NULL;
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it)
    {
        if (!json_is_object(it) || json_object_get(it, "id"))
            continue;
        char id[48];
        colo_batches_new_id("msg_", id, sizeof id);
        if (json_object_set_new(it, "id", json_string(id))) {
            json_decref(items);
            return NULL;
        }
    }
    return items;
}

/* previous's context, then its output, then own (all new). */
static json_t *chain(json_t *context, json_t *obj, json_t *own)
{
    json_t *all = json_deep_copy(context);
    json_t *out = json_object_get(obj, "output");
    if (!all || (json_is_array(out) && json_array_extend(all, out)) || json_array_extend(all, own)) {
        json_decref(all);
        return NULL;
    }
    return all;
}

static bool expand(void *ud, colo_http_req *req, json_t *body, char **own_text, char **context_text)
{
    colo_batches *b = ud;
    colo_batch_owner o;
    int key;
    if (!colo_batches_owner(b, req, &o, &key))
        return false;
    json_t *input = json_object_get(body, "input");
    if (!input) /* the decoder says what is missing */
        return (*own_text = strdup("[]")) && (*context_text = strdup("[]"));
    json_t *own = input_items(input);
    if (!own) /* not a string or array: the decoder says so */
        return (*own_text = strdup("[]")) && (*context_text = strdup("[]"));
    json_t *context = json_incref(own);
    const char *prev = json_string_value(json_object_get(body, "previous_response_id"));
    if (prev) {
        json_t *pobj, *pown, *pcontext;
        int64_t since = colo_batches_now_s() - b->rcfg.retention_s;
        if (!colo_batch_store_get_response(b->store, &o, prev, since, &pobj, &pown, &pcontext)) {
            json_decref(own);
            json_decref(context);
            colo_http_error(req, 404, "previous_response_not_found",
                            "previous_response_id: no response with id '%.64s' is kept", prev);
            return false;
        }
        json_decref(context);
        context = chain(pcontext, pobj, own);
        json_decref(pobj), json_decref(pown), json_decref(pcontext);
    }
    bool ok = context && !json_object_set(body, "input", context);
    *own_text = ok ? json_dumps(own, JSON_COMPACT) : NULL;
    *context_text = ok ? json_dumps(context, JSON_COMPACT) : NULL;
    json_decref(own);
    json_decref(context);
    if (!*own_text || !*context_text) {
        free(*own_text), free(*context_text);
        *own_text = *context_text = NULL;
        colo_http_error(req, 503, "out_of_memory", "out of memory");
        return false;
    }
    return true;
}

static void keep(void *ud, colo_http_req *req, const json_t *response, const char *own, const char *context)
{
    colo_batches *b = ud;
    colo_batch_owner o;
    int key;
    if (!colo_batches_owner(b, req, &o, &key))
        return;
    if (colo_batch_store_put_response(b->store, &o, response, own, context) != COLO_OK)
        COLO_ERROR("responses: %s could not be kept", json_string_value(json_object_get(response, "id")));
    /* what passed its retention goes (at most once a minute) */
    int64_t now = colo_batches_now_s();
    if (now - b->purged_s >= 60 && colo_batch_store_purge_responses(b->store, now - b->rcfg.retention_s) == COLO_OK)
        b->purged_s = now;
}

/* ---- the routes ------------------------------------------------------------------------------- */

/* The caller's kept response of the path's id; false after answering 404. */
static bool caller_response(colo_batches *b, colo_http_req *req, const colo_batch_owner *o, json_t **obj,
                            json_t **own)
{
    const char *id = colo_http_req_param(req, "id");
    json_t *context = NULL;
    if (!id || !colo_batch_store_get_response(b->store, o, id, colo_batches_now_s() - b->rcfg.retention_s, obj, own,
                                              &context)) {
        colo_http_error(req, 404, "not_found", "No response with id '%.64s' is kept", id ? id : "");
        return false;
    }
    json_decref(context);
    return true;
}

static void h_get(colo_batches *b, colo_http_req *req, const colo_batches_caller *c)
{
    json_t *obj, *own;
    if (!caller_response(b, req, &c->owner, &obj, &own))
        return;
    json_decref(own);
    colo_http_respond_json(req, 200, obj);
}

static void h_delete(colo_batches *b, colo_http_req *req, const colo_batches_caller *c)
{
    json_t *obj, *own;
    if (!caller_response(b, req, &c->owner, &obj, &own))
        return;
    json_decref(own);
    const char *id = colo_http_req_param(req, "id");
    if (colo_batch_store_delete_response(b->store, &c->owner, id) != COLO_OK) {
        json_decref(obj);
        colo_http_error(req, 500, "internal_error", "the response could not be deleted");
        return;
    }
    json_decref(obj);
    colo_http_respond_json(req, 200, json_pack("{s:s,s:s,s:b}", "id", id, "object", "response", "deleted", 1));
}

/* GET /v1/responses/{id}/input_items?order=asc|desc&limit=&after= */
static void h_input_items(colo_batches *b, colo_http_req *req, const colo_batches_caller *c)
{
    json_t *obj, *own;
    if (!caller_response(b, req, &c->owner, &obj, &own))
        return;
    json_decref(obj);
    const char *q = colo_http_req_query(req);
    char order[8] = "desc", after[80] = "";
    int limit;
    if (colo_batches_query(q, "order", order, sizeof order) && strcmp(order, "asc") && strcmp(order, "desc")) {
        json_decref(own);
        colo_http_error(req, 400, "invalid_request", "order: must be asc or desc");
        return;
    }
    if (!colo_batches_query_limit(req, &limit)) {
        json_decref(own);
        return;
    }
    bool has_after = colo_batches_query(q, "after", after, sizeof after);
    size_t n = json_array_size(own);
    json_t *data = json_array();
    bool started = !has_after, more = false;
    for (size_t k = 0; data && k < n; k++) {
        json_t *it = json_array_get(own, strcmp(order, "asc") ? n - 1 - k : k);
        if (!started) {
            const char *id = json_string_value(json_object_get(it, "id"));
            started = id && !strcmp(id, after);
            continue;
        }
        if ((int)json_array_size(data) == limit) {
            more = true;
            break;
        }
        if (json_array_append(data, it)) {
            json_decref(data);
            data = NULL;
        }
    }
    json_decref(own);
    if (!data) {
        colo_http_error(req, 503, "out_of_memory", "out of memory");
        return;
    }
    colo_batches_respond_list(req, data, more);
}

colo_status colo_responses_routes(colo_batches *b)
{
    static const colo_batches_route routes[] = {
        {"GET", "/v1/responses/{id}", h_get},
        {"DELETE", "/v1/responses/{id}", h_delete},
        {"GET", "/v1/responses/{id}/input_items", h_input_items},
    };
    return colo_batches_add_routes(b, routes, sizeof routes / sizeof *routes);
}

bool colo_batches_response_store(colo_batches *b, colo_api_response_store *out)
{
    if (!b || !b->store || !b->rcfg.enabled)
        return false;
    *out = (colo_api_response_store){
        .expand = expand, .keep = keep, .ud = b, .store_default = b->rcfg.store_default};
    return true;
}
