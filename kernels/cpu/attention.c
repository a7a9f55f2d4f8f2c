/* Attention on the CPU: paged causal GQA over a KV cache, and bidirectional
 * attention with padding for encoders.
 *
 * Paged attention: one work item is one token, one KV head and one segment
 * of that token's keys. The item serves every query head of the KV head's
 * group at once, so each K and V row is read and converted from F16 once
 * per group rather than once per query head. Keys go in tiles: a tile's K
 * rows are converted to F32 scratch, scored against each query head, the
 * scores exponentiated eight at a time (AVX2) with an online softmax at tile
 * granularity, and the tile's V rows accumulated with the weights. In a
 * prefill, up to ATTN_BLOCK consecutive tokens whose keys start at the same
 * key share each tile, converted once for them all (attend_block), and
 * with AVX2 the query heads of a group are scored two at a time, each K
 * load feeding both (each score the bits it gets alone).
 * Q8_0 K rows are expanded into the F32 tile like F16 ones (once for the
 * whole group: scoring blocks in place would convert each key once per
 * head); Q8_0 V rows are read in place, a block's int8 values weighted by
 * the key's weight times the block's d (AVX2). Q4_0 rows, and Q8_0 without
 * AVX2, go through the F32 tiles for K and V.
 * A token's keys are split into segments that run on different workers
 * (flash-decoding); their partial results (max, sum of weights, weighted
 * values) are merged by a second op, in segment order. How a token's keys
 * are split depends on how many keys it has and nothing else (segments of
 * ATTN_SEGMENT keys, longer past ATTN_MAX_SEGMENTS of them), so a token's
 * result is the same bits whatever else is in the step: other sequences,
 * a prefill beside a decode, the rest of its own prompt (the last tokens of
 * a prompt computed after a prefix-cache hit get the bits the whole prompt
 * in one step gives them). A token of one segment gets the bits of the
 * unsplit computation (its merge weighs it by exactly 1). */
#include "kernels/cpu/cpu_kernels.h"

#include <math.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define ATTN_AVX2 1
#endif

/* Floats of one converted K (or V) tile: tile keys = this / head_dim. */
#define ATTN_TILE_FLOATS 2048
/* Keys of a segment, and the most segments a token's keys are split into
 * (past ATTN_SEGMENT x ATTN_MAX_SEGMENTS keys, segments grow by
 * ATTN_SEGMENT). */
#define ATTN_SEGMENT 256
#define ATTN_MAX_SEGMENTS 8

/* The keys of each segment of a token with n keys (a function of n alone). */
static inline int segment_len(int n)
{
    int per = (n + ATTN_MAX_SEGMENTS - 1) / ATTN_MAX_SEGMENTS;
    per = (per + ATTN_SEGMENT - 1) / ATTN_SEGMENT * ATTN_SEGMENT;
    return per > ATTN_SEGMENT ? per : ATTN_SEGMENT;
}

typedef struct {
    colo_attn_desc d;
    const float *q;
    const void *k_cache, *v_cache;
    float *out;
    float *part; /* n_split > 1: (n_tokens, n_kv_head, n_split, group, head_dim + 2) partials */
    int n_split;
} attn_args;

/* dst (n floats) = the n elements of type t (F16 or a block type) at src. */
static inline void load_row(colo_dtype t, const void *src, int n, float *dst)
{
    if (t != COLO_F16) {
        colo_dequantize_row(t, src, dst, n);
        return;
    }
    const uint16_t *h = src;
    int i = 0;
#ifdef ATTN_AVX2
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
#endif
    for (; i < n; i++)
        dst[i] = colo_fp16_to_f32(h[i]);
}

#ifdef ATTN_AVX2
/* e^x for x <= 0 (scores minus their running max), relative error ~1e-7;
 * below -87.3 the result is 0 or a tiny normal, never NaN. */
