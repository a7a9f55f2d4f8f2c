/* CPU streams: order, priority at op boundaries, partitions, chunks, events,
 * copies and errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/backend_impl.h"

static colo_device *open_cpu(int threads)
{
    char err[256];
    colo_device_config cfg = {.want = "cpu", .cpu_threads = threads};
    colo_device *d = colo_device_open(&cfg, err, sizeof err);
    assert_non_null(d);
    return d;
}

static colo_stream *make_stream(colo_device *d, colo_priority p, int first, int count)
{
    char err[256];
    colo_stream_config cfg = {.priority = p, .unit_first = first, .unit_count = count};
    colo_stream *s = colo_stream_create(d, &cfg, err, sizeof err);
    assert_non_null(s);
    return s;
}

/* ---- a log of which op ran when ------------------------------------------------ */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static int log_buf[4096];
static int log_n;

typedef struct {
    int tag;
    int sleep_us;
    volatile int *gate; /* when set, the op spins until *gate != 0 */
} tag_args;

static void tag_task(const void *a, int chunk, int n_chunks)
{
    (void)chunk;
    (void)n_chunks;
    const tag_args *t = a;
    if (t->gate)
        while (!__atomic_load_n(t->gate, __ATOMIC_ACQUIRE))
            usleep(100);
    if (t->sleep_us)
        usleep((useconds_t)t->sleep_us);
    pthread_mutex_lock(&log_mu);
    log_buf[log_n++] = t->tag;
    pthread_mutex_unlock(&log_mu);
}

static void log_reset(void)
{
    pthread_mutex_lock(&log_mu);
    log_n = 0;
    pthread_mutex_unlock(&log_mu);
}

static void test_in_order_within_stream(void **state)
{
    (void)state;
    colo_device *d = open_cpu(2);
    colo_stream *s = make_stream(d, COLO_PRIO_NORMAL, 0, 0);
    log_reset();
    for (int i = 0; i < 200; i++) {
        tag_args a = {i, (i % 7 == 0) ? 200 : 0, NULL};
        assert_int_equal(colo_cpu_launch(s, tag_task, &a, sizeof a, 1), COLO_OK);
    }
    assert_int_equal(colo_stream_sync(s), COLO_OK);
    assert_int_equal(log_n, 200);
    for (int i = 0; i < 200; i++)
        assert_int_equal(log_buf[i], i);
    colo_stream_destroy(s);
    colo_device_close(d);
}

/* One worker, blocked on a gate. Behind it: low-priority ops on one stream,
 * then one high-priority op. When the gate opens, the high op runs next. */
static void test_priority_at_op_boundary(void **state)
{
    (void)state;
    colo_device *d = open_cpu(1);
    colo_stream *lo = make_stream(d, COLO_PRIO_LOW, 0, 0);
    colo_stream *hi = make_stream(d, COLO_PRIO_HIGH, 0, 0);
    log_reset();
    volatile int gate = 0;
    tag_args blocker = {-1, 0, &gate};
    colo_cpu_launch(lo, tag_task, &blocker, sizeof blocker, 1);
    usleep(20 * 1000); /* the worker is now inside the blocker */
    for (int i = 0; i < 5; i++) {
        tag_args a = {i, 0, NULL};
        colo_cpu_launch(lo, tag_task, &a, sizeof a, 1);
    }
    tag_args h = {100, 0, NULL};
    colo_cpu_launch(hi, tag_task, &h, sizeof h, 1);
    __atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
    colo_stream_sync(lo);
    colo_stream_sync(hi);
    assert_int_equal(log_n, 7);
    assert_int_equal(log_buf[0], -1);
    assert_int_equal(log_buf[1], 100); /* high ran right after the op in flight */
    for (int i = 0; i < 5; i++)
        assert_int_equal(log_buf[2 + i], i);
    colo_stream_destroy(lo);
    colo_stream_destroy(hi);
    colo_device_close(d);
}

/* With two workers both busy on best-effort chunks, a high op starts as soon
 * as one chunk ends: within one op. */
