// Matrix ops on CUDA: linear (any weight dtype), gemm, dequantize, get_rows.
//
// linear, y (m, n) = x (m, k) . W (n, k)^T:
//   - weights in a block format (Q4_0...Q8_0, the K-quants), unless the
//     stream wants exact activations: any m, decode and prefill alike, on
//     two 8-bit digits (kernels/q8_digits.h), the arithmetic of the CPU's
//     gemm_q8 with the same bits. A kernel rounds each block of 32 of x to
//     its digits once. Weights are read 16 bits at a time and their codes
//     kept four to a word, so a block's integer products are 4-byte dot
//     products (dp4a). Up to Q8_ROWS_MAX rows (decode): a warp per weight
//     row, in rounds of 32 blocks; the thread block stages the round's
//     digits of x in shared memory, lane l multiplies block l with every
//     row of x, and lane i then runs output i's chain over the round's
//     blocks in order from what the lanes left in shared memory. More rows:
//     a block of threads takes Q8_TJ weight rows and Q8_TI rows of x, one
//     output each; for each chunk of Q8_TB blocks all its threads unpack
//     the tile's codes into shared memory beside the x rows' digits, and
//     every thread adds the chunk to its output's chain. Both give every
//     output the same operations, so a row's result depends on that row
//     alone.
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
#include "kernels/cuda/q8_kernels.cuh"
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

template <int M>
static colo_status launch_q8_rows(cudaStream_t st, colo_dtype t, const void *w, size_t rb, const colo_q8_digits *xd,
                                  int nb, const float *bias, float *y, int ys, int m, int n)
{
    q8_rows_kernel<M><<<colo_div_up(n, Q8_WARPS), 32 * Q8_WARPS, 0, st>>>(t, (const uint8_t *)w, rb, xd, nb, bias, y,
                                                                           ys, m, n);
    return COLO_LAUNCH_CHECK();
}

// x's digits in the stream's scratch, with extra bytes behind them
// (256-aligned) at *extra_p.
static colo_status q8_prepare(colo_stream *s, const float *x, int xs, int m, int nb, size_t extra,
                              colo_q8_digits **xd, void **extra_p)
{
    size_t xd_bytes = ((size_t)m * nb * sizeof(colo_q8_digits) + 255) & ~(size_t)255;
    colo_status e = COLO_OK;
    *xd = (colo_q8_digits *)colo_cuda_scratch(s, xd_bytes + extra, &e);
    if (!*xd)
        return e;
    if (extra_p)
        *extra_p = (uint8_t *)*xd + xd_bytes;
    int64_t cells = (int64_t)m * nb;
    q8_digits_kernel<<<(unsigned)colo_div_up(cells, 256), 256, 0, colo_cuda_stream(s)>>>(x, xs, m, nb, *xd);
    return COLO_LAUNCH_CHECK();
}

// y = x . W^T [+ bias] from x's digits xd; W 2-aligned.
static colo_status q8_product(cudaStream_t st, colo_dtype t, const void *w, size_t rb, const colo_q8_digits *xd,
                              int nb, const float *bias, float *y, int ys, int m, int n)
{
    if (m == 1)
        return launch_q8_rows<1>(st, t, w, rb, xd, nb, bias, y, ys, m, n);
    if (m == 2)
        return launch_q8_rows<2>(st, t, w, rb, xd, nb, bias, y, ys, m, n);
    if (m <= 4)
        return launch_q8_rows<4>(st, t, w, rb, xd, nb, bias, y, ys, m, n);
    if (m <= Q8_ROWS_MAX)
        return launch_q8_rows<Q8_ROWS_MAX>(st, t, w, rb, xd, nb, bias, y, ys, m, n);
    // x's tiles in gridDim.x, weight tiles in gridDim.y: at most 65,535 of
    // them a launch, so past that many rows of W one launch per slice
    const int slice = 65535 * Q8_TJ;
    colo_status e = COLO_OK;
    for (int j0 = 0; j0 < n && e == COLO_OK; j0 += slice) {
        int nc = n - j0 < slice ? n - j0 : slice;
        dim3 grid(colo_div_up(m, Q8_TI), colo_div_up(nc, Q8_TJ));
        q8_tile_kernel<<<grid, Q8_TJ * Q8_TB, 0, st>>>(t, (const uint8_t *)w + (size_t)j0 * rb, rb, xd, nb,
                                                        bias ? bias + j0 : NULL, y + j0, ys, m, nc);
        e = COLO_LAUNCH_CHECK();
    }
    return e;
}

static colo_status q8_linear(colo_stream *s, const void *w, colo_dtype t, size_t rb, const float *bias,
                             const float *x, int xs, float *y, int ys, int m, int n, int k)
{
    if (k % 32 || m < 1 || n < 1)
        return m < 1 || n < 1 ? COLO_OK : COLO_EINVAL;
    // Misaligned weights (never the case for tensors from an arena or a GGUF
    // file) are copied behind the digits: the kernels read 16 bits at a time.
    bool aligned = wtype_aligned(w, t);
    colo_q8_digits *xd;
    void *wc;
    colo_status e = q8_prepare(s, x, xs, m, k / 32, aligned ? 0 : (size_t)n * rb, &xd, &wc);
    if (e != COLO_OK)
        return e;
    if (!aligned) {
        e = COLO_CHECK_CUDA(cudaMemcpyAsync(wc, w, (size_t)n * rb, cudaMemcpyDeviceToDevice, colo_cuda_stream(s)));
        if (e != COLO_OK)
            return e;
        w = wc;
    }
    return q8_product(colo_cuda_stream(s), t, w, rb, xd, k / 32, bias, y, ys, m, n);
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
        colo_cublas.sgemm(colo_cuda_cublas(s), CUBLAS_OP_T, CUBLAS_OP_N, nt, m, k, &one, wf, k, x, xs, &zero, y, ys));
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

// Several products of one x: on two digits, x is rounded to its digits
// once for all of them (a layer's Q, K and V: one digits kernel, not three);
// otherwise, or for a weight that is not, each as linear.
colo_status colo_cuda_linear_multi(colo_stream *s, const float *x, int x_stride, int m, int k,
                                   const colo_linear_out *out, int n_out)
{
    bool shared = !colo_cuda_exact(s) && k % 32 == 0;
    for (int i = 0; i < n_out && shared; i++)
        shared = colo_q8_has(out[i].w_type) && wtype_aligned(out[i].w, out[i].w_type) &&
                 colo_dtype_row_bytes(out[i].w_type, k) > 0;
    if (!shared)
        return colo_linear_each(colo_cuda_linear, s, x, x_stride, m, k, out, n_out);
    colo_q8_digits *xd;
    colo_status e = q8_prepare(s, x, x_stride ? x_stride : k, m, k / 32, 0, &xd, NULL);
    for (int i = 0; i < n_out && e == COLO_OK; i++)
        e = q8_product(colo_cuda_stream(s), out[i].w_type, out[i].w, colo_dtype_row_bytes(out[i].w_type, k), xd,
                       k / 32, out[i].bias, out[i].y, out[i].y_stride ? out[i].y_stride : out[i].n, m, out[i].n);
    return e;
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
    return COLO_CHECK_CUBLAS(colo_cublas.gemm_strided_batched_ex(
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
