/* YAML (libyaml's document API) -> colo_config, with FILE:LINE:COLUMN errors. */
#include "config/config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define FRACTION_SLACK 1e-9

typedef struct parse_ctx {
    yaml_document_t *doc;
    const char *file;
    char dir[1024]; /* the config file's folder, "" for the working directory */
    char *err;
    size_t errlen;
    bool failed;
    const yaml_node_t *key; /* the key being read, for "unknown key" */
} parse_ctx;

/* Per-model marks for the checks that run after every model is read. */
typedef struct model_marks {
    colo_cfg_mark fraction, sm_share, share, max_fraction;
    bool has_name, has_kind, has_path, has_source, has_fraction, has_seq_len;
} model_marks;

static colo_cfg_mark mark_of(const yaml_node_t *n)
{
    colo_cfg_mark m = {0, 0};
    if (n) {
        m.line = (int)n->start_mark.line + 1;
        m.column = (int)n->start_mark.column + 1;
    }
    return m;
}

static int fail_at(parse_ctx *p, colo_cfg_mark m, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_at(parse_ctx *p, colo_cfg_mark m, const char *field, const char *fmt, ...)
{
    if (p->failed)
        return -1;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    colo_set_err(p->err, p->errlen, "%s:%d:%d: %s: %s", p->file, m.line, m.column, field, msg);
    p->failed = true;
    return -1;
}
#define fail(p, node, field, ...) fail_at((p), mark_of(node), (field), __VA_ARGS__)

static const char *scalar(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }

/* ---- typed values ------------------------------------------------------------ */

static int get_str(parse_ctx *p, const yaml_node_t *n, const char *field, char *out, size_t cap)
{
    if (n->type != YAML_SCALAR_NODE)
        return fail(p, n, field, "expected a string");
    if (!scalar(n)[0])
        return fail(p, n, field, "must not be empty");
    if (strlen(scalar(n)) >= cap)
        return fail(p, n, field, "longer than %zu characters", cap - 1);
    memcpy(out, scalar(n), strlen(scalar(n)) + 1);
    return 0;
}

/* Whether n is an unquoted scalar that YAML (and JSON, which is read as
 * YAML) types as null, a boolean or a number: for a field that must be a
 * string, `null`, `true` or `5` are not strings ("5" quoted is). */
static bool plain_non_string(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    static const char *const words[] = {"null", "Null", "NULL", "~",     "true",  "True",  "TRUE",
                                        "false", "False", "FALSE", ".inf", "-.inf", ".nan", ".NaN"};
    const char *s = scalar(n);
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        if (!strcmp(s, words[i]))
            return true;
    if (!((*s >= '0' && *s <= '9') || *s == '-' || *s == '+' || *s == '.')) /* strtod's "nan", "inf" are names */
        return false;
    char *end;
    (void)strtod(s, &end);
    return end != s && !*end;
}

static int get_int(parse_ctx *p, const yaml_node_t *n, const char *field, long lo, long hi, int *out)
{
    if (n->type != YAML_SCALAR_NODE)
        return fail(p, n, field, "expected an integer");
    char *end;
    errno = 0;
    long v = strtol(scalar(n), &end, 10);
    if (!scalar(n)[0] || *end || errno)
        return fail(p, n, field, "expected an integer, got '%s'", scalar(n));
    if (v < lo || v > hi)
        return fail(p, n, field, "%ld is outside [%ld, %ld]", v, lo, hi);
    *out = (int)v;
    return 0;
}

/* A number in [lo, hi], or in (lo, hi] when open_lo. */
static int get_num(parse_ctx *p, const yaml_node_t *n, const char *field, double lo, bool open_lo, double hi,
                   double *out)
{
    if (n->type != YAML_SCALAR_NODE)
        return fail(p, n, field, "expected a number");
    char *end;
    errno = 0;
    double v = strtod(scalar(n), &end);
    if (!scalar(n)[0] || *end || errno || !isfinite(v))
        return fail(p, n, field, "expected a number, got '%s'", scalar(n));
    if ((open_lo ? v <= lo : v < lo) || v > hi)
        return fail(p, n, field, "%g is outside %c%g, %g]", v, open_lo ? '(' : '[', lo, hi);
    *out = v;
    return 0;
}

colo_status colo_config_parse_size(const char *s, uint64_t *out)
{
    static const struct {
        const char *suffix;
        uint64_t mul;
    } units[] = {
        {"", 1},           {"B", 1},
        {"K", 1000},       {"KB", 1000},       {"KiB", 1ull << 10},
        {"M", 1000000},    {"MB", 1000000},    {"MiB", 1ull << 20},
        {"G", 1000000000}, {"GB", 1000000000}, {"GiB", 1ull << 30},
        {"T", 1000000000000ull}, {"TB", 1000000000000ull}, {"TiB", 1ull << 40},
    };
    if (!s || s[0] < '0' || s[0] > '9')
        return COLO_EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return COLO_EINVAL;
    while (*end == ' ')
        end++;
    for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
        if (!strcmp(end, units[i].suffix)) {
            if (v > UINT64_MAX / units[i].mul)
                return COLO_EINVAL;
            *out = (uint64_t)v * units[i].mul;
            return COLO_OK;
        }
    }
    return COLO_EINVAL;
}

static int get_bool(parse_ctx *p, const yaml_node_t *n, const char *field, bool *out)
{
    if (n->type != YAML_SCALAR_NODE || (strcmp(scalar(n), "true") && strcmp(scalar(n), "false")))
        return fail(p, n, field, "expected true or false");
    *out = !strcmp(scalar(n), "true");
    return 0;
}

static int get_size(parse_ctx *p, const yaml_node_t *n, const char *field, uint64_t lo, uint64_t *out)
{
    if (n->type != YAML_SCALAR_NODE)
        return fail(p, n, field, "expected a size");
    uint64_t v;
    if (colo_config_parse_size(scalar(n), &v) != COLO_OK)
        return fail(p, n, field, "expected a size such as 1048576, 64KiB, 8GiB or 2GB, got '%s'", scalar(n));
    if (v < lo)
        return fail(p, n, field, "%s is below the minimum of %llu bytes", scalar(n), (unsigned long long)lo);
    *out = v;
    return 0;
}

