/* Adapters' low-rank updates (LoRA), each row of a batch with its own
 * adapter: y_i += scale * B (A x_i). A row is computed by one chunk, in one
 * fixed order (the rank's dot products, then the rank's rows of B added in
 * turn), so its bits depend on its input and adapter alone. */
#include "kernels/cpu/cpu_kernels.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LORA_AVX2
#endif

typedef struct {
    const float *x;
    float *y;
    const int32_t *row_slot;
    const colo_lora_slot *slots;
    float *tmp;
    int m, x_stride, y_stride, k, n, n_slots, max_rank;
} lora_args;

/* y (n) += t * b (n). */
static void axpy(float *y, float t, const float *b, int n)
{
    int o = 0;
#ifdef LORA_AVX2
    __m256 vt = _mm256_set1_ps(t);
    for (; o + 8 <= n; o += 8)
        _mm256_storeu_ps(y + o, _mm256_fmadd_ps(vt, _mm256_loadu_ps(b + o), _mm256_loadu_ps(y + o)));
#endif
    for (; o < n; o++)
        y[o] = __builtin_fmaf(t, b[o], y[o]);
}

static void lora_task(const void *p, int chunk, int n_chunks)
{
    const lora_args *a = p;
    int64_t lo, hi;
    colo_chunk_range(a->m, chunk, n_chunks, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        int sl = a->row_slot[i];
        if (sl < 0 || sl >= a->n_slots)
            continue;
        const colo_lora_slot *L = &a->slots[sl];
        if (!L->a || !L->b || L->rank <= 0 || L->rank > a->max_rank)
            continue;
        const float *x = a->x + (size_t)i * a->x_stride;
        float *t = a->tmp + (size_t)i * a->max_rank, *y = a->y + (size_t)i * a->y_stride;
        for (int r = 0; r < L->rank; r++)
            t[r] = colo_cpu_dot_f32(L->a + (size_t)r * a->k, x, a->k) * L->scale;
        for (int r = 0; r < L->rank; r++)
            axpy(y, t[r], L->b + (size_t)r * L->b_stride, a->n);
    }
}

colo_status colo_cpu_lora(colo_stream *s, const float *x, int x_stride, int m, int k, float *y, int y_stride, int n,
                          const int32_t *row_slot, const colo_lora_slot *slots, int n_slots, float *tmp,
                          int max_rank)
{
    lora_args a = {x, y, row_slot, slots, tmp, m, x_stride ? x_stride : k, y_stride ? y_stride : n, k, n, n_slots,
                   max_rank};
    return colo_cpu_launch(s, lora_task, &a, sizeof a, colo_cpu_chunks(s, m, 4.0 * (k + n) * 16));
}
