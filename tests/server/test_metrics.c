/* The Prometheus registry: exposition text, escaping, cumulative histogram
 * buckets, updates from several threads, and promtool's verdict. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/http/metrics.h"

static void test_render_and_escape(void **state)
{
    (void)state;
    colo_metrics *m = colo_metrics_create();
    assert_non_null(m);
    colo_metric *c = colo_metrics_counter(m, "t_requests_total", "Requests.\nSecond \\ line.", 2,
                                          (const char *const[]){"model", "status"});
    colo_metric *g = colo_metrics_gauge(m, "t_memory_bytes", "Memory.", 0, NULL);
    double b[] = {0.1, 1};
    colo_metric *h = colo_metrics_histogram(m, "t_latency_seconds", "Latency.", 1, (const char *const[]){"model"}, b, 2);
    assert_non_null(c);
    assert_non_null(g);
    assert_non_null(h);
    /* bad families */
    assert_null(colo_metrics_counter(m, "t_requests_total", "dup", 0, NULL));
    assert_null(colo_metrics_gauge(m, "9bad", "x", 0, NULL));
    assert_null(colo_metrics_gauge(m, "bad-name", "x", 0, NULL));
    assert_null(colo_metrics_histogram(m, "t_h2", "x", 1, (const char *const[]){"le"}, b, 2));
    assert_null(colo_metrics_histogram(m, "t_h3", "x", 0, NULL, (double[]){1, 0.5}, 2));

    assert_int_equal(colo_metric_add(c, (const char *const[]){"a\"b\\c\nd", "200"}, 2), COLO_OK);
    assert_int_equal(colo_metric_add(c, (const char *const[]){"a\"b\\c\nd", "200"}, 1), COLO_OK);
    assert_int_equal(colo_metric_add(c, (const char *const[]){"x", "500"}, 1), COLO_OK);
    assert_int_equal(colo_metric_add(c, (const char *const[]){"x", "500"}, -1), COLO_EINVAL);
    assert_int_equal(colo_metric_observe(c, (const char *const[]){"x", "500"}, 1), COLO_EINVAL);
    assert_int_equal(colo_metric_set(g, NULL, 1.5e9), COLO_OK);
    for (double v = 0.05; v < 3; v += 0.5) /* 0.05 0.55 1.05 1.55 2.05 2.55 */
        assert_int_equal(colo_metric_observe(h, (const char *const[]){"m"}, v), COLO_OK);
    assert_int_equal(colo_metric_observe(h, (const char *const[]){"m"}, 0.1), COLO_OK); /* le is inclusive */

    size_t len;
    char *text = colo_metrics_render(m, &len);
    assert_non_null(text);
    assert_int_equal(strlen(text), len);
    const char *want[] = {
        "# HELP t_requests_total Requests.\\nSecond \\\\ line.\n# TYPE t_requests_total counter\n",
        "t_requests_total{model=\"a\\\"b\\\\c\\nd\",status=\"200\"} 3\n",
        "t_requests_total{model=\"x\",status=\"500\"} 1\n",
        "# TYPE t_memory_bytes gauge\nt_memory_bytes 1500000000\n",
        "# TYPE t_latency_seconds histogram\n",
        "t_latency_seconds_bucket{model=\"m\",le=\"0.1\"} 2\n",
        "t_latency_seconds_bucket{model=\"m\",le=\"1\"} 3\n",
        "t_latency_seconds_bucket{model=\"m\",le=\"+Inf\"} 7\n",
        "t_latency_seconds_count{model=\"m\"} 7\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(text, want[i]))
            fail_msg("missing '%s' in:\n%s", want[i], text);

    if (system("command -v promtool >/dev/null 2>&1") == 0) {
        char path[] = "/tmp/colo_test_prom_XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, text, len), (ssize_t)len);
        close(fd);
        char cmd[256];
        snprintf(cmd, sizeof cmd, "promtool check metrics < %s", path);
        int rc = system(cmd);
        unlink(path);
        assert_int_equal(rc, 0);
    } else {
        printf("promtool not found: format check skipped\n");
    }
    free(text);
    colo_metrics_free(m);
}

typedef struct worker {
    colo_metric *c, *h;
    int id;
} worker;

static void *hammer(void *arg)
{
    worker *w = arg;
    char label[8];
    snprintf(label, sizeof label, "w%d", w->id % 2);
    for (int i = 0; i < 20000; i++) {
        colo_metric_add(w->c, (const char *const[]){label}, 1);
        colo_metric_observe(w->h, NULL, (double)(i % 10));
    }
    return NULL;
}