/* One of names[] (NULL-terminated); its index into *out. */
static int get_enum(parse_ctx *p, const yaml_node_t *n, const char *field, const char *const *names, int *out)
{
    char s[32];
    if (get_str(p, n, field, s, sizeof s))
        return -1;
    for (int i = 0; names[i]; i++) {
        if (!strcmp(s, names[i])) {
            *out = i;
            return 0;
        }
    }
    char allowed[256] = "";
    for (int i = 0; names[i]; i++)
        snprintf(allowed + strlen(allowed), sizeof allowed - strlen(allowed), "%s%s", i ? ", " : "", names[i]);
    return fail(p, n, field, "expected one of %s, got '%s'", allowed, s);
}

/* ---- mappings ------------------------------------------------------------------ */

typedef int (*field_fn)(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *field);

/* dst = prefix "." key (field names are short: cut rather than fail). */
static void join(char *dst, size_t cap, const char *prefix, const char *key)
{
    size_t lp = strlen(prefix), lk = strlen(key), o = 0;
    if (lp > cap - 1)
        lp = cap - 1;
    memcpy(dst, prefix, lp);
    o = lp;
    if (lp && o < cap - 1)
        dst[o++] = '.';
    if (lk > cap - 1 - o)
        lk = cap - 1 - o;
    memcpy(dst + o, key, lk);
    dst[o + lk] = 0;
}

/* Calls fn(key, value, obj, "prefix.key") for each pair of mapping n. */
static int each_key(parse_ctx *p, const yaml_node_t *n, const char *prefix, field_fn fn, void *obj)
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
        char field[192];
        join(field, sizeof field, prefix, scalar(k));
        p->key = k;
        if (fn(p, scalar(k), v, obj, field))
            return -1;
    }
    return 0;
}

#define unknown_key(p, v, field) ((void)(v), fail((p), (p)->key, (field), "unknown key"))

/* ---- server ---------------------------------------------------------------------- */

static int parse_listen(parse_ctx *p, const yaml_node_t *v, const char *field, colo_server_cfg *s)
{
    char buf[300];
    if (get_str(p, v, field, buf, sizeof buf))
        return -1;
    char *host = buf, *port;
    if (buf[0] == '[') {
        char *close = strchr(buf, ']');
        if (!close || close[1] != ':')
            return fail(p, v, field, "expected [IPV6]:PORT, got '%s'", buf);
        *close = 0;
        host = buf + 1;
        port = close + 2;
    } else {
        char *colon = strrchr(buf, ':');
        if (!colon || strchr(buf, ':') != colon)
            return fail(p, v, field, "expected HOST:PORT or [IPV6]:PORT, got '%s'", buf);
        *colon = 0;
        port = colon + 1;
    }
    char *end;
    errno = 0;
    long n = strtol(port, &end, 10);
    if (!host[0] || !port[0] || *end || errno || n < 0 || n > 65535)
        return fail(p, v, field, "expected HOST:PORT with a port in 0-65535, got '%s'", scalar(v));
    if (strlen(host) >= sizeof s->listen_host)
        return fail(p, v, field, "host name too long");
    memcpy(s->listen_host, host, strlen(host) + 1);
    s->listen_port = (int)n;
    return 0;
}

static int server_field(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    colo_server_cfg *s = obj;
    static const char *const devices[] = {"auto", "cpu", "cuda", NULL};
    if (!strcmp(key, "listen"))
        return parse_listen(p, v, f, s);
    if (!strcmp(key, "device")) {
        int d;
        if (get_enum(p, v, f, devices, &d))
            return -1;
        s->device = (colo_device_choice)d;
        return 0;
    }
    if (!strcmp(key, "threads"))
        return get_int(p, v, f, 0, 4096, &s->threads);
    if (!strcmp(key, "cpu_memory_bytes"))
        return get_size(p, v, f, 0, &s->cpu_memory_bytes);
    if (!strcmp(key, "gpu_memory_bytes"))
        return get_size(p, v, f, 0, &s->gpu_memory_bytes);
    if (!strcmp(key, "elastic_memory"))
        return get_bool(p, v, f, &s->elastic_memory);
    if (!strcmp(key, "cuda_graphs"))
        return get_bool(p, v, f, &s->cuda_graphs);
    if (!strcmp(key, "api_key_env") || !strcmp(key, "admin_key_env")) {
        char *dst = key[1] == 'p' ? s->api_key_env : s->admin_key_env;
        if (get_str(p, v, f, dst, sizeof s->api_key_env))
            return -1;
        for (const char *c = dst; *c; c++)
            if (!(*c == '_' || (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') ||
                  (*c >= '0' && *c <= '9' && c != dst)))
                return fail(p, v, f, "'%s' is not an environment variable name", dst);
        return 0;
    }
    if (!strcmp(key, "max_body_bytes"))
        return get_size(p, v, f, 1, &s->max_body_bytes);
    if (!strcmp(key, "max_header_bytes"))
        return get_size(p, v, f, 256, &s->max_header_bytes);
    if (!strcmp(key, "max_connections"))
        return get_int(p, v, f, 1, 1000000, &s->max_connections);
    if (!strcmp(key, "read_timeout_ms"))
        return get_int(p, v, f, 1, INT_MAX, &s->read_timeout_ms);
    if (!strcmp(key, "write_timeout_ms"))
        return get_int(p, v, f, 1, INT_MAX, &s->write_timeout_ms);
    if (!strcmp(key, "idle_timeout_ms"))
        return get_int(p, v, f, 1, INT_MAX, &s->idle_timeout_ms);
    if (!strcmp(key, "shutdown_timeout_ms"))
        return get_int(p, v, f, 0, INT_MAX, &s->shutdown_timeout_ms);
    if (!strcmp(key, "drain_delay_ms"))
        return get_int(p, v, f, 0, INT_MAX, &s->drain_delay_ms);
    if (!strcmp(key, "max_unsent_bytes"))
        return get_size(p, v, f, 1, &s->max_unsent_bytes);
    if (!strcmp(key, "telemetry_interval_ms"))
        return get_int(p, v, f, 100, 3600000, &s->telemetry_interval_ms);
    return unknown_key(p, v, f);
}

/* ---- scheduler ------------------------------------------------------------------- */

static int cap_field(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    colo_scheduler_cfg *s = obj;
    if (!strcmp(key, "max_inflight_steps"))
        return get_int(p, v, f, 0, 1024, &s->best_effort_max_steps);
    if (!strcmp(key, "max_inflight_ops"))
        return get_int(p, v, f, 0, 1 << 20, &s->best_effort_max_ops);
    if (!strcmp(key, "max_inflight_us"))
        return get_int(p, v, f, 0, INT_MAX, &s->best_effort_max_us);
    return unknown_key(p, v, f);
}

static int scheduler_field(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    colo_scheduler_cfg *s = obj;
    static const char *const policies[] = {"timeslice", "spatial", "priority", "partition", "fair", "deadline", NULL};
    if (!strcmp(key, "policy")) {
        int i;
        if (get_enum(p, v, f, policies, &i))
            return -1;
        /* names[] follows colo_sched_policy; the runtime's parser is the authority */
        return colo_sched_policy_parse(policies[i], &s->policy) == COLO_OK ? 0 : fail(p, v, f, "unknown policy");
    }
    if (!strcmp(key, "best_effort_cap"))
        return each_key(p, v, f, cap_field, s);
    if (!strcmp(key, "quantum_us"))
        return get_int(p, v, f, 1, INT_MAX, &s->quantum_us);
    if (!strcmp(key, "best_effort_min_share")) /* below 1: the others keep some of the device */
        return get_num(p, v, f, 0, false, 0.95, &s->best_effort_min_share);
    return unknown_key(p, v, f);
}

/* ---- models ----------------------------------------------------------------------- */

static int batching_field(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    colo_batching_cfg *b = obj;
    if (!strcmp(key, "max_batch_size"))
        return get_int(p, v, f, 1, 4096, &b->max_batch_size);
    if (!strcmp(key, "preferred_batch_size")) {
        if (v->type != YAML_SEQUENCE_NODE)
            return fail(p, v, f, "expected a list of batch sizes");
        b->n_preferred = 0;
        for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
            yaml_node_t *e = yaml_document_get_node(p->doc, *it);
            if (b->n_preferred == COLO_CFG_MAX_PREFERRED)
                return fail(p, e, f, "at most %d sizes", COLO_CFG_MAX_PREFERRED);
            int x = 0;
            if (get_int(p, e, f, 1, 4096, &x))
                return -1;
            if (b->n_preferred && x <= b->preferred_batch_size[b->n_preferred - 1])
                return fail(p, e, f, "sizes must be in ascending order");
            b->preferred_batch_size[b->n_preferred++] = x;
        }
        return 0;
    }
    if (!strcmp(key, "max_queue_delay_us"))
        return get_int(p, v, f, 0, INT_MAX, &b->max_queue_delay_us);
    if (!strcmp(key, "max_queue"))
        return get_int(p, v, f, 1, 1 << 24, &b->max_queue);
    if (!strcmp(key, "max_queue_tokens"))
        return get_int(p, v, f, 0, INT_MAX, &b->max_queue_tokens);
    if (!strcmp(key, "queue_timeout_ms"))
        return get_int(p, v, f, 1, INT_MAX, &b->queue_timeout_ms);
    if (!strcmp(key, "max_batch_prefill_tokens"))
        return get_int(p, v, f, 1, 1 << 24, &b->max_batch_prefill_tokens);
    return unknown_key(p, v, f);
}

