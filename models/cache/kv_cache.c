#include "models/cache/kv_cache.h"
#include "models/cache/prefix_cache.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct colo_kv_cache {
    colo_kv_cache_config cfg;
    colo_arena *arena;
    void **k, **v;     /* (n_layer) each (n_blocks * block_size, kv_dim) */
    size_t bytes;
    int32_t *free_ids; /* stack; the top is handed out next */
    int n_free;
    int32_t *refs;     /* (n_blocks) references of a handed-out block; 0 = free or cached */
    /* the prefix cache (NULL: off): indexed blocks with no reference stay
     * charged and committed, in least-recently-used order */
    colo_prefix_index *index;
    int32_t *lru_prev, *lru_next; /* (n_blocks) -1 = none */
    int32_t lru_head, lru_tail;   /* head: evicted first */
    int n_lru;
    int noted_lru;                /* n_lru as the arena last heard it (its evictable bytes) */
    size_t block_bytes; /* one block in every layer, K and V */
    size_t row_bytes;   /* one block in one array: block_size rows of kv_dim elements */
    uint64_t reclaims;  /* blocks given back because the pool asked */
    uint64_t n_evicted; /* cached blocks evicted */
    bool on_demand;     /* elastic arena: blocks are committed as handed out */
};

/* Bytes of one token's K (or V) row in one layer: kv_dim elements of t,
 * whole blocks for a block type; 0 when t cannot hold a KV row of kv_dim. */
static size_t kv_row_bytes(colo_dtype t, int kv_dim)
{
    return colo_dtype_is_kv(t) && kv_dim > 0 ? colo_dtype_row_bytes(t, kv_dim) : 0;
}

size_t colo_kv_cache_token_bytes(int n_layer, int kv_dim, colo_dtype dtype)
{
    if (n_layer <= 0 || kv_dim <= 0)
        return 0;
    return 2 * (size_t)n_layer * kv_row_bytes(dtype, kv_dim);
}

size_t colo_kv_cache_block_bytes(const colo_kv_cache_config *cfg)
{
    int bs = cfg->block_size ? cfg->block_size : COLO_KV_DEFAULT_BLOCK_SIZE;
    if (bs < 0)
        return 0;
    return (size_t)bs * colo_kv_cache_token_bytes(cfg->n_layer, cfg->kv_dim, cfg->dtype);
}

int colo_kv_blocks_for(int n_tokens, int block_size)
{
    return n_tokens <= 0 || block_size <= 0 ? 0 : (n_tokens + block_size - 1) / block_size;
}

colo_kv_cache *colo_kv_cache_create(colo_arena *arena, const colo_kv_cache_config *cfg, char *err, size_t errlen)
{
    colo_kv_cache_config c = *cfg;
    if (!c.block_size)
        c.block_size = COLO_KV_DEFAULT_BLOCK_SIZE;
    if (c.n_layer <= 0 || c.kv_dim <= 0 || c.block_size <= 0 || c.n_blocks <= 0 || !kv_row_bytes(c.dtype, c.kv_dim) ||
        (size_t)c.n_blocks * c.block_size > (size_t)INT32_MAX) {
        colo_set_err(err, errlen, "KV cache: invalid configuration (%d layers, row %d, %d blocks of %d tokens, %s)",
                     c.n_layer, c.kv_dim, c.n_blocks, c.block_size,
                     colo_dtype_name(c.dtype) ? colo_dtype_name(c.dtype) : "?");
        return NULL;
    }
    colo_kv_cache *kc = calloc(1, sizeof *kc);
    if (!kc)
        goto out_host;
    kc->cfg = c;
    kc->arena = arena;
    kc->k = calloc((size_t)c.n_layer, sizeof *kc->k);
    kc->v = calloc((size_t)c.n_layer, sizeof *kc->v);
    kc->free_ids = malloc((size_t)c.n_blocks * sizeof *kc->free_ids);
    kc->refs = calloc((size_t)c.n_blocks, sizeof *kc->refs);
    kc->lru_head = kc->lru_tail = -1;
    if (!kc->k || !kc->v || !kc->free_ids || !kc->refs)
        goto out_host;
    size_t per_array = (size_t)c.n_blocks * c.block_size * kv_row_bytes(c.dtype, c.kv_dim);
    for (int l = 0; l < c.n_layer; l++) {
        if (colo_arena_reserve(arena, per_array, 256, &kc->k[l]) != COLO_OK ||
            colo_arena_reserve(arena, per_array, 256, &kc->v[l]) != COLO_OK) {
            colo_set_err(err, errlen,
                         "KV cache: %d blocks of %d tokens need %zu bytes; the arena has %zu of %zu bytes free",
                         c.n_blocks, c.block_size, 2 * per_array * c.n_layer,
                         colo_arena_limit(arena) - colo_arena_used(arena), colo_arena_limit(arena));
            colo_kv_cache_destroy(kc);
            return NULL;
        }
        kc->bytes += 2 * per_array;
    }
    kc->row_bytes = (size_t)c.block_size * kv_row_bytes(c.dtype, c.kv_dim);
    kc->block_bytes = 2 * (size_t)c.n_layer * kc->row_bytes;
    for (int i = 0; i < c.n_blocks; i++)
        kc->free_ids[i] = c.n_blocks - 1 - i; /* id 0 first */
    kc->n_free = c.n_blocks;
    kc->on_demand = colo_arena_is_elastic(arena);
    return kc;

out_host:
    colo_set_err(err, errlen, "KV cache: out of host memory");
    colo_kv_cache_destroy(kc);
    return NULL;
}