/* Reading back sums the matching series (NULL matches any value);
 * removing a series takes it out of the exposition. */
static void test_read_and_remove(void **state)
{
    (void)state;
    colo_metrics *m = colo_metrics_create();
    const char *const L2[] = {"model", "status"};
    colo_metric *c = colo_metrics_counter(m, "r_total", "r", 2, L2);
    const double b[] = {1, 2};
    colo_metric *h = colo_metrics_histogram(m, "h_seconds", "h", 1, (const char *const[]){"model"}, b, 2);
    int n200 = 1 + rand() % 50, n503 = 1 + rand() % 50;
    assert_int_equal(colo_metric_add(c, (const char *const[]){"a", "200"}, n200), COLO_OK);
    assert_int_equal(colo_metric_add(c, (const char *const[]){"a", "503"}, n503), COLO_OK);
    assert_int_equal(colo_metric_add(c, (const char *const[]){"b", "200"}, 7), COLO_OK);
    colo_metric_reading r;
    assert_int_equal(colo_metric_read(c, (const char *const[]){"a", NULL}, &r), 2);
    assert_true(r.value == n200 + n503);
    assert_int_equal(colo_metric_read(c, (const char *const[]){"a", "200"}, &r), 1);
    assert_true(r.value == n200);
    assert_int_equal(colo_metric_read(c, NULL, &r), 3);
    assert_true(r.value == n200 + n503 + 7);
    assert_int_equal(colo_metric_read(c, (const char *const[]){"c", NULL}, &r), 0);
    assert_true(r.value == 0);
    for (double v = 0.5; v < 3; v += 1) /* 0.5, 1.5, 2.5: one in each bucket */
        colo_metric_observe(h, (const char *const[]){"a"}, v);
    assert_int_equal(colo_metric_read(h, (const char *const[]){"a"}, &r), 1);
    assert_true(r.count == 3 && r.counts[0] == 1 && r.counts[1] == 1 && r.counts[2] == 1 && r.sum == 4.5);
    int nb;
    assert_true(colo_metric_buckets(h, &nb)[1] == 2 && nb == 2);

    assert_int_equal(colo_metric_remove(c, (const char *const[]){"a", "503"}), COLO_OK);
    assert_int_equal(colo_metric_remove(c, (const char *const[]){"x", "1"}), COLO_OK); /* none: nothing */
    char *text = colo_metrics_render(m, NULL);
    assert_non_null(text);
    assert_null(strstr(text, "status=\"503\""));
    assert_non_null(strstr(text, "r_total{model=\"b\",status=\"200\"} 7\n"));
    free(text);
    /* the last series removed, a new one appends after the others */
    assert_int_equal(colo_metric_remove(c, (const char *const[]){"b", "200"}), COLO_OK);
    assert_int_equal(colo_metric_add(c, (const char *const[]){"d", "200"}, 1), COLO_OK);
    text = colo_metrics_render(m, NULL);
    assert_non_null(strstr(text, "r_total{model=\"a\",status=\"200\"}"));
    assert_true(strstr(text, "r_total{model=\"d\"") > strstr(text, "r_total{model=\"a\""));
    assert_int_equal(colo_metric_read(c, NULL, &r), 2);
    free(text);
    colo_metrics_free(m);
}

static void test_threads(void **state)
{
    (void)state;
    colo_metrics *m = colo_metrics_create();
    colo_metric *c = colo_metrics_counter(m, "t_total", "x", 1, (const char *const[]){"w"});
    colo_metric *h = colo_metrics_histogram(m, "t_seconds", "x", 0, NULL, (double[]){4.5}, 1);
    pthread_t t[4];
    worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker){c, h, i};
        assert_int_equal(pthread_create(&t[i], NULL, hammer, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    char *text = colo_metrics_render(m, NULL);
    assert_non_null(strstr(text, "t_total{w=\"w0\"} 40000\n"));
    assert_non_null(strstr(text, "t_total{w=\"w1\"} 40000\n"));
    assert_non_null(strstr(text, "t_seconds_bucket{le=\"4.5\"} 40000\n"));
    assert_non_null(strstr(text, "t_seconds_count 80000\n"));
    assert_non_null(strstr(text, "t_seconds_sum 360000\n"));
    free(text);
    colo_metrics_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_and_escape),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_read_and_remove),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