static int sla_field(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    colo_sla_cfg *s = obj;
    if (!strcmp(key, "p99_ms"))
        return get_num(p, v, f, 0, true, 1e9, &s->p99_ms);
    if (!strcmp(key, "ttft_ms"))
        return get_num(p, v, f, 0, true, 1e9, &s->ttft_ms);
    if (!strcmp(key, "tpot_ms"))
        return get_num(p, v, f, 0, true, 1e9, &s->tpot_ms);
    if (!strcmp(key, "min_rps"))
        return get_num(p, v, f, 0, false, 1e9, &s->min_rps);
    if (!strcmp(key, "max_error_rate"))
        return get_num(p, v, f, 0, false, 1, &s->max_error_rate);
    return unknown_key(p, v, f);
}

static int kv_field(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    colo_model_cfg *m = obj;
    static const char *const dtypes[] = {"f16", "f32", NULL};
    if (!strcmp(key, "block_size"))
        return get_int(p, v, f, 1, 4096, &m->kv_block_size);
    if (!strcmp(key, "dtype")) {
        int i;
        if (get_enum(p, v, f, dtypes, &i))
            return -1;
        m->kv_dtype = i == 0 ? COLO_F16 : COLO_F32;
        return 0;
    }
    return unknown_key(p, v, f);
}

static int source_field(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    colo_model_cfg *m = obj;
    if (!strcmp(key, "pypi"))
        return get_str(p, v, f, m->source_pypi, sizeof m->source_pypi);
    if (!strcmp(key, "file")) {
        if (get_str(p, v, f, m->source_file, sizeof m->source_file))
            return -1;
        if (strchr(m->source_file, '/') || !strcmp(m->source_file, ".") || !strcmp(m->source_file, ".."))
            return fail(p, v, f, "'%s' must be a plain file or folder name", m->source_file);
        return 0;
    }
    return unknown_key(p, v, f);
}

typedef struct model_ctx {
    colo_model_cfg *m;
    model_marks *mk;
} model_ctx;

static int model_name(parse_ctx *p, const yaml_node_t *v, const char *f, colo_model_cfg *m, model_marks *mk)
{
    /* A name is a string (JSON null or 5 is no name), of letters, digits,
     * '-', '_' and '.', starting with a letter or a digit: no ".", "..",
     * "-" or a name that reads as an option or a hidden file. */
    mk->has_name = true;
    if (plain_non_string(v))
        return fail(p, v, f, "expected a string, got %s", scalar(v));
    if (get_str(p, v, f, m->name, sizeof m->name))
        return -1;
    for (const char *c = m->name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-' ||
              *c == '_' || *c == '.'))
            return fail(p, v, f, "'%s': use letters, digits, '-', '_' and '.'", m->name);
    char c0 = m->name[0];
    if (!((c0 >= 'a' && c0 <= 'z') || (c0 >= 'A' && c0 <= 'Z') || (c0 >= '0' && c0 <= '9')))
        return fail(p, v, f, "'%s': a model name starts with a letter or a digit", m->name);
    return 0;
}

