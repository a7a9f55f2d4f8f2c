/* tests/loadtest/test_trace.c: the trace scenario: seeded arrivals and model
 * choices reproduce exactly, the Zipf popularity and the gamma burstiness
 * hold over a few thousand draws, trace files replay their rows (and the
 * public traces' columns map), malformed lines name the file and line, the
 * engine sends a schedule at its times, and end to end against the stub
 * server: two runs with one seed send the same requests at the same
 * times, and a model the server lists as sleeping gets cold requests.
 *
 * No timing is asserted: intended send times come from the schedule. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "loadtest/engine.h"
#include "loadtest/loadtest.h"
#include "loadtest/monitor.h"
#include "loadtest/trace.h"
#include "tests/loadtest/stub_server.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/colo-lt-traceXXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static lt_trace_opts opts(uint64_t seed)
{
    lt_trace_opts o = {
        .n_models = 5, .zipf_s = 1.0, .rate_per_s = 20, .burstiness = 0.5, .duration_s = 100,
        .input_len = 64, .output_len = 16, .spread = 0.5, .seed = seed,
    };
    return o;
}

static void test_seeded_reproduce(void **state)
{
    (void)state;
    char err[256];
    lt_trace a, b, c;
    lt_trace_opts o = opts(7);
    assert_int_equal(lt_trace_generate(&o, &a, err, sizeof err), LT_OK);
    assert_int_equal(lt_trace_generate(&o, &b, err, sizeof err), LT_OK);
    assert_true(a.n > 1000);
    assert_int_equal(a.n, b.n);
    for (size_t i = 0; i < a.n; i++) {
        assert_true(a.v[i].at_s == b.v[i].at_s);
        assert_int_equal(a.v[i].model, b.v[i].model);
        assert_int_equal(a.v[i].prompt_tokens, b.v[i].prompt_tokens);
        assert_int_equal(a.v[i].output_tokens, b.v[i].output_tokens);
        assert_true(a.v[i].at_s < 100 && (i == 0 || a.v[i].at_s >= a.v[i - 1].at_s));
        assert_true(a.v[i].prompt_tokens >= 32 && a.v[i].prompt_tokens <= 96);
        assert_true(a.v[i].output_tokens >= 8 && a.v[i].output_tokens <= 24);
    }
    o.seed = 8;
    assert_int_equal(lt_trace_generate(&o, &c, err, sizeof err), LT_OK);
    size_t same_time = 0, same_model = 0, n = a.n < c.n ? a.n : c.n;
    for (size_t i = 0; i < n; i++) {
        same_time += a.v[i].at_s == c.v[i].at_s;
        same_model += a.v[i].model == c.v[i].model;
    }
    assert_true(same_time < 2);         /* the first request is at 0 in both */
    assert_true(same_model < n * 3 / 4); /* the same popularity, not the same sequence */
    /* other lengths leave the times and models as they were */
    o.seed = 7;
    o.input_len = 500;
    lt_trace d;
    assert_int_equal(lt_trace_generate(&o, &d, err, sizeof err), LT_OK);
    assert_int_equal(d.n, a.n);
    for (size_t i = 0; i < a.n; i++) {
        assert_true(a.v[i].at_s == d.v[i].at_s);
        assert_int_equal(a.v[i].model, d.v[i].model);
    }
    /* --requests caps the count */
    lt_trace e;
    o.max_requests = 10;
    assert_int_equal(lt_trace_generate(&o, &e, err, sizeof err), LT_OK);
    assert_int_equal(e.n, 10);
    lt_trace_free(&e);
    o = opts(1);
    o.rate_per_s = 0;
    assert_int_equal(lt_trace_generate(&o, &e, err, sizeof err), LT_EINVAL);
    lt_trace_free(&a);
    lt_trace_free(&b);
    lt_trace_free(&c);
    lt_trace_free(&d);
    lt_trace_free(&e);
}

