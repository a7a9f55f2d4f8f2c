/* tests/loadtest/test_loadtest_cli.c: colo-loadtest's command line through
 * loadtest_main: exit codes 0/1/2, scenarios, and the JSON, CSV and HTML
 * files, against the stub server. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "loadtest/loadtest.h"
#include "loadtest/report.h"
#include "tests/loadtest/stub_server.h"

static stub_server *srv;
static char url[64];
static char dir[64];

static int run_cli(const char *first, ...)
{
    char *argv[64];
    int argc = 0;
    argv[argc++] = (char *)"colo-loadtest";
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && argc < 63; a = va_arg(ap, const char *))
        argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;
    fflush(stdout);
    return loadtest_main(argc, argv);
}

static int setup(void **state)
{
    (void)state;
    stub_cfg cfg = {.delay_ms = 5, .tokens = 3, .model_task = "generation"};
    srv = stub_start(&cfg);
    if (!srv)
        return -1;
    stub_url(srv, url, sizeof url);
    snprintf(dir, sizeof dir, "/tmp/colo-lt-cliXXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    stub_stop(srv);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void path_in(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

static void test_usage_errors(void **state)
{
    (void)state;
    char missing[128];
    path_in(missing, sizeof missing, "nope.jsonl");
    assert_int_equal(run_cli("--help", NULL), 0);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--bogus", NULL), 2);
    assert_int_equal(run_cli("--model", "m", NULL), 2);
    assert_int_equal(run_cli("--url", url, NULL), 2);
    assert_int_equal(run_cli("--url", "ftp://x", "--model", "m", NULL), 2);
    assert_int_equal(run_cli("--url", "http://127.0.0.1:99999", "--model", "m", NULL), 2);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--concurrency", "0", NULL), 2);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--concurrency", "2", "--rate", "3", NULL), 2);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--scenario", "nope", NULL), 2);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--scenario", "sweep", NULL), 2);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--prompts", missing, NULL), 2);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--sla-config", missing, NULL), 2);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--sla", "other:p99_ms=5", NULL), 2);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--sla", "m:p99=5", NULL), 2);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--kind", "m=gpu", NULL), 2);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--concurrency", "other=2", NULL), 2);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--concurrency", "m=0", NULL), 2);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--rate", "m=-1", NULL), 2);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--json", "/nonexistent-dir/x.json", NULL), 2);
    /* the batch scenario's options */
    assert_int_equal(run_cli("--url", url, "--model", "m", "--scenario", "batch", "--requests", "5", NULL), 2);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--batch-model", "m", NULL), 2);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--scenario", "batch", "--batch-model", "x", NULL), 2);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--scenario", "batch", "--batch-lines", "0", NULL), 2);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--scenario", "batch", "--rounds", "65", NULL), 2);
    /* a server without the Batch API: the round's batch never starts */
    assert_int_equal(run_cli("--url", url, "--model", "m", "--scenario", "batch", "--duration", "0.2", "--rounds", "1",
                             "--quiet", NULL),
                     1);
}

static void test_sla_exit_codes(void **state)
{
    (void)state;
    /* 5 ms service: a 500 ms p99 holds, a 1 ms p99 cannot */
    assert_int_equal(run_cli("--url", url, "--model", "m", "--requests", "40", "--concurrency", "2", "--quiet",
                             "--sla", "m:p99_ms=500,min_rps=1,max_error_rate=0", NULL), 0);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--requests", "40", "--concurrency", "2", "--quiet",
                             "--sla", "m:p99_ms=1", NULL), 1);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--requests", "40", "--quiet", "--sla",
                             "m:min_rps=100000", NULL), 1);
    char yaml[128];
    path_in(yaml, sizeof yaml, "colo.yaml");
    FILE *f = fopen(yaml, "w");
    assert_non_null(f);
    fputs("models:\n  - name: m\n    kind: llama\n    sla: { p99_ms: 1000, max_error_rate: 0.5 }\n"
          "  - name: other\n    sla: { p99_ms: 1 }\n", f);
    fclose(f);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--requests", "30", "--quiet", "--sla-config", yaml,
                             NULL), 0);
    f = fopen(yaml, "w");
    fputs("m: { p99_ms: 0.001 }\n", f);
    fclose(f);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--requests", "30", "--quiet", "--sla-config", yaml,
                             NULL), 1);
    /* a model the server does not know */
    assert_int_equal(run_cli("--url", url, "--model", "missing", "--requests", "5", "--quiet", NULL), 1);
}

