#include "models/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void colo_sampler_init(colo_sampler *s, float temperature, float top_p, int top_k, uint64_t seed)
{
    s->temperature = temperature;
    s->top_p = top_p > 0 && top_p <= 1 ? top_p : 1;
    s->top_k = top_k > 0 ? top_k : 0;
    s->state[0] = splitmix(&seed);
    s->state[1] = splitmix(&seed);
    s->probs = NULL;
    s->idx = NULL;
    s->cap = 0;
}

void colo_sampler_free(colo_sampler *s)
{
    free(s->probs);
    free(s->idx);
    s->probs = NULL;
    s->idx = NULL;
    s->cap = 0;
}

static double uniform(colo_sampler *s)
{
    uint64_t a = s->state[0], b = s->state[1];
    s->state[0] = b;
    a ^= a << 23;
    s->state[1] = a ^ b ^ (a >> 17) ^ (b >> 26);
    return (double)((s->state[1] + b) >> 11) * (1.0 / 9007199254740992.0);
}

int colo_argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* a ranks before b: higher probability, then lower id (a total order, so
 * the draw does not depend on how candidates were arranged). */
static inline bool before(const float *p, int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); }

static void sift_down(int *h, int n, int i, const float *p)
{
    for (;;) {
        int l = 2 * i + 1, best = i;
        if (l < n && before(p, h[l], h[best]))
            best = l;
        if (l + 1 < n && before(p, h[l + 1], h[best]))
            best = l + 1;
        if (best == i)
            return;
        int t = h[i];
        h[i] = h[best];
        h[best] = t;
        i = best;
    }
}

int colo_sampler_sample(colo_sampler *s, const float *logits, int n)
{
    if (s->temperature <= 0 || s->top_k == 1)
        return colo_argmax(logits, n);
    if (s->cap < n) {
        free(s->probs);
        free(s->idx);
        s->probs = malloc((size_t)n * sizeof *s->probs);
        s->idx = malloc((size_t)n * sizeof *s->idx);
        if (!s->probs || !s->idx) {
            s->cap = 0;
            return -1;
        }
        s->cap = n;
    }
    float mx = logits[colo_argmax(logits, n)];
    double total = 0;
    int m = 0;
    /* Candidates: tokens whose probability is not negligible (< 1e-9 of the top). */
    float cut = mx - 20.7f * s->temperature;
    for (int i = 0; i < n; i++) {
        if (logits[i] < cut)
            continue;
        s->probs[i] = expf((logits[i] - mx) / s->temperature);
        total += s->probs[i];
        s->idx[m++] = i;
    }
    if (!s->top_k && s->top_p >= 1) {
        /* The whole distribution: no ranking needed. */
        double r = uniform(s) * total, acc = 0;
        for (int i = 0; i < m; i++) {
            acc += s->probs[s->idx[i]];
            if (r < acc)
                return s->idx[i];
        }
        return s->idx[m - 1];
    }
    /* Rank only as many candidates as top-k / top-p need: a heap over the
     * candidates, popped best first; popped ids collect at the end of idx
     * (idx[m - 1] is the best). */
    int *h = s->idx;
    const float *p = s->probs;
    for (int i = m / 2 - 1; i >= 0; i--)
        sift_down(h, m, i, p);
    int k = s->top_k && s->top_k < m ? s->top_k : m;
    int heap_n = m, taken = 0;
    double kept = 0;
#define POP()                                                                                                      \
    do {                                                                                                           \
        int top = h[0];                                                                                            \
        h[0] = h[--heap_n];                                                                                        \
        h[heap_n] = top;                                                                                           \
        sift_down(h, heap_n, 0, p);                                                                                \
        kept += p[top];                                                                                            \
        taken++;                                                                                                   \
    } while (0)
    double mass = total;
    if (s->top_k) {
        while (taken < k)
            POP();
        mass = kept; /* top-p applies within the top k */
    }
    if (s->top_p < 1) {
        /* The smallest best-first prefix holding top_p of the mass. */
        double acc = 0;
        int keep = 0;
        for (;;) {
            if (keep == taken) {
                if (taken == k)
                    break;
                POP();
            }
            acc += p[h[m - 1 - keep]];
            keep++;
            if (acc >= s->top_p * mass)
                break;
        }
        taken = keep;
        kept = acc;
    }
#undef POP
    double r = uniform(s) * kept, acc = 0;
    for (int i = 0; i < taken; i++) {
        acc += p[h[m - 1 - i]];
        if (r < acc)
            return h[m - 1 - i];
    }
    return h[m - taken];
}
