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
