/* The 5-bit formats (Q5_0, Q5_1) and the K-quants (Q2_K..Q6_K): row
 * dequantizers and quantizers, GGML's layouts (kernels/quant.h).
 *
 * Dequantized values use the arithmetic the CUDA decoder (kernels/cuda/
 * common.cuh) repeats, so both give the same bits: Q5_0 (q - 16) * d, Q5_1
 * fma(q, d, m), Q2_K/Q4_K/Q5_K fma(d * sc, q, -(dmin * m)), Q3_K
 * (d * sc) * q. The quantizers round to nearest with one scale per block
 * (no search): valid blocks of reasonable accuracy for synthetic models. */
#include "kernels/cpu/cpu_kernels.h"

#include <math.h>
#include <string.h>

#if defined(__AVX2__) && defined(__FMA__)
#define QK_AVX2 1
#include <immintrin.h>
#endif

/* ---- dequantizers ---------------------------------------------------------------------- */

static void deq_q5(const uint8_t *qh4, const uint8_t *qs, float d, float m, bool has_min, float *y)
{
    uint32_t qh;
    memcpy(&qh, qh4, 4);
#if defined(QK_AVX2)
    /* Bytes j = code of element j: nibbles, then bit j of qh spread to byte j. */
    __m128i raw = _mm_loadu_si128((const __m128i *)qs), m15 = _mm_set1_epi8(15);
    __m256i codes = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m15), _mm_and_si128(raw, m15));
    const __m256i spread = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
    __m256i bits = _mm256_or_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), spread),
                                   _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    bits = _mm256_and_si256(_mm256_cmpeq_epi8(bits, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(16));
    codes = _mm256_or_si256(codes, bits);
    __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m), v16 = _mm256_set1_ps(16.0f);
    for (int g = 0; g < 4; g++) {
        __m128i c8 = g < 2 ? _mm256_castsi256_si128(codes) : _mm256_extracti128_si256(codes, 1);
        __m256 c = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(g & 1 ? _mm_srli_si128(c8, 8) : c8));
        /* (q - 16) is exact in float, so this equals the scalar (q - 16) * d. */
        _mm256_storeu_ps(y + 8 * g, has_min ? _mm256_fmadd_ps(c, vd, vm) : _mm256_mul_ps(_mm256_sub_ps(c, v16), vd));
    }
    return;
#endif

    for (int j = 0; j < 16; j++) {
        int a = (qs[j] & 15) | (int)(((qh >> j) & 1) << 4), b = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
        if (has_min) {
            y[j] = fmaf((float)a, d, m);
            y[j + 16] = fmaf((float)b, d, m);
        } else {
            y[j] = (float)(a - 16) * d;
            y[j + 16] = (float)(b - 16) * d;
        }
    }
}

#if defined(QK_AVX2)
/* y[0..31] = v[j] * a (mul: a0 for j < 16, a1 after) or fma(a, v[j], b)
 * (fma), for 32 signed bytes v. */
static inline void store32(__m256i v, float a0, float a1, float b0, float b1, bool fma, float *y)
{
    __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int g = 0; g < 4; g++) {
        __m256 a = _mm256_set1_ps(g < 2 ? a0 : a1), b = _mm256_set1_ps(g < 2 ? b0 : b1);
        __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[g]));
        _mm256_storeu_ps(y + 8 * g, fma ? _mm256_fmadd_ps(a, f, b) : _mm256_mul_ps(a, f));
    }
}
#endif

static void deq_q6_k(const colo_blk_q6_k *b, float *y)
{
    const float d = colo_fp16_to_f32(b->d);
#if defined(QK_AVX2)
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
    for (int h = 0; h < 2; h++) {
        __m256i ql0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
        __m256i ql1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        __m256i q[4];
        q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
        q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
        q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30));
        q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                               _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
        const int8_t *sc = b->scales + 8 * h;
        for (int j = 0; j < 4; j++)
            store32(_mm256_sub_epi8(q[j], k32), d * (float)sc[2 * j], d * (float)sc[2 * j + 1], 0, 0, false,
                    y + 128 * h + 32 * j);
    }
    return;
