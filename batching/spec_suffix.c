#include "batching/spec_suffix.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct tenant_slot {
    char name[COLO_SPEC_SUFFIX_TENANT_LEN];
    uint32_t tag;  /* 0: a free slot */
    uint64_t used; /* c->clock when last named */
} tenant_slot;

struct colo_spec_suffix {
    uint32_t cap, mask; /* ring tokens, a power of two */
    uint64_t w;         /* tokens ever written; the ring holds positions [w - cap, w) */
    int32_t *tok;       /* (cap) token ids, -1 after each output */
    uint32_t *tag;      /* (cap) the tenant's tag of each */
    uint32_t *prev;     /* (cap) the distance back to the previous position of the same chain, 0: none */
    uint64_t *head;     /* (cap) per hash, the latest position + 1 whose preceding n-gram hashes to it, 0: none */
    tenant_slot tenants[COLO_SPEC_SUFFIX_TENANTS];
    uint32_t next_tag;
    uint64_t clock;
};

#define PER_TOKEN_BYTES (sizeof(int32_t) + sizeof(uint32_t) + sizeof(uint32_t) + sizeof(uint64_t))

colo_spec_suffix *colo_spec_suffix_create(size_t max_bytes)
{
    size_t fixed = sizeof(colo_spec_suffix);
    uint32_t cap = COLO_SPEC_SUFFIX_MIN_TOKENS;
    while (cap < (1u << 30) && fixed + (size_t)cap * 2 * PER_TOKEN_BYTES <= max_bytes)
        cap *= 2;
    colo_spec_suffix *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->cap = cap;
    c->mask = cap - 1;
    c->tok = malloc((size_t)cap * sizeof *c->tok);
    c->tag = malloc((size_t)cap * sizeof *c->tag);
    c->prev = malloc((size_t)cap * sizeof *c->prev);
    c->head = calloc((size_t)cap, sizeof *c->head);
    if (!c->tok || !c->tag || !c->prev || !c->head) {
        colo_spec_suffix_free(c);
        return NULL;
    }
    return c;
}

void colo_spec_suffix_free(colo_spec_suffix *c)
{
    if (!c)
        return;
    free(c->tok);
    free(c->tag);
    free(c->prev);
    free(c->head);
    free(c);
}

size_t colo_spec_suffix_bytes(const colo_spec_suffix *c)
{
    return sizeof *c + (size_t)c->cap * PER_TOKEN_BYTES;
}

int colo_spec_suffix_capacity(const colo_spec_suffix *c) { return (int)c->cap; }

/* Forgets everything: tags are about to be reused (after 2^32 tenants). */
static void clear(colo_spec_suffix *c)
{
    memset(c->head, 0, (size_t)c->cap * sizeof *c->head);
    memset(c->tenants, 0, sizeof c->tenants);
    c->w = 0;
    c->next_tag = 0;
}

uint32_t colo_spec_suffix_tenant(colo_spec_suffix *c, const char *tenant)
{
    if (!tenant)
        tenant = "";
    if (strlen(tenant) >= COLO_SPEC_SUFFIX_TENANT_LEN)
        return 0;
    tenant_slot *lru = &c->tenants[0];
    for (int i = 0; i < COLO_SPEC_SUFFIX_TENANTS; i++) {
        tenant_slot *t = &c->tenants[i];
        if (t->tag && !strcmp(t->name, tenant)) {
            t->used = ++c->clock;
            return t->tag;
        }
        if (!t->tag || (lru->tag && t->used < lru->used))
            lru = t;
    }
    if (c->next_tag == UINT32_MAX) {
        clear(c);
        lru = &c->tenants[0];
    }
    /* a new tag, never one a stored token carries: the slot's old tenant's
     * outputs are found no more */
    lru->tag = ++c->next_tag;
    lru->used = ++c->clock;
    strcpy(lru->name, tenant);
    return lru->tag;
}

