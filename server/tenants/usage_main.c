/* colo-usage: reports from the usage ledger, with costs from the config's
 * pricing. Exit codes: 0 ok, 1 the ledger cannot be read, 2 usage or
 * config error. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/config.h"
#include "server/tenants/ledger.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: colo-usage report --config FILE [--db FILE] [--from TIME] [--to TIME]\n"
            "                         [--group-by LIST] [--format csv|json|html] [--out FILE]\n"
            "  --config FILE   colo-server's configuration: the ledger (usage.db) and pricing:\n"
            "  --db FILE       the ledger, in place of the config's usage.db\n"
            "  --from, --to    the range [from, to): 2026-11-23, 2026-11-23T10:00:00Z or Unix seconds\n"
            "                  (default: everything up to now)\n"
            "  --group-by LIST organization, project, tenant (= organization,project), key, model, status,\n"
            "                  hour or day; default tenant,model\n"
            "  --format F      csv (default), json or html (a table and a chart per organization)\n"
            "  --out FILE      write there instead of standard output\n"
            "  --help          this text\n"
            "exit codes: 0 ok, 1 the ledger cannot be read, 2 usage or configuration error\n");
}

typedef struct report {
    const colo_pricing_cfg *pricing;
    unsigned group;
    colo_usage_row *rows;
    int n, cap;
    bool failed;
} report;

static void collect(void *ud, const colo_usage_row *row)
{
    report *r = ud;
    if (r->n == r->cap) {
        int cap = r->cap ? r->cap * 2 : 64;
        colo_usage_row *n = realloc(r->rows, (size_t)cap * sizeof *n);
        if (!n) {
            r->failed = true;
            return;
        }
        r->rows = n;
        r->cap = cap;
    }
    r->rows[r->n++] = *row;
}

/* Cost of a row: device-hours and tokens at the model's prices. Rows not
 * grouped by model cannot be priced per model: the report always groups
 * by model underneath (see main) and sums. */
static double cost_of(const colo_pricing_cfg *p, const colo_usage_row *row)
{
    for (int i = 0; i < p->n_models; i++)
        if (!strcmp(p->models[i].model, row->model))
            return row->device_seconds / 3600.0 * p->models[i].per_device_hour +
                   (double)(row->prompt_tokens + row->completion_tokens) / 1e6 * p->models[i].per_million_tokens;
    return 0;
}

static void when(int64_t s, char *buf, size_t cap)
{
    time_t t = (time_t)s;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Text for CSV and HTML: quotes doubled, never a separator inside. */
static void csv_field(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void html_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* A row's first cells, as CSV and HTML write them: open, its start (empty
 * unless grouped by hour or day), then its organization, project, key and
 * model, each after sep and written by field. */
static void row_names(FILE *f, const report *r, const colo_usage_row *w, const char *open, const char *sep,
                      void (*field)(FILE *f, const char *s))
{
    char t[32] = "";
    if (r->group & (COLO_USAGE_BY_HOUR | COLO_USAGE_BY_DAY))
        when(w->hour_s, t, sizeof t);
    fputs(open, f);
    fputs(t, f);
    const char *names[] = {w->organization, w->project, w->key, w->model};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        fputs(sep, f);
        field(f, names[i]);
    }
}

static void write_csv(FILE *f, const report *r)
{
    fprintf(f, "start,organization,project,key,model,status,requests,errors,prompt_tokens,completion_tokens,"
               "queue_seconds,device_seconds,cost\n");
    for (int i = 0; i < r->n; i++) {
        const colo_usage_row *w = &r->rows[i];
        row_names(f, r, w, "", ",", csv_field);
        fprintf(f, ",%d,%lld,%lld,%lld,%lld,%.6f,%.6f,%.6f\n", w->status, (long long)w->requests,
                (long long)w->errors, (long long)w->prompt_tokens, (long long)w->completion_tokens, w->queue_seconds,
                w->device_seconds, cost_of(r->pricing, w));
    }
}

