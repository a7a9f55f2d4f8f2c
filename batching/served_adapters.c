/* A served model's LoRA adapters (batching/served.h): the table of listed
 * adapters, the executor's loading and freeing between steps, and each
 * request's hold on its adapter. */
#include "batching/served_impl.h"
#include "models/arch/lora.h"
#include "runtime/clock.h"
#include "runtime/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *colo_adapter_state_name(colo_adapter_state s)
{
    switch (s) {
    case COLO_ADAPTER_LOADING: return "loading";
    case COLO_ADAPTER_READY: return "ready";
    case COLO_ADAPTER_FAILED: return "failed";
    case COLO_ADAPTER_UNLOADING: return "unloading";
    }
    return "unknown";
}

colo_status colo_served_adapter_check(const colo_model_cfg *base, const colo_adapter_cfg *a, char *err,
                                      size_t errlen)
{
    if (!colo_kind_named_can(base->kind, COLO_KIND_CAN_ADAPTERS)) {
        colo_set_err(err, errlen, "model %s (kind %s) takes no LoRA adapters", base->name, base->kind);
        return COLO_EUNSUPPORTED;
    }
    return colo_lora_check(base->path, a->path, NULL, err, errlen);
}

colo_status colo_served_adapters_create(colo_served *m)
{
    pthread_mutex_init(&m->adapter_mu, NULL);
    if (!(m->adapters = calloc(COLO_SERVED_MAX_ADAPTERS, sizeof *m->adapters)))
        return COLO_ENOMEM;
    for (int i = 0; i < m->cfg.n_adapters && i < COLO_SERVED_MAX_ADAPTERS; i++)
        m->adapters[i] = (served_adapter){.cfg = m->cfg.adapters[i], .state = COLO_ADAPTER_LOADING, .slot = -1,
                                          .order = ++m->adapter_order};
    return COLO_OK;
}

void colo_served_adapters_free(colo_served *m)
{
    if (!m->adapters)
        return;
    free(m->adapters);
    m->adapters = NULL;
    pthread_mutex_destroy(&m->adapter_mu);
}

/* The kind's figures of a loaded entry: on the thread that loaded it (the
 * kind's model belongs to it), under adapter_mu. */
static void note_loaded(colo_served *m, served_adapter *e)
{
    e->rank = 0, e->bytes = 0;
    if (e->slot >= 0 && m->kind->adapter_info && m->inst)
        m->kind->adapter_info(m->inst, e->slot, &e->rank, &e->bytes);
}

void colo_served_adapters_loaded(colo_served *m)
{
    pthread_mutex_lock(&m->adapter_mu);
    for (int i = 0; i < m->cfg.n_adapters && i < COLO_SERVED_MAX_ADAPTERS; i++) {
        m->adapters[i].state = COLO_ADAPTER_READY;
        m->adapters[i].slot = i; /* the kind's load puts the config's there */
        note_loaded(m, &m->adapters[i]);
    }
    pthread_mutex_unlock(&m->adapter_mu);
}

void colo_served_adapters_failed(colo_served *m, const char *msg)
{
    if (!m->adapters)
        return;
    pthread_mutex_lock(&m->adapter_mu);
    for (int i = 0; i < COLO_SERVED_MAX_ADAPTERS; i++) {
        served_adapter *e = &m->adapters[i];
        if (e->state != COLO_ADAPTER_LOADING)
            continue;
        e->state = COLO_ADAPTER_FAILED;
        snprintf(e->error, sizeof e->error, "model %s did not load: %s", m->cfg.name, msg);
    }
    pthread_mutex_unlock(&m->adapter_mu);
}

/* The listed entry named name; prefer one not unloading. A replacement
 * still loading is not listed. Under adapter_mu. */
static served_adapter *find(colo_served *m, const char *name)
{
    served_adapter *unloading = NULL;
    for (int i = 0; i < COLO_SERVED_MAX_ADAPTERS; i++) {
        served_adapter *e = &m->adapters[i];
        if (!e->state || e->pending || strcmp(e->cfg.name, name))
            continue;
        if (e->state != COLO_ADAPTER_UNLOADING)
            return e;
        unloading = e;
    }
    return unloading;
}

