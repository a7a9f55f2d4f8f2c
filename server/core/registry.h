/* server/core/registry.h: the one table of the models colo-server serves.
 *
 * Everything about a served model that is not a request lives here: its
 * slot, its name, the environment it is made with (device, co-scheduler,
 * memory pool, evictor, stream priority and share by the scheduling
 * policy), its loading (at start, in the foreground; at run time, on a
 * thread of its own), its draining and unloading, and which models the
 * config file names (readiness). The endpoints (server/api/api.h), the admin
 * routes (server/admin.h), the metrics and /v1/stats ask it; none keeps a
 * list of its own.
 *
 * Slots: a slot is live (m set, listed), unloaded (gone from the API) or
 * free. A model loaded at run time frees its slot once it is unloaded, and
 * the next load takes it again. The slots of the models loaded at start
 * are never freed (/v1/stats' history indexes them), so at most
 * COLO_CFG_MAX_MODELS of them stay unloaded.
 *
 * Threads: create, attach and colo_registry_load_now on the controlling
 * thread before the loop runs; everything else on the loop thread, but
 * colo_registry_stop and colo_registry_free, after the loop has stopped. */
#ifndef COLO_SERVER_REGISTRY_H
#define COLO_SERVER_REGISTRY_H

#include <stdbool.h>

#include "batching/served.h"
#include "config/config.h"
#include "server/http/http.h"

/* Models served at once, counting those loading, failed and being
 * unloaded. */
#define COLO_REGISTRY_MAX_MODELS 256

typedef struct colo_registry colo_registry;
struct colo_evictor;

/* One slot. Read by the endpoints; written only by the registry. */
typedef struct colo_registry_model {
    colo_served *m;   /* NULL: a free slot */
    const char *name; /* the served config's; NULL in a free slot */
    bool unloading;   /* draining: refuses new requests, then unloaded */
    bool unloaded;    /* gone from the API (a start model's slot, kept) */
} colo_registry_model;

/* What models are made with. */
typedef struct colo_registry_env {
    colo_device *dev;
    colo_cosched *cs;
    colo_mem_pool *pool;          /* NULL: fixed arenas */
    struct colo_evictor *evictor; /* NULL: no eviction */
    colo_sched_policy policy;
    colo_served_hooks hooks;      /* step and wake metrics */
} colo_registry_env;

/* An empty table; the models cfg names are those readiness waits for.
 * NULL when out of memory. */
colo_registry *colo_registry_create(colo_http_server *http, const colo_config *cfg);
/* Sets the environment; run-time loads are refused until then. */
void colo_registry_attach(colo_registry *r, const colo_registry_env *env);
bool colo_registry_attached(const colo_registry *r);

/* The environment of mc: the policy's stream priority and share, and
 * compute units [unit_first, unit_first + unit_count) (0, 0: the whole
 * device). */
colo_served_env colo_registry_env_of(const colo_registry *r, const colo_model_cfg *mc, int unit_first,
                                     int unit_count);

/* Calls visit for every listed model, from any thread (the evictor's
 * walk, batching/evictor.h: colo_evictor_walk_fn, reg the registry):
 * under a lock that keeps the slots' models from being unlisted or freed
 * meanwhile. visit must not call the registry. */
void colo_registry_walk_served(void *reg, void (*visit)(colo_served *m, void *arg), void *arg);

/* ---- lookup and iteration (loop thread) ----------------------------------------------- */
/* The listed (not unloaded) model named name (its name or an alias), or
 * NULL. Accepts name NULL. */
colo_registry_model *colo_registry_find(colo_registry *r, const char *name);
/* The listed model that has a LoRA adapter named name (batching/served.h),
 * the adapter's state into out (may be NULL); NULL when none has. */
colo_registry_model *colo_registry_find_adapter(colo_registry *r, const char *name, colo_served_adapter_info *out);
/* Names are one namespace: a model's name, its aliases and the LoRA
 * adapters of every model. Whether name is free, leaving out except (may
 * be NULL); otherwise false, with what holds it in msg ("model m",
 * "adapter a of model m") and *going set when that is being unloaded (the
 * name is free once it is gone). */
bool colo_registry_name_free(colo_registry *r, const char *name, const colo_registry_model *except, bool *going,
                             char *msg, size_t len);
