/* server/tenants/tenants.h: who may call, what they may use, and how much
 * (docs/TENANTS.md).
 *
 * Keys belong to projects inside organizations (config `tenants:`); the
 * key of server.api_key_env is one more tenant, organization and project
 * "default", and the admin (it reads everyone's usage). A key is
 * recognised by its SHA-256, compared in constant time.
 *
 * Admission checks, at every level of the caller (organization, project,
 * key): the model is allowed, the priority is within the ceiling, and the
 * quotas hold: concurrent requests, requests per minute and tokens per
 * minute (token buckets that refill continuously at quota/60 per second).
 * Requests are taken from their bucket at admission; tokens (prompt +
 * completion, or an embedding's input) when the request ends, so the tokens
 * bucket may go below zero, and admits again once it refilled above zero.
 *
 * Metrics (label `tenant` is "organization/project", from config only, so
 * the label set is bounded):
 *   colo_tenant_requests_total{tenant,model,status}
 *   colo_tenant_tokens_total{tenant,model,kind}          kind: prompt | completion
 *   colo_tenant_device_seconds_total{tenant,model}
 *
 * Threads: everything on the loop thread, except create/free. */
#ifndef COLO_SERVER_TENANTS_H
#define COLO_SERVER_TENANTS_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "batching/request.h"
#include "config/config.h"
#include "server/http/http.h"
#include "server/http/metrics.h"

/* Longest key accepted in a header (bytes). */
#define COLO_TENANT_MAX_KEY_BYTES 512

typedef struct colo_tenants colo_tenants;

/* From cfg's tenants and server_key (the value of server.api_key_env, or
 * NULL); registers the metrics in m. NULL with a message. */
colo_tenants *colo_tenants_create(const colo_config *cfg, const char *server_key, colo_metrics *m, char *err,
                                  size_t errlen);
void colo_tenants_free(colo_tenants *t);
/* Per tenant ("organization/project", the metrics' label): requests,
 * prompt and completion tokens and device-seconds so far (from the tenant
 * metrics) and requests in flight, as a JSON array in config order; an
 * empty array without tenants in the config. NULL when out of memory. */
json_t *colo_tenants_stats_json(colo_tenants *t);

/* False when no key is configured at all: every caller is the tenant
 * "default/default" and needs no key. */
bool colo_tenants_auth_required(const colo_tenants *t);

/* The caller's key from req's "Authorization: Bearer KEY" or "x-api-key:
 * KEY" header: its index (>= 0), or -1 with the reason in *why (no header,
 * two of them, not "Bearer KEY", a key with spaces or commas, longer than
 * COLO_TENANT_MAX_KEY_BYTES, or unknown). Without auth_required, always the default tenant's index. */
int colo_tenants_authenticate(const colo_tenants *t, const colo_http_req *req, const char **why);

/* The index of the key named key of organisation/project (what
 * colo_tenants_identify fills in), or -1 when the config has no such key
 * (any longer). */
int colo_tenants_key_named(const colo_tenants *t, const char *organisation, const char *project, const char *key);
/* The key of server.api_key_env (or the keyless default tenant). */
bool colo_tenants_is_admin(const colo_tenants *t, int key);
/* Fills who->organisation, project and key_id. */
void colo_tenants_identify(const colo_tenants *t, int key, colo_req_identity *who);
/* The fair-share class of key (its project; the default tenant is its own
 * class) and its weight (organization weight x project weight). */
int colo_tenants_share_class(const colo_tenants *t, int key);
double colo_tenants_share_weight(const colo_tenants *t, int key);

typedef struct colo_tenant_verdict {
    int http_status;     /* 200 admitted; 403 or 429 */
    const char *code;    /* "model_not_allowed", "priority_not_allowed", "quota_exceeded" */
    char message[256];   /* names the level and the quota */
    int retry_after_s;   /* 429 */
} colo_tenant_verdict;

/* Admission at time now_ns of a request of key for model at *priority
 * (asked: the client chose it; else *priority is the model's and is lowered
 * to the ceiling). On admission takes one request and one concurrency slot
 * at every level (colo_tenants_release gives the slot back). Either way
 * adds the x-ratelimit-* headers to req. */
bool colo_tenants_admit(colo_tenants *t, int key, colo_http_req *req, const char *model, bool asked,
                        colo_priority *priority, uint64_t now_ns, colo_tenant_verdict *v);
/* An admitted request ended: frees its slot and takes tokens from the
 * tokens buckets. */
void colo_tenants_release(colo_tenants *t, int key, int64_t tokens, uint64_t now_ns);
/* Counts a finished or refused request of key in the metrics. */
void colo_tenants_count(colo_tenants *t, int key, const char *model, int http_status, int64_t prompt_tokens,
                        int64_t completion_tokens, double device_s);

#endif
