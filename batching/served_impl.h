/* batching/served_impl.h: what served.c shares with the executors
 * (served_continuous.c for generative kinds, served_dynamic.c for
 * encoders). Not for use outside batching/. */
#ifndef COLO_BATCHING_SERVED_IMPL_H
#define COLO_BATCHING_SERVED_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "batching/admission.h"
#include "batching/kind.h"
#include "batching/served.h"

/* One listed LoRA adapter (served_adapters.c); state 0: a free entry. */
typedef struct served_adapter {
    colo_adapter_cfg cfg;
    int state;        /* colo_adapter_state */
    bool busy;        /* the executor is loading it (outside the lock) */
    bool pending;     /* LOADING to take the place of the listed one of its name, which serves until then */
    int slot;         /* the kind's; -1 until loaded */
    int rank;         /* the kind's figures, read as it loaded */
    size_t bytes;
    int running;
    uint64_t requests, order;
    double load_ms;
    char error[256];
} served_adapter;

struct colo_served {
    colo_model_cfg cfg;
    colo_served_env env;
    const colo_model_kind *kind;
    void *inst; /* the kind's instance */
    colo_arena *arena;
    size_t host_held; /* colo_mem_pool_hold for the kind's host memory (elastic memory only) */
    colo_stream *stream;
    colo_cosched_member *member;
    colo_queue *q;
    colo_admission *adm; /* SLA deadlines: step times and admission (batching/admission.h) */
    pthread_t thread;
    bool started;
    _Atomic int state;
    atomic_bool stopping;
    char error[256];
    double load_ms;
    _Atomic uint64_t steps;
    /* sleep and wake: asked by any thread, done by the executor */
    atomic_bool want_sleep, want_wake, draining;
    _Atomic uint64_t sleeps, wakes;
    _Atomic uint64_t last_wake_ns;
    uint64_t idle_since_ns; /* executor thread: when it last had nothing to do (0: busy) */
    /* eviction (batching/evictor.h) */
    _Atomic uint64_t last_used_ns; /* the last request submitted (or the start) */
    _Atomic uint64_t evictions;    /* times it was put to sleep to make room */
    atomic_bool evict_asked;       /* the evictor asked it to sleep or trim (cleared once done or refused) */
    atomic_bool want_trim;         /* asked to lend its unused guarantee, staying awake */
    atomic_bool preempted;         /* asked to sleep with requests running or queued (cleared once awake) */
    _Atomic uint64_t resident_since_ns; /* when it last woke or started */
    _Atomic uint64_t trims;        /* times it lent its unused guarantee */
    _Atomic uint64_t sleep_preemptions; /* times it was put to sleep busy, for a higher-priority model */
    uint64_t regain_tried_ns;      /* executor thread: the last try to take a lent guarantee back */
    atomic_bool pinned;            /* cfg.pinned, changeable at run time */
    _Atomic int keep_alive_ms;     /* cfg.keep_alive_ms, changeable at run time */
    bool guarantee_given_back;     /* executor thread: without its whole guarantee (asleep, or lent) */
    uint64_t wake_blocked_since_ns; /* executor thread: since when queued requests wait for memory to wake (0: not) */
    _Atomic int running;
    _Atomic int running_batch; /* of them, lines of batches (the batch class) */
    /* requests admitted into a generative kind (executor thread only); one
     * leaves before its on_done runs, since the front end may free it then */
    colo_request **live;
    int n_live;
    /* the kind's figures, refreshed by the executor after each step */
    pthread_mutex_t info_mu;
    colo_kind_info info;
    colo_stream_stats stream_stats; /* the stream's, as of the last refresh (under info_mu) */
    /* long inputs are tokenized on the preparing thread, off the caller's */
    pthread_t prep_thread;
    bool prep_started;
    pthread_mutex_t prep_mu;
    pthread_cond_t prep_cv;
    colo_request *prep_head, *prep_tail;
    bool prep_stop;
    /* LoRA adapters (served_adapters.c): the table under adapter_mu;
     * adapter_work: something for the executor to load or free */
    pthread_mutex_t adapter_mu;
    served_adapter *adapters; /* (COLO_SERVED_MAX_ADAPTERS) */
    uint64_t adapter_order;
    atomic_bool adapter_work;
    /* draft models (speculative.draft): exec_mu is held by the executor
     * while the kind runs (a step, sleep, wake, trim) and by a target that
     * drafts with this model meanwhile; draft (under draft_mu, held while
     * this model drafts with it) is this model's own draft model, NULL
     * when none is served; uid: this model's, larger for a later one */
    pthread_mutex_t exec_mu;
    pthread_mutex_t draft_mu;
    colo_served *draft;
    uint64_t uid;
};

/* Executor loops (the executor thread). */
void colo_served_run_continuous(colo_served *m);
void colo_served_run_dynamic(colo_served *m);

/* Between steps (both executors): sleep when asked or idle past
 * keep_alive_ms, wake when asked or when a request waits. False: nothing
 * to run now (it waited, or the model failed). */
bool colo_served_sleep_or_wake(colo_served *m);
/* The executor has no step to run: its co-scheduler member gives up what it
 * holds (colo_cosched_idle), so that an idle model never delays another's
 * step. */
void colo_served_idle(colo_served *m);

/* served_adapters.c. create: the config's adapters, LOADING until
 * colo_served_adapters_loaded (after the kind's load: READY in slots
 * 0..n-1). work: the executor's part, between steps. acquire (submit):
 * r->adapter's entry for r, or an error (COLO_ECANCELED: not listed, or
 * not ready) with a message; release: once r is answered. */
colo_status colo_served_adapters_create(colo_served *m);
void colo_served_adapters_loaded(colo_served *m);
/* The model did not load: the config's adapters (LOADING) are FAILED with msg. */
void colo_served_adapters_failed(colo_served *m, const char *msg);
void colo_served_adapters_work(colo_served *m);
colo_status colo_served_adapter_acquire(colo_served *m, colo_request *r, char *err, size_t errlen);
void colo_served_adapter_release(colo_served *m, colo_request *r);
/* Fault "gone" (runtime/fault.h): removes the adapter name and waits (at
 * most 5 s) until the executor has freed it. */
void colo_served_adapter_vanish(colo_served *m, const char *name);
void colo_served_adapters_free(colo_served *m);
size_t colo_served_adapters_count(colo_served *m);

/* The wish to sleep, which the executor acts on between steps: asked by
 * colo_served_sleep and by the evictor (served_evict.c). Any thread. */
void colo_served_wish_sleep(colo_served *m);

/* Shared by the executors. */
void colo_served_finish(colo_served *m, colo_request *r, colo_status st, const char *msg);
void colo_served_expire_queued(colo_served *m);
void colo_served_drain_queue(colo_served *m, colo_status st, const char *msg);
void colo_served_mark_failed(colo_served *m, const char *msg);
/* A poisoned device fails this model too: true then (the model is marked failed). */
bool colo_served_device_lost(colo_served *m);
void colo_served_refresh_info(colo_served *m);
/* Step metrics and counters after a step that computed tokens. */
void colo_served_count_step(colo_served *m, int batch, int tokens, uint64_t t0_ns, uint64_t t1_ns,
                            uint64_t wait_ns);

#endif
