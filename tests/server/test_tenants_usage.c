/* Tenants end to end, usage and fair share: the ledger keeps every
 * answered request through kill -9 and restart; a deleted tenant's key is
 * refused while its usage stays; colo-usage's sums equal /metrics; a key
 * sees its own usage, the admin all; and one tenant flooding a model with
 * 16 concurrent requests delays another by at most the request in service
 * (the bound stated in docs/TENANTS.md), while a key of the flooding
 * tenant itself waits its turn behind the flood. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <pthread.h>
#include <stdatomic.h>

#include "server/tenants/sha256.h"
#include "tests/server/server_fixture.h"
#include "tests/test_seed.h"

/* acme/search (ks), acme/ads (ka), globex/bi (kb, unless deleted); the
 * flood tenant acme/flood (kf, kf2) and globex/light (kl). */
static char *config_text(bool with_bi)
{
    char hs[65], ha[65], hb[65], hf[65], hf2[65], hl[65];
    srv_key_sha256("ks", hs), srv_key_sha256("ka", ha), srv_key_sha256("kb", hb), srv_key_sha256("kf", hf), srv_key_sha256("kf2", hf2), srv_key_sha256("kl", hl);
    char *y = malloc(8192);
    snprintf(y, 8192,
             "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, api_key_env: COLO_TEST_ADMIN_KEY }\n"
             "models:\n"
             "  - { name: a, kind: llama, path: m.gguf, memory_fraction: 0.1, batching: { max_batch_size: 1, max_queue: 64 } }\n"
             "  - { name: b, kind: llama, path: m.gguf, memory_fraction: 0.1 }\n"
             "pricing: { models: { a: { per_device_hour: 10 }, b: { per_million_tokens: 5 } } }\n"
             "tenants:\n"
             "  - organization: acme\n"
             "    projects:\n"
             "      - { name: search, quotas: { requests_per_minute: 6 }, keys: [ { name: s, sha256: \"%s\" } ] }\n"
             "      - { name: ads, keys: [ { name: a, sha256: \"%s\" } ] }\n"
             "      - { name: flood, keys: [ { name: f, sha256: \"%s\" }, { name: f2, sha256: \"%s\" } ] }\n"
             "  - organization: globex\n"
             "    projects:\n"
             "      - { name: light, keys: [ { name: l, sha256: \"%s\" } ] }\n"
             "%s%s%s",
             hs, ha, hf, hf2, hl, with_bi ? "      - { name: bi, keys: [ { name: b, sha256: \"" : "",
             with_bi ? hb : "", with_bi ? "\" } ] }\n" : "");
    return y;
}

static const char *ADMIN = "COLO_TEST_ADMIN_KEY=admin-key-2";

static int post(srv_fixture *f, const char *key, const char *body, srv_resp *r)
{
    char h[256];
    snprintf(h, sizeof h, "Authorization: Bearer %s\r\n", key);
    if (!srv_http_h(f, "POST", "/v1/completions", h, body, r))
        return 0;
    return r->status;
}

static json_t *get(srv_fixture *f, const char *key, const char *path, int *status)
{
    char h[256];
    snprintf(h, sizeof h, "Authorization: Bearer %s\r\n", key);
    srv_resp r;
    *status = 0;
    if (!srv_http_h(f, "GET", path, h, NULL, &r))
        return NULL;
    *status = r.status;
    json_t *j = srv_json(&r);
    srv_resp_free(&r);
    return j;
}

/* requests in /v1/usage's data for organization/project (admin view, grouped by tenant) */
static long usage_requests(json_t *u, const char *org, const char *project)
{
    long n = 0;
    size_t i;
    json_t *row;
    json_array_foreach(json_object_get(u, "data"), i, row)
        if (!strcmp(json_string_value(json_object_get(row, "organization")), org) &&
            !strcmp(json_string_value(json_object_get(row, "project")), project))
            n += (long)json_integer_value(json_object_get(row, "requests"));
    return n;
}

