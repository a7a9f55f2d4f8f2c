/* The admin routes: models loaded, unloaded, put to sleep and woken at
 * run time, and the config file's models applied again (server/admin.h). */
#include "server/admin.h"
#include "batching/kind.h"
#include "runtime/log.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* One admin route: its handler, called by guarded once allowed() passes. */
typedef struct admin_route {
    colo_admin *ad;
    colo_http_handler_fn fn;
} admin_route;

struct colo_admin {
    colo_registry *reg;
    colo_api *api;         /* renders a model for GET /admin/models */
    colo_sched_policy policy;
    char config_dir[1024]; /* anchors relative paths in POST /admin/models; "" = working directory */
    char key[256];         /* "" = none */
    bool loopback;         /* the listener is a loopback address */
    admin_route routes[8]; /* what each route calls once the caller may (guarded) */
    admin_route unknown;   /* the same, for a path under /admin/ that is no route */
};

static bool is_loopback(const char *host)
{
    return !strncmp(host, "127.", 4) || !strcmp(host, "::1") || !strcmp(host, "localhost");
}

/* Answers 401/403 and returns false when the caller may not use the admin routes. */
static bool allowed(colo_http_req *req, colo_admin *ad)
{
    if (ad->key[0]) {
        if (colo_server_auth_ok(colo_http_req_known(req, COLO_HDR_AUTHORIZATION), ad->key))
            return true;
        colo_http_add_header(req, "WWW-Authenticate", "Bearer");
        colo_http_error(req, 401, "unauthorized", "the admin routes need Authorization: Bearer <admin key>");
        return false;
    }
    if (ad->loopback)
        return true;
    colo_http_error(req, 403, "forbidden",
                    "no admin key is set (server.admin_key_env): the admin routes answer only on a loopback listener");
    return false;
}

/* Every admin route is registered through this: the admin key (or the
 * loopback listener) is checked once, here, before the route's handler. */
static void guarded(colo_http_req *req, void *ud)
{
    admin_route *r = ud;
    if (allowed(req, r->ad))
        r->fn(req, r->ad);
}

/* The request's body when it is a JSON object (what: what it must hold),
 * else NULL, answered 400. */
static const char *object_body(colo_http_req *req, size_t *len, const char *what)
{
    *len = 0;
    const char *body = colo_http_req_body(req, len);
    json_error_t jerr;
    json_t *j = body && *len ? json_loadb(body, *len, 0, &jerr) : NULL;
    bool obj = j && json_is_object(j);
    json_decref(j);
    if (obj)
        return body;
    colo_http_error(req, 400, "invalid_json", "the body must be a JSON object: %s", what);
    return NULL;
}

static colo_registry_model *model_of(colo_http_req *req, colo_admin *ad)
{
    const char *name = colo_http_req_param(req, "name");
    colo_registry_model *am = colo_registry_find(ad->reg, name);
    if (am) {
        colo_http_req_set_model(req, name);
        return am;
    }
    colo_http_error(req, 404, "model_not_found", "no model named '%.64s'", name ? name : "");
    return NULL;
}

static void h_list(colo_http_req *req, void *ud)
{
    colo_admin *ad = ud;
    json_t *data = json_array();
    for (colo_registry_model *e = NULL; data && (e = colo_registry_next(ad->reg, e));)
        if (json_array_append_new(data, colo_api_model_json(ad->api, e)) != 0) {
            json_decref(data);
            data = NULL;
        }
    colo_http_respond_json(req, 200, data ? json_pack("{s:o}", "models", data) : NULL);
}

/* 507 with the bytes: {"error":{"code":"insufficient_memory","message",
 * "needed_bytes","available_bytes"}}. */
static void refuse_no_room(colo_http_req *req, const char *name, size_t need, size_t avail)
{
    char msg[384];
    snprintf(msg, sizeof msg,
             "model %s needs %zu bytes of guaranteed memory; %zu are available, counting the idle models that may "
             "be put to sleep (pinned, busy and loading models are not)",
             name, need, avail);
    json_t *body = json_pack("{s:{s:s,s:s,s:I,s:I,s:s}}", "error", "code", "insufficient_memory", "message", msg,
                             "needed_bytes", (json_int_t)need, "available_bytes", (json_int_t)avail, "request_id",
                             colo_http_req_id(req));
    colo_http_respond_json(req, 507, body);
}

