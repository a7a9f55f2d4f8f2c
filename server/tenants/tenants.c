/* Tenants: keys, token buckets per level, admission and metrics. */
#include "server/tenants/tenants.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/tenants/sha256.h"

typedef struct bucket {
    double level;     /* what is left; may be negative (tokens taken after the fact) */
    uint64_t last_ns; /* last refill */
} bucket;

/* One level's live state beside its config. */
typedef struct level {
    const colo_tenant_level_cfg *cfg;
    const char *kind; /* "organization", "project", "key" */
    bucket requests, tokens;
    int in_flight;
} level;

typedef struct tkey {
    uint8_t sha256[32];
    level *chain[3]; /* organization, project, key; unused entries NULL */
    int n_chain;
    const char *org, *project, *name;
    char tenant[2 * COLO_CFG_TENANT_NAME + 2]; /* "org/project": the metrics label */
    int share_class;
    double weight;
    bool admin;
} tkey;

struct colo_tenants {
    level *orgs, *projects, *keylevels;
    tkey *keys;
    int n_keys;
    int n_classes;
    bool auth;
    colo_tenant_level_cfg default_cfg;
    level default_level;
    colo_metric *m_requests, *m_tokens, *m_device;
};

static double per_second(int64_t per_minute) { return (double)per_minute / 60.0; }

static void refill(bucket *b, int64_t per_minute, uint64_t now_ns)
{
    if (per_minute < 0)
        return;
    if (!b->last_ns) {
        b->level = (double)per_minute;
        b->last_ns = now_ns;
        return;
    }
    if (now_ns > b->last_ns) {
        b->level += per_second(per_minute) * (double)(now_ns - b->last_ns) / 1e9;
        if (b->level > (double)per_minute)
            b->level = (double)per_minute;
        b->last_ns = now_ns;
    }
}

static void level_init(level *l, const colo_tenant_level_cfg *cfg, const char *kind)
{
    memset(l, 0, sizeof *l);
    l->cfg = cfg;
    l->kind = kind;
}

colo_tenants *colo_tenants_create(const colo_config *cfg, const char *server_key, colo_metrics *m, char *err,
                                  size_t errlen)
{
    const colo_tenants_cfg *tc = &cfg->tenants;
    colo_tenants *t = calloc(1, sizeof *t);
    if (!t)
        goto out_nomem;
    t->orgs = calloc((size_t)tc->n_orgs + 1, sizeof *t->orgs);
    t->projects = calloc((size_t)tc->n_projects + 1, sizeof *t->projects);
    t->keylevels = calloc((size_t)tc->n_keys + 1, sizeof *t->keylevels);
    t->keys = calloc((size_t)tc->n_keys + 1, sizeof *t->keys);
    if (!t->orgs || !t->projects || !t->keylevels || !t->keys)
        goto out_nomem;
    for (int i = 0; i < tc->n_orgs; i++)
        level_init(&t->orgs[i], &tc->orgs[i].l, "organization");
    for (int i = 0; i < tc->n_projects; i++)
        level_init(&t->projects[i], &tc->projects[i].l, "project");
    for (int i = 0; i < tc->n_keys; i++) {
        const colo_key_cfg *kc = &tc->keys[i];
        const colo_project_cfg *pc = &tc->projects[kc->project];
        const colo_org_cfg *oc = &tc->orgs[pc->org];
        level_init(&t->keylevels[i], &kc->l, "key");
        tkey *k = &t->keys[t->n_keys++];
        memcpy(k->sha256, kc->sha256, 32);
        k->chain[0] = &t->orgs[pc->org];
        k->chain[1] = &t->projects[kc->project];
        k->chain[2] = &t->keylevels[i];
        k->n_chain = 3;
        k->org = oc->l.name;
        k->project = pc->l.name;
        k->name = kc->l.name;
        snprintf(k->tenant, sizeof k->tenant, "%s/%s", k->org, k->project);
        k->share_class = kc->project + 1; /* class 0: the default tenant */
        k->weight = oc->l.weight * pc->l.weight;
    }
    t->n_classes = tc->n_projects + 1;
    /* The default tenant: server.api_key_env's key, or everyone when no key
     * is configured at all. */
    t->default_cfg = (colo_tenant_level_cfg){.name = "default", .quotas = {-1, -1, -1}, .weight = 1,
                                             .max_priority = COLO_PRIO_HIGH};
    level_init(&t->default_level, &t->default_cfg, "key");
    t->auth = server_key || tc->n_keys > 0;
    if (server_key || !t->auth) {
        tkey *k = &t->keys[t->n_keys++];
        if (server_key)
            colo_sha256(server_key, strlen(server_key), k->sha256);
        k->chain[0] = &t->default_level;
        k->n_chain = 1;
        k->org = k->project = "default";
        k->name = server_key ? "api_key" : "";
        snprintf(k->tenant, sizeof k->tenant, "default/default");
        k->weight = 1;
        k->admin = true;
    }
    t->m_requests = colo_metrics_counter(m, "colo_tenant_requests_total",
                                         "Model requests by tenant (organization/project), model and HTTP status.", 3,
                                         (const char *const[]){"tenant", "model", "status"});
    t->m_tokens = colo_metrics_counter(m, "colo_tenant_tokens_total",
                                       "Tokens by tenant, model and kind (prompt: input; completion: generated).", 3,
                                       (const char *const[]){"tenant", "model", "kind"});
    t->m_device = colo_metrics_counter(m, "colo_tenant_device_seconds_total",
                                       "Device time of the steps a tenant's requests were in, shared by tokens.", 2,
                                       (const char *const[]){"tenant", "model"});
    if (!t->m_requests || !t->m_tokens || !t->m_device) {
        colo_set_err(err, errlen, "cannot register the tenant metrics");
        colo_tenants_free(t);
        return NULL;
    }
    return t;

out_nomem:
    colo_set_err(err, errlen, "out of memory");
    colo_tenants_free(t);
    return NULL;
}

