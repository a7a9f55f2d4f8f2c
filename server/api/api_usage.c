/* Tenants at the model endpoints: admission before a request is queued,
 * accounting when it ends, and GET /v1/usage over the ledger. */
#include "server/api/api_impl.h"
#include "server/tenants/ledger.h"
#include "server/tenants/tenants.h"
#include "runtime/clock.h"
#include "runtime/log.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool colo_api_admit(api_call *c)
{
    colo_tenants *t = colo_server_tenants(c->api->srv);
    colo_request *r = c->r;
    const char *why = "unknown API key";
    int key = colo_tenants_authenticate(t, c->http, &why);
    if (key < 0) { /* the front door checked already; only a defect gets here */
        colo_http_add_header(c->http, "WWW-Authenticate", "Bearer");
        colo_http_error(c->http, 401, "invalid_api_key", "%s", why);
        return false;
    }
    c->tenant_key = key;
    colo_tenants_identify(t, key, &r->who);
    colo_tenant_verdict v;
    colo_priority prio = r->who.priority;
    if (!colo_tenants_admit(t, key, c->http, c->name, c->in.has_priority, &prio, colo_now_ns(), &v)) {
        colo_api_count_request(c->api, c->name, v.http_status);
        c->admitted = false;
        colo_api_account(c, v.http_status);
        if (v.retry_after_s > 0) {
            char ra[16];
            snprintf(ra, sizeof ra, "%d", v.retry_after_s);
            colo_http_add_header(c->http, "Retry-After", ra);
        }
        colo_http_error(c->http, v.http_status, v.code, "%s", v.message);
        return false;
    }
    c->admitted = true;
    r->who.priority = prio;
    r->qi.share_class = colo_tenants_share_class(t, key);
    r->qi.share_weight = colo_tenants_share_weight(t, key);
    r->qi.share_extra = r->task == COLO_TASK_GENERATE ? r->params.max_tokens : 0;
    return true;
}

void colo_api_account(api_call *c, int http_status)
{
    colo_tenants *t = colo_server_tenants(c->api->srv);
    const colo_request *r = c->r;
    const colo_req_outcome *o = &r->out;
    int64_t prompt = o->n_input_tokens > 0 ? o->n_input_tokens : 0;
    int64_t completion = colo_api_completion_tokens(r); /* also of a canceled or cut request */
    colo_ledger *l = colo_server_ledger(c->api->srv);
    const colo_http_local *local = colo_http_req_local(c->http);
    if (l || (local && local->on_usage)) {
        bool batch = local && local->batch;
        colo_usage_row row = {.status = http_status,
                              .batch_requests = batch,
                              .batch_tokens = batch ? prompt + completion : 0,
                              .requests = 1,
                              .prompt_tokens = prompt,
                              .completion_tokens = completion,
                              .queue_seconds = o->queue_ms > 0 ? o->queue_ms / 1e3 : 0,
                              .device_seconds = o->device_s};
        snprintf(row.organization, sizeof row.organization, "%s", r->who.organisation);
        snprintf(row.project, sizeof row.project, "%s", r->who.project);
        snprintf(row.key, sizeof row.key, "%s", r->who.key_id);
        snprintf(row.model, sizeof row.model, "%s", c->name);
        char err[256];
        if (local && local->on_usage)
            local->on_usage(local->ud, &row); /* written with the batch line's result */
        else if (colo_ledger_record(l, (int64_t)time(NULL), &row, err, sizeof err) != COLO_OK)
            COLO_ERROR("request %s: %s", r->who.id, err);
    }
    colo_tenants_count(t, c->tenant_key, c->name, http_status, prompt, completion, o->device_s);
    if (c->admitted) {
        colo_tenants_release(t, c->tenant_key, prompt + completion, colo_now_ns());
        c->admitted = false;
    }
}

/* ---- GET /v1/usage -------------------------------------------------------------- */

typedef struct usage_out {
    json_t *data;
    unsigned group;
    bool failed;
} usage_out;

