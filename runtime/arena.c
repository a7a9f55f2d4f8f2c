/* Arenas: one device buffer per model, sub-allocated with a free list.
 *
 * The allocator's metadata lives on the host (the buffer may be device
 * memory). Free ranges are kept sorted by offset and coalesced on free;
 * allocation is best-fit, which keeps large holes for the KV cache and
 * weights. Live allocations are found by offset in a hash table.
 *
 * Elastic arenas add a charge, kept by their memory pool under the pool's
 * lock: the free list says where storage lives, the charge how much of it
 * is in use (runtime/arena.h). Lock order: an arena's lock, then its
 * pool's. */
#include "runtime/arena.h"
#include "runtime/clock.h"
#include "runtime/backend_impl.h"
#include "runtime/fault.h"
#include "runtime/log.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct range {
    size_t off, size;
} range;

typedef struct live {
    size_t off;   /* returned offset; SIZE_MAX = empty slot, SIZE_MAX-1 = tombstone */
    size_t start; /* start of the range taken (before alignment) */
    size_t size;  /* bytes taken */
    bool reserved; /* colo_arena_reserve on an elastic arena: not charged with the range */
} live;

#define SLOT_EMPTY SIZE_MAX
#define SLOT_DEAD (SIZE_MAX - 1)

struct colo_arena {
    colo_device *dev;
    colo_buffer *buf;
    char name[64];
    size_t limit;
    pthread_mutex_t mu;
    range *free_r; /* sorted by offset, no two adjacent */
    int n_free, cap_free;
    live *tab;     /* open addressing on off */
    size_t cap_tab, n_live, n_used_slots;
    size_t used, peak;
    /* elastic arenas (pool != NULL); charged, want and reclaims under pool->mu */
    colo_mem_pool *pool;
    size_t guarantee, charged, charged_peak, reserved, want;
    size_t evictable, evict_want; /* of the charge, what can be dropped at once; what the pool asks dropped */
    size_t guarantee_full; /* what it was created with; guarantee is 0 while given back, less while lent */
    uint64_t reclaims;
    struct colo_arena *next_member;
    /* elastic arenas: users of each chunk of the buffer (under mu); a
     * chunk is committed while it has one */
    size_t chunk;
    uint32_t *chunk_use; /* (ceil(buffer size / chunk)) */
};

struct colo_mem_pool {
    pthread_mutex_t mu;
    size_t budget, used, guaranteed;
    size_t held;            /* colo_mem_pool_hold, in all */
    size_t host_allowance;  /* of held, what the fixed overhead covers; the rest is in used and guaranteed */
    /* An owner waits for its guarantee: nobody borrows until its charge
     * succeeds, or until this time (an owner that stopped asking). */
    uint64_t demand_until_ns;
    colo_arena *demander;
    colo_arena *members;
};

size_t colo_arena_device_budget(colo_device *dev)
{
    colo_device_info info;
    if (colo_device_get_info(dev, &info) != COLO_OK)
        return 0;
    return info.total_bytes;
}

colo_arena *colo_arena_create(colo_device *dev, const char *name, double fraction, size_t budget_bytes, char *err,
                              size_t errlen)
{
    if (!(fraction > 0 && fraction <= 1)) {
        colo_set_err(err, errlen, "arena %s: memory fraction %g is outside (0, 1]", name ? name : "", fraction);
        return NULL;
    }
    size_t budget = budget_bytes ? budget_bytes : colo_arena_device_budget(dev);
    return colo_arena_create_bytes(dev, name, (size_t)((double)budget * fraction), err, errlen);
}

