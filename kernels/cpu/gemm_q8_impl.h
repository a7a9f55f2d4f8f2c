/* kernels/cpu/gemm_q8_impl.h: what gemm_q8's versions share, private to
 * kernels/cpu. gemm_q8_vnni.c (AVX512-VNNI) and gemm_q8_avx2.c (AVX2, FMA,
 * F16C) each include it once, compiled for their set, having defined
 * Q8_WANT_VNNI or Q8_WANT_AVX2 and Q8_FN(name), which names their entry
 * points (cpu_kernels.h), and then define the kernels it declares.
 * gemm_q8.c describes the arithmetic and calls the set the CPU has.
 *
 * Shared: the rounding of x and its layout, the unpacking of weight rows
 * (but for two helpers), and the loop over tiles of weight rows that calls
 * the kernels and adds the bias. Each kernel forms exact integer sums and
 * then the same float operations in the same order, so the two versions
 * give every output the same bits. */
#include "kernels/cpu/cpu_kernels.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(Q8_WANT_VNNI) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) &&              \
    defined(__AVX512VNNI__)
#define Q8_VNNI 1
#elif defined(Q8_WANT_AVX2) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define Q8_AVX2 1
#endif
#if defined(Q8_VNNI) || defined(Q8_AVX2)
#define Q8_SIMD 1
#endif

#if defined(__F16C__)
#include <immintrin.h>
#define HALF(h) _cvtsh_ss(h)
#else
#define HALF(h) colo_fp16_to_f32(h)
#endif
#if defined(Q8_SIMD)
#include <immintrin.h>
#endif

/* Asks for the cache line holding p (into L1), as prefetcht0. An asm
 * statement, not _mm_prefetch or __builtin_prefetch: GCC 12 at -O3 dropped
 * every such prefetch of gemm_q8_vnni.c's narrow kernels (a loop of nothing
 * but prefetches is one without effects to it), so that those kernels ran
 * with none, and a step of two rows of SmolLM2 took 1.6 one-row steps. A
 * prefetch does not fault, at any address. */
static inline void prefetch_line(const void *p)
{
#if defined(__x86_64__) || defined(__i386__)
    __asm__ volatile("prefetcht0 %0" : : "m"(*(const char *)p));
#else
    __builtin_prefetch(p, 0, 3);
#endif
}

/* Rows of x per group (the lanes of a VNNI register; two AVX2 registers). */
#define GROUP COLO_CPU_GEMM_Q8_GROUP
/* Weight rows one pass of the wide kernel carries (one accumulator each;
 * AVX2's keep theirs in memory, and more rows share each block of x). */
#if defined(Q8_VNNI)
#define JT 8
#else
#define JT 16
#endif
/* The narrow kernel's weight rows (one per lane) and most rows of x:
 * VNNI's takes up to 16, reading rows in place or not (a speculative step's
 * verification of a long draft: at 5 to 8 rows the wide kernel cost 1.7 to
 * 2.5 times as much, and Gemma 3 270M's step of 12 sequences took 19.4 ms
 * against 21.2 with its unpacked formats' limit at 8); AVX2's 4. */
#define JN COLO_CPU_GEMM_Q8_ROWS
#define AVX2_NARROW_MAX_M 4
#if defined(Q8_VNNI)
#define NARROW_MAX_M 16
#else
#define NARROW_MAX_M AVX2_NARROW_MAX_M
#endif
/* Bytes of packed x the wide kernel takes at a time (gemm_q8 below):
 * VNNI's tiles of 8 weight rows read x twice as often as AVX2's of 16,
 * whose products are also slower, and only VNNI's gained from the spans
 * (AVX2's lost the unpacking they repeat). */
#if defined(Q8_VNNI)
#define X_SPAN_BYTES ((size_t)384 << 10)
#else
#define X_SPAN_BYTES SIZE_MAX
#endif
/* narrow_rows' sums (two a block for Q6_K) and scales: (2 AVX2_NARROW_MAX_M + 1, JN, nb rounded up to 8)
 * 32-bit (AVX2's; VNNI's take none) */