static inline __m256 exp256(__m256 x)
{
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
    __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(5.0000001201e-1f));
    __m256 x2 = _mm256_mul_ps(x, x);
    p = _mm256_fmadd_ps(p, x2, _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

static inline float hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The sums of each of a0..a7, as one vector. */
static inline __m256 hsum256x8(__m256 a0, __m256 a1, __m256 a2, __m256 a3, __m256 a4, __m256 a5, __m256 a6,
                               __m256 a7)
{
    __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a4, a5), _mm256_hadd_ps(a6, a7));
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* s[j] = q . k[j] for j < nt, eight keys at a time (hd % 8 == 0). */
static void score_tile8(const float *q, const float *const *k, int nt, int hd, float *s)
{
    int j = 0;
    for (; j + 8 <= nt; j += 8) {
        const float *k0 = k[j], *k1 = k[j + 1], *k2 = k[j + 2], *k3 = k[j + 3], *k4 = k[j + 4], *k5 = k[j + 5],
                    *k6 = k[j + 6], *k7 = k[j + 7];
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
        for (int i = 0; i < hd; i += 8) {
            __m256 qv = _mm256_loadu_ps(q + i);
            a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + i), a0);
            a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k1 + i), a1);
            a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k2 + i), a2);
            a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k3 + i), a3);
            a4 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k4 + i), a4);
            a5 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k5 + i), a5);
            a6 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k6 + i), a6);
            a7 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k7 + i), a7);
        }
        _mm256_storeu_ps(s + j, hsum256x8(a0, a1, a2, a3, a4, a5, a6, a7));
    }
    for (; j < nt; j++) {
        __m256 a = _mm256_setzero_ps();
        for (int i = 0; i < hd; i += 8)
            a = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k[j] + i), a);
        s[j] = hsum256(a);
    }
}

/* score_tile8 for two queries (two heads of a group) against the same
 * keys: each K load feeds both, four keys at a time. Every score is the
 * bits score_tile8 gives it: the same FMAs over the head's dims, and for
 * the keys of whole groups of 8 the same sum of lanes as hsum256x8 (its
 * first two hadds, then the two halves added), for the rest hsum256. */
static void score_tile8_x2(const float *q0, const float *q1, const float *const *k, int nt, int hd, float *s0,
                           float *s1)
{
    int j = 0, n8 = nt & ~7;
    for (; j < n8; j += 4) {
        const float *k0 = k[j], *k1 = k[j + 1], *k2 = k[j + 2], *k3 = k[j + 3];
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
        for (int i = 0; i < hd; i += 8) {
            __m256 x0 = _mm256_loadu_ps(q0 + i), x1 = _mm256_loadu_ps(q1 + i), kv;
            kv = _mm256_loadu_ps(k0 + i), a0 = _mm256_fmadd_ps(x0, kv, a0), b0 = _mm256_fmadd_ps(x1, kv, b0);
            kv = _mm256_loadu_ps(k1 + i), a1 = _mm256_fmadd_ps(x0, kv, a1), b1 = _mm256_fmadd_ps(x1, kv, b1);
            kv = _mm256_loadu_ps(k2 + i), a2 = _mm256_fmadd_ps(x0, kv, a2), b2 = _mm256_fmadd_ps(x1, kv, b2);
            kv = _mm256_loadu_ps(k3 + i), a3 = _mm256_fmadd_ps(x0, kv, a3), b3 = _mm256_fmadd_ps(x1, kv, b3);
        }
        __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
        __m256 w = _mm256_hadd_ps(_mm256_hadd_ps(b0, b1), _mm256_hadd_ps(b2, b3));
        _mm_storeu_ps(s0 + j, _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1)));
        _mm_storeu_ps(s1 + j, _mm_add_ps(_mm256_castps256_ps128(w), _mm256_extractf128_ps(w, 1)));
    }
    for (; j < nt; j++) {
        __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
        for (int i = 0; i < hd; i += 8) {
            __m256 kv = _mm256_loadu_ps(k[j] + i);
            a = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + i), kv, a);
            b = _mm256_fmadd_ps(_mm256_loadu_ps(q1 + i), kv, b);
        }
        s0[j] = hsum256(a), s1[j] = hsum256(b);
    }
}

/* For NH heads (1..4) of one group: acc[h] (hd) = acc[h] * corr[h] +
 * sum_j w[h][j] v[j], v[j] F16 rows read directly (f32: F32 rows, the same
 * values converted before: the same bits); hd % 16 == 0. w[h] is w + h *
 * w_stride. Each V chunk is converted once for all NH heads. */