static void test_kill9_restart_deleted_tenant(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f) && srv_mkmodel(&f, "m.gguf", 2, 64, 512, 1024));
    char *y = config_text(true);
    assert_true(srv_start_env(&f, y, ADMIN));
    const char *keys[3] = {"ks", "ka", "kb"};
    long sent[3] = {0}, ok[3] = {0};
    int n = 12 + rand() % 12;
    for (int i = 0; i < n; i++) {
        int t = rand() % 3;
        srv_resp r;
        int st = post(&f, keys[t], "{\"model\":\"b\",\"prompt\":\"hi\",\"max_tokens\":2}", &r);
        srv_resp_free(&r);
        assert_true(st == 200 || st == 429); /* search's 6 a minute may trip */
        sent[t]++;
        ok[t] += st == 200;
    }
    /* kill -9 right after the last answer: nothing answered is lost */
    kill(f.pid, SIGKILL);
    waitpid(f.pid, NULL, 0);
    f.pid = 0;
    assert_true(srv_start_env(&f, y, ADMIN));
    free(y);
    int st;
    json_t *u = get(&f, "admin-key-2", "/v1/usage?group_by=tenant", &st);
    assert_int_equal(st, 200);
    assert_string_equal(json_string_value(json_object_get(u, "scope")), "all");
    assert_int_equal(usage_requests(u, "acme", "search"), sent[0]);
    assert_int_equal(usage_requests(u, "acme", "ads"), sent[1]);
    assert_int_equal(usage_requests(u, "globex", "bi"), sent[2]);
    json_decref(u);
    /* by status: the answered ones */
    u = get(&f, "admin-key-2", "/v1/usage?group_by=tenant,status", &st);
    long answered = 0;
    size_t i;
    json_t *row;
    json_array_foreach(json_object_get(u, "data"), i, row)
        if (json_integer_value(json_object_get(row, "status")) == 200)
            answered += (long)json_integer_value(json_object_get(row, "requests"));
    assert_int_equal(answered, ok[0] + ok[1] + ok[2]);
    json_decref(u);
    /* a key sees its own tenant only */
    u = get(&f, "ka", "/v1/usage?group_by=tenant", &st);
    assert_int_equal(st, 200);
    assert_string_equal(json_string_value(json_object_get(u, "scope")), "tenant");
    assert_int_equal(usage_requests(u, "acme", "ads"), sent[1]);
    assert_int_equal(usage_requests(u, "acme", "search"), 0);
    assert_int_equal(json_array_size(json_object_get(u, "data")), sent[1] ? 1 : 0);
    json_decref(u);
    u = get(&f, "ka", "/v1/usage?from=tomorrow", &st);
    assert_int_equal(st, 400);
    json_decref(u);
    /* a NUL cuts nothing short: "model%00hour" is not "model" */
    u = get(&f, "ka", "/v1/usage?group_by=model%00hour", &st);
    assert_int_equal(st, 400);
    json_decref(u);
    u = get(&f, "ka", "/v1/usage?from=2000-01-01%00junk", &st);
    assert_int_equal(st, 400);
    json_decref(u);
    /* percent-encoded parameters; a range before everything is empty */
    u = get(&f, "admin-key-2", "/v1/usage?group_by=tenant%2Cmodel&to=2000-01-01T00%3A00%3A00Z", &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_array_size(json_object_get(u, "data")), 0);
    json_decref(u);
    u = get(&f, "admin-key-2", "/v1/usage?group_by=tenant%2Cmodel&from=2000-01-01T00%3A00%3A00Z", &st);
    assert_int_equal(st, 200);
    assert_true(json_array_size(json_object_get(u, "data")) >= 1);
    json_decref(u);

    /* globex/bi deleted from the config: its key is refused, its usage stays */
    assert_int_equal(srv_stop(&f), 0);
    y = config_text(false);
    assert_true(srv_start_env(&f, y, ADMIN));
    free(y);
    srv_resp r;
    assert_int_equal(post(&f, "kb", "{\"model\":\"b\",\"prompt\":\"hi\",\"max_tokens\":2}", &r), 401);
    srv_resp_free(&r);
    u = get(&f, "admin-key-2", "/v1/usage?group_by=tenant", &st);
    assert_int_equal(usage_requests(u, "globex", "bi"), sent[2]);
    json_decref(u);
    srv_cleanup(&f);
}

