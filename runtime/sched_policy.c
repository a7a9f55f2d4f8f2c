/* runtime/sched_policy.c: the table of scheduling policies, one row per
 * colo_sched_policy value (runtime/cosched_impl.h), and what the rows
 * share. A new policy is a file of its own and one row here. */
#include "runtime/cosched_impl.h"

#include <stdio.h>
#include <string.h>

static const colo_sched_policy_ops *const policies[] = {
    [COLO_SCHED_TIMESLICE] = &colo_sched_timeslice, [COLO_SCHED_SPATIAL] = &colo_sched_spatial,
    [COLO_SCHED_PRIORITY] = &colo_sched_priority,   [COLO_SCHED_PARTITION] = &colo_sched_partition,
    [COLO_SCHED_FAIR] = &colo_sched_fair,           [COLO_SCHED_DEADLINE] = &colo_sched_deadline,
};
#define N_POLICIES ((int)(sizeof policies / sizeof policies[0]))

const colo_sched_policy_ops *colo_sched_policy_ops_of(colo_sched_policy p)
{
    return (unsigned)p < (unsigned)N_POLICIES ? policies[p] : NULL;
}

colo_status colo_sched_policy_parse(const char *s, colo_sched_policy *out)
{
    for (int i = 0; s && i < N_POLICIES; i++) {
        if (!strcmp(s, policies[i]->name)) {
            *out = (colo_sched_policy)i;
            return COLO_OK;
        }
    }
    return COLO_EINVAL;
}

const char *colo_sched_policy_name(colo_sched_policy p)
{
    const colo_sched_policy_ops *ops = colo_sched_policy_ops_of(p);
    return ops ? ops->name : "unknown";
}

const char *colo_sched_policy_name_at(int i) { return i >= 0 && i < N_POLICIES ? policies[i]->name : NULL; }

const char *colo_sched_key_name(colo_sched_key k)
{
    return k == COLO_SCHED_KEY_SHARE ? "share" : k == COLO_SCHED_KEY_SM_SHARE ? "sm_share" : "";
}

colo_status colo_sched_policy_validate(colo_sched_policy p, const colo_sched_model *m, colo_sched_key *key,
                                       char *err, size_t errlen)
{
    const colo_sched_policy_ops *ops = colo_sched_policy_ops_of(p);
    *key = COLO_SCHED_KEY_NONE;
    if (m->at_run_time && m->sm_share > 0) {
        /* the partitions are planned once, for the models loaded at start */
        *key = COLO_SCHED_KEY_SM_SHARE;
        colo_set_err(err, errlen, "a model loaded at run time cannot take a partition of the device");
        return COLO_EINVAL;
    }
    if (!ops) {
        colo_set_err(err, errlen, "unknown scheduling policy");
        return COLO_EINVAL;
    }
    return ops->validate(m, key, err, errlen);
}

void colo_sched_policy_stream(colo_sched_policy p, const colo_sched_model *m, colo_stream_config *sc)
{
    const colo_sched_policy_ops *ops = colo_sched_policy_ops_of(p);
    if (ops)
        ops->stream(m, sc);
    else
        colo_sched_stream_alike(m, sc);
}

colo_status colo_sched_policy_plan(colo_sched_policy p, colo_sched_plan *plan, char *err, size_t errlen)
{
    const colo_sched_policy_ops *ops = colo_sched_policy_ops_of(p);
    plan->floor_by = NULL;
    if (!ops) {
        colo_set_err(err, errlen, "unknown scheduling policy");
        return COLO_EINVAL;
    }
    return ops->plan ? ops->plan(plan, err, errlen) : COLO_OK;
}

colo_status colo_sched_refuse_keys(const colo_sched_model *m, bool share_ok, bool sm_share_ok, colo_sched_key *key,
                                   char *err, size_t errlen)
{
    if (m->sm_share > 0 && !sm_share_ok) {
        *key = COLO_SCHED_KEY_SM_SHARE;
        colo_set_err(err, errlen, "only used with scheduler.policy: %s", colo_sched_partition.name);
        return COLO_EINVAL;
    }
    if (m->share > 0 && !share_ok) {
        *key = COLO_SCHED_KEY_SHARE;
        colo_set_err(err, errlen, "only used with scheduler.policy: %s", colo_sched_fair.name);
        return COLO_EINVAL;
    }
    return COLO_OK;
}

colo_status colo_sched_validate_plain(const colo_sched_model *m, colo_sched_key *key, char *err, size_t errlen)
{
    return colo_sched_refuse_keys(m, false, false, key, err, errlen);
}

void colo_sched_stream_alike(const colo_sched_model *m, colo_stream_config *sc)
{
    (void)m;
    sc->priority = COLO_PRIO_NORMAL;
    sc->share = 0;
}

void colo_sched_stream_by_priority(const colo_sched_model *m, colo_stream_config *sc)
{
    sc->priority = m->priority;
    sc->share = 0;
}