#endif
    const uint8_t *ql = b->ql, *qh = b->qh;
    const int8_t *sc = b->scales;
    for (int half = 0; half < 2; half++) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = (int)((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int q2 = (int)((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * sc[is] * q1;
            y[l + 32] = d * sc[is + 2] * q2;
            y[l + 64] = d * sc[is + 4] * q3;
            y[l + 96] = d * sc[is + 6] * q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

static void deq_q2_k(const colo_blk_q2_k *b, float *y)
{
    float d = colo_fp16_to_f32(b->d), dmin = colo_fp16_to_f32(b->dmin);
#if defined(QK_AVX2)
    for (int n = 0; n < 2; n++) {
        __m256i raw = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * n));
        for (int j = 0; j < 4; j++) {
            __m256i q = _mm256_and_si256(_mm256_srl_epi16(raw, _mm_cvtsi32_si128(2 * j)), _mm256_set1_epi8(3));
            int g = 8 * n + 2 * j;
            store32(q, d * (float)(b->scales[g] & 15), d * (float)(b->scales[g + 1] & 15),
                    -(dmin * (float)(b->scales[g] >> 4)), -(dmin * (float)(b->scales[g + 1] >> 4)), true,
                    y + 128 * n + 32 * j);
        }
    }
    return;
#endif
    for (int g = 0; g < 16; g++) { /* sub-block of 16 */
        float dl = d * (float)(b->scales[g] & 15), ml = dmin * (float)(b->scales[g] >> 4);
        int e0 = 16 * g, shift = 2 * ((e0 % 128) / 32);
        const uint8_t *q = b->qs + 32 * (e0 / 128) + e0 % 32;
        for (int l = 0; l < 16; l++)
            y[e0 + l] = fmaf(dl, (float)((q[l] >> shift) & 3), -ml);
    }
}

static void deq_q3_k(const colo_blk_q3_k *b, float *y)
{
    float d = colo_fp16_to_f32(b->d);
    int8_t sc[16];
    colo_q3_k_scales(b->scales, sc);
#if defined(QK_AVX2)
    __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
    for (int n = 0; n < 2; n++) {
        __m256i raw = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * n));
        for (int j = 0; j < 4; j++) {
            __m256i lo = _mm256_and_si256(_mm256_srl_epi16(raw, _mm_cvtsi32_si128(2 * j)), _mm256_set1_epi8(3));
            __m256i hb = _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(4 * n + j)), _mm256_set1_epi8(1));
            __m256i q = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hb, 2)), _mm256_set1_epi8(4));
            int g = 8 * n + 2 * j;
            store32(q, d * (float)sc[g], d * (float)sc[g + 1], 0, 0, false, y + 128 * n + 32 * j);
        }
    }
    return;
#endif
    for (int g = 0; g < 16; g++) {
        float dl = d * (float)sc[g];
        int e0 = 16 * g, shift = 2 * ((e0 % 128) / 32), hbit = e0 / 32;
        const uint8_t *q = b->qs + 32 * (e0 / 128) + e0 % 32, *hm = b->hmask + e0 % 32;
        for (int l = 0; l < 16; l++) {
            int v = (int)((q[l] >> shift) & 3) | (int)(((hm[l] >> hbit) & 1) << 2);
            y[e0 + l] = dl * (float)(v - 4);
        }
    }
}

/* Q4_K and Q5_K (qh NULL for Q4_K). */
static void deq_k4(uint16_t d16, uint16_t dmin16, const uint8_t *scales, const uint8_t *qh, const uint8_t *qs,
                   float *y)
{
    float d = colo_fp16_to_f32(d16), dmin = colo_fp16_to_f32(dmin16);
    uint8_t sc[8], mn[8];
    colo_k4_scales(scales, sc, mn);
    for (int j = 0; j < 8; j++) { /* sub-block of 32 */
        float d1 = d * (float)sc[j], m1 = -(dmin * (float)mn[j]);
        const uint8_t *q = qs + 32 * (j / 2);
        int shift = 4 * (j & 1);
        float *o = y + 32 * j;
#if defined(QK_AVX2)
        __m256 vd = _mm256_set1_ps(d1), vm = _mm256_set1_ps(m1);
        __m256i raw = _mm256_loadu_si256((const __m256i *)q);
        __m256i v = _mm256_and_si256(shift ? _mm256_srli_epi16(raw, 4) : raw, _mm256_set1_epi8(15));
        if (qh) {
            __m256i h = _mm256_and_si256(_mm256_srl_epi16(_mm256_loadu_si256((const __m256i *)qh), _mm_cvtsi32_si128(j)),
                                         _mm256_set1_epi8(1));
            v = _mm256_or_si256(v, _mm256_slli_epi16(h, 4));
        }
        __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
        _mm256_storeu_ps(o, _mm256_fmadd_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), vm));
        _mm256_storeu_ps(o + 8, _mm256_fmadd_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))), vm));
        _mm256_storeu_ps(o + 16, _mm256_fmadd_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), vm));
        _mm256_storeu_ps(o + 24, _mm256_fmadd_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))), vm));