static int model_kind(parse_ctx *p, const yaml_node_t *v, const char *f, colo_model_cfg *m, model_marks *mk)
{
    /* The name of a model kind; colo-server checks that it exists. */
    mk->has_kind = true;
    if (get_str(p, v, f, m->kind, sizeof m->kind))
        return -1;
    for (const char *c = m->kind; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_'))
            return fail(p, v, f, "'%s': a kind's name is lower-case letters, digits and '_' (llama, bert)",
                        m->kind);
    if (!m->kind[0])
        return fail(p, v, f, "is empty (llama or bert)");
    return 0;
}

/* path: relative to the config file's folder unless absolute. */
static int model_path(parse_ctx *p, const yaml_node_t *v, const char *f, colo_model_cfg *m, model_marks *mk)
{
    char raw[1024];
    mk->has_path = true;
    if (get_str(p, v, f, raw, sizeof raw))
        return -1;
    const char *dir = raw[0] == '/' || !p->dir[0] ? "" : p->dir;
    if (strlen(dir) + strlen(raw) + 2 > sizeof m->path)
        return fail(p, v, f, "the path is too long");
    size_t ld = strlen(dir), lr = strlen(raw);
    memcpy(m->path, dir, ld);
    if (ld)
        m->path[ld++] = '/';
    memcpy(m->path + ld, raw, lr + 1);
    return 0;
}

/* source: { pypi, file }: the file in the model cache. */
static int model_source(parse_ctx *p, const yaml_node_t *v, const char *f, colo_model_cfg *m, model_marks *mk)
{
    mk->has_source = true;
    if (each_key(p, v, f, source_field, m))
        return -1;
    if (!m->source_pypi[0] || !m->source_file[0])
        return fail(p, v, f, "needs both pypi: and file:");
    char cache[512];
    colo_config_model_cache(cache, sizeof cache);
    if (strlen(cache) + strlen(m->source_file) + 2 > sizeof m->path)
        return fail(p, v, f, "the cache path is too long");
    size_t lc = strlen(cache), lf = strlen(m->source_file);
    memcpy(m->path, cache, lc);
    m->path[lc] = '/';
    memcpy(m->path + lc + 1, m->source_file, lf + 1);
    return 0;
}

static int model_field(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    model_ctx *mc = obj;
    colo_model_cfg *m = mc->m;
    model_marks *mk = mc->mk;
    static const char *const prios[] = {"low", "normal", "high", NULL}; /* = colo_priority */
    if (!strcmp(key, "name"))
        return model_name(p, v, f, m, mk);
    if (!strcmp(key, "kind"))
        return model_kind(p, v, f, m, mk);
    if (!strcmp(key, "path"))
        return model_path(p, v, f, m, mk);
    if (!strcmp(key, "source"))
        return model_source(p, v, f, m, mk);
    if (!strcmp(key, "keep_alive_ms"))
        return get_int(p, v, f, 0, 2000000000, &m->keep_alive_ms);
    if (!strcmp(key, "pinned"))
        return get_bool(p, v, f, &m->pinned);
    if (!strcmp(key, "message_control_tokens"))
        return get_bool(p, v, f, &m->message_control_tokens);
    if (!strcmp(key, "exact_activations"))
        return get_bool(p, v, f, &m->exact_activations);
    if (!strcmp(key, "memory_max_fraction")) {
        mk->max_fraction = mark_of(v);
        return get_num(p, v, f, 0, true, 1, &m->memory_max_fraction);
    }
    if (!strcmp(key, "memory_fraction")) {
        mk->has_fraction = true;
        mk->fraction = mark_of(v);
        return get_num(p, v, f, 0, true, 1, &m->memory_fraction);
    }
    if (!strcmp(key, "chat_template")) {
        static const char *const names[] = {"chatml",     "llama3",     "gemma",
                                            "phi3",       "mistral",    "mistral-v1",
                                            "mistral-v3", "mistral-v3-tekken", "deepseek-r1",
                                            NULL}; /* = models/chat.h */
        int i;
        if (get_enum(p, v, f, names, &i))
            return -1;
        snprintf(m->chat_template, sizeof m->chat_template, "%s", names[i]);
        return 0;
    }
    if (!strcmp(key, "priority")) {
        int i;
        if (get_enum(p, v, f, prios, &i))
            return -1;
        m->priority = (colo_priority)i;
        return 0;
    }
    if (!strcmp(key, "sm_share")) {
        mk->sm_share = mark_of(v);
        return get_num(p, v, f, 0, true, 1, &m->sm_share);
    }
    if (!strcmp(key, "share")) {
        mk->share = mark_of(v);
        return get_num(p, v, f, 0, true, 1000, &m->share);
    }
    if (!strcmp(key, "max_seq_len") || !strcmp(key, "context")) {
        if (mk->has_seq_len)
            return fail(p, v, f, "give one of max_seq_len or context");
        mk->has_seq_len = true;
        return get_int(p, v, f, 1, 1 << 24, &m->max_seq_len);
    }
    if (!strcmp(key, "kv_cache"))
        return each_key(p, v, f, kv_field, m);
    if (!strcmp(key, "prefix_cache")) {
        if (v->type != YAML_SCALAR_NODE || (strcmp(scalar(v), "true") && strcmp(scalar(v), "false")))
            return fail(p, v, f, "must be true or false");
        m->no_prefix_cache = !strcmp(scalar(v), "false");
        return 0;
    }
    if (!strcmp(key, "batching"))
        return each_key(p, v, f, batching_field, &m->batching);
    if (!strcmp(key, "sla"))
        return each_key(p, v, f, sla_field, &m->sla);
    if (!strcmp(key, "on_overload")) { /* a request admission finds cannot meet its SLA */
        static const char *const modes[] = {"serve", "reject", NULL};
        int i;
        if (get_enum(p, v, f, modes, &i))
            return -1;
        m->sla.reject_late = i == 1;
        return 0;
    }
    return unknown_key(p, v, f);
}

static void model_defaults(colo_model_cfg *m)
{
    memset(m, 0, sizeof *m);
    m->priority = COLO_PRIO_NORMAL;
    m->kv_block_size = 16;
    m->kv_dtype = COLO_F16;
    m->batching.max_batch_size = 32;
    m->batching.max_queue_delay_us = 2000;
    m->batching.max_queue = 256;
    m->batching.queue_timeout_ms = 30000;
    m->batching.max_batch_prefill_tokens = 512;
}

/* The checks of one model that need all of its keys. */
static int model_check(parse_ctx *p, const yaml_node_t *n, const char *field, const colo_model_cfg *m,
                       const model_marks *mk)
{
    if (!mk->has_name)
        return fail(p, n, field, "name: is required");
    if (!mk->has_kind)
        return fail(p, n, field, "kind: is required (llama or bert)");
    if (mk->has_path == mk->has_source)
        return fail(p, n, field, "give exactly one of path: or source: {pypi, file}");
    if (!mk->has_fraction)
        return fail(p, n, field, "memory_fraction: is required");
    const colo_batching_cfg *b = &m->batching;
    if (b->n_preferred && b->preferred_batch_size[b->n_preferred - 1] > b->max_batch_size)
        return fail(p, n, field, "batching.preferred_batch_size %d is above max_batch_size %d",
                    b->preferred_batch_size[b->n_preferred - 1], b->max_batch_size);
    return 0;
}

static int parse_models(parse_ctx *p, const yaml_node_t *v, colo_config *c, model_marks *marks)
{
    if (v->type != YAML_SEQUENCE_NODE)
        return fail(p, v, "models", "expected a list of models");
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
        yaml_node_t *mn = yaml_document_get_node(p->doc, *it);
        if (c->n_models == COLO_CFG_MAX_MODELS)
            return fail(p, mn, "models", "at most %d models", COLO_CFG_MAX_MODELS);
        char field[32];
        snprintf(field, sizeof field, "models[%d]", c->n_models);
        colo_model_cfg *m = &c->models[c->n_models];
        model_marks *mk = &marks[c->n_models];
        model_defaults(m);
        memset(mk, 0, sizeof *mk);
        m->mark = mark_of(mn);
        model_ctx mc = {m, mk};
        if (each_key(p, mn, field, model_field, &mc) || model_check(p, mn, field, m, mk))
            return -1;
        for (int j = 0; j < c->n_models; j++)
            if (!strcmp(c->models[j].name, m->name))
                return fail(p, mn, field, "model name '%s' is already used at line %d", m->name,
                            c->models[j].mark.line);
        c->n_models++;
    }
    return 0;
}

