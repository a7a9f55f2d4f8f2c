/* kernels/cpu/gemm_q8_impl.h: gemm_q8's code for one instruction set,
 * private to kernels/cpu. gemm_q8_vnni.c (AVX512-VNNI) and gemm_q8_avx2.c
 * (AVX2, FMA, F16C) each include it once, compiled for their set, having
 * defined Q8_WANT_VNNI or Q8_WANT_AVX2 and Q8_FN(name), which names their
 * entry points (cpu_kernels.h). gemm_q8.c describes the arithmetic and
 * calls the set the CPU has.
 *
 * All but the few helpers that need a set's own instructions is shared: the
 * rounding of x and its layout, the unpacking of weight rows, the loops and
 * the float operations of each output, in the same order. The integer sums
 * are exact in both sets, so the two give every output the same bits. */
#include "kernels/cpu/cpu_kernels.h"

#include <math.h>
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

/* Rows of x per group (the lanes of a VNNI register; two AVX2 registers). */
#define GROUP COLO_CPU_GEMM_Q8_GROUP
/* Weight rows one pass of the wide kernel carries (one accumulator each;
 * AVX2's keep theirs in memory, and more rows share each block of x). */
#if defined(Q8_VNNI)
#define JT 8
#else
#define JT 16
#endif
/* The narrow kernel's weight rows (one per lane) and most rows of x. */
#define JN COLO_CPU_GEMM_Q8_ROWS
#define NARROW_MAX_M 4

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
        uint8_t sc[8], mn[8];
        colo_k4_scales(scales, sc, mn);
        for (int j = 0; j < 8; j++) { /* sub-block of 32 */
            uint8_t *o = u + 256 * sb + 32 * j;
            bits32(qs + 32 * (j / 2), 4 * (j & 1), 15, o);
            if (qh)
                or_bit32(qh, j, 16, o);
            a[(8 * sb + j) * as] = d * (float)sc[j];
            c[(8 * sb + j) * as] = -(dmin * (float)mn[j]);
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
        for (int g = 0; g < 16; g++) { /* scale block of 16 */
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

static void unpack_row(colo_dtype t, const void *row, int k, uint8_t *u, float *a, float *c, int as)
{
    int nb = k / 32;
    switch (t) {
    case COLO_Q4_0:
        for (int b = 0; b < nb; b++) {
            const colo_blk_q4_0 *q = (const colo_blk_q4_0 *)row + b;
            _mm256_storeu_si256((__m256i *)(u + 32 * b), nibbles32(q->qs));
            a[b * as] = HALF(q->d), c[b * as] = -8.0f * a[b * as];
        }
        break;
    case COLO_Q4_1:
        for (int b = 0; b < nb; b++) {
            const colo_blk_q4_1 *q = (const colo_blk_q4_1 *)row + b;
            _mm256_storeu_si256((__m256i *)(u + 32 * b), nibbles32(q->qs));
            a[b * as] = HALF(q->d), c[b * as] = HALF(q->m);
        }
        break;
    case COLO_Q5_0:
        for (int b = 0; b < nb; b++) {
            const colo_blk_q5_0 *q = (const colo_blk_q5_0 *)row + b;
            _mm256_storeu_si256((__m256i *)(u + 32 * b), fifth_bits(q->qh, nibbles32(q->qs)));
            a[b * as] = HALF(q->d), c[b * as] = -16.0f * a[b * as];
        }
        break;
    case COLO_Q5_1:
        for (int b = 0; b < nb; b++) {
            const colo_blk_q5_1 *q = (const colo_blk_q5_1 *)row + b;
            _mm256_storeu_si256((__m256i *)(u + 32 * b), fifth_bits(q->qh, nibbles32(q->qs)));
            a[b * as] = HALF(q->d), c[b * as] = HALF(q->m);
        }
        break;
    case COLO_Q8_0:
        for (int b = 0; b < nb; b++) {
            const colo_blk_q8_0 *q = (const colo_blk_q8_0 *)row + b;
            __m256i v = _mm256_loadu_si256((const __m256i *)q->qs);
            /* q + 128 */
            _mm256_storeu_si256((__m256i *)(u + 32 * b), _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)));
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

/* ---- the kernels ---------------------------------------------------------------------- */

#if defined(Q8_VNNI)
static inline __m512i bcast4(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* 256 P1 + P2 for the digit products P1 (chains a, b) and P2 (c, e). */
static inline __m512i digits(__m512i a, __m512i b, __m512i c, __m512i e)
{
    return _mm512_add_epi32(_mm512_slli_epi32(_mm512_add_epi32(a, b), 8), _mm512_add_epi32(c, e));
}

/* out[j][i] = row j (of JT, codes u + j * k, scales a/c + j * ns) . x row i
 * of the group xg, for NH scale blocks per block of 32. */
static inline __attribute__((always_inline)) void kernel(int nb, int k, int ns, const colo_q8_xblk *xg,
                                                         const uint8_t *u, const float *a, const float *c, int nh,
                                                         float out[JT][GROUP])
{
    __m512 acc[JT];
    for (int j = 0; j < JT; j++)
        acc[j] = _mm512_setzero_ps();
    const __m512i z = _mm512_setzero_si512();
    for (int b = 0; b < nb; b++) {
        const colo_q8_xblk *xb = xg + b;
        __m512i X[8], R[8];
        for (int t = 0; t < 8; t++) {
            X[t] = _mm512_loadu_si512((const void *)xb->q[t]);
            R[t] = _mm512_loadu_si512((const void *)xb->r[t]);
        }
        __m512 d = _mm512_loadu_ps(xb->d);
        if (nh == 1) {
            __m512 s = _mm512_loadu_ps(xb->s[2]);
            for (int j = 0; j < JT; j++) {
                const uint8_t *w = u + (size_t)j * k + 32 * b;
                __m512i w0 = bcast4(w), w1 = bcast4(w + 4);
                __m512i p0 = _mm512_dpbusd_epi32(z, w0, X[0]), p1 = _mm512_dpbusd_epi32(z, w1, X[1]);
                __m512i p2 = _mm512_dpbusd_epi32(z, w0, R[0]), p3 = _mm512_dpbusd_epi32(z, w1, R[1]);
                for (int t = 2; t < 8; t += 2) {
                    w0 = bcast4(w + 4 * t), w1 = bcast4(w + 4 * t + 4);
                    p0 = _mm512_dpbusd_epi32(p0, w0, X[t]);
                    p1 = _mm512_dpbusd_epi32(p1, w1, X[t + 1]);
                    p2 = _mm512_dpbusd_epi32(p2, w0, R[t]);
                    p3 = _mm512_dpbusd_epi32(p3, w1, R[t + 1]);
                }
                __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(digits(p0, p1, p2, p3)), d);
                acc[j] = _mm512_fmadd_ps(f, _mm512_set1_ps(a[(size_t)j * ns + b]), acc[j]);
                acc[j] = _mm512_fmadd_ps(s, _mm512_set1_ps(c[(size_t)j * ns + b]), acc[j]);
            }
        } else {
            __m512 s0 = _mm512_loadu_ps(xb->s[0]), s1 = _mm512_loadu_ps(xb->s[1]);
            for (int j = 0; j < JT; j++) {
                const uint8_t *w = u + (size_t)j * k + 32 * b;
                __m512i w0 = bcast4(w), w1 = bcast4(w + 16);
                __m512i p0 = _mm512_dpbusd_epi32(z, w0, X[0]), p1 = _mm512_dpbusd_epi32(z, w1, X[4]);
                __m512i p2 = _mm512_dpbusd_epi32(z, w0, R[0]), p3 = _mm512_dpbusd_epi32(z, w1, R[4]);
                for (int t = 1; t < 4; t++) {
                    w0 = bcast4(w + 4 * t), w1 = bcast4(w + 16 + 4 * t);
                    p0 = _mm512_dpbusd_epi32(p0, w0, X[t]);
                    p1 = _mm512_dpbusd_epi32(p1, w1, X[4 + t]);
                    p2 = _mm512_dpbusd_epi32(p2, w0, R[t]);
                    p3 = _mm512_dpbusd_epi32(p3, w1, R[4 + t]);
                }
                __m512 f0 = _mm512_mul_ps(_mm512_cvtepi32_ps(digits(p0, z, p2, z)), d);
                __m512 f1 = _mm512_mul_ps(_mm512_cvtepi32_ps(digits(p1, z, p3, z)), d);
                const float *aj = a + (size_t)j * ns + 2 * b, *cj = c + (size_t)j * ns + 2 * b;
                acc[j] = _mm512_fmadd_ps(f0, _mm512_set1_ps(aj[0]), acc[j]);
                acc[j] = _mm512_fmadd_ps(s0, _mm512_set1_ps(cj[0]), acc[j]);
                acc[j] = _mm512_fmadd_ps(f1, _mm512_set1_ps(aj[1]), acc[j]);
                acc[j] = _mm512_fmadd_ps(s1, _mm512_set1_ps(cj[1]), acc[j]);
            }
        }
    }
    for (int j = 0; j < JT; j++)
        _mm512_storeu_ps(out[j], acc[j]);
}

static void kernel32(int nb, int k, int ns, const colo_q8_xblk *xg, const uint8_t *u, const float *a,
                     const float *c, float out[JT][GROUP])
{
    kernel(nb, k, ns, xg, u, a, c, 1, out);
}

static void kernel16(int nb, int k, int ns, const colo_q8_xblk *xg, const uint8_t *u, const float *a,
                     const float *c, float out[JT][GROUP])
{
    kernel(nb, k, ns, xg, u, a, c, 2, out);
}

/* W[t] lane j = dword t (codes 4t..4t+3) of row j of the 16 rows at u
 * (k bytes apart): an 8x8 dword transpose in each 256-bit half (rows j and
 * j + 8 share a register), then the halves' 128-bit quarters interleaved. */
static inline __attribute__((always_inline)) void transpose16(const uint8_t *u, int k, __m512i W[8])
{
    __m512i z[8], t[8], s[8];
    for (int j = 0; j < 8; j++)
        z[j] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(u + (size_t)j * k))),
                                  _mm256_loadu_si256((const __m256i *)(u + (size_t)(j + 8) * k)), 1);
    for (int j = 0; j < 8; j += 2) {
        t[j] = _mm512_unpacklo_epi32(z[j], z[j + 1]);
        t[j + 1] = _mm512_unpackhi_epi32(z[j], z[j + 1]);
    }
    for (int h = 0; h < 8; h += 4) { /* rows 0..3 (8..11), then 4..7 (12..15) */
        s[h] = _mm512_unpacklo_epi64(t[h], t[h + 2]);     /* dwords 0 | 4 */
        s[h + 1] = _mm512_unpackhi_epi64(t[h], t[h + 2]); /* 1 | 5 */
        s[h + 2] = _mm512_unpacklo_epi64(t[h + 1], t[h + 3]); /* 2 | 6 */
        s[h + 3] = _mm512_unpackhi_epi64(t[h + 1], t[h + 3]); /* 3 | 7 */
    }
    const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    for (int d = 0; d < 4; d++) {
        W[d] = _mm512_permutex2var_epi64(s[d], lo, s[d + 4]);
        W[d + 4] = _mm512_permutex2var_epi64(s[d], hi, s[d + 4]);
    }
}