/* The value of a series in Prometheus text, 0 when absent. */
static double metric(const char *text, const char *series)
{
    const char *p = text;
    size_t n = strlen(series);
    while ((p = strstr(p, series))) {
        if ((p == text || p[-1] == '\n') && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p += n;
    }
    return 0;
}

static void test_report_equals_metrics(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f) && srv_mkmodel(&f, "m.gguf", 2, 64, 512, 1024));
    char *y = config_text(true);
    assert_true(srv_start_env(&f, y, ADMIN));
    free(y);
    const char *keys[3] = {"ks", "ka", "kb"};
    const char *models[2] = {"a", "b"};
    for (int i = 0; i < 30; i++) {
        char body[160];
        snprintf(body, sizeof body, "{\"model\":\"%s\",\"prompt\":\"hello %d\",\"max_tokens\":%d}", models[rand() % 2],
                 rand() % 100, 1 + rand() % 12);
        srv_resp r;
        post(&f, keys[rand() % 3], body, &r);
        srv_resp_free(&r);
    }
    srv_resp mr;
    assert_true(srv_http_h(&f, "GET", "/metrics", "Authorization: Bearer admin-key-2\r\n", NULL, &mr));
    assert_int_equal(mr.status, 200);
    char cmd[1024], *out = NULL;
    size_t len = 0;
    /* the ledger the server wrote: the fixture's folder is its XDG_STATE_HOME */
    snprintf(cmd, sizeof cmd,
             "XDG_STATE_HOME=%s %s/colo-usage report --config %s/config.yaml --format json --group-by tenant,model",
             f.dir, COLO_BINARY_DIR, f.dir);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    FILE *mem = open_memstream(&out, &len);
    char buf[4096];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, p)) > 0)
        fwrite(buf, 1, k, mem);
    fclose(mem);
    assert_int_equal(pclose(p), 0);
    json_t *rep = json_loads(out, 0, NULL);
    free(out);
    assert_non_null(rep);
    size_t i;
    json_t *row;
    double total_requests = 0, total_cost = 0;
    json_array_foreach(json_object_get(rep, "data"), i, row)
    {
        char tenant[160], series[320];
        snprintf(tenant, sizeof tenant, "%s/%s", json_string_value(json_object_get(row, "organization")),
                 json_string_value(json_object_get(row, "project")));
        const char *model = json_string_value(json_object_get(row, "model"));
        double req = 0;
        for (int s = 100; s < 600; s++) { /* every status */
            snprintf(series, sizeof series, "colo_tenant_requests_total{tenant=\"%s\",model=\"%s\",status=\"%d\"}",
                     tenant, model, s);
            req += metric(mr.body, series);
        }
        assert_int_equal((long)req, (long)json_integer_value(json_object_get(row, "requests")));
        total_requests += req;
        snprintf(series, sizeof series, "colo_tenant_tokens_total{tenant=\"%s\",model=\"%s\",kind=\"prompt\"}", tenant,
                 model);
        assert_int_equal((long)metric(mr.body, series), (long)json_integer_value(json_object_get(row, "prompt_tokens")));
        snprintf(series, sizeof series, "colo_tenant_tokens_total{tenant=\"%s\",model=\"%s\",kind=\"completion\"}",
                 tenant, model);
        assert_int_equal((long)metric(mr.body, series),
                         (long)json_integer_value(json_object_get(row, "completion_tokens")));
        snprintf(series, sizeof series, "colo_tenant_device_seconds_total{tenant=\"%s\",model=\"%s\"}", tenant, model);
        double dev = json_real_value(json_object_get(row, "device_seconds"));
        assert_true(fabs(metric(mr.body, series) - dev) <= 1e-6 * (dev + 1e-3));
        /* the cost is the config's prices applied to the sums */
        double want = !strcmp(model, "a") ? dev / 3600 * 10
                                          : (double)(json_integer_value(json_object_get(row, "prompt_tokens")) +
                                                     json_integer_value(json_object_get(row, "completion_tokens"))) /
                                                1e6 * 5;
        assert_true(fabs(json_real_value(json_object_get(row, "cost")) - want) <= 1e-9 + 1e-6 * want);
        total_cost += want;
        if (json_integer_value(json_object_get(row, "completion_tokens")) > 0)
            assert_true(dev > 0); /* device time was measured */
    }
    assert_int_equal((long)total_requests, 30);
    assert_true(total_cost > 0);
    /* the shares of each model's steps add up to its step time: less the
     * rest of the steps requests ended in, plus the steps that computed no
     * token but ended a request (charged, not in the step histogram) */
    for (int m = 0; m < 2; m++) {
        char series[160];
        double dev = 0, steps;
        json_array_foreach(json_object_get(rep, "data"), i, row)
            if (!strcmp(json_string_value(json_object_get(row, "model")), models[m]))
                dev += json_real_value(json_object_get(row, "device_seconds"));
        snprintf(series, sizeof series, "colo_model_step_duration_seconds_sum{model=\"%s\"}", models[m]);
        steps = metric(mr.body, series);
        print_message("model %s: device-seconds charged %.6f, step time %.6f\n", models[m], dev, steps);
        assert_true(dev <= steps * 1.05 + 1e-3);
        assert_true(dev >= steps * 0.5);
    }
    json_decref(rep);
    srv_resp_free(&mr);
    /* csv and html */
    snprintf(cmd, sizeof cmd, "XDG_STATE_HOME=%s %s/colo-usage report --config %s/config.yaml --format html --out %s/r.html",
             f.dir, COLO_BINARY_DIR, f.dir, f.dir);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "grep -c '<svg' %s/r.html | grep -qx 2", f.dir); /* a chart per organization */
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "XDG_STATE_HOME=%s %s/colo-usage report --config %s/config.yaml --format xml 2>/dev/null",
             f.dir, COLO_BINARY_DIR, f.dir);
    assert_int_equal(WEXITSTATUS(system(cmd)), 2);
    srv_cleanup(&f);
}