/* --concurrency NAME=N / --rate NAME=R give one model its own load. */
static void test_per_model_loads(void **state)
{
    (void)state;
    char json_path[128];
    path_in(json_path, sizeof json_path, "loads.json");
    int rc = run_cli("--url", url, "--model", "a", "--model", "b", "--concurrency", "b=3", "--rate", "a=50",
                     "--requests", "20", "--quiet", "--json", json_path, NULL);
    assert_int_equal(rc, 0);
    json_t *root = json_load_file(json_path, 0, NULL);
    assert_non_null(root);
    json_t *models = json_object_get(json_array_get(json_object_get(root, "phases"), 0), "models");
    assert_int_equal(json_array_size(models), 2);
    json_t *a = json_array_get(models, 0), *b = json_array_get(models, 1);
    assert_string_equal(json_string_value(json_object_get(a, "model")), "a");
    assert_int_equal(json_integer_value(json_object_get(a, "concurrency")), 0);
    assert_true(json_real_value(json_object_get(a, "rate_per_s")) == 50.0);
    assert_int_equal(json_integer_value(json_object_get(b, "concurrency")), 3);
    assert_int_equal(json_integer_value(json_object_get(a, "ok")), 20);
    assert_int_equal(json_integer_value(json_object_get(b, "ok")), 20);
    json_decref(root);
}

