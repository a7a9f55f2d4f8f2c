/* /dashboard's layout as a person sees it, in headless Chromium, after a
 * short run with two models and two tenants (the page opened as
 * http://user:KEY@host/dashboard?layout, as a browser with the admin key):
 *  - the tenants table: every figure is drawn inside its own header's
 *    column, right-aligned with the header's text (the tenant's name
 *    left-aligned with its header), as the browser laid them out
 *    (<body data-layout>, written by the page under ?layout);
 *  - each model's memory bar: the width of its segments is what the model
 *    uses of its guarantee (charged bytes, KV in use, borrowed), not its
 *    KV cache's reserve;
 *  - each chart: on a time axis of history_seconds ending at the newest
 *    point, so a short history takes the right of the chart, and the
 *    label says the span;
 *  - the lines of a batch, done, on their model's card.
 * Each figure is checked against /v1/stats?seq=N of the point the page
 * rendered. Skipped without Chromium (COLO_CHROMIUM names another binary). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "server/tenants/sha256.h"
#include "server_fixture.h"

#define ADMIN "dash-admin-key"

static srv_fixture fx;

static const char *chromium(void)
{
    static char path[512];
    const char *env = getenv("COLO_CHROMIUM");
    if (env && *env)
        return access(env, X_OK) == 0 ? env : NULL;
    const char *names[] = {"chromium", "chromium-browser", "google-chrome"};
    const char *dirs[] = {"/usr/bin", "/usr/local/bin", "/snap/bin"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        for (size_t d = 0; d < sizeof dirs / sizeof *dirs; d++) {
            snprintf(path, sizeof path, "%s/%s", dirs[d], names[i]);
            if (access(path, X_OK) == 0)
                return path;
        }
    return NULL;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(1 << 22);
    size_t n = buf ? fread(buf, 1, (1 << 22) - 1, f) : 0;
    fclose(f);
    if (buf)
        buf[n] = 0;
    return buf;
}

static void load(const char *key, const char *model, int n, int max_tokens)
{
    char h[128], body[256];
    snprintf(h, sizeof h, "Authorization: Bearer %s\r\n", key);
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"prompt\":\"a story\",\"max_tokens\":%d}", model, max_tokens);
    for (int i = 0; i < n; i++) {
        srv_resp r;
        assert_true(srv_http_h(&fx, "POST", "/v1/completions", h, body, &r));
        assert_int_equal(r.status, 200);
        srv_resp_free(&r);
    }
}

/* An attribute's value in [tag, end) into out (HTML entities &quot; and &amp; undone), or NULL. */
static char *attr(const char *tag, const char *end, const char *name, char *out, size_t cap)
{
    char key[64];
    snprintf(key, sizeof key, " %s=\"", name);
    const char *p = strstr(tag, key);
    if (!p || p > end)
        return NULL;
    p += strlen(key);
    const char *q = strchr(p, '"');
    size_t o = 0;
    while (p < q && o + 1 < cap) {
        if (!strncmp(p, "&quot;", 6))
            out[o++] = '"', p += 6;
        else if (!strncmp(p, "&amp;", 5))
            out[o++] = '&', p += 5;
        else
            out[o++] = *p++;
    }
    out[o] = 0;
    return out;
}

static json_t *model_of(json_t *stats, const char *name)
{
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(stats, "models"), i, m) if (!strcmp(json_string_value(json_object_get(m, "name")),
                                                                          name)) return m;
    return NULL;
}

