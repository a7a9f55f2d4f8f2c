/* kernels/q8_digits.h: products on two 8-bit digits, one output at a time,
 * in C that the CUDA kernels compile for the device as well.
 *
 * The arithmetic is that of the CPU's gemm_q8 (kernels/cpu/gemm_q8.c, the
 * default path for weights in block formats on CPUs with AVX512-VNNI), and
 * these functions give its bits:
 * - a block of 32 activations x becomes two signed digits per element with
 *   D = max|x| / 127: q = rint(x / D), r = rint(256 (x / D - q)) clamped to
 *   [-127, 127], so x ~ (256 q + r) d with d = D / 256; beside them the
 *   sums d * sum(256 q + r) over elements 0..15, 16..31 and 0..31;
 * - a block of 32 weights becomes unsigned codes u (0..255) and, per scale
 *   block (the whole 32, or each 16 for Q2_K, Q3_K and Q6_K), a and c with
 *   weight = a u + c;
 * - each scale block adds to the output, in block order from 0,
 *   acc = fma((float)P * d, a, acc), then acc = fma(s, c, acc), with P the
 *   exact integer sum of u (256 q + r) and s the block's digit sum; the
 *   output is acc + bias (0.0f without one).
 * Every float operation is one IEEE operation rounded to nearest, with
 * subnormal operands and results kept: on the device by PTX instructions
 * without .ftz, which the compiler neither fuses nor flushes (the build's
 * --use_fast_math makes even the _rn intrinsics flush subnormals to zero:
 * mul.rn.ftz.f32); on the host as ISO C (-std=c11 turns contraction off).
 *
 * Pure functions, thread-safe. On the host, bytes at any alignment; on the
 * device, weights 2-aligned and digits 4-aligned (16-bit and 32-bit loads). */
#ifndef COLO_KERNELS_Q8_DIGITS_H
#define COLO_KERNELS_Q8_DIGITS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "runtime/dtype.h"

#if defined(__CUDACC__)
#define COLO_Q8_FN static inline __host__ __device__
#else
#define COLO_Q8_FN static inline
#endif

#if defined(__CUDA_ARCH__)
/* name(a, b): one PTX instruction op, rounded to nearest, never flushed. */
#define COLO_Q8_PTX_BINARY(name, op)                                                                                   \
    static __device__ __forceinline__ float name(float a, float b)                                                     \
    {                                                                                                                  \
        float r;                                                                                                       \
        asm(op " %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));                                                             \
        return r;                                                                                                      \
    }
COLO_Q8_PTX_BINARY(colo_q8_mul_, "mul.rn.f32")
COLO_Q8_PTX_BINARY(colo_q8_div_, "div.rn.f32")
COLO_Q8_PTX_BINARY(colo_q8_sub_, "sub.rn.f32")
COLO_Q8_PTX_BINARY(colo_q8_add_, "add.rn.f32")
#undef COLO_Q8_PTX_BINARY
static __device__ __forceinline__ float colo_q8_fma_(float a, float b, float c)
{
    float r;
    asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c));
    return r;
}
/* max(|v|, m) for m >= +0 not NaN: the host's (|v| > m ? |v| : m), NaN v included. */
static __device__ __forceinline__ float colo_q8_amax_(float m, float v)
{
    float r;
    asm("max.f32 %0, %1, %2;" : "=f"(r) : "f"(m), "f"(__uint_as_float(__float_as_uint(v) & 0x7fffffffu)));
    return r;
}
#define COLO_Q8_MUL(a, b) colo_q8_mul_((a), (b))
#define COLO_Q8_DIV(a, b) colo_q8_div_((a), (b))
#define COLO_Q8_SUB(a, b) colo_q8_sub_((a), (b))
#define COLO_Q8_ADD(a, b) colo_q8_add_((a), (b))
#define COLO_Q8_FMA(a, b, c) colo_q8_fma_((a), (b), (c))
#define COLO_Q8_AMAX(m, v) colo_q8_amax_((m), (v))
#define COLO_Q8_NONZERO(a) ((__float_as_uint(a) & 0x7fffffffu) != 0) /* a subnormal is not zero */
#else
#define COLO_Q8_MUL(a, b) ((a) * (b))
#define COLO_Q8_DIV(a, b) ((a) / (b))
#define COLO_Q8_SUB(a, b) ((a) - (b))
#define COLO_Q8_ADD(a, b) ((a) + (b))
#define COLO_Q8_FMA(a, b, c) fmaf((a), (b), (c))
#define COLO_Q8_AMAX(m, v) (fabsf(v) > (m) ? fabsf(v) : (m))
#define COLO_Q8_NONZERO(a) ((a) != 0.0f)
#endif

