// Matrix ops on CUDA: linear (any weight dtype), gemm, dequantize, get_rows.
//
// linear, y (m, n) = x (m, k) . W (n, k)^T:
//   - weights in a block format (Q4_0...Q8_0, the K-quants), unless the
//     stream wants exact activations: any m, decode and prefill alike, on
//     two 8-bit digits (kernels/q8_digits.h), the arithmetic of the CPU's
//     gemm_q8 with the same bits. A kernel rounds each block of 32 of x to
//     its digits once. Up to Q8_ROWS_MAX rows (decode): a warp per weight
//     row, whose lanes unpack and multiply blocks lane, lane + 32, ... in
//     integers and then chain the blocks' terms in order, each term passed
//     round by a shuffle. More rows: a block of Q8_TJ x Q8_TI threads takes
//     Q8_TJ weight rows and Q8_TI rows of x, one output each; for each block
//     of 32, one warp unpacks the tile's codes and scales into shared
//     memory (a lane a row) beside the x rows' digits, and every thread adds
//     its block to its output's chain. Both give every output the same
//     operations, so a row's result depends on that row alone.
//   - otherwise, m <= MATVEC_MAX_M (decode, batches up to 64): a warp per weight row
//     reads the row's blocks, decodes them in registers and dots them with
//     up to 8 rows of x; more rows go in chunks of 8, one block per chunk,
//     and the chunks of a group of W rows are neighbours in the grid, so
//     they run together and all but the first read W from L2. Memory-bound
//     on W. A row of y does not depend on the other rows of x (the same
//     bits at any batch size up to MATVEC_MAX_M).
//   - larger m (prefill): W is expanded to F32, MATMUL_TILE_BYTES of rows at
//     a time, into the stream's scratch (colo_cuda_scratch), and cuBLAS
//     multiplies in F32 (F32 weights go straight to cuBLAS). Products stay
//     exact F32 like the CPU backend's multi-row path, which the parity
//     tests hold both to.
#include "kernels/cuda/common.cuh"
#include "kernels/q8_digits.h"

#define MATVEC_MAX_M 64
#define MATVEC_WARPS 4
#define MATMUL_TILE_BYTES ((size_t)64 << 20)

// Blocks are read with 16-bit loads, F32 elements with 32-bit ones.
static bool wtype_aligned(const void *p, colo_dtype t) { return ((uintptr_t)p % (t == COLO_F32 ? 4 : 2)) == 0; }

// ---- mat-vec -------------------------------------------------------------------------------

template <bool VEC> __device__ __forceinline__ void load4(const float *p, float o[4])
{
    if constexpr (VEC) {
        float4 f = *(const float4 *)p;
        o[0] = f.x, o[1] = f.y, o[2] = f.z, o[3] = f.w;
    } else {
#pragma unroll
        for (int t = 0; t < 4; t++)
            o[t] = p[t];
    }
}

