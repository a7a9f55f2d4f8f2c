/* colo-bench-kernels: GFLOP/s of the F32 matmul and GB/s of the quantized
 * matrix-vector product on a device. A benchmark, not a test: it prints,
 * and asserts nothing about speed.
 *
 *   colo-bench-kernels [--device cpu|cuda] [--threads N] [--seconds S] [--attention] [--prefill] [--matvec]
 *                      [--dots] [--rows] [--bandwidth] [--types q4_k,q6_k,...]
 *
 * --attention: only the paged attention of decode steps; --prefill: only
 * a 512-token prefill's products and attention; --matvec: only the
 * matrix-vector products; --dots: only one thread's int8 dot products;
 * --bandwidth: only the host's memory read bandwidth (the CPU's decode is
 * held to it: each token reads every weight once);
 * --types: only these weight types in the mat-vec, rows and dot tables. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <strings.h>

#include "kernels/ops.h"
#include "kernels/quant.h"
#include "runtime/backend.h"
#include "runtime/clock.h"
#include "kernels/cpu/cpu_kernels.h" /* colo_cpu_int8_max_rows */

static double now_s(void) { return (double)colo_now_ns() * 1e-9; }

static void *upload(colo_stream *s, colo_device *dev, const void *host, size_t bytes, colo_buffer **keep)
{
    char err[256];
    *keep = colo_buffer_alloc(dev, bytes, err, sizeof err);
    if (!*keep) {
        fprintf(stderr, "bench: %s\n", err);
        exit(1);
    }
    colo_memcpy_h2d(s, colo_buffer_ptr(*keep), host, bytes);
    colo_stream_sync(s);
    return colo_buffer_ptr(*keep);
}

/* Weights of every timed call come from memory, not the cache: calls go
 * round copies of the weight that together fill at least this many bytes
 * (the H100's L2 is 50 MB; a CPU's last-level cache is smaller). */
#define BENCH_WORKING_SET ((size_t)256 << 20)

/* Random n x k weights of type t (seeded), quantized once per shape and
 * type: the same weights serve every row count, and a run does not spend
 * its time quantizing 8B-model layers again and again. */
static const unsigned char *host_weights(colo_dtype t, int n, int k)
{
    static struct {
        colo_dtype t;
        int n, k;
        unsigned char *w;
    } cache[64];
    static int n_cache;
    for (int i = 0; i < n_cache; i++)
        if (cache[i].t == t && cache[i].n == n && cache[i].k == k)
            return cache[i].w;
    size_t rb = colo_dtype_row_bytes(t, k);
    unsigned char *w = malloc(rb * (size_t)n);
    float *row = malloc((size_t)k * sizeof(float));
    if (!w || !row) {
        fprintf(stderr, "bench: out of host memory\n");
        exit(1);
    }
    srand(1);
    for (int r = 0; r < n; r++) {
        for (int j = 0; j < k; j++)
            row[j] = (float)rand() / (float)RAND_MAX - 0.5f;
        if (colo_quantize_row(t, row, w + rb * (size_t)r, k) != COLO_OK)
            memset(w + rb * (size_t)r, 0x11, rb);
    }
    free(row);
    if (n_cache < (int)(sizeof cache / sizeof *cache))
        cache[n_cache].t = t, cache[n_cache].n = n, cache[n_cache].k = k, cache[n_cache++].w = w;
    /* else kept for the run: a benchmark's few shapes never get here */
    return w;
}

/* Runs linear m x n x k with weights of type t for about seconds; returns
 * seconds per call (best of batches), or a negative value when the op fails. */
static double time_linear_at(colo_device *dev, colo_stream *s, colo_dtype t, int m, int n, int k, double seconds,
                             bool from_memory)
{
    size_t rb = colo_dtype_row_bytes(t, k), wb = rb * (size_t)n;
    int copies = from_memory ? (int)((BENCH_WORKING_SET + wb - 1) / wb) : 1;
    copies = copies < 1 ? 1 : copies > 1024 ? 1024 : copies;
    const unsigned char *w = host_weights(t, n, k);
    float *x = malloc((size_t)m * k * sizeof(float));
    srand(1);
    for (int i = 0; i < m * k; i++)
        x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    char err[256];
    colo_buffer *bw = colo_buffer_alloc(dev, wb * (size_t)copies, err, sizeof err), *bx, *by;
    if (!bw) {
        fprintf(stderr, "bench: %s\n", err);
        exit(1);
    }
    unsigned char *dw = colo_buffer_ptr(bw);
    colo_memcpy_h2d(s, dw, w, wb);
    for (int c = 1; c < copies; c++)
        colo_memcpy_d2d(s, dw + wb * (size_t)c, dw, wb);
    float *dx = upload(s, dev, x, (size_t)m * k * sizeof(float), &bx);
    by = colo_buffer_alloc(dev, (size_t)m * n * sizeof(float), err, sizeof err);
    float *dy = colo_buffer_ptr(by);
    double best = -1;
    if (colo_op_linear(s, dw, t, NULL, dx, 0, dy, 0, m, n, k) == COLO_OK && colo_stream_sync(s) == COLO_OK) {
        double t0 = now_s();
        best = 1e30;
        int c = 0;
        do { /* best of batches of 8 calls: the machine may be shared */
            double b0 = now_s();
            for (int i = 0; i < 8; i++, c = (c + 1) % copies)
                colo_op_linear(s, dw + wb * (size_t)c, t, NULL, dx, 0, dy, 0, m, n, k);
            if (colo_stream_sync(s) != COLO_OK) {
                best = -1;
                break;
            }
            double el = (now_s() - b0) / 8;
            best = el < best ? el : best;
        } while (now_s() - t0 < seconds);
    }
    if (best < 0)
        fprintf(stderr, "bench: linear %s m=%d n=%d k=%d failed on this device\n", colo_dtype_name(t), m, n, k);
    colo_buffer_free(bw), colo_buffer_free(bx), colo_buffer_free(by);
    free(x);
    return best;
}