#else
        for (int l = 0; l < 32; l++) {
            int v = (q[l] >> shift) & 15;
            if (qh)
                v |= ((qh[l] >> j) & 1) << 4;
            o[l] = fmaf(d1, (float)v, m1);
        }
#endif
    }
}

void colo_cpu_dequantize_row_k(colo_dtype t, const void *src, float *dst, int64_t n)
{
    switch (t) {
    case COLO_Q5_0:
        for (int64_t b = 0; b < n / 32; b++) {
            const colo_blk_q5_0 *q = (const colo_blk_q5_0 *)src + b;
            deq_q5(q->qh, q->qs, colo_fp16_to_f32(q->d), 0, false, dst + b * 32);
        }
        break;
    case COLO_Q5_1:
        for (int64_t b = 0; b < n / 32; b++) {
            const colo_blk_q5_1 *q = (const colo_blk_q5_1 *)src + b;
            deq_q5(q->qh, q->qs, colo_fp16_to_f32(q->d), colo_fp16_to_f32(q->m), true, dst + b * 32);
        }
        break;
    case COLO_Q2_K:
        for (int64_t b = 0; b < n / 256; b++)
            deq_q2_k((const colo_blk_q2_k *)src + b, dst + b * 256);
        break;
    case COLO_Q6_K:
        for (int64_t b = 0; b < n / 256; b++)
            deq_q6_k((const colo_blk_q6_k *)src + b, dst + b * 256);
        break;
    case COLO_Q3_K:
        for (int64_t b = 0; b < n / 256; b++)
            deq_q3_k((const colo_blk_q3_k *)src + b, dst + b * 256);
        break;
    case COLO_Q4_K:
        for (int64_t b = 0; b < n / 256; b++) {
            const colo_blk_q4_k *q = (const colo_blk_q4_k *)src + b;
            deq_k4(q->d, q->dmin, q->scales, NULL, q->qs, dst + b * 256);
        }
        break;
    case COLO_Q5_K:
        for (int64_t b = 0; b < n / 256; b++) {
            const colo_blk_q5_k *q = (const colo_blk_q5_k *)src + b;
            deq_k4(q->d, q->dmin, q->scales, q->qh, q->qs, dst + b * 256);
        }
        break;
    default:
        break;
    }
}

/* ---- quantizers ------------------------------------------------------------------------ */

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static void quant_q5_0(const float *x, colo_blk_q5_0 *q)
{
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    float d = max / -16, id = d ? 1.0f / d : 0;
    q->d = colo_f32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        int a = clampi((int)lrintf(x[j] * id) + 16, 0, 31), b = clampi((int)lrintf(x[j + 16] * id) + 16, 0, 31);
        q->qs[j] = (uint8_t)((a & 15) | ((b & 15) << 4));
        qh |= (uint32_t)(a >> 4) << j | (uint32_t)(b >> 4) << (j + 16);
    }
    memcpy(q->qh, &qh, 4);
}

static void quant_q5_1(const float *x, colo_blk_q5_1 *q)
{
    float lo = x[0], hi = x[0];
    for (int j = 1; j < 32; j++) {
        lo = x[j] < lo ? x[j] : lo;
        hi = x[j] > hi ? x[j] : hi;
    }
    float d = (hi - lo) / 31, id = d ? 1.0f / d : 0;
    q->d = colo_f32_to_fp16(d);
    q->m = colo_f32_to_fp16(lo);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        int a = clampi((int)lrintf((x[j] - lo) * id), 0, 31), b = clampi((int)lrintf((x[j + 16] - lo) * id), 0, 31);
        q->qs[j] = (uint8_t)((a & 15) | ((b & 15) << 4));
        qh |= (uint32_t)(a >> 4) << j | (uint32_t)(b >> 4) << (j + 16);
    }
    memcpy(q->qh, &qh, 4);
}

/* Scale and min of each sub-block of len elements for codes 0..nmax:
 * x ~ scale * q - min with min >= 0 (the range always includes 0, as GGML's). */
