/* loadtest/report_html.c: one self-contained HTML page (inline CSS and SVG,
 * no scripts): SLA verdict, a latency CDF per model (one line per phase),
 * throughput bars, the results table and the comparison. */
#include "loadtest/report.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "loadtest/workload.h"

static const char *const palette[] = {"#2563eb", "#dc2626", "#16a34a", "#9333ea",
                                      "#ea580c", "#0891b2", "#4b5563", "#ca8a04"};
#define N_COLORS (sizeof palette / sizeof *palette)

static void esc(FILE *f, const char *s)
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

static void num(FILE *f, double v, int prec)
{
    if (isnan(v))
        fputs("&ndash;", f);
    else
        fprintf(f, "%.*f", prec, v);
}

/* A round axis maximum at or above v: 1, 2, 2.5 or 5 times a power of ten. */
static double nice_ceil(double v)
{
    if (!(v > 0))
        return 1.0;
    double p = pow(10.0, floor(log10(v)));
    const double steps[] = {1, 2, 2.5, 5, 10};
    for (size_t i = 0; i < 5; i++)
        if (steps[i] * p >= v)
            return steps[i] * p;
    return 10 * p;
}

enum { CW = 560, CH = 330, ML = 62, MR = 20, MT = 16, MB = 46 };

/* Colour of a phase: by the first-seen order of phase names, so a phase
 * has the same colour in every chart. */
static const char *phase_color(const lt_report *rep, const char *name)
{
    size_t distinct = 0;
    for (size_t i = 0; i < rep->n_phases; i++) {
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = strcmp(rep->phases[j].name, rep->phases[i].name) == 0;
        if (seen)
            continue;
        if (strcmp(rep->phases[i].name, name) == 0)
            break;
        distinct++;
    }
    return palette[distinct % N_COLORS];
}

/* x position of latency v: linear on [0, xmax], or log10 on [xmin, xmax]. */
static double xpos(double v, bool log_x, double xmin, double xmax, double pw)
{
    if (!log_x)
        return ML + pw * v / xmax;
    if (v < xmin)
        v = xmin;
    return ML + pw * (log10(v) - log10(xmin)) / (log10(xmax) - log10(xmin));
}