/* The same for every name mc brings: its name, aliases and adapters. */
bool colo_registry_names_free(colo_registry *r, const colo_model_cfg *mc, const colo_registry_model *except,
                              bool *going, char *msg, size_t len);
/* The listed model after prev in slot order (prev NULL: the first); NULL
 * after the last. */
colo_registry_model *colo_registry_next(colo_registry *r, const colo_registry_model *prev);
/* Slots in use, [0, n): live, unloaded or free. */
int colo_registry_slots(const colo_registry *r);
colo_registry_model *colo_registry_slot(colo_registry *r, int i);
/* The models loaded at start hold slots [0, n). */
int colo_registry_start_models(const colo_registry *r);
/* Whether another model can be added. */
bool colo_registry_slot_free(const colo_registry *r);

/* ---- loading and unloading ------------------------------------------------------------- */
/* At start: loads mc in the foreground, starts it and lists it in the next
 * slot, which is never freed. NULL with a message. */
colo_registry_model *colo_registry_load_now(colo_registry *r, const colo_model_cfg *mc, int unit_first,
                                            int unit_count, char *err, size_t errlen);
/* Whether mc's guarantee fits the pool, counting the idle models that may
 * be put to sleep; false with the bytes needed and available. Always true
 * with fixed arenas (the load itself says). */
bool colo_registry_room(colo_registry *r, const colo_model_cfg *mc, size_t *need, size_t *avail);
/* At run time: lists mc (state loading) and loads it on a thread of its
 * own; it turns ready, or failed with the reason. COLO_OK, COLO_EINVAL for
 * an unknown kind, or COLO_ENOMEM (out of memory, or no free slot), with a
 * message. */
colo_status colo_registry_load(colo_registry *r, const colo_model_cfg *mc, char *msg, size_t len);
/* Whether e's run-time load is still under way. */
bool colo_registry_loading(const colo_registry *r, const colo_registry_model *e);
/* Drains e (new requests refused), then unloads it: its memory freed, and
 * gone from the API. next (copied; NULL: none) is loaded in its place once
 * it is gone. */
colo_status colo_registry_unload(colo_registry *r, colo_registry_model *e, const colo_model_cfg *next);
/* The config e is to be loaded again with once unloaded, or NULL. */
const colo_model_cfg *colo_registry_next_config(const colo_registry *r, const colo_registry_model *e);
/* Sets it (copied) or, with NULL, cancels it; e must be unloading. */
void colo_registry_set_next_config(colo_registry *r, colo_registry_model *e, const colo_model_cfg *next);

/* ---- draft models (speculative.draft) ------------------------------------------------------ */
/* Points every listed model whose config names a draft model at that
 * model while it is listed and not being unloaded (else at none: the
 * target then decodes plainly); a pair is checked first
 * (colo_served_draft_check: one that fails is not made, and logged).
 * The registry calls it as models come and go. */
void colo_registry_link_drafts(colo_registry *r);
/* Whether mc (to be loaded at run time) fits the drafts of the listed
 * models: its draft model is listed and can draft for it, and for every
 * listed model that names mc as its draft, mc can; false with the reason. */
bool colo_registry_drafts_fit(colo_registry *r, const colo_model_cfg *mc, char *msg, size_t len);

/* ---- readiness ---------------------------------------------------------------------------- */
/* The models the config file names (readiness waits for each): adds or
 * takes out one, or sets them to cfg's. */
void colo_registry_want(colo_registry *r, const char *name, bool on);
void colo_registry_want_config(colo_registry *r, const colo_config *cfg);
/* Whether every model loaded at start and every model the config file
 * names is listed and serving (ready, sleeping or waking); a model loaded
 * at run time counts once it has loaded. */
bool colo_registry_ready(colo_registry *r);

/* ---- the end ------------------------------------------------------------------------------ */
/* Stops every model's executor (their last answers go to the loop) and
 * joins loads under way, waiting for them at most the config's
 * server.shutdown_timeout_ms in all. False when a load still runs after
 * that: what it uses (the registry, the server, the device) must then not
 * be freed. */
bool colo_registry_stop(colo_registry *r);
/* Frees every model. Accepts NULL; frees nothing when colo_registry_stop
 * was false. */
void colo_registry_free(colo_registry *r);

#endif
