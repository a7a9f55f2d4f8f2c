/* runtime/sched_partition.c: policy partition, disjoint compute-unit sets
 * (SMs or cores) per model, chosen once at start by colo_partition_plan
 * from each model's sm_share:; steps run freely, each in its own set, on
 * streams of the model's priority. */
#include "runtime/cosched_impl.h"

#include <stdio.h>

static colo_status validate(const colo_sched_model *m, colo_sched_key *key, char *err, size_t errlen)
{
    return colo_sched_refuse_keys(m, false, true, key, err, errlen);
}

static colo_status plan(colo_sched_plan *pl, char *err, size_t errlen)
{
    colo_device_info info;
    colo_status st = colo_device_get_info(pl->dev, &info);
    if (st != COLO_OK) {
        colo_set_err(err, errlen, "scheduler: %s", colo_status_str(st));
        return st;
    }
    if (!info.can_partition) {
        colo_set_err(err, errlen,
                     "scheduler.policy partition is not supported on %s (CUDA needs green contexts, driver 12.4 "
                     "or newer)",
                     info.name);
        return COLO_EUNSUPPORTED;
    }
    char why[512];
    double share[pl->n_models > 0 ? pl->n_models : 1];
    for (int i = 0; i < pl->n_models; i++)
        share[i] = pl->models[i].sm_share;
    /* an H100's partitions are multiples of 8 SMs */
    st = colo_partition_plan(info.compute_units, info.kind == COLO_BACKEND_CUDA ? 8 : 1, pl->n_models, share,
                             pl->unit_first, pl->unit_count, why, sizeof why);
    if (st != COLO_OK)
        colo_set_err(err, errlen, "scheduler: %s", why);
    return st;
}

const colo_sched_policy_ops colo_sched_partition = {
    .name = "partition",
    .validate = validate,
    .stream = colo_sched_stream_by_priority,
    .plan = plan,
};
