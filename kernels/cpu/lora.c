/* Adapters' low-rank updates (LoRA), each row of a batch with its own
 * adapter: y_i += scale * B (A x_i). A row is computed by one chunk, in one
 * fixed order (the rank's dot products, then the rank's rows of B added in
 * turn), so its bits depend on its input and adapter alone, whichever rows
 * it is computed with. */
#include "kernels/cpu/cpu_kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define LORA_AVX2
#endif

/* Rows of one adapter computed together; slots grouped (more: row by row). */
#define LORA_GROUP 8
#define LORA_MAX_SLOTS 256

typedef struct {
    const float *x;
    const int32_t *row_slot;
    float *tmp;
    colo_lora_out out[COLO_LORA_MULTI_MAX]; /* y_stride resolved (not 0) */
    int n_out, m, x_stride, k, n_slots, max_rank;
} lora_args;

#ifdef LORA_AVX2
static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* t[j] (j < 4) = a's row j (a + j k) . x, k a multiple of 16, each summed
 * as colo_cpu_dot_f32 sums it (so the same bits); x read once for four. */
static void dot4(const float *a, const float *x, int k, float *t)
{
    __m256 s0[4], s1[4];
    for (int j = 0; j < 4; j++)
        s0[j] = s1[j] = _mm256_setzero_ps();
    for (int i = 0; i < k; i += 16) {
        __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
        for (int j = 0; j < 4; j++) {
            s0[j] = _mm256_fmadd_ps(_mm256_loadu_ps(a + (size_t)j * k + i), x0, s0[j]);
            s1[j] = _mm256_fmadd_ps(_mm256_loadu_ps(a + (size_t)j * k + i + 8), x1, s1[j]);
        }
    }
    for (int j = 0; j < 4; j++)
        t[j] = hsum8(_mm256_add_ps(s0[j], s1[j]));
}
#endif

/* t[r0..r1) = scale * (A's row r . x). */
static void dots(const lora_args *a, const colo_lora_slot *L, int r0, int r1, const float *x, float *t)
{
    if (L->a16) {
        for (int r = r0; r < r1; r++)
            t[r] = colo_cpu_dot_f16(L->a16 + (size_t)r * a->k, x, a->k) * L->scale;
        return;
    }
    int r = r0;
#ifdef LORA_AVX2
    if (a->k % 16 == 0)
        for (; r + 4 <= r1; r += 4) {
            dot4(L->a + (size_t)r * a->k, x, a->k, t + r);
            for (int j = 0; j < 4; j++)
                t[r + j] *= L->scale;
        }
#endif
    for (; r < r1; r++)
        t[r] = colo_cpu_dot_f32(L->a + (size_t)r * a->k, x, a->k) * L->scale;
}

/* y[j] (n) += t[j][r] * B's row r for r in turn, for nr rows (1 to 4):
 * each element a chain of fused multiply-adds, r by r; B read once for
 * the nr rows, y kept in registers over the rank. */
static inline __attribute__((always_inline)) void update_rows(const colo_lora_out *out, const colo_lora_slot *L,
                                                              float *const *y, const float *const *t, const int nr)
{
    int o = 0;
#ifdef LORA_AVX2
    for (; o + 16 <= out->n; o += 16) {
        __m256 c0[4], c1[4];
        for (int j = 0; j < nr; j++)
            c0[j] = _mm256_loadu_ps(y[j] + o), c1[j] = _mm256_loadu_ps(y[j] + o + 8);
        for (int r = 0; r < L->rank; r++) {
            size_t at = (size_t)r * L->b_stride + o;
            __m256 b0, b1;
            if (L->b16) {
                b0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(L->b16 + at)));
                b1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(L->b16 + at + 8)));
            } else {
                b0 = _mm256_loadu_ps(L->b + at), b1 = _mm256_loadu_ps(L->b + at + 8);
            }
            for (int j = 0; j < nr; j++) {
                __m256 tv = _mm256_broadcast_ss(t[j] + r);
                c0[j] = _mm256_fmadd_ps(tv, b0, c0[j]), c1[j] = _mm256_fmadd_ps(tv, b1, c1[j]);
            }
        }
        for (int j = 0; j < nr; j++)
            _mm256_storeu_ps(y[j] + o, c0[j]), _mm256_storeu_ps(y[j] + o + 8, c1[j]);
    }
#endif
    for (; o < out->n; o++)
        for (int j = 0; j < nr; j++)
            for (int r = 0; r < L->rank; r++) {
                size_t at = (size_t)r * L->b_stride + o;
                float b = L->b16 ? colo_fp16_to_f32(L->b16[at]) : L->b[at];
                y[j][o] = __builtin_fmaf(t[j][r], b, y[j][o]);
            }
}

/* Output q's adapter of slot sl, NULL where a row of it is left alone. */
static const colo_lora_slot *slot_of(const lora_args *a, int q, int sl)
{
    if (sl < 0 || sl >= a->n_slots)
        return NULL;
    const colo_lora_slot *L = &a->out[q].slots[sl];
    bool f32 = L->a && L->b, f16 = L->a16 && L->b16;
    return (f32 || f16) && L->rank > 0 && L->rank <= a->max_rank ? L : NULL;
}