static inline __attribute__((always_inline)) void accumulate_f16(int NH, bool f32, float *acc, const float *corr,
                                                                 const float *w, int w_stride,
                                                                 const void *const *v, int nt, int hd)
{
    for (int i = 0; i < hd; i += 16) {
        __m256 a[4][2];
        for (int h = 0; h < NH; h++) {
            __m256 c = _mm256_set1_ps(corr[h]);
            a[h][0] = _mm256_mul_ps(_mm256_loadu_ps(acc + (size_t)h * hd + i), c);
            a[h][1] = _mm256_mul_ps(_mm256_loadu_ps(acc + (size_t)h * hd + i + 8), c);
        }
        for (int j = 0; j < nt; j++) {
            const uint16_t *vh = v[j];
            const float *vf = v[j];
            __m256 v0 = f32 ? _mm256_loadu_ps(vf + i) : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vh + i)));
            __m256 v1 = f32 ? _mm256_loadu_ps(vf + i + 8)
                            : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vh + i + 8)));
            for (int h = 0; h < NH; h++) {
                __m256 wj = _mm256_broadcast_ss(w + (size_t)h * w_stride + j);
                a[h][0] = _mm256_fmadd_ps(wj, v0, a[h][0]);
                a[h][1] = _mm256_fmadd_ps(wj, v1, a[h][1]);
            }
        }
        for (int h = 0; h < NH; h++) {
            _mm256_storeu_ps(acc + (size_t)h * hd + i, a[h][0]);
            _mm256_storeu_ps(acc + (size_t)h * hd + i + 8, a[h][1]);
        }
    }
}

/* 8 int8 at p as floats. */
static inline __m256 cvt_q8x8(const int8_t *p)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* As accumulate_f16, v[j] Q8_0 rows read in place (hd % 32 == 0): a
 * weight is multiplied by the block's d once per 16 elements. */
static inline __attribute__((always_inline)) void accumulate_q8(int NH, float *acc, const float *corr,
                                                                const float *w, int w_stride,
                                                                const colo_blk_q8_0 *const *v, int nt, int hd)
{
    for (int i = 0; i < hd; i += 16) {
        __m256 a[4][2];
        for (int h = 0; h < NH; h++) {
            __m256 c = _mm256_set1_ps(corr[h]);
            a[h][0] = _mm256_mul_ps(_mm256_loadu_ps(acc + (size_t)h * hd + i), c);
            a[h][1] = _mm256_mul_ps(_mm256_loadu_ps(acc + (size_t)h * hd + i + 8), c);
        }
        for (int j = 0; j < nt; j++) {
            const colo_blk_q8_0 *vb = v[j] + i / 32;
            float dj = _cvtsh_ss(vb->d);
            __m256 v0 = cvt_q8x8(vb->qs + i % 32), v1 = cvt_q8x8(vb->qs + i % 32 + 8);
            for (int h = 0; h < NH; h++) {
                __m256 wj = _mm256_set1_ps(w[(size_t)h * w_stride + j] * dj);
                a[h][0] = _mm256_fmadd_ps(wj, v0, a[h][0]);
                a[h][1] = _mm256_fmadd_ps(wj, v1, a[h][1]);
            }
        }
        for (int h = 0; h < NH; h++) {
            _mm256_storeu_ps(acc + (size_t)h * hd + i, a[h][0]);
            _mm256_storeu_ps(acc + (size_t)h * hd + i + 8, a[h][1]);
        }
    }
}

static void accumulate_group_q8(int group, float *acc, const float *corr, const float *w, int w_stride,
                                const colo_blk_q8_0 *const *v, int nt, int hd)
{
    for (int h = 0; h < group;) {
        float *ah = acc + (size_t)h * hd;
        const float *wh = w + (size_t)h * w_stride;
        switch (group - h) {
        case 1: accumulate_q8(1, ah, corr + h, wh, w_stride, v, nt, hd); h += 1; break;
        case 2: accumulate_q8(2, ah, corr + h, wh, w_stride, v, nt, hd); h += 2; break;
        case 3: accumulate_q8(3, ah, corr + h, wh, w_stride, v, nt, hd); h += 3; break;
        default: accumulate_q8(4, ah, corr + h, wh, w_stride, v, nt, hd); h += 4; break;
        }
    }
}