/* ---- tenants, usage, pricing ------------------------------------------------------ */

/* The ledger's default path: runtime state, kept out of the folder the
 * config came from (often a source tree): $XDG_STATE_HOME/colo/usage.sqlite,
 * else ~/.local/state/colo/usage.sqlite; beside the config only where
 * neither variable is set. colo-server makes the folders it needs. */
static colo_status default_usage_db(char *out, size_t outlen, const char *config_dir)
{
    const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    int n;
    if (state && state[0] == '/')
        n = snprintf(out, outlen, "%s/colo/usage.sqlite", state);
    else if (home && home[0])
        n = snprintf(out, outlen, "%s/.local/state/colo/usage.sqlite", home);
    else
        n = snprintf(out, outlen, "%s%susage.sqlite", config_dir, config_dir[0] ? "/" : "");
    return n < 0 || (size_t)n >= outlen ? COLO_EINVAL : COLO_OK;
}

static bool name_ok(const char *s)
{
    for (const char *c = s; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-' ||
              *c == '_' || *c == '.'))
            return false;
    return true;
}

static int get_name(parse_ctx *p, const yaml_node_t *v, const char *f, char *out, size_t cap)
{
    if (get_str(p, v, f, out, cap))
        return -1;
    if (!name_ok(out))
        return fail(p, v, f, "'%s': use letters, digits, '-', '_' and '.'", out);
    return 0;
}

/* A quota: a count >= 0, or "unlimited". */
static int get_quota(parse_ctx *p, const yaml_node_t *v, const char *f, int64_t *out)
{
    if (v->type == YAML_SCALAR_NODE && !strcmp(scalar(v), "unlimited")) {
        *out = -1;
        return 0;
    }
    if (v->type != YAML_SCALAR_NODE)
        return fail(p, v, f, "expected a count or 'unlimited'");
    char *end;
    errno = 0;
    long long x = strtoll(scalar(v), &end, 10);
    if (!scalar(v)[0] || *end || errno || x < 0 || x > (1ll << 40))
        return fail(p, v, f, "expected a count in [0, 2^40] or 'unlimited', got '%s'", scalar(v));
    *out = x;
    return 0;
}

static int quota_field(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    colo_quota_cfg *q = obj;
    if (!strcmp(key, "requests_per_minute"))
        return get_quota(p, v, f, &q->requests_per_minute);
    if (!strcmp(key, "tokens_per_minute"))
        return get_quota(p, v, f, &q->tokens_per_minute);
    if (!strcmp(key, "concurrent")) {
        int64_t x;
        if (get_quota(p, v, f, &x))
            return -1;
        if (x > INT_MAX)
            return fail(p, v, f, "at most %d", INT_MAX);
        q->concurrent = (int)x;
        return 0;
    }
    return unknown_key(p, v, f);
}

/* The keys every level shares; 1 when key is not one of them. */
static int level_field(parse_ctx *p, const char *key, const yaml_node_t *v, colo_tenant_level_cfg *l, const char *f)
{
    static const char *const prios[] = {"low", "normal", "high", NULL}; /* = colo_priority */
    if (!strcmp(key, "quotas"))
        return each_key(p, v, f, quota_field, &l->quotas);
    if (!strcmp(key, "weight"))
        return get_num(p, v, f, 0, true, 1e6, &l->weight);
    if (!strcmp(key, "max_priority")) {
        int i;
        if (get_enum(p, v, f, prios, &i))
            return -1;
        l->max_priority = (colo_priority)i;
        return 0;
    }
    if (!strcmp(key, "models")) {
        if (v->type != YAML_SEQUENCE_NODE)
            return fail(p, v, f, "expected a list of model names");
        l->n_models = 0;
        for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
            yaml_node_t *e = yaml_document_get_node(p->doc, *it);
            if (l->n_models == COLO_CFG_MAX_TENANT_MODELS)
                return fail(p, e, f, "at most %d models", COLO_CFG_MAX_TENANT_MODELS);
            if (get_str(p, e, f, l->models[l->n_models], sizeof l->models[0]))
                return -1;
            l->model_marks[l->n_models++] = mark_of(e);
        }
        if (l->n_models == 0)
            return fail(p, v, f, "an empty list allows no model; leave models: out to allow all");
        return 0;
    }
    return 1;
}

static void level_defaults(colo_tenant_level_cfg *l, const yaml_node_t *n)
{
    memset(l, 0, sizeof *l);
    l->quotas = (colo_quota_cfg){-1, -1, -1};
    l->weight = 1;
    l->max_priority = COLO_PRIO_HIGH;
    l->mark = mark_of(n);
}

typedef struct key_ctx {
    colo_key_cfg *k;
    bool has_hash;
} key_ctx;

static int key_field(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    key_ctx *kc = obj;
    if (!strcmp(key, "name"))
        return get_name(p, v, f, kc->k->l.name, sizeof kc->k->l.name);
    if (!strcmp(key, "sha256")) {
        kc->has_hash = true;
        if (v->type != YAML_SCALAR_NODE || colo_config_parse_sha256(scalar(v), kc->k->sha256) != COLO_OK)
            return fail(p, v, f, "expected 64 hex digits (colo-server --hash-key prints them)");
        return 0;
    }
    int r = level_field(p, key, v, &kc->k->l, f);
    return r == 1 ? unknown_key(p, v, f) : r;
}

