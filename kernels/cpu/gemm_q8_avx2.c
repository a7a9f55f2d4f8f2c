/* gemm_q8 with AVX2, FMA and F16C: the kernels (gemm_q8_impl.h has the
 * rest, shared with gemm_q8_vnni.c; gemm_q8.c the arithmetic). vpmaddubsw
 * and vpmaddwd in place of vpdpbusd, 8 lanes a register (half a group of x,
 * or 8 weight rows), the same integer sums and the same float operations in
 * the same order as the AVX512-VNNI version: the same bits. */
#define Q8_WANT_AVX2 1
#ifndef Q8_FN /* gemm_q8_avx2_vnni.c names its copy otherwise */
#define Q8_FN(name) name##_avx2
#endif
#include "kernels/cpu/gemm_q8_impl.h"

#if defined(Q8_AVX2)
/* vpmaddubsw multiplies unsigned codes by signed digits in pairs and adds
 * each pair into 16 bits, saturating; vpmaddwd by ones then widens four
 * products to a 32-bit lane. A pair stays below 2 * 63 * 127 < 32767 for
 * codes up to 63, and `run` pairs' sums may be added in 16 bits before
 * widening where run * 2 * (largest code) * 127 <= 32767: 8 for 4-bit codes,
 * 4 for 5-bit ones and for Q2_K and Q3_K (whose scale blocks are 4 dwords),
 * 2 for Q6_K's 6 bits. Q8_0's codes reach 255: its kernels take them as
 * 16 bits, and x as one 16-bit number (kernel_q8_0, rows_q8_0). Every
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

/* dots_wide for two weight rows (w0, w1) against the same digits: each load
 * of x feeds two products, which halves the loads a product takes (one
 * row's products are load-bound); each row's sums are dots_wide's. */
static inline __attribute__((always_inline)) void dots_wide2(const uint8_t *w0, const uint8_t *w1, const int8_t *q,
                                                             const int8_t *r, int nt, int run, __m256i *p0,
                                                             __m256i *p1)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i aq0 = _mm256_setzero_si256(), ar0 = _mm256_setzero_si256();
    __m256i aq1 = _mm256_setzero_si256(), ar1 = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int t0 = 0; t0 < nt; t0 += run) {
        __m256i sq0 = _mm256_setzero_si256(), sr0 = _mm256_setzero_si256();
        __m256i sq1 = _mm256_setzero_si256(), sr1 = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int t = t0; t < t0 + run; t++) {
            __m256i xq = _mm256_loadu_si256((const __m256i *)(q + 4 * GROUP * t));
            __m256i xr = _mm256_loadu_si256((const __m256i *)(r + 4 * GROUP * t));
            __m256i wa = bcast4(w0 + 4 * t), wb = bcast4(w1 + 4 * t);
            sq0 = _mm256_add_epi16(sq0, _mm256_maddubs_epi16(wa, xq));
            sr0 = _mm256_add_epi16(sr0, _mm256_maddubs_epi16(wa, xr));
            sq1 = _mm256_add_epi16(sq1, _mm256_maddubs_epi16(wb, xq));
            sr1 = _mm256_add_epi16(sr1, _mm256_maddubs_epi16(wb, xr));
            __asm__("" : "+x"(sq0), "+x"(sr0), "+x"(sq1), "+x"(sr1));
        }
        aq0 = _mm256_add_epi32(aq0, _mm256_madd_epi16(sq0, ones));
        ar0 = _mm256_add_epi32(ar0, _mm256_madd_epi16(sr0, ones));
        aq1 = _mm256_add_epi32(aq1, _mm256_madd_epi16(sq1, ones));
        ar1 = _mm256_add_epi32(ar1, _mm256_madd_epi16(sr1, ones));
    }
    *p0 = _mm256_add_epi32(_mm256_slli_epi32(aq0, 8), ar0);
    *p1 = _mm256_add_epi32(_mm256_slli_epi32(aq1, 8), ar1);
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
static inline __attribute__((always_inline)) void kernel(int nb, int k, int ns, const colo_q8_xblk *xg, int rows,
                                                         const uint8_t *u, const float *a, const float *c, int nh,
                                                         int run, float out[JT][GROUP])
{
    for (int h = 0; h < (rows + 7) / 8; h++) { /* (a half of the group with no row of x is skipped) */
        __m256 acc[JT];
        for (int j = 0; j < JT; j++)
            acc[j] = _mm256_setzero_ps();
        for (int b = 0; b < nb; b++) {
            const colo_q8_xblk *xb = xg + b;
            const int8_t *q = xb->q[0] + 32 * h, *r = xb->r[0] + 32 * h;
            __m256 d = _mm256_loadu_ps(xb->d + 8 * h);
            /* (rows in pairs, not unrolled further: more rows' products
             * interleaved spill) */
#pragma GCC unroll 1
            for (int j = 0; j < JT; j += 2) {
                const uint8_t *w = u + (size_t)j * k + 32 * b;
                if (nh == 1) {
                    __m256i p[2];
                    dots_wide2(w, w + k, q, r, 8, run, &p[0], &p[1]);
                    __m256 s2 = _mm256_loadu_ps(xb->s[2] + 8 * h);
                    for (int e = 0; e < 2; e++) {
                        __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(p[e]), d);
                        acc[j + e] = _mm256_fmadd_ps(f, _mm256_set1_ps(a[(size_t)(j + e) * ns + b]), acc[j + e]);
                        acc[j + e] = _mm256_fmadd_ps(s2, _mm256_set1_ps(c[(size_t)(j + e) * ns + b]), acc[j + e]);
                    }
                } else {
                    for (int e = 0; e < 2; e++) { /* (two rows at once spill here) */
                        const uint8_t *we = w + (size_t)e * k;
                        __m256 f0 = _mm256_mul_ps(_mm256_cvtepi32_ps(dots_wide(we, q, r, 4, run)), d);
                        __m256 f1 = _mm256_mul_ps(
                            _mm256_cvtepi32_ps(dots_wide(we + 16, q + 4 * 4 * GROUP, r + 4 * 4 * GROUP, 4, run)), d);
                        const float *aj = a + (size_t)(j + e) * ns + 2 * b, *cj = c + (size_t)(j + e) * ns + 2 * b;
                        acc[j + e] = _mm256_fmadd_ps(f0, _mm256_set1_ps(aj[0]), acc[j + e]);
                        acc[j + e] = _mm256_fmadd_ps(_mm256_loadu_ps(xb->s[0] + 8 * h), _mm256_set1_ps(cj[0]), acc[j + e]);
                        acc[j + e] = _mm256_fmadd_ps(f1, _mm256_set1_ps(aj[1]), acc[j + e]);
                        acc[j + e] = _mm256_fmadd_ps(_mm256_loadu_ps(xb->s[1] + 8 * h), _mm256_set1_ps(cj[1]), acc[j + e]);
                    }
                }
            }
        }
        for (int j = 0; j < JT; j++)
            _mm256_storeu_ps(out[j] + 8 * h, acc[j]);
    }
}

