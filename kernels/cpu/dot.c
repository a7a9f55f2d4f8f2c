/* Dot products for linear on the CPU: weight rows in GGML block formats (Q4_0,
 * Q4_1, Q8_0; the others are in dot_k.c)
 * against activations quantized to 8-bit blocks of 32 (integer products,
 * one float scale per block), and F32/F16 rows against F32 rows.
 *
 * The AVX2 versions unpack each weight block once and use it for up to
 * COLO_CPU_DOT_ROWS activation rows, so a few decode rows cost little more
 * than one. Per output the instruction sequence does not depend on how many
 * rows share the pass (results are independent of batch composition). The
 * scalar versions are the fallback where AVX2 is absent and the reference
 * the tests compare against. */
#include "kernels/cpu/cpu_kernels.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu/dot_avx2.h"

/* ---- activations to 8 bits ---------------------------------------------------------- */

void colo_cpu_quantize_q8x_scalar(const float *x, colo_blk_q8x *out, int k)
{
    for (int b = 0; b < k / 32; b++) {
        const float *v = x + b * 32;
        float amax = 0;
        for (int j = 0; j < 32; j++)
            amax = fabsf(v[j]) > amax ? fabsf(v[j]) : amax;
        float d = amax / 127, id = d ? 1.0f / d : 0;
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            int q = (int)lrintf(v[j] * id);
            out[b].qs[j] = (int8_t)q;
            sum += q;
        }
        out[b].d = d;
        out[b].s = d * (float)sum;
    }
}

void colo_cpu_quantize_q8x(const float *x, colo_blk_q8x *out, int k)
{
#ifdef DOT_AVX2
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int b = 0; b < k / 32; b++) {
        const float *v = x + b * 32;
        __m256 v0 = _mm256_loadu_ps(v), v1 = _mm256_loadu_ps(v + 8), v2 = _mm256_loadu_ps(v + 16),
               v3 = _mm256_loadu_ps(v + 24);
        __m256 am = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                                  _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(am), _mm256_extractf128_ps(am, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float amax = _mm_cvtss_f32(m4);
        float d = amax / 127, id = d ? 1.0f / d : 0;
        __m256 vid = _mm256_set1_ps(id);
        /* Round to nearest even, as lrintf does. */
        __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, vid)), i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, vid));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, vid)), i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, vid));
        __m256i sum = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        s4 = _mm_hadd_epi32(s4, s4);
        s4 = _mm_hadd_epi32(s4, s4);
        /* Pack 32-bit -> 16-bit -> 8-bit and undo the lane interleaving of the packs. */
        __m256i p16a = _mm256_packs_epi32(i0, i1), p16b = _mm256_packs_epi32(i2, i3);
        __m256i p8 = _mm256_packs_epi16(p16a, p16b);
        p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)out[b].qs, p8);
        out[b].d = d;
        out[b].s = d * (float)_mm_cvtsi128_si32(s4);
    }
#else
    colo_cpu_quantize_q8x_scalar(x, out, k);
#endif
}

/* ---- scalar dot products ---------------------------------------------------------------- */

void colo_cpu_vec_dot_q4_0_scalar(int k, const void *wv, const colo_blk_q8x *x, size_t x_stride, int nr, float *out)
{
    const colo_blk_q4_0 *w = wv;
    for (int r = 0; r < nr; r++) {
        const colo_blk_q8x *xr = x + (size_t)r * x_stride;
        float sum = 0;
        for (int i = 0; i < k / 32; i++) {
            int s = 0;
            for (int j = 0; j < 16; j++)
                s += ((w[i].qs[j] & 15) - 8) * xr[i].qs[j] + ((w[i].qs[j] >> 4) - 8) * xr[i].qs[j + 16];
            sum += colo_fp16_to_f32(w[i].d) * xr[i].d * (float)s;
        }
        out[r] = sum;
    }
}