/* accumulate_f16 for every head of a group, four at a time. */
#define ACCUMULATE_GROUP(name, f32)                                                                                    \
    static void name(int group, float *acc, const float *corr, const float *w, int w_stride,                        \
                     const void *const *v, int nt, int hd)                                                          \
    {                                                                                                                  \
        for (int h = 0; h < group;) {                                                                                  \
            float *ah = acc + (size_t)h * hd;                                                                          \
            const float *wh = w + (size_t)h * w_stride;                                                                \
            switch (group - h) {                                                                                       \
            case 1: accumulate_f16(1, f32, ah, corr + h, wh, w_stride, v, nt, hd); h += 1; break;                      \
            case 2: accumulate_f16(2, f32, ah, corr + h, wh, w_stride, v, nt, hd); h += 2; break;                      \
            case 3: accumulate_f16(3, f32, ah, corr + h, wh, w_stride, v, nt, hd); h += 3; break;                      \
            default: accumulate_f16(4, f32, ah, corr + h, wh, w_stride, v, nt, hd); h += 4; break;                     \
            }                                                                                                          \
        }                                                                                                              \
    }
ACCUMULATE_GROUP(accumulate_group_f16, false)
ACCUMULATE_GROUP(accumulate_group_f32, true) /* F16 rows converted once for several tokens */
#endif

/* max of x[0..n), n >= 1. */
static float tile_max(const float *x, int n)
{
    int i = 0;
    float mx = x[0];
#ifdef ATTN_AVX2
    if (n >= 8) {
        __m256 v = _mm256_loadu_ps(x);
        for (i = 8; i + 8 <= n; i += 8)
            v = _mm256_max_ps(v, _mm256_loadu_ps(x + i));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        mx = _mm_cvtss_f32(h);
    }
#endif
    for (; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    return mx;
}

/* x[i] = e^(x[i] - m) for i < n; returns their sum. */
static float exp_shift_sum(float *x, int n, float m)
{
    int i = 0;
    float sum = 0;
#ifdef ATTN_AVX2
    __m256 vm = _mm256_set1_ps(m), vs = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(x + i, e);
        vs = _mm256_add_ps(vs, e);
    }
    sum = hsum256(vs);
#endif
    for (; i < n; i++)
        sum += x[i] = expf(x[i] - m);
    return sum;
}

/* s[j] = q . k[j] for j < nt (rows of hd floats). */
static void score_tile(const float *q, const float *const *k, int nt, int hd, float *s)
{
    for (int j = 0; j < nt; j++) {
        const float *kr = k[j];
        int i = 0;
        float sum = 0;
#ifdef ATTN_AVX2
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        for (; i + 16 <= hd; i += 16) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(kr + i), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(kr + i + 8), a1);
        }
        for (; i + 8 <= hd; i += 8)
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(kr + i), a0);
        sum = hsum256(_mm256_add_ps(a0, a1));
#endif
        for (; i < hd; i++)
            sum += q[i] * kr[i];
        s[j] = sum;
    }
}

/* acc (hd) = acc * corr + sum_j w[j] v[j] (rows of hd floats). */
static void accumulate_tile(float *acc, float corr, const float *w, const float *const *v, int nt, int hd)
{
    int i = 0;
#ifdef ATTN_AVX2
    __m256 c = _mm256_set1_ps(corr);
    for (; i + 16 <= hd; i += 16) {
        __m256 a0 = _mm256_mul_ps(_mm256_loadu_ps(acc + i), c), a1 = _mm256_mul_ps(_mm256_loadu_ps(acc + i + 8), c);
        for (int j = 0; j < nt; j++) {
            __m256 wj = _mm256_broadcast_ss(w + j);
            a0 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(v[j] + i), a0);
            a1 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(v[j] + i + 8), a1);
        }
        _mm256_storeu_ps(acc + i, a0);
        _mm256_storeu_ps(acc + i + 8, a1);
    }
#endif
    for (; i < hd; i++) {
        float a = acc[i] * corr;
        for (int j = 0; j < nt; j++)
            a += w[j] * v[j][i];
        acc[i] = a;
    }
}