// Warp per row r of W; rows [m0, m0 + mc) of x with mc <= M. Block b takes
// chunk b % chunks of x's rows against W's row group b / chunks.
// XVEC: x rows are 16-byte aligned (x and x_stride), so 4 floats load at once.
template <int T, int M, bool XVEC>
__global__ void __launch_bounds__(32 * MATVEC_WARPS)
    matvec_kernel(const uint8_t *__restrict__ w, size_t row_bytes, const float *__restrict__ bias,
                  const float *__restrict__ x, int xs, float *__restrict__ y, int ys, int m, int n, int k)
{
    int chunks = (m + M - 1) / M;
    int r = (int)(blockIdx.x / chunks) * MATVEC_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (r >= n)
        return;
    int m0 = (int)(blockIdx.x % chunks) * M, mc = min(M, m - m0);
    x += (size_t)m0 * xs;
    y += (size_t)m0 * ys;
    const uint8_t *row = w + (size_t)r * row_bytes;
    float acc[M];
#pragma unroll
    for (int i = 0; i < M; i++)
        acc[i] = 0.0f;
    int64_t nsb = k / 8;
    for (int64_t sb = lane; sb < nsb; sb += 32) {
        float v[8];
        int64_t lo, hi;
        colo_decode8<T>(row, sb, v, lo, hi);
#pragma unroll
        for (int i = 0; i < M; i++) {
            if (i < mc) {
                float a[4], b[4];
                load4<XVEC>(x + (size_t)i * xs + lo, a);
                load4<XVEC>(x + (size_t)i * xs + hi, b);
                float s = acc[i];
#pragma unroll
                for (int t = 0; t < 4; t++)
                    s = fmaf(v[t], a[t], s);
#pragma unroll
                for (int t = 0; t < 4; t++)
                    s = fmaf(v[t + 4], b[t], s);
                acc[i] = s;
            }
        }
    }
    if constexpr (colo_is_plain(T)) { // k % 8 trailing elements
        int64_t j = nsb * 8 + lane;
        if (j < k) {
            float wv = colo_plain_elem<T>(row, j);
#pragma unroll
            for (int i = 0; i < M; i++)
                if (i < mc)
                    acc[i] = fmaf(wv, x[(size_t)i * xs + j], acc[i]);
        }
    }
    float b = bias ? bias[r] : 0.0f;
#pragma unroll
    for (int i = 0; i < M; i++) {
        float v = colo_warp_sum(acc[i]);
        if (lane == 0 && i < mc)
            y[(size_t)i * ys + r] = v + b;
    }
}

template <int T, int M>
static colo_status launch_matvec(colo_stream *s, const void *w, size_t rb, const float *bias, const float *x, int xs,
                                 float *y, int ys, int m, int n, int k)
{
    dim3 grid((unsigned)(colo_div_up(n, MATVEC_WARPS) * colo_div_up(m, M))), block(32 * MATVEC_WARPS);
    bool xvec = ((uintptr_t)x % 16) == 0 && xs % 4 == 0;
    if (xvec)
        matvec_kernel<T, M, true><<<grid, block, 0, colo_cuda_stream(s)>>>((const uint8_t *)w, rb, bias, x, xs, y, ys,
                                                                           m, n, k);
    else
        matvec_kernel<T, M, false><<<grid, block, 0, colo_cuda_stream(s)>>>((const uint8_t *)w, rb, bias, x, xs, y,
                                                                            ys, m, n, k);
    return COLO_LAUNCH_CHECK();
}

// ---- expansion to F32 / F16 ----------------------------------------------------------------

// Thread per sub-block of 8 over n_sb sub-blocks of src read as one long row
// (rows of block formats are whole blocks, so rows concatenate); plain types
// also take the n % 8 trailing elements (thread n_sb).
template <int T, bool F16OUT>
__global__ void expand_kernel(const uint8_t *__restrict__ src, void *__restrict__ dst, int64_t n)
{
    int64_t sb = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, n_sb = n / 8;
    if (sb < n_sb) {
        float v[8];
        int64_t lo, hi;
        colo_decode8<T>(src, sb, v, lo, hi);
#pragma unroll
        for (int t = 0; t < 8; t++) {
            int64_t e = (t < 4 ? lo : hi) + (t & 3);
            if constexpr (F16OUT)
                ((__half *)dst)[e] = __float2half_rn(v[t]);
            else
                ((float *)dst)[e] = v[t];
        }
    } else if constexpr (colo_is_plain(T)) {
        if (sb == n_sb)
            for (int64_t e = n_sb * 8; e < n; e++) {
                float v = colo_plain_elem<T>(src, e);
                if constexpr (F16OUT)
                    ((__half *)dst)[e] = __float2half_rn(v);
                else
                    ((float *)dst)[e] = v;
            }
    }
}

template <int T>
static colo_status launch_expand(cudaStream_t st, const void *src, void *dst, bool f16, int64_t n)
{
    unsigned blocks = colo_div_up(n / 8 + 1, 256);
    if (f16)
        expand_kernel<T, true><<<blocks, 256, 0, st>>>((const uint8_t *)src, dst, n);
    else
        expand_kernel<T, false><<<blocks, 256, 0, st>>>((const uint8_t *)src, dst, n);
    return COLO_LAUNCH_CHECK();
}