#define NARROW_SUMS_BYTES(nb) ((size_t)(2 * AVX2_NARROW_MAX_M + 1) * JN * (((size_t)(nb) + 7) & ~(size_t)7) * 4)

/* Scale blocks per block of 32: 2 for the formats with a scale per 16. */
static int halves(colo_dtype t) { return t == COLO_Q2_K || t == COLO_Q3_K || t == COLO_Q6_K ? 2 : 1; }

bool Q8_FN(colo_cpu_gemm_q8_built)(void)
{
#if defined(Q8_SIMD)
    return true;
#else
    return false;
#endif
}

/* ---- rounding x to two digits --------------------------------------------------------- */

#if defined(Q8_VNNI)
/* Round to nearest even, as nearbyintf does. */
static inline __m512 rne(__m512 v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
#elif defined(Q8_AVX2)
static inline __m256 rne(__m256 v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

static inline float hmax8(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

static inline int32_t hsum8i(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1)));
}

/* 32 int32s (elements 8 i..8 i + 7 in v[i]) as 32 saturated bytes in order. */
static inline __m256i pack_bytes(const __m256i v[4])
{
    __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
#endif

/* One row's block of 32: its digits (q, r), unit and sums of 256 q + r
 * over each half. Every version gives the same bits. */
static inline void quantize_block(const float *x, int8_t q[32], int8_t r[32], float *d, int32_t sum[2])
{
#if defined(Q8_VNNI)
    __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
    float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    float dd = amax / 127, id = dd ? 1.0f / dd : 0;
    __m512 vid = _mm512_set1_ps(id), k256 = _mm512_set1_ps(256.0f), lim = _mm512_set1_ps(127.0f);
    __m512 t0 = _mm512_mul_ps(x0, vid), t1 = _mm512_mul_ps(x1, vid);
    __m512 h0 = rne(t0), h1 = rne(t1);
    /* t - h is exact, and so is its product by 256; rounded, then clamped */
    __m512 l0 = rne(_mm512_mul_ps(_mm512_sub_ps(t0, h0), k256)), l1 = rne(_mm512_mul_ps(_mm512_sub_ps(t1, h1), k256));
    l0 = _mm512_max_ps(_mm512_min_ps(l0, lim), _mm512_sub_ps(_mm512_setzero_ps(), lim));
    l1 = _mm512_max_ps(_mm512_min_ps(l1, lim), _mm512_sub_ps(_mm512_setzero_ps(), lim));
    __m512i hi0 = _mm512_cvtps_epi32(h0), hi1 = _mm512_cvtps_epi32(h1);
    __m512i lo0 = _mm512_cvtps_epi32(l0), lo1 = _mm512_cvtps_epi32(l1);
    _mm_storeu_si128((__m128i *)q, _mm512_cvtsepi32_epi8(hi0));
    _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtsepi32_epi8(hi1));
    _mm_storeu_si128((__m128i *)r, _mm512_cvtsepi32_epi8(lo0));
    _mm_storeu_si128((__m128i *)(r + 16), _mm512_cvtsepi32_epi8(lo1));
    sum[0] = _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(hi0, 8), lo0));
    sum[1] = _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(hi1, 8), lo1));
    *d = dd / 256;
