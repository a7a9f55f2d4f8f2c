/* kernels/cpu/cpu_kernels.h: shared by the CPU kernels only. */
#ifndef COLO_KERNELS_CPU_KERNELS_H
#define COLO_KERNELS_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/ops.h"
#include "kernels/quant.h"
#include "runtime/backend_impl.h"

/* An activation block quantized to 8 bits: x = q * d; s = d * sum(q). */
typedef struct {
    float d;
    float s;
    int8_t qs[32];
} colo_blk_q8x;

/* x (k floats, k % 32 == 0) -> k / 32 blocks. */
void colo_cpu_quantize_q8x(const float *x, colo_blk_q8x *out, int k);
/* Dot products of nb blocks of a weight row with quantized activations. */
float colo_cpu_dot_q4_0(const colo_blk_q4_0 *w, const colo_blk_q8x *x, int nb);
float colo_cpu_dot_q4_1(const colo_blk_q4_1 *w, const colo_blk_q8x *x, int nb);
float colo_cpu_dot_q8_0(const colo_blk_q8_0 *w, const colo_blk_q8x *x, int nb);
float colo_cpu_dot_f32(const float *a, const float *b, int n);

/* Per-thread scratch memory, slot in [0, 4): at least bytes, 64-byte
 * aligned, kept and reused by the thread (freed at thread exit). NULL when
 * out of memory. Contents are not preserved across calls that grow it. */
void *colo_cpu_scratch(int slot, size_t bytes);

/* [lo, hi) of n items for chunk c of nc. */
static inline void colo_chunk_range(int64_t n, int c, int nc, int64_t *lo, int64_t *hi)
{
    *lo = n * c / nc;
    *hi = n * (c + 1) / nc;
}

/* A sensible number of chunks for n items of roughly cost each (in flops). */
int colo_cpu_chunks(colo_stream *s, int64_t n, double cost_per_item);

colo_status colo_cpu_linear(colo_stream *s, const void *w, colo_dtype w_type, const float *bias, const float *x,
                            int x_stride, float *y, int y_stride, int m, int n, int k);
colo_status colo_cpu_gemm(colo_stream *s, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const void *a, int lda, int64_t stride_a, const void *b, int ldb, int64_t stride_b,
                          colo_dtype ab_type, float beta, float *c, int ldc, int64_t stride_c, int batch);
colo_status colo_cpu_attention(colo_stream *s, const colo_attn_desc *d, const float *q, const void *k_cache,
                               const void *v_cache, float *out);
colo_status colo_cpu_attention_bidir(colo_stream *s, const float *q, int q_stride, const float *k, int k_stride,
                                     const float *v, int v_stride, float *out, const int32_t *len, int batch,
                                     int seq, int n_head, int head_dim, float scale);

#endif
