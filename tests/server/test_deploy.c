/* deploy/: the Grafana dashboard and the Prometheus rules.
 *  - deploy/grafana/colo.json has the structure Grafana's dashboard model
 *    (schemaVersion 39) asks for, so that it imports as is: unique panel
 *    ids, grid positions inside the 24 columns without overlap, every
 *    query on the ${datasource} variable with a unique refId, known units,
 *    variables that exist.
 *  - every colo_* metric the dashboard and the rules name is one that
 *    colo-server exports (read from a running server's /metrics).
 *  - promtool check rules and promtool test rules pass (skipped without
 *    promtool: Debian's prometheus package). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>

#include "server_fixture.h"

#define GRAFANA COLO_SOURCE_DIR "/deploy/grafana/colo.json"
#define RULES COLO_SOURCE_DIR "/deploy/prometheus/colo-rules.yaml"
#define RULES_TEST COLO_SOURCE_DIR "/deploy/prometheus/colo-rules.test.yaml"

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (buf)
        buf[n] = 0;
    return buf;
}

static bool one_of(const char *s, const char *const *set)
{
    for (; s && *set; set++)
        if (!strcmp(s, *set))
            return true;
    return false;
}

/* Parentheses, brackets and braces balance, outside quoted strings. */
static bool balanced(const char *e)
{
    char stack[64];
    int n = 0;
    for (; *e; e++) {
        if (*e == '"') {
            for (e++; *e && *e != '"'; e++)
                if (*e == '\\' && e[1])
                    e++;
            if (!*e)
                return false;
        } else if (strchr("([{", *e)) {
            if (n == 64)
                return false;
            stack[n++] = *e;
        } else if (strchr(")]}", *e)) {
            char open = *e == ')' ? '(' : *e == ']' ? '[' : '{';
            if (n == 0 || stack[--n] != open)
                return false;
        }
    }
    return n == 0;
}

static void test_grafana_structure(void **state)
{
    (void)state;
    json_error_t je;
    json_t *d = json_load_file(GRAFANA, 0, &je);
    if (!d)
        fail_msg("%s:%d: %s", GRAFANA, je.line, je.text);
    assert_int_equal(json_integer_value(json_object_get(d, "schemaVersion")), 39);
    const char *uid = json_string_value(json_object_get(d, "uid"));
    assert_non_null(uid);
    assert_true(strlen(uid) <= 40);
    for (const char *c = uid; *c; c++)
        assert_true(isalnum((unsigned char)*c) || *c == '-' || *c == '_');
    assert_true(json_is_string(json_object_get(d, "title")));
    assert_true(json_is_object(json_object_get(d, "time")));
    assert_null(json_object_get(d, "id")); /* an import must not carry a database id */
    assert_null(json_object_get(d, "__inputs")); /* the datasource is a variable: imports as is */

    /* variables: a Prometheus datasource and the model selector */
    json_t *vars = json_object_get(json_object_get(d, "templating"), "list");
    assert_true(json_is_array(vars));
    char defined[16][64];
    int n_defined = 0;
    size_t i;
    json_t *v;
    json_array_foreach(vars, i, v)
    {
        const char *name = json_string_value(json_object_get(v, "name"));
        const char *type = json_string_value(json_object_get(v, "type"));
        assert_non_null(name);
        assert_true(one_of(type, (const char *const[]){"datasource", "query", "custom", "constant", "interval", NULL}));
        if (!strcmp(type, "datasource"))
            assert_string_equal(json_string_value(json_object_get(v, "query")), "prometheus");
        assert_true(n_defined < 16);
        snprintf(defined[n_defined++], 64, "%s", name);
    }

    static const char *const types[] = {"row", "timeseries", "stat", "gauge", "bargauge", "table", "text", NULL};
    static const char *const units[] = {"percentunit", "bytes", "watt", "celsius", "hertz", "reqps", "short", "s",
                                        "none", NULL};
    json_t *panels = json_object_get(d, "panels");
    assert_true(json_array_size(panels) >= 10);
    int ids[128], n_ids = 0, boxes[128][4], n_boxes = 0, n_queries = 0;
    json_t *p;
    json_array_foreach(panels, i, p)
    {
        const char *type = json_string_value(json_object_get(p, "type"));
        const char *title = json_string_value(json_object_get(p, "title"));
        if (!one_of(type, types))
            fail_msg("panel %zu: type %s", i, type ? type : "(none)");
        assert_non_null(title);
        int id = (int)json_integer_value(json_object_get(p, "id"));
        assert_true(id > 0);
        for (int k = 0; k < n_ids; k++)
            if (ids[k] == id)
                fail_msg("panel '%s': id %d used twice", title, id);
        ids[n_ids++] = id;
        json_t *g = json_object_get(p, "gridPos");
        int x = (int)json_integer_value(json_object_get(g, "x")), y = (int)json_integer_value(json_object_get(g, "y"));
        int w = (int)json_integer_value(json_object_get(g, "w")), h = (int)json_integer_value(json_object_get(g, "h"));
        if (x < 0 || y < 0 || w < 1 || h < 1 || x + w > 24)
            fail_msg("panel '%s': gridPos %d,%d %dx%d outside the grid", title, x, y, w, h);
        for (int k = 0; k < n_boxes; k++)
            if (x < boxes[k][0] + boxes[k][2] && boxes[k][0] < x + w && y < boxes[k][1] + boxes[k][3] &&
                boxes[k][1] < y + h)
                fail_msg("panel '%s' overlaps another", title);
        boxes[n_boxes][0] = x, boxes[n_boxes][1] = y, boxes[n_boxes][2] = w, boxes[n_boxes][3] = h;
        n_boxes++;
        if (!strcmp(type, "row"))
            continue;
        json_t *ds = json_object_get(p, "datasource");
        assert_string_equal(json_string_value(json_object_get(ds, "type")), "prometheus");
        assert_string_equal(json_string_value(json_object_get(ds, "uid")), "${datasource}");
        const char *unit =
            json_string_value(json_object_get(json_object_get(json_object_get(p, "fieldConfig"), "defaults"), "unit"));
        if (!one_of(unit, units))
            fail_msg("panel '%s': unit %s", title, unit ? unit : "(none)");
        json_t *targets = json_object_get(p, "targets"), *t;
        size_t k;
        assert_true(json_array_size(targets) >= 1);
        json_array_foreach(targets, k, t)
        {
            const char *ref = json_string_value(json_object_get(t, "refId"));
            const char *expr = json_string_value(json_object_get(t, "expr"));
            assert_non_null(ref);
            for (size_t o = 0; o < k; o++)
                assert_string_not_equal(ref, json_string_value(json_object_get(json_array_get(targets, o), "refId")));
            if (!expr || !*expr || !balanced(expr))
                fail_msg("panel '%s' %s: expression '%s'", title, ref, expr ? expr : "");
            assert_string_equal(json_string_value(json_object_get(json_object_get(t, "datasource"), "uid")),
                                "${datasource}");
            /* every $variable is defined or one of Grafana's own */
            for (const char *s = strchr(expr, '$'); s; s = strchr(s + 1, '$')) {
                char name[64];
                int nl = 0;
                for (const char *c = s + 1; (isalnum((unsigned char)*c) || *c == '_') && nl < 63; c++)
                    name[nl++] = *c;
                name[nl] = 0;
                bool ok = !strncmp(name, "__", 2);
                for (int dv = 0; dv < n_defined && !ok; dv++)
                    ok = !strcmp(defined[dv], name);
                if (!ok)
                    fail_msg("panel '%s': $%s is not a variable", title, name);
            }
            n_queries++;
        }
    }
    assert_true(n_queries >= 20);
    json_decref(d);
}

