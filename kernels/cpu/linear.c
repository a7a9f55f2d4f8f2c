/* linear (y = x W^T + b) and gemm on the CPU.
 *
 * Few rows of x (decode): x is quantized to 8-bit blocks and dotted with
 * the quantized weight rows in their file format (AVX2 integer dot
 * products); F16/BF16/F32/Q6_K rows are expanded one row at a time into
 * per-thread scratch. Many rows (prefill): tiles of W rows are expanded to
 * F32 scratch and multiplied with OpenBLAS sgemm. Chunks split the output
 * columns (W rows), so every worker reads a disjoint part of W. */
#include "kernels/cpu/cpu_kernels.h"

#include <cblas.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define N_SLOTS 4

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

typedef struct {
    void *p[N_SLOTS];
    size_t n[N_SLOTS];
} scratch_set;

static void scratch_free(void *v)
{
    scratch_set *s = v;
    for (int i = 0; i < N_SLOTS; i++)
        free(s->p[i]);
    free(s);
}

static void scratch_init(void) { pthread_key_create(&scratch_key, scratch_free); }

void *colo_cpu_scratch(int slot, size_t bytes)
{
    pthread_once(&scratch_once, scratch_init);
    scratch_set *s = pthread_getspecific(scratch_key);
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s || pthread_setspecific(scratch_key, s)) {
            free(s);
            return NULL;
        }
    }
    if (s->n[slot] < bytes) {
        size_t want = bytes + bytes / 2 + 64;
        void *p = NULL;
        if (posix_memalign(&p, 64, want))
            return NULL;
        free(s->p[slot]);
        s->p[slot] = p;
        s->n[slot] = want;
    }
    return s->p[slot];
}

int colo_cpu_chunks(colo_stream *s, int64_t n, double cost_per_item)
{
    /* ~50k flops per chunk at least, up to 4 chunks per worker for balance. */
    int threads = colo_cpu_stream_threads(s);
    double total = (double)n * cost_per_item;
    int64_t by_cost = (int64_t)(total / 5e4);
    int64_t nc = threads * 4;
    if (nc > by_cost)
        nc = by_cost;
    if (nc > n)
        nc = n;
    return nc < 1 ? 1 : (int)nc;
}

typedef struct {
    const void *w;
    colo_dtype w_type;
    const float *bias;
    const float *x;
    float *y;
    int x_stride, y_stride, m, n, k;
    const colo_blk_q8x *xq; /* x quantized by the op queued before (8-bit path) */
} linear_args;

#define TILE_ROWS 64
/* Up to this many rows of x (exclusive), quantized weights are dotted with
 * 8-bit activations (decode); more rows use exact F32 activations against
 * weights expanded tile by tile (prefill and batched decode). */
#define INT8_MAX_ROWS 2

static void add_bias(const linear_args *a, int64_t r0, int64_t r1)
{
    if (!a->bias)
        return;
    for (int i = 0; i < a->m; i++)
        for (int64_t r = r0; r < r1; r++)
            a->y[(int64_t)i * a->y_stride + r] += a->bias[r];
}

/* Decode path: rows [r0, r1) of W against every row of x. */
static void linear_small_m(const linear_args *a, int64_t r0, int64_t r1)
{
    size_t row_bytes = colo_dtype_row_bytes(a->w_type, a->k);
    const unsigned char *w = a->w;
    bool int8 = a->xq != NULL;
    if (int8) {
        int nb = a->k / 32;
        const colo_blk_q8x *xq = a->xq;
        for (int64_t r = r0; r < r1; r++) {
            const void *wr = w + (size_t)r * row_bytes;
            for (int i = 0; i < a->m; i++) {
                const colo_blk_q8x *xr = xq + (size_t)i * nb;
                float v = a->w_type == COLO_Q4_1   ? colo_cpu_dot_q4_1(wr, xr, nb)
                          : a->w_type == COLO_Q8_0 ? colo_cpu_dot_q8_0(wr, xr, nb)
                                                   : colo_cpu_dot_q4_0(wr, xr, nb);
                a->y[(int64_t)i * a->y_stride + r] = v;
            }
        }
    } else {
        float *row = colo_cpu_scratch(1, (size_t)a->k * sizeof(float));
        if (!row) {
            colo_cpu_task_fail(COLO_ENOMEM);
            return;
        }
        for (int64_t r = r0; r < r1; r++) {
            const float *wr = (const float *)(w + (size_t)r * row_bytes);
            if (a->w_type != COLO_F32) {
                colo_dequantize_row(a->w_type, w + (size_t)r * row_bytes, row, a->k);
                wr = row;
            }
            for (int i = 0; i < a->m; i++)
                a->y[(int64_t)i * a->y_stride + r] = colo_cpu_dot_f32(wr, a->x + (int64_t)i * a->x_stride, a->k);
        }
    }
    add_bias(a, r0, r1);
}