/* The narrow kernel (few rows of x, as in decode): the 16 lanes are 16
 * weight rows rather than 16 rows of x, transposed 4 codes at a time,
 * and each row of x is broadcast. Each output is the same integers and the
 * same float operations in the same order as in kernel(), so the same bits:
 * which kernel serves a row does not change it.
 * out[i][j] = weight row j (of JN, codes u + j * k; at/ct: scales
 * transposed, [scale block][JN]) . x row i (of m <= NARROW_MAX_M, in the
 * groups at xp). */
static inline __attribute__((always_inline)) void kernel_narrow(int nb, int k, const colo_q8_xblk *xp, int m,
                                                                const uint8_t *u, const float *at,
                                                                const float *ct, int nh,
                                                                float out[NARROW_MAX_M][JN])
{
    __m512 acc[NARROW_MAX_M];
    for (int i = 0; i < NARROW_MAX_M; i++)
        acc[i] = _mm512_setzero_ps();
    const __m512i z = _mm512_setzero_si512();
    for (int b = 0; b < nb; b++) {
        __m512i W[8];
        transpose16(u + 32 * b, k, W);
        for (int i = 0; i < m; i++) {
            const colo_q8_xblk *xb = xp + (size_t)(i / GROUP) * nb + b;
            int l = i % GROUP;
            __m512 d = _mm512_set1_ps(xb->d[l]);
            int32_t xq[8], xr[8];
            for (int t = 0; t < 8; t++) {
                memcpy(&xq[t], &xb->q[t][4 * l], 4);
                memcpy(&xr[t], &xb->r[t][4 * l], 4);
            }
            if (nh == 1) {
                __m512i p0 = _mm512_dpbusd_epi32(z, W[0], _mm512_set1_epi32(xq[0]));
                __m512i p1 = _mm512_dpbusd_epi32(z, W[1], _mm512_set1_epi32(xq[1]));
                __m512i p2 = _mm512_dpbusd_epi32(z, W[0], _mm512_set1_epi32(xr[0]));
                __m512i p3 = _mm512_dpbusd_epi32(z, W[1], _mm512_set1_epi32(xr[1]));
                for (int t = 2; t < 8; t += 2) {
                    p0 = _mm512_dpbusd_epi32(p0, W[t], _mm512_set1_epi32(xq[t]));
                    p1 = _mm512_dpbusd_epi32(p1, W[t + 1], _mm512_set1_epi32(xq[t + 1]));
                    p2 = _mm512_dpbusd_epi32(p2, W[t], _mm512_set1_epi32(xr[t]));
                    p3 = _mm512_dpbusd_epi32(p3, W[t + 1], _mm512_set1_epi32(xr[t + 1]));
                }
                __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(digits(p0, p1, p2, p3)), d);
                acc[i] = _mm512_fmadd_ps(f, _mm512_loadu_ps(at + (size_t)b * JN), acc[i]);
                acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(xb->s[2][l]), _mm512_loadu_ps(ct + (size_t)b * JN), acc[i]);
            } else {
                __m512i p0 = _mm512_dpbusd_epi32(z, W[0], _mm512_set1_epi32(xq[0]));
                __m512i p1 = _mm512_dpbusd_epi32(z, W[4], _mm512_set1_epi32(xq[4]));
                __m512i p2 = _mm512_dpbusd_epi32(z, W[0], _mm512_set1_epi32(xr[0]));
                __m512i p3 = _mm512_dpbusd_epi32(z, W[4], _mm512_set1_epi32(xr[4]));
                for (int t = 1; t < 4; t++) {
                    p0 = _mm512_dpbusd_epi32(p0, W[t], _mm512_set1_epi32(xq[t]));
                    p1 = _mm512_dpbusd_epi32(p1, W[4 + t], _mm512_set1_epi32(xq[4 + t]));
                    p2 = _mm512_dpbusd_epi32(p2, W[t], _mm512_set1_epi32(xr[t]));
                    p3 = _mm512_dpbusd_epi32(p3, W[4 + t], _mm512_set1_epi32(xr[4 + t]));
                }
                __m512 f0 = _mm512_mul_ps(_mm512_cvtepi32_ps(digits(p0, z, p2, z)), d);
                __m512 f1 = _mm512_mul_ps(_mm512_cvtepi32_ps(digits(p1, z, p3, z)), d);
                const float *ab = at + (size_t)2 * b * JN, *cb = ct + (size_t)2 * b * JN;
                acc[i] = _mm512_fmadd_ps(f0, _mm512_loadu_ps(ab), acc[i]);
                acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(xb->s[0][l]), _mm512_loadu_ps(cb), acc[i]);
                acc[i] = _mm512_fmadd_ps(f1, _mm512_loadu_ps(ab + JN), acc[i]);
                acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(xb->s[1][l]), _mm512_loadu_ps(cb + JN), acc[i]);
            }
        }
    }
    for (int i = 0; i < m; i++)
        _mm512_storeu_ps(out[i], acc[i]);
}

