/* Integer dot products of the 5-bit formats (Q5_0, Q5_1) against
 * activations in 8-bit blocks of 32 (colo_blk_q8x), and of the K-quants
 * (Q2_K..Q6_K) against activations in 8-bit blocks of 256 with sums per 16
 * (colo_blk_q8k), with the same contract as dot.c: up to COLO_CPU_DOT_ROWS
 * activation rows per pass over a weight row, each output computed by the
 * same instructions whatever the number of rows.
 *
 * A K-quant super-block's products, scaled by its sub-blocks' integer
 * scales, add up in 32-bit integers; one float multiply per super-block
 * and row follows. Code offsets (Q3_K's - 4, Q6_K's - 32) and mins (Q2_K,
 * Q4_K, Q5_K) come from the activation's sums per 16. */
#include "kernels/cpu/dot_avx2.h"

#include <math.h>
#include <string.h>

/* ---- scalar dot products ---------------------------------------------------------------- */

/* The 5-bit code of element j (0..31) of a Q5_0/Q5_1 block. */
static inline int q5_code(const uint8_t *qs, uint32_t qh, int j)
{
    return (j < 16 ? qs[j] & 15 : qs[j - 16] >> 4) | (int)((qh >> j) & 1) << 4;
}

void colo_cpu_vec_dot_q5_0_scalar(int k, const void *wv, const colo_blk_q8x *x, size_t x_stride, int nr, float *out)
{
    const colo_blk_q5_0 *w = wv;
    for (int r = 0; r < nr; r++) {
        const colo_blk_q8x *xr = x + (size_t)r * x_stride;
        float sum = 0;
        for (int i = 0; i < k / 32; i++) {
            uint32_t qh;
            memcpy(&qh, w[i].qh, 4);
            int s = 0;
            for (int j = 0; j < 32; j++)
                s += (q5_code(w[i].qs, qh, j) - 16) * xr[i].qs[j];
            sum += colo_fp16_to_f32(w[i].d) * xr[i].d * (float)s;
        }
        out[r] = sum;
    }
}

void colo_cpu_vec_dot_q5_1_scalar(int k, const void *wv, const colo_blk_q8x *x, size_t x_stride, int nr, float *out)
{
    const colo_blk_q5_1 *w = wv;
    for (int r = 0; r < nr; r++) {
        const colo_blk_q8x *xr = x + (size_t)r * x_stride;
        float sum = 0;
        for (int i = 0; i < k / 32; i++) {
            uint32_t qh;
            memcpy(&qh, w[i].qh, 4);
            int s = 0;
            for (int j = 0; j < 32; j++)
                s += q5_code(w[i].qs, qh, j) * xr[i].qs[j];
            sum += colo_fp16_to_f32(w[i].d) * xr[i].d * (float)s + colo_fp16_to_f32(w[i].m) * xr[i].s;
        }
        out[r] = sum;
    }
}

/* The 2-bit code of element e (0..255) of a Q2_K/Q3_K super-block. */
static inline int k2_code(const uint8_t *qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

/* ---- AVX2 dot products ------------------------------------------------------------------- */

#ifdef DOT_AVX2

/* Byte j (0..31) = 0xff where bit j of the 32 little-endian bits at p is set, else 0. */
INLINE __m256i bits_to_bytes(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    const __m256i spread = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)v), spread);
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)); /* every bit but bit (j % 8) */
    return _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
}

INLINE __m256i q5_codes(const uint8_t *qs, const uint8_t *qh)
{
    return _mm256_or_si256(nibbles(qs), _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(16)));
}

INLINE __m256i srl16(__m256i v, int n) { return _mm256_srl_epi16(v, _mm_cvtsi32_si128(n)); }

