/* Row-wise reductions: rmsnorm, layernorm, softmax, l2norm, and mean
 * pooling over sequences. Chunks of rows; sums in double. */
#include "kernels/cpu/cpu_kernels.h"

#include <math.h>
#include <string.h>

/* ---- row-wise: norms, softmax, l2 ----------------------------------------------- */

typedef enum { ROW_RMS, ROW_LAYER, ROW_SOFTMAX, ROW_L2, ROW_ADD_RMS } row_kind;

typedef struct {
    row_kind kind;
    const float *x;
    const float *w, *b;
    float *y;
    int rows, n;
    float eps; /* or the softmax scale */
    /* ROW_ADD_RMS: the residual stream (x's rows) and where its sum goes
     * (may be x), what is added to it, and its norm's weights (NULL: none) */
    float *xo, *h;
    const float *w_pre;
} row_args;

void colo_cpu_rms_row(const float *x, const float *w, float *y, int n, float eps)
{
    double ss = 0;
    for (int j = 0; j < n; j++)
        ss += (double)x[j] * x[j];
    float scale = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int j = 0; j < n; j++)
        y[j] = x[j] * scale * w[j];
}

void colo_cpu_add_rms_row(const float *x, const float *h, const float *w_pre, const float *w, float *x_out,
                          float *h_out, float *y, int n, float eps)
{
    if (w_pre) {
        colo_cpu_rms_row(h, w_pre, h_out, n, eps);
        h = h_out;
    }
    for (int j = 0; j < n; j++)
        x_out[j] = x[j] + h[j];
    colo_cpu_rms_row(x_out, w, y, n, eps);
}

static void row_task(const void *p, int chunk, int n_chunks)
{
    const row_args *r = p;
    int64_t lo, hi;
    colo_chunk_range(r->rows, chunk, n_chunks, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        const float *x = r->x + i * r->n;
        float *y = r->y + i * r->n;
        int n = r->n;
        switch (r->kind) {
        case ROW_RMS:
            colo_cpu_rms_row(x, r->w, y, n, r->eps);
            break;
        case ROW_ADD_RMS: /* as rmsnorm (h), add and rmsnorm in turn: the same values */
            colo_cpu_add_rms_row(x, r->h + i * n, r->w_pre, r->w, r->xo + i * n, r->h + i * n, y, n, r->eps);
            break;
        case ROW_LAYER: {
            double mean = 0, var = 0;
            for (int j = 0; j < n; j++)
                mean += x[j];
            mean /= n;
            for (int j = 0; j < n; j++)
                var += (x[j] - mean) * (x[j] - mean);
            var /= n;
            float inv = 1.0f / sqrtf((float)var + r->eps), mf = (float)mean;
            for (int j = 0; j < n; j++)
                y[j] = (x[j] - mf) * inv * r->w[j] + r->b[j];
            break;
        }
        case ROW_SOFTMAX: {
            float m = -INFINITY;
            for (int j = 0; j < n; j++)
                m = r->eps * x[j] > m ? r->eps * x[j] : m;
            double sum = 0;
            for (int j = 0; j < n; j++) {
                y[j] = expf(r->eps * x[j] - m);
                sum += y[j];
            }
            float inv = (float)(1.0 / sum);
            for (int j = 0; j < n; j++)
                y[j] *= inv;
            break;
        }
        case ROW_L2: {
            double ss = 0;
            for (int j = 0; j < n; j++)
                ss += (double)x[j] * x[j];
            double norm = sqrt(ss);
            float inv = (float)(1.0 / (norm > 1e-12 ? norm : 1e-12));
            for (int j = 0; j < n; j++)
                y[j] = x[j] * inv;
            break;
        }
        }
    }
}

static colo_status rows_op(colo_stream *s, row_args r)
{
    return colo_cpu_launch(s, row_task, &r, sizeof r, colo_cpu_chunks(s, r.rows, 5.0 * r.n));
}

colo_status colo_cpu_rmsnorm(colo_stream *s, const float *x, const float *w, float *y, int rows, int n, float eps)
{
    return rows_op(s, (row_args){.kind = ROW_RMS, .x = x, .w = w, .y = y, .rows = rows, .n = n, .eps = eps});
}
colo_status colo_cpu_add_rmsnorm(colo_stream *s, const float *x, float *h, const float *w_pre, const float *w,
                                 float *x_out, float *y, int rows, int n, float eps)
{
    return rows_op(s, (row_args){.kind = ROW_ADD_RMS, .x = x, .w = w, .y = y, .rows = rows, .n = n, .eps = eps,
                                 .xo = x_out, .h = h, .w_pre = w_pre});
}
colo_status colo_cpu_layernorm(colo_stream *s, const float *x, const float *g, const float *b, float *y, int rows,
                                 int n, float eps)
{
    return rows_op(s,
                   (row_args){.kind = ROW_LAYER, .x = x, .w = g, .b = b, .y = y, .rows = rows, .n = n, .eps = eps});
}
colo_status colo_cpu_softmax(colo_stream *s, float *x, int rows, int n, float scale)
{
    return rows_op(s, (row_args){.kind = ROW_SOFTMAX, .x = x, .y = x, .rows = rows, .n = n, .eps = scale});
}
colo_status colo_cpu_l2norm(colo_stream *s, float *x, int rows, int n)
{
    return rows_op(s, (row_args){.kind = ROW_L2, .x = x, .y = x, .rows = rows, .n = n});
}
typedef struct {
    const float *x;
    const int32_t *len;
    float *out;
    int batch, seq, d;
} pool_args;

static void pool_task(const void *p, int chunk, int n_chunks)
{
    const pool_args *a = p;
    int64_t lo, hi;
    colo_chunk_range(a->batch, chunk, n_chunks, &lo, &hi);
    for (int64_t b = lo; b < hi; b++) {
        float *o = a->out + b * a->d;
        int len = a->len[b];
        memset(o, 0, (size_t)a->d * sizeof(float));
        if (len <= 0 || len > a->seq) {
            if (len != 0)
                colo_cpu_task_fail(COLO_EINVAL);
            continue;
        }
        for (int i = 0; i < len; i++) {
            const float *x = a->x + (b * a->seq + i) * a->d;
            for (int j = 0; j < a->d; j++)
                o[j] += x[j];
        }
        for (int j = 0; j < a->d; j++)
            o[j] /= (float)len;
    }
}

colo_status colo_cpu_mean_pool(colo_stream *s, const float *x, const int32_t *len, float *out, int batch, int seq,
                                 int d)
{
    pool_args a = {x, len, out, batch, seq, d};
    return colo_cpu_launch(s, pool_task, &a, sizeof a, colo_cpu_chunks(s, batch, (double)seq * d));
}
