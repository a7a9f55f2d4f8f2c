#include "loadtest/spec_stats.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const lt_spec_source_names[LT_SPEC_SOURCES] = {"lookup", "suffix", "draft"};

/* o's "drafted_tokens" and "accepted_tokens" into *c: false when either
 * is missing or negative. */
static bool counts_of(json_t *o, lt_spec_counts *c)
{
    json_t *d = json_object_get(o, "drafted_tokens"), *a = json_object_get(o, "accepted_tokens");
    if (!json_is_integer(d) || !json_is_integer(a) || json_integer_value(d) < 0 || json_integer_value(a) < 0)
        return false;
    c->drafted = (uint64_t)json_integer_value(d);
    c->accepted = (uint64_t)json_integer_value(a);
    return c->has = true;
}

bool lt_spec_parse(const char *body, const char *model, lt_spec_row *row)
{
    json_t *root = body ? json_loads(body, 0, NULL) : NULL;
    json_t *models = json_object_get(root, "models"), *m;
    size_t i;
    bool found = false;
    row->draft[0] = 0;
    row->has = false;
    memset(row->src, 0, sizeof row->src);
    json_array_foreach(models, i, m)
    {
        const char *name = json_string_value(json_object_get(m, "name"));
        json_t *sp = json_object_get(m, "speculative");
        lt_spec_counts all = {0};
        if (!name || strcmp(name, model) || !counts_of(sp, &all))
            continue;
        row->drafted = all.drafted;
        row->accepted = all.accepted;
        const char *dn = json_string_value(json_object_get(sp, "draft"));
        if (dn)
            snprintf(row->draft, sizeof row->draft, "%s", dn);
        json_t *by = json_object_get(sp, "sources");
        for (int k = 0; k < LT_SPEC_SOURCES; k++)
            counts_of(json_object_get(by, lt_spec_source_names[k]), &row->src[k]);
        found = row->has = true;
        break;
    }
    json_decref(root);
    return found;
}

lt_status lt_spec_fetch(const lt_target *t, const char *api_key, const char *const *models, size_t n,
                        lt_spec_row *rows, char *err, size_t errlen)
{
    int status;
    char *body = NULL;
    lt_status st = lt_http_get(t, "/v1/stats", api_key, 10.0, &status, &body, err, errlen);
    for (size_t i = 0; i < n; i++) {
        memset(&rows[i], 0, sizeof rows[i]);
        snprintf(rows[i].model, sizeof rows[i].model, "%s", models[i]);
        if (st == LT_OK && status == 200)
            lt_spec_parse(body, models[i], &rows[i]);
    }
    free(body);
    return st;
}

void lt_spec_delta(const lt_spec_row *before, const lt_spec_row *after, size_t n, lt_spec_row *out)
{
    for (size_t i = 0; i < n; i++) {
        out[i] = after[i];
        out[i].has = before[i].has && after[i].has && after[i].drafted >= before[i].drafted &&
                     after[i].accepted >= before[i].accepted;
        out[i].drafted = out[i].has ? after[i].drafted - before[i].drafted : 0;
        out[i].accepted = out[i].has ? after[i].accepted - before[i].accepted : 0;
        for (int k = 0; k < LT_SPEC_SOURCES; k++) {
            const lt_spec_counts *b = &before[i].src[k], *a = &after[i].src[k];
            lt_spec_counts *o = &out[i].src[k];
            o->has = out[i].has && b->has && a->has && a->drafted >= b->drafted && a->accepted >= b->accepted;
            o->drafted = o->has ? a->drafted - b->drafted : 0;
            o->accepted = o->has ? a->accepted - b->accepted : 0;
        }
    }
}