static void sleep_or_wake(colo_http_req *req, colo_admin *ad, bool wake)
{
    colo_registry_model *am = model_of(req, ad);
    if (!am)
        return;
    if (am->unloading) {
        colo_http_add_header(req, "Retry-After", "1");
        colo_http_error(req, 409, "model_not_serving", "model %s is being unloaded", am->name);
        return;
    }
    char err[256];
    size_t need = 0, avail = 0;
    if (wake && colo_served_wake_fits(am->m, &need, &avail) != COLO_OK) {
        refuse_no_room(req, am->name, need, avail);
        return;
    }
    colo_status st = wake ? colo_served_wake(am->m, err, sizeof err) : colo_served_sleep(am->m, err, sizeof err);
    if (st == COLO_EUNSUPPORTED) {
        colo_http_error(req, 400, "unsupported", "%s", err);
        return;
    }
    if (st != COLO_OK) {
        colo_http_error(req, 409, "model_not_serving", "%s", err);
        return;
    }
    colo_http_respond_json(req, 202,
                           json_pack("{s:s,s:s,s:s}", "model", am->name, "requested", wake ? "wake" : "sleep", "state",
                                     colo_served_state_name(colo_served_get_state(am->m))));
}

/* ---- loading at run time ------------------------------------------------------------ */

/* The checks of a run-time load that need the server: the scheduling
 * keys and a duplicate name. 0 or the HTTP status, with the error code
 * and message. */
static int check_new(colo_admin *ad, const colo_model_cfg *mc, const char **code, bool *retry, char *msg, size_t len)
{
    *retry = false;
    colo_sched_model sm = {.priority = mc->priority, .share = mc->share, .sm_share = mc->sm_share, .at_run_time = true};
    colo_sched_key key;
    char why[256];
    if (colo_sched_policy_validate(ad->policy, &sm, &key, why, sizeof why) != COLO_OK) {
        *code = "invalid_config";
        snprintf(msg, len, "model.%s: %s", colo_sched_key_name(key), why);
        return 400;
    }
    /* its name, aliases and adapters against every model's and adapter's */
    if (!colo_registry_names_free(ad->reg, mc, NULL, retry, msg, len)) {
        *code = "model_exists";
        return 409;
    }
    if (!colo_registry_slot_free(ad->reg)) {
        *code = "too_many_models";
        snprintf(msg, len, "colo-server holds %d models (loading, serving, failed or being unloaded), its most: "
                           "delete one first", COLO_REGISTRY_MAX_MODELS);
        return 503;
    }
    return 0;
}

/* POST /admin/models: 202 {"model","state":"loading"}; the model loads
 * off the loop and turns ready, or failed with the reason. */
