/* int8 products for one or many rows of x with AVX512-VNNI.
 *
 * y (m, n) = x (m, k) W^T + b for W in a block format. x is rounded per
 * block of 32 to two signed 8-bit digits: with D = max|x| / 127 over the
 * block, q = round(x / D) and r = round(256 (x / D - q)), so that
 * x ~ (256 q + r) D / 256 within D / 512 (a 16-bit fixed point per block;
 * one digit alone, as llama.cpp's q8_0, is off by up to D / 2, and that
 * rounding moves the logits of a 135M model by as much as 0.5). The 16
 * lanes of a register are 16 rows of x: colo_cpu_gemm_q8_pack_x lays x out
 * so that dword t of block b holds elements 4t..4t+3 of each row's block,
 * and each weight row, unpacked to one unsigned byte per element, is
 * broadcast 4 bytes at a time into vpdpbusd against each digit. Every
 * format is then the same sum: a weight element is a u + c per scale block
 * (16 or 32 elements), with u the unsigned code (the format's offset, e.g.
 * Q4_0's 8, folded into c), so a scale block adds
 *
 *     a (d sum(u (256 q + r))) + c (d sum(256 q + r)),   d = D / 256
 *
 * to the output: integer dot products (exact: at most 2^28 in an int32),
 * then two FMAs, with d sum(256 q + r) stored beside x. A lane's instruction
 * sequence does not depend on the other lanes, so a row's result is the
 * same bits whatever rows come with it and however many.
 *
 * Compiled with AVX512-VNNI: call only when the CPU has it (linear.c checks). */
#include "kernels/cpu/cpu_kernels.h"

#include <math.h>
#include <string.h>

#if defined(__F16C__)
#include <immintrin.h>
#define HALF(h) _cvtsh_ss(h)
#else
#define HALF(h) colo_fp16_to_f32(h)
#endif

/* Rows of x per group (the lanes of a register). */
#define GROUP COLO_CPU_GEMM_Q8_GROUP

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#include <immintrin.h>
#define Q8_VNNI 1
#endif

/* Weight rows one pass of the kernel carries (one accumulator each). */
#define JT 8
/* The narrow kernel's weight rows (one per lane) and most rows of x. */
#define JN 16
#define NARROW_MAX_M 4

struct colo_q8_xblk {
    int8_t q[8][4 * GROUP]; /* q[t][4 i + e] = x_i's high digit of element 4 t + e */
    int8_t r[8][4 * GROUP]; /* the low digits, laid out alike */
    float d[GROUP];         /* x_i's unit: element ~ (256 q + r) d */
    float s[3][GROUP];      /* d * sum of x_i's 256 q + r over elements 0..15, 16..31, 0..31 */
};

/* Scale blocks per block of 32: 2 for the formats with a scale per 16. */
static int halves(colo_dtype t) { return t == COLO_Q2_K || t == COLO_Q3_K || t == COLO_Q6_K ? 2 : 1; }

bool colo_cpu_gemm_q8_has(colo_dtype t)
{
    switch (t) {
    case COLO_Q4_0: case COLO_Q4_1: case COLO_Q5_0: case COLO_Q5_1: case COLO_Q8_0:
    case COLO_Q2_K: case COLO_Q3_K: case COLO_Q4_K: case COLO_Q5_K: case COLO_Q6_K:
        return true;
    default:
        return false;
    }
}

size_t colo_cpu_gemm_q8_x_bytes(int m, int k)
{
    return (size_t)((m + GROUP - 1) / GROUP) * (size_t)(k / 32) * sizeof(colo_q8_xblk);
}