static void test_individual_vs_concurrent_outputs(void **state)
{
    (void)state;
    char json_path[128], csv_path[128], html_path[128];
    path_in(json_path, sizeof json_path, "out.json");
    path_in(csv_path, sizeof csv_path, "out.csv");
    path_in(html_path, sizeof html_path, "out.html");
    int rc = run_cli("--url", url, "--scenario", "individual-vs-concurrent", "--model", "a", "--model", "b",
                     "--concurrency", "2", "--requests", "40", "--json", json_path, "--csv", csv_path, "--html",
                     html_path, "--sla", "a:p99_ms=2000", NULL);
    assert_int_equal(rc, 0);

    json_error_t jerr;
    json_t *root = json_load_file(json_path, 0, &jerr);
    assert_non_null(root);
    assert_string_equal(json_string_value(json_object_get(root, "scenario")), "individual-vs-concurrent");
    json_t *phases = json_object_get(root, "phases");
    assert_int_equal(json_array_size(phases), 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(phases, 0), "name")), "individual");
    json_t *conc = json_array_get(phases, 2);
    assert_string_equal(json_string_value(json_object_get(conc, "name")), "concurrent");
    json_t *models = json_object_get(conc, "models");
    assert_int_equal(json_array_size(models), 2);
    json_t *m0 = json_array_get(models, 0);
    assert_int_equal(json_integer_value(json_object_get(m0, "ok")), 40);
    json_t *lat = json_object_get(m0, "latency_ms");
    assert_true(json_real_value(json_object_get(lat, "p50")) >= 4.5);
    assert_true(json_real_value(json_object_get(lat, "p99")) >= json_real_value(json_object_get(lat, "p50")));
    assert_true(json_is_object(json_object_get(m0, "errors")));
    assert_true(json_real_value(json_object_get(m0, "tokens_per_s")) > 0);
    json_t *cmp = json_object_get(root, "comparison");
    assert_int_equal(json_array_size(json_object_get(cmp, "models")), 2);
    double stp = json_real_value(json_object_get(cmp, "stp"));
    assert_true(stp > 0.2 && stp < 4.0);
    json_t *row = json_array_get(json_object_get(cmp, "models"), 0);
    assert_true(json_is_number(json_object_get(json_object_get(row, "latency_impact_pct"), "p99")));
    assert_true(json_is_number(json_object_get(row, "throughput_impact_pct")));
    json_t *sla = json_object_get(root, "sla");
    assert_true(json_is_true(json_object_get(sla, "pass")));
    assert_int_equal(json_array_size(json_object_get(sla, "checks")), 1);
    json_decref(root);

    FILE *f = fopen(csv_path, "r");
    assert_non_null(f);
    char line[2048];
    assert_non_null(fgets(line, sizeof line, f));
    line[strcspn(line, "\n")] = '\0';
    assert_string_equal(line, lt_csv_header);
    assert_non_null(strstr(line, "Concurrency,Inferences/Second,Client Send,"));
    int rows = 0;
    while (fgets(line, sizeof line, f)) {
        int commas = 0;
        for (char *p = line; *p; p++)
            commas += *p == ',';
        assert_int_equal(commas, 20);
        assert_true(strncmp(line, "2,", 2) == 0); /* Concurrency */
        if (strstr(line, ",concurrent,")) {
            /* latency and throughput impact are filled on concurrent rows */
            char *p = strstr(line, ",concurrent,") + strlen(",concurrent,");
            assert_true(*p != ',');
        }
        long p50_us = 0;
        sscanf(line, "%*[^,],%*[^,],%*[^,],%*[^,],%*[^,],%*[^,],%*[^,],%*[^,],%*[^,],%ld", &p50_us);
        assert_true(p50_us >= 4500 && p50_us < 1000000); /* microseconds */
        rows++;
    }
    fclose(f);
    assert_int_equal(rows, 4);

    f = fopen(html_path, "r");
    assert_non_null(f);
    static char html[1 << 20];
    size_t n = fread(html, 1, sizeof html - 1, f);
    html[n] = '\0';
    fclose(f);
    assert_non_null(strstr(html, "<svg"));
    assert_non_null(strstr(html, "<polyline"));
    assert_non_null(strstr(html, "SLA PASS"));
    assert_null(strstr(html, "<script"));
}

static void test_sweep_and_open_loop(void **state)
{
    (void)state;
    char json_path[128];
    path_in(json_path, sizeof json_path, "sweep.json");
    assert_int_equal(run_cli("--url", url, "--scenario", "sweep", "--model", "m", "--sweep-concurrency", "1,2,4",
                             "--requests", "20", "--quiet", "--json", json_path, NULL), 0);
    json_t *root = json_load_file(json_path, 0, NULL);
    assert_non_null(root);
    json_t *phases = json_object_get(root, "phases");
    assert_int_equal(json_array_size(phases), 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(phases, 2), "name")), "c=4");
    json_decref(root);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--rate", "100", "--poisson", "--seed", "3",
                             "--duration", "0.5", "--warmup", "0.1", "--quiet", "--json", json_path, NULL), 0);
    root = json_load_file(json_path, 0, NULL);
    json_t *m = json_array_get(json_object_get(json_array_get(json_object_get(root, "phases"), 0), "models"), 0);
    assert_true(json_real_value(json_object_get(m, "rate_per_s")) == 100.0);
    assert_true(json_integer_value(json_object_get(m, "ok")) >= 20);
    json_decref(root);
}

static void test_prompts_and_kind(void **state)
{
    (void)state;
    char prompts[128];
    path_in(prompts, sizeof prompts, "p.jsonl");
    FILE *f = fopen(prompts, "w");
    assert_non_null(f);
    fputs("{\"prompt\": \"one\"}\n{\"messages\": [{\"role\": \"user\", \"content\": \"two\"}]}\n", f);
    fclose(f);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--prompts", prompts, "--requests", "10", "--quiet",
                             NULL), 0);
    assert_int_equal(run_cli("--url", url, "--model", "e", "--kind", "e=encoder", "--requests", "10", "--quiet",
                             NULL), 0);
}


