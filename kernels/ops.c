/* Weight types and the op dispatchers: argument checks, then the backend. */
#include "kernels/ops.h"

#include <math.h>

#include "runtime/backend_impl.h"
#include "runtime/fault.h"

bool colo_dtype_is_weight(colo_dtype t)
{
    return t == COLO_F32 || t == COLO_F16 || t == COLO_BF16 || t == COLO_Q4_0 || t == COLO_Q4_1 || t == COLO_Q8_0 ||
           t == COLO_Q6_K || t == COLO_Q5_0 || t == COLO_Q5_1 || t == COLO_Q2_K || t == COLO_Q3_K || t == COLO_Q4_K ||
           t == COLO_Q5_K;
}

bool colo_dtype_is_kv(colo_dtype t)
{
    return t == COLO_F32 || t == COLO_F16 || t == COLO_Q8_0 || t == COLO_Q4_0;
}

const colo_ops *colo_device_ops(const colo_device *dev)
{
    if (!dev)
        return NULL;
    switch (colo_device_kind(dev)) {
    case COLO_BACKEND_CPU: return &colo_cpu_ops;
    case COLO_BACKEND_CUDA: return &colo_cuda_ops;
    }
    return NULL;
}

/* Injected faults (runtime/fault.h) and a poisoned device, before an op is
 * queued on s; matrix ops may also get a math-library fault. */
static colo_status op_faults(colo_stream *s, bool matrix)
{
    colo_device *dev = colo_stream_device(s);
    if (colo_device_poisoned(dev))
        return COLO_EFATAL;
    const char *label = colo_stream_label(s);
    if (!label)
        return COLO_OK;
    if (colo_fault_hit(COLO_FAULT_POISON, label)) {
        colo_device_mark_poisoned(dev);
        return COLO_EFATAL;
    }
    if (colo_fault_hit(COLO_FAULT_LAUNCH, label) || (matrix && colo_fault_hit(COLO_FAULT_BLAS, label)))
        return COLO_EDEVICE;
    return COLO_OK;
}

#define OPS(s) ((s) ? colo_device_ops(colo_stream_device(s)) : NULL)
#define DISPATCH_OP(s, matrix, slot, ...)                                                                        \
    do {                                                                                                         \
        const colo_ops *ops_ = OPS(s);                                                                           \
        if (!ops_)                                                                                               \
            return COLO_EINVAL;                                                                                  \
        if (!ops_->slot)                                                                                         \
            return COLO_EUNSUPPORTED;                                                                            \
        colo_status fst_ = op_faults(s, matrix);                                                                 \
        if (fst_ != COLO_OK)                                                                                     \
            return fst_;                                                                                         \
        return ops_->slot(s, __VA_ARGS__);                                                                       \
    } while (0)
#define DISPATCH(s, slot, ...) DISPATCH_OP(s, false, slot, __VA_ARGS__)

colo_status colo_op_linear(colo_stream *s, const void *w, colo_dtype w_type, const float *bias, const float *x,
                           int x_stride, float *y, int y_stride, int m, int n, int k)
{
    if (!w || !x || !y || m <= 0 || n <= 0 || k <= 0 || x_stride < 0 || y_stride < 0 ||
        (x_stride && x_stride < k) || (y_stride && y_stride < n))
        return COLO_EINVAL;
    if (!colo_dtype_is_weight(w_type))
        return COLO_EUNSUPPORTED;
    if (k % colo_dtype_block_elems(w_type))
        return COLO_EINVAL;
    DISPATCH_OP(s, true, linear, w, w_type, bias, x, x_stride, y, y_stride, m, n, k);
}

colo_status colo_op_linear_glu(colo_stream *s, const void *w, colo_dtype w_type, const float *bias, float *gate,
                               const float *up, bool tanh_gelu, float *y, int m, int n, int k)
{
    if (!w || !gate || !up || !y || m <= 0 || n <= 0 || k <= 0)
        return COLO_EINVAL;
    if (!colo_dtype_is_weight(w_type))
        return COLO_EUNSUPPORTED;
    if (k % colo_dtype_block_elems(w_type))
        return COLO_EINVAL;
    const colo_ops *ops = OPS(s);
    if (!ops)
        return COLO_EINVAL;
    if (ops->linear_glu)
        DISPATCH_OP(s, true, linear_glu, w, w_type, bias, gate, up, tanh_gelu, y, m, n, k);
    int64_t nk = (int64_t)m * k;
    colo_status st = tanh_gelu ? colo_op_geglu(s, gate, up, gate, nk) : colo_op_swiglu(s, gate, up, gate, nk);
    return st == COLO_OK ? colo_op_linear(s, w, w_type, bias, gate, 0, y, 0, m, n, k) : st;
}

