/* loadtest/report_html.c: one self-contained HTML page (inline CSS and SVG,
 * no scripts): SLA verdict, separate servers vs colo, cost, a rate sweep's
 * attainment and goodput, CDFs of latency, TTFT and TPOT per model (one
 * line per phase), per-second throughput timelines, throughput bars, the
 * results table, the comparisons and goodput. */
#include "loadtest/report.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
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

typedef enum metric { M_LATENCY, M_TTFT, M_TPOT } metric;

static const lt_samples *metric_samples(const lt_result *r, metric m)
{
    return m == M_TTFT ? &r->ttft_ms : m == M_TPOT ? &r->tpot_ms : &r->latency_ms;
}

static const lt_summary *metric_summary(const lt_result *r, metric m)
{
    return m == M_TTFT ? &r->ttft : m == M_TPOT ? &r->tpot : &r->lat;
}

static const char *metric_name(metric m)
{
    return m == M_TTFT ? "time to first token" : m == M_TPOT ? "time per output token" : "latency";
}

static bool model_has(const lt_report *rep, const char *model, metric m)
{
    for (size_t i = 0; i < rep->n_phases; i++)
        for (size_t k = 0; k < rep->phases[i].n; k++)
            if (strcmp(rep->phases[i].results[k].model, model) == 0 && metric_summary(&rep->phases[i].results[k], m)->n)
                return true;
    return false;
}

