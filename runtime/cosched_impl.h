/* runtime/cosched_impl.h: the co-scheduler's state and the table of
 * scheduling policies, private to runtime/.
 *
 * A policy is one row of colo_sched_policy_ops, in a file of its own
 * (runtime/sched_<name>.c), listed in the table of runtime/sched_policy.c
 * by its colo_sched_policy value. runtime/cosched.c keeps what every policy
 * shares (members, the lock, the statistics) and calls the row's slots;
 * nothing else in colo knows which policy runs. */
#ifndef COLO_RUNTIME_COSCHED_IMPL_H
#define COLO_RUNTIME_COSCHED_IMPL_H

#include <pthread.h>

#include "runtime/cosched.h"

struct colo_cosched_member {
    colo_cosched *cs;
    char name[64];
    colo_priority priority;
    bool best_effort;          /* PRIORITY policy and LOW priority */
    bool inflight;
    bool step_batch;           /* the step in flight is of the batch class */
    uint64_t step_held_ns;     /* of that step, the time held at throttle points for interactive steps */
    int ops_since_high;        /* ops queued by this best-effort step while a higher one ran */
    uint64_t step_t0_ns;       /* when its step began */
    uint64_t ticket;           /* TIMESLICE: ticket taken in step_begin */
    bool waiting;              /* TIMESLICE: in step_begin */
    bool idle;                 /* colo_cosched_idle since its last step began */
    bool cold;                 /* colo_cosched_cold since then: its next interactive step is cold */
    bool step_cold;            /* the step waiting or in flight is cold */
    colo_cosched_member *next_member;
    colo_cosched_member_stats st;
};

typedef struct colo_sched_policy_ops colo_sched_policy_ops;

struct colo_cosched {
    colo_cosched_config cfg;
    const colo_sched_policy_ops *policy; /* the row of cfg.policy */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_members;
    int high_inflight;         /* non-best-effort steps running (PRIORITY) */
    int be_inflight;           /* best-effort steps running (PRIORITY) */
    uint64_t high_since_ns;    /* PRIORITY: when high_inflight last became non-zero */
    /* TIMESLICE: whole steps granted in arrival order (tickets), except that
     * the member whose turn it is keeps the device until its turn ends. */
    uint64_t next_ticket;
    bool slice_busy;
    colo_cosched_member *holder; /* whose turn it is (NULL: nobody's) */
    uint64_t turn_end_ns;        /* holder's turn ends */
    uint64_t hold_until_ns;      /* holder's claim lapses (grace after its last step) */
    colo_cosched_member *members;
    /* PRIORITY floor by step time: each class's step time over its part. */
    bool floor_by_steps;
    int be_waiting;            /* best-effort members in step_begin */
    double be_clock, hi_clock;
    uint64_t be_step_ns, hi_step_ns;
    /* The batch class, under every policy (runtime/sched_batch.c). */
    int inter_inflight;        /* interactive steps running, over all members */
    int batch_inflight;        /* batch steps running */
    int batch_waiting;         /* batch steps held at their start or at a throttle point */
    double batch_clock, inter_clock; /* the batch floor's account: each class's step time over its part */
    uint64_t batch_step_ns, inter_step_ns;
};

/* The batch class's rules (runtime/sched_batch.c), called by
 * runtime/cosched.c around the policy's slots, under cs->mu unless said. */
/* Before the policy's step_begin: waits while m's batch step may not start. */
void colo_sched_batch_begin(colo_cosched *cs, colo_cosched_member *m);
/* After the policy's step_begin: the step is in flight. Only then does an
 * interactive step count against batch steps: one still waiting for the
 * policy (timeslice's turn) may be waiting for the batch step itself. A
 * batch step that an interactive one overtook while the policy held it is
 * held at its first throttle point. */
void colo_sched_batch_started(colo_cosched *cs, colo_cosched_member *m);
/* After the policy's step_end: charges the step to its class. */
void colo_sched_batch_end(colo_cosched *cs, colo_cosched_member *m);
/* Before the policy's throttle, without the lock: holds m's batch step
 * while an interactive step is in flight and the class is not owed. */
void colo_sched_batch_throttle(colo_cosched_member *m);

/* One scheduling policy. Slots marked optional may be NULL; the comment
 * says what NULL means. */
struct colo_sched_policy_ops {
    /* The config's scheduler.policy. */
    const char *name;
    /* Refuses the scheduling keys of model m that the policy does not read
     * (COLO_EINVAL, *key the refused key, err why); the config and the admin
     * routes call it through colo_sched_policy_validate, which has already
     * refused a partition asked for at run time. Required. */
    colo_status (*validate)(const colo_sched_model *m, colo_sched_key *key, char *err, size_t errlen);
    /* What it sets on each model's stream: priority and share. Required. */
    void (*stream)(const colo_sched_model *m, colo_stream_config *sc);
    /* What it arranges on the device before models load (compute units per
     * model, the best-effort floor). Optional: nothing. */
    colo_status (*plan)(colo_sched_plan *plan, char *err, size_t errlen);
    /* A member joins (under no lock, before it is listed). Optional: nothing. */
    void (*join)(colo_cosched *cs, colo_cosched_member *m);
    /* The member has no step to run (colo_cosched_idle), under cs->mu: it
     * gives up what the policy lets it hold between steps. Optional:
     * nothing is held. */
    void (*idle)(colo_cosched *cs, colo_cosched_member *m);
    /* Step hooks, called under cs->mu; step_begin may wait on cs->cv until
     * the member may start. Optional: steps run freely. */
    void (*step_begin)(colo_cosched *cs, colo_cosched_member *m);
    void (*step_end)(colo_cosched *cs, colo_cosched_member *m);
    /* Inside a step, before n_ops more ops; may wait. Called without the
     * lock. Optional: never waits. */
    void (*throttle)(colo_cosched_member *m, int n_ops);
    /* Deadline rule: what the deadline of the member's most urgent request
     * does to its stream. Optional: nothing. */
    void (*deadline)(colo_cosched_member *m, colo_stream *s, uint64_t deadline_ns);
};

/* The rows, one file each. */
extern const colo_sched_policy_ops colo_sched_timeslice;
extern const colo_sched_policy_ops colo_sched_spatial;
extern const colo_sched_policy_ops colo_sched_priority;
extern const colo_sched_policy_ops colo_sched_partition;
extern const colo_sched_policy_ops colo_sched_fair;
extern const colo_sched_policy_ops colo_sched_deadline;

/* The row of p; NULL for a value no row has. */
const colo_sched_policy_ops *colo_sched_policy_ops_of(colo_sched_policy p);

/* For rows' validate: refuses share unless share_ok, sm_share unless
 * sm_share_ok, each with the name of the policy that reads it. */
colo_status colo_sched_refuse_keys(const colo_sched_model *m, bool share_ok, bool sm_share_ok, colo_sched_key *key,
                                   char *err, size_t errlen);
/* For rows' validate: a policy that reads neither share nor sm_share. */
colo_status colo_sched_validate_plain(const colo_sched_model *m, colo_sched_key *key, char *err, size_t errlen);
/* For rows' stream: every model's stream alike (normal priority, no share). */
void colo_sched_stream_alike(const colo_sched_model *m, colo_stream_config *sc);
/* For rows' stream: the model's own priority, no share. */
void colo_sched_stream_by_priority(const colo_sched_model *m, colo_stream_config *sc);

#endif