/* W[t] lane j = dword t of z[j]: an 8x8 dword transpose. */
static inline __attribute__((always_inline)) void transpose_regs(const __m256i z[8], __m256i W[8])
{
    __m256i t[8], s[8];
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

/* W[t] lane j = dword t (codes 4t..4t+3) of row j of the 8 rows at u (k
 * bytes apart). */
static inline __attribute__((always_inline)) void transpose8(const uint8_t *u, int k, __m256i W[8])
{
    __m256i z[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
        z[j] = _mm256_loadu_si256((const __m256i *)(u + (size_t)j * k));
    transpose_regs(z, W);
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
static void kernel_q8_0(int nb, int k, int ns, const colo_q8_xblk *xg, int rows, const uint16_t *u16,
                        const float *a, const float *c, float out[JT][GROUP])
{
    for (int h = 0; h < (rows + 7) / 8; h++) {
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

/* One instance per (scale blocks per 32, run). */
#define Q8_INSTANCES(X) X(1, 8) X(1, 4) X(2, 4) X(2, 2)
#define Q8_WIDE(nh, run)                                                                                               \
    static void wide_##nh##_##run(int nb, int k, int ns, const colo_q8_xblk *xg, int rows, const uint8_t *u,          \
                                  const float *a, const float *c, float out[JT][GROUP])                              \
    {                                                                                                                  \
        kernel(nb, k, ns, xg, rows, u, a, c, nh, run, out);                                                            \
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

static void wide(colo_dtype t, int nb, int k, int ns, const colo_q8_xblk *xg, int rows, const uint8_t *u,
                 const uint16_t *u16, const float *a, const float *c, float out[JT][GROUP])
{
    int run = run_of(t);
    if (t == COLO_Q8_0)
        kernel_q8_0(nb, k, ns, xg, rows, u16, a, c, out);
    else if (halves(t) == 2)
        (run == 4 ? wide_2_4 : wide_2_2)(nb, k, ns, xg, rows, u, a, c, out);
    else
        (run == 8 ? wide_1_8 : wide_1_4)(nb, k, ns, xg, rows, u, a, c, out);
}


/* Scales come from unpack_row here (gather_scales is never called). */
static bool gathered_scales(colo_dtype t)
{
    (void)t;
    return false;
}

static void gather_scales(colo_dtype t, const uint8_t *w, size_t row_bytes, int nj, int k, float *at, float *ct)
{
    (void)t, (void)w, (void)row_bytes, (void)nj, (void)k, (void)at, (void)ct;
}

static void narrow(colo_dtype t, int nb, int k, const colo_q8_xblk *xp, int m, const void *xs, const uint8_t *u,
                   const float *at, const float *ct, float out[NARROW_MAX_M][JN], const char *pf, size_t pf_bytes)
{
    for (size_t o = 0; o < pf_bytes; o += 64) /* the next tile's weights */
        prefetch_line(pf + o);
    (void)xs;
    int run = run_of(t);
    if (halves(t) == 2)
        (run == 4 ? narrow_2_4 : narrow_2_2)(nb, k, xp, m, u, at, ct, out);
    else
        (run == 8 ? narrow_1_8 : narrow_1_4)(nb, k, xp, m, u, at, ct, out);
}

/* ---- the narrow kernel on weight rows in place (decode) --------------------------------
 * For the formats of blocks of 32, Q4_K and Q6_K, a step of at most 4 rows
 * reads each weight row where it lies, from its first block to its last, as
 * one stream the hardware prefetches: no copy of the codes through
 * unpack_row and no transpose of them. A first pass forms each block's
 * exact integer product with each row of x (row_sums) and copies its
 * scales; a second turns the tile's 16 weight rows' sums into outputs, 8
 * rows a register, by kernel_narrow's float operations in its order, so the
 * bits are the same. */

/* A block of 32: its size, the byte offsets of its codes, of its fifth bits
 * (-1: none) and of its minimum (-1: none), and the multiple of d its codes'
 * offset adds (unpack_row's c), where there is no minimum. */
typedef struct {
    size_t bytes;
    int qs, qh, m;
    float off;
} block_layout;

static block_layout layout_of(colo_dtype t)
{
    switch (t) {
    case COLO_Q4_0: return (block_layout){sizeof(colo_blk_q4_0), 2, -1, -1, -8.0f};
    case COLO_Q4_1: return (block_layout){sizeof(colo_blk_q4_1), 4, -1, 2, 0.0f};
    case COLO_Q5_0: return (block_layout){sizeof(colo_blk_q5_0), 6, 2, -1, -16.0f};
    case COLO_Q5_1: return (block_layout){sizeof(colo_blk_q5_1), 8, 4, 2, 0.0f};
    default: return (block_layout){sizeof(colo_blk_q8_0), 2, -1, -1, -128.0f};
    }
}

_Static_assert(JN == 16, "rows_out takes a tile as two halves of 8 weight rows");

static bool narrow_reads_rows(colo_dtype t)
{
    return t == COLO_Q4_0 || t == COLO_Q4_1 || t == COLO_Q5_0 || t == COLO_Q5_1 || t == COLO_Q8_0 || t == COLO_Q4_K ||
           t == COLO_Q6_K;
}

/* x for row_sums, 64 bytes per row and block (xs: (m, nb, 64)): 256 q + r
 * as 16 bits, in the order of the codes' lanes (block_dot): Q8_0's even
 * elements, then its odd ones; the other formats' elements 0..15, then
 * 16..31. */
static void rows_x(colo_dtype t, const colo_q8_xblk *xp, int m, int nb, int8_t *xs)
{
    /* dword t of a row's block: elements 4t..4t+3, 4 GROUP bytes after dword t - 1 */
    const __m256i dwords = _mm256_setr_epi32(0, 4 * GROUP, 8 * GROUP, 12 * GROUP, 16 * GROUP, 20 * GROUP, 24 * GROUP,
                                             28 * GROUP);
    for (int i = 0; i < m; i++)
        for (int b = 0; b < nb; b++) {
            const colo_q8_xblk *xb = xp + (size_t)(i / GROUP) * nb + b;
            int l = i % GROUP;
            /* the row's digits, elements 0..31 in order */
            __m256i q = _mm256_i32gather_epi32((const int *)(const void *)&xb->q[0][4 * l], dwords, 1);
            __m256i r = _mm256_i32gather_epi32((const int *)(const void *)&xb->r[0][4 * l], dwords, 1);
            __m256i *o = (__m256i *)(void *)(xs + ((size_t)i * nb + b) * 64);
            if (t == COLO_Q8_0) { /* even elements, then odd ones: the low and high bytes of 16-bit lanes */
                __m256i qe = _mm256_srai_epi16(_mm256_slli_epi16(q, 8), 8), re = _mm256_srai_epi16(_mm256_slli_epi16(r, 8), 8);
                _mm256_storeu_si256(o, _mm256_add_epi16(_mm256_slli_epi16(qe, 8), re));
                _mm256_storeu_si256(o + 1, _mm256_add_epi16(_mm256_slli_epi16(_mm256_srai_epi16(q, 8), 8),
                                                            _mm256_srai_epi16(r, 8)));
            } else {
                for (int h = 0; h < 2; h++) {
                    __m128i qh = h ? _mm256_extracti128_si256(q, 1) : _mm256_castsi256_si128(q);
                    __m128i rh = h ? _mm256_extracti128_si256(r, 1) : _mm256_castsi256_si128(r);
                    _mm256_storeu_si256(o + h, _mm256_add_epi16(_mm256_slli_epi16(_mm256_cvtepi8_epi16(qh), 8),
                                                                _mm256_cvtepi8_epi16(rh)));
                }
            }
        }
}

/* Lane e = the sum of the 8 lanes of v[e]. */
static inline __m256i reduce8(const __m256i v[8])
{
    __m256i a0 = _mm256_hadd_epi32(v[0], v[1]), a1 = _mm256_hadd_epi32(v[2], v[3]);
    __m256i a2 = _mm256_hadd_epi32(v[4], v[5]), a3 = _mm256_hadd_epi32(v[6], v[7]);
    __m256i b0 = _mm256_hadd_epi32(a0, a1), b1 = _mm256_hadd_epi32(a2, a3);
    return _mm256_add_epi32(_mm256_permute2x128_si256(b0, b1, 0x20), _mm256_permute2x128_si256(b0, b1, 0x31));
}

/* Block blk's codes as 16 bits (Q8_0's + 128), in the lanes of x's
 * layout from rows_x: elements 0..15 into *lo, 16..31 into *hi (Q8_0: even
 * ones, odd ones). */
static inline __attribute__((always_inline)) void block_codes(const uint8_t *blk, block_layout L, bool q8,
                                                              __m256i *lo_out, __m256i *hi_out)
{
    __m256i lo, hi;
    if (q8) {
        __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + L.qs)), _mm256_set1_epi8((char)0x80));
        lo = _mm256_and_si256(v, _mm256_set1_epi16(0xff)), hi = _mm256_srli_epi16(v, 8);
    } else {
        __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(blk + L.qs)));
        lo = _mm256_and_si256(v, _mm256_set1_epi16(15)), hi = _mm256_srli_epi16(v, 4);
        if (L.qh >= 0) {
            /* lane e of lo (hi): + 16 where bit e (16 + e) of qh is set */
            const __m256i bit = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
                                                  16384, (short)32768);
            uint16_t qh[2];
            memcpy(qh, blk + L.qh, 4);
            __m256i h0 = _mm256_and_si256(_mm256_set1_epi16((short)qh[0]), bit);
            __m256i h1 = _mm256_and_si256(_mm256_set1_epi16((short)qh[1]), bit);
            const __m256i k16 = _mm256_set1_epi16(16);
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi16(h0, bit), k16));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi16(h1, bit), k16));
        }
    }
    *lo_out = lo;
    *hi_out = hi;
}