static int write_json(FILE *f, const report *r, int64_t from, int64_t to)
{
    json_t *data = json_array();
    for (int i = 0; data && i < r->n; i++) {
        const colo_usage_row *w = &r->rows[i];
        char t[32] = "";
        if (r->group & (COLO_USAGE_BY_HOUR | COLO_USAGE_BY_DAY))
            when(w->hour_s, t, sizeof t);
        json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:s,s:i,s:I,s:I,s:I,s:I,s:f,s:f,s:f}", "start", t, "organization",
                              w->organization, "project", w->project, "key", w->key, "model", w->model, "status",
                              w->status, "requests", (json_int_t)w->requests, "errors", (json_int_t)w->errors,
                              "prompt_tokens", (json_int_t)w->prompt_tokens, "completion_tokens",
                              (json_int_t)w->completion_tokens, "queue_seconds", w->queue_seconds, "device_seconds",
                              w->device_seconds, "cost", cost_of(r->pricing, w));
        if (!j || json_array_append_new(data, j)) {
            json_decref(data);
            data = NULL;
        }
    }
    json_t *doc = data ? json_pack("{s:I,s:I,s:s,s:o}", "from", (json_int_t)from, "to", (json_int_t)to, "currency",
                                   r->pricing->currency, "data", data)
                       : NULL;
    if (!doc || json_dumpf(doc, f, JSON_INDENT(2)) || fputc('\n', f) == EOF) {
        json_decref(doc);
        return -1;
    }
    json_decref(doc);
    return 0;
}

/* A bar chart of one organization's cost (or device-seconds when nothing is
 * priced) by project and model. */
static void write_chart(FILE *f, const report *r, const char *org)
{
    double max = 0;
    int n = 0;
    bool priced = false;
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->rows[i].organization, org) && cost_of(r->pricing, &r->rows[i]) > 0)
            priced = true;
    for (int i = 0; i < r->n; i++) {
        if (strcmp(r->rows[i].organization, org))
            continue;
        double v = priced ? cost_of(r->pricing, &r->rows[i]) : r->rows[i].device_seconds;
        if (v > max)
            max = v;
        n++;
    }
    const int bar_h = 22, label_w = 260, width = 720;
    fprintf(f, "<h2>");
    html_text(f, org[0] ? org : "(all)");
    fprintf(f, "</h2>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" role=\"img\">\n", width,
            n * bar_h + 24);
    int y = 0;
    for (int i = 0; i < r->n; i++) {
        const colo_usage_row *w = &r->rows[i];
        if (strcmp(w->organization, org))
            continue;
        double v = priced ? cost_of(r->pricing, w) : w->device_seconds;
        int len = max > 0 ? (int)(v / max * (width - label_w - 120)) : 0;
        fprintf(f, "<text x=\"0\" y=\"%d\" font-size=\"12\">", y + 15);
        html_text(f, w->project);
        fputs(" / ", f);
        html_text(f, w->model);
        fprintf(f, "</text><rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#4a7ab5\"/>", label_w, y + 3,
                len, bar_h - 6);
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\">%.4g %s</text>\n", label_w + len + 6, y + 15, v,
                priced ? r->pricing->currency : "device-s");
        y += bar_h;
    }
    fprintf(f, "<text x=\"0\" y=\"%d\" font-size=\"11\" fill=\"#666\">%s by project and model</text></svg>\n",
            y + 16, priced ? "cost" : "device-seconds");
}

static void write_html(FILE *f, const report *r, int64_t from, int64_t to)
{
    char a[32], b[32];
    when(from, a, sizeof a);
    when(to, b, sizeof b);
    fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>colo usage %s to %s</title>\n"
               "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
               "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td.t{text-align:left}</style>"
               "</head><body>\n<h1>colo usage, %s to %s</h1>\n",
            a, b, a, b);
    fprintf(f, "<table><tr><th>start</th><th>organization</th><th>project</th><th>key</th><th>model</th>"
               "<th>status</th><th>requests</th><th>errors</th><th>prompt tokens</th><th>completion tokens</th>"
               "<th>queue s</th><th>device s</th><th>cost (%s)</th></tr>\n",
            r->pricing->currency);
    for (int i = 0; i < r->n; i++) {
        const colo_usage_row *w = &r->rows[i];
        row_names(f, r, w, "<tr><td class=\"t\">", "</td><td class=\"t\">", html_text);
        fprintf(f, "</td><td>%d</td><td>%lld</td><td>%lld</td><td>%lld</td><td>%lld</td><td>%.3f</td><td>%.3f</td>"
                   "<td>%.4f</td></tr>\n",
                w->status, (long long)w->requests, (long long)w->errors, (long long)w->prompt_tokens,
                (long long)w->completion_tokens, w->queue_seconds, w->device_seconds, cost_of(r->pricing, w));
    }
    fputs("</table>\n", f);
    for (int i = 0; i < r->n; i++) { /* one chart per organization, in order of first appearance */
        bool seen = false;
        for (int j = 0; j < i && !seen; j++)
            seen = !strcmp(r->rows[j].organization, r->rows[i].organization);
        if (!seen)
            write_chart(f, r, r->rows[i].organization);
    }
    fputs("</body></html>\n", f);
}