static json_t *load_json(const char *path)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        fprintf(stderr, "%s: %s\n", path, jerr.text);
    assert_non_null(root);
    return root;
}

static json_t *phase_model(json_t *root, size_t phase, size_t model)
{
    return json_array_get(json_object_get(json_array_get(json_object_get(root, "phases"), phase), "models"), model);
}

/* --goodput (one word or several), vllm's field names, --requests-out. */
static void test_goodput_and_requests_out(void **state)
{
    (void)state;
    char json_path[128], req_path[128];
    path_in(json_path, sizeof json_path, "gp.json");
    path_in(req_path, sizeof req_path, "gp.jsonl");
    assert_int_equal(run_cli("--url", url, "--model", "m", "--requests", "20", "--quiet", "--goodput", "e2e:2000",
                             "--json", json_path, "--requests-out", req_path, NULL), 0);
    json_t *root = load_json(json_path);
    json_t *m = phase_model(root, 0, 0);
    assert_int_equal(json_integer_value(json_object_get(m, "completed")), 20);
    assert_int_equal(json_integer_value(json_object_get(m, "failed")), 0);
    assert_true(json_real_value(json_object_get(m, "attainment_pct")) == 100.0);
    assert_true(json_real_value(json_object_get(m, "request_goodput")) > 0);
    assert_true(json_real_value(json_object_get(m, "request_goodput")) ==
                json_real_value(json_object_get(m, "request_throughput")));
    assert_true(json_real_value(json_object_get(json_object_get(m, "goodput_slo"), "e2e_ms")) == 2000.0);
    assert_true(json_is_null(json_object_get(json_object_get(m, "goodput_slo"), "ttft_ms")));
    const char *names[] = {"request_throughput", "output_throughput", "mean_e2el_ms", "median_e2el_ms",
                           "std_e2el_ms", "p90_e2el_ms", "p95_e2el_ms", "p99_e2el_ms", "max_e2el_ms",
                           "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_itl_ms", "total_output_tokens"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        assert_non_null(json_object_get(m, names[i]));
    assert_true(json_real_value(json_object_get(m, "median_e2el_ms")) >= 4.5); /* the stub's 5 ms */
    assert_true(json_is_null(json_object_get(m, "mean_ttft_ms")));           /* not streamed */
    assert_int_equal(json_integer_value(json_object_get(m, "total_output_tokens")), 60);
    json_decref(root);

    FILE *f = fopen(req_path, "r");
    assert_non_null(f);
    char line[1024];
    int lines = 0;
    while (fgets(line, sizeof line, f)) {
        json_t *r = json_loads(line, 0, NULL);
        assert_non_null(r);
        assert_string_equal(json_string_value(json_object_get(r, "outcome")), "ok");
        assert_string_equal(json_string_value(json_object_get(r, "phase")), "single");
        assert_int_equal(json_integer_value(json_object_get(r, "output_tokens")), 3);
        assert_true(json_real_value(json_object_get(r, "e2el_ms")) >= 4.5);
        assert_true(json_is_true(json_object_get(r, "good")));
        json_decref(r);
        lines++;
    }
    fclose(f);
    assert_int_equal(lines, 20);

    /* vllm's spelling: the SLOs as separate words; a 1 ms bound nobody meets */
    assert_int_equal(run_cli("--url", url, "--model", "m", "--requests", "10", "--quiet", "--goodput", "e2e:1",
                             "tpot:50", "--json", json_path, NULL), 0);
    root = load_json(json_path);
    m = phase_model(root, 0, 0);
    assert_true(json_real_value(json_object_get(m, "attainment_pct")) == 0.0);
    assert_true(json_real_value(json_object_get(json_object_get(m, "goodput_slo"), "tpot_ms")) == 50.0);
    json_decref(root);
    /* the default: the model's SLA (p99_ms as a per-request bound) */
    assert_int_equal(run_cli("--url", url, "--model", "m", "--requests", "10", "--quiet", "--sla", "m:p99_ms=3000",
                             "--json", json_path, NULL), 0);
    root = load_json(json_path);
    m = phase_model(root, 0, 0);
    assert_true(json_real_value(json_object_get(json_object_get(m, "goodput_slo"), "e2e_ms")) == 3000.0);
    json_decref(root);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--goodput", "itl:5", NULL), 2);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--goodput", "e2e:5", "extra", NULL), 2);
    assert_int_equal(run_cli("--url", url, "--model", "m", "e2e:5", NULL), 2);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--attainment", "120", NULL), 2);
}

