/* loadtest/trace.c: drawn and recorded request streams for the trace scenario. */
#include "loadtest/trace.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loadtest/engine.h"
#include "loadtest/workload.h"

void lt_zipf_cdf(size_t n, double s, double *cdf)
{
    double sum = 0;
    for (size_t k = 0; k < n; k++) {
        sum += 1.0 / pow((double)(k + 1), s);
        cdf[k] = sum;
    }
    for (size_t k = 0; k < n; k++)
        cdf[k] /= sum;
    if (n)
        cdf[n - 1] = 1.0;
}

size_t lt_zipf_pick(const double *cdf, size_t n, uint64_t *rng)
{
    double u = lt_rand_unit(rng);
    size_t lo = 0, hi = n - 1;
    while (lo < hi) { /* the first k with u <= cdf[k] */
        size_t mid = lo + (hi - lo) / 2;
        if (u <= cdf[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static lt_status trace_push(lt_trace *t, const lt_trace_req *r)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        lt_trace_req *v = realloc(t->v, cap * sizeof *v);
        if (!v)
            return LT_ENOMEM;
        t->v = v;
        t->cap = cap;
    }
    t->v[t->n++] = *r;
    return LT_OK;
}

/* uniform in [len * (1 - spread), len * (1 + spread)], at least 1 */
static int draw_len(uint64_t *rng, int len, double spread)
{
    double lo = len * (1.0 - spread), hi = len * (1.0 + spread);
    int v = (int)floor(lo + lt_rand_unit(rng) * (hi - lo + 1.0));
    if (v > (int)floor(hi))
        v = (int)floor(hi);
    return v < 1 ? 1 : v;
}

lt_status lt_trace_generate(const lt_trace_opts *o, lt_trace *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (o->n_models == 0 || o->n_models > 1024 || !(o->zipf_s >= 0) || !(o->rate_per_s > 0) ||
        !(o->duration_s > 0) || o->input_len <= 0 || o->output_len <= 0 || !(o->spread >= 0 && o->spread < 1) ||
        o->burstiness < 0) {
        lt_set_err(err, errlen, "trace: needs models, a positive rate, duration and lengths, zipf >= 0, "
                                "spread in [0, 1)");
        return LT_EINVAL;
    }
    double cdf[1024];
    lt_zipf_cdf(o->n_models, o->zipf_s, cdf);
    /* three streams, so that changing the lengths leaves times and models as they were */
    uint64_t rng_gap = o->seed ^ 0x7a11c0ffee01ull, rng_model = o->seed ^ 0x2bad5eed02ull,
             rng_len = o->seed ^ 0x1e9f0d1e03ull;
    double t = 0;
    for (uint64_t k = 0; !o->max_requests || k < o->max_requests; k++) {
        /* constant gaps from the start, so rounding never accumulates */
        double at = o->burstiness > 0 ? t : (double)k / o->rate_per_s;
        if (at >= o->duration_s)
            break;
        lt_trace_req r = {
            .at_s = at,
            .model = (unsigned)lt_zipf_pick(cdf, o->n_models, &rng_model),
            .prompt_tokens = draw_len(&rng_len, o->input_len, o->spread),
            .output_tokens = draw_len(&rng_len, o->output_len, o->spread),
        };
        if (trace_push(out, &r) != LT_OK) {
            lt_trace_free(out);
            lt_set_err(err, errlen, "out of memory");
            return LT_ENOMEM;
        }
        if (o->burstiness > 0)
            t += lt_arrival_gap_s(&rng_gap, o->rate_per_s, o->burstiness);
    }
    return LT_OK;
}

/* ---- trace files ---------------------------------------------------------------- */

static json_t *field(json_t *obj, const char *const *names)
{
    for (; *names; names++) {
        json_t *v = json_object_get(obj, *names);
        if (v && !json_is_null(v))
            return v;
    }
    return NULL;
}

static const char *const ts_names[] = {"timestamp", "TIMESTAMP", "Timestamp", "time", "arrival_time", NULL};
static const char *const model_names[] = {"model", "Model", NULL};
static const char *const prompt_names[] = {"prompt_tokens", "ContextTokens", "Request tokens", "input_tokens",
                                           "prompt_len", NULL};
static const char *const output_names[] = {"output_tokens", "GeneratedTokens", "Response tokens", "output_len",
                                           NULL};

/* Seconds of a timestamp: a number, a numeric string or a UTC date-time. */
static bool parse_time(json_t *v, double *out)
{
    if (json_is_number(v)) {
        *out = json_number_value(v);
        return isfinite(*out);
    }
    const char *s = json_string_value(v);
    if (!s || !*s)
        return false;
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (*end == '\0' && !errno && isfinite(d)) {
        *out = d;
        return true;
    }
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    int used = 0;
    char sep;
    if (sscanf(s, "%4d-%2d-%2d%c%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &sep, &tm.tm_hour, &tm.tm_min,
               &tm.tm_sec, &used) != 7 ||
        (sep != ' ' && sep != 'T'))
        return false;
    double frac = 0;
    const char *p = s + used;
    if (*p == '.') {
        double scale = 0.1;
        for (p++; *p >= '0' && *p <= '9'; p++, scale /= 10)
            frac += (*p - '0') * scale;
    }
    if (*p == 'Z')
        p++;
    if (*p != '\0')
        return false;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    time_t secs = timegm(&tm);
    if (secs == (time_t)-1)
        return false;
    *out = (double)secs + frac;
    return true;
}

/* A token count: a non-negative integer (or integral number); 0 is sent as 1. */
static bool parse_count(json_t *v, int *out)
{
    double d;
    if (json_is_integer(v))
        d = (double)json_integer_value(v);
    else if (json_is_real(v))
        d = json_real_value(v);
    else
        return false;
    if (!(d >= 0) || d > 10000000 || d != floor(d))
        return false;
    *out = d < 1 ? 1 : (int)d;
    return true;
}

/* One line's request; LT_EFORMAT with "what is wrong" in err. */
static lt_status parse_row(json_t *obj, double *ts, const char **model, int *prompt, int *output, char *err,
                           size_t errlen)
{
    json_t *t = field(obj, ts_names), *m = field(obj, model_names), *p = field(obj, prompt_names),
           *o = field(obj, output_names);
    if (!t || !parse_time(t, ts)) {
        lt_set_err(err, errlen, t ? "bad timestamp" : "no timestamp (timestamp, TIMESTAMP or Timestamp)");
        return LT_EFORMAT;
    }
    if (!p || !parse_count(p, prompt)) {
        lt_set_err(err, errlen, p ? "bad prompt token count (a non-negative integer)"
                                  : "no prompt tokens (prompt_tokens, ContextTokens or \"Request tokens\")");
        return LT_EFORMAT;
    }
    if (!o || !parse_count(o, output)) {
        lt_set_err(err, errlen, o ? "bad output token count (a non-negative integer)"
                                  : "no output tokens (output_tokens, GeneratedTokens or \"Response tokens\")");
        return LT_EFORMAT;
    }
    if (m && !json_is_string(m)) {
        lt_set_err(err, errlen, "\"model\" must be a string");
        return LT_EFORMAT;
    }
    *model = m ? json_string_value(m) : NULL;
    return LT_OK;
}

/* The run's model index for a trace's model name; unknown names are
 * mapped in order of first appearance. */
static lt_status map_model(const char *name, const char *const *models, size_t n_models, char (*seen)[128],
                           size_t *n_seen, unsigned *out)
{
    for (size_t i = 0; i < n_models; i++)
        if (strcmp(models[i], name) == 0) {
            *out = (unsigned)i;
            return LT_OK;
        }
    for (size_t i = 0; i < *n_seen; i++)
        if (strcmp(seen[i], name) == 0) {
            *out = (unsigned)(i % n_models);
            return LT_OK;
        }
    if (*n_seen == 1024)
        return LT_EFORMAT;
    snprintf(seen[*n_seen], sizeof seen[0], "%s", name);
    *out = (unsigned)(*n_seen % n_models);
    (*n_seen)++;
    return LT_OK;
}

lt_status lt_trace_load(const char *path, const char *const *models, size_t n_models, double speed,
                        double zipf_s, uint64_t seed, lt_trace *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (n_models == 0 || n_models > 1024 || !(speed > 0) || !(zipf_s >= 0)) {
        lt_set_err(err, errlen, "trace %s: needs models, a positive speed and zipf >= 0", path);
        return LT_EINVAL;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        lt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return LT_EIO;
    }
    double cdf[1024];
    lt_zipf_cdf(n_models, zipf_s, cdf);
    uint64_t rng = seed ^ 0x2bad5eed02ull;
    char (*seen)[128] = calloc(1024, sizeof *seen);
    size_t n_seen = 0;
    lt_status st = seen ? LT_OK : LT_ENOMEM;
    char *line = NULL, why[160];
    size_t cap = 0;
    unsigned lineno = 0;
    double t0 = 0, last = -INFINITY;
    json_t *obj;
    while (st == LT_OK && (obj = lt_jsonl_next(f, path, &line, &cap, &lineno, &st, err, errlen))) {
        double ts = 0;
        const char *name = NULL;
        lt_trace_req r;
        st = parse_row(obj, &ts, &name, &r.prompt_tokens, &r.output_tokens, why, sizeof why);
        if (st == LT_OK && ts < last) {
            snprintf(why, sizeof why, "timestamp %.6f is before the previous row's %.6f", ts, last);
            st = LT_EFORMAT;
        }
        if (st == LT_OK && name && map_model(name, models, n_models, seen, &n_seen, &r.model) != LT_OK) {
            snprintf(why, sizeof why, "more than 1024 model names");
            st = LT_EFORMAT;
        }
        json_decref(obj);
        if (st != LT_OK) {
            lt_set_err(err, errlen, "%s:%u: %s", path, lineno, why);
            break;
        }
        if (!name)
            r.model = (unsigned)lt_zipf_pick(cdf, n_models, &rng);
        if (out->n == 0)
            t0 = ts;
        last = ts;
        r.at_s = (ts - t0) / speed;
        if (trace_push(out, &r) != LT_OK)
            st = LT_ENOMEM;
    }
    if (st == LT_ENOMEM)
        lt_set_err(err, errlen, "out of memory");
    if (st == LT_OK && ferror(f)) {
        lt_set_err(err, errlen, "%s: read error", path);
        st = LT_EIO;
    }
    if (st == LT_OK && out->n == 0) {
        lt_set_err(err, errlen, "%s: no requests", path);
        st = LT_EFORMAT;
    }
    free(line);
    free(seen);
    fclose(f);
    if (st != LT_OK)
        lt_trace_free(out);
    return st;
}

void lt_trace_free(lt_trace *t)
{
    if (!t)
        return;
    free(t->v);
    memset(t, 0, sizeof *t);
}