#if defined(Q8_VNNI)
/* Round to nearest even, as nearbyintf does. */
static inline __m512 rne(__m512 v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
#endif

/* One row's block of 32: its digits (q, r), unit and sums of 256 q + r
 * over each half. The two versions give the same bits. */
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

void colo_cpu_gemm_q8_pack_x(const float *x, int x_stride, int m, int k, int g0, int g1, colo_q8_xblk *xp)
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

#if defined(Q8_VNNI)
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
    return _mm256_mask_add_epi8(v, (__mmask32)qh, v, _mm256_set1_epi8(16));
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
    __mmask32 m = _mm256_test_epi8_mask(_mm256_loadu_si256((const __m256i *)p), _mm256_set1_epi8((char)(1 << bit)));
    _mm256_storeu_si256((__m256i *)u, _mm256_mask_add_epi8(v, m, v, _mm256_set1_epi8((char)val)));
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
 * (as apart); a NULL a is for the formats gather_scales serves only. */
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

/* ---- the kernel ------------------------------------------------------------------------ */

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
#endif

#if defined(Q8_VNNI)
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
 * groups at xp); prefetches pf_bytes at pf on the way. */
static inline __attribute__((always_inline)) void kernel_narrow(int nb, int k, const colo_q8_xblk *xp, int m,
                                                                const uint8_t *u, const float *at,
                                                                const float *ct, int nh,
                                                                float out[NARROW_MAX_M][JN], const char *pf,
                                                                size_t pf_bytes)
{
    /* pf_bytes at pf (the next tile's weights) are prefetched a share per
     * block, so that their loads overlap these products (all at once, they
     * filled the line buffers and stalled the products behind them) */
    size_t pf_step = (pf_bytes / (size_t)nb + 63) & ~(size_t)63;
    __m512 acc[NARROW_MAX_M];
    for (int i = 0; i < NARROW_MAX_M; i++)
        acc[i] = _mm512_setzero_ps();
    const __m512i z = _mm512_setzero_si512();
    for (int b = 0; b < nb; b++) {
        __m512i W[8];
        for (size_t o = (size_t)b * pf_step; o < (size_t)(b + 1) * pf_step && o < pf_bytes; o += 64)
            _mm_prefetch(pf + o, _MM_HINT_T0);
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
                     const float *ct, float out[NARROW_MAX_M][JN], const char *pf, size_t pfb)
{
    kernel_narrow(nb, k, xp, m, u, at, ct, 1, out, pf, pfb);
}

static void narrow_2(int nb, int k, const colo_q8_xblk *xp, int m, const uint8_t *u, const float *at,
                     const float *ct, float out[NARROW_MAX_M][JN], const char *pf, size_t pfb)
{
    kernel_narrow(nb, k, xp, m, u, at, ct, 2, out, pf, pfb);
}
#endif

/* Whether the narrow kernel's tiles take their scales from gather_scales:
 * every format but Q2_K and Q3_K (whose scales unpack_row still writes). */
static bool gathered_scales(colo_dtype t)
{
    switch (t) {
    case COLO_Q4_0: case COLO_Q4_1: case COLO_Q5_0: case COLO_Q5_1: case COLO_Q8_0:
    case COLO_Q4_K: case COLO_Q5_K: case COLO_Q6_K:
        return true;
    default:
        return false;
    }
}

#if defined(Q8_VNNI)
/* The 16-bit half of each dword (hi: the upper one) of v as floats. */
static inline __m512 half_lanes(__m512i v, bool hi)
{
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hi ? _mm512_srli_epi32(v, 16) : v));
}

/* -v, as the scalar - does (the sign flipped, +0 to -0 too). */
static inline __m512 negate(__m512 v)
{
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000u)));
}

/* Byte e (0..3) of each dword of v, unsigned, as floats. */
static inline __m512 byte_lanes(__m512i v, int e)
{
    return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 8 * e), _mm512_set1_epi32(0xff)));
}

/* The narrow kernel's scales of JN weight rows from w (row_bytes apart; rows
 * from nj on repeat the last), with gathers across the rows: lanes are rows,
 * [scale block][JN] at at and ct, the same values unpack_row writes one by
 * one (the same conversions and products). Each gather reads a dword inside
 * its block. */