static void h_load(colo_http_req *req, void *ud)
{
    colo_admin *ad = ud;
    if (!colo_registry_attached(ad->reg)) {
        colo_http_error(req, 503, "unavailable", "colo-server is still starting");
        return;
    }
    size_t len = 0;
    const char *body = object_body(req, &len, "one model's config, as in models:");
    if (!body)
        return;
    static colo_model_cfg mc; /* loop thread only; large */
    char msg[1024];
    if (colo_config_parse_model(body, len, "body", ad->config_dir, &mc, msg, sizeof msg) != COLO_OK) {
        colo_http_error(req, 400, "invalid_config", "%s", msg);
        return;
    }
    colo_http_req_set_model(req, mc.name);
    const char *code = "";
    bool retry;
    int http = check_new(ad, &mc, &code, &retry, msg, sizeof msg);
    if (http) {
        if (retry)
            colo_http_add_header(req, "Retry-After", "1");
        colo_http_error(req, http, code, "%s", msg);
        return;
    }
    if (!colo_registry_drafts_fit(ad->reg, &mc, msg, sizeof msg)) {
        colo_http_error(req, 400, "invalid_config", "%s", msg);
        return;
    }
    size_t need = 0, avail = 0;
    if (!colo_registry_room(ad->reg, &mc, &need, &avail)) {
        refuse_no_room(req, mc.name, need, avail);
        return;
    }
    colo_status st = colo_registry_load(ad->reg, &mc, msg, sizeof msg);
    if (st != COLO_OK) {
        if (st == COLO_EINVAL)
            colo_http_error(req, 400, "invalid_config", "model.kind: %s", msg);
        else
            colo_http_error(req, 503, "unavailable", "%s", msg);
        return;
    }
    colo_registry_model *e = colo_registry_find(ad->reg, mc.name);
    colo_http_respond_json(req, 202, json_pack("{s:s,s:s,s:s}", "model", mc.name, "requested", "load", "state",
                                               colo_served_state_name(colo_served_get_state(e->m))));
}

/* ---- unloading ------------------------------------------------------------------------ */

/* DELETE /admin/models/{name}: 202 at once; the model refuses new requests
 * (503 with Retry-After), finishes what it has, then is unloaded and gone
 * from the API. */
static void h_unload(colo_http_req *req, void *ud)
{
    colo_admin *ad = ud;
    colo_registry_model *am = model_of(req, ad);
    if (!am)
        return;
    if (am->unloading) {
        colo_http_add_header(req, "Retry-After", "1");
        colo_http_error(req, 409, "model_not_serving", "model %s is already being unloaded", am->name);
        return;
    }
    if (colo_registry_unload(ad->reg, am, NULL) != COLO_OK) {
        colo_http_error(req, 503, "out_of_memory", "cannot start the unload");
        return;
    }
    colo_registry_want(ad->reg, am->name, false); /* deleted by the operator: readiness no longer waits for it */
    COLO_INFO("admin: unloading model %s once it has drained", am->name);
    colo_http_respond_json(req, 202, json_pack("{s:s,s:s,s:s}", "model", am->name, "requested", "unload", "state",
                                               colo_served_state_name(colo_served_get_state(am->m))));
}

/* A path under /admin/ that is no admin route: 404 to the admin key, and
 * to everyone else what the admin routes answer them (401 or 403), so
 * that a tenant's API key tells nothing about them. */
static void h_unknown(colo_http_req *req, void *ud)
{
    (void)ud;
    colo_http_error(req, 404, "not_found", "no admin route %.16s %.128s", colo_http_req_method(req),
                    colo_http_req_path(req));
}

static void h_sleep(colo_http_req *req, void *ud) { sleep_or_wake(req, ud, false); }
static void h_wake(colo_http_req *req, void *ud) { sleep_or_wake(req, ud, true); }

/* ---- LoRA adapters ------------------------------------------------------------------------ */

/* Whether name is free for a new adapter of am: no model, alias or
 * adapter has it, but an adapter of am's being unloaded (the new one
 * takes its place). 409 answered otherwise, with Retry-After when what
 * holds it is being unloaded. */
static bool adapter_name_free(colo_http_req *req, colo_admin *ad, colo_registry_model *am, const char *name)
{
    bool going;
    char msg[256];
    if (colo_registry_name_free(ad->reg, name, NULL, &going, msg, sizeof msg))
        return true;
    colo_served_adapter_info in;
    if (!am->unloading && colo_served_adapter_get(am->m, name, &in) && in.state == COLO_ADAPTER_UNLOADING)
        return true;
    if (going)
        colo_http_add_header(req, "Retry-After", "1");
    colo_http_error(req, 409, "model_exists", "%s", msg);
    return false;
}

/* POST /admin/models/{name}/adapters: one adapter's config (as an item of
 * the model's adapters:); 202 {"model","adapter","state":"loading"}: the
 * model's executor loads it between steps, and it turns ready, or failed
 * with the reason (GET /v1/models/{adapter}). The file is checked against
 * the model here first: a mismatch is a 400 naming the tensor. */