static void narrow_1(int nb, int k, const colo_q8_xblk *xp, int m, const uint8_t *u, const float *at,
                     const float *ct, float out[NARROW_MAX_M][JN])
{
    kernel_narrow(nb, k, xp, m, u, at, ct, 1, out);
}

static void narrow_2(int nb, int k, const colo_q8_xblk *xp, int m, const uint8_t *u, const float *at,
                     const float *ct, float out[NARROW_MAX_M][JN])
{
    kernel_narrow(nb, k, xp, m, u, at, ct, 2, out);
}

/* (16-bit codes and x's pairs: the AVX2 version's) */
static void widen(colo_dtype t, const uint8_t *u, int k, uint16_t *u16)
{
    (void)t, (void)u, (void)k, (void)u16;
}

static void wide(colo_dtype t, int nb, int k, int ns, const colo_q8_xblk *xg, const uint8_t *u, const uint16_t *u16,
                 const float *a, const float *c, float out[JT][GROUP])
{
    (void)u16;
    (halves(t) == 1 ? kernel32 : kernel16)(nb, k, ns, xg, u, a, c, out);
}

static void prepare_narrow(colo_dtype t, const colo_q8_xblk *xp, int m, int nb, void *xs)
{
    (void)t, (void)xp, (void)m, (void)nb, (void)xs;
}