/* The checks of linear_multi's products of an x of k columns. */
static colo_status outs_check(const colo_linear_out *out, int n_out, int k)
{
    for (int i = 0; i < n_out; i++) {
        const colo_linear_out *o = &out[i];
        if (!o->w || !o->y || o->n <= 0 || o->y_stride < 0 || (o->y_stride && o->y_stride < o->n))
            return COLO_EINVAL;
        if (!colo_dtype_is_weight(o->w_type))
            return COLO_EUNSUPPORTED;
        if (k % colo_dtype_block_elems(o->w_type))
            return COLO_EINVAL;
    }
    return COLO_OK;
}

colo_status colo_op_linear_multi(colo_stream *s, const float *x, int x_stride, int m, int k,
                                 const colo_linear_out *out, int n_out)
{
    if (!x || !out || n_out <= 0 || n_out > COLO_LINEAR_MULTI_MAX || m <= 0 || k <= 0 || x_stride < 0 ||
        (x_stride && x_stride < k))
        return COLO_EINVAL;
    colo_status cst = outs_check(out, n_out, k);
    if (cst != COLO_OK)
        return cst;
    const colo_ops *ops = OPS(s);
    if (!ops)
        return COLO_EINVAL;
    if (!ops->linear_multi)
        return colo_linear_each(colo_op_linear, s, x, x_stride, m, k, out, n_out);
    DISPATCH_OP(s, true, linear_multi, x, x_stride, m, k, out, n_out);
}

colo_status colo_linear_each(colo_status (*linear)(colo_stream *, const void *, colo_dtype, const float *,
                                                   const float *, int, float *, int, int, int, int),
                             colo_stream *s, const float *x, int x_stride, int m, int k, const colo_linear_out *out,
                             int n_out)
{
    for (int i = 0; i < n_out; i++) {
        colo_status st =
            linear(s, out[i].w, out[i].w_type, out[i].bias, x, x_stride, out[i].y, out[i].y_stride, m, out[i].n, k);
        if (st != COLO_OK)
            return st;
    }
    return COLO_OK;
}

colo_status colo_op_gemm(colo_stream *s, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                         const void *a, int lda, int64_t stride_a, const void *b, int ldb, int64_t stride_b,
                         colo_dtype ab_type, float beta, float *c, int ldc, int64_t stride_c, int batch)
{
    if (!a || !b || !c || m <= 0 || n <= 0 || k <= 0 || batch <= 0 || ldc < n || lda < (trans_a ? m : k) ||
        ldb < (trans_b ? k : n) || stride_a < 0 || stride_b < 0 || stride_c < 0)
        return COLO_EINVAL;
    if (ab_type != COLO_F32 && ab_type != COLO_F16)
        return COLO_EUNSUPPORTED;
    DISPATCH_OP(s, true, gemm, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, ab_type, beta, c, ldc,
             stride_c, batch);
}

colo_status colo_op_dequantize(colo_stream *s, const void *src, colo_dtype src_type, void *dst,
                               colo_dtype dst_type, int64_t n)
{
    if (!src || !dst || n <= 0)
        return COLO_EINVAL;
    if (!colo_dtype_is_weight(src_type) || (dst_type != COLO_F32 && dst_type != COLO_F16))
        return COLO_EUNSUPPORTED;
    if (n % colo_dtype_block_elems(src_type))
        return COLO_EINVAL;
    DISPATCH(s, dequantize, src, src_type, dst, dst_type, n);
}

colo_status colo_op_get_rows(colo_stream *s, const void *table, colo_dtype type, int64_t n_rows, int row_len,
                             const int32_t *ids, int n_ids, float *out)
{
    if (!table || !ids || !out || n_rows <= 0 || row_len <= 0 || n_ids <= 0)
        return COLO_EINVAL;
    if (!colo_dtype_is_weight(type))
        return COLO_EUNSUPPORTED;
    if (row_len % colo_dtype_block_elems(type))
        return COLO_EINVAL;
    DISPATCH(s, get_rows, table, type, n_rows, row_len, ids, n_ids, out);
}

