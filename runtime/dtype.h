/* runtime/dtype.h: element types of tensors and their sizes.
 *
 * Values equal GGML's type ids, so GGUF tensor types map 1:1. Plain types
 * have one element per block; block formats (Q4_1...) store a fixed number
 * of elements in a fixed number of bytes. The ops that take each type are
 * listed in kernels/ops.h. */
#ifndef COLO_RUNTIME_DTYPE_H
#define COLO_RUNTIME_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum colo_dtype {
    COLO_F32 = 0,
    COLO_F16 = 1,
    COLO_Q4_0 = 2,  /* blocks of 32: fp16 d, 16 bytes of 4-bit q; x = (q - 8) * d */
    COLO_Q4_1 = 3,  /* blocks of 32: fp16 d, fp16 m, 16 bytes; x = q * d + m (low nibbles: 0..15, high: 16..31) */
    COLO_Q5_0 = 6,  /* blocks of 32: fp16 d, 32 high bits, 16 bytes of nibbles; x = (q - 16) * d */
    COLO_Q5_1 = 7,  /* blocks of 32: fp16 d, fp16 m, 32 high bits, 16 bytes; x = q * d + m */
    COLO_Q8_0 = 8,  /* blocks of 32: fp16 d, 32 int8 q; x = q * d */
    COLO_Q2_K = 10, /* super-blocks of 256: 16 x 16 with 4-bit scale and min; x = d sc q - dmin m, q 2 bits */
    COLO_Q3_K = 11, /* super-blocks of 256: 16 x 16 with 6-bit scale; x = d (sc - 32) (q - 4), q 3 bits */
    COLO_Q4_K = 12, /* super-blocks of 256: 8 x 32 with 6-bit scale and min; x = d sc q - dmin m, q 4 bits */
    COLO_Q5_K = 13, /* as Q4_K with a fifth bit per element */
    COLO_Q6_K = 14, /* super-blocks of 256: 16 x 16 with int8 scale; x = d sc (q - 32), q 6 bits */
    COLO_BF16 = 30,
    COLO_I32 = 26,  /* token ids, positions, block tables */
} colo_dtype;

/* Name ("f32", "q4_1"...) or NULL for an unknown value. */
const char *colo_dtype_name(colo_dtype t);
/* Elements per block (1 for plain types), 0 for an unknown type. */
int colo_dtype_block_elems(colo_dtype t);
/* Bytes per block (element size for plain types), 0 for an unknown type. */
size_t colo_dtype_block_bytes(colo_dtype t);
/* Bytes of a row of n elements; 0 when n is not a multiple of the block size. */
size_t colo_dtype_row_bytes(colo_dtype t, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
