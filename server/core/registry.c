/* The table of served models: slots, loading, unloading, readiness
 * (server/core/registry.h). */
#include "server/core/registry.h"
#include "batching/evictor.h"
#include "runtime/log.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A load at run time: the model is listed (state loading) while a thread
 * of its own loads it. */
typedef struct load_job {
    colo_registry *r;
    colo_served *m;
    pthread_t thread;
    bool running;        /* the thread was started and not joined */
    colo_http_call done; /* posted by the thread when it is done */
    colo_status st;
    char err[1024];
} load_job;

/* An unload under way: polled until the model has drained; then, for a
 * model whose config changed, the next config is loaded. */
typedef struct unload_job {
    colo_registry *r;
    colo_registry_model *e;
    struct event *tick;
    colo_http_call finish; /* posted once drained, so it runs after the answers already queued */
    bool reload;           /* load `next` once unloaded */
    colo_model_cfg next;
} unload_job;

struct colo_registry {
    colo_http_server *http;
    /* Held where a slot's model comes or goes and by colo_registry_walk_served
     * (the evictor's walk, from any thread); the loop thread reads the
     * slots without it. */
    pthread_mutex_t walk_mu;
    colo_registry_model models[COLO_REGISTRY_MAX_MODELS];
    int n;       /* slots in use: models[0, n) */
    int n_start; /* loaded at start: slots [0, n_start), never freed */
    int n_expected; /* the config's models at start: readiness waits for them */
    load_job loads[COLO_REGISTRY_MAX_MODELS];
    unload_job unloads[COLO_REGISTRY_MAX_MODELS];
    colo_registry_env env;
    bool attached;
    int stop_timeout_ms; /* how long colo_registry_stop waits for a load under way */
    /* The models the config file names, as last applied (less those
     * deleted through DELETE /admin/models since). */
    char wanted[COLO_CFG_MAX_MODELS][sizeof ((colo_model_cfg *)0)->name];
    int n_wanted;
};

static int slot_of(const colo_registry *r, const colo_registry_model *e) { return (int)(e - r->models); }

colo_registry *colo_registry_create(colo_http_server *http, const colo_config *cfg)
{
    colo_registry *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->http = http;
    pthread_mutex_init(&r->walk_mu, NULL);
    r->n_expected = cfg->n_models;
    r->stop_timeout_ms = cfg->server.shutdown_timeout_ms;
    colo_registry_want_config(r, cfg);
    return r;
}

void colo_registry_attach(colo_registry *r, const colo_registry_env *env)
{
    r->env = *env;
    r->attached = true;
}

bool colo_registry_attached(const colo_registry *r) { return r->attached; }

colo_served_env colo_registry_env_of(const colo_registry *r, const colo_model_cfg *mc, int unit_first,
                                     int unit_count)
{
    const colo_registry_env *e = &r->env;
    colo_served_env env = {.dev = e->dev, .cs = e->cs, .hooks = e->hooks, .pool = e->pool, .evictor = e->evictor};
    colo_sched_model sm = {.priority = mc->priority, .share = mc->share, .sm_share = mc->sm_share};
    colo_sched_policy_stream(e->policy, &sm, &env.stream);
    env.stream.unit_first = unit_first;
    env.stream.unit_count = unit_count;
    return env;
}

/* ---- slots ----------------------------------------------------------------------------- */

colo_registry_model *colo_registry_find(colo_registry *r, const char *name)
{
    for (int i = 0; name && i < r->n; i++)
        if (r->models[i].m && !r->models[i].unloaded && colo_model_cfg_named(colo_served_config(r->models[i].m), name))
            return &r->models[i];
    return NULL;
}

colo_registry_model *colo_registry_find_adapter(colo_registry *r, const char *name, colo_served_adapter_info *out)
{
    for (int i = 0; name && i < r->n; i++)
        if (r->models[i].m && !r->models[i].unloaded && colo_served_adapter_get(r->models[i].m, name, out))
            return &r->models[i];
    return NULL;
}