#elif defined(Q8_AVX2)
    __m256 v[4], m = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        m = _mm256_max_ps(m, _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v[i]));
    }
    float amax = hmax8(m);
    float dd = amax / 127, id = dd ? 1.0f / dd : 0;
    __m256 vid = _mm256_set1_ps(id), k256 = _mm256_set1_ps(256.0f), lim = _mm256_set1_ps(127.0f);
    __m256i hi[4], lo[4], s[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int i = 0; i < 4; i++) {
        __m256 t = _mm256_mul_ps(v[i], vid), h = rne(t);
        /* t - h is exact, and so is its product by 256; rounded, then clamped */
        __m256 l = rne(_mm256_mul_ps(_mm256_sub_ps(t, h), k256));
        l = _mm256_max_ps(_mm256_min_ps(l, lim), _mm256_sub_ps(_mm256_setzero_ps(), lim));
        hi[i] = _mm256_cvtps_epi32(h), lo[i] = _mm256_cvtps_epi32(l);
        s[i / 2] = _mm256_add_epi32(s[i / 2], _mm256_add_epi32(_mm256_slli_epi32(hi[i], 8), lo[i]));
    }
    _mm256_storeu_si256((__m256i *)q, pack_bytes(hi));
    _mm256_storeu_si256((__m256i *)r, pack_bytes(lo));
    sum[0] = hsum8i(s[0]), sum[1] = hsum8i(s[1]);
    *d = dd / 256;
#else
    float amax = 0;
    for (int e = 0; e < 32; e++)
        amax = fabsf(x[e]) > amax ? fabsf(x[e]) : amax;
    float dd = amax / 127, id = dd ? 1.0f / dd : 0;
    sum[0] = sum[1] = 0;
    for (int e = 0; e < 32; e++) {
        float t = x[e] * id, hi = nearbyintf(t), lo = nearbyintf((t - hi) * 256.0f);
        lo = lo > 127 ? 127 : lo < -127 ? -127 : lo;
        q[e] = (int8_t)hi, r[e] = (int8_t)lo;
        sum[e / 16] += 256 * (int32_t)hi + (int32_t)lo;
    }
    *d = dd / 256;
#endif
}

void Q8_FN(colo_cpu_gemm_q8_pack_x)(const float *x, int x_stride, int m, int k, int g0, int g1, colo_q8_xblk *xp)
{
    int nb = k / 32;
    for (int g = g0; g < g1; g++) {
        colo_q8_xblk *xg = xp + (size_t)g * nb;
        if ((g + 1) * GROUP > m) /* rows past m are zero; a whole group's bytes are all written below */
            memset(xg, 0, (size_t)nb * sizeof *xg);
        for (int i = 0; i < GROUP && g * GROUP + i < m; i++) {
            const float *xr = x + (int64_t)(g * GROUP + i) * x_stride;
            for (int b = 0; b < nb; b++) {
                int8_t q[32], r[32];
                int32_t sum[2];
                float d;
                quantize_block(xr + 32 * b, q, r, &d, sum);
                for (int t = 0; t < 8; t++) {
                    memcpy(&xg[b].q[t][4 * i], q + 4 * t, 4);
                    memcpy(&xg[b].r[t][4 * i], r + 4 * t, 4);
                }
                xg[b].d[i] = d;
                xg[b].s[0][i] = d * (float)sum[0];
                xg[b].s[1][i] = d * (float)sum[1];
                xg[b].s[2][i] = d * (float)(sum[0] + sum[1]);
            }
        }
    }
}

/* ---- unpacking a weight row: codes u (k bytes), a and c per scale block ---------------- */

#if defined(Q8_SIMD)
/* 16 bytes of nibbles: low nibbles to bytes 0..15, high to 16..31. */
static inline __m256i nibbles32(const uint8_t *qs)
{
    __m128i raw = _mm_loadu_si128((const __m128i *)qs), m15 = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m15), _mm_and_si128(raw, m15));
}

/* v + 16 (the bit is clear) in byte e where bit e of the 32-bit qh is set. */
static inline __m256i fifth_bits(const uint8_t *qh4, __m256i v)
{
    uint32_t qh;
    memcpy(&qh, qh4, 4);
#if defined(Q8_VNNI)
    return _mm256_mask_add_epi8(v, (__mmask32)qh, v, _mm256_set1_epi8(16));
#else
    /* byte e of b: byte e / 8 of qh; then its bit e % 8 alone */
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh),
                                    _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2,
                                                     2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
    return _mm256_add_epi8(v, _mm256_and_si256(set, _mm256_set1_epi8(16)));
