/* int8 products for many rows of x (batched decode) with AVX512-VNNI.
 *
 * y (m, n) = x (m, k) W^T + b for W in a block format, x rounded to 8 bits
 * per block of 32 (colo_cpu_quantize_q8x). The 16 lanes of a register are 16
 * rows of x: colo_cpu_gemm_q8_pack_x lays x out so that dword t of block b
 * holds elements 4t..4t+3 of each row's block, and each weight row, unpacked
 * to one unsigned byte per element, is broadcast 4 bytes at a time into
 * vpdpbusd against it. Every format is then the same sum: a weight element is
 * a u + c per scale block (16 or 32 elements), with u the unsigned code (the
 * format's offset, e.g. Q4_0's 8, folded into c), so a scale block adds
 *
 *     a (d_x sum(u q_x)) + c (d_x sum(q_x))
 *
 * to the output: an integer dot product, then two FMAs, with d_x sum(q_x)
 * stored beside x. A lane's instruction sequence does not depend on the
 * other lanes, so a row's result is the same bits whatever rows come with it.
 *
 * Compiled with AVX512-VNNI: call only when the CPU has it (linear.c checks). */
#include "kernels/cpu/cpu_kernels.h"

#include <string.h>

#if defined(__F16C__)
#include <immintrin.h>
#define HALF(h) _cvtsh_ss(h)
#else
#define HALF(h) colo_fp16_to_f32(h)
#endif

/* Rows of x per group (the lanes of a register). */
#define GROUP COLO_CPU_GEMM_Q8_GROUP

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#include <immintrin.h>
#define Q8_VNNI 1
#endif

/* Weight rows one pass of the kernel carries (one accumulator each). */
#define JT COLO_CPU_GEMM_Q8_ROWS

struct colo_q8_xblk {
    int8_t q[8][4 * GROUP]; /* q[t][4 i + e] = x_i's quant of element 4 t + e */
    float d[GROUP];         /* x_i's scale */
    float s[3][GROUP];      /* d * sum of x_i's quants over elements 0..15, 16..31, 0..31 */
};

/* Scale blocks per block of 32: 2 for the formats with a scale per 16. */
static int halves(colo_dtype t) { return t == COLO_Q2_K || t == COLO_Q3_K || t == COLO_Q6_K ? 2 : 1; }

bool colo_cpu_gemm_q8_has(colo_dtype t)
{
    switch (t) {
    case COLO_Q4_0: case COLO_Q4_1: case COLO_Q5_0: case COLO_Q5_1: case COLO_Q8_0:
    case COLO_Q2_K: case COLO_Q3_K: case COLO_Q4_K: case COLO_Q5_K: case COLO_Q6_K:
        return true;
    default:
        return false;
    }
}

size_t colo_cpu_gemm_q8_x_bytes(int m, int k)
{
    return (size_t)((m + GROUP - 1) / GROUP) * (size_t)(k / 32) * sizeof(colo_q8_xblk);
}

void colo_cpu_gemm_q8_pack_x(const float *x, int x_stride, int m, int k, int g0, int g1, colo_q8_xblk *xp,
                             colo_blk_q8x *tmp)
{
    int nb = k / 32;
    for (int g = g0; g < g1; g++) {
        colo_q8_xblk *xg = xp + (size_t)g * nb;
        memset(xg, 0, (size_t)nb * sizeof *xg);
        for (int i = 0; i < GROUP && g * GROUP + i < m; i++) {
            colo_cpu_quantize_q8x(x + (int64_t)(g * GROUP + i) * x_stride, tmp, k);
            for (int b = 0; b < nb; b++) {
                const colo_blk_q8x *q = tmp + b;
                int lo = 0, hi = 0;
                for (int e = 0; e < 16; e++)
                    lo += q->qs[e], hi += q->qs[16 + e];
                for (int t = 0; t < 8; t++)
                    memcpy(&xg[b].q[t][4 * i], q->qs + 4 * t, 4);
                xg[b].d[i] = q->d;
                xg[b].s[0][i] = q->d * (float)lo;
                xg[b].s[1][i] = q->d * (float)hi;
                xg[b].s[2][i] = q->s;
            }
        }
    }
}

/* ---- unpacking a weight row: codes u (k bytes), a and c per scale block ---------------- */

#if defined(Q8_VNNI)
/* 16 bytes of nibbles: low nibbles to bytes 0..15, high to 16..31. */
static inline __m256i nibbles32(const uint8_t *qs)
{
    __m128i raw = _mm_loadu_si128((const __m128i *)qs), m15 = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m15), _mm_and_si128(raw, m15));
}