bool colo_registry_name_free(colo_registry *r, const char *name, const colo_registry_model *except, bool *going,
                             char *msg, size_t len)
{
    *going = false;
    for (int i = 0; i < r->n; i++) {
        colo_registry_model *e = &r->models[i];
        if (!e->m || e->unloaded || e == except)
            continue;
        colo_served_adapter_info in;
        if (colo_model_cfg_named(colo_served_config(e->m), name)) {
            snprintf(msg, len, "the name %s is taken by model %s%s", name, e->name,
                     e->unloading ? " (being unloaded: try again once it is gone)" : "");
            *going = e->unloading;
            return false;
        }
        if (colo_served_adapter_get(e->m, name, &in)) {
            *going = e->unloading || in.state == COLO_ADAPTER_UNLOADING;
            snprintf(msg, len, "the name %s is taken by adapter %s of model %s%s", name, name, e->name,
                     *going ? " (being unloaded: try again once it is gone)" : "");
            return false;
        }
    }
    return true;
}

bool colo_registry_names_free(colo_registry *r, const colo_model_cfg *mc, const colo_registry_model *except,
                              bool *going, char *msg, size_t len)
{
    for (int a = -1; a < mc->n_aliases + mc->n_adapters; a++) {
        const char *n = a < 0 ? mc->name : a < mc->n_aliases ? mc->aliases[a] : mc->adapters[a - mc->n_aliases].name;
        if (!colo_registry_name_free(r, n, except, going, msg, len))
            return false;
    }
    return true;
}

colo_registry_model *colo_registry_next(colo_registry *r, const colo_registry_model *prev)
{
    for (int i = prev ? slot_of(r, prev) + 1 : 0; i < r->n; i++)
        if (r->models[i].m && !r->models[i].unloaded)
            return &r->models[i];
    return NULL;
}

int colo_registry_slots(const colo_registry *r) { return r->n; }

colo_registry_model *colo_registry_slot(colo_registry *r, int i) { return &r->models[i]; }

int colo_registry_start_models(const colo_registry *r) { return r->n_start; }

bool colo_registry_slot_free(const colo_registry *r)
{
    if (r->n < COLO_REGISTRY_MAX_MODELS)
        return true;
    for (int i = 0; i < r->n; i++)
        if (!r->models[i].m)
            return true;
    return false;
}

/* The first free slot for m, listed from now on; NULL when every slot
 * holds a model. */
static colo_registry_model *take_slot(colo_registry *r, colo_served *m)
{
    int i = 0;
    while (i < r->n && r->models[i].m)
        i++;
    if (i == COLO_REGISTRY_MAX_MODELS)
        return NULL;
    pthread_mutex_lock(&r->walk_mu);
    if (i == r->n)
        r->n++;
    r->models[i] = (colo_registry_model){.m = m, .name = colo_served_config(m)->name};
    pthread_mutex_unlock(&r->walk_mu);
    return &r->models[i];
}

static void free_slot(colo_registry *r, colo_registry_model *e)
{
    pthread_mutex_lock(&r->walk_mu);
    *e = (colo_registry_model){.unloaded = true};
    while (r->n > 0 && !r->models[r->n - 1].m)
        r->n--;
    pthread_mutex_unlock(&r->walk_mu);
}

/* Takes e's model out of the walk before it is unloaded (its arena and
 * stream go). */
static void unlist(colo_registry *r, colo_registry_model *e)
{
    pthread_mutex_lock(&r->walk_mu);
    e->unloaded = true;
    pthread_mutex_unlock(&r->walk_mu);
}

void colo_registry_walk_served(void *reg, void (*visit)(colo_served *m, void *arg), void *arg)
{
    colo_registry *r = reg;
    pthread_mutex_lock(&r->walk_mu);
    for (int i = 0; i < r->n; i++)
        if (r->models[i].m && !r->models[i].unloaded)
            visit(r->models[i].m, arg);
    pthread_mutex_unlock(&r->walk_mu);
}

/* ---- draft models ------------------------------------------------------------------------ */