#endif
}

/* u[0..31] = (32 bytes at p >> shift) & mask. */
static inline void bits32(const uint8_t *p, int shift, int mask, uint8_t *u)
{
    __m256i raw = _mm256_loadu_si256((const __m256i *)p);
    __m256i v = _mm256_srl_epi16(raw, _mm_cvtsi32_si128(shift));
    _mm256_storeu_si256((__m256i *)u, _mm256_and_si256(v, _mm256_set1_epi8((char)mask)));
}

/* u[e] += val (its bits are clear) where bit `bit` of p[e] is set, e < 32. */
static inline void or_bit32(const uint8_t *p, int bit, int val, uint8_t *u)
{
    __m256i v = _mm256_loadu_si256((const __m256i *)u);
#if defined(Q8_VNNI)
    __mmask32 m = _mm256_test_epi8_mask(_mm256_loadu_si256((const __m256i *)p), _mm256_set1_epi8((char)(1 << bit)));
    _mm256_storeu_si256((__m256i *)u, _mm256_mask_add_epi8(v, m, v, _mm256_set1_epi8((char)val)));
#else
    __m256i b = _mm256_set1_epi8((char)(1 << bit));
    __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_loadu_si256((const __m256i *)p), b), b);
    _mm256_storeu_si256((__m256i *)u, _mm256_add_epi8(v, _mm256_and_si256(set, _mm256_set1_epi8((char)val))));
#endif
}

/* unpack_row for the K-quants, one super-block of 256 at a time. */
static void unpack_q4_5_k(colo_dtype t, const void *row, int k, uint8_t *u, float *a, float *c, int as)
{
    for (int sb = 0; sb < k / 256; sb++) {
        uint16_t d16, dmin16;
        const uint8_t *scales, *qs, *qh = NULL;
        if (t == COLO_Q4_K) {
            const colo_blk_q4_k *q = (const colo_blk_q4_k *)row + sb;
            d16 = q->d, dmin16 = q->dmin, scales = q->scales, qs = q->qs;
        } else {
            const colo_blk_q5_k *q = (const colo_blk_q5_k *)row + sb;
            d16 = q->d, dmin16 = q->dmin, scales = q->scales, qs = q->qs, qh = q->qh;
        }
        float d = HALF(d16), dmin = HALF(dmin16);
        uint8_t sc[8] = {0}, mn[8] = {0};
        if (a)
            colo_k4_scales(scales, sc, mn);
        for (int j = 0; j < 8; j++) { /* sub-block of 32 */
            uint8_t *o = u + 256 * sb + 32 * j;
            bits32(qs + 32 * (j / 2), 4 * (j & 1), 15, o);
            if (qh)
                or_bit32(qh, j, 16, o);
            if (a) {
                a[(8 * sb + j) * as] = d * (float)sc[j];
                c[(8 * sb + j) * as] = -(dmin * (float)mn[j]);
            }
        }
    }
}

static void unpack_q6_k(const void *row, int k, uint8_t *u, float *a, float *c, int as)
{
    for (int sb = 0; sb < k / 256; sb++) {
        const colo_blk_q6_k *q = (const colo_blk_q6_k *)row + sb;
        float d = HALF(q->d);
        const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
        for (int h = 0; h < 2; h++) {
            __m256i ql0 = _mm256_loadu_si256((const __m256i *)(q->ql + 64 * h));
            __m256i ql1 = _mm256_loadu_si256((const __m256i *)(q->ql + 64 * h + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(q->qh + 32 * h));
            __m256i *o = (__m256i *)(u + 256 * sb + 128 * h);
            _mm256_storeu_si256(o, _mm256_or_si256(_mm256_and_si256(ql0, m4),
                                                   _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)));
            _mm256_storeu_si256(o + 1, _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                                       _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)));
            _mm256_storeu_si256(o + 2, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                                       _mm256_and_si256(qh, m30)));
            _mm256_storeu_si256(o + 3, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                                       _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)));
        }
        for (int g = 0; a && g < 16; g++) { /* scale block of 16 */
            a[(16 * sb + g) * as] = d * (float)q->scales[g];
            c[(16 * sb + g) * as] = -32.0f * a[(16 * sb + g) * as];
        }
    }
}

