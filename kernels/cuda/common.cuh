// kernels/cuda/common.cuh: shared by the CUDA kernels: launch checks and the
// device-side decoding of GGML block formats.
#pragma once

#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/ops.h"
#include "runtime/cuda_impl.h"

// Checks the launch just queued; a launch error becomes the op's status.
#define COLO_LAUNCH_CHECK() COLO_CUDA_CHECK(cudaGetLastError())

static inline int colo_div_up(int64_t a, int64_t b) { return (int)((a + b - 1) / b); }

__device__ __forceinline__ float colo_h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float colo_bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

struct dblk_q4_0 { uint16_t d; uint8_t qs[16]; };
struct dblk_q4_1 { uint16_t d, m; uint8_t qs[16]; };
struct dblk_q8_0 { uint16_t d; int8_t qs[32]; };
struct dblk_q6_k { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };

// Element i of a row of type t. Byte loads only: blocks are not aligned.
__device__ __forceinline__ float colo_load_elem(colo_dtype t, const uint8_t *row, int64_t i)
{
    switch (t) {
    case COLO_F32: return ((const float *)row)[i];
    case COLO_F16: return colo_h2f(((const uint16_t *)row)[i]);
    case COLO_BF16: return colo_bf2f(((const uint16_t *)row)[i]);
    case COLO_Q4_0: {
        const uint8_t *b = row + (i / 32) * 18;
        int j = (int)(i % 32);
        uint16_t d = (uint16_t)(b[0] | (b[1] << 8));
        int q = j < 16 ? (b[2 + j] & 15) : (b[2 + j - 16] >> 4);
        return (q - 8) * colo_h2f(d);
    }
    case COLO_Q4_1: {
        const uint8_t *b = row + (i / 32) * 20;
        int j = (int)(i % 32);
        uint16_t d = (uint16_t)(b[0] | (b[1] << 8)), m = (uint16_t)(b[2] | (b[3] << 8));
        int q = j < 16 ? (b[4 + j] & 15) : (b[4 + j - 16] >> 4);
        return q * colo_h2f(d) + colo_h2f(m);
    }
    case COLO_Q8_0: {
        const uint8_t *b = row + (i / 32) * 34;
        uint16_t d = (uint16_t)(b[0] | (b[1] << 8));
        return (int8_t)b[2 + i % 32] * colo_h2f(d);
    }
    case COLO_Q6_K: {
        const uint8_t *b = row + (i / 256) * 210;
        int j = (int)(i % 256);
        int half = j / 128, r = j % 128, quarter = r / 32, l = r % 32;
        const uint8_t *ql = b + half * 64, *qh = b + 128 + half * 32;
        const int8_t *sc = (const int8_t *)(b + 192) + half * 8;
        uint16_t d = (uint16_t)(b[208] | (b[209] << 8));
        int lo = quarter == 0 ? (ql[l] & 15) : quarter == 1 ? (ql[l + 32] & 15) : quarter == 2 ? (ql[l] >> 4) : (ql[l + 32] >> 4);
        int hi = (qh[l] >> (2 * quarter)) & 3;
        int q = (lo | (hi << 4)) - 32;
        return colo_h2f(d) * sc[l / 16 + 2 * quarter] * q;
    }
    default: return 0.0f;
    }
}

// Sets the stream's error flag (first error wins).
__device__ __forceinline__ void colo_dev_fail(int *flag, int status)
{
    atomicCAS(flag, 0, status);
}

__device__ __forceinline__ float colo_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float colo_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide sum/max for blockDim.x a multiple of 32 (<= 1024); all threads get the result.
__device__ __forceinline__ float colo_block_sum(float v)
{
    __shared__ float part[32];
    __syncthreads();
    v = colo_warp_sum(v);
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = v;
    __syncthreads();
    int nw = blockDim.x >> 5;
    v = (int)threadIdx.x < nw ? part[threadIdx.x] : 0.0f;
    if (threadIdx.x < 32)
        v = colo_warp_sum(v);
    if (threadIdx.x == 0)
        part[0] = v;
    __syncthreads();
    return part[0];
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
    v = (int)threadIdx.x < nw ? part[threadIdx.x] : -INFINITY;
    if (threadIdx.x < 32)
        v = colo_warp_max(v);
    if (threadIdx.x == 0)
        part[0] = v;
    __syncthreads();
    return part[0];
}