/* a . x0 + b . x1, 16-bit pairs into 8 dword lanes. Exact for codes <=
 * 255 against |256 q + r| <= 32639: each pair's sum fits in 32 bits, and
 * so does a block's. Compiled for AVX512-VNNI (gemm_q8_avx2_vnni.c) the
 * second product accumulates into the first in one vpdpwssd: the same
 * integers, one instruction fewer. */
static inline __m256i madd2(__m256i a, __m256i x0, __m256i b, __m256i x1)
{
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpwssd_epi32(_mm256_madd_epi16(a, x0), b, x1);
#else
    return _mm256_add_epi32(_mm256_madd_epi16(a, x0), _mm256_madd_epi16(b, x1));
#endif
}

/* 8 lanes whose sum is the exact product 256 P(q) + P(r) of a block's
 * codes (block_codes) with a row of x (x: its 64 bytes from rows_x). */
static inline __m256i codes_dot(__m256i lo, __m256i hi, const int8_t *x)
{
    return madd2(lo, _mm256_loadu_si256((const __m256i *)x), hi, _mm256_loadu_si256((const __m256i *)(x + 32)));
}

static inline __attribute__((always_inline)) __m256i block_dot(const uint8_t *blk, block_layout L, bool q8,
                                                               const int8_t *x)
{
    __m256i lo, hi;
    block_codes(blk, L, q8, &lo, &hi);
    return codes_dot(lo, hi, x);
}

