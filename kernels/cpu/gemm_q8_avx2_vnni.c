/* gemm_q8's AVX2 version compiled again for AVX512-VNNI CPUs, as
 * colo_cpu_gemm_q8_*_avx2vnni: the narrow kernel that reads weight rows in
 * place (gemm_q8.c sends it a decode step's one or two rows of x on those
 * CPUs) forms its 16-bit products with vpdpwssd, one instruction where
 * AVX2 takes two (gemm_q8_avx2.c, madd2). The same integer sums, so the
 * same bits as every other version. Compiled with AVX512F, BW, VL and VNNI
 * (CMakeLists.txt); called only on CPUs that have them. */
#define Q8_FN(name) name##_avx2vnni
#include "kernels/cpu/gemm_q8_avx2.c"
