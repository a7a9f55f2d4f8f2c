#include "models/sampler.h"

#include <math.h>
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

static int by_prob_desc(const void *a, const void *b, void *ctx)
{
    const float *p = ctx;
    float x = p[*(const int *)a], y = p[*(const int *)b];
    return x < y ? 1 : x > y ? -1 : (*(const int *)a - *(const int *)b);
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
    double sum = 0;
    int m = 0;
    /* Candidates: tokens whose probability is not negligible (< 1e-9 of the top). */
    float cut = mx - 20.7f * s->temperature;
    for (int i = 0; i < n; i++) {
        if (logits[i] < cut)
            continue;
        s->probs[i] = expf((logits[i] - mx) / s->temperature);
        s->idx[m++] = i;
    }
    qsort_r(s->idx, (size_t)m, sizeof *s->idx, by_prob_desc, s->probs);
    if (s->top_k && m > s->top_k)
        m = s->top_k;
    for (int i = 0; i < m; i++)
        sum += s->probs[s->idx[i]];
    if (s->top_p < 1) {
        double acc = 0;
        for (int i = 0; i < m; i++) {
            acc += s->probs[s->idx[i]] / sum;
            if (acc >= s->top_p) {
                m = i + 1;
                break;
            }
        }
        sum = 0;
        for (int i = 0; i < m; i++)
            sum += s->probs[s->idx[i]];
    }
    double r = uniform(s) * sum, acc = 0;
    for (int i = 0; i < m; i++) {
        acc += s->probs[s->idx[i]];
        if (r < acc)
            return s->idx[i];
    }
    return s->idx[m - 1];
}
