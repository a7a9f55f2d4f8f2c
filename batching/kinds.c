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

/* The names of the kinds for which want(kind, cap) holds, comma-separated. */
static void names_where(bool (*want)(const colo_model_kind *k, colo_kind_cap cap), colo_kind_cap cap, char *buf,
                        size_t cap_bytes)
{
    size_t o = 0;
    if (cap_bytes)
        buf[0] = 0;
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds && o < cap_bytes; i++)
        if (!want || want(kinds[i], cap))
            o += (size_t)snprintf(buf + o, cap_bytes - o, "%s%s", o ? ", " : "", kinds[i]->name);
}

void colo_kind_names(char *buf, size_t cap) { names_where(NULL, COLO_KIND_CAN_ADAPTERS, buf, cap); }

bool colo_kind_can(const colo_model_kind *k, colo_kind_cap cap)
{
    if (!k)
        return false;
    switch (cap) {
    case COLO_KIND_CAN_ADAPTERS: return k->adapter_add != NULL;
    case COLO_KIND_CAN_DETOKENIZE: return k->detokenize != NULL;
    case COLO_KIND_CAN_SLEEP: return k->sleep && k->wake;
    }
    return false;
}

bool colo_kind_named_can(const char *name, colo_kind_cap cap) { return colo_kind_can(colo_kind_find(name), cap); }

void colo_kind_names_that_can(colo_kind_cap cap, char *buf, size_t cap_bytes)
{
    names_where(colo_kind_can, cap, buf, cap_bytes);
}