static void gather_scales(colo_dtype t, const uint8_t *w, size_t row_bytes, int nj, int k, float *at, float *ct)
{
    int32_t ix[JN];
    for (int j = 0; j < JN; j++)
        ix[j] = (j < nj ? j : nj - 1) * (int32_t)row_bytes;
    const __m512i idx = _mm512_loadu_si512(ix);
#define GATHER(off) _mm512_i32gather_epi32(idx, p + (off), 1)
    if (t == COLO_Q4_K || t == COLO_Q5_K) {
        /* d, dmin, then 12 bytes of 6-bit scales and mins (colo_k4_scales) */
        size_t bb = t == COLO_Q4_K ? sizeof(colo_blk_q4_k) : sizeof(colo_blk_q5_k);
        const __m512i m6 = _mm512_set1_epi32(0x3f3f3f3f), m4 = _mm512_set1_epi32(0x0f0f0f0f),
                      top = _mm512_set1_epi32(0x30303030);
        for (int sb = 0; sb < k / 256; sb++) {
            const uint8_t *p = w + (size_t)sb * bb;
            __m512i dd = GATHER(0), s0 = GATHER(4), s1 = GATHER(8), s2 = GATHER(12);
            __m512 d = half_lanes(dd, false), dmin = half_lanes(dd, true);
            /* bytes j of: scales 0..3, mins 0..3, scales 4..7, mins 4..7 */
            __m512i sc_lo = _mm512_and_si512(s0, m6), mn_lo = _mm512_and_si512(s1, m6);
            __m512i sc_hi = _mm512_or_si512(_mm512_and_si512(s2, m4), _mm512_and_si512(_mm512_srli_epi32(s0, 2), top));
            __m512i mn_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(s2, 4), m4),
                                            _mm512_and_si512(_mm512_srli_epi32(s1, 2), top));
            for (int j = 0; j < 8; j++) {
                __m512i sc = j < 4 ? sc_lo : sc_hi, mn = j < 4 ? mn_lo : mn_hi;
                float *ab = at + (size_t)(8 * sb + j) * JN, *cb = ct + (size_t)(8 * sb + j) * JN;
                _mm512_storeu_ps(ab, _mm512_mul_ps(d, byte_lanes(sc, j & 3)));
                _mm512_storeu_ps(cb, negate(_mm512_mul_ps(dmin, byte_lanes(mn, j & 3))));
            }
        }
    } else if (t == COLO_Q6_K) {
        /* 16 signed 8-bit scales at 192, d at 208 (read from 206: the block
         * ends at 210) */
        const __m512 k32 = _mm512_set1_ps(-32.0f);
        for (int sb = 0; sb < k / 256; sb++) {
            const uint8_t *p = w + (size_t)sb * sizeof(colo_blk_q6_k);
            __m512 d = half_lanes(GATHER(206), true);
            for (int q = 0; q < 4; q++) {
                __m512i s = GATHER(192 + 4 * q);
                for (int e = 0; e < 4; e++) {
                    /* byte e sign-extended */
                    __m512i sc = _mm512_srai_epi32(_mm512_slli_epi32(s, 24 - 8 * e), 24);
                    __m512 a = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc));
                    _mm512_storeu_ps(at + (size_t)(16 * sb + 4 * q + e) * JN, a);
                    _mm512_storeu_ps(ct + (size_t)(16 * sb + 4 * q + e) * JN, _mm512_mul_ps(k32, a));
                }
            }
        }
    } else {
        /* blocks of 32 beginning with d (and for Q4_1 and Q5_1 the offset m) */
        size_t bb = t == COLO_Q4_0 ? sizeof(colo_blk_q4_0) : t == COLO_Q4_1 ? sizeof(colo_blk_q4_1)
                  : t == COLO_Q5_0 ? sizeof(colo_blk_q5_0) : t == COLO_Q5_1 ? sizeof(colo_blk_q5_1)
                                   : sizeof(colo_blk_q8_0);
        bool has_m = t == COLO_Q4_1 || t == COLO_Q5_1;
        const __m512 off = _mm512_set1_ps(t == COLO_Q4_0 ? -8.0f : t == COLO_Q5_0 ? -16.0f : -128.0f);
        for (int b = 0; b < k / 32; b++) {
            const uint8_t *p = w + (size_t)b * bb;
            __m512i v = GATHER(0);
            __m512 d = half_lanes(v, false);
            _mm512_storeu_ps(at + (size_t)b * JN, d);
            _mm512_storeu_ps(ct + (size_t)b * JN, has_m ? half_lanes(v, true) : _mm512_mul_ps(off, d));
        }
    }
