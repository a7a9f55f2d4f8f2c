#include "runtime/pool.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define POOL_CHUNK_BYTES 4096u
#define POOL_ALIGN 16u

typedef struct pool_chunk {
    struct pool_chunk *next;
    size_t size, used; /* bytes of data[] */
    _Alignas(16) unsigned char data[];
} pool_chunk;

struct colo_pool {
    pool_chunk *head; /* the chunk allocations are carved from; older ones follow */
    size_t bytes;
};

colo_pool *colo_pool_create(void) { return calloc(1, sizeof(colo_pool)); }

void colo_pool_destroy(colo_pool *p)
{
    if (!p)
        return;
    for (pool_chunk *c = p->head, *nx; c; c = nx) {
        nx = c->next;
        free(c);
    }
    free(p);
}

static pool_chunk *chunk_new(colo_pool *p, size_t size)
{
    if (size > SIZE_MAX - sizeof(pool_chunk))
        return NULL;
    pool_chunk *c = malloc(sizeof *c + size);
    if (!c)
        return NULL;
    c->size = size;
    c->used = 0;
    p->bytes += sizeof *c + size;
    return c;
}

void *colo_pool_alloc(colo_pool *p, size_t n)
{
    if (!p || n == 0 || n > SIZE_MAX - POOL_ALIGN)
        return NULL;
    size_t need = (n + POOL_ALIGN - 1) & ~(size_t)(POOL_ALIGN - 1);
    pool_chunk *c = p->head;
    if (c && c->size - c->used >= need) {
        void *r = c->data + c->used;
        c->used += need;
        return r;
    }
    if (need > POOL_CHUNK_BYTES / 4) {
        /* A large block: a chunk of its own, behind the current one so that
         * the current chunk's free tail stays in use. */
        pool_chunk *big = chunk_new(p, need);
        if (!big)
            return NULL;
        big->used = need;
        if (c) {
            big->next = c->next;
            c->next = big;
        } else {
            big->next = NULL;
            p->head = big;
        }
        return big->data;
    }
    pool_chunk *nc = chunk_new(p, POOL_CHUNK_BYTES);
    if (!nc)
        return NULL;
    nc->next = c;
    p->head = nc;
    nc->used = need;
    return nc->data;
}

void *colo_pool_calloc(colo_pool *p, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    void *r = colo_pool_alloc(p, n * size);
    if (r)
        memset(r, 0, n * size);
    return r;
}

char *colo_pool_strndup(colo_pool *p, const char *s, size_t len)
{
    char *r = colo_pool_alloc(p, len + 1);
    if (!r)
        return NULL;
    memcpy(r, s, len);
    r[len] = 0;
    return r;
}

size_t colo_pool_bytes(const colo_pool *p) { return p ? p->bytes : 0; }