colo_status colo_cuda_dequantize(colo_stream *s, const void *src, colo_dtype t, void *dst, colo_dtype dt, int64_t n)
{
    if (dt != COLO_F32 && dt != COLO_F16)
        return COLO_EUNSUPPORTED;
    if (!wtype_aligned(src, t) || ((uintptr_t)dst % (dt == COLO_F32 ? 4 : 2)) != 0) {
        COLO_ERROR("cuda: dequantize: misaligned source or destination");
        return COLO_EINVAL;
    }
    return colo_with_wtype(t, [&](auto tt) {
        return launch_expand<decltype(tt)::value>(colo_cuda_stream(s), src, dst, dt == COLO_F16, n);
    });
}

// ---- products on two 8-bit digits ---------------------------------------------------------

#define Q8_TJ 32 // weight rows of a block's tile (a warp's lanes)
#define Q8_TI 8  // rows of x of a block's tile (a warp each)

// Thread per (row i of x, block b of 32): xd[i * nb + b].
__global__ void q8_digits_kernel(const float *__restrict__ x, int xs, int m, int nb, colo_q8_digits *__restrict__ xd)
{
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (int64_t)m * nb)
        return;
    int64_t i = id / nb, b = id % nb;
    colo_q8_digits_of(x + i * xs + 32 * b, xd + id);
}

// Block (weight rows j0.., x rows i0..); thread (lane tj, warp ti): output
// (i0 + ti, j0 + tj) as one chain over the blocks in order.
__global__ void __launch_bounds__(Q8_TJ *Q8_TI)
    q8_linear_kernel(colo_dtype t, const uint8_t *__restrict__ w, size_t rb, const colo_q8_digits *__restrict__ xd,
                     int nb, const float *__restrict__ bias, float *__restrict__ y, int ys, int m, int n)
{
    __shared__ uint8_t su[Q8_TJ][32];
    __shared__ float sa[Q8_TJ][2], sc[Q8_TJ][2];
    __shared__ colo_q8_digits sx[Q8_TI];
    __shared__ int snh;
    int tj = threadIdx.x % Q8_TJ, ti = threadIdx.x / Q8_TJ;
    int j0 = blockIdx.x * Q8_TJ, i0 = blockIdx.y * Q8_TI, j = j0 + tj, i = i0 + ti;
    float acc = 0.0f;
    for (int b = 0; b < nb; b++) {
        if (ti == 0 && j < n) {
            int nh = colo_q8_unpack(t, w + (size_t)j * rb, b, su[tj], sa[tj], sc[tj]);
            if (tj == 0)
                snh = nh;
        } else if (ti == 1 && tj < Q8_TI && i0 + tj < m) {
            sx[tj] = xd[(size_t)(i0 + tj) * nb + b];
        }
        __syncthreads();
        if (j < n && i < m)
            acc = colo_q8_block(acc, su[tj], sa[tj], sc[tj], snh, &sx[ti]);
        __syncthreads();
    }
    if (j < n && i < m)
        y[(size_t)i * ys + j] = COLO_Q8_ADD(acc, bias ? bias[j] : 0.0f);
}

#define Q8_ROWS_MAX 8
#define Q8_WARPS 4 // warps (weight rows) per block of q8_rows_kernel

