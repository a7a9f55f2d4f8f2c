/* The admin routes: model sleep and wake at run time (server/admin.h). */
#include "server/admin.h"
#include "server/api_internal.h"
#include "runtime/log.h"

#include <event2/event.h>
#include <jansson.h>

/* An unload under way: polled until the model has drained. */
typedef struct unload_job {
    colo_admin *ad;
    api_model *am;
    struct event *tick;
    colo_http_call finish; /* posted once drained, so it runs after the answers already queued */
    uint64_t since_ns;
    bool live;
} unload_job;

#include <stdlib.h>
#include <string.h>

struct colo_admin {
    colo_api *api;
    unload_job jobs[COLO_CFG_MAX_MODELS];
    char key[256]; /* "" = none */
    bool loopback; /* the listener is a loopback address */
};

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

static api_model *model_of(colo_http_req *req, colo_admin *ad)
{
    const char *name = colo_http_req_param(req, "name");
    for (int i = 0; name && i < ad->api->n_models; i++)
        if (!ad->api->models[i].unloaded && !strcmp(ad->api->models[i].name, name)) {
            colo_http_req_set_model(req, name);
            return &ad->api->models[i];
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

static void sleep_or_wake(colo_http_req *req, colo_admin *ad, bool wake)
{
    if (!allowed(req, ad))
        return;
    api_model *am = model_of(req, ad);
    if (!am)
        return;
    if (am->unloading) {
        colo_http_error(req, 409, "model_not_serving", "model %s is being unloaded", am->name);
        return;
    }
    char err[256];
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

static void unload_finish(void *ud)
{
    unload_job *j = ud;
    colo_served_unload(j->am->m);
    j->am->unloaded = true;
    event_free(j->tick);
    j->tick = NULL;
    j->live = false;
}

static void unload_tick(evutil_socket_t fd, short what, void *ud)
{
    (void)fd, (void)what;
    unload_job *j = ud;
    if (colo_served_drained(j->am->m) || colo_served_get_state(j->am->m) == COLO_SERVED_FAILED) {
        j->finish = (colo_http_call){.fn = unload_finish, .ud = j};
        colo_http_server_post(j->ad->api->http, &j->finish);
        return;
    }
    struct timeval tv = {0, 10 * 1000};
    evtimer_add(j->tick, &tv);
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
        colo_http_error(req, 409, "model_not_serving", "model %s is already being unloaded", am->name);
        return;
    }
    unload_job *j = &ad->jobs[am - ad->api->models];
    j->ad = ad;
    j->am = am;
    if (!(j->tick = evtimer_new(colo_http_server_base(ad->api->http), unload_tick, j))) {
        colo_http_error(req, 503, "out_of_memory", "cannot start the unload");
        return;
    }
    j->live = true;
    am->unloading = true;
    colo_served_drain(am->m);
    struct timeval tv = {0, 0};
    evtimer_add(j->tick, &tv);
    COLO_INFO("admin: unloading model %s once it has drained", am->name);
    colo_http_respond_json(req, 202, json_pack("{s:s,s:s,s:s}", "model", am->name, "requested", "unload", "state",
                                               colo_served_state_name(colo_served_get_state(am->m))));
}

static void h_sleep(colo_http_req *req, void *ud) { sleep_or_wake(req, ud, false); }
static void h_wake(colo_http_req *req, void *ud) { sleep_or_wake(req, ud, true); }

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
    ad->loopback = is_loopback(cfg->server.listen_host);
    struct {
        const char *method, *pattern;
        colo_http_handler_fn fn;
    } routes[] = {{"GET", "/admin/models", h_list},
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

void colo_admin_free(colo_admin *ad)
{
    /* An unload still draining at shutdown leaves its timer to the event
     * base, which the server has freed by now. */
    free(ad);
}
