/* The registry of model kinds: one line per kind. */
#include "batching/kind.h"

#include <stdio.h>
#include <string.h>

extern const colo_model_kind colo_kind_llama;
extern const colo_model_kind colo_kind_bert;

static const colo_model_kind *const kinds[] = {
    &colo_kind_llama,
    &colo_kind_bert,
};

const colo_model_kind *colo_kind_find(const char *name)
{
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        if (!strcmp(kinds[i]->name, name))
            return kinds[i];
    return NULL;
}

void colo_kind_names(char *buf, size_t cap)
{
    size_t o = 0;
    if (cap)
        buf[0] = 0;
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%s", i ? ", " : "", kinds[i]->name);
}
