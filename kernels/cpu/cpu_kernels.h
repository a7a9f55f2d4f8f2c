/* kernels/cpu/cpu_kernels.h: shared by the CPU kernels (and their tests)
 * only; not part of the ops contract. */
#ifndef COLO_KERNELS_CPU_KERNELS_H
#define COLO_KERNELS_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/ops.h"
#include "kernels/quant.h"
#include "runtime/cpu_task.h"

/* ---- the 5-bit formats and the K-quants (quant_k.c) ------------------------------------- */

/* colo_dequantize_row / colo_quantize_row for Q5_0, Q5_1, Q2_K, Q3_K, Q4_K,
 * Q5_K, Q6_K; the quantizer returns COLO_EUNSUPPORTED
 * for any other type. */
void colo_cpu_dequantize_row_k(colo_dtype t, const void *src, float *dst, int64_t n);
colo_status colo_cpu_quantize_row_k(colo_dtype t, const float *src, void *dst, int64_t n);

/* ---- dot products (dot.c) ------------------------------------------------------ */

/* An activation block quantized to 8 bits: x[j] ~ qs[j] * d; s = d * sum(qs).
 * d and s are adjacent (the kernels load them as one pair). */
typedef struct {
    float d;
    float s;
    int8_t qs[32];
} colo_blk_q8x;

/* x (k floats, k % 32 == 0) -> k / 32 blocks, q = round-to-nearest-even(x / d),
 * d = max|x| / 127 (0 for an all-zero block). */
void colo_cpu_quantize_q8x(const float *x, colo_blk_q8x *out, int k);
void colo_cpu_quantize_q8x_scalar(const float *x, colo_blk_q8x *out, int k);

/* Most activation rows one weight-row pass serves. */
#define COLO_CPU_DOT_ROWS 4

/* out[r] = dot(weight row w of k elements, activation row r), r < nr, for nr
 * in [1, COLO_CPU_DOT_ROWS]; activation row r is x + r * x_stride (blocks of
 * 32; k / 32 of them). Weight rows stay in their block format (k % 32 == 0;
 * the K-quants have their own, below). Each output is computed by the same instruction
 * sequence whatever nr is, so a row's result does not depend on its
 * neighbours. The _scalar versions are the portable fallbacks (the others
 * use AVX2 when compiled with it); both are exported for the tests. */
typedef void (*colo_cpu_vec_dot_fn)(int k, const void *w, const colo_blk_q8x *x, size_t x_stride, int nr,
                                    float *out);
void colo_cpu_vec_dot_q4_0(int k, const void *w, const colo_blk_q8x *x, size_t x_stride, int nr, float *out);
void colo_cpu_vec_dot_q4_1(int k, const void *w, const colo_blk_q8x *x, size_t x_stride, int nr, float *out);
void colo_cpu_vec_dot_q8_0(int k, const void *w, const colo_blk_q8x *x, size_t x_stride, int nr, float *out);
void colo_cpu_vec_dot_q4_0_scalar(int k, const void *w, const colo_blk_q8x *x, size_t x_stride, int nr, float *out);
void colo_cpu_vec_dot_q4_1_scalar(int k, const void *w, const colo_blk_q8x *x, size_t x_stride, int nr, float *out);
void colo_cpu_vec_dot_q8_0_scalar(int k, const void *w, const colo_blk_q8x *x, size_t x_stride, int nr, float *out);
void colo_cpu_vec_dot_q5_0(int k, const void *w, const colo_blk_q8x *x, size_t x_stride, int nr, float *out);
void colo_cpu_vec_dot_q5_0_scalar(int k, const void *w, const colo_blk_q8x *x, size_t x_stride, int nr, float *out);
void colo_cpu_vec_dot_q5_1(int k, const void *w, const colo_blk_q8x *x, size_t x_stride, int nr, float *out);
void colo_cpu_vec_dot_q5_1_scalar(int k, const void *w, const colo_blk_q8x *x, size_t x_stride, int nr, float *out);

/* Activations for the K-quants: one scale per 256 and the sums of each 16
 * quants, as GGML's Q8_K, so that a super-block's products stay in
 * integers: x[j] ~ qs[j] * d, bsums[g] = sum of qs[16 g .. 16 g + 15]. */
typedef struct {
    float d;
    int16_t bsums[16];
    int8_t qs[256];
} colo_blk_q8k;

