/* gemm_q8 with AVX2, FMA and F16C: the kernels (gemm_q8_impl.h has the
 * rest, shared with gemm_q8_vnni.c; gemm_q8.c the arithmetic). vpmaddubsw
 * and vpmaddwd in place of vpdpbusd, 8 lanes a register (half a group of x,
 * or 8 weight rows), the same integer sums and the same float operations in
 * the same order as the AVX512-VNNI version: the same bits. */
#define Q8_WANT_AVX2 1
#define Q8_FN(name) name##_avx2
#include "kernels/cpu/gemm_q8_impl.h"

#if defined(Q8_AVX2)
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
        _mm_prefetch(pf + o, _MM_HINT_T0);
    int run = run_of(t);
    if (t == COLO_Q8_0)
        narrow_q8_0(nb, k, xp, m, u, at, ct, xs, out);
    else if (halves(t) == 2)
        (run == 4 ? narrow_2_4 : narrow_2_2)(nb, k, xp, m, u, at, ct, out);
    else
        (run == 8 ? narrow_1_8 : narrow_1_4)(nb, k, xp, m, u, at, ct, out);
}
#endif