void colo_tenants_free(colo_tenants *t)
{
    if (!t)
        return;
    free(t->orgs);
    free(t->projects);
    free(t->keylevels);
    if (t->keys)
        memset(t->keys, 0, sizeof *t->keys * (size_t)t->n_keys);
    free(t->keys);
    free(t);
}

bool colo_tenants_auth_required(const colo_tenants *t) { return t->auth; }

int colo_tenants_authenticate(const colo_tenants *t, const colo_http_req *req, const char **why)
{
    if (!t->auth)
        return 0;
    const colo_http_local *local = colo_http_req_local(req);
    if (local) { /* made inside the server, as the key it names */
        if (local->principal >= 0 && local->principal < t->n_keys)
            return local->principal;
        *why = "unknown API key";
        return -1;
    }
    /* Exactly one credential (colo_http_req_credential): Bearer, x-api-key
     * (as Anthropic's clients send it), or a browser's Basic with the key as
     * the password. */
    char basic[COLO_TENANT_MAX_KEY_BYTES + 130];
    const char *key;
    size_t len;
    if (colo_http_req_credential(req, basic, sizeof basic, &key, &len, why) != COLO_OK)
        return -1;
    if (len == 0 || len > COLO_TENANT_MAX_KEY_BYTES) {
        *why = len ? "the API key is too long" : "the API key is empty";
        return -1;
    }
    for (size_t i = 0; i < len; i++)
        if (key[i] == ' ' || key[i] == ',' || key[i] == '\t') {
            *why = "give exactly one API key";
            return -1;
        }
    uint8_t h[32];
    colo_sha256(key, len, h);
    int found = -1;
    for (int i = 0; i < t->n_keys; i++) /* every key is compared: time does not tell which matched */
        if (colo_sha256_equal(h, t->keys[i].sha256) && found < 0)
            found = i;
    if (found < 0)
        *why = "unknown API key";
    return found;
}

int colo_tenants_key_named(const colo_tenants *t, const char *organisation, const char *project, const char *key)
{
    for (int i = 0; i < t->n_keys; i++)
        if (!strcmp(t->keys[i].org, organisation) && !strcmp(t->keys[i].project, project) &&
            !strcmp(t->keys[i].name, key))
            return i;
    return -1;
}

bool colo_tenants_is_admin(const colo_tenants *t, int key) { return key >= 0 && key < t->n_keys && t->keys[key].admin; }

void colo_tenants_identify(const colo_tenants *t, int key, colo_req_identity *who)
{
    const tkey *k = &t->keys[key];
    snprintf(who->organisation, sizeof who->organisation, "%s", k->org);
    snprintf(who->project, sizeof who->project, "%s", k->project);
    snprintf(who->key_id, sizeof who->key_id, "%s", k->name);
}