/* v + 16 (the bit is clear) in byte e where bit e of the 32-bit qh is set. */
static inline __m256i fifth_bits(const uint8_t *qh4, __m256i v)
{
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    return _mm256_mask_add_epi8(v, (__mmask32)qh, v, _mm256_set1_epi8(16));
}

/* u[0..31] = (32 bytes at p >> shift) & mask. */
static inline void bits32(const uint8_t *p, int shift, int mask, uint8_t *u)
{
    __m256i raw = _mm256_loadu_si256((const __m256i *)p);
    __m256i v = _mm256_srl_epi16(raw, _mm_cvtsi32_si128(shift));
    _mm256_storeu_si256((__m256i *)u, _mm256_and_si256(v, _mm256_set1_epi8((char)mask)));
}

/* u[e] += val (its bits are clear) where bit `bit` of p[e] is set, e < 32. */
static inline void or_bit32(const uint8_t *p, int bit, int val, uint8_t *u)
{
    __m256i v = _mm256_loadu_si256((const __m256i *)u);
    __mmask32 m = _mm256_test_epi8_mask(_mm256_loadu_si256((const __m256i *)p), _mm256_set1_epi8((char)(1 << bit)));
    _mm256_storeu_si256((__m256i *)u, _mm256_mask_add_epi8(v, m, v, _mm256_set1_epi8((char)val)));
}

/* unpack_row for the K-quants, one super-block of 256 at a time. */
static void unpack_q4_5_k(colo_dtype t, const void *row, int k, uint8_t *u, float *a, float *c)
{
    for (int sb = 0; sb < k / 256; sb++) {
        uint16_t d16, dmin16;
        const uint8_t *scales, *qs, *qh = NULL;
        if (t == COLO_Q4_K) {
            const colo_blk_q4_k *q = (const colo_blk_q4_k *)row + sb;
            d16 = q->d, dmin16 = q->dmin, scales = q->scales, qs = q->qs;
        } else {
            const colo_blk_q5_k *q = (const colo_blk_q5_k *)row + sb;
            d16 = q->d, dmin16 = q->dmin, scales = q->scales, qs = q->qs, qh = q->qh;
        }
        float d = HALF(d16), dmin = HALF(dmin16);
        uint8_t sc[8], mn[8];
        colo_k4_scales(scales, sc, mn);
        for (int j = 0; j < 8; j++) { /* sub-block of 32 */
            uint8_t *o = u + 256 * sb + 32 * j;
            bits32(qs + 32 * (j / 2), 4 * (j & 1), 15, o);
            if (qh)
                or_bit32(qh, j, 16, o);
            a[8 * sb + j] = d * (float)sc[j];
            c[8 * sb + j] = -(dmin * (float)mn[j]);
        }
    }
}

static void unpack_q6_k(const void *row, int k, uint8_t *u, float *a, float *c)
{
    for (int sb = 0; sb < k / 256; sb++) {
        const colo_blk_q6_k *q = (const colo_blk_q6_k *)row + sb;
        float d = HALF(q->d);
        const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
        for (int h = 0; h < 2; h++) {
            __m256i ql0 = _mm256_loadu_si256((const __m256i *)(q->ql + 64 * h));
            __m256i ql1 = _mm256_loadu_si256((const __m256i *)(q->ql + 64 * h + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(q->qh + 32 * h));
            __m256i *o = (__m256i *)(u + 256 * sb + 128 * h);
            _mm256_storeu_si256(o, _mm256_or_si256(_mm256_and_si256(ql0, m4),
                                                   _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)));
            _mm256_storeu_si256(o + 1, _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                                       _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)));
            _mm256_storeu_si256(o + 2, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                                       _mm256_and_si256(qh, m30)));
            _mm256_storeu_si256(o + 3, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                                       _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)));
        }
        for (int g = 0; g < 16; g++) { /* scale block of 16 */
            a[16 * sb + g] = d * (float)q->scales[g];
            c[16 * sb + g] = -32.0f * a[16 * sb + g];
        }
    }
}

static void unpack_q3_k(const void *row, int k, uint8_t *u, float *a, float *c)
{
    for (int sb = 0; sb < k / 256; sb++) {
        const colo_blk_q3_k *q = (const colo_blk_q3_k *)row + sb;
        float d = HALF(q->d);
        int8_t sc[16];
        colo_q3_k_scales(q->scales, sc);
        for (int n = 0; n < 2; n++)
            for (int j = 0; j < 4; j++) {
                uint8_t *o = u + 256 * sb + 128 * n + 32 * j;
                bits32(q->qs + 32 * n, 2 * j, 3, o);
                or_bit32(q->hmask, 4 * n + j, 4, o);
            }
        for (int g = 0; g < 16; g++) {
            a[16 * sb + g] = d * (float)sc[g];
            c[16 * sb + g] = -4.0f * a[16 * sb + g];
        }
    }
}