/* reduce8 in its two halves: lane e of the result of quads(b0, b1), where
 * b0 = quad(v[0..3]) and b1 = quad(v[4..7]), is reduce8(v)'s; a step of
 * several rows of x forms each row's quads as each pair of blocks is
 * decoded, once for all the rows. */
static inline __m256i quad(__m256i a01, __m256i a23) { return _mm256_hadd_epi32(a01, a23); }
static inline __m256i quads(__m256i b0, __m256i b1)
{
    return _mm256_add_epi32(_mm256_permute2x128_si256(b0, b1, 0x20), _mm256_permute2x128_si256(b0, b1, 0x31));
}

/* S[i * nbp + b] = block b of the weight row at row . x row i (i < m, b <
 * nb; S zero from nb to nbp, a multiple of 8), and DM[b] = the block's
 * first dword (d, and m where it has one): its scales for rows_out, copied
 * while the block is at hand. */
static inline __attribute__((always_inline)) void row_sums(colo_dtype t, const uint8_t *row, int nb, int m,
                                                           const int8_t *xs, int32_t *S, int nbp, int32_t *DM)
{
    const block_layout L = layout_of(t);
    const bool q8 = t == COLO_Q8_0;
    int full = nb & ~7;
    for (int b0 = 0; b0 < full; b0 += 8) {
        for (int e = 0; e < 8; e++)
            memcpy(DM + b0 + e, row + (size_t)(b0 + e) * L.bytes, 4);
        if (m == 1) {
            __m256i v[8];
            const int8_t *x = xs + (size_t)b0 * 64;
#pragma GCC unroll 8
            for (int e = 0; e < 8; e++)
                v[e] = block_dot(row + (size_t)(b0 + e) * L.bytes, L, q8, x + 64 * e);
            _mm256_storeu_si256((__m256i *)(S + b0), reduce8(v));
            continue;
        }
        /* each block's codes decoded once for the m rows of x: a pair of
         * blocks at a time, each row's pair summed at once (reduce8's
         * first level), two pairs a quad */
        __m256i b[NARROW_MAX_M][2];
#pragma GCC unroll 2
        for (int g = 0; g < 2; g++) {
            __m256i a[NARROW_MAX_M][2];
#pragma GCC unroll 2
            for (int p = 0; p < 2; p++) {
                int e = 4 * g + 2 * p;
                __m256i lo0, hi0, lo1, hi1;
                block_codes(row + (size_t)(b0 + e) * L.bytes, L, q8, &lo0, &hi0);
                block_codes(row + (size_t)(b0 + e + 1) * L.bytes, L, q8, &lo1, &hi1);
                for (int i = 0; i < m; i++) {
                    const int8_t *x = xs + ((size_t)i * nb + b0 + e) * 64;
                    a[i][p] = _mm256_hadd_epi32(codes_dot(lo0, hi0, x), codes_dot(lo1, hi1, x + 64));
                }
            }
            for (int i = 0; i < m; i++)
                b[i][g] = quad(a[i][0], a[i][1]);
        }
        for (int i = 0; i < m; i++)
            _mm256_storeu_si256((__m256i *)(S + (size_t)i * nbp + b0), quads(b[i][0], b[i][1]));
    }
    if (full == nb)
        return;
    for (int e = 0; e < 8; e++)
        DM[full + e] = 0;
    for (int e = 0; full + e < nb; e++)
        memcpy(DM + full + e, row + (size_t)(full + e) * L.bytes, 4);
    for (int i = 0; i < m; i++) {
        __m256i v[8];
#pragma GCC unroll 8
        for (int e = 0; e < 8; e++)
            v[e] = full + e < nb ? block_dot(row + (size_t)(full + e) * L.bytes, L, q8,
                                             xs + ((size_t)i * nb + full + e) * 64)
                                 : _mm256_setzero_si256();
        _mm256_storeu_si256((__m256i *)(S + (size_t)i * nbp + full), reduce8(v));
    }
}

/* The 16-bit halves (hi: the upper ones) of the 8 dwords of v as floats. */
static inline __m256 half_lanes(__m256i v, bool hi)
{
    const __m256i pick = hi ? _mm256_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1, 2, 3, 6,
                                               7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1)
                            : _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4,
                                               5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256i h = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, pick), 0x08);
    return _mm256_cvtph_ps(_mm256_castsi256_si128(h));
}

/* Lane j of T[e] = dword b0 + e of row 8 h + j of the (JN, nbp) dwords at P. */
static inline __attribute__((always_inline)) void rows_block8(const int32_t *P, int nbp, int h, int b0,
                                                              __m256i T[8])
{
    __m256i z[8];
    for (int j = 0; j < 8; j++)
        z[j] = _mm256_loadu_si256((const __m256i *)(P + (size_t)(8 * h + j) * nbp + b0));
    transpose_regs(z, T);
}