int colo_tenants_share_class(const colo_tenants *t, int key) { return t->keys[key].share_class; }
double colo_tenants_share_weight(const colo_tenants *t, int key) { return t->keys[key].weight; }

static bool model_allowed(const colo_tenant_level_cfg *c, const char *model)
{
    if (!c->n_models)
        return true;
    for (int i = 0; i < c->n_models; i++)
        if (!strcmp(c->models[i], model))
            return true;
    return false;
}

/* Seconds with one decimal ("59.8s"), as a duration header value. */
static void fmt_reset(char *buf, size_t cap, double s)
{
    snprintf(buf, cap, "%.1fs", s > 0 ? s : 0);
}

/* x-ratelimit-{limit,remaining,reset}-SUFFIX from the level whose bucket
 * has the least left (the one that binds). */
static void add_limit_headers(colo_http_req *req, level *const *chain, int n, bool tokens)
{
    const level *bind = NULL;
    double left = 0;
    for (int i = 0; i < n; i++) {
        int64_t q = tokens ? chain[i]->cfg->quotas.tokens_per_minute : chain[i]->cfg->quotas.requests_per_minute;
        double l = tokens ? chain[i]->tokens.level : chain[i]->requests.level;
        if (q >= 0 && (!bind || l < left)) {
            bind = chain[i];
            left = l;
        }
    }
    if (!bind)
        return;
    int64_t q = tokens ? bind->cfg->quotas.tokens_per_minute : bind->cfg->quotas.requests_per_minute;
    char lim[32], rem[32], reset[32];
    snprintf(lim, sizeof lim, "%lld", (long long)q);
    snprintf(rem, sizeof rem, "%lld", (long long)(left > 0 ? floor(left) : 0));
    fmt_reset(reset, sizeof reset, q > 0 ? ((double)q - left) / per_second(q) : 0);
    const char *sfx = tokens ? "tokens" : "requests";
    char name[48];
    snprintf(name, sizeof name, "x-ratelimit-limit-%s", sfx);
    colo_http_add_header(req, name, lim);
    snprintf(name, sizeof name, "x-ratelimit-remaining-%s", sfx);
    colo_http_add_header(req, name, rem);
    snprintf(name, sizeof name, "x-ratelimit-reset-%s", sfx);
    colo_http_add_header(req, name, reset);
}

static bool refuse(colo_tenant_verdict *v, int status, const char *code, int retry, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static bool refuse(colo_tenant_verdict *v, int status, const char *code, int retry, const char *fmt, ...)
{
    v->http_status = status;
    v->code = code;
    v->retry_after_s = retry;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->message, sizeof v->message, fmt, ap);
    va_end(ap);
    return false;
}

/* Seconds until bucket b of quota q holds need (at least 1). */
static int wait_s(const bucket *b, int64_t q, double need)
{
    if (q <= 0)
        return 60;
    double s = (need - b->level) / per_second(q);
    return s < 1 ? 1 : (int)ceil(s);
}

static bool check(colo_tenants *t, tkey *k, const char *model, bool asked, colo_priority *prio,
                  colo_tenant_verdict *v)
{
    (void)t;
    for (int i = 0; i < k->n_chain; i++) {
        const colo_tenant_level_cfg *c = k->chain[i]->cfg;
        if (!model_allowed(c, model))
            return refuse(v, 403, "model_not_allowed", 0, "%s %s may not use model %s", k->chain[i]->kind, c->name,
                          model);
        if (*prio > c->max_priority) {
            if (asked)
                return refuse(v, 403, "priority_not_allowed", 0, "%s %s may ask for priority %s at most",
                              k->chain[i]->kind, c->name, colo_priority_name(c->max_priority));
            *prio = c->max_priority;
        }
    }
    for (int i = 0; i < k->n_chain; i++) {
        const level *l = k->chain[i];
        const colo_quota_cfg *q = &l->cfg->quotas;
        if (q->concurrent >= 0 && l->in_flight >= q->concurrent)
            return refuse(v, 429, "quota_exceeded", 1, "%s %s: concurrent quota of %d requests reached", l->kind,
                          l->cfg->name, q->concurrent);
        if (q->requests_per_minute >= 0 && l->requests.level < 1)
            return refuse(v, 429, "rate_limit_exceeded", wait_s(&l->requests, q->requests_per_minute, 1),
                          "%s %s: requests_per_minute quota of %lld reached", l->kind, l->cfg->name,
                          (long long)q->requests_per_minute);
        if (q->tokens_per_minute >= 0 && l->tokens.level < 1)
            return refuse(v, 429, "rate_limit_exceeded", wait_s(&l->tokens, q->tokens_per_minute, 1),
                          "%s %s: tokens_per_minute quota of %lld reached", l->kind, l->cfg->name,
                          (long long)q->tokens_per_minute);
    }
    return true;
}