static void narrow(colo_dtype t, int nb, int k, const colo_q8_xblk *xp, int m, const void *xs, const uint8_t *u,
                   const float *at, const float *ct, float out[NARROW_MAX_M][JN])
{
    (void)xs;
    (halves(t) == 1 ? narrow_1 : narrow_2)(nb, k, xp, m, u, at, ct, out);
}
#elif defined(Q8_AVX2)
/* vpmaddubsw multiplies unsigned codes by signed digits in pairs and adds
 * each pair into 16 bits, saturating; vpmaddwd by ones then widens four
 * products to a 32-bit lane. A pair stays below 2 * 63 * 127 < 32767 for
 * codes up to 63, and `run` pairs' sums may be added in 16 bits before
 * widening where run * 2 * (largest code) * 127 <= 32767: 8 for 4-bit codes,
 * 4 for 5-bit ones and for Q2_K and Q3_K (whose scale blocks are 4 dwords),
 * 2 for Q6_K's 6 bits. Q8_0's codes reach 255: its kernels take them as
 * 16 bits, and x as one 16-bit number (kernel_q8_0, narrow_q8_0). Every
 * sum is exact, so equal to VNNI's. */
static int run_of(colo_dtype t)
{
    switch (t) {
    case COLO_Q4_0: case COLO_Q4_1: case COLO_Q4_K:
        return 8;
    case COLO_Q5_0: case COLO_Q5_1: case COLO_Q5_K: case COLO_Q2_K: case COLO_Q3_K:
        return 4;
    case COLO_Q6_K:
        return 2;
    default: /* Q8_0: its own kernels */
        return 0;
    }
}

static inline __m256i bcast4(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* Per 32-bit lane, 256 P(q) + P(r), with P(x) the sum over dwords t < nt of
 * the 4 products of the codes by x's digits (run: as above), for the wide
 * kernel: codes w broadcast, a dword each, against the digits of 8 rows
 * of x (q, r: dword t 4 * GROUP bytes after t - 1). */
static inline __attribute__((always_inline)) __m256i dots_wide(const uint8_t *w, const int8_t *q, const int8_t *r,
                                                               int nt, int run)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i aq = _mm256_setzero_si256(), ar = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int t0 = 0; t0 < nt; t0 += run) {
        __m256i sq = _mm256_setzero_si256(), sr = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int t = t0; t < t0 + run; t++) {
            __m256i wt = bcast4(w + 4 * t);
            __m256i xq = _mm256_loadu_si256((const __m256i *)(q + 4 * GROUP * t));
            __m256i xr = _mm256_loadu_si256((const __m256i *)(r + 4 * GROUP * t));
            sq = _mm256_add_epi16(sq, _mm256_maddubs_epi16(wt, xq));
            sr = _mm256_add_epi16(sr, _mm256_maddubs_epi16(wt, xr));
            /* in this order: reassociated, the sums would keep every
             * product alive at once, and spill */
            __asm__("" : "+x"(sq), "+x"(sr));
        }
        aq = _mm256_add_epi32(aq, _mm256_madd_epi16(sq, ones));
        ar = _mm256_add_epi32(ar, _mm256_madd_epi16(sr, ones));
    }
    return _mm256_add_epi32(_mm256_slli_epi32(aq, 8), ar);
}

