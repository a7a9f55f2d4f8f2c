/* Gathers, conversions and scatters: get_rows (embedding lookup on any
 * weight dtype), dequantize (to F32/F16), kv_store (rows into KV-cache slots). */
#include "kernels/cpu/cpu_kernels.h"

#include <string.h>

typedef struct {
    const void *table;
    colo_dtype type;
    int64_t n_rows;
    int row_len;
    const int32_t *ids;
    int n_ids;
    float *out;
} rows_get_args;

static void get_rows_task(const void *p, int chunk, int n_chunks)
{
    const rows_get_args *g = p;
    int64_t lo, hi;
    colo_chunk_range(g->n_ids, chunk, n_chunks, &lo, &hi);
    size_t rb = colo_dtype_row_bytes(g->type, g->row_len);
    for (int64_t i = lo; i < hi; i++) {
        int32_t id = g->ids[i];
        float *o = g->out + i * g->row_len;
        if (id < 0 || id >= g->n_rows) {
            memset(o, 0, (size_t)g->row_len * sizeof(float));
            colo_cpu_task_fail(COLO_EINVAL);
            continue;
        }
        colo_dequantize_row(g->type, (const unsigned char *)g->table + (size_t)id * rb, o, g->row_len);
    }
}

colo_status colo_cpu_get_rows(colo_stream *s, const void *table, colo_dtype type, int64_t n_rows, int row_len,
                                const int32_t *ids, int n_ids, float *out)
{
    rows_get_args g = {table, type, n_rows, row_len, ids, n_ids, out};
    return colo_cpu_launch(s, get_rows_task, &g, sizeof g, colo_cpu_chunks(s, n_ids, 4.0 * row_len));
}

typedef struct {
    const void *src;
    colo_dtype st, dt;
    void *dst;
    int64_t n_blocks;
    int be;
} deq_args;

static void deq_task(const void *p, int chunk, int n_chunks)
{
    const deq_args *d = p;
    int64_t lo, hi;
    colo_chunk_range(d->n_blocks, chunk, n_chunks, &lo, &hi);
    size_t bb = colo_dtype_block_bytes(d->st);
    const unsigned char *src = (const unsigned char *)d->src + (size_t)lo * bb;
    int64_t n = (hi - lo) * d->be;
    if (d->dt == COLO_F32) {
        colo_dequantize_row(d->st, src, (float *)d->dst + lo * d->be, n);
    } else {
        float tmp[256];
        uint16_t *out = (uint16_t *)d->dst + lo * d->be;
        for (int64_t b = 0; b < hi - lo; b++) {
            colo_dequantize_row(d->st, src + (size_t)b * bb, tmp, d->be);
            for (int j = 0; j < d->be; j++)
                out[b * d->be + j] = colo_f32_to_fp16(tmp[j]);
        }
    }
}

colo_status colo_cpu_dequantize(colo_stream *s, const void *src, colo_dtype src_type, void *dst,
                                  colo_dtype dst_type, int64_t n)
{
    int be = colo_dtype_block_elems(src_type);
    deq_args d = {src, src_type, dst_type, dst, n / be, be};
    return colo_cpu_launch(s, deq_task, &d, sizeof d, colo_cpu_chunks(s, n / be, 4.0 * be));
}

typedef struct {
    const float *k, *v;
    int ks, vs;
    void *kc, *vc;
    colo_dtype t;
    const int32_t *slot;
    int n_tokens, kv_dim;
} kv_args;

static void kv_task(const void *p, int chunk, int n_chunks)
{
    const kv_args *a = p;
    int64_t lo, hi;
    colo_chunk_range(a->n_tokens, chunk, n_chunks, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        int64_t slot = a->slot[t];
        if (slot < 0) {
            colo_cpu_task_fail(COLO_EINVAL);
            continue;
        }
        if (!colo_cpu_kv_store_row(a->t, a->k + t * a->ks, a->v + t * a->vs, a->kc, a->vc, slot, a->kv_dim))
            colo_cpu_task_fail(COLO_EUNSUPPORTED);
    }
}

bool colo_cpu_kv_store_row(colo_dtype t, const float *k, const float *v, void *k_cache, void *v_cache, int64_t slot,
                           int kv_dim)
{
    if (t == COLO_F32) {
        memcpy((float *)k_cache + slot * kv_dim, k, (size_t)kv_dim * sizeof(float));
        memcpy((float *)v_cache + slot * kv_dim, v, (size_t)kv_dim * sizeof(float));
    } else if (t == COLO_F16) {
        uint16_t *kc = (uint16_t *)k_cache + slot * kv_dim, *vc = (uint16_t *)v_cache + slot * kv_dim;
        for (int i = 0; i < kv_dim; i++) {
            kc[i] = colo_f32_to_fp16(k[i]);
            vc[i] = colo_f32_to_fp16(v[i]);
        }
    } else {
        /* A block type: the row is quantized once, here, 32 elements per
         * block, and never rewritten. */
        size_t rb = colo_dtype_row_bytes(t, kv_dim);
        if (colo_quantize_row(t, k, (char *)k_cache + slot * (int64_t)rb, kv_dim) != COLO_OK ||
            colo_quantize_row(t, v, (char *)v_cache + slot * (int64_t)rb, kv_dim) != COLO_OK)
            return false;
    }
    return true;
}

colo_status colo_cpu_kv_store(colo_stream *s, const float *k, int k_stride, const float *v, int v_stride,
                                void *k_cache, void *v_cache, colo_dtype kv_type, const int32_t *slot, int n_tokens,
                                int kv_dim)
{
    kv_args a = {k, v, k_stride ? k_stride : kv_dim, v_stride ? v_stride : kv_dim, k_cache, v_cache, kv_type,
                 slot, n_tokens, kv_dim};
    return colo_cpu_launch(s, kv_task, &a, sizeof a, colo_cpu_chunks(s, n_tokens, 4.0 * kv_dim));
}
