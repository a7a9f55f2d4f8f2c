// kernels/cuda/common.cuh: what the CUDA kernels share: launch checks, dtype
// dispatch, reductions and the device-side decoding of GGML block formats.
//
// Block formats (kernels/ops.h, kernels/quant.h), decoded with the same
// arithmetic as the CPU (kernels/cpu/quant.c) so that dequantized values are
// bit-identical: Q4_0 (q - 8) * d, Q4_1 fma(q, d, m), Q8_0 q * d, Q6_K
// (d * scale) * q, Q5_0 (q - 16) * d, Q5_1 fma(q, d, m), Q2_K/Q4_K/Q5_K
// fma(d * sc, q, -(dmin * m)), Q3_K (d * sc) * q. Blocks sit at 2-byte
// alignment in a row (18, 20, 22, 24, 34, 84, 110, 144, 176, 210 bytes), so
// they are read with 16-bit (or byte) loads.
#pragma once

#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

// The runtime's C headers carry no extern "C" of their own.
extern "C" {
#include "runtime/backend.h"
#include "runtime/log.h"
#include "runtime/status.h"
}
#include "kernels/ops.h"
#include "runtime/cuda_impl.h"

// Checks the launch just queued; a launch error becomes the op's status.
#define COLO_LAUNCH_CHECK() COLO_CHECK_CUDA(cudaGetLastError())

static inline unsigned colo_div_up(int64_t a, int64_t b) { return (unsigned)((a + b - 1) / b); }

// Calls f(std::integral_constant<int, T>()) for a weight dtype t; returns
// COLO_EUNSUPPORTED for any other.
template <typename F> static colo_status colo_with_wtype(colo_dtype t, F &&f)
{
    switch (t) {
    case COLO_F32: return f(std::integral_constant<int, COLO_F32>());
    case COLO_F16: return f(std::integral_constant<int, COLO_F16>());
    case COLO_BF16: return f(std::integral_constant<int, COLO_BF16>());
    case COLO_Q4_0: return f(std::integral_constant<int, COLO_Q4_0>());
    case COLO_Q4_1: return f(std::integral_constant<int, COLO_Q4_1>());
    case COLO_Q8_0: return f(std::integral_constant<int, COLO_Q8_0>());
    case COLO_Q6_K: return f(std::integral_constant<int, COLO_Q6_K>());
    case COLO_Q5_0: return f(std::integral_constant<int, COLO_Q5_0>());
    case COLO_Q5_1: return f(std::integral_constant<int, COLO_Q5_1>());
    case COLO_Q2_K: return f(std::integral_constant<int, COLO_Q2_K>());
    case COLO_Q3_K: return f(std::integral_constant<int, COLO_Q3_K>());
    case COLO_Q4_K: return f(std::integral_constant<int, COLO_Q4_K>());
    case COLO_Q5_K: return f(std::integral_constant<int, COLO_Q5_K>());
    default: return COLO_EUNSUPPORTED;
    }
}

__host__ __device__ constexpr bool colo_is_plain(int t) { return t == COLO_F32 || t == COLO_F16 || t == COLO_BF16; }

__device__ __forceinline__ float colo_h2f(uint32_t h) { return __half2float(__ushort_as_half((unsigned short)h)); }
__device__ __forceinline__ float colo_bf2f(uint32_t h) { return __uint_as_float(h << 16); }
__device__ __forceinline__ uint32_t colo_ld16(const uint8_t *p) { return *(const uint16_t *)p; }

// Element i of a row of plain type T (any alignment of the element type).
template <int T> __device__ __forceinline__ float colo_plain_elem(const uint8_t *row, int64_t i)
{
    if constexpr (T == COLO_F32)
        return ((const float *)row)[i];
    else if constexpr (T == COLO_F16)
        return colo_h2f(((const uint16_t *)row)[i]);
    else
        return colo_bf2f(((const uint16_t *)row)[i]);
}

