/* runtime/sched_fair.c: policy fair, steps run freely on streams weighed
 * by each model's share: (the CPU pool divides worker time in proportion
 * among the models that have work). */
#include "runtime/cosched_impl.h"

static colo_status validate(const colo_sched_model *m, colo_sched_key *key, char *err, size_t errlen)
{
    return colo_sched_refuse_keys(m, true, false, key, err, errlen);
}

static void stream(const colo_sched_model *m, colo_stream_config *sc)
{
    sc->priority = COLO_PRIO_NORMAL;
    sc->share = m->share;
}

const colo_sched_policy_ops colo_sched_fair = {
    .name = "fair", .validate = validate, .stream = stream,
};