typedef struct project_ctx {
    colo_config *c;
    int project;
} project_ctx;

static int parse_keys(parse_ctx *p, const yaml_node_t *v, const char *f, colo_config *c, int project)
{
    colo_tenants_cfg *t = &c->tenants;
    if (v->type != YAML_SEQUENCE_NODE)
        return fail(p, v, f, "expected a list of keys");
    int first = t->n_keys;
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
        yaml_node_t *kn = yaml_document_get_node(p->doc, *it);
        if (t->n_keys == COLO_CFG_MAX_KEYS)
            return fail(p, kn, f, "at most %d keys in all", COLO_CFG_MAX_KEYS);
        char field[192];
        snprintf(field, sizeof field, "%s[%d]", f, t->n_keys - first);
        colo_key_cfg *k = &t->keys[t->n_keys];
        level_defaults(&k->l, kn);
        k->project = project;
        key_ctx kc = {k, false};
        if (each_key(p, kn, field, key_field, &kc))
            return -1;
        if (!k->l.name[0])
            return fail(p, kn, field, "name: is required");
        if (!kc.has_hash)
            return fail(p, kn, field, "sha256: is required (colo-server --hash-key prints it)");
        for (int j = 0; j < t->n_keys; j++) {
            if (j >= first && !strcmp(t->keys[j].l.name, k->l.name))
                return fail(p, kn, field, "key name '%s' is already used at line %d", k->l.name,
                            t->keys[j].l.mark.line);
            if (!memcmp(t->keys[j].sha256, k->sha256, 32))
                return fail(p, kn, field, "the same key is already given at line %d", t->keys[j].l.mark.line);
        }
        t->n_keys++;
    }
    return 0;
}

static int project_field(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    project_ctx *pc = obj;
    colo_project_cfg *pr = &pc->c->tenants.projects[pc->project];
    if (!strcmp(key, "name"))
        return get_name(p, v, f, pr->l.name, sizeof pr->l.name);
    if (!strcmp(key, "keys"))
        return parse_keys(p, v, f, pc->c, pc->project);
    int r = level_field(p, key, v, &pr->l, f);
    return r == 1 ? unknown_key(p, v, f) : r;
}

typedef struct org_ctx {
    colo_config *c;
    int org;
} org_ctx;

static int parse_projects(parse_ctx *p, const yaml_node_t *v, const char *f, colo_config *c, int org)
{
    colo_tenants_cfg *t = &c->tenants;
    if (v->type != YAML_SEQUENCE_NODE)
        return fail(p, v, f, "expected a list of projects");
    int first = t->n_projects;
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
        yaml_node_t *pn = yaml_document_get_node(p->doc, *it);
        if (t->n_projects == COLO_CFG_MAX_PROJECTS)
            return fail(p, pn, f, "at most %d projects in all", COLO_CFG_MAX_PROJECTS);
        char field[192];
        snprintf(field, sizeof field, "%s[%d]", f, t->n_projects - first);
        int idx = t->n_projects++;
        colo_project_cfg *pr = &t->projects[idx];
        level_defaults(&pr->l, pn);
        pr->org = org;
        project_ctx pc = {c, idx};
        if (each_key(p, pn, field, project_field, &pc))
            return -1;
        if (!pr->l.name[0])
            return fail(p, pn, field, "name: is required");
        for (int j = first; j < idx; j++)
            if (!strcmp(t->projects[j].l.name, pr->l.name))
                return fail(p, pn, field, "project name '%s' is already used at line %d", pr->l.name,
                            t->projects[j].l.mark.line);
    }
    return 0;
}

static int org_field(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    org_ctx *oc = obj;
    colo_org_cfg *o = &oc->c->tenants.orgs[oc->org];
    if (!strcmp(key, "organization")) {
        if (get_name(p, v, f, o->l.name, sizeof o->l.name))
            return -1;
        if (!strcmp(o->l.name, "default"))
            return fail(p, v, f, "'default' is the organization of server.api_key_env's key; choose another name");
        return 0;
    }
    if (!strcmp(key, "projects"))
        return parse_projects(p, v, f, oc->c, oc->org);
    int r = level_field(p, key, v, &o->l, f);
    return r == 1 ? unknown_key(p, v, f) : r;
}

static int parse_tenants(parse_ctx *p, const yaml_node_t *v, colo_config *c)
{
    colo_tenants_cfg *t = &c->tenants;
    if (v->type != YAML_SEQUENCE_NODE)
        return fail(p, v, "tenants", "expected a list of organizations");
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
        yaml_node_t *on = yaml_document_get_node(p->doc, *it);
        if (t->n_orgs == COLO_CFG_MAX_ORGS)
            return fail(p, on, "tenants", "at most %d organizations", COLO_CFG_MAX_ORGS);
        char field[64];
        snprintf(field, sizeof field, "tenants[%d]", t->n_orgs);
        int idx = t->n_orgs++;
        colo_org_cfg *o = &t->orgs[idx];
        level_defaults(&o->l, on);
        org_ctx oc = {c, idx};
        if (each_key(p, on, field, org_field, &oc))
            return -1;
        if (!o->l.name[0])
            return fail(p, on, field, "organization: is required");
        for (int j = 0; j < idx; j++)
            if (!strcmp(t->orgs[j].l.name, o->l.name))
                return fail(p, on, field, "organization '%s' is already used at line %d", o->l.name,
                            t->orgs[j].l.mark.line);
    }
    return 0;
}

/* Every model a level names must be served (models may come after tenants). */
static int tenants_check(parse_ctx *p, const colo_config *c)
{
    const colo_tenants_cfg *t = &c->tenants;
    int n = t->n_orgs + t->n_projects + t->n_keys;
    for (int i = 0; i < n; i++) {
        const colo_tenant_level_cfg *l = i < t->n_orgs                   ? &t->orgs[i].l
                                         : i < t->n_orgs + t->n_projects ? &t->projects[i - t->n_orgs].l
                                                                          : &t->keys[i - t->n_orgs - t->n_projects].l;
        for (int m = 0; m < l->n_models; m++) {
            bool found = false;
            for (int j = 0; j < c->n_models && !found; j++)
                found = !strcmp(c->models[j].name, l->models[m]);
            if (!found)
                return fail_at(p, l->model_marks[m], "tenants.models",
                               "'%s' (of %s) is not a model in models:", l->models[m], l->name);
        }
    }
    return 0;
}