/* Prefill path: tiles of W rows expanded to F32, then sgemm. */
static void linear_large_m(const linear_args *a, int64_t r0, int64_t r1)
{
    size_t row_bytes = colo_dtype_row_bytes(a->w_type, a->k);
    float *tile = NULL;
    if (a->w_type != COLO_F32) {
        tile = colo_cpu_scratch(1, (size_t)TILE_ROWS * (size_t)a->k * sizeof(float));
        if (!tile) {
            colo_cpu_task_fail(COLO_ENOMEM);
            return;
        }
    }
    for (int64_t t0 = r0; t0 < r1; t0 += TILE_ROWS) {
        int rows = (int)(r1 - t0 < TILE_ROWS ? r1 - t0 : TILE_ROWS);
        const float *wt;
        if (tile) {
            for (int r = 0; r < rows; r++)
                colo_dequantize_row(a->w_type, (const unsigned char *)a->w + (size_t)(t0 + r) * row_bytes,
                                    tile + (size_t)r * a->k, a->k);
            wt = tile;
        } else {
            wt = (const float *)a->w + (size_t)t0 * a->k;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, a->m, rows, a->k, 1.0f, a->x, a->x_stride, wt, a->k,
                    0.0f, a->y + t0, a->y_stride);
    }
    add_bias(a, r0, r1);
}

static void linear_task(const void *p, int chunk, int n_chunks)
{
    const linear_args *a = p;
    int64_t r0, r1;
    colo_chunk_range(a->n, chunk, n_chunks, &r0, &r1);
    if (r0 == r1)
        return;
    if (a->m < INT8_MAX_ROWS && (a->xq || (a->w_type != COLO_Q4_0 && a->w_type != COLO_Q4_1 && a->w_type != COLO_Q8_0)))
        linear_small_m(a, r0, r1);
    else
        linear_large_m(a, r0, r1);
}

typedef struct {
    const float *x;
    int x_stride, k;
    colo_blk_q8x *out;
} quant_args;

static void quantize_task(const void *p, int chunk, int n_chunks)
{
    const quant_args *q = p;
    (void)n_chunks;
    colo_cpu_quantize_q8x(q->x + (int64_t)chunk * q->x_stride, q->out + (size_t)chunk * (q->k / 32), q->k);
}

colo_status colo_cpu_linear(colo_stream *s, const void *w, colo_dtype w_type, const float *bias, const float *x,
                            int x_stride, float *y, int y_stride, int m, int n, int k)
{
    linear_args a = {w, w_type, bias, x, y, x_stride ? x_stride : k, y_stride ? y_stride : n, m, n, k, NULL};
    bool int8 = m < INT8_MAX_ROWS && !colo_cpu_exact(s) &&
                (w_type == COLO_Q4_0 || w_type == COLO_Q4_1 || w_type == COLO_Q8_0);
    if (int8) {
        /* x is quantized once, by an op of its own, into the stream's scratch. */
        colo_blk_q8x *xq = colo_cpu_stream_scratch(s, (size_t)m * (size_t)(k / 32) * sizeof *xq);
        if (!xq)
            return COLO_ENOMEM;
        quant_args q = {x, a.x_stride, k, xq};
        colo_status st = colo_cpu_launch(s, quantize_task, &q, sizeof q, m);
        if (st != COLO_OK)
            return st;
        a.xq = xq;
    }
    int nc = colo_cpu_chunks(s, n, 2.0 * m * k);
    /* Prefill tiles: keep chunks at least a tile tall. */
    if (m >= INT8_MAX_ROWS && nc > (n + TILE_ROWS - 1) / TILE_ROWS)
        nc = (n + TILE_ROWS - 1) / TILE_ROWS;
    return colo_cpu_launch(s, linear_task, &a, sizeof a, nc < 1 ? 1 : nc);
}

