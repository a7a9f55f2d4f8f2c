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

void colo_alloc_set_clear(colo_alloc_set *s, colo_arena *a)
{
    for (int i = 0; i < s->n; i++)
        colo_arena_free(a, s->p[i]);
    free(s->p);
    s->p = NULL;
    s->n = s->cap = 0;
}
