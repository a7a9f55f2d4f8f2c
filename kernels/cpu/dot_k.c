/* Integer dot products of the 5-bit formats (Q5_0, Q5_1) and the K-quants
 * (Q2_K..Q5_K; Q6_K is in dot.c) against activations in 8-bit blocks of 32
 * (colo_blk_q8x), with the same contract as dot.c: up to COLO_CPU_DOT_ROWS
 * activation rows per pass over a weight row, each output computed by the
 * same instructions whatever the number of rows.
 *
 * One activation block of 32 meets one sub-block of 32 (Q4_K, Q5_K) or two
 * of 16 (Q2_K, Q3_K): the integer products are scaled by the sub-blocks'
 * integer scales before the one float multiply per block; the mins of
 * Q5_1/Q2_K/Q4_K/Q5_K come out of the activation block's sum s (or, per 16,
 * of its integer sums). */
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

void colo_cpu_vec_dot_q2_k_scalar(int k, const void *wv, const colo_blk_q8x *x, size_t x_stride, int nr, float *out)
{
    const colo_blk_q2_k *w = wv;
    for (int r = 0; r < nr; r++) {
        const colo_blk_q8x *xr = x + (size_t)r * x_stride;
        float sum = 0;
        for (int i = 0; i < k / 256; i++) {
            float d = colo_fp16_to_f32(w[i].d), dmin = colo_fp16_to_f32(w[i].dmin);
            for (int blk = 0; blk < 8; blk++) {
                const colo_blk_q8x *xb = xr + i * 8 + blk;
                int isum = 0, msum = 0;
                for (int g = 0; g < 2; g++) {
                    int sc = w[i].scales[2 * blk + g], s = 0, sx = 0;
                    for (int l = 16 * g; l < 16 * g + 16; l++) {
                        s += k2_code(w[i].qs, 32 * blk + l) * xb->qs[l];
                        sx += xb->qs[l];
                    }
                    isum += (sc & 15) * s;
                    msum += (sc >> 4) * sx;
                }
                sum += xb->d * (d * (float)isum - dmin * (float)msum);
            }
        }
        out[r] = sum;
    }
}

void colo_cpu_vec_dot_q3_k_scalar(int k, const void *wv, const colo_blk_q8x *x, size_t x_stride, int nr, float *out)
{
    const colo_blk_q3_k *w = wv;
    for (int r = 0; r < nr; r++) {
        const colo_blk_q8x *xr = x + (size_t)r * x_stride;
        float sum = 0;
        for (int i = 0; i < k / 256; i++) {
            float d = colo_fp16_to_f32(w[i].d);
            int8_t sc[16];
            colo_q3_k_scales(w[i].scales, sc);
            for (int blk = 0; blk < 8; blk++) {
                const colo_blk_q8x *xb = xr + i * 8 + blk;
                int isum = 0;
                for (int g = 0; g < 2; g++) {
                    int s = 0;
                    for (int l = 16 * g; l < 16 * g + 16; l++) {
                        int e = 32 * blk + l;
                        int q = k2_code(w[i].qs, e) | ((w[i].hmask[e % 32] >> (e / 32)) & 1) << 2;
                        s += (q - 4) * xb->qs[l];
                    }
                    isum += sc[2 * blk + g] * s;
                }
                sum += d * xb->d * (float)isum;
            }
        }
        out[r] = sum;
    }
}

/* Q4_K and Q5_K (qh NULL for Q4_K), one super-block against 8 activation blocks. */
static float k4_scalar(uint16_t d16, uint16_t dmin16, const uint8_t *scales, const uint8_t *qh, const uint8_t *qs,
                       const colo_blk_q8x *xb)
{
    float d = colo_fp16_to_f32(d16), dmin = colo_fp16_to_f32(dmin16), sum = 0;
    uint8_t sc[8], mn[8];
    colo_k4_scales(scales, sc, mn);
    for (int j = 0; j < 8; j++) {
        int s = 0;
        for (int l = 0; l < 32; l++) {
            int q = (qs[32 * (j / 2) + l] >> (4 * (j & 1))) & 15;
            if (qh)
                q |= ((qh[l] >> j) & 1) << 4;
            s += q * xb[j].qs[l];
        }
        sum += d * (float)sc[j] * xb[j].d * (float)s - dmin * (float)mn[j] * xb[j].s;
    }
    return sum;
}

