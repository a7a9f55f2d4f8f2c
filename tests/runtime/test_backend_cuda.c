/* The CUDA backend through the public runtime API: device info, priority
 * streams, copies, events, the cuBLAS workspace, SM partitions (green
 * contexts) and the poisoned flag. The CUDA cases skip when no GPU is
 * usable; the CPU defaults of the optional calls run everywhere. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/ops.h"
#include "runtime/backend.h"

static colo_device *open_dev(const char *want)
{
    char err[256];
    colo_device_config cfg = {.want = want};
    colo_device *d = colo_device_open(&cfg, err, sizeof err);
    if (!d)
        fail_msg("open %s: %s", want, err);
    return d;
}

static colo_stream *make_stream(colo_device *d, colo_priority p, int first, int count)
{
    char err[256];
    colo_stream_config cfg = {.priority = p, .unit_first = first, .unit_count = count};
    colo_stream *s = colo_stream_create(d, &cfg, err, sizeof err);
    if (!s)
        fail_msg("stream: %s", err);
    return s;
}

/* CPU: the optional calls fall back to their documented defaults. */
static void test_cpu_optional_defaults(void **state)
{
    (void)state;
    colo_device *d = open_dev("cpu");
    colo_stream *s = make_stream(d, COLO_PRIO_NORMAL, 0, 0);
    char buf[64];
    assert_false(colo_device_poisoned(d));
    assert_false(colo_device_poisoned(NULL));
    assert_int_equal(colo_stream_set_workspace(s, NULL, 0), COLO_OK);
    assert_int_equal(colo_stream_set_workspace(s, buf, sizeof buf), COLO_OK);
    assert_int_equal(colo_stream_set_workspace(s, buf, 0), COLO_EINVAL);
    assert_int_equal(colo_stream_set_workspace(s, NULL, 16), COLO_EINVAL);
    assert_int_equal(colo_stream_set_workspace(NULL, NULL, 0), COLO_EINVAL);
    colo_stream_destroy(s);
    colo_device_close(d);
}

static void test_cuda_info(void **state)
{
    (void)state;
    colo_device *d = open_dev("cuda");
    colo_device_info info;
    assert_int_equal(colo_device_get_info(d, &info), COLO_OK);
    assert_int_equal(info.kind, COLO_BACKEND_CUDA);
    assert_true(info.compute_units > 0);
    assert_true(info.total_bytes > 0 && info.free_bytes <= info.total_bytes);
    assert_true(info.prio_greatest <= info.prio_least); /* CUDA: greatest priority is numerically smallest */
    assert_false(colo_device_poisoned(d));
    printf("cuda: %s, %d SMs, priorities %d..%d, partitions %s\n", info.name, info.compute_units, info.prio_least,
           info.prio_greatest, info.can_partition ? "yes" : "no");
    colo_device_close(d);
}

/* Copies and fills round-trip on streams of every priority. */
static void test_cuda_streams_and_copies(void **state)
{
    (void)state;
    colo_device *d = open_dev("cuda");
    char err[256];
    enum { N = 1 << 20 };
    unsigned char *h = malloc(N), *back = malloc(N);
    for (int i = 0; i < N; i++)
        h[i] = (unsigned char)(i * 131 + 7);
    for (int p = COLO_PRIO_LOW; p <= COLO_PRIO_HIGH; p++) {
        colo_stream *s = make_stream(d, (colo_priority)p, 0, 0);
        assert_int_equal(colo_stream_priority(s), p);
        colo_buffer *a = colo_buffer_alloc(d, N, err, sizeof err), *b = colo_buffer_alloc(d, N, err, sizeof err);
        assert_non_null(a);
        assert_non_null(b);
        assert_int_equal(colo_memcpy_h2d(s, colo_buffer_ptr(a), h, N), COLO_OK);
        assert_int_equal(colo_memcpy_d2d(s, colo_buffer_ptr(b), colo_buffer_ptr(a), N), COLO_OK);
        assert_int_equal(colo_memset(s, colo_buffer_ptr(b), 0x5a, 100), COLO_OK);
        assert_int_equal(colo_memcpy_d2h(s, back, colo_buffer_ptr(b), N), COLO_OK);
        assert_int_equal(colo_stream_sync(s), COLO_OK);
        assert_int_equal(colo_stream_query(s), COLO_OK);
        for (int i = 0; i < 100; i++)
            assert_int_equal(back[i], 0x5a);
        assert_memory_equal(back + 100, h + 100, N - 100);
        colo_buffer_free(a);
        colo_buffer_free(b);
        colo_stream_destroy(s);
    }
    free(h);
    free(back);
    colo_device_close(d);
}