static void add_row(void *ud, const colo_usage_row *row)
{
    usage_out *u = ud;
    json_t *j = json_pack("{s:I,s:I,s:I,s:I,s:f,s:f}", "requests", (json_int_t)row->requests, "errors",
                          (json_int_t)row->errors, "prompt_tokens", (json_int_t)row->prompt_tokens,
                          "completion_tokens", (json_int_t)row->completion_tokens, "queue_seconds",
                          row->queue_seconds, "device_seconds", row->device_seconds);
    if (j && (u->group & (COLO_USAGE_BY_HOUR | COLO_USAGE_BY_DAY))) {
        char when[32];
        time_t tt = (time_t)row->hour_s;
        struct tm tm;
        gmtime_r(&tt, &tm);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
        json_object_set_new(j, "start", json_string(when));
    }
    if (j && (u->group & COLO_USAGE_BY_ORGANIZATION))
        json_object_set_new(j, "organization", json_string(row->organization));
    if (j && (u->group & COLO_USAGE_BY_PROJECT))
        json_object_set_new(j, "project", json_string(row->project));
    if (j && (u->group & COLO_USAGE_BY_KEY))
        json_object_set_new(j, "key", json_string(row->key));
    if (j && (u->group & COLO_USAGE_BY_MODEL))
        json_object_set_new(j, "model", json_string(row->model));
    if (j && (u->group & COLO_USAGE_BY_STATUS))
        json_object_set_new(j, "status", json_integer(row->status));
    if (!j || json_array_append_new(u->data, j))
        u->failed = true;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The value of name in a query string, percent-decoded into buf (a bad
 * escape is kept as is): 1, or 0 when absent, or -1 when the value holds a
 * NUL byte (%00, which would cut it short) or is longer than cap - 1. */
static int query_param(const char *q, const char *name, char *buf, size_t cap)
{
    size_t nl = strlen(name);
    for (const char *p = q; p && *p;) {
        size_t n = strcspn(p, "&");
        if (n > nl && !strncmp(p, name, nl) && p[nl] == '=') {
            size_t o = 0;
            for (const char *c = p + nl + 1; c < p + n; c++) {
                if (o + 1 >= cap)
                    return -1;
                if (*c == '%' && c + 2 < p + n && hex_digit(c[1]) >= 0 && hex_digit(c[2]) >= 0) {
                    buf[o++] = (char)(hex_digit(c[1]) * 16 + hex_digit(c[2]));
                    c += 2;
                    if (!buf[o - 1])
                        return -1;
                } else {
                    buf[o++] = *c == '+' ? ' ' : *c;
                }
            }
            buf[o] = 0;
            return 1;
        }
        p += n;
        if (*p == '&')
            p++;
    }
    return 0;
}

static void h_usage(colo_http_req *req, void *ud)
{
    colo_api *a = ud;
    colo_tenants *t = colo_server_tenants(a->srv);
    colo_ledger *l = colo_server_ledger(a->srv);
    if (!l) {
        colo_http_error(req, 404, "usage_disabled", "the usage ledger is off (usage.enabled: false)");
        return;
    }
    const char *why = "unknown API key";
    int key = colo_tenants_authenticate(t, req, &why);
    if (key < 0) {
        colo_http_error(req, 401, "invalid_api_key", "%s", why);
        return;
    }
    const char *q = colo_http_req_query(req);
    char from_s[64], to_s[64], group_s[128];
    int64_t from = 0, to = (int64_t)time(NULL) + 3600;
    int has;
    if ((has = query_param(q, "from", from_s, sizeof from_s)) && (has < 0 || colo_usage_parse_time(from_s, &from) != COLO_OK)) {
        colo_http_error(req, 400, "invalid_request", "from: expected a date (2026-11-23, 2026-11-23T10:00:00Z) or Unix seconds");
        return;
    }
    if ((has = query_param(q, "to", to_s, sizeof to_s)) && (has < 0 || colo_usage_parse_time(to_s, &to) != COLO_OK)) {
        colo_http_error(req, 400, "invalid_request", "to: expected a date (2026-11-23, 2026-11-23T10:00:00Z) or Unix seconds");
        return;
    }
    unsigned group = COLO_USAGE_BY_ORGANIZATION | COLO_USAGE_BY_PROJECT | COLO_USAGE_BY_MODEL;
    if ((has = query_param(q, "group_by", group_s, sizeof group_s)) &&
        (has < 0 || colo_usage_parse_group(group_s, &group) != COLO_OK)) {
        colo_http_error(req, 400, "invalid_request",
                        "group_by: a comma-separated list of organization, project, tenant, key, model, status, "
                        "and hour or day");
        return;
    }
    colo_req_identity who;
    colo_tenants_identify(t, key, &who);
    bool admin = colo_tenants_is_admin(t, key);
    usage_out u = {json_array(), group, false};
    char err[256];
    colo_status st = u.data ? colo_ledger_query(l, from, to, group, admin ? NULL : who.organisation,
                                                admin ? NULL : who.project, add_row, &u, err, sizeof err)
                            : COLO_ENOMEM;
    if (st != COLO_OK || u.failed) {
        json_decref(u.data);
        if (st == COLO_EAGAIN) { /* another process held the database's lock since startup */
            colo_http_add_header(req, "Retry-After", "5");
            colo_http_error(req, 503, "usage_unavailable", "the usage ledger is locked by another process");
            return;
        }
        colo_http_error(req, 500, "internal_error", "the usage ledger could not be read");
        return;
    }
    json_t *j = json_pack("{s:s,s:I,s:I,s:s,s:o}", "object", "usage", "from", (json_int_t)from, "to",
                          (json_int_t)to, "scope", admin ? "all" : "tenant", "data", u.data);
    if (j && !admin) {
        json_object_set_new(j, "organization", json_string(who.organisation));
        json_object_set_new(j, "project", json_string(who.project));
    }
    colo_http_respond_json(req, 200, j);
}

colo_status colo_api_usage_routes(colo_api *a) { return colo_server_route(a->srv, "GET", "/v1/usage", h_usage, a, 0); }
