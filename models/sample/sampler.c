#include "models/sample/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The scratch buffers, none yet (or no longer: freed). */
static void forget_buffers(colo_sampler *s)
{
    s->probs = NULL;
    s->idx = NULL;
    s->cap = 0;
    s->work = NULL;
    s->seen = NULL;
    s->work_cap = 0;
}

void colo_sampler_init(colo_sampler *s, float temperature, float top_p, int top_k, uint64_t seed)
{
    s->temperature = temperature;
    s->top_p = top_p > 0 && top_p <= 1 ? top_p : 1;
    s->top_k = top_k > 0 ? top_k : 0;
    s->min_p = 0;
    s->state[0] = splitmix(&seed);
    s->state[1] = splitmix(&seed);
    forget_buffers(s);
}

void colo_sampler_free(colo_sampler *s)
{
    free(s->probs);
    free(s->idx);
    free(s->work);
    free(s->seen);
    forget_buffers(s);
}

static double uniform(colo_sampler *s)
{
    uint64_t a = s->state[0], b = s->state[1];
    s->state[0] = b;
    a ^= a << 23;
    s->state[1] = a ^ b ^ (a >> 17) ^ (b >> 26);
    return (double)((s->state[1] + b) >> 11) * (1.0 / 9007199254740992.0);
}

/* The first index of the largest of x (x[i] > x[best] moves best on; a NaN
 * never does): the reference the fast path below must agree with. */
static int argmax_scalar(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* x's bits as an integer that orders as the float does (-0 just below +0,
 * NaNs beyond the infinities): a maximum the compiler vectorizes, which a
 * float comparison it must not reorder is not. */
static inline int32_t ordered(const float *x)
{
    int32_t v;
    memcpy(&v, x, sizeof v);
    return v ^ (int32_t)((uint32_t)(v >> 31) >> 1);
}

/* A decode step of a 262k vocabulary scans its logits here: the largest by
 * ordered integers, then the first index equal to it as a float (so -0 and
 * +0 tie, as argmax_scalar's >). A NaN at the top or in x[0] takes the
 * scalar loop, whose answer it then is. */
int colo_argmax(const float *x, int n)
{
    int32_t top = INT32_MIN;
    for (int i = 0; i < n; i++) {
        int32_t v = ordered(x + i);
        top = v > top ? v : top;
    }
    int32_t bits = top ^ (int32_t)((uint32_t)(top >> 31) >> 1);
    float mx;
    memcpy(&mx, &bits, sizeof mx);
    if (isnan(mx) || isnan(x[0]))
        return argmax_scalar(x, n);
    for (int i = 0; i < n; i++)
        if (x[i] == mx)
            return i;
    return 0;
}

bool colo_all_finite(const float *x, int n)
{
    uint32_t bad = 0;
    for (int i = 0; i < n; i++) {
        uint32_t v;
        memcpy(&v, x + i, sizeof v);
        bad |= (v & 0x7f800000u) == 0x7f800000u; /* exponent all ones: an infinity or a NaN */
    }
    return !bad;
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
    /* Candidates: tokens whose probability is not negligible (< 1e-9 of the
     * top), nor under min-p. */
    float cut = mx - 20.7f * s->temperature;
    if (s->min_p > 0) {
        float mp = mx + s->temperature * logf(s->min_p);
        cut = mp > cut ? mp : cut;
    }
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

/* ---- shaping ------------------------------------------------------------------------ */

bool colo_sampler_shape_active(const colo_sampler_shape *sh)
{
    return sh && (sh->presence != 0 || sh->frequency != 0 || (sh->repetition != 0 && sh->repetition != 1) ||
                  sh->min_p > 0 || sh->n_bias > 0);
}

int colo_sampler_sample_shaped(colo_sampler *s, const float *logits, int n, const colo_sampler_shape *sh,
                               const int32_t *hist, int n_hist, int n_prompt)
{
    if (!colo_sampler_shape_active(sh))
        return colo_sampler_sample(s, logits, n);
    if (s->work_cap < n) {
        free(s->work);
        free(s->seen);
        s->work = malloc((size_t)n * sizeof *s->work);
        s->seen = calloc((size_t)n, 1);
        if (!s->work || !s->seen) {
            s->work_cap = 0;
            return -1;
        }
        s->work_cap = n;
    }
    float *w = s->work;
    memcpy(w, logits, (size_t)n * sizeof *w);
    if (sh->repetition != 0 && sh->repetition != 1) {
        int last = sh->repeat_last_n > 0 ? sh->repeat_last_n : 64;
        for (int i = n_hist - last > 0 ? n_hist - last : 0; i < n_hist; i++) {
            int t = hist[i];
            if (t < 0 || t >= n || (s->seen[t] & 1))
                continue;
            s->seen[t] |= 1;
            w[t] = w[t] > 0 ? w[t] / sh->repetition : w[t] * sh->repetition;
        }
    }
    if (sh->presence != 0 || sh->frequency != 0) {
        for (int i = n_prompt; i < n_hist; i++) {
            int t = hist[i];
            if (t < 0 || t >= n)
                continue;
            w[t] -= sh->frequency;
            if (!(s->seen[t] & 2))
                w[t] -= sh->presence;
            s->seen[t] |= 2;
        }
    }
    for (int i = 0; i < n_hist; i++) /* back to zero for the next call */
        if (hist[i] >= 0 && hist[i] < n)
            s->seen[hist[i]] = 0;
    for (int i = 0; i < sh->n_bias; i++) {
        int t = sh->bias[i].token;
        if (t >= 0 && t < n)
            w[t] = sh->bias[i].bias <= -100 ? -INFINITY : w[t] + sh->bias[i].bias;
    }
    s->min_p = sh->min_p;
    int tok = colo_sampler_sample(s, w, n);
    s->min_p = 0;
    return tok;
}

void colo_logprobs(const float *logits, int n, int chosen, int k, float *chosen_lp, int32_t *top_ids, float *top_lps)
{
    float mx = logits[colo_argmax(logits, n)];
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    *chosen_lp = (float)(logits[chosen] - lse);
    if (k > 20)
        k = 20;
    int m = 0; /* top-k by insertion: k is small */
    for (int i = 0; i < n && k > 0; i++) {
        float v = logits[i];
        if (m == k && v <= logits[top_ids[m - 1]])
            continue;
        int j = m < k ? m++ : m - 1;
        while (j > 0 && logits[top_ids[j - 1]] < v)
            top_ids[j] = top_ids[j - 1], j--;
        top_ids[j] = i;
    }
    for (int i = 0; i < m; i++)
        top_lps[i] = (float)(logits[top_ids[i]] - lse);
}
