/* Row-invariant F32 products y = x W^T for linear's tile path (prefill).
 *
 * Every output y[i][j] is one FMA chain over k in order, starting from 0:
 * acc = fma(x[i][kk], w[j][kk], acc), kk = 0, 1, ..., k - 1. The AVX2 kernel
 * runs 8 outputs per lane vector (one weight column each), and blocks of
 * up to GEMM_ROWS rows of x meet each panel of COLO_CPU_GEMM_PANEL weight
 * rows; edges (fewer rows, fewer columns: the panel is zero-padded) run the
 * same chain per output. So one row's result depends only on that row of x
 * and on W, never on which rows come with it or how many, and the scalar
 * fallback (fmaf, one rounding per step as the FMA instruction) gives the
 * same bits. OpenBLAS's sgemm did not: its result for a row changed with
 * the row count and the row's position, so a prompt computed in two steps
 * (a prefix-cache hit) differed in the last bits from the same prompt in
 * one step. */
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/quant.h"

#include <math.h>
#include <string.h>

#if defined(__AVX2__) && defined(__FMA__)
#define GEMM_AVX2 1
#include <immintrin.h>
#endif

/* Rows of x per register block: 6 x 2 accumulators, two weight vectors and
 * one broadcast fill 15 of the 16 ymm registers. */
#define GEMM_ROWS 6

size_t colo_cpu_gemm_packed_floats(int n, int k)
{
    return (size_t)((n + COLO_CPU_GEMM_PANEL - 1) / COLO_CPU_GEMM_PANEL) * COLO_CPU_GEMM_PANEL * (size_t)k;
}

void colo_cpu_gemm_pack(const float *w, int w_stride, int n, int k, float *packed)
{
    for (int p = 0; p < n; p += COLO_CPU_GEMM_PANEL) {
        float *dst = packed + (size_t)p * k;
        int cols = n - p < COLO_CPU_GEMM_PANEL ? n - p : COLO_CPU_GEMM_PANEL;
        const float *src = w + (size_t)p * w_stride;
        /* Writes in order, reads from 16 rows at once (each cache line of a
         * row serves 16 steps): strided writes across the whole panel cost
         * more than the products at few rows of x. */
        for (int kk = 0; kk < k; kk++, dst += COLO_CPU_GEMM_PANEL) {
            int c = 0;
            for (; c < cols; c++)
                dst[c] = src[(size_t)c * w_stride + kk];
            for (; c < COLO_CPU_GEMM_PANEL; c++)
                dst[c] = 0.0f;
        }
    }
}

void colo_cpu_gemm_f32_scalar(int m, int n, int k, const float *x, int x_stride, const float *packed, float *y,
                              int y_stride)
{
    for (int i = 0; i < m; i++) {
        const float *xr = x + (size_t)i * x_stride;
        for (int j = 0; j < n; j++) {
            const float *pw = packed + (size_t)(j / COLO_CPU_GEMM_PANEL) * COLO_CPU_GEMM_PANEL * k +
                              j % COLO_CPU_GEMM_PANEL;
            float acc = 0.0f;
            for (int kk = 0; kk < k; kk++)
                acc = fmaf(xr[kk], pw[(size_t)kk * COLO_CPU_GEMM_PANEL], acc);
            y[(size_t)i * y_stride + j] = acc;
        }
    }
}

#ifdef GEMM_AVX2
/* R rows of x against one panel: out (R, 16). R is a constant at each call
 * site, so the row loops unroll. */