/* Shares of each model against Zipf(s) weights over a few thousand draws. */
static void check_zipf(double s, uint64_t seed)
{
    char err[256];
    lt_trace t;
    lt_trace_opts o = opts(seed);
    o.zipf_s = s;
    o.burstiness = 0;
    o.rate_per_s = 100;
    o.duration_s = 50; /* 5000 requests */
    assert_int_equal(lt_trace_generate(&o, &t, err, sizeof err), LT_OK);
    assert_int_equal(t.n, 5000);
    size_t count[5] = {0};
    for (size_t i = 0; i < t.n; i++) {
        assert_true(t.v[i].model < 5);
        count[t.v[i].model]++;
    }
    double sum = 0, w[5];
    for (int k = 0; k < 5; k++)
        sum += w[k] = 1.0 / pow(k + 1, s);
    for (int k = 0; k < 5; k++) {
        double p = w[k] / sum, sd = sqrt(p * (1 - p) / (double)t.n);
        double share = (double)count[k] / (double)t.n;
        assert_true(fabs(share - p) < 4 * sd); /* 4 sigma: about 1 failure in 15,000 seeds */
    }
    lt_trace_free(&t);
}

static void test_zipf_popularity(void **state)
{
    (void)state;
    check_zipf(1.0, 11);
    check_zipf(1.0, 12);
    check_zipf(0.0, 13);
    check_zipf(2.0, 14);
    double cdf[4];
    lt_zipf_cdf(4, 1.0, cdf); /* 1, 1/2, 1/3, 1/4 over 25/12 */
    assert_true(fabs(cdf[0] - 12.0 / 25.0) < 1e-12);
    assert_true(fabs(cdf[1] - 18.0 / 25.0) < 1e-12);
    assert_true(cdf[3] == 1.0);
}

/* Coefficient of variation of the gaps ~ 1/sqrt(B), mean gap ~ 1/R. */
static void check_burstiness(double b, uint64_t seed)
{
    char err[256];
    lt_trace t;
    lt_trace_opts o = opts(seed);
    o.burstiness = b;
    o.rate_per_s = 10;
    o.duration_s = 400;
    assert_int_equal(lt_trace_generate(&o, &t, err, sizeof err), LT_OK);
    assert_true(t.n > 3000);
    double sum = 0, sq = 0;
    size_t n = t.n - 1;
    for (size_t i = 1; i < t.n; i++) {
        double g = t.v[i].at_s - t.v[i - 1].at_s;
        sum += g;
        sq += g * g;
    }
    double mean = sum / (double)n, cv = sqrt(sq / (double)n - mean * mean) / mean;
    assert_true(fabs(mean - 0.1) < 0.1 * 0.1);
    assert_true(fabs(cv - 1.0 / sqrt(b)) < 0.1 / sqrt(b));
    lt_trace_free(&t);
}

