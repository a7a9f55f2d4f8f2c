/* The admin routes: model sleep and wake at run time (server/admin.h). */
#include "server/admin.h"
#include "server/api_internal.h"

#include <jansson.h>

#include <stdlib.h>
#include <string.h>

struct colo_admin {
    colo_api *api;
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
        if (!strcmp(ad->api->models[i].name, name)) {
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
        if (json_array_append_new(data, colo_api_model_json(ad->api, &ad->api->models[i])) != 0) {
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
                  {"POST", "/admin/models/{name}/wake", h_wake}};
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

void colo_admin_free(colo_admin *ad) { free(ad); }