// One decoder per family of block formats, for colo_decode8 below (same
// arguments and results).
// Q4_0 and Q4_1: nibbles, element j with j + 16.
template <int T>
__device__ __forceinline__ void colo_decode8_q4(const uint8_t *row, int64_t sb, float v[8], int64_t &lo, int64_t &hi)
{
    constexpr int bb = T == COLO_Q4_0 ? 18 : 20, qoff = T == COLO_Q4_0 ? 2 : 4;
    const uint8_t *b = row + (sb >> 2) * bb;
    int q = (int)(sb & 3);
    lo = (sb >> 2) * 32 + 4 * q;
    hi = lo + 16;
    uint32_t qs = colo_ld16(b + qoff + 4 * q) | (colo_ld16(b + qoff + 4 * q + 2) << 16);
    float d = colo_h2f(colo_ld16(b));
#pragma unroll
    for (int t = 0; t < 4; t++) {
        int l = (qs >> (8 * t)) & 15, h = (qs >> (8 * t + 4)) & 15;
        if constexpr (T == COLO_Q4_0) {
            v[t] = __fmul_rn((float)(l - 8), d);
            v[t + 4] = __fmul_rn((float)(h - 8), d);
        } else {
            float m = colo_h2f(colo_ld16(b + 2));
            v[t] = __fmaf_rn((float)l, d, m);
            v[t + 4] = __fmaf_rn((float)h, d, m);
        }
    }
}

// Q8_0: 8 consecutive bytes.
template <int T>
__device__ __forceinline__ void colo_decode8_q8(const uint8_t *row, int64_t sb, float v[8], int64_t &lo, int64_t &hi)
{
    const uint8_t *b = row + (sb >> 2) * 34;
    int q = (int)(sb & 3);
    lo = (sb >> 2) * 32 + 8 * q;
    hi = lo + 4;
    float d = colo_h2f(colo_ld16(b));
#pragma unroll
    for (int t = 0; t < 8; t += 2) {
        uint32_t two = colo_ld16(b + 2 + 8 * q + t);
        v[t] = __fmul_rn((float)(int8_t)(two & 255), d);
        v[t + 1] = __fmul_rn((float)(int8_t)(two >> 8), d);
    }
}

// Q6_K: 4 low bits and 2 high bits, a signed 8-bit scale per 16 elements.
template <int T>
__device__ __forceinline__ void colo_decode8_q6k(const uint8_t *row, int64_t sb, float v[8], int64_t &lo, int64_t &hi)
{
    const uint8_t *b = row + (sb >> 5) * 210;
    int j0 = (int)(sb & 31) * 8; // first element within the super-block
    int half = j0 >> 7, quarter = (j0 & 127) >> 5, l0 = j0 & 31;
    lo = (sb >> 5) * 256 + j0;
    hi = lo + 4;
    const uint8_t *ql = b + half * 64 + (quarter & 1) * 32 + l0, *qh = b + 128 + half * 32 + l0;
    int lshift = quarter >= 2 ? 4 : 0, hshift = 2 * quarter;
    float ds = __fmul_rn(colo_h2f(colo_ld16(b + 208)), (float)(int8_t)b[192 + half * 8 + l0 / 16 + 2 * quarter]);
#pragma unroll
    for (int t = 0; t < 8; t += 2) {
        uint32_t l2 = colo_ld16(ql + t), h2 = colo_ld16(qh + t);
#pragma unroll
        for (int u = 0; u < 2; u++) {
            int q = (int)(((l2 >> (8 * u + lshift)) & 15) | (((h2 >> (8 * u + hshift)) & 3) << 4)) - 32;
            v[t + u] = __fmul_rn(ds, (float)q);
        }
    }
}

// Q5_0 and Q5_1: nibbles and a fifth bit from qh, element j with j + 16.
template <int T>
__device__ __forceinline__ void colo_decode8_q5(const uint8_t *row, int64_t sb, float v[8], int64_t &lo, int64_t &hi)
{
    constexpr int bb = T == COLO_Q5_0 ? 22 : 24, hoff = T == COLO_Q5_0 ? 2 : 4, qoff = hoff + 4;
    const uint8_t *b = row + (sb >> 2) * bb;
    int q = (int)(sb & 3);
    lo = (sb >> 2) * 32 + 4 * q;
    hi = lo + 16;
    uint32_t qs = colo_ld16(b + qoff + 4 * q) | (colo_ld16(b + qoff + 4 * q + 2) << 16);
    uint32_t qh = colo_ld16(b + hoff) | (colo_ld16(b + hoff + 2) << 16);
    float d = colo_h2f(colo_ld16(b));
#pragma unroll
    for (int t = 0; t < 4; t++) {
        int l = (int)(((qs >> (8 * t)) & 15) | (((qh >> (4 * q + t)) & 1) << 4));
        int h = (int)(((qs >> (8 * t + 4)) & 15) | (((qh >> (4 * q + t + 16)) & 1) << 4));
        if constexpr (T == COLO_Q5_0) {
            v[t] = __fmul_rn((float)(l - 16), d);
            v[t + 4] = __fmul_rn((float)(h - 16), d);
        } else {
            float m = colo_h2f(colo_ld16(b + 2));
            v[t] = __fmaf_rn((float)l, d, m);
            v[t + 4] = __fmaf_rn((float)h, d, m);
        }
    }
}