static void test_burstiness(void **state)
{
    (void)state;
    check_burstiness(1.0, 21);
    check_burstiness(0.25, 22);
    check_burstiness(4.0, 23);
    /* constant gaps */
    char err[256];
    lt_trace t;
    lt_trace_opts o = opts(3);
    o.burstiness = 0;
    o.rate_per_s = 4;
    o.duration_s = 10;
    assert_int_equal(lt_trace_generate(&o, &t, err, sizeof err), LT_OK);
    assert_int_equal(t.n, 40);
    for (size_t i = 0; i < t.n; i++)
        assert_true(fabs(t.v[i].at_s - (double)i / 4.0) < 1e-12);
    lt_trace_free(&t);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static void test_trace_file_replay(void **state)
{
    (void)state;
    char path[128], err[512];
    snprintf(path, sizeof path, "%s/trace.jsonl", dir);
    write_file(path,
               "{\"timestamp\": 100.0, \"model\": \"b\", \"prompt_tokens\": 120, \"output_tokens\": 40}\n"
               "\n"
               "{\"timestamp\": \"100.5\", \"model\": \"gpt-x\", \"prompt_tokens\": 7, \"output_tokens\": 0}\n"
               "{\"Timestamp\": 101, \"Model\": \"gpt-y\", \"Request tokens\": 300, \"Response tokens\": 9}\n"
               "{\"Timestamp\": 102, \"Model\": \"gpt-x\", \"Request tokens\": 5, \"Response tokens\": 6}\n"
               "{\"TIMESTAMP\": 103.25, \"ContextTokens\": 2048, \"GeneratedTokens\": 128}\n");
    const char *models[] = {"a", "b", "c"};
    lt_trace t;
    assert_int_equal(lt_trace_load(path, models, 3, 2.0, 1.0, 5, &t, err, sizeof err), LT_OK);
    assert_int_equal(t.n, 5);
    const double at[] = {0, 0.25, 0.5, 1.0, 1.625};
    const int in[] = {120, 7, 300, 5, 2048}, out[] = {40, 1, 9, 6, 128};
    for (size_t i = 0; i < 5; i++) {
        assert_true(fabs(t.v[i].at_s - at[i]) < 1e-9);
        assert_int_equal(t.v[i].prompt_tokens, in[i]);
        assert_int_equal(t.v[i].output_tokens, out[i]);
    }
    assert_int_equal(t.v[0].model, 1); /* "b" by name */
    assert_int_equal(t.v[1].model, 0); /* the first unknown name: models[0] */
    assert_int_equal(t.v[2].model, 1); /* the second: models[1] */
    assert_int_equal(t.v[3].model, 0); /* gpt-x again */
    assert_true(t.v[4].model < 3);     /* no model: drawn */
    lt_trace_free(&t);

    /* Azure's date-time timestamps */
    write_file(path, "{\"TIMESTAMP\": \"2023-11-16 18:15:46.6805900\", \"ContextTokens\": 4, \"GeneratedTokens\": 2}\n"
                     "{\"TIMESTAMP\": \"2023-11-16 18:15:48.1805900\", \"ContextTokens\": 5, \"GeneratedTokens\": 3}\n"
                     "{\"TIMESTAMP\": \"2023-11-16T18:16:46Z\", \"ContextTokens\": 6, \"GeneratedTokens\": 4}\n");
    assert_int_equal(lt_trace_load(path, models, 3, 1.0, 1.0, 5, &t, err, sizeof err), LT_OK);
    assert_int_equal(t.n, 3);
    assert_true(fabs(t.v[1].at_s - 1.5) < 1e-6);
    assert_true(fabs(t.v[2].at_s - (60 - 0.68059)) < 1e-6);
    lt_trace_free(&t);

    /* the synthetic bodies carry the trace's lengths */
    const int lens_in[] = {3, 17}, lens_out[] = {5, 1};
    lt_bodies b;
    assert_int_equal(lt_bodies_sized(lens_in, lens_out, 2, 1, true, &b, err, sizeof err), LT_OK);
    assert_int_equal(b.n, 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *o = json_loads(b.v[i], 0, NULL);
        assert_non_null(o);
        const char *p = json_string_value(json_object_get(o, "prompt"));
        int words = 1;
        for (; *p; p++)
            words += *p == ' ';
        assert_int_equal(words, lens_in[i]);
        assert_int_equal(json_integer_value(json_object_get(o, "max_tokens")), lens_out[i]);
        assert_true(json_is_true(json_object_get(o, "stream")));
        json_decref(o);
    }
    lt_bodies_free(&b);
}

/* A malformed line: the error names the file, the line and what is wrong. */
static void expect_error(const char *text, const char *line_tag, const char *why)
{
    char path[128], err[512];
    snprintf(path, sizeof path, "%s/bad.jsonl", dir);
    write_file(path, text);
    const char *models[] = {"a"};
    lt_trace t;
    assert_int_equal(lt_trace_load(path, models, 1, 1.0, 1.0, 1, &t, err, sizeof err), LT_EFORMAT);
    char want[160];
    snprintf(want, sizeof want, "%s:%s: ", path, line_tag);
    if (!strstr(err, want) || !strstr(err, why))
        fail_msg("error '%s' lacks '%s' or '%s'", err, want, why);
    assert_null(t.v);
}

static void test_trace_file_errors(void **state)
{
    (void)state;
    const char *ok = "{\"timestamp\": 1, \"prompt_tokens\": 1, \"output_tokens\": 1}\n";
    char text[512];
    snprintf(text, sizeof text, "%s{\"timestamp\": 2, \"prompt_tokens\": 1\n", ok);
    expect_error(text, "2", "not a JSON object");
    snprintf(text, sizeof text, "%s\n{\"timestamp\": 2, \"prompt_tokens\": 1}\n", ok);
    expect_error(text, "3", "no output tokens");
    snprintf(text, sizeof text, "%s{\"timestamp\": 0.5, \"prompt_tokens\": 1, \"output_tokens\": 1}\n", ok);
    expect_error(text, "2", "before the previous row");
    expect_error("{\"timestamp\": 1, \"prompt_tokens\": -3, \"output_tokens\": 1}\n", "1", "bad prompt token count");
    expect_error("{\"timestamp\": 1, \"prompt_tokens\": 2.5, \"output_tokens\": 1}\n", "1", "bad prompt token count");
    expect_error("{\"prompt_tokens\": 2, \"output_tokens\": 1}\n", "1", "no timestamp");
    expect_error("{\"timestamp\": \"yesterday\", \"prompt_tokens\": 2, \"output_tokens\": 1}\n", "1", "bad timestamp");
    expect_error("{\"timestamp\": 1, \"model\": 3, \"prompt_tokens\": 2, \"output_tokens\": 1}\n", "1",
                 "\"model\" must be a string");
    expect_error("[1, 2]\n", "1", "not a JSON object");
    /* a file that is not there, and one without rows */
    char path[128], err[512];
    const char *models[] = {"a"};
    lt_trace t;
    snprintf(path, sizeof path, "%s/none.jsonl", dir);
    assert_int_equal(lt_trace_load(path, models, 1, 1.0, 1.0, 1, &t, err, sizeof err), LT_EIO);
    assert_non_null(strstr(err, path));
    snprintf(path, sizeof path, "%s/empty.jsonl", dir);
    write_file(path, "\n\n");
    assert_int_equal(lt_trace_load(path, models, 1, 1.0, 1.0, 1, &t, err, sizeof err), LT_EFORMAT);
    assert_non_null(strstr(err, "no requests"));
}

/* The engine sends a schedule's requests at its times, in order. */
static void test_engine_schedule(void **state)
{
    (void)state;
    char url[64], err[256];
    stub_cfg cfg = {.delay_ms = 1, .tokens = 2};
    stub_server *s = stub_start(&cfg);
    assert_non_null(s);
    stub_url(s, url, sizeof url);
    lt_target t;
    assert_int_equal(lt_target_parse(url, &t, err, sizeof err), LT_OK);
    const int in[] = {1, 2, 3, 4}, out[] = {1, 1, 1, 1};
    lt_bodies b;
    lt_requests rq;
    assert_int_equal(lt_bodies_sized(in, out, 4, 1, false, &b, err, sizeof err), LT_OK);
    assert_int_equal(lt_requests_build(&t, "POST", "/v1/models/m/infer", &b, NULL, &rq, err, sizeof err), LT_OK);
    lt_bodies_free(&b);
    const double sched[] = {0.0, 0.05, 0.051, 0.2};
    lt_load l = {.model = "m", .requests = &rq, .schedule_s = sched, .n_schedule = 4, .rate_per_s = 20};
    lt_run_opts o = {.duration_s = 0.201, .timeout_s = 5, .max_connections = 8};
    lt_result r;
    lt_result_init(&r, "m", "trace");
    assert_int_equal(lt_engine_run(&t, &l, 1, &o, &r, err, sizeof err), LT_OK);
    lt_result_finish(&r);
    assert_int_equal(r.ok, 4);
    assert_int_equal(r.n_reqs, 4);
    double seen[4];
    for (size_t i = 0; i < 4; i++) {
        seen[i] = r.reqs[i].intended_s;
        assert_int_equal(r.reqs[i].cold, -1); /* no monitor */
    }
    for (size_t i = 0; i < 4; i++) { /* completion order may differ from the schedule's */
        bool found = false;
        for (size_t k = 0; k < 4; k++)
            found |= fabs(seen[k] - sched[i]) < 1e-6;
        assert_true(found);
    }
    lt_result_fini(&r);
    /* a schedule longer than its requests, or with closed-loop connections, is refused */
    l.n_schedule = 5;
    lt_result_init(&r, "m", "trace");
    assert_int_equal(lt_engine_run(&t, &l, 1, &o, &r, err, sizeof err), LT_EINVAL);
    l.n_schedule = 4;
    l.concurrency = 2;
    assert_int_equal(lt_engine_run(&t, &l, 1, &o, &r, err, sizeof err), LT_EINVAL);
    lt_result_fini(&r);
    stub_stop(s);
    lt_requests_free(&rq);
}

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

typedef struct sent {
    char model[16];
    double intended_s;
    bool has_cold, cold;
} sent;

static int sent_cmp(const void *a, const void *b)
{
    const sent *x = a, *y = b;
    return x->intended_s < y->intended_s ? -1 : x->intended_s > y->intended_s ? 1 : strcmp(x->model, y->model);
}

/* The --requests-out lines, sorted by intended time. */
static size_t read_sent(const char *path, sent *out, size_t max)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[2048];
    size_t n = 0;
    while (fgets(line, sizeof line, f) && n < max) {
        json_t *r = json_loads(line, 0, NULL);
        assert_non_null(r);
        snprintf(out[n].model, sizeof out[n].model, "%s", json_string_value(json_object_get(r, "model")));
        out[n].intended_s = json_real_value(json_object_get(r, "intended_s"));
        json_t *c = json_object_get(r, "cold");
        out[n].has_cold = json_is_boolean(c);
        out[n].cold = json_is_true(c);
        json_decref(r);
        n++;
    }
    fclose(f);
    qsort(out, n, sizeof *out, sent_cmp);
    return n;
}