/* Q5_0: x = (q - 16) d; sum = d dx sum(q qx) - 16 d sx. */
INLINE void q5_0_block(const colo_blk_q5_0 *w, const colo_blk_q8x *x, size_t xs, const int nr, __m256 *acc,
                       __m128 *corr)
{
    __m256i q = q5_codes(w->qs, w->qh);
    __m128 d = _mm_moveldup_ps(half1(&w->d));
    for (int r = 0; r < nr; r++) {
        const colo_blk_q8x *b = x + r * xs;
        __m128 t = _mm_mul_ps(d, ds_pair(b)); /* [d dx, d sx] */
        acc[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(t), dot_u8s8(q, load32(b->qs)), acc[r]);
        corr[r] = _mm_add_ps(corr[r], t);
    }
}

INLINE void q5_0_rows(int nb, const colo_blk_q5_0 *w, const colo_blk_q8x *x, size_t xs, const int nr, float *out)
{
    __m256 a0[COLO_CPU_DOT_ROWS], a1[COLO_CPU_DOT_ROWS];
    __m128 corr[COLO_CPU_DOT_ROWS];
    for (int r = 0; r < nr; r++)
        a0[r] = a1[r] = _mm256_setzero_ps(), corr[r] = _mm_setzero_ps();
    int i = 0;
    for (; i + 2 <= nb; i += 2) {
        q5_0_block(w + i, x + i, xs, nr, a0, corr);
        q5_0_block(w + i + 1, x + i + 1, xs, nr, a1, corr);
    }
    if (i < nb)
        q5_0_block(w + i, x + i, xs, nr, a0, corr);
    for (int r = 0; r < nr; r++)
        out[r] = hsum8(_mm256_add_ps(a0[r], a1[r])) - 16 * _mm_cvtss_f32(_mm_movehdup_ps(corr[r]));
}

/* Q5_1: x = q d + m; sum = d dx sum(q qx) + m sx. */
INLINE void q5_1_block(const colo_blk_q5_1 *w, const colo_blk_q8x *x, size_t xs, const int nr, __m256 *acc,
                       __m128 *mins)
{
    __m256i q = q5_codes(w->qs, w->qh);
    __m128 dm = half2(&w->d); /* d and m are adjacent */
    for (int r = 0; r < nr; r++) {
        const colo_blk_q8x *b = x + r * xs;
        __m128 t = _mm_mul_ps(dm, ds_pair(b)); /* [d dx, m sx] */
        acc[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(t), dot_u8s8(q, load32(b->qs)), acc[r]);
        mins[r] = _mm_add_ps(mins[r], t);
    }
}

INLINE void q5_1_rows(int nb, const colo_blk_q5_1 *w, const colo_blk_q8x *x, size_t xs, const int nr, float *out)
{
    __m256 a0[COLO_CPU_DOT_ROWS], a1[COLO_CPU_DOT_ROWS];
    __m128 mins[COLO_CPU_DOT_ROWS];
    for (int r = 0; r < nr; r++)
        a0[r] = a1[r] = _mm256_setzero_ps(), mins[r] = _mm_setzero_ps();
    int i = 0;
    for (; i + 2 <= nb; i += 2) {
        q5_1_block(w + i, x + i, xs, nr, a0, mins);
        q5_1_block(w + i + 1, x + i + 1, xs, nr, a1, mins);
    }
    if (i < nb)
        q5_1_block(w + i, x + i, xs, nr, a0, mins);
    for (int r = 0; r < nr; r++)
        out[r] = hsum8(_mm256_add_ps(a0[r], a1[r])) + _mm_cvtss_f32(_mm_movehdup_ps(mins[r]));
}

#endif

DOT_ENTRY(q5_0, colo_blk_q5_0, 32)
DOT_ENTRY(q5_1, colo_blk_q5_1, 32)

/* ---- K-quants against activations with one scale per 256 (colo_blk_q8k) ------------------ */

