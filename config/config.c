/* YAML (libyaml's document API) -> colo_config, with FILE:LINE:COLUMN errors. */
#include "config/config.h"
#include "batching/evictor.h"
#include "batching/kind.h"
#include "batching/spec.h"
#include "batching/spec_suffix.h"
#include "models/sample/chat.h"
#include "models/sample/json_schema.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
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

/* ---- key tables ----------------------------------------------------------------- */

/* How a key's value is read: most by type into a member of the section's
 * struct, the rest by a function of their own. Each section is a table of
 * these, looked up by name, as nginx's header tables are. */
typedef enum key_kind {
    K_INT,      /* int in [lo, hi] */
    K_NUM,      /* double in [lo, hi] */
    K_NUM_OPEN, /* double in (lo, hi] */
    K_BOOL,
    K_SIZE,     /* uint64_t bytes, at least lo: 1048576, 64KiB, 8GiB, 2GB */
    K_STR,      /* char[cap], not empty */
    K_ENUM,     /* one of names[]: its index, into an int-sized member */
    K_MAP,      /* a mapping whose keys fn reads into the member */
    K_FN,       /* fn reads the value (obj: the section's context) */
} key_kind;

typedef struct key_spec {
    const char *name;
    key_kind kind;
    size_t off; /* the member in the section's struct */
    double lo, hi;
    const char *const *names;
    size_t cap;
    field_fn fn;                 /* K_FN */
    const struct key_spec *sub;  /* K_MAP: the member's keys */
} key_spec;

/* offsetof(type, member), and a compile error unless the member is a T
 * (or, for enumerations, int-sized). */
#define MEMBER(type, member, T) \
    (offsetof(type, member) + 0 * sizeof(char[_Generic(((type *)0)->member, T: 1, default: -1)]))
#define MEMBER_INT_SIZED(type, member) \
    (offsetof(type, member) + 0 * sizeof(char[sizeof(((type *)0)->member) == sizeof(int) ? 1 : -1]))

#define KEY_INT(n, type, m, l, h) {.name = n, .kind = K_INT, .off = MEMBER(type, m, int), .lo = l, .hi = h}
#define KEY_NUM(n, type, m, l, h) {.name = n, .kind = K_NUM, .off = MEMBER(type, m, double), .lo = l, .hi = h}
#define KEY_NUM_OPEN(n, type, m, l, h) {.name = n, .kind = K_NUM_OPEN, .off = MEMBER(type, m, double), .lo = l, .hi = h}
#define KEY_BOOL(n, type, m) {.name = n, .kind = K_BOOL, .off = MEMBER(type, m, bool)}
#define KEY_SIZE(n, type, m, l) {.name = n, .kind = K_SIZE, .off = MEMBER(type, m, uint64_t), .lo = l}
#define KEY_STR(n, type, m) {.name = n, .kind = K_STR, .off = offsetof(type, m), .cap = sizeof ((type *)0)->m}
#define KEY_ENUM(n, type, m, values) {.name = n, .kind = K_ENUM, .off = MEMBER_INT_SIZED(type, m), .names = values}
#define KEY_MAP(n, type, m, keys) {.name = n, .kind = K_MAP, .off = offsetof(type, m), .sub = keys}
/* a mapping whose keys are members of the section's own struct */
#define KEY_MAP_SAME(n, keys) {.name = n, .kind = K_MAP, .sub = keys}
#define KEY_FN(n, f) {.name = n, .kind = K_FN, .fn = f}
#define KEY_END {.name = NULL}

static const key_spec *find_key(const key_spec *specs, const char *key)
{
    for (const key_spec *s = specs; s->name; s++)
        if (!strcmp(s->name, key))
            return s;
    return NULL;
}

static int read_key(parse_ctx *p, const key_spec *specs, const char *key, const yaml_node_t *v, void *base,
                    void *ctx, const char *f);

/* A mapping read through a table of keys into base (ctx: K_FN's obj). */
typedef struct section {
    const key_spec *specs;
    void *base, *ctx;
} section;

static int section_field(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    section *s = obj;
    return read_key(p, s->specs, key, v, s->base, s->ctx, f);
}

static int each_section(parse_ctx *p, const yaml_node_t *v, const char *f, const key_spec *specs, void *base,
                        void *ctx)
{
    section s = {specs, base, ctx};
    return each_key(p, v, f, section_field, &s);
}

/* Reads v by s into the section struct at base (ctx: K_FN's obj). */
static int read_spec(parse_ctx *p, const key_spec *s, const char *key, const yaml_node_t *v, void *base, void *ctx,
                     const char *f)
{
    char *m = (char *)base + s->off;
    switch (s->kind) {
    case K_INT:
        return get_int(p, v, f, (long)s->lo, (long)s->hi, (int *)(void *)m);
    case K_NUM:
    case K_NUM_OPEN:
        return get_num(p, v, f, s->lo, s->kind == K_NUM_OPEN, s->hi, (double *)(void *)m);
    case K_BOOL:
        return get_bool(p, v, f, (bool *)(void *)m);
    case K_SIZE:
        return get_size(p, v, f, (uint64_t)s->lo, (uint64_t *)(void *)m);
    case K_STR:
        return get_str(p, v, f, m, s->cap);
    case K_ENUM:
        return get_enum(p, v, f, s->names, (int *)(void *)m);
    case K_MAP:
        return each_section(p, v, f, s->sub, m, m);
    case K_FN:
        return s->fn(p, key, v, ctx, f);
    }
    return unknown_key(p, v, f);
}

/* A section's key: found in specs and read into base, else unknown. */
static int read_key(parse_ctx *p, const key_spec *specs, const char *key, const yaml_node_t *v, void *base,
                    void *ctx, const char *f)
{
    const key_spec *s = find_key(specs, key);
    return s ? read_spec(p, s, key, v, base, ctx, f) : unknown_key(p, v, f);
}