/* ---- fair share under a flood ------------------------------------------------------ */

typedef struct flood {
    srv_fixture *f;
    atomic_int *done;
    atomic_bool *stop;
} flood;

static void *flooder(void *arg)
{
    flood *fl = arg;
    while (!atomic_load(fl->stop)) {
        srv_resp r;
        int st = post(fl->f, "kf", "{\"model\":\"a\",\"prompt\":\"hello 1\",\"max_tokens\":300,\"temperature\":0}", &r);
        srv_resp_free(&r);
        if (st == 200)
            atomic_fetch_add(fl->done, 1);
        else
            srv_sleep_ms(5);
    }
    return NULL;
}

/* The flood's answered requests as the server counts them (its metrics are
 * updated before each answer is sent), so that how fast the flood's own
 * clients read their answers does not matter. */
static long flood_answered(srv_fixture *f)
{
    srv_resp r;
    assert_true(srv_http_h(f, "GET", "/metrics", "Authorization: Bearer admin-key-2\r\n", NULL, &r));
    long n = (long)metric(r.body, "colo_tenant_requests_total{tenant=\"acme/flood\",model=\"a\",status=\"200\"}");
    srv_resp_free(&r);
    return n;
}

/* Most of the flood's requests (key's own excluded) that the server
 * answered while one request of key was outstanding, over n requests. */
static long worst_wait(srv_fixture *f, const char *key, bool same_tenant, int n)
{
    long worst = 0;
    for (int i = 0; i < n; i++) {
        long before = flood_answered(f);
        srv_resp r;
        assert_int_equal(post(f, key, "{\"model\":\"a\",\"prompt\":\"hello 1\",\"max_tokens\":48,\"temperature\":0}", &r),
                         200);
        srv_resp_free(&r);
        long d = flood_answered(f) - before - (same_tenant ? 1 : 0);
        if (d > worst)
            worst = d;
    }
    return worst;
}

