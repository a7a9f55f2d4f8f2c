/* The CPU op table, and the row-wise and element-wise ops. Each op is one
 * task split into chunks of rows (or elements). */
#include "kernels/cpu/cpu_kernels.h"

#include <math.h>
#include <string.h>

/* ---- element-wise ------------------------------------------------------------- */

typedef enum { EW_SWIGLU, EW_SILU, EW_GELU, EW_ADD } ew_kind;

typedef struct {
    ew_kind kind;
    const float *a, *b;
    float *out;
    int64_t n;
} ew_args;

static void ew_task(const void *p, int chunk, int n_chunks)
{
    const ew_args *e = p;
    int64_t lo, hi;
    colo_chunk_range(e->n, chunk, n_chunks, &lo, &hi);
    switch (e->kind) {
    case EW_SWIGLU:
        for (int64_t i = lo; i < hi; i++) {
            float g = e->a[i];
            e->out[i] = g / (1.0f + expf(-g)) * e->b[i];
        }
        break;
    case EW_SILU:
        for (int64_t i = lo; i < hi; i++)
            e->out[i] = e->a[i] / (1.0f + expf(-e->a[i]));
        break;
    case EW_GELU:
        for (int64_t i = lo; i < hi; i++)
            e->out[i] = 0.5f * e->a[i] * (1.0f + erff(e->a[i] * 0.70710678118654752f));
        break;
    case EW_ADD:
        for (int64_t i = lo; i < hi; i++)
            e->out[i] = e->a[i] + e->b[i];
        break;
    }
}

static colo_status ew(colo_stream *s, ew_kind kind, const float *a, const float *b, float *out, int64_t n)
{
    ew_args e = {kind, a, b, out, n};
    return colo_cpu_launch(s, ew_task, &e, sizeof e, colo_cpu_chunks(s, n, kind == EW_ADD ? 1 : 20));
}

static colo_status cpu_swiglu(colo_stream *s, const float *gate, const float *up, float *out, int64_t n)
{
    return ew(s, EW_SWIGLU, gate, up, out, n);
}
static colo_status cpu_silu(colo_stream *s, const float *x, float *y, int64_t n) { return ew(s, EW_SILU, x, NULL, y, n); }
static colo_status cpu_gelu(colo_stream *s, const float *x, float *y, int64_t n) { return ew(s, EW_GELU, x, NULL, y, n); }
static colo_status cpu_add(colo_stream *s, const float *a, const float *b, float *out, int64_t n)
{
    return ew(s, EW_ADD, a, b, out, n);
}

/* ---- row-wise: norms, softmax, l2 ----------------------------------------------- */

typedef enum { ROW_RMS, ROW_LAYER, ROW_SOFTMAX, ROW_L2 } row_kind;

typedef struct {
    row_kind kind;
    const float *x;
    const float *w, *b;
    float *y;
    int rows, n;
    float eps; /* or the softmax scale */
} row_args;

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
        case ROW_RMS: {
            double ss = 0;
            for (int j = 0; j < n; j++)
                ss += (double)x[j] * x[j];
            float scale = 1.0f / sqrtf((float)(ss / n) + r->eps);
            for (int j = 0; j < n; j++)
                y[j] = x[j] * scale * r->w[j];
            break;
        }
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

static colo_status cpu_rmsnorm(colo_stream *s, const float *x, const float *w, float *y, int rows, int n, float eps)
{
    return rows_op(s, (row_args){ROW_RMS, x, w, NULL, y, rows, n, eps});
}
static colo_status cpu_layernorm(colo_stream *s, const float *x, const float *g, const float *b, float *y, int rows,
                                 int n, float eps)
{
    return rows_op(s, (row_args){ROW_LAYER, x, g, b, y, rows, n, eps});
}
static colo_status cpu_softmax(colo_stream *s, float *x, int rows, int n, float scale)
{
    return rows_op(s, (row_args){ROW_SOFTMAX, x, NULL, NULL, x, rows, n, scale});
}
static colo_status cpu_l2norm(colo_stream *s, float *x, int rows, int n)
{
    return rows_op(s, (row_args){ROW_L2, x, NULL, NULL, x, rows, n, 0});
}