static void test_trace_scenario_end_to_end(void **state)
{
    (void)state;
    char url[64], json1[128], json2[128], req1[128], req2[128], req3[128], html[128];
    stub_cfg cfg = {.sse = true, .sse_first_ms = 2, .sse_gap_ms = 1, .sse_events = 3, .prompt_tokens = 4,
                    .models_list = "{\"object\":\"list\",\"data\":[{\"id\":\"a\",\"state\":\"ready\","
                                   "\"lifecycle\":{\"wakes\":2,\"evictions\":1}},{\"id\":\"b\",\"state\":\"sleeping\","
                                   "\"lifecycle\":{\"wakes\":0,\"evictions\":3}},{\"id\":\"c\",\"status\":"
                                   "{\"value\":\"loaded\"}}]}"};
    stub_server *s = stub_start(&cfg);
    assert_non_null(s);
    stub_url(s, url, sizeof url);
    snprintf(json1, sizeof json1, "%s/t1.json", dir);
    snprintf(json2, sizeof json2, "%s/t2.json", dir);
    snprintf(req1, sizeof req1, "%s/r1.jsonl", dir);
    snprintf(req2, sizeof req2, "%s/r2.jsonl", dir);
    snprintf(req3, sizeof req3, "%s/r3.jsonl", dir);
    snprintf(html, sizeof html, "%s/t.html", dir);
    assert_int_equal(run_cli("--url", url, "--scenario", "trace", "--model", "a", "--model", "b", "--model", "c",
                             "--rate", "60", "--burstiness", "0.5", "--zipf", "1", "--duration", "1", "--seed", "3",
                             "--stream", "--goodput", "ttft:5000", "--quiet", "--poll-interval", "0.05",
                             "--json", json1, "--requests-out", req1, "--html", html, NULL),
                     0);
    assert_int_equal(run_cli("--url", url, "--scenario", "trace", "--model", "a", "--model", "b", "--model", "c",
                             "--rate", "60", "--burstiness", "0.5", "--zipf", "1", "--duration", "1", "--seed", "3",
                             "--stream", "--goodput", "ttft:5000", "--quiet", "--json", json2, "--requests-out",
                             req2, NULL),
                     0);
    assert_int_equal(run_cli("--url", url, "--scenario", "trace", "--model", "a", "--model", "b", "--model", "c",
                             "--rate", "60", "--burstiness", "0.5", "--zipf", "1", "--duration", "1", "--seed", "4",
                             "--stream", "--quiet", "--requests-out", req3, NULL),
                     0);
    static sent r1[4096], r2[4096], r3[4096];
    size_t n1 = read_sent(req1, r1, 4096), n2 = read_sent(req2, r2, 4096), n3 = read_sent(req3, r3, 4096);
    assert_true(n1 > 20);
    assert_int_equal(n1, n2);
    size_t same = 0;
    for (size_t i = 0; i < n1; i++) {
        assert_string_equal(r1[i].model, r2[i].model);
        assert_true(fabs(r1[i].intended_s - r2[i].intended_s) < 1e-6);
        /* a ready (or loaded) model's requests are warm, a sleeping one's cold */
        assert_true(r1[i].has_cold);
        assert_int_equal(r1[i].cold, strcmp(r1[i].model, "b") == 0);
    }
    for (size_t i = 0; i < n1 && i < n3; i++)
        same += fabs(r1[i].intended_s - r3[i].intended_s) < 1e-6 && strcmp(r1[i].model, r3[i].model) == 0;
    assert_true(same < 3); /* another seed, another stream */

    FILE *f = fopen(json1, "r");
    assert_non_null(f);
    json_t *root = json_loadf(f, 0, NULL);
    fclose(f);
    assert_non_null(root);
    assert_string_equal(json_string_value(json_object_get(root, "scenario")), "trace");
    json_t *tr = json_object_get(root, "trace");
    assert_non_null(tr);
    assert_string_equal(json_string_value(json_object_get(tr, "source")), "zipf");
    assert_true(json_is_true(json_object_get(tr, "monitored")));
    json_t *models = json_object_get(tr, "models"), *all = json_object_get(tr, "overall");
    assert_int_equal(json_array_size(models), 3);
    long long sched = 0, cold = 0;
    for (size_t i = 0; i < 3; i++) {
        json_t *m = json_array_get(models, i);
        sched += json_integer_value(json_object_get(m, "scheduled"));
        cold += json_integer_value(json_object_get(m, "cold"));
        assert_int_equal(json_integer_value(json_object_get(m, "unknown")), 0);
    }
    assert_int_equal(sched, (long long)n1);
    assert_int_equal(json_integer_value(json_object_get(all, "recorded")), (long long)n1);
    assert_int_equal(json_integer_value(json_object_get(all, "cold")), cold);
    json_t *ma = json_array_get(models, 0), *mb = json_array_get(models, 1);
    /* Zipf(1) over 3: a has 6/11 of the requests, b 3/11 */
    assert_true(json_integer_value(json_object_get(ma, "scheduled")) >
                json_integer_value(json_object_get(mb, "scheduled")));
    assert_int_equal(json_integer_value(json_object_get(ma, "cold")), 0);
    assert_int_equal(json_integer_value(json_object_get(mb, "warm")), 0);
    assert_true(json_is_null(json_object_get(mb, "p50_ttft_warm_ms")));
    assert_true(json_real_value(json_object_get(mb, "p50_ttft_cold_ms")) >= 1.5); /* the stub's 2 ms */
    assert_true(json_real_value(json_object_get(all, "attainment_pct")) == 100.0);
    assert_int_equal(json_integer_value(json_object_get(ma, "wakes")), 0); /* the counters never moved */
    assert_int_equal(json_integer_value(json_object_get(mb, "evictions")), 0);
    assert_true(json_is_null(json_object_get(json_array_get(models, 2), "wakes"))); /* no counters */
    json_t *res = json_object_get(mb, "residency");
    assert_int_equal(json_array_size(res), 1);
    assert_true(json_is_false(json_object_get(json_array_get(res, 0), "resident")));
    assert_true(json_array_size(json_object_get(all, "attainment_over_time_pct")) >= 1);
    json_decref(root);

    f = fopen(html, "r");
    assert_non_null(f);
    char buf[1 << 16];
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    assert_non_null(strstr(buf, "Attainment over time"));
    assert_non_null(strstr(buf, "Resident models"));
    assert_null(strstr(buf, "<script"));

    /* a trace file replayed at twice its speed, its rows in order */
    char trace[128];
    snprintf(trace, sizeof trace, "%s/replay.jsonl", dir);
    write_file(trace, "{\"timestamp\": 10, \"model\": \"c\", \"prompt_tokens\": 3, \"output_tokens\": 2}\n"
                      "{\"timestamp\": 10.2, \"model\": \"a\", \"prompt_tokens\": 4, \"output_tokens\": 2}\n"
                      "{\"timestamp\": 10.6, \"model\": \"c\", \"prompt_tokens\": 5, \"output_tokens\": 2}\n");
    assert_int_equal(run_cli("--url", url, "--scenario", "trace", "--model", "a", "--model", "b", "--model", "c",
                             "--trace", trace, "--trace-speed", "2", "--stream", "--quiet", "--requests-out", req1,
                             NULL),
                     0);
    n1 = read_sent(req1, r1, 4096);
    assert_int_equal(n1, 3);
    const char *want_model[] = {"c", "a", "c"};
    const double want_at[] = {0, 0.1, 0.3};
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(r1[i].model, want_model[i]);
        assert_true(fabs(r1[i].intended_s - want_at[i]) < 1e-6);
    }
    /* usage: the trace scenario's own rules */
    assert_int_equal(run_cli("--url", url, "--scenario", "trace", "--model", "a", NULL), 2);
    assert_int_equal(run_cli("--url", url, "--scenario", "trace", "--model", "a", "--trace", trace, "--rate", "2",
                             NULL), 2);
    assert_int_equal(run_cli("--url", url, "--scenario", "trace", "--model", "a", "--concurrency", "2", NULL), 2);
    assert_int_equal(run_cli("--url", url, "--model", "a", "--trace", trace, NULL), 2);
    assert_int_equal(run_cli("--url", url, "--scenario", "trace", "--model", "a", "--rate", "1", "--zipf", "-1",
                             NULL), 2);
    snprintf(trace, sizeof trace, "%s/broken.jsonl", dir);
    write_file(trace, "{\"timestamp\": 1}\n");
    assert_int_equal(run_cli("--url", url, "--scenario", "trace", "--model", "a", "--trace", trace, "--quiet",
                             NULL), 2);
    stub_stop(s);
}

