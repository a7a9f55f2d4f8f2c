/* runtime/cosched.h: the co-scheduler that decides how models share a device.
 *
 * Every model's executor joins as a member and brackets each step (one
 * forward pass of a batch) with colo_cosched_step_begin/_end; best-effort
 * members also call colo_cosched_throttle between groups of ops inside a step.
 * The executors consult the scheduler; the scheduler never calls them.
 *
 * Policies (docs/SCHEDULING.md has the trade-offs):
 *  - TIMESLICE: one member's step at a time, granted round-robin (FIFO of
 *    waiters). A member's turn lasts quantum_us: while it lasts, the member
 *    keeps the device for its next steps (others wait at most until its
 *    turn ends, or TURN_GRACE_US after its last step when it has no next
 *    one, or not at all once it says it is idle: colo_cosched_idle). A
 *    cold step (colo_cosched_cold: the first step of a model woken for a
 *    request) takes the device at the next step boundary, before the
 *    holder's next steps and before waiters that are not cold. What
 *    time-slicing separate servers gives: the baseline.
 *  - SPATIAL: every member runs whenever it likes, on equal-priority streams.
 *  - PRIORITY: streams get each member's priority; a LOW (best-effort)
 *    member may not start a step while a HIGH or NORMAL step is in flight
 *    unless fewer than best_effort_max_steps best-effort steps are running,
 *    and inside a running step it is held at each throttle point while a
 *    higher-priority step is in flight once it has queued best_effort_max_ops
 *    ops since that step began, or (best_effort_max_us > 0) once that step
 *    has been in flight for best_effort_max_us. Stream priority alone never preempts running
 *    work; these caps bound the delay a best-effort member can cause.
 *    With best_effort_min_share > 0 (a floor), a best-effort member is let
 *    through (it starts steps and passes throttle points beside higher
 *    work) while its class is below the floor: on a device that accounts
 *    its own time (the CPU pool: worker time per chunk,
 *    colo_device_best_effort_owed), by that account; elsewhere (CUDA) by
 *    step time, each step's begin-to-end time charged to its class, so that
 *    best-effort steps hold at least min_share of the step time in flight.
 *  - PARTITION: disjoint compute-unit sets (SMs or cores) per member, chosen
 *    by colo_partition_plan; steps run freely, each in its own set.
 *  - FAIR: steps run freely, as under SPATIAL, on streams whose share
 *    (colo_stream_config.share, from each model's share:) weighs them: the
 *    CPU pool divides worker time in proportion to the shares among models
 *    that have work, and a model with less work than its share gets all it
 *    needs.
 *  - DEADLINE: steps run freely, as under FAIR; each executor names the
 *    deadline of its most urgent request before a step
 *    (colo_cosched_set_deadline), which goes to its stream (the CPU pool
 *    hands chunks out earliest deadline first, weighted by priority), and
 *    admission (batching/admission.h) refuses what cannot meet its SLA.
 *
 * Under every policy, a member that has no step to run says so
 * (colo_cosched_idle) and holds nothing from then on that could delay
 * another member's step: no turn, no deadline on its stream. A member woken
 * for a request says so (colo_cosched_cold) before the wake: the wake's own
 * work on its stream and its first step carry that request's deadline
 * (DEADLINE), and its first step is not kept behind another member's turn
 * (TIMESLICE).
 *
 * Under every policy, each step has a class (colo_step_class): a step that
 * carries only lines of OpenAI batches (COLO_STEP_BATCH) is below every
 * interactive step of any member, whatever the members' priorities; a step
 * that carries any interactive sequence, alone or beside lines, is
 * COLO_STEP_INTERACTIVE. Before the policy's own rules, a batch step does
 * not start while an interactive step is in flight, and inside a running
 * batch step each throttle point holds it while one is; except while the
 * batch class is below its floor, batch_min_share of the step time of both
 * classes (each step's begin-to-end time charged to its class), so that
 * batch work progresses under interactive load that never pauses.
 *
 * Thread safety: every function may be called from any thread; a member is
 * used by one executor thread. */
#ifndef COLO_RUNTIME_COSCHED_H
#define COLO_RUNTIME_COSCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/backend.h"

typedef enum colo_sched_policy {
    COLO_SCHED_TIMESLICE = 0,
    COLO_SCHED_SPATIAL = 1,
    COLO_SCHED_PRIORITY = 2,
    COLO_SCHED_PARTITION = 3,
    COLO_SCHED_FAIR = 4,
    COLO_SCHED_DEADLINE = 5,
} colo_sched_policy;