colo_status colo_op_rmsnorm(colo_stream *s, const float *x, const float *w, float *y, int rows, int n, float eps)
{
    if (!x || !w || !y || rows <= 0 || n <= 0 || !(eps >= 0))
        return COLO_EINVAL;
    DISPATCH(s, rmsnorm, x, w, y, rows, n, eps);
}

colo_status colo_op_add_rmsnorm(colo_stream *s, const float *x, float *h, const float *w_pre, const float *w,
                                float *x_out, float *y, int rows, int n, float eps)
{
    if (!x || !h || !w || !x_out || !y || rows <= 0 || n <= 0 || !(eps >= 0))
        return COLO_EINVAL;
    const colo_ops *ops = OPS(s);
    if (!ops)
        return COLO_EINVAL;
    if (ops->add_rmsnorm)
        DISPATCH(s, add_rmsnorm, x, h, w_pre, w, x_out, y, rows, n, eps);
    colo_status st = w_pre ? colo_op_rmsnorm(s, h, w_pre, h, rows, n, eps) : COLO_OK;
    if (st == COLO_OK)
        st = colo_op_add(s, x, h, x_out, (int64_t)rows * n);
    return st == COLO_OK ? colo_op_rmsnorm(s, x_out, w, y, rows, n, eps) : st;
}

colo_status colo_op_add_rmsnorm_multi(colo_stream *s, const float *x, float *h, const float *w_pre, const float *w,
                                      float *x_out, float *y, int rows, int n, float eps,
                                      const colo_linear_out *out, int n_out)
{
    if (!x || !h || !w || !x_out || !y || rows <= 0 || n <= 0 || !(eps >= 0) || !out || n_out < 1 ||
        n_out > COLO_LINEAR_MULTI_MAX)
        return COLO_EINVAL;
    const float *xe = x + (size_t)rows * n, *oe = x_out + (size_t)rows * n;
    if (x < oe && x_out < xe) /* (the fused op reads x while it writes x_out) */
        return COLO_EINVAL;
    colo_status cst = outs_check(out, n_out, n);
    if (cst != COLO_OK)
        return cst;
    const colo_ops *ops = OPS(s);
    if (!ops)
        return COLO_EINVAL;
    if (ops->add_rmsnorm_multi)
        DISPATCH(s, add_rmsnorm_multi, x, h, w_pre, w, x_out, y, rows, n, eps, out, n_out);
    colo_status st = colo_op_add_rmsnorm(s, x, h, w_pre, w, x_out, y, rows, n, eps);
    return st == COLO_OK ? colo_op_linear_multi(s, y, 0, rows, n, out, n_out) : st;
}

colo_status colo_op_layernorm(colo_stream *s, const float *x, const float *gamma, const float *beta, float *y,
                              int rows, int n, float eps)
{
    if (!x || !gamma || !beta || !y || rows <= 0 || n <= 0 || !(eps >= 0))
        return COLO_EINVAL;
    DISPATCH(s, layernorm, x, gamma, beta, y, rows, n, eps);
}

/* A rope descriptor's and row stride's checks. */
static colo_status rope_check(const colo_rope_desc *d, int x_stride)
{
    if (d->n_heads <= 0 || d->head_dim <= 0 || d->n_rot <= 0 || d->n_rot > d->head_dim || d->n_rot % 2 ||
        !(d->freq_base > 0) || !(d->freq_scale > 0) || !isfinite(d->attn_factor) || x_stride < 0 ||
        (x_stride && x_stride < d->n_heads * d->head_dim))
        return COLO_EINVAL;
    return COLO_OK;
}

colo_status colo_op_rope(colo_stream *s, float *x, int x_stride, const int32_t *pos, int rows,
                         const colo_rope_desc *d)
{
    if (!x || !pos || !d || rows <= 0 || rope_check(d, x_stride) != COLO_OK)
        return COLO_EINVAL;
    DISPATCH(s, rope, x, x_stride, pos, rows, d);
}

