/* The CUDA backend through the public runtime API: device info, priority
 * streams, copies, events, the cuBLAS workspace, SM partitions (green
 * contexts) running kernels and cuBLAS, on-demand memory (elastic arenas
 * on the driver's virtual memory management), streams used from threads
 * that never touched CUDA, and the error paths. The CUDA cases skip when
 * no GPU is usable; the CPU defaults of the optional calls run everywhere. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/cuda_skip.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/ops.h"
#include "kernels/quant.h"
#include "runtime/arena.h"
#include "runtime/backend.h"
#include "runtime/staging.h"
#include "tests/test_seed.h"

#define MiB ((size_t)1 << 20)

/* What the public API does not show: a stream's native CUDA priority and
 * its SM count. This file builds without CUDA too, so these are weak
 * references (runtime/cuda_impl.h's accessors, the CUDA runtime's
 * cudaStreamGetPriority with cudaStream_t as void * and cudaError_t as int),
 * NULL in such builds, where the CUDA cases never run. */
extern void *colo_cuda_stream(const colo_stream *s) __attribute__((weak));
extern int colo_cuda_stream_sms(const colo_stream *s) __attribute__((weak));
extern int cudaStreamGetPriority(void *stream, int *priority) __attribute__((weak));

static int native_priority(const colo_stream *s)
{
    assert_non_null(colo_cuda_stream);
    assert_non_null(cudaStreamGetPriority);
    int p = 12345;
    assert_int_equal(cudaStreamGetPriority(colo_cuda_stream(s), &p), 0);
    return p;
}

