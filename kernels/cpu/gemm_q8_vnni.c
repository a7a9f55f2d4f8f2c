/* gemm_q8 with AVX512-VNNI (gemm_q8_impl.h; gemm_q8.c has the arithmetic).
 * Compiled with AVX512F, BW, VL and VNNI: gemm_q8.c calls it only on CPUs
 * that have them. */
#define Q8_WANT_VNNI 1
#define Q8_FN(name) name##_vnni
#include "kernels/cpu/gemm_q8_impl.h"