void colo_cpu_vec_dot_q4_k_scalar(int k, const void *wv, const colo_blk_q8x *x, size_t x_stride, int nr, float *out)
{
    const colo_blk_q4_k *w = wv;
    for (int r = 0; r < nr; r++) {
        const colo_blk_q8x *xr = x + (size_t)r * x_stride;
        float sum = 0;
        for (int i = 0; i < k / 256; i++)
            sum += k4_scalar(w[i].d, w[i].dmin, w[i].scales, NULL, w[i].qs, xr + i * 8);
        out[r] = sum;
    }
}

void colo_cpu_vec_dot_q5_k_scalar(int k, const void *wv, const colo_blk_q8x *x, size_t x_stride, int nr, float *out)
{
    const colo_blk_q5_k *w = wv;
    for (int r = 0; r < nr; r++) {
        const colo_blk_q8x *xr = x + (size_t)r * x_stride;
        float sum = 0;
        for (int i = 0; i < k / 256; i++)
            sum += k4_scalar(w[i].d, w[i].dmin, w[i].scales, w[i].qh, w[i].qs, xr + i * 8);
        out[r] = sum;
    }
}

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

/* Q4_K / Q5_K: super-blocks of bsize bytes, d and dmin at 0, the packed
 * scales at 4, qs (and qh when qh_off) at the offsets given; sub-block j is
 * activation block j of the super-block. */
INLINE void k4_rows(int nsb, const uint8_t *w, const int bsize, const int qh_off, const int qs_off,
                    const colo_blk_q8x *x, size_t xs, const int nr, float *out)
{
    __m256 acc[2][COLO_CPU_DOT_ROWS];
    float mins[COLO_CPU_DOT_ROWS];
    for (int r = 0; r < nr; r++)
        acc[0][r] = acc[1][r] = _mm256_setzero_ps(), mins[r] = 0;
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    for (int i = 0; i < nsb; i++) {
        const uint8_t *b = w + (size_t)i * bsize;
        __m128 dd = half2((const uint16_t *)(const void *)b);
        float d = _mm_cvtss_f32(dd), dmin = _mm_cvtss_f32(_mm_movehdup_ps(dd));
        uint8_t sc[8], mn[8];
        colo_k4_scales(b + 4, sc, mn);
        __m256i qh = qh_off ? load32(b + qh_off) : _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            __m256i raw = load32(b + qs_off + 32 * c);
            __m256i q[2] = {_mm256_and_si256(raw, m4), _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4)};
            if (qh_off) {
                q[0] = _mm256_or_si256(q[0], _mm256_slli_epi16(_mm256_and_si256(srl16(qh, 2 * c), one), 4));
                q[1] = _mm256_or_si256(q[1], _mm256_slli_epi16(_mm256_and_si256(srl16(qh, 2 * c + 1), one), 4));
            }
            for (int h = 0; h < 2; h++) {
                int j = 2 * c + h;
                float dsc = d * (float)sc[j], dmm = dmin * (float)mn[j];
                for (int r = 0; r < nr; r++) {
                    const colo_blk_q8x *xb = x + r * xs + i * 8 + j;
                    acc[h][r] = _mm256_fmadd_ps(_mm256_set1_ps(dsc * xb->d), dot_u8s8(q[h], load32(xb->qs)), acc[h][r]);
                    mins[r] += dmm * xb->s;
                }
            }
        }
    }
    for (int r = 0; r < nr; r++)
        out[r] = hsum8(_mm256_add_ps(acc[0][r], acc[1][r])) - mins[r];
}

INLINE void q4_k_rows(int nsb, const colo_blk_q4_k *w, const colo_blk_q8x *x, size_t xs, const int nr, float *out)
{
    k4_rows(nsb, (const uint8_t *)w, sizeof *w, 0, offsetof(colo_blk_q4_k, qs), x, xs, nr, out);
}

INLINE void q5_k_rows(int nsb, const colo_blk_q5_k *w, const colo_blk_q8x *x, size_t xs, const int nr, float *out)
{
    k4_rows(nsb, (const uint8_t *)w, sizeof *w, offsetof(colo_blk_q5_k, qh), offsetof(colo_blk_q5_k, qs), x, xs, nr,
            out);
}