void colo_cpu_quantize_q8k(const float *x, colo_blk_q8k *out, int k)
{
#ifdef DOT_AVX2
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int b = 0; b < k / 256; b++) {
        const float *v = x + b * 256;
        __m256 am = _mm256_setzero_ps();
        for (int j = 0; j < 256; j += 8)
            am = _mm256_max_ps(am, _mm256_andnot_ps(sign, _mm256_loadu_ps(v + j)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(am), _mm256_extractf128_ps(am, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float d = _mm_cvtss_f32(m4) / 127, id = d ? 1.0f / d : 0;
        __m256 vid = _mm256_set1_ps(id);
        for (int j = 0; j < 256; j += 32) {
            /* Round to nearest even, as lrintf does. */
            __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + j), vid));
            __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + j + 8), vid));
            __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + j + 16), vid));
            __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + j + 24), vid));
            __m256i s01 = _mm256_add_epi32(i0, i1), s23 = _mm256_add_epi32(i2, i3);
            __m128i t01 = _mm_add_epi32(_mm256_castsi256_si128(s01), _mm256_extracti128_si256(s01, 1));
            __m128i t23 = _mm_add_epi32(_mm256_castsi256_si128(s23), _mm256_extracti128_si256(s23, 1));
            __m128i h = _mm_hadd_epi32(t01, t23);
            h = _mm_hadd_epi32(h, h); /* [sum 0..15, sum 16..31, ...] */
            out[b].bsums[j / 16] = (int16_t)_mm_cvtsi128_si32(h);
            out[b].bsums[j / 16 + 1] = (int16_t)_mm_extract_epi32(h, 1);
            __m256i p8 = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
            p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(out[b].qs + j), p8);
        }
        out[b].d = d;
    }
#else
    colo_cpu_quantize_q8k_scalar(x, out, k);
#endif
}

void colo_cpu_quantize_q8k_scalar(const float *x, colo_blk_q8k *out, int k)
{
    for (int b = 0; b < k / 256; b++) {
        const float *v = x + b * 256;
        float amax = 0;
        for (int j = 0; j < 256; j++)
            amax = fabsf(v[j]) > amax ? fabsf(v[j]) : amax;
        float d = amax / 127, id = d ? 1.0f / d : 0;
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) {
                int q = (int)lrintf(v[16 * g + l] * id);
                out[b].qs[16 * g + l] = (int8_t)q;
                sum += q;
            }
            out[b].bsums[g] = (int16_t)sum;
        }
        out[b].d = d;
    }
}

/* Scalar: per super-block, integer sums per sub-block, then d dx (and dmin dx). */
void colo_cpu_vec_dot_k_q2_k_scalar(int k, const void *wv, const colo_blk_q8k *x, size_t x_stride, int nr, float *out)
{
    const colo_blk_q2_k *w = wv;
    for (int r = 0; r < nr; r++) {
        const colo_blk_q8k *xr = x + (size_t)r * x_stride;
        float sum = 0;
        for (int i = 0; i < k / 256; i++) {
            int isum = 0, msum = 0;
            for (int g = 0; g < 16; g++) {
                int s = 0;
                for (int l = 0; l < 16; l++)
                    s += k2_code(w[i].qs, 16 * g + l) * xr[i].qs[16 * g + l];
                isum += (w[i].scales[g] & 15) * s;
                msum += (w[i].scales[g] >> 4) * xr[i].bsums[g];
            }
            sum += xr[i].d * (colo_fp16_to_f32(w[i].d) * (float)isum - colo_fp16_to_f32(w[i].dmin) * (float)msum);
        }
        out[r] = sum;
    }
}

