/* gemm_q8 with AVX2, FMA and F16C (gemm_q8_impl.h; gemm_q8.c has the
 * arithmetic): vpmaddubsw and vpmaddwd in place of vpdpbusd, 8 lanes a
 * register, and the same bits as the AVX512-VNNI version. */
#define Q8_WANT_AVX2 1
#define Q8_FN(name) name##_avx2
#include "kernels/cpu/gemm_q8_impl.h"