/* out[i][j] for the JN weight rows of a tile from their block sums S (row
 * j's at S + (i * JN + j) * nbp) and scale dwords DM (row j's at DM + j *
 * nbp), by kernel_narrow's float operations in its order; a and c as
 * unpack_row's. The two halves' chains of products are interleaved, so
 * that one's latency hides the other's. */
static inline __attribute__((always_inline)) void rows_out(colo_dtype t, int nb, int nbp, const int32_t *S,
                                                           const int32_t *DM, const colo_q8_xblk *xp, int m,
                                                           float out[NARROW_MAX_M][JN])
{
    const block_layout L = layout_of(t);
    __m256 acc[NARROW_MAX_M][2];
    for (int i = 0; i < NARROW_MAX_M; i++)
        acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int b0 = 0; b0 < nb; b0 += 8) {
        __m256i T[NARROW_MAX_M][2][8], D[2][8];
        for (int h = 0; h < 2; h++) {
            rows_block8(DM, nbp, h, b0, D[h]);
            for (int i = 0; i < m; i++)
                rows_block8(S + (size_t)i * JN * nbp, nbp, h, b0, T[i][h]);
        }
        for (int e = 0; e < 8 && b0 + e < nb; e++) {
            int b = b0 + e;
            __m256 a[2], c[2];
            for (int h = 0; h < 2; h++) {
                a[h] = half_lanes(D[h][e], false);
                c[h] = L.m >= 0 ? half_lanes(D[h][e], true) : _mm256_mul_ps(_mm256_set1_ps(L.off), a[h]);
            }
            for (int i = 0; i < m; i++) {
                const colo_q8_xblk *xb = xp + (size_t)(i / GROUP) * nb + b;
                int l = i % GROUP;
                __m256 d = _mm256_set1_ps(xb->d[l]), s = _mm256_set1_ps(xb->s[2][l]);
                for (int h = 0; h < 2; h++) {
                    __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(T[i][h][e]), d);
                    acc[i][h] = _mm256_fmadd_ps(f, a[h], acc[i][h]);
                    acc[i][h] = _mm256_fmadd_ps(s, c[h], acc[i][h]);
                }
            }
        }
    }
    for (int i = 0; i < m; i++)
        for (int h = 0; h < 2; h++)
            _mm256_storeu_ps(out[i] + 8 * h, acc[i][h]);
}

/* ---- Q4_K and Q6_K in place: super-blocks of 256, the same two passes ----------------- */

/* Lanes j of V[0..3] = the 4 dwords at P + (8 h + j) * stride + off. */
static inline __attribute__((always_inline)) void rows_dword4(const int32_t *P, size_t stride, int h, size_t off,
                                                              __m256i V[4])
{
    const int32_t *p = P + (size_t)8 * h * stride + off;
#define ROWS2(a, b) _mm256_loadu2_m128i((const __m128i *)(p + (b) * stride), (const __m128i *)(p + (a) * stride))
    __m256i r04 = ROWS2(0, 4), r15 = ROWS2(1, 5), r26 = ROWS2(2, 6), r37 = ROWS2(3, 7);
#undef ROWS2
    __m256i a = _mm256_unpacklo_epi32(r04, r15), b = _mm256_unpackhi_epi32(r04, r15);
    __m256i c = _mm256_unpacklo_epi32(r26, r37), d = _mm256_unpackhi_epi32(r26, r37);
    V[0] = _mm256_unpacklo_epi64(a, c), V[1] = _mm256_unpackhi_epi64(a, c);
    V[2] = _mm256_unpacklo_epi64(b, d), V[3] = _mm256_unpackhi_epi64(b, d);
}

/* Byte e (0..3) of each dword of v, unsigned, as floats. */
static inline __m256 byte_lanes(__m256i v, int e)
{
    return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 8 * e), _mm256_set1_epi32(0xff)));
}

/* -v, as the scalar - does (the sign flipped, +0 to -0 too). */
static inline __m256 negate(__m256 v)
{
    return _mm256_castsi256_ps(_mm256_xor_si256(_mm256_castps_si256(v), _mm256_set1_epi32((int)0x80000000u)));
}

/* Q4_K's pass 1: S[i * nbp + b] as row_sums's (each sub-block of 32 a
 * block), and SC[4 sb..4 sb + 3] = super-block sb's d, dmin and packed
 * scales. */