static void cdf_chart(FILE *f, const lt_report *rep, const char *model, metric met)
{
    double xmax = 0, xmin = INFINITY;
    for (size_t i = 0; i < rep->n_phases; i++)
        for (size_t k = 0; k < rep->phases[i].n; k++) {
            const lt_result *r = &rep->phases[i].results[k];
            const lt_summary *sm = metric_summary(r, met);
            if (strcmp(r->model, model) != 0 || !sm->n)
                continue;
            if (sm->max > xmax)
                xmax = sm->max;
            if (sm->min > 0 && sm->min < xmin)
                xmin = sm->min;
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
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"axis\" text-anchor=\"middle\">%s (ms%s)</text>\n",
            ML + pw / 2, CH - 8, metric_name(met), log_x ? ", log scale" : "");
    fprintf(f, "<text x=\"14\" y=\"%.1f\" class=\"axis\" text-anchor=\"middle\" transform=\"rotate(-90 14 %.1f)\">"
               "fraction of requests</text>\n", MT + ph / 2, MT + ph / 2);
    size_t line = 0;
    for (size_t i = 0; i < rep->n_phases; i++) {
        for (size_t k = 0; k < rep->phases[i].n; k++) {
            const lt_result *r = &rep->phases[i].results[k];
            if (strcmp(r->model, model) != 0)
                continue;
            const char *color = phase_color(rep, rep->phases[i].name);
            const lt_samples *smp = metric_samples(r, met);
            const lt_summary *sum = metric_summary(r, met);
            size_t n = smp->n;
            if (n) {
                fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", color);
                size_t m = n < 400 ? n : 400;
                double py = MT + ph;
                fprintf(f, "%.1f,%.1f ", xpos(smp->v[0], log_x, xmin, xmax, pw), py);
                for (size_t j = 0; j < m; j++) {
                    size_t idx = m == 1 ? n - 1 : j * (n - 1) / (m - 1);
                    double x = xpos(smp->v[idx], log_x, xmin, xmax, pw);
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
            num(f, sum->p50, 1);
            fprintf(f, ", p99 ");
            num(f, sum->p99, 1);
            fprintf(f, " ms</text>\n");
            line++;
        }
    }
    fprintf(f, "</svg><figcaption>");
    esc(f, model);
    fprintf(f, ": %s CDF</figcaption></figure>\n", metric_name(met));
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
    else if (v == 0)
        fputs("<td>0.0%</td>", f);
    else
        fprintf(f, "<td class=\"%s\">%+.1f%%</td>", (v > 0) == higher_is_worse ? "up" : "down", v);
}

/* One measure's cells of a comparison: alone, together, and the change. */
static void compare_cells(FILE *f, double ind, double conc, int digits, double impact_pct, bool higher_is_worse)
{
    fputs("<td>", f);
    num(f, ind, digits);
    fputs("</td><td>", f);
    num(f, conc, digits);
    fputs("</td>", f);
    pct_cell(f, impact_pct, higher_is_worse);
}

static void compare_table(FILE *f, const char *title, const lt_compare *cmp, size_t n_cmp, double stp)
{
    fputs("<h2>", f);
    esc(f, title);
    fputs("</h2>\n<table><thead><tr><th>model</th><th>p50 ind</th>"
          "<th>p50 conc</th><th>impact</th><th>p99 ind</th><th>p99 conc</th><th>impact</th>"
          "<th>req/s ind</th><th>req/s conc</th><th>impact</th><th>tok/s ind</th><th>tok/s conc</th>"
          "<th>impact</th><th>errors ind/conc</th></tr></thead><tbody>\n", f);
    for (size_t i = 0; i < n_cmp; i++) {
        const lt_compare *m = &cmp[i];
        fputs("<tr><td>", f);
        esc(f, m->conc->model);
        fputs("</td>", f);
        compare_cells(f, m->ind->lat.p50, m->conc->lat.p50, 2, m->p50_impact_pct, true);
        compare_cells(f, m->ind->lat.p99, m->conc->lat.p99, 2, m->p99_impact_pct, true);
        compare_cells(f, m->ind->rps, m->conc->rps, 2, m->rps_impact_pct, false);
        compare_cells(f, m->ind->has_tokens ? m->ind->tokens_per_s : NAN,
                      m->conc->has_tokens ? m->conc->tokens_per_s : NAN, 1, m->tps_impact_pct, false);
        fprintf(f, "<td>%llu / %llu</td></tr>\n", (unsigned long long)lt_result_errors(m->ind),
                (unsigned long long)lt_result_errors(m->conc));
    }
    fprintf(f, "</tbody></table>\n<p class=\"stp\">System throughput (STP, sum of concurrent/individual "
               "throughput): <b>%.3f</b> of %zu (%zu means no interference).</p>\n",
            stp, n_cmp, n_cmp);
}

/* Whether results[k] of phase i is the first of its model in the report. */
static bool first_seen(const lt_report *rep, size_t i, size_t k)
{
    const char *model = rep->phases[i].results[k].model;
    for (size_t a = 0; a <= i; a++)
        for (size_t b = 0; b < rep->phases[a].n; b++) {
            if (a == i && b == k)
                return true;
            if (strcmp(rep->phases[a].results[b].model, model) == 0)
                return false;
        }
    return true;
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


/* ---- line charts (timelines, sweeps) ---------------------------------------------- */

typedef struct series {
    char label[200];
    const char *color;
    double *x, *y;            /* owned by the caller */
    size_t n;
} series;

/* y against x, one polyline with dots per series; hline (NAN: none) is a
 * dashed reference, vline_x[i] (NAN: none) a dotted marker per series. */
static void line_chart(FILE *f, const char *caption, const char *xlabel, const char *ylabel, const series *s,
                       size_t ns, double ymax, double hline, const double *vline_x, bool dots)
{
    double xmax = 0, ymx = 0;
    for (size_t i = 0; i < ns; i++)
        for (size_t j = 0; j < s[i].n; j++) {
            if (s[i].x[j] > xmax)
                xmax = s[i].x[j];
            if (!isnan(s[i].y[j]) && s[i].y[j] > ymx)
                ymx = s[i].y[j];
        }
    xmax = nice_ceil(xmax);
    if (!(ymax > 0))
        ymax = nice_ceil(ymx);
    double pw = CW - ML - MR, ph = CH - MT - MB;
    int H = CH + 18 * (int)ns + 4;
    fprintf(f, "<figure><svg viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" role=\"img\">\n", CW, H, CW, H);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%g\" height=\"%g\" class=\"plot\"/>\n", ML, MT, pw, ph);
    for (int t = 0; t <= 5; t++) {
        double x = ML + pw * t / 5.0, y = MT + ph * (1.0 - t / 5.0);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>", x, MT, x, MT + ph);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"middle\">%g</text>\n", x, MT + ph + 16,
                xmax * t / 5.0);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>", ML, y, ML + pw, y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%g</text>\n", ML - 6, y + 4,
                ymax * t / 5.0);
    }
    if (!isnan(hline)) {
        double y = MT + ph * (1.0 - hline / ymax);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#6b7280\" stroke-dasharray=\"6 4\"/>\n",
                ML, y, ML + pw, y);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"axis\" text-anchor=\"middle\">", ML + pw / 2, CH - 8);
    esc(f, xlabel);
    fprintf(f, "</text>\n<text x=\"14\" y=\"%.1f\" class=\"axis\" text-anchor=\"middle\" transform=\"rotate(-90 14 %.1f)\">",
            MT + ph / 2, MT + ph / 2);
    esc(f, ylabel);
    fputs("</text>\n", f);
    for (size_t i = 0; i < ns; i++) {
        if (s[i].n) {
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", s[i].color);
            for (size_t j = 0; j < s[i].n; j++)
                if (!isnan(s[i].y[j]))
                    fprintf(f, "%.1f,%.1f ", ML + pw * s[i].x[j] / xmax, MT + ph * (1.0 - s[i].y[j] / ymax));
            fputs("\"/>\n", f);
            for (size_t j = 0; dots && j < s[i].n; j++)
                if (!isnan(s[i].y[j]))
                    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>", ML + pw * s[i].x[j] / xmax,
                            MT + ph * (1.0 - s[i].y[j] / ymax), s[i].color);
        }
        if (vline_x && !isnan(vline_x[i]) && vline_x[i] <= xmax) {
            double x = ML + pw * vline_x[i] / xmax;
            fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-dasharray=\"2 3\" "
                       "stroke-width=\"2\"/>\n", x, MT, x, MT + ph, s[i].color);
        }
        double ly = CH + 10 + 18.0 * (double)i;
        fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"14\" height=\"4\" fill=\"%s\"/>", ML, ly - 5, s[i].color);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"legend\">", ML + 20, ly);
        esc(f, s[i].label);
        fputs("</text>\n", f);
    }
    fputs("</svg><figcaption>", f);
    esc(f, caption);
    fputs("</figcaption></figure>\n", f);
}