static uint32_t hash_of(const colo_spec_suffix *c, uint32_t tag, const int32_t *t)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ tag;
    for (int i = 0; i < COLO_SPEC_SUFFIX_NGRAM; i++)
        h = (h ^ (uint32_t)t[i]) * 0x100000001b3ull;
    h ^= h >> 29;
    return (uint32_t)(h ^ (h >> 32)) & c->mask;
}

static bool alive(const colo_spec_suffix *c, uint64_t p) { return p < c->w && c->w - p <= c->cap; }

static void put(colo_spec_suffix *c, int32_t tok, uint32_t tag)
{
    uint32_t i = (uint32_t)(c->w & c->mask);
    c->tok[i] = tok;
    c->tag[i] = tag;
    c->prev[i] = 0;
    c->w++;
}

void colo_spec_suffix_add(colo_spec_suffix *c, const char *tenant, const int32_t *tokens, int n)
{
    uint32_t tag = colo_spec_suffix_tenant(c, tenant);
    if (!tag || n <= 0)
        return;
    if ((uint32_t)n > c->cap - 1) { /* its end is what a later output is likeliest to repeat */
        tokens += (uint32_t)n - (c->cap - 1);
        n = (int)(c->cap - 1);
    }
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0)
            break;
        uint64_t p = c->w;
        put(c, tokens[i], tag);
        if (i < COLO_SPEC_SUFFIX_NGRAM)
            continue;
        uint64_t *h = &c->head[hash_of(c, tag, tokens + i - COLO_SPEC_SUFFIX_NGRAM)];
        uint64_t d = *h ? p - (*h - 1) : 0;
        c->prev[p & c->mask] = d < c->cap ? (uint32_t)d : 0;
        *h = p + 1;
    }
    put(c, -1, tag);
}

/* How many tokens before position p match the end of tokens, up to
 * COLO_SPEC_SUFFIX_MAX_MATCH (a separator or the ring's end stops it). */
static int match_before(const colo_spec_suffix *c, uint64_t p, uint32_t tag, const int32_t *tokens, int n_tokens)
{
    int m = 0;
    while (m < COLO_SPEC_SUFFIX_MAX_MATCH && m < n_tokens && p > (uint64_t)m && alive(c, p - 1 - (uint64_t)m)) {
        uint32_t i = (uint32_t)((p - 1 - (uint64_t)m) & c->mask);
        if (c->tag[i] != tag || c->tok[i] != tokens[n_tokens - 1 - m])
            break;
        m++;
    }
    return m;
}

int colo_spec_suffix_lookup(const colo_spec_suffix *c, uint32_t tag, const int32_t *tokens, int n_tokens, int k,
                            int32_t *out, int *match)
{
    *match = 0;
    if (!c || !tag || k <= 0 || n_tokens < COLO_SPEC_SUFFIX_NGRAM)
        return 0;
    uint64_t h = c->head[hash_of(c, tag, tokens + n_tokens - COLO_SPEC_SUFFIX_NGRAM)];
    uint64_t best = 0;
    int best_m = 0;
    for (int walk = 0; h && walk < COLO_SPEC_SUFFIX_WALK; walk++) {
        uint64_t p = h - 1;
        if (!alive(c, p))
            break;
        uint32_t i = (uint32_t)(p & c->mask);
        if (c->tag[i] == tag) {
            int m = match_before(c, p, tag, tokens, n_tokens);
            if (m >= COLO_SPEC_SUFFIX_NGRAM && m > best_m)
                best = p, best_m = m;
        }
        h = c->prev[i] ? p - c->prev[i] + 1 : 0;
    }
    if (!best_m)
        return 0;
    int n = 0;
    while (n < k && alive(c, best + (uint64_t)n) && c->tok[(best + (uint64_t)n) & c->mask] >= 0) {
        out[n] = c->tok[(best + (uint64_t)n) & c->mask];
        n++;
    }
    *match = best_m;
    return n;
}
