/* runtime/sched_deadline.c: policy deadline, steps run freely; each
 * member's most urgent deadline, weighted by its priority, goes to its
 * stream (the CPU pool hands chunks out earliest deadline first), and
 * admission (batching/admission.h) refuses what cannot meet its SLA. */
#include "runtime/cosched_impl.h"

static void deadline(colo_cosched_member *m, colo_stream *s, uint64_t deadline_ns)
{
    static const double weight[] = {1, 2, 4}; /* low, normal, high */
    colo_stream_set_deadline(s, deadline_ns, (unsigned)m->priority < 3 ? weight[m->priority] : 1);
}

const colo_sched_policy_ops colo_sched_deadline = {
    .name = "deadline", .validate = colo_sched_validate_plain, .stream = colo_sched_stream_alike,
    .deadline = deadline,
};
