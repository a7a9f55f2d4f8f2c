/* runtime/pool.h: a region allocator for one request (in the manner of
 * nginx's r->pool): many small allocations, freed together in one place.
 *
 * Allocations are bump-pointer carved from chunks of at least 4 KiB; a
 * large allocation gets a chunk of its own. Nothing is freed alone.
 *
 * Thread safety: none. A request's pool is used by one thread at a time
 * (the loop thread until the request is queued, its model's executor until
 * the outcome is handed back, then the loop thread again). */
#ifndef COLO_RUNTIME_POOL_H
#define COLO_RUNTIME_POOL_H

#include <stddef.h>

typedef struct colo_pool colo_pool;

/* NULL when out of memory. */
colo_pool *colo_pool_create(void);
/* Frees the pool and everything allocated from it. Accepts NULL. */
void colo_pool_destroy(colo_pool *p);

/* n bytes aligned to 16, valid until the pool is destroyed; NULL when out
 * of memory (or when n is 0). */
void *colo_pool_alloc(colo_pool *p, size_t n);
/* Zeroed, n * size bytes; NULL on overflow or out of memory. */
void *colo_pool_calloc(colo_pool *p, size_t n, size_t size);
/* A NUL-terminated copy of len bytes of s (which need not be terminated). */
char *colo_pool_strndup(colo_pool *p, const char *s, size_t len);
/* Bytes the pool holds from the system (chunks), for accounting. */
size_t colo_pool_bytes(const colo_pool *p);

#endif