colo_status colo_op_qk_store(colo_stream *s, const colo_qk_desc *d, float *q, float *k, const float *v,
                             const int32_t *pos, const int32_t *slot, int rows, void *k_cache, void *v_cache)
{
    if (!d || !q || !k || !v || !pos || !slot || !k_cache || !v_cache || rows <= 0 || d->n_kv_heads <= 0 ||
        !d->q_norm != !d->k_norm || !(d->eps >= 0))
        return COLO_EINVAL;
    const colo_ops *ops = OPS(s);
    if (!ops)
        return COLO_EINVAL;
    int hd = d->rope.head_dim, kv_dim = d->n_kv_heads * hd;
    colo_rope_desc kr = d->rope; /* the keys' */
    kr.n_heads = d->n_kv_heads;
    if (ops->qk_store) { /* the checks the three ops make */
        if (rope_check(&d->rope, 0) != COLO_OK || rope_check(&kr, 0) != COLO_OK)
            return COLO_EINVAL;
        if (!colo_dtype_is_kv(d->kv_type))
            return COLO_EUNSUPPORTED;
        if (kv_dim % colo_dtype_block_elems(d->kv_type))
            return COLO_EINVAL;
        DISPATCH(s, qk_store, d, q, k, v, pos, slot, rows, k_cache, v_cache);
    }
    colo_status st = COLO_OK;
    if (d->q_norm) {
        st = colo_op_rmsnorm(s, q, d->q_norm, q, rows * d->rope.n_heads, hd, d->eps);
        if (st == COLO_OK)
            st = colo_op_rmsnorm(s, k, d->k_norm, k, rows * d->n_kv_heads, hd, d->eps);
    }
    if (st == COLO_OK)
        st = colo_op_rope(s, q, 0, pos, rows, &d->rope);
    if (st == COLO_OK)
        st = colo_op_rope(s, k, 0, pos, rows, &kr);
    return st == COLO_OK ? colo_op_kv_store(s, k, 0, v, 0, k_cache, v_cache, d->kv_type, slot, rows, kv_dim) : st;
}

colo_status colo_op_softmax(colo_stream *s, float *x, int rows, int n, float scale)
{
    if (!x || rows <= 0 || n <= 0)
        return COLO_EINVAL;
    DISPATCH(s, softmax, x, rows, n, scale);
}

colo_status colo_op_lora_multi(colo_stream *s, const float *x, int x_stride, int m, int k, const colo_lora_out *out,
                               int n_out, const int32_t *row_slot, int n_slots, float *tmp, int max_rank)
{
    if (!x || !out || n_out < 1 || n_out > COLO_LORA_MULTI_MAX || !row_slot || !tmp || m <= 0 || k <= 0 ||
        n_slots <= 0 || max_rank <= 0 || max_rank > COLO_LORA_MAX_RANK || x_stride < 0 || (x_stride && x_stride < k))
        return COLO_EINVAL;
    for (int j = 0; j < n_out; j++)
        if (!out[j].y || !out[j].slots || out[j].n <= 0 || out[j].y_stride < 0 ||
            (out[j].y_stride && out[j].y_stride < out[j].n))
            return COLO_EINVAL;
    DISPATCH_OP(s, true, lora, x, x_stride, m, k, out, n_out, row_slot, n_slots, tmp, max_rank);
}

colo_status colo_op_lora(colo_stream *s, const float *x, int x_stride, int m, int k, float *y, int y_stride, int n,
                         const int32_t *row_slot, const colo_lora_slot *slots, int n_slots, float *tmp,
                         int max_rank)
{
    colo_lora_out o = {y, y_stride, n, slots};
    return colo_op_lora_multi(s, x, x_stride, m, k, &o, 1, row_slot, n_slots, tmp, max_rank);
}

colo_status colo_op_swiglu(colo_stream *s, const float *gate, const float *up, float *out, int64_t n)
{
    if (!gate || !up || !out || n <= 0)
        return COLO_EINVAL;
    DISPATCH(s, swiglu, gate, up, out, n);
}

colo_status colo_op_silu(colo_stream *s, const float *x, float *y, int64_t n)
{
    if (!x || !y || n <= 0)
        return COLO_EINVAL;
    DISPATCH(s, silu, x, y, n);
}