void colo_registry_link_drafts(colo_registry *r)
{
    for (int i = 0; i < r->n; i++) {
        colo_registry_model *t = &r->models[i];
        if (!t->m || t->unloaded)
            continue;
        const colo_model_cfg *tc = colo_served_config(t->m);
        colo_registry_model *d = tc->speculative.draft[0] ? colo_registry_find(r, tc->speculative.draft) : NULL;
        colo_served *dm = d && !d->unloading && d != t ? d->m : NULL;
        if (dm == colo_served_get_draft(t->m))
            continue;
        char why[1024];
        if (dm && colo_served_draft_check(tc, colo_served_config(dm), why, sizeof why) != COLO_OK) {
            COLO_ERROR("model %s: not drafting with model %s: %s", tc->name, colo_served_config(dm)->name, why);
            dm = NULL;
        }
        colo_served_set_draft(t->m, dm);
        if (dm)
            COLO_INFO("model %s: drafts with model %s", tc->name, colo_served_config(dm)->name);
    }
}

bool colo_registry_drafts_fit(colo_registry *r, const colo_model_cfg *mc, char *msg, size_t len)
{
    if (mc->speculative.draft[0] && colo_model_cfg_named(mc, mc->speculative.draft)) {
        snprintf(msg, len, "model %s: speculative.draft: a model cannot draft for itself", mc->name);
        return false;
    }
    if (mc->speculative.draft[0]) {
        colo_registry_model *d = colo_registry_find(r, mc->speculative.draft);
        if (!d || d->unloading) {
            snprintf(msg, len, "model %s: speculative.draft: no model named '%s' is served%s", mc->name,
                     mc->speculative.draft, d ? " (it is being unloaded)" : "");
            return false;
        }
        if (colo_served_draft_check(mc, colo_served_config(d->m), msg, len) != COLO_OK)
            return false;
    }
    for (colo_registry_model *t = colo_registry_next(r, NULL); t; t = colo_registry_next(r, t)) {
        const colo_model_cfg *tc = colo_served_config(t->m);
        if (t->unloading || !tc->speculative.draft[0] || !colo_model_cfg_named(mc, tc->speculative.draft))
            continue;
        if (colo_served_draft_check(tc, mc, msg, len) != COLO_OK)
            return false;
    }
    return true;
}

/* ---- loading ----------------------------------------------------------------------------- */

colo_registry_model *colo_registry_load_now(colo_registry *r, const colo_model_cfg *mc, int unit_first,
                                            int unit_count, char *err, size_t errlen)
{
    colo_served_env env = colo_registry_env_of(r, mc, unit_first, unit_count);
    colo_served *m = colo_served_load(mc, &env, err, errlen);
    if (!m)
        return NULL;
    colo_registry_model *e = NULL;
    if (colo_served_start(m, err, errlen) != COLO_OK || !(e = take_slot(r, m))) {
        if (!e)
            colo_set_err(err, errlen, "model %s: the model table is full (%d models)", mc->name,
                         COLO_REGISTRY_MAX_MODELS);
        colo_served_stop(m);
        colo_served_free(m);
        return NULL;
    }
    r->n_start = slot_of(r, e) + 1;
    colo_registry_link_drafts(r);
    return e;
}

bool colo_registry_room(colo_registry *r, const colo_model_cfg *mc, size_t *need, size_t *avail)
{
    if (!r->env.pool || !r->env.evictor)
        return true; /* fixed arenas: the load itself says whether it fits */
    *need = (size_t)((double)colo_mem_pool_budget(r->env.pool) * mc->memory_fraction);
    *avail = colo_evictor_available_for_load(r->env.evictor, mc->priority);
    return *need <= *avail;
}

static void *load_main(void *arg)
{
    load_job *j = arg;
    j->st = colo_served_load_in(j->m, j->err, sizeof j->err);
    if (j->st == COLO_OK)
        j->st = colo_served_start(j->m, j->err, sizeof j->err);
    colo_http_server_post(j->r->http, &j->done);
    return NULL;
}

