/* YAML (libyaml document API) -> colo_config, with file:line errors. */
#include "config/config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "runtime/status.h"

typedef struct {
    yaml_document_t *doc;
    const char *file;
    char *err;
    size_t errlen;
    int failed;
} pctx;

static int fail(pctx *p, const yaml_node_t *n, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(pctx *p, const yaml_node_t *n, const char *field, const char *fmt, ...)
{
    if (p->failed)
        return -1;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    colo_set_err(p->err, p->errlen, "%s:%zu: %s: %s", p->file, n ? n->start_mark.line + 1 : 0, field, msg);
    p->failed = 1;
    return -1;
}

static const char *scalar(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }

static int get_str(pctx *p, const yaml_node_t *n, const char *field, char *out, size_t cap)
{
    if (n->type != YAML_SCALAR_NODE)
        return fail(p, n, field, "expected a string");
    if (strlen(scalar(n)) >= cap)
        return fail(p, n, field, "longer than %zu characters", cap - 1);
    snprintf(out, cap, "%s", scalar(n));
    return 0;
}

static int get_int(pctx *p, const yaml_node_t *n, const char *field, int lo, int hi, int *out)
{
    if (n->type != YAML_SCALAR_NODE)
        return fail(p, n, field, "expected an integer");
    char *end;
    errno = 0;
    long v = strtol(scalar(n), &end, 10);
    if (!*scalar(n) || *end || errno)
        return fail(p, n, field, "expected an integer, got '%s'", scalar(n));
    if (v < lo || v > hi)
        return fail(p, n, field, "%ld is outside [%d, %d]", v, lo, hi);
    *out = (int)v;
    return 0;
}

static int get_num(pctx *p, const yaml_node_t *n, const char *field, double lo, double hi, double *out)
{
    if (n->type != YAML_SCALAR_NODE)
        return fail(p, n, field, "expected a number");
    char *end;
    double v = strtod(scalar(n), &end);
    if (!*scalar(n) || *end || !isfinite(v))
        return fail(p, n, field, "expected a number, got '%s'", scalar(n));
    if (v < lo || v > hi)
        return fail(p, n, field, "%g is outside [%g, %g]", v, lo, hi);
    *out = v;
    return 0;
}

/* Sizes: 1048576, 512KiB, 8GiB, 1MB, 2G ... */
static int get_size(pctx *p, const yaml_node_t *n, const char *field, uint64_t *out)
{
    if (n->type != YAML_SCALAR_NODE)
        return fail(p, n, field, "expected a size");
    char *end;
    errno = 0;
    unsigned long long v = strtoull(scalar(n), &end, 10);
    if (!*scalar(n) || errno || *scalar(n) == '-')
        return fail(p, n, field, "expected a size, got '%s'", scalar(n));
    static const struct {
        const char *sfx;
        uint64_t mul;
    } units[] = {{"", 1},          {"B", 1},           {"K", 1000},        {"KB", 1000},      {"KiB", 1ull << 10},
                 {"M", 1000000},   {"MB", 1000000},    {"MiB", 1ull << 20}, {"G", 1000000000}, {"GB", 1000000000},
                 {"GiB", 1ull << 30}, {"T", 1000000000000ull}, {"TB", 1000000000000ull}, {"TiB", 1ull << 40}};
    for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
        if (!strcmp(end, units[i].sfx)) {
            if (v > UINT64_MAX / units[i].mul)
                return fail(p, n, field, "%s is too large", scalar(n));
            *out = v * units[i].mul;
            return 0;
        }
    }
    return fail(p, n, field, "unknown size unit in '%s' (use B, KiB, MiB, GiB, KB, MB, GB)", scalar(n));
}

typedef int (*field_fn)(pctx *p, const char *key, const yaml_node_t *v, void *obj, const char *prefix);

/* Calls fn for each key of mapping n. */
static int each_key(pctx *p, const yaml_node_t *n, const char *prefix, field_fn fn, void *obj)
{
    if (n->type != YAML_MAPPING_NODE)
        return fail(p, n, prefix, "expected a mapping");
    for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = yaml_document_get_node(p->doc, pr->key), *v = yaml_document_get_node(p->doc, pr->value);
        if (!k || !v || k->type != YAML_SCALAR_NODE)
            return fail(p, k, prefix, "keys must be strings");
        for (yaml_node_pair_t *q = n->data.mapping.pairs.start; q < pr; q++) {
            yaml_node_t *k2 = yaml_document_get_node(p->doc, q->key);
            if (k2 && k2->type == YAML_SCALAR_NODE && !strcmp(scalar(k2), scalar(k)))
                return fail(p, k, prefix, "key '%s' appears twice", scalar(k));
        }
        if (fn(p, scalar(k), v, obj, prefix))
            return -1;
    }
    return 0;
}