static void series_free(series *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(s[i].x);
        free(s[i].y);
    }
}

/* Per model, completions (or output tokens) per second over each phase's
 * time, one line per phase. */
static void timeline_chart(FILE *f, const lt_report *rep, const char *model)
{
    series s[64];
    size_t ns = 0;
    bool tokens = true;
    for (size_t i = 0; i < rep->n_phases; i++)
        for (size_t k = 0; k < rep->phases[i].n; k++)
            if (strcmp(rep->phases[i].results[k].model, model) == 0 && !rep->phases[i].results[k].has_tokens)
                tokens = false;
    for (size_t i = 0; i < rep->n_phases && ns < 64; i++) {
        for (size_t k = 0; k < rep->phases[i].n; k++) {
            const lt_result *r = &rep->phases[i].results[k];
            if (strcmp(r->model, model) != 0 || !r->n_reqs)
                continue;
            double tmax = 0;
            for (size_t j = 0; j < r->n_reqs; j++)
                if (r->reqs[j].done_s > tmax)
                    tmax = r->reqs[j].done_s;
            size_t nb = (size_t)tmax + 1;
            if (nb > 100000)
                nb = 100000;
            series *sr = &s[ns];
            memset(sr, 0, sizeof *sr);
            sr->x = calloc(nb, sizeof *sr->x);
            sr->y = calloc(nb, sizeof *sr->y);
            if (!sr->x || !sr->y) {
                free(sr->x);
                free(sr->y);
                continue;
            }
            for (size_t j = 0; j < r->n_reqs; j++) {
                const lt_req_rec *q = &r->reqs[j];
                size_t b = (size_t)q->done_s;
                if (q->outcome != LT_OUT_OK || b >= nb)
                    continue;
                sr->y[b] += tokens ? (double)(q->output_tokens > 0 ? q->output_tokens : 0) : 1.0;
            }
            for (size_t b = 0; b < nb; b++)
                sr->x[b] = (double)b + 0.5; /* the middle of its second */
            /* the last second is partial (the phase drains): scaled to a
             * rate when it covers at least half a second, else left out */
            double cover = tmax - floor(tmax);
            if (nb > 1 && cover < 0.5)
                nb--;
            else if (cover >= 0.5)
                sr->y[nb - 1] /= cover;
            sr->n = nb;
            sr->color = phase_color(rep, rep->phases[i].name);
            snprintf(sr->label, sizeof sr->label, "%s", rep->phases[i].name);
            ns++;
        }
    }
    char caption[256];
    snprintf(caption, sizeof caption, "%s: %s per second", model, tokens ? "output tokens" : "completions");
    line_chart(f, caption, "seconds since the phase started (warm-up included)", tokens ? "output tokens/s" : "requests/s", s, ns, 0, NAN,
               NULL, ns == 0);
    series_free(s, ns);
}

/* The trace scenario: SLO attainment of the requests intended in each
 * bin, overall and per model. */
