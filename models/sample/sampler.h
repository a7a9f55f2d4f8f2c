/* models/sample/sampler.h: next-token sampling: greedy, temperature, top-k, top-p,
 * with a seeded generator so a seed reproduces a generation. One sampler per
 * sequence; not thread-safe. */
#ifndef COLO_MODELS_SAMPLER_H
#define COLO_MODELS_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

typedef struct colo_sampler {
    float temperature; /* <= 0: greedy */
    float top_p;       /* (0, 1]; 1 = off */
    int top_k;         /* 0 = off */
    float min_p;       /* 0 = off (set for one call by colo_sampler_sample_shaped) */
    uint64_t state[2]; /* xorshift128+ */
    float *probs;      /* scratch (n_vocab) */
    int *idx;          /* scratch (n_vocab) */
    int cap;
    float *work;       /* shaped logits (n_vocab) */
    unsigned char *seen; /* per token (n_vocab), zero between calls */
    int work_cap;
} colo_sampler;

void colo_sampler_init(colo_sampler *s, float temperature, float top_p, int top_k, uint64_t seed);
void colo_sampler_free(colo_sampler *s);
/* Picks a token from logits (n). -1 when out of memory. */
int colo_sampler_sample(colo_sampler *s, const float *logits, int n);

/* What shapes the logits before sampling (all off when zeroed, with
 * repetition 1): OpenAI's presence and frequency penalties over the
 * generated tokens (logit -= presence if the token occurred, and
 * frequency x its count), llama.cpp's repetition penalty over the last
 * repeat_last_n tokens of prompt and output (a positive logit divided by it,
 * a negative one multiplied), additive biases, and min-p (after the
 * temperature, tokens less likely than min_p x the most likely one are
 * dropped). */
typedef struct colo_sampler_bias {
    int32_t token;
    float bias; /* -100 or less: never */
} colo_sampler_bias;

typedef struct colo_sampler_shape {
    float presence, frequency;
    float repetition;    /* 1 (or 0) = off */
    int repeat_last_n;   /* 0: 64 */
    float min_p;         /* 0 = off */
    const colo_sampler_bias *bias;
    int n_bias;
} colo_sampler_shape;

/* True when sh changes anything. */
bool colo_sampler_shape_active(const colo_sampler_shape *sh);
/* colo_sampler_sample over logits shaped by sh (NULL: none), given the
 * tokens so far: hist[0..n_hist), of which the first n_prompt are the
 * prompt. logits are not modified. -1 when out of memory. */
int colo_sampler_sample_shaped(colo_sampler *s, const float *logits, int n, const colo_sampler_shape *sh,
                               const int32_t *hist, int n_hist, int n_prompt);

/* Log-probabilities of the model's distribution (log-softmax of logits,
 * before any penalty, bias or temperature): *chosen_lp for token chosen, and
 * the k most likely tokens, best first (ties: lower id first), into
 * top_ids/top_lps (k <= 20). */
void colo_logprobs(const float *logits, int n, int chosen, int k, float *chosen_lp, int32_t *top_ids,
                   float *top_lps);
/* The index of the largest logit (lowest index on ties; -0 and +0 tie). */
int colo_argmax(const float *x, int n);
/* Whether no x[i] is a NaN or an infinity. */
bool colo_all_finite(const float *x, int n);

#endif
