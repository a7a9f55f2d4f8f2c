/* Element-wise ops (swiglu, silu, gelu, add) and rotary embeddings: chunks
 * of elements or rows. */
#include "kernels/cpu/cpu_kernels.h"

#include <math.h>
#include <string.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define EW_AVX2 1
#endif

/* ---- element-wise ------------------------------------------------------------- */

#if defined(EW_AVX2)
/* e^x within about 1 ulp (Cephes' expf: x = n ln 2 + r, a polynomial in r
 * on [-ln 2 / 2, ln 2 / 2], times 2^n), x clamped to [-87.3, 88.3]. */
static inline __m256 exp8(__m256 x)
{
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* g / (1 + e^-z): SiLU with z = g, and GELU's tanh form with
 * z = 2 sqrt(2 / pi) (g + 0.044715 g^3), since 0.5 (1 + tanh(z / 2)) is
 * 1 / (1 + e^-z). */
static inline __m256 gated8(__m256 g, bool tanh_gelu)
{
    __m256 z = g;
    if (tanh_gelu)
        z = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(2 * 0.7978845608028654f), g),
                          _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), g), g, _mm256_set1_ps(1.0f)));
    return _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(_mm256_sub_ps(_mm256_setzero_ps(), z))));
}

/* out[i] = gated(a[i]) (* b[i]) for i in [lo, hi); the last partial vector
 * goes through the same code on a padded copy, so an element's bits do not
 * depend on where the chunks end. */
static void gated_range(const float *a, const float *b, float *out, int64_t lo, int64_t hi, bool tanh_gelu)
{
    int64_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        __m256 v = gated8(_mm256_loadu_ps(a + i), tanh_gelu);
        _mm256_storeu_ps(out + i, b ? _mm256_mul_ps(v, _mm256_loadu_ps(b + i)) : v);
    }
    if (i < hi) {
        float ta[8] = {0}, tb[8] = {0}, to[8];
        size_t n = (size_t)(hi - i) * sizeof(float);
        memcpy(ta, a + i, n);
        if (b)
            memcpy(tb, b + i, n);
        __m256 v = gated8(_mm256_loadu_ps(ta), tanh_gelu);
        _mm256_storeu_ps(to, b ? _mm256_mul_ps(v, _mm256_loadu_ps(tb)) : v);
        memcpy(out + i, to, n);
    }
}
#endif

typedef enum { EW_SWIGLU, EW_SILU, EW_GELU, EW_ADD, EW_GEGLU, EW_SCALE } ew_kind;

typedef struct {
    ew_kind kind;
    const float *a, *b;
    float *out;
    int64_t n;
    float alpha;
} ew_args;

static void ew_task(const void *p, int chunk, int n_chunks)
{
    const ew_args *e = p;
    int64_t lo, hi;
    colo_chunk_range(e->n, chunk, n_chunks, &lo, &hi);
    switch (e->kind) {
    case EW_SWIGLU:
#if defined(EW_AVX2)
        gated_range(e->a, e->b, e->out, lo, hi, false);
        break;
#endif
        for (int64_t i = lo; i < hi; i++) {
            float g = e->a[i];
            e->out[i] = g / (1.0f + expf(-g)) * e->b[i];
        }
        break;
    case EW_SILU:
#if defined(EW_AVX2)
        gated_range(e->a, NULL, e->out, lo, hi, false);
        break;
#endif
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
    case EW_GEGLU:
#if defined(EW_AVX2)
        gated_range(e->a, e->b, e->out, lo, hi, true);
        break;
#endif
        for (int64_t i = lo; i < hi; i++) {
            float g = e->a[i];
            float t = tanhf(0.7978845608028654f * g * (1.0f + 0.044715f * g * g));
            e->out[i] = 0.5f * g * (1.0f + t) * e->b[i];
        }
        break;
    case EW_SCALE:
        for (int64_t i = lo; i < hi; i++)
            e->out[i] = e->a[i] * e->alpha;
        break;
    }
}

void colo_cpu_glu_range(const float *gate, const float *up, float *out, int64_t lo, int64_t hi, bool tanh_gelu)
{
    ew_args e = {tanh_gelu ? EW_GEGLU : EW_SWIGLU, gate + lo, up + lo, out + lo, hi - lo, 1.0f};
    ew_task(&e, 0, 1);
}