typedef struct colo_cosched_config {
    colo_sched_policy policy;
    int best_effort_max_steps; /* PRIORITY: best-effort steps allowed to start while a higher step runs (default 0) */
    int best_effort_max_ops;   /* PRIORITY: ops a best-effort step may queue while a higher step runs (default 8) */
    int best_effort_max_us;    /* PRIORITY: and for at most this long after a higher step began; 0 = no time cap */
    int quantum_us;            /* TIMESLICE: a member's turn; 0 = one step per turn */
    double best_effort_min_share; /* PRIORITY: the best-effort floor, [0, 1); 0 = none */
    double batch_min_share;       /* every policy: the batch class's floor of step time, [0, 1); 0 = none */
    /* PRIORITY with a floor: the device whose own account decides
     * (colo_device_best_effort_owed; the caller sets its floor); NULL or a
     * device without one: step time in flight. Not owned. */
    colo_device *device;
} colo_cosched_config;

/* TIMESLICE: how long the member whose turn it is may take between two of
 * its steps before waiters may take the device. */
#define COLO_COSCHED_TURN_GRACE_US 1000

typedef struct colo_cosched colo_cosched;
typedef struct colo_cosched_member colo_cosched_member;

/* A step's class: what it carries (see the rules above). */
typedef enum colo_step_class {
    COLO_STEP_INTERACTIVE = 0, /* any request that is not a batch line, alone or beside lines */
    COLO_STEP_BATCH = 1,       /* lines of OpenAI batches only */
} colo_step_class;

typedef struct colo_cosched_member_stats {
    uint64_t steps;          /* steps begun */
    uint64_t wait_ns;        /* total time spent waiting in step_begin */
    uint64_t throttle_ns;    /* total time held at throttle points */
    uint64_t throttled;      /* throttle calls that had to wait */
    uint64_t inflight;       /* 1 while a step is running */
    uint64_t batch_steps;    /* steps begun at COLO_STEP_BATCH, among steps */
    uint64_t batch_held;     /* of them, those held at their start for an interactive step
                              * (held at a throttle point: counted in throttled) */
    uint64_t waiting;        /* 1 while the member waits in step_begin */
    uint64_t idle;           /* 1 from colo_cosched_idle until its next step begins */
    uint64_t turn;           /* TIMESLICE: 1 while the turn is the member's */
    uint64_t idles;          /* colo_cosched_idle calls that found it busy (it gave up what it held) */
    uint64_t cold_steps;     /* steps begun cold (colo_cosched_cold), among steps */
} colo_cosched_member_stats;

/* ---- the policies (rows of runtime/sched_policy.c; docs/ARCHITECTURE.md,
 * "Adding a scheduling policy") ---------------------------------------------- */

/* Parses a policy's name ("timeslice", "spatial", "priority", "partition",
 * "fair", "deadline": the rows' names). */
colo_status colo_sched_policy_parse(const char *s, colo_sched_policy *out);
/* p's name; "unknown" for a value no row has. */
const char *colo_sched_policy_name(colo_sched_policy p);
/* The name of the i-th policy of the table (i from 0), NULL past the last:
 * for lists of the names. */
const char *colo_sched_policy_name_at(int i);

/* What a policy reads of one model's configuration. */
typedef struct colo_sched_model {
    colo_priority priority;
    double share;      /* fair: its weight; 0 = none given */
    double sm_share;   /* partition: its fraction of the compute units; 0 = none given */
    bool at_run_time;  /* loaded through the admin routes, after start */
} colo_sched_model;

/* The key a policy refused. */
typedef enum colo_sched_key { COLO_SCHED_KEY_NONE = 0, COLO_SCHED_KEY_SHARE, COLO_SCHED_KEY_SM_SHARE } colo_sched_key;
/* "share", "sm_share" (the config's spelling); "" for none. */
const char *colo_sched_key_name(colo_sched_key k);

/* COLO_OK when policy p takes model m's keys; else COLO_EINVAL with the
 * refused key in *key and why in err (a model loaded at run time never
 * takes a partition, whatever the policy). The config and the admin routes
 * both ask this. */
colo_status colo_sched_policy_validate(colo_sched_policy p, const colo_sched_model *m, colo_sched_key *key,
                                       char *err, size_t errlen);
/* What policy p sets on model m's stream: its priority and share (the
 * compute units are the plan's, below). Other fields of sc are left alone. */
void colo_sched_policy_stream(colo_sched_policy p, const colo_sched_model *m, colo_stream_config *sc);

/* What a policy arranges on the device before the models load. */
typedef struct colo_sched_plan {
    colo_device *dev;                /* in: the device */
    int n_models;                    /* in */
    const colo_sched_model *models;  /* in: n_models of them */
    double best_effort_min_share;    /* in: scheduler.best_effort_min_share */
    int *unit_first, *unit_count;    /* out (n_models each): each model's compute units; left alone
                                        where the policy does not partition */
    colo_cosched_config *cc;         /* out: the best-effort floor and the device that keeps it */
    const char *floor_by;            /* out: who accounts the floor (for the log); NULL: no floor */
} colo_sched_plan;
/* Fills plan's outputs as policy p asks; COLO_EINVAL or COLO_EUNSUPPORTED
 * with err (a message for the config's reader) when it cannot. */