// Warp per weight row r against the M >= m rows of x: lane l takes blocks
// l, l + 32, ... as far as their integer products; then every lane runs
// the chain over the 32 blocks of a round in order, taking each block's
// terms from its lane.
template <int M>
__global__ void __launch_bounds__(32 * Q8_WARPS)
    q8_rows_kernel(colo_dtype t, const uint8_t *__restrict__ w, size_t rb, const colo_q8_digits *__restrict__ xd,
                   int nb, const float *__restrict__ bias, float *__restrict__ y, int ys, int m, int n)
{
    int r = (int)blockIdx.x * Q8_WARPS + (int)(threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (r >= n)
        return;
    const uint8_t *row = w + (size_t)r * rb;
    float acc[M];
#pragma unroll
    for (int i = 0; i < M; i++)
        acc[i] = 0.0f;
    int nh = (t == COLO_Q2_K || t == COLO_Q3_K || t == COLO_Q6_K) ? 2 : 1;
    for (int b0 = 0; b0 < nb; b0 += 32) {
        int b = b0 + lane, cnt = min(32, nb - b0);
        uint8_t u[32];
        float a[2] = {0.0f, 0.0f}, c[2] = {0.0f, 0.0f}, f[M][2], sx[M][2];
#pragma unroll
        for (int i = 0; i < M; i++)
            f[i][0] = f[i][1] = sx[i][0] = sx[i][1] = 0.0f;
        if (b < nb) {
            colo_q8_unpack(t, row, b, u, a, c);
#pragma unroll
            for (int i = 0; i < M; i++)
                if (i < m) {
                    const colo_q8_digits *x = xd + (size_t)i * nb + b;
                    colo_q8_block_f(u, nh, x, f[i]);
                    sx[i][0] = colo_q8_sum(x, nh, 0);
                    sx[i][1] = nh == 2 ? colo_q8_sum(x, nh, 1) : 0.0f;
                }
        }
        for (int bb = 0; bb < cnt; bb++)
            for (int h = 0; h < nh; h++) {
                float ab = __shfl_sync(0xffffffffu, a[h], bb), cb = __shfl_sync(0xffffffffu, c[h], bb);
#pragma unroll
                for (int i = 0; i < M; i++) {
                    float fi = __shfl_sync(0xffffffffu, f[i][h], bb), si = __shfl_sync(0xffffffffu, sx[i][h], bb);
                    acc[i] = colo_q8_chain(acc[i], fi, ab, si, cb);
                }
            }
    }
    if (lane == 0)
        for (int i = 0; i < m && i < M; i++)
            y[(size_t)i * ys + r] = COLO_Q8_ADD(acc[i], bias ? bias[r] : 0.0f);
}

template <int M>
static colo_status launch_q8_rows(cudaStream_t st, colo_dtype t, const void *w, size_t rb, const colo_q8_digits *xd,
                                  int nb, const float *bias, float *y, int ys, int m, int n)
{
    q8_rows_kernel<M><<<colo_div_up(n, Q8_WARPS), 32 * Q8_WARPS, 0, st>>>(t, (const uint8_t *)w, rb, xd, nb, bias, y,
                                                                           ys, m, n);
    return COLO_LAUNCH_CHECK();
}

static colo_status q8_linear(colo_stream *s, const void *w, colo_dtype t, size_t rb, const float *bias,
                             const float *x, int xs, float *y, int ys, int m, int n, int k)
{
    if (k % 32 || m < 1 || n < 1)
        return m < 1 || n < 1 ? COLO_OK : COLO_EINVAL;
    cudaStream_t st = colo_cuda_stream(s);
    int nb = k / 32;
    colo_status e = COLO_OK;
    colo_q8_digits *xd = (colo_q8_digits *)colo_cuda_scratch(s, (size_t)m * nb * sizeof(colo_q8_digits), &e);
    if (!xd)
        return e;
    int64_t cells = (int64_t)m * nb;
    q8_digits_kernel<<<(unsigned)colo_div_up(cells, 256), 256, 0, st>>>(x, xs, m, nb, xd);
    if ((e = COLO_LAUNCH_CHECK()) != COLO_OK)
        return e;
    if (m == 1)
        return launch_q8_rows<1>(st, t, w, rb, xd, nb, bias, y, ys, m, n);
    if (m == 2)
        return launch_q8_rows<2>(st, t, w, rb, xd, nb, bias, y, ys, m, n);
    if (m <= 4)
        return launch_q8_rows<4>(st, t, w, rb, xd, nb, bias, y, ys, m, n);
    if (m <= Q8_ROWS_MAX)
        return launch_q8_rows<Q8_ROWS_MAX>(st, t, w, rb, xd, nb, bias, y, ys, m, n);
    // gridDim.y is at most 65535: past that many tiles of rows, one launch per slice of rows
    const int slice = 65535 * Q8_TI;
    for (int i0 = 0; i0 < m && e == COLO_OK; i0 += slice) {
        int mc = m - i0 < slice ? m - i0 : slice;
        dim3 grid((unsigned)colo_div_up(n, Q8_TJ), (unsigned)colo_div_up(mc, Q8_TI));
        q8_linear_kernel<<<grid, Q8_TJ * Q8_TI, 0, st>>>(t, (const uint8_t *)w, rb, xd + (size_t)i0 * nb, nb, bias,
                                                         y + (size_t)i0 * ys, ys, mc, n);
        e = COLO_LAUNCH_CHECK();
    }
    return e;
}

// ---- linear --------------------------------------------------------------------------------

__global__ void add_bias_kernel(float *y, int ys, const float *bias, int m, int n)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)m * n)
        return;
    y[(i / n) * ys + i % n] += bias[i % n];
}

