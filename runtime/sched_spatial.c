/* runtime/sched_spatial.c: policy spatial, every member runs whenever it
 * likes, on streams of equal priority. */
#include "runtime/cosched_impl.h"

const colo_sched_policy_ops colo_sched_spatial = {
    .name = "spatial", .validate = colo_sched_validate_plain, .stream = colo_sched_stream_alike,
};