/* s[h * tile + j] = q[h] . k[j] for the group's heads h (q: group rows of
 * hd) and j < nt; with AVX2, two heads at a time (each score the bits
 * score_tile8 gives it alone). */
static void score_group(const float *q, int group, const float *const *k, int nt, int hd, float *s, int tile)
{
    int h = 0;
#ifdef ATTN_AVX2
    if (hd % 8 == 0) {
        for (; h + 1 < group; h += 2)
            score_tile8_x2(q + (size_t)h * hd, q + (size_t)(h + 1) * hd, k, nt, hd, s + (size_t)h * tile,
                           s + (size_t)(h + 1) * tile);
        for (; h < group; h++)
            score_tile8(q + (size_t)h * hd, k, nt, hd, s + (size_t)h * tile);
    }
#endif
    for (; h < group; h++)
        score_tile(q + (size_t)h * hd, k, nt, hd, s + (size_t)h * tile);
}

/* Tokens attended together over the same K and V tiles (a prefill's): each
 * tile's rows are converted once for all of them. */
#define ATTN_BLOCK 8

/* Attention of the group query heads of tokens tok[0..nb) (one sequence)
 * over keys [ja, jb[b]) of KV head kvh: leaves each token's heads' running
 * max m[b][h], sum of weights l[b][h] and weighted values acc[b][h * hd
 * ..]; m = -inf, l = 0 for a token with ja >= jb[b]. Tiles of keys start
 * at ja for every token, and each token's arithmetic is the same whatever
 * tokens come with it (its last tile is cut at its own jb), so a token's
 * result is the same bits alone or in a block; with several tokens F16 V
 * rows are converted once into an F32 tile, whose values are those the
 * single token's in-place reads convert to. */
