/* Prometheus registry: families of labelled series, rendered as text 0.0.4. */
#include "server/http/metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_HOOKS 8

const double colo_metrics_latency_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                               0.5,   1,      2.5,   5,    10,    30,    60};
const int colo_metrics_latency_buckets_n = sizeof colo_metrics_latency_buckets / sizeof *colo_metrics_latency_buckets;

typedef struct series {
    char *values[COLO_METRICS_MAX_LABELS];
    double value;                              /* counter, gauge */
    uint64_t counts[COLO_METRICS_MAX_BUCKETS]; /* histogram: per bucket, not cumulative */
    uint64_t count;
    double sum;
    struct series *next;
} series;

struct colo_metric {
    colo_metrics *reg;
    char *name, *help;
    colo_metric_type type;
    char *labels[COLO_METRICS_MAX_LABELS];
    int n_labels;
    double buckets[COLO_METRICS_MAX_BUCKETS];
    int n_buckets;
    series *series; /* in creation order */
    series *tail;
    struct colo_metric *next;
};

typedef struct render_hook {
    void (*fn)(void *);
    void *ud;
} render_hook;

struct colo_metrics {
    pthread_mutex_t mu;
    colo_metric *families, *tail;
    render_hook hooks[MAX_HOOKS];
    int n_hooks;
};

colo_metrics *colo_metrics_create(void)
{
    colo_metrics *m = calloc(1, sizeof *m);
    if (m && pthread_mutex_init(&m->mu, NULL)) {
        free(m);
        return NULL;
    }
    return m;
}

static void family_free(colo_metric *f)
{
    for (series *s = f->series, *next; s; s = next) {
        next = s->next;
        for (int i = 0; i < f->n_labels; i++)
            free(s->values[i]);
        free(s);
    }
    for (int i = 0; i < f->n_labels; i++)
        free(f->labels[i]);
    free(f->name);
    free(f->help);
    free(f);
}

void colo_metrics_free(colo_metrics *m)
{
    if (!m)
        return;
    for (colo_metric *f = m->families, *next; f; f = next) {
        next = f->next;
        family_free(f);
    }
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static bool valid_name(const char *s, bool label)
{
    if (!s || !*s || (*s >= '0' && *s <= '9'))
        return false;
    if (label && s[0] == '_' && s[1] == '_')
        return false; /* reserved */
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              (!label && *s == ':')))
            return false;
    return true;
}

static series *series_get(colo_metric *f, const char *const *values);

static colo_metric *family_new(colo_metrics *m, colo_metric_type type, const char *name, const char *help,
                               int n_labels, const char *const *label_names, const double *buckets, int n_buckets)
{
    if (!m || !valid_name(name, false) || n_labels < 0 || n_labels > COLO_METRICS_MAX_LABELS ||
        (n_labels && !label_names) || n_buckets < 0 || n_buckets > COLO_METRICS_MAX_BUCKETS - 1)
        return NULL;
    for (int i = 0; i < n_labels; i++)
        if (!valid_name(label_names[i], true) || (type == COLO_METRIC_HISTOGRAM && !strcmp(label_names[i], "le")))
            return NULL;
    for (int i = 0; i < n_buckets; i++)
        if (!isfinite(buckets[i]) || (i && buckets[i] <= buckets[i - 1]))
            return NULL;
    colo_metric *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->reg = m;
    f->type = type;
    f->name = strdup(name);
    f->help = strdup(help ? help : "");
    bool ok = f->name && f->help;
    for (int i = 0; i < n_labels && ok; i++) {
        ok = (f->labels[i] = strdup(label_names[i])) != NULL;
        f->n_labels += ok;
    }
    if (!ok) {
        family_free(f);
        return NULL;
    }
    if (n_buckets)
        memcpy(f->buckets, buckets, (size_t)n_buckets * sizeof *buckets);
    f->n_buckets = n_buckets;
    pthread_mutex_lock(&m->mu);
    for (colo_metric *g = m->families; g; g = g->next) {
        if (!strcmp(g->name, name)) {
            pthread_mutex_unlock(&m->mu);
            family_free(f);
            return NULL;
        }
    }
    /* A family without labels shows its zero before its first update. */
    if (!n_labels && !series_get(f, NULL)) {
        pthread_mutex_unlock(&m->mu);
        family_free(f);
        return NULL;
    }
    if (m->tail)
        m->tail->next = f;
    else
        m->families = f;
    m->tail = f;
    pthread_mutex_unlock(&m->mu);
    return f;
}

colo_metric *colo_metrics_counter(colo_metrics *m, const char *name, const char *help, int n_labels,
                                  const char *const *label_names)
{
    return family_new(m, COLO_METRIC_COUNTER, name, help, n_labels, label_names, NULL, 0);
}