static void unpack_q3_k(const void *row, int k, uint8_t *u, float *a, float *c, int as)
{
    for (int sb = 0; sb < k / 256; sb++) {
        const colo_blk_q3_k *q = (const colo_blk_q3_k *)row + sb;
        float d = HALF(q->d);
        int8_t sc[16];
        colo_q3_k_scales(q->scales, sc);
        for (int n = 0; n < 2; n++)
            for (int j = 0; j < 4; j++) {
                uint8_t *o = u + 256 * sb + 128 * n + 32 * j;
                bits32(q->qs + 32 * n, 2 * j, 3, o);
                or_bit32(q->hmask, 4 * n + j, 4, o);
            }
        for (int g = 0; g < 16; g++) {
            a[(16 * sb + g) * as] = d * (float)sc[g];
            c[(16 * sb + g) * as] = -4.0f * a[(16 * sb + g) * as];
        }
    }
}

static void unpack_q2_k(const void *row, int k, uint8_t *u, float *a, float *c, int as)
{
    for (int sb = 0; sb < k / 256; sb++) {
        const colo_blk_q2_k *q = (const colo_blk_q2_k *)row + sb;
        float d = HALF(q->d), dmin = HALF(q->dmin);
        for (int n = 0; n < 2; n++)
            for (int j = 0; j < 4; j++)
                bits32(q->qs + 32 * n, 2 * j, 3, u + 256 * sb + 128 * n + 32 * j);
        for (int g = 0; g < 16; g++) {
            a[(16 * sb + g) * as] = d * (float)(q->scales[g] & 15);
            c[(16 * sb + g) * as] = -(dmin * (float)(q->scales[g] >> 4));
        }
    }
}

/* Codes u of one weight row and, unless a is NULL, its scales a and c
 * (as apart); a NULL a is for the formats gathered_scales names only. */
static void unpack_row(colo_dtype t, const void *row, int k, uint8_t *u, float *a, float *c, int as)
{
    int nb = k / 32;
    switch (t) {
    case COLO_Q4_0:
        for (int b = 0; b < nb; b++) {
            const colo_blk_q4_0 *q = (const colo_blk_q4_0 *)row + b;
            _mm256_storeu_si256((__m256i *)(u + 32 * b), nibbles32(q->qs));
            if (a)
                a[b * as] = HALF(q->d), c[b * as] = -8.0f * a[b * as];
        }
        break;
    case COLO_Q4_1:
        for (int b = 0; b < nb; b++) {
            const colo_blk_q4_1 *q = (const colo_blk_q4_1 *)row + b;
            _mm256_storeu_si256((__m256i *)(u + 32 * b), nibbles32(q->qs));
            if (a)
                a[b * as] = HALF(q->d), c[b * as] = HALF(q->m);
        }
        break;
    case COLO_Q5_0:
        for (int b = 0; b < nb; b++) {
            const colo_blk_q5_0 *q = (const colo_blk_q5_0 *)row + b;
            _mm256_storeu_si256((__m256i *)(u + 32 * b), fifth_bits(q->qh, nibbles32(q->qs)));
            if (a)
                a[b * as] = HALF(q->d), c[b * as] = -16.0f * a[b * as];
        }
        break;
    case COLO_Q5_1:
        for (int b = 0; b < nb; b++) {
            const colo_blk_q5_1 *q = (const colo_blk_q5_1 *)row + b;
            _mm256_storeu_si256((__m256i *)(u + 32 * b), fifth_bits(q->qh, nibbles32(q->qs)));
            if (a)
                a[b * as] = HALF(q->d), c[b * as] = HALF(q->m);
        }
        break;
    case COLO_Q8_0:
        for (int b = 0; b < nb; b++) {
            const colo_blk_q8_0 *q = (const colo_blk_q8_0 *)row + b;
            __m256i v = _mm256_loadu_si256((const __m256i *)q->qs);
            /* q + 128 */
            _mm256_storeu_si256((__m256i *)(u + 32 * b), _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)));
            if (a)
                a[b * as] = HALF(q->d), c[b * as] = -128.0f * a[b * as];
        }
        break;
    case COLO_Q4_K:
    case COLO_Q5_K:
        unpack_q4_5_k(t, row, k, u, a, c, as);
        break;
    case COLO_Q6_K:
        unpack_q6_k(row, k, u, a, c, as);
        break;
    case COLO_Q3_K:
        unpack_q3_k(row, k, u, a, c, as);
        break;
    case COLO_Q2_K:
        unpack_q2_k(row, k, u, a, c, as);
        break;
    default:
        break;
    }
}
#endif