/* The same for the narrow kernel: codes W[t] of 8 weight rows against one
 * row of x's digits (q, r: its dwords, 4 * GROUP bytes apart), broadcast. */
static inline __attribute__((always_inline)) __m256i dots_narrow(const __m256i *W, const int8_t *q, const int8_t *r,
                                                                 int nt, int run)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i aq = _mm256_setzero_si256(), ar = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int t0 = 0; t0 < nt; t0 += run) {
        __m256i sq = _mm256_setzero_si256(), sr = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int t = t0; t < t0 + run; t++) {
            sq = _mm256_add_epi16(sq, _mm256_maddubs_epi16(W[t], bcast4(q + 4 * GROUP * t)));
            sr = _mm256_add_epi16(sr, _mm256_maddubs_epi16(W[t], bcast4(r + 4 * GROUP * t)));
        }
        aq = _mm256_add_epi32(aq, _mm256_madd_epi16(sq, ones));
        ar = _mm256_add_epi32(ar, _mm256_madd_epi16(sr, ones));
    }
    return _mm256_add_epi32(_mm256_slli_epi32(aq, 8), ar);
}

/* out[j][i] = row j (of JT, codes u + j * k, scales a/c + j * ns) . x row i
 * of the group xg, for NH scale blocks per block of 32: half a group (8
 * rows of x) at a time. */
static inline __attribute__((always_inline)) void kernel(int nb, int k, int ns, const colo_q8_xblk *xg,
                                                         const uint8_t *u, const float *a, const float *c, int nh,
                                                         int run, float out[JT][GROUP])
{
    for (int h = 0; h < GROUP / 8; h++) {
        __m256 acc[JT];
        for (int j = 0; j < JT; j++)
            acc[j] = _mm256_setzero_ps();
        for (int b = 0; b < nb; b++) {
            const colo_q8_xblk *xb = xg + b;
            const int8_t *q = xb->q[0] + 32 * h, *r = xb->r[0] + 32 * h;
            __m256 d = _mm256_loadu_ps(xb->d + 8 * h);
            /* (not unrolled: the rows' products would be interleaved, and
             * spill; several rows sharing each load of x were slower too) */
#pragma GCC unroll 1
            for (int j = 0; j < JT; j++) {
                const uint8_t *w = u + (size_t)j * k + 32 * b;
                if (nh == 1) {
                    __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(dots_wide(w, q, r, 8, run)), d);
                    acc[j] = _mm256_fmadd_ps(f, _mm256_set1_ps(a[(size_t)j * ns + b]), acc[j]);
                    acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(xb->s[2] + 8 * h),
                                             _mm256_set1_ps(c[(size_t)j * ns + b]), acc[j]);
                } else {
                    __m256 f0 = _mm256_mul_ps(_mm256_cvtepi32_ps(dots_wide(w, q, r, 4, run)), d);
                    __m256 f1 = _mm256_mul_ps(
                        _mm256_cvtepi32_ps(dots_wide(w + 16, q + 4 * 4 * GROUP, r + 4 * 4 * GROUP, 4, run)), d);
                    const float *aj = a + (size_t)j * ns + 2 * b, *cj = c + (size_t)j * ns + 2 * b;
                    acc[j] = _mm256_fmadd_ps(f0, _mm256_set1_ps(aj[0]), acc[j]);
                    acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(xb->s[0] + 8 * h), _mm256_set1_ps(cj[0]), acc[j]);
                    acc[j] = _mm256_fmadd_ps(f1, _mm256_set1_ps(aj[1]), acc[j]);
                    acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(xb->s[1] + 8 * h), _mm256_set1_ps(cj[1]), acc[j]);
                }
            }
        }
        for (int j = 0; j < JT; j++)
            _mm256_storeu_ps(out[j] + 8 * h, acc[j]);
    }
}

/* W[t] lane j = dword t (codes 4t..4t+3) of row j of the 8 rows at u (k
 * bytes apart): an 8x8 dword transpose. */
