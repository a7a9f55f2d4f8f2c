// kernels/cuda/q8_kernels.cuh: the kernels of linear's products on two
// 8-bit digits (linear.cu; the arithmetic in kernels/q8_digits.h).
//
// Included by linear.cu after kernels/cuda/common.cuh, and on the host by
// tests/kernels/test_q8_kernels_emu.cpp after tests/kernels/cuda_emu.h,
// which runs each thread of a block as a host thread: so this file names
// only what both give (threadIdx, blockIdx, blockDim, __syncthreads,
// __syncwarp, int4, float2, make_float2, min) and includes nothing that
// needs CUDA's headers.
#ifndef COLO_KERNELS_CUDA_Q8_KERNELS_CUH
#define COLO_KERNELS_CUDA_Q8_KERNELS_CUH

#include "kernels/q8_digits.h"

#define Q8_TJ 32 // weight rows of a block's tile (a warp's lanes)
#define Q8_TI 8  // rows of x of a block's tile (a warp each)
#define Q8_TB 8  // blocks of 32 a tile stages at a time: Q8_TJ x Q8_TB = its threads
#define Q8_SU (Q8_TJ * 9 + 1) // words of a staged block's codes: rows 9 apart, blocks one bank apart
static_assert(Q8_TJ * Q8_TI == Q8_TJ * Q8_TB, "a tile's warps are its rows of x and its unpackers alike");

// Thread per (row i of x, block b of 32): xd[i * nb + b].
__global__ void q8_digits_kernel(const float *__restrict__ x, int xs, int m, int nb, colo_q8_digits *__restrict__ xd)
{
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (int64_t)m * nb)
        return;
    int64_t i = id / nb, b = id % nb;
    colo_q8_digits_of(x + i * xs + 32 * b, xd + id);
}

// Digits of rows [0, rows) of x, blocks [b0, b0 + cnt), into shared memory:
// row i's block e at dst + i * pitch + 5 e (an 80-byte struct is five
// 16-byte vectors; xd is 16-byte aligned, the stream's scratch).
__device__ __forceinline__ void q8_stage_digits(int4 *dst, int pitch, const colo_q8_digits *__restrict__ xd, int nb,
                                                int b0, int cnt, int rows)
{
    for (int v = threadIdx.x; v < rows * cnt * 5; v += blockDim.x) {
        int i = v / (cnt * 5), e = v % (cnt * 5);
        dst[i * pitch + e] = ((const int4 *)(xd + (size_t)i * nb + b0))[e];
    }
}

// One block's digits from shared memory into registers, four vector loads and one.
union q8_x {
    int4 v[5];
    colo_q8_digits d;
};
__device__ __forceinline__ void q8_load_x(q8_x *o, const int4 *p)
{
#pragma unroll
    for (int e = 0; e < 5; e++)
        o->v[e] = p[e];
}

// Block (x rows i0.., weight rows j0..): thread (lane tj, warp ti) owns
// output (i0 + ti, j0 + tj). For each chunk of Q8_TB blocks the block's
// threads unpack the tile's codes, thread t row t / Q8_TB's block
// t % Q8_TB (so a warp reads four rows' runs of blocks), and stage the x
// rows' digits; then every thread adds the chunk's blocks to its chain in
// order. x's tiles are neighbours in the grid, so a weight tile is read
// from memory once and from L2 by the rest.
__global__ void __launch_bounds__(Q8_TJ *Q8_TB)
    q8_tile_kernel(colo_dtype t, const uint8_t *__restrict__ w, size_t rb, const colo_q8_digits *__restrict__ xd,
                   int nb, const float *__restrict__ bias, float *__restrict__ y, int ys, int m, int n)
{
    __shared__ uint32_t su[Q8_TB * Q8_SU];
    __shared__ float2 sac[Q8_TB][Q8_TJ][2];
    __shared__ int4 sx[Q8_TI * Q8_TB * 5];
    int tj = threadIdx.x % Q8_TJ, ti = threadIdx.x / Q8_TJ;
    int i0 = (int)blockIdx.x * Q8_TI, j0 = (int)blockIdx.y * Q8_TJ, i = i0 + ti, j = j0 + tj;
    int uj = threadIdx.x / Q8_TB, ub = threadIdx.x % Q8_TB;
    int nh = (t == COLO_Q2_K || t == COLO_Q3_K || t == COLO_Q6_K) ? 2 : 1, rows = min(Q8_TI, m - i0);
    float acc = 0.0f;
    for (int b0 = 0; b0 < nb; b0 += Q8_TB) {
        int cnt = min(Q8_TB, nb - b0);
        if (ub < cnt && j0 + uj < n) {
            uint32_t uw[8];
            float a[2] = {0.0f, 0.0f}, c[2] = {0.0f, 0.0f};
            colo_q8_unpack_words(t, w + (size_t)(j0 + uj) * rb, b0 + ub, uw, a, c);
#pragma unroll
            for (int q = 0; q < 8; q++)
                su[ub * Q8_SU + uj * 9 + q] = uw[q];
            sac[ub][uj][0] = make_float2(a[0], c[0]);
            sac[ub][uj][1] = make_float2(a[1], c[1]);
        }
        q8_stage_digits(sx, Q8_TB * 5, xd + (size_t)i0 * nb, nb, b0, cnt, rows);
        __syncthreads();
        if (i < m && j < n)
            for (int bb = 0; bb < cnt; bb++) {
                uint32_t uw[8];
#pragma unroll
                for (int q = 0; q < 8; q++)
                    uw[q] = su[bb * Q8_SU + tj * 9 + q];
                float2 ac0 = sac[bb][tj][0], ac1 = sac[bb][tj][1];
                float a[2] = {ac0.x, ac1.x}, c[2] = {ac0.y, ac1.y};
                q8_x x;
                q8_load_x(&x, sx + ti * Q8_TB * 5 + 5 * bb);
                acc = colo_q8_block(acc, uw, a, c, nh, &x.d);
            }
        __syncthreads();
    }
    if (i < m && j < n)
        y[(size_t)i * ys + j] = COLO_Q8_ADD(acc, bias ? bias[j] : 0.0f);
}