/* The monitor reads colo's and llama.cpp's shapes and counts changes. */
static void test_monitor_apply(void **state)
{
    (void)state;
    char err[256];
    lt_target t;
    assert_int_equal(lt_target_parse("http://127.0.0.1:1", &t, err, sizeof err), LT_OK);
    const char *models[] = {"a", "b"};
    lt_monitor *m = lt_monitor_new(&t, NULL, models, 2, 0.1, 0, err, sizeof err);
    assert_non_null(m);
    assert_int_equal(lt_monitor_resident(m, "a"), -1);
    assert_int_equal(lt_monitor_apply(m, "{\"data\":[{\"id\":\"a\",\"state\":\"sleeping\",\"lifecycle\":"
                                         "{\"wakes\":5,\"evictions\":2}}]}", 0.0), LT_OK);
    assert_int_equal(lt_monitor_resident(m, "a"), 0);
    assert_int_equal(lt_monitor_resident(m, "b"), -1);
    assert_int_equal(lt_monitor_apply(m, "{\"data\":[{\"id\":\"a\",\"state\":\"ready\",\"lifecycle\":"
                                         "{\"wakes\":6,\"evictions\":2}},{\"id\":\"b\",\"status\":\"loaded\"}]}", 1.0),
                     LT_OK);
    assert_int_equal(lt_monitor_apply(m, "{\"data\":[{\"id\":\"a\",\"state\":\"waking\",\"lifecycle\":"
                                         "{\"wakes\":6,\"evictions\":3}}]}", 2.0), LT_OK);
    assert_int_equal(lt_monitor_apply(m, "[{\"id\":\"a\",\"state\":\"ready\"}]", 3.0), LT_OK);
    assert_int_equal(lt_monitor_apply(m, "not json", 4.0), LT_EFORMAT);
    const lt_monitor_model *a = lt_monitor_find(m, "a");
    assert_int_equal(a->resident, 1);
    assert_int_equal(a->loads_seen, 2);
    assert_int_equal(a->unloads_seen, 1);
    assert_int_equal(a->n_changes, 4);
    assert_true(a->changes[2].at_s == 2.0 && !a->changes[2].resident);
    assert_int_equal(a->wakes_last - a->wakes_first, 1);
    assert_int_equal(a->evictions_last - a->evictions_first, 1);
    assert_int_equal(lt_monitor_resident(m, "b"), 1);
    /* this process's own memory (its tree's: a sanitizer may have helpers
     * running, so the sum may pass this process's own high-water mark) */
    m->pid = (int)getpid();
    assert_int_equal(lt_monitor_sample_memory(m), LT_OK);
    assert_true(m->has_rss && m->rss_max_bytes > 0 && m->hwm_bytes > 0);
    lt_monitor_free(m);
}