static void trace_attainment_chart(FILE *f, const lt_trace_report *tr)
{
    enum { MAX_SERIES = 33 };
    series s[MAX_SERIES];
    size_t ns = 0;
    for (size_t m = 0; m <= tr->n && ns < MAX_SERIES; m++) {
        const lt_trace_model *row = m < tr->n ? &tr->models[m] : &tr->all;
        series *sr = &s[ns];
        memset(sr, 0, sizeof *sr);
        sr->x = calloc(tr->n_bins, sizeof *sr->x);
        sr->y = calloc(tr->n_bins, sizeof *sr->y);
        if (!sr->x || !sr->y) {
            free(sr->x);
            free(sr->y);
            continue;
        }
        for (size_t b = 0; b < tr->n_bins; b++) {
            sr->x[b] = ((double)b + 0.5) * tr->bin_s;
            sr->y[b] = row->bin_attainment_pct[b];
        }
        sr->n = tr->n_bins;
        sr->color = m < tr->n ? palette[m % N_COLORS] : "#111827";
        snprintf(sr->label, sizeof sr->label, "%s", m < tr->n ? row->model : "all models");
        ns++;
    }
    char caption[128];
    snprintf(caption, sizeof caption, "SLO attainment of the requests intended in each %gs", tr->bin_s);
    line_chart(f, caption, "seconds since the trace started", "attainment %", s, ns, 100, NAN, NULL, true);
    series_free(s, ns);
}

/* Which models were resident over time, one row per model, as the polls
 * of the server's model list saw it; cold requests marked below each row. */
static void trace_residency_chart(FILE *f, const lt_report *rep, const lt_trace_report *tr)
{
    double tmax = nice_ceil(tr->span_s > 0 ? tr->span_s : 1);
    double pw = CW - 120 - MR, row_h = 22;
    int H = MT + (int)(row_h * (double)tr->n) + 40;
    fprintf(f, "<figure><svg viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" role=\"img\">\n", CW, H, CW, H);
    for (int t = 0; t <= 5; t++) {
        double x = 120 + pw * t / 5.0;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>", x, MT, x,
                MT + row_h * (double)tr->n);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"middle\">%g</text>\n", x,
                MT + row_h * (double)tr->n + 16, tmax * t / 5.0);
    }
    for (size_t m = 0; m < tr->n; m++) {
        const lt_trace_model *row = &tr->models[m];
        double y = MT + row_h * (double)m;
        fprintf(f, "<text x=\"114\" y=\"%.1f\" class=\"legend\" text-anchor=\"end\">", y + 14);
        esc(f, row->model);
        fputs("</text>\n", f);
        for (size_t i = 0; i < row->n_changes; i++) {
            double from = row->changes[i].at_s, to = i + 1 < row->n_changes ? row->changes[i + 1].at_s : tr->span_s;
            if (to > tmax)
                to = tmax;
            if (!(to > from))
                continue;
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>",
                    120 + pw * from / tmax, y + 3, pw * (to - from) / tmax, row_h - 10,
                    row->changes[i].resident ? palette[m % N_COLORS] : "#e5e7eb");
        }
        for (size_t i = 0; i < rep->n_phases; i++) /* cold requests: a tick under the row */
            for (size_t k = 0; k < rep->phases[i].n; k++) {
                const lt_result *r = &rep->phases[i].results[k];
                if (strcmp(r->model, row->model) != 0)
                    continue;
                for (size_t j = 0; j < r->n_reqs; j++)
                    if (r->reqs[j].cold == 1 && r->reqs[j].intended_s <= tmax)
                        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#111827\"/>",
                                120 + pw * r->reqs[j].intended_s / tmax, y + row_h - 7,
                                120 + pw * r->reqs[j].intended_s / tmax, y + row_h - 2);
            }
        fputc('\n', f);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"axis\" text-anchor=\"middle\">seconds since the trace "
               "started</text>\n</svg><figcaption>Resident models (coloured: resident, grey: not; ticks: cold "
               "requests)</figcaption></figure>\n", 120 + pw / 2, H - 4);
}

