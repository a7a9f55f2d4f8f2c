#include "models/cache/prefix_cache.h"

#include <stdlib.h>
#include <string.h>

struct colo_prefix_index {
    int n_blocks, block_size;
    int n_buckets;     /* a power of two >= n_blocks */
    int32_t *bucket;   /* (n_buckets) first block of the chain + 1, 0 = none (calloc: untouched pages stay unbacked) */
    int32_t *chain;    /* (n_blocks) next block in the same bucket */
    uint64_t *key;     /* (n_blocks) */
    uint64_t *parent;  /* (n_blocks) */
    int32_t *tokens;   /* (n_blocks, block_size) */
    uint8_t *indexed;  /* (n_blocks) */
    int count;
};

/* 64-bit mix of splitmix64's finaliser. */
static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

uint64_t colo_prefix_key(uint64_t parent, const int32_t *tokens, int n)
{
    uint64_t h = mix(parent ^ 0x6a09e667f3bcc909ull);
    for (int i = 0; i < n; i++)
        h = mix(h ^ (uint64_t)(uint32_t)tokens[i] ^ ((uint64_t)i << 32));
    return h;
}

colo_prefix_index *colo_prefix_index_create(int n_blocks, int block_size)
{
    if (n_blocks <= 0 || block_size <= 0)
        return NULL;
    colo_prefix_index *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    p->n_buckets = 1;
    while (p->n_buckets < n_blocks)
        p->n_buckets <<= 1;
    p->bucket = calloc((size_t)p->n_buckets, sizeof *p->bucket);
    p->chain = malloc((size_t)n_blocks * sizeof *p->chain);
    p->key = malloc((size_t)n_blocks * sizeof *p->key);
    p->parent = malloc((size_t)n_blocks * sizeof *p->parent);
    p->tokens = malloc((size_t)n_blocks * (size_t)block_size * sizeof *p->tokens);
    p->indexed = calloc((size_t)n_blocks, 1);
    if (!p->bucket || !p->chain || !p->key || !p->parent || !p->tokens || !p->indexed) {
        colo_prefix_index_free(p);
        return NULL;
    }
    return p;
}

void colo_prefix_index_free(colo_prefix_index *p)
{
    if (!p)
        return;
    free(p->bucket);
    free(p->chain);
    free(p->key);
    free(p->parent);
    free(p->tokens);
    free(p->indexed);
    free(p);
}

static int bucket_of(const colo_prefix_index *p, uint64_t key) { return (int)(key & (uint64_t)(p->n_buckets - 1)); }

int32_t colo_prefix_index_find(const colo_prefix_index *p, uint64_t key, uint64_t parent, const int32_t *tokens)
{
    for (int32_t id = p->bucket[bucket_of(p, key)] - 1; id >= 0; id = p->chain[id])
        if (p->key[id] == key && p->parent[id] == parent &&
            !memcmp(p->tokens + (size_t)id * p->block_size, tokens, (size_t)p->block_size * sizeof *tokens))
            return id;
    return -1;
}

bool colo_prefix_index_insert(colo_prefix_index *p, int32_t id, uint64_t key, uint64_t parent, const int32_t *tokens)
{
    if (id < 0 || id >= p->n_blocks || p->indexed[id])
        return false;
    int b = bucket_of(p, key);
    for (int32_t o = p->bucket[b] - 1; o >= 0; o = p->chain[o])
        if (p->key[o] == key)
            return false;
    p->key[id] = key;
    p->parent[id] = parent;
    memcpy(p->tokens + (size_t)id * p->block_size, tokens, (size_t)p->block_size * sizeof *tokens);
    p->chain[id] = p->bucket[b] - 1;
    p->bucket[b] = id + 1;
    p->indexed[id] = 1;
    p->count++;
    return true;
}

void colo_prefix_index_remove(colo_prefix_index *p, int32_t id)
{
    if (id < 0 || id >= p->n_blocks || !p->indexed[id])
        return;
    int b = bucket_of(p, p->key[id]);
    if (p->bucket[b] - 1 == id) {
        p->bucket[b] = p->chain[id] + 1;
    } else {
        for (int32_t o = p->bucket[b] - 1; o >= 0; o = p->chain[o])
            if (p->chain[o] == id) {
                p->chain[o] = p->chain[id];
                break;
            }
    }
    p->indexed[id] = 0;
    p->count--;
}

bool colo_prefix_index_has(const colo_prefix_index *p, int32_t id)
{
    return id >= 0 && id < p->n_blocks && p->indexed[id];
}

int colo_prefix_index_count(const colo_prefix_index *p) { return p->count; }