static void cdf_chart(FILE *f, const lt_report *rep, const char *model)
{
    double xmax = 0, xmin = INFINITY;
    for (size_t i = 0; i < rep->n_phases; i++)
        for (size_t k = 0; k < rep->phases[i].n; k++) {
            const lt_result *r = &rep->phases[i].results[k];
            if (strcmp(r->model, model) != 0 || !r->lat.n)
                continue;
            if (r->lat.max > xmax)
                xmax = r->lat.max;
            if (r->lat.min > 0 && r->lat.min < xmin)
                xmin = r->lat.min;
        }
    /* a long tail squashes a linear axis: go logarithmic past a 20x spread */
    bool log_x = isfinite(xmin) && xmax / xmin > 20.0;
    if (log_x) {
        xmin = pow(10.0, floor(log10(xmin)));
        xmax = pow(10.0, ceil(log10(xmax)));
    } else {
        xmax = nice_ceil(xmax);
    }
    double pw = CW - ML - MR, ph = CH - MT - MB;
    /* The legend goes under the x axis, one line per phase, clear of the curves. */
    int n_lines = 0;
    for (size_t i = 0; i < rep->n_phases; i++)
        for (size_t k = 0; k < rep->phases[i].n; k++)
            n_lines += strcmp(rep->phases[i].results[k].model, model) == 0;
    int H = CH + 18 * n_lines + 4;
    fprintf(f, "<figure><svg viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" role=\"img\">\n", CW, H, CW, H);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%g\" height=\"%g\" class=\"plot\"/>\n", ML, MT, pw, ph);
    if (log_x) {
        for (double d = xmin; d <= xmax * 1.0001; d *= 10) {
            for (int m = 1; m < 10 && d * m <= xmax * 1.0001; m++) {
                double x = xpos(d * m, true, xmin, xmax, pw);
                fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid%s\"/>", x, MT, x,
                        MT + ph, m == 1 ? "" : " minor");
                if (m == 1)
                    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"middle\">%g</text>\n", x,
                            MT + ph + 16, d);
                if (d * 10 > xmax * 1.0001)
                    break;
            }
        }
    } else {
        for (int t = 0; t <= 5; t++) {
            double x = ML + pw * t / 5.0;
            fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>", x, MT, x, MT + ph);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"middle\">%g</text>\n", x,
                    MT + ph + 16, xmax * t / 5.0);
        }
    }
    const double ys[] = {0, 0.25, 0.5, 0.75, 0.9, 0.99};
    for (size_t t = 0; t < sizeof ys / sizeof *ys; t++) {
        double y = MT + ph * (1.0 - ys[t]);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid%s\"/>", ML, y, ML + pw, y,
                ys[t] >= 0.9 ? " dash" : "");
        if (ys[t] != 0.75 && ys[t] != 0.25)
            fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%s</text>\n", ML - 6,
                    y + (ys[t] == 0.99 ? 7 : 4), ys[t] == 0 ? "0" : ys[t] == 0.5 ? "p50" : ys[t] == 0.9 ? "p90" : "p99");
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"axis\" text-anchor=\"middle\">latency (ms%s)</text>\n",
            ML + pw / 2, CH - 8, log_x ? ", log scale" : "");
    fprintf(f, "<text x=\"14\" y=\"%.1f\" class=\"axis\" text-anchor=\"middle\" transform=\"rotate(-90 14 %.1f)\">"
               "fraction of requests</text>\n", MT + ph / 2, MT + ph / 2);
    size_t line = 0;
    for (size_t i = 0; i < rep->n_phases; i++) {
        for (size_t k = 0; k < rep->phases[i].n; k++) {
            const lt_result *r = &rep->phases[i].results[k];
            if (strcmp(r->model, model) != 0)
                continue;
            const char *color = phase_color(rep, rep->phases[i].name);
            size_t n = r->latency_ms.n;
            if (n) {
                fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", color);
                size_t m = n < 400 ? n : 400;
                double py = MT + ph;
                fprintf(f, "%.1f,%.1f ", xpos(r->latency_ms.v[0], log_x, xmin, xmax, pw), py);
                for (size_t j = 0; j < m; j++) {
                    size_t idx = m == 1 ? n - 1 : j * (n - 1) / (m - 1);
                    double x = xpos(r->latency_ms.v[idx], log_x, xmin, xmax, pw);
                    double y = MT + ph * (1.0 - (double)(idx + 1) / (double)n);
                    fprintf(f, "%.1f,%.1f %.1f,%.1f ", x, py, x, y); /* steps */
                    py = y;
                }
                fputs("\"/>\n", f);
            }
            double ly = CH + 10 + 18.0 * (double)line;
            fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"14\" height=\"4\" fill=\"%s\"/>", ML, ly - 5, color);
            fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"legend\">", ML + 20, ly);
            esc(f, rep->phases[i].name);
            fprintf(f, ": p50 ");
            num(f, r->lat.p50, 1);
            fprintf(f, ", p99 ");
            num(f, r->lat.p99, 1);
            fprintf(f, " ms</text>\n");
            line++;
        }
    }
    fprintf(f, "</svg><figcaption>");
    esc(f, model);
    fprintf(f, ": latency CDF</figcaption></figure>\n");
}

static void throughput_bars(FILE *f, const lt_report *rep)
{
    size_t rows = 0;
    double vmax = 0;
    for (size_t i = 0; i < rep->n_phases; i++)
        for (size_t k = 0; k < rep->phases[i].n; k++) {
            rows++;
            if (rep->phases[i].results[k].rps > vmax)
                vmax = rep->phases[i].results[k].rps;
        }
    vmax = nice_ceil(vmax);
    const int row_h = 26, label_w = 230, w = 900;
    int h = (int)rows * row_h + 40;
    double bw = w - label_w - 90;
    fprintf(f, "<figure><svg viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" role=\"img\">\n", w, h, w, h);
    for (int t = 0; t <= 4; t++) {
        double x = label_w + bw * t / 4.0;
        fprintf(f, "<line x1=\"%.1f\" y1=\"4\" x2=\"%.1f\" y2=\"%d\" class=\"grid\"/>", x, x, h - 24);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"tick\" text-anchor=\"middle\">%g</text>\n", x, h - 8,
                vmax * t / 4.0);
    }
    size_t row = 0;
    for (size_t i = 0; i < rep->n_phases; i++) {
        for (size_t k = 0; k < rep->phases[i].n; k++, row++) {
            const lt_result *r = &rep->phases[i].results[k];
            double y = 8 + (double)row * row_h;
            fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"legend\" text-anchor=\"end\">", label_w - 8, y + 14);
            esc(f, r->model);
            fputs(" &middot; ", f);
            esc(f, rep->phases[i].name);
            fprintf(f, "</text><rect x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>", label_w, y,
                    bw * r->rps / vmax, row_h - 8, phase_color(rep, rep->phases[i].name));
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"legend\">%.2f req/s</text>\n",
                    label_w + bw * r->rps / vmax + 6, y + 14, r->rps);
        }
    }
    fprintf(f, "</svg><figcaption>throughput: successful requests per second</figcaption></figure>\n");
}