static void test_cuda_events(void **state)
{
    (void)state;
    colo_device *d = open_dev("cuda");
    char err[256];
    colo_stream *s = make_stream(d, COLO_PRIO_NORMAL, 0, 0);
    colo_event *e0 = colo_event_create(d, err, sizeof err), *e1 = colo_event_create(d, err, sizeof err);
    assert_non_null(e0);
    assert_non_null(e1);
    size_t bytes = (size_t)256 << 20;
    colo_buffer *b = colo_buffer_alloc(d, bytes, err, sizeof err);
    assert_non_null(b);
    assert_int_equal(colo_event_record(e0, s), COLO_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(colo_memset(s, colo_buffer_ptr(b), i, bytes), COLO_OK);
    assert_int_equal(colo_event_record(e1, s), COLO_OK);
    assert_int_equal(colo_event_sync(e1), COLO_OK);
    assert_int_equal(colo_event_query(e0), COLO_OK);
    float ms = -1;
    assert_int_equal(colo_event_elapsed_ms(e0, e1, &ms), COLO_OK);
    assert_true(ms > 0.0f);
    colo_buffer_free(b);
    colo_event_destroy(e0);
    colo_event_destroy(e1);
    colo_stream_destroy(s);
    colo_device_close(d);
}

/* F32 gemm (cuBLAS) on s: C (m, n) = A (m, k) . B (k, n); checks against the host. */
static void gemm_check(colo_device *d, colo_stream *s, int m, int n, int k)
{
    char err[256];
    float *a = malloc((size_t)m * k * 4), *b = malloc((size_t)k * n * 4), *c = malloc((size_t)m * n * 4);
    for (int i = 0; i < m * k; i++)
        a[i] = (float)((i * 37) % 11) - 5.0f;
    for (int i = 0; i < k * n; i++)
        b[i] = (float)((i * 17) % 7) - 3.0f;
    colo_buffer *da = colo_buffer_alloc(d, (size_t)m * k * 4, err, sizeof err);
    colo_buffer *db = colo_buffer_alloc(d, (size_t)k * n * 4, err, sizeof err);
    colo_buffer *dc = colo_buffer_alloc(d, (size_t)m * n * 4, err, sizeof err);
    assert_non_null(da);
    assert_non_null(db);
    assert_non_null(dc);
    assert_int_equal(colo_memcpy_h2d(s, colo_buffer_ptr(da), a, (size_t)m * k * 4), COLO_OK);
    assert_int_equal(colo_memcpy_h2d(s, colo_buffer_ptr(db), b, (size_t)k * n * 4), COLO_OK);
    assert_int_equal(colo_op_gemm(s, false, false, m, n, k, 1.0f, colo_buffer_ptr(da), k, 0, colo_buffer_ptr(db), n,
                                  0, COLO_F32, 0.0f, colo_buffer_ptr(dc), n, 0, 1),
                     COLO_OK);
    assert_int_equal(colo_memcpy_d2h(s, c, colo_buffer_ptr(dc), (size_t)m * n * 4), COLO_OK);
    assert_int_equal(colo_stream_sync(s), COLO_OK);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double ref = 0; /* small integers: exact in F32 */
            for (int l = 0; l < k; l++)
                ref += (double)a[i * k + l] * b[l * n + j];
            if (c[i * n + j] != (float)ref)
                fail_msg("gemm (%d, %d): %g != %g", i, j, c[i * n + j], ref);
        }
    colo_buffer_free(da);
    colo_buffer_free(db);
    colo_buffer_free(dc);
    free(a);
    free(b);
    free(c);
}

/* cuBLAS runs in caller memory; misaligned workspaces are refused. */
static void test_cuda_workspace(void **state)
{
    (void)state;
    colo_device *d = open_dev("cuda");
    char err[256];
    colo_stream *s = make_stream(d, COLO_PRIO_HIGH, 0, 0);
    size_t bytes = (size_t)32 << 20;
    colo_buffer *ws = colo_buffer_alloc(d, bytes, err, sizeof err);
    assert_non_null(ws);
    assert_int_equal(colo_stream_set_workspace(s, (char *)colo_buffer_ptr(ws) + 4, bytes - 256), COLO_EINVAL);
    assert_int_equal(colo_stream_set_workspace(s, colo_buffer_ptr(ws), bytes), COLO_OK);
    gemm_check(d, s, 67, 129, 300);
    assert_int_equal(colo_stream_set_workspace(s, NULL, 0), COLO_OK);
    gemm_check(d, s, 33, 65, 128);
    colo_stream_destroy(s); /* before the workspace it used */
    colo_buffer_free(ws);
    colo_device_close(d);
}