/* x (k floats, k % 256 == 0) -> k / 256 blocks, q = round-to-nearest-even(x / d),
 * d = max|x| / 127 over the 256. */
void colo_cpu_quantize_q8k(const float *x, colo_blk_q8k *out, int k);
void colo_cpu_quantize_q8k_scalar(const float *x, colo_blk_q8k *out, int k);

/* As colo_cpu_vec_dot_fn, against colo_blk_q8k rows (x_stride in blocks of
 * 256), for the K-quants; the same contract otherwise. */
typedef void (*colo_cpu_vec_dot_k_fn)(int k, const void *w, const colo_blk_q8k *x, size_t x_stride, int nr,
                                      float *out);
void colo_cpu_vec_dot_k_q2_k(int k, const void *w, const colo_blk_q8k *x, size_t x_stride, int nr, float *out);
void colo_cpu_vec_dot_k_q2_k_scalar(int k, const void *w, const colo_blk_q8k *x, size_t x_stride, int nr, float *out);
void colo_cpu_vec_dot_k_q3_k(int k, const void *w, const colo_blk_q8k *x, size_t x_stride, int nr, float *out);
void colo_cpu_vec_dot_k_q3_k_scalar(int k, const void *w, const colo_blk_q8k *x, size_t x_stride, int nr, float *out);
void colo_cpu_vec_dot_k_q4_k(int k, const void *w, const colo_blk_q8k *x, size_t x_stride, int nr, float *out);
void colo_cpu_vec_dot_k_q4_k_scalar(int k, const void *w, const colo_blk_q8k *x, size_t x_stride, int nr, float *out);
void colo_cpu_vec_dot_k_q5_k(int k, const void *w, const colo_blk_q8k *x, size_t x_stride, int nr, float *out);
void colo_cpu_vec_dot_k_q5_k_scalar(int k, const void *w, const colo_blk_q8k *x, size_t x_stride, int nr, float *out);
void colo_cpu_vec_dot_k_q6_k(int k, const void *w, const colo_blk_q8k *x, size_t x_stride, int nr, float *out);
void colo_cpu_vec_dot_k_q6_k_scalar(int k, const void *w, const colo_blk_q8k *x, size_t x_stride, int nr, float *out);
/* The K-quant dot product for weights of type t, or NULL when t is no K-quant. */
colo_cpu_vec_dot_k_fn colo_cpu_vec_dot_k_for(colo_dtype t);

/* The integer dot product for weights of type t against blocks of 32, or
 * NULL when t has none (the K-quants: colo_cpu_vec_dot_k_for). */
colo_cpu_vec_dot_fn colo_cpu_vec_dot_for(colo_dtype t);

/* F32 dot products: a . b, and F16 row w . F32 row x (n any length). */
float colo_cpu_dot_f32(const float *a, const float *b, int n);
float colo_cpu_dot_f16(const uint16_t *w, const float *x, int n);

/* Row-invariant F32 products (gemm_f32.c): y (m, n) = x (m, k) W^T, W
 * packed into panels of COLO_CPU_GEMM_PANEL rows (zero-padded), k-major.
 * Each output is one FMA chain over k in order from 0, so a row's bits
 * depend only on that row of x and on W, whatever the other rows and m;
 * colo_cpu_gemm_f32_scalar gives the same bits. packed: 32-byte aligned,
 * colo_cpu_gemm_packed_floats(n, k) floats. */
#define COLO_CPU_GEMM_PANEL 16
size_t colo_cpu_gemm_packed_floats(int n, int k);
void colo_cpu_gemm_pack(const float *w, int w_stride, int n, int k, float *packed);
void colo_cpu_gemm_f32(int m, int n, int k, const float *x, int x_stride, const float *packed, float *y,
                       int y_stride);
void colo_cpu_gemm_f32_scalar(int m, int n, int k, const float *x, int x_stride, const float *packed, float *y,
                              int y_stride);
/* The same products with W read straight from its rows (F32, or F16 when
 * f16; w_stride bytes apart), no packing: for few rows of x (decode), whose
 * outputs then have the bits colo_cpu_gemm_f32 gives them. Any m and n. */
void colo_cpu_gemv_chain(int m, int n, int k, const float *x, int x_stride, const void *w, size_t w_stride, bool f16,
                         float *y, int y_stride);

/* ---- int8 products on two digits (gemm_q8.c: AVX512-VNNI or AVX2) ------------------- */