void colo_cpu_vec_dot_k_q3_k_scalar(int k, const void *wv, const colo_blk_q8k *x, size_t x_stride, int nr, float *out)
{
    const colo_blk_q3_k *w = wv;
    for (int r = 0; r < nr; r++) {
        const colo_blk_q8k *xr = x + (size_t)r * x_stride;
        float sum = 0;
        for (int i = 0; i < k / 256; i++) {
            int8_t sc[16];
            colo_q3_k_scales(w[i].scales, sc);
            int isum = 0;
            for (int g = 0; g < 16; g++) {
                int s = 0;
                for (int l = 0; l < 16; l++) {
                    int e = 16 * g + l;
                    int q = k2_code(w[i].qs, e) | ((w[i].hmask[e % 32] >> (e / 32)) & 1) << 2;
                    s += (q - 4) * xr[i].qs[e];
                }
                isum += sc[g] * s;
            }
            sum += colo_fp16_to_f32(w[i].d) * xr[i].d * (float)isum;
        }
        out[r] = sum;
    }
}

static float k4_scalar_q8k(uint16_t d16, uint16_t dmin16, const uint8_t *scales, const uint8_t *qh, const uint8_t *qs,
                           const colo_blk_q8k *xb)
{
    uint8_t sc[8], mn[8];
    colo_k4_scales(scales, sc, mn);
    int isum = 0, msum = 0;
    for (int j = 0; j < 8; j++) {
        int s = 0;
        for (int l = 0; l < 32; l++) {
            int q = (qs[32 * (j / 2) + l] >> (4 * (j & 1))) & 15;
            if (qh)
                q |= ((qh[l] >> j) & 1) << 4;
            s += q * xb->qs[32 * j + l];
        }
        isum += sc[j] * s;
        msum += mn[j] * (xb->bsums[2 * j] + xb->bsums[2 * j + 1]);
    }
    return xb->d * (colo_fp16_to_f32(d16) * (float)isum - colo_fp16_to_f32(dmin16) * (float)msum);
}

void colo_cpu_vec_dot_k_q4_k_scalar(int k, const void *wv, const colo_blk_q8k *x, size_t x_stride, int nr, float *out)
{
    const colo_blk_q4_k *w = wv;
    for (int r = 0; r < nr; r++) {
        float sum = 0;
        for (int i = 0; i < k / 256; i++)
            sum += k4_scalar_q8k(w[i].d, w[i].dmin, w[i].scales, NULL, w[i].qs, x + (size_t)r * x_stride + i);
        out[r] = sum;
    }
}

void colo_cpu_vec_dot_k_q5_k_scalar(int k, const void *wv, const colo_blk_q8k *x, size_t x_stride, int nr, float *out)
{
    const colo_blk_q5_k *w = wv;
    for (int r = 0; r < nr; r++) {
        float sum = 0;
        for (int i = 0; i < k / 256; i++)
            sum += k4_scalar_q8k(w[i].d, w[i].dmin, w[i].scales, w[i].qh, w[i].qs, x + (size_t)r * x_stride + i);
        out[r] = sum;
    }
}

void colo_cpu_vec_dot_k_q6_k_scalar(int k, const void *wv, const colo_blk_q8k *x, size_t x_stride, int nr, float *out)
{
    const colo_blk_q6_k *w = wv;
    for (int r = 0; r < nr; r++) {
        const colo_blk_q8k *xr = x + (size_t)r * x_stride;
        float sum = 0;
        for (int i = 0; i < k / 256; i++) {
            int isum = 0;
            for (int g = 0; g < 16; g++) {
                int s = 0;
                for (int l = 0; l < 16; l++) {
                    int e = 16 * g + l, half = e / 128, j = (e % 128) / 32, ll = e % 32;
                    int lo = (w[i].ql[64 * half + ll + 32 * (j & 1)] >> (4 * (j >> 1))) & 15;
                    int hi = (w[i].qh[32 * half + ll] >> (2 * j)) & 3;
                    s += ((lo | hi << 4) - 32) * xr[i].qs[e];
                }
                isum += w[i].scales[g] * s; /* GGML's scale order is element order */
            }
            sum += colo_fp16_to_f32(w[i].d) * xr[i].d * (float)isum;
        }
        out[r] = sum;
    }
}