// Q4_K and Q5_K: 6-bit scales and mins packed in 12 bytes (Q5_K: a fifth bit per element).
template <int T>
__device__ __forceinline__ void colo_decode8_q45k(const uint8_t *row, int64_t sb, float v[8], int64_t &lo, int64_t &hi)
{
    constexpr int bb = T == COLO_Q4_K ? 144 : 176, qoff = T == COLO_Q4_K ? 16 : 48;
    const uint8_t *b = row + (sb >> 5) * bb, *sc = b + 4;
    int j0 = (int)(sb & 31) * 8, j = j0 >> 5, l0 = j0 & 31;
    lo = (sb >> 5) * 256 + j0;
    hi = lo + 4;
    int s, mn;
    if (j < 4) {
        s = sc[j] & 63;
        mn = sc[j + 4] & 63;
    } else {
        s = (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
        mn = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
    }
    float d1 = __fmul_rn(colo_h2f(colo_ld16(b)), (float)s), m1 = -__fmul_rn(colo_h2f(colo_ld16(b + 2)), (float)mn);
    const uint8_t *qs = b + qoff + 32 * (j >> 1) + l0;
    int shift = 4 * (j & 1);
#pragma unroll
    for (int t = 0; t < 8; t += 2) {
        uint32_t two = colo_ld16(qs + t);
#pragma unroll
        for (int u = 0; u < 2; u++) {
            int q = (int)((two >> (8 * u + shift)) & 15);
            if constexpr (T == COLO_Q5_K)
                q |= ((b[16 + l0 + t + u] >> j) & 1) << 4;
            v[t + u] = __fmaf_rn(d1, (float)q, m1);
        }
    }
}

// Q2_K and Q3_K: 2 bits per element (Q3_K: a third from hmask), a 4-bit scale (Q2_K: and min) per 16.
template <int T>
__device__ __forceinline__ void colo_decode8_q23k(const uint8_t *row, int64_t sb, float v[8], int64_t &lo, int64_t &hi)
{
    constexpr int bb = T == COLO_Q2_K ? 84 : 110, qoff = T == COLO_Q2_K ? 16 : 32;
    const uint8_t *b = row + (sb >> 5) * bb;
    int j0 = (int)(sb & 31) * 8, g = j0 >> 4, l0 = j0 & 31;
    lo = (sb >> 5) * 256 + j0;
    hi = lo + 4;
    const uint8_t *qs = b + qoff + 32 * (j0 >> 7) + l0;
    int shift = 2 * ((j0 & 127) >> 5);
    float dl, ml = 0.0f;
    if constexpr (T == COLO_Q2_K) {
        dl = __fmul_rn(colo_h2f(colo_ld16(b + 80)), (float)(b[g] & 15));
        ml = -__fmul_rn(colo_h2f(colo_ld16(b + 82)), (float)(b[g] >> 4));
    } else {
        const uint8_t *sc = b + 96;
        int slo = g < 8 ? (sc[g] & 15) : (sc[g - 8] >> 4), shi = (sc[8 + (g & 3)] >> (2 * (g >> 2))) & 3;
        dl = __fmul_rn(colo_h2f(colo_ld16(b + 108)), (float)((slo | (shi << 4)) - 32));
    }
#pragma unroll
    for (int t = 0; t < 8; t += 2) {
        uint32_t two = colo_ld16(qs + t);
#pragma unroll
        for (int u = 0; u < 2; u++) {
            int q = (int)((two >> (8 * u + shift)) & 3);
            if constexpr (T == COLO_Q2_K) {
                v[t + u] = __fmaf_rn(dl, (float)q, ml);
            } else {
                q |= ((b[l0 + t + u] >> (j0 >> 5)) & 1) << 2;
                v[t + u] = __fmul_rn(dl, (float)(q - 4));
            }
        }
    }
}

// Plain types: 8 consecutive elements.
template <int T>
__device__ __forceinline__ void colo_decode8_plain(const uint8_t *row, int64_t sb, float v[8], int64_t &lo, int64_t &hi)
{
    lo = sb * 8;
    hi = lo + 4;
#pragma unroll
    for (int t = 0; t < 8; t++)
        v[t] = colo_plain_elem<T>(row, lo + t);
}

// Sub-block sb (8 elements) of a row of type T: v[0..3] are elements
// lo..lo+3 and v[4..7] elements hi..hi+3. Nibble formats pair element j
// (low nibble) with j + 16 (high nibble); every other format gives 8
// consecutive elements (hi = lo + 4). Plain types need k >= 8 * (sb + 1).
template <int T> __device__ __forceinline__ void colo_decode8(const uint8_t *row, int64_t sb, float v[8], int64_t &lo,
                                                              int64_t &hi)
{
    if constexpr (T == COLO_Q4_0 || T == COLO_Q4_1)
        colo_decode8_q4<T>(row, sb, v, lo, hi);
    else if constexpr (T == COLO_Q8_0)
        colo_decode8_q8<T>(row, sb, v, lo, hi);
    else if constexpr (T == COLO_Q6_K)
        colo_decode8_q6k<T>(row, sb, v, lo, hi);
    else if constexpr (T == COLO_Q5_0 || T == COLO_Q5_1)
        colo_decode8_q5<T>(row, sb, v, lo, hi);
    else if constexpr (T == COLO_Q4_K || T == COLO_Q5_K)
        colo_decode8_q45k<T>(row, sb, v, lo, hi);
    else if constexpr (T == COLO_Q2_K || T == COLO_Q3_K)
        colo_decode8_q23k<T>(row, sb, v, lo, hi);
    else
        colo_decode8_plain<T>(row, sb, v, lo, hi);
}

// Sets the stream's error flag (first error wins).
__device__ __forceinline__ void colo_dev_fail(int *flag, int status) { atomicCAS(flag, 0, status); }

__device__ __forceinline__ float colo_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float colo_warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide sum/max for blockDim.x a multiple of 32 (<= 1024); every thread
// gets the result. Every thread of the block must call it.
__device__ __forceinline__ float colo_block_sum(float v)
{
    __shared__ float part[32];
    __syncthreads(); // part may still be read by a previous call
    v = colo_warp_sum(v);
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = v;
    __syncthreads();
    int nw = blockDim.x >> 5;
    v = (int)(threadIdx.x & 31) < nw ? part[threadIdx.x & 31] : 0.0f;
    return colo_warp_sum(v);
}

__device__ __forceinline__ float colo_block_max(float v)
{
    __shared__ float part[32];
    __syncthreads();
    v = colo_warp_max(v);
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = v;
    __syncthreads();
    int nw = blockDim.x >> 5;
    v = (int)(threadIdx.x & 31) < nw ? part[threadIdx.x & 31] : -INFINITY;
    return colo_warp_max(v);
}

// ---- ops defined in one .cu file and put in the table by ops_cuda.cu ----------------------

colo_status colo_cuda_linear(colo_stream *s, const void *w, colo_dtype t, const float *bias, const float *x,
                             int x_stride, float *y, int y_stride, int m, int n, int k);
colo_status colo_cuda_linear_multi(colo_stream *s, const float *x, int x_stride, int m, int k,
                                   const colo_linear_out *out, int n_out);
colo_status colo_cuda_gemm(colo_stream *s, bool ta, bool tb, int m, int n, int k, float alpha, const void *a, int lda,
                           int64_t sa, const void *b, int ldb, int64_t sb, colo_dtype t, float beta, float *c, int ldc,
                           int64_t sc, int batch);
colo_status colo_cuda_dequantize(colo_stream *s, const void *src, colo_dtype t, void *dst, colo_dtype dt, int64_t n);
colo_status colo_cuda_get_rows(colo_stream *s, const void *table, colo_dtype t, int64_t n_rows, int row_len,
                               const int32_t *ids, int n_ids, float *out);
colo_status colo_cuda_lora(colo_stream *s, const float *x, int x_stride, int m, int k, const colo_lora_out *out,
                           int n_out, const int32_t *row_slot, int n_slots, float *tmp, int max_rank);
colo_status colo_cuda_kv_store(colo_stream *s, const float *k, int k_stride, const float *v, int v_stride, void *kc,
                               void *vc, colo_dtype t, const int32_t *slot, int n_tokens, int kv_dim);
colo_status colo_cuda_attention(colo_stream *s, const colo_attn_desc *d, const float *q, const void *kc,
                                const void *vc, float *out);
colo_status colo_cuda_attention_bidir(colo_stream *s, const float *q, int q_stride, const float *k, int k_stride,
                                      const float *v, int v_stride, float *out, const int32_t *len, int batch, int seq,
                                      int n_head, int head_dim, float scale);