/* Weight rows gemm_q8 unpacks at a time (a multiple of them): chunks of a
 * multiple of it waste nothing. */
#define COLO_CPU_GEMM_Q8_ROWS 16
/* Rows of x per group of colo_q8_xblk (a VNNI register's 16 lanes). */
#define COLO_CPU_GEMM_Q8_GROUP 16

/* x rows in groups of COLO_CPU_GEMM_Q8_GROUP, each block of 32 rounded to
 * two 8-bit digits (a 16-bit fixed point with a scale per block; gemm_q8.c)
 * and interleaved 4 elements at a time; one per block of 32 and group. Rows
 * past m are zero. */
typedef struct colo_q8_xblk {
    int8_t q[8][4 * COLO_CPU_GEMM_Q8_GROUP]; /* q[t][4 i + e] = x_i's high digit of element 4 t + e */
    int8_t r[8][4 * COLO_CPU_GEMM_Q8_GROUP]; /* the low digits, laid out alike */
    float d[COLO_CPU_GEMM_Q8_GROUP];         /* x_i's unit: element ~ (256 q + r) d */
    float s[3][COLO_CPU_GEMM_Q8_GROUP];      /* d * sum of x_i's 256 q + r over elements 0..15, 16..31, 0..31 */
} colo_q8_xblk;

/* The versions of gemm_q8, in order: the lower ones run wherever a higher
 * one does. All give the same bits. */
typedef enum {
    COLO_CPU_Q8_OFF,  /* none: linear takes its other paths */
    COLO_CPU_Q8_AVX2, /* AVX2, FMA and F16C (gemm_q8_avx2.c) */
    COLO_CPU_Q8_VNNI, /* AVX512-VNNI, AVX512BW and AVX512VL (gemm_q8_vnni.c) */
} colo_cpu_q8_isa;

/* The version gemm_q8 runs: the highest the CPU has, or a lower one that
 * the environment variable COLO_CPU_GEMM_Q8 (vnni, avx2 or off; read on the
 * first call) names. Thread-safe. */
colo_cpu_q8_isa colo_cpu_gemm_q8_isa(void);
/* Makes gemm_q8 run isa from now on (tests, benchmarks); false, and no
 * change, where the CPU lacks it. Call it only while no op runs. */
bool colo_cpu_gemm_q8_set_isa(colo_cpu_q8_isa isa);
/* Whether gemm_q8 runs at all here: colo_cpu_gemm_q8_isa() != OFF.
 * colo_cpu_gemm_q8_pack_x and colo_cpu_gemm_q8 must not be called otherwise. */
bool colo_cpu_gemm_q8_cpu(void);
/* Whether gemm_q8 takes weights of type t (every block format of 32 and 256). */
bool colo_cpu_gemm_q8_has(colo_dtype t);
/* Bytes of packed x for m rows of k, and of the per-thread scratch a
 * colo_cpu_gemm_q8 call needs. */
size_t colo_cpu_gemm_q8_x_bytes(int m, int k);
size_t colo_cpu_gemm_q8_scratch_bytes(int k);
/* Packs groups [g0, g1) of x (m rows of k floats) into xp. */
void colo_cpu_gemm_q8_pack_x(const float *x, int x_stride, int m, int k, int g0, int g1, colo_q8_xblk *xp);
/* y[i][r] = W row r . x row i (+ bias[r]) for r in [r0, r1), i < m; W (n, k)
 * of type t, x packed by colo_cpu_gemm_q8_pack_x; scratch: 64-byte aligned,
 * colo_cpu_gemm_q8_scratch_bytes(k). A row's result does not depend on the
 * other rows of x, on m or on the version. */
void colo_cpu_gemm_q8(const void *w, colo_dtype t, int64_t r0, int64_t r1, int k, const colo_q8_xblk *xp, int m,
                      const float *bias, float *y, int y_stride, void *scratch);
/* The versions themselves (gemm_q8_vnni.c, gemm_q8_avx2.c), for gemm_q8.c:
 * _built says whether the build has the version's code (false: the others
 * are empty). */
bool colo_cpu_gemm_q8_built_vnni(void);
void colo_cpu_gemm_q8_pack_x_vnni(const float *x, int x_stride, int m, int k, int g0, int g1, colo_q8_xblk *xp);
void colo_cpu_gemm_q8_vnni(const void *w, colo_dtype t, int64_t r0, int64_t r1, int k, const colo_q8_xblk *xp,
                           int m, const float *bias, float *y, int y_stride, void *scratch);