void colo_kv_cache_destroy(colo_kv_cache *c)
{
    if (!c)
        return;
    if (c->index)
        colo_kv_cache_prefix_evict(c, c->n_lru); /* their charges and pages go back */
    for (int l = 0; l < c->cfg.n_layer; l++) {
        if (c->k)
            colo_arena_free(c->arena, c->k[l]);
        if (c->v)
            colo_arena_free(c->arena, c->v[l]);
    }
    free(c->k);
    free(c->v);
    free(c->free_ids);
    free(c->refs);
    free(c->lru_prev);
    free(c->lru_next);
    colo_prefix_index_free(c->index);
    free(c);
}

const colo_kv_cache_config *colo_kv_cache_config_get(const colo_kv_cache *c) { return &c->cfg; }
void *colo_kv_cache_k(const colo_kv_cache *c, int layer) { return c->k[layer]; }
void *colo_kv_cache_v(const colo_kv_cache *c, int layer) { return c->v[layer]; }
size_t colo_kv_cache_bytes(const colo_kv_cache *c) { return c->bytes; }
int colo_kv_cache_n_blocks(const colo_kv_cache *c) { return c->cfg.n_blocks; }
int colo_kv_cache_block_size(const colo_kv_cache *c) { return c->cfg.block_size; }
int colo_kv_cache_n_free(const colo_kv_cache *c) { return c->n_free + c->n_lru; }
int colo_kv_cache_n_used(const colo_kv_cache *c) { return c->cfg.n_blocks - c->n_free - c->n_lru; }

static colo_status commit_block(colo_kv_cache *c, int32_t id);
static void decommit_block(colo_kv_cache *c, int32_t id);

static void lru_unlink(colo_kv_cache *c, int32_t id)
{
    int32_t p = c->lru_prev[id], n = c->lru_next[id];
    if (p >= 0)
        c->lru_next[p] = n;
    else
        c->lru_head = n;
    if (n >= 0)
        c->lru_prev[n] = p;
    else
        c->lru_tail = p;
    c->lru_prev[id] = c->lru_next[id] = -1;
    c->n_lru--;
}

static void lru_append(colo_kv_cache *c, int32_t id)
{
    c->lru_prev[id] = c->lru_tail;
    c->lru_next[id] = -1;
    if (c->lru_tail >= 0)
        c->lru_next[c->lru_tail] = id;
    else
        c->lru_head = id;
    c->lru_tail = id;
    c->n_lru++;
}

/* Tells an elastic arena what of its charge the cache can drop at once. */
static void note_evictable(colo_kv_cache *c)
{
    if (c->on_demand && c->n_lru != c->noted_lru) {
        colo_arena_set_evictable(c->arena, (size_t)c->n_lru * c->block_bytes);
        c->noted_lru = c->n_lru;
    }
}