static void trace_section(FILE *f, const lt_report *rep)
{
    const lt_trace_report *tr = rep->trace;
    bool ttft = tr->all.ttft_warm.n + tr->all.ttft_cold.n > 0;
    fputs("<h2>Trace</h2>\n<p class=\"meta\">", f);
    esc(f, tr->source);
    fprintf(f, " &middot; zipf %g &middot; seed %llu &middot; span %.1fs", tr->zipf_s, tr->seed, tr->span_s);
    if (tr->has_rss)
        fprintf(f, " &middot; server pid %d: peak RSS %.1f MiB (VmHWM %.1f MiB)", tr->server_pid,
                (double)tr->rss_max_bytes / 1048576.0, (double)tr->hwm_bytes / 1048576.0);
    if (!tr->monitored)
        fputs(" &middot; residency not polled: warm and cold unknown", f);
    fprintf(f, "</p>\n<table><tr><th>model</th><th>scheduled</th><th>recorded</th><th>attainment %%</th>"
               "<th>goodput/s</th><th>warm</th><th>cold</th><th>%s p50 warm</th><th>%s p99 warm</th>"
               "<th>%s p50 cold</th><th>%s p99 cold</th><th>wakes</th><th>evictions</th><th>loads seen</th>"
               "<th>unloads seen</th></tr>\n", ttft ? "TTFT" : "e2e", ttft ? "TTFT" : "e2e", ttft ? "TTFT" : "e2e",
            ttft ? "TTFT" : "e2e");
    for (size_t m = 0; m <= tr->n; m++) {
        const lt_trace_model *r = m < tr->n ? &tr->models[m] : &tr->all;
        const lt_summary *w = ttft ? &r->ttft_warm : &r->e2e_warm, *c = ttft ? &r->ttft_cold : &r->e2e_cold;
        fputs("<tr><td>", f);
        esc(f, r->model);
        fprintf(f, "</td><td>%llu</td><td>%llu</td><td>", (unsigned long long)r->scheduled,
                (unsigned long long)r->recorded);
        num(f, r->attainment_pct, 1);
        fputs("</td><td>", f);
        num(f, r->goodput_rps, 2);
        fprintf(f, "</td><td>%llu</td><td>%llu</td>", (unsigned long long)r->warm, (unsigned long long)r->cold);
        const double v[] = {w->p50, w->p99, c->p50, c->p99};
        for (size_t i = 0; i < 4; i++) {
            fputs("<td>", f);
            num(f, v[i], 1);
            fputs("</td>", f);
        }
        fputs("<td>", f);
        num(f, r->has_counters ? (double)r->wakes : NAN, 0);
        fputs("</td><td>", f);
        num(f, r->has_counters ? (double)r->evictions : NAN, 0);
        fprintf(f, "</td><td>%llu</td><td>%llu</td></tr>\n", (unsigned long long)r->loads_seen,
                (unsigned long long)r->unloads_seen);
    }
    fputs("</table>\n<h2>Attainment over time</h2>\n<div class=\"charts\">\n", f);
    if (rep->has_goodput)
        trace_attainment_chart(f, tr);
    else
        fputs("<p class=\"meta\">No SLOs given (--goodput): attainment not measured.</p>\n", f);
    if (tr->monitored)
        trace_residency_chart(f, rep, tr);
    fputs("</div>\n", f);
}

/* Attainment and goodput against the offered rate, one line per model. */
static void sweep_charts(FILE *f, const lt_report *rep)
{
    const lt_phase *first = &rep->phases[0];
    enum { MAX_SERIES = 32 };
    series att[MAX_SERIES] = {0}, gp[MAX_SERIES] = {0};
    double vmark[MAX_SERIES] = {0};
    size_t ns = 0;
    for (size_t k = 0; k < first->n && ns < sizeof att / sizeof *att; k++) {
        const char *model = first->results[k].model;
        series *a = &att[ns], *g = &gp[ns];
        memset(a, 0, sizeof *a);
        memset(g, 0, sizeof *g);
        a->x = calloc(rep->n_phases, sizeof *a->x);
        a->y = calloc(rep->n_phases, sizeof *a->y);
        g->x = calloc(rep->n_phases, sizeof *g->x);
        g->y = calloc(rep->n_phases, sizeof *g->y);
        if (!a->x || !a->y || !g->x || !g->y) {
            series_free(a, 1);
            series_free(g, 1);
            continue;
        }
        for (size_t i = 0; i < rep->n_phases; i++)
            for (size_t j = 0; j < rep->phases[i].n; j++) {
                const lt_result *r = &rep->phases[i].results[j];
                if (strcmp(r->model, model) != 0 || !r->has_slo || r->concurrency)
                    continue;
                /* rate-ascending insertion */
                size_t at = a->n;
                while (at > 0 && a->x[at - 1] > r->rate_per_s) {
                    a->x[at] = a->x[at - 1];
                    a->y[at] = a->y[at - 1];
                    g->x[at] = g->x[at - 1];
                    g->y[at] = g->y[at - 1];
                    at--;
                }
                a->x[at] = g->x[at] = r->rate_per_s;
                a->y[at] = isnan(r->attainment) ? 0 : r->attainment * 100;
                g->y[at] = r->goodput_rps;
                a->n++;
                g->n++;
            }
        a->color = g->color = palette[ns % N_COLORS];
        vmark[ns] = NAN;
        snprintf(a->label, sizeof a->label, "%s", model);
        snprintf(g->label, sizeof g->label, "%s", model);
        for (size_t m = 0; m < rep->n_sweep_max; m++)
            if (strcmp(rep->sweep_max[m].model, model) == 0) {
                vmark[ns] = rep->sweep_max[m].max_rate;
                if (!isnan(vmark[ns]))
                    snprintf(a->label, sizeof a->label, "%s: %s%.2f req/s at >= %.0f%%", model,
                             rep->sweep_max[m].bounded ? "" : ">= ", vmark[ns], rep->attainment_target * 100);
                else
                    snprintf(a->label, sizeof a->label, "%s: below the lowest rate", model);
            }
        ns++;
    }
    line_chart(f, "attainment against the offered rate",
               "offered rate (requests/s per model); dashed: target", "attainment (%)", att, ns, 100, rep->attainment_target * 100,
               vmark, true);
    line_chart(f, "goodput against the offered rate", "offered rate (requests/s per model)",
               "goodput (requests/s meeting the SLOs)", gp, ns, 0, NAN, NULL, true);
    series_free(att, ns);
    series_free(gp, ns);
}