int main(int argc, char **argv)
{
    const char *config = NULL, *db = NULL, *from_s = NULL, *to_s = NULL, *format = "csv", *out = NULL;
    const char *group_s = "tenant,model";
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout);
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "report")) {
        usage(stderr);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = !strcmp(a, "--config")     ? &config
                           : !strcmp(a, "--db")       ? &db
                           : !strcmp(a, "--from")     ? &from_s
                           : !strcmp(a, "--to")       ? &to_s
                           : !strcmp(a, "--format")   ? &format
                           : !strcmp(a, "--out")      ? &out
                           : !strcmp(a, "--group-by") ? &group_s
                                                      : NULL;
        if (!strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!dst || i + 1 >= argc) {
            fprintf(stderr, "colo-usage: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        *dst = argv[++i];
    }
    if (!config) {
        fprintf(stderr, "colo-usage: --config FILE is required\n");
        return 2;
    }
    static colo_config cfg; /* large: not on the stack */
    char err[1024];
    if (colo_config_load(config, &cfg, err, sizeof err) != COLO_OK) {
        fprintf(stderr, "colo-usage: %s\n", err);
        return 2;
    }
    int64_t from = 0, to = (int64_t)time(NULL) + 1;
    if ((from_s && colo_usage_parse_time(from_s, &from) != COLO_OK) ||
        (to_s && colo_usage_parse_time(to_s, &to) != COLO_OK)) {
        fprintf(stderr, "colo-usage: --from/--to: expected 2026-11-23, 2026-11-23T10:00:00Z or Unix seconds\n");
        return 2;
    }
    unsigned group;
    if (colo_usage_parse_group(group_s, &group) != COLO_OK) {
        fprintf(stderr, "colo-usage: --group-by: a comma-separated list of organization, project, tenant, key, "
                        "model, status, and hour or day\n");
        return 2;
    }
    if (strcmp(format, "csv") && strcmp(format, "json") && strcmp(format, "html")) {
        fprintf(stderr, "colo-usage: --format: csv, json or html\n");
        return 2;
    }
    /* Costs are per model: a report not grouped by model still prices each model apart. */
    group |= COLO_USAGE_BY_MODEL;
    colo_ledger *l = colo_ledger_open(db ? db : cfg.usage.db, false, cfg.usage.lock_wait_ms, err, sizeof err);
    if (!l) {
        fprintf(stderr, "colo-usage: %s\n", err);
        return 1;
    }
    report r = {.pricing = &cfg.pricing, .group = group};
    colo_status st = colo_ledger_query(l, from, to, group, NULL, NULL, collect, &r, err, sizeof err);
    colo_ledger_close(l);
    if (st != COLO_OK || r.failed) {
        fprintf(stderr, "colo-usage: %s\n", r.failed ? "out of memory" : err);
        free(r.rows);
        return 1;
    }
    FILE *f = out ? fopen(out, "w") : stdout;
    if (!f) {
        fprintf(stderr, "colo-usage: cannot write %s\n", out);
        free(r.rows);
        return 1;
    }
    int rc = 0;
    if (!strcmp(format, "csv"))
        write_csv(f, &r);
    else if (!strcmp(format, "json"))
        rc = write_json(f, &r, from, to);
    else
        write_html(f, &r, from, to);
    if ((out ? fclose(f) : fflush(f)) || rc) {
        fprintf(stderr, "colo-usage: write error\n");
        rc = 1;
    }
    free(r.rows);
    return rc;
}
