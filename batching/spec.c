#include "batching/spec.h"

/* Where the latest earlier occurrence of the last n tokens starts, or -1. */
static int find_latest(const int32_t *t, int n_tokens, int n)
{
    const int32_t *tail = t + n_tokens - n;
    for (int i = n_tokens - n - 1; i >= 0; i--) {
        int j = 0;
        while (j < n && t[i + j] == tail[j])
            j++;
        if (j == n)
            return i;
    }
    return -1;
}

int colo_spec_lookup(const int32_t *tokens, int n_tokens, int k, int32_t *out)
{
    if (k > COLO_SPEC_MAX_TOKENS)
        k = COLO_SPEC_MAX_TOKENS;
    if (k <= 0 || !tokens)
        return 0;
    for (int n = COLO_SPEC_NGRAM_MAX; n >= COLO_SPEC_NGRAM_MIN; n--) {
        if (n_tokens < n + 1)
            continue;
        int at = find_latest(tokens, n_tokens, n);
        if (at < 0)
            continue;
        /* The draft runs from after the match, up to the end of the known
         * tokens (a match near the end repeats its own continuation). */
        int from = at + n, m = 0;
        while (m < k && from + m < n_tokens) {
            out[m] = tokens[from + m];
            m++;
        }
        if (m > 0)
            return m;
    }
    return 0;
}