static colo_status attend_block(const attn_args *a, const int *tok, int nb, int kvh, int ja, const int *jb,
                                float *const *m, float *const *l, float *const *acc)
{
    const colo_attn_desc *d = &a->d;
    int hd = d->head_dim, group = d->n_head / d->n_kv_head, kv_dim = d->n_kv_head * hd;
    int q_stride = d->q_stride ? d->q_stride : d->n_head * hd;
    int tile = ATTN_TILE_FLOATS / hd;
    tile = tile < 8 ? 8 : tile > 64 ? 64 : tile;
    colo_dtype kv_t = d->kv_type;
    bool conv = kv_t != COLO_F32; /* rows go through F32 tiles unless read in place */
    /* fast: V rows (F16, Q8_0) are read in place; K rows are converted
     * once into the tile, which all the group's heads then score */
#ifdef ATTN_AVX2
    bool fast = (kv_t == COLO_F16 && hd % 16 == 0) || kv_t == COLO_Q8_0;
#else
    bool fast = false;
#endif
    bool v_tile = conv && (!fast || (nb > 1 && kv_t == COLO_F16)); /* V rows converted into vt */
    size_t floats = (size_t)nb * group * hd + (size_t)group * tile + (conv ? (size_t)tile * hd : 0) +
                    (v_tile ? (size_t)tile * hd : 0) + group;
    floats = (floats + 15) & ~(size_t)15; /* the row pointers after them stay aligned */
    float *qs = colo_cpu_scratch(2, floats * sizeof(float) + 2 * (size_t)tile * sizeof(float *));
    if (!qs)
        return COLO_ENOMEM;
    float *s = qs + (size_t)nb * group * hd, *kt = s + (size_t)group * tile;
    float *vt = kt + (conv ? (size_t)tile * hd : 0);
    /* (group) each head's rescale of this tile, after the tiles */
    float *corr = vt + (v_tile ? (size_t)tile * hd : 0);
    const float **kp = (const float **)(qs + floats), **vp = kp + tile;
    int jmax = ja;
    for (int b = 0; b < nb; b++) {
        const float *q = a->q + (int64_t)tok[b] * q_stride + (int64_t)kvh * group * hd;
        float *qb = qs + (size_t)b * group * hd;
        for (int h = 0; h < group; h++) {
            for (int i = 0; i < hd; i++)
                qb[h * hd + i] = q[h * hd + i] * d->scale;
            m[b][h] = -INFINITY, l[b][h] = 0;
        }
        memset(acc[b], 0, (size_t)group * hd * sizeof(float));
        jmax = jb[b] > jmax ? jb[b] : jmax;
    }
    const int32_t *table = d->block_table + (int64_t)d->tok_seq[tok[0]] * d->max_blocks;
    int64_t row_bytes = (int64_t)colo_dtype_row_bytes(kv_t, kv_dim);
    int64_t head_bytes = (int64_t)colo_dtype_row_bytes(kv_t, hd);
    const char *kc = a->k_cache, *vc = a->v_cache;
    /* Byte offsets of this tile's and the next tile's KV rows (this head's
     * piece): block and slot advance by counting, no division per key. */
    int64_t rows_buf[2][64], *rows = rows_buf[0], *next = rows_buf[1];
    int blk = ja / d->block_size, off = ja % d->block_size;
    for (int j = 0; j < tile && ja + j < jmax; j++) {
        rows[j] = ((int64_t)table[blk] * d->block_size + off) * row_bytes + (int64_t)kvh * head_bytes;
        if (++off == d->block_size)
            off = 0, blk++;
    }
    for (int j0 = ja; j0 < jmax; j0 += tile) {
        int nt = jmax - j0 < tile ? jmax - j0 : tile;
        /* The next tile's rows are requested from memory while this one is
         * computed: KV rows of long sequences come from DRAM, one head's
         * piece of each row at a time. */
        for (int j = 0; j < tile && j0 + tile + j < jmax; j++) {
            next[j] = ((int64_t)table[blk] * d->block_size + off) * row_bytes + (int64_t)kvh * head_bytes;
            if (++off == d->block_size)
                off = 0, blk++;
            for (int64_t b = 0; b < head_bytes; b += 64) {
                __builtin_prefetch(kc + next[j] + b);
                __builtin_prefetch(vc + next[j] + b);
            }
        }
        for (int j = 0; j < nt; j++) {
            int64_t row = rows[j];
            if (!conv) {
                kp[j] = (const float *)(kc + row), vp[j] = (const float *)(vc + row);
                continue;
            }
            load_row(kv_t, kc + row, hd, kt + (size_t)j * hd);
            kp[j] = kt + (size_t)j * hd;
            if (v_tile) {
                load_row(kv_t, vc + row, hd, vt + (size_t)j * hd);
                vp[j] = vt + (size_t)j * hd;
            } else {
                vp[j] = (const float *)(vc + row);
            }
        }
        int64_t *t_rows = rows;
        rows = next, next = t_rows;
        for (int b = 0; b < nb; b++) {
            int ntb = jb[b] - j0 < nt ? jb[b] - j0 : nt; /* the token's keys in this tile */
            if (ntb <= 0)
                continue;
            score_group(qs + (size_t)b * group * hd, group, kp, ntb, hd, s, tile);
            for (int h = 0; h < group; h++) {
                float *sh = s + (size_t)h * tile;
                float mt = tile_max(sh, ntb);
                float m_new = mt > m[b][h] ? mt : m[b][h];
                corr[h] = m[b][h] == -INFINITY ? 0.0f : expf(m[b][h] - m_new);
                l[b][h] = l[b][h] * corr[h] + exp_shift_sum(sh, ntb, m_new);
                m[b][h] = m_new;
                if (!fast)
                    accumulate_tile(acc[b] + (size_t)h * hd, corr[h], sh, vp, ntb, hd);
            }
#ifdef ATTN_AVX2
            if (fast && kv_t == COLO_Q8_0)
                accumulate_group_q8(group, acc[b], corr, s, tile, (const colo_blk_q8_0 *const *)vp, ntb, hd);
            else if (fast && v_tile)
                accumulate_group_f32(group, acc[b], corr, s, tile, (const void *const *)vp, ntb, hd);
            else if (fast)
                accumulate_group_f16(group, acc[b], corr, s, tile, (const void *const *)vp, ntb, hd);
#endif
        }
    }
    return COLO_OK;
}

/* Token t's keys: [*j0, *j1) (its window, or 0..pos). False for a position
 * outside [0, max_pos]. */