/* /metrics, /v1/stats and /dashboard show every organization's use: a
 * tenant's key gets 403 there (its own usage is at /v1/usage), the
 * operator's key reads them. */
static void test_operator_routes(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f) && srv_mkmodel(&f, "m.gguf", 2, 64, 512, 1024));
    char *y = config_text(true);
    assert_true(srv_start_env(&f, y, ADMIN));
    free(y);
    srv_resp r;
    assert_int_equal(post(&f, "kb", "{\"model\":\"b\",\"prompt\":\"hi\",\"max_tokens\":2}", &r), 200);
    srv_resp_free(&r);
    const char *paths[] = {"/metrics", "/v1/stats", "/dashboard"};
    const char *tenant_keys[] = {"Authorization: Bearer ka\r\n", "x-api-key: ks\r\n",
                                 "Authorization: Basic eDprYg==\r\n" /* x:kb */};
    for (size_t i = 0; i < 3; i++) {
        for (size_t k = 0; k < 3; k++) {
            assert_true(srv_http_h(&f, "GET", paths[i], tenant_keys[k], NULL, &r));
            assert_int_equal(r.status, 403);
            assert_non_null(strstr(r.body, "forbidden"));
            assert_null(strstr(r.body, "globex"));
            srv_resp_free(&r);
        }
        assert_true(srv_http_h(&f, "GET", paths[i], "Authorization: Bearer admin-key-2\r\n", NULL, &r));
        assert_int_equal(r.status, 200);
        srv_resp_free(&r);
    }
    assert_true(srv_http_h(&f, "GET", "/metrics", "Authorization: Bearer admin-key-2\r\n", NULL, &r));
    assert_non_null(strstr(r.body, "colo_tenant_requests_total{tenant=\"globex/bi\""));
    srv_resp_free(&r);
    /* a tenant still reads its own usage */
    int st;
    json_t *u = get(&f, "kb", "/v1/usage?group_by=tenant", &st);
    assert_int_equal(st, 200);
    assert_int_equal(usage_requests(u, "globex", "bi"), 1);
    json_decref(u);
    srv_cleanup(&f);
}

/* Another process holds a write transaction on the ledger (an operator's
 * sqlite3 session) from before colo-server starts: the server starts
 * anyway, naming the holder, answers requests at once, shows the waiting
 * rows in /metrics, and writes them once the lock is released. */