static void unpack_q2_k(const void *row, int k, uint8_t *u, float *a, float *c)
{
    for (int sb = 0; sb < k / 256; sb++) {
        const colo_blk_q2_k *q = (const colo_blk_q2_k *)row + sb;
        float d = HALF(q->d), dmin = HALF(q->dmin);
        for (int n = 0; n < 2; n++)
            for (int j = 0; j < 4; j++)
                bits32(q->qs + 32 * n, 2 * j, 3, u + 256 * sb + 128 * n + 32 * j);
        for (int g = 0; g < 16; g++) {
            a[16 * sb + g] = d * (float)(q->scales[g] & 15);
            c[16 * sb + g] = -(dmin * (float)(q->scales[g] >> 4));
        }
    }
}

static void unpack_row(colo_dtype t, const void *row, int k, uint8_t *u, float *a, float *c)
{
    int nb = k / 32;
    switch (t) {
    case COLO_Q4_0:
        for (int b = 0; b < nb; b++) {
            const colo_blk_q4_0 *q = (const colo_blk_q4_0 *)row + b;
            _mm256_storeu_si256((__m256i *)(u + 32 * b), nibbles32(q->qs));
            a[b] = HALF(q->d), c[b] = -8.0f * a[b];
        }
        break;
    case COLO_Q4_1:
        for (int b = 0; b < nb; b++) {
            const colo_blk_q4_1 *q = (const colo_blk_q4_1 *)row + b;
            _mm256_storeu_si256((__m256i *)(u + 32 * b), nibbles32(q->qs));
            a[b] = HALF(q->d), c[b] = HALF(q->m);
        }
        break;
    case COLO_Q5_0:
        for (int b = 0; b < nb; b++) {
            const colo_blk_q5_0 *q = (const colo_blk_q5_0 *)row + b;
            _mm256_storeu_si256((__m256i *)(u + 32 * b), fifth_bits(q->qh, nibbles32(q->qs)));
            a[b] = HALF(q->d), c[b] = -16.0f * a[b];
        }
        break;
    case COLO_Q5_1:
        for (int b = 0; b < nb; b++) {
            const colo_blk_q5_1 *q = (const colo_blk_q5_1 *)row + b;
            _mm256_storeu_si256((__m256i *)(u + 32 * b), fifth_bits(q->qh, nibbles32(q->qs)));
            a[b] = HALF(q->d), c[b] = HALF(q->m);
        }
        break;
    case COLO_Q8_0:
        for (int b = 0; b < nb; b++) {
            const colo_blk_q8_0 *q = (const colo_blk_q8_0 *)row + b;
            __m256i v = _mm256_loadu_si256((const __m256i *)q->qs);
            /* q + 128 */
            _mm256_storeu_si256((__m256i *)(u + 32 * b), _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)));
            a[b] = HALF(q->d), c[b] = -128.0f * a[b];
        }
        break;
    case COLO_Q4_K:
    case COLO_Q5_K:
        unpack_q4_5_k(t, row, k, u, a, c);
        break;
    case COLO_Q6_K:
        unpack_q6_k(row, k, u, a, c);
        break;
    case COLO_Q3_K:
        unpack_q3_k(row, k, u, a, c);
        break;
    case COLO_Q2_K:
        unpack_q2_k(row, k, u, a, c);
        break;
    default:
        break;
    }
}
#endif

/* ---- the kernel ------------------------------------------------------------------------ */