#ifdef DOT_AVX2

INLINE __m128i k_hsum_prep(__m256i v) { return _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)); }
INLINE int hsum_i32(__m256i v)
{
    __m128i s = k_hsum_prep(v);
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}
INLINE __m256i load_bsums(const colo_blk_q8k *b) { return _mm256_loadu_si256((const __m256i *)b->bsums); }

/* From 16 int16 scales (sub-blocks 0..15 of 16), the pair of sub-blocks
 * 8 h + 2 j and 8 h + 2 j + 1 as maddubs lanes want them: the first in the
 * low 8 lanes, the second in the high 8. */
INLINE __m256i scale_pair(__m256i sc16, const int h, const int j)
{
    __m256i dup = h ? _mm256_permute2x128_si256(sc16, sc16, 0x11) : _mm256_permute2x128_si256(sc16, sc16, 0x00);
    const __m256i base = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
                                          2, 3, 2, 3, 2, 3);
    return _mm256_shuffle_epi8(dup, _mm256_add_epi8(base, _mm256_set1_epi8((char)(4 * j))));
}

/* Q4_K / Q5_K (as k4_rows): integer sums of the whole super-block per row,
 * the mins from the activation's sums per 16. */
INLINE void k4_rows_k(int nsb, const uint8_t *w, const int bsize, const int qh_off, const int qs_off,
                      const colo_blk_q8k *x, size_t xs, const int nr, float *out)
{
    __m256 acc[COLO_CPU_DOT_ROWS];
    float mins[COLO_CPU_DOT_ROWS];
    for (int r = 0; r < nr; r++)
        acc[r] = _mm256_setzero_ps(), mins[r] = 0;
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    for (int i = 0; i < nsb; i++) {
        const uint8_t *b = w + (size_t)i * bsize;
        __m128 dd = half2((const uint16_t *)(const void *)b);
        float d = _mm_cvtss_f32(dd), dmin = _mm_cvtss_f32(_mm_movehdup_ps(dd));
        /* The 8 scales and 8 mins (colo_k4_scales) as bytes 0..7 and 8..15 of
         * one vector, built in registers from 32-bit words. */
        uint32_t x0, x1, x2;
        memcpy(&x0, b + 4, 4), memcpy(&x1, b + 8, 4), memcpy(&x2, b + 12, 4);
        __m128i scmn = _mm_setr_epi32((int)(x0 & 0x3f3f3f3f),
                                      (int)((x2 & 0x0f0f0f0f) | (((x0 >> 6) & 0x03030303) << 4)),
                                      (int)(x1 & 0x3f3f3f3f),
                                      (int)(((x2 >> 4) & 0x0f0f0f0f) | (((x1 >> 6) & 0x03030303) << 4)));
        /* mins as 16 int16 lanes, each sub-block's min twice (its two sums per 16). */
        __m256i mn16 = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(scmn, scmn));
        __m256i sc16 = _mm256_cvtepu8_epi16(scmn); /* lanes 0..7: the scales, in both halves below */
        sc16 = _mm256_permute2x128_si256(sc16, sc16, 0x00);
        __m256i qh = qh_off ? load32(b + qh_off) : _mm256_setzero_si256();
        __m256i isum[COLO_CPU_DOT_ROWS];
        for (int r = 0; r < nr; r++)
            isum[r] = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            __m256i raw = load32(b + qs_off + 32 * c);
            __m256i q0 = _mm256_and_si256(raw, m4), q1 = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
            if (qh_off) { /* bits 2c and 2c + 1 of qh; qh moves down by 2 per chunk */
                q0 = _mm256_or_si256(q0, _mm256_slli_epi16(_mm256_and_si256(qh, one), 4));
                q1 = _mm256_or_si256(q1, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 1), one), 4));
                qh = _mm256_srli_epi16(qh, 2);
            }
            __m256i s0 = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0100 + 0x0404 * c)));
            __m256i s1 = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0302 + 0x0404 * c)));
            for (int r = 0; r < nr; r++) {
                const int8_t *xq = x[r * xs + i].qs + 64 * c;
                __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(q0, load32(xq)), s0);
                __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(q1, load32(xq + 32)), s1);
                isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(p0, p1));
            }
        }
        for (int r = 0; r < nr; r++) {
            const colo_blk_q8k *xb = x + r * xs + i;
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * xb->d), _mm256_cvtepi32_ps(isum[r]), acc[r]);
            mins[r] += dmin * xb->d * (float)hsum_i32(_mm256_madd_epi16(load_bsums(xb), mn16));
        }
    }
    for (int r = 0; r < nr; r++)
        out[r] = hsum8(acc[r]) - mins[r];
}

