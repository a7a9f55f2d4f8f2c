/* int8 products for one or many rows of x: which version runs, and what
 * they compute.
 *
 * y (m, n) = x (m, k) W^T + b for W in a block format. x is rounded per
 * block of 32 to two signed 8-bit digits: with D = max|x| / 127 over the
 * block, q = round(x / D) and r = round(256 (x / D - q)), so that
 * x ~ (256 q + r) D / 256 within D / 512 (a 16-bit fixed point per block;
 * one digit alone, as llama.cpp's q8_0, is off by up to D / 2, and that
 * rounding moves the logits of a 135M model by as much as 0.5). The 16
 * lanes of a VNNI register are 16 rows of x: colo_cpu_gemm_q8_pack_x lays x
 * out so that dword t of block b holds elements 4t..4t+3 of each row's
 * block, and each weight row, unpacked to one unsigned byte per element, is
 * broadcast 4 bytes at a time into vpdpbusd against each digit. Every
 * format is then the same sum: a weight element is a u + c per scale block
 * (16 or 32 elements), with u the unsigned code (the format's offset, e.g.
 * Q4_0's 8, folded into c), so a scale block adds
 *
 *     a (d sum(u (256 q + r))) + c (d sum(256 q + r)),   d = D / 256
 *
 * to the output: integer dot products (exact: at most 2^28 in an int32),
 * then two FMAs, with d sum(256 q + r) stored beside x. A lane's instruction
 * sequence does not depend on the other lanes, so a row's result is the
 * same bits whatever rows come with it and however many.
 *
 * Two versions, which share all but their kernels (gemm_q8_impl.h):
 * AVX512-VNNI (gemm_q8_vnni.c) and, for CPUs without it, AVX2
 * (gemm_q8_avx2.c), which forms the same exact integer sums with vpmaddubsw
 * and vpmaddwd, 8 lanes a register, and rounds the same float operations in
 * the same order: every output is the same bits on either. For at most 4
 * rows of x (decode) the AVX2 version reads the weight rows where they lie
 * for every format of blocks of 32 and for Q4_K and Q6_K (gemm_q8_avx2.c,
 * "in place"). The VNNI version reads Q4_0, Q4_1 and Q8_0 rows in place
 * itself, for 1 to 16 rows of x (its narrow kernel, 16 weight rows a
 * register, each block's codes transposed as they are loaded); a single
 * row of Q8_0 and of the other formats takes the AVX2 version's kernel on
 * VNNI CPUs too, where it is the faster one (its copy compiled for them,
 * gemm_q8_avx2_vnni.c, which adds each pair of 16-bit products with
 * vpdpwssd). This file is compiled for any x86-64 CPU colo runs on: it
 * picks the version and calls it. */
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/ops.h"

#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

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
    return (size_t)((m + COLO_CPU_GEMM_Q8_GROUP - 1) / COLO_CPU_GEMM_Q8_GROUP) * (size_t)(k / 32) *
           sizeof(colo_q8_xblk);
}

size_t colo_cpu_gemm_q8_scratch_bytes(int k)
{
    size_t ns = (size_t)(k / 32) * 2;
    /* codes (as bytes, and as 16 bits for AVX2's Q8_0) and scales of
     * COLO_CPU_GEMM_Q8_ROWS rows; x as 16-bit pairs for AVX2's Q8_0 */
    return (size_t)COLO_CPU_GEMM_Q8_ROWS * (3 * (size_t)k + 2 * ns * sizeof(float)) + 4 * 2 * (size_t)k +
           /* and the block sums and scales of the narrow kernel that reads rows in place (gemm_q8_impl.h) */
           (size_t)(2 * 4 + 1) * COLO_CPU_GEMM_Q8_ROWS * ((size_t)(k / 32 + 7) & ~(size_t)7) * 4;
}