static inline __attribute__((always_inline)) void row_sums_q4_k(const uint8_t *row, int nb, int m, const int8_t *xs,
                                                                int32_t *S, int nbp, int32_t *SC)
{
    const __m256i m15 = _mm256_set1_epi16(15);
    for (int sb = 0; sb < nb / 8; sb++) {
        const colo_blk_q4_k *q = (const colo_blk_q4_k *)row + sb;
        memcpy(SC + 4 * sb, q, 16);
        if (m > 1) { /* each pair of sub-blocks' codes decoded once for the m rows, as row_sums */
            __m256i b[NARROW_MAX_M][2];
#pragma GCC unroll 2
            for (int g = 0; g < 2; g++) {
                __m256i a[NARROW_MAX_M][2];
#pragma GCC unroll 2
                for (int pp = 0; pp < 2; pp++) {
                    int p = 2 * g + pp; /* sub-blocks 2p (low nibbles) and 2p + 1 (high) */
                    __m256i A = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(q->qs + 32 * p)));
                    __m256i B = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(q->qs + 32 * p + 16)));
                    __m256i al = _mm256_and_si256(A, m15), bl = _mm256_and_si256(B, m15);
                    __m256i ah = _mm256_srli_epi16(A, 4), bh = _mm256_srli_epi16(B, 4);
                    for (int i = 0; i < m; i++) {
                        const int8_t *x0 = xs + ((size_t)i * nb + 8 * sb) * 64 + 128 * p;
                        a[i][pp] = _mm256_hadd_epi32(codes_dot(al, bl, x0), codes_dot(ah, bh, x0 + 64));
                    }
                }
                for (int i = 0; i < m; i++)
                    b[i][g] = quad(a[i][0], a[i][1]);
            }
            for (int i = 0; i < m; i++)
                _mm256_storeu_si256((__m256i *)(S + (size_t)i * nbp + 8 * sb), quads(b[i][0], b[i][1]));
            continue;
        }
        for (int i = 0; i < m; i++) {
            __m256i v[8];
            const int8_t *x = xs + ((size_t)i * nb + 8 * sb) * 64;
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) { /* sub-blocks 2p (low nibbles) and 2p + 1 (high) */
                __m256i A = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(q->qs + 32 * p)));
                __m256i B = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(q->qs + 32 * p + 16)));
                const int8_t *x0 = x + 128 * p, *x1 = x0 + 64;
                v[2 * p] = madd2(_mm256_and_si256(A, m15), _mm256_loadu_si256((const __m256i *)x0),
                                 _mm256_and_si256(B, m15), _mm256_loadu_si256((const __m256i *)(x0 + 32)));
                v[2 * p + 1] = madd2(_mm256_srli_epi16(A, 4), _mm256_loadu_si256((const __m256i *)x1),
                                     _mm256_srli_epi16(B, 4), _mm256_loadu_si256((const __m256i *)(x1 + 32)));
            }
            _mm256_storeu_si256((__m256i *)(S + (size_t)i * nbp + 8 * sb), reduce8(v));
        }
    }
}

/* Q6_K's pass 1: its scale blocks are 16 elements, so two sums a block:
 * S[i * istride + b] over elements 0..15 of block b and S[i * istride +
 * half + b] over 16..31; SC[5 sb..5 sb + 3] = super-block sb's 16 scales
 * and SC[5 sb + 4] its d. */
static inline __attribute__((always_inline)) void row_sums_q6_k(const uint8_t *row, int nb, int m, const int8_t *xs,
                                                                int32_t *S, size_t istride, int half, int32_t *SC)
{
    const __m256i m15 = _mm256_set1_epi16(15), m30 = _mm256_set1_epi16(0x30);
    for (int sb = 0; sb < nb / 8; sb++) {
        const colo_blk_q6_k *q = (const colo_blk_q6_k *)row + sb;
        memcpy(SC + 5 * sb, q->scales, 16);
        SC[5 * sb + 4] = q->d;
        if (m > 1) { /* each block half's codes decoded once for the m rows, as row_sums */
            __m256i b[NARROW_MAX_M][2][2]; /* [row][e][hh] */
#pragma GCC unroll 2
            for (int hh = 0; hh < 2; hh++)
#pragma GCC unroll 2
                for (int e = 0; e < 2; e++) {
                    const uint8_t *ql = q->ql + 64 * hh + 16 * e;
                    __m256i L0 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)ql));
                    __m256i L1 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(ql + 32)));
                    __m256i H = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(q->qh + 32 * hh + 16 * e)));
                    __m256i c0 = _mm256_or_si256(_mm256_and_si256(L0, m15), _mm256_and_si256(_mm256_slli_epi16(H, 4), m30));
                    __m256i c1 = _mm256_or_si256(_mm256_and_si256(L1, m15), _mm256_and_si256(_mm256_slli_epi16(H, 2), m30));
                    __m256i c2 = _mm256_or_si256(_mm256_srli_epi16(L0, 4), _mm256_and_si256(H, m30));
                    __m256i c3 = _mm256_or_si256(_mm256_srli_epi16(L1, 4),
                                                 _mm256_and_si256(_mm256_srli_epi16(H, 2), m30));
                    for (int i = 0; i < m; i++) {
                        const int8_t *x = xs + ((size_t)i * nb + 8 * sb + 4 * hh) * 64 + 32 * e;
#define Q6_DOT(c, t) _mm256_madd_epi16(c, _mm256_loadu_si256((const __m256i *)(x + 64 * (t))))
                        b[i][e][hh] = quad(_mm256_hadd_epi32(Q6_DOT(c0, 0), Q6_DOT(c1, 1)),
                                           _mm256_hadd_epi32(Q6_DOT(c2, 2), Q6_DOT(c3, 3)));
#undef Q6_DOT
                    }
                }
            for (int i = 0; i < m; i++) {
                _mm256_storeu_si256((__m256i *)(S + (size_t)i * istride + 8 * sb), quads(b[i][0][0], b[i][0][1]));
                _mm256_storeu_si256((__m256i *)(S + (size_t)i * istride + half + 8 * sb),
                                    quads(b[i][1][0], b[i][1][1]));
            }
            continue;
        }
        for (int i = 0; i < m; i++) {
            __m256i v[2][8];
            const int8_t *x = xs + ((size_t)i * nb + 8 * sb) * 64;
#pragma GCC unroll 2
            for (int hh = 0; hh < 2; hh++)     /* elements 128 hh..128 hh + 127: blocks 4 hh..4 hh + 3 */
#pragma GCC unroll 2
                for (int e = 0; e < 2; e++) { /* each block's elements 16 e..16 e + 15 */
                    const uint8_t *ql = q->ql + 64 * hh + 16 * e;
                    __m256i L0 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)ql));
                    __m256i L1 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(ql + 32)));
                    __m256i H = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(q->qh + 32 * hh + 16 * e)));
                    __m256i c[4] = {
                        _mm256_or_si256(_mm256_and_si256(L0, m15), _mm256_and_si256(_mm256_slli_epi16(H, 4), m30)),
                        _mm256_or_si256(_mm256_and_si256(L1, m15), _mm256_and_si256(_mm256_slli_epi16(H, 2), m30)),
                        _mm256_or_si256(_mm256_srli_epi16(L0, 4), _mm256_and_si256(H, m30)),
                        _mm256_or_si256(_mm256_srli_epi16(L1, 4), _mm256_and_si256(_mm256_srli_epi16(H, 2), m30))};