static void results_table(FILE *f, const lt_report *rep)
{
    fputs("<table><thead><tr><th>phase</th><th>model</th><th>load</th><th>ok</th><th>errors</th>"
          "<th>timeouts</th><th>req/s</th><th>tok/s</th><th>p50 ms</th><th>p90 ms</th><th>p95 ms</th>"
          "<th>p99 ms</th><th>max ms</th><th>mean ms</th>", f);
    if (rep->streamed)
        fputs("<th>TTFT p50</th><th>TTFT p99</th><th>ITL p50</th><th>ITL p99</th>", f);
    fputs("</tr></thead><tbody>\n", f);
    for (size_t i = 0; i < rep->n_phases; i++) {
        for (size_t k = 0; k < rep->phases[i].n; k++) {
            const lt_result *r = &rep->phases[i].results[k];
            fputs("<tr><td>", f);
            esc(f, rep->phases[i].name);
            fputs("</td><td>", f);
            esc(f, r->model);
            if (r->concurrency)
                fprintf(f, "</td><td>c=%u", r->concurrency);
            else
                fprintf(f, "</td><td>%g/s", r->rate_per_s);
            fprintf(f, "</td><td>%llu</td><td>%llu</td><td>%llu</td><td>", (unsigned long long)r->ok,
                    (unsigned long long)(r->http_errors + r->connect_errors + r->io_errors),
                    (unsigned long long)r->timeouts);
            num(f, r->rps, 2);
            fputs("</td><td>", f);
            num(f, r->has_tokens ? r->tokens_per_s : NAN, 1);
            const double v[] = {r->lat.p50, r->lat.p90, r->lat.p95, r->lat.p99, r->lat.max, r->lat.mean,
                                r->ttft.p50, r->ttft.p99, r->itl.p50, r->itl.p99};
            size_t nv = rep->streamed ? 10 : 6;
            for (size_t j = 0; j < nv; j++) {
                fputs("</td><td>", f);
                num(f, v[j], 2);
            }
            fputs("</td></tr>\n", f);
        }
    }
    fputs("</tbody></table>\n", f);
}

/* Red when the change is for the worse (latency up, throughput down). */
static void pct_cell(FILE *f, double v, bool higher_is_worse)
{
    if (isnan(v))
        fputs("<td>n/a</td>", f);
    else
        fprintf(f, "<td class=\"%s\">%+.1f%%</td>", (v > 0) == higher_is_worse ? "up" : "down", v);
}

static void compare_table(FILE *f, const lt_report *rep)
{
    fputs("<h2>Individual vs concurrent</h2>\n<table><thead><tr><th>model</th><th>p50 ind</th>"
          "<th>p50 conc</th><th>impact</th><th>p99 ind</th><th>p99 conc</th><th>impact</th>"
          "<th>req/s ind</th><th>req/s conc</th><th>impact</th><th>tok/s ind</th><th>tok/s conc</th>"
          "<th>impact</th><th>errors ind/conc</th></tr></thead><tbody>\n", f);
    for (size_t i = 0; i < rep->n_cmp; i++) {
        const lt_compare *m = &rep->cmp[i];
        fputs("<tr><td>", f);
        esc(f, m->conc->model);
        fputs("</td><td>", f);
        num(f, m->ind->lat.p50, 2);
        fputs("</td><td>", f);
        num(f, m->conc->lat.p50, 2);
        fputs("</td>", f);
        pct_cell(f, m->p50_impact_pct, true);
        fputs("<td>", f);
        num(f, m->ind->lat.p99, 2);
        fputs("</td><td>", f);
        num(f, m->conc->lat.p99, 2);
        fputs("</td>", f);
        pct_cell(f, m->p99_impact_pct, true);
        fputs("<td>", f);
        num(f, m->ind->rps, 2);
        fputs("</td><td>", f);
        num(f, m->conc->rps, 2);
        fputs("</td>", f);
        pct_cell(f, m->rps_impact_pct, false);
        fputs("<td>", f);
        num(f, m->ind->has_tokens ? m->ind->tokens_per_s : NAN, 1);
        fputs("</td><td>", f);
        num(f, m->conc->has_tokens ? m->conc->tokens_per_s : NAN, 1);
        fputs("</td>", f);
        pct_cell(f, m->tps_impact_pct, false);
        fprintf(f, "<td>%llu / %llu</td></tr>\n", (unsigned long long)lt_result_errors(m->ind),
                (unsigned long long)lt_result_errors(m->conc));
    }
    fprintf(f, "</tbody></table>\n<p class=\"stp\">System throughput (STP, sum of concurrent/individual "
               "throughput): <b>%.3f</b> of %zu (%zu means no interference).</p>\n",
            rep->stp, rep->n_cmp, rep->n_cmp);
}