/* ---- rope ------------------------------------------------------------------------- */

typedef struct {
    float *x;
    const int32_t *pos;
    int stride, rows, n_heads, head_dim, n_rot;
    float freq_base;
} rope_args;

static void rope_task(const void *p, int chunk, int n_chunks)
{
    const rope_args *r = p;
    int64_t lo, hi;
    colo_chunk_range(r->rows, chunk, n_chunks, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        double pos = r->pos[i];
        for (int d = 0; d < r->n_rot; d += 2) {
            double theta = pos * pow((double)r->freq_base, -(double)d / r->n_rot);
            float c = (float)cos(theta), sn = (float)sin(theta);
            for (int h = 0; h < r->n_heads; h++) {
                float *v = r->x + i * r->stride + (int64_t)h * r->head_dim + d;
                float a = v[0], b = v[1];
                v[0] = a * c - b * sn;
                v[1] = a * sn + b * c;
            }
        }
    }
}

static colo_status cpu_rope(colo_stream *s, float *x, int x_stride, const int32_t *pos, int rows, int n_heads,
                            int head_dim, int n_rot, float freq_base)
{
    rope_args r = {x, pos, x_stride ? x_stride : n_heads * head_dim, rows, n_heads, head_dim, n_rot, freq_base};
    return colo_cpu_launch(s, rope_task, &r, sizeof r, colo_cpu_chunks(s, rows, 30.0 * n_heads * head_dim));
}

/* ---- gathers, conversions, KV stores, pooling -------------------------------------- */

typedef struct {
    const void *table;
    colo_dtype type;
    int64_t n_rows;
    int row_len;
    const int32_t *ids;
    int n_ids;
    float *out;
} rows_get_args;

static void get_rows_task(const void *p, int chunk, int n_chunks)
{
    const rows_get_args *g = p;
    int64_t lo, hi;
    colo_chunk_range(g->n_ids, chunk, n_chunks, &lo, &hi);
    size_t rb = colo_dtype_row_bytes(g->type, g->row_len);
    for (int64_t i = lo; i < hi; i++) {
        int32_t id = g->ids[i];
        float *o = g->out + i * g->row_len;
        if (id < 0 || id >= g->n_rows) {
            memset(o, 0, (size_t)g->row_len * sizeof(float));
            colo_cpu_task_fail(COLO_EINVAL);
            continue;
        }
        colo_dequantize_row(g->type, (const unsigned char *)g->table + (size_t)id * rb, o, g->row_len);
    }
}

static colo_status cpu_get_rows(colo_stream *s, const void *table, colo_dtype type, int64_t n_rows, int row_len,
                                const int32_t *ids, int n_ids, float *out)
{
    rows_get_args g = {table, type, n_rows, row_len, ids, n_ids, out};
    return colo_cpu_launch(s, get_rows_task, &g, sizeof g, colo_cpu_chunks(s, n_ids, 4.0 * row_len));
}

typedef struct {
    const void *src;
    colo_dtype st, dt;
    void *dst;
    int64_t n_blocks;
    int be;
} deq_args;

static void deq_task(const void *p, int chunk, int n_chunks)
{
    const deq_args *d = p;
    int64_t lo, hi;
    colo_chunk_range(d->n_blocks, chunk, n_chunks, &lo, &hi);
    size_t bb = colo_dtype_block_bytes(d->st);
    const unsigned char *src = (const unsigned char *)d->src + (size_t)lo * bb;
    int64_t n = (hi - lo) * d->be;
    if (d->dt == COLO_F32) {
        colo_dequantize_row(d->st, src, (float *)d->dst + lo * d->be, n);
    } else {
        float tmp[256];
        uint16_t *out = (uint16_t *)d->dst + lo * d->be;
        for (int64_t b = 0; b < hi - lo; b++) {
            colo_dequantize_row(d->st, src + (size_t)b * bb, tmp, d->be);
            for (int j = 0; j < d->be; j++)
                out[b * d->be + j] = colo_f32_to_fp16(tmp[j]);
        }
    }
}