static void h_adapter_add(colo_http_req *req, void *ud)
{
    colo_admin *ad = ud;
    colo_registry_model *am = model_of(req, ad);
    if (!am)
        return;
    size_t len = 0;
    const char *body = object_body(req, &len, "one adapter's config ({\"name\", \"path\", ...})");
    if (!body)
        return;
    const colo_model_cfg *base = colo_served_config(am->m);
    colo_adapter_cfg a;
    char msg[1024];
    if (colo_config_parse_adapter(body, len, "body", ad->config_dir, base, &a, msg, sizeof msg) != COLO_OK) {
        colo_http_error(req, 400, "invalid_config", "%s", msg);
        return;
    }
    if (!colo_kind_named_can(base->kind, COLO_KIND_CAN_ADAPTERS)) {
        colo_http_error(req, 400, "invalid_config", "model %s (kind %s) takes no LoRA adapters", am->name, base->kind);
        return;
    }
    if (!adapter_name_free(req, ad, am, a.name))
        return;
    colo_status st = colo_served_adapter_check(base, &a, msg, sizeof msg);
    if (st != COLO_OK) {
        colo_http_error(req, 400, "invalid_adapter", "%s", msg);
        return;
    }
    if ((st = colo_served_adapter_add(am->m, &a, msg, sizeof msg)) != COLO_OK) {
        colo_http_error(req, st == COLO_ECANCELED ? 503 : st == COLO_ENOMEM ? 507 : 400,
                        st == COLO_ECANCELED ? "model_not_serving" : st == COLO_ENOMEM ? "too_many_adapters"
                                                                                      : "invalid_config",
                        "%s", msg);
        return;
    }
    COLO_INFO("admin: model %s: loading adapter %s (%s)", am->name, a.name, a.path);
    colo_http_respond_json(req, 202, json_pack("{s:s,s:s,s:s,s:s}", "model", am->name, "adapter", a.name, "requested",
                                               "load", "state", "loading"));
}

/* DELETE /admin/models/{name}/adapters/{adapter}: 202 at once; new
 * requests to it are refused (503), those it runs finish, then its memory
 * is freed and it is gone. */
static void h_adapter_remove(colo_http_req *req, void *ud)
{
    colo_admin *ad = ud;
    colo_registry_model *am = model_of(req, ad);
    if (!am)
        return;
    const char *name = colo_http_req_param(req, "adapter");
    colo_served_adapter_info in;
    char msg[256];
    if (!name || !colo_served_adapter_get(am->m, name, &in) || in.state == COLO_ADAPTER_UNLOADING ||
        colo_served_adapter_remove(am->m, name, msg, sizeof msg) != COLO_OK) {
        colo_http_error(req, 404, "model_not_found", "model %s has no adapter named '%.64s'%s", am->name,
                        name ? name : "", name && colo_served_adapter_get(am->m, name, NULL) ? " (being unloaded)" : "");
        return;
    }
    COLO_INFO("admin: model %s: unloading adapter %s once its requests have finished", am->name, name);
    colo_http_respond_json(req, 202, json_pack("{s:s,s:s,s:s,s:s}", "model", am->name, "adapter", name, "requested",
                                               "unload", "state", "unloading"));
}

/* ---- the config file again (SIGHUP) ------------------------------------------------------ */

/* Which keys of two configs of one model differ, into what ("" when
 * none); live: only keys that apply in place differ. */