static unsigned test_seed(void)
{
    return (unsigned)colo_test_seed("test_backend_cuda", 49);
}

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
    /* CUDA: the greatest priority is numerically smallest; every GPU colo
     * supports (sm_80 on) has more than one level. */
    assert_true(info.prio_greatest < info.prio_least);
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
    /* back is page-locked (colo_host_alloc), as the engine's logits are */
    unsigned char *h = malloc(N), *back = colo_host_alloc(d, N);
    assert_non_null(back);
    for (int i = 0; i < N; i++)
        h[i] = (unsigned char)(i * 131 + 7);
    colo_device_info info;
    assert_int_equal(colo_device_get_info(d, &info), COLO_OK);
    int native[3];
    for (int p = COLO_PRIO_LOW; p <= COLO_PRIO_HIGH; p++) {
        colo_stream *s = make_stream(d, (colo_priority)p, 0, 0);
        assert_int_equal(colo_stream_priority(s), p);
        native[p] = native_priority(s);
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
    /* low = least, high = greatest (numerically smallest), normal between */
    assert_int_equal(native[COLO_PRIO_LOW], info.prio_least);
    assert_int_equal(native[COLO_PRIO_HIGH], info.prio_greatest);
    assert_true(native[COLO_PRIO_HIGH] < native[COLO_PRIO_NORMAL] || info.prio_least - info.prio_greatest < 2);
    assert_true(native[COLO_PRIO_NORMAL] <= native[COLO_PRIO_LOW]);
    free(h);
    colo_host_free(d, back);
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

/* A kernel (colo_op_scale) on s over n random floats in device memory at
 * dev_x (or a fresh buffer when NULL): x * alpha, exactly. */
static void scale_check(colo_device *d, colo_stream *s, float *dev_x, size_t n, unsigned *seed)
{
    char err[256];
    colo_buffer *buf = NULL;
    if (!dev_x) {
        buf = colo_buffer_alloc(d, n * sizeof(float), err, sizeof err);
        assert_non_null(buf);
        dev_x = colo_buffer_ptr(buf);
    }
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    assert_non_null(x);
    assert_non_null(y);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((int)(rand_r(seed) % 2001) - 1000) / 8.0f;
    float alpha = 1.0f + (float)(rand_r(seed) % 16) / 4.0f;
    assert_int_equal(colo_memcpy_h2d(s, dev_x, x, n * sizeof *x), COLO_OK);
    assert_int_equal(colo_op_scale(s, dev_x, alpha, (int64_t)n), COLO_OK);
    assert_int_equal(colo_memcpy_d2h(s, y, dev_x, n * sizeof *y), COLO_OK);
    assert_int_equal(colo_stream_sync(s), COLO_OK);
    for (size_t i = 0; i < n; i++)
        if (y[i] != x[i] * alpha)
            fail_msg("scale [%zu]: %g != %g * %g", i, y[i], x[i], alpha);
    free(x);
    free(y);
    colo_buffer_free(buf);
}

/* Streams on disjoint SM sets (green contexts) run kernels and cuBLAS and
 * compute what an unrestricted stream does, at every priority; without
 * green contexts such a stream is refused with a reason. */
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
    unsigned seed = test_seed();
    int half = info.compute_units / 2;
    colo_stream *first = make_stream(d, COLO_PRIO_HIGH, 0, half);
    colo_stream *second = make_stream(d, COLO_PRIO_LOW, half, info.compute_units - half);
    colo_stream *small = make_stream(d, COLO_PRIO_NORMAL, 8, 8);
    /* The two halves split the device between them, rounded to whole SM groups. */
    assert_non_null(colo_cuda_stream_sms);
    int sms_first = colo_cuda_stream_sms(first), sms_second = colo_cuda_stream_sms(second);
    int sms_small = colo_cuda_stream_sms(small);
    printf("partitions: %d + %d SMs of %d, small %d\n", sms_first, sms_second, info.compute_units, sms_small);
    assert_true(sms_first > 0 && sms_second > 0 && sms_first + sms_second <= info.compute_units);
    assert_true(sms_small > 0 && sms_small <= 16);
    /* A green-context stream keeps its priority. */
    assert_int_equal(native_priority(first), info.prio_greatest);
    assert_int_equal(native_priority(second), info.prio_least);
    gemm_check(d, first, 40, 70, 96);
    gemm_check(d, second, 40, 70, 96);
    gemm_check(d, small, 9, 17, 33);
    scale_check(d, first, NULL, (size_t)3 << 20, &seed);
    scale_check(d, second, NULL, (size_t)3 << 20, &seed);
    scale_check(d, small, NULL, 1000, &seed);
    /* Events time work queued on a partition. */
    colo_event *e0 = colo_event_create(d, err, sizeof err), *e1 = colo_event_create(d, err, sizeof err);
    assert_non_null(e0);
    assert_non_null(e1);
    assert_int_equal(colo_event_record(e0, small), COLO_OK);
    scale_check(d, small, NULL, (size_t)1 << 20, &seed);
    assert_int_equal(colo_event_record(e1, small), COLO_OK);
    assert_int_equal(colo_event_sync(e1), COLO_OK);
    float ms = -1;
    assert_int_equal(colo_event_elapsed_ms(e0, e1, &ms), COLO_OK);
    assert_true(ms > 0.0f);
    colo_event_destroy(e0);
    colo_event_destroy(e1);
    colo_stream_destroy(first);
    colo_stream_destroy(second);
    colo_stream_destroy(small);
    cfg.unit_first = info.compute_units + 8;
    cfg.unit_count = 8;
    assert_null(colo_stream_create(d, &cfg, err, sizeof err));
    /* Partitions come and go: a second round on the same SMs. */
    colo_stream *again = make_stream(d, COLO_PRIO_HIGH, 0, half);
    gemm_check(d, again, 17, 33, 65);
    colo_stream_destroy(again);
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

/* A failed call (an allocation past the device's memory) fails alone: the
 * ops after it succeed, and the device is not poisoned. */
static void test_cuda_failure_is_not_sticky(void **state)
{
    (void)state;
    colo_device *d = open_dev("cuda");
    char err[256] = "";
    unsigned seed = test_seed();
    colo_stream *s = make_stream(d, COLO_PRIO_NORMAL, 0, 0);
    assert_null(colo_buffer_alloc(d, (size_t)1 << 50, err, sizeof err));
    assert_non_null(strstr(err, "cuda"));
    scale_check(d, s, NULL, 4096, &seed);
    assert_false(colo_device_poisoned(d));
    colo_stream_destroy(s);
    colo_device_close(d);
}

/* Graphs (cuda_graphs): a recording runs nothing until end launches it; a
 * second recording under the same key updates the graph to its own
 * arguments; key -1 throws a recording away; a device without cuda_graphs
 * records nothing. x = 1 + i: scale by 3 (graph), then by 5 (the same graph
 * updated), then by 7 (thrown away) must give 15 (1 + i). */
static void test_cuda_graphs(void **state)
{
    (void)state;
    enum { N = 1000 };
    char err[256];
    colo_device *plain = open_dev("cuda");
    colo_stream *ps = make_stream(plain, COLO_PRIO_NORMAL, 0, 0);
    assert_int_equal(colo_stream_graph_begin(ps), COLO_EUNSUPPORTED);
    assert_int_equal(colo_stream_graphs_launched(ps), 0);
    colo_stream_destroy(ps);
    colo_device_close(plain);

    colo_device_config cfg = {.want = "cuda", .cuda_graphs = true};
    colo_device *d = colo_device_open(&cfg, err, sizeof err);
    assert_non_null(d);
    colo_stream *s = make_stream(d, COLO_PRIO_NORMAL, 0, 0);
    colo_buffer *b = colo_buffer_alloc(d, N * sizeof(float), err, sizeof err);
    assert_non_null(b);
    float *x = colo_buffer_ptr(b), h[N];
    for (int i = 0; i < N; i++)
        h[i] = 1.0f + (float)i;
    assert_int_equal(colo_memcpy_h2d(s, x, h, sizeof h), COLO_OK);
    assert_int_equal(colo_stream_sync(s), COLO_OK);
    const float alpha[3] = {3.0f, 5.0f, 7.0f};
    for (int r = 0; r < 3; r++) {
        assert_int_equal(colo_stream_graph_begin(s), COLO_OK);
        assert_int_equal(colo_stream_graph_begin(s), COLO_EUNSUPPORTED); /* not nested */
        assert_int_equal(colo_op_scale(s, x, alpha[r], N), COLO_OK);
        colo_status st = colo_stream_graph_end(s, r < 2 ? 1 : -1);
        assert_int_equal(st, r < 2 ? COLO_OK : COLO_ECANCELED);
        assert_int_equal(colo_stream_sync(s), COLO_OK);
        assert_int_equal(colo_stream_graphs_launched(s), r < 2 ? (uint64_t)r + 1 : 2);
    }
    assert_int_equal(colo_stream_graph_end(s, 1), COLO_EINVAL); /* none recording */
    assert_int_equal(colo_memcpy_d2h(s, h, x, sizeof h), COLO_OK);
    assert_int_equal(colo_stream_sync(s), COLO_OK);
    for (int i = 0; i < N; i++)
        if (h[i] != 15.0f * (1.0f + (float)i))
            fail_msg("x[%d] = %g after scaling by 3 and 5 (and a discarded 7), want %g", i, h[i],
                     15.0 * (1.0 + i));
    assert_false(colo_device_poisoned(d));
    colo_buffer_free(b);
    colo_stream_destroy(s);
    colo_device_close(d);
}

/* A recording whose op needs more of the stream's scratch than it has
 * (linear on digits: 64 rows of 8192 take 1.3 MiB past the first 1 MiB):
 * the scratch grows without waiting for the stream, the graph runs, and
 * its result is the same op's outside a graph, bit for bit. */
static void test_cuda_graph_grows_scratch(void **state)
{
    (void)state;
    enum { M = 64, N = 8, K = 8192 };
    char err[256];
    colo_device_config cfg = {.want = "cuda", .cuda_graphs = true};
    colo_device *d = colo_device_open(&cfg, err, sizeof err);
    assert_non_null(d);
    colo_stream *s = make_stream(d, COLO_PRIO_NORMAL, 0, 0);
    size_t rb = colo_dtype_row_bytes(COLO_Q8_0, K);
    float *hx = malloc((size_t)M * K * 4), *hy = malloc((size_t)M * N * 4), *hy2 = malloc((size_t)M * N * 4);
    unsigned char *hw = malloc(rb * N);
    assert_true(hx && hy && hy2 && hw);
    for (int i = 0; i < M * K; i++)
        hx[i] = (float)((int)((unsigned)i * 7919u % 201u) - 100) / 50.0f;
    for (int r = 0; r < N; r++)
        assert_int_equal(colo_quantize_row(COLO_Q8_0, hx + (size_t)r * K, hw + rb * r, K), COLO_OK);
    colo_buffer *bx = colo_buffer_alloc(d, (size_t)M * K * 4, err, sizeof err);
    colo_buffer *bw = colo_buffer_alloc(d, rb * N, err, sizeof err);
    colo_buffer *by = colo_buffer_alloc(d, (size_t)M * N * 4 * 2, err, sizeof err);
    assert_true(bx && bw && by);
    float *x = colo_buffer_ptr(bx), *y = colo_buffer_ptr(by), *y2 = y + M * N;
    assert_int_equal(colo_memcpy_h2d(s, x, hx, (size_t)M * K * 4), COLO_OK);
    assert_int_equal(colo_memcpy_h2d(s, colo_buffer_ptr(bw), hw, rb * N), COLO_OK);
    assert_int_equal(colo_op_linear(s, colo_buffer_ptr(bw), COLO_Q8_0, NULL, x, 0, y, 0, 1, N, K), COLO_OK);
    assert_int_equal(colo_stream_sync(s), COLO_OK); /* the scratch is 1 MiB */
    assert_int_equal(colo_stream_graph_begin(s), COLO_OK);
    assert_int_equal(colo_op_linear(s, colo_buffer_ptr(bw), COLO_Q8_0, NULL, x, 0, y, 0, M, N, K), COLO_OK);
    assert_int_equal(colo_stream_graph_end(s, 1), COLO_OK);
    assert_int_equal(colo_stream_sync(s), COLO_OK);
    assert_int_equal(colo_stream_graphs_launched(s), 1);
    assert_int_equal(colo_op_linear(s, colo_buffer_ptr(bw), COLO_Q8_0, NULL, x, 0, y2, 0, M, N, K), COLO_OK);
    assert_int_equal(colo_memcpy_d2h(s, hy, y, (size_t)M * N * 4), COLO_OK);
    assert_int_equal(colo_memcpy_d2h(s, hy2, y2, (size_t)M * N * 4), COLO_OK);
    assert_int_equal(colo_stream_sync(s), COLO_OK);
    assert_memory_equal(hy, hy2, (size_t)M * N * 4);
    assert_false(colo_device_poisoned(d));
    colo_buffer_free(bx), colo_buffer_free(bw), colo_buffer_free(by);
    free(hx), free(hy), free(hy2), free(hw);
    colo_stream_destroy(s);
    colo_device_close(d);
}

/* Staged copies (runtime/staging.h) through two page-locked buffers of 64
 * KiB: pieces of odd sizes, more than two buffers' worth (so each buffer is
 * reused after its event), in the order a model's tensors come, then read
 * back. A buffer refilled before the device read it shows as wrong bytes,
 * and so does a source read after its copy returned (it is overwritten). */
static void test_cuda_staging(void **state)
{
    (void)state;
    colo_device *d = open_dev("cuda");
    colo_stream *s = make_stream(d, COLO_PRIO_NORMAL, 0, 0);
    char err[256];
    unsigned seed = test_seed();
    const size_t n = (size_t)5 << 20;
    colo_buffer *b = colo_buffer_alloc(d, n, err, sizeof err);
    assert_non_null(b);
    unsigned char *src = malloc(n), *back = malloc(n), *piece_buf = malloc(300 << 10), *dev = colo_buffer_ptr(b);
    assert_non_null(piece_buf);
    for (size_t i = 0; i < n; i++)
        src[i] = (unsigned char)rand_r(&seed);
    colo_staging *st = colo_staging_create(s, 64 << 10);
    assert_non_null(st);
    for (size_t off = 0; off < n;) {
        size_t piece = 1 + (size_t)rand_r(&seed) % (300 << 10);
        piece = piece < n - off ? piece : n - off;
        /* The source may be reused once the copy returns: it is overwritten at once. */
        memcpy(piece_buf, src + off, piece);
        assert_int_equal(colo_staging_copy(st, dev + off, piece_buf, piece), COLO_OK);
        memset(piece_buf, 0xa5, piece);
        off += piece;
    }
    assert_int_equal(colo_staging_finish(st), COLO_OK);
    colo_staging_free(st);
    assert_int_equal(colo_memcpy_d2h(s, back, dev, n), COLO_OK);
    assert_int_equal(colo_stream_sync(s), COLO_OK);
    assert_memory_equal(back, src, n);
    free(src);
    free(back);
    free(piece_buf);
    colo_buffer_free(b);
    colo_stream_destroy(s);
    colo_device_close(d);
}

/* Fills [p, p + n) on s with random bytes and reads them back. */
static void roundtrip(colo_stream *s, void *p, size_t n, unsigned *seed)
{
    unsigned char *h = malloc(n), *back = malloc(n);
    assert_non_null(h);
    assert_non_null(back);
    for (size_t i = 0; i < n; i++)
        h[i] = (unsigned char)rand_r(seed);
    assert_int_equal(colo_memcpy_h2d(s, p, h, n), COLO_OK);
    assert_int_equal(colo_memcpy_d2h(s, back, p, n), COLO_OK);
    assert_int_equal(colo_stream_sync(s), COLO_OK);
    assert_memory_equal(back, h, n);
    free(h);
    free(back);
}

/* Elastic arenas on CUDA: reserved address space whose chunks are mapped as
 * they are used (copies and kernels reach them), given back when their last
 * user leaves (what shares a chunk with a user stays), mapped again, and a
 * guarantee taken back from a borrower. Without virtual memory management
 * reserving is refused with a reason. */
static void test_cuda_elastic_arena(void **state)
{
    (void)state;
    colo_device *d = open_dev("cuda");
    char err[256] = "";
    if (!colo_device_can_reserve(d)) {
        assert_null(colo_buffer_reserve(d, 4 * MiB, err, sizeof err));
        assert_non_null(strstr(err, "virtual memory"));
        colo_device_close(d);
        return;
    }
    unsigned seed = test_seed();
    colo_stream *s = make_stream(d, COLO_PRIO_NORMAL, 0, 0);

    /* The buffer level: whole chunks of a power-of-two granularity. */
    colo_buffer *rb = colo_buffer_reserve(d, 5 * MiB, err, sizeof err);
    assert_non_null(rb);
    size_t g = colo_buffer_granularity(rb);
    printf("cuda: chunks of %zu bytes\n", g);
    assert_true(g >= 4096 && (g & (g - 1)) == 0);
    assert_int_equal(colo_buffer_commit(rb, 0, colo_buffer_size(rb)), COLO_OK);
    roundtrip(s, colo_buffer_ptr(rb), colo_buffer_size(rb), &seed);
    colo_buffer_decommit(rb, 0, colo_buffer_size(rb));
    assert_int_equal(colo_buffer_commit(rb, 0, 100), COLO_OK); /* mapped again */
    roundtrip(s, colo_buffer_ptr(rb), 100, &seed);
    colo_buffer_free(rb); /* with a chunk still mapped */

    colo_mem_pool *pool = colo_mem_pool_create(64 * MiB);
    assert_non_null(pool);
    colo_arena *a = colo_arena_create_elastic(d, "a", pool, 32 * MiB, 64 * MiB, err, sizeof err);
    assert_non_null(a);
    colo_arena *b = colo_arena_create_elastic(d, "b", pool, 32 * MiB, 64 * MiB, err, sizeof err);
    assert_non_null(b);

    /* A borrows past its guarantee: three users of adjacent ranges whose
     * ends are not on chunk boundaries, as KV blocks are. */
    size_t bytes = 48 * MiB, lo = 3 * MiB + 100, hi = 19 * MiB + 7;
    char *p = NULL;
    assert_int_equal(colo_arena_reserve(a, bytes, g, (void **)&p), COLO_OK); /* chunk-aligned */
    assert_int_equal(colo_arena_charge(a, bytes), COLO_OK);
    assert_int_equal(colo_arena_commit(a, p, lo), COLO_OK);
    assert_int_equal(colo_arena_commit(a, p + lo, hi - lo), COLO_OK);
    assert_int_equal(colo_arena_commit(a, p + hi, bytes - hi), COLO_OK);
    roundtrip(s, p, bytes, &seed);
    scale_check(d, s, (float *)p, bytes / sizeof(float), &seed); /* a kernel reads and writes it */

    /* The middle user leaves: the chunks it shares with its neighbours keep
     * their bytes. */
    unsigned char *keep = malloc(2 * g), *now = malloc(2 * g);
    assert_non_null(keep);
    assert_non_null(now);
    size_t at_lo = (lo - 1) & ~(g - 1), at_hi = hi & ~(g - 1);
    assert_int_equal(colo_memcpy_d2h(s, keep, p + at_lo, g), COLO_OK);
    assert_int_equal(colo_memcpy_d2h(s, keep + g, p + at_hi, g), COLO_OK);
    assert_int_equal(colo_stream_sync(s), COLO_OK);
    colo_arena_decommit(a, p + lo, hi - lo);
    assert_int_equal(colo_memcpy_d2h(s, now, p + at_lo, g), COLO_OK);
    assert_int_equal(colo_memcpy_d2h(s, now + g, p + at_hi, g), COLO_OK);
    assert_int_equal(colo_stream_sync(s), COLO_OK);
    assert_memory_equal(now, keep, g);
    assert_memory_equal(now + g, keep + g, g);
    free(keep);
    free(now);
    /* It comes back: mapped again, usable again. */
    assert_int_equal(colo_arena_commit(a, p + lo, hi - lo), COLO_OK);
    roundtrip(s, p, bytes, &seed);

    /* B wants its guarantee: A is asked for what it borrowed, gives it
     * back (its last user of the tail leaves), and B's memory is usable. */
    char *q = NULL;
    assert_int_equal(colo_arena_reserve(b, 32 * MiB, 0, (void **)&q), COLO_OK);
    assert_int_equal(colo_arena_charge(b, 32 * MiB), COLO_EAGAIN);
    assert_int_equal(colo_arena_reclaim_wanted_bytes(a), 16 * MiB);
    assert_int_equal(colo_stream_sync(s), COLO_OK); /* nothing queued still uses the tail */
    colo_arena_decommit(a, p + hi, bytes - hi);
    colo_arena_uncharge(a, 16 * MiB);
    assert_int_equal(colo_arena_reclaim_wanted_bytes(a), 0);
    assert_int_equal(colo_arena_charge(b, 32 * MiB), COLO_OK);
    assert_int_equal(colo_arena_commit(b, q, 32 * MiB), COLO_OK);
    roundtrip(s, q, 32 * MiB, &seed);
    roundtrip(s, p, hi, &seed); /* A's first two users still work */

    /* Ordinary allocations of an elastic arena are mapped while they live. */
    colo_arena_decommit(b, q, 32 * MiB);
    colo_arena_uncharge(b, 32 * MiB);
    colo_arena_free(b, q);
    void *w = NULL;
    assert_int_equal(colo_arena_alloc(b, 6 * MiB + 256, 0, &w), COLO_OK);
    scale_check(d, s, w, (6 * MiB + 256) / sizeof(float), &seed);
    colo_arena_free(b, w);

    assert_int_equal(colo_stream_sync(s), COLO_OK);
    colo_arena_decommit(a, p, lo); /* the same ranges as their commits */
    colo_arena_decommit(a, p + lo, hi - lo);
    colo_arena_uncharge(a, 32 * MiB);
    colo_arena_free(a, p);
    colo_arena_destroy(a);
    colo_arena_destroy(b);
    colo_mem_pool_destroy(pool);
    assert_false(colo_device_poisoned(d));
    colo_stream_destroy(s);
    colo_device_close(d);
}

/* An executor thread: it never called CUDA before it maps memory, copies,
 * launches a kernel and cuBLAS on a stream another thread created. cmocka
 * asserts only on the main thread, so the thread says what failed. */
typedef struct {
    colo_device *d;
    colo_stream *s;
    colo_arena *arena; /* elastic, or NULL */
    unsigned seed;
    const char *failed; /* NULL: all went well */
} executor;

#define EXEC_CHECK(x, cond)                                                                                        \
    do {                                                                                                           \
        if (!(cond)) {                                                                                             \
            (x)->failed = #cond;                                                                                   \
            goto out;                                                                                              \
        }                                                                                                          \
    } while (0)

static void *executor_main(void *arg)
{
    executor *x = arg;
    enum { N = 64, K = 48 }; /* a (N, K) . b (K, N) gemm, then the result scaled */
    size_t bytes = 8 * MiB;
    char err[256];
    char *p = NULL;
    bool charged = false, committed = false;
    colo_buffer *own = NULL;
    float *a = malloc(N * K * 4), *b = malloc(K * N * 4), *c = malloc(N * N * 4);
    if (!a || !b || !c) {
        x->failed = "host memory";
        goto out;
    }
    if (x->arena) { /* the driver's mapping calls come first on this thread */
        EXEC_CHECK(x, colo_arena_reserve(x->arena, bytes, 0, (void **)&p) == COLO_OK);
        EXEC_CHECK(x, colo_arena_charge(x->arena, bytes) == COLO_OK);
        charged = true;
        EXEC_CHECK(x, colo_arena_commit(x->arena, p, bytes) == COLO_OK);
        committed = true;
    } else {
        own = colo_buffer_alloc(x->d, bytes, err, sizeof err);
        EXEC_CHECK(x, own != NULL);
        p = colo_buffer_ptr(own);
    }
    for (int i = 0; i < N * K; i++)
        a[i] = (float)((int)(rand_r(&x->seed) % 9) - 4);
    for (int i = 0; i < K * N; i++)
        b[i] = (float)((int)(rand_r(&x->seed) % 9) - 4);
    float *da = (float *)p, *db = da + N * K, *dc = db + K * N;
    EXEC_CHECK(x, colo_memcpy_h2d(x->s, da, a, N * K * 4) == COLO_OK);
    EXEC_CHECK(x, colo_memcpy_h2d(x->s, db, b, K * N * 4) == COLO_OK);
    EXEC_CHECK(x, colo_op_gemm(x->s, false, false, N, N, K, 1.0f, da, K, 0, db, N, 0, COLO_F32, 0.0f, dc, N, 0, 1) ==
                      COLO_OK);
    EXEC_CHECK(x, colo_op_scale(x->s, dc, 2.0f, N * N) == COLO_OK);
    EXEC_CHECK(x, colo_memcpy_d2h(x->s, c, dc, N * N * 4) == COLO_OK);
    EXEC_CHECK(x, colo_stream_sync(x->s) == COLO_OK);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            double ref = 0; /* small integers: exact in F32 */
            for (int l = 0; l < K; l++)
                ref += (double)a[i * K + l] * b[l * N + j];
            EXEC_CHECK(x, c[i * N + j] == (float)(2 * ref));
        }
out:
    if (committed)
        colo_arena_decommit(x->arena, p, bytes);
    if (charged)
        colo_arena_uncharge(x->arena, bytes);
    if (x->arena && p)
        colo_arena_free(x->arena, p);
    colo_buffer_free(own);
    free(a);
    free(b);
    free(c);
    return NULL;
}

