/* kernels/cpu/dot_avx2.h: what the integer dot products (dot.c, dot_k.c)
 * share: AVX2 helpers and the entry points that instantiate a kernel per row
 * count. Private to kernels/cpu. */
#ifndef COLO_KERNELS_CPU_DOT_AVX2_H
#define COLO_KERNELS_CPU_DOT_AVX2_H

#include <string.h>

#include "kernels/cpu/cpu_kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define DOT_AVX2 1
#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))

INLINE float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 32 products of unsigned u and signed s bytes, summed in 8 lanes, as floats. */
INLINE __m256 dot_u8s8(__m256i u, __m256i s)
{
#if defined(__AVXVNNI__)
    /* One instruction, and no 16-bit saturation (the sums are the same:
     * u * s pairs stay within int16 for every format here). */
    return _mm256_cvtepi32_ps(_mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s));
#else
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

/* 16 bytes of nibbles: low nibbles to bytes 0..15, high nibbles to 16..31. */
INLINE __m256i nibbles(const uint8_t *qs)
{
    /* The 16 bytes in both halves (one load), the high half shifted by 4. */
    __m256i raw = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    return _mm256_and_si256(_mm256_srlv_epi32(raw, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(15));
}

/* fp16 halves at p: [p[0], 0, 0, 0] and [p[0], p[1], 0, 0]. */
INLINE __m128 half1(const uint16_t *p) { return _mm_cvtph_ps(_mm_cvtsi32_si128(*p)); }
INLINE __m128 half2(const uint16_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return _mm_cvtph_ps(_mm_cvtsi32_si128((int)v));
}

/* [d, s, 0, 0] of an activation block. */
INLINE __m128 ds_pair(const colo_blk_q8x *b) { return _mm_castpd_ps(_mm_load_sd((const double *)(const void *)&b->d)); }

INLINE __m256i load32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* One copy of each kernel per row count, so the row loops unroll. */
#define DOT_ENTRY(name, blk_t, per_k)                                                                       \
    void colo_cpu_vec_dot_##name(int k, const void *w, const colo_blk_q8x *x, size_t xs, int nr, float *out) \
    {                                                                                                         \
        const blk_t *wb = w;                                                                                  \
        switch (nr) {                                                                                         \
        case 1: name##_rows(k / per_k, wb, x, xs, 1, out); break;                                             \
        case 2: name##_rows(k / per_k, wb, x, xs, 2, out); break;                                             \
        case 3: name##_rows(k / per_k, wb, x, xs, 3, out); break;                                             \
        default: name##_rows(k / per_k, wb, x, xs, 4, out); break;                                            \
        }                                                                                                     \
    }
#else
#define DOT_ENTRY(name, blk_t, per_k)                                                                       \
    void colo_cpu_vec_dot_##name(int k, const void *w, const colo_blk_q8x *x, size_t xs, int nr, float *out) \
    {                                                                                                         \
        colo_cpu_vec_dot_##name##_scalar(k, w, x, xs, nr, out);                                               \
    }
#endif

#endif