static void differences(const colo_model_cfg *a, const colo_model_cfg *b, char *what, size_t len, bool *live)
{
    what[0] = 0;
    size_t o = 0;
#define DIFF(cond, key)                                                                                         \
    if (cond)                                                                                                   \
        o += (size_t)snprintf(what + o, o < len ? len - o : 0, "%s%s", o ? ", " : "", key);
    DIFF(strcmp(a->kind, b->kind), "kind");
    DIFF(a->n_aliases != b->n_aliases || memcmp(a->aliases, b->aliases, sizeof a->aliases), "aliases");
    DIFF(strcmp(a->path, b->path), "path/source");
    DIFF(a->memory_fraction != b->memory_fraction, "memory_fraction");
    DIFF(a->memory_max_fraction != b->memory_max_fraction, "memory_max_fraction");
    DIFF(a->priority != b->priority, "priority");
    DIFF(a->share != b->share, "share");
    DIFF(a->sm_share != b->sm_share, "sm_share");
    DIFF(a->max_seq_len != b->max_seq_len, "max_seq_len");
    DIFF(a->kv_block_size != b->kv_block_size || a->kv_dtype != b->kv_dtype, "kv_cache");
    DIFF(strcmp(a->chat_template, b->chat_template), "chat_template");
    DIFF(a->message_control_tokens != b->message_control_tokens, "message_control_tokens");
    DIFF(a->exact_activations != b->exact_activations, "exact_activations");
    DIFF(memcmp(&a->batching, &b->batching, sizeof a->batching), "batching");
    DIFF(memcmp(&a->sla, &b->sla, sizeof a->sla), "sla");
    DIFF(a->schema_max_length != b->schema_max_length || a->schema_max_items != b->schema_max_items,
         "structured_output");
    DIFF(a->adapter_memory_bytes != b->adapter_memory_bytes, "adapter_memory_bytes");
    DIFF(a->speculative.lookup != b->speculative.lookup || a->speculative.tokens != b->speculative.tokens ||
             a->speculative.suffix != b->speculative.suffix ||
             a->speculative.suffix_memory_bytes != b->speculative.suffix_memory_bytes,
         "speculative");
    size_t reload_keys = o;
    DIFF(a->keep_alive_ms != b->keep_alive_ms, "keep_alive_ms");
    DIFF(a->pinned != b->pinned, "pinned");
#undef DIFF
    *live = reload_keys == 0;
}

/* A changed adapter's new file loaded in the place of the one serving,
 * which serves until then; a new adapter added. What cannot be applied
 * (a file that does not fit the base, a name another model or adapter
 * holds) leaves what serves as it is. */
static void reload_adapter(colo_admin *ad, colo_registry_model *am, const colo_model_cfg *mc,
                           const colo_adapter_cfg *a, bool listed)
{
    char msg[1024];
    bool going;
    if (!listed && !colo_registry_name_free(ad->reg, a->name, am, &going, msg, sizeof msg))
        COLO_ERROR("reload: model %s: adapter %s: not added: %s", mc->name, a->name, msg);
    else if (colo_served_adapter_check(mc, a, msg, sizeof msg) != COLO_OK ||
             (listed ? colo_served_adapter_replace : colo_served_adapter_add)(am->m, a, msg, sizeof msg) != COLO_OK)
        COLO_ERROR("reload: model %s: adapter %s: not %s: %s", mc->name, a->name,
                   listed ? "replaced (the one loaded serves on)" : "added", msg);
    else
        COLO_INFO("reload: model %s: adapter %s: %s (loading)", mc->name, a->name,
                  listed ? "replaced once the new file has loaded" : "added");
}

/* The file's adapters of a model that stays as it is: new ones added,
 * changed ones (file or scale) replaced, those the file named before and
 * no longer names removed (as DELETE does), a new priority or SLA applied
 * in place. Adapters added through the admin API are left alone. Returns
 * the changes. */