/* ---- separate servers vs colo, goodput and cost ----------------------------------- */

static const lt_compare *cmp_find(const lt_compare *cmp, size_t n, const char *model)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(cmp[i].conc->model, model) == 0)
            return &cmp[i];
    return NULL;
}

/* Grouped horizontal bars: per model, separate servers and colo. */
static void pair_bars(FILE *f, const lt_report *rep, const char *caption, const char *unit, bool impact)
{
    const int row_h = 22, label_w = 200, w = 900;
    int h = (int)rep->n_cmp * (2 * row_h + 10) + 40;
    double vmax = 0, vmin = 0;
    for (size_t i = 0; i < rep->n_cmp; i++) {
        const lt_compare *c = &rep->cmp[i], *b = cmp_find(rep->base_cmp, rep->n_base_cmp, c->conc->model);
        double v[2] = {b ? (impact ? b->p99_impact_pct : b->norm_throughput * 100) : NAN,
                       impact ? c->p99_impact_pct : c->norm_throughput * 100};
        for (int j = 0; j < 2; j++) {
            if (!isnan(v[j]) && v[j] > vmax)
                vmax = v[j];
            if (!isnan(v[j]) && v[j] < vmin)
                vmin = v[j];
        }
    }
    /* ticks on a round step that covers both signs */
    double step = nice_ceil((vmax - vmin > 0 ? vmax - vmin : 1.0) / 5.0);
    vmin = floor(vmin / step) * step;
    vmax = ceil(vmax / step) * step;
    if (vmax <= vmin)
        vmax = vmin + step;
    double bw = w - label_w - 110, span = vmax - vmin;
    double x0 = label_w + bw * (0 - vmin) / span;
    fprintf(f, "<figure><svg viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" role=\"img\">\n", w, h, w, h);
    for (double t = vmin; t <= vmax + step * 1e-9; t += step) {
        double x = label_w + bw * (t - vmin) / span;
        fprintf(f, "<line x1=\"%.1f\" y1=\"4\" x2=\"%.1f\" y2=\"%d\" class=\"grid\"/>", x, x, h - 24);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"tick\" text-anchor=\"middle\">%g%s</text>\n", x, h - 8,
                fabs(t) < step * 1e-9 ? 0.0 : t, unit);
    }
    fprintf(f, "<line x1=\"%.1f\" y1=\"4\" x2=\"%.1f\" y2=\"%d\" stroke=\"#374151\"/>\n", x0, x0, h - 24);
    const char *names[2] = {"separate servers", "colo"};
    const char *colors[2] = {"#9ca3af", "#2563eb"};
    for (size_t i = 0; i < rep->n_cmp; i++) {
        const lt_compare *c = &rep->cmp[i], *b = cmp_find(rep->base_cmp, rep->n_base_cmp, c->conc->model);
        double v[2] = {b ? (impact ? b->p99_impact_pct : b->norm_throughput * 100) : NAN,
                       impact ? c->p99_impact_pct : c->norm_throughput * 100};
        for (int j = 0; j < 2; j++) {
            double y = 8 + (double)i * (2 * row_h + 10) + j * row_h;
            fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"legend\" text-anchor=\"end\">", label_w - 8, y + 13);
            esc(f, c->conc->model);
            fprintf(f, " &middot; %s</text>", names[j]);
            if (isnan(v[j]))
                continue;
            double x1 = label_w + bw * (v[j] - vmin) / span;
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>", x1 < x0 ? x1 : x0, y,
                    fabs(x1 - x0), row_h - 6, colors[j]);
            fprintf(f, impact ? "<text x=\"%.1f\" y=\"%.1f\" class=\"legend\">%+.1f%s</text>\n"
                              : "<text x=\"%.1f\" y=\"%.1f\" class=\"legend\">%.1f%s</text>\n",
                    (x1 > x0 ? x1 : x0) + 6, y + 13, v[j], unit);
        }
    }
    fputs("</svg><figcaption>", f);
    esc(f, caption);
    fputs("</figcaption></figure>\n", f);
}

