#include "loadtest/spec_stats.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool lt_spec_parse(const char *body, const char *model, uint64_t *drafted, uint64_t *accepted, char *draft,
                   size_t cap)
{
    json_t *root = body ? json_loads(body, 0, NULL) : NULL;
    json_t *models = json_object_get(root, "models"), *m;
    size_t i;
    bool found = false;
    if (cap)
        draft[0] = 0;
    json_array_foreach(models, i, m)
    {
        const char *name = json_string_value(json_object_get(m, "name"));
        json_t *sp = json_object_get(m, "speculative");
        json_t *d = json_object_get(sp, "drafted_tokens"), *a = json_object_get(sp, "accepted_tokens");
        if (!name || strcmp(name, model) || !json_is_integer(d) || !json_is_integer(a) || json_integer_value(d) < 0 ||
            json_integer_value(a) < 0)
            continue;
        *drafted = (uint64_t)json_integer_value(d);
        *accepted = (uint64_t)json_integer_value(a);
        const char *dn = json_string_value(json_object_get(sp, "draft"));
        if (dn && cap)
            snprintf(draft, cap, "%s", dn);
        found = true;
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
            rows[i].has = lt_spec_parse(body, models[i], &rows[i].drafted, &rows[i].accepted, rows[i].draft,
                                        sizeof rows[i].draft);
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
    }
}