static void sub_scale_min(const float *x, int len, int nmax, float *scale, float *min)
{
    float lo = 0, hi = 0;
    for (int l = 0; l < len; l++) {
        lo = x[l] < lo ? x[l] : lo;
        hi = x[l] > hi ? x[l] : hi;
    }
    *scale = (hi - lo) / (float)nmax;
    *min = -lo;
}

/* 6- or 4-bit codes of v[0..n) against a super-scale (max / nmax): the scale
 * as stored (fp16) and the codes. */
static float super_scale(const float *v, int n, int nmax, uint8_t *codes)
{
    float max = 0;
    for (int j = 0; j < n; j++)
        max = v[j] > max ? v[j] : max;
    float d = colo_fp16_to_f32(colo_f32_to_fp16(max / (float)nmax)), id = d ? 1.0f / d : 0;
    for (int j = 0; j < n; j++)
        codes[j] = (uint8_t)clampi((int)lrintf(v[j] * id), 0, nmax);
    return d;
}

/* The code of x for the stored scale dl and min ml (x ~ dl * q - ml). */
static int code_of(float x, float dl, float ml, int nmax)
{
    return dl ? clampi((int)lrintf((x + ml) / dl), 0, nmax) : 0;
}

static void quant_q2_k(const float *x, colo_blk_q2_k *b)
{
    float scale[16], min[16];
    uint8_t sc[16], mn[16];
    for (int g = 0; g < 16; g++)
        sub_scale_min(x + 16 * g, 16, 3, &scale[g], &min[g]);
    float d = super_scale(scale, 16, 15, sc), dmin = super_scale(min, 16, 15, mn);
    b->d = colo_f32_to_fp16(d);
    b->dmin = colo_f32_to_fp16(dmin);
    memset(b->qs, 0, sizeof b->qs);
    for (int g = 0; g < 16; g++) {
        b->scales[g] = (uint8_t)(sc[g] | mn[g] << 4);
        float dl = d * (float)sc[g], ml = dmin * (float)mn[g];
        for (int l = 0; l < 16; l++) {
            int e = 16 * g + l;
            b->qs[32 * (e / 128) + e % 32] |= (uint8_t)(code_of(x[e], dl, ml, 3) << (2 * ((e % 128) / 32)));
        }
    }
}

static void quant_q3_k(const float *x, colo_blk_q3_k *b)
{
    float scale[16], amax_s = 0, max_s = 0;
    for (int g = 0; g < 16; g++) {
        float amax = 0, max = 0;
        for (int l = 0; l < 16; l++)
            if (fabsf(x[16 * g + l]) > amax) {
                amax = fabsf(x[16 * g + l]);
                max = x[16 * g + l];
            }
        scale[g] = max / -4; /* the largest magnitude maps to code -4 */
        if (fabsf(scale[g]) > amax_s) {
            amax_s = fabsf(scale[g]);
            max_s = scale[g];
        }
    }
    float d = colo_fp16_to_f32(colo_f32_to_fp16(max_s / -32)), id = d ? 1.0f / d : 0;
    b->d = colo_f32_to_fp16(d);
    memset(b->hmask, 0, sizeof b->hmask);
    memset(b->qs, 0, sizeof b->qs);
    memset(b->scales, 0, sizeof b->scales);
    for (int g = 0; g < 16; g++) {
        int s = clampi((int)lrintf(scale[g] * id), -32, 31);
        int u = s + 32;
        if (g < 8)
            b->scales[g] |= (uint8_t)(u & 15);
        else
            b->scales[g - 8] |= (uint8_t)((u & 15) << 4);
        b->scales[8 + (g & 3)] |= (uint8_t)((u >> 4) << (2 * (g >> 2)));
        float dl = d * (float)s;
        for (int l = 0; l < 16; l++) {
            int e = 16 * g + l;
            int q = dl ? clampi((int)lrintf(x[e] / dl), -4, 3) + 4 : 4;
            b->qs[32 * (e / 128) + e % 32] |= (uint8_t)((q & 3) << (2 * ((e % 128) / 32)));
            b->hmask[e % 32] |= (uint8_t)((q >> 2) << (e / 32));
        }
    }
}