#undef GATHER
}
#endif

size_t colo_cpu_gemm_q8_scratch_bytes(int k)
{
    size_t ns = (size_t)(k / 32) * 2;
    /* codes and scales of JN rows */
    return (size_t)JN * ((size_t)k + 2 * ns * sizeof(float));
}

void colo_cpu_gemm_q8(const void *w, colo_dtype t, int64_t r0, int64_t r1, int k, const colo_q8_xblk *xp, int m,
                      const float *bias, float *y, int y_stride, void *scratch)
{
#if defined(Q8_VNNI)
    int nb = k / 32, nh = halves(t), ns = nb * nh, n_groups = (m + GROUP - 1) / GROUP;
    size_t row_bytes = colo_dtype_row_bytes(t, k);
    bool narrow = m <= NARROW_MAX_M;
    int rows = narrow ? JN : JT;
    uint8_t *u = scratch;
    float *a = (float *)(u + (size_t)JN * k), *c = a + (size_t)JN * ns, *at = a, *ct = c;
    float out[JT][GROUP] __attribute__((aligned(64)));
    float nout[NARROW_MAX_M][JN] __attribute__((aligned(64)));
    for (int64_t t0 = r0; t0 < r1; t0 += rows) {
        int nj = (int)(r1 - t0 < rows ? r1 - t0 : rows);
        /* Rows past the end repeat the last one (outputs unused). The narrow
         * kernel reads the scales transposed. */
        bool gather = narrow && gathered_scales(t);
        for (int j = 0; j < rows; j++)
            unpack_row(t, (const unsigned char *)w + (size_t)(t0 + (j < nj ? j : nj - 1)) * row_bytes, k,
                       u + (size_t)j * k, gather ? NULL : narrow ? at + j : a + (size_t)j * ns,
                       gather ? NULL : narrow ? ct + j : c + (size_t)j * ns, narrow ? JN : 1);
        if (gather)
            gather_scales(t, (const uint8_t *)w + (size_t)t0 * row_bytes, row_bytes, nj, k, at, ct);
        if (narrow) {
            /* Few rows of x make this memory-bound: the next tile's weights
             * load while this one is multiplied (kernel_narrow). */
            int64_t pf_end = t0 + 2 * rows < r1 ? t0 + 2 * rows : r1;
            const char *pf = (const char *)w + (size_t)(t0 + rows) * row_bytes;
            size_t pfb = t0 + rows < pf_end ? (size_t)(pf_end - t0 - rows) * row_bytes : 0;
            if (nh == 1)
                narrow_1(nb, k, xp, m, u, at, ct, nout, pf, pfb);
            else
                narrow_2(nb, k, xp, m, u, at, ct, nout, pf, pfb);
            for (int i = 0; i < m; i++) {
                float *yr = y + (int64_t)i * y_stride + t0;
                for (int j = 0; j < nj; j++)
                    yr[j] = nout[i][j] + (bias ? bias[t0 + j] : 0.0f);
            }
            continue;
        }
        for (int g = 0; g < n_groups; g++) {
            if (nh == 1)
                kernel32(nb, k, ns, xp + (size_t)g * nb, u, a, c, out);
            else
                kernel16(nb, k, ns, xp + (size_t)g * nb, u, a, c, out);
            for (int i = 0; i < GROUP && g * GROUP + i < m; i++) {
                float *yr = y + (int64_t)(g * GROUP + i) * y_stride + t0;
                for (int j = 0; j < nj; j++)
                    yr[j] = out[j][i] + (bias ? bias[t0 + j] : 0.0f);
            }
        }
    }
#else
    (void)w, (void)t, (void)r0, (void)r1, (void)k, (void)xp, (void)m, (void)bias, (void)y, (void)y_stride,
        (void)scratch, (void)halves, (void)gathered_scales;
#endif
}