static inline __attribute__((always_inline)) void transpose8(const uint8_t *u, int k, __m256i W[8])
{
    __m256i z[8], t[8], s[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
        z[j] = _mm256_loadu_si256((const __m256i *)(u + (size_t)j * k));
#pragma GCC unroll 4
    for (int j = 0; j < 8; j += 2) {
        t[j] = _mm256_unpacklo_epi32(z[j], z[j + 1]);
        t[j + 1] = _mm256_unpackhi_epi32(z[j], z[j + 1]);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 8; h += 4) { /* rows 0..3, then 4..7 */
        s[h] = _mm256_unpacklo_epi64(t[h], t[h + 2]);         /* dwords 0 | 4 */
        s[h + 1] = _mm256_unpackhi_epi64(t[h], t[h + 2]);     /* 1 | 5 */
        s[h + 2] = _mm256_unpacklo_epi64(t[h + 1], t[h + 3]); /* 2 | 6 */
        s[h + 3] = _mm256_unpackhi_epi64(t[h + 1], t[h + 3]); /* 3 | 7 */
    }
#pragma GCC unroll 4
    for (int d = 0; d < 4; d++) {
        W[d] = _mm256_permute2x128_si256(s[d], s[d + 4], 0x20);
        W[d + 4] = _mm256_permute2x128_si256(s[d], s[d + 4], 0x31);
    }
}

/* The narrow kernel (few rows of x, as in decode): lanes are weight rows,
 * transposed 4 codes at a time, 8 at a time, and each row of x is
 * broadcast. The same integers and float operations as in kernel() and as
 * VNNI's, so the same bits.
 * out[i][j] = weight row j (of JN, codes u + j * k; at/ct: scales
 * transposed, [scale block][JN]) . x row i (of m <= NARROW_MAX_M, in the
 * groups at xp). */
static inline __attribute__((always_inline)) void kernel_narrow(int nb, int k, const colo_q8_xblk *xp, int m,
                                                                const uint8_t *u, const float *at,
                                                                const float *ct, int nh, int run,
                                                                float out[NARROW_MAX_M][JN])
{
    for (int h = 0; h < JN / 8; h++) {
        __m256 acc[NARROW_MAX_M];
        for (int i = 0; i < NARROW_MAX_M; i++)
            acc[i] = _mm256_setzero_ps();
        for (int b = 0; b < nb; b++) {
            __m256i W[8];
            transpose8(u + (size_t)8 * h * k + 32 * b, k, W);
            for (int i = 0; i < m; i++) {
                const colo_q8_xblk *xb = xp + (size_t)(i / GROUP) * nb + b;
                int l = i % GROUP;
                __m256 d = _mm256_set1_ps(xb->d[l]);
                if (nh == 1) {
                    __m256i p = dots_narrow(W, &xb->q[0][4 * l], &xb->r[0][4 * l], 8, run);
                    __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(p), d);
                    acc[i] = _mm256_fmadd_ps(f, _mm256_loadu_ps(at + (size_t)b * JN + 8 * h), acc[i]);
                    acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(xb->s[2][l]), _mm256_loadu_ps(ct + (size_t)b * JN + 8 * h),
                                             acc[i]);
                } else {
                    __m256i p0 = dots_narrow(W, &xb->q[0][4 * l], &xb->r[0][4 * l], 4, run);
                    __m256i p1 = dots_narrow(W + 4, &xb->q[4][4 * l], &xb->r[4][4 * l], 4, run);
                    __m256 f0 = _mm256_mul_ps(_mm256_cvtepi32_ps(p0), d);
                    __m256 f1 = _mm256_mul_ps(_mm256_cvtepi32_ps(p1), d);
                    const float *ab = at + (size_t)2 * b * JN + 8 * h, *cb = ct + (size_t)2 * b * JN + 8 * h;
                    acc[i] = _mm256_fmadd_ps(f0, _mm256_loadu_ps(ab), acc[i]);
                    acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(xb->s[0][l]), _mm256_loadu_ps(cb), acc[i]);
                    acc[i] = _mm256_fmadd_ps(f1, _mm256_loadu_ps(ab + JN), acc[i]);
                    acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(xb->s[1][l]), _mm256_loadu_ps(cb + JN), acc[i]);
                }
            }
        }
        for (int i = 0; i < m; i++)
            _mm256_storeu_ps(out[i] + 8 * h, acc[i]);
    }
}

/* The wide kernel for Q8_0, whose codes reach 255: vpmaddwd multiplies 16-bit
 * codes by x as one 16-bit number per element, 256 q + r (|256 q + r| <=
 * 32639), and sums pairs into 32 bits (exact: 2 * 255 * 32639 < 2^31).
 * x's dword t becomes two registers, rows 0..3 and 4..7, each row's 4
 * elements in two lanes, which a horizontal add joins at the end. u16:
 * JT rows of k codes. */
static void kernel_q8_0(int nb, int k, int ns, const colo_q8_xblk *xg, const uint16_t *u16, const float *a,
                        const float *c, float out[JT][GROUP])
{
    for (int h = 0; h < GROUP / 8; h++) {
        __m256 acc[JT];
        for (int j = 0; j < JT; j++)
            acc[j] = _mm256_setzero_ps();
        for (int b = 0; b < nb; b++) {
            const colo_q8_xblk *xb = xg + b;
            __m256i X[16];
            for (int t = 0; t < 8; t++) {
                __m256i q = _mm256_loadu_si256((const __m256i *)(xb->q[t] + 32 * h));
                __m256i r = _mm256_loadu_si256((const __m256i *)(xb->r[t] + 32 * h));
                X[2 * t] = _mm256_add_epi16(_mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(q)), 8),
                                            _mm256_cvtepi8_epi16(_mm256_castsi256_si128(r)));
                X[2 * t + 1] = _mm256_add_epi16(
                    _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1)), 8),
                    _mm256_cvtepi8_epi16(_mm256_extracti128_si256(r, 1)));
            }
            __m256 d = _mm256_loadu_ps(xb->d + 8 * h), s = _mm256_loadu_ps(xb->s[2] + 8 * h);