// Row-major y (m, nt) = x (m, k) . W (nt, k)^T  <=>  column-major
// y^T (nt, m) = W (k, nt)^T . x^T (k, m): W as stored is column-major (k, nt).
static colo_status sgemm_wt(colo_stream *s, const float *wf, const float *x, int xs, float *y, int ys, int m, int nt,
                            int k)
{
    const float one = 1.0f, zero = 0.0f;
    return COLO_CHECK_CUBLAS(
        cublasSgemm(colo_cuda_cublas(s), CUBLAS_OP_T, CUBLAS_OP_N, nt, m, k, &one, wf, k, x, xs, &zero, y, ys));
}

colo_status colo_cuda_linear(colo_stream *s, const void *w, colo_dtype t, const float *bias, const float *x,
                             int x_stride, float *y, int y_stride, int m, int n, int k)
{
    cudaStream_t st = colo_cuda_stream(s);
    int xs = x_stride ? x_stride : k, ys = y_stride ? y_stride : n;
    size_t rb = colo_dtype_row_bytes(t, k);
    if (rb == 0)
        return COLO_EINVAL;
    if (colo_q8_has(t) && !colo_cuda_exact(s))
        return q8_linear(s, w, t, rb, bias, x, xs, y, ys, m, n, k);
    bool aligned = wtype_aligned(w, t);
    if (m <= MATVEC_MAX_M && aligned) {
        return colo_with_wtype(t, [&](auto tt) {
            constexpr int T = decltype(tt)::value;
            if (m == 1)
                return launch_matvec<T, 1>(s, w, rb, bias, x, xs, y, ys, m, n, k);
            if (m == 2)
                return launch_matvec<T, 2>(s, w, rb, bias, x, xs, y, ys, m, n, k);
            if (m <= 4)
                return launch_matvec<T, 4>(s, w, rb, bias, x, xs, y, ys, m, n, k);
            return launch_matvec<T, 8>(s, w, rb, bias, x, xs, y, ys, m, n, k);
        });
    }
    colo_status e = COLO_OK;
    if (t == COLO_F32 && ((uintptr_t)w % 4) == 0) {
        e = sgemm_wt(s, (const float *)w, x, xs, y, ys, m, n, k);
    } else {
        int64_t tile_rows = (int64_t)(MATMUL_TILE_BYTES / ((size_t)k * sizeof(float)));
        if (tile_rows < 1)
            tile_rows = 1;
        if (tile_rows > n)
            tile_rows = n;
        // Misaligned weights (never the case for tensors from an arena or a
        // GGUF file) are first copied, tile by tile, behind the F32 tile.
        size_t f32_bytes = ((size_t)tile_rows * k * sizeof(float) + 255) & ~(size_t)255;
        size_t want = f32_bytes + (aligned ? 0 : (size_t)tile_rows * rb);
        float *tmp = (float *)colo_cuda_scratch(s, want, &e);
        if (!tmp)
            return e;
        uint8_t *packed = (uint8_t *)tmp + f32_bytes;
        for (int64_t r0 = 0; r0 < n && e == COLO_OK; r0 += tile_rows) {
            int nt = (int)(n - r0 < tile_rows ? n - r0 : tile_rows);
            const uint8_t *src = (const uint8_t *)w + (size_t)r0 * rb;
            if (!aligned) {
                e = COLO_CHECK_CUDA(cudaMemcpyAsync(packed, src, (size_t)nt * rb, cudaMemcpyDeviceToDevice, st));
                if (e != COLO_OK)
                    break;
                src = packed;
            }
            e = colo_with_wtype(t, [&](auto tt) {
                return launch_expand<decltype(tt)::value>(st, src, tmp, false, (int64_t)nt * k);
            });
            if (e == COLO_OK)
                e = sgemm_wt(s, tmp, x, xs, y + r0, ys, m, nt, k);
        }
    }
    if (e != COLO_OK || !bias)
        return e;
    add_bias_kernel<<<colo_div_up((int64_t)m * n, 256), 256, 0, st>>>(y, ys, bias, m, n);
    return COLO_LAUNCH_CHECK();
}