/* colo_served_adapter_add, or with replace colo_served_adapter_replace. */
static colo_status add_or_replace(colo_served *m, const colo_adapter_cfg *a, bool replace, char *err, size_t errlen)
{
    if (!colo_kind_can(m->kind, COLO_KIND_CAN_ADAPTERS)) {
        colo_set_err(err, errlen, "model %s (kind %s) takes no LoRA adapters", m->cfg.name, m->kind->name);
        return COLO_EUNSUPPORTED;
    }
    int s = m->state;
    if (atomic_load(&m->draining) || s == COLO_SERVED_FAILED || s == COLO_SERVED_STOPPING) {
        colo_set_err(err, errlen, "model %s is %s", m->cfg.name, colo_served_state_name((colo_served_state)s));
        return COLO_ECANCELED;
    }
    colo_status st = COLO_OK;
    pthread_mutex_lock(&m->adapter_mu);
    served_adapter *e = find(m, a->name), *free_e = NULL;
    bool pending = replace && e && e->state != COLO_ADAPTER_UNLOADING;
    for (int i = 0; i < COLO_SERVED_MAX_ADAPTERS; i++) {
        served_adapter *x = &m->adapters[i];
        if (pending && x->pending && !strcmp(x->cfg.name, a->name))
            x->state = COLO_ADAPTER_UNLOADING; /* an earlier replacement: this one takes its place */
        if (!x->state && !free_e)
            free_e = x;
    }
    if (e && e->state != COLO_ADAPTER_UNLOADING && !replace) {
        colo_set_err(err, errlen, "model %s has an adapter named '%s' already", m->cfg.name, a->name);
        st = COLO_EINVAL;
    } else if (!free_e) {
        colo_set_err(err, errlen, "model %s lists %d adapters already", m->cfg.name, COLO_SERVED_MAX_ADAPTERS);
        st = COLO_ENOMEM;
    } else {
        *free_e = (served_adapter){.cfg = *a, .state = COLO_ADAPTER_LOADING, .slot = -1, .pending = pending,
                                   .order = ++m->adapter_order};
    }
    pthread_mutex_unlock(&m->adapter_mu);
    if (st == COLO_OK) {
        atomic_store(&m->adapter_work, true);
        colo_queue_wake(m->q);
    }
    return st;
}

colo_status colo_served_adapter_add(colo_served *m, const colo_adapter_cfg *a, char *err, size_t errlen)
{
    return add_or_replace(m, a, false, err, errlen);
}

colo_status colo_served_adapter_replace(colo_served *m, const colo_adapter_cfg *a, char *err, size_t errlen)
{
    return add_or_replace(m, a, true, err, errlen);
}

colo_status colo_served_adapter_remove(colo_served *m, const char *name, char *err, size_t errlen)
{
    pthread_mutex_lock(&m->adapter_mu);
    served_adapter *e = find(m, name);
    bool found = e && e->state != COLO_ADAPTER_UNLOADING;
    if (found)
        e->state = COLO_ADAPTER_UNLOADING;
    for (int i = 0; found && i < COLO_SERVED_MAX_ADAPTERS; i++) /* and its replacement, if one is loading */
        if (m->adapters[i].pending && !strcmp(m->adapters[i].cfg.name, name))
            m->adapters[i].state = COLO_ADAPTER_UNLOADING;
    pthread_mutex_unlock(&m->adapter_mu);
    if (!found) {
        colo_set_err(err, errlen, "model %s has no adapter named '%s'", m->cfg.name, name);
        return COLO_EINVAL;
    }
    atomic_store(&m->adapter_work, true);
    colo_queue_wake(m->q);
    return COLO_OK;
}

bool colo_served_adapter_update(colo_served *m, const colo_adapter_cfg *a)
{
    pthread_mutex_lock(&m->adapter_mu);
    served_adapter *e = find(m, a->name);
    bool found = e && e->state != COLO_ADAPTER_UNLOADING;
    if (found) {
        e->cfg.priority = a->priority, e->cfg.has_priority = a->has_priority;
        e->cfg.sla = a->sla, e->cfg.has_sla = a->has_sla;
    }
    pthread_mutex_unlock(&m->adapter_mu);
    return found;
}

