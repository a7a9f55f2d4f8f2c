/* Element-wise ops (swiglu, silu, gelu, add) and rotary embeddings: chunks
 * of elements or rows. */
#include "kernels/cpu/cpu_kernels.h"

#include <math.h>

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

colo_status colo_cpu_swiglu(colo_stream *s, const float *gate, const float *up, float *out, int64_t n)
{
    return ew(s, EW_SWIGLU, gate, up, out, n);
}
colo_status colo_cpu_silu(colo_stream *s, const float *x, float *y, int64_t n) { return ew(s, EW_SILU, x, NULL, y, n); }
colo_status colo_cpu_gelu(colo_stream *s, const float *x, float *y, int64_t n) { return ew(s, EW_GELU, x, NULL, y, n); }
colo_status colo_cpu_add(colo_stream *s, const float *a, const float *b, float *out, int64_t n)
{
    return ew(s, EW_ADD, a, b, out, n);
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

colo_status colo_cpu_rope(colo_stream *s, float *x, int x_stride, const int32_t *pos, int rows, int n_heads,
                            int head_dim, int n_rot, float freq_base)
{
    rope_args r = {x, pos, x_stride ? x_stride : n_heads * head_dim, rows, n_heads, head_dim, n_rot, freq_base};
    return colo_cpu_launch(s, rope_task, &r, sizeof r, colo_cpu_chunks(s, rows, 30.0 * n_heads * head_dim));
}