// ---- gemm ----------------------------------------------------------------------------------

colo_status colo_cuda_gemm(colo_stream *s, bool ta, bool tb, int m, int n, int k, float alpha, const void *a, int lda,
                           int64_t sa, const void *b, int ldb, int64_t sb, colo_dtype t, float beta, float *c, int ldc,
                           int64_t sc, int batch)
{
    if (t != COLO_F32 && t != COLO_F16)
        return COLO_EUNSUPPORTED;
    // Row-major C = op(A) op(B)  <=>  column-major C^T = op(B)^T op(A)^T, where
    // a row-major matrix as stored is its transpose in column-major terms.
    cudaDataType_t dt = t == COLO_F16 ? CUDA_R_16F : CUDA_R_32F;
    return COLO_CHECK_CUBLAS(cublasGemmStridedBatchedEx(
        colo_cuda_cublas(s), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, dt,
        ldb, sb, a, dt, lda, sa, &beta, c, CUDA_R_32F, ldc, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// ---- get_rows ------------------------------------------------------------------------------

// Block per id; threads over the row's sub-blocks.
template <int T>
__global__ void get_rows_kernel(const uint8_t *__restrict__ table, size_t rb, int64_t n_rows, int row_len,
                                const int32_t *__restrict__ ids, float *__restrict__ out, int *flag)
{
    int32_t id = ids[blockIdx.x];
    float *o = out + (size_t)blockIdx.x * row_len;
    if (id < 0 || id >= n_rows) {
        if (threadIdx.x == 0)
            colo_dev_fail(flag, COLO_EINVAL);
        for (int j = threadIdx.x; j < row_len; j += blockDim.x)
            o[j] = 0.0f;
        return;
    }
    const uint8_t *row = table + (size_t)id * rb;
    int n_sb = row_len / 8;
    for (int sb = threadIdx.x; sb < n_sb; sb += blockDim.x) {
        float v[8];
        int64_t lo, hi;
        colo_decode8<T>(row, sb, v, lo, hi);
#pragma unroll
        for (int t = 0; t < 4; t++) {
            o[lo + t] = v[t];
            o[hi + t] = v[t + 4];
        }
    }
    if constexpr (colo_is_plain(T))
        for (int j = n_sb * 8 + threadIdx.x; j < row_len; j += blockDim.x)
            o[j] = colo_plain_elem<T>(row, j);
}

colo_status colo_cuda_get_rows(colo_stream *s, const void *table, colo_dtype t, int64_t n_rows, int row_len,
                               const int32_t *ids, int n_ids, float *out)
{
    size_t rb = colo_dtype_row_bytes(t, row_len);
    if (rb == 0)
        return COLO_EINVAL;
    if (!wtype_aligned(table, t)) {
        COLO_ERROR("cuda: get_rows: misaligned table");
        return COLO_EINVAL;
    }
    int threads = row_len / 8 >= 128 ? 128 : 64;
    return colo_with_wtype(t, [&](auto tt) {
        get_rows_kernel<decltype(tt)::value><<<n_ids, threads, 0, colo_cuda_stream(s)>>>(
            (const uint8_t *)table, rb, n_rows, row_len, ids, out, colo_cuda_error_flag(s));
        return COLO_LAUNCH_CHECK();
    });
}
