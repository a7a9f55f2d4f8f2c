/* The metrics an inference gateway's endpoint picker reads from each
 * replica (docs/KUBERNETES.md): waiting requests (colo_model_queue_depth),
 * running requests (colo_model_running) and KV-cache utilisation from 0 to
 * 1 (colo_model_kv_cache_usage_ratio), per model, on a live colo-server:
 * all zero when idle; while one long generation runs and a second waits
 * behind it (max_batch_size 1), running 1, waiting 1, and a utilisation
 * above 0 that equals the block gauges of the same scrape. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <cmocka.h>

#include "server_fixture.h"

/* The value of the series `name{model="a"}` in a scrape; NAN if absent. */
static double series(const char *text, const char *name)
{
    char key[160];
    snprintf(key, sizeof key, "\n%s{model=\"a\"} ", name);
    const char *p = strstr(text, key);
    return p ? strtod(p + strlen(key), NULL) : NAN;
}

typedef struct scrape {
    double waiting, running, usage, blocks, free_blocks;
} scrape;

static bool get_scrape(srv_fixture *f, scrape *s)
{
    srv_resp r;
    if (!srv_http(f, "GET", "/metrics", NULL, &r) || r.status != 200)
        return false;
    s->waiting = series(r.body, "colo_model_queue_depth");
    s->running = series(r.body, "colo_model_running");
    s->usage = series(r.body, "colo_model_kv_cache_usage_ratio");
    s->blocks = series(r.body, "colo_model_kv_blocks");
    s->free_blocks = series(r.body, "colo_model_kv_blocks_free");
    srv_resp_free(&r);
    return true;
}

/* Sends a streaming generation on a new connection; returns the socket. */
static int start_generation(srv_fixture *f, int max_tokens, int seed)
{
    int fd = srv_connect(f->port);
    assert_true(fd >= 0);
    char body[160];
    snprintf(body, sizeof body, "{\"prompt\":\"tell a long story\",\"max_tokens\":%d,\"stream\":true,\"seed\":%d}",
             max_tokens, seed);
    char *raw = srv_post_raw("/v1/models/a/infer", NULL, body);
    assert_non_null(raw);
    assert_true(srv_send_all(fd, raw, strlen(raw)));
    free(raw);
    return fd;
}

static void test_gateway_metrics(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    assert_true(srv_mkmodel(&f, "m.gguf", 4, 256, 512, 1024));
    assert_true(srv_start(&f, "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 1, cpu_memory_bytes: 256MiB }\n"
                              "models:\n"
                              "  - { name: a, kind: llama, path: m.gguf, memory_fraction: 0.5,\n"
                              "      batching: { max_batch_size: 1, max_queue: 8 } }\n"));
    scrape s;
    assert_true(get_scrape(&f, &s));
    assert_true(s.blocks > 0);
    assert_true(s.waiting == 0 && s.running == 0);
    assert_true(s.usage == 0);

    int first = start_generation(&f, 1000, 1);
    struct pollfd p = {first, POLLIN, 0};
    assert_true(poll(&p, 1, 20000) > 0); /* its stream started: it runs */
    int second = start_generation(&f, 4, 2);

    /* The gauges are a snapshot the executor refreshes after admitting and
     * after each step: between admission and the first step's refresh the
     * running request holds no blocks yet, so wait for the state where it has
     * them (and fail if it never comes). */
    bool seen = false;
    uint64_t t0 = srv_now_ms();
    while (!seen && srv_now_ms() - t0 < 20000) {
        assert_true(get_scrape(&f, &s));
        seen = s.running == 1 && s.waiting == 1 && s.usage > 0;
        if (!seen)
            srv_sleep_ms(5);
    }
    if (!seen)
        fprintf(stderr, "last scrape: waiting %g running %g usage %g\n", s.waiting, s.running, s.usage);
    assert_true(seen);
    assert_true(s.usage <= 1);
    assert_true(fabs(s.usage - (s.blocks - s.free_blocks) / s.blocks) < 1e-9);

    /* both finish; the gauges return to zero */
    size_t n;
    char *out = srv_read_all(first, 60000, &n);
    assert_non_null(strstr(out, "data: [DONE]"));
    free(out);
    out = srv_read_all(second, 60000, &n);
    assert_non_null(strstr(out, "data: [DONE]"));
    free(out);
    close(first);
    close(second);
    bool idle = false;
    t0 = srv_now_ms();
    while (!idle && srv_now_ms() - t0 < 10000) {
        assert_true(get_scrape(&f, &s));
        idle = s.waiting == 0 && s.running == 0 && s.usage == 0;
        if (!idle)
            srv_sleep_ms(10);
    }
    assert_true(idle);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gateway_metrics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