static int reload_adapters(colo_admin *ad, colo_registry_model *am, const colo_model_cfg *old,
                           const colo_model_cfg *mc)
{
    int changes = 0;
    char msg[1024];
    for (int i = 0; i < mc->n_adapters; i++) {
        const colo_adapter_cfg *a = &mc->adapters[i];
        colo_served_adapter_info in;
        bool listed = colo_served_adapter_get(am->m, a->name, &in) && in.state != COLO_ADAPTER_UNLOADING;
        if (listed && !strcmp(in.cfg.path, a->path) && in.cfg.scale == a->scale) {
            if (in.cfg.priority != a->priority || memcmp(&in.cfg.sla, &a->sla, sizeof a->sla)) {
                colo_served_adapter_update(am->m, a);
                COLO_INFO("reload: model %s: adapter %s: priority and SLA applied in place", mc->name, a->name);
                changes++;
            }
            continue;
        }
        changes++;
        reload_adapter(ad, am, mc, a, listed);
    }
    for (int i = 0; old && i < old->n_adapters; i++) {
        const char *name = old->adapters[i].name;
        colo_served_adapter_info in;
        if (colo_model_cfg_adapter(mc, name) || !colo_served_adapter_get(am->m, name, &in) ||
            in.state == COLO_ADAPTER_UNLOADING)
            continue;
        changes++;
        if (colo_served_adapter_remove(am->m, name, msg, sizeof msg) == COLO_OK)
            COLO_INFO("reload: model %s: adapter %s: removed (unloaded once its requests finish)", mc->name, name);
    }
    return changes;
}

static const colo_model_cfg *named(const colo_config *c, const char *name)
{
    for (int i = 0; i < c->n_models; i++)
        if (!strcmp(c->models[i].name, name))
            return &c->models[i];
    return NULL;
}

/* Loads mc as the reload's "added", with a log line either way. */
static void reload_add(colo_admin *ad, const colo_model_cfg *mc)
{
    const char *code = "";
    char msg[1024];
    size_t need = 0, avail = 0;
    bool retry;
    if (check_new(ad, mc, &code, &retry, msg, sizeof msg))
        COLO_ERROR("reload: model %s: not added: %s", mc->name, msg);
    else if (!colo_registry_room(ad->reg, mc, &need, &avail))
        COLO_ERROR("reload: model %s: not added: needs %zu bytes of guaranteed memory, %zu available", mc->name, need,
                   avail);
    else if (colo_registry_load(ad->reg, mc, msg, sizeof msg) != COLO_OK)
        COLO_ERROR("reload: model %s: not added: %s", mc->name, msg);
    else
        COLO_INFO("reload: model %s: added (loading)", mc->name);
}

/* Tenants alike but for where they were written (other models' lines move them). */
static bool tenants_equal(const colo_tenants_cfg *a, const colo_tenants_cfg *b)
{
    colo_tenants_cfg *x = malloc(sizeof *x), *y = malloc(sizeof *y);
    bool eq = false;
    if (x && y) {
        *x = *a;
        *y = *b;
        colo_tenants_cfg *both[2] = {x, y};
        for (int k = 0; k < 2; k++) {
            colo_tenants_cfg *t = both[k];
            colo_tenant_level_cfg *levels[COLO_CFG_MAX_ORGS + COLO_CFG_MAX_PROJECTS + COLO_CFG_MAX_KEYS];
            int n = 0;
            for (int i = 0; i < COLO_CFG_MAX_ORGS; i++)
                levels[n++] = &t->orgs[i].l;
            for (int i = 0; i < COLO_CFG_MAX_PROJECTS; i++)
                levels[n++] = &t->projects[i].l;
            for (int i = 0; i < COLO_CFG_MAX_KEYS; i++)
                levels[n++] = &t->keys[i].l;
            for (int i = 0; i < n; i++) {
                memset(&levels[i]->mark, 0, sizeof levels[i]->mark);
                memset(levels[i]->model_marks, 0, sizeof levels[i]->model_marks);
            }
        }
        eq = !memcmp(x, y, sizeof *x);
    }
    free(x);
    free(y);
    return eq;
}