bool colo_tenants_admit(colo_tenants *t, int key, colo_http_req *req, const char *model, bool asked,
                        colo_priority *priority, uint64_t now_ns, colo_tenant_verdict *v)
{
    tkey *k = &t->keys[key];
    for (int i = 0; i < k->n_chain; i++) {
        refill(&k->chain[i]->requests, k->chain[i]->cfg->quotas.requests_per_minute, now_ns);
        refill(&k->chain[i]->tokens, k->chain[i]->cfg->quotas.tokens_per_minute, now_ns);
    }
    memset(v, 0, sizeof *v);
    bool ok = check(t, k, model, asked, priority, v);
    if (ok) {
        v->http_status = 200;
        for (int i = 0; i < k->n_chain; i++) {
            k->chain[i]->in_flight++;
            if (k->chain[i]->cfg->quotas.requests_per_minute >= 0)
                k->chain[i]->requests.level -= 1;
        }
    }
    add_limit_headers(req, k->chain, k->n_chain, false);
    add_limit_headers(req, k->chain, k->n_chain, true);
    return ok;
}

void colo_tenants_release(colo_tenants *t, int key, int64_t tokens, uint64_t now_ns)
{
    tkey *k = &t->keys[key];
    for (int i = 0; i < k->n_chain; i++) {
        level *l = k->chain[i];
        if (l->in_flight > 0)
            l->in_flight--;
        if (l->cfg->quotas.tokens_per_minute >= 0) {
            refill(&l->tokens, l->cfg->quotas.tokens_per_minute, now_ns);
            l->tokens.level -= (double)tokens;
        }
    }
}

void colo_tenants_count(colo_tenants *t, int key, const char *model, int http_status, int64_t prompt_tokens,
                        int64_t completion_tokens, double device_s)
{
    const tkey *k = &t->keys[key];
    char status[8];
    snprintf(status, sizeof status, "%d", http_status);
    colo_metric_add(t->m_requests, (const char *const[]){k->tenant, model, status}, 1);
    if (prompt_tokens > 0)
        colo_metric_add(t->m_tokens, (const char *const[]){k->tenant, model, "prompt"}, (double)prompt_tokens);
    if (completion_tokens > 0)
        colo_metric_add(t->m_tokens, (const char *const[]){k->tenant, model, "completion"},
                        (double)completion_tokens);
    if (device_s > 0)
        colo_metric_add(t->m_device, (const char *const[]){k->tenant, model}, device_s);
}

json_t *colo_tenants_stats_json(colo_tenants *t)
{
    json_t *a = json_array();
    for (int i = 0; a && i < t->n_keys; i++) {
        const tkey *k = &t->keys[i];
        bool seen = false; /* one entry per project: its keys share the label */
        for (int j = 0; j < i && !seen; j++)
            seen = !strcmp(t->keys[j].tenant, k->tenant);
        if (seen)
            continue;
        colo_metric_reading rq, pt, ct, dv;
        const char *const l1[] = {k->tenant, NULL, NULL}, *const lp[] = {k->tenant, NULL, "prompt"},
                          *const lc[] = {k->tenant, NULL, "completion"}, *const ld[] = {k->tenant, NULL};
        colo_metric_read(t->m_requests, l1, &rq);
        colo_metric_read(t->m_tokens, lp, &pt);
        colo_metric_read(t->m_tokens, lc, &ct);
        colo_metric_read(t->m_device, ld, &dv);
        const level *proj = k->n_chain > 1 ? k->chain[1] : k->chain[0];
        json_array_append_new(a, json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:f, s:i}", "tenant", k->tenant,
                                           "organization", k->org, "project", k->project, "requests",
                                           (json_int_t)rq.value, "prompt_tokens", (json_int_t)pt.value,
                                           "completion_tokens", (json_int_t)ct.value, "device_seconds", dv.value,
                                           "in_flight", proj ? proj->in_flight : 0));
    }
    return a;
}
