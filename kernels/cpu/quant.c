/* Block formats: conversions, quantizers, dequantizers, and the int8 dot
 * products the linear op uses on quantized weights. */
#include "kernels/cpu/cpu_kernels.h"

#include <math.h>
#include <string.h>

#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

float colo_fp16_to_f32(uint16_t h)
{
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) {
                man <<= 1;
                exp--;
            }
            bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
#endif
}

uint16_t colo_f32_to_fp16(float f)
{
#if defined(__F16C__)
    return _cvtss_sh(f, 0);
#else
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t man = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff)
        return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    if (exp >= 31)
        return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10)
            return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)exp << 10) | (man >> 13), rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1)))
        half++;
    return (uint16_t)half;
#endif
}

float colo_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t colo_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

static void deq_q6_k(const colo_blk_q6_k *b, float *y)
{
    const float d = colo_fp16_to_f32(b->d);
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

void colo_dequantize_row(colo_dtype t, const void *src, float *dst, int64_t n)
{
    switch (t) {
    case COLO_F32:
        memcpy(dst, src, (size_t)n * 4);
        break;
    case COLO_F16: {
        int64_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)src + i))));
#endif
        for (; i < n; i++)
            dst[i] = colo_fp16_to_f32(((const uint16_t *)src)[i]);
        break;
    }
    case COLO_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = colo_bf16_to_f32(((const uint16_t *)src)[i]);
        break;
    case COLO_Q4_0:
        for (int64_t b = 0; b < n / 32; b++) {
            const colo_blk_q4_0 *q = (const colo_blk_q4_0 *)src + b;
            float d = colo_fp16_to_f32(q->d);
            for (int j = 0; j < 16; j++) {
                dst[b * 32 + j] = ((q->qs[j] & 15) - 8) * d;
                dst[b * 32 + j + 16] = ((q->qs[j] >> 4) - 8) * d;
            }
        }
        break;
    case COLO_Q4_1:
        for (int64_t b = 0; b < n / 32; b++) {
            const colo_blk_q4_1 *q = (const colo_blk_q4_1 *)src + b;
            float d = colo_fp16_to_f32(q->d), m = colo_fp16_to_f32(q->m);
#if defined(__AVX2__) && defined(__FMA__)
            __m128i raw = _mm_loadu_si128((const __m128i *)q->qs);
            __m128i lo = _mm_and_si128(raw, _mm_set1_epi8(15));
            __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(15));
            __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
            float *o = dst + b * 32;
            _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), vd, vm));
            _mm256_storeu_ps(o + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))), vd, vm));
            _mm256_storeu_ps(o + 16, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), vd, vm));
            _mm256_storeu_ps(o + 24, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))), vd, vm));
            continue;
#endif
            for (int j = 0; j < 16; j++) {
                dst[b * 32 + j] = (q->qs[j] & 15) * d + m;
                dst[b * 32 + j + 16] = (q->qs[j] >> 4) * d + m;
            }
        }
        break;
    case COLO_Q8_0:
        for (int64_t b = 0; b < n / 32; b++) {
            const colo_blk_q8_0 *q = (const colo_blk_q8_0 *)src + b;
            float d = colo_fp16_to_f32(q->d);
#if defined(__AVX2__) && defined(__FMA__)
            __m256 vd = _mm256_set1_ps(d);
            for (int j = 0; j < 32; j += 8)
                _mm256_storeu_ps(dst + b * 32 + j,
                                 _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q->qs + j)))), vd));
            continue;
#endif
            for (int j = 0; j < 32; j++)
                dst[b * 32 + j] = q->qs[j] * d;
        }
        break;
    case COLO_Q6_K:
        for (int64_t b = 0; b < n / 256; b++)
            deq_q6_k((const colo_blk_q6_k *)src + b, dst + b * 256);
        break;
    case COLO_I32:
        break;
    }
}

colo_status colo_quantize_row(colo_dtype t, const float *src, void *dst, int64_t n)
{
    switch (t) {
    case COLO_F32:
        memcpy(dst, src, (size_t)n * 4);
        return COLO_OK;
    case COLO_F16:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = colo_f32_to_fp16(src[i]);
        return COLO_OK;
    case COLO_BF16:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = colo_f32_to_bf16(src[i]);
        return COLO_OK;
    case COLO_Q4_0:
        for (int64_t b = 0; b < n / 32; b++) {
            const float *x = src + b * 32;
            float amax = 0, max = 0;
            for (int j = 0; j < 32; j++)
                if (fabsf(x[j]) > amax) {
                    amax = fabsf(x[j]);
                    max = x[j];
                }
            float d = max / -8, id = d ? 1.0f / d : 0;
            colo_blk_q4_0 *q = (colo_blk_q4_0 *)dst + b;
            q->d = colo_f32_to_fp16(d);
            for (int j = 0; j < 16; j++) {
                int a = (int)(x[j] * id + 8.5f), c = (int)(x[j + 16] * id + 8.5f);
                a = a > 15 ? 15 : a < 0 ? 0 : a;
                c = c > 15 ? 15 : c < 0 ? 0 : c;
                q->qs[j] = (uint8_t)(a | (c << 4));
            }
        }
        return COLO_OK;
    case COLO_Q4_1:
        for (int64_t b = 0; b < n / 32; b++) {
            const float *x = src + b * 32;
            float lo = x[0], hi = x[0];
            for (int j = 1; j < 32; j++) {
                lo = x[j] < lo ? x[j] : lo;
                hi = x[j] > hi ? x[j] : hi;
            }
            float d = (hi - lo) / 15, id = d ? 1.0f / d : 0;
            colo_blk_q4_1 *q = (colo_blk_q4_1 *)dst + b;
            q->d = colo_f32_to_fp16(d);
            q->m = colo_f32_to_fp16(lo);
            for (int j = 0; j < 16; j++) {
                int a = (int)((x[j] - lo) * id + 0.5f), c = (int)((x[j + 16] - lo) * id + 0.5f);
                a = a > 15 ? 15 : a < 0 ? 0 : a;
                c = c > 15 ? 15 : c < 0 ? 0 : c;
                q->qs[j] = (uint8_t)(a | (c << 4));
            }
        }
        return COLO_OK;
    case COLO_Q8_0:
        for (int64_t b = 0; b < n / 32; b++) {
            const float *x = src + b * 32;
            float amax = 0;
            for (int j = 0; j < 32; j++)
                amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
            float d = amax / 127, id = d ? 1.0f / d : 0;
            colo_blk_q8_0 *q = (colo_blk_q8_0 *)dst + b;
            q->d = colo_f32_to_fp16(d);
            for (int j = 0; j < 32; j++)
                q->qs[j] = (int8_t)roundf(x[j] * id);
        }
        return COLO_OK;
    default:
        return COLO_EUNSUPPORTED;
    }
}

