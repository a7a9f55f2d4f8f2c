#include "batching/spec.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

/* Whether the draft's start at from is nearer hint than the one at best
 * (a tie: the later one, from). */
static bool nearer(int from, int best, int hint)
{
    int a = abs(from - hint), b = abs(best - hint);
    return a < b || (a == b && from > best);
}

int colo_spec_lookup(const int32_t *tokens, int n_tokens, int k, int hint, int32_t *out, colo_spec_match *mt)
{
    *mt = (colo_spec_match){0, -1, false};
    if (k > COLO_SPEC_MAX_TOKENS)
        k = COLO_SPEC_MAX_TOKENS;
    if (k <= 0 || !tokens || n_tokens < 2)
        return 0;
    const int32_t *end = tokens + n_tokens - 1; /* the last token */
    int best = -1, best_m = 0;
    for (int i = n_tokens - 2; i >= 0; i--) {
        if (tokens[i] != *end)
            continue;
        int m = 1;
        while (m < COLO_SPEC_MATCH_MAX && m <= i && tokens[i - m] == end[-m])
            m++;
        /* the longest; among equals the one whose draft starts nearest
         * the hint, else the latest */
        if (m > best_m || (m == best_m && hint >= 0 && nearer(i + 1, best + 1, hint)))
            best = i, best_m = m;
        /* nothing earlier matches longer, or starts nearer the hint (the
         * next place's draft starts at i at most) */
        if (best_m == COLO_SPEC_MATCH_MAX && (hint < 0 || i <= hint - abs(best + 1 - hint)))
            break;
    }
    if (best < 0)
        return 0;
    /* split: another place of the last token went on otherwise */
    for (int i = n_tokens - 2; i >= 0 && !mt->split; i--)
        mt->split = tokens[i] == *end && tokens[i + 1] != tokens[best + 1];
    /* The draft runs from after the match, up to the end of the known
     * tokens (a match near the end repeats its own continuation). */
    int from = best + 1, n = 0;
    while (n < k && from + n < n_tokens) {
        out[n] = tokens[from + n];
        n++;
    }
    mt->ngram = best_m;
    mt->from = from;
    return n;
}

void colo_spec_costs_add(colo_spec_costs *c, int rows, uint64_t ns)
{
    if (rows < 1 || rows > COLO_SPEC_MAX_ROWS)
        return;
    c->steps++;
    double *v = &c->ns[rows], x = (double)ns;
    bool fresh = *v > 0 && c->steps - c->seen_at[rows] <= COLO_SPEC_STALE_STEPS;
    /* Other work on the device only ever makes a step slower: a faster
     * step is believed at once (halfway), a slower one slowly, so that
     * one step that waited for another process does not make a row count
     * look dear for COLO_SPEC_STALE_STEPS steps. */
    *v = !fresh ? x : x < *v ? 0.5 * *v + 0.5 * x : 0.9 * *v + 0.1 * x;
    c->seen_at[rows] = c->steps;
}

static bool known(const colo_spec_costs *c, int rows)
{
    return rows >= 1 && rows <= COLO_SPEC_MAX_ROWS && c->ns[rows] > 0 &&
           c->steps - c->seen_at[rows] <= COLO_SPEC_STALE_STEPS;
}

double colo_spec_cost(const colo_spec_costs *c, int rows)
{
    if (known(c, rows))
        return c->ns[rows];
    if (rows <= COLO_SPEC_MAX_ROWS && known(c, rows - 1))
        return c->ns[rows - 1];
    return 0;
}

/* The priors by class (order_of): a sequence that has not drafted yet is
 * expected to keep this share of its drafted tokens (text that copies its
 * input keeps more, free text far less, a short match whose token went on
 * in more than one way least; the estimates follow within a few steps). */
static const float prior[COLO_SPEC_CLASSES] = {0.45f, 0.6f, 0.6f, 0.75f, 0.2f, 0.3f, 0.3f, 0.5f, 0.7f};

/* The class of a draft: matches of 1, 2, 3-4 and 5 or more tokens, those
 * under 5 apart when split, the suffix cache, the draft model. */
static int order_of(int ngram, bool split)
{
    if (ngram == COLO_SPEC_FROM_MODEL)
        return 8;
    if (ngram == COLO_SPEC_FROM_SUFFIX)
        return 7;
    int o = ngram < 2 ? 0 : ngram == 2 ? 1 : ngram < 5 ? 2 : 3;
    return split && o < 3 ? o + 4 : o;
}