/* Weights from memory (mat-vec, decode rows) or, for the compute of few
 * rows, the same weight in cache at every call. */
static double time_linear(colo_device *dev, colo_stream *s, colo_dtype t, int m, int n, int k, double seconds)
{
    return time_linear_at(dev, s, t, m, n, k, seconds, true);
}

static double time_linear_cached(colo_device *dev, colo_stream *s, colo_dtype t, int m, int n, int k, double seconds)
{
    return time_linear_at(dev, s, t, m, n, k, seconds, false);
}

/* Device-to-device copy of BENCH_WORKING_SET bytes: GB/s counting the bytes
 * read and written, the memory bandwidth a kernel can hope for. */
static double copy_gbs(colo_device *dev, colo_stream *s, double seconds)
{
    char err[256];
    colo_buffer *b = colo_buffer_alloc(dev, 2 * BENCH_WORKING_SET, err, sizeof err);
    if (!b)
        return 0;
    unsigned char *p = colo_buffer_ptr(b);
    colo_memset(s, p, 1, 2 * BENCH_WORKING_SET);
    colo_stream_sync(s);
    double t0 = now_s(), best = 1e30;
    do {
        double b0 = now_s();
        colo_memcpy_d2d(s, p + BENCH_WORKING_SET, p, BENCH_WORKING_SET);
        colo_stream_sync(s);
        double el = now_s() - b0;
        best = el < best ? el : best;
    } while (now_s() - t0 < seconds);
    colo_buffer_free(b);
    return 2.0 * (double)BENCH_WORKING_SET / best / 1e9;
}

/* ---- the host's memory read bandwidth: threads each summing their share of
 * a buffer far larger than the caches, as decode streams the weights ---- */
#define READ_BYTES ((size_t)1 << 30)

typedef struct {
    const uint64_t *p;
    size_t n;     /* 64-bit words */
    uint64_t sum; /* (kept, so that the reads are not optimised away) */
} read_share;

static void *read_share_run(void *arg)
{
    read_share *r = arg;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= r->n; i += 4)
        s0 += r->p[i], s1 += r->p[i + 1], s2 += r->p[i + 2], s3 += r->p[i + 3];
    r->sum = s0 + s1 + s2 + s3;
    return NULL;
}

/* GB/s read by `threads` threads at once, best of passes for about seconds;
 * 0 when the buffer or a thread cannot be had. */
static double read_gbs(int threads, double seconds)
{
    if (threads < 1)
        threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1 || threads > 256)
        threads = 1;
    uint64_t *buf = malloc(READ_BYTES);
    read_share *sh = calloc((size_t)threads, sizeof *sh);
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    double best = 0;
    if (!buf || !sh || !tid)
        goto out;
    memset(buf, 1, READ_BYTES);
    size_t words = READ_BYTES / 8, per = words / (size_t)threads;
    double t0 = now_s();
    do {
        double b0 = now_s();
        int started = 0;
        for (int i = 0; i < threads; i++, started++) {
            sh[i] = (read_share){.p = buf + per * (size_t)i, .n = per};
            if (pthread_create(&tid[i], NULL, read_share_run, &sh[i]) != 0)
                break;
        }
        for (int i = 0; i < started; i++)
            pthread_join(tid[i], NULL);
        if (started < threads) {
            best = 0;
            break;
        }
        double gbs = (double)(per * (size_t)threads * 8) / (now_s() - b0) / 1e9;
        best = gbs > best ? gbs : best;
    } while (now_s() - t0 < seconds);
out:
    free(buf), free(sh), free(tid);
    return best;
}

/* Strided batched gemm (batch, m, n, k) with A and B of type ab (F32 or
 * F16) for about seconds; best seconds per call, negative when it fails. */