static colo_status ew(colo_stream *s, ew_kind kind, const float *a, const float *b, float *out, int64_t n)
{
    ew_args e = {kind, a, b, out, n, 1.0f};
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
colo_status colo_cpu_geglu(colo_stream *s, const float *gate, const float *up, float *out, int64_t n)
{
    return ew(s, EW_GEGLU, gate, up, out, n);
}
colo_status colo_cpu_scale(colo_stream *s, float *x, float alpha, int64_t n)
{
    ew_args e = {EW_SCALE, x, NULL, x, n, alpha};
    return colo_cpu_launch(s, ew_task, &e, sizeof e, colo_cpu_chunks(s, n, 1));
}
/* ---- rope ------------------------------------------------------------------------- */

typedef struct {
    float *x;
    const int32_t *pos;
    int stride, rows;
    colo_rope_desc d;
} rope_args;

/* The angle in double (a float angle at position 8191 would be off by up
 * to 5e-4 rad). */
#define ROPE_FREQS 512

/* The frequencies, once per chunk rather than once per row (the same values). */
static void rope_freqs(const colo_rope_desc *d, double freq[ROPE_FREQS])
{
    for (int j = 0; j < d->n_rot / 2 && j < ROPE_FREQS; j++)
        freq[j] = pow((double)d->freq_base, -(double)(2 * j) / d->n_rot);
}

/* One position's rotation of the n_heads heads at x and the n2 heads at x2
 * (keys beside queries: the same angles, computed once). rot (n_rot), when
 * given: its cos and sin per pair, read (freq unused) or, with fill,
 * computed and stored there for the layers after. */
static void rope_row(const colo_rope_desc *d, const double *freq, double pos, float *x, int n_heads, float *x2,
                     int n2, float *rot, bool fill)
{
    int half = d->n_rot / 2;
    for (int j = 0; j < half; j++) {
        float c, sn;
        if (rot && !fill) {
            c = rot[2 * j], sn = rot[2 * j + 1];
        } else {
            double f = j < ROPE_FREQS ? freq[j] : pow((double)d->freq_base, -(double)(2 * j) / d->n_rot);
            double theta = pos * d->freq_scale * f;
            if (d->freq_factors)
                theta /= d->freq_factors[j];
            c = (float)cos(theta) * d->attn_factor, sn = (float)sin(theta) * d->attn_factor;
            if (rot)
                rot[2 * j] = c, rot[2 * j + 1] = sn;
        }
        int i0 = d->neox ? j : 2 * j, i1 = d->neox ? j + half : 2 * j + 1;
        for (int h = 0; h < n_heads + n2; h++) {
            float *v = h < n_heads ? x + (int64_t)h * d->head_dim : x2 + (int64_t)(h - n_heads) * d->head_dim;
            float a = v[i0], b = v[i1];
            v[i0] = a * c - b * sn;
            v[i1] = a * sn + b * c;
        }
    }
}

static void rope_task(const void *p, int chunk, int n_chunks)
{
    const rope_args *r = p;
    int64_t lo, hi;
    colo_chunk_range(r->rows, chunk, n_chunks, &lo, &hi);
    double freq[ROPE_FREQS];
    rope_freqs(&r->d, freq);
    for (int64_t i = lo; i < hi; i++)
        rope_row(&r->d, freq, r->pos[i], r->x + i * r->stride, r->d.n_heads, NULL, 0, NULL, false);
}

colo_status colo_cpu_rope(colo_stream *s, float *x, int x_stride, const int32_t *pos, int rows,
                          const colo_rope_desc *d)
{
    rope_args r = {x, pos, x_stride ? x_stride : d->n_heads * d->head_dim, rows, *d};
    return colo_cpu_launch(s, rope_task, &r, sizeof r, colo_cpu_chunks(s, rows, 30.0 * d->n_heads * d->head_dim));
}

typedef struct {
    colo_qk_desc d;
    float *q, *k;
    const float *v;
    const int32_t *pos, *slot;
    int rows;
    void *kc, *vc;
} qk_args;

/* Per token: the heads' norms, the rotation and the store, each as its op
 * (rmsnorm over head_dim rows, rope, kv_store) gives it. */
static void qk_task(const void *p, int chunk, int n_chunks)
{
    const qk_args *a = p;
    const colo_qk_desc *d = &a->d;
    int hd = d->rope.head_dim, nq = d->rope.n_heads, nk = d->n_kv_heads, kv_dim = nk * hd;
    int64_t lo, hi;
    colo_chunk_range(a->rows, chunk, n_chunks, &lo, &hi);
    double freq[ROPE_FREQS];
    if (!d->rot || d->rot_fill) /* (a later layer reads the first one's angles) */
        rope_freqs(&d->rope, freq);
    for (int64_t i = lo; i < hi; i++) {
        float *q = a->q + i * nq * hd, *k = a->k + i * kv_dim;
        if (d->q_norm) {
            for (int h = 0; h < nq; h++)
                colo_cpu_rms_row(q + (int64_t)h * hd, d->q_norm, q + (int64_t)h * hd, hd, d->eps);
            for (int h = 0; h < nk; h++)
                colo_cpu_rms_row(k + (int64_t)h * hd, d->k_norm, k + (int64_t)h * hd, hd, d->eps);
        }
        rope_row(&d->rope, freq, a->pos[i], q, nq, k, nk, d->rot ? d->rot + i * d->rope.n_rot : NULL, d->rot_fill);
        if (a->slot[i] < 0)
            colo_cpu_task_fail(COLO_EINVAL);
        else if (!colo_cpu_kv_store_row(d->kv_type, k, a->v + i * kv_dim, a->kc, a->vc, a->slot[i], kv_dim))
            colo_cpu_task_fail(COLO_EUNSUPPORTED);
    }
}

colo_status colo_cpu_qk_store(colo_stream *s, const colo_qk_desc *d, float *q, float *k, const float *v,
                              const int32_t *pos, const int32_t *slot, int rows, void *k_cache, void *v_cache)
{
    qk_args a = {*d, q, k, v, pos, slot, rows, k_cache, v_cache};
    double per_row = (30.0 + (d->q_norm ? 5.0 : 0.0)) * (d->rope.n_heads + d->n_kv_heads) * d->rope.head_dim;
    return colo_cpu_launch(s, qk_task, &a, sizeof a, colo_cpu_chunks(s, rows, per_row));
}