/* A rate sweep against a server of known capacity (one connection, 20 ms a
 * request: 50/s): attainment holds at low rates and collapses past the
 * capacity, and the interpolated limit lies between. Two models: each gets
 * its own limit. */
static void test_sweep_max_rate(void **state)
{
    (void)state;
    stub_cfg cfg = {.delay_ms = 20, .tokens = 2};
    stub_server *s = stub_start(&cfg);
    assert_non_null(s);
    char u[64], json_path[128], html_path[128];
    stub_url(s, u, sizeof u);
    path_in(json_path, sizeof json_path, "sweep.json");
    path_in(html_path, sizeof html_path, "sweep.html");
    int rc = run_cli("--url", u, "--scenario", "sweep", "--model", "m", "--model", "n", "--sweep-rate", "5,10,120",
                     "--duration", "1", "--max-connections", "1", "--goodput", "e2e:250", "--attainment", "90",
                     "--quiet", "--json", json_path, "--html", html_path, NULL);
    stub_stop(s);
    assert_int_equal(rc, 0);
    json_t *root = load_json(json_path);
    json_t *sweep = json_object_get(root, "sweep");
    assert_true(json_real_value(json_object_get(sweep, "attainment_target_pct")) == 90.0);
    json_t *models = json_object_get(sweep, "models");
    assert_int_equal(json_array_size(models), 2);
    for (size_t k = 0; k < 2; k++) {
        json_t *row = json_array_get(models, k);
        double att[3];
        for (size_t p = 0; p < 3; p++)
            att[p] = json_real_value(json_object_get(phase_model(root, p, k), "attainment_pct"));
        double max = json_real_value(json_object_get(row, "max_rate_per_s"));
        printf("  %s: attainment %.1f%% %.1f%% %.1f%%, max rate %.2f/s\n",
               json_string_value(json_object_get(row, "model")), att[0], att[1], att[2], max);
        assert_true(att[0] >= 90.0);
        assert_true(att[2] < 90.0);
        assert_true(json_is_true(json_object_get(row, "bounded")));
        /* the line between the bracketing steps crosses 90% at max */
        double rates[3] = {5, 10, 120};
        size_t i = att[1] >= 90.0 ? 2 : 1;
        assert_true(max >= rates[i - 1] && max <= rates[i]);
        double at = att[i - 1] + (att[i] - att[i - 1]) * (max - rates[i - 1]) / (rates[i] - rates[i - 1]);
        assert_true(fabs(at - 90.0) < 1e-6);
    }
    json_decref(root);
    FILE *f = fopen(html_path, "r");
    assert_non_null(f);
    static char html[1 << 21];
    size_t n = fread(html, 1, sizeof html - 1, f);
    html[n] = '\0';
    fclose(f);
    assert_non_null(strstr(html, "attainment against the offered rate"));
    assert_non_null(strstr(html, "goodput against the offered rate"));
    assert_non_null(strstr(html, "per second</figcaption>")); /* the throughput timelines */
}

