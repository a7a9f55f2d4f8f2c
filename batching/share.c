#include "batching/share.h"

void colo_share_step_begin(colo_step_share *s, colo_request *const *live, int n, uint64_t t0_ns,
                           bool (*started)(void *inst, const colo_request *r), void *inst)
{
    s->t0_ns = t0_ns;
    s->total_w = 0;
    for (int i = 0; i < n; i++) {
        colo_request *r = live[i];
        r->share_w = started && started(inst, r) ? 1.0 : (double)(r->tok.n > 0 ? r->tok.n : 1);
        r->share = s;
        s->total_w += r->share_w;
    }
}

static void charge(colo_request *r, uint64_t now_ns)
{
    colo_step_share *s = r->share;
    if (s && s->total_w > 0 && now_ns > s->t0_ns)
        r->out.device_s += (double)(now_ns - s->t0_ns) / 1e9 * r->share_w / s->total_w;
    r->share = NULL;
}

void colo_share_step_end(colo_step_share *s, colo_request *const *live, int n, uint64_t t1_ns)
{
    for (int i = 0; i < n; i++)
        if (live[i]->share == s)
            charge(live[i], t1_ns);
}

void colo_share_close(colo_request *r, uint64_t now_ns) { charge(r, now_ns); }

void colo_share_batch(colo_request *const *rs, int n, uint64_t dt_ns)
{
    double total = 0;
    for (int i = 0; i < n; i++)
        total += rs[i]->tok.n > 0 ? rs[i]->tok.n : 1;
    for (int i = 0; i < n; i++)
        rs[i]->out.device_s += (double)dt_ns / 1e9 * (rs[i]->tok.n > 0 ? rs[i]->tok.n : 1) / total;
}