/* Whether the VNNI version's narrow kernel reads weights of type t in place
 * (false where the build lacks it). */
bool colo_cpu_gemm_q8_in_place_vnni(colo_dtype t);
bool colo_cpu_gemm_q8_built_avx2(void);
void colo_cpu_gemm_q8_pack_x_avx2(const float *x, int x_stride, int m, int k, int g0, int g1, colo_q8_xblk *xp);
void colo_cpu_gemm_q8_avx2(const void *w, colo_dtype t, int64_t r0, int64_t r1, int k, const colo_q8_xblk *xp,
                           int m, const float *bias, float *y, int y_stride, void *scratch);
/* Whether the AVX2 version's narrow kernel reads weights of type t in
 * place (false where the build lacks it). */
bool colo_cpu_gemm_q8_in_place_avx2(colo_dtype t);
/* The AVX2 version compiled for AVX512-VNNI CPUs (gemm_q8_avx2_vnni.c). */
bool colo_cpu_gemm_q8_built_avx2vnni(void);
void colo_cpu_gemm_q8_pack_x_avx2vnni(const float *x, int x_stride, int m, int k, int g0, int g1, colo_q8_xblk *xp);
void colo_cpu_gemm_q8_avx2vnni(const void *w, colo_dtype t, int64_t r0, int64_t r1, int k, const colo_q8_xblk *xp,
                               int m, const float *bias, float *y, int y_stride, void *scratch);
bool colo_cpu_gemm_q8_in_place_avx2vnni(colo_dtype t);

/* ---- shared helpers (ops_cpu.c) ---------------------------------------------------- */

/* Per-thread scratch memory, slot in [0, 4): at least bytes, 64-byte
 * aligned, kept and reused by the thread (freed at thread exit). NULL when
 * out of memory. Contents are not preserved across calls that grow it.
 * Slot use: 0 and 1 linear, 2 attention / gemm A, 3 gemm B. */
void *colo_cpu_scratch(int slot, size_t bytes);

/* [lo, hi) of n items for chunk c of nc. */
static inline void colo_chunk_range(int64_t n, int c, int nc, int64_t *lo, int64_t *hi)
{
    *lo = n * c / nc;
    *hi = n * (c + 1) / nc;
}

/* A sensible number of chunks for n items of roughly cost each (in flops). */
int colo_cpu_chunks(colo_stream *s, int64_t n, double cost_per_item);

/* linear.c: rows of x below which linear rounds x to 8 bits for quantized
 * weights gemm_q8 does not serve (int8 dot products); more rows use exact
 * F32 activations and colo_cpu_gemm_f32 on expanded tiles. Default 2
 * (single-row decode only). A tuning knob for benchmarks; set it only while
 * no op runs. */
extern int colo_cpu_int8_max_rows;
/* The same for steps marked decode (colo_stream_set_decode); default 9. */
extern int colo_cpu_int8_max_decode_rows;
/* Rows from which products of block formats take gemm_q8 where it runs
 * (colo_cpu_gemm_q8_cpu; before the limits above), in prefill and decode;
 * default 1 (all). A knob as they are. */
extern int colo_cpu_q8_min_rows;

/* ---- the ops (one file per concern) ------------------------------------------------ */

colo_status colo_cpu_linear(colo_stream *s, const void *w, colo_dtype w_type, const float *bias, const float *x,
                            int x_stride, float *y, int y_stride, int m, int n, int k);
colo_status colo_cpu_lora(colo_stream *s, const float *x, int x_stride, int m, int k, const colo_lora_out *out,
                          int n_out, const int32_t *row_slot, int n_slots, float *tmp, int max_rank);
colo_status colo_cpu_linear_multi(colo_stream *s, const float *x, int x_stride, int m, int k,
                                  const colo_linear_out *out, int n_out);
colo_status colo_cpu_gemm(colo_stream *s, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const void *a, int lda, int64_t stride_a, const void *b, int ldb, int64_t stride_b,
                          colo_dtype ab_type, float beta, float *c, int ldc, int64_t stride_c, int batch);
colo_status colo_cpu_attention(colo_stream *s, const colo_attn_desc *d, const float *q, const void *k_cache,
                               const void *v_cache, float *out);
