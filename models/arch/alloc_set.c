#include "models/arch/alloc_set.h"

#include <stdlib.h>

colo_status colo_alloc_set_take(colo_alloc_set *s, colo_arena *a, size_t bytes, void **out)
{
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 64;
        void **p = realloc(s->p, (size_t)cap * sizeof *p);
        if (!p)
            return COLO_ENOMEM;
        s->p = p;
        s->cap = cap;
    }
    colo_status st = colo_arena_alloc(a, bytes ? bytes : 1, 256, out);
    if (st == COLO_OK)
        s->p[s->n++] = *out;
    return st;
}

void colo_alloc_set_give(colo_alloc_set *s, colo_arena *a, void *p)
{
    if (!p)
        return;
    for (int i = 0; i < s->n; i++)
        if (s->p[i] == p) {
            s->p[i] = s->p[--s->n];
            break;
        }
    colo_arena_free(a, p);
}

colo_status colo_alloc_set_replace(colo_alloc_set *s, colo_arena *a, void **act, size_t bytes, int32_t **host,
                                   size_t host_n)
{
    colo_alloc_set_give(s, a, *act);
    *act = NULL;
    void *p;
    colo_status st = colo_alloc_set_take(s, a, bytes, &p);
    if (st != COLO_OK)
        return st;
    int32_t *h = realloc(*host, host_n * sizeof *h);
    if (!h) {
        colo_alloc_set_give(s, a, p);
        return COLO_ENOMEM;
    }
    *host = h;
    *act = p;
    return COLO_OK;
}

void colo_alloc_set_clear(colo_alloc_set *s, colo_arena *a)
{
    for (int i = 0; i < s->n; i++)
        colo_arena_free(a, s->p[i]);
    free(s->p);
    s->p = NULL;
    s->n = s->cap = 0;
}