static bool token_keys(const colo_attn_desc *d, int t, int *j0, int *j1)
{
    int pos = d->tok_pos[t];
    if (pos < 0 || pos > d->max_pos)
        return false;
    *j0 = d->window && pos >= d->window ? pos - d->window + 1 : 0;
    *j1 = pos + 1;
    return true;
}

/* Item it's keys [*ja, *jb): false, with its outputs written, when it has
 * none to attend (a token refused: the task fails too). */
static bool item_keys(const attn_args *a, int64_t it, int *ja, int *jb)
{
    const colo_attn_desc *d = &a->d;
    int hd = d->head_dim, group = d->n_head / d->n_kv_head, S = a->n_split;
    int sp = (int)(it % S), t = (int)(it / S / d->n_kv_head), kvh = (int)(it / S % d->n_kv_head);
    float *part = S > 1 ? a->part + it * (int64_t)group * (hd + 2) : NULL;
    int j0, j1;
    if (!token_keys(d, t, &j0, &j1)) {
        if (part)
            for (int h = 0; h < group; h++)
                part[h] = -INFINITY, part[group + h] = 0;
        else
            memset(a->out + (int64_t)t * d->n_head * hd + (int64_t)kvh * group * hd, 0,
                   (size_t)group * hd * sizeof(float));
        colo_cpu_task_fail(COLO_EINVAL);
        return false;
    }
    int len = segment_len(j1 - j0);
    *ja = j0 + sp * len, *jb = *ja + len < j1 ? *ja + len : j1;
    if (*ja >= j1) { /* (part: S > 1) fewer segments than the longest token's */
        for (int h = 0; h < group; h++)
            part[h] = -INFINITY, part[group + h] = 0;
        return false;
    }
    return true;
}

/* Items its[0..nb) (tokens tok, one KV head, the same first key ja):
 * attended together, each into its partials or its output. False when
 * the task failed. */
static bool run_block(const attn_args *a, const int *tok, const int64_t *its, int nb, int kvh, int ja, const int *jb)
{
    const colo_attn_desc *d = &a->d;
    int hd = d->head_dim, group = d->n_head / d->n_kv_head;
    float *m[ATTN_BLOCK] = {0}, *l[ATTN_BLOCK] = {0}, *acc[ATTN_BLOCK] = {0}, *buf = NULL;
    /* Partials: m (group), l (group), then acc (group, hd); otherwise
     * acc, m and l in scratch, then acc / l is the output. */
    if (a->n_split == 1 && !(buf = colo_cpu_scratch(3, (size_t)nb * group * (hd + 2) * sizeof(float)))) {
        colo_cpu_task_fail(COLO_ENOMEM);
        return false;
    }
    for (int b = 0; b < nb; b++) {
        float *p = buf ? buf + (size_t)b * group * (hd + 2) : a->part + its[b] * (int64_t)group * (hd + 2);
        if (buf)
            acc[b] = p, m[b] = p + (size_t)group * hd, l[b] = m[b] + group;
        else
            m[b] = p, l[b] = p + group, acc[b] = p + 2 * group;
    }
    colo_status st = attend_block(a, tok, nb, kvh, ja, jb, m, l, acc);
    if (st != COLO_OK) {
        colo_cpu_task_fail(st);
        return false;
    }
    for (int b = 0; buf && b < nb; b++) {
        float *o = a->out + (int64_t)tok[b] * d->n_head * hd + (int64_t)kvh * group * hd;
        for (int h = 0; h < group; h++) {
            float inv = 1.0f / l[b][h];
            for (int i = 0; i < hd; i++)
                o[(size_t)h * hd + i] = acc[b][(size_t)h * hd + i] * inv;
        }
    }
    return true;
}

/* A chunk's items, by KV head and segment: consecutive tokens of one
 * sequence whose keys start at the same key are attended in blocks of up
 * to ATTN_BLOCK (a prefill's), the others one by one. */
