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
                /* one chain a digit: the block's 256 P(q) + P(r) in two adds less than four chains */
                __m512i w0 = bcast4(w);
                __m512i p0 = _mm512_dpbusd_epi32(z, w0, X[0]), p2 = _mm512_dpbusd_epi32(z, w0, R[0]);
                for (int t = 1; t < 8; t++) {
                    w0 = bcast4(w + 4 * t);
                    p0 = _mm512_dpbusd_epi32(p0, w0, X[t]);
                    p2 = _mm512_dpbusd_epi32(p2, w0, R[t]);
                }
                __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(p0, 8), p2)), d);
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

/* W[t] lane j = dword t of z's row j, where z[j] holds rows j and j + 8 (32
 * codes each): an 8x8 dword transpose in each 256-bit half, then the
 * halves' 128-bit quarters interleaved. */
static inline __attribute__((always_inline)) void transpose16_regs(const __m512i z[8], __m512i W[8])
{
    __m512i t[8], s[8];
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

/* W[t] lane j = dword t (codes 4t..4t+3) of row j of the 16 rows at u
 * (k bytes apart). */
static inline __attribute__((always_inline)) void transpose16(const uint8_t *u, int k, __m512i W[8])
{
    __m512i z[8];
    for (int j = 0; j < 8; j++)
        z[j] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(u + (size_t)j * k))),
                                  _mm256_loadu_si256((const __m256i *)(u + (size_t)(j + 8) * k)), 1);
    transpose16_regs(z, W);
}

/* transpose16's W for block b of the 16 weight rows at row[j], read in
 * place: the codes unpack_row would write, without writing them. Q8_0's 32
 * bytes (plus 128) go through transpose16_regs; Q4_0's and Q4_1's 16 bytes
 * of nibbles hold dwords 0..3 (low nibbles) and 4..7 (high) of a row, and
 * four rows' go in one register, rows g, g + 4, g + 8, g + 12 of L[g] in its
 * quarters, so that a 4x4 dword transpose in each quarter leaves row j in
 * lane j. */
static inline __attribute__((always_inline)) void codes_in_place(colo_dtype t, const uint8_t *const row[JN], int b,
                                                                 __m512i W[8])
{
    if (t == COLO_Q8_0) {
        size_t o = (size_t)b * sizeof(colo_blk_q8_0) + offsetof(colo_blk_q8_0, qs);
        __m512i z[8];
        for (int j = 0; j < 8; j++) {
            __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(row[j] + o))),
                                           _mm256_loadu_si256((const __m256i *)(row[j + 8] + o)), 1);
            z[j] = _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
        }
        transpose16_regs(z, W);
        return;
    }
    size_t o = t == COLO_Q4_0 ? (size_t)b * sizeof(colo_blk_q4_0) + offsetof(colo_blk_q4_0, qs)
                              : (size_t)b * sizeof(colo_blk_q4_1) + offsetof(colo_blk_q4_1, qs);
    const __m512i m15 = _mm512_set1_epi8(15);
    __m512i lo[4], hi[4];
    for (int g = 0; g < 4; g++) {
        __m512i L = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(row[g] + o)));
        L = _mm512_inserti32x4(L, _mm_loadu_si128((const __m128i *)(row[g + 4] + o)), 1);
        L = _mm512_inserti32x4(L, _mm_loadu_si128((const __m128i *)(row[g + 8] + o)), 2);
        L = _mm512_inserti32x4(L, _mm_loadu_si128((const __m128i *)(row[g + 12] + o)), 3);
        lo[g] = _mm512_and_si512(L, m15);
        hi[g] = _mm512_and_si512(_mm512_srli_epi16(L, 4), m15);
    }
    for (int h = 0; h < 2; h++) {
        const __m512i *v = h ? hi : lo;
        __m512i t0 = _mm512_unpacklo_epi32(v[0], v[1]), t1 = _mm512_unpackhi_epi32(v[0], v[1]);
        __m512i t2 = _mm512_unpacklo_epi32(v[2], v[3]), t3 = _mm512_unpackhi_epi32(v[2], v[3]);
        W[4 * h] = _mm512_unpacklo_epi64(t0, t2);
        W[4 * h + 1] = _mm512_unpackhi_epi64(t0, t2);
        W[4 * h + 2] = _mm512_unpacklo_epi64(t1, t3);
        W[4 * h + 3] = _mm512_unpackhi_epi64(t1, t3);
    }
}

/* The narrow kernels' prefetch of the next tile (pf_bytes at pf) a share
 * per block, so that its loads overlap the products (all at once, they
 * filled the line buffers and stalled the products behind them): block b
 * of nb's share. */
static inline void prefetch_share(const char *pf, size_t pf_bytes, int nb, int b)
{
    size_t step = (pf_bytes / (size_t)nb + 63) & ~(size_t)63;
    for (size_t o = (size_t)b * step; o < (size_t)(b + 1) * step && o < pf_bytes; o += 64)
        prefetch_line(pf + o);
}

/* acc[i] += the block b of weight rows (codes W, from transpose16; scales
 * a[h] and c[h] of its scale block h, lane j for row j) . x row i, for i <
 * m (in the groups at xp). */