colo_metric *colo_metrics_gauge(colo_metrics *m, const char *name, const char *help, int n_labels,
                                const char *const *label_names)
{
    return family_new(m, COLO_METRIC_GAUGE, name, help, n_labels, label_names, NULL, 0);
}

colo_metric *colo_metrics_histogram(colo_metrics *m, const char *name, const char *help, int n_labels,
                                    const char *const *label_names, const double *buckets, int n_buckets)
{
    if (!buckets && n_buckets)
        return NULL;
    return family_new(m, COLO_METRIC_HISTOGRAM, name, help, n_labels, label_names, buckets, n_buckets);
}

/* Under the registry lock. */
static series *series_get(colo_metric *f, const char *const *values)
{
    for (series *s = f->series; s; s = s->next) {
        int i = 0;
        while (i < f->n_labels && !strcmp(s->values[i], values[i] ? values[i] : ""))
            i++;
        if (i == f->n_labels)
            return s;
    }
    series *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    for (int i = 0; i < f->n_labels; i++) {
        if (!(s->values[i] = strdup(values[i] ? values[i] : ""))) {
            for (int j = 0; j < i; j++)
                free(s->values[j]);
            free(s);
            return NULL;
        }
    }
    if (f->tail)
        f->tail->next = s;
    else
        f->series = s;
    f->tail = s;
    return s;
}

static colo_status update(colo_metric *f, const char *const *values, double v, int op)
{
    if (!f || (f->n_labels && !values))
        return COLO_EINVAL;
    pthread_mutex_lock(&f->reg->mu);
    series *s = series_get(f, values);
    colo_status st = COLO_OK;
    if (!s) {
        st = COLO_ENOMEM;
    } else if (op == 0) { /* add */
        s->value += v;
    } else if (op == 1) { /* set */
        s->value = v;
    } else {              /* observe */
        int b = 0;
        while (b < f->n_buckets && v > f->buckets[b])
            b++;
        s->counts[b]++;
        s->count++;
        s->sum += v;
    }
    pthread_mutex_unlock(&f->reg->mu);
    return st;
}

colo_status colo_metric_add(colo_metric *f, const char *const *label_values, double v)
{
    if (!f || f->type == COLO_METRIC_HISTOGRAM || (f->type == COLO_METRIC_COUNTER && !(v >= 0)))
        return COLO_EINVAL;
    return update(f, label_values, v, 0);
}

colo_status colo_metric_set(colo_metric *f, const char *const *label_values, double v)
{
    if (!f || f->type == COLO_METRIC_HISTOGRAM)
        return COLO_EINVAL;
    return update(f, label_values, v, 1);
}

colo_status colo_metric_observe(colo_metric *f, const char *const *label_values, double v)
{
    if (!f || f->type != COLO_METRIC_HISTOGRAM || isnan(v))
        return COLO_EINVAL;
    return update(f, label_values, v, 2);
}

colo_status colo_metric_remove(colo_metric *f, const char *const *label_values)
{
    if (!f || (f->n_labels && !label_values))
        return COLO_EINVAL;
    pthread_mutex_lock(&f->reg->mu);
    series *prev = NULL, *s = f->series;
    for (; s; prev = s, s = s->next) {
        int i = 0;
        while (i < f->n_labels && !strcmp(s->values[i], label_values[i] ? label_values[i] : ""))
            i++;
        if (i == f->n_labels)
            break;
    }
    if (s) {
        if (prev)
            prev->next = s->next;
        else
            f->series = s->next;
        if (f->tail == s)
            f->tail = prev;
        for (int i = 0; i < f->n_labels; i++)
            free(s->values[i]);
        free(s);
    }
    pthread_mutex_unlock(&f->reg->mu);
    return COLO_OK;
}

int colo_metric_read(colo_metric *f, const char *const *label_values, colo_metric_reading *out)
{
    memset(out, 0, sizeof *out);
    if (!f)
        return 0;
    int matched = 0;
    pthread_mutex_lock(&f->reg->mu);
    for (const series *s = f->series; s; s = s->next) {
        int i = 0;
        while (i < f->n_labels && (!label_values || !label_values[i] || !strcmp(s->values[i], label_values[i])))
            i++;
        if (i < f->n_labels)
            continue;
        matched++;
        out->value += s->value;
        out->count += s->count;
        out->sum += s->sum;
        for (int b = 0; b <= f->n_buckets && b <= COLO_METRICS_MAX_BUCKETS; b++)
            out->counts[b] += s->counts[b];
    }
    pthread_mutex_unlock(&f->reg->mu);
    return matched;
}

const double *colo_metric_buckets(const colo_metric *f, int *n)
{
    *n = f ? f->n_buckets : 0;
    return f ? f->buckets : NULL;
}