static double num(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

/* The tenants table: each figure inside its header's cell and aligned with its text. */
static void check_tenants(const char *dom, int want_rows)
{
    const char *b = strstr(dom, "<body");
    char *layout = malloc(1 << 16);
    assert_non_null(attr(b, strchr(b, '>'), "data-layout", layout, 1 << 16));
    json_t *l = json_loads(layout, 0, NULL);
    assert_non_null(l);
    json_t *heads = json_object_get(l, "heads"), *rows = json_object_get(l, "rows");
    assert_int_equal(json_array_size(heads), 6);
    assert_int_equal(json_array_size(rows), want_rows);
    size_t r, c;
    json_t *row, *cell;
    json_array_foreach(rows, r, row)
    {
        assert_int_equal(json_array_size(row), 6);
        json_array_foreach(row, c, cell)
        {
            json_t *h = json_array_get(heads, c);
            double left = json_number_value(json_array_get(cell, 0)), right = json_number_value(json_array_get(cell, 1));
            double hl = json_number_value(json_array_get(h, 0)), hr = json_number_value(json_array_get(h, 1));
            double cl = json_number_value(json_array_get(h, 2)), cr = json_number_value(json_array_get(h, 3));
            if (left < cl - 0.5 || right > cr + 0.5)
                fail_msg("tenants row %zu column %zu: drawn at [%.1f, %.1f], outside its header's column [%.1f, %.1f]",
                         r, c, left, right, cl, cr);
            double off = c == 0 ? fabs(left - hl) : fabs(right - hr);
            if (off > 1.5)
                fail_msg("tenants row %zu column %zu: [%.1f, %.1f] not aligned with its header's text [%.1f, %.1f]", r,
                         c, left, right, hl, hr);
        }
    }
    json_decref(l);
    free(layout);
}

/* A model's memory bar: its segments' widths (percent) against its figures. */
static void check_bar(const char *dom, json_t *m, const char *name)
{
    char key[128];
    snprintf(key, sizeof key, "data-model=\"%s\"", name);
    const char *card = strstr(dom, key);
    assert_non_null(card);
    const char *bar = strstr(card, "class=\"bar mem\"");
    assert_non_null(bar);
    double w[3];
    const char *p = bar;
    for (int i = 0; i < 3; i++) {
        p = strstr(p + 1, "<div style=\"");
        assert_non_null(p);
        char style[256];
        assert_non_null(attr(p, strchr(p, '>'), "style", style, sizeof style));
        const char *wd = strstr(style, "width:");
        w[i] = wd ? strtod(wd + 6, NULL) : 0;
    }
    json_t *mem = json_object_get(m, "memory");
    double used = num(mem, "used_bytes"), g = num(mem, "guaranteed_bytes"), kv = num(mem, "kv_cache_used_bytes");
    double borrowed = num(mem, "borrowed_bytes"), total = used > g ? used : g;
    assert_true(num(mem, "kv_cache_bytes") > 10 * used); /* a reserve the bar must not draw */
    double want[3] = {100 * (used - borrowed - kv) / total, 100 * kv / total, 100 * borrowed / total};
    for (int i = 0; i < 3; i++)
        if (fabs(w[i] - want[i]) > 0.05)
            fail_msg("%s: memory bar segment %d is %.3f%% wide, its figures say %.3f%% (used %.0f of %.0f)", name, i,
                     w[i], want[i], used, g);
    assert_true(w[0] + w[1] + w[2] < 5); /* a model this small uses a sliver of its guarantee */
}

/* A chart's polyline: x of its first and last points against the history's time axis. */
static void check_chart(const char *dom, const char *name, json_t *stats)
{
    char key[128], pts[65536];
    snprintf(key, sizeof key, "data-model=\"%s\"", name);
    const char *card = strstr(dom, key);
    const char *pl = strstr(card, "<polyline class=\"tps\"");
    assert_non_null(pl);
    assert_non_null(attr(pl, strchr(pl, '>'), "points", pts, sizeof pts));
    json_t *t = json_object_get(json_object_get(stats, "history"), "time_ms");
    size_t n = json_array_size(t);
    assert_true(n >= 2);
    double span_ms = 1000 * num(stats, "history_seconds");
    double covered = json_number_value(json_array_get(t, n - 1)) - json_number_value(json_array_get(t, 0));
    assert_true(covered < span_ms / 4); /* a short run: the chart's right quarter */
    double first = strtod(pts, NULL), last = strtod(strrchr(pts, ' ') + 1, NULL);
    double want_first = 300 * (1 - covered / span_ms);
    if (fabs(first - want_first) > 0.11 || fabs(last - 300) > 0.11)
        fail_msg("%s: chart from x=%.1f to %.1f; %.1f s of a %.0f s axis go from %.1f to 300", name, first, last,
                 covered / 1e3, span_ms / 1e3, want_first);
    const char *label = strstr(card, "class=\"span\">");
    assert_non_null(label);
    assert_int_equal(strncmp(label + 13, "last 5 min<", 11), 0);
}

/* A batch of n lines for model, run to its end with key. */
static void run_batch(const char *key, const char *model, int n)
{
    char h[256], body[4096], file[2048] = "";
    for (int i = 0; i < n; i++)
        snprintf(file + strlen(file), sizeof file - strlen(file),
                 "{\"custom_id\":\"l%d\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"model\":"
                 "\"%s\",\"prompt\":\"x\",\"max_tokens\":4}}\n",
                 i, model);
    snprintf(h, sizeof h, "Authorization: Bearer %s\r\nContent-Type: multipart/form-data; boundary=bb\r\n", key);
    snprintf(body, sizeof body,
             "--bb\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--bb\r\n"
             "Content-Disposition: form-data; name=\"file\"; filename=\"b.jsonl\"\r\n\r\n%s\r\n--bb--\r\n",
             file);
    srv_resp r;
    assert_true(srv_http_h(&fx, "POST", "/v1/files", h, body, &r));
    assert_int_equal(r.status, 200);
    json_t *f = srv_json(&r);
    srv_resp_free(&r);
    snprintf(h, sizeof h, "Authorization: Bearer %s\r\n", key);
    snprintf(body, sizeof body,
             "{\"input_file_id\":\"%s\",\"endpoint\":\"/v1/completions\",\"completion_window\":\"24h\"}",
             json_string_value(json_object_get(f, "id")));
    json_decref(f);
    assert_true(srv_http_h(&fx, "POST", "/v1/batches", h, body, &r));
    assert_int_equal(r.status, 200);
    json_t *b = srv_json(&r);
    srv_resp_free(&r);
    char path[128];
    snprintf(path, sizeof path, "/v1/batches/%s", json_string_value(json_object_get(b, "id")));
    json_decref(b);
    for (int i = 0; i < 3000; i++) {
        assert_true(srv_http_h(&fx, "GET", path, h, NULL, &r));
        json_t *j = srv_json(&r);
        srv_resp_free(&r);
        bool done = !strcmp(json_string_value(json_object_get(j, "status")), "completed");
        json_decref(j);
        if (done)
            return;
        srv_sleep_ms(10);
    }
    fail_msg("the batch did not complete");
}

static void test_dashboard_layout(void **state)
{
    (void)state;
    const char *bin = chromium();
    if (!bin) {
        fprintf(stderr, "no Chromium (apt-get install chromium)\n");
        skip();
    }
    assert_true(srv_tmpdir(&fx) && srv_mkmodel(&fx, "m.gguf", 2, 64, 512, 512));
    char ha[65], hb[65], yaml[4096];
    srv_key_sha256("ka", ha), srv_key_sha256("kb", hb);
    snprintf(yaml, sizeof yaml,
             "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, cpu_memory_bytes: 2GiB,\n"
             "          telemetry_interval_ms: 500, api_key_env: COLO_TEST_DASH_KEY }\n"
             "models:\n"
             "  - { name: chat, kind: llama, path: m.gguf, memory_fraction: 0.3 }\n"
             "  - { name: bulk, kind: llama, path: m.gguf, memory_fraction: 0.3 }\n"
             "tenants:\n"
             "  - organization: acme\n"
             "    projects:\n"
             "      - { name: search, keys: [ { name: a, sha256: \"%s\" } ] }\n"
             "      - { name: ads, keys: [ { name: b, sha256: \"%s\" } ] }\n",
             ha, hb);
    assert_true(srv_start_env(&fx, yaml, "COLO_TEST_DASH_KEY=" ADMIN));
    load("ka", "chat", 12, 24);
    load("kb", "bulk", 7, 48);
    load("ka", "bulk", 3, 8);
    run_batch("kb", "chat", 5);
    srv_sleep_ms(1200); /* a point or two after the load */
    char dom_path[512], cmd[4096];
    snprintf(dom_path, sizeof dom_path, "%s/dom.html", fx.dir);
    snprintf(cmd, sizeof cmd,
             "timeout 90 '%s' --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
             "--user-data-dir='%s/profile' --hide-scrollbars --window-size=1280,1000 --virtual-time-budget=4000 "
             "--dump-dom 'http://admin:" ADMIN "@127.0.0.1:%d/dashboard?layout' > '%s' 2> '%s/chromium.log'",
             bin, fx.dir, fx.port, dom_path, fx.dir);
    assert_int_equal(system(cmd), 0);
    char *dom = slurp(dom_path);
    assert_non_null(dom);
    char *script = strstr(dom, "<script");
    if (script)
        *script = 0;
    const char *seqp = strstr(dom, "<body data-seq=\"");
    assert_non_null(seqp);
    long long seq = atoll(seqp + 16);
    if (seq <= 0)
        fail_msg("the page never rendered a point:\n%.2000s", dom);
    char path[64];
    snprintf(path, sizeof path, "/v1/stats?seq=%lld", seq);
    srv_resp r;
    assert_true(srv_http_h(&fx, "GET", path, "Authorization: Bearer " ADMIN "\r\n", NULL, &r));
    assert_int_equal(r.status, 200);
    json_t *stats = srv_json(&r);
    srv_resp_free(&r);
    assert_non_null(stats);
    check_tenants(dom, 3); /* acme/search, acme/ads, and default/default (the admin key) */
    const char *names[2] = {"chat", "bulk"};
    for (int i = 0; i < 2; i++) {
        json_t *m = model_of(stats, names[i]);
        assert_non_null(m);
        check_bar(dom, m, names[i]);
        check_chart(dom, names[i], stats);
    }
    /* the batch's lines, as the point counted them */
    const char *done = strstr(dom, "data-stat=\"models/chat/batch_lines/completed\"");
    assert_non_null(done);
    assert_int_equal(atoi(strstr(done, "data-value=\"") + 12), 5);
    json_t *bl = json_object_get(model_of(stats, "chat"), "batch_lines");
    assert_int_equal(json_integer_value(json_object_get(bl, "completed")), 5);
    assert_int_equal(json_integer_value(json_object_get(bl, "queued")), 0);
    const char *dev = strstr(dom, "id=\"devspan\">");
    assert_non_null(dev);
    assert_int_equal(strncmp(dev + 13, "last 5 min<", 11), 0);
    json_decref(stats);
    free(dom);
    assert_int_equal(srv_stop(&fx), 0);
    srv_cleanup(&fx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dashboard_layout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
