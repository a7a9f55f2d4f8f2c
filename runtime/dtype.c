/* Element type names and sizes. */
#include "runtime/dtype.h"

const char *colo_dtype_name(colo_dtype t)
{
    switch (t) {
    case COLO_F32: return "f32";
    case COLO_F16: return "f16";
    case COLO_BF16: return "bf16";
    case COLO_Q4_0: return "q4_0";
    case COLO_Q4_1: return "q4_1";
    case COLO_Q8_0: return "q8_0";
    case COLO_Q5_0: return "q5_0";
    case COLO_Q5_1: return "q5_1";
    case COLO_Q2_K: return "q2_k";
    case COLO_Q3_K: return "q3_k";
    case COLO_Q4_K: return "q4_k";
    case COLO_Q5_K: return "q5_k";
    case COLO_Q6_K: return "q6_k";
    case COLO_I32: return "i32";
    }
    return NULL;
}

int colo_dtype_block_elems(colo_dtype t)
{
    switch (t) {
    case COLO_F32: case COLO_F16: case COLO_BF16: case COLO_I32: return 1;
    case COLO_Q4_0: case COLO_Q4_1: case COLO_Q8_0: case COLO_Q5_0: case COLO_Q5_1: return 32;
    case COLO_Q2_K: case COLO_Q3_K: case COLO_Q4_K: case COLO_Q5_K: case COLO_Q6_K: return 256;
    }
    return 0;
}

size_t colo_dtype_block_bytes(colo_dtype t)
{
    switch (t) {
    case COLO_F32: case COLO_I32: return 4;
    case COLO_F16: case COLO_BF16: return 2;
    case COLO_Q4_0: return 18;  /* fp16 d + 16 bytes */
    case COLO_Q4_1: return 20;  /* fp16 d, fp16 m + 16 bytes */
    case COLO_Q8_0: return 34;  /* fp16 d + 32 int8 */
    case COLO_Q5_0: return 22;  /* fp16 d, qh[4], 16 bytes */
    case COLO_Q5_1: return 24;  /* fp16 d, fp16 m, qh[4], 16 bytes */
    case COLO_Q2_K: return 84;  /* scales[16], qs[64], fp16 d, fp16 dmin */
    case COLO_Q3_K: return 110; /* hmask[32], qs[64], scales[12], fp16 d */
    case COLO_Q4_K: return 144; /* fp16 d, fp16 dmin, scales[12], qs[128] */
    case COLO_Q5_K: return 176; /* fp16 d, fp16 dmin, scales[12], qh[32], qs[128] */
    case COLO_Q6_K: return 210; /* ql[128], qh[64], int8 scales[16], fp16 d */
    }
    return 0;
}

size_t colo_dtype_row_bytes(colo_dtype t, int64_t n)
{
    int be = colo_dtype_block_elems(t);
    if (!be || n < 0 || n % be)
        return 0;
    return (size_t)(n / be) * colo_dtype_block_bytes(t);
}
