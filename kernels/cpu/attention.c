/* Attention on the CPU: paged causal GQA over a KV cache, and bidirectional
 * attention with padding for encoders. One chunk = a range of (token, head)
 * pairs; each pair streams its keys once with an online softmax. */
#include "kernels/cpu/cpu_kernels.h"

#include <math.h>
#include <string.h>
#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

typedef struct {
    colo_attn_desc d;
    const float *q;
    const void *k_cache, *v_cache;
    float *out;
} attn_args;

static inline void load_row(colo_dtype t, const void *base, int64_t row, int off, int n, float *dst)
{
    if (t == COLO_F32) {
        memcpy(dst, (const float *)base + row + off, (size_t)n * sizeof(float));
    } else {
        const uint16_t *h = (const uint16_t *)base + row + off;
        int i = 0;
#if defined(__F16C__) && defined(__AVX__)
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
#endif
        for (; i < n; i++)
            dst[i] = colo_fp16_to_f32(h[i]);
    }
}

static void attn_task(const void *p, int chunk, int n_chunks)
{
    const attn_args *a = p;
    const colo_attn_desc *d = &a->d;
    int hd = d->head_dim, group = d->n_head / d->n_kv_head, kv_dim = d->n_kv_head * hd;
    int q_stride = d->q_stride ? d->q_stride : d->n_head * hd;
    float *kr = colo_cpu_scratch(2, (size_t)hd * 2 * sizeof(float));
    if (!kr) {
        colo_cpu_task_fail(COLO_ENOMEM);
        return;
    }
    float *vr = kr + hd;
    float acc[hd];
    int64_t lo, hi;
    colo_chunk_range((int64_t)d->n_tokens * d->n_head, chunk, n_chunks, &lo, &hi);
    for (int64_t th = lo; th < hi; th++) {
        int t = (int)(th / d->n_head), h = (int)(th % d->n_head), kvh = h / group;
        int seq = d->tok_seq[t], pos = d->tok_pos[t];
        const float *q = a->q + (int64_t)t * q_stride + (int64_t)h * hd;
        float *o = a->out + (int64_t)t * d->n_head * hd + (int64_t)h * hd;
        if (pos < 0 || pos > d->max_pos) {
            memset(o, 0, (size_t)hd * sizeof(float));
            colo_cpu_task_fail(COLO_EINVAL);
            continue;
        }
        const int32_t *table = d->block_table + (int64_t)seq * d->max_blocks;
        float m = -INFINITY, l = 0;
        memset(acc, 0, sizeof acc);
        int j0 = d->window && pos >= d->window ? pos - d->window + 1 : 0;
        for (int j = j0; j <= pos; j++) {
            int64_t slot = (int64_t)table[j / d->block_size] * d->block_size + j % d->block_size;
            load_row(d->kv_type, a->k_cache, slot * kv_dim, kvh * hd, hd, kr);
            float s = colo_cpu_dot_f32(q, kr, hd) * d->scale;
            float m_new = s > m ? s : m;
            float corr = expf(m - m_new), w = expf(s - m_new);
            load_row(d->kv_type, a->v_cache, slot * kv_dim, kvh * hd, hd, vr);
            for (int i = 0; i < hd; i++)
                acc[i] = acc[i] * corr + w * vr[i];
            l = l * corr + w;
            m = m_new;
        }
        for (int i = 0; i < hd; i++)
            o[i] = acc[i] / l;
    }
}

colo_status colo_cpu_attention(colo_stream *s, const colo_attn_desc *d, const float *q, const void *k_cache,
                               const void *v_cache, float *out)
{
    attn_args a = {*d, q, k_cache, v_cache, out};
    int64_t pairs = (int64_t)d->n_tokens * d->n_head;
    int keys = d->window && d->window < d->max_pos + 1 ? d->window : d->max_pos + 1;
    int nc = colo_cpu_chunks(s, pairs, 4.0 * keys * d->head_dim);
    return colo_cpu_launch(s, attn_task, &a, sizeof a, nc);
}

typedef struct {
    const float *q, *k, *v;
    float *out;
    const int32_t *len;
    int qs, ks, vs, batch, seq, n_head, hd;
    float scale;
} bidir_args;

static void bidir_task(const void *p, int chunk, int n_chunks)
{
    const bidir_args *a = p;
    int hd = a->hd;
    float acc[hd];
    int64_t lo, hi;
    colo_chunk_range((int64_t)a->batch * a->seq * a->n_head, chunk, n_chunks, &lo, &hi);
    for (int64_t idx = lo; idx < hi; idx++) {
        int h = (int)(idx % a->n_head);
        int64_t row = idx / a->n_head; /* b * seq + i */
        int b = (int)(row / a->seq), i = (int)(row % a->seq);
        int len = a->len[b];
        float *o = a->out + row * a->n_head * hd + (int64_t)h * hd;
        if (len < 0 || len > a->seq) {
            memset(o, 0, (size_t)hd * sizeof(float));
            colo_cpu_task_fail(COLO_EINVAL);
            continue;
        }
        if (i >= len) {
            memset(o, 0, (size_t)hd * sizeof(float));
            continue;
        }
        const float *q = a->q + row * a->qs + (int64_t)h * hd;
        float m = -INFINITY, l = 0;
        memset(acc, 0, sizeof acc);
        for (int j = 0; j < len; j++) {
            int64_t kr = (int64_t)b * a->seq + j;
            float s = colo_cpu_dot_f32(q, a->k + kr * a->ks + (int64_t)h * hd, hd) * a->scale;
            float m_new = s > m ? s : m;
            float corr = expf(m - m_new), w = expf(s - m_new);
            const float *v = a->v + kr * a->vs + (int64_t)h * hd;
            for (int e = 0; e < hd; e++)
                acc[e] = acc[e] * corr + w * v[e];
            l = l * corr + w;
            m = m_new;
        }
        for (int e = 0; e < hd; e++)
            o[e] = acc[e] / l;
    }
}

colo_status colo_cpu_attention_bidir(colo_stream *s, const float *q, int q_stride, const float *k, int k_stride,
                                     const float *v, int v_stride, float *out, const int32_t *len, int batch,
                                     int seq, int n_head, int head_dim, float scale)
{
    int hd = n_head * head_dim;
    bidir_args a = {q, k, v, out, len, q_stride ? q_stride : hd, k_stride ? k_stride : hd,
                    v_stride ? v_stride : hd, batch, seq, n_head, head_dim, scale};
    int64_t n = (int64_t)batch * seq * n_head;
    return colo_cpu_launch(s, bidir_task, &a, sizeof a, colo_cpu_chunks(s, n, 4.0 * seq * head_dim));
}