void colo_spec_accept_init(colo_spec_accept *a)
{
    for (int i = 0; i < COLO_SPEC_CLASSES; i++) {
        a->hits[i] = prior[i];
        a->trials[i] = 1;
    }
}

void colo_spec_accept_add(colo_spec_accept *a, int ngram, bool split, int n_draft, int kept)
{
    if (n_draft <= 0)
        return;
    int o = order_of(ngram, split);
    /* kept successes, and one failure when a drafted token was rejected */
    a->hits[o] = 0.8f * a->hits[o] + (float)kept;
    a->trials[o] = 0.8f * a->trials[o] + (float)kept + (kept < n_draft);
}

void colo_spec_accept_idle(colo_spec_accept *a)
{
    for (int i = 0; i < COLO_SPEC_CLASSES; i++) {
        a->hits[i] = 0.95f * a->hits[i] + 0.05f * prior[i];
        a->trials[i] = 0.95f * a->trials[i] + 0.05f;
    }
}

float colo_spec_accept_rate(const colo_spec_accept *a, int ngram, bool split)
{
    int o = order_of(ngram, split);
    float r = a->trials[o] > 0 ? a->hits[o] / a->trials[o] : prior[o];
    return r < 0 ? 0 : r > 0.99f ? 0.99f : r;
}

int colo_spec_plan(const colo_spec_costs *c, int n_decodes, int n_cand, const int *avail, const float *rate,
                   int max_total, int *len)
{
    return colo_spec_plan_costed(c, n_decodes, n_cand, avail, rate, NULL, NULL, max_total, len);
}

double colo_spec_amortize(double ns, int remaining, float rate, int k)
{
    if (ns <= 0)
        return 0;
    if (remaining > COLO_SPEC_CATCHUP_HORIZON)
        remaining = COLO_SPEC_CATCHUP_HORIZON;
    /* a step gives its own token and the accepted drafted ones: the j-th
     * with rate^j */
    double per_step = 1, g = 1;
    for (int j = 0; j < k; j++)
        per_step += (g *= rate);
    double steps = remaining / per_step;
    return ns / (steps > 1 ? steps : 1);
}

int colo_spec_plan_costed(const colo_spec_costs *c, int n_decodes, int n_cand, const int *avail, const float *rate,
                          const double *tok_ns, const double *once_ns, int max_total, int *len)
{
    if (max_total > COLO_SPEC_MAX_ROWS - n_decodes)
        max_total = COLO_SPEC_MAX_ROWS - n_decodes;
    int total_avail = 0;
    for (int i = 0; i < n_cand; i++) {
        len[i] = 0;
        total_avail += avail[i];
    }
    if (max_total > total_avail)
        max_total = total_avail;
    if (max_total <= 0)
        return 0;
    /* Grow the draft one token at a time, each time where the next token
     * is likeliest to be accepted (a sequence's j-th drafted token is
     * accepted with rate^j), and keep the total whose tokens per cost is
     * best: the cost of rows is a step function, so every total whose
     * cost is known is weighed, not only the first that stops paying. */
    double base = colo_spec_cost(c, n_decodes);
    if (!known(c, n_decodes))
        return 0; /* measure the plain step first */
    double tokens = n_decodes, best = tokens / base, drafting_ns = 0;
    int best_total = 0;
    int grow[COLO_SPEC_MAX_ROWS]; /* which candidate each added token went to */
    for (int t = 1; t <= max_total; t++) {
        double cost = colo_spec_cost(c, n_decodes + t);
        if (cost <= 0) {
            max_total = t - 1;
            break;
        }
        int pick = -1;
        double gain = -1, weight = -1;
        for (int i = 0; i < n_cand; i++) {
            if (len[i] >= avail[i])
                continue;
            /* (a token the draft model must pass for is weighed by what
             * it adds to the step; a first token's once_ns as shared by
             * all the tokens it makes possible) */
            double add = (tok_ns ? tok_ns[i] : 0) + (once_ns && !len[i] ? once_ns[i] / avail[i] : 0);
            double g = pow(rate[i], len[i] + 1), w = add > 0 ? g * base / (base + add) : g;
            if (w > weight)
                weight = w, gain = g, pick = i;
        }
        drafting_ns += (tok_ns ? tok_ns[pick] : 0) + (once_ns && !len[pick] ? once_ns[pick] : 0);
        len[pick]++;
        grow[t - 1] = pick;
        tokens += gain;
        cost += drafting_ns;
        if (tokens / cost > best)
            best = tokens / cost, best_total = t;
    }
    for (int t = max_total; t > best_total; t--)
        len[grow[t - 1]]--;
    return best_total;
}