static void test_priority_with_pool(void **state)
{
    (void)state;
    colo_device *d = open_cpu(2);
    colo_stream *lo = make_stream(d, COLO_PRIO_LOW, 0, 0);
    colo_stream *hi = make_stream(d, COLO_PRIO_HIGH, 0, 0);
    log_reset();
    volatile int gate = 0;
    tag_args blocker = {-1, 0, &gate};
    colo_cpu_launch(lo, tag_task, &blocker, sizeof blocker, 2); /* both workers */
    usleep(20 * 1000);
    for (int i = 0; i < 10; i++) {
        tag_args a = {i, 1000, NULL};
        colo_cpu_launch(lo, tag_task, &a, sizeof a, 2);
    }
    tag_args h = {100, 0, NULL};
    colo_cpu_launch(hi, tag_task, &h, sizeof h, 1);
    __atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
    colo_stream_sync(lo);
    colo_stream_sync(hi);
    int pos = -1;
    for (int i = 0; i < log_n; i++)
        if (log_buf[i] == 100)
            pos = i;
    /* A worker freed by a blocker chunk takes the high op; at most one chunk
     * of the next low op (taken by the other worker) can precede it. */
    assert_true(pos >= 1);
    int low_before = 0;
    for (int i = 0; i < pos; i++)
        low_before += log_buf[i] >= 0;
    assert_true(low_before <= 1);
    colo_stream_destroy(lo);
    colo_stream_destroy(hi);
    colo_device_close(d);
}

typedef struct {
    int *seen; /* (n_chunks) worker index that ran each chunk */
    int *count;
} chunk_args;

static void chunk_task(const void *a, int chunk, int n_chunks)
{
    (void)n_chunks;
    const chunk_args *c = a;
    c->seen[chunk] = colo_cpu_worker_index();
    __atomic_fetch_add(&c->count[chunk], 1, __ATOMIC_RELAXED);
    usleep(200);
}

static void test_chunks_once_and_partitions(void **state)
{
    (void)state;
    colo_device *d = open_cpu(4);
    colo_device_info info;
    assert_int_equal(colo_device_get_info(d, &info), COLO_OK);
    assert_int_equal(info.compute_units, 4);
    assert_true(info.can_partition);
    colo_stream *all = make_stream(d, COLO_PRIO_NORMAL, 0, 0);
    colo_stream *part = make_stream(d, COLO_PRIO_NORMAL, 2, 2);
    assert_int_equal(colo_cpu_stream_threads(all), 4);
    assert_int_equal(colo_cpu_stream_threads(part), 2);
    enum { N = 64 };
    int seen_a[N], cnt_a[N] = {0}, seen_p[N], cnt_p[N] = {0};
    chunk_args a = {seen_a, cnt_a}, p = {seen_p, cnt_p};
    colo_cpu_launch(all, chunk_task, &a, sizeof a, N);
    colo_cpu_launch(part, chunk_task, &p, sizeof p, N);
    colo_stream_sync(all);
    colo_stream_sync(part);
    for (int i = 0; i < N; i++) {
        assert_int_equal(cnt_a[i], 1);
        assert_int_equal(cnt_p[i], 1);
        assert_true(seen_a[i] >= 0 && seen_a[i] < 4);
        assert_true(seen_p[i] == 2 || seen_p[i] == 3); /* only its partition */
    }
    char err[256];
    colo_stream_config bad = {.priority = COLO_PRIO_NORMAL, .unit_first = 3, .unit_count = 2};
    assert_null(colo_stream_create(d, &bad, err, sizeof err));
    colo_stream_destroy(all);
    colo_stream_destroy(part);
    colo_device_close(d);
}

static void test_events(void **state)
{
    (void)state;
    colo_device *d = open_cpu(2);
    colo_stream *s = make_stream(d, COLO_PRIO_NORMAL, 0, 0);
    char err[256];
    colo_event *e0 = colo_event_create(d, err, sizeof err), *e1 = colo_event_create(d, err, sizeof err);
    volatile int gate = 0;
    tag_args blocker = {0, 0, &gate};
    assert_int_equal(colo_event_record(e0, s), COLO_OK);
    colo_cpu_launch(s, tag_task, &blocker, sizeof blocker, 1);
    tag_args slow = {1, 5000, NULL};
    colo_cpu_launch(s, tag_task, &slow, sizeof slow, 1);
    assert_int_equal(colo_event_record(e1, s), COLO_OK);
    assert_int_equal(colo_event_query(e1), COLO_EAGAIN);
    assert_int_equal(colo_stream_query(s), COLO_EAGAIN);
    float ms;
    assert_int_equal(colo_event_elapsed_ms(e0, e1, &ms), COLO_EAGAIN);
    __atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
    assert_int_equal(colo_event_sync(e1), COLO_OK);
    assert_int_equal(colo_event_query(e1), COLO_OK);
    assert_int_equal(colo_event_elapsed_ms(e0, e1, &ms), COLO_OK);
    assert_true(ms >= 4.0f); /* it spans the 5 ms op; a lower bound, not a timing target */
    colo_stream_sync(s);
    assert_int_equal(colo_stream_query(s), COLO_OK);
    colo_event_destroy(e0);
    colo_event_destroy(e1);
    colo_stream_destroy(s);
    colo_device_close(d);
}