/* One row's block of 32 activations on two digits. */
typedef struct {
    int8_t q[32], r[32];
    float d;    /* element ~ (256 q + r) d */
    float s[3]; /* d * sum of 256 q + r over elements 0..15, 16..31, 0..31 */
} colo_q8_digits;

COLO_Q8_FN void colo_q8_digits_of(const float *x, colo_q8_digits *o)
{
    float amax = 0.0f;
    for (int e = 0; e < 32; e++)
        amax = COLO_Q8_AMAX(amax, x[e]);
    float dd = COLO_Q8_DIV(amax, 127.0f), id = COLO_Q8_NONZERO(dd) ? COLO_Q8_DIV(1.0f, dd) : 0.0f;
    int32_t sum[2] = {0, 0};
    for (int e = 0; e < 32; e++) {
        float t = COLO_Q8_MUL(x[e], id), hi = rintf(t), lo = rintf(COLO_Q8_MUL(COLO_Q8_SUB(t, hi), 256.0f));
        lo = lo > 127.0f ? 127.0f : lo < -127.0f ? -127.0f : lo;
        o->q[e] = (int8_t)hi, o->r[e] = (int8_t)lo;
        sum[e / 16] += 256 * (int32_t)hi + (int32_t)lo;
    }
    o->d = COLO_Q8_DIV(dd, 256.0f);
    o->s[0] = COLO_Q8_MUL(o->d, (float)sum[0]);
    o->s[1] = COLO_Q8_MUL(o->d, (float)sum[1]);
    o->s[2] = COLO_Q8_MUL(o->d, (float)(sum[0] + sum[1]));
}

/* Little-endian 16 and 32 bits at p. Every block format keeps its codes,
 * scales and high bits at even offsets of blocks of even size, so on the
 * device (weights 2-aligned, as wtype_aligned checks) these are one or two
 * 16-bit loads, not a load per byte. */
#if defined(__CUDA_ARCH__)
#define COLO_Q8_LD16(p) ((uint32_t) * (const uint16_t *)(p))
#else
#define COLO_Q8_LD16(p) ((uint32_t)(p)[0] | (uint32_t)(p)[1] << 8)
#endif
COLO_Q8_FN uint32_t colo_q8_ld32(const uint8_t *p) { return COLO_Q8_LD16(p) | COLO_Q8_LD16(p + 2) << 16; }

/* n words from p (n a multiple of 4), as colo_q8_ld32 gives them. On the
 * device, p 16-byte aligned when wide is 16 and 4-byte aligned when wide
 * is 4 (else the 16-bit loads) take the wider loads: a format passes the
 * alignment every block of a row shares when the row does (Q4_K's and
 * Q5_K's codes 16, Q4_1's, Q5_1's and Q2_K's 4), so a warp's lanes never
 * split between the ways. */
COLO_Q8_FN void colo_q8_ld_words(const uint8_t *p, int n, uint32_t *w, int wide)
{
#if defined(__CUDA_ARCH__)
    uintptr_t a = (uintptr_t)p;
    if (wide == 16 && (a & 15) == 0) {
        for (int i = 0; i < n; i += 4) {
            uint4 v = *(const uint4 *)(p + 4 * i);
            w[i] = v.x, w[i + 1] = v.y, w[i + 2] = v.z, w[i + 3] = v.w;
        }
        return;
    }
    if (wide >= 4 && (a & 3) == 0) {
        for (int i = 0; i < n; i++)
            w[i] = ((const uint32_t *)p)[i];
        return;
    }
#else
    (void)wide;
#endif
    for (int i = 0; i < n; i++)
        w[i] = colo_q8_ld32(p + 4 * i);
}