static size_t hash_off(size_t off, size_t cap) { return (size_t)((off * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1); }

static colo_arena *arena_new(colo_device *dev, const char *name, size_t limit_bytes, bool reserve, char *err,
                             size_t errlen);

colo_arena *colo_arena_create_bytes(colo_device *dev, const char *name, size_t limit_bytes, char *err,
                                    size_t errlen)
{
    return arena_new(dev, name, limit_bytes, false, err, errlen);
}

static colo_arena *arena_new(colo_device *dev, const char *name, size_t limit_bytes, bool reserve, char *err,
                             size_t errlen)
{
    limit_bytes &= ~(size_t)255;
    if (!dev || limit_bytes == 0) {
        colo_set_err(err, errlen, "arena %s: needs a device and at least 256 bytes", name ? name : "");
        return NULL;
    }
    colo_arena *a = calloc(1, sizeof *a);
    if (!a) {
        colo_set_err(err, errlen, "arena: out of host memory");
        return NULL;
    }
    snprintf(a->name, sizeof a->name, "%s", name ? name : "");
    a->dev = dev;
    a->limit = limit_bytes;
    char berr[256];
    /* reserved address space in whole 2 MiB, so that every chunk of it is whole */
    size_t buf_bytes = reserve ? (limit_bytes + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1) : limit_bytes;
    a->buf = reserve ? colo_buffer_reserve(dev, buf_bytes, berr, sizeof berr)
                     : colo_buffer_alloc(dev, limit_bytes, berr, sizeof berr);
    if (!a->buf) {
        colo_set_err(err, errlen, "arena %s: cannot reserve %zu bytes: %s", a->name, limit_bytes, berr);
        goto out_free;
    }
    a->cap_free = 16;
    a->free_r = malloc((size_t)a->cap_free * sizeof *a->free_r);
    a->cap_tab = 64;
    a->tab = malloc(a->cap_tab * sizeof *a->tab);
    if (!a->free_r || !a->tab) {
        colo_set_err(err, errlen, "arena: out of host memory");
        goto out_buf;
    }
    if (reserve) {
        a->chunk = colo_buffer_granularity(a->buf);
        size_t n = (colo_buffer_size(a->buf) + a->chunk - 1) / a->chunk;
        if (!(a->chunk_use = calloc(n, sizeof *a->chunk_use))) { /* zero pages: free until touched */
            colo_set_err(err, errlen, "arena: out of host memory");
            goto out_buf;
        }
    }
    for (size_t i = 0; i < a->cap_tab; i++)
        a->tab[i].off = SLOT_EMPTY;
    a->free_r[0] = (range){0, limit_bytes};
    a->n_free = 1;
    pthread_mutex_init(&a->mu, NULL);
    return a;

out_buf:
    free(a->chunk_use);
    free(a->free_r);
    free(a->tab);
    colo_buffer_free(a->buf);
out_free:
    free(a);
    return NULL;
}

void colo_arena_destroy(colo_arena *a)
{
    if (!a)
        return;
    if (a->n_live)
        COLO_DEBUG("arena %s destroyed with %zu live allocations (%zu bytes)", a->name, a->n_live, a->used);
    if (a->pool) {
        colo_mem_pool *p = a->pool;
        pthread_mutex_lock(&p->mu);
        for (colo_arena **pp = &p->members; *pp; pp = &(*pp)->next_member)
            if (*pp == a) {
                *pp = a->next_member;
                break;
            }
        p->used -= a->charged;
        p->guaranteed -= a->guarantee;
        if (p->demander == a)
            p->demand_until_ns = 0, p->demander = NULL;
        pthread_mutex_unlock(&p->mu);
    }
    colo_buffer_free(a->buf);
    free(a->chunk_use);
    pthread_mutex_destroy(&a->mu);
    free(a->free_r);
    free(a->tab);
    free(a);
}

/* Rebuilds the table without tombstones, doubling it only when live entries
 * fill half of it: steady alloc/free churn must not grow it forever. */
static bool tab_rehash(colo_arena *a)
{
    size_t cap = (a->n_live + 1) * 2 > a->cap_tab ? a->cap_tab * 2 : a->cap_tab;
    live *t = malloc(cap * sizeof *t);
    if (!t)
        return false;
    for (size_t i = 0; i < cap; i++)
        t[i].off = SLOT_EMPTY;
    for (size_t i = 0; i < a->cap_tab; i++) {
        if (a->tab[i].off >= SLOT_DEAD)
            continue;
        size_t h = hash_off(a->tab[i].off, cap);
        while (t[h].off != SLOT_EMPTY)
            h = (h + 1) & (cap - 1);
        t[h] = a->tab[i];
    }
    free(a->tab);
    a->tab = t;
    a->cap_tab = cap;
    a->n_used_slots = a->n_live;
    return true;
}

static live *tab_find(colo_arena *a, size_t off)
{
    size_t h = hash_off(off, a->cap_tab);
    while (a->tab[h].off != SLOT_EMPTY) {
        if (a->tab[h].off == off)
            return &a->tab[h];
        h = (h + 1) & (a->cap_tab - 1);
    }
    return NULL;
}

static void tab_insert(colo_arena *a, live l)
{
    size_t h = hash_off(l.off, a->cap_tab);
    while (a->tab[h].off < SLOT_DEAD)
        h = (h + 1) & (a->cap_tab - 1);
    if (a->tab[h].off == SLOT_EMPTY)
        a->n_used_slots++;
    a->tab[h] = l;
    a->n_live++;
}

/* Inserts [off, off+size) into the free list, merging with neighbours. */
static bool free_insert(colo_arena *a, size_t off, size_t size)
{
    int lo = 0, hi = a->n_free;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (a->free_r[mid].off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    bool merge_prev = lo > 0 && a->free_r[lo - 1].off + a->free_r[lo - 1].size == off;
    bool merge_next = lo < a->n_free && off + size == a->free_r[lo].off;
    if (merge_prev && merge_next) {
        a->free_r[lo - 1].size += size + a->free_r[lo].size;
        memmove(&a->free_r[lo], &a->free_r[lo + 1], (size_t)(a->n_free - lo - 1) * sizeof(range));
        a->n_free--;
    } else if (merge_prev) {
        a->free_r[lo - 1].size += size;
    } else if (merge_next) {
        a->free_r[lo].off = off;
        a->free_r[lo].size += size;
    } else {
        if (a->n_free == a->cap_free) {
            range *r = realloc(a->free_r, (size_t)a->cap_free * 2 * sizeof *r);
            if (!r)
                return false;
            a->free_r = r;
            a->cap_free *= 2;
        }
        memmove(&a->free_r[lo + 1], &a->free_r[lo], (size_t)(a->n_free - lo) * sizeof(range));
        a->free_r[lo] = (range){off, size};
        a->n_free++;
    }
    return true;
}

/* ---- on-demand memory of elastic arenas: users per chunk (under a->mu) ---- */

static void chunk_span(const colo_arena *a, size_t first, size_t end, size_t *off, size_t *bytes)
{
    size_t size = colo_buffer_size(a->buf);
    *off = first * a->chunk;
    *bytes = (end * a->chunk < size ? end * a->chunk : size) - *off;
}

/* Drops one user of chunks [first, end); those left with none are given back. */
static void chunks_put(colo_arena *a, size_t first, size_t end)
{
    for (size_t c = first; c < end;) {
        COLO_ASSERT(a->chunk_use[c] > 0);
        if (--a->chunk_use[c]) {
            c++;
            continue;
        }
        size_t e = c + 1;
        while (e < end && a->chunk_use[e] == 1) {
            a->chunk_use[e] = 0;
            e++;
        }
        size_t off, bytes;
        chunk_span(a, c, e, &off, &bytes);
        colo_buffer_decommit(a->buf, off, bytes);
        c = e;
    }
}

/* One more user of every chunk [off, off + bytes) touches; the first user
 * commits it. All or nothing: COLO_ENOMEM and no change. */
static colo_status chunks_get(colo_arena *a, size_t off, size_t bytes)
{
    if (!a->chunk_use || !bytes)
        return COLO_OK;
    size_t first = off / a->chunk, end = (off + bytes - 1) / a->chunk + 1;
    for (size_t c = first; c < end;) {
        if (a->chunk_use[c]) {
            a->chunk_use[c]++;
            c++;
            continue;
        }
        size_t e = c + 1;
        while (e < end && !a->chunk_use[e])
            e++;
        size_t o, n;
        chunk_span(a, c, e, &o, &n);
        if (colo_buffer_commit(a->buf, o, n) != COLO_OK) {
            chunks_put(a, first, c);
            return COLO_ENOMEM;
        }
        for (size_t k = c; k < e; k++)
            a->chunk_use[k] = 1;
        c = e;
    }
    return COLO_OK;
}

static void chunks_release(colo_arena *a, size_t off, size_t bytes)
{
    if (a->chunk_use && bytes)
        chunks_put(a, off / a->chunk, (off + bytes - 1) / a->chunk + 1);
}

static colo_status pool_charge(colo_arena *a, size_t bytes);
static void pool_uncharge(colo_arena *a, size_t bytes);

/* Takes a range of the buffer; charges it unless reserve_only. */
static colo_status sub_alloc(colo_arena *a, size_t bytes, size_t align, void **out, bool reserve_only)
{
    if (!out)
        return COLO_EINVAL;
    *out = NULL;
    if (align == 0)
        align = 256;
    if (!a || bytes == 0 || (align & (align - 1)))
        return COLO_EINVAL;
    if (colo_fault_hit(COLO_FAULT_STALL, a->name))
        colo_sleep_ns((uint64_t)COLO_FAULT_STALL_MS * 1000000u);
    if (bytes > a->limit || colo_fault_hit(COLO_FAULT_ARENA, a->name))
        return COLO_ENOMEM;
    _Static_assert(COLO_ARENA_GRAIN_BYTES == 256, "the grain keeps every range 256-aligned");
    bytes = (bytes + COLO_ARENA_GRAIN_BYTES - 1) & ~(size_t)(COLO_ARENA_GRAIN_BYTES - 1);
    colo_status st = COLO_ENOMEM;
    pthread_mutex_lock(&a->mu);
    if ((a->n_used_slots + 1) * 4 > a->cap_tab * 3 && !tab_rehash(a))
        goto out;
    /* A free range can split into two pieces: make sure the list has room
     * first, so the allocation cannot fail half-way. */
    if (a->n_free == a->cap_free) {
        range *r = realloc(a->free_r, (size_t)a->cap_free * 2 * sizeof *r);
        if (!r)
            goto out;
        a->free_r = r;
        a->cap_free *= 2;
    }
    int best = -1;
    size_t best_size = 0, best_pad = 0;
    for (int i = 0; i < a->n_free; i++) {
        size_t start = a->free_r[i].off;
        size_t pad = ((start + align - 1) & ~(align - 1)) - start;
        if (a->free_r[i].size >= bytes + pad && (best < 0 || a->free_r[i].size < best_size)) {
            best = i;
            best_size = a->free_r[i].size;
            best_pad = pad;
        }
    }
    if (best < 0)
        goto out;
    range r = a->free_r[best];
    size_t take = bytes + best_pad;
    if (a->pool && !reserve_only && pool_charge(a, take) != COLO_OK)
        goto out;
    if (a->pool && !reserve_only && chunks_get(a, r.off, take) != COLO_OK) {
        pool_uncharge(a, take);
        goto out;
    }
    tab_insert(a, (live){r.off + best_pad, r.off, take, reserve_only && a->pool});
    if (r.size == take) {
        memmove(&a->free_r[best], &a->free_r[best + 1], (size_t)(a->n_free - best - 1) * sizeof(range));
        a->n_free--;
    } else {
        a->free_r[best].off += take;
        a->free_r[best].size -= take;
    }
    if (reserve_only && a->pool) {
        a->reserved += take;
    } else {
        a->used += take;
        if (a->used > a->peak)
            a->peak = a->used;
    }
    *out = (char *)colo_buffer_ptr(a->buf) + r.off + best_pad;
    st = COLO_OK;
out:
    pthread_mutex_unlock(&a->mu);
    return st;
}

colo_status colo_arena_alloc(colo_arena *a, size_t bytes, size_t align, void **out)
{
    return sub_alloc(a, bytes, align, out, false);
}

colo_status colo_arena_reserve(colo_arena *a, size_t bytes, size_t align, void **out)
{
    return sub_alloc(a, bytes, align, out, true);
}

void colo_arena_free(colo_arena *a, void *p)
{
    if (!a || !p)
        return;
    char *base = colo_buffer_ptr(a->buf);
    if ((char *)p < base || (char *)p >= base + a->limit) {
        COLO_ERROR("arena %s: free of %p, which it never gave out", a->name, p);
        return;
    }
    size_t off = (size_t)((char *)p - base);
    pthread_mutex_lock(&a->mu);
    live *l = tab_find(a, off);
    if (!l) {
        pthread_mutex_unlock(&a->mu);
        COLO_ERROR("arena %s: free of %p, which is not a live allocation", a->name, p);
        return;
    }
    live taken = *l;
    l->off = SLOT_DEAD;
    a->n_live--;
    if (!free_insert(a, taken.start, taken.size)) {
        /* Host memory ran out: the range leaks, the arena stays consistent. */
        COLO_ERROR("arena %s: out of host memory; %zu bytes stay unusable", a->name, taken.size);
    }
    if (taken.reserved) {
        a->reserved -= taken.size;
    } else {
        a->used -= taken.size;
        if (a->pool) {
            pool_uncharge(a, taken.size);
            chunks_release(a, taken.start, taken.size); /* physical memory follows use */
        }
    }
    pthread_mutex_unlock(&a->mu);
}

void colo_arena_get_stats(colo_arena *a, colo_arena_stats *st)
{
    memset(st, 0, sizeof *st);
    pthread_mutex_lock(&a->mu);
    st->limit_bytes = a->limit;
    st->used_bytes = a->used;
    st->peak_bytes = a->peak;
    st->guaranteed_bytes = a->limit;
    if (a->pool) {
        colo_mem_pool *p = a->pool;
        pthread_mutex_lock(&p->mu);
        st->used_bytes = a->charged;
        st->peak_bytes = a->charged_peak;
        st->guaranteed_bytes = a->guarantee;
        st->borrowed_bytes = a->charged > a->guarantee ? a->charged - a->guarantee : 0;
        st->reserved_bytes = a->reserved;
        st->reclaim_wanted_bytes = a->want;
        st->reclaims = a->reclaims;
        /* Borrowing takes memory no one is guaranteed first, then idle
         * guarantees; what is lent is shared among idle owners by their idle bytes. */
        size_t borrowed = 0, idle = 0;
        for (colo_arena *m = p->members; m; m = m->next_member) {
            borrowed += m->charged > m->guarantee ? m->charged - m->guarantee : 0;
            idle += m->guarantee > m->charged ? m->guarantee - m->charged : 0;
        }
        size_t unassigned = p->budget > p->guaranteed ? p->budget - p->guaranteed : 0;
        size_t lent = borrowed > unassigned ? borrowed - unassigned : 0;
        size_t mine = a->guarantee > a->charged ? a->guarantee - a->charged : 0;
        if (lent && idle)
            st->lent_bytes = (size_t)((double)lent * (double)mine / (double)idle);
        pthread_mutex_unlock(&p->mu);
    }
    st->n_allocs = a->n_live;
    size_t largest = 0;
    for (int i = 0; i < a->n_free; i++) {
        size_t start = a->free_r[i].off, pad = ((start + 255) & ~(size_t)255) - start;
        if (a->free_r[i].size > pad && a->free_r[i].size - pad > largest)
            largest = a->free_r[i].size - pad;
    }
    st->largest_free_bytes = largest;
    pthread_mutex_unlock(&a->mu);
}

size_t colo_arena_used(colo_arena *a)
{
    colo_arena_stats st;
    colo_arena_get_stats(a, &st);
    return st.used_bytes;
}

size_t colo_arena_peak(colo_arena *a)
{
    colo_arena_stats st;
    colo_arena_get_stats(a, &st);
    return st.peak_bytes;
}

size_t colo_arena_limit(const colo_arena *a) { return a->limit; }

void colo_arena_reset_peak(colo_arena *a)
{
    pthread_mutex_lock(&a->mu);
    a->peak = a->used;
    if (a->pool) {
        pthread_mutex_lock(&a->pool->mu);
        a->charged_peak = a->charged;
        pthread_mutex_unlock(&a->pool->mu);
    }
    pthread_mutex_unlock(&a->mu);
}

const char *colo_arena_name(const colo_arena *a) { return a->name; }
colo_device *colo_arena_device(const colo_arena *a) { return a->dev; }

bool colo_arena_is_elastic(const colo_arena *a) { return a && a->pool; }

/* ---- elastic memory ------------------------------------------------------------ */

colo_mem_pool *colo_mem_pool_create(size_t budget_bytes)
{
    colo_mem_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    pthread_mutex_init(&p->mu, NULL);
    p->budget = budget_bytes;
    p->host_allowance = SIZE_MAX; /* host memory counts once the server says how much of it is overhead */
    return p;
}

void colo_mem_pool_destroy(colo_mem_pool *p)
{
    if (!p)
        return;
    COLO_ASSERT(!p->members);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

size_t colo_mem_pool_budget(const colo_mem_pool *p) { return p->budget; }

size_t colo_mem_pool_used(colo_mem_pool *p)
{
    pthread_mutex_lock(&p->mu);
    size_t u = p->used;
    pthread_mutex_unlock(&p->mu);
    return u;
}

size_t colo_mem_pool_guaranteed(colo_mem_pool *p)
{
    pthread_mutex_lock(&p->mu);
    size_t g = p->guaranteed;
    pthread_mutex_unlock(&p->mu);
    return g;
}

colo_arena *colo_arena_create_elastic(colo_device *dev, const char *name, colo_mem_pool *pool, size_t guarantee_bytes,
                                      size_t ceiling_bytes, char *err, size_t errlen)
{
    if (!pool || guarantee_bytes == 0 || ceiling_bytes < guarantee_bytes) {
        colo_set_err(err, errlen, "arena %s: an elastic arena needs a pool and 0 < guarantee <= ceiling",
                     name ? name : "");
        return NULL;
    }
    pthread_mutex_lock(&pool->mu);
    size_t free_g = pool->budget > pool->guaranteed ? pool->budget - pool->guaranteed : 0;
    pthread_mutex_unlock(&pool->mu);
    if (guarantee_bytes > free_g) {
        colo_set_err(err, errlen, "arena %s: a guarantee of %zu bytes does not fit: %zu of the %zu-byte budget are "
                     "not guaranteed to others", name ? name : "", guarantee_bytes, free_g, pool->budget);
        return NULL;
    }
    colo_arena *a = arena_new(dev, name, ceiling_bytes, true, err, errlen);
    if (!a)
        return NULL;
    pthread_mutex_lock(&pool->mu);
    if (guarantee_bytes > pool->budget - pool->guaranteed) { /* another arena joined meanwhile */
        pthread_mutex_unlock(&pool->mu);
        colo_set_err(err, errlen, "arena %s: a guarantee of %zu bytes no longer fits the budget", a->name,
                     guarantee_bytes);
        colo_arena_destroy(a);
        return NULL;
    }
    if (guarantee_bytes > a->limit) /* the limit is rounded down to 256 bytes */
        guarantee_bytes = a->limit;
    a->pool = pool;
    a->guarantee = guarantee_bytes;
    a->guarantee_full = guarantee_bytes;
    pool->guaranteed += guarantee_bytes;
    a->next_member = pool->members;
    pool->members = a;
    pthread_mutex_unlock(&pool->mu);
    return a;
}

void colo_arena_release_guarantee(colo_arena *a)
{
    if (!a || !a->pool)
        return;
    pthread_mutex_lock(&a->pool->mu);
    a->pool->guaranteed -= a->guarantee;
    a->guarantee = 0;
    if (a->pool->demander == a)
        a->pool->demand_until_ns = 0, a->pool->demander = NULL;
    pthread_mutex_unlock(&a->pool->mu);
}

colo_status colo_arena_restore_guarantee(colo_arena *a, size_t *need_bytes, size_t *free_bytes)
{
    if (!a || !a->pool)
        return COLO_OK;
    colo_mem_pool *p = a->pool;
    colo_status st = COLO_OK;
    pthread_mutex_lock(&p->mu);
    size_t want = a->guarantee_full - a->guarantee, free_g = p->budget > p->guaranteed ? p->budget - p->guaranteed : 0;
    if (need_bytes)
        *need_bytes = want;
    if (free_bytes)
        *free_bytes = free_g;
    if (want > free_g) {
        st = COLO_ENOMEM;
    } else {
        p->guaranteed += want;
        a->guarantee = a->guarantee_full;
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

size_t colo_arena_guarantee_full(const colo_arena *a) { return a && a->pool ? a->guarantee_full : 0; }

size_t colo_arena_guarantee_now(colo_arena *a)
{
    if (!a || !a->pool)
        return 0;
    pthread_mutex_lock(&a->pool->mu);
    size_t g = a->guarantee;
    pthread_mutex_unlock(&a->pool->mu);
    return g;
}

size_t colo_arena_guarantee_idle(colo_arena *a)
{
    if (!a || !a->pool)
        return 0;
    pthread_mutex_lock(&a->pool->mu);
    size_t held = a->charged > a->evictable ? a->charged - a->evictable : 0;
    size_t idle = a->guarantee > held ? a->guarantee - held : 0;
    pthread_mutex_unlock(&a->pool->mu);
    return idle;
}

size_t colo_arena_lend_guarantee(colo_arena *a)
{
    if (!a || !a->pool)
        return 0;
    colo_mem_pool *p = a->pool;
    pthread_mutex_lock(&p->mu);
    size_t keep = a->charged < a->guarantee ? a->charged : a->guarantee;
    size_t lent = a->guarantee - keep;
    p->guaranteed -= lent;
    a->guarantee = keep;
    if (p->demander == a)
        p->demand_until_ns = 0, p->demander = NULL;
    pthread_mutex_unlock(&p->mu);
    return lent;
}

size_t colo_mem_pool_unguaranteed(colo_mem_pool *p)
{
    pthread_mutex_lock(&p->mu);
    size_t free_g = p->budget > p->guaranteed ? p->budget - p->guaranteed : 0;
    pthread_mutex_unlock(&p->mu);
    return free_g;
}

/* Under pool->mu. */
static colo_status pool_charge_locked(colo_arena *a, size_t bytes)
{
    colo_mem_pool *p = a->pool;
    if (a->charged + bytes > a->limit)
        return COLO_ENOMEM;
    bool within = a->charged + bytes <= a->guarantee;
    uint64_t now = colo_now_ns();
    if (!within && now < p->demand_until_ns)
        return COLO_ENOMEM; /* an owner is taking its guarantee back */
    if (p->used + bytes <= p->budget) {
        if (p->demander == a)
            p->demand_until_ns = 0, p->demander = NULL;
        a->charged += bytes;
        p->used += bytes;
        if (a->charged > a->charged_peak)
            a->charged_peak = a->charged;
        return COLO_OK;
    }
    if (!within) {
        /* Borrowing from a full pool: what other members hold only as a
         * cache counts as free; they are asked to drop it, and the
         * borrower tries again after their next step. */
        size_t need = p->used + bytes - p->budget, avail = 0;
        for (colo_arena *m = p->members; m; m = m->next_member)
            if (m != a)
                avail += m->evictable;
        if (avail < need)
            return COLO_ENOMEM;
        for (colo_arena *m = p->members; m && need; m = m->next_member) {
            if (m == a || !m->evictable)
                continue;
            size_t give = m->evictable < need ? m->evictable : need;
            if (m->evict_want < give)
                m->evict_want = give;
            need -= give;
        }
        return COLO_EAGAIN;
    }
    /* The owner's guarantee is lent: ask the borrowers for it. */
    size_t deficit = p->used + bytes - p->budget;
    for (colo_arena *m = p->members; m && deficit; m = m->next_member) {
        if (m == a || m->charged <= m->guarantee)
            continue;
        size_t give = m->charged - m->guarantee;
        if (give > deficit)
            give = deficit;
        if (m->want < give) {
            if (!m->want)
                m->reclaims++;
            m->want = give;
        }
        deficit -= give;
    }
    p->demand_until_ns = now + 1000ull * 1000 * 1000;
    p->demander = a;
    return COLO_EAGAIN;
}

static colo_status pool_charge(colo_arena *a, size_t bytes)
{
    pthread_mutex_lock(&a->pool->mu);
    colo_status st = pool_charge_locked(a, bytes);
    pthread_mutex_unlock(&a->pool->mu);
    return st == COLO_EAGAIN ? COLO_ENOMEM : st;
}

static void pool_uncharge(colo_arena *a, size_t bytes)
{
    colo_mem_pool *p = a->pool;
    pthread_mutex_lock(&p->mu);
    COLO_ASSERT(bytes <= a->charged);
    a->charged -= bytes;
    p->used -= bytes;
    a->want = a->want > bytes ? a->want - bytes : 0;
    if (a->charged <= a->guarantee)
        a->want = 0;
    a->evict_want = a->evict_want > bytes ? a->evict_want - bytes : 0;
    pthread_mutex_unlock(&p->mu);
}

colo_status colo_arena_charge(colo_arena *a, size_t bytes)
{
    if (!a)
        return COLO_EINVAL;
    if (!a->pool || bytes == 0)
        return COLO_OK;
    pthread_mutex_lock(&a->pool->mu);
    colo_status st = pool_charge_locked(a, bytes);
    pthread_mutex_unlock(&a->pool->mu);
    return st;
}

void colo_arena_uncharge(colo_arena *a, size_t bytes)
{
    if (a && a->pool && bytes)
        pool_uncharge(a, bytes);
}

static bool range_of(const colo_arena *a, const void *p, size_t bytes, size_t *off)
{
    const char *base = colo_buffer_ptr(a->buf);
    if ((const char *)p < base || bytes > a->limit || (size_t)((const char *)p - base) > a->limit - bytes)
        return false;
    *off = (size_t)((const char *)p - base);
    return true;
}

colo_status colo_arena_commit(colo_arena *a, void *p, size_t bytes)
{
    size_t off;
    if (!a || !p)
        return COLO_EINVAL;
    if (!a->chunk_use || !bytes)
        return COLO_OK;
    if (!range_of(a, p, bytes, &off))
        return COLO_EINVAL;
    pthread_mutex_lock(&a->mu);
    colo_status st = chunks_get(a, off, bytes);
    pthread_mutex_unlock(&a->mu);
    return st;
}

void colo_arena_decommit(colo_arena *a, void *p, size_t bytes)
{
    size_t off;
    if (!a || !p || !a->chunk_use || !bytes || !range_of(a, p, bytes, &off))
        return;
    pthread_mutex_lock(&a->mu);
    chunks_release(a, off, bytes);
    pthread_mutex_unlock(&a->mu);
}

void colo_arena_set_evictable(colo_arena *a, size_t bytes)
{
    if (!a || !a->pool)
        return;
    pthread_mutex_lock(&a->pool->mu);
    a->evictable = bytes;
    if (a->evict_want > bytes)
        a->evict_want = bytes;
    pthread_mutex_unlock(&a->pool->mu);
}

size_t colo_arena_evict_wanted_bytes(colo_arena *a)
{
    if (!a || !a->pool)
        return 0;
    pthread_mutex_lock(&a->pool->mu);
    size_t w = a->evict_want;
    pthread_mutex_unlock(&a->pool->mu);
    return w;
}

size_t colo_arena_reclaim_wanted_bytes(colo_arena *a)
{
    if (!a || !a->pool)
        return 0;
    pthread_mutex_lock(&a->pool->mu);
    size_t w = a->want;
    pthread_mutex_unlock(&a->pool->mu);
    return w;
}

/* Of held bytes, those past the allowance: counted against the budget. */
static size_t held_in_budget(const colo_mem_pool *p, size_t held)
{
    return held > p->host_allowance ? held - p->host_allowance : 0;
}

colo_status colo_mem_pool_hold(colo_mem_pool *p, size_t bytes)
{
    if (!p)
        return COLO_EINVAL;
    pthread_mutex_lock(&p->mu);
    colo_status st = COLO_ENOMEM;
    size_t more = held_in_budget(p, p->held + bytes) - held_in_budget(p, p->held);
    if (more <= p->budget - p->guaranteed) {
        p->guaranteed += more;
        p->used += more; /* past the budget while others borrow: the next owner's charge reclaims it */
        p->held += bytes;
        st = COLO_OK;
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

void colo_mem_pool_unhold(colo_mem_pool *p, size_t bytes)
{
    if (!p || !bytes)
        return;
    pthread_mutex_lock(&p->mu);
    if (bytes > p->held) {
        COLO_ERROR("memory pool: %zu bytes given back, %zu held", bytes, p->held);
        bytes = p->held;
    }
    size_t less = held_in_budget(p, p->held) - held_in_budget(p, p->held - bytes);
    p->held -= bytes;
    p->guaranteed -= less;
    p->used -= less;
    pthread_mutex_unlock(&p->mu);
}

size_t colo_mem_pool_hold_cost(colo_mem_pool *p, size_t bytes)
{
    pthread_mutex_lock(&p->mu);
    size_t more = held_in_budget(p, p->held + bytes) - held_in_budget(p, p->held);
    pthread_mutex_unlock(&p->mu);
    return more;
}

void colo_mem_pool_set_host_allowance(colo_mem_pool *p, size_t allowance_bytes)
{
    pthread_mutex_lock(&p->mu);
    COLO_ASSERT(p->held == 0); /* before the first member */
    p->host_allowance = allowance_bytes;
    pthread_mutex_unlock(&p->mu);
}

size_t colo_mem_pool_held(colo_mem_pool *p, size_t *in_budget_bytes)
{
    pthread_mutex_lock(&p->mu);
    size_t h = p->held;
    if (in_budget_bytes)
        *in_budget_bytes = held_in_budget(p, h);
    pthread_mutex_unlock(&p->mu);
    return h;
}
