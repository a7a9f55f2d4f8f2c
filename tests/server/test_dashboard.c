/* /dashboard in headless Chromium against a running colo-server with two
 * models under load (SmolLM2 and MiniLM when scripts/fetch-models.sh has
 * cached them, else two synthetic llama models): the page's DOM after it
 * has polled must show, in every panel, the figures of the /v1/stats point
 * it rendered (the page names it in <body data-seq>; /v1/stats?seq= gives
 * it again), both as the raw value and as the text a person reads. A
 * screenshot is taken too; with COLO_DASHBOARD_SCREENSHOT=FILE it is
 * copied there (docs/dashboard.png is made so). Skipped without Chromium
 * (Debian's chromium; COLO_CHROMIUM names another binary). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>

#include "models/format/model_cache.h"
#include "server_fixture.h"

static srv_fixture fx;

typedef struct loader {
    const char *path, *body;
    _Atomic bool stop;
    int ok, failed;
    int first_failure; /* its HTTP status, 0 when no answer came */
} loader;

/* Requests one after another until told to stop; two at a time per model. */
static void *load_main(void *arg)
{
    loader *l = arg;
    while (!l->stop) {
        srv_resp r = {0};
        if (srv_http(&fx, "POST", l->path, l->body, &r) && r.status == 200)
            l->ok++;
        else if (!l->failed++)
            l->first_failure = r.status;
        if (r.body)
            srv_resp_free(&r);
    }
    return NULL;
}

/* The Chromium binary, or NULL. */
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

/* Runs Chromium headless on the dashboard with what (a --dump-dom or
 * --screenshot=FILE); stdout goes to out. */
static bool run_chromium(const char *bin, const char *what, int height, const char *out)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "timeout 90 '%s' --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
             "--user-data-dir='%s/profile' --hide-scrollbars --window-size=1280,%d "
             "--virtual-time-budget=6000 %s 'http://127.0.0.1:%d/dashboard' > '%s' 2> '%s/chromium.log'",
             bin, fx.dir, height, what, fx.port, out, fx.dir);
    return system(cmd) == 0;
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

/* An attribute's value in the tag [tag, end) (copied into out), or NULL. */
static const char *attr(const char *tag, const char *end, const char *name, char *out, size_t cap)
{
    char key[64];
    snprintf(key, sizeof key, " %s=\"", name);
    const char *p = strstr(tag, key);
    if (!p || p > end)
        return NULL;
    p += strlen(key);
    const char *q = strchr(p, '"');
    size_t n = (size_t)(q - p) < cap - 1 ? (size_t)(q - p) : cap - 1;
    memcpy(out, p, n);
    out[n] = 0;
    /* the DOM dump escapes & < > " in attributes */
    for (char *a = strstr(out, "&amp;"); a; a = strstr(a + 1, "&amp;"))
        memmove(a + 1, a + 5, strlen(a + 5) + 1);
    return out;
}

/* The value at "a/b/c" in /v1/stats: "models/NAME" picks the model by
 * name, a number an array element. NULL when absent. */
static json_t *at(json_t *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    bool model = false;
    int depth = 0;
    for (char *k = strtok(buf, "/"); k && o; k = strtok(NULL, "/"), depth++) {
        if (depth == 1 && model) {
            size_t i;
            json_t *m, *found = NULL;
            json_array_foreach(o, i, m) if (!strcmp(json_string_value(json_object_get(m, "name")), k)) found = m;
            o = found;
        } else if (json_is_array(o)) {
            o = json_array_get(o, (size_t)atoi(k));
        } else {
            model = depth == 0 && !strcmp(k, "models");
            o = json_object_get(o, k);
        }
    }
    return json_is_null(o) ? NULL : o;
}

/* What a person reads (text, formatted as fmt) back as a number in the
 * value's unit; NAN when it does not parse. */
static double read_back(const char *text, const char *fmt)
{
    char *e;
    double v = strtod(text, &e);
    if (e == text)
        return NAN;
    while (*e == ' ')
        e++;
    if (!strcmp(fmt, "ratio"))
        return strcmp(e, "%") ? NAN : v / 100;
    if (!strcmp(fmt, "bytes")) {
        const char *u[] = {"B", "KiB", "MiB", "GiB"};
        for (int i = 0; i < 4; i++)
            if (!strcmp(e, u[i]))
                return v * pow(1024, i);
        return NAN;
    }
    if (!strcmp(fmt, "seconds"))
        return !strcmp(e, "ms") ? v / 1e3 : !strcmp(e, "s") ? v : NAN;
    if (!strcmp(fmt, "rate"))
        return strcmp(e, "/s") ? NAN : v;
    if (!strcmp(fmt, "int") || !strcmp(fmt, "num") || !strcmp(fmt, "text"))
        return *e ? NAN : v;
    return NAN;
}

