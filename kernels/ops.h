/* kernels/ops.h: the ops models are built from, one table per backend.
 *
 * Every op is queued on a stream and runs asynchronously; errors found while
 * queuing (bad arguments, unsupported dtype) are returned at once, errors
 * while running come back from colo_stream_sync(). All pointers are device
 * pointers of the stream's device. Tensors are row-major and contiguous
 * unless a stride (in elements) says otherwise. Activations are F32; weights
 * may be any of the weight dtypes below and stay in their file layout
 * (GGML block formats), so quantized weights are never expanded in memory.
 *
 * Kernels know nothing of requests, queues or models. Each op has a CPU
 * version (kernels/cpu) and a CUDA version (kernels/cuda); a parity test runs
 * each against a float64 reference (tests/kernels). */
#ifndef COLO_KERNELS_OPS_H
#define COLO_KERNELS_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/backend.h"
#include "runtime/dtype.h" /* colo_dtype and its sizes */

#ifdef __cplusplus
extern "C" {
#endif

/* The CPU's quantized matrix products in use (kernels/cpu/gemm_q8.c):
 * "AVX512-VNNI", "AVX2" or "generic"; the environment variable
 * COLO_CPU_GEMM_Q8 (vnni, avx2 or off) picks a lower set than the CPU's. */
const char *colo_cpu_kernels_name(void);

/* True when linear/get_rows/dequantize accept t as a weight type. */
bool colo_dtype_is_weight(colo_dtype t);
/* True when a KV cache may hold t: F32, F16, or the block types Q8_0 and
 * Q4_0 (a row of kv_dim elements is then kv_dim / 32 blocks, each quantized
 * once when kv_store writes it; head_dim must be a multiple of 32, so that
 * each head's piece of a row is whole blocks). */
bool colo_dtype_is_kv(colo_dtype t);

/* Paged, causal, grouped-query attention over a KV cache.
 * The KV cache of one layer is two arrays [n_slots, n_kv_head * head_dim] of
 * kv_type (colo_dtype_is_kv; a row of a block type takes
 * colo_dtype_row_bytes(kv_type, n_kv_head * head_dim) bytes); slot = block * block_size + offset. Token t of the
 * batch belongs to sequence tok_seq[t] at position tok_pos[t] and attends to
 * positions 0..tok_pos[t] of that sequence, whose KV rows live at the slots
 * given by block_table[tok_seq[t] * max_blocks + pos / block_size]. Query head
 * h reads KV head h / (n_head / n_kv_head). */
typedef struct colo_attn_desc {
    int n_tokens;
    int n_head;
    int n_kv_head;
    int head_dim;
    int block_size;             /* tokens per KV block */
    int max_blocks;             /* columns of block_table */
    int max_pos;                /* upper bound of every tok_pos (sizes shared memory/scratch) */
    float scale;                /* usually 1/sqrt(head_dim) */
    colo_dtype kv_type;         /* COLO_F32, COLO_F16, COLO_Q8_0 or COLO_Q4_0 (head_dim % 32 == 0) */
    const int32_t *tok_seq;     /* (n_tokens) */
    const int32_t *tok_pos;     /* (n_tokens) */
    const int32_t *block_table; /* (n_seqs, max_blocks) */
    int q_stride;               /* elements between rows of q; 0 = n_head * head_dim */
    int window;                 /* sliding window: attend to positions > tok_pos - window; 0 = all */
} colo_attn_desc;

/* Rotary embedding of the first n_rot dims of each of n_heads heads of
 * head_dim. Pair i (i < n_rot / 2) is (x[2i], x[2i+1]), or with neox
 * (x[i], x[i + n_rot/2]); it turns by
 *   theta_i = pos * freq_scale * freq_base^(-2i/n_rot) / freq_factors[i]
 * (freq_factors NULL: 1), and cos/sin are multiplied by attn_factor (as
 * GGML's rope_ext with ext_factor 0). */
typedef struct colo_rope_desc {
    int n_heads;
    int head_dim;
    int n_rot;
    bool neox;
    float freq_base;
    float freq_scale;          /* 1 = no scaling */
    float attn_factor;         /* 1 = none */
    const float *freq_factors; /* (n_rot / 2) device floats, or NULL */
} colo_rope_desc;

/* What colo_op_qk_store does to a layer's queries, keys and values. */
typedef struct colo_qk_desc {
    colo_rope_desc rope; /* n_heads: the queries' heads */
    int n_kv_heads;      /* the keys' and values' heads (of rope.head_dim) */
    const float *q_norm; /* (head_dim) each query head's rmsnorm weights, or NULL */
    const float *k_norm; /* the same for the keys: both given or neither */
    float eps;           /* their rmsnorm's */
    colo_dtype kv_type;  /* the caches' (colo_dtype_is_kv) */
    /* Optional, for the layers that share one rotation: (rows, n_rot) each
     * token's cos and sin per pair (times attn_factor), as the rotation
     * computes them. rot_fill: this op computes them and stores them here
     * (the first such layer of a step); else it reads them (a later one).
     * A backend may ignore both; the values are the same either way. */
    float *rot;
    bool rot_fill;
} colo_qk_desc;

/* One product of colo_op_linear_multi: y (m, n) = x . W (n, k)^T [+ bias]. */
typedef struct colo_linear_out {
    const void *w;      /* (n, k) of w_type */
    colo_dtype w_type;  /* any weight dtype */
    const float *bias;  /* (n) or NULL */
    float *y;           /* (m, n), row stride y_stride (0 = n) */
    int y_stride;
    int n;
} colo_linear_out;

/* One adapter's low-rank update of one product (LoRA, models/arch/lora.h):
 * y += scale * B (A x), with a (rank, k) row-major and B stored transposed,
 * b (rank, n) with row stride b_stride, so that the slices of a fused
 * product (Q, K and V of one attn_qkv) are views of one tensor. In F32 (a,
 * b) or F16 (a16, b16: the other pair NULL). */
typedef struct colo_lora_slot {
    const float *a;
    const float *b;
    const uint16_t *a16;
    const uint16_t *b16;
    int rank;
    int b_stride;
    float scale;
} colo_lora_slot;

/* The largest adapter rank the ops take. */
#define COLO_LORA_MAX_RANK 256

/* One product's output of a LoRA op: y (m, n) with row stride y_stride (0
 * = n), updated by the adapters of slots (n_slots, device memory). */
typedef struct colo_lora_out {
    float *y;
    int y_stride;
    int n;
    const colo_lora_slot *slots;
} colo_lora_out;

/* Products of one input a LoRA op updates at most (a layer's Q, K and V). */
#define COLO_LORA_MULTI_MAX 3

typedef struct colo_ops colo_ops;

struct colo_ops {
    /* y (m, n) = x (m, k) . W (n, k)^T [+ bias (n)]. W is any weight dtype
     * (row-major, each row of k elements in its block format); x, y, bias F32;
     * bias may be NULL. x_stride/y_stride in elements (0 = k / n). */
    colo_status (*linear)(colo_stream *s, const void *w, colo_dtype w_type, const float *bias, const float *x,
                          int x_stride, float *y, int y_stride, int m, int n, int k);

    /* Strided batched GEMM, row-major: for b < batch,
     * C_b (m, n) = alpha * op(A_b) . op(B_b) + beta * C_b, op(X) = X or X^T.
     * A, B F32 or F16 (same type); C F32. lda/ldb/ldc are row strides in
     * elements; stride_* the distance between batch entries in elements. */
    colo_status (*gemm)(colo_stream *s, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                        const void *a, int lda, int64_t stride_a, const void *b, int ldb, int64_t stride_b,
                        colo_dtype ab_type, float beta, float *c, int ldc, int64_t stride_c, int batch);

    /* dst (n) = src (n) converted; src any weight dtype, dst F32 or F16. */
    colo_status (*dequantize)(colo_stream *s, const void *src, colo_dtype src_type, void *dst,
                              colo_dtype dst_type, int64_t n);

    /* out (n_ids, row_len) F32 = rows ids[i] of table (n_rows, row_len) of
     * any weight dtype. ids (n_ids) int32; an id outside [0, n_rows) leaves a
     * zero row and makes the stream report COLO_EINVAL. */
    colo_status (*get_rows)(colo_stream *s, const void *table, colo_dtype type, int64_t n_rows, int row_len,
                            const int32_t *ids, int n_ids, float *out);

    /* y (rows, n) = x / sqrt(mean(x^2) + eps) * w (n). y may equal x. */
    colo_status (*rmsnorm)(colo_stream *s, const float *x, const float *w, float *y, int rows, int n, float eps);

    /* y (rows, n) = (x - mean) / sqrt(var + eps) * gamma + beta. y may equal x. */
    colo_status (*layernorm)(colo_stream *s, const float *x, const float *gamma, const float *beta, float *y,
                             int rows, int n, float eps);

    /* In-place rotary embedding (see colo_rope_desc). x (rows, n_heads *
     * head_dim) with row stride x_stride (0 = packed); pos (rows) int32. */
    colo_status (*rope)(colo_stream *s, float *x, int x_stride, const int32_t *pos, int rows,
                        const colo_rope_desc *d);

    /* In place, per row: x = softmax(scale * x). */
    colo_status (*softmax)(colo_stream *s, float *x, int rows, int n, float scale);

    /* out (n) = silu(gate) * up. out may equal gate or up. */
    colo_status (*swiglu)(colo_stream *s, const float *gate, const float *up, float *out, int64_t n);
    /* y (n) = silu(x) = x * sigmoid(x). */
    colo_status (*silu)(colo_stream *s, const float *x, float *y, int64_t n);
    /* y (n) = x * Phi(x) (exact, erf-based GELU as BERT uses). */
    colo_status (*gelu)(colo_stream *s, const float *x, float *y, int64_t n);
    /* out (n) = gelu_tanh(gate) * up, GELU's tanh approximation
     * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GeGLU as Gemma uses).
     * out may equal gate or up. */
    colo_status (*geglu)(colo_stream *s, const float *gate, const float *up, float *out, int64_t n);
    /* In place: x (n) *= alpha. */
    colo_status (*scale)(colo_stream *s, float *x, float alpha, int64_t n);
    /* out (n) = a + b. out may equal a or b. */
    colo_status (*add)(colo_stream *s, const float *a, const float *b, float *out, int64_t n);

    /* Writes K and V rows of n_tokens tokens into one layer's cache at slots
     * slot (n_tokens, int32). k, v (n_tokens, kv_dim) with row strides in
     * elements (0 = kv_dim); caches (n_slots, kv_dim) of kv_type
     * (colo_dtype_is_kv; kv_dim % 32 == 0 for a block type, each 32
     * elements of a row quantized on their own). */
    colo_status (*kv_store)(colo_stream *s, const float *k, int k_stride, const float *v, int v_stride,
                            void *k_cache, void *v_cache, colo_dtype kv_type, const int32_t *slot, int n_tokens,
                            int kv_dim);

    /* out (n_tokens, n_head * head_dim) = attention of q (see colo_attn_desc). */
    colo_status (*attention)(colo_stream *s, const colo_attn_desc *d, const float *q, const void *k_cache,
                             const void *v_cache, float *out);

    /* Bidirectional attention with padding (encoders): q, k, v (batch * seq,
     * n_head * head_dim) with row strides (0 = packed); sequence b has len[b]
     * (int32, device) real tokens, keys at or past it are masked. Rows of
     * padding positions are written with zeros. */
    colo_status (*attention_bidir)(colo_stream *s, const float *q, int q_stride, const float *k, int k_stride,
                                   const float *v, int v_stride, float *out, const int32_t *len, int batch,
                                   int seq, int n_head, int head_dim, float scale);

    /* out (batch, d) = mean of x (batch, seq, d) over the first len[b] rows. */
    colo_status (*mean_pool)(colo_stream *s, const float *x, const int32_t *len, float *out, int batch, int seq,
                             int d);
    /* In place, per row: x = x / max(||x||_2, 1e-12). */
    colo_status (*l2norm)(colo_stream *s, float *x, int rows, int n);

    /* Several products of one x (m, k) (a layer's Q, K and V, or its gate
     * and up projections): out[i].y = x . out[i].w^T [+ out[i].bias] for
     * i < n_out, each exactly as linear would give it. A backend may prepare
     * x once for all of them. Optional (the dispatcher runs linear per
     * product); last in the table so that positional tables leave it out. */
    colo_status (*linear_multi)(colo_stream *s, const float *x, int x_stride, int m, int k,
                                const colo_linear_out *out, int n_out);

    /* Adapters' low-rank updates, each row with its own (segmented LoRA),
     * of n_out (1..COLO_LORA_MULTI_MAX) products of one input: for each
     * out[j] and i < m with 0 <= row_slot[i] < n_slots, out[j].y_i (n) +=
     * scale * B (A x_i) of out[j].slots[row_slot[i]]; other rows are left
     * as they are. x (m, k) with row stride x_stride (0 = k); row_slot (m)
     * int32 in device memory; tmp (m, max_rank) scratch, max_rank at least
     * every slot's rank. Each row's result depends on its own input and
     * slot alone, whatever else is in the batch. */
    colo_status (*lora)(colo_stream *s, const float *x, int x_stride, int m, int k, const colo_lora_out *out,
                        int n_out, const int32_t *row_slot, int n_slots, float *tmp, int max_rank);

    /* A residual add and the norm after it, in one op (a decode step's
     * layer has two): for rows rows of n, h = rmsnorm(h) * w_pre where w_pre
     * is given (h overwritten), x_out = x + h, y = rmsnorm(x_out) * w, each
     * value as those ops give it. x_out may equal x, y may equal h.
     * Optional (the dispatcher runs rmsnorm, add and rmsnorm); last, so
     * that positional tables leave it out. */
    colo_status (*add_rmsnorm)(colo_stream *s, const float *x, float *h, const float *w_pre, const float *w,
                               float *x_out, float *y, int rows, int n, float eps);

    /* A layer's queries and keys made ready and its keys and values
     * stored, in one op: for each of rows tokens, each head of q (rows,
     * n_heads * head_dim) and of k (rows, n_kv_heads * head_dim) rmsnorm'd
     * when d has the weights, both rotated at pos, then k's and v's rows
     * stored at slot as kv_store stores them; each value as those ops give
     * it. Optional (the dispatcher runs rmsnorm, rope and kv_store); last. */
    colo_status (*qk_store)(colo_stream *s, const colo_qk_desc *d, float *q, float *k, const float *v,
                            const int32_t *pos, const int32_t *slot, int rows, void *k_cache, void *v_cache);

    /* A gated feed-forward's down projection with its gate, in one op:
     * y (m, n) = x . W^T [+ bias] for x (m, k) = swiglu(gate, up) (geglu
     * when tanh_gelu), each value as those two ops give it. gate may be
     * overwritten (with x, or not). Optional (the dispatcher runs the gate
     * op into gate, then linear); last. */
    colo_status (*linear_glu)(colo_stream *s, const void *w, colo_dtype w_type, const float *bias, float *gate,
                              const float *up, bool tanh_gelu, float *y, int m, int n, int k);

    /* add_rmsnorm and then linear_multi of its y (k = n), in one op where
     * the backend can (a decode step's products form the norm in each of
     * their chunks): the same x_out and products, each value as those two
     * ops give it. y and h are scratch afterwards (the two ops leave the
     * normed rows in y; this one may not). x_out must not overlap x.
     * Optional (the dispatcher runs the two ops); last. */
    colo_status (*add_rmsnorm_multi)(colo_stream *s, const float *x, float *h, const float *w_pre, const float *w,
                                     float *x_out, float *y, int rows, int n, float eps, const colo_linear_out *out,
                                     int n_out);
};

/* Dispatchers: check the arguments, then run the op of the stream's device.
 * Each returns COLO_EINVAL for bad arguments and COLO_EUNSUPPORTED for a
 * dtype the backend lacks. Same parameters as the slots above. */
colo_status colo_op_linear(colo_stream *s, const void *w, colo_dtype w_type, const float *bias, const float *x,
                           int x_stride, float *y, int y_stride, int m, int n, int k);
/* At most COLO_LINEAR_MULTI_MAX products; COLO_EINVAL for more or none. */
#define COLO_LINEAR_MULTI_MAX 3
colo_status colo_op_linear_multi(colo_stream *s, const float *x, int x_stride, int m, int k,
                                 const colo_linear_out *out, int n_out);
/* linear_multi where nothing is shared: each product as one call of
 * linear (colo_op_linear, or a backend's own), stopping at the first
 * error. */
colo_status colo_linear_each(colo_status (*linear)(colo_stream *, const void *, colo_dtype, const float *,
                                                   const float *, int, float *, int, int, int, int),
                             colo_stream *s, const float *x, int x_stride, int m, int k, const colo_linear_out *out,
                             int n_out);
colo_status colo_op_lora_multi(colo_stream *s, const float *x, int x_stride, int m, int k, const colo_lora_out *out,
                               int n_out, const int32_t *row_slot, int n_slots, float *tmp, int max_rank);
colo_status colo_op_add_rmsnorm(colo_stream *s, const float *x, float *h, const float *w_pre, const float *w,
                                float *x_out, float *y, int rows, int n, float eps);
colo_status colo_op_add_rmsnorm_multi(colo_stream *s, const float *x, float *h, const float *w_pre, const float *w,
                                      float *x_out, float *y, int rows, int n, float eps,
                                      const colo_linear_out *out, int n_out);
colo_status colo_op_qk_store(colo_stream *s, const colo_qk_desc *d, float *q, float *k, const float *v,
                             const int32_t *pos, const int32_t *slot, int rows, void *k_cache, void *v_cache);
colo_status colo_op_linear_glu(colo_stream *s, const void *w, colo_dtype w_type, const float *bias, float *gate,
                               const float *up, bool tanh_gelu, float *y, int m, int n, int k);
/* One product: colo_op_lora_multi with one output. */
colo_status colo_op_lora(colo_stream *s, const float *x, int x_stride, int m, int k, float *y, int y_stride, int n,
                         const int32_t *row_slot, const colo_lora_slot *slots, int n_slots, float *tmp,
                         int max_rank);
colo_status colo_op_gemm(colo_stream *s, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                         const void *a, int lda, int64_t stride_a, const void *b, int ldb, int64_t stride_b,
                         colo_dtype ab_type, float beta, float *c, int ldc, int64_t stride_c, int batch);
colo_status colo_op_dequantize(colo_stream *s, const void *src, colo_dtype src_type, void *dst,
                               colo_dtype dst_type, int64_t n);
colo_status colo_op_get_rows(colo_stream *s, const void *table, colo_dtype type, int64_t n_rows, int row_len,
                             const int32_t *ids, int n_ids, float *out);
colo_status colo_op_rmsnorm(colo_stream *s, const float *x, const float *w, float *y, int rows, int n, float eps);
colo_status colo_op_layernorm(colo_stream *s, const float *x, const float *gamma, const float *beta, float *y,
                              int rows, int n, float eps);
colo_status colo_op_rope(colo_stream *s, float *x, int x_stride, const int32_t *pos, int rows,
                         const colo_rope_desc *d);
colo_status colo_op_softmax(colo_stream *s, float *x, int rows, int n, float scale);
colo_status colo_op_swiglu(colo_stream *s, const float *gate, const float *up, float *out, int64_t n);
colo_status colo_op_silu(colo_stream *s, const float *x, float *y, int64_t n);
colo_status colo_op_gelu(colo_stream *s, const float *x, float *y, int64_t n);
colo_status colo_op_geglu(colo_stream *s, const float *gate, const float *up, float *out, int64_t n);
colo_status colo_op_scale(colo_stream *s, float *x, float alpha, int64_t n);
colo_status colo_op_add(colo_stream *s, const float *a, const float *b, float *out, int64_t n);
colo_status colo_op_kv_store(colo_stream *s, const float *k, int k_stride, const float *v, int v_stride,
                             void *k_cache, void *v_cache, colo_dtype kv_type, const int32_t *slot, int n_tokens,
                             int kv_dim);
colo_status colo_op_attention(colo_stream *s, const colo_attn_desc *d, const float *q, const void *k_cache,
                              const void *v_cache, float *out);
colo_status colo_op_attention_bidir(colo_stream *s, const float *q, int q_stride, const float *k, int k_stride,
                                    const float *v, int v_stride, float *out, const int32_t *len, int batch,
                                    int seq, int n_head, int head_dim, float scale);
colo_status colo_op_mean_pool(colo_stream *s, const float *x, const int32_t *len, float *out, int batch, int seq,
                              int d);
colo_status colo_op_l2norm(colo_stream *s, float *x, int rows, int n);

/* The backends' tables (kernels/cpu/ops_cpu.c, kernels/cuda/ops_cuda.cu; in
 * a build without CUDA, kernels/cuda/ops_none.c, with no slot filled). */
extern const colo_ops colo_cpu_ops;
extern const colo_ops colo_cuda_ops;

/* The op table of dev's backend kind; NULL for NULL or an unknown kind. */
const colo_ops *colo_device_ops(const colo_device *dev);

#ifdef __cplusplus
}
#endif

#endif