void colo_admin_reload(colo_admin *ad, const colo_config *was, const colo_config *now)
{
    int changes = 0;
    /* removed */
    for (int i = 0; i < was->n_models; i++) {
        const colo_model_cfg *mc = &was->models[i];
        colo_registry_model *am = colo_registry_find(ad->reg, mc->name);
        if (named(now, mc->name) || !am)
            continue;
        changes++;
        if (am->unloading && colo_registry_next_config(ad->reg, am)) {
            colo_registry_set_next_config(ad->reg, am, NULL); /* an earlier reload's change: not loaded again */
            COLO_INFO("reload: model %s: removed (being unloaded; not loaded again)", mc->name);
        } else if (am->unloading)
            COLO_INFO("reload: model %s: removed (already being unloaded)", mc->name);
        else if (colo_registry_unload(ad->reg, am, NULL) == COLO_OK)
            COLO_INFO("reload: model %s: removed (draining, then unloaded)", mc->name);
        else
            COLO_ERROR("reload: model %s: removed from the file, but cannot start its unload", mc->name);
    }
    /* added and changed */
    for (int i = 0; i < now->n_models; i++) {
        const colo_model_cfg *mc = &now->models[i];
        const colo_model_cfg *old = named(was, mc->name);
        colo_registry_model *am = colo_registry_find(ad->reg, mc->name);
        if (!am) {
            changes++;
            reload_add(ad, mc);
            continue;
        }
        char what[256];
        bool live;
        if (am->unloading) {
            /* Being unloaded (removed by an earlier reload, deleted, or
             * changed): the file names it, so it is loaded again with this
             * config once gone. */
            const colo_model_cfg *next = colo_registry_next_config(ad->reg, am);
            if (next)
                differences(next, mc, what, sizeof what, &live);
            if (next && !what[0])
                continue; /* already to be loaded with this config */
            changes++;
            colo_registry_set_next_config(ad->reg, am, mc);
            COLO_INFO("reload: model %s: named by the file while being unloaded: loaded again once it is gone",
                      mc->name);
            continue;
        }
        const colo_model_cfg *cur = colo_served_config(am->m);
        differences(old ? old : cur, mc, what, sizeof what, &live);
        if (!what[0] && colo_served_get_state(am->m) == COLO_SERVED_FAILED) {
            snprintf(what, sizeof what, "it had failed");
            live = false;
        }
        if (!what[0] || live) /* the model stays: its adapters change in place */
            changes += reload_adapters(ad, am, old ? old : cur, mc);
        if (!what[0])
            continue;
        changes++;
        if (live) {
            colo_served_set_live(am->m, mc->keep_alive_ms, mc->pinned);
            COLO_INFO("reload: model %s: changed (%s): applied in place", mc->name, what);
        } else if (colo_registry_unload(ad->reg, am, mc) == COLO_OK) {
            COLO_INFO("reload: model %s: changed (%s): draining, then loading the new config", mc->name, what);
        } else {
            COLO_ERROR("reload: model %s: changed (%s), but cannot start its unload", mc->name, what);
        }
    }
    /* what cannot change at run time */
    char kept[512] = "";
    size_t o = 0;
#define KEPT(field, name)                                                                                       \
    if (memcmp(&was->field, &now->field, sizeof was->field))                                                   \
        o += (size_t)snprintf(kept + o, o < sizeof kept ? sizeof kept - o : 0, "%s%s", o ? ", " : "", name);
    if (strcmp(was->server.listen_host, now->server.listen_host) || was->server.listen_port != now->server.listen_port)
        o += (size_t)snprintf(kept + o, sizeof kept - o, "server.listen");
    KEPT(server.device, "server.device");
    KEPT(server.threads, "server.threads");
    KEPT(server.cpu_memory_bytes, "server.cpu_memory_bytes");
    KEPT(server.gpu_memory_bytes, "server.gpu_memory_bytes");
    KEPT(server.elastic_memory, "server.elastic_memory");
    KEPT(server.cuda_graphs, "server.cuda_graphs");
    KEPT(server.api_key_env, "server.api_key_env");
    KEPT(server.admin_key_env, "server.admin_key_env");
    KEPT(server.max_body_bytes, "server.max_body_bytes");
    KEPT(server.max_header_bytes, "server.max_header_bytes");
    KEPT(server.max_connections, "server.max_connections");
    KEPT(server.read_timeout_ms, "server.read_timeout_ms");
    KEPT(server.write_timeout_ms, "server.write_timeout_ms");
    KEPT(server.idle_timeout_ms, "server.idle_timeout_ms");
    KEPT(server.shutdown_timeout_ms, "server.shutdown_timeout_ms");
    KEPT(server.drain_delay_ms, "server.drain_delay_ms");
    KEPT(server.telemetry_interval_ms, "server.telemetry_interval_ms");
    if (memcmp(&was->server, &now->server, sizeof was->server) && !o) /* a field added to the struct since */
        KEPT(server, "server");
    KEPT(scheduler, "scheduler");
    if (!tenants_equal(&was->tenants, &now->tenants))
        o += (size_t)snprintf(kept + o, o < sizeof kept ? sizeof kept - o : 0, "%stenants", o ? ", " : "");
    KEPT(usage, "usage");
    KEPT(pricing, "pricing");
#undef KEPT
    if (kept[0])
        COLO_WARN("reload: %s: %s cannot change while colo-server runs: kept as they were (restart to apply)",
                  now->file, kept);
    colo_registry_want_config(ad->reg, now);
    COLO_INFO("reload: %s: %d model change%s", now->file, changes, changes == 1 ? "" : "s");
}