static inline __attribute__((always_inline)) void narrow_products(const __m512i W[8], const colo_q8_xblk *xp,
                                                                  int nb, int b, int m, const __m512 a[2],
                                                                  const __m512 c[2], int nh,
                                                                  __m512 acc[NARROW_MAX_M])
{
    const __m512i z = _mm512_setzero_si512();
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
            acc[i] = _mm512_fmadd_ps(f, a[0], acc[i]);
            acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(xb->s[2][l]), c[0], acc[i]);
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
            acc[i] = _mm512_fmadd_ps(f0, a[0], acc[i]);
            acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(xb->s[0][l]), c[0], acc[i]);
            acc[i] = _mm512_fmadd_ps(f1, a[1], acc[i]);
            acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(xb->s[1][l]), c[1], acc[i]);
        }
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
    __m512 acc[NARROW_MAX_M] = {0};
    for (int b = 0; b < nb; b++) {
        __m512i W[8];
        prefetch_share(pf, pf_bytes, nb, b);
        transpose16(u + 32 * b, k, W);
        const float *ab = at + (size_t)nh * b * JN, *cb = ct + (size_t)nh * b * JN;
        const __m512 a[2] = {_mm512_loadu_ps(ab), nh == 2 ? _mm512_loadu_ps(ab + JN) : _mm512_setzero_ps()};
        const __m512 c[2] = {_mm512_loadu_ps(cb), nh == 2 ? _mm512_loadu_ps(cb + JN) : _mm512_setzero_ps()};
        narrow_products(W, xp, nb, b, m, a, c, nh, acc);
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

/* (16-bit codes and x's pairs: the AVX2 version's) */
static void widen(colo_dtype t, const uint8_t *u, int k, uint16_t *u16)
{
    (void)t, (void)u, (void)k, (void)u16;
}

static void wide(colo_dtype t, int nb, int k, int ns, const colo_q8_xblk *xg, int rows, const uint8_t *u,
                 const uint16_t *u16, const float *a, const float *c, float out[JT][GROUP])
{
    (void)u16, (void)rows; /* (all 16 rows of x are one register) */
    (halves(t) == 1 ? kernel32 : kernel16)(nb, k, ns, xg, u, a, c, out);
}

static void prepare_narrow(colo_dtype t, const colo_q8_xblk *xp, int m, int nb, void *xs)
{
    (void)t, (void)xp, (void)m, (void)nb, (void)xs;
}

static void narrow(colo_dtype t, int nb, int k, const colo_q8_xblk *xp, int m, const void *xs, const uint8_t *u,
                   const float *at, const float *ct, float out[NARROW_MAX_M][JN], const char *pf, size_t pf_bytes)
{
    (void)xs;
    (halves(t) == 1 ? narrow_1 : narrow_2)(nb, k, xp, m, u, at, ct, out, pf, pf_bytes);
}

/* Q4_0, Q4_1 and Q8_0: the narrow kernel reads their codes in place
 * (codes_in_place); the others go through unpack_row. */
static bool narrow_reads_rows(colo_dtype t)
{
    return t == COLO_Q4_0 || t == COLO_Q4_1 || t == COLO_Q8_0;
}

static inline __m512 half_lanes(__m512i v, bool hi);

/* Lane j: row j's offset, row_bytes apart (rows from nj on repeat the last). */
static inline __m512i row_offsets(size_t row_bytes, int nj)
{
    int32_t ix[JN];
    for (int j = 0; j < JN; j++)
        ix[j] = (j < nj ? j : nj - 1) * (int32_t)row_bytes;
    return _mm512_loadu_si512(ix);
}

/* The bytes of a block of 32 of type t (Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0). */
static inline size_t block32_bytes(colo_dtype t)
{
    return t == COLO_Q4_0 ? sizeof(colo_blk_q4_0) : t == COLO_Q4_1 ? sizeof(colo_blk_q4_1)
         : t == COLO_Q5_0 ? sizeof(colo_blk_q5_0) : t == COLO_Q5_1 ? sizeof(colo_blk_q5_1)
                          : sizeof(colo_blk_q8_0);
}

/* Lane j of *a and *c: the scales unpack_row gives the block of 32 at blk +
 * lane j of idx, which begins with d (and for Q4_1 and Q5_1 the offset m). */
static inline __attribute__((always_inline)) void scales32(colo_dtype t, __m512i idx, const uint8_t *blk,
                                                           __m512 *a, __m512 *c)
{
    __m512i v = _mm512_i32gather_epi32(idx, blk, 1);
    __m512 d = half_lanes(v, false);
    *a = d;
    *c = t == COLO_Q4_1 || t == COLO_Q5_1
             ? half_lanes(v, true)
             : _mm512_mul_ps(_mm512_set1_ps(t == COLO_Q4_0 ? -8.0f : t == COLO_Q5_0 ? -16.0f : -128.0f), d);
}

/* The bytes of blocks of 32 (of bb bytes) that kernel_rows prefetches
 * ahead of the one it multiplies, in each of the tile's rows. */
#define ROWS_LEAD_BYTES 240

/* kernel_rows' prefetch at block b of nb for Q4_0 and Q4_1: block b +
 * lead of each of the JN rows at w (row_bytes apart), or past the tile's
 * end the next tile's block b + lead - nb, every step-th block (step * bb
 * <= 64, so that each line of each row is asked for). That is the order the
 * blocks are multiplied in, across the 16 rows at once, where
 * prefetch_share asks for the next tile row after row, each row's first
 * lines just before they are needed: SmolLM2 (Q4_1) took 4.29 ms against
 * 4.86 for a step of 3 sequences, 5.58 against 5.89 for 5 (medians of 8,
 * in turn). A prefetch past the weights' end does not fault. */
static inline void prefetch_ahead(const uint8_t *w, size_t row_bytes, size_t bb, int nb, int b, int lead, int step)
{
    int bp = b + lead;
    int bq = bp < nb ? bp : bp - nb;
    if (bq % step != 0 || bq >= nb)
        return;
    const uint8_t *p = (bp < nb ? w : w + JN * row_bytes) + (size_t)bq * bb;
    for (int j = 0; j < JN; j++)
        prefetch_line(p + (size_t)j * row_bytes);
}

/* kernel_narrow's out for the JN weight rows at w (row_bytes apart; rows
 * from nj on repeat the last), their codes read in place and each block's
 * scales gathered as it is reached (the values gather_scales gives: a
 * tile's scales gathered first stalled on the tile's every line at once);
 * the rows ahead are prefetched on the way (prefetch_ahead). */
static inline __attribute__((always_inline)) void kernel_rows(colo_dtype t, const uint8_t *w,
                                                              size_t row_bytes, int nj, int nb,
                                                              const colo_q8_xblk *xp, int m,
                                                              float out[NARROW_MAX_M][JN])
{
    const uint8_t *row[JN];
    for (int j = 0; j < JN; j++)
        row[j] = w + (size_t)(j < nj ? j : nj - 1) * row_bytes;
    const __m512i idx = row_offsets(row_bytes, nj);
    size_t bb = block32_bytes(t);
    int lead = (int)((ROWS_LEAD_BYTES + bb - 1) / bb), step = (int)(64 / bb);
    __m512 acc[NARROW_MAX_M] = {0};
    for (int b = 0; b < nb; b++) {
        __m512i W[8];
        if (t == COLO_Q8_0) /* (prefetch_ahead's every block, 16 a block: slower) */
            prefetch_share((const char *)w + JN * row_bytes, JN * row_bytes, nb, b);
        else
            prefetch_ahead(w, row_bytes, bb, nb, b, lead, step);
        __m512 a[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()}, c[2] = {a[0], a[1]};
        scales32(t, idx, w + (size_t)b * bb, &a[0], &c[0]);
        codes_in_place(t, row, b, W);
        narrow_products(W, xp, nb, b, m, a, c, 1, acc);
    }
    for (int i = 0; i < m; i++)
        _mm512_storeu_ps(out[i], acc[i]);
}

#define Q8_ROWS(T)                                                                                                     \
    static void rows_##T(const uint8_t *w, size_t row_bytes, int nj, int nb, const colo_q8_xblk *xp, int m,        \
                         float out[NARROW_MAX_M][JN])                                                                \
    {                                                                                                                  \
        kernel_rows(COLO_##T, w, row_bytes, nj, nb, xp, m, out);                                                      \
    }
Q8_ROWS(Q4_0)
Q8_ROWS(Q4_1)
Q8_ROWS(Q8_0)
#undef Q8_ROWS

static void narrow_rows(colo_dtype t, const uint8_t *w, size_t row_bytes, int nj, int nb, const colo_q8_xblk *xp,
                        int m, const void *xs, void *sums, float out[NARROW_MAX_M][JN])
{
    (void)xs, (void)sums;
    (t == COLO_Q4_0 ? rows_Q4_0 : t == COLO_Q4_1 ? rows_Q4_1 : rows_Q8_0)(w, row_bytes, nj, nb, xp, m, out);
}

/* Every format but Q2_K and Q3_K (whose scales unpack_row still writes). */
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

/* Lanes are rows; the same conversions and products as unpack_row's, so the
 * same values. Each gather reads a dword inside its block. */
static void gather_scales(colo_dtype t, const uint8_t *w, size_t row_bytes, int nj, int k, float *at, float *ct)
{
    const __m512i idx = row_offsets(row_bytes, nj);
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
        size_t bb = block32_bytes(t);
        for (int b = 0; b < k / 32; b++) {
            __m512 a, c;
            scales32(t, idx, w + (size_t)b * bb, &a, &c);
            _mm512_storeu_ps(at + (size_t)b * JN, a);
            _mm512_storeu_ps(ct + (size_t)b * JN, c);
        }
    }
#undef GATHER
}
#endif

bool colo_cpu_gemm_q8_in_place_vnni(colo_dtype t)
{
#if defined(Q8_VNNI)
    return narrow_reads_rows(t);
#else
    (void)t;
    return false;
#endif
}