static void test_cuda_stream_on_another_thread(void **state)
{
    (void)state;
    colo_device *d = open_dev("cuda");
    char err[256] = "";
    colo_mem_pool *pool = NULL;
    executor x = {.d = d, .s = make_stream(d, COLO_PRIO_HIGH, 0, 0), .seed = test_seed()};
    if (colo_device_can_reserve(d)) {
        pool = colo_mem_pool_create(16 * MiB);
        x.arena = colo_arena_create_elastic(d, "exec", pool, 16 * MiB, 16 * MiB, err, sizeof err);
        assert_non_null(x.arena);
    }
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, executor_main, &x), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    if (x.failed)
        fail_msg("executor thread: %s", x.failed);
    assert_false(colo_device_poisoned(d));
    colo_stream_destroy(x.s);
    colo_arena_destroy(x.arena);
    colo_mem_pool_destroy(pool);
    colo_device_close(d);
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
        cmocka_unit_test(test_cuda_error_flag),       cmocka_unit_test(test_cuda_failure_is_not_sticky),
        cmocka_unit_test(test_cuda_graphs),           cmocka_unit_test(test_cuda_graph_grows_scratch),
        cmocka_unit_test(test_cuda_staging),
        cmocka_unit_test(test_cuda_elastic_arena),    cmocka_unit_test(test_cuda_stream_on_another_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
