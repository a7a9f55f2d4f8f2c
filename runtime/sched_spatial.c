/* runtime/sched_spatial.c: policy spatial, every member runs whenever it
 * likes, on streams of equal priority. */
#include "runtime/cosched_impl.h"

static colo_status validate(const colo_sched_model *m, colo_sched_key *key, char *err, size_t errlen)
{
    return colo_sched_refuse_keys(m, false, false, key, err, errlen);
}

const colo_sched_policy_ops colo_sched_spatial = {
    .name = "spatial",
    .validate = validate,
    .stream = colo_sched_stream_alike,
};
