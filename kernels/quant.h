/* kernels/quant.h: block formats on the host: conversions, quantizers and
 * row dequantizers. Used by the CPU kernels, colo-mkmodel and the tests.
 * Pure functions, thread-safe. */
#ifndef COLO_KERNELS_QUANT_H
#define COLO_KERNELS_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GGML's block layouts. */
typedef struct { uint16_t d; uint8_t qs[16]; } colo_blk_q4_0;          /* x = (q - 8) * d */
typedef struct { uint16_t d, m; uint8_t qs[16]; } colo_blk_q4_1;       /* x = q * d + m */
typedef struct { uint16_t d; int8_t qs[32]; } colo_blk_q8_0;           /* x = q * d */
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; } colo_blk_q6_k;
/* Q5_0/Q5_1: element j (0..31) is nibble j % 16 of qs (low nibbles first)
 * plus bit j of qh (little-endian) as its fifth bit. */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; } colo_blk_q5_0;          /* x = (q - 16) * d */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; } colo_blk_q5_1;       /* x = q * d + m */
/* K-quants, super-blocks of 256. Element e of a Q2_K/Q3_K super-block: 2 bits
 * at shift 2 * ((e % 128) / 32) of qs[32 * (e / 128) + e % 32], sub-block
 * e / 16; Q3_K's third bit is bit e / 32 of hmask[e % 32]. Element e of a
 * Q4_K/Q5_K super-block: the low (e % 64 < 32) or high nibble of
 * qs[32 * (e / 64) + e % 32], sub-block e / 32; Q5_K's fifth bit is bit
 * e / 32 of qh[e % 32]. */
typedef struct { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; } colo_blk_q2_k; /* x = d (sc & 15) q - dmin (sc >> 4) */
typedef struct { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; } colo_blk_q3_k; /* x = d (sc - 32) (q - 4) */
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } colo_blk_q4_k; /* x = d sc q - dmin m */
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; } colo_blk_q5_k;

/* Q4_K/Q5_K: the 6-bit scale sc[j] and min mn[j] of sub-block j (0..7) from
 * the 12 packed bytes p (GGML's packing: j < 4 in the low 6 bits of p[j] and
 * p[j + 4]; j >= 4 in the nibbles of p[j + 4] and the top 2 bits of p[j - 4]
 * and p[j]). */
static inline void colo_k4_scales(const uint8_t *p, uint8_t sc[8], uint8_t mn[8])
{
    for (int j = 0; j < 4; j++) {
        sc[j] = p[j] & 63;
        mn[j] = p[j + 4] & 63;
        sc[j + 4] = (uint8_t)((p[j + 8] & 15) | ((p[j] >> 6) << 4));
        mn[j + 4] = (uint8_t)((p[j + 8] >> 4) | ((p[j + 4] >> 6) << 4));
    }
}

/* Q3_K: the 16 scales (-32..31) from the 12 packed bytes: low nibbles in
 * p[0..7] (j < 8 low, j >= 8 high nibble of p[j - 8]), the two high bits of
 * scale j at shift 2 * (j / 4) of p[8 + j % 4]; stored values are sc + 32. */
static inline void colo_q3_k_scales(const uint8_t *p, int8_t sc[16])
{
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? (p[j] & 15) : (p[j - 8] >> 4);
        int hi = (p[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
        sc[j] = (int8_t)((lo | hi << 4) - 32);
    }
}

float colo_fp16_to_f32(uint16_t h);
uint16_t colo_f32_to_fp16(float f); /* round to nearest even */
float colo_bf16_to_f32(uint16_t h);
uint16_t colo_f32_to_bf16(float f); /* round to nearest even */

/* dst (n floats) = src row of type t; n a multiple of the block size. */
void colo_dequantize_row(colo_dtype t, const void *src, float *dst, int64_t n);
/* dst (colo_dtype_row_bytes(t, n) bytes) = src quantized to t, for every
 * weight type (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K);
 * n a multiple of the block size. Simple round-to-nearest quantizers (no
 * search over scales): valid blocks, reasonably accurate, not llama.cpp's
 * bytes. COLO_EUNSUPPORTED for other types. */
colo_status colo_quantize_row(colo_dtype t, const float *src, void *dst, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