typedef struct check {
    int compared, unknown, nonzero_rates;
    int per_model[2];
} check;

/* Every [data-stat] element of the DOM against the point it rendered. */
static void check_dom(const char *dom, json_t *stats, const char *names[2], check *c)
{
    for (const char *p = strstr(dom, " data-stat=\""); p; p = strstr(p + 1, " data-stat=\"")) {
        const char *tag = p, *end = strchr(p, '>');
        while (tag > dom && *tag != '<')
            tag--;
        char path[256], fmt[32] = "text", value[256], text[256];
        attr(tag, end, "data-stat", path, sizeof path);
        attr(tag, end, "data-fmt", fmt, sizeof fmt);
        const char *tend = strchr(end + 1, '<');
        size_t tl = (size_t)(tend - end - 1) < sizeof text - 1 ? (size_t)(tend - end - 1) : sizeof text - 1;
        memcpy(text, end + 1, tl);
        text[tl] = 0;
        json_t *v = at(stats, path);
        bool has_value = attr(tag, end, "data-value", value, sizeof value) != NULL;
        if (!v) {
            if (has_value || strcmp(text, "—"))
                fail_msg("%s: absent from /v1/stats but the page shows '%s' (value %s)", path, text,
                         has_value ? value : "none");
            c->unknown++;
            continue;
        }
        if (!has_value)
            fail_msg("%s: /v1/stats has it, the page shows '%s' without a value", path, text);
        if (json_is_string(v)) {
            if (strcmp(value, json_string_value(v)) || strcmp(text, json_string_value(v)))
                fail_msg("%s: page '%s' / '%s', /v1/stats '%s'", path, value, text, json_string_value(v));
        } else {
            double want = json_number_value(v), got = strtod(value, NULL), shown = read_back(text, fmt);
            if (fabs(got - want) > 1e-9 * fabs(want) + 1e-12)
                fail_msg("%s: page value %s, /v1/stats %.17g", path, value, want);
            /* three significant digits on the page */
            if (isnan(shown) || fabs(shown - want) > 0.005 * fabs(want) + 1e-9)
                fail_msg("%s: page shows '%s' (as %s), /v1/stats %.17g", path, text, fmt, want);
            if (strstr(path, "requests_per_second") && want > 0)
                c->nonzero_rates++;
        }
        c->compared++;
        for (int m = 0; m < 2; m++) {
            char pre[128];
            snprintf(pre, sizeof pre, "models/%s/", names[m]);
            if (!strncmp(path, pre, strlen(pre)))
                c->per_model[m]++;
        }
    }
}