void colo_cpu_vec_dot_q4_1_scalar(int k, const void *wv, const colo_blk_q8x *x, size_t x_stride, int nr, float *out)
{
    const colo_blk_q4_1 *w = wv;
    for (int r = 0; r < nr; r++) {
        const colo_blk_q8x *xr = x + (size_t)r * x_stride;
        float sum = 0;
        for (int i = 0; i < k / 32; i++) {
            int s = 0;
            for (int j = 0; j < 16; j++)
                s += (w[i].qs[j] & 15) * xr[i].qs[j] + (w[i].qs[j] >> 4) * xr[i].qs[j + 16];
            sum += colo_fp16_to_f32(w[i].d) * xr[i].d * (float)s + colo_fp16_to_f32(w[i].m) * xr[i].s;
        }
        out[r] = sum;
    }
}

void colo_cpu_vec_dot_q8_0_scalar(int k, const void *wv, const colo_blk_q8x *x, size_t x_stride, int nr, float *out)
{
    const colo_blk_q8_0 *w = wv;
    for (int r = 0; r < nr; r++) {
        const colo_blk_q8x *xr = x + (size_t)r * x_stride;
        float sum = 0;
        for (int i = 0; i < k / 32; i++) {
            int s = 0;
            for (int j = 0; j < 32; j++)
                s += w[i].qs[j] * xr[i].qs[j];
            sum += colo_fp16_to_f32(w[i].d) * xr[i].d * (float)s;
        }
        out[r] = sum;
    }
}

/* ---- AVX2 dot products ------------------------------------------------------------------- */

#ifdef DOT_AVX2
/* Each output accumulates even and odd blocks in two registers (two
 * independent FMA chains), then adds them. */

/* Q4_0: x = (q - 8) d; sum = d dx sum(q qx) - 8 d sx. */
INLINE void q4_0_block(const colo_blk_q4_0 *w, const colo_blk_q8x *x, size_t xs, const int nr, __m256 *acc,
                       __m128 *corr)
{
    __m256i q = nibbles(w->qs);
    __m128 d = _mm_moveldup_ps(half1(&w->d));
    for (int r = 0; r < nr; r++) {
        const colo_blk_q8x *b = x + r * xs;
        __m128 t = _mm_mul_ps(d, ds_pair(b)); /* [d dx, d sx] */
        acc[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(t), dot_u8s8(q, load32(b->qs)), acc[r]);
        corr[r] = _mm_add_ps(corr[r], t);
    }
}

INLINE void q4_0_rows(int nb, const colo_blk_q4_0 *w, const colo_blk_q8x *x, size_t xs, const int nr, float *out)
{
    __m256 a0[COLO_CPU_DOT_ROWS], a1[COLO_CPU_DOT_ROWS];
    __m128 corr[COLO_CPU_DOT_ROWS];
    for (int r = 0; r < nr; r++)
        a0[r] = a1[r] = _mm256_setzero_ps(), corr[r] = _mm_setzero_ps();
    int i = 0;
    for (; i + 2 <= nb; i += 2) {
        q4_0_block(w + i, x + i, xs, nr, a0, corr);
        q4_0_block(w + i + 1, x + i + 1, xs, nr, a1, corr);
    }
    if (i < nb)
        q4_0_block(w + i, x + i, xs, nr, a0, corr);
    for (int r = 0; r < nr; r++)
        out[r] = hsum8(_mm256_add_ps(a0[r], a1[r])) - 8 * _mm_cvtss_f32(_mm_movehdup_ps(corr[r]));
}

/* Q4_1: x = q d + m; sum = d dx sum(q qx) + m sx. */
INLINE void q4_1_block(const colo_blk_q4_1 *w, const colo_blk_q8x *x, size_t xs, const int nr, __m256 *acc,
                       __m128 *mins)
{
    __m256i q = nibbles(w->qs);
    __m128 dm = half2(&w->d); /* d and m are adjacent */
    for (int r = 0; r < nr; r++) {
        const colo_blk_q8x *b = x + r * xs;
        __m128 t = _mm_mul_ps(dm, ds_pair(b)); /* [d dx, m sx] */
        acc[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(t), dot_u8s8(q, load32(b->qs)), acc[r]);
        mins[r] = _mm_add_ps(mins[r], t);
    }
}