static colo_status cpu_dequantize(colo_stream *s, const void *src, colo_dtype src_type, void *dst,
                                  colo_dtype dst_type, int64_t n)
{
    int be = colo_dtype_block_elems(src_type);
    deq_args d = {src, src_type, dst_type, dst, n / be, be};
    return colo_cpu_launch(s, deq_task, &d, sizeof d, colo_cpu_chunks(s, n / be, 4.0 * be));
}

typedef struct {
    const float *k, *v;
    int ks, vs;
    void *kc, *vc;
    colo_dtype t;
    const int32_t *slot;
    int n_tokens, kv_dim;
} kv_args;

static void kv_task(const void *p, int chunk, int n_chunks)
{
    const kv_args *a = p;
    int64_t lo, hi;
    colo_chunk_range(a->n_tokens, chunk, n_chunks, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        int64_t slot = a->slot[t];
        if (slot < 0) {
            colo_cpu_task_fail(COLO_EINVAL);
            continue;
        }
        const float *k = a->k + t * a->ks, *v = a->v + t * a->vs;
        if (a->t == COLO_F32) {
            memcpy((float *)a->kc + slot * a->kv_dim, k, (size_t)a->kv_dim * sizeof(float));
            memcpy((float *)a->vc + slot * a->kv_dim, v, (size_t)a->kv_dim * sizeof(float));
        } else {
            uint16_t *kc = (uint16_t *)a->kc + slot * a->kv_dim, *vc = (uint16_t *)a->vc + slot * a->kv_dim;
            for (int i = 0; i < a->kv_dim; i++) {
                kc[i] = colo_f32_to_fp16(k[i]);
                vc[i] = colo_f32_to_fp16(v[i]);
            }
        }
    }
}

static colo_status cpu_kv_store(colo_stream *s, const float *k, int k_stride, const float *v, int v_stride,
                                void *k_cache, void *v_cache, colo_dtype kv_type, const int32_t *slot, int n_tokens,
                                int kv_dim)
{
    kv_args a = {k, v, k_stride ? k_stride : kv_dim, v_stride ? v_stride : kv_dim, k_cache, v_cache, kv_type,
                 slot, n_tokens, kv_dim};
    return colo_cpu_launch(s, kv_task, &a, sizeof a, colo_cpu_chunks(s, n_tokens, 4.0 * kv_dim));
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

static colo_status cpu_mean_pool(colo_stream *s, const float *x, const int32_t *len, float *out, int batch, int seq,
                                 int d)
{
    pool_args a = {x, len, out, batch, seq, d};
    return colo_cpu_launch(s, pool_task, &a, sizeof a, colo_cpu_chunks(s, batch, (double)seq * d));
}

const colo_ops colo_cpu_ops = {
    .linear = colo_cpu_linear,
    .gemm = colo_cpu_gemm,
    .dequantize = cpu_dequantize,
    .get_rows = cpu_get_rows,
    .rmsnorm = cpu_rmsnorm,
    .layernorm = cpu_layernorm,
    .rope = cpu_rope,
    .softmax = cpu_softmax,
    .swiglu = cpu_swiglu,
    .silu = cpu_silu,
    .gelu = cpu_gelu,
    .add = cpu_add,
    .kv_store = cpu_kv_store,
    .attention = colo_cpu_attention,
    .attention_bidir = colo_cpu_attention_bidir,
    .mean_pool = cpu_mean_pool,
    .l2norm = cpu_l2norm,
};