/* dst = a "." b, cut to fit (field names are short; never fails). */
static const char *join(char *dst, size_t cap, const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > cap / 2)
        la = cap / 2;
    if (la + 1 + lb >= cap)
        lb = cap - la - 2;
    memcpy(dst, a, la);
    dst[la] = '.';
    memcpy(dst + la + 1, b, lb);
    dst[la + 1 + lb] = 0;
    return dst;
}
#define FIELD(name) join(f, sizeof f, prefix, name)

static int server_field(pctx *p, const char *key, const yaml_node_t *v, void *obj, const char *prefix)
{
    colo_config *c = obj;
    char f[128];
    if (!strcmp(key, "listen")) {
        char s[256];
        if (get_str(p, v, FIELD("listen"), s, sizeof s))
            return -1;
        char *colon = strrchr(s, ':');
        if (!colon)
            return fail(p, v, f, "expected HOST:PORT, got '%s'", s);
        *colon = 0;
        char *host = s;
        if (*host == '[' && colon > host && colon[-1] == ']') {
            host++;
            colon[-1] = 0;
        }
        char *end;
        long port = strtol(colon + 1, &end, 10);
        if (*end || port < 0 || port > 65535 || !colon[1])
            return fail(p, v, f, "port '%s' is not in 0-65535", colon + 1);
        snprintf(c->listen_host, sizeof c->listen_host, "%s", host);
        c->listen_port = (int)port;
        return 0;
    }
    if (!strcmp(key, "device")) {
        if (get_str(p, v, FIELD("device"), c->device, sizeof c->device))
            return -1;
        if (strcmp(c->device, "auto") && strcmp(c->device, "cpu") && strcmp(c->device, "cuda"))
            return fail(p, v, f, "expected auto, cpu or cuda, got '%s'", c->device);
        return 0;
    }
    if (!strcmp(key, "threads"))
        return get_int(p, v, FIELD("threads"), 0, 1024, &c->threads);
    if (!strcmp(key, "cpu_memory_bytes"))
        return get_size(p, v, FIELD("cpu_memory_bytes"), &c->cpu_memory_bytes);
    if (!strcmp(key, "api_key_env"))
        return get_str(p, v, FIELD("api_key_env"), c->api_key_env, sizeof c->api_key_env);
    if (!strcmp(key, "max_body_bytes"))
        return get_size(p, v, FIELD("max_body_bytes"), &c->max_body_bytes);
    if (!strcmp(key, "max_header_bytes"))
        return get_size(p, v, FIELD("max_header_bytes"), &c->max_header_bytes);
    if (!strcmp(key, "max_connections"))
        return get_int(p, v, FIELD("max_connections"), 1, 1000000, &c->max_connections);
    if (!strcmp(key, "read_timeout_ms"))
        return get_int(p, v, FIELD("read_timeout_ms"), 1, INT_MAX, &c->read_timeout_ms);
    if (!strcmp(key, "write_timeout_ms"))
        return get_int(p, v, FIELD("write_timeout_ms"), 1, INT_MAX, &c->write_timeout_ms);
    if (!strcmp(key, "idle_timeout_ms"))
        return get_int(p, v, FIELD("idle_timeout_ms"), 1, INT_MAX, &c->idle_timeout_ms);
    if (!strcmp(key, "shutdown_timeout_ms"))
        return get_int(p, v, FIELD("shutdown_timeout_ms"), 0, INT_MAX, &c->shutdown_timeout_ms);
    return fail(p, v, FIELD(key), "unknown key");
}