/* Q4_K and Q5_K (qh NULL for Q4_K): codes 0..nmax. */
static void quant_k4(const float *x, uint16_t *d16, uint16_t *dmin16, uint8_t *scales, uint8_t *qh, uint8_t *qs,
                     int nmax)
{
    float scale[8], min[8];
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; j++)
        sub_scale_min(x + 32 * j, 32, nmax, &scale[j], &min[j]);
    float d = super_scale(scale, 8, 63, sc), dmin = super_scale(min, 8, 63, mn);
    *d16 = colo_f32_to_fp16(d);
    *dmin16 = colo_f32_to_fp16(dmin);
    for (int j = 0; j < 4; j++) {
        scales[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        scales[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
        scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
    memset(qs, 0, 128);
    if (qh)
        memset(qh, 0, 32);
    for (int j = 0; j < 8; j++) {
        float dl = d * (float)sc[j], ml = dmin * (float)mn[j];
        for (int l = 0; l < 32; l++) {
            int q = code_of(x[32 * j + l], dl, ml, nmax);
            qs[32 * (j / 2) + l] |= (uint8_t)((q & 15) << (4 * (j & 1)));
            if (qh)
                qh[l] |= (uint8_t)((q >> 4) << j);
        }
    }
}

static void quant_q6_k(const float *x, colo_blk_q6_k *b)
{
    float scale[16], amax_s = 0;
    for (int g = 0; g < 16; g++) {
        float amax = 0, max = 0;
        for (int l = 0; l < 16; l++)
            if (fabsf(x[16 * g + l]) > amax) {
                amax = fabsf(x[16 * g + l]);
                max = x[16 * g + l];
            }
        scale[g] = max / -32; /* the largest magnitude maps to code -32 */
        amax_s = fabsf(scale[g]) > amax_s ? fabsf(scale[g]) : amax_s;
    }
    float d = colo_fp16_to_f32(colo_f32_to_fp16(amax_s / 127)), id = d ? 1.0f / d : 0;
    b->d = colo_f32_to_fp16(d);
    memset(b->ql, 0, sizeof b->ql);
    memset(b->qh, 0, sizeof b->qh);
    for (int g = 0; g < 16; g++)
        b->scales[g] = (int8_t)clampi((int)lrintf(scale[g] * id), -127, 127);
    for (int e = 0; e < 256; e++) {
        /* Element e: half e / 128, quarter (e % 128) / 32, l = e % 32; scale 8 half + l / 16 + 2 quarter. */
        int half = e / 128, j = (e % 128) / 32, l = e % 32;
        float dl = d * (float)b->scales[8 * half + l / 16 + 2 * j];
        int q = dl ? clampi((int)lrintf(x[e] / dl), -32, 31) + 32 : 32;
        b->ql[64 * half + l + 32 * (j & 1)] |= (uint8_t)((q & 15) << (4 * (j >> 1)));
        b->qh[32 * half + l] |= (uint8_t)((q >> 4) << (2 * j));
    }
}

colo_status colo_cpu_quantize_row_k(colo_dtype t, const float *src, void *dst, int64_t n)
{
    switch (t) {
    case COLO_Q5_0:
        for (int64_t b = 0; b < n / 32; b++)
            quant_q5_0(src + b * 32, (colo_blk_q5_0 *)dst + b);
        return COLO_OK;
    case COLO_Q5_1:
        for (int64_t b = 0; b < n / 32; b++)
            quant_q5_1(src + b * 32, (colo_blk_q5_1 *)dst + b);
        return COLO_OK;
    case COLO_Q2_K:
        for (int64_t b = 0; b < n / 256; b++)
            quant_q2_k(src + b * 256, (colo_blk_q2_k *)dst + b);
        return COLO_OK;
    case COLO_Q3_K:
        for (int64_t b = 0; b < n / 256; b++)
            quant_q3_k(src + b * 256, (colo_blk_q3_k *)dst + b);
        return COLO_OK;
    case COLO_Q4_K:
        for (int64_t b = 0; b < n / 256; b++) {
            colo_blk_q4_k *q = (colo_blk_q4_k *)dst + b;
            quant_k4(src + b * 256, &q->d, &q->dmin, q->scales, NULL, q->qs, 15);
        }
        return COLO_OK;
    case COLO_Q5_K:
        for (int64_t b = 0; b < n / 256; b++) {
            colo_blk_q5_k *q = (colo_blk_q5_k *)dst + b;
            quant_k4(src + b * 256, &q->d, &q->dmin, q->scales, q->qh, q->qs, 31);
        }
        return COLO_OK;
    case COLO_Q6_K:
        for (int64_t b = 0; b < n / 256; b++)
            quant_q6_k(src + b * 256, (colo_blk_q6_k *)dst + b);
        return COLO_OK;
    default:
        return COLO_EUNSUPPORTED;
    }
}
