/* Strided batched gemm on the CPU: OpenBLAS sgemm per batch entry (or per
 * chunk of C rows when there is one entry); F16 inputs are expanded to F32
 * per-thread scratch first. */
#include "kernels/cpu/cpu_kernels.h"

#include <cblas.h>

typedef struct {
    bool ta, tb;
    int m, n, k, lda, ldb, ldc, batch;
    float alpha, beta;
    const void *a, *b;
    int64_t sa, sb, sc;
    colo_dtype type;
    float *c;
} gemm_args;

/* Expands an F16 matrix (rows x cols, leading dimension ld) to F32. */
static void f16_to_f32_matrix(const uint16_t *src, int rows, int cols, int ld, float *dst)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            dst[(size_t)r * ld + c] = colo_fp16_to_f32(src[(size_t)r * ld + c]);
}

static void gemm_task(const void *p, int chunk, int n_chunks)
{
    const gemm_args *g = p;
    /* Chunks split the batch, or the rows of C when there is one entry. */
    int64_t b0 = 0, b1 = g->batch, m0 = 0, m1 = g->m;
    if (g->batch > 1)
        colo_chunk_range(g->batch, chunk, n_chunks, &b0, &b1);
    else
        colo_chunk_range(g->m, chunk, n_chunks, &m0, &m1);
    if (m1 <= m0)
        return;
    int a_rows = g->ta ? g->k : g->m, b_rows = g->tb ? g->n : g->k;
    for (int64_t bi = b0; bi < b1; bi++) {
        const float *A, *B;
        if (g->type == COLO_F16) {
            float *fa = colo_cpu_scratch(2, (size_t)a_rows * g->lda * sizeof(float));
            float *fb = colo_cpu_scratch(3, (size_t)b_rows * g->ldb * sizeof(float));
            if (!fa || !fb) {
                colo_cpu_task_fail(COLO_ENOMEM);
                return;
            }
            f16_to_f32_matrix((const uint16_t *)g->a + bi * g->sa, a_rows, g->ta ? g->m : g->k, g->lda, fa);
            f16_to_f32_matrix((const uint16_t *)g->b + bi * g->sb, b_rows, g->tb ? g->k : g->n, g->ldb, fb);
            A = fa;
            B = fb;
        } else {
            A = (const float *)g->a + bi * g->sa;
            B = (const float *)g->b + bi * g->sb;
        }
        /* Rows [m0, m1) of C: offset A by rows (no transpose) or columns (transpose). */
        const float *Am = g->ta ? A + m0 : A + (size_t)m0 * g->lda;
        cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans,
                    (int)(m1 - m0), g->n, g->k, g->alpha, Am, g->lda, B, g->ldb, g->beta,
                    g->c + bi * g->sc + (size_t)m0 * g->ldc, g->ldc);
    }
}

colo_status colo_cpu_gemm(colo_stream *s, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const void *a, int lda, int64_t stride_a, const void *b, int ldb, int64_t stride_b,
                          colo_dtype ab_type, float beta, float *c, int ldc, int64_t stride_c, int batch)
{
    gemm_args g = {trans_a, trans_b, m, n, k, lda, ldb, ldc, batch, alpha, beta, a, b,
                   stride_a, stride_b, stride_c, ab_type, c};
    int nc = batch > 1 ? colo_cpu_chunks(s, batch, 2.0 * m * n * k) : colo_cpu_chunks(s, m, 2.0 * n * k);
    return colo_cpu_launch(s, gemm_task, &g, sizeof g, nc);
}