colo_status colo_op_gelu(colo_stream *s, const float *x, float *y, int64_t n)
{
    if (!x || !y || n <= 0)
        return COLO_EINVAL;
    DISPATCH(s, gelu, x, y, n);
}

colo_status colo_op_geglu(colo_stream *s, const float *gate, const float *up, float *out, int64_t n)
{
    if (!gate || !up || !out || n <= 0)
        return COLO_EINVAL;
    DISPATCH(s, geglu, gate, up, out, n);
}

colo_status colo_op_scale(colo_stream *s, float *x, float alpha, int64_t n)
{
    if (!x || n <= 0 || !isfinite(alpha))
        return COLO_EINVAL;
    DISPATCH(s, scale, x, alpha, n);
}

colo_status colo_op_add(colo_stream *s, const float *a, const float *b, float *out, int64_t n)
{
    if (!a || !b || !out || n <= 0)
        return COLO_EINVAL;
    DISPATCH(s, add, a, b, out, n);
}

colo_status colo_op_kv_store(colo_stream *s, const float *k, int k_stride, const float *v, int v_stride,
                             void *k_cache, void *v_cache, colo_dtype kv_type, const int32_t *slot, int n_tokens,
                             int kv_dim)
{
    if (!k || !v || !k_cache || !v_cache || !slot || n_tokens <= 0 || kv_dim <= 0 || k_stride < 0 ||
        v_stride < 0 || (k_stride && k_stride < kv_dim) || (v_stride && v_stride < kv_dim))
        return COLO_EINVAL;
    if (!colo_dtype_is_kv(kv_type))
        return COLO_EUNSUPPORTED;
    if (kv_dim % colo_dtype_block_elems(kv_type))
        return COLO_EINVAL;
    DISPATCH(s, kv_store, k, k_stride, v, v_stride, k_cache, v_cache, kv_type, slot, n_tokens, kv_dim);
}

colo_status colo_op_attention(colo_stream *s, const colo_attn_desc *d, const float *q, const void *k_cache,
                              const void *v_cache, float *out)
{
    if (!d || !q || !k_cache || !v_cache || !out || d->n_tokens <= 0 || d->n_head <= 0 || d->n_kv_head <= 0 ||
        d->n_head % d->n_kv_head || d->head_dim <= 0 || d->block_size <= 0 || d->max_blocks <= 0 ||
        d->max_pos < 0 || d->max_pos >= d->max_blocks * d->block_size || !d->tok_seq || !d->tok_pos ||
        !d->block_table || d->q_stride < 0 || (d->q_stride && d->q_stride < d->n_head * d->head_dim) ||
        d->window < 0)
        return COLO_EINVAL;
    if (!colo_dtype_is_kv(d->kv_type))
        return COLO_EUNSUPPORTED;
    if (d->head_dim % colo_dtype_block_elems(d->kv_type))
        return COLO_EINVAL;
    DISPATCH(s, attention, d, q, k_cache, v_cache, out);
}

colo_status colo_op_attention_bidir(colo_stream *s, const float *q, int q_stride, const float *k, int k_stride,
                                    const float *v, int v_stride, float *out, const int32_t *len, int batch,
                                    int seq, int n_head, int head_dim, float scale)
{
    int hd = n_head * head_dim;
    if (!q || !k || !v || !out || !len || batch <= 0 || seq <= 0 || n_head <= 0 || head_dim <= 0 ||
        q_stride < 0 || k_stride < 0 || v_stride < 0 || (q_stride && q_stride < hd) ||
        (k_stride && k_stride < hd) || (v_stride && v_stride < hd))
        return COLO_EINVAL;
    DISPATCH(s, attention_bidir, q, q_stride, k, k_stride, v, v_stride, out, len, batch, seq, n_head, head_dim,
             scale);
}

colo_status colo_op_mean_pool(colo_stream *s, const float *x, const int32_t *len, float *out, int batch, int seq,
                              int d)
{
    if (!x || !len || !out || batch <= 0 || seq <= 0 || d <= 0)
        return COLO_EINVAL;
    DISPATCH(s, mean_pool, x, len, out, batch, seq, d);
}

colo_status colo_op_l2norm(colo_stream *s, float *x, int rows, int n)
{
    if (!x || rows <= 0 || n <= 0)
        return COLO_EINVAL;
    DISPATCH(s, l2norm, x, rows, n);
}