/* An IEEE half (little-endian bytes at p) as a float: exact. */
COLO_Q8_FN float colo_q8_half(const uint8_t *p)
{
    uint32_t h = COLO_Q8_LD16(p);
    uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 31, mant = h & 1023, bits;
    if (exp == 0) { /* zero or subnormal: mant * 2^-24, exact in a float */
        float v = COLO_Q8_MUL((float)mant, 5.9604644775390625e-8f);
        return sign ? -v : v;
    }
    if (exp == 31)
        bits = sign | 0x7f800000u | mant << 13;
    else
        bits = sign | (exp + 112) << 23 | mant << 13;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Whether the digit products take weights of type t: every block format
 * of 32 and 256. */
COLO_Q8_FN int colo_q8_has(colo_dtype t)
{
    return t == COLO_Q4_0 || t == COLO_Q4_1 || t == COLO_Q5_0 || t == COLO_Q5_1 || t == COLO_Q8_0 || t == COLO_Q2_K ||
           t == COLO_Q3_K || t == COLO_Q4_K || t == COLO_Q5_K || t == COLO_Q6_K;
}

/* Q4_K/Q5_K's 6-bit scale and min of sub-block j from the 12 packed bytes
 * (colo_k4_scales in kernels/quant.h, one sub-block). */
COLO_Q8_FN void colo_q8_k4_scale(const uint8_t *p, int j, int *sc, int *mn)
{
    if (j < 4) {
        *sc = p[j] & 63, *mn = p[j + 4] & 63;
    } else {
        *sc = (p[j + 4] & 15) | ((p[j - 4] >> 6) << 4);
        *mn = (p[j + 4] >> 4) | ((p[j] >> 6) << 4);
    }
}

/* Q3_K's scale g (-32..31) from the 12 packed bytes (colo_q3_k_scales). */
COLO_Q8_FN int colo_q8_q3k_scale(const uint8_t *p, int g)
{
    int lo = g < 8 ? (p[g] & 15) : (p[g - 8] >> 4);
    int hi = (p[8 + (g & 3)] >> (2 * (g >> 2))) & 3;
    return (lo | hi << 4) - 32;
}

/* Bits 0..3 of v to bit 4 of bytes 0..3. */
COLO_Q8_FN uint32_t colo_q8_bit4(uint32_t v)
{
    return (v & 1) << 4 | (v & 2) << 11 | (v & 4) << 18 | (v & 8) << 25;
}

/* Block b (of 32 elements) of a row of type t: codes u packed four to a
 * word, element e in byte e % 4 of uw[e / 4], and a, c per scale block.
 * Returns the scale blocks: 1, or 2 (of 16) for Q2_K, Q3_K, Q6_K. */
COLO_Q8_FN int colo_q8_unpack_words(colo_dtype t, const uint8_t *row, int b, uint32_t uw[8], float a[2], float c[2])
{
    const uint8_t *p;
    switch (t) {
    case COLO_Q4_0: case COLO_Q4_1: case COLO_Q5_0: case COLO_Q5_1: {
        int has_m = t == COLO_Q4_1 || t == COLO_Q5_1, five = t == COLO_Q5_0 || t == COLO_Q5_1;
        int bytes = 18 + 2 * has_m + 4 * five;
        p = row + (size_t)b * bytes;
        const uint8_t *qs = p + 2 + 2 * has_m + 4 * five;
        uint32_t hb = five ? colo_q8_ld32(p + 2 + 2 * has_m) : 0, q[4];
        colo_q8_ld_words(qs, 4, q, has_m ? 4 : 2);
        for (int i = 0; i < 4; i++) {
            uw[i] = (q[i] & 0x0f0f0f0fu) | colo_q8_bit4(hb >> (4 * i) & 15);
            uw[i + 4] = (q[i] >> 4 & 0x0f0f0f0fu) | colo_q8_bit4(hb >> (16 + 4 * i) & 15);
        }
        a[0] = colo_q8_half(p);
        c[0] = has_m ? colo_q8_half(p + 2) : COLO_Q8_MUL(five ? -16.0f : -8.0f, a[0]);
        return 1;
    }
    case COLO_Q8_0:
        p = row + (size_t)b * 34;
        colo_q8_ld_words(p + 2, 8, uw, 2);
        for (int i = 0; i < 8; i++)
            uw[i] ^= 0x80808080u; /* q + 128 */
        a[0] = colo_q8_half(p);
        c[0] = COLO_Q8_MUL(-128.0f, a[0]);
        return 1;
    case COLO_Q4_K: case COLO_Q5_K: {
        int five = t == COLO_Q5_K, j = b % 8;
        p = row + (size_t)(b / 8) * (five ? 176 : 144);
        const uint8_t *qh = p + 16, *qs = p + 16 + 32 * five + 32 * (j / 2);
        uint32_t h[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        colo_q8_ld_words(qs, 8, uw, 16);
        if (five)
            colo_q8_ld_words(qh, 8, h, 16);
        for (int i = 0; i < 8; i++)
            uw[i] = (uw[i] >> (4 * (j & 1)) & 0x0f0f0f0fu) | (h[i] >> j & 0x01010101u) << 4;
        int sc, mn;
        colo_q8_k4_scale(p + 4, j, &sc, &mn);
        a[0] = COLO_Q8_MUL(colo_q8_half(p), (float)sc);
        c[0] = -COLO_Q8_MUL(colo_q8_half(p + 2), (float)mn);
        return 1;
    }
    case COLO_Q6_K: {
        int j = b % 8, h = j / 4, part = j % 4;
        p = row + (size_t)(b / 8) * 210;
        const uint8_t *ql = p + 64 * h + 32 * (part & 1), *qh = p + 128 + 32 * h;
        uint32_t hi[8];
        colo_q8_ld_words(ql, 8, uw, 2);
        colo_q8_ld_words(qh, 8, hi, 2);
        for (int i = 0; i < 8; i++)
            uw[i] = (uw[i] >> (part < 2 ? 0 : 4) & 0x0f0f0f0fu) | (hi[i] >> (2 * part) & 0x03030303u) << 4;
        float d = colo_q8_half(p + 208);
        for (int g = 0; g < 2; g++) {
            a[g] = COLO_Q8_MUL(d, (float)(int8_t)p[192 + 2 * j + g]);
            c[g] = COLO_Q8_MUL(-32.0f, a[g]);
        }
        return 2;
    }
    case COLO_Q3_K: case COLO_Q2_K: {
        int three = t == COLO_Q3_K, j = b % 8, n = j / 4, jj = j % 4;
        p = row + (size_t)(b / 8) * (three ? 110 : 84);
        const uint8_t *qs = p + (three ? 32 : 16) + 32 * n;
        uint32_t hm[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        colo_q8_ld_words(qs, 8, uw, three ? 2 : 4);
        if (three)
            colo_q8_ld_words(p, 8, hm, 2);
        for (int i = 0; i < 8; i++)
            uw[i] = (uw[i] >> (2 * jj) & 0x03030303u) + ((hm[i] >> (4 * n + jj) & 0x01010101u) << 2);
        for (int g = 0; g < 2; g++) {
            if (three) {
                a[g] = COLO_Q8_MUL(colo_q8_half(p + 108), (float)colo_q8_q3k_scale(p + 96, 2 * j + g));
                c[g] = COLO_Q8_MUL(-4.0f, a[g]);
            } else {
                int sc = p[2 * j + g];
                a[g] = COLO_Q8_MUL(colo_q8_half(p + 80), (float)(sc & 15));
                c[g] = -COLO_Q8_MUL(colo_q8_half(p + 82), (float)(sc >> 4));
            }
        }
        return 2;
    }
    default:
        return 0;
    }
}

/* acc + the dot of four unsigned bytes u with four signed bytes q: exact. */
COLO_Q8_FN int32_t colo_q8_dp4a(uint32_t u, uint32_t q, int32_t acc)
{
#if defined(__CUDA_ARCH__)
    int32_t r;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(u), "r"(q), "r"(acc));
    return r;
#else
    for (int e = 0; e < 4; e++)
        acc += (int32_t)(u >> (8 * e) & 255) * (int8_t)(uint8_t)(q >> (8 * e));
    return acc;
#endif
}

/* Word w of a block's 32 signed digits d (4-aligned): digits 4w..4w+3. */
COLO_Q8_FN uint32_t colo_q8_digit_word(const int8_t *d, int w)
{
#if defined(__CUDA_ARCH__)
    return ((const uint32_t *)d)[w];
#else
    uint32_t v;
    memcpy(&v, d + 4 * w, 4);
    return v;
#endif
}

/* The scaled integer products of one block of 32: f[h] = (float)P * d for
 * each of its nh scale blocks, P the exact sum of u (256 q + r). */
COLO_Q8_FN void colo_q8_block_f(const uint32_t uw[8], int nh, const colo_q8_digits *x, float f[2])
{
    int32_t pq[2] = {0, 0}, pr[2] = {0, 0}; /* elements 0..15 and 16..31; fixed indices keep them in registers */
    for (int w = 0; w < 4; w++) {
        pq[0] = colo_q8_dp4a(uw[w], colo_q8_digit_word(x->q, w), pq[0]);
        pr[0] = colo_q8_dp4a(uw[w], colo_q8_digit_word(x->r, w), pr[0]);
        pq[1] = colo_q8_dp4a(uw[w + 4], colo_q8_digit_word(x->q, w + 4), pq[1]);
        pr[1] = colo_q8_dp4a(uw[w + 4], colo_q8_digit_word(x->r, w + 4), pr[1]);
    }
    if (nh == 2) {
        f[0] = COLO_Q8_MUL((float)(pq[0] * 256 + pr[0]), x->d);
        f[1] = COLO_Q8_MUL((float)(pq[1] * 256 + pr[1]), x->d);
    } else {
        f[0] = COLO_Q8_MUL((float)((pq[0] + pq[1]) * 256 + pr[0] + pr[1]), x->d);
    }
}

/* acc after one scale block: its f, a, c and x's digit sum s over it. */
COLO_Q8_FN float colo_q8_chain(float acc, float f, float a, float s, float c)
{
    acc = COLO_Q8_FMA(f, a, acc);
    return COLO_Q8_FMA(s, c, acc);
}

/* x's digit sum over scale block h of nh. */
COLO_Q8_FN float colo_q8_sum(const colo_q8_digits *x, int nh, int h) { return x->s[nh == 1 ? 2 : h]; }

/* acc after one block of 32: codes uw with a, c of its nh scale blocks
 * against x's digits. */
COLO_Q8_FN float colo_q8_block(float acc, const uint32_t uw[8], const float a[2], const float c[2], int nh,
                               const colo_q8_digits *x)
{
    float f[2];
    colo_q8_block_f(uw, nh, x, f);
    for (int h = 0; h < nh; h++)
        acc = colo_q8_chain(acc, f[h], a[h], colo_q8_sum(x, nh, h), c[h]);
    return acc;
}

/* One output: row (type t, k elements) . the row of x whose blocks' digits
 * are xd (k / 32 of them), plus bias. */
COLO_Q8_FN float colo_q8_dot(colo_dtype t, const uint8_t *row, int k, const colo_q8_digits *xd, float bias)
{
    float acc = 0.0f;
    for (int b = 0; b < k / 32; b++) {
        uint32_t uw[8];
        float a[2], c[2];
        int nh = colo_q8_unpack_words(t, row, b, uw, a, c);
        acc = colo_q8_block(acc, uw, a, c, nh, xd + b);
    }
    return COLO_Q8_ADD(acc, bias);
}

#endif