static void baseline_section(FILE *f, const lt_report *rep)
{
    fputs("<h2>Separate servers vs colo</h2>\n<p class=\"meta\">The same models, loads and device: one colo-server "
          "per model (the baseline), then one colo-server with every model. Impacts compare each model running "
          "together with the others against running alone.</p>\n", f);
    fputs("<table><thead><tr><th>model</th><th>p99 impact<br>separate</th><th>p99 impact<br>colo</th>"
          "<th>TTFT p99 impact<br>separate</th><th>TTFT p99 impact<br>colo</th><th>throughput kept<br>separate</th>"
          "<th>throughput kept<br>colo</th><th>goodput req/s<br>separate</th><th>goodput req/s<br>colo</th>"
          "</tr></thead><tbody>\n", f);
    for (size_t i = 0; i < rep->n_cmp; i++) {
        const lt_compare *c = &rep->cmp[i], *b = cmp_find(rep->base_cmp, rep->n_base_cmp, c->conc->model);
        if (!b)
            continue;
        fputs("<tr><td>", f);
        esc(f, c->conc->model);
        fputs("</td>", f);
        pct_cell(f, b->p99_impact_pct, true);
        pct_cell(f, c->p99_impact_pct, true);
        pct_cell(f, lt_impact_pct(b->ind->ttft.p99, b->conc->ttft.p99), true);
        pct_cell(f, lt_impact_pct(c->ind->ttft.p99, c->conc->ttft.p99), true);
        fputs("<td>", f);
        num(f, b->norm_throughput * 100, 1);
        fputs("%</td><td>", f);
        num(f, c->norm_throughput * 100, 1);
        fputs("%</td><td>", f);
        num(f, b->conc->has_slo ? b->conc->goodput_rps : NAN, 2);
        fputs("</td><td>", f);
        num(f, c->conc->has_slo ? c->conc->goodput_rps : NAN, 2);
        fputs("</td></tr>\n", f);
    }
    fprintf(f, "</tbody></table>\n<p class=\"stp\">STP: separate servers <b>%.3f</b>, colo <b>%.3f</b> (of %zu).</p>\n",
            rep->base_stp, rep->stp, rep->n_cmp);
    fputs("<div class=\"charts\">\n", f);
    pair_bars(f, rep, "p99 latency impact of running together (lower is better)", "%", true);
    pair_bars(f, rep, "throughput kept when running together, % of alone (higher is better)", "%", false);
    fputs("</div>\n", f);
}

static void goodput_section(FILE *f, const lt_report *rep)
{
    fputs("<h2>Goodput</h2>\n<table><thead><tr><th>phase</th><th>model</th><th>TTFT SLO ms</th><th>TPOT SLO ms</th>"
          "<th>e2e SLO ms</th><th>good</th><th>attainment</th><th>goodput req/s</th></tr></thead><tbody>\n", f);
    for (size_t i = 0; i < rep->n_phases; i++)
        for (size_t k = 0; k < rep->phases[i].n; k++) {
            const lt_result *r = &rep->phases[i].results[k];
            if (!r->has_slo)
                continue;
            fputs("<tr><td>", f);
            esc(f, rep->phases[i].name);
            fputs("</td><td>", f);
            esc(f, r->model);
            fputs("</td><td>", f);
            num(f, r->slo.ttft_ms, 0);
            fputs("</td><td>", f);
            num(f, r->slo.tpot_ms, 0);
            fputs("</td><td>", f);
            num(f, r->slo.e2e_ms, 0);
            fprintf(f, "</td><td>%llu</td><td>", (unsigned long long)r->good);
            num(f, r->attainment * 100, 1);
            fputs("%</td><td>", f);
            num(f, r->goodput_rps, 2);
            fputs("</td></tr>\n", f);
        }
    fputs("</tbody></table>\n", f);
}

