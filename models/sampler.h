/* models/sampler.h: next-token sampling: greedy, temperature, top-k, top-p,
 * with a seeded generator so a seed reproduces a generation. One sampler per
 * sequence; not thread-safe. */
#ifndef COLO_MODELS_SAMPLER_H
#define COLO_MODELS_SAMPLER_H

#include <stdint.h>

typedef struct colo_sampler {
    float temperature; /* <= 0: greedy */
    float top_p;       /* (0, 1]; 1 = off */
    int top_k;         /* 0 = off */
    uint64_t state[2]; /* xorshift128+ */
    float *probs;      /* scratch (n_vocab) */
    int *idx;          /* scratch (n_vocab) */
    int cap;
} colo_sampler;

void colo_sampler_init(colo_sampler *s, float temperature, float top_p, int top_k, uint64_t seed);
void colo_sampler_free(colo_sampler *s);
/* Picks a token from logits (n). -1 when out of memory. */
int colo_sampler_sample(colo_sampler *s, const float *logits, int n);
/* The index of the largest logit (lowest index on ties). */
int colo_argmax(const float *x, int n);

#endif