/* Streams on disjoint SM sets compute what an unrestricted stream does;
 * without green contexts such a stream is refused with a reason. */
static void test_cuda_partitions(void **state)
{
    (void)state;
    colo_device *d = open_dev("cuda");
    colo_device_info info;
    assert_int_equal(colo_device_get_info(d, &info), COLO_OK);
    char err[256] = "";
    colo_stream_config cfg = {.priority = COLO_PRIO_NORMAL, .unit_first = 0, .unit_count = info.compute_units / 2};
    if (!info.can_partition) {
        assert_null(colo_stream_create(d, &cfg, err, sizeof err));
        assert_non_null(strstr(err, "green"));
        colo_device_close(d);
        return;
    }
    int half = info.compute_units / 2;
    colo_stream *lo = make_stream(d, COLO_PRIO_HIGH, 0, half);
    colo_stream *hi = make_stream(d, COLO_PRIO_LOW, half, info.compute_units - half);
    colo_stream *small = make_stream(d, COLO_PRIO_NORMAL, 8, 8);
    gemm_check(d, lo, 40, 70, 96);
    gemm_check(d, hi, 40, 70, 96);
    gemm_check(d, small, 9, 17, 33);
    colo_stream_destroy(lo);
    colo_stream_destroy(hi);
    colo_stream_destroy(small);
    cfg.unit_first = info.compute_units + 8;
    cfg.unit_count = 8;
    assert_null(colo_stream_create(d, &cfg, err, sizeof err));
    colo_device_close(d);
}

/* Bad data met by a kernel fails the stream's next sync, once. */
static void test_cuda_error_flag(void **state)
{
    (void)state;
    colo_device *d = open_dev("cuda");
    char err[256];
    colo_stream *s = make_stream(d, COLO_PRIO_NORMAL, 0, 0);
    float table[4 * 32];
    for (int i = 0; i < 4 * 32; i++)
        table[i] = (float)i;
    int32_t ids[3] = {0, 9, 2};
    colo_buffer *dt = colo_buffer_alloc(d, sizeof table, err, sizeof err);
    colo_buffer *di = colo_buffer_alloc(d, sizeof ids, err, sizeof err);
    colo_buffer *dout = colo_buffer_alloc(d, 3 * 32 * 4, err, sizeof err);
    assert_int_equal(colo_memcpy_h2d(s, colo_buffer_ptr(dt), table, sizeof table), COLO_OK);
    assert_int_equal(colo_memcpy_h2d(s, colo_buffer_ptr(di), ids, sizeof ids), COLO_OK);
    assert_int_equal(colo_op_get_rows(s, colo_buffer_ptr(dt), COLO_F32, 4, 32, colo_buffer_ptr(di), 3,
                                      colo_buffer_ptr(dout)),
                     COLO_OK);
    assert_int_equal(colo_stream_sync(s), COLO_EINVAL);
    assert_int_equal(colo_stream_sync(s), COLO_OK);
    assert_false(colo_device_poisoned(d)); /* bad input is not a poisoned context */
    float out[3 * 32];
    assert_int_equal(colo_memcpy_d2h(s, out, colo_buffer_ptr(dout), sizeof out), COLO_OK);
    assert_int_equal(colo_stream_sync(s), COLO_OK);
    for (int j = 0; j < 32; j++) {
        assert_true(out[j] == table[j]);
        assert_true(out[32 + j] == 0.0f);
        assert_true(out[64 + j] == table[64 + j]);
    }
    colo_buffer_free(dt);
    colo_buffer_free(di);
    colo_buffer_free(dout);
    colo_stream_destroy(s);
    colo_device_close(d);
}

static void test_cuda_present(void **state)
{
    (void)state;
    skip();
}

int main(void)
{
    if (!colo_cuda_available()) {
        const struct CMUnitTest cpu_only[] = {cmocka_unit_test(test_cpu_optional_defaults),
                                              cmocka_unit_test(test_cuda_present)};
        return cmocka_run_group_tests(cpu_only, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_optional_defaults), cmocka_unit_test(test_cuda_info),
        cmocka_unit_test(test_cuda_streams_and_copies), cmocka_unit_test(test_cuda_events),
        cmocka_unit_test(test_cuda_workspace),        cmocka_unit_test(test_cuda_partitions),
        cmocka_unit_test(test_cuda_error_flag),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