static void load_done(void *ud)
{
    load_job *j = ud;
    if (j->running) /* else colo_registry_stop joined it */
        pthread_join(j->thread, NULL);
    j->running = false;
    colo_registry_link_drafts(j->r);
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

colo_status colo_registry_load(colo_registry *r, const colo_model_cfg *mc, char *msg, size_t len)
{
    colo_served_env env = colo_registry_env_of(r, mc, 0, 0);
    colo_served *m = colo_served_create(mc, &env, msg, len);
    if (!m)
        return strstr(msg, "unknown kind") ? COLO_EINVAL : COLO_ENOMEM;
    colo_registry_model *e = take_slot(r, m);
    if (!e) {
        colo_served_free(m);
        snprintf(msg, len, "the model table is full (%d models)", COLO_REGISTRY_MAX_MODELS);
        return COLO_ENOMEM;
    }
    load_job *j = &r->loads[slot_of(r, e)];
    *j = (load_job){.r = r, .m = m};
    j->done = (colo_http_call){.fn = load_done, .ud = j};
    if (pthread_create(&j->thread, NULL, load_main, j)) {
        snprintf(j->err, sizeof j->err, "cannot start a loading thread");
        colo_served_set_failed(m, j->err);
        COLO_ERROR("admin: model %s: %s", mc->name, j->err);
        return COLO_OK; /* listed as failed */
    }
    j->running = true;
    COLO_INFO("admin: loading model %s (%s, %s, memory_fraction %g)", mc->name, mc->kind, mc->path,
              mc->memory_fraction);
    return COLO_OK;
}

bool colo_registry_loading(const colo_registry *r, const colo_registry_model *e)
{
    return r->loads[slot_of(r, e)].running;
}

/* ---- unloading ---------------------------------------------------------------------------- */

static void unload_finish(void *ud)
{
    unload_job *j = ud;
    colo_registry *r = j->r;
    colo_registry_model *e = j->e;
    event_free(j->tick);
    j->tick = NULL;
    unlist(r, e);
    colo_registry_link_drafts(r); /* no model drafts with it any more */
    colo_served_unload(e->m);
    colo_served_set_draft(e->m, NULL);
    COLO_INFO("admin: model %s unloaded", e->name);
    if (slot_of(r, e) >= r->n_start) { /* loaded at run time: freed, and its slot with it */
        colo_served *m = e->m;
        free_slot(r, e);
        colo_served_free(m);
    } else {
        e->unloaded = true; /* loaded at start: the struct stays until exit */
        e->unloading = false;
    }
    if (!j->reload)
        return;
    char msg[1024];
    size_t need = 0, avail = 0;
    j->reload = false;
    bool going;
    if (!colo_registry_names_free(r, &j->next, NULL, &going, msg, sizeof msg))
        COLO_ERROR("reload: model %s: not loaded again: %s", j->next.name, msg);
    else if (!colo_registry_room(r, &j->next, &need, &avail))
        COLO_ERROR("reload: model %s: not loaded again: needs %zu bytes of guaranteed memory, %zu available",
                   j->next.name, need, avail);
    else if (colo_registry_load(r, &j->next, msg, sizeof msg) != COLO_OK)
        COLO_ERROR("reload: model %s: not loaded again: %s", j->next.name, msg);
}

static void unload_tick(evutil_socket_t fd, short what, void *ud)
{
    (void)fd, (void)what;
    unload_job *j = ud;
    colo_served_state s = colo_served_get_state(j->e->m);
    /* a model still loading is unloaded once its load has ended */
    if (s != COLO_SERVED_LOADING && !colo_registry_loading(j->r, j->e) &&
        (colo_served_drained(j->e->m) || s == COLO_SERVED_FAILED)) {
        j->finish = (colo_http_call){.fn = unload_finish, .ud = j};
        colo_http_server_post(j->r->http, &j->finish);
        return;
    }
    struct timeval tv = {0, 10 * 1000};
    evtimer_add(j->tick, &tv);
}

colo_status colo_registry_unload(colo_registry *r, colo_registry_model *e, const colo_model_cfg *next)
{
    unload_job *j = &r->unloads[slot_of(r, e)];
    j->r = r;
    j->e = e;
    if (!(j->tick = evtimer_new(colo_http_server_base(r->http), unload_tick, j)))
        return COLO_ENOMEM;
    j->reload = next != NULL;
    if (next)
        j->next = *next;
    e->unloading = true;
    colo_registry_link_drafts(r);
    colo_served_drain(e->m);
    struct timeval tv = {0, 0};
    evtimer_add(j->tick, &tv);
    return COLO_OK;
}

const colo_model_cfg *colo_registry_next_config(const colo_registry *r, const colo_registry_model *e)
{
    const unload_job *j = &r->unloads[slot_of(r, e)];
    return e->unloading && j->reload ? &j->next : NULL;
}

void colo_registry_set_next_config(colo_registry *r, colo_registry_model *e, const colo_model_cfg *next)
{
    unload_job *j = &r->unloads[slot_of(r, e)];
    j->reload = next != NULL;
    if (next)
        j->next = *next;
}

/* ---- readiness ------------------------------------------------------------------------------ */

void colo_registry_want(colo_registry *r, const char *name, bool on)
{
    for (int i = 0; i < r->n_wanted; i++) {
        if (strcmp(r->wanted[i], name))
            continue;
        if (!on) {
            memmove(r->wanted[i], r->wanted[i + 1], (size_t)(r->n_wanted - i - 1) * sizeof r->wanted[i]);
            r->n_wanted--;
        }
        return;
    }
    if (on && r->n_wanted < COLO_CFG_MAX_MODELS)
        snprintf(r->wanted[r->n_wanted++], sizeof r->wanted[0], "%s", name);
}

void colo_registry_want_config(colo_registry *r, const colo_config *cfg)
{
    r->n_wanted = 0;
    for (int i = 0; i < cfg->n_models; i++)
        colo_registry_want(r, cfg->models[i].name, true);
}

/* A sleeping model serves: a request wakes it. */
static bool serving(colo_served_state s)
{
    return s == COLO_SERVED_READY || s == COLO_SERVED_SLEEPING || s == COLO_SERVED_WAKING;
}

bool colo_registry_ready(colo_registry *r)
{
    if (r->n_start < r->n_expected)
        return false;
    for (int i = 0; i < r->n; i++) {
        colo_registry_model *e = &r->models[i];
        if (!e->m || e->unloaded || e->unloading)
            continue;
        colo_served_state s = colo_served_get_state(e->m);
        /* a model loaded at run time counts once it has loaded */
        if (i >= r->n_start && (s == COLO_SERVED_LOADING || s == COLO_SERVED_FAILED))
            continue;
        if (!serving(s))
            return false;
    }
    /* and every model the config file names is served, also after a
     * SIGHUP that could not load one again */
    for (int i = 0; i < r->n_wanted; i++) {
        colo_registry_model *e = colo_registry_find(r, r->wanted[i]);
        if (!e || e->unloading || !serving(colo_served_get_state(e->m)))
            return false;
    }
    return true;
}

/* ---- the end ---------------------------------------------------------------------------------- */

bool colo_registry_stop(colo_registry *r)
{
    if (!r)
        return true;
    /* executors first, but those of models whose load still runs */
    for (int i = 0; i < r->n; i++)
        if (r->models[i].m && !r->loads[i].running)
            colo_served_stop(r->models[i].m);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    int64_t ns = (int64_t)until.tv_nsec + (int64_t)(r->stop_timeout_ms > 0 ? r->stop_timeout_ms : 0) * 1000000;
    until.tv_sec += (time_t)(ns / 1000000000);
    until.tv_nsec = (long)(ns % 1000000000);
    bool all = true;
    for (int i = 0; i < COLO_REGISTRY_MAX_MODELS; i++) {
        load_job *j = &r->loads[i];
        if (!j->running)
            continue;
        if (pthread_timedjoin_np(j->thread, NULL, &until) == 0) {
            j->running = false;
            colo_served_stop(j->m);
        } else {
            all = false;
            COLO_ERROR("admin: model %s is still loading %d ms after the shutdown began: not waiting for it",
                       colo_served_config(j->m)->name, r->stop_timeout_ms);
        }
    }
    return all;
}

void colo_registry_free(colo_registry *r)
{
    if (!r)
        return;
    if (!colo_registry_stop(r))
        return; /* a load thread still runs and uses what is here: left to the process's exit */
    /* An unload still draining at shutdown leaves its timer to the event
     * base, which the server has freed by now. */
    for (int i = 0; i < r->n; i++)
        if (r->models[i].m)
            colo_served_set_draft(r->models[i].m, NULL); /* (a draft may be freed before its target) */
    for (int i = 0; i < r->n; i++)
        colo_served_free(r->models[i].m);
    pthread_mutex_destroy(&r->walk_mu);
    free(r);
}