colo_status colo_metrics_on_render(colo_metrics *m, void (*fn)(void *ud), void *ud)
{
    pthread_mutex_lock(&m->mu);
    colo_status st = COLO_EINVAL;
    if (m->n_hooks < MAX_HOOKS) {
        m->hooks[m->n_hooks].fn = fn;
        m->hooks[m->n_hooks++].ud = ud;
        st = COLO_OK;
    }
    pthread_mutex_unlock(&m->mu);
    return st;
}

/* ---- rendering ------------------------------------------------------------------- */

typedef struct out {
    char *buf;
    size_t len, cap;
    bool failed;
} out;

static void put(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out *o, const char *fmt, ...)
{
    if (o->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->failed = true;
            return;
        }
        if ((size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        size_t cap = o->cap * 2 + (size_t)n + 1;
        char *b = realloc(o->buf, cap);
        if (!b) {
            o->failed = true;
            return;
        }
        o->buf = b;
        o->cap = cap;
    }
}

/* HELP text escapes \ and newline; label values also escape ". */
static void put_escaped(out *o, const char *s, bool quote)
{
    for (; *s && !o->failed; s++) {
        if (*s == '\\')
            put(o, "\\\\");
        else if (*s == '\n')
            put(o, "\\n");
        else if (quote && *s == '"')
            put(o, "\\\"");
        else
            put(o, "%c", *s);
    }
}

/* The shortest %g form that reads back as v ("0.0025", not
 * "0.0025000000000000001"). */
static void shortest_real(char *buf, size_t cap, double v)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

static void put_number(out *o, double v)
{
    if (isnan(v))
        put(o, "NaN");
    else if (isinf(v))
        put(o, v > 0 ? "+Inf" : "-Inf");
    else if (v == floor(v) && fabs(v) < 1e15)
        put(o, "%.0f", v);
    else {
        char buf[32];
        shortest_real(buf, sizeof buf, v);
        put(o, "%s", buf);
    }
}

/* {a="x",b="y"[,le="..."]} */
static void put_labels(out *o, const colo_metric *f, const series *s, const char *le)
{
    if (!f->n_labels && !le)
        return;
    put(o, "{");
    for (int i = 0; i < f->n_labels; i++) {
        put(o, "%s%s=\"", i ? "," : "", f->labels[i]);
        put_escaped(o, s->values[i], true);
        put(o, "\"");
    }
    if (le)
        put(o, "%sle=\"%s\"", f->n_labels ? "," : "", le);
    put(o, "}");
}

static void render_family(out *o, const colo_metric *f)
{
    static const char *const types[] = {"counter", "gauge", "histogram"};
    put(o, "# HELP %s ", f->name);
    put_escaped(o, f->help, false);
    put(o, "\n# TYPE %s %s\n", f->name, types[f->type]);
    for (const series *s = f->series; s; s = s->next) {
        if (f->type != COLO_METRIC_HISTOGRAM) {
            put(o, "%s", f->name);
            put_labels(o, f, s, NULL);
            put(o, " ");
            put_number(o, s->value);
            put(o, "\n");
            continue;
        }
        uint64_t cum = 0;
        for (int b = 0; b <= f->n_buckets; b++) {
            char le[64];
            if (b < f->n_buckets)
                shortest_real(le, sizeof le, f->buckets[b]);
            else
                snprintf(le, sizeof le, "+Inf");
            cum += s->counts[b];
            put(o, "%s_bucket", f->name);
            put_labels(o, f, s, le);
            put(o, " %llu\n", (unsigned long long)cum);
        }
        put(o, "%s_sum", f->name);
        put_labels(o, f, s, NULL);
        put(o, " ");
        put_number(o, s->sum);
        put(o, "\n%s_count", f->name);
        put_labels(o, f, s, NULL);
        put(o, " %llu\n", (unsigned long long)s->count);
    }
}

char *colo_metrics_render(colo_metrics *m, size_t *len)
{
    pthread_mutex_lock(&m->mu);
    int n_hooks = m->n_hooks;
    render_hook hooks[MAX_HOOKS];
    memcpy(hooks, m->hooks, sizeof hooks);
    pthread_mutex_unlock(&m->mu);
    for (int i = 0; i < n_hooks; i++)
        hooks[i].fn(hooks[i].ud);

    out o = {malloc(4096), 0, 4096, false};
    if (!o.buf)
        return NULL;
    o.buf[0] = 0;
    pthread_mutex_lock(&m->mu);
    for (const colo_metric *f = m->families; f; f = f->next)
        render_family(&o, f);
    pthread_mutex_unlock(&m->mu);
    if (o.failed) {
        free(o.buf);
        return NULL;
    }
    if (len)
        *len = o.len;
    return o.buf;
}
