/* The admin routes: models loaded, unloaded, put to sleep and woken at
 * run time, and the config file's models applied again (server/admin.h). */
#include "server/admin.h"
#include "server/api_impl.h"
#include "batching/evictor.h"
#include "runtime/log.h"

#include <event2/event.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct load_job load_job;

/* An unload under way: polled until the model has drained; then, for a
 * model whose config changed, the new config is loaded. */
typedef struct unload_job {
    colo_admin *ad;
    api_model *am;
    struct event *tick;
    colo_http_call finish; /* posted once drained, so it runs after the answers already queued */
    bool live;
    bool reload;           /* load `next` once unloaded */
    colo_model_cfg next;
} unload_job;

/* A load at run time: the model is in the API's table (state loading)
 * while a thread of its own loads it. */
struct load_job {
    colo_admin *ad;
    colo_served *m;
    pthread_t thread;
    bool running;          /* the thread was started and not joined */
    colo_http_call done;   /* posted by the thread when it is done */
    colo_status st;
    char err[1024];
};

/* Per slot of the API's model table (server/api_impl.h): its unload
 * and load jobs, and whether its served model was made here (then it is
 * freed here, and its slot freed for the next model, once unloaded). */
struct colo_admin {
    colo_api *api;
    unload_job jobs[COLO_API_MAX_MODELS];
    load_job loads[COLO_API_MAX_MODELS];
    bool owned[COLO_API_MAX_MODELS];
    colo_admin_env env;
    bool attached;
    char key[256]; /* "" = none */
    bool loopback; /* the listener is a loopback address */
    int stop_timeout_ms; /* how long colo_admin_stop waits for a load under way */
    /* The models the config file names, as last applied (less those
     * deleted through DELETE /admin/models since): readiness needs each. */
    char wanted[COLO_CFG_MAX_MODELS][sizeof ((colo_model_cfg *)0)->name];
    int n_wanted;
};

static int slot_of(const colo_admin *ad, const api_model *am) { return (int)(am - ad->api->models); }

/* Adds name to the models readiness waits for (on), or takes it out. */
static void want(colo_admin *ad, const char *name, bool on)
{
    for (int i = 0; i < ad->n_wanted; i++) {
        if (strcmp(ad->wanted[i], name))
            continue;
        if (!on) {
            memmove(ad->wanted[i], ad->wanted[i + 1], (size_t)(ad->n_wanted - i - 1) * sizeof ad->wanted[i]);
            ad->n_wanted--;
        }
        return;
    }
    if (on && ad->n_wanted < COLO_CFG_MAX_MODELS)
        snprintf(ad->wanted[ad->n_wanted++], sizeof ad->wanted[0], "%s", name);
}

static bool is_loopback(const char *host)
{
    return !strncmp(host, "127.", 4) || !strcmp(host, "::1") || !strcmp(host, "localhost");
}