/* ---- activations quantized to 8 bits for the integer dot products --------- */

void colo_cpu_quantize_q8x(const float *x, colo_blk_q8x *out, int k)
{
#if defined(__AVX2__) && defined(__FMA__)
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
    return;
#endif
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

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __m256 dot32_u8s8(__m256i u, __m256i s)
{
    __m256i p16 = _mm256_maddubs_epi16(u, s);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

static inline __m256i unpack_nibbles(const uint8_t *qs)
{
    __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    __m128i lo = _mm_and_si128(raw, _mm_set1_epi8(15));
    __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(15));
    return _mm256_set_m128i(hi, lo);
}
#endif

float colo_cpu_dot_q4_0(const colo_blk_q4_0 *w, const colo_blk_q8x *x, int nb)
{
#if defined(__AVX2__) && defined(__FMA__)
    __m256 acc = _mm256_setzero_ps();
    float corr = 0;
    for (int i = 0; i < nb; i++) {
        float dw = colo_fp16_to_f32(w[i].d);
        __m256 p = dot32_u8s8(unpack_nibbles(w[i].qs), _mm256_loadu_si256((const __m256i *)x[i].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * x[i].d), p, acc);
        corr += dw * x[i].s;
    }
    return hsum8(acc) - 8 * corr;
#else
    float sum = 0;
    for (int i = 0; i < nb; i++) {
        int s = 0;
        for (int j = 0; j < 16; j++)
            s += ((w[i].qs[j] & 15) - 8) * x[i].qs[j] + ((w[i].qs[j] >> 4) - 8) * x[i].qs[j + 16];
        sum += colo_fp16_to_f32(w[i].d) * x[i].d * (float)s;
    }
    return sum;
#endif
}

float colo_cpu_dot_q4_1(const colo_blk_q4_1 *w, const colo_blk_q8x *x, int nb)
{
#if defined(__AVX2__) && defined(__FMA__)
    __m256 acc = _mm256_setzero_ps();
    float summ = 0;
    for (int i = 0; i < nb; i++) {
        float dw = colo_fp16_to_f32(w[i].d);
        __m256 p = dot32_u8s8(unpack_nibbles(w[i].qs), _mm256_loadu_si256((const __m256i *)x[i].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * x[i].d), p, acc);
        summ += colo_fp16_to_f32(w[i].m) * x[i].s;
    }
    return hsum8(acc) + summ;
#else
    float sum = 0;
    for (int i = 0; i < nb; i++) {
        int s = 0;
        for (int j = 0; j < 16; j++)
            s += (w[i].qs[j] & 15) * x[i].qs[j] + (w[i].qs[j] >> 4) * x[i].qs[j + 16];
        sum += colo_fp16_to_f32(w[i].d) * x[i].d * (float)s + colo_fp16_to_f32(w[i].m) * x[i].s;
    }
    return sum;
#endif
}

float colo_cpu_dot_q8_0(const colo_blk_q8_0 *w, const colo_blk_q8x *x, int nb)
{
#if defined(__AVX2__) && defined(__FMA__)
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        __m256i qw = _mm256_loadu_si256((const __m256i *)w[i].qs);
        __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
        __m256 p = dot32_u8s8(_mm256_sign_epi8(qw, qw), _mm256_sign_epi8(qx, qw));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(colo_fp16_to_f32(w[i].d) * x[i].d), p, acc);
    }
    return hsum8(acc);
#else
    float sum = 0;
    for (int i = 0; i < nb; i++) {
        int s = 0;
        for (int j = 0; j < 32; j++)
            s += w[i].qs[j] * x[i].qs[j];
        sum += colo_fp16_to_f32(w[i].d) * x[i].d * (float)s;
    }
    return sum;
#endif
}

float colo_cpu_dot_f32(const float *a, const float *b, int n)
{
    int i = 0;
    float sum = 0;
#if defined(__AVX2__) && defined(__FMA__)
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