static double time_gemm_type(colo_device *dev, colo_stream *s, colo_dtype ab, int batch, int m, int n, int k,
                             double seconds)
{
    size_t na = (size_t)batch * m * k, nb = (size_t)batch * k * n, nc = (size_t)batch * m * n;
    size_t es = ab == COLO_F32 ? sizeof(float) : 2;
    float *h = malloc((na + nb) * sizeof(float));
    for (size_t i = 0; i < na + nb; i++)
        h[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    unsigned char *hb = (unsigned char *)h;
    if (ab != COLO_F32) { /* same values, stored as F16 */
        hb = malloc((na + nb) * es);
        colo_quantize_row(ab, h, hb, (int64_t)(na + nb));
    }
    colo_buffer *ba, *bc;
    unsigned char *da = upload(s, dev, hb, (na + nb) * es, &ba), *db = da + na * es;
    char err[256];
    bc = colo_buffer_alloc(dev, nc * sizeof(float), err, sizeof err);
    float *dc = colo_buffer_ptr(bc);
    double best = -1;
    if (colo_op_gemm(s, false, false, m, n, k, 1.0f, da, k, (int64_t)m * k, db, n, (int64_t)k * n, ab, 0.0f, dc, n,
                     (int64_t)m * n, batch) == COLO_OK &&
        colo_stream_sync(s) == COLO_OK) {
        double t0 = now_s();
        best = 1e30;
        do {
            double b0 = now_s();
            for (int i = 0; i < 4; i++)
                colo_op_gemm(s, false, false, m, n, k, 1.0f, da, k, (int64_t)m * k, db, n, (int64_t)k * n, ab, 0.0f,
                             dc, n, (int64_t)m * n, batch);
            colo_stream_sync(s);
            double el = (now_s() - b0) / 4;
            best = el < best ? el : best;
        } while (now_s() - t0 < seconds);
    }
    colo_buffer_free(ba), colo_buffer_free(bc);
    if (hb != (unsigned char *)h)
        free(hb);
    free(h);
    return best;
}

static double time_gemm(colo_device *dev, colo_stream *s, int batch, int m, int n, int k, double seconds)
{
    return time_gemm_type(dev, s, COLO_F32, batch, m, n, k, seconds);
}

/* One thread's cost of the int8 dot product of type t on cache-resident
 * data (64 weight rows of 4096, nr activation rows): ns per 32 weight
 * elements and activation row. The kernel alone, without the pool. */
static double dot_ns_per_block(colo_dtype t, int nr, double seconds)
{
    enum { N = 64, K = 4096 };
    size_t rb = colo_dtype_row_bytes(t, K);
    unsigned char *w = malloc(rb * N);
    float *row = malloc(K * sizeof(float));
    colo_blk_q8x *xq = malloc((size_t)COLO_CPU_DOT_ROWS * (K / 32) * sizeof *xq);
    colo_blk_q8k *xk = malloc((size_t)COLO_CPU_DOT_ROWS * (K / 256) * sizeof *xk);
    for (int r = 0; r < N; r++) {
        for (int j = 0; j < K; j++)
            row[j] = (float)rand() / (float)RAND_MAX - 0.5f;
        colo_quantize_row(t, row, w + rb * r, K);
    }
    for (int r = 0; r < COLO_CPU_DOT_ROWS; r++) {
        for (int j = 0; j < K; j++)
            row[j] = (float)rand() / (float)RAND_MAX - 0.5f;
        colo_cpu_quantize_q8x(row, xq + (size_t)r * (K / 32), K);
        colo_cpu_quantize_q8k(row, xk + (size_t)r * (K / 256), K);
    }
    colo_cpu_vec_dot_fn dot = colo_cpu_vec_dot_for(t);
    colo_cpu_vec_dot_k_fn dot_k = colo_cpu_vec_dot_k_for(t);
    float out[COLO_CPU_DOT_ROWS];
    volatile float sink = 0;
    double t0 = now_s(), best = 1e30;
    do {
        double b0 = now_s();
        for (int r = 0; r < N; r++) {
            if (dot_k)
                dot_k(K, w + rb * r, xk, K / 256, nr, out);
            else
                dot(K, w + rb * r, xq, K / 32, nr, out);
            sink += out[0];
        }
        double el = now_s() - b0;
        best = el < best ? el : best;
    } while (now_s() - t0 < seconds);
    (void)sink;
    free(w), free(row), free(xq), free(xk);
    return best / ((double)N * (K / 32) * nr) * 1e9;
}

/* Prefill-sized products on the GPU: colo's linear for each weight type
 * against cuBLAS's own F32 and F16 GEMM (colo_op_gemm) at the same shape,
 * n = k = 4096, in TFLOP/s. */
static void bench_prefill(colo_device *dev, colo_stream *s, double seconds)
{
    const colo_dtype lt[] = {COLO_Q4_0, COLO_Q4_1, COLO_Q8_0, COLO_Q4_K, COLO_Q5_K, COLO_Q6_K, COLO_F16, COLO_F32};
    const int ms[] = {16, 128, 512, 2048};
    printf("\n%-34s", "prefill (n=k=4096), TFLOP/s");
    for (int i = 0; i < 4; i++)
        printf(" %7s%-4d", "m=", ms[i]);
    printf("\n");
    for (int ti = -2; ti < (int)(sizeof lt / sizeof *lt); ti++) {
        printf("  %-32s", ti == -2 ? "cuBLAS gemm F32" : ti == -1 ? "cuBLAS gemm F16" : colo_dtype_name(lt[ti]));
        for (int i = 0; i < 4; i++) {
            double t = ti < 0 ? time_gemm_type(dev, s, ti == -2 ? COLO_F32 : COLO_F16, 1, ms[i], 4096, 4096, seconds)
                              : time_linear_cached(dev, s, lt[ti], ms[i], 4096, 4096, seconds);
            if (t > 0)
                printf(" %11.1f", 2.0 * ms[i] * 4096.0 * 4096.0 / t / 1e12);
            else
                printf(" %11s", "-");
        }
        printf("\n");
    }
}

/* Paged attention of a decode step: n_seq sequences of depth keys each
 * (head shape n_head / n_kv x head_dim, blocks of 16 slots scattered
 * through the cache, K and V of kv_type: F16, or Q8_0 quantized per row as
 * kv_store writes it) for about seconds; best seconds per call. As in a
 * model, calls go to the caches of several layers in turn (up to 30, at
 * most 96 MiB in all), so that KV rows come from memory rather than the
 * cache once they are larger than it. */
static double time_attention(colo_device *dev, colo_stream *s, colo_dtype kv_type, int n_seq, int depth, int n_head,
                             int n_kv, int hd, double seconds)
{
    enum { BS = 16 };
    int kv_dim = n_kv * hd, max_blocks = (depth + BS - 1) / BS, n_blocks = n_seq * max_blocks;
    size_t rb = colo_dtype_row_bytes(kv_type, kv_dim), n_rows = (size_t)n_blocks * BS, cache_bytes = n_rows * rb;
    int layers = (int)((96u << 20) / (cache_bytes * 2));
    layers = layers < 1 ? 1 : layers > 30 ? 30 : layers;
    unsigned char *kv = malloc(cache_bytes * 2 * layers);
    float *row = malloc((size_t)kv_dim * sizeof(float));
    float *q = malloc((size_t)n_seq * n_head * hd * sizeof(float));
    int32_t *table = malloc((size_t)n_blocks * sizeof(int32_t)), *seq = malloc((size_t)n_seq * sizeof(int32_t));
    int32_t *pos = malloc((size_t)n_seq * sizeof(int32_t));
    if (!kv || !row || !q || !table || !seq || !pos) {
        fprintf(stderr, "bench: out of host memory\n");
        exit(1);
    }
    for (size_t r = 0; r < n_rows * 2 * layers; r++) {
        for (int i = 0; i < kv_dim; i++)
            row[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        colo_quantize_row(kv_type, row, kv + r * rb, kv_dim);
    }
    for (int i = 0; i < n_seq * n_head * hd; i++)
        q[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    for (int i = 0; i < n_blocks; i++) /* block i of sequence i % n_seq: the sequences' blocks interleave */
        table[(i % n_seq) * max_blocks + i / n_seq] = i;
    for (int i = 0; i < n_seq; i++)
        seq[i] = i, pos[i] = depth - 1;
    colo_buffer *bkv, *bq, *bt, *bs, *bp, *bo;
    unsigned char *dkv = upload(s, dev, kv, cache_bytes * 2 * layers, &bkv);
    float *dq = upload(s, dev, q, (size_t)n_seq * n_head * hd * sizeof(float), &bq);
    colo_attn_desc d = {.n_tokens = n_seq, .n_head = n_head, .n_kv_head = n_kv, .head_dim = hd, .block_size = BS,
                        .max_blocks = max_blocks, .max_pos = depth - 1, .scale = 0.125f, .kv_type = kv_type,
                        .tok_seq = upload(s, dev, seq, (size_t)n_seq * sizeof(int32_t), &bs),
                        .tok_pos = upload(s, dev, pos, (size_t)n_seq * sizeof(int32_t), &bp),
                        .block_table = upload(s, dev, table, (size_t)n_blocks * sizeof(int32_t), &bt)};
    float *dout = upload(s, dev, q, (size_t)n_seq * n_head * hd * sizeof(float), &bo);
    colo_op_attention(s, &d, dq, dkv, dkv + cache_bytes, dout); /* warm-up */
    colo_stream_sync(s);
    double t0 = now_s(), best = 1e30;
    do {
        double b0 = now_s();
        for (int l = 0; l < layers; l++)
            colo_op_attention(s, &d, dq, dkv + 2 * l * cache_bytes, dkv + (2 * l + 1) * cache_bytes, dout);
        colo_stream_sync(s);
        double el = (now_s() - b0) / layers;
        best = el < best ? el : best;
    } while (now_s() - t0 < seconds);
    colo_buffer_free(bkv), colo_buffer_free(bq), colo_buffer_free(bt), colo_buffer_free(bs), colo_buffer_free(bp);
    colo_buffer_free(bo);
    free(kv), free(row), free(q), free(table), free(seq), free(pos);
    return best;
}

static bool type_wanted(colo_dtype t);

/* Causal attention of a prefill: one sequence of n tokens at positions
 * 0..n - 1 over its own keys (head shape n_head / n_kv x head_dim, F16
 * cache in blocks of 16 slots, window 0 = all), for about seconds; best
 * seconds per call. */
static double time_attention_prefill(colo_device *dev, colo_stream *s, int n, int n_head, int n_kv, int hd,
                                     int window, double seconds)
{
    enum { BS = 16 };
    colo_dtype kv_type = COLO_F16;
    int kv_dim = n_kv * hd, max_blocks = (n + BS - 1) / BS;
    size_t rb = colo_dtype_row_bytes(kv_type, kv_dim), cache_bytes = (size_t)max_blocks * BS * rb;
    size_t q_floats = (size_t)n * n_head * hd;
    unsigned char *kv = malloc(cache_bytes * 2);
    float *row = malloc((size_t)kv_dim * sizeof(float)), *q = malloc(q_floats * sizeof(float));
    int32_t *table = malloc((size_t)max_blocks * sizeof(int32_t)), *seq = malloc((size_t)n * sizeof(int32_t));
    int32_t *pos = malloc((size_t)n * sizeof(int32_t));
    if (!kv || !row || !q || !table || !seq || !pos) {
        fprintf(stderr, "bench: out of host memory\n");
        exit(1);
    }
    for (size_t r = 0; r < (size_t)max_blocks * BS * 2; r++) {
        for (int i = 0; i < kv_dim; i++)
            row[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        colo_quantize_row(kv_type, row, kv + r * rb, kv_dim);
    }
    for (size_t i = 0; i < q_floats; i++)
        q[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    for (int i = 0; i < max_blocks; i++)
        table[i] = i;
    for (int i = 0; i < n; i++)
        seq[i] = 0, pos[i] = i;
    colo_buffer *bkv, *bq, *bt, *bs, *bp, *bo;
    unsigned char *dkv = upload(s, dev, kv, cache_bytes * 2, &bkv);
    float *dq = upload(s, dev, q, q_floats * sizeof(float), &bq);
    colo_attn_desc d = {.n_tokens = n, .n_head = n_head, .n_kv_head = n_kv, .head_dim = hd, .block_size = BS,
                        .max_blocks = max_blocks, .max_pos = n - 1, .scale = 0.125f, .kv_type = kv_type,
                        .tok_seq = upload(s, dev, seq, (size_t)n * sizeof(int32_t), &bs),
                        .tok_pos = upload(s, dev, pos, (size_t)n * sizeof(int32_t), &bp),
                        .block_table = upload(s, dev, table, (size_t)max_blocks * sizeof(int32_t), &bt),
                        .window = window};
    float *dout = upload(s, dev, q, q_floats * sizeof(float), &bo);
    double best = -1;
    if (colo_op_attention(s, &d, dq, dkv, dkv + cache_bytes, dout) == COLO_OK && colo_stream_sync(s) == COLO_OK) {
        double t0 = now_s();
        best = 1e30;
        do {
            double b0 = now_s();
            colo_op_attention(s, &d, dq, dkv, dkv + cache_bytes, dout);
            colo_stream_sync(s);
            double el = now_s() - b0;
            best = el < best ? el : best;
        } while (now_s() - t0 < seconds);
    }
    colo_buffer_free(bkv), colo_buffer_free(bq), colo_buffer_free(bt), colo_buffer_free(bs), colo_buffer_free(bp);
    colo_buffer_free(bo);
    free(kv), free(row), free(q), free(table), free(seq), free(pos);
    return best;
}

/* What a prefill of 512 tokens spends its time on: the products of
 * SmolLM2's and Gemma 3 270M's layers (the shapes and formats of their
 * GGUF files, weights from memory) and their causal attention. GMAC/s:
 * multiply-adds a second (attention: both products, q.k and weights.v). */
static void bench_prefill_cpu(colo_device *dev, colo_stream *s, double seconds)
{
    enum { N = 512 };
    printf("\n%-44s %10s %10s\n", "prefill of 512 tokens", "ms/call", "GMAC/s");
    const struct {
        const char *what;
        colo_dtype t;
        int n, k;
    } products[] = {
        {"SmolLM2 q/gate/up", COLO_Q4_1, 1536, 576}, {"SmolLM2 down", COLO_Q4_1, 576, 1536},
        {"Gemma 3 gate/up", COLO_Q5_0, 2048, 640},  {"Gemma 3 attn_output", COLO_Q4_K, 640, 1024},
        {"Gemma 3 down", COLO_Q6_K, 640, 2048},     {"Gemma 3 attn_v", COLO_Q8_0, 256, 640},
    };
    for (size_t i = 0; i < sizeof products / sizeof products[0]; i++) {
        if (!type_wanted(products[i].t))
            continue;
        double t = time_linear(dev, s, products[i].t, N, products[i].n, products[i].k, seconds);
        printf("  %-5s %-20s n=%-4d k=%-4d %10.3f %10.1f\n", colo_dtype_name(products[i].t), products[i].what,
               products[i].n, products[i].k, t * 1e3, (double)N * products[i].n * products[i].k / t / 1e9);
    }
    const int shapes[][3] = {{9, 3, 64}, {4, 1, 256}};
    for (int h = 0; h < 2; h++) {
        int n_head = shapes[h][0], n_kv = shapes[h][1], hd = shapes[h][2];
        double t = time_attention_prefill(dev, s, N, n_head, n_kv, hd, 0, seconds);
        double macs = 2.0 * n_head * hd * ((double)N * (N + 1) / 2);
        printf("  attention F16 heads %d/%d x %-3d %20s %10.3f %10.1f\n", n_head, n_kv, hd, "", t * 1e3,
               macs / t / 1e9);
    }
}

/* The attention table: SmolLM2's heads (9 / 3 x 64) and Gemma 3 270M's
 * (4 / 1 x 256), one sequence at several depths and 32 sequences, with F16
 * and Q8_0 caches. KV GB/s: the K and V bytes of the keys read. */
static void bench_attention(colo_device *dev, colo_stream *s, double seconds)
{
    printf("\n%-40s %12s %10s %10s\n", "attention (decode)", "us/call", "ns/key", "KV GB/s");
    const int shapes[][3] = {{9, 3, 64}, {4, 1, 256}};
    const int cases[][2] = {{1, 256}, {1, 1024}, {1, 2000}, {8, 256}, {32, 256}, {32, 1024}};
    const colo_dtype types[] = {COLO_F16, COLO_Q8_0};
    for (int h = 0; h < 2; h++)
        for (int c = 0; c < 6; c++)
            for (int k = 0; k < 2; k++) {
                int n_head = shapes[h][0], n_kv = shapes[h][1], hd = shapes[h][2];
                double t = time_attention(dev, s, types[k], cases[c][0], cases[c][1], n_head, n_kv, hd, seconds);
                double keys = (double)cases[c][0] * cases[c][1]; /* per KV head: ns per key and KV head below */
                double bytes = keys * n_kv * (double)colo_dtype_row_bytes(types[k], hd) * 2;
                printf("  %-4s heads %d/%d x %-3d seqs %-2d depth %-5d %10.1f %10.3f %10.2f\n",
                       colo_dtype_name(types[k]), n_head, n_kv, hd, cases[c][0], cases[c][1], t * 1e6,
                       t * 1e9 / (keys * n_kv), bytes / t / 1e9);
            }
}

/* The element types the mat-vec, rows and dot benchmarks run; the last
 * three (F16, BF16, F32) have no int8 path. */
static const colo_dtype bench_types[] = {COLO_Q4_0, COLO_Q4_1, COLO_Q5_0, COLO_Q5_1, COLO_Q8_0, COLO_Q2_K, COLO_Q3_K,
                                         COLO_Q4_K, COLO_Q5_K, COLO_Q6_K, COLO_F16,  COLO_BF16, COLO_F32};
#define N_BENCH_TYPES ((int)(sizeof bench_types / sizeof *bench_types))

/* --types: a comma-separated list of type names, or NULL for every type. */
static const char *only_types;

static bool type_wanted(colo_dtype t)
{
    if (!only_types)
        return true;
    const char *name = colo_dtype_name(t), *p = only_types;
    size_t len = strlen(name);
    while (*p) {
        size_t n = strcspn(p, ",");
        if (n == len && !strncasecmp(p, name, n))
            return true;
        p += n + (p[n] == ',');
    }
    return false;
}

/* Whether every name in --types is a benchmarked type. */
static bool types_known(void)
{
    for (const char *p = only_types; p && *p;) {
        size_t n = strcspn(p, ",");
        bool found = false;
        for (int ti = 0; ti < N_BENCH_TYPES && !found; ti++)
            found = strlen(colo_dtype_name(bench_types[ti])) == n && !strncasecmp(p, colo_dtype_name(bench_types[ti]), n);
        if (!found) {
            fprintf(stderr, "bench: --types: unknown or unbenchmarked type '%.*s'\n", (int)n, p);
            return false;
        }
        p += n + (p[n] == ',');
    }
    return true;
}

/* F32 products: gemm, linear, and on CUDA a prefill's. */
static void bench_products(colo_device *dev, colo_stream *s, const colo_device_info *info, double seconds)
{
    printf("%-34s %12s %10s\n", "gemm (F32, batch x m x n x k)", "ms/call", "GFLOP/s");
    const int gm[][4] = {{1, 256, 576, 576}, {1, 512, 1024, 1024}, {9, 128, 128, 64}, {12, 128, 64, 128}};
    for (int i = 0; i < 4; i++) {
        double t = time_gemm(dev, s, gm[i][0], gm[i][1], gm[i][2], gm[i][3], seconds);
        printf("  %2d x m=%-4d n=%-5d k=%-5d %10.3f %10.1f\n", gm[i][0], gm[i][1], gm[i][2], gm[i][3], t * 1e3,
               2.0 * gm[i][0] * gm[i][1] * gm[i][2] * gm[i][3] / t / 1e9);
    }
    printf("\n%-34s %12s %10s\n", "linear (F32 weights)", "ms/call", "GFLOP/s");
    const int mm[][3] = {{64, 576, 576}, {128, 1536, 576}, {256, 576, 1536}, {512, 1024, 1024}};
    for (int i = 0; i < 4; i++) {
        double t = time_linear_cached(dev, s, COLO_F32, mm[i][0], mm[i][1], mm[i][2], seconds);
        printf("  m=%-4d n=%-5d k=%-5d %15.3f %10.1f\n", mm[i][0], mm[i][1], mm[i][2], t * 1e3,
               2.0 * mm[i][0] * mm[i][1] * mm[i][2] / t / 1e9);
    }
    if (info->kind == COLO_BACKEND_CUDA)
        bench_prefill(dev, s, seconds);
}

/* Mat-vec of every type: GB/s = weight bytes / time, against what a
 * device-to-device copy moves. */
static void bench_matvec(colo_device *dev, colo_stream *s, double seconds)
{
    double copy = copy_gbs(dev, s, seconds);
    printf("\ndevice-to-device copy: %.1f GB/s (bytes read and written)\n", copy);
    colo_device_info info;
    colo_device_get_info(dev, &info);
    if (info.kind == COLO_BACKEND_CPU)
        printf("memory read: %.1f GB/s (%d threads, 1 GiB)\n", read_gbs(info.compute_units, seconds),
               info.compute_units);
    printf("%-34s %12s %10s %10s\n", "mat-vec (m=1, linear)", "ms/call", "GB/s", "of copy");
    /* SmolLM2's shapes (576 wide, vocabulary 49152), Gemma 3 270M's (640
     * wide, FFN 2048, vocabulary 262144), then 8B-model layers: attention
     * 4096 x 4096, FFN up 14336 x 4096 and down 4096 x 14336. */
    const int mv[][2] = {{576, 1536}, {1536, 576}, {49152, 576}, {2048, 640}, {640, 2048}, {262144, 640},
                         {4096, 4096}, {14336, 4096}, {4096, 14336}};
    const int n_mv = (int)(sizeof mv / sizeof *mv);
    for (int ti = 0; ti < N_BENCH_TYPES; ti++)
        for (int i = 0; i < n_mv; i++) {
            colo_dtype t_w = bench_types[ti];
            if (mv[i][1] % colo_dtype_block_elems(t_w) || !type_wanted(t_w))
                continue;
            double t = time_linear(dev, s, t_w, 1, mv[i][0], mv[i][1], seconds);
            double bytes = (double)colo_dtype_row_bytes(t_w, mv[i][1]) * mv[i][0];
            if (t > 0)
                printf("  %-5s n=%-6d k=%-5d %17.3f %10.2f %9.0f%%\n", colo_dtype_name(t_w), mv[i][0], mv[i][1],
                       t * 1e3, bytes / t / 1e9, copy > 0 ? 100 * bytes / t / 1e9 / copy : 0);
        }
}

/* Batched decode: m rows against one 4096 x 4096 weight, the paths a
 * decode step takes (CPU: the int8 path, as colo_cpu_int8_max_decode_rows
 * allows, for every m here, to compare). GB/s = weight bytes / time. */
static void bench_batch_rows(colo_device *dev, colo_stream *s, const colo_device_info *info, double seconds)
{
    printf("\n%-34s %12s %10s\n", "rows (linear n=4096 k=4096)", "ms/call", "GB/s");
    int saved_rows = colo_cpu_int8_max_rows;
    if (info->kind == COLO_BACKEND_CPU)
        colo_cpu_int8_max_rows = 1 << 30;
    const int batch_rows[] = {2, 4, 8, 16, 32, 64};
    for (int ti = 0; ti < N_BENCH_TYPES - 3; ti++)
        for (int i = 0; i < 6; i++) {
            colo_dtype t_w = bench_types[ti];
            if (!type_wanted(t_w))
                continue;
            double t = time_linear(dev, s, t_w, batch_rows[i], 4096, 4096, seconds);
            double bytes = (double)colo_dtype_row_bytes(t_w, 4096) * 4096;
            printf("  %-5s m=%-3d %28.3f %10.2f\n", colo_dtype_name(t_w), batch_rows[i], t * 1e3, bytes / t / 1e9);
        }
    colo_cpu_int8_max_rows = saved_rows;
}

/* The CPU's int8 dot products, one thread, in cache. */
static void bench_dots(double seconds)
{
    printf("\n%-34s %12s %10s\n", "int8 dot, 1 thread, in cache", "ns/32, 1 row", "4 rows");
    for (int ti = 0; ti < N_BENCH_TYPES - 3; ti++)
        if (type_wanted(bench_types[ti]))
            printf("  %-5s %38.2f %10.2f\n", colo_dtype_name(bench_types[ti]),
                   dot_ns_per_block(bench_types[ti], 1, seconds), dot_ns_per_block(bench_types[ti], 4, seconds));
}

/* Few rows on quantized weights (CPU): int8 dot products against exact F32
 * activations (expanded tiles and gemm_f32; one row: float dots), and
 * gemm_q8 (AVX512-VNNI, two digits; prefill and decode) where the CPU has it. */
static void bench_few_rows(colo_device *dev, colo_stream *s, double seconds)
{
    bool q8 = colo_cpu_gemm_q8_cpu();
    printf("\n%-40s %10s %10s %10s\n", "few rows (linear n=1536 k=768)", "int8 ms", "F32 ms", q8 ? "VNNI ms" : "");
    int saved = colo_cpu_int8_max_rows, saved_q8 = colo_cpu_q8_min_rows;
    colo_cpu_q8_min_rows = 1 << 30;
    const int rows[] = {1, 2, 4, 8, 16, 32, 64};
    const colo_dtype few[] = {COLO_Q4_1, COLO_Q8_0, COLO_Q4_K, COLO_Q5_0, COLO_Q6_K};
    for (int ti = 0; ti < 5; ti++)
        for (int i = 0; i < 7; i++) {
            colo_cpu_int8_max_rows = 1 << 30;
            double ti8 = time_linear_cached(dev, s, few[ti], rows[i], 1536, 768, seconds);
            colo_cpu_int8_max_rows = 0;
            double tt = time_linear_cached(dev, s, few[ti], rows[i], 1536, 768, seconds), tq = 0;
            if (q8) {
                colo_cpu_q8_min_rows = 1;
                colo_stream_set_decode(s, true);
                tq = time_linear_cached(dev, s, few[ti], rows[i], 1536, 768, seconds);
                colo_stream_set_decode(s, false);
                colo_cpu_q8_min_rows = 1 << 30;
            }
            printf("  %-5s m=%-3d %38.3f %10.3f", colo_dtype_name(few[ti]), rows[i], ti8 * 1e3, tt * 1e3);
            if (q8)
                printf(" %10.3f", tq * 1e3);
            printf("\n");
        }
    colo_cpu_int8_max_rows = saved;
    colo_cpu_q8_min_rows = saved_q8;
}

int main(int argc, char **argv)
{
    const char *want = "cpu";
    int threads = 0;
    double seconds = 1.0;
    bool attention_only = false, prefill_only = false, matvec_only = false, dots_only = false, rows_only = false, bandwidth_only = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc)
            want = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--attention"))
            attention_only = true;
        else if (!strcmp(argv[i], "--prefill"))
            prefill_only = true;
        else if (!strcmp(argv[i], "--matvec"))
            matvec_only = true;
        else if (!strcmp(argv[i], "--dots"))
            dots_only = true;
        else if (!strcmp(argv[i], "--rows"))
            rows_only = true;
        else if (!strcmp(argv[i], "--bandwidth"))
            bandwidth_only = true;
        else if (!strcmp(argv[i], "--types") && i + 1 < argc)
            only_types = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--device cpu|cuda|auto] [--threads N] [--seconds S] [--attention] [--matvec] "
                            "[--prefill] [--dots] [--rows] [--bandwidth] [--types q4_k,q6_k,...]\n",
                    argv[0]);
            return !strcmp(argv[i], "--help") ? 0 : 2;
        }
    }
    if (!types_known())
        return 2;
    if (bandwidth_only) {
        int n = threads > 0 ? threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
        printf("memory read: %.1f GB/s (%d threads, 1 GiB)\n", read_gbs(n, seconds), n);
        return 0;
    }
    char err[256];
    colo_device_config cfg = {.want = want, .cpu_threads = threads};
    colo_device *dev = colo_device_open(&cfg, err, sizeof err);
    if (!dev) {
        fprintf(stderr, "bench: %s\n", err);
        return 1;
    }
    colo_device_info info;
    colo_device_get_info(dev, &info);
    colo_stream *s = colo_stream_create(dev, NULL, err, sizeof err);
    if (!s) {
        fprintf(stderr, "bench: %s\n", err);
        colo_device_close(dev);
        return 1;
    }
    printf("device: %s\n", info.name);
    bool cpu = info.kind == COLO_BACKEND_CPU;
    if (!attention_only)
        printf("\n");
    if (attention_only) {
        bench_attention(dev, s, seconds);
    } else if (prefill_only) {
        bench_prefill_cpu(dev, s, seconds);
    } else if (matvec_only) {
        bench_matvec(dev, s, seconds);
    } else if (dots_only) { /* (no dots but on the CPU) */
        if (cpu)
            bench_dots(seconds);
        else
            bench_attention(dev, s, seconds);
    } else if (rows_only && cpu) {
        bench_few_rows(dev, s, seconds);
        bench_attention(dev, s, seconds);
    } else {
        bench_products(dev, s, &info, seconds);
        bench_matvec(dev, s, seconds);
        bench_batch_rows(dev, s, &info, seconds);
        if (cpu) {
            bench_dots(seconds);
            bench_few_rows(dev, s, seconds);
        }
        bench_attention(dev, s, seconds);
    }
    colo_stream_destroy(s);
    colo_device_close(dev);
    return 0;
}