static void test_dashboard_in_chromium(void **state)
{
    (void)state;
    const char *bin = chromium();
    if (!bin) {
        fprintf(stderr, "no Chromium (apt-get install chromium)\n");
        skip();
    }
    assert_true(srv_tmpdir(&fx));
    char gguf[1024], st[1024], yaml[4096];
    const char *names[2];
    loader la = {0}, lb = {0};
    if (colo_model_cache_path("SmolLM2-135M-Instruct.Q4_1.gguf", gguf, sizeof gguf) &&
        colo_model_cache_path("all-minilm-l6-v2/model.safetensors", st, sizeof st)) {
        *strrchr(st, '/') = 0;
        snprintf(yaml, sizeof yaml,
                 "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, telemetry_interval_ms: 1000 }\n"
                 "scheduler: { policy: priority }\n"
                 "models:\n"
                 "  - { name: smollm2, kind: llama, path: \"%s\", memory_fraction: 0.05, max_seq_len: 512,\n"
                 "      priority: high, sla: { p99_ms: 2000, ttft_ms: 500 } }\n"
                 "  - { name: minilm, kind: bert, path: \"%s\", memory_fraction: 0.05, priority: low,\n"
                 "      sla: { p99_ms: 200 } }\n",
                 gguf, st);
        names[0] = "smollm2", names[1] = "minilm";
        la.path = "/v1/models/smollm2/infer", la.body = "{\"prompt\":\"Tell me a story\",\"max_tokens\":8}";
        lb.path = "/v1/models/minilm/infer", lb.body = "{\"inputs\":[\"a sentence to embed\",\"and another one\"]}";
    } else {
        assert_true(srv_mkmodel(&fx, "m.gguf", 2, 64, 512, 256));
        snprintf(yaml, sizeof yaml,
                 "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, cpu_memory_bytes: 512MiB,\n"
                 "          telemetry_interval_ms: 1000 }\n"
                 "scheduler: { policy: priority }\n"
                 "models:\n"
                 "  - { name: chat, kind: llama, path: m.gguf, memory_fraction: 0.2, priority: high,\n"
                 "      sla: { p99_ms: 500, ttft_ms: 100 } }\n"
                 "  - { name: bulk, kind: llama, path: m.gguf, memory_fraction: 0.2, priority: low }\n");
        names[0] = "chat", names[1] = "bulk";
        la.path = "/v1/models/chat/infer", la.body = "{\"prompt\":\"hello\",\"max_tokens\":16}";
        lb.path = "/v1/models/bulk/infer", lb.body = "{\"prompt\":\"a longer story\",\"max_tokens\":48}";
    }
    if (!srv_start(&fx, yaml)) {
        char *log = srv_log(&fx);
        fprintf(stderr, "colo-server did not start:\n%s\n", log);
        free(log);
        fail();
    }
    loader *ls[4] = {&la, &lb, &(loader){.path = la.path, .body = la.body}, &(loader){.path = lb.path, .body = lb.body}};
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, load_main, ls[i]), 0);
    /* both models answered within the window before the page looks */
    for (int i = 0; i < 300 && (ls[0]->ok + ls[2]->ok < 3 || ls[1]->ok + ls[3]->ok < 3); i++)
        srv_sleep_ms(100);
    srv_sleep_ms(2500);

    char dom_path[512], png[512];
    snprintf(dom_path, sizeof dom_path, "%s/dom.html", fx.dir);
    snprintf(png, sizeof png, "%s/dashboard.png", fx.dir);
    bool dumped = run_chromium(bin, "--dump-dom", 1000, dom_path);
    char arg[600];
    snprintf(arg, sizeof arg, "--screenshot='%s'", png);
    char devnull[512];
    snprintf(devnull, sizeof devnull, "%s/shot.out", fx.dir);
    bool shot = run_chromium(bin, arg, 600, devnull); /* two models' cards fit */
    for (int i = 0; i < 4; i++)
        ls[i]->stop = true;
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    if (!dumped || !shot) {
        char *log = slurp(strcat(strcpy(arg, fx.dir), "/chromium.log"));
        fail_msg("chromium failed: %s", log ? log : "");
    }

    char *dom = slurp(dom_path);
    assert_non_null(dom);
    char *script = strstr(dom, "<script");
    if (script)
        *script = 0; /* the elements only, not the page's own code */
    const char *seqp = strstr(dom, "<body data-seq=\"");
    assert_non_null(seqp);
    long long seq = atoll(seqp + 16);
    if (seq <= 0)
        fail_msg("the page never rendered a point:\n%.2000s", dom);
    char path[64];
    snprintf(path, sizeof path, "/v1/stats?seq=%lld", seq);
    int status;
    json_t *stats = srv_get_json(&fx, path, &status);
    assert_int_equal(status, 200);
    check c = {0};
    check_dom(dom, stats, names, &c);
    /* every panel was there: the device's, and each model's card */
    assert_true(c.per_model[0] >= 15 && c.per_model[1] >= 15);
    assert_true(c.compared >= 40);
    assert_true(c.nonzero_rates >= 2); /* both models were under load in that point */
    for (int m = 0; m < 2; m++) {
        char card[128];
        snprintf(card, sizeof card, "data-model=\"%s\"", names[m]);
        assert_non_null(strstr(dom, card));
    }
    fprintf(stderr, "point %lld: %d figures compared, %d unknown shown as unknown; load %d+%d requests\n", seq,
            c.compared, c.unknown, ls[0]->ok + ls[2]->ok, ls[1]->ok + ls[3]->ok);
    for (int i = 0; i < 4; i++)
        if (ls[i]->failed)
            fail_msg("%s: %d requests failed, the first with status %d", ls[i]->path, ls[i]->failed,
                     ls[i]->first_failure);

    /* the screenshot: a PNG of the window's size */
    char *img = slurp(png);
    assert_non_null(img);
    assert_memory_equal(img, "\x89PNG\r\n\x1a\n", 8);
    uint32_t w = (uint32_t)(unsigned char)img[16] << 24 | (uint32_t)(unsigned char)img[17] << 16 |
                 (uint32_t)(unsigned char)img[18] << 8 | (unsigned char)img[19];
    assert_int_equal(w, 1280);
    const char *keep = getenv("COLO_DASHBOARD_SCREENSHOT");
    if (keep && *keep) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "cp '%s' '%s'", png, keep);
        assert_int_equal(system(cmd), 0);
    }
    free(img);
    free(dom);
    json_decref(stats);
    assert_int_equal(srv_stop(&fx), 0);
    srv_cleanup(&fx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dashboard_in_chromium),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