static void cost_section(FILE *f, const lt_report *rep)
{
    fprintf(f, "<h2>Cost</h2>\n<p class=\"meta\">At $%g per device-hour and %u device%s per deployment, at the loads "
               "offered. Savings: cost per output token (per request without token counts) against one device per "
               "model. The latency price: the worst model's p99 change against running alone.</p>\n",
            rep->hourly_cost_usd, rep->device_count, rep->device_count == 1 ? "" : "s");
    fputs("<table><thead><tr><th>setup</th><th>devices</th><th>$/hour</th><th>req/s</th><th>tok/s</th>"
          "<th>$ per M output tokens</th><th>$ per 1k requests</th><th>savings</th><th>worst p99 impact</th>"
          "<th>worst TTFT p99 impact</th></tr></thead><tbody>\n", f);
    for (size_t i = 0; i < rep->n_cost; i++) {
        const lt_cost_row *c = &rep->cost[i];
        fputs("<tr><td>", f);
        esc(f, c->setup);
        fprintf(f, "</td><td>%g</td><td>", c->devices);
        num(f, c->usd_per_hour, 2);
        fputs("</td><td>", f);
        num(f, c->rps, 2);
        fputs("</td><td>", f);
        num(f, c->tokens_per_s, 1);
        fputs("</td><td>", f);
        num(f, c->usd_per_m_tokens, 3);
        fputs("</td><td>", f);
        num(f, c->usd_per_k_requests, 4);
        fputs("</td>", f);
        pct_cell(f, c->savings_pct, false);
        pct_cell(f, c->worst_p99_impact_pct, true);
        pct_cell(f, c->worst_ttft_impact_pct, true);
        fputs("</tr>\n", f);
    }
    fputs("</tbody></table>\n", f);
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
          "table{border-collapse:collapse;font-variant-numeric:tabular-nums;font-size:13px;display:block;"
          "overflow-x:auto;max-width:100%}\n"
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
    if (rep->n_base_cmp && rep->n_cmp)
        baseline_section(f, rep);
    if (rep->n_cost)
        cost_section(f, rep);
    if (rep->trace)
        trace_section(f, rep);
    if (rep->n_sweep_max) {
        fputs("<h2>Rate sweep</h2>\n<div class=\"charts\">\n", f);
        sweep_charts(f, rep);
        fputs("</div>\n", f);
    }
    const metric metrics[] = {M_LATENCY, M_TTFT, M_TPOT};
    const char *titles[] = {"Latency", "Time to first token", "Time per output token"};
    for (size_t mi = 0; mi < 3; mi++) {
        bool any = false;
        for (size_t i = 0; i < rep->n_phases && !any; i++)
            for (size_t k = 0; k < rep->phases[i].n && !any; k++)
                any = model_has(rep, rep->phases[i].results[k].model, metrics[mi]);
        if (!any && mi > 0)
            continue;
        fprintf(f, "<h2>%s</h2>\n<div class=\"charts\">\n", titles[mi]);
        for (size_t i = 0; i < rep->n_phases; i++)
            for (size_t k = 0; k < rep->phases[i].n; k++) {
                const char *model = rep->phases[i].results[k].model;
                if (!first_seen(rep, i, k))
                    continue;
                if (mi == 0 || model_has(rep, model, metrics[mi]))
                    cdf_chart(f, rep, model, metrics[mi]);
            }
        fputs("</div>\n", f);
    }
    fputs("<h2>Throughput over time</h2>\n<div class=\"charts\">\n", f);
    for (size_t i = 0; i < rep->n_phases; i++)
        for (size_t k = 0; k < rep->phases[i].n; k++)
            if (first_seen(rep, i, k))
                timeline_chart(f, rep, rep->phases[i].results[k].model);
    fputs("</div>\n<h2>Throughput</h2>\n", f);
    throughput_bars(f, rep);
    fputs("<h2>Results</h2>\n<p class=\"meta\">Latency counts from the intended send time; errors and "
          "timeouts are not in the latencies.</p>\n", f);
    results_table(f, rep);
    if (rep->n_base_cmp)
        compare_table(f, "Separate servers: individual vs concurrent", rep->base_cmp, rep->n_base_cmp, rep->base_stp);
    if (rep->n_cmp)
        compare_table(f, rep->n_base_cmp ? "colo: individual vs concurrent" : "Individual vs concurrent", rep->cmp,
                      rep->n_cmp, rep->stp);
    if (rep->has_goodput)
        goodput_section(f, rep);
    fputs("</body></html>\n", f);
    if (fclose(f) != 0) {
        lt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return LT_EIO;
    }
    return LT_OK;
}
