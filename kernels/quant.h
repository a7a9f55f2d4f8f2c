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

float colo_fp16_to_f32(uint16_t h);
uint16_t colo_f32_to_fp16(float f); /* round to nearest even */
float colo_bf16_to_f32(uint16_t h);
uint16_t colo_f32_to_bf16(float f); /* round to nearest even */

/* dst (n floats) = src row of type t; n a multiple of the block size. */
void colo_dequantize_row(colo_dtype t, const void *src, float *dst, int64_t n);
/* dst (colo_dtype_row_bytes(t, n) bytes) = src quantized to t, for t in
 * F32, F16, BF16, Q4_0, Q4_1, Q8_0. COLO_EUNSUPPORTED for other types. */
colo_status colo_quantize_row(colo_dtype t, const float *src, void *dst, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