static int usage_field(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    colo_usage_cfg *u = obj;
    if (!strcmp(key, "enabled"))
        return get_bool(p, v, f, &u->enabled);
    if (!strcmp(key, "lock_wait_ms"))
        return get_int(p, v, f, 0, 600000, &u->lock_wait_ms);
    if (!strcmp(key, "db")) {
        char raw[1024];
        if (get_str(p, v, f, raw, sizeof raw))
            return -1;
        const char *dir = raw[0] == '/' || !p->dir[0] ? "" : p->dir;
        int n = snprintf(u->db, sizeof u->db, "%s%s%s", dir, dir[0] ? "/" : "", raw);
        if (n < 0 || (size_t)n >= sizeof u->db)
            return fail(p, v, f, "the path is too long");
        return 0;
    }
    return unknown_key(p, v, f);
}

static int price_field(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    colo_price_cfg *pr = obj;
    if (!strcmp(key, "per_device_hour"))
        return get_num(p, v, f, 0, false, 1e12, &pr->per_device_hour);
    if (!strcmp(key, "per_million_tokens"))
        return get_num(p, v, f, 0, false, 1e12, &pr->per_million_tokens);
    return unknown_key(p, v, f);
}

static int pricing_field(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    colo_pricing_cfg *pc = obj;
    if (!strcmp(key, "currency"))
        return get_str(p, v, f, pc->currency, sizeof pc->currency);
    if (!strcmp(key, "models")) {
        if (v->type != YAML_MAPPING_NODE)
            return fail(p, v, f, "expected a mapping of model name to prices");
        for (yaml_node_pair_t *pr = v->data.mapping.pairs.start; pr < v->data.mapping.pairs.top; pr++) {
            yaml_node_t *k = yaml_document_get_node(p->doc, pr->key), *mv = yaml_document_get_node(p->doc, pr->value);
            if (!k || !mv || k->type != YAML_SCALAR_NODE)
                return fail(p, k, f, "keys must be model names");
            if (pc->n_models == COLO_CFG_MAX_MODELS)
                return fail(p, k, f, "at most %d models", COLO_CFG_MAX_MODELS);
            colo_price_cfg *m = &pc->models[pc->n_models];
            char field[192];
            join(field, sizeof field, f, scalar(k));
            if (get_str(p, k, field, m->model, sizeof m->model) || each_key(p, mv, field, price_field, m))
                return -1;
            for (int j = 0; j < pc->n_models; j++)
                if (!strcmp(pc->models[j].model, m->model))
                    return fail(p, k, field, "priced twice");
            pc->n_models++;
        }
        return 0;
    }
    return unknown_key(p, v, f);
}

typedef struct top_ctx {
    colo_config *c;
    model_marks *marks;
} top_ctx;

static int top_field(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    top_ctx *t = obj;
    if (!strcmp(key, "server"))
        return each_key(p, v, f, server_field, &t->c->server);
    if (!strcmp(key, "scheduler"))
        return each_key(p, v, f, scheduler_field, &t->c->scheduler);
    if (!strcmp(key, "models"))
        return parse_models(p, v, t->c, t->marks);
    if (!strcmp(key, "tenants"))
        return parse_tenants(p, v, t->c);
    if (!strcmp(key, "usage"))
        return each_key(p, v, f, usage_field, &t->c->usage);
    if (!strcmp(key, "pricing"))
        return each_key(p, v, f, pricing_field, &t->c->pricing);
    return unknown_key(p, v, f);
}

/* Checks across models: fractions and SM shares. */
static int cross_check(parse_ctx *p, const colo_config *c, const model_marks *marks, const yaml_node_t *root)
{
    double fractions = 0, shares = 0;
    char field[64];
    for (int i = 0; i < c->n_models; i++) {
        const colo_model_cfg *m = &c->models[i];
        fractions += m->memory_fraction;
        if (m->memory_max_fraction > 0 && m->memory_max_fraction < m->memory_fraction) {
            snprintf(field, sizeof field, "models[%d].memory_max_fraction", i);
            return fail_at(p, marks[i].max_fraction, field, "%g is below memory_fraction %g (a ceiling, not a share)",
                           m->memory_max_fraction, m->memory_fraction);
        }
        if (fractions > 1.0 + FRACTION_SLACK) {
            snprintf(field, sizeof field, "models[%d].memory_fraction", i);
            return fail_at(p, marks[i].fraction, field, "memory fractions sum to %.3f here, past 1.0", fractions);
        }
        if (m->sm_share > 0 && c->scheduler.policy != COLO_SCHED_PARTITION) {
            snprintf(field, sizeof field, "models[%d].sm_share", i);
            return fail_at(p, marks[i].sm_share, field, "only used with scheduler.policy: partition");
        }
        if (m->share > 0 && c->scheduler.policy != COLO_SCHED_FAIR) {
            snprintf(field, sizeof field, "models[%d].share", i);
            return fail_at(p, marks[i].share, field, "only used with scheduler.policy: fair");
        }
        shares += m->sm_share;
        if (shares > 1.0 + FRACTION_SLACK) {
            snprintf(field, sizeof field, "models[%d].sm_share", i);
            return fail_at(p, marks[i].sm_share, field, "SM shares sum to %.3f here, past 1.0", shares);
        }
    }
    if (c->n_models == 0)
        return fail(p, root, "models", "at least one model is required");
    return tenants_check(p, c);
}

void colo_config_defaults(colo_config *c)
{
    memset(c, 0, sizeof *c);
    colo_server_cfg *s = &c->server;
    snprintf(s->listen_host, sizeof s->listen_host, "127.0.0.1");
    s->listen_port = 8080;
    snprintf(s->admin_key_env, sizeof s->admin_key_env, "COLO_ADMIN_KEY");
    s->device = COLO_DEVICE_AUTO;
    s->elastic_memory = true;
    s->max_body_bytes = 1u << 20;
    s->max_header_bytes = 16u << 10;
    s->max_connections = 4096;
    s->read_timeout_ms = 30000;
    s->write_timeout_ms = 30000;
    s->idle_timeout_ms = 60000;
    s->shutdown_timeout_ms = 10000;
    s->max_unsent_bytes = 256ull << 20;
    s->telemetry_interval_ms = 2000;
    c->scheduler.policy = COLO_SCHED_PRIORITY;
    c->scheduler.best_effort_max_steps = 0;
    c->scheduler.best_effort_max_ops = 8;
    c->scheduler.quantum_us = 10000;
    c->usage.enabled = true;
    c->usage.lock_wait_ms = 5000;
    snprintf(c->pricing.currency, sizeof c->pricing.currency, "USD");
}