#pragma GCC unroll 1
            for (int j = 0; j < JT; j++) {
                const uint16_t *w = u16 + (size_t)j * k + 32 * b;
                __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
#pragma GCC unroll 8
                for (int t = 0; t < 8; t++) {
                    int64_t w4;
                    memcpy(&w4, w + 4 * t, 8);
                    __m256i wt = _mm256_set1_epi64x(w4);
                    lo = _mm256_add_epi32(lo, _mm256_madd_epi16(wt, X[2 * t]));
                    hi = _mm256_add_epi32(hi, _mm256_madd_epi16(wt, X[2 * t + 1]));
                }
                /* [r0 r1 r4 r5 | r2 r3 r6 r7], then rows in order */
                __m256i p = _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo, hi), 0xd8);
                __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(p), d);
                acc[j] = _mm256_fmadd_ps(f, _mm256_set1_ps(a[(size_t)j * ns + b]), acc[j]);
                acc[j] = _mm256_fmadd_ps(s, _mm256_set1_ps(c[(size_t)j * ns + b]), acc[j]);
            }
        }
        for (int j = 0; j < JT; j++)
            _mm256_storeu_ps(out[j] + 8 * h, acc[j]);
    }
}

/* x for narrow_q8_0: each of the m rows' blocks as 256 q + r in 16 bits,
 * in pairs of elements 4t, 4t + 2 (dword 2t) and 4t + 1, 4t + 3 (2t + 1):
 * x2 (m, nb, 16). */
static void pairs_q8_0(const colo_q8_xblk *xp, int m, int nb, uint32_t *x2)
{
    for (int i = 0; i < m; i++)
        for (int b = 0; b < nb; b++) {
            const colo_q8_xblk *xb = xp + (size_t)(i / GROUP) * nb + b;
            int l = i % GROUP;
            uint32_t *o = x2 + ((size_t)i * nb + b) * 16;
            for (int t = 0; t < 8; t++) {
                uint16_t v[4];
                for (int e = 0; e < 4; e++)
                    v[e] = (uint16_t)(256 * xb->q[t][4 * l + e] + xb->r[t][4 * l + e]);
                o[2 * t] = v[0] | (uint32_t)v[2] << 16;
                o[2 * t + 1] = v[1] | (uint32_t)v[3] << 16;
            }
        }
}

/* The narrow kernel for Q8_0 (out, u, at, ct as kernel_narrow's): as
 * kernel_q8_0, 16-bit codes by x as 256 q + r with vpmaddwd, here codes
 * 4t, 4t + 2 and 4t + 1, 4t + 3 of each lane's weight row against the
 * same elements of a row of x (x2, from pairs_q8_0), broadcast. */
static void narrow_q8_0(int nb, int k, const colo_q8_xblk *xp, int m, const uint8_t *u, const float *at,
                        const float *ct, const uint32_t *x2, float out[NARROW_MAX_M][JN])
{
    const __m256i lo8 = _mm256_set1_epi32(0x00ff00ff);
    __m256 acc[NARROW_MAX_M][JN / 8];
    for (int i = 0; i < NARROW_MAX_M; i++)
        for (int h = 0; h < JN / 8; h++)
            acc[i][h] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m256i W[JN / 8][16];
        for (int h = 0; h < JN / 8; h++) {
            __m256i T[8];
            transpose8(u + (size_t)8 * h * k + 32 * b, k, T);
            for (int t = 0; t < 8; t++) {
                W[h][2 * t] = _mm256_and_si256(T[t], lo8);
                W[h][2 * t + 1] = _mm256_srli_epi16(T[t], 8);
            }
        }
        for (int i = 0; i < m; i++) {
            const colo_q8_xblk *xb = xp + (size_t)(i / GROUP) * nb + b;
            const uint32_t *xi = x2 + ((size_t)i * nb + b) * 16;
            int l = i % GROUP;
            __m256 d = _mm256_set1_ps(xb->d[l]), s = _mm256_set1_ps(xb->s[2][l]);
            for (int h = 0; h < JN / 8; h++) {
                __m256i p = _mm256_setzero_si256();
#pragma GCC unroll 16
                for (int e = 0; e < 16; e++)
                    p = _mm256_add_epi32(p, _mm256_madd_epi16(W[h][e], _mm256_set1_epi32((int32_t)xi[e])));
                __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(p), d);
                acc[i][h] = _mm256_fmadd_ps(f, _mm256_loadu_ps(at + (size_t)b * JN + 8 * h), acc[i][h]);
                acc[i][h] = _mm256_fmadd_ps(s, _mm256_loadu_ps(ct + (size_t)b * JN + 8 * h), acc[i][h]);
            }
        }
    }
    for (int i = 0; i < m; i++)
        for (int h = 0; h < JN / 8; h++)
            _mm256_storeu_ps(out[i] + 8 * h, acc[i][h]);
}

/* One instance per (scale blocks per 32, run). */
#define Q8_INSTANCES(X) X(1, 8) X(1, 4) X(2, 4) X(2, 2)
#define Q8_WIDE(nh, run)                                                                                               \
    static void wide_##nh##_##run(int nb, int k, int ns, const colo_q8_xblk *xg, const uint8_t *u, const float *a,     \
                                  const float *c, float out[JT][GROUP])                                              \
    {                                                                                                                  \
        kernel(nb, k, ns, xg, u, a, c, nh, run, out);                                                                  \
    }