static void attn_task(const void *p, int chunk, int n_chunks)
{
    const attn_args *a = p;
    const colo_attn_desc *d = &a->d;
    int64_t stride = (int64_t)d->n_kv_head * a->n_split, lo, hi;
    colo_chunk_range((int64_t)d->n_tokens * stride, chunk, n_chunks, &lo, &hi);
    for (int64_t g = 0; g < stride; g++) { /* g: KV head g / n_split, segment g % n_split */
        int kvh = (int)(g / a->n_split), nb = 0, ja0 = 0, tok[ATTN_BLOCK], jb[ATTN_BLOCK];
        int64_t its[ATTN_BLOCK];
        for (int64_t it = lo + ((g - lo % stride) % stride + stride) % stride; it < hi; it += stride) {
            int ja, jbt, t = (int)(it / stride);
            bool keys = item_keys(a, it, &ja, &jbt);
            if (nb && (!keys || ja != ja0 || nb == ATTN_BLOCK || d->tok_seq[t] != d->tok_seq[tok[0]])) {
                if (!run_block(a, tok, its, nb, kvh, ja0, jb))
                    return;
                nb = 0;
            }
            if (!keys)
                continue;
            ja0 = nb ? ja0 : ja;
            tok[nb] = t, jb[nb] = jbt, its[nb] = it, nb++;
        }
        if (nb && !run_block(a, tok, its, nb, kvh, ja0, jb))
            return;
    }
}

/* Merges the n_split partials of each (token, KV head) into out. */
static void attn_merge_task(const void *p, int chunk, int n_chunks)
{
    const attn_args *a = p;
    const colo_attn_desc *d = &a->d;
    int hd = d->head_dim, group = d->n_head / d->n_kv_head, S = a->n_split;
    int64_t lo, hi;
    colo_chunk_range((int64_t)d->n_tokens * d->n_head, chunk, n_chunks, &lo, &hi);
    for (int64_t th = lo; th < hi; th++) {
        int64_t pair = th / group;
        int h = (int)(th % group);
        const float *part = a->part + pair * S * (int64_t)group * (hd + 2);
        float *o = a->out + th * hd;
        float mx = -INFINITY, l = 0;
        for (int sp = 0; sp < S; sp++) {
            float ms = part[(int64_t)sp * group * (hd + 2) + h];
            mx = ms > mx ? ms : mx;
        }
        memset(o, 0, (size_t)hd * sizeof(float));
        if (mx == -INFINITY) /* a token refused by attn_task */
            continue;
        for (int sp = 0; sp < S; sp++) {
            const float *ps = part + (int64_t)sp * group * (hd + 2);
            if (ps[h] == -INFINITY)
                continue;
            float w = expf(ps[h] - mx);
            l += w * ps[group + h];
            const float *acc = ps + 2 * group + (int64_t)h * hd;
            for (int i = 0; i < hd; i++)
                o[i] += w * acc[i];
        }
        float inv = 1.0f / l;
        for (int i = 0; i < hd; i++)
            o[i] *= inv;
    }
}

colo_status colo_cpu_attention(colo_stream *s, const colo_attn_desc *d, const float *q, const void *k_cache,
                               const void *v_cache, float *out)
{
    int group = d->n_head / d->n_kv_head;
    attn_args a = {*d, q, k_cache, v_cache, out, NULL, 1};
    int64_t pairs = (int64_t)d->n_tokens * d->n_kv_head;
    int keys = d->window && d->window < d->max_pos + 1 ? d->window : d->max_pos + 1;
    /* at least every token's segments (a token with fewer keys may have more, shorter ones) */
    a.n_split = (keys + ATTN_SEGMENT - 1) / ATTN_SEGMENT;
    if (a.n_split > ATTN_MAX_SEGMENTS)
        a.n_split = ATTN_MAX_SEGMENTS;
    double cost = 4.0 * keys / a.n_split * d->head_dim * group;
    if (a.n_split > 1) {
        size_t bytes = (size_t)pairs * a.n_split * group * (d->head_dim + 2) * sizeof(float);
        if (!(a.part = colo_cpu_stream_scratch(s, bytes)))
            return COLO_ENOMEM;
    }
    colo_status st = colo_cpu_launch(s, attn_task, &a, sizeof a, colo_cpu_chunks(s, pairs * a.n_split, cost));
    if (st != COLO_OK || a.n_split == 1)
        return st;
    return colo_cpu_launch(s, attn_merge_task, &a, sizeof a,
                           colo_cpu_chunks(s, (int64_t)d->n_tokens * d->n_head, 4.0 * a.n_split * d->head_dim));
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