/* Rows rows[0..n), all of adapter L in output o: each row's rank dot
 * products with A, then its rank rows of B added in turn; A's rows are
 * read four at a time for all the rows, B's once for each four rows. */
static void rows_update_one(const lora_args *a, const colo_lora_out *o, const colo_lora_slot *L, const int32_t *rows,
                            int n)
{
    float *y[LORA_GROUP];
    const float *t[LORA_GROUP];
    for (int r = 0; r < L->rank; r += 4) {
        int r1 = r + 4 < L->rank ? r + 4 : L->rank;
        for (int j = 0; j < n; j++)
            dots(a, L, r, r1, a->x + (size_t)rows[j] * a->x_stride, a->tmp + (size_t)rows[j] * a->max_rank);
    }
    for (int j = 0; j < n; j++)
        y[j] = o->y + (size_t)rows[j] * o->y_stride, t[j] = a->tmp + (size_t)rows[j] * a->max_rank;
    int j = 0;
    for (; j + 4 <= n; j += 4)
        update_rows(o, L, y + j, t + j, 4);
    for (; j < n; j++)
        update_rows(o, L, y + j, t + j, 1);
}

/* Rows rows[0..n), all of slot sl, in each output in turn. */
static void rows_update(const lora_args *a, int sl, const int32_t *rows, int n)
{
    for (int q = 0; q < a->n_out; q++) {
        const colo_lora_slot *L = slot_of(a, q, sl);
        if (L)
            rows_update_one(a, &a->out[q], L, rows, n);
    }
}

/* Whether any output has an adapter in slot sl. */
static bool slot_used(const lora_args *a, int sl)
{
    for (int q = 0; q < a->n_out; q++)
        if (slot_of(a, q, sl))
            return true;
    return false;
}

/* The rows in the order of their slots (each slot's in batch order), cut
 * into chunks there, so that a chunk runs the rows of one adapter
 * together, LORA_GROUP at a time: an adapter is read from memory once per
 * chunk rather than once per row. Past LORA_MAX_SLOTS slots, one row at a
 * time in batch order. */
static void lora_task(const void *p, int chunk, int n_chunks)
{
    const lora_args *a = p;
    int64_t lo, hi;
    if (a->n_slots > LORA_MAX_SLOTS) {
        colo_chunk_range(a->m, chunk, n_chunks, &lo, &hi);
        for (int32_t i = (int32_t)lo; i < hi; i++)
            if (slot_used(a, a->row_slot[i]))
                rows_update(a, a->row_slot[i], &i, 1);
        return;
    }
    int count[LORA_MAX_SLOTS] = {0};
    bool used[LORA_MAX_SLOTS];
    for (int sl = 0; sl < a->n_slots; sl++)
        used[sl] = slot_used(a, sl);
    int64_t total = 0;
    for (int i = 0; i < a->m; i++)
        if (a->row_slot[i] >= 0 && a->row_slot[i] < a->n_slots && used[a->row_slot[i]])
            count[a->row_slot[i]]++, total++;
    colo_chunk_range(total, chunk, n_chunks, &lo, &hi);
    int64_t off = 0;
    for (int sl = 0; sl < a->n_slots && off < hi; off += count[sl], sl++) {
        if (!count[sl] || off + count[sl] <= lo)
            continue;
        /* this slot's rows from its skip-th, take of them */
        int64_t skip = lo > off ? lo - off : 0, take = (hi < off + count[sl] ? hi - off : count[sl]) - skip;
        int32_t rows[LORA_GROUP];
        int nr = 0;
        for (int32_t i = 0; i < a->m && take > 0; i++) {
            if (a->row_slot[i] != sl)
                continue;
            if (skip > 0) {
                skip--;
                continue;
            }
            rows[nr++] = i, take--;
            if (nr == LORA_GROUP || !take) {
                rows_update(a, sl, rows, nr);
                nr = 0;
            }
        }
    }
}

colo_status colo_cpu_lora(colo_stream *s, const float *x, int x_stride, int m, int k, const colo_lora_out *out,
                          int n_out, const int32_t *row_slot, int n_slots, float *tmp, int max_rank)
{
    lora_args a = {.x = x, .row_slot = row_slot, .tmp = tmp, .n_out = n_out, .m = m,
                   .x_stride = x_stride ? x_stride : k, .k = k, .n_slots = n_slots, .max_rank = max_rank};
    double cost = 0;
    for (int q = 0; q < n_out; q++) {
        a.out[q] = out[q];
        if (!a.out[q].y_stride)
            a.out[q].y_stride = out[q].n;
        cost += 4.0 * (k + out[q].n) * 16;
    }
    return colo_cpu_launch(s, lora_task, &a, sizeof a, colo_cpu_chunks(s, m, cost));
}