INLINE void q4_k_k_rows(int nsb, const colo_blk_q4_k *w, const colo_blk_q8k *x, size_t xs, const int nr, float *out)
{
    k4_rows_k(nsb, (const uint8_t *)w, sizeof *w, 0, offsetof(colo_blk_q4_k, qs), x, xs, nr, out);
}

INLINE void q5_k_k_rows(int nsb, const colo_blk_q5_k *w, const colo_blk_q8k *x, size_t xs, const int nr, float *out)
{
    k4_rows_k(nsb, (const uint8_t *)w, sizeof *w, offsetof(colo_blk_q5_k, qh), offsetof(colo_blk_q5_k, qs), x, xs,
              nr, out);
}

/* Q6_K: unsigned codes 0..63 times x, scaled per 16; the -32 offset from the
 * activation's sums per 16: sum = d dx (sum_g sc_g (sum q x) - 32 sum_g sc_g bsum_g). */
INLINE void q6_k_k_rows(int nsb, const colo_blk_q6_k *w, const colo_blk_q8k *x, size_t xs, const int nr, float *out)
{
    __m256 acc[COLO_CPU_DOT_ROWS];
    for (int r = 0; r < nr; r++)
        acc[r] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    for (int i = 0; i < nsb; i++) {
        const colo_blk_q6_k *b = w + i;
        float d = _mm_cvtss_f32(half1(&b->d));
        /* Scales in element order (sub-block g of 16): GGML stores them as
         * 8 half + (g % 2) + 2 quarter, which is g itself. */
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
        __m256i isum[COLO_CPU_DOT_ROWS];
        for (int r = 0; r < nr; r++)
            isum[r] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                       _mm256_slli_epi32(_mm256_madd_epi16(load_bsums(x + r * xs + i), sc16), 5));
        for (int h = 0; h < 2; h++) {
            __m256i ql0 = load32(b->ql + 64 * h), ql1 = load32(b->ql + 64 * h + 32), qh = load32(b->qh + 32 * h);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
            q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
            for (int j = 0; j < 4; j++) {
                __m256i s16 = scale_pair(sc16, h, j);
                for (int r = 0; r < nr; r++) {
                    __m256i p = _mm256_maddubs_epi16(q[j], load32(x[r * xs + i].qs + 128 * h + 32 * j));
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(p, s16));
                }
            }
        }
        for (int r = 0; r < nr; r++)
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[r * xs + i].d), _mm256_cvtepi32_ps(isum[r]), acc[r]);
    }
    for (int r = 0; r < nr; r++)
        out[r] = hsum8(acc[r]);
}