#if defined(Q8_VNNI)
static inline __m512i bcast4(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* out[j][i] = row j (of JT, codes u + j * k, scales a/c + j * ns) . x row i
 * of the group xg, for NH scale blocks per block of 32. */
static inline __attribute__((always_inline)) void kernel(int nb, int k, int ns, const colo_q8_xblk *xg,
                                                         const uint8_t *u, const float *a, const float *c, int nh,
                                                         float out[JT][GROUP])
{
    __m512 acc[JT];
    for (int j = 0; j < JT; j++)
        acc[j] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const colo_q8_xblk *xb = xg + b;
        __m512i X[8];
        for (int t = 0; t < 8; t++)
            X[t] = _mm512_loadu_si512((const void *)xb->q[t]);
        __m512 d = _mm512_loadu_ps(xb->d);
        if (nh == 1) {
            __m512 s = _mm512_loadu_ps(xb->s[2]);
            for (int j = 0; j < JT; j++) {
                const uint8_t *w = u + (size_t)j * k + 32 * b;
                __m512i p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), bcast4(w), X[0]);
                __m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), bcast4(w + 4), X[1]);
                for (int t = 2; t < 8; t += 2) {
                    p0 = _mm512_dpbusd_epi32(p0, bcast4(w + 4 * t), X[t]);
                    p1 = _mm512_dpbusd_epi32(p1, bcast4(w + 4 * t + 4), X[t + 1]);
                }
                __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(p0, p1)), d);
                acc[j] = _mm512_fmadd_ps(f, _mm512_set1_ps(a[(size_t)j * ns + b]), acc[j]);
                acc[j] = _mm512_fmadd_ps(s, _mm512_set1_ps(c[(size_t)j * ns + b]), acc[j]);
            }
        } else {
            __m512 s0 = _mm512_loadu_ps(xb->s[0]), s1 = _mm512_loadu_ps(xb->s[1]);
            for (int j = 0; j < JT; j++) {
                const uint8_t *w = u + (size_t)j * k + 32 * b;
                __m512i p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), bcast4(w), X[0]);
                __m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), bcast4(w + 16), X[4]);
                for (int t = 1; t < 4; t++) {
                    p0 = _mm512_dpbusd_epi32(p0, bcast4(w + 4 * t), X[t]);
                    p1 = _mm512_dpbusd_epi32(p1, bcast4(w + 16 + 4 * t), X[4 + t]);
                }
                __m512 f0 = _mm512_mul_ps(_mm512_cvtepi32_ps(p0), d), f1 = _mm512_mul_ps(_mm512_cvtepi32_ps(p1), d);
                const float *aj = a + (size_t)j * ns + 2 * b, *cj = c + (size_t)j * ns + 2 * b;
                acc[j] = _mm512_fmadd_ps(f0, _mm512_set1_ps(aj[0]), acc[j]);
                acc[j] = _mm512_fmadd_ps(s0, _mm512_set1_ps(cj[0]), acc[j]);
                acc[j] = _mm512_fmadd_ps(f1, _mm512_set1_ps(aj[1]), acc[j]);
                acc[j] = _mm512_fmadd_ps(s1, _mm512_set1_ps(cj[1]), acc[j]);
            }
        }
    }
    for (int j = 0; j < JT; j++)
        _mm512_storeu_ps(out[j], acc[j]);
}

static void kernel32(int nb, int k, int ns, const colo_q8_xblk *xg, const uint8_t *u, const float *a,
                     const float *c, float out[JT][GROUP])
{
    kernel(nb, k, ns, xg, u, a, c, 1, out);
}

static void kernel16(int nb, int k, int ns, const colo_q8_xblk *xg, const uint8_t *u, const float *a,
                     const float *c, float out[JT][GROUP])
{
    kernel(nb, k, ns, xg, u, a, c, 2, out);
}
#endif

size_t colo_cpu_gemm_q8_scratch_bytes(int k)
{
    int ns = (k / 32) * 2;
    return (size_t)JT * ((size_t)k + 2 * (size_t)ns * sizeof(float));
}

void colo_cpu_gemm_q8(const void *w, colo_dtype t, int64_t r0, int64_t r1, int k, const colo_q8_xblk *xp, int m,
                      const float *bias, float *y, int y_stride, void *scratch)
{
#if defined(Q8_VNNI)
    int nb = k / 32, nh = halves(t), ns = nb * nh, n_groups = (m + GROUP - 1) / GROUP;
    size_t row_bytes = colo_dtype_row_bytes(t, k);
    uint8_t *u = scratch;
    float *a = (float *)(u + (size_t)JT * k), *c = a + (size_t)JT * ns;
    float out[JT][GROUP] __attribute__((aligned(64)));
    for (int64_t t0 = r0; t0 < r1; t0 += JT) {
        int nj = (int)(r1 - t0 < JT ? r1 - t0 : JT);
        for (int j = 0; j < JT; j++) /* rows past the end repeat the last one (outputs unused) */
            unpack_row(t, (const unsigned char *)w + (size_t)(t0 + (j < nj ? j : nj - 1)) * row_bytes, k,
                       u + (size_t)j * k, a + (size_t)j * ns, c + (size_t)j * ns);
        for (int g = 0; g < n_groups; g++) {
            if (nh == 1)
                kernel32(nb, k, ns, xp + (size_t)g * nb, u, a, c, out);
            else
                kernel16(nb, k, ns, xp + (size_t)g * nb, u, a, c, out);
            for (int i = 0; i < GROUP && g * GROUP + i < m; i++) {
                float *yr = y + (int64_t)(g * GROUP + i) * y_stride + t0;
                for (int j = 0; j < nj; j++)
                    yr[j] = out[j][i] + (bias ? bias[t0 + j] : 0.0f);
            }
        }
    }
#else
    (void)w, (void)t, (void)r0, (void)r1, (void)k, (void)xp, (void)m, (void)bias, (void)y, (void)y_stride,
        (void)scratch, (void)halves;
#endif
}