static void info_of(const served_adapter *e, colo_served_adapter_info *out)
{
    out->cfg = e->cfg;
    out->state = (colo_adapter_state)e->state;
    snprintf(out->error, sizeof out->error, "%s", e->error);
    out->rank = e->rank;
    out->bytes = e->bytes;
    out->running = e->running;
    out->requests = e->requests;
    out->load_ms = e->load_ms;
}

bool colo_served_adapter_get(colo_served *m, const char *name, colo_served_adapter_info *out)
{
    if (!m->adapters)
        return false;
    pthread_mutex_lock(&m->adapter_mu);
    served_adapter *e = find(m, name);
    if (e && out)
        info_of(e, out);
    pthread_mutex_unlock(&m->adapter_mu);
    return e != NULL;
}

int colo_served_adapter_list(colo_served *m, colo_served_adapter_info *out, int max)
{
    if (!m->adapters)
        return 0;
    int n = 0;
    pthread_mutex_lock(&m->adapter_mu);
    uint64_t after = 0; /* in the order they were added */
    while (n < max) {
        served_adapter *next = NULL;
        for (int i = 0; i < COLO_SERVED_MAX_ADAPTERS; i++) {
            served_adapter *e = &m->adapters[i];
            if (e->state && !e->pending && e->order > after && (!next || e->order < next->order))
                next = e;
        }
        if (!next)
            break;
        info_of(next, &out[n++]);
        after = next->order;
    }
    pthread_mutex_unlock(&m->adapter_mu);
    return n;
}

size_t colo_served_adapters_count(colo_served *m)
{
    size_t n = 0;
    pthread_mutex_lock(&m->adapter_mu);
    for (int i = 0; i < COLO_SERVED_MAX_ADAPTERS; i++)
        n += m->adapters[i].state != 0;
    pthread_mutex_unlock(&m->adapter_mu);
    return n;
}

/* Replacement e has loaded (st COLO_OK): it takes the place of the listed
 * entry of its name, which is unloaded once its requests have finished;
 * or it did not, and is dropped, the listed one serving on. Under
 * adapter_mu. */
static void take_place(colo_served *m, served_adapter *e, colo_status st)
{
    if (st != COLO_OK) {
        COLO_ERROR("model %s: adapter %s: not replaced (the one loaded serves on): %s", m->cfg.name, e->cfg.name,
                   e->error);
        memset(e, 0, sizeof *e); /* nothing of it was loaded */
        return;
    }
    served_adapter *old = find(m, e->cfg.name);
    if (old && old->state != COLO_ADAPTER_UNLOADING)
        old->state = COLO_ADAPTER_UNLOADING;
    e->pending = false;
    e->state = COLO_ADAPTER_READY;
    atomic_store(&m->adapter_work, true); /* the old one's unload, on the next round */
}

/* Loads entry e (LOADING) through the kind, outside the lock. */
static void load_one(colo_served *m, served_adapter *e)
{
    char path[sizeof e->cfg.path], name[64], msg[512] = "";
    snprintf(path, sizeof path, "%s", e->cfg.path);
    snprintf(name, sizeof name, "%s", e->cfg.name);
    float scale = (float)e->cfg.scale;
    e->busy = true;
    pthread_mutex_unlock(&m->adapter_mu);
    uint64_t t0 = colo_now_ns();
    int slot = -1;
    colo_status st = m->kind->adapter_add(m->inst, path, scale, &slot, msg, sizeof msg);
    double ms = (double)(colo_now_ns() - t0) / 1e6;
    if (st == COLO_OK)
        COLO_INFO("model %s: adapter %s loaded in %.1f ms", m->cfg.name, name, ms);
    else
        COLO_ERROR("model %s: adapter %s: %s", m->cfg.name, name, msg);
    pthread_mutex_lock(&m->adapter_mu);
    e->busy = false;
    e->load_ms = ms;
    if (st == COLO_OK) {
        e->slot = slot;
        note_loaded(m, e);
    } else
        snprintf(e->error, sizeof e->error, "%s", msg);
    if (e->state == COLO_ADAPTER_LOADING && e->pending)
        take_place(m, e, st);
    else if (e->state == COLO_ADAPTER_LOADING)
        e->state = st == COLO_OK ? COLO_ADAPTER_READY : COLO_ADAPTER_FAILED;
}