/* Q3_K: unsigned codes 0..7 (value q - 4), signed scales per 16. */
INLINE void q3_k_k_rows(int nsb, const colo_blk_q3_k *w, const colo_blk_q8k *x, size_t xs, const int nr, float *out)
{
    __m256 acc[COLO_CPU_DOT_ROWS];
    for (int r = 0; r < nr; r++)
        acc[r] = _mm256_setzero_ps();
    const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    for (int i = 0; i < nsb; i++) {
        const colo_blk_q3_k *b = w + i;
        float d = _mm_cvtss_f32(half1(&b->d));
        /* The 16 scales + 32 as bytes of 4 words (colo_q3_k_scales, in
         * registers: through memory the vector load would wait on the
         * byte stores). */
        uint32_t x0, x1, x2, sw[4];
        memcpy(&x0, b->scales, 4), memcpy(&x1, b->scales + 4, 4), memcpy(&x2, b->scales + 8, 4);
        sw[0] = (x0 & 0x0f0f0f0f) | ((x2 & 0x03030303) << 4);
        sw[1] = (x1 & 0x0f0f0f0f) | (((x2 >> 2) & 0x03030303) << 4);
        sw[2] = ((x0 >> 4) & 0x0f0f0f0f) | (((x2 >> 4) & 0x03030303) << 4);
        sw[3] = ((x1 >> 4) & 0x0f0f0f0f) | (((x2 >> 6) & 0x03030303) << 4);
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_sub_epi8(
            _mm_setr_epi32((int)sw[0], (int)sw[1], (int)sw[2], (int)sw[3]), _mm_set1_epi8(32)));
        __m256i isum[COLO_CPU_DOT_ROWS];
        for (int r = 0; r < nr; r++)
            isum[r] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                       _mm256_slli_epi32(_mm256_madd_epi16(load_bsums(x + r * xs + i), sc16), 2));
        __m256i hm = load32(b->hmask);
        /* Code bits: the low two from qs (shifted by 2 j), the third from
         * bit 4 n + j of hmask, moved straight to bit 2 (one shift by an
         * immediate; the bits a 16-bit shift carries across bytes are
         * masked off). */
#define Q3_HI(s) ((s) <= 2 ? _mm256_slli_epi16(hm, 2 - (s)) : _mm256_srli_epi16(hm, (s) - 2))
#define Q3_STEP(n, j)                                                                                             \
    do {                                                                                                          \
        __m256i lo = _mm256_and_si256((j) ? _mm256_srli_epi16(raw, 2 * (j)) : raw, m3);                           \
        __m256i q = _mm256_or_si256(lo, _mm256_and_si256(Q3_HI(4 * (n) + (j)), four));                           \
        __m256i s16 = _mm256_shuffle_epi8(dup, _mm256_add_epi8(base, _mm256_set1_epi8((char)(4 * (j)))));         \
        for (int r = 0; r < nr; r++) {                                                                            \
            __m256i p = _mm256_maddubs_epi16(q, load32(x[r * xs + i].qs + 128 * (n) + 32 * (j)));                 \
            isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(p, s16));                                       \
        }                                                                                                         \
    } while (0)
        const __m256i base = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2,
                                              3, 2, 3, 2, 3, 2, 3);
        __m256i raw = load32(b->qs), dup = _mm256_permute2x128_si256(sc16, sc16, 0x00);
        Q3_STEP(0, 0); Q3_STEP(0, 1); Q3_STEP(0, 2); Q3_STEP(0, 3);
        raw = load32(b->qs + 32), dup = _mm256_permute2x128_si256(sc16, sc16, 0x11);
        Q3_STEP(1, 0); Q3_STEP(1, 1); Q3_STEP(1, 2); Q3_STEP(1, 3);
#undef Q3_STEP
#undef Q3_HI
        for (int r = 0; r < nr; r++)
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[r * xs + i].d), _mm256_cvtepi32_ps(isum[r]), acc[r]);
    }
    for (int r = 0; r < nr; r++)
        out[r] = hsum8(acc[r]);
}