/* Gamma arrivals, synthetic lengths and cost through the command line. */
static void test_arrivals_lengths_cost(void **state)
{
    (void)state;
    char json_path[128];
    path_in(json_path, sizeof json_path, "cost.json");
    assert_int_equal(run_cli("--url", url, "--scenario", "individual-vs-concurrent", "--model", "a", "--model", "b",
                             "--rate", "40", "--burstiness", "0.5", "--input-len", "20", "--output-len", "5",
                             "--len-spread", "0.5", "--duration", "0.5", "--device-hourly-cost", "3",
                             "--device-count", "2", "--quiet", "--json", json_path, NULL), 0);
    json_t *root = load_json(json_path);
    assert_true(json_real_value(json_object_get(root, "burstiness")) == 0.5);
    json_t *cost = json_object_get(root, "cost");
    assert_true(json_real_value(json_object_get(cost, "device_hourly_cost_usd")) == 3.0);
    json_t *setups = json_object_get(cost, "setups");
    assert_int_equal(json_array_size(setups), 2);
    json_t *ded = json_array_get(setups, 0), *shared = json_array_get(setups, 1);
    assert_string_equal(json_string_value(json_object_get(ded, "setup")), "one device per model");
    assert_true(json_real_value(json_object_get(ded, "usd_per_hour")) == 12.0); /* 2 models x 2 devices x $3 */
    assert_true(json_real_value(json_object_get(shared, "usd_per_hour")) == 6.0);
    double tps = json_real_value(json_object_get(shared, "output_throughput"));
    double per_m = json_real_value(json_object_get(shared, "usd_per_million_output_tokens"));
    assert_true(tps > 0 && fabs(per_m - 6.0 / (tps * 3600) * 1e6) < 1e-6 * per_m);
    double d = json_real_value(json_object_get(ded, "usd_per_million_output_tokens"));
    assert_true(fabs(json_real_value(json_object_get(shared, "savings_pct")) - (d - per_m) / d * 100) < 1e-6);
    json_decref(root);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--burstiness", "2", NULL), 2);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--rate", "5", "--len-spread", "1", NULL), 2);
    assert_int_equal(run_cli("--url", url, "--model", "m", "--input-len", "5", "--prompts", json_path, NULL), 2);
}

static void test_baseline_usage(void **state)
{
    (void)state;
    char yaml[128];
    path_in(yaml, sizeof yaml, "base.yaml");
    FILE *f = fopen(yaml, "w");
    assert_non_null(f);
    fputs("models:\n  - { name: a, kind: llama, path: a.gguf, memory_fraction: 0.1 }\n", f);
    fclose(f);
    assert_int_equal(run_cli("--baseline", "separate", NULL), 2);
    assert_int_equal(run_cli("--config", yaml, NULL), 2);
    assert_int_equal(run_cli("--baseline", "shared", "--config", yaml, NULL), 2);
    assert_int_equal(run_cli("--baseline", "separate", "--config", yaml, "--url", url, NULL), 2);
    assert_int_equal(run_cli("--baseline", "separate", "--config", yaml, "--model", "zz", NULL), 2);
    assert_int_equal(run_cli("--baseline", "separate", "--config", yaml, "--scenario", "sweep", NULL), 2);
    char missing[128];
    path_in(missing, sizeof missing, "none.yaml");
    assert_int_equal(run_cli("--baseline", "separate", "--config", missing, NULL), 2);
    /* a server that does not exist: a clear failure, not a crash */
    assert_int_equal(run_cli("--baseline", "separate", "--config", yaml, "--server", "/nonexistent/colo-server",
                             "--quiet", NULL), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_sla_exit_codes),
        cmocka_unit_test(test_individual_vs_concurrent_outputs),
        cmocka_unit_test(test_per_model_loads),
        cmocka_unit_test(test_sweep_and_open_loop),
        cmocka_unit_test(test_prompts_and_kind),
        cmocka_unit_test(test_goodput_and_requests_out),
        cmocka_unit_test(test_sweep_max_rate),
        cmocka_unit_test(test_arrivals_lengths_cost),
        cmocka_unit_test(test_baseline_usage),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