/* Under adapter_mu, e unloading and unused: its slot is freed with the
 * lock released (the kind waits for the stream), then the entry is free.
 * Nobody else writes an unloading entry, and nothing acquires it. */
static void unload_one(colo_served *m, served_adapter *e)
{
    char name[64];
    snprintf(name, sizeof name, "%s", e->cfg.name);
    int slot = e->slot;
    e->busy = true;
    pthread_mutex_unlock(&m->adapter_mu);
    if (slot >= 0)
        m->kind->adapter_remove(m->inst, slot);
    COLO_INFO("model %s: adapter %s unloaded", m->cfg.name, name);
    pthread_mutex_lock(&m->adapter_mu);
    memset(e, 0, sizeof *e);
}

void colo_served_adapters_work(colo_served *m)
{
    if (!m->adapters || !atomic_exchange(&m->adapter_work, false))
        return;
    pthread_mutex_lock(&m->adapter_mu);
    for (int i = 0; i < COLO_SERVED_MAX_ADAPTERS; i++) {
        served_adapter *e = &m->adapters[i];
        if (e->state == COLO_ADAPTER_LOADING && !e->busy)
            load_one(m, e);
        if (e->state == COLO_ADAPTER_UNLOADING && !e->busy && e->running == 0)
            unload_one(m, e);
    }
    pthread_mutex_unlock(&m->adapter_mu);
}

colo_status colo_served_adapter_acquire(colo_served *m, colo_request *r, char *err, size_t errlen)
{
    r->adapter_index = 0;
    r->sla = NULL;
    if (!r->adapter)
        return COLO_OK;
    colo_status st = COLO_OK;
    pthread_mutex_lock(&m->adapter_mu);
    served_adapter *e = m->adapters ? find(m, r->adapter) : NULL;
    if (!e) { /* removed since the front end found it */
        colo_set_err(err, errlen, "model %s has no adapter named '%s'", m->cfg.name, r->adapter);
        st = COLO_ECANCELED;
    } else if (e->state != COLO_ADAPTER_READY) {
        colo_set_err(err, errlen, "adapter %s is %s%s%s", e->cfg.name, colo_adapter_state_name(e->state),
                     e->error[0] ? ": " : "", e->error);
        st = COLO_ECANCELED;
    } else {
        colo_sla_cfg *sla = colo_pool_alloc(r->pool, sizeof *sla);
        if (!sla) {
            colo_set_err(err, errlen, "out of memory");
            st = COLO_ENOMEM;
        } else {
            *sla = e->cfg.sla; /* the request's own copy: read after it is answered */
            e->running++;
            e->requests++;
            r->adapter_index = (int)(e - m->adapters) + 1;
            r->adapter_slot = e->slot;
            r->sla = sla;
        }
    }
    pthread_mutex_unlock(&m->adapter_mu);
    return st;
}

void colo_served_adapter_vanish(colo_served *m, const char *name)
{
    if (colo_served_adapter_remove(m, name, NULL, 0) != COLO_OK)
        return;
    for (int i = 0; i < 500 && colo_served_adapter_get(m, name, NULL); i++)
        colo_sleep_ns(10 * 1000 * 1000);
}

void colo_served_adapter_release(colo_served *m, colo_request *r)
{
    if (!r->adapter_index)
        return;
    pthread_mutex_lock(&m->adapter_mu);
    served_adapter *e = &m->adapters[r->adapter_index - 1];
    bool last = --e->running == 0 && e->state == COLO_ADAPTER_UNLOADING;
    pthread_mutex_unlock(&m->adapter_mu);
    r->adapter_index = 0;
    if (last) {
        atomic_store(&m->adapter_work, true);
        colo_queue_wake(m->q);
    }
}