#pragma GCC unroll 4
                    for (int t = 0; t < 4; t++)
                        v[e][4 * hh + t] = _mm256_madd_epi16(
                            c[t], _mm256_loadu_si256((const __m256i *)(x + (size_t)(4 * hh + t) * 64 + 32 * e)));
                }
            _mm256_storeu_si256((__m256i *)(S + (size_t)i * istride + 8 * sb), reduce8(v[0]));
            _mm256_storeu_si256((__m256i *)(S + (size_t)i * istride + half + 8 * sb), reduce8(v[1]));
        }
    }
}

/* rows_out for Q4_K: a and c of sub-block j as unpack_row's (d sc[j] and
 * -(dmin mn[j])), from the 8 rows' scale dwords, as gather_scales forms them. */
static inline __attribute__((always_inline)) void q4_k_scales(const int32_t *SC, int nbp, int h, int sb,
                                                              __m256 a[8], __m256 c[8])
{
    __m256i V[4];
    rows_dword4(SC, (size_t)nbp, h, (size_t)4 * sb, V);
    const __m256i m6 = _mm256_set1_epi32(0x3f3f3f3f), m4 = _mm256_set1_epi32(0x0f0f0f0f),
                  top = _mm256_set1_epi32(0x30303030);
    __m256 d = half_lanes(V[0], false), dmin = half_lanes(V[0], true);
    /* bytes j of: scales 0..3, mins 0..3, scales 4..7, mins 4..7 */
    __m256i sc_lo = _mm256_and_si256(V[1], m6), mn_lo = _mm256_and_si256(V[2], m6);
    __m256i sc_hi = _mm256_or_si256(_mm256_and_si256(V[3], m4), _mm256_and_si256(_mm256_srli_epi32(V[1], 2), top));
    __m256i mn_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(V[3], 4), m4),
                                    _mm256_and_si256(_mm256_srli_epi32(V[2], 2), top));
    for (int j = 0; j < 8; j++) {
        a[j] = _mm256_mul_ps(d, byte_lanes(j < 4 ? sc_lo : sc_hi, j & 3));
        c[j] = negate(_mm256_mul_ps(dmin, byte_lanes(j < 4 ? mn_lo : mn_hi, j & 3)));
    }
}

/* rows_out for the K formats (Q4_K, Q6_K), as rows_out's. */
static inline __attribute__((always_inline)) void rows_out_k(colo_dtype t, int nb, int nbp, const int32_t *S,
                                                             const int32_t *SC, const colo_q8_xblk *xp, int m,
                                                             float out[NARROW_MAX_M][JN])
{
    const bool six = t == COLO_Q6_K;
    const int ss = six ? 2 * nbp : nbp; /* S's stride per weight row */
    __m256 acc[NARROW_MAX_M][2];
    for (int i = 0; i < NARROW_MAX_M; i++)
        acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int sb = 0; sb < nb / 8; sb++) {
        int b0 = 8 * sb;
        for (int h = 0; h < 2; h++) {
            __m256i T[NARROW_MAX_M][2][8];
            for (int i = 0; i < m; i++) {
                rows_block8(S + (size_t)i * JN * ss, ss, h, b0, T[i][0]);
                if (six)
                    rows_block8(S + (size_t)i * JN * ss + nbp, ss, h, b0, T[i][1]);
            }
            __m256 a[16], c[16];
            if (six) {
                __m256i V[4];
                rows_dword4(SC, (size_t)nbp, h, (size_t)5 * sb, V);
                const int32_t *dp = SC + (size_t)8 * h * nbp + 5 * sb + 4;
                __m256 d = half_lanes(_mm256_setr_epi32(dp[0], dp[nbp], dp[2 * nbp], dp[3 * nbp], dp[4 * nbp],
                                                        dp[5 * nbp], dp[6 * nbp], dp[7 * nbp]),
                                      false);
                for (int g = 0; g < 16; g++) { /* byte g % 4 of V[g / 4], sign-extended */
                    __m256i sc = _mm256_srai_epi32(_mm256_slli_epi32(V[g / 4], 24 - 8 * (g % 4)), 24);
                    a[g] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc));
                    c[g] = _mm256_mul_ps(_mm256_set1_ps(-32.0f), a[g]);
                }
            } else {
                q4_k_scales(SC, nbp, h, sb, a, c);
            }
            for (int e = 0; e < 8; e++) {
                int b = b0 + e;
                for (int i = 0; i < m; i++) {
                    const colo_q8_xblk *xb = xp + (size_t)(i / GROUP) * nb + b;
                    int l = i % GROUP;
                    __m256 d = _mm256_set1_ps(xb->d[l]);
                    if (six) {
                        __m256 f0 = _mm256_mul_ps(_mm256_cvtepi32_ps(T[i][0][e]), d);
                        __m256 f1 = _mm256_mul_ps(_mm256_cvtepi32_ps(T[i][1][e]), d);
                        acc[i][h] = _mm256_fmadd_ps(f0, a[2 * e], acc[i][h]);
                        acc[i][h] = _mm256_fmadd_ps(_mm256_set1_ps(xb->s[0][l]), c[2 * e], acc[i][h]);
                        acc[i][h] = _mm256_fmadd_ps(f1, a[2 * e + 1], acc[i][h]);
                        acc[i][h] = _mm256_fmadd_ps(_mm256_set1_ps(xb->s[1][l]), c[2 * e + 1], acc[i][h]);
                    } else {
                        __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(T[i][0][e]), d);
                        acc[i][h] = _mm256_fmadd_ps(f, a[e], acc[i][h]);
                        acc[i][h] = _mm256_fmadd_ps(_mm256_set1_ps(xb->s[2][l]), c[e], acc[i][h]);
                    }
                }
            }
        }
    }
    for (int i = 0; i < m; i++)
        for (int h = 0; h < 2; h++)
            _mm256_storeu_ps(out[i] + 8 * h, acc[i][h]);
}