colo_status colo_kv_cache_alloc(colo_kv_cache *c, int n, int32_t *ids)
{
    if (n < 0)
        return COLO_EINVAL;
    if (n > c->n_free + c->n_lru)
        return COLO_ENOMEM;
    if (n == 0)
        return COLO_OK;
    /* Free blocks first (charged now); cached blocks nobody references are
     * evicted, least recently used first, for the rest, or for all of them
     * when the pool has no memory to charge: they are charged already. */
    int from_free = n < c->n_free ? n : c->n_free;
    colo_status st = colo_arena_charge(c->arena, (size_t)from_free * c->block_bytes);
    if (st != COLO_OK) {
        if (n > c->n_lru)
            return st; /* EAGAIN: the guarantee comes back soon; ENOMEM: nothing to borrow now */
        from_free = 0;
    }
    for (int i = 0; i < from_free; i++) {
        int32_t id = c->free_ids[c->n_free - 1 - i];
        if (c->on_demand && commit_block(c, id) != COLO_OK) {
            for (int k = 0; k < i; k++)
                decommit_block(c, c->free_ids[c->n_free - 1 - k]);
            colo_arena_uncharge(c->arena, (size_t)from_free * c->block_bytes);
            return COLO_ENOMEM; /* the device has no memory to back it */
        }
    }
    for (int i = 0; i < from_free; i++) {
        ids[i] = c->free_ids[--c->n_free];
        c->refs[ids[i]] = 1;
    }
    for (int i = from_free; i < n; i++) {
        int32_t id = c->lru_head;
        lru_unlink(c, id);
        colo_prefix_index_remove(c->index, id);
        ids[i] = id;
        c->refs[id] = 1;
        c->n_evicted++;
    }
    note_evictable(c);
    return COLO_OK;
}

/* Block id's storage in every array is in use (commit) or no longer
 * (decommit); the arena counts users per page or chunk, so a page two
 * blocks share goes only with the second. */
static colo_status commit_block(colo_kv_cache *c, int32_t id)
{
    size_t off = (size_t)id * c->row_bytes;
    for (int l = 0; l < c->cfg.n_layer; l++) {
        colo_status st = colo_arena_commit(c->arena, (char *)c->k[l] + off, c->row_bytes);
        if (st == COLO_OK && (st = colo_arena_commit(c->arena, (char *)c->v[l] + off, c->row_bytes)) != COLO_OK)
            colo_arena_decommit(c->arena, (char *)c->k[l] + off, c->row_bytes);
        if (st != COLO_OK) {
            for (int m = 0; m < l; m++) {
                colo_arena_decommit(c->arena, (char *)c->k[m] + off, c->row_bytes);
                colo_arena_decommit(c->arena, (char *)c->v[m] + off, c->row_bytes);
            }
            return st;
        }
    }
    return COLO_OK;
}

static void decommit_block(colo_kv_cache *c, int32_t id)
{
    size_t off = (size_t)id * c->row_bytes;
    for (int l = 0; l < c->cfg.n_layer; l++) {
        colo_arena_decommit(c->arena, (char *)c->k[l] + off, c->row_bytes);
        colo_arena_decommit(c->arena, (char *)c->v[l] + off, c->row_bytes);
    }
}

/* Blocks ids[0..n) become free: decommitted and uncharged. */
static void make_free(colo_kv_cache *c, const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++)
        c->free_ids[c->n_free++] = ids[i];
    if (c->on_demand)
        for (int i = 0; i < n; i++)
            decommit_block(c, ids[i]);
    if (n > 0)
        colo_arena_uncharge(c->arena, (size_t)n * c->block_bytes);
}

void colo_kv_cache_release(colo_kv_cache *c, const int32_t *ids, int n)
{
    int32_t batch[64];
    int nb = 0;
    /* Last block first: of a sequence's cached blocks its deepest are
     * evicted first, and the prefix others share stays longest. */
    for (int i = n - 1; i >= 0; i--) {
        int32_t id = ids[i];
        COLO_ASSERT(id >= 0 && id < c->cfg.n_blocks && c->refs[id] > 0);
        if (--c->refs[id] > 0)
            continue;
        if (c->index && colo_prefix_index_has(c->index, id)) {
            lru_append(c, id); /* stays cached until the memory is needed */
            continue;
        }
        batch[nb++] = id;
        if (nb == (int)(sizeof batch / sizeof *batch)) {
            make_free(c, batch, nb);
            nb = 0;
        }
    }
    make_free(c, batch, nb);
    note_evictable(c);
}

