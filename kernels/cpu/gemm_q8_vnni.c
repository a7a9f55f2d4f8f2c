/* gemm_q8 with AVX512-VNNI: the kernels (gemm_q8_impl.h has the rest,
 * shared with gemm_q8_avx2.c; gemm_q8.c the arithmetic). 16 rows of x a
 * register in the wide kernel, 16 weight rows a register in the narrow one;
 * vpdpbusd forms the integer sums. Compiled with AVX512F, BW, VL and VNNI:
 * gemm_q8.c calls it only on CPUs that have them. */
#define Q8_WANT_VNNI 1
#define Q8_FN(name) name##_vnni
#include "kernels/cpu/gemm_q8_impl.h"

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
#endif