/* A server's memory counts its child processes' (llama.cpp's router runs
 * each model in one): a child that holds 32 MiB is in the tree's sum. */
static void test_monitor_tree_rss(void **state)
{
    (void)state;
    int go[2], ready[2];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(ready), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        size_t n = 32u << 20;
        char *p = malloc(n), c = 0;
        if (p)
            memset(p, 1, n);
        if (write(ready[1], "x", 1) != 1 || read(go[0], &c, 1) < 0)
            _exit(1);
        free(p);
        _exit(p ? 0 : 1);
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    assert_int_equal(lt_proc_tree_rss_bytes(-1), 0); /* no such process */
    lt_monitor m = {.pid = (int)getpid()};
    assert_int_equal(lt_monitor_sample_memory(&m), LT_OK);
    uint64_t own = 0;
    FILE *f = fopen("/proc/self/status", "r");
    assert_non_null(f);
    char line[256];
    unsigned long long kb;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %llu kB", &kb) == 1)
            own = kb * 1024;
    fclose(f);
    assert_true(m.has_rss && m.rss_max_bytes >= own + (30u << 20));
    assert_int_equal(write(go[1], "x", 1), 1);
    int wst = 0;
    assert_int_equal(waitpid(child, &wst, 0), child);
    assert_true(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
    close(go[0]), close(go[1]), close(ready[0]), close(ready[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seeded_reproduce),
        cmocka_unit_test(test_zipf_popularity),
        cmocka_unit_test(test_burstiness),
        cmocka_unit_test(test_trace_file_replay),
        cmocka_unit_test(test_trace_file_errors),
        cmocka_unit_test(test_engine_schedule),
        cmocka_unit_test(test_monitor_apply),
        cmocka_unit_test(test_monitor_tree_rss),
        cmocka_unit_test(test_trace_scenario_end_to_end),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