/* The highest version this CPU and this build run. */
static colo_cpu_q8_isa cpu_isa(void)
{
#if defined(__x86_64__)
    if (colo_cpu_gemm_q8_built_vnni() && __builtin_cpu_supports("avx512vnni") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
        return COLO_CPU_Q8_VNNI;
    unsigned a, b, c, d; /* F16C from cpuid: not every compiler's __builtin_cpu_supports knows it */
    bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
    if (colo_cpu_gemm_q8_built_avx2() && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c)
        return COLO_CPU_Q8_AVX2;
#endif
    return COLO_CPU_Q8_OFF;
}

/* The version in use: a colo_cpu_q8_isa, or -1 before the first call. */
static int q8_isa = -1;

colo_cpu_q8_isa colo_cpu_gemm_q8_isa(void)
{
    int isa = __atomic_load_n(&q8_isa, __ATOMIC_RELAXED);
    if (isa >= 0)
        return (colo_cpu_q8_isa)isa;
    /* Every thread that gets here computes the same value. */
    isa = cpu_isa();
    const char *want = getenv("COLO_CPU_GEMM_Q8");
    if (want && !strcmp(want, "off"))
        isa = COLO_CPU_Q8_OFF;
    else if (want && !strcmp(want, "avx2") && isa > COLO_CPU_Q8_AVX2)
        isa = COLO_CPU_Q8_AVX2;
    __atomic_store_n(&q8_isa, isa, __ATOMIC_RELAXED);
    return (colo_cpu_q8_isa)isa;
}

bool colo_cpu_gemm_q8_set_isa(colo_cpu_q8_isa isa)
{
    if (isa > cpu_isa())
        return false;
    __atomic_store_n(&q8_isa, (int)isa, __ATOMIC_RELAXED);
    return true;
}

bool colo_cpu_gemm_q8_cpu(void) { return colo_cpu_gemm_q8_isa() != COLO_CPU_Q8_OFF; }

const char *colo_cpu_kernels_name(void)
{
    switch (colo_cpu_gemm_q8_isa()) {
    case COLO_CPU_Q8_VNNI: return "AVX512-VNNI";
    case COLO_CPU_Q8_AVX2: return "AVX2";
    default: return "generic";
    }
}

void colo_cpu_gemm_q8_pack_x(const float *x, int x_stride, int m, int k, int g0, int g1, colo_q8_xblk *xp)
{
    if (colo_cpu_gemm_q8_isa() == COLO_CPU_Q8_VNNI)
        colo_cpu_gemm_q8_pack_x_vnni(x, x_stride, m, k, g0, g1, xp);
    else
        colo_cpu_gemm_q8_pack_x_avx2(x, x_stride, m, k, g0, g1, xp);
}

void colo_cpu_gemm_q8(const void *w, colo_dtype t, int64_t r0, int64_t r1, int k, const colo_q8_xblk *xp, int m,
                      const float *bias, float *y, int y_stride, void *scratch)
{
    /* Rows in place: VNNI's narrow kernel reads Q4_0, Q4_1 and Q8_0 rows
     * where they lie, for 1 to 16 rows of x (a single row of Q8_0 aside);
     * for a single row of Q8_0 and of the formats VNNI's kernel unpacks
     * first, the AVX2 version's in-place kernel is the faster (Zen 5, one
     * row of Gemma 3's 262144 x 640 Q8_0 output: 4.5 ms against 4.9;
     * docs/BENCHMARKS.md, "The narrow kernels' prefetches"). The bits are
     * the same either way. */
    bool vnni = colo_cpu_gemm_q8_isa() == COLO_CPU_Q8_VNNI;
    bool vnni_rows = vnni && colo_cpu_gemm_q8_in_place_vnni(t) && !(m == 1 && t == COLO_Q8_0);
    bool rows_in_place = m == 1 && !vnni_rows && colo_cpu_gemm_q8_in_place_avx2(t);
    if (vnni && !rows_in_place)
        colo_cpu_gemm_q8_vnni(w, t, r0, r1, k, xp, m, bias, y, y_stride, scratch);
    else if (vnni && colo_cpu_gemm_q8_in_place_avx2vnni(t)) /* that kernel, with vpdpwssd */
        colo_cpu_gemm_q8_avx2vnni(w, t, r0, r1, k, xp, m, bias, y, y_stride, scratch);
    else
        colo_cpu_gemm_q8_avx2(w, t, r0, r1, k, xp, m, bias, y, y_stride, scratch);
}