static int scheduler_field(pctx *p, const char *key, const yaml_node_t *v, void *obj, const char *prefix)
{
    colo_config *c = obj;
    char f[128];
    if (!strcmp(key, "policy")) {
        if (get_str(p, v, FIELD("policy"), c->policy, sizeof c->policy))
            return -1;
        if (strcmp(c->policy, "timeslice") && strcmp(c->policy, "spatial") && strcmp(c->policy, "priority") &&
            strcmp(c->policy, "partition"))
            return fail(p, v, f, "expected timeslice, spatial, priority or partition, got '%s'", c->policy);
        return 0;
    }
    if (!strcmp(key, "best_effort_max_steps"))
        return get_int(p, v, FIELD("best_effort_max_steps"), 0, 1024, &c->best_effort_max_steps);
    if (!strcmp(key, "best_effort_max_ops"))
        return get_int(p, v, FIELD("best_effort_max_ops"), 0, 1 << 20, &c->best_effort_max_ops);
    return fail(p, v, FIELD(key), "unknown key");
}

static int batching_field(pctx *p, const char *key, const yaml_node_t *v, void *obj, const char *prefix)
{
    colo_model_cfg *m = obj;
    char f[160];
    if (!strcmp(key, "max_batch_size"))
        return get_int(p, v, FIELD("max_batch_size"), 1, 1024, &m->max_batch_size);
    if (!strcmp(key, "max_queue"))
        return get_int(p, v, FIELD("max_queue"), 1, 1 << 20, &m->max_queue);
    if (!strcmp(key, "queue_timeout_ms"))
        return get_int(p, v, FIELD("queue_timeout_ms"), 1, INT_MAX, &m->queue_timeout_ms);
    if (!strcmp(key, "max_queue_delay_us"))
        return get_int(p, v, FIELD("max_queue_delay_us"), 0, INT_MAX, &m->max_queue_delay_us);
    if (!strcmp(key, "max_batch_prefill_tokens"))
        return get_int(p, v, FIELD("max_batch_prefill_tokens"), 1, 1 << 20, &m->max_batch_prefill_tokens);
    return fail(p, v, FIELD(key), "unknown key");
}

static int sla_field(pctx *p, const char *key, const yaml_node_t *v, void *obj, const char *prefix)
{
    colo_model_cfg *m = obj;
    char f[160];
    if (!strcmp(key, "p99_ms"))
        return get_num(p, v, FIELD("p99_ms"), 0, 1e9, &m->sla_p99_ms);
    if (!strcmp(key, "ttft_ms"))
        return get_num(p, v, FIELD("ttft_ms"), 0, 1e9, &m->sla_ttft_ms);
    if (!strcmp(key, "min_rps"))
        return get_num(p, v, FIELD("min_rps"), 0, 1e9, &m->sla_min_rps);
    if (!strcmp(key, "max_error_rate"))
        return get_num(p, v, FIELD("max_error_rate"), 0, 1, &m->sla_max_error_rate);
    return fail(p, v, FIELD(key), "unknown key");
}

typedef struct {
    char pypi[128], file[256];
} source_cfg;

static int source_field(pctx *p, const char *key, const yaml_node_t *v, void *obj, const char *prefix)
{
    source_cfg *s = obj;
    char f[160];
    if (!strcmp(key, "pypi"))
        return get_str(p, v, FIELD("pypi"), s->pypi, sizeof s->pypi);
    if (!strcmp(key, "file"))
        return get_str(p, v, FIELD("file"), s->file, sizeof s->file);
    return fail(p, v, FIELD(key), "unknown key");
}

typedef struct {
    colo_model_cfg *m;
    const char *cfg_dir;
    bool has_path, has_source, has_name;
} model_parse;