#define Q8_ROWS_MAX 8
#define Q8_WARPS 8 // warps (weight rows) per block of q8_rows_kernel: eight rows share each staging of x
#define Q8_SF 65   // floats of a row of x's f per warp: blocks' halves, then one to shift banks

// Warp per weight row r against the M >= m rows of x, in rounds of 32
// blocks: the block's threads stage the round's digits of x, lane l
// unpacks block b0 + l and forms its integer products with every row of
// x (4-byte dot products), leaving f and the block's a and c in shared
// memory; then lane i runs output (i, r)'s chain over the round's blocks
// in order.
template <int M>
__global__ void __launch_bounds__(32 * Q8_WARPS)
    q8_rows_kernel(colo_dtype t, const uint8_t *__restrict__ w, size_t rb, const colo_q8_digits *__restrict__ xd,
                   int nb, const float *__restrict__ bias, float *__restrict__ y, int ys, int m, int n)
{
    __shared__ int4 sx[M * (32 * 5 + 1)];
    __shared__ float sf[Q8_WARPS][M * Q8_SF];
    __shared__ float2 sac[Q8_WARPS][64];
    int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    int r = (int)blockIdx.x * Q8_WARPS + warp;
    bool live = r < n;
    const uint8_t *row = w + (size_t)(live ? r : 0) * rb;
    int nh = (t == COLO_Q2_K || t == COLO_Q3_K || t == COLO_Q6_K) ? 2 : 1;
    float acc = 0.0f;
    for (int b0 = 0; b0 < nb; b0 += 32) {
        int cnt = min(32, nb - b0);
        __syncthreads(); // the last round's chains are done with sx
        q8_stage_digits(sx, 32 * 5 + 1, xd, nb, b0, cnt, m);
        __syncthreads();
        if (live && lane < cnt) {
            uint32_t uw[8];
            float a[2] = {0.0f, 0.0f}, c[2] = {0.0f, 0.0f};
            colo_q8_unpack_words(t, row, b0 + lane, uw, a, c);
#pragma unroll
            for (int i = 0; i < M; i++)
                if (i < m) {
                    q8_x x;
                    float f[2] = {0.0f, 0.0f};
                    q8_load_x(&x, sx + i * (32 * 5 + 1) + 5 * lane);
                    colo_q8_block_f(uw, nh, &x.d, f);
                    sf[warp][i * Q8_SF + 2 * lane] = f[0];
                    sf[warp][i * Q8_SF + 2 * lane + 1] = f[1];
                }
            sac[warp][2 * lane] = make_float2(a[0], c[0]);
            sac[warp][2 * lane + 1] = make_float2(a[1], c[1]);
        }
        __syncwarp();
        if (live && lane < m)
            for (int bb = 0; bb < cnt; bb++)
                for (int h = 0; h < nh; h++) {
                    float2 ac = sac[warp][2 * bb + h];
                    const colo_q8_digits *x = (const colo_q8_digits *)(sx + lane * (32 * 5 + 1) + 5 * bb);
                    acc = colo_q8_chain(acc, sf[warp][lane * Q8_SF + 2 * bb + h], ac.x, colo_q8_sum(x, nh, h), ac.y);
                }
        __syncwarp();
    }
    if (live && lane < m)
        y[(size_t)lane * ys + r] = COLO_Q8_ADD(acc, bias ? bias[r] : 0.0f);
}

#endif