INLINE void q4_1_rows(int nb, const colo_blk_q4_1 *w, const colo_blk_q8x *x, size_t xs, const int nr, float *out)
{
    __m256 a0[COLO_CPU_DOT_ROWS], a1[COLO_CPU_DOT_ROWS];
    __m128 mins[COLO_CPU_DOT_ROWS];
    for (int r = 0; r < nr; r++)
        a0[r] = a1[r] = _mm256_setzero_ps(), mins[r] = _mm_setzero_ps();
    int i = 0;
    for (; i + 2 <= nb; i += 2) {
        q4_1_block(w + i, x + i, xs, nr, a0, mins);
        q4_1_block(w + i + 1, x + i + 1, xs, nr, a1, mins);
    }
    if (i < nb)
        q4_1_block(w + i, x + i, xs, nr, a0, mins);
    for (int r = 0; r < nr; r++)
        out[r] = hsum8(_mm256_add_ps(a0[r], a1[r])) + _mm_cvtss_f32(_mm_movehdup_ps(mins[r]));
}

INLINE void q8_0_block(const colo_blk_q8_0 *w, const colo_blk_q8x *x, size_t xs, const int nr, __m256 *acc)
{
    __m256i q = load32(w->qs), uq = _mm256_sign_epi8(q, q);
    __m128 d = half1(&w->d);
    for (int r = 0; r < nr; r++) {
        const colo_blk_q8x *b = x + r * xs;
        __m128 t = _mm_mul_ss(d, _mm_load_ss(&b->d));
        __m256 p = dot_u8s8(uq, _mm256_sign_epi8(load32(b->qs), q));
        acc[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(t), p, acc[r]);
    }
}

INLINE void q8_0_rows(int nb, const colo_blk_q8_0 *w, const colo_blk_q8x *x, size_t xs, const int nr, float *out)
{
    __m256 a0[COLO_CPU_DOT_ROWS], a1[COLO_CPU_DOT_ROWS];
    for (int r = 0; r < nr; r++)
        a0[r] = a1[r] = _mm256_setzero_ps();
    int i = 0;
    for (; i + 2 <= nb; i += 2) {
        q8_0_block(w + i, x + i, xs, nr, a0);
        q8_0_block(w + i + 1, x + i + 1, xs, nr, a1);
    }
    if (i < nb)
        q8_0_block(w + i, x + i, xs, nr, a0);
    for (int r = 0; r < nr; r++)
        out[r] = hsum8(_mm256_add_ps(a0[r], a1[r]));
}

#endif

DOT_ENTRY(q4_0, colo_blk_q4_0, 32)
DOT_ENTRY(q4_1, colo_blk_q4_1, 32)
DOT_ENTRY(q8_0, colo_blk_q8_0, 32)

colo_cpu_vec_dot_fn colo_cpu_vec_dot_for(colo_dtype t)
{
    switch (t) {
    case COLO_Q4_0: return colo_cpu_vec_dot_q4_0;
    case COLO_Q4_1: return colo_cpu_vec_dot_q4_1;
    case COLO_Q8_0: return colo_cpu_vec_dot_q8_0;
    case COLO_Q5_0: return colo_cpu_vec_dot_q5_0;
    case COLO_Q5_1: return colo_cpu_vec_dot_q5_1;
    default: return NULL;
    }
}

/* ---- float dot products ------------------------------------------------------------------ */

float colo_cpu_dot_f32(const float *a, const float *b, int n)
{
    int i = 0;
    float sum = 0;
#ifdef DOT_AVX2
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    sum = hsum8(_mm256_add_ps(acc0, acc1));
#endif
    for (; i < n; i++)
        sum += a[i] * b[i];
    return sum;
}

float colo_cpu_dot_f16(const uint16_t *w, const float *x, int n)
{
    int i = 0;
    float sum = 0;
#ifdef DOT_AVX2
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i)));
        __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i + 8)));
        acc0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i), acc0);
        acc1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i + 8), acc1);
    }
    sum = hsum8(_mm256_add_ps(acc0, acc1));
#endif
    for (; i < n; i++)
        sum += colo_fp16_to_f32(w[i]) * x[i];
    return sum;
}