#define Q8_ROWS_K(T, t, M)                                                                                             \
    static void rows_##T##_##M(const uint8_t *w, size_t row_bytes, int nj, int nb, const colo_q8_xblk *xp,           \
                               const int8_t *xs, int32_t *S, float out[NARROW_MAX_M][JN])                            \
    {                                                                                                                  \
        int nbp = (nb + 7) & ~7, ss = (t) == COLO_Q6_K ? 2 * nbp : nbp;                                                \
        int32_t *SC = S + (size_t)2 * NARROW_MAX_M * JN * nbp;                                                         \
        for (int j = 0; j < JN; j++) {                                                                                 \
            const uint8_t *row = w + (size_t)(j < nj ? j : nj - 1) * row_bytes;                                        \
            if ((t) == COLO_Q6_K)                                                                                      \
                row_sums_q6_k(row, nb, M, xs, S + (size_t)j * ss, (size_t)JN * ss, nbp, SC + (size_t)j * nbp);          \
            else                                                                                                       \
                row_sums_q4_k(row, nb, M, xs, S + (size_t)j * ss, JN * nbp, SC + (size_t)j * nbp);                     \
        }                                                                                                              \
        rows_out_k((t), nb, nbp, S, SC, xp, M, out);                                                                   \
    }
Q8_ROWS_K(Q4_K, COLO_Q4_K, 1)
Q8_ROWS_K(Q4_K, COLO_Q4_K, 2)
Q8_ROWS_K(Q4_K, COLO_Q4_K, 3)
Q8_ROWS_K(Q4_K, COLO_Q4_K, 4)
Q8_ROWS_K(Q6_K, COLO_Q6_K, 1)
Q8_ROWS_K(Q6_K, COLO_Q6_K, 2)
Q8_ROWS_K(Q6_K, COLO_Q6_K, 3)
Q8_ROWS_K(Q6_K, COLO_Q6_K, 4)

/* One instance per format and row count of x, so that nothing spills. */
#define Q8_ROWS(T, M)                                                                                                  \
    static void rows_##T##_##M(const uint8_t *w, size_t row_bytes, int nj, int nb, const colo_q8_xblk *xp,           \
                               const int8_t *xs, int32_t *S, float out[NARROW_MAX_M][JN])                            \
    {                                                                                                                  \
        int nbp = (nb + 7) & ~7;                                                                                       \
        int32_t *DM = S + (size_t)NARROW_MAX_M * JN * nbp;                                                             \
        for (int j = 0; j < JN; j++)                                                                                   \
            row_sums(COLO_##T, w + (size_t)(j < nj ? j : nj - 1) * row_bytes, nb, M, xs, S + (size_t)j * nbp,          \
                     JN * nbp, DM + (size_t)j * nbp);                                                                  \
        rows_out(COLO_##T, nb, nbp, S, DM, xp, M, out);                                                                \
    }
#define Q8_ROWS_M(T) Q8_ROWS(T, 1) Q8_ROWS(T, 2) Q8_ROWS(T, 3) Q8_ROWS(T, 4)
Q8_ROWS_M(Q4_0)
Q8_ROWS_M(Q4_1)
Q8_ROWS_M(Q5_0)
Q8_ROWS_M(Q5_1)
Q8_ROWS_M(Q8_0)

static void narrow_rows(colo_dtype t, const uint8_t *w, size_t row_bytes, int nj, int nb, const colo_q8_xblk *xp,
                        int m, const void *xs, void *sums, float out[NARROW_MAX_M][JN])
{
    typedef void (*rows_fn)(const uint8_t *, size_t, int, int, const colo_q8_xblk *, const int8_t *, int32_t *,
                            float[NARROW_MAX_M][JN]);
#define Q8_ROWS_ROW(T) {rows_##T##_1, rows_##T##_2, rows_##T##_3, rows_##T##_4}
    static const rows_fn fns[7][NARROW_MAX_M] = {Q8_ROWS_ROW(Q4_0), Q8_ROWS_ROW(Q4_1), Q8_ROWS_ROW(Q5_0),
                                                 Q8_ROWS_ROW(Q5_1), Q8_ROWS_ROW(Q8_0), Q8_ROWS_ROW(Q4_K),
                                                 Q8_ROWS_ROW(Q6_K)};
#undef Q8_ROWS_ROW
    int f = t == COLO_Q4_0 ? 0 : t == COLO_Q4_1 ? 1 : t == COLO_Q5_0 ? 2 : t == COLO_Q5_1 ? 3 : t == COLO_Q8_0 ? 4
          : t == COLO_Q4_K ? 5 : 6;
    fns[f][m - 1](w, row_bytes, nj, nb, xp, xs, sums, out);
}

/* What narrow() and narrow_rows() need of x besides xp (m rows), in xs. */
static void prepare_narrow(colo_dtype t, const colo_q8_xblk *xp, int m, int nb, void *xs)
{
    if (narrow_reads_rows(t))
        rows_x(t, xp, m, nb, xs);
}
#endif

bool Q8_FN(colo_cpu_gemm_q8_in_place)(colo_dtype t)
{
#if defined(Q8_AVX2)
    return narrow_reads_rows(t);
#else
    (void)t;
    return false;
#endif
}