/* ---- life ------------------------------------------------------------------------------- */

colo_admin *colo_admin_create(colo_server *srv, colo_registry *reg, colo_api *api, const colo_config *cfg, char *err,
                              size_t errlen)
{
    const char *key = colo_config_admin_key(cfg), *user = colo_config_api_key(cfg);
    if (key && user && !strcmp(key, user)) {
        colo_set_err(err, errlen, "the admin key (%s) must differ from the API key (%s)", cfg->server.admin_key_env,
                     cfg->server.api_key_env);
        return NULL;
    }
    if (key && strlen(key) >= sizeof ((colo_admin *)0)->key) {
        colo_set_err(err, errlen, "the admin key (%s) is longer than 255 bytes", cfg->server.admin_key_env);
        return NULL;
    }
    colo_admin *ad = calloc(1, sizeof *ad);
    if (!ad) {
        colo_set_err(err, errlen, "out of memory");
        return NULL;
    }
    ad->reg = reg;
    ad->api = api;
    ad->policy = cfg->scheduler.policy;
    const char *slash = strrchr(cfg->file, '/');
    if (slash)
        snprintf(ad->config_dir, sizeof ad->config_dir, "%.*s", (int)(slash == cfg->file ? 1 : slash - cfg->file),
                 cfg->file);
    if (key)
        snprintf(ad->key, sizeof ad->key, "%s", key);
    ad->loopback = is_loopback(cfg->server.listen_host);
    struct {
        const char *method, *pattern;
        colo_http_handler_fn fn;
    } routes[] = {{"GET", "/admin/models", h_list},
                  {"POST", "/admin/models", h_load},
                  {"POST", "/admin/models/{name}/sleep", h_sleep},
                  {"POST", "/admin/models/{name}/wake", h_wake},
                  {"DELETE", "/admin/models/{name}", h_unload},
                  {"POST", "/admin/models/{name}/adapters", h_adapter_add},
                  {"DELETE", "/admin/models/{name}/adapters/{adapter}", h_adapter_remove}};
    _Static_assert(sizeof routes / sizeof *routes <= sizeof ad->routes / sizeof *ad->routes, "admin routes");
    /* a path under /admin/ that no route matches, behind the same guard */
    ad->unknown = (admin_route){.ad = ad, .fn = h_unknown};
    colo_server_set_fallback(srv, "/admin/", guarded, &ad->unknown);
    /* PUBLIC: the API key neither is needed nor opens them; guarded() checks the admin key. */
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        ad->routes[i] = (admin_route){.ad = ad, .fn = routes[i].fn};
        if (colo_server_route(srv, routes[i].method, routes[i].pattern, guarded, &ad->routes[i],
                              COLO_ROUTE_PUBLIC) != COLO_OK) {
            colo_set_err(err, errlen, "cannot add the route %s %s", routes[i].method, routes[i].pattern);
            free(ad);
            return NULL;
        }
    }
    return ad;
}

void colo_admin_free(colo_admin *ad) { free(ad); }