/* Q2_K: codes 0..3; sum = dx (d sum_g sc_g (sum q x) - dmin sum_g m_g bsum_g). */
INLINE void q2_k_k_rows(int nsb, const colo_blk_q2_k *w, const colo_blk_q8k *x, size_t xs, const int nr, float *out)
{
    __m256 acc[COLO_CPU_DOT_ROWS];
    float mins[COLO_CPU_DOT_ROWS];
    for (int r = 0; r < nr; r++)
        acc[r] = _mm256_setzero_ps(), mins[r] = 0;
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int i = 0; i < nsb; i++) {
        const colo_blk_q2_k *b = w + i;
        __m128 dd = half2(&b->d);
        float d = _mm_cvtss_f32(dd), dmin = _mm_cvtss_f32(_mm_movehdup_ps(dd));
        __m128i packed = _mm_loadu_si128((const __m128i *)b->scales);
        __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(15)));
        __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(packed, _mm_set1_epi8(15)));
        __m256i isum[COLO_CPU_DOT_ROWS];
        for (int r = 0; r < nr; r++)
            isum[r] = _mm256_setzero_si256();
        for (int n = 0; n < 2; n++) {
            __m256i raw = load32(b->qs + 32 * n);
            for (int j = 0; j < 4; j++) {
                __m256i q = _mm256_and_si256(srl16(raw, 2 * j), m3);
                __m256i s16 = scale_pair(sc16, n, j);
                for (int r = 0; r < nr; r++) {
                    __m256i p = _mm256_maddubs_epi16(q, load32(x[r * xs + i].qs + 128 * n + 32 * j));
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(p, s16));
                }
            }
        }
        for (int r = 0; r < nr; r++) {
            const colo_blk_q8k *xb = x + r * xs + i;
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * xb->d), _mm256_cvtepi32_ps(isum[r]), acc[r]);
            mins[r] += dmin * xb->d * (float)hsum_i32(_mm256_madd_epi16(load_bsums(xb), mn16));
        }
    }
    for (int r = 0; r < nr; r++)
        out[r] = hsum8(acc[r]) - mins[r];
}

#define DOT_K_ENTRY(name, blk_t)                                                                            \
    void colo_cpu_vec_dot_k_##name(int k, const void *w, const colo_blk_q8k *x, size_t xs, int nr, float *out) \
    {                                                                                                         \
        const blk_t *wb = w;                                                                                  \
        switch (nr) {                                                                                         \
        case 1: name##_k_rows(k / 256, wb, x, xs, 1, out); break;                                             \
        case 2: name##_k_rows(k / 256, wb, x, xs, 2, out); break;                                             \
        case 3: name##_k_rows(k / 256, wb, x, xs, 3, out); break;                                             \
        default: name##_k_rows(k / 256, wb, x, xs, 4, out); break;                                            \
        }                                                                                                     \
    }
#else
#define DOT_K_ENTRY(name, blk_t)                                                                            \
    void colo_cpu_vec_dot_k_##name(int k, const void *w, const colo_blk_q8k *x, size_t xs, int nr, float *out) \
    {                                                                                                         \
        colo_cpu_vec_dot_k_##name##_scalar(k, w, x, xs, nr, out);                                             \
    }
#endif

DOT_K_ENTRY(q2_k, colo_blk_q2_k)
DOT_K_ENTRY(q3_k, colo_blk_q3_k)
DOT_K_ENTRY(q4_k, colo_blk_q4_k)
DOT_K_ENTRY(q5_k, colo_blk_q5_k)
DOT_K_ENTRY(q6_k, colo_blk_q6_k)

colo_cpu_vec_dot_k_fn colo_cpu_vec_dot_k_for(colo_dtype t)
{
    switch (t) {
    case COLO_Q2_K: return colo_cpu_vec_dot_k_q2_k;
    case COLO_Q3_K: return colo_cpu_vec_dot_k_q3_k;
    case COLO_Q4_K: return colo_cpu_vec_dot_k_q4_k;
    case COLO_Q5_K: return colo_cpu_vec_dot_k_q5_k;
    case COLO_Q6_K: return colo_cpu_vec_dot_k_q6_k;
    default: return NULL;
    }
}