static void test_locked_ledger_keeps_serving(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f) && srv_mkmodel(&f, "m.gguf", 2, 64, 512, 1024));
    char db[400];
    snprintf(db, sizeof db, "%s/locked.sqlite", f.dir);
    int ready[2], release[2];
    assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
    assert_int_equal(pipe2(release, O_CLOEXEC), 0);
    pid_t locker = fork();
    assert_true(locker >= 0);
    if (locker == 0) {
        close(ready[0]);
        close(release[1]);
        sqlite3 *h = NULL;
        char ok = sqlite3_open(db, &h) == SQLITE_OK && sqlite3_exec(h, "BEGIN IMMEDIATE;", NULL, NULL, NULL) == SQLITE_OK
                      ? 'y'
                      : 'n';
        char c;
        if (write(ready[1], &ok, 1) == 1)
            while (read(release[0], &c, 1) < 0 && errno == EINTR)
                ;
        sqlite3_close(h);
        _exit(0);
    }
    close(ready[1]);
    close(release[0]);
    char ok = 0;
    assert_int_equal(read(ready[0], &ok, 1), 1);
    assert_int_equal(ok, 'y');
    close(ready[0]);

    char *y = config_text(true);
    char *yl = malloc(strlen(y) + 128);
    assert_non_null(yl);
    sprintf(yl, "%susage: { db: locked.sqlite, lock_wait_ms: 200 }\n", y);
    free(y);
    assert_true(srv_start_env(&f, yl, ADMIN));
    free(yl);
    char *log = srv_log(&f);
    char holder[64];
    snprintf(holder, sizeof holder, "held by process %d ", (int)locker);
    assert_non_null(strstr(log, holder));
    free(log);
    srv_resp r;
    int n = 1 + rand() % 3;
    for (int i = 0; i < n; i++) {
        assert_int_equal(post(&f, "ka", "{\"model\":\"b\",\"prompt\":\"hi\",\"max_tokens\":2}", &r), 200);
        srv_resp_free(&r);
    }
    assert_true(srv_http_h(&f, "GET", "/metrics", "Authorization: Bearer admin-key-2\r\n", NULL, &r));
    assert_true(metric(r.body, "colo_ledger_backlog_requests") == n);
    srv_resp_free(&r);
    int st;
    json_t *u = get(&f, "admin-key-2", "/v1/usage?group_by=tenant", &st);
    assert_int_equal(st, 503);
    json_decref(u);
    /* the writer has met the lock (and will retry) before it is released */
    bool retried = false;
    for (int i = 0; i < 500 && !retried; i++) {
        assert_true(srv_http_h(&f, "GET", "/metrics", "Authorization: Bearer admin-key-2\r\n", NULL, &r));
        retried = metric(r.body, "colo_ledger_write_retries_total") >= 1;
        srv_resp_free(&r);
        if (!retried)
            srv_sleep_ms(20);
    }
    assert_true(retried);

    close(release[1]);
    assert_int_equal(waitpid(locker, NULL, 0), locker);
    bool written = false;
    for (int i = 0; i < 1000 && !written; i++) {
        u = get(&f, "admin-key-2", "/v1/usage?group_by=tenant", &st);
        written = st == 200 && usage_requests(u, "acme", "ads") == n;
        json_decref(u);
        if (!written)
            srv_sleep_ms(20);
    }
    assert_true(written);
    assert_true(srv_http_h(&f, "GET", "/metrics", "Authorization: Bearer admin-key-2\r\n", NULL, &r));
    assert_true(metric(r.body, "colo_ledger_backlog_requests") == 0);
    assert_true(metric(r.body, "colo_ledger_write_retries_total") >= 1);
    srv_resp_free(&r);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

static void test_flood_cannot_starve(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f) && srv_mkmodel(&f, "m.gguf", 2, 64, 512, 1024));
    char *y = config_text(true);
    assert_true(srv_start_env(&f, y, ADMIN));
    free(y);
    atomic_int done = 0;
    atomic_bool stop = false;
    flood fl = {&f, &done, &stop};
    pthread_t th[16];
    for (int i = 0; i < 16; i++)
        assert_int_equal(pthread_create(&th[i], NULL, flooder, &fl), 0);
    while (atomic_load(&done) < 20) /* the queue is full of the flood */
        srv_sleep_ms(10);
    /* globex/light, weight 1 as acme/flood: its request is next after the
     * one in service (max_batch_size 1), so at most that one of the flood
     * finishes while it waits; the count is taken from the server's metrics
     * just before and after, which may let in one more finishing in those
     * few milliseconds (a flood request takes about a hundred times longer,
     * so two cannot be). */
    long light = worst_wait(&f, "kl", false, 6);
    /* a second key of the flooding tenant is in its class: it queues
     * behind the flood's requests (up to 15 of them) */
    long same = worst_wait(&f, "kf2", true, 3);
    atomic_store(&stop, true);
    for (int i = 0; i < 16; i++)
        pthread_join(th[i], NULL);
    print_message("flood completions while waiting: other tenant %ld, same tenant %ld\n", light, same);
    assert_true(light <= 2);
    assert_true(same >= 6);
    srv_cleanup(&f);
}

int main(void)
{
    srand((unsigned)colo_test_seed("test_tenants_usage", 380));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill9_restart_deleted_tenant),
        cmocka_unit_test(test_report_equals_metrics),
        cmocka_unit_test(test_operator_routes),
        cmocka_unit_test(test_locked_ledger_keeps_serving),
        cmocka_unit_test(test_flood_cannot_starve),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