/* ---- gemm ----------------------------------------------------------------------- */

typedef struct {
    bool ta, tb;
    int m, n, k, lda, ldb, ldc, batch;
    float alpha, beta;
    const void *a, *b;
    int64_t sa, sb, sc;
    colo_dtype type;
    float *c;
} gemm_args;

/* Expands an F16 matrix (rows x cols, leading dimension ld) to F32. */
static void f16_to_f32_matrix(const uint16_t *src, int rows, int cols, int ld, float *dst)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            dst[(size_t)r * ld + c] = colo_fp16_to_f32(src[(size_t)r * ld + c]);
}

static void gemm_task(const void *p, int chunk, int n_chunks)
{
    const gemm_args *g = p;
    /* Chunks split the batch, or the rows of C when there is one entry. */
    int64_t b0 = 0, b1 = g->batch, m0 = 0, m1 = g->m;
    if (g->batch > 1)
        colo_chunk_range(g->batch, chunk, n_chunks, &b0, &b1);
    else
        colo_chunk_range(g->m, chunk, n_chunks, &m0, &m1);
    if (m1 <= m0)
        return;
    int a_rows = g->ta ? g->k : g->m, b_rows = g->tb ? g->n : g->k;
    for (int64_t bi = b0; bi < b1; bi++) {
        const float *A, *B;
        if (g->type == COLO_F16) {
            float *fa = colo_cpu_scratch(2, (size_t)a_rows * g->lda * sizeof(float));
            float *fb = colo_cpu_scratch(3, (size_t)b_rows * g->ldb * sizeof(float));
            if (!fa || !fb) {
                colo_cpu_task_fail(COLO_ENOMEM);
                return;
            }
            f16_to_f32_matrix((const uint16_t *)g->a + bi * g->sa, a_rows, g->ta ? g->m : g->k, g->lda, fa);
            f16_to_f32_matrix((const uint16_t *)g->b + bi * g->sb, b_rows, g->tb ? g->k : g->n, g->ldb, fb);
            A = fa;
            B = fb;
        } else {
            A = (const float *)g->a + bi * g->sa;
            B = (const float *)g->b + bi * g->sb;
        }
        /* Rows [m0, m1) of C: offset A by rows (no transpose) or columns (transpose). */
        const float *Am = g->ta ? A + m0 : A + (size_t)m0 * g->lda;
        cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans,
                    (int)(m1 - m0), g->n, g->k, g->alpha, Am, g->lda, B, g->ldb, g->beta,
                    g->c + bi * g->sc + (size_t)m0 * g->ldc, g->ldc);
    }
}

colo_status colo_cpu_gemm(colo_stream *s, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const void *a, int lda, int64_t stride_a, const void *b, int ldb, int64_t stride_b,
                          colo_dtype ab_type, float beta, float *c, int ldc, int64_t stride_c, int batch)
{
    gemm_args g = {trans_a, trans_b, m, n, k, lda, ldb, ldc, batch, alpha, beta, a, b,
                   stride_a, stride_b, stride_c, ab_type, c};
    int nc = batch > 1 ? colo_cpu_chunks(s, batch, 2.0 * m * n * k) : colo_cpu_chunks(s, m, 2.0 * n * k);
    return colo_cpu_launch(s, gemm_task, &g, sizeof g, nc);
}