colo_status colo_cpu_attention_bidir(colo_stream *s, const float *q, int q_stride, const float *k, int k_stride,
                                     const float *v, int v_stride, float *out, const int32_t *len, int batch,
                                     int seq, int n_head, int head_dim, float scale);
/* norm.c */
colo_status colo_cpu_rmsnorm(colo_stream *s, const float *x, const float *w, float *y, int rows, int n, float eps);
/* y (n) = x / sqrt(mean(x^2) + eps) * w: one row of rmsnorm, for every op
 * that norms a row (the same bits). y may equal x. */
void colo_cpu_rms_row(const float *x, const float *w, float *y, int n, float eps);
/* One row of add_rmsnorm: h_out = rmsnorm(h) * w_pre where w_pre is given
 * (h_out may be h; h unchanged otherwise), x_out = x + that (x_out may be
 * x), y = rmsnorm(x_out) * w. */
void colo_cpu_add_rms_row(const float *x, const float *h, const float *w_pre, const float *w, float *x_out,
                          float *h_out, float *y, int n, float eps);
/* One token's K and V rows (kv_dim) into slot of caches of type t, as
 * kv_store stores them; false for a type it cannot store. */
bool colo_cpu_kv_store_row(colo_dtype t, const float *k, const float *v, void *k_cache, void *v_cache, int64_t slot,
                           int kv_dim);
/* out[i] = swiglu (tanh_gelu: geglu) of gate[i] and up[i] for i in [lo, hi),
 * each element the bits the swiglu and geglu ops give it. */
void colo_cpu_glu_range(const float *gate, const float *up, float *out, int64_t lo, int64_t hi, bool tanh_gelu);
colo_status colo_cpu_linear_glu(colo_stream *s, const void *w, colo_dtype w_type, const float *bias, float *gate,
                                const float *up, bool tanh_gelu, float *y, int m, int n, int k);
colo_status colo_cpu_qk_store(colo_stream *s, const colo_qk_desc *d, float *q, float *k, const float *v,
                              const int32_t *pos, const int32_t *slot, int rows, void *k_cache, void *v_cache);
colo_status colo_cpu_add_rmsnorm(colo_stream *s, const float *x, float *h, const float *w_pre, const float *w,
                                 float *x_out, float *y, int rows, int n, float eps);
colo_status colo_cpu_add_rmsnorm_multi(colo_stream *s, const float *x, float *h, const float *w_pre, const float *w,
                                       float *x_out, float *y, int rows, int n, float eps, const colo_linear_out *out,
                                       int n_out);
colo_status colo_cpu_layernorm(colo_stream *s, const float *x, const float *g, const float *b, float *y, int rows,
                               int n, float eps);
colo_status colo_cpu_softmax(colo_stream *s, float *x, int rows, int n, float scale);
colo_status colo_cpu_l2norm(colo_stream *s, float *x, int rows, int n);
colo_status colo_cpu_mean_pool(colo_stream *s, const float *x, const int32_t *len, float *out, int batch, int seq,
                               int d);
/* elementwise.c */
colo_status colo_cpu_swiglu(colo_stream *s, const float *gate, const float *up, float *out, int64_t n);
colo_status colo_cpu_silu(colo_stream *s, const float *x, float *y, int64_t n);
colo_status colo_cpu_gelu(colo_stream *s, const float *x, float *y, int64_t n);
colo_status colo_cpu_add(colo_stream *s, const float *a, const float *b, float *out, int64_t n);
colo_status colo_cpu_geglu(colo_stream *s, const float *gate, const float *up, float *out, int64_t n);
colo_status colo_cpu_scale(colo_stream *s, float *x, float alpha, int64_t n);
colo_status colo_cpu_rope(colo_stream *s, float *x, int x_stride, const int32_t *pos, int rows,
                          const colo_rope_desc *d);
/* gather.c */
colo_status colo_cpu_get_rows(colo_stream *s, const void *table, colo_dtype type, int64_t n_rows, int row_len,
                              const int32_t *ids, int n_ids, float *out);
colo_status colo_cpu_dequantize(colo_stream *s, const void *src, colo_dtype src_type, void *dst,
                                colo_dtype dst_type, int64_t n);
colo_status colo_cpu_kv_store(colo_stream *s, const float *k, int k_stride, const float *v, int v_stride,
                              void *k_cache, void *v_cache, colo_dtype kv_type, const int32_t *slot, int n_tokens,
                              int kv_dim);

#endif
