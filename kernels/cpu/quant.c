/* Block formats: fp16/bf16 conversions, quantizers and dequantizers (GGML
 * layouts). The integer dot products on these blocks are in dot.c. */
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
    case COLO_BF16: {
        int64_t i = 0;
#if defined(__AVX2__)
        for (; i + 8 <= n; i += 8) {
            __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)src + i)));
            _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
        }
#endif
        for (; i < n; i++)
            dst[i] = colo_bf16_to_f32(((const uint16_t *)src)[i]);
        break;
    }
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
    case COLO_Q5_0:
    case COLO_Q5_1:
    case COLO_Q2_K:
    case COLO_Q3_K:
    case COLO_Q4_K:
    case COLO_Q5_K:
        colo_cpu_dequantize_row_k(t, src, dst, n);
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
        return colo_cpu_quantize_row_k(t, src, dst, n);
    }
}