static void test_copies_in_order(void **state)
{
    (void)state;
    colo_device *d = open_cpu(2);
    colo_stream *s = make_stream(d, COLO_PRIO_NORMAL, 0, 0);
    char err[256];
    const size_t n = 5 << 20;
    colo_buffer *b = colo_buffer_alloc(d, 2 * n, err, sizeof err);
    assert_non_null(b);
    unsigned char *dev = colo_buffer_ptr(b);
    unsigned char *src = malloc(n), *dst = malloc(n);
    for (size_t i = 0; i < n; i++)
        src[i] = (unsigned char)(i * 31 + 7);
    assert_int_equal(colo_memset(s, dev, 0x5a, 2 * n), COLO_OK);
    assert_int_equal(colo_memcpy_h2d(s, dev, src, n), COLO_OK);
    assert_int_equal(colo_memcpy_d2d(s, dev + n, dev, n / 2), COLO_OK);
    assert_int_equal(colo_memcpy_d2h(s, dst, dev + n, n), COLO_OK);
    assert_int_equal(colo_stream_sync(s), COLO_OK);
    assert_memory_equal(dst, src, n / 2);
    for (size_t i = n / 2; i < n; i++)
        assert_int_equal(dst[i], 0x5a);
    /* Overlapping d2d copy (a memmove). */
    assert_int_equal(colo_memcpy_d2d(s, dev + 1, dev, n), COLO_OK);
    assert_int_equal(colo_memcpy_d2h(s, dst, dev + 1, n), COLO_OK);
    colo_stream_sync(s);
    assert_memory_equal(dst, src, n);
    assert_int_equal(colo_memcpy_h2d(s, NULL, src, 4), COLO_EINVAL);
    free(src);
    free(dst);
    colo_buffer_free(b);
    colo_stream_destroy(s);
    colo_device_close(d);
}

static void fail_task(const void *a, int chunk, int n_chunks)
{
    (void)a;
    (void)n_chunks;
    if (chunk == 1)
        colo_cpu_task_fail(COLO_EINVAL);
    if (chunk == 2)
        colo_cpu_task_fail(COLO_EDEVICE); /* the first error wins */
}

static void test_errors_come_back_once(void **state)
{
    (void)state;
    colo_device *d = open_cpu(1);
    colo_stream *s = make_stream(d, COLO_PRIO_NORMAL, 0, 0);
    colo_stream *other = make_stream(d, COLO_PRIO_NORMAL, 0, 0);
    colo_cpu_launch(s, fail_task, NULL, 0, 3);
    assert_int_equal(colo_stream_sync(s), COLO_EINVAL);
    assert_int_equal(colo_stream_sync(s), COLO_OK);
    assert_int_equal(colo_stream_sync(other), COLO_OK); /* errors stay on their stream */
    assert_int_equal(colo_cpu_launch(s, fail_task, NULL, COLO_CPU_TASK_ARGS_MAX + 1, 1), COLO_EINVAL);
    assert_int_equal(colo_cpu_launch(s, fail_task, NULL, 0, 0), COLO_EINVAL);
    colo_stream_destroy(s);
    colo_stream_destroy(other);
    colo_device_close(d);
}

static void test_many_streams(void **state)
{
    (void)state;
    colo_device *d = open_cpu(2);
    for (int round = 0; round < 20; round++) {
        colo_stream *ss[16];
        for (int i = 0; i < 16; i++) {
            ss[i] = make_stream(d, (colo_priority)(i % 3), 0, 0);
            tag_args a = {i, 0, NULL};
            colo_cpu_launch(ss[i], tag_task, &a, sizeof a, 2);
        }
        for (int i = 0; i < 16; i++)
            colo_stream_destroy(ss[i]); /* destroy waits for queued work */
    }
    colo_device_close(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_in_order_within_stream),
        cmocka_unit_test(test_priority_at_op_boundary),
        cmocka_unit_test(test_priority_with_pool),
        cmocka_unit_test(test_chunks_once_and_partitions),
        cmocka_unit_test(test_events),
        cmocka_unit_test(test_copies_in_order),
        cmocka_unit_test(test_errors_come_back_once),
        cmocka_unit_test(test_many_streams),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