void colo_kv_cache_share(colo_kv_cache *c, const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++) {
        COLO_ASSERT(ids[i] >= 0 && ids[i] < c->cfg.n_blocks && c->refs[ids[i]] > 0);
        c->refs[ids[i]]++;
    }
}

int colo_kv_cache_refs(const colo_kv_cache *c, int32_t id)
{
    return id >= 0 && id < c->cfg.n_blocks ? c->refs[id] : 0;
}

colo_status colo_kv_cache_copy(colo_kv_cache *c, colo_stream *s, int32_t dst, int32_t src, int n_tokens)
{
    if (dst < 0 || src < 0 || dst >= c->cfg.n_blocks || src >= c->cfg.n_blocks || n_tokens < 0 ||
        n_tokens > c->cfg.block_size)
        return COLO_EINVAL;
    size_t bytes = (size_t)n_tokens * c->row_bytes / (size_t)c->cfg.block_size;
    for (int l = 0; l < c->cfg.n_layer && bytes; l++) {
        colo_status st = colo_memcpy_d2d(s, (char *)c->k[l] + (size_t)dst * c->row_bytes,
                                         (char *)c->k[l] + (size_t)src * c->row_bytes, bytes);
        if (st == COLO_OK)
            st = colo_memcpy_d2d(s, (char *)c->v[l] + (size_t)dst * c->row_bytes,
                                 (char *)c->v[l] + (size_t)src * c->row_bytes, bytes);
        if (st != COLO_OK)
            return st;
    }
    return COLO_OK;
}

/* ---- the prefix cache ---- */

colo_status colo_kv_cache_prefix_enable(colo_kv_cache *c)
{
    if (c->index)
        return COLO_OK;
    int nb = c->cfg.n_blocks;
    c->lru_prev = malloc((size_t)nb * sizeof *c->lru_prev);
    c->lru_next = malloc((size_t)nb * sizeof *c->lru_next);
    c->index = colo_prefix_index_create(nb, c->cfg.block_size);
    if (!c->lru_prev || !c->lru_next || !c->index) {
        free(c->lru_prev);
        free(c->lru_next);
        colo_prefix_index_free(c->index);
        c->lru_prev = c->lru_next = NULL;
        c->index = NULL;
        return COLO_ENOMEM;
    }
    return COLO_OK; /* (a block's links are set as it enters the LRU list) */
}

bool colo_kv_cache_prefix_enabled(const colo_kv_cache *c) { return c->index != NULL; }

int colo_kv_cache_prefix_match(colo_kv_cache *c, const int32_t *tokens, int n_tokens, int max_blocks, int32_t *ids,
                               uint64_t *last_key)
{
    return colo_kv_cache_prefix_match_from(c, COLO_PREFIX_ROOT, tokens, n_tokens, max_blocks, ids, last_key);
}

int colo_kv_cache_prefix_match_from(colo_kv_cache *c, uint64_t root, const int32_t *tokens, int n_tokens,
                                    int max_blocks, int32_t *ids, uint64_t *last_key)
{
    uint64_t key = root;
    int bs = c->cfg.block_size, n = 0;
    if (c->index) {
        for (; n < max_blocks && (n + 1) * bs <= n_tokens; n++) {
            const int32_t *t = tokens + (size_t)n * bs;
            uint64_t k = colo_prefix_key(key, t, bs);
            int32_t id = colo_prefix_index_find(c->index, k, key, t);
            if (id < 0)
                break;
            if (c->refs[id]++ == 0)
                lru_unlink(c, id); /* referenced again: not evictable */
            ids[n] = id;
            key = k;
        }
    }
    if (last_key)
        *last_key = key;
    note_evictable(c);
    return n;
}