/* Calls fn(p, item, "f[i]", obj, index) for each item of sequence v, i
 * counting from 0 in v and index from *n, which counts the items read:
 * at most max in all (what: their name, in the messages; all: the list
 * spreads over several parents, "in all"). */
typedef int (*item_fn)(parse_ctx *p, const yaml_node_t *item, const char *field, void *obj, int index);

static int each_item(parse_ctx *p, const yaml_node_t *v, const char *f, const char *what, int max, bool all, int *n,
                     item_fn fn, void *obj)
{
    if (v->type != YAML_SEQUENCE_NODE)
        return fail(p, v, f, "expected a list of %s", what);
    int first = *n;
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
        yaml_node_t *e = yaml_document_get_node(p->doc, *it);
        if (*n == max)
            return fail(p, e, f, "at most %d %s%s", max, what, all ? " in all" : "");
        char field[192];
        snprintf(field, sizeof field, "%s[%d]", f, *n - first);
        if (fn(p, e, field, obj, *n))
            return -1;
        (*n)++;
    }
    return 0;
}

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

static int listen_key(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    return parse_listen(p, v, f, obj);
}

/* api_key_env, admin_key_env: the name of an environment variable. */
static int env_name_key(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    colo_server_cfg *s = obj;
    char *dst = key[1] == 'p' ? s->api_key_env : s->admin_key_env;
    if (get_str(p, v, f, dst, sizeof s->api_key_env))
        return -1;
    for (const char *c = dst; *c; c++)
        if (!(*c == '_' || (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9' && c != dst)))
            return fail(p, v, f, "'%s' is not an environment variable name", dst);
    return 0;
}

/* cors_allow_origins: "*", or origins as browsers send them
 * (scheme://host[:port], no path). */
static int cors_key(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    colo_server_cfg *s = obj;
    if (v->type != YAML_SEQUENCE_NODE)
        return fail(p, v, f, "expected a list of origins (\"https://app.example\", or \"*\" for any)");
    s->n_cors_origins = 0;
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
        yaml_node_t *e = yaml_document_get_node(p->doc, *it);
        if (s->n_cors_origins == COLO_CFG_MAX_CORS_ORIGINS)
            return fail(p, e, f, "at most %d origins", COLO_CFG_MAX_CORS_ORIGINS);
        char *o = s->cors_origins[s->n_cors_origins];
        if (get_str(p, e, f, o, sizeof s->cors_origins[0]))
            return -1;
        const char *host = strstr(o, "://");
        bool ok = !strcmp(o, "*") || (host && host > o && host[3] && !strchr(host + 3, '/'));
        for (const char *c = o; ok && *c; c++)
            ok = *c > ' ' && *c < 0x7f && *c != ',';
        if (!ok)
            return fail(p, e, f, "'%s' is not an origin (scheme://host[:port], or \"*\")", o);
        s->n_cors_origins++;
    }
    return 0;
}

static const char *const device_names[] = {"auto", "cpu", "cuda", NULL}; /* = colo_device_choice */

static const key_spec server_keys[] = {
    KEY_FN("listen", listen_key),
    KEY_ENUM("device", colo_server_cfg, device, device_names),
    KEY_INT("threads", colo_server_cfg, threads, 0, 4096),
    KEY_SIZE("cpu_memory_bytes", colo_server_cfg, cpu_memory_bytes, 0),
    KEY_SIZE("gpu_memory_bytes", colo_server_cfg, gpu_memory_bytes, 0),
    KEY_BOOL("elastic_memory", colo_server_cfg, elastic_memory),
    KEY_BOOL("cuda_graphs", colo_server_cfg, cuda_graphs),
    KEY_FN("api_key_env", env_name_key),
    KEY_FN("admin_key_env", env_name_key),
    KEY_SIZE("max_body_bytes", colo_server_cfg, max_body_bytes, 1),
    KEY_SIZE("max_header_bytes", colo_server_cfg, max_header_bytes, 256),
    KEY_INT("max_connections", colo_server_cfg, max_connections, 1, 1000000),
    KEY_INT("read_timeout_ms", colo_server_cfg, read_timeout_ms, 1, INT_MAX),
    KEY_INT("write_timeout_ms", colo_server_cfg, write_timeout_ms, 1, INT_MAX),
    KEY_INT("idle_timeout_ms", colo_server_cfg, idle_timeout_ms, 1, INT_MAX),
    KEY_INT("shutdown_timeout_ms", colo_server_cfg, shutdown_timeout_ms, 0, INT_MAX),
    KEY_INT("drain_delay_ms", colo_server_cfg, drain_delay_ms, 0, INT_MAX),
    KEY_SIZE("max_unsent_bytes", colo_server_cfg, max_unsent_bytes, 1),
    KEY_INT("telemetry_interval_ms", colo_server_cfg, telemetry_interval_ms, 100, 3600000),
    KEY_INT("min_residency_ms", colo_server_cfg, min_residency_ms, 0, 3600000),
    KEY_FN("cors_allow_origins", cors_key),
    KEY_END,
};

/* A list of names kept by its owner's table (name_at(i), NULL past the
 * last) as get_enum reads one: at most cap - 1 names, then NULL. */
static void names_from(const char *(*name_at)(int i), const char **out, int cap)
{
    int n = 0;
    while (n < cap - 1 && (out[n] = name_at(n)))
        n++;
    out[n] = NULL;
}

/* ---- scheduler ------------------------------------------------------------------- */

static const key_spec cap_keys[] = {
    KEY_INT("max_inflight_steps", colo_scheduler_cfg, best_effort_max_steps, 0, 1024),
    KEY_INT("max_inflight_ops", colo_scheduler_cfg, best_effort_max_ops, 0, 1 << 20),
    KEY_INT("max_inflight_us", colo_scheduler_cfg, best_effort_max_us, 0, INT_MAX),
    KEY_END,
};

static int policy_key(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    colo_scheduler_cfg *s = obj;
    const char *policies[16];
    int i;
    names_from(colo_sched_policy_name_at, policies, 16); /* the runtime's table of policies */
    if (get_enum(p, v, f, policies, &i))
        return -1;
    return colo_sched_policy_parse(policies[i], &s->policy) == COLO_OK ? 0 : fail(p, v, f, "unknown policy");
}

static const key_spec scheduler_keys[] = {
    KEY_FN("policy", policy_key),
    KEY_MAP_SAME("best_effort_cap", cap_keys),
    KEY_INT("quantum_us", colo_scheduler_cfg, quantum_us, 1, INT_MAX),
    /* below 1: the others keep some of the device */
    KEY_NUM("best_effort_min_share", colo_scheduler_cfg, best_effort_min_share, 0, 0.95),
    /* the batch class's floor; at most half: interactive work keeps the rest */
    KEY_NUM("batch_min_share", colo_scheduler_cfg, batch_min_share, 0, 0.5),
    KEY_END,
};

/* ---- models ----------------------------------------------------------------------- */

static int preferred_key(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    colo_batching_cfg *b = obj;
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

static const key_spec batching_keys[] = {
    KEY_INT("max_batch_size", colo_batching_cfg, max_batch_size, 1, 4096),
    KEY_FN("preferred_batch_size", preferred_key),
    KEY_INT("max_queue_delay_us", colo_batching_cfg, max_queue_delay_us, 0, INT_MAX),
    KEY_INT("max_queue", colo_batching_cfg, max_queue, 1, 1 << 24),
    KEY_INT("max_queue_tokens", colo_batching_cfg, max_queue_tokens, 0, INT_MAX),
    KEY_INT("queue_timeout_ms", colo_batching_cfg, queue_timeout_ms, 1, INT_MAX),
    KEY_INT("max_batch_prefill_tokens", colo_batching_cfg, max_batch_prefill_tokens, 1, 1 << 24),
    KEY_END,
};

static const key_spec sla_keys[] = {
    KEY_NUM_OPEN("p99_ms", colo_sla_cfg, p99_ms, 0, 1e9),
    KEY_NUM_OPEN("ttft_ms", colo_sla_cfg, ttft_ms, 0, 1e9),
    KEY_NUM_OPEN("tpot_ms", colo_sla_cfg, tpot_ms, 0, 1e9),
    KEY_NUM("min_rps", colo_sla_cfg, min_rps, 0, 1e9),
    KEY_NUM("max_error_rate", colo_sla_cfg, max_error_rate, 0, 1),
    KEY_END,
};

static int kv_dtype_key(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    colo_model_cfg *m = obj;
    /* Q4_0, which the kernels also take, is left out: it changes greedy
     * output within a few tokens (docs/BENCHMARKS.md) */
    static const char *const dtypes[] = {"f16", "f32", "q8_0", NULL};
    static const colo_dtype types[] = {COLO_F16, COLO_F32, COLO_Q8_0};
    int i;
    if (get_enum(p, v, f, dtypes, &i))
        return -1;
    m->kv_dtype = types[i];
    return 0;
}

static const key_spec kv_keys[] = {
    KEY_INT("block_size", colo_model_cfg, kv_block_size, 1, 4096),
    KEY_FN("dtype", kv_dtype_key),
    KEY_END,
};

static int source_file_key(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    colo_model_cfg *m = obj;
    if (get_str(p, v, f, m->source_file, sizeof m->source_file))
        return -1;
    if (strchr(m->source_file, '/') || !strcmp(m->source_file, ".") || !strcmp(m->source_file, ".."))
        return fail(p, v, f, "'%s' must be a plain file or folder name", m->source_file);
    return 0;
}

/* structured_output: what a schema leaves open (models/sample/json_schema.h) */
static const key_spec structured_output_keys[] = {
    KEY_INT("max_string_length", colo_model_cfg, schema_max_length, 0, 65535),
    KEY_INT("max_array_items", colo_model_cfg, schema_max_items, 0, 65535),
    KEY_END,
};

static const key_spec source_keys[] = {
    KEY_STR("pypi", colo_model_cfg, source_pypi),
    KEY_FN("file", source_file_key),
    KEY_END,
};

typedef struct model_ctx {
    colo_model_cfg *m;
    model_marks *mk;
} model_ctx;

/* speculative: how the model's sequences draft tokens (batching/spec.h) */
static int spec_draft_key(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    colo_spec_cfg *sc = obj;
    return get_str(p, v, f, sc->draft, sizeof sc->draft) ? -1 : 0; /* (the model: cross_check, admin) */
}

static const key_spec spec_keys[] = {
    KEY_BOOL("lookup", colo_spec_cfg, lookup),
    KEY_BOOL("suffix", colo_spec_cfg, suffix),
    KEY_SIZE("suffix_memory_bytes", colo_spec_cfg, suffix_memory_bytes, COLO_SPEC_SUFFIX_MIN_BYTES),
    KEY_FN("draft", spec_draft_key),
    KEY_INT("tokens", colo_spec_cfg, tokens, 1, COLO_SPEC_MAX_TOKENS),
    KEY_END,
};

static int model_speculative(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    colo_spec_cfg *sc = &((model_ctx *)obj)->m->speculative;
    memset(sc, 0, sizeof *sc);
    sc->mark = mark_of(v);
    return each_section(p, v, f, spec_keys, sc, sc);
}

/* A model's name or alias into out (64 bytes): a string (JSON null or 5
 * is no name) of letters, digits, '-', '_', '.', ':' and '/', as clients
 * write model names (meta-llama/Llama-3.1-8B-Instruct, llama3:8b),
 * starting with a letter or a digit: no ".", "-" or a name that reads as an
 * option or a hidden file, and nothing that could break a log line, a
 * metric's label or a path segment (a path route takes '/' as %2F). */
static int get_model_name(parse_ctx *p, const yaml_node_t *v, const char *f, char *out)
{
    if (plain_non_string(v))
        return fail(p, v, f, "expected a string, got %s", scalar(v));
    if (get_str(p, v, f, out, 64))
        return -1;
    for (const char *c = out; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-' ||
              *c == '_' || *c == '.' || *c == ':' || *c == '/'))
            return fail(p, v, f, "'%s': use letters, digits, '-', '_', '.', ':' and '/'", out);
    char c0 = out[0];
    if (!((c0 >= 'a' && c0 <= 'z') || (c0 >= 'A' && c0 <= 'Z') || (c0 >= '0' && c0 <= '9')))
        return fail(p, v, f, "'%s': a model name starts with a letter or a digit", out);
    return 0;
}

static int model_name(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    model_ctx *mc = obj;
    mc->mk->has_name = true;
    return get_model_name(p, v, f, mc->m->name);
}

/* aliases: other names of the model, e.g. [meta-llama/Llama-3.1-8B-Instruct, llama3:8b]. */
static int model_aliases(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    colo_model_cfg *m = ((model_ctx *)obj)->m;
    if (v->type != YAML_SEQUENCE_NODE)
        return fail(p, v, f, "expected a list of names");
    m->n_aliases = 0;
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
        yaml_node_t *e = yaml_document_get_node(p->doc, *it);
        if (m->n_aliases == COLO_CFG_MAX_ALIASES)
            return fail(p, e, f, "at most %d aliases", COLO_CFG_MAX_ALIASES);
        if (get_model_name(p, e, f, m->aliases[m->n_aliases]))
            return -1;
        m->n_aliases++;
    }
    return 0;
}

static int model_kind(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    model_ctx *mc = obj;
    colo_model_cfg *m = mc->m;
    /* The name of a model kind; colo-server checks that it exists. */
    mc->mk->has_kind = true;
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
/* A path relative to the config file's folder into out (cap bytes). */
static int resolve_path(parse_ctx *p, const yaml_node_t *v, const char *f, char *out, size_t cap)
{
    char raw[1024];
    if (get_str(p, v, f, raw, sizeof raw))
        return -1;
    const char *dir = raw[0] == '/' || !p->dir[0] ? "" : p->dir;
    size_t ld = strlen(dir), lr = strlen(raw);
    if (ld + lr + 2 > cap)
        return fail(p, v, f, "the path is too long");
    memcpy(out, dir, ld);
    if (ld)
        out[ld++] = '/';
    memcpy(out + ld, raw, lr + 1);
    return 0;
}

static int model_path(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    model_ctx *mc = obj;
    mc->mk->has_path = true;
    return resolve_path(p, v, f, mc->m->path, sizeof mc->m->path);
}

/* source: { pypi, file }: the file in the model cache. */
static int model_source(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    model_ctx *mc = obj;
    colo_model_cfg *m = mc->m;
    mc->mk->has_source = true;
    if (each_section(p, v, f, source_keys, m, m))
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

/* The fractions and shares: where each was written, for the checks across
 * models. */
static int model_share(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    model_ctx *mc = obj;
    colo_model_cfg *m = mc->m;
    model_marks *mk = mc->mk;
    if (!strcmp(key, "memory_fraction")) {
        mk->has_fraction = true;
        mk->fraction = mark_of(v);
        return get_num(p, v, f, 0, true, 1, &m->memory_fraction);
    }
    if (!strcmp(key, "memory_max_fraction")) {
        mk->max_fraction = mark_of(v);
        return get_num(p, v, f, 0, true, 1, &m->memory_max_fraction);
    }
    if (!strcmp(key, "sm_share")) {
        mk->sm_share = mark_of(v);
        return get_num(p, v, f, 0, true, 1, &m->sm_share);
    }
    mk->share = mark_of(v); /* share */
    return get_num(p, v, f, 0, true, 1000, &m->share);
}

static int model_chat_template(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    colo_model_cfg *m = ((model_ctx *)obj)->m;
    const char *names[32];
    int i;
    names_from(colo_chat_format_name_at, names, 32); /* models/sample/chat.c's table */
    if (get_enum(p, v, f, names, &i))
        return -1;
    snprintf(m->chat_template, sizeof m->chat_template, "%s", names[i]);
    return 0;
}

/* max_seq_len, or its other name context: one of them. */
static int model_seq_len(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    model_ctx *mc = obj;
    if (mc->mk->has_seq_len)
        return fail(p, v, f, "give one of max_seq_len or context");
    mc->mk->has_seq_len = true;
    return get_int(p, v, f, 1, 1 << 24, &mc->m->max_seq_len);
}

static int model_prefix_cache(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    if (v->type != YAML_SCALAR_NODE || (strcmp(scalar(v), "true") && strcmp(scalar(v), "false")))
        return fail(p, v, f, "must be true or false");
    ((model_ctx *)obj)->m->no_prefix_cache = !strcmp(scalar(v), "false");
    return 0;
}

/* A request admission finds cannot meet its SLA: serve it or reject it. */
static int model_on_overload(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    static const char *const modes[] = {"serve", "reject", NULL};
    int i;
    if (get_enum(p, v, f, modes, &i))
        return -1;
    ((model_ctx *)obj)->m->sla.reject_late = i == 1;
    return 0;
}

/* ---- adapters: [{name, path, scale, priority, sla, on_overload}] ------------------- */

static int adapter_name(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    return get_model_name(p, v, f, ((colo_adapter_cfg *)obj)->name);
}

static int adapter_path(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    colo_adapter_cfg *a = obj;
    return resolve_path(p, v, f, a->path, sizeof a->path);
}

static int adapter_priority(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    colo_adapter_cfg *a = obj;
    int i;
    if (get_enum(p, v, f, colo_priority_names, &i))
        return -1;
    a->priority = (colo_priority)i;
    a->has_priority = true;
    return 0;
}

static int adapter_sla(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    colo_adapter_cfg *a = obj;
    a->has_sla = true;
    return each_section(p, v, f, sla_keys, &a->sla, a);
}

static int adapter_on_overload(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    static const char *const modes[] = {"serve", "reject", NULL};
    colo_adapter_cfg *a = obj;
    int i;
    if (get_enum(p, v, f, modes, &i))
        return -1;
    a->sla.reject_late = i == 1;
    a->has_sla = true;
    return 0;
}

static const key_spec adapter_keys[] = {
    KEY_FN("name", adapter_name),
    KEY_FN("path", adapter_path),
    KEY_NUM("scale", colo_adapter_cfg, scale, -1e6, 1e6),
    KEY_FN("priority", adapter_priority),
    KEY_FN("sla", adapter_sla),
    KEY_FN("on_overload", adapter_on_overload),
    KEY_END,
};

static int adapter_item(parse_ctx *p, const yaml_node_t *v, const char *field, void *obj, int index)
{
    colo_model_cfg *m = obj;
    colo_adapter_cfg *a = &m->adapters[index];
    memset(a, 0, sizeof *a);
    a->scale = 1.0;
    a->mark = mark_of(v);
    if (each_section(p, v, field, adapter_keys, a, a))
        return -1;
    if (!a->name[0])
        return fail(p, v, field, "name: is required");
    if (!a->path[0])
        return fail(p, v, field, "path: is required (a GGUF LoRA adapter of the model)");
    return 0;
}

static int model_adapters(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    colo_model_cfg *m = ((model_ctx *)obj)->m;
    m->n_adapters = 0;
    return each_item(p, v, f, "adapters", COLO_CFG_MAX_ADAPTERS, false, &m->n_adapters, adapter_item, m);
}

static const key_spec model_keys[] = {
    KEY_FN("name", model_name),
    KEY_FN("aliases", model_aliases),
    KEY_FN("kind", model_kind),
    KEY_FN("path", model_path),
    KEY_FN("source", model_source),
    KEY_INT("keep_alive_ms", colo_model_cfg, keep_alive_ms, 0, 2000000000),
    KEY_BOOL("pinned", colo_model_cfg, pinned),
    KEY_BOOL("message_control_tokens", colo_model_cfg, message_control_tokens),
    KEY_BOOL("exact_activations", colo_model_cfg, exact_activations),
    KEY_FN("memory_fraction", model_share),
    KEY_FN("memory_max_fraction", model_share),
    KEY_FN("sm_share", model_share),
    KEY_FN("share", model_share),
    KEY_FN("chat_template", model_chat_template),
    KEY_ENUM("priority", colo_model_cfg, priority, colo_priority_names),
    KEY_FN("max_seq_len", model_seq_len),
    KEY_FN("context", model_seq_len),
    KEY_MAP_SAME("kv_cache", kv_keys),
    KEY_FN("prefix_cache", model_prefix_cache),
    KEY_MAP("batching", colo_model_cfg, batching, batching_keys),
    KEY_MAP("sla", colo_model_cfg, sla, sla_keys),
    KEY_FN("on_overload", model_on_overload),
    KEY_MAP_SAME("structured_output", structured_output_keys),
    KEY_FN("speculative", model_speculative),
    KEY_FN("adapters", model_adapters),
    KEY_SIZE("adapter_memory_bytes", colo_model_cfg, adapter_memory_bytes, 0),
    KEY_END,
};

static int model_field(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    return read_key(p, model_keys, key, v, ((model_ctx *)obj)->m, obj, f);
}

static void model_defaults(colo_model_cfg *m)
{
    memset(m, 0, sizeof *m);
    m->priority = COLO_PRIO_NORMAL;
    m->kv_block_size = 16;
    m->kv_dtype = COLO_F16;
    m->schema_max_length = COLO_SCHEMA_DEFAULT_MAX_LENGTH;
    m->schema_max_items = COLO_SCHEMA_DEFAULT_MAX_ITEMS;
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
    for (int i = 0; i < m->n_aliases; i++)
        for (int j = -1; j < i; j++)
            if (!strcmp(m->aliases[i], j < 0 ? m->name : m->aliases[j]))
                return fail(p, n, field, "aliases: '%s' is the model's name or another alias already", m->aliases[i]);
    if (m->n_adapters && !colo_kind_named_can(m->kind, COLO_KIND_CAN_ADAPTERS)) {
        char kinds[128];
        colo_kind_names_that_can(COLO_KIND_CAN_ADAPTERS, kinds, sizeof kinds);
        return fail(p, n, field, "adapters: only %s models take LoRA adapters", kinds);
    }
    for (int i = 0; i < m->n_adapters; i++) {
        colo_adapter_cfg *a = (colo_adapter_cfg *)&m->adapters[i]; /* defaults: the base's, now all its keys are read */
        if (!a->has_sla)
            a->sla = m->sla;
        if (!a->has_priority)
            a->priority = m->priority;
        bool taken = colo_model_cfg_named(m, a->name);
        for (int j = 0; j < i && !taken; j++)
            taken = !strcmp(m->adapters[j].name, a->name);
        if (taken)
            return fail(p, n, field, "adapters: '%s' (line %d) is the model's name or another adapter's already",
                        a->name, a->mark.line);
    }
    const colo_model_kind *kind = colo_kind_find(m->kind);
    if (m->speculative.suffix_memory_bytes > COLO_SPEC_SUFFIX_MAX_BYTES)
        return fail_at(p, m->speculative.mark, "speculative.suffix_memory_bytes",
                       "%llu bytes is more than a suffix cache may take (%llu)",
                       (unsigned long long)m->speculative.suffix_memory_bytes,
                       (unsigned long long)COLO_SPEC_SUFFIX_MAX_BYTES);
    if ((m->speculative.lookup || m->speculative.suffix || m->speculative.draft[0]) && kind &&
        kind->task != COLO_TASK_GENERATE)
        return fail_at(p, m->speculative.mark, "speculative",
                       "the %s kind does not generate text: it has no tokens to draft", m->kind);
    const colo_batching_cfg *b = &m->batching;
    if (b->n_preferred && b->preferred_batch_size[b->n_preferred - 1] > b->max_batch_size)
        return fail(p, n, field, "batching.preferred_batch_size %d is above max_batch_size %d",
                    b->preferred_batch_size[b->n_preferred - 1], b->max_batch_size);
    return 0;
}

typedef struct top_ctx {
    colo_config *c;
    model_marks *marks;
} top_ctx;

static int model_item(parse_ctx *p, const yaml_node_t *mn, const char *field, void *obj, int index)
{
    top_ctx *t = obj;
    colo_config *c = t->c;
    colo_model_cfg *m = &c->models[index];
    model_marks *mk = &t->marks[index];
    model_defaults(m);
    memset(mk, 0, sizeof *mk);
    m->mark = mark_of(mn);
    model_ctx mc = {m, mk};
    if (each_key(p, mn, field, model_field, &mc) || model_check(p, mn, field, m, mk))
        return -1;
    for (int j = 0; j < index; j++)
        for (int a = -1; a < m->n_aliases + m->n_adapters; a++) {
            const char *n = a < 0 ? m->name : a < m->n_aliases ? m->aliases[a] : m->adapters[a - m->n_aliases].name;
            if (colo_model_cfg_named(&c->models[j], n) || colo_model_cfg_adapter(&c->models[j], n))
                return fail(p, mn, field, "model name '%s' is already used at line %d", n, c->models[j].mark.line);
        }
    return 0;
}

static int parse_models(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    top_ctx *t = obj;
    return each_item(p, v, f, "models", COLO_CFG_MAX_MODELS, false, &t->c->n_models, model_item, t);
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

static int quota_key(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    colo_quota_cfg *q = obj;
    if (strcmp(key, "concurrent"))
        return get_quota(p, v, f, key[0] == 'r' ? &q->requests_per_minute : &q->tokens_per_minute);
    int64_t x;
    if (get_quota(p, v, f, &x))
        return -1;
    if (x > INT_MAX)
        return fail(p, v, f, "at most %d", INT_MAX);
    q->concurrent = (int)x;
    return 0;
}

static const key_spec quota_keys[] = {
    KEY_FN("requests_per_minute", quota_key),
    KEY_FN("tokens_per_minute", quota_key),
    KEY_FN("concurrent", quota_key),
    KEY_END,
};

static int level_models(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    colo_tenant_level_cfg *l = obj;
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

/* The keys every level (organization, project, key) shares. */
static const key_spec level_keys[] = {
    KEY_MAP("quotas", colo_tenant_level_cfg, quotas, quota_keys),
    KEY_NUM_OPEN("weight", colo_tenant_level_cfg, weight, 0, 1e6),
    KEY_ENUM("max_priority", colo_tenant_level_cfg, max_priority, colo_priority_names),
    KEY_FN("models", level_models),
    KEY_END,
};

/* A level's key: its own (specs, read into base with ctx) or one every
 * level shares (read into l). */
static int read_level_key(parse_ctx *p, const key_spec *specs, const char *key, const yaml_node_t *v, void *base,
                          void *ctx, colo_tenant_level_cfg *l, const char *f)
{
    const key_spec *s = find_key(specs, key);
    if (s)
        return read_spec(p, s, key, v, base, ctx, f);
    s = find_key(level_keys, key);
    return s ? read_spec(p, s, key, v, l, l, f) : unknown_key(p, v, f);
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

static int key_name(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    colo_tenant_level_cfg *l = &((key_ctx *)obj)->k->l;
    return get_name(p, v, f, l->name, sizeof l->name);
}

static int key_sha256(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    key_ctx *kc = obj;
    kc->has_hash = true;
    if (v->type != YAML_SCALAR_NODE || colo_config_parse_sha256(scalar(v), kc->k->sha256) != COLO_OK)
        return fail(p, v, f, "expected 64 hex digits (colo-server --hash-key prints them)");
    return 0;
}

static const key_spec key_keys[] = {
    KEY_FN("name", key_name),
    KEY_FN("sha256", key_sha256),
    KEY_END,
};

static int key_field(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    key_ctx *kc = obj;
    return read_level_key(p, key_keys, key, v, kc->k, kc, &kc->k->l, f);
}

typedef struct project_ctx {
    colo_config *c;
    int project;
} project_ctx;

static int key_item(parse_ctx *p, const yaml_node_t *kn, const char *field, void *obj, int index)
{
    project_ctx *pc = obj;
    colo_tenants_cfg *t = &pc->c->tenants;
    colo_key_cfg *k = &t->keys[index];
    level_defaults(&k->l, kn);
    k->project = pc->project;
    key_ctx kc = {k, false};
    if (each_key(p, kn, field, key_field, &kc))
        return -1;
    if (!k->l.name[0])
        return fail(p, kn, field, "name: is required");
    if (!kc.has_hash)
        return fail(p, kn, field, "sha256: is required (colo-server --hash-key prints it)");
    for (int j = 0; j < index; j++) {
        if (t->keys[j].project == pc->project && !strcmp(t->keys[j].l.name, k->l.name))
            return fail(p, kn, field, "key name '%s' is already used at line %d", k->l.name, t->keys[j].l.mark.line);
        if (!memcmp(t->keys[j].sha256, k->sha256, 32))
            return fail(p, kn, field, "the same key is already given at line %d", t->keys[j].l.mark.line);
    }
    return 0;
}

static int project_name(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    project_ctx *pc = obj;
    colo_tenant_level_cfg *l = &pc->c->tenants.projects[pc->project].l;
    return get_name(p, v, f, l->name, sizeof l->name);
}

static int project_keys(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    project_ctx *pc = obj;
    return each_item(p, v, f, "keys", COLO_CFG_MAX_KEYS, true, &pc->c->tenants.n_keys, key_item, pc);
}

static const key_spec project_keys_spec[] = {
    KEY_FN("name", project_name),
    KEY_FN("keys", project_keys),
    KEY_END,
};

static int project_field(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    project_ctx *pc = obj;
    colo_project_cfg *pr = &pc->c->tenants.projects[pc->project];
    return read_level_key(p, project_keys_spec, key, v, pr, pc, &pr->l, f);
}

typedef struct org_ctx {
    colo_config *c;
    int org;
} org_ctx;

static int project_item(parse_ctx *p, const yaml_node_t *pn, const char *field, void *obj, int index)
{
    org_ctx *oc = obj;
    colo_tenants_cfg *t = &oc->c->tenants;
    colo_project_cfg *pr = &t->projects[index];
    level_defaults(&pr->l, pn);
    pr->org = oc->org;
    project_ctx pc = {oc->c, index};
    if (each_key(p, pn, field, project_field, &pc))
        return -1;
    if (!pr->l.name[0])
        return fail(p, pn, field, "name: is required");
    for (int j = 0; j < index; j++)
        if (t->projects[j].org == oc->org && !strcmp(t->projects[j].l.name, pr->l.name))
            return fail(p, pn, field, "project name '%s' is already used at line %d", pr->l.name,
                        t->projects[j].l.mark.line);
    return 0;
}

static int org_name(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    org_ctx *oc = obj;
    colo_tenant_level_cfg *l = &oc->c->tenants.orgs[oc->org].l;
    if (get_name(p, v, f, l->name, sizeof l->name))
        return -1;
    if (!strcmp(l->name, "default"))
        return fail(p, v, f, "'default' is the organization of server.api_key_env's key; choose another name");
    return 0;
}

static int org_projects(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    org_ctx *oc = obj;
    return each_item(p, v, f, "projects", COLO_CFG_MAX_PROJECTS, true, &oc->c->tenants.n_projects, project_item, oc);
}

static const key_spec org_keys[] = {
    KEY_FN("organization", org_name),
    KEY_FN("projects", org_projects),
    KEY_END,
};

static int org_field(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    org_ctx *oc = obj;
    colo_org_cfg *o = &oc->c->tenants.orgs[oc->org];
    return read_level_key(p, org_keys, key, v, o, oc, &o->l, f);
}

static int org_item(parse_ctx *p, const yaml_node_t *on, const char *field, void *obj, int index)
{
    colo_config *c = obj;
    colo_tenants_cfg *t = &c->tenants;
    colo_org_cfg *o = &t->orgs[index];
    level_defaults(&o->l, on);
    org_ctx oc = {c, index};
    if (each_key(p, on, field, org_field, &oc))
        return -1;
    if (!o->l.name[0])
        return fail(p, on, field, "organization: is required");
    for (int j = 0; j < index; j++)
        if (!strcmp(t->orgs[j].l.name, o->l.name))
            return fail(p, on, field, "organization '%s' is already used at line %d", o->l.name, t->orgs[j].l.mark.line);
    return 0;
}

static int parse_tenants(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    colo_config *c = ((top_ctx *)obj)->c;
    return each_item(p, v, f, "organizations", COLO_CFG_MAX_ORGS, false, &c->tenants.n_orgs, org_item, c);
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
                found = !strcmp(c->models[j].name, l->models[m]) || colo_model_cfg_adapter(&c->models[j], l->models[m]);
            if (!found)
                return fail_at(p, l->model_marks[m], "tenants.models",
                               "'%s' (of %s) is not a model (or adapter) in models:", l->models[m], l->name);
        }
    }
    return 0;
}

static int usage_db(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    colo_usage_cfg *u = obj;
    char raw[1024];
    if (get_str(p, v, f, raw, sizeof raw))
        return -1;
    const char *dir = raw[0] == '/' || !p->dir[0] ? "" : p->dir;
    int n = snprintf(u->db, sizeof u->db, "%s%s%s", dir, dir[0] ? "/" : "", raw);
    if (n < 0 || (size_t)n >= sizeof u->db)
        return fail(p, v, f, "the path is too long");
    return 0;
}

static const key_spec usage_keys[] = {
    KEY_BOOL("enabled", colo_usage_cfg, enabled),
    KEY_INT("lock_wait_ms", colo_usage_cfg, lock_wait_ms, 0, 600000),
    KEY_FN("db", usage_db),
    KEY_END,
};

static const key_spec price_keys[] = {
    KEY_NUM("per_device_hour", colo_price_cfg, per_device_hour, 0, 1e12),
    KEY_NUM("per_million_tokens", colo_price_cfg, per_million_tokens, 0, 1e12),
    KEY_END,
};

/* models: a mapping of model name to its prices. */
static int pricing_models(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    (void)key;
    colo_pricing_cfg *pc = obj;
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
        if (get_str(p, k, field, m->model, sizeof m->model) || each_section(p, mv, field, price_keys, m, m))
            return -1;
        for (int j = 0; j < pc->n_models; j++)
            if (!strcmp(pc->models[j].model, m->model))
                return fail(p, k, field, "priced twice");
        pc->n_models++;
    }
    return 0;
}

static const key_spec pricing_keys[] = {
    KEY_STR("currency", colo_pricing_cfg, currency),
    KEY_FN("models", pricing_models),
    KEY_END,
};

static const key_spec batches_keys[] = {
    KEY_BOOL("enabled", colo_batches_cfg, enabled),
    KEY_SIZE("max_file_bytes", colo_batches_cfg, max_file_bytes, 1),
    KEY_INT("max_lines", colo_batches_cfg, max_lines, 1, 1000000),
    KEY_INT("concurrency", colo_batches_cfg, concurrency, 1, 256),
    KEY_INT("window_s", colo_batches_cfg, window_s, 1, 30 * 86400),
    KEY_END,
};

static const key_spec responses_keys[] = {
    KEY_BOOL("enabled", colo_responses_cfg, enabled),
    KEY_BOOL("store_default", colo_responses_cfg, store_default),
    KEY_INT("retention_s", colo_responses_cfg, retention_s, 1, 366 * 86400),
    KEY_END,
};

static const key_spec top_keys[] = {
    KEY_MAP("server", colo_config, server, server_keys),
    KEY_MAP("scheduler", colo_config, scheduler, scheduler_keys),
    KEY_FN("models", parse_models),
    KEY_FN("tenants", parse_tenants),
    KEY_MAP("usage", colo_config, usage, usage_keys),
    KEY_MAP("pricing", colo_config, pricing, pricing_keys),
    KEY_MAP("batches", colo_config, batches, batches_keys),
    KEY_MAP("responses", colo_config, responses, responses_keys),
    KEY_END,
};

static int top_field(parse_ctx *p, const char *key, const yaml_node_t *v, void *obj, const char *f)
{
    top_ctx *t = obj;
    return read_key(p, top_keys, key, v, t->c, t, f);
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
        colo_sched_model sm = {.priority = m->priority, .share = m->share, .sm_share = m->sm_share};
        colo_sched_key key;
        char why[256];
        if (colo_sched_policy_validate(c->scheduler.policy, &sm, &key, why, sizeof why) != COLO_OK) {
            snprintf(field, sizeof field, "models[%d].%s", i, colo_sched_key_name(key));
            return fail_at(p, key == COLO_SCHED_KEY_SHARE ? marks[i].share : marks[i].sm_share, field, "%s", why);
        }
        if (m->speculative.draft[0]) {
            const colo_model_cfg *d = NULL;
            for (int j = 0; j < c->n_models && !d; j++)
                if (colo_model_cfg_named(&c->models[j], m->speculative.draft))
                    d = &c->models[j];
            snprintf(field, sizeof field, "models[%d].speculative.draft", i);
            if (!d)
                return fail_at(p, m->speculative.mark, field,
                               "no model is named '%s' (a draft model is another model of models:)",
                               m->speculative.draft);
            if (d == m)
                return fail_at(p, m->speculative.mark, field, "model %s cannot draft for itself", m->name);
            if (d->speculative.draft[0])
                return fail_at(p, m->speculative.mark, field,
                               "the draft model %s drafts with a model of its own (%s): a draft model decodes plainly",
                               d->name, d->speculative.draft);
            if (strcmp(d->kind, m->kind))
                return fail_at(p, m->speculative.mark, field,
                               "model %s is of kind %s, model %s of kind %s: a draft model is of its target's kind",
                               d->name, d->kind, m->name, m->kind);
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
    s->min_residency_ms = COLO_EVICTOR_MIN_RESIDENCY_MS;
    c->scheduler.policy = COLO_SCHED_PRIORITY;
    c->scheduler.best_effort_max_steps = 0;
    c->scheduler.best_effort_max_ops = 8;
    c->scheduler.quantum_us = 10000;
    c->scheduler.batch_min_share = COLO_CFG_BATCH_MIN_SHARE;
    c->usage.enabled = true;
    c->usage.lock_wait_ms = 5000;
    c->batches.enabled = true;
    c->batches.max_file_bytes = 100u << 20;
    c->batches.max_lines = 50000;
    c->batches.concurrency = 4;
    c->batches.window_s = 86400;
    c->responses.enabled = true;
    c->responses.store_default = true;
    c->responses.retention_s = 30 * 86400;
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

/* text as one YAML (or JSON) document, its root given to fn with the
 * parse context; the messages of colo_config_load. */
typedef int (*root_fn)(parse_ctx *p, yaml_node_t *root, void *ctx);

static colo_status parse_document(const char *text, size_t len, const char *source, const char *base_dir,
                                  const char *what, root_fn fn, void *ctx, char *err, size_t errlen)
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
    if (!root)
        colo_set_err(err, errlen, "%s:1:1: (%s): empty", source, what);
    else if (!fn(&p, root, ctx))
        st = COLO_OK;
    yaml_document_delete(&doc);
out_delete_parser:
    yaml_parser_delete(&parser);
    return st;
}

static int model_root(parse_ctx *p, yaml_node_t *root, void *ctx)
{
    colo_model_cfg *out = ctx;
    model_marks mk;
    memset(&mk, 0, sizeof mk);
    model_defaults(out);
    out->mark = mark_of(root);
    model_ctx mc = {out, &mk};
    if (each_key(p, root, "model", model_field, &mc) || model_check(p, root, "model", out, &mk))
        return -1;
    if (out->memory_max_fraction > 0 && out->memory_max_fraction < out->memory_fraction)
        return fail_at(p, mk.max_fraction, "model.memory_max_fraction", "%g is below memory_fraction %g (a ceiling, not a share)",
                       out->memory_max_fraction, out->memory_fraction);
    return 0;
}

colo_status colo_config_parse_model(const char *text, size_t len, const char *source, const char *base_dir,
                                    colo_model_cfg *out, char *err, size_t errlen)
{
    return parse_document(text, len, source, base_dir, "model", model_root, out, err, errlen);
}

typedef struct adapter_root_ctx {
    const colo_model_cfg *base;
    colo_adapter_cfg *out;
} adapter_root_ctx;

static int adapter_root(parse_ctx *p, yaml_node_t *root, void *ctx)
{
    adapter_root_ctx *a = ctx;
    colo_model_cfg *m = calloc(1, sizeof *m); /* the base's defaults, and adapter_item's checks */
    if (!m)
        return fail(p, root, "adapter", "out of memory");
    int rc = adapter_item(p, root, "adapter", m, 0);
    if (!rc) {
        *a->out = m->adapters[0];
        if (!a->out->has_sla)
            a->out->sla = a->base->sla;
        if (!a->out->has_priority)
            a->out->priority = a->base->priority;
    }
    free(m);
    return rc;
}

colo_status colo_config_parse_adapter(const char *text, size_t len, const char *source, const char *base_dir,
                                      const colo_model_cfg *base, colo_adapter_cfg *out, char *err, size_t errlen)
{
    adapter_root_ctx a = {base, out};
    return parse_document(text, len, source, base_dir, "adapter", adapter_root, &a, err, errlen);
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