colo_status colo_config_parse_sha256(const char *hex, uint8_t out[32])
{
    if (!hex || strlen(hex) != 64)
        return COLO_EINVAL;
    for (int i = 0; i < 64; i++) {
        char ch = hex[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (d < 0)
            return COLO_EINVAL;
        if (i % 2 == 0)
            out[i / 2] = (uint8_t)(d << 4);
        else
            out[i / 2] |= (uint8_t)d;
    }
    return COLO_OK;
}

void colo_config_model_cache(char *buf, size_t len)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(buf, len, "%s/colo/models", xdg);
    else
        snprintf(buf, len, "%s/.cache/colo/models", home && *home ? home : ".");
}

const char *colo_config_api_key(const colo_config *cfg)
{
    if (!cfg || !cfg->server.api_key_env[0])
        return NULL;
    const char *v = getenv(cfg->server.api_key_env);
    return v && *v ? v : NULL;
}

const char *colo_config_admin_key(const colo_config *cfg)
{
    if (!cfg || !cfg->server.admin_key_env[0])
        return NULL;
    const char *v = getenv(cfg->server.admin_key_env);
    return v && *v ? v : NULL;
}

const char *colo_device_choice_name(colo_device_choice d)
{
    switch (d) {
    case COLO_DEVICE_CPU: return "cpu";
    case COLO_DEVICE_CUDA: return "cuda";
    default: return "auto";
    }
}

colo_status colo_config_parse(const char *yaml, size_t len, const char *file, colo_config *cfg, char *err,
                              size_t errlen)
{
    colo_status st = COLO_EINVAL;
    colo_config_defaults(cfg);
    snprintf(cfg->file, sizeof cfg->file, "%s", file);

    model_marks *marks = calloc(COLO_CFG_MAX_MODELS, sizeof *marks);
    if (!marks) {
        colo_set_err(err, errlen, "%s: out of memory", file);
        return COLO_ENOMEM;
    }
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        colo_set_err(err, errlen, "%s: out of memory", file);
        st = COLO_ENOMEM;
        goto out_free_marks;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    yaml_document_t doc;
    if (!yaml_parser_load(&parser, &doc)) {
        colo_set_err(err, errlen, "%s:%zu:%zu: YAML syntax error: %s%s%s", file, parser.problem_mark.line + 1,
                     parser.problem_mark.column + 1, parser.problem ? parser.problem : "malformed",
                     parser.context ? " " : "", parser.context ? parser.context : "");
        goto out_delete_parser;
    }

    parse_ctx p = {.doc = &doc, .file = file, .err = err, .errlen = errlen};
    const char *slash = strrchr(file, '/');
    if (slash)
        snprintf(p.dir, sizeof p.dir, "%.*s", (int)(slash == file ? 1 : slash - file), file);
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    top_ctx t = {cfg, marks};
    if (!root) {
        colo_set_err(err, errlen, "%s:1:1: (document): the file is empty", file);
        goto out_delete_doc;
    }
    if (each_key(&p, root, "", top_field, &t) || cross_check(&p, cfg, marks, root))
        goto out_delete_doc;
    if (!cfg->usage.db[0] && default_usage_db(cfg->usage.db, sizeof cfg->usage.db, p.dir) != COLO_OK) {
        colo_set_err(err, errlen, "%s:1:1: usage.db: the default path is too long", file);
        goto out_delete_doc;
    }
    st = COLO_OK;

out_delete_doc:
    yaml_document_delete(&doc);
out_delete_parser:
    yaml_parser_delete(&parser);
out_free_marks:
    free(marks);
    return st;
}

colo_status colo_config_parse_model(const char *text, size_t len, const char *source, const char *base_dir,
                                    colo_model_cfg *out, char *err, size_t errlen)
{
    colo_status st = COLO_EINVAL;
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        colo_set_err(err, errlen, "%s: out of memory", source);
        return COLO_ENOMEM;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    yaml_document_t doc;
    if (!yaml_parser_load(&parser, &doc)) {
        colo_set_err(err, errlen, "%s:%zu:%zu: syntax error: %s", source, parser.problem_mark.line + 1,
                     parser.problem_mark.column + 1, parser.problem ? parser.problem : "malformed");
        goto out_delete_parser;
    }
    parse_ctx p = {.doc = &doc, .file = source, .err = err, .errlen = errlen};
    snprintf(p.dir, sizeof p.dir, "%s", base_dir ? base_dir : "");
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root) {
        colo_set_err(err, errlen, "%s:1:1: (model): empty", source);
        goto out_delete_doc;
    }
    model_marks mk;
    memset(&mk, 0, sizeof mk);
    model_defaults(out);
    out->mark = mark_of(root);
    model_ctx mc = {out, &mk};
    if (each_key(&p, root, "model", model_field, &mc) || model_check(&p, root, "model", out, &mk))
        goto out_delete_doc;
    if (out->memory_max_fraction > 0 && out->memory_max_fraction < out->memory_fraction) {
        fail_at(&p, mk.max_fraction, "model.memory_max_fraction", "%g is below memory_fraction %g (a ceiling, not a share)",
                out->memory_max_fraction, out->memory_fraction);
        goto out_delete_doc;
    }
    st = COLO_OK;
out_delete_doc:
    yaml_document_delete(&doc);
out_delete_parser:
    yaml_parser_delete(&parser);
    return st;
}

colo_status colo_config_load(const char *path, colo_config *cfg, char *err, size_t errlen)
{
    enum { MAX_CONFIG_BYTES = 16 << 20 };
    colo_status st = COLO_EIO;
    char *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        colo_set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return COLO_EIO;
    }
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 8192;
            char *nb = ncap > MAX_CONFIG_BYTES ? NULL : realloc(buf, ncap);
            if (!nb) {
                colo_set_err(err, errlen, "%s: larger than %d bytes or out of memory", path, MAX_CONFIG_BYTES);
                st = COLO_EINVAL;
                goto out_close;
            }
            buf = nb;
            cap = ncap;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
    }
    if (ferror(f)) {
        colo_set_err(err, errlen, "%s: read error", path);
        goto out_close;
    }
    st = colo_config_parse(buf, len, path, cfg, err, errlen);
out_close:
    free(buf);
    fclose(f);
    return st;
}