static int model_field(pctx *p, const char *key, const yaml_node_t *v, void *obj, const char *prefix)
{
    model_parse *mp = obj;
    colo_model_cfg *m = mp->m;
    char f[160];
    if (!strcmp(key, "name")) {
        mp->has_name = true;
        if (get_str(p, v, FIELD("name"), m->name, sizeof m->name))
            return -1;
        for (const char *c = m->name; *c; c++)
            if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-' ||
                  *c == '_' || *c == '.'))
                return fail(p, v, f, "'%s': use letters, digits, '-', '_' and '.'", m->name);
        return m->name[0] ? 0 : fail(p, v, f, "must not be empty");
    }
    if (!strcmp(key, "kind")) {
        char k[16];
        if (get_str(p, v, FIELD("kind"), k, sizeof k))
            return -1;
        if (!strcmp(k, "llama"))
            m->kind = COLO_KIND_LLAMA;
        else if (!strcmp(k, "bert"))
            m->kind = COLO_KIND_BERT;
        else
            return fail(p, v, f, "expected llama or bert, got '%s'", k);
        return 0;
    }
    if (!strcmp(key, "path")) {
        char raw[1024];
        mp->has_path = true;
        if (get_str(p, v, FIELD("path"), raw, sizeof raw))
            return -1;
        const char *dir = raw[0] == '/' ? "" : mp->cfg_dir;
        if (strlen(dir) + strlen(raw) + 2 > sizeof m->path)
            return fail(p, v, f, "the path is too long");
        size_t ld = strlen(dir), lr = strlen(raw);
        memcpy(m->path, dir, ld);
        if (ld)
            m->path[ld++] = '/';
        memcpy(m->path + ld, raw, lr + 1);
        return 0;
    }
    if (!strcmp(key, "source")) {
        source_cfg s = {{0}, {0}};
        mp->has_source = true;
        if (each_key(p, v, FIELD("source"), source_field, &s))
            return -1;
        if (!s.pypi[0] || !s.file[0])
            return fail(p, v, f, "needs both pypi: and file:");
        char cache[512];
        colo_config_model_cache(cache, sizeof cache);
        if (strlen(cache) + strlen(s.file) + 2 > sizeof m->path || strchr(s.file, '/'))
            return fail(p, v, f, "file '%s' must be a plain file name", s.file);
        memcpy(m->source_pypi, s.pypi, sizeof s.pypi);
        snprintf(m->path, sizeof m->path, "%s/%s", cache, s.file);
        return 0;
    }
    if (!strcmp(key, "memory_fraction"))
        return get_num(p, v, FIELD("memory_fraction"), 1e-6, 1, &m->memory_fraction);
    if (!strcmp(key, "priority")) {
        char s[16];
        if (get_str(p, v, FIELD("priority"), s, sizeof s))
            return -1;
        if (!strcmp(s, "low"))
            m->priority = 0;
        else if (!strcmp(s, "normal"))
            m->priority = 1;
        else if (!strcmp(s, "high"))
            m->priority = 2;
        else
            return fail(p, v, f, "expected high, normal or low, got '%s'", s);
        return 0;
    }
    if (!strcmp(key, "sm_share"))
        return get_num(p, v, FIELD("sm_share"), 1e-6, 1, &m->sm_share);
    if (!strcmp(key, "max_seq_len"))
        return get_int(p, v, FIELD("max_seq_len"), 8, 1 << 20, &m->max_seq_len);
    if (!strcmp(key, "kv_block_size"))
        return get_int(p, v, FIELD("kv_block_size"), 1, 1024, &m->kv_block_size);
    if (!strcmp(key, "batching"))
        return each_key(p, v, FIELD("batching"), batching_field, m);
    if (!strcmp(key, "sla"))
        return each_key(p, v, FIELD("sla"), sla_field, m);
    return fail(p, v, FIELD(key), "unknown key");
}

static void defaults(colo_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->listen_host, sizeof c->listen_host, "127.0.0.1");
    c->listen_port = 8080;
    snprintf(c->device, sizeof c->device, "auto");
    c->max_body_bytes = 1 << 20;
    c->max_header_bytes = 16 << 10;
    c->max_connections = 4096;
    c->read_timeout_ms = 30000;
    c->write_timeout_ms = 30000;
    c->idle_timeout_ms = 60000;
    c->shutdown_timeout_ms = 10000;
    snprintf(c->policy, sizeof c->policy, "priority");
    c->best_effort_max_ops = 8;
}

static void model_defaults(colo_model_cfg *m)
{
    memset(m, 0, sizeof *m);
    m->priority = 1;
    m->max_batch_size = 32;
    m->max_queue = 256;
    m->queue_timeout_ms = 30000;
    m->max_queue_delay_us = 2000;
    m->max_batch_prefill_tokens = 512;
    m->kv_block_size = 16;
}