/* Answers 401/403 and returns false when the caller may not use the admin routes. */
static bool allowed(colo_http_req *req, colo_admin *ad)
{
    if (ad->key[0]) {
        if (colo_server_auth_ok(colo_http_req_header(req, "Authorization"), ad->key))
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

/* The live (not unloaded) entry named name, or NULL. */
static api_model *find(colo_admin *ad, const char *name)
{
    for (int i = 0; name && i < ad->api->n_models; i++)
        if (!ad->api->models[i].unloaded && !strcmp(ad->api->models[i].name, name))
            return &ad->api->models[i];
    return NULL;
}

static api_model *model_of(colo_http_req *req, colo_admin *ad)
{
    const char *name = colo_http_req_param(req, "name");
    api_model *am = find(ad, name);
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
    if (!allowed(req, ad))
        return;
    json_t *data = json_array();
    for (int i = 0; data && i < ad->api->n_models; i++)
        if (!ad->api->models[i].unloaded &&
            json_array_append_new(data, colo_api_model_json(ad->api, &ad->api->models[i])) != 0) {
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
    if (!allowed(req, ad))
        return;
    api_model *am = model_of(req, ad);
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

static void *load_main(void *arg)
{
    load_job *j = arg;
    j->st = colo_served_load_in(j->m, j->err, sizeof j->err);
    if (j->st == COLO_OK)
        j->st = colo_served_start(j->m, j->err, sizeof j->err);
    colo_http_server_post(j->ad->api->http, &j->done);
    return NULL;
}

static void load_done(void *ud)
{
    load_job *j = ud;
    if (j->running) /* else colo_admin_stop joined it */
        pthread_join(j->thread, NULL);
    j->running = false;
    const colo_model_cfg *mc = colo_served_config(j->m);
    if (j->st == COLO_OK) {
        colo_served_info in;
        colo_served_get_info(j->m, &in);
        COLO_INFO("admin: model %s loaded in %.0f ms (weights %.1f MiB)", mc->name, in.load_ms,
                  (double)in.weight_bytes / (1 << 20));
    } else {
        COLO_ERROR("admin: model %s failed to load: %s", mc->name, j->err);
    }
}

/* The model's environment, as colo-server gives the configured ones. */
static colo_served_env env_of(colo_admin *ad, const colo_model_cfg *mc)
{
    const colo_admin_env *e = &ad->env;
    colo_served_env env = {.dev = e->dev, .cs = e->cs, .hooks = colo_api_hooks(ad->api), .pool = e->pool,
                           .evictor = e->evictor};
    env.stream.priority = e->policy == COLO_SCHED_PRIORITY || e->policy == COLO_SCHED_PARTITION ? mc->priority
                                                                                                : COLO_PRIO_NORMAL;
    env.stream.share = e->policy == COLO_SCHED_FAIR ? mc->share : 0;
    return env;
}

/* The checks of a run-time load that need the server: the scheduling
 * keys and a duplicate name. 0 or the HTTP status, with the error code
 * and message. */
static int check_new(colo_admin *ad, const colo_model_cfg *mc, const char **code, char *msg, size_t len)
{
    if (mc->sm_share > 0) {
        *code = "invalid_config";
        snprintf(msg, len, "model.sm_share: a model loaded at run time cannot take a partition of the device");
        return 400;
    }
    if (mc->share > 0 && ad->env.policy != COLO_SCHED_FAIR) {
        *code = "invalid_config";
        snprintf(msg, len, "model.share: only used with scheduler.policy: fair");
        return 400;
    }
    api_model *old = find(ad, mc->name);
    if (old) {
        *code = "model_exists";
        snprintf(msg, len, "a model named %s is already %s", mc->name,
                 old->unloading ? "being unloaded: try again once it is gone"
                                : colo_served_state_name(colo_served_get_state(old->m)));
        return 409;
    }
    if (!colo_api_slot_free(ad->api)) {
        *code = "too_many_models";
        snprintf(msg, len, "colo-server holds %d models (loading, serving, failed or being unloaded), its most: "
                           "delete one first", COLO_API_MAX_MODELS);
        return 503;
    }
    return 0;
}

/* Room for mc's guarantee: 0, or 507 with the figures. */
static int check_room(colo_admin *ad, const colo_model_cfg *mc, size_t *need, size_t *avail)
{
    if (!ad->env.pool || !ad->env.evictor)
        return 0; /* fixed arenas: the load itself says whether it fits */
    *need = (size_t)((double)colo_mem_pool_budget(ad->env.pool) * mc->memory_fraction);
    *avail = colo_evictor_available(ad->env.evictor, NULL);
    return *need > *avail ? 507 : 0;
}

/* Starts loading mc: the model enters the API's table as loading. 0, or
 * the HTTP status with the message. */
static int start_load(colo_admin *ad, const colo_model_cfg *mc, char *msg, size_t len)
{
    colo_served_env env = env_of(ad, mc);
    colo_served *m = colo_served_create(mc, &env, msg, len);
    if (!m)
        return strstr(msg, "unknown kind") ? 400 : 503;
    api_model *am = colo_api_take_slot(ad->api, m);
    if (!am) {
        colo_served_free(m);
        snprintf(msg, len, "the model table is full (%d models)", COLO_API_MAX_MODELS);
        return 503;
    }
    ad->owned[slot_of(ad, am)] = true;
    load_job *j = &ad->loads[slot_of(ad, am)];
    memset(j, 0, sizeof *j);
    j->ad = ad;
    j->m = m;
    j->done = (colo_http_call){.fn = load_done, .ud = j};
    int rc = pthread_create(&j->thread, NULL, load_main, j);
    if (rc) {
        snprintf(j->err, sizeof j->err, "cannot start a loading thread");
        colo_served_set_failed(m, j->err);
        COLO_ERROR("admin: model %s: %s", mc->name, j->err);
        return 0; /* listed as failed */
    }
    j->running = true;
    COLO_INFO("admin: loading model %s (%s, %s, memory_fraction %g)", mc->name, mc->kind, mc->path,
              mc->memory_fraction);
    return 0;
}

/* POST /admin/models: 202 {"model","state":"loading"}; the model loads
 * off the loop and turns ready, or failed with the reason. */
static void h_load(colo_http_req *req, void *ud)
{
    colo_admin *ad = ud;
    if (!allowed(req, ad))
        return;
    if (!ad->attached) {
        colo_http_error(req, 503, "unavailable", "colo-server is still starting");
        return;
    }
    size_t len = 0;
    const char *body = colo_http_req_body(req, &len);
    json_error_t jerr;
    json_t *j = body && len ? json_loadb(body, len, 0, &jerr) : NULL;
    if (!j || !json_is_object(j)) {
        json_decref(j);
        colo_http_error(req, 400, "invalid_json", "the body must be a JSON object: one model's config, as in models:");
        return;
    }
    json_decref(j);
    static colo_model_cfg mc; /* loop thread only; large */
    char msg[1024];
    if (colo_config_parse_model(body, len, "body", ad->env.config_dir, &mc, msg, sizeof msg) != COLO_OK) {
        colo_http_error(req, 400, "invalid_config", "%s", msg);
        return;
    }
    colo_http_req_set_model(req, mc.name);
    const char *code = "";
    int http = check_new(ad, &mc, &code, msg, sizeof msg);
    if (http) {
        if (http == 409)
            colo_http_add_header(req, "Retry-After", "1");
        colo_http_error(req, http, code, "%s", msg);
        return;
    }
    size_t need = 0, avail = 0;
    if (check_room(ad, &mc, &need, &avail)) {
        refuse_no_room(req, mc.name, need, avail);
        return;
    }
    if ((http = start_load(ad, &mc, msg, sizeof msg))) {
        colo_http_error(req, http, http == 400 ? "invalid_config" : "unavailable", "%s%s",
                        http == 400 ? "model.kind: " : "", msg);
        return;
    }
    colo_http_respond_json(req, 202, json_pack("{s:s,s:s,s:s}", "model", mc.name, "requested", "load", "state",
                                               colo_served_state_name(colo_served_get_state(find(ad, mc.name)->m))));
}

/* ---- unloading ------------------------------------------------------------------------ */

static void unload_finish(void *ud)
{
    unload_job *j = ud;
    colo_admin *ad = j->ad;
    api_model *am = j->am;
    int slot = slot_of(ad, am);
    event_free(j->tick);
    j->tick = NULL;
    j->live = false;
    colo_served_unload(am->m);
    COLO_INFO("admin: model %s unloaded", am->name);
    if (ad->owned[slot]) { /* made here: freed, and its slot with it */
        colo_served *m = am->m;
        ad->owned[slot] = false;
        colo_api_free_slot(ad->api, am);
        colo_served_free(m);
    } else {
        am->unloaded = true; /* loaded at start: the struct stays until exit */
    }
    if (j->reload) {
        char msg[1024];
        size_t need = 0, avail = 0;
        j->reload = false;
        if (check_room(j->ad, &j->next, &need, &avail))
            COLO_ERROR("reload: model %s: not loaded again: needs %zu bytes of guaranteed memory, %zu available",
                       j->next.name, need, avail);
        else if (start_load(j->ad, &j->next, msg, sizeof msg))
            COLO_ERROR("reload: model %s: not loaded again: %s", j->next.name, msg);
    }
}

/* Whether am's load at run time is still under way. */
static bool ad_loading(colo_admin *ad, const api_model *am)
{
    return ad->loads[slot_of(ad, am)].running;
}

static void unload_tick(evutil_socket_t fd, short what, void *ud)
{
    (void)fd, (void)what;
    unload_job *j = ud;
    colo_served_state s = colo_served_get_state(j->am->m);
    /* a model still loading is unloaded once its load has ended */
    if (s != COLO_SERVED_LOADING && !ad_loading(j->ad, j->am) &&
        (colo_served_drained(j->am->m) || s == COLO_SERVED_FAILED)) {
        j->finish = (colo_http_call){.fn = unload_finish, .ud = j};
        colo_http_server_post(j->ad->api->http, &j->finish);
        return;
    }
    struct timeval tv = {0, 10 * 1000};
    evtimer_add(j->tick, &tv);
}

/* Starts draining am; next (may be NULL) is loaded once it is gone. */
static colo_status start_unload(colo_admin *ad, api_model *am, const colo_model_cfg *next)
{
    unload_job *j = &ad->jobs[slot_of(ad, am)];
    j->ad = ad;
    j->am = am;
    if (!(j->tick = evtimer_new(colo_http_server_base(ad->api->http), unload_tick, j)))
        return COLO_ENOMEM;
    j->live = true;
    j->reload = next != NULL;
    if (next)
        j->next = *next;
    am->unloading = true;
    colo_served_drain(am->m);
    struct timeval tv = {0, 0};
    evtimer_add(j->tick, &tv);
    return COLO_OK;
}

/* DELETE /admin/models/{name}: 202 at once; the model refuses new requests
 * (503 with Retry-After), finishes what it has, then is unloaded and gone
 * from the API. */
static void h_unload(colo_http_req *req, void *ud)
{
    colo_admin *ad = ud;
    if (!allowed(req, ad))
        return;
    api_model *am = model_of(req, ad);
    if (!am)
        return;
    if (am->unloading) {
        colo_http_add_header(req, "Retry-After", "1");
        colo_http_error(req, 409, "model_not_serving", "model %s is already being unloaded", am->name);
        return;
    }
    if (start_unload(ad, am, NULL) != COLO_OK) {
        colo_http_error(req, 503, "out_of_memory", "cannot start the unload");
        return;
    }
    want(ad, am->name, false); /* deleted by the operator: readiness no longer waits for it */
    COLO_INFO("admin: unloading model %s once it has drained", am->name);
    colo_http_respond_json(req, 202, json_pack("{s:s,s:s,s:s}", "model", am->name, "requested", "unload", "state",
                                               colo_served_state_name(colo_served_get_state(am->m))));
}

static void h_sleep(colo_http_req *req, void *ud) { sleep_or_wake(req, ud, false); }
static void h_wake(colo_http_req *req, void *ud) { sleep_or_wake(req, ud, true); }

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
    size_t reload_keys = o;
    DIFF(a->keep_alive_ms != b->keep_alive_ms, "keep_alive_ms");
    DIFF(a->pinned != b->pinned, "pinned");
#undef DIFF
    *live = reload_keys == 0;
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
    if (check_new(ad, mc, &code, msg, sizeof msg))
        COLO_ERROR("reload: model %s: not added: %s", mc->name, msg);
    else if (check_room(ad, mc, &need, &avail))
        COLO_ERROR("reload: model %s: not added: needs %zu bytes of guaranteed memory, %zu available", mc->name, need,
                   avail);
    else if (start_load(ad, mc, msg, sizeof msg))
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
        api_model *am = find(ad, mc->name);
        if (named(now, mc->name) || !am)
            continue;
        changes++;
        unload_job *j = &ad->jobs[slot_of(ad, am)];
        if (am->unloading && j->reload) {
            j->reload = false; /* an earlier reload's change: not loaded again */
            COLO_INFO("reload: model %s: removed (being unloaded; not loaded again)", mc->name);
        } else if (am->unloading)
            COLO_INFO("reload: model %s: removed (already being unloaded)", mc->name);
        else if (start_unload(ad, am, NULL) == COLO_OK)
            COLO_INFO("reload: model %s: removed (draining, then unloaded)", mc->name);
        else
            COLO_ERROR("reload: model %s: removed from the file, but cannot start its unload", mc->name);
    }
    /* added and changed */
    for (int i = 0; i < now->n_models; i++) {
        const colo_model_cfg *mc = &now->models[i];
        const colo_model_cfg *old = named(was, mc->name);
        api_model *am = find(ad, mc->name);
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
            unload_job *j = &ad->jobs[slot_of(ad, am)];
            if (j->reload)
                differences(&j->next, mc, what, sizeof what, &live);
            if (j->reload && !what[0])
                continue; /* already to be loaded with this config */
            changes++;
            j->reload = true;
            j->next = *mc;
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
        if (!what[0])
            continue;
        changes++;
        if (live) {
            colo_served_set_live(am->m, mc->keep_alive_ms, mc->pinned);
            COLO_INFO("reload: model %s: changed (%s): applied in place", mc->name, what);
        } else if (start_unload(ad, am, mc) == COLO_OK) {
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
    ad->n_wanted = 0;
    for (int i = 0; i < now->n_models; i++)
        want(ad, now->models[i].name, true);
    COLO_INFO("reload: %s: %d model change%s", now->file, changes, changes == 1 ? "" : "s");
}

/* ---- life ------------------------------------------------------------------------------- */

colo_admin *colo_admin_create(colo_server *srv, colo_api *api, const colo_config *cfg, char *err, size_t errlen)
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
    ad->api = api;
    if (key)
        snprintf(ad->key, sizeof ad->key, "%s", key);
    ad->stop_timeout_ms = cfg->server.shutdown_timeout_ms;
    for (int i = 0; i < cfg->n_models; i++)
        want(ad, cfg->models[i].name, true);
    ad->loopback = is_loopback(cfg->server.listen_host);
    struct {
        const char *method, *pattern;
        colo_http_handler_fn fn;
    } routes[] = {{"GET", "/admin/models", h_list},
                  {"POST", "/admin/models", h_load},
                  {"POST", "/admin/models/{name}/sleep", h_sleep},
                  {"POST", "/admin/models/{name}/wake", h_wake},
                  {"DELETE", "/admin/models/{name}", h_unload}};
    /* PUBLIC: the API key neither is needed nor opens them; allowed() checks the admin key. */
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
        if (colo_server_route(srv, routes[i].method, routes[i].pattern, routes[i].fn, ad, COLO_ROUTE_PUBLIC) !=
            COLO_OK) {
            colo_set_err(err, errlen, "cannot add the route %s %s", routes[i].method, routes[i].pattern);
            free(ad);
            return NULL;
        }
    return ad;
}

void colo_admin_attach(colo_admin *ad, const colo_admin_env *env)
{
    ad->env = *env;
    ad->attached = true;
}

bool colo_admin_file_served(colo_admin *ad)
{
    for (int i = 0; ad && i < ad->n_wanted; i++) {
        api_model *am = find(ad, ad->wanted[i]);
        if (!am || am->unloading)
            return false;
        colo_served_state s = colo_served_get_state(am->m);
        if (s != COLO_SERVED_READY && s != COLO_SERVED_SLEEPING && s != COLO_SERVED_WAKING)
            return false;
    }
    return true;
}

bool colo_admin_stop(colo_admin *ad)
{
    if (!ad)
        return true;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    int64_t ns = (int64_t)until.tv_nsec + (int64_t)(ad->stop_timeout_ms > 0 ? ad->stop_timeout_ms : 0) * 1000000;
    until.tv_sec += (time_t)(ns / 1000000000);
    until.tv_nsec = (long)(ns % 1000000000);
    bool all = true;
    for (int i = 0; i < COLO_API_MAX_MODELS; i++) {
        load_job *j = &ad->loads[i];
        if (!j->running)
            continue;
        if (pthread_timedjoin_np(j->thread, NULL, &until) == 0) {
            j->running = false;
        } else {
            all = false;
            COLO_ERROR("admin: model %s is still loading %d ms after the shutdown began: not waiting for it",
                       colo_served_config(j->m)->name, ad->stop_timeout_ms);
        }
    }
    for (int i = 0; i < ad->api->n_models; i++)
        if (ad->owned[i] && ad->api->models[i].m && !ad->loads[i].running)
            colo_served_stop(ad->api->models[i].m);
    return all;
}

void colo_admin_free(colo_admin *ad)
{
    if (!ad)
        return;
    if (!colo_admin_stop(ad))
        return; /* a load thread still runs and uses what is here: left to the process's exit */
    /* An unload still draining at shutdown leaves its timer to the event
     * base, which the server has freed by now. */
    for (int i = 0; i < ad->api->n_models; i++)
        if (ad->owned[i])
            colo_served_free(ad->api->models[i].m);
    free(ad);
}