#define Q8_NARROW(nh, run)                                                                                             \
    static void narrow_##nh##_##run(int nb, int k, const colo_q8_xblk *xp, int m, const uint8_t *u, const float *at, \
                                    const float *ct, float out[NARROW_MAX_M][JN])                                    \
    {                                                                                                                  \
        kernel_narrow(nb, k, xp, m, u, at, ct, nh, run, out);                                                          \
    }
Q8_INSTANCES(Q8_WIDE)
Q8_INSTANCES(Q8_NARROW)

/* Q8_0's codes as 16 bits, for kernel_q8_0: JT rows of k at u16. */
static void widen(colo_dtype t, const uint8_t *u, int k, uint16_t *u16)
{
    if (t != COLO_Q8_0)
        return;
    for (size_t e = 0; e < (size_t)JT * k; e += 16)
        _mm256_storeu_si256((__m256i *)(u16 + e), _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(u + e))));
}

static void wide(colo_dtype t, int nb, int k, int ns, const colo_q8_xblk *xg, const uint8_t *u, const uint16_t *u16,
                 const float *a, const float *c, float out[JT][GROUP])
{
    int run = run_of(t);
    if (t == COLO_Q8_0)
        kernel_q8_0(nb, k, ns, xg, u16, a, c, out);
    else if (halves(t) == 2)
        (run == 4 ? wide_2_4 : wide_2_2)(nb, k, ns, xg, u, a, c, out);
    else
        (run == 8 ? wide_1_8 : wide_1_4)(nb, k, ns, xg, u, a, c, out);
}

/* What narrow() needs of x besides xp (m rows), in xs: Q8_0's pairs. */
static void prepare_narrow(colo_dtype t, const colo_q8_xblk *xp, int m, int nb, void *xs)
{
    if (t == COLO_Q8_0)
        pairs_q8_0(xp, m, nb, xs);
}

static void narrow(colo_dtype t, int nb, int k, const colo_q8_xblk *xp, int m, const void *xs, const uint8_t *u,
                   const float *at, const float *ct, float out[NARROW_MAX_M][JN])
{
    int run = run_of(t);
    if (t == COLO_Q8_0)
        narrow_q8_0(nb, k, xp, m, u, at, ct, xs, out);
    else if (halves(t) == 2)
        (run == 4 ? narrow_2_4 : narrow_2_2)(nb, k, xp, m, u, at, ct, out);
    else
        (run == 8 ? narrow_1_8 : narrow_1_4)(nb, k, xp, m, u, at, ct, out);
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
    float out[JT][GROUP] __attribute__((aligned(64)));
    float nout[NARROW_MAX_M][JN] __attribute__((aligned(64)));
    if (is_narrow)
        prepare_narrow(t, xp, m, nb, xs);
    for (int64_t t0 = r0; t0 < r1; t0 += rows) {
        int nj = (int)(r1 - t0 < rows ? r1 - t0 : rows);
        /* Rows past the end repeat the last one (outputs unused). The narrow
         * kernel reads the scales transposed. */
        for (int j = 0; j < rows; j++)
            unpack_row(t, (const unsigned char *)w + (size_t)(t0 + (j < nj ? j : nj - 1)) * row_bytes, k,
                       u + (size_t)j * k, is_narrow ? at + j : a + (size_t)j * ns,
                       is_narrow ? ct + j : c + (size_t)j * ns, is_narrow ? JN : 1);
        if (is_narrow) {
            /* Few rows of x make this memory-bound: the next tile's weights
             * load while this one is multiplied. */
            int64_t pf_end = t0 + 2 * rows < r1 ? t0 + 2 * rows : r1;
            const char *pf = (const char *)w + (size_t)(t0 + rows) * row_bytes;
            for (size_t o = 0; t0 + rows < pf_end && o < (size_t)(pf_end - t0 - rows) * row_bytes; o += 64)
                _mm_prefetch(pf + o, _MM_HINT_T0);
            narrow(t, nb, k, xp, m, xs, u, at, ct, nout);
            for (int i = 0; i < m; i++) {
                float *yr = y + (int64_t)i * y_stride + t0;
                for (int j = 0; j < nj; j++)
                    yr[j] = nout[i][j] + (bias ? bias[t0 + j] : 0.0f);
            }
            continue;
        }
        widen(t, u, k, u16);
        for (int g = 0; g < n_groups; g++) {
            wide(t, nb, k, ns, xp + (size_t)g * nb, u, u16, a, c, out);
            for (int i = 0; i < GROUP && g * GROUP + i < m; i++) {
                float *yr = y + (int64_t)(g * GROUP + i) * y_stride + t0;
                for (int j = 0; j < nj; j++)
                    yr[j] = out[j][i] + (bias ? bias[t0 + j] : 0.0f);
            }
        }
    }
#else
    (void)w, (void)t, (void)r0, (void)r1, (void)k, (void)xp, (void)m, (void)bias, (void)y, (void)y_stride,
        (void)scratch, (void)halves;
#endif
}