static int top_field(pctx *p, const char *key, const yaml_node_t *v, void *obj, const char *prefix)
{
    (void)prefix;
    colo_config *c = obj;
    if (!strcmp(key, "server"))
        return each_key(p, v, "server", server_field, c);
    if (!strcmp(key, "scheduler"))
        return each_key(p, v, "scheduler", scheduler_field, c);
    if (!strcmp(key, "models")) {
        if (v->type != YAML_SEQUENCE_NODE)
            return fail(p, v, "models", "expected a list of models");
        char dir[512];
        snprintf(dir, sizeof dir, "%.511s", p->file);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = 0;
        else
            dir[0] = 0;
        for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
            yaml_node_t *mn = yaml_document_get_node(p->doc, *it);
            if (c->n_models == COLO_CFG_MAX_MODELS)
                return fail(p, mn, "models", "at most %d models", COLO_CFG_MAX_MODELS);
            char prefix2[32];
            snprintf(prefix2, sizeof prefix2, "models[%d]", c->n_models);
            colo_model_cfg *m = &c->models[c->n_models];
            model_defaults(m);
            m->line = mn ? (int)mn->start_mark.line + 1 : 0;
            model_parse mp = {m, dir, false, false, false};
            if (each_key(p, mn, prefix2, model_field, &mp))
                return -1;
            if (!mp.has_name)
                return fail(p, mn, prefix2, "name: is required");
            if (mp.has_path == mp.has_source)
                return fail(p, mn, prefix2, "give exactly one of path: or source: {pypi, file}");
            if (m->memory_fraction == 0)
                return fail(p, mn, prefix2, "memory_fraction: is required");
            for (int j = 0; j < c->n_models; j++)
                if (!strcmp(c->models[j].name, m->name))
                    return fail(p, mn, prefix2, "model name '%s' is already used (line %d)", m->name,
                                c->models[j].line);
            c->n_models++;
        }
        return 0;
    }
    return fail(p, v, key, "unknown key");
}

void colo_config_model_cache(char *buf, size_t len)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(buf, len, "%s/colo/models", xdg);
    else
        snprintf(buf, len, "%s/.cache/colo/models", home && *home ? home : ".");
}

int colo_config_parse(const char *yaml, size_t len, const char *file, colo_config *cfg, char *err, size_t errlen)
{
    defaults(cfg);
    snprintf(cfg->file, sizeof cfg->file, "%s", file);
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        colo_set_err(err, errlen, "%s: out of memory", file);
        return COLO_ENOMEM;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    if (!yaml_parser_load(&parser, &doc)) {
        colo_set_err(err, errlen, "%s:%zu: YAML syntax error: %s", file, parser.problem_mark.line + 1,
                     parser.problem ? parser.problem : "?");
        yaml_parser_delete(&parser);
        return COLO_EINVAL;
    }
    pctx p = {&doc, file, err, errlen, 0};
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    int rc = 0;
    if (!root)
        rc = fail(&p, NULL, "(document)", "the file is empty");
    else
        rc = each_key(&p, root, "(top level)", top_field, cfg);
    if (!rc) {
        double sum = 0, shares = 0;
        for (int i = 0; i < cfg->n_models; i++) {
            sum += cfg->models[i].memory_fraction;
            shares += cfg->models[i].sm_share;
            if (cfg->models[i].sm_share > 0 && strcmp(cfg->policy, "partition")) {
                colo_set_err(err, errlen, "%s:%d: models[%d].sm_share: only used with scheduler.policy: partition",
                             file, cfg->models[i].line, i);
                rc = -1;
                break;
            }
        }
        if (!rc && sum > 1.0 + 1e-9) {
            colo_set_err(err, errlen, "%s:%d: models: memory fractions sum to %.3f, past 1.0", file,
                         cfg->n_models ? cfg->models[cfg->n_models - 1].line : 0, sum);
            rc = -1;
        }
        if (!rc && shares > 1.0 + 1e-9) {
            colo_set_err(err, errlen, "%s: models: sm_share values sum to %.3f, past 1.0", file, shares);
            rc = -1;
        }
        if (!rc && cfg->n_models == 0) {
            colo_set_err(err, errlen, "%s: models: at least one model is needed", file);
            rc = -1;
        }
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc ? COLO_EINVAL : COLO_OK;
}

int colo_config_load(const char *path, colo_config *cfg, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        colo_set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return COLO_EIO;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *nb = cap > (16u << 20) ? NULL : realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                colo_set_err(err, errlen, "%s: too large or out of memory", path);
                return COLO_EINVAL;
            }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
    }
    fclose(f);
    int rc = colo_config_parse(buf ? buf : "", len, path, cfg, err, errlen);
    free(buf);
    return rc;
}