/* The colo_* names in text (metric names in PromQL), each once. */
static int metric_names(const char *text, char names[][96], int max)
{
    int n = 0;
    for (const char *s = strstr(text, "colo_"); s; s = strstr(s + 1, "colo_")) {
        if (s > text && (isalnum((unsigned char)s[-1]) || s[-1] == '_' || s[-1] == ':' || s[-1] == '-'))
            continue;
        char name[96];
        int l = 0;
        while ((isalnum((unsigned char)s[l]) || s[l] == '_') && l < 95) {
            name[l] = s[l];
            l++;
        }
        name[l] = 0;
        bool seen = false;
        for (int i = 0; i < n && !seen; i++)
            seen = !strcmp(names[i], name);
        if (!seen && n < max)
            snprintf(names[n++], 96, "%s", name);
    }
    return n;
}

/* Whether /metrics text declares name (or name is a histogram's series). */
static bool exported(const char *metrics, const char *name)
{
    char want[160];
    snprintf(want, sizeof want, "# TYPE %.120s ", name);
    if (strstr(metrics, want))
        return true;
    const char *suffixes[] = {"_bucket", "_sum", "_count"};
    for (int i = 0; i < 3; i++) {
        size_t nl = strlen(name), sl = strlen(suffixes[i]);
        if (nl > sl && !strcmp(name + nl - sl, suffixes[i])) {
            snprintf(want, sizeof want, "# TYPE %.*s histogram", (int)(nl - sl), name);
            if (strstr(metrics, want))
                return true;
        }
    }
    return false;
}

static void test_metric_names_exist(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    assert_true(srv_mkmodel(&f, "m.gguf", 2, 64, 512, 256));
    assert_true(srv_start(&f, "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 1, cpu_memory_bytes: 256MiB }\n"
                              "models:\n  - { name: a, kind: llama, path: m.gguf, memory_fraction: 0.2 }\n"));
    srv_resp r;
    assert_true(srv_http(&f, "GET", "/metrics", NULL, &r));
    assert_int_equal(r.status, 200);
    const char *files[] = {GRAFANA, RULES, RULES_TEST};
    int checked = 0;
    for (int k = 0; k < 3; k++) {
        char *text = slurp(files[k]);
        assert_non_null(text);
        char names[128][96];
        int n = metric_names(text, names, 128);
        for (int i = 0; i < n; i++) {
            if (!exported(r.body, names[i]))
                fail_msg("%s names %s, which colo-server does not export", files[k], names[i]);
            checked++;
        }
        free(text);
    }
    assert_true(checked >= 25);
    srv_resp_free(&r);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

static const char *promtool(void)
{
    static char path[512];
    const char *dirs[] = {"/usr/bin", "/usr/local/bin", "/bin"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        snprintf(path, sizeof path, "%s/promtool", dirs[i]);
        if (access(path, X_OK) == 0)
            return path;
    }
    return NULL;
}

static void test_promtool(void **state)
{
    (void)state;
    const char *bin = promtool();
    if (!bin) {
        fprintf(stderr, "no promtool (apt-get install prometheus)\n");
        skip();
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' check rules '%s' >&2", bin, RULES);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' test rules colo-rules.test.yaml >&2", COLO_SOURCE_DIR "/deploy/prometheus",
             bin);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grafana_structure),
        cmocka_unit_test(test_metric_names_exist),
        cmocka_unit_test(test_promtool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