static inline __attribute__((always_inline)) void panel_rows(int R, int k, const float *x, int x_stride,
                                                             const float *pw, float out[][COLO_CPU_GEMM_PANEL])
{
    __m256 acc[GEMM_ROWS][2];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int kk = 0; kk < k; kk++) {
        __m256 w0 = _mm256_load_ps(pw + (size_t)kk * COLO_CPU_GEMM_PANEL);
        __m256 w1 = _mm256_load_ps(pw + (size_t)kk * COLO_CPU_GEMM_PANEL + 8);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m256 b = _mm256_broadcast_ss(x + (size_t)r * x_stride + kk);
            acc[r][0] = _mm256_fmadd_ps(b, w0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(b, w1, acc[r][1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        _mm256_storeu_ps(out[r], acc[r][0]);
        _mm256_storeu_ps(out[r] + 8, acc[r][1]);
    }
}
#endif

void colo_cpu_gemm_f32(int m, int n, int k, const float *x, int x_stride, const float *packed, float *y,
                       int y_stride)
{
#ifdef GEMM_AVX2
    /* packed must be 32-byte aligned (colo_cpu_scratch gives 64). */
    for (int p = 0; p < n; p += COLO_CPU_GEMM_PANEL) {
        const float *pw = packed + (size_t)p * k;
        int cols = n - p < COLO_CPU_GEMM_PANEL ? n - p : COLO_CPU_GEMM_PANEL;
        for (int i = 0; i < m; i += GEMM_ROWS) {
            int R = m - i < GEMM_ROWS ? m - i : GEMM_ROWS;
            float out[GEMM_ROWS][COLO_CPU_GEMM_PANEL];
            const float *xi = x + (size_t)i * x_stride;
            switch (R) {
            case 1: panel_rows(1, k, xi, x_stride, pw, out); break;
            case 2: panel_rows(2, k, xi, x_stride, pw, out); break;
            case 3: panel_rows(3, k, xi, x_stride, pw, out); break;
            case 4: panel_rows(4, k, xi, x_stride, pw, out); break;
            case 5: panel_rows(5, k, xi, x_stride, pw, out); break;
            default: panel_rows(6, k, xi, x_stride, pw, out); break;
            }
            for (int r = 0; r < R; r++)
                memcpy(y + (size_t)(i + r) * y_stride + p, out[r], (size_t)cols * sizeof(float));
        }
    }
#else
    colo_cpu_gemm_f32_scalar(m, n, k, x, x_stride, packed, y, y_stride);
#endif
}

/* ---- the same chains without packing (decode) ---- */

/* Rows of W per chain group (one lane each), and rows of x per pass. */
#define CHAIN_COLS 8
#define CHAIN_ROWS 4
/* One row of x (a decode step of one sequence) runs up to CHAIN_GROUPS
 * groups of CHAIN_COLS outputs at once (CHAIN_GROUPS_F32 for F32 weights,
 * whose rows are twice the bytes: 4 groups, 32 rows streamed at once, read
 * large F32 matrices slower from memory than 2 do); more rows run one
 * group. */
#define CHAIN_GROUPS 4
#define CHAIN_GROUPS_F32 2
/* Elements ahead in each weight row that a pass of one row of x
 * prefetches: its 8 G rows are as many streams, more than the hardware's
 * prefetchers follow, and that pass is bound by memory, not by its
 * arithmetic. */
#define CHAIN_PREFETCH 128

static inline float w_elem(const void *w, size_t w_stride, bool f16, int j, int kk)
{
    const unsigned char *row = (const unsigned char *)w + (size_t)j * w_stride;
    return f16 ? colo_fp16_to_f32(((const uint16_t *)row)[kk]) : ((const float *)row)[kk];
}

/* Outputs [j0, j1) of rows [i0, i1) of x, from element kk0 of k on, each
 * chain continuing from acc[i - i0][j - j0] (one fmaf per step, as the
 * FMA instruction rounds). */
static void chain_scalar(int i0, int i1, int j0, int j1, int kk0, int k, const float *x, int x_stride, const void *w,
                         size_t w_stride, bool f16, float acc[][CHAIN_COLS])
{
    for (int i = i0; i < i1; i++)
        for (int j = j0; j < j1; j++) {
            float a = acc[i - i0][j - j0];
            for (int kk = kk0; kk < k; kk++)
                a = fmaf(x[(size_t)i * x_stride + kk], w_elem(w, w_stride, f16, j, kk), a);
            acc[i - i0][j - j0] = a;
        }
}

#ifdef GEMM_AVX2
/* c[t] lane u = element kk + t of F16 row j0 + u, transposed as 16-bit
 * values and then widened. */
static inline void transpose8_f16(const void *w, size_t w_stride, int j0, int kk, __m256 c[8])
{
    __m128i r[8], a[8], b[8];
    for (int u = 0; u < 8; u++)
        r[u] = _mm_loadu_si128((const __m128i *)((const uint16_t *)((const unsigned char *)w +
                                                                    (size_t)(j0 + u) * w_stride) + kk));
    for (int u = 0; u < 8; u += 2) {
        a[u] = _mm_unpacklo_epi16(r[u], r[u + 1]);
        a[u + 1] = _mm_unpackhi_epi16(r[u], r[u + 1]);
    }
    /* b[0..3]: rows 0-3, elements (0,1), (2,3), (4,5), (6,7); b[4..7]: rows 4-7 */
    for (int h = 0; h < 2; h++) {
        b[4 * h + 0] = _mm_unpacklo_epi32(a[4 * h + 0], a[4 * h + 2]);
        b[4 * h + 1] = _mm_unpackhi_epi32(a[4 * h + 0], a[4 * h + 2]);
        b[4 * h + 2] = _mm_unpacklo_epi32(a[4 * h + 1], a[4 * h + 3]);
        b[4 * h + 3] = _mm_unpackhi_epi32(a[4 * h + 1], a[4 * h + 3]);
    }
    for (int t = 0; t < 4; t++) {
        c[2 * t] = _mm256_cvtph_ps(_mm_unpacklo_epi64(b[t], b[t + 4]));
        c[2 * t + 1] = _mm256_cvtph_ps(_mm_unpackhi_epi64(b[t], b[t + 4]));
    }
}

/* c[t] lane u = r[u] lane t. */
static inline void transpose8(__m256 r[8], __m256 c[8])
{
    __m256 a0 = _mm256_unpacklo_ps(r[0], r[1]), a1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 a2 = _mm256_unpacklo_ps(r[2], r[3]), a3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 a4 = _mm256_unpacklo_ps(r[4], r[5]), a5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 a6 = _mm256_unpacklo_ps(r[6], r[7]), a7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 b0 = _mm256_shuffle_ps(a0, a2, 0x44), b1 = _mm256_shuffle_ps(a0, a2, 0xEE);
    __m256 b2 = _mm256_shuffle_ps(a1, a3, 0x44), b3 = _mm256_shuffle_ps(a1, a3, 0xEE);
    __m256 b4 = _mm256_shuffle_ps(a4, a6, 0x44), b5 = _mm256_shuffle_ps(a4, a6, 0xEE);
    __m256 b6 = _mm256_shuffle_ps(a5, a7, 0x44), b7 = _mm256_shuffle_ps(a5, a7, 0xEE);
    c[0] = _mm256_permute2f128_ps(b0, b4, 0x20), c[4] = _mm256_permute2f128_ps(b0, b4, 0x31);
    c[1] = _mm256_permute2f128_ps(b1, b5, 0x20), c[5] = _mm256_permute2f128_ps(b1, b5, 0x31);
    c[2] = _mm256_permute2f128_ps(b2, b6, 0x20), c[6] = _mm256_permute2f128_ps(b2, b6, 0x31);
    c[3] = _mm256_permute2f128_ps(b3, b7, 0x20), c[7] = _mm256_permute2f128_ps(b3, b7, 0x31);
}

/* CHAIN_COLS rows of W from j0 against R rows of x from i0, over the first
 * k8 (a multiple of 8) elements: lane u of acc[r] is output (i0 + r, j0 + u). */
static inline __attribute__((always_inline)) void chain_cols(int R, int k8, const float *x, int x_stride,
                                                             const void *w, size_t w_stride, bool f16, int j0,
                                                             float out[][CHAIN_COLS])
{
    __m256 acc[CHAIN_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        acc[r] = _mm256_setzero_ps();
    for (int kk = 0; kk < k8; kk += 8) {
        __m256 c[8];
        if (f16) {
            transpose8_f16(w, w_stride, j0, kk, c);
        } else {
            __m256 rows[8];
            for (int u = 0; u < 8; u++)
                rows[u] = _mm256_loadu_ps((const float *)((const unsigned char *)w + (size_t)(j0 + u) * w_stride) + kk);
            transpose8(rows, c);
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const float *xr = x + (size_t)r * x_stride + kk;
#pragma GCC unroll 8
            for (int t = 0; t < 8; t++)
                acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(xr + t), c[t], acc[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        _mm256_storeu_ps(out[r], acc[r]);
}

/* G groups of CHAIN_COLS rows of W from j0 against one row of x, over the
 * first k8 elements: lane u of out[g] is output j0 + CHAIN_COLS g + u. Each
 * output is still one FMA chain in the order of k, but the G chains are
 * independent, so that one's FMA latency hides behind the others' (one
 * group alone waits for each FMA's result before the next), and every row
 * is prefetched. F16 is a constant in each caller, so that each version
 * keeps its registers; its rows are widened, then transposed as F32. */
static inline __attribute__((always_inline)) void chain_groups(bool F16, int G, int k8, const float *x,
                                                               const void *w, size_t w_stride, int j0,
                                                               float out[][CHAIN_COLS])
{
    __m256 acc[CHAIN_GROUPS];
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
        acc[g] = _mm256_setzero_ps();
    const size_t s = w_stride;
    const unsigned char *w0 = (const unsigned char *)w + (size_t)j0 * s;
    /* one prefetch per cache line of each row: F16 rows advance a line
     * every 4 passes of 8 elements, F32 rows every 2 */
    const int per = F16 ? 2 : 4;
    for (int kk = 0; kk < k8; kk += 8) {
        const unsigned char *pk = w0 + (size_t)kk * (F16 ? 2 : 4);
        const int q = (kk / 8) % (8 / per);
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            const unsigned char *pg = pk + (size_t)g * CHAIN_COLS * s;
            for (int u = q * per; u < q * per + per; u++)
                _mm_prefetch((const char *)(pg + u * s) + CHAIN_PREFETCH * (F16 ? 2 : 4), _MM_HINT_T0);
            __m256 rows[8], c[8];
            for (int u = 0; u < 8; u++)
                rows[u] = F16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(pg + u * s)))
                              : _mm256_loadu_ps((const float *)(pg + u * s));
            transpose8(rows, c);
#pragma GCC unroll 8
            for (int t = 0; t < 8; t++)
                acc[g] = _mm256_fmadd_ps(_mm256_broadcast_ss(x + kk + t), c[t], acc[g]);
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
        _mm256_storeu_ps(out[g], acc[g]);
}

/* Outputs [j0, j0 + G CHAIN_COLS) of one row of x over the first k8
 * elements. */
static void chain_one_row(bool f16, int G, int k8, const float *x, const void *w, size_t w_stride, int j0,
                          float out[][CHAIN_COLS])
{
    switch (G * 2 + f16) {
    case 8: chain_groups(false, 4, k8, x, w, w_stride, j0, out); break;
    case 9: chain_groups(true, 4, k8, x, w, w_stride, j0, out); break;
    case 4: chain_groups(false, 2, k8, x, w, w_stride, j0, out); break;
    case 5: chain_groups(true, 2, k8, x, w, w_stride, j0, out); break;
    case 2: chain_groups(false, 1, k8, x, w, w_stride, j0, out); break;
    default: chain_groups(true, 1, k8, x, w, w_stride, j0, out); break;
    }
}
#endif

/* One row of x: passes of CHAIN_GROUPS groups where the columns allow. Not
 * inlined: inlined into colo_cpu_gemv_chain, it changed how the compiler
 * laid out the passes of more rows there (4 rows of F16 measured 15%
 * slower). */
static __attribute__((noinline)) void gemv_one_row(int n, int k, const float *x, const void *w, size_t w_stride,
                                                    bool f16, float *y)
{
    for (int j0 = 0; j0 < n;) {
        int G = f16 ? CHAIN_GROUPS : CHAIN_GROUPS_F32;
        while (G > 1 && G * CHAIN_COLS > n - j0)
            G /= 2;
        int cols = n - j0 < G * CHAIN_COLS ? n - j0 : G * CHAIN_COLS;
        float acc[CHAIN_GROUPS][CHAIN_COLS] = {{0}};
        int done = 0;
#ifdef GEMM_AVX2
        if (cols == G * CHAIN_COLS) {
            done = k & ~7;
            chain_one_row(f16, G, done, x, w, w_stride, j0, acc);
        }
#endif
        /* the elements past done (every one, for a partial group) */
        for (int g = 0; g * CHAIN_COLS < cols; g++) {
            int c0 = j0 + CHAIN_COLS * g, nc = cols - CHAIN_COLS * g < CHAIN_COLS ? cols - CHAIN_COLS * g : CHAIN_COLS;
            chain_scalar(0, 1, c0, c0 + nc, done, k, x, 0, w, w_stride, f16, &acc[g]);
            memcpy(y + c0, acc[g], (size_t)nc * sizeof(float));
        }
        j0 += cols;
    }
}

void colo_cpu_gemv_chain(int m, int n, int k, const float *x, int x_stride, const void *w, size_t w_stride, bool f16,
                         float *y, int y_stride)
{
    if (m == 1) {
        gemv_one_row(n, k, x, w, w_stride, f16, y);
        return;
    }
    for (int j0 = 0; j0 < n; j0 += CHAIN_COLS) {
        int cols = n - j0 < CHAIN_COLS ? n - j0 : CHAIN_COLS;
        for (int i0 = 0; i0 < m; i0 += CHAIN_ROWS) {
            int R = m - i0 < CHAIN_ROWS ? m - i0 : CHAIN_ROWS;
            float acc[CHAIN_ROWS][CHAIN_COLS] = {{0}};
            const float *xi = x + (size_t)i0 * x_stride;
            int done = 0;
#ifdef GEMM_AVX2
            if (cols == CHAIN_COLS) {
                done = k & ~7;
                switch (R) {
                case 1: chain_cols(1, done, xi, x_stride, w, w_stride, f16, j0, acc); break;
                case 2: chain_cols(2, done, xi, x_stride, w, w_stride, f16, j0, acc); break;
                case 3: chain_cols(3, done, xi, x_stride, w, w_stride, f16, j0, acc); break;
                default: chain_cols(4, done, xi, x_stride, w, w_stride, f16, j0, acc); break;
                }
            }
#endif
            chain_scalar(0, R, j0, j0 + cols, done, k, xi, x_stride, w, w_stride, f16, acc);
            for (int r = 0; r < R; r++)
                memcpy(y + (size_t)(i0 + r) * y_stride + j0, acc[r], (size_t)cols * sizeof(float));
        }
    }
}