/* Q2_K: codes 0..3; sum = dx (d sum_g sc_g sum(q qx) - dmin sum_g m_g sum(qx)) per activation block. */
INLINE void q2_k_rows(int nsb, const colo_blk_q2_k *w, const colo_blk_q8x *x, size_t xs, const int nr, float *out)
{
    __m256 accd[COLO_CPU_DOT_ROWS], accm[COLO_CPU_DOT_ROWS];
    for (int r = 0; r < nr; r++)
        accd[r] = accm[r] = _mm256_setzero_ps();
    const __m256i m3 = _mm256_set1_epi8(3), ones = _mm256_set1_epi8(1);
    for (int i = 0; i < nsb; i++) {
        const colo_blk_q2_k *b = w + i;
        __m128 dd = half2(&b->d);
        float d = _mm_cvtss_f32(dd), dmin = _mm_cvtss_f32(_mm_movehdup_ps(dd));
        for (int n = 0; n < 2; n++) {
            __m256i raw = load32(b->qs + 32 * n);
            for (int j = 0; j < 4; j++) {
                __m256i q = _mm256_and_si256(srl16(raw, 2 * j), m3);
                int g = 8 * n + 2 * j;
                __m256i sc = _mm256_set_m128i(_mm_set1_epi16(b->scales[g + 1] & 15), _mm_set1_epi16(b->scales[g] & 15));
                __m256i mn = _mm256_set_m128i(_mm_set1_epi16(b->scales[g + 1] >> 4), _mm_set1_epi16(b->scales[g] >> 4));
                for (int r = 0; r < nr; r++) {
                    const colo_blk_q8x *xb = x + r * xs + i * 8 + 4 * n + j;
                    __m256i xq = load32(xb->qs);
                    __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(q, xq), sc));
                    __m256 pm = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(ones, xq), mn));
                    accd[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * xb->d), p, accd[r]);
                    accm[r] = _mm256_fmadd_ps(_mm256_set1_ps(dmin * xb->d), pm, accm[r]);
                }
            }
        }
    }
    for (int r = 0; r < nr; r++)
        out[r] = hsum8(accd[r]) - hsum8(accm[r]);
}

/* Q3_K: codes q - 4 in -4..3, signed scales per 16; sum = d dx sum_g sc_g sum((q - 4) qx). */
INLINE void q3_k_rows(int nsb, const colo_blk_q3_k *w, const colo_blk_q8x *x, size_t xs, const int nr, float *out)
{
    __m256 acc[2][COLO_CPU_DOT_ROWS];
    for (int r = 0; r < nr; r++)
        acc[0][r] = acc[1][r] = _mm256_setzero_ps();
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1), k4 = _mm256_set1_epi8(4);
    for (int i = 0; i < nsb; i++) {
        const colo_blk_q3_k *b = w + i;
        float d = _mm_cvtss_f32(half1(&b->d));
        int8_t sc[16];
        colo_q3_k_scales(b->scales, sc);
        __m256i hm = load32(b->hmask);
        for (int n = 0; n < 2; n++) {
            __m256i raw = load32(b->qs + 32 * n);
            for (int j = 0; j < 4; j++) {
                __m256i lo = _mm256_and_si256(srl16(raw, 2 * j), m3);
                __m256i hi = _mm256_slli_epi16(_mm256_and_si256(srl16(hm, 4 * n + j), one), 2);
                __m256i qs = _mm256_sub_epi8(_mm256_or_si256(lo, hi), k4), uq = _mm256_sign_epi8(qs, qs);
                int g = 8 * n + 2 * j;
                __m256i s16 = _mm256_set_m128i(_mm_set1_epi16(sc[g + 1]), _mm_set1_epi16(sc[g]));
                for (int r = 0; r < nr; r++) {
                    const colo_blk_q8x *xb = x + r * xs + i * 8 + 4 * n + j;
                    __m256i p16 = _mm256_maddubs_epi16(uq, _mm256_sign_epi8(load32(xb->qs), qs));
                    __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, s16));
                    acc[j & 1][r] = _mm256_fmadd_ps(_mm256_set1_ps(d * xb->d), p, acc[j & 1][r]);
                }
            }
        }
    }
    for (int r = 0; r < nr; r++)
        out[r] = hsum8(_mm256_add_ps(acc[0][r], acc[1][r]));
}

#endif

DOT_ENTRY(q5_0, colo_blk_q5_0, 32)
DOT_ENTRY(q5_1, colo_blk_q5_1, 32)
DOT_ENTRY(q2_k, colo_blk_q2_k, 256)
DOT_ENTRY(q3_k, colo_blk_q3_k, 256)
DOT_ENTRY(q4_k, colo_blk_q4_k, 256)
DOT_ENTRY(q5_k, colo_blk_q5_k, 256)