/* ---- the kernels: each version's own (gemm_q8_vnni.c, gemm_q8_avx2.c) ------------------- */

#if defined(Q8_SIMD)
/* What wide() needs of a tile's JT rows of codes (u, k apart) besides them:
 * the AVX2 version's Q8_0 codes as 16 bits in u16 (JT, k). */
static void widen(colo_dtype t, const uint8_t *u, int k, uint16_t *u16);
/* out[j][i] = row j of the tile (codes u + j * k or u16 + j * k, scales
 * a/c + j * ns) . x row i of the group xg, for i < rows (the group's rows
 * of x; the others may be left unwritten). */
static void wide(colo_dtype t, int nb, int k, int ns, const colo_q8_xblk *xg, int rows, const uint8_t *u,
                 const uint16_t *u16, const float *a, const float *c, float out[JT][GROUP]);
/* What narrow() needs of x besides xp (m rows), in xs: the AVX2 version's
 * Q8_0 pairs. */
static void prepare_narrow(colo_dtype t, const colo_q8_xblk *xp, int m, int nb, void *xs);
/* Whether narrow tiles of weights of type t take their scales from
 * gather_scales (unpack_row then writes their codes only). */
static bool gathered_scales(colo_dtype t);
/* The narrow kernel's scales of JN weight rows from w (row_bytes apart; rows
 * from nj on repeat the last), [scale block][JN] at at and ct: the values
 * unpack_row writes one row at a time, gathered across the rows. */
static void gather_scales(colo_dtype t, const uint8_t *w, size_t row_bytes, int nj, int k, float *at, float *ct);
/* out[i][j] = row j of the tile (of JN, codes u + j * k; at/ct: scales
 * transposed, [scale block][JN]) . x row i (of m <= NARROW_MAX_M), the next
 * tile's weights (pf_bytes at pf) prefetched meanwhile. */
static void narrow(colo_dtype t, int nb, int k, const colo_q8_xblk *xp, int m, const void *xs, const uint8_t *u,
                   const float *at, const float *ct, float out[NARROW_MAX_M][JN], const char *pf, size_t pf_bytes);
/* Whether the narrow kernel reads weights of type t straight from their
 * rows (narrow_rows), with neither unpack_row nor gather_scales. */
static bool narrow_reads_rows(colo_dtype t);
/* narrow() for those types: out[i][j] = weight row j of the JN at w
 * (row_bytes apart; rows from nj on repeat the last) . x row i (of m <=
 * NARROW_MAX_M; xs from prepare_narrow), the same bits; sums: scratch of
 * NARROW_SUMS_BYTES(nb). */
static void narrow_rows(colo_dtype t, const uint8_t *w, size_t row_bytes, int nj, int nb, const colo_q8_xblk *xp,
                        int m, const void *xs, void *sums, float out[NARROW_MAX_M][JN]);
#endif

