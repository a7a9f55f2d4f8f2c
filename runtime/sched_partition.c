/* runtime/sched_partition.c: policy partition, disjoint compute-unit sets
 * (SMs or cores) per model, chosen once at start by colo_partition_plan
 * from each model's sm_share:; steps run freely, each in its own set, on
 * streams of the model's priority. */
#include "runtime/cosched_impl.h"

#include <math.h>
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

colo_status colo_partition_plan(int total_units, int granularity, int n, const double *share, int *first, int *count,
                                char *err, size_t errlen)
{
    if (n <= 0 || total_units <= 0 || granularity <= 0) {
        colo_set_err(err, errlen, "partition: need members, units and a granularity");
        return COLO_EINVAL;
    }
    int granules = total_units / granularity;
    if (granules < n) {
        colo_set_err(err, errlen, "partition: %d units in granules of %d cannot give %d members one each",
                     total_units, granularity, n);
        return COLO_EINVAL;
    }
    double given = 0;
    int n_rest = 0;
    for (int i = 0; i < n; i++) {
        if (share[i] < 0 || share[i] > 1 || isnan(share[i])) {
            colo_set_err(err, errlen, "partition: share %g of member %d is outside (0, 1]", share[i], i);
            return COLO_EINVAL;
        }
        if (share[i] > 0)
            given += share[i];
        else
            n_rest++;
    }
    if (given > 1.0 + 1e-9) {
        colo_set_err(err, errlen, "partition: shares sum to %.3f, past 1", given);
        return COLO_EINVAL;
    }
    /* Granules per member: floor of the exact share, at least one; what
     * rounding leaves goes to the members with the largest remainders. */
    double rest_share = n_rest ? (1.0 - given) / n_rest : 0;
    int used = 0;
    double rem[n];
    for (int i = 0; i < n; i++) {
        double exact = (share[i] > 0 ? share[i] : rest_share) * granules;
        count[i] = (int)floor(exact + 1e-9);
        if (count[i] < 1)
            count[i] = 1;
        rem[i] = exact - count[i];
        used += count[i];
    }
    while (used > granules) { /* minimums pushed past the total: take from the largest */
        int big = 0;
        for (int i = 1; i < n; i++)
            if (count[i] > count[big])
                big = i;
        if (count[big] <= 1)
            break;
        count[big]--;
        used--;
    }
    /* Hand out leftovers only to members whose share asks for more. */
    while (used < granules) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (rem[i] > 1e-9 && (best < 0 || rem[i] > rem[best]))
                best = i;
        if (best < 0)
            break;
        count[best]++;
        rem[best] -= 1.0;
        used++;
    }
    int at = 0;
    for (int i = 0; i < n; i++) {
        first[i] = at * granularity;
        count[i] *= granularity;
        at += count[i] / granularity;
    }
    return COLO_OK;
}

const colo_sched_policy_ops colo_sched_partition = {
    .name = "partition", .validate = validate, .stream = colo_sched_stream_by_priority, .plan = plan,
};