uint64_t colo_kv_cache_prefix_publish(colo_kv_cache *c, int32_t id, uint64_t parent, const int32_t *tokens)
{
    uint64_t key = colo_prefix_key(parent, tokens, c->cfg.block_size);
    if (c->index && id >= 0 && id < c->cfg.n_blocks && c->refs[id] > 0)
        colo_prefix_index_insert(c->index, id, key, parent, tokens); /* a key held already: id stays private */
    return key;
}

int colo_kv_cache_prefix_evict(colo_kv_cache *c, int n)
{
    int32_t batch[64];
    int done = 0;
    while (done < n && c->n_lru > 0) {
        int nb = 0;
        while (done < n && c->n_lru > 0 && nb < (int)(sizeof batch / sizeof *batch)) {
            int32_t id = c->lru_head;
            lru_unlink(c, id);
            colo_prefix_index_remove(c->index, id);
            batch[nb++] = id;
            done++;
        }
        make_free(c, batch, nb);
        c->n_evicted += (uint64_t)nb;
    }
    note_evictable(c);
    return done;
}

int colo_kv_cache_evict_wanted(const colo_kv_cache *c)
{
    size_t w = colo_arena_evict_wanted_bytes(c->arena);
    return w ? (int)((w + c->block_bytes - 1) / c->block_bytes) : 0;
}

int colo_kv_cache_prefix_trim(colo_kv_cache *c)
{
    if (!c->n_lru)
        return 0;
    colo_arena_stats st;
    colo_arena_get_stats(c->arena, &st);
    if (!st.borrowed_bytes)
        return 0;
    return colo_kv_cache_prefix_evict(c, (int)((st.borrowed_bytes + c->block_bytes - 1) / c->block_bytes));
}

int colo_kv_cache_n_cached(const colo_kv_cache *c) { return c->index ? colo_prefix_index_count(c->index) : 0; }
int colo_kv_cache_n_evictable(const colo_kv_cache *c) { return c->n_lru; }
uint64_t colo_kv_cache_n_evicted(const colo_kv_cache *c) { return c->n_evicted; }

int colo_kv_cache_reclaim_wanted(const colo_kv_cache *c)
{
    size_t w = colo_arena_reclaim_wanted_bytes(c->arena);
    return w ? (int)((w + c->block_bytes - 1) / c->block_bytes) : 0;
}

void colo_kv_cache_count_reclaimed(colo_kv_cache *c, int n_blocks) { c->reclaims += (uint64_t)n_blocks; }
uint64_t colo_kv_cache_reclaimed(const colo_kv_cache *c) { return c->reclaims; }

colo_status colo_kv_table_init(colo_kv_table *t, int max_blocks)
{
    memset(t, 0, sizeof *t);
    if (max_blocks <= 0)
        return COLO_EINVAL;
    if (!(t->ids = malloc((size_t)max_blocks * sizeof *t->ids)))
        return COLO_ENOMEM;
    for (int i = 0; i < max_blocks; i++)
        t->ids[i] = -1;
    t->max_blocks = max_blocks;
    return COLO_OK;
}

void colo_kv_table_free(colo_kv_table *t)
{
    if (!t)
        return;
    COLO_ASSERT(t->n_blocks == 0);
    free(t->ids);
    t->ids = NULL;
    t->max_blocks = 0;
}

colo_status colo_kv_table_ensure(colo_kv_cache *c, colo_kv_table *t, int n_tokens)
{
    if (n_tokens < 0)
        return COLO_EINVAL;
    int need = colo_kv_blocks_for(n_tokens, c->cfg.block_size);
    if (need > t->max_blocks)
        return COLO_EINVAL;
    if (need <= t->n_blocks)
        return COLO_OK;
    colo_status st = colo_kv_cache_alloc(c, need - t->n_blocks, t->ids + t->n_blocks);
    if (st == COLO_OK)
        t->n_blocks = need;
    return st;
}

void colo_kv_table_release(colo_kv_cache *c, colo_kv_table *t)
{
    colo_kv_cache_release(c, t->ids, t->n_blocks);
    for (int i = 0; i < t->n_blocks; i++)
        t->ids[i] = -1;
    t->n_blocks = 0;
}

int32_t colo_kv_table_slot(const colo_kv_table *t, int block_size, int pos)
{
    return t->ids[pos / block_size] * block_size + pos % block_size;
}