/* y's rows i < m, columns t0..t0 + nj - 1: the narrow kernel's out plus the bias. */
static void store_narrow(float out[NARROW_MAX_M][JN], int m, int nj, const float *bias, int64_t t0, float *y,
                         int y_stride)
{
    for (int i = 0; i < m; i++) {
        float *yr = y + (int64_t)i * y_stride + t0;
        for (int j = 0; j < nj; j++)
            yr[j] = out[i][j] + (bias ? bias[t0 + j] : 0.0f);
    }
}

#if defined(Q8_SIMD)
/* y's rows row0 + i, i < rows, columns t0 .. t0 + nj - 1: the wide kernel's
 * out (weight row j, x row i at out[j][i]) plus the bias. Whole runs of 8
 * weight rows go through an 8x8 transpose, 8 outputs a store, instead of
 * one store each (a prefill writes every output of every product here);
 * the same additions, so the same bits. */
static void store_wide(const float out[JT][GROUP], int rows, int nj, const float *bias, int64_t t0, float *y,
                       int y_stride, int64_t row0)
{
    int j8 = nj & ~7;
    for (int jb = 0; jb < j8; jb += 8) {
        __m256 b = bias ? _mm256_loadu_ps(bias + t0 + jb) : _mm256_setzero_ps();
        for (int ib = 0; ib < rows; ib += 8) {
            __m256 v[8], t[8], s[8];
            for (int j = 0; j < 8; j++)
                v[j] = _mm256_loadu_ps(out[jb + j] + ib);
            for (int j = 0; j < 8; j += 2) {
                t[j] = _mm256_unpacklo_ps(v[j], v[j + 1]);
                t[j + 1] = _mm256_unpackhi_ps(v[j], v[j + 1]);
            }
            for (int h = 0; h < 8; h += 4) {
                s[h] = _mm256_shuffle_ps(t[h], t[h + 2], 0x44);
                s[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], 0xee);
                s[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0x44);
                s[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0xee);
            }
            /* s[d] lane j: out[jb + j][ib + d] for j < 4 and out[jb + j][ib + 4 + d] above */
            for (int d = 0; d < 4; d++) {
                __m256 lo = _mm256_permute2f128_ps(s[d], s[d + 4], 0x20);
                __m256 hi = _mm256_permute2f128_ps(s[d], s[d + 4], 0x31);
                if (ib + d < rows)
                    _mm256_storeu_ps(y + (row0 + ib + d) * y_stride + t0 + jb, _mm256_add_ps(lo, b));
                if (ib + 4 + d < rows)
                    _mm256_storeu_ps(y + (row0 + ib + 4 + d) * y_stride + t0 + jb, _mm256_add_ps(hi, b));
            }
        }
    }
    for (int i = 0; i < rows && j8 < nj; i++) {
        float *yr = y + (row0 + i) * y_stride + t0;
        for (int j = j8; j < nj; j++)
            yr[j] = out[j][i] + (bias ? bias[t0 + j] : 0.0f);
    }
}
#endif