colo_status colo_sched_policy_plan(colo_sched_policy p, colo_sched_plan *plan, char *err, size_t errlen);

colo_cosched *colo_cosched_create(const colo_cosched_config *cfg, char *err, size_t errlen);
/* Every member must have left. Accepts NULL. */
void colo_cosched_destroy(colo_cosched *cs);
colo_sched_policy colo_cosched_policy(const colo_cosched *cs);

/* name is copied. Under PRIORITY, priority LOW marks a best-effort member. */
colo_cosched_member *colo_cosched_join(colo_cosched *cs, const char *name, colo_priority priority);
void colo_cosched_leave(colo_cosched_member *m); /* accepts NULL; no step may be in flight */

/* Blocks until the policy lets m start a step. Returns the microseconds it
 * waited. Pair with colo_cosched_step_end on the same thread. The step is
 * of the interactive class. */
uint64_t colo_cosched_step_begin(colo_cosched_member *m);
/* The same for a step of class cls: a COLO_STEP_BATCH step first waits
 * while any member's interactive step is in flight, unless the batch class
 * is below its floor (the rules above). */
uint64_t colo_cosched_step_begin_as(colo_cosched_member *m, colo_step_class cls);
void colo_cosched_step_end(colo_cosched_member *m);
/* Called by an executor before queuing n_ops more ops inside a step. Only
 * steps of the batch class (while another member's interactive step is in
 * flight) and best-effort members under PRIORITY ever wait here. */
void colo_cosched_throttle(colo_cosched_member *m, int n_ops);

/* The member has no step to run (nothing queued or running, or every
 * running sequence waits for memory): it gives up at once whatever it holds
 * that could delay another member's step. Under TIMESLICE its turn ends
 * (a waiter takes the device without waiting for the turn's end or the
 * grace); under DEADLINE its stream's deadline is cleared (s: the member's
 * stream; NULL for none), so that work it queues while idle (giving memory
 * back, waking) does not go before others' deadlines on a stale one. Cheap
 * when it is idle already. Accepts a NULL m. The member's thread, between
 * steps. */
void colo_cosched_idle(colo_cosched_member *m, colo_stream *s);
/* The member's model is woken for a request whose deadline (monotonic ns, 0
 * = none) is deadline_ns: called before the wake, so that the wake's work
 * on stream s goes by that deadline under DEADLINE (as the first step
 * will), and the member's next interactive step is cold: under TIMESLICE it
 * takes the device at the next step boundary, before the holder's next
 * steps and waiters that are not cold (older cold ones first). Cleared by
 * that step or by colo_cosched_idle. Accepts a NULL m. The member's thread,
 * between steps. */
void colo_cosched_cold(colo_cosched_member *m, colo_stream *s, uint64_t deadline_ns);

/* DEADLINE (ignored otherwise): the deadline (monotonic ns, 0 = none) of
 * the member's most urgent request for its next steps, weighted by the
 * member's priority; passed to stream s (colo_stream_set_deadline). The
 * member's thread. */
void colo_cosched_set_deadline(colo_cosched_member *m, colo_stream *s, uint64_t deadline_ns);
/* Step time charged to best-effort members and to the others under the
 * floor's step-time account (ns); 0 and 0 when that account is unused. */
void colo_cosched_floor_times(colo_cosched *cs, uint64_t *be_ns, uint64_t *hi_ns);
/* Step time charged to the batch class and to the interactive class (ns),
 * over all members. */
void colo_cosched_batch_times(colo_cosched *cs, uint64_t *batch_ns, uint64_t *interactive_ns);
/* The batch class's floor (colo_cosched_config.batch_min_share) of m's
 * co-scheduler; 0 for NULL. An executor gives its lines the same share of
 * its own steps (batching/continuous.h). */
double colo_cosched_batch_min_share(const colo_cosched_member *m);

void colo_cosched_member_get_stats(colo_cosched_member *m, colo_cosched_member_stats *st);
const char *colo_cosched_member_name(const colo_cosched_member *m);
colo_priority colo_cosched_member_priority(const colo_cosched_member *m);

/* Splits total_units compute units among n members. share[i] in (0, 1] is
 * member i's fraction; 0 means "an equal part of what the others leave".
 * Every part is a multiple of granularity (8 SMs on H100, 1 core on CPU)
 * and at least one granule; parts are disjoint and contiguous: member i gets
 * [first[i], first[i] + count[i]). COLO_EINVAL (with err) when the shares sum
 * past 1 or the units cannot give every member a granule. */
colo_status colo_partition_plan(int total_units, int granularity, int n, const double *share, int *first, int *count,
                                char *err, size_t errlen);

#endif
