/* loadtest/sla.c: SLA parsing (command line and YAML) and evaluation. */
#include "loadtest/sla.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "loadtest/workload.h"

static lt_sla *sla_get(lt_sla_set *set, const char *model, size_t model_len)
{
    for (size_t i = 0; i < set->n; i++)
        if (strlen(set->v[i].model) == model_len && memcmp(set->v[i].model, model, model_len) == 0)
            return &set->v[i];
    if (model_len >= sizeof set->v[0].model)
        return NULL;
    lt_sla *v = realloc(set->v, (set->n + 1) * sizeof *v);
    if (!v)
        return NULL;
    set->v = v;
    lt_sla *s = &v[set->n++];
    memset(s, 0, sizeof *s);
    memcpy(s->model, model, model_len);
    s->p99_ms = s->ttft_ms = s->min_rps = s->max_error_rate = NAN;
    return s;
}

static bool parse_number(const char *text, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || errno || !isfinite(v) || v < 0)
        return false;
    *out = v;
    return true;
}

/* Sets one constraint; false on an unknown key or bad value (why in err). */
static bool sla_set_key(lt_sla *s, const char *key, const char *value, char *err, size_t errlen)
{
    double v;
    if (!parse_number(value, &v)) {
        lt_set_err(err, errlen, "%s: '%s' is not a non-negative number", key, value);
        return false;
    }
    if (strcmp(key, "p99_ms") == 0)
        s->p99_ms = v;
    else if (strcmp(key, "ttft_ms") == 0)
        s->ttft_ms = v;
    else if (strcmp(key, "min_rps") == 0)
        s->min_rps = v;
    else if (strcmp(key, "tpot_ms") == 0)
        (void)v; /* a per-request deadline the server's SLO counters check (colo_model_slo_requests_total) */
    else if (strcmp(key, "max_error_rate") == 0 && v <= 1.0)
        s->max_error_rate = v;
    else if (strcmp(key, "max_error_rate") == 0) {
        lt_set_err(err, errlen, "max_error_rate: %s is above 1", value);
        return false;
    } else {
        lt_set_err(err, errlen, "unknown constraint '%s' (p99_ms, ttft_ms, min_rps, max_error_rate)", key);
        return false;
    }
    return true;
}

lt_status lt_sla_parse_arg(const char *arg, lt_sla_set *set, char *err, size_t errlen)
{
    const char *colon = strchr(arg, ':');
    if (!colon || colon == arg || colon[1] == '\0') {
        lt_set_err(err, errlen, "--sla '%s': expected NAME:key=value[,key=value...]", arg);
        return LT_EINVAL;
    }
    char *list = strdup(colon + 1);
    if (!list) {
        lt_set_err(err, errlen, "out of memory");
        return LT_ENOMEM;
    }
    lt_sla tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.p99_ms = tmp.ttft_ms = tmp.min_rps = tmp.max_error_rate = NAN;
    lt_status st = LT_OK;
    char why[192];
    char *save = NULL;
    for (char *item = strtok_r(list, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq) {
            lt_set_err(err, errlen, "--sla '%s': '%s' is not key=value", arg, item);
            st = LT_EINVAL;
            goto out_free_list;
        }
        *eq = '\0';
        if (!sla_set_key(&tmp, item, eq + 1, why, sizeof why)) {
            lt_set_err(err, errlen, "--sla '%s': %s", arg, why);
            st = LT_EINVAL;
            goto out_free_list;
        }
    }
    lt_sla *s = sla_get(set, arg, (size_t)(colon - arg));
    if (!s) {
        lt_set_err(err, errlen, "--sla '%s': model name too long or out of memory", arg);
        st = LT_EINVAL;
        goto out_free_list;
    }
    if (!isnan(tmp.p99_ms)) s->p99_ms = tmp.p99_ms;
    if (!isnan(tmp.ttft_ms)) s->ttft_ms = tmp.ttft_ms;
    if (!isnan(tmp.min_rps)) s->min_rps = tmp.min_rps;
    if (!isnan(tmp.max_error_rate)) s->max_error_rate = tmp.max_error_rate;
out_free_list:
    free(list);
    return st;
}

/* ---- YAML ---------------------------------------------------------------- */

static const char *scalar(yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static yaml_node_t *map_get(yaml_document_t *doc, yaml_node_t *map, const char *key)
{
    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        const char *k = scalar(yaml_document_get_node(doc, p->key));
        if (k && strcmp(k, key) == 0)
            return yaml_document_get_node(doc, p->value);
    }
    return NULL;
}

static lt_status sla_from_node(const char *path, yaml_document_t *doc, yaml_node_t *node,
                               const char *model, lt_sla_set *set, char *err, size_t errlen)
{
    if (!node || node->type != YAML_MAPPING_NODE) {
        lt_set_err(err, errlen, "%s:%zu: the sla of '%s' must be a mapping", path,
                   node ? node->start_mark.line + 1 : 0, model);
        return LT_EFORMAT;
    }
    lt_sla *s = sla_get(set, model, strlen(model));
    if (!s) {
        lt_set_err(err, errlen, "%s: model name '%s' too long or out of memory", path, model);
        return LT_EINVAL;
    }
    char why[192];
    for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = yaml_document_get_node(doc, p->key), *vn = yaml_document_get_node(doc, p->value);
        const char *k = scalar(kn), *v = scalar(vn);
        if (!k || !v || !sla_set_key(s, k, v, why, sizeof why)) {
            lt_set_err(err, errlen, "%s:%zu: %s", path, kn->start_mark.line + 1,
                       k && v ? why : "constraints are key: number");
            return LT_EFORMAT;
        }
    }
    return LT_OK;
}

