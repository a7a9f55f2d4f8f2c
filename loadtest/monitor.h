/* loadtest/monitor.h: what the server did with its models while a phase ran.
 *
 * A monitor polls GET <prefix>/v1/models on the load generator's own event
 * loop (one keep-alive connection, one request at a time, every
 * interval_s) and keeps, per model, whether it is resident now (colo's
 * "state": "ready"; "loaded" in llama.cpp's router, whose "status" may be
 * a string or {"value": ...}; every other state is not resident), the
 * changes of residency it saw, and colo's lifecycle counters (wakes and
 * evictions) at the first and last poll. With a server PID it also samples
 * /proc/PID/status (the largest VmRSS seen, summed over PID and its child
 * processes, and PID's last VmHWM).
 *
 * Residency is known as of the last poll, so a request sent within
 * interval_s of a change may be classed by the state before it. A model
 * the server does not list is of unknown residency (-1).
 *
 * Ownership: lt_monitor_new copies what it needs; lt_monitor_free accepts
 * NULL. Not thread-safe: the engine's thread only. */
#ifndef COLO_LOADTEST_MONITOR_H
#define COLO_LOADTEST_MONITOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "loadtest/status.h"
#include "loadtest/workload.h"

#define LT_MONITOR_MAX_MODELS 32

/* A change of residency: from at_s (seconds from the phase's start) on,
 * the model was resident or not. */
typedef struct lt_residency {
    double at_s;
    bool resident;
} lt_residency;

typedef struct lt_monitor_model {
    char name[128];
    int resident;             /* now: 1, 0, -1 unknown */
    lt_residency *changes;    /* every change seen, the first poll's state included */
    size_t n_changes, cap_changes;
    uint64_t loads_seen;      /* not resident -> resident changes seen */
    uint64_t unloads_seen;    /* resident -> not resident changes seen */
    bool has_counters;        /* the server reported lifecycle.wakes/evictions */
    uint64_t wakes_first, wakes_last, evictions_first, evictions_last;
} lt_monitor_model;

typedef struct lt_monitor {
    lt_target target;
    char *request;            /* the GET, ready to write */
    size_t request_len;
    char api_key[512];        /* "" when none */
    double interval_s;
    int pid;                  /* > 0: sample /proc/pid/status */
    lt_monitor_model models[LT_MONITOR_MAX_MODELS];
    size_t n_models;
    uint64_t polls, poll_errors;
    uint64_t rss_max_bytes;   /* largest VmRSS sampled, summed over pid and its descendants; 0 without samples */
    uint64_t hwm_bytes;       /* pid's VmHWM at the last sample (its own peak since it started, children apart) */
    bool has_rss;

    /* event-loop state (lt_monitor_attach .. lt_monitor_detach) */
    struct event_base *base;
    struct event *timer;
    struct bufferevent *bev;
    void *resp;               /* lt_http_response */
    bool busy, connected;
    uint64_t t0_ns;
} lt_monitor;

/* A monitor of models[0..n) at t (api_key may be NULL); pid > 0 to sample
 * the server's memory. NULL with a message on bad arguments or no memory. */
lt_monitor *lt_monitor_new(const lt_target *t, const char *api_key, const char *const *models, size_t n,
                           double interval_s, int pid, char *err, size_t errlen);
/* One blocking poll (at time at_s, seconds from the phase's start), before
 * or after a phase: states, counters and memory. LT_EIO when the server did
 * not answer, LT_EFORMAT when the answer was not a model list. */
lt_status lt_monitor_poll_now(lt_monitor *m, double at_s, double timeout_s, char *err, size_t errlen);
/* Starts polling on base; t0_ns is the phase's start (lt_now_ns). */
lt_status lt_monitor_attach(lt_monitor *m, struct event_base *base, uint64_t t0_ns);
/* Stops polling and releases the loop's objects (before base is freed). */
void lt_monitor_detach(lt_monitor *m);
/* 1 resident, 0 not, -1 unknown (never polled, or not listed). */
int lt_monitor_resident(const lt_monitor *m, const char *model);
const lt_monitor_model *lt_monitor_find(const lt_monitor *m, const char *model);
/* Applies one GET /v1/models body seen at at_s. LT_EFORMAT when it is not a model list. */
lt_status lt_monitor_apply(lt_monitor *m, const char *body, double at_s);
/* Samples m->pid: its VmHWM, and VmRSS summed over it and its descendants
 * (a server that runs its models in child processes, as llama.cpp's router
 * does, holds their memory there). LT_EIO when the process is gone. */
lt_status lt_monitor_sample_memory(lt_monitor *m);
/* VmRSS in bytes summed over pid and its descendants (0 when pid is gone). */
uint64_t lt_proc_tree_rss_bytes(int pid);
void lt_monitor_free(lt_monitor *m);

#endif