static void sla_block(FILE *f, const lt_report *rep)
{
    fprintf(f, "<div class=\"verdict %s\">SLA %s</div>\n<ul class=\"checks\">\n", rep->sla_pass ? "pass" : "fail",
            rep->sla_pass ? "PASS" : "FAIL");
    for (size_t i = 0; i < rep->n_checks; i++) {
        const lt_sla_check *c = &rep->checks[i];
        bool upper = strcmp(c->constraint, "min_rps") != 0;
        fprintf(f, "<li class=\"%s\"><b>%s</b> ", c->skipped ? "skip" : c->pass ? "ok" : "bad",
                c->skipped ? "skipped" : c->pass ? "ok" : "FAIL");
        esc(f, c->model);
        fprintf(f, " %s: measured ", c->constraint);
        num(f, c->measured, 3);
        fprintf(f, " %s %g%s</li>\n", upper ? "&le;" : "&ge;", c->bound, c->skipped ? " (needs --stream)" : "");
    }
    fputs("</ul>\n", f);
}

lt_status lt_report_html(const char *path, const lt_report *rep, char *err, size_t errlen)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        lt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return LT_EIO;
    }
    fputs("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
          "<title>colo-loadtest report</title>\n<style>\n"
          "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:#111827;margin:24px auto;"
          "max-width:1180px;padding:0 16px}\n"
          "h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #e5e7eb;"
          "padding-bottom:4px}\n"
          ".meta{color:#4b5563;margin:0 0 12px}\n"
          ".charts{display:flex;flex-wrap:wrap;gap:16px}figure{margin:0}figcaption{text-align:center;"
          "color:#374151;font-weight:600}\n"
          "svg .plot{fill:#fafafa;stroke:#9ca3af}svg .grid{stroke:#e5e7eb}svg .grid.dash{stroke:#cbd5e1;"
          "stroke-dasharray:4 3}svg .grid.minor{stroke:#f1f5f9}\n"
          "svg text{font:12px system-ui,sans-serif;fill:#374151}svg .axis{font-size:13px}\n"
          "table{border-collapse:collapse;font-variant-numeric:tabular-nums;font-size:13px}\n"
          "th,td{padding:4px 8px;border-bottom:1px solid #e5e7eb;text-align:right;white-space:nowrap}\n"
          "th{background:#f3f4f6}td:nth-child(-n+2),th:nth-child(-n+2){text-align:left}\n"
          "td.up{color:#b91c1c}td.down{color:#15803d}\n"
          ".verdict{display:inline-block;font-weight:700;font-size:18px;padding:6px 14px;border-radius:6px}\n"
          ".verdict.pass{background:#dcfce7;color:#166534}.verdict.fail{background:#fee2e2;color:#991b1b}\n"
          ".checks{list-style:none;padding:0}.checks li{padding:2px 0}.checks .bad b{color:#b91c1c}"
          ".checks .ok b{color:#15803d}.checks .skip b{color:#6b7280}\n"
          "</style></head><body>\n<h1>colo-loadtest report</h1>\n<p class=\"meta\">", f);
    esc(f, rep->url);
    fputs(" &middot; scenario <b>", f);
    esc(f, rep->scenario);
    fputs("</b> &middot; ", f);
    esc(f, rep->load_desc ? rep->load_desc : "");
    if (rep->requests)
        fprintf(f, " &middot; %llu requests per model", rep->requests);
    else
        fprintf(f, " &middot; %gs per phase", rep->duration_s);
    fprintf(f, " &middot; warm-up %gs%s</p>\n", rep->warmup_s, rep->streamed ? " &middot; streaming" : "");
    if (rep->has_sla)
        sla_block(f, rep);
    fputs("<h2>Latency</h2>\n<div class=\"charts\">\n", f);
    if (rep->n_phases) {
        /* one chart per model, in first-seen order */
        for (size_t i = 0; i < rep->n_phases; i++)
            for (size_t k = 0; k < rep->phases[i].n; k++) {
                const char *model = rep->phases[i].results[k].model;
                bool seen = false;
                for (size_t a = 0; a <= i && !seen; a++)
                    for (size_t b = 0; b < rep->phases[a].n && !seen; b++) {
                        if (a == i && b == k)
                            break;
                        seen = strcmp(rep->phases[a].results[b].model, model) == 0;
                    }
                if (!seen)
                    cdf_chart(f, rep, model);
            }
    }
    fputs("</div>\n<h2>Throughput</h2>\n", f);
    throughput_bars(f, rep);
    fputs("<h2>Results</h2>\n<p class=\"meta\">Latency counts from the intended send time; errors and "
          "timeouts are not in the latencies.</p>\n", f);
    results_table(f, rep);
    if (rep->n_cmp)
        compare_table(f, rep);
    fputs("</body></html>\n", f);
    if (fclose(f) != 0) {
        lt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return LT_EIO;
    }
    return LT_OK;
}