lt_status lt_sla_load_file(const char *path, lt_sla_set *set, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        lt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return LT_EIO;
    }
    lt_status st = LT_OK;
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        fclose(f);
        lt_set_err(err, errlen, "out of memory");
        return LT_ENOMEM;
    }
    yaml_parser_set_input_file(&parser, f);
    if (!yaml_parser_load(&parser, &doc)) {
        lt_set_err(err, errlen, "%s:%zu:%zu: %s", path, parser.problem_mark.line + 1,
                   parser.problem_mark.column + 1, parser.problem ? parser.problem : "YAML error");
        st = LT_EFORMAT;
        goto out_parser;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root || root->type != YAML_MAPPING_NODE) {
        lt_set_err(err, errlen, "%s: expected a mapping (a colo config, or model name -> sla)", path);
        st = LT_EFORMAT;
        goto out_doc;
    }
    yaml_node_t *models = map_get(&doc, root, "models");
    if (models && models->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *it = models->data.sequence.items.start;
             it < models->data.sequence.items.top && st == LT_OK; it++) {
            yaml_node_t *m = yaml_document_get_node(&doc, *it);
            const char *name = scalar(map_get(&doc, m, "name"));
            if (!name) {
                lt_set_err(err, errlen, "%s:%zu: a model without a name", path, m->start_mark.line + 1);
                st = LT_EFORMAT;
                break;
            }
            yaml_node_t *sla = map_get(&doc, m, "sla");
            if (sla)
                st = sla_from_node(path, &doc, sla, name, set, err, errlen);
        }
    } else {
        for (yaml_node_pair_t *p = root->data.mapping.pairs.start;
             p < root->data.mapping.pairs.top && st == LT_OK; p++) {
            yaml_node_t *kn = yaml_document_get_node(&doc, p->key);
            const char *name = scalar(kn);
            if (!name) {
                lt_set_err(err, errlen, "%s:%zu: model names are strings", path, kn->start_mark.line + 1);
                st = LT_EFORMAT;
                break;
            }
            st = sla_from_node(path, &doc, yaml_document_get_node(&doc, p->value), name, set, err, errlen);
        }
    }
out_doc:
    yaml_document_delete(&doc);
out_parser:
    yaml_parser_delete(&parser);
    fclose(f);
    return st;
}

const lt_sla *lt_sla_find(const lt_sla_set *set, const char *model)
{
    for (size_t i = 0; i < set->n; i++)
        if (strcmp(set->v[i].model, model) == 0)
            return &set->v[i];
    return NULL;
}

void lt_sla_set_free(lt_sla_set *set)
{
    if (!set)
        return;
    free(set->v);
    set->v = NULL;
    set->n = 0;
}

static bool check_push(lt_sla_check **v, size_t *n, const char *model, const char *constraint,
                       double measured, double bound, bool upper, bool skipped)
{
    lt_sla_check *nv = realloc(*v, (*n + 1) * sizeof *nv);
    if (!nv)
        return false;
    *v = nv;
    lt_sla_check *c = &nv[(*n)++];
    memset(c, 0, sizeof *c);
    snprintf(c->model, sizeof c->model, "%s", model);
    c->constraint = constraint;
    c->measured = measured;
    c->bound = bound;
    c->skipped = skipped;
    c->pass = skipped || (!isnan(measured) && (upper ? measured <= bound : measured >= bound));
    return true;
}

lt_status lt_sla_evaluate(const lt_sla_set *set, const lt_result *results, size_t n,
                          bool streamed, lt_sla_check **checks, size_t *n_checks)
{
    *checks = NULL;
    *n_checks = 0;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        const lt_result *r = &results[i];
        const lt_sla *s = lt_sla_find(set, r->model);
        if (!s)
            continue;
        if (!isnan(s->p99_ms))
            ok = ok && check_push(checks, n_checks, r->model, "p99_ms", r->lat.p99, s->p99_ms, true, false);
        if (!isnan(s->ttft_ms))
            ok = ok && check_push(checks, n_checks, r->model, "ttft_ms", r->ttft.p99, s->ttft_ms, true, !streamed);
        if (!isnan(s->min_rps))
            ok = ok && check_push(checks, n_checks, r->model, "min_rps", r->rps, s->min_rps, false, false);
        if (!isnan(s->max_error_rate))
            ok = ok && check_push(checks, n_checks, r->model, "max_error_rate",
                                  r->ok + lt_result_errors(r) ? r->error_rate : NAN, s->max_error_rate,
                                  true, false);
    }
    if (!ok) {
        free(*checks);
        *checks = NULL;
        *n_checks = 0;
        return LT_ENOMEM;
    }
    return LT_OK;
}