void Q8_FN(colo_cpu_gemm_q8)(const void *w, colo_dtype t, int64_t r0, int64_t r1, int k, const colo_q8_xblk *xp,
                             int m, const float *bias, float *y, int y_stride, void *scratch)
{
#if defined(Q8_SIMD)
    int nb = k / 32, nh = halves(t), ns = nb * nh, n_groups = (m + GROUP - 1) / GROUP;
    size_t row_bytes = colo_dtype_row_bytes(t, k);
    bool is_narrow = m <= NARROW_MAX_M;
    int rows = is_narrow ? JN : JT;
    uint8_t *u = scratch;
    float *a = (float *)(u + (size_t)JN * k), *c = a + (size_t)JN * ns, *at = a, *ct = c;
    uint16_t *u16 = (uint16_t *)(c + (size_t)JN * ns); /* (JT, k) */
    void *xs = u16 + (size_t)JT * k;                   /* (NARROW_MAX_M, k / 2) 32-bit */
    void *sums = (char *)xs + 8 * (size_t)k;           /* NARROW_SUMS_BYTES(nb) */
    float out[JT][GROUP] __attribute__((aligned(64)));
    float nout[NARROW_MAX_M][JN] __attribute__((aligned(64)));
    if (is_narrow)
        prepare_narrow(t, xp, m, nb, xs);
    /* The wide kernel walks all of x for each tile of weight rows: x is
     * taken a span of groups at a time that stays in the core's L2 (the
     * tiles unpacked again for each span), not streamed from L3 per tile
     * when it is larger (a prefill's x of k = 2048 is 2.5 MB). */
    size_t fit = X_SPAN_BYTES / ((size_t)nb * sizeof(colo_q8_xblk));
    int span = is_narrow || fit >= (size_t)n_groups ? n_groups : fit < 1 ? 1 : (int)fit;
    for (int g0 = 0; g0 < n_groups; g0 += span) {
        int g1 = g0 + span < n_groups ? g0 + span : n_groups;
        for (int64_t t0 = r0; t0 < r1; t0 += rows) {
            int nj = (int)(r1 - t0 < rows ? r1 - t0 : rows);
            if (is_narrow && narrow_reads_rows(t)) {
                narrow_rows(t, (const uint8_t *)w + (size_t)t0 * row_bytes, row_bytes, nj, nb, xp, m, xs, sums, nout);
                store_narrow(nout, m, nj, bias, t0, y, y_stride);
                continue;
            }
            /* Rows past the end repeat the last one (outputs unused). The narrow
             * kernel reads the scales transposed. */
            bool gather = is_narrow && gathered_scales(t);
            for (int j = 0; j < rows; j++)
                unpack_row(t, (const unsigned char *)w + (size_t)(t0 + (j < nj ? j : nj - 1)) * row_bytes, k,
                           u + (size_t)j * k, gather ? NULL : is_narrow ? at + j : a + (size_t)j * ns,
                           gather ? NULL : is_narrow ? ct + j : c + (size_t)j * ns, is_narrow ? JN : 1);
            if (gather)
                gather_scales(t, (const uint8_t *)w + (size_t)t0 * row_bytes, row_bytes, nj, k, at, ct);
            if (is_narrow) {
                /* Few rows of x make this memory-bound: the next tile's weights
                 * load while this one is multiplied. */
                int64_t pf_end = t0 + 2 * rows < r1 ? t0 + 2 * rows : r1;
                const char *pf = (const char *)w + (size_t)(t0 + rows) * row_bytes;
                size_t pfb = t0 + rows < pf_end ? (size_t)(pf_end - t0 - rows) * row_bytes : 0;
                narrow(t, nb, k, xp, m, xs, u, at, ct, nout, pf, pfb);
                store_narrow(nout, m, nj, bias, t0, y, y_stride);
                continue;
            }
            widen(t, u, k, u16);
            /* The next tile's weights come from memory (a prefill reads
             * each weight once) while this one is multiplied. */
            if (t0 + rows < r1) {
                const char *nw = (const char *)w + (size_t)(t0 + rows) * row_bytes;
                size_t nbytes = (size_t)(r1 - t0 - rows < rows ? r1 - t0 - rows : rows) * row_bytes;
                for (size_t o = 0; o < nbytes; o += 64)
                    prefetch_line(nw + o);
            }
            for (int g = g0; g < g1; g++) {
                int g_rows = m - g * GROUP < GROUP ? m - g * GROUP : GROUP;
                wide(t, nb, k, ns, xp + (size_t)g * nb, g_rows, u, u16, a, c, out);
                store_wide(out, g_rows, nj, bias, t0, y, y_stride, (int64_t)g * GROUP);
            }
        }
    }
#else
    (void)w, (void)t, (void)r0, (void)r1, (void)k, (void)xp, (void)m, (void)bias, (void)y, (void)y_stride,
        (void)scratch, (void)halves;
#endif
}
