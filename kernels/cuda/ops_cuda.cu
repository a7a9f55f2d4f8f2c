// The CUDA op table: every op of kernels/ops.h.
//
// linear: few rows of x (decode) use a warp per weight row, decoding the
// row's blocks in registers and dotting it with every x row (weights read
// once); more rows (prefill) expand W to F32 in the stream's scratch and use
// cuBLAS. Row ops use a block per row; attention a block per (token, head).
#include "kernels/cuda/common.cuh"

#include <math.h>

#define LINEAR_MAX_M 8

// ---- linear --------------------------------------------------------------------------

template <int M>
__global__ void linear_rows_kernel(const uint8_t *w, colo_dtype t, size_t row_bytes, const float *bias,
                                   const float *x, int xs, float *y, int ys, int m, int n, int k)
{
    int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (r >= n)
        return;
    const uint8_t *row = w + (size_t)r * row_bytes;
    float acc[M];
#pragma unroll
    for (int i = 0; i < M; i++)
        acc[i] = 0.0f;
    for (int j = lane; j < k; j += 32) {
        float wv = colo_load_elem(t, row, j);
#pragma unroll
        for (int i = 0; i < M; i++)
            if (i < m)
                acc[i] += wv * x[(size_t)i * xs + j];
    }
#pragma unroll
    for (int i = 0; i < M; i++) {
        if (i >= m)
            break;
        float v = colo_warp_sum(acc[i]);
        if (lane == 0)
            y[(size_t)i * ys + r] = v + (bias ? bias[r] : 0.0f);
    }
}

__global__ void dequant_kernel(const uint8_t *src, colo_dtype t, float *dst32, uint16_t *dst16, int64_t n)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float v = colo_load_elem(t, src, i);
    if (dst32)
        dst32[i] = v;
    else
        dst16[i] = __half_as_ushort(__float2half_rn(v));
}

__global__ void add_bias_kernel(float *y, int ys, const float *bias, int m, int n)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)m * n)
        return;
    y[(i / n) * ys + i % n] += bias[i % n];
}

static colo_status cuda_linear(colo_stream *s, const void *w, colo_dtype t, const float *bias, const float *x,
                               int x_stride, float *y, int y_stride, int m, int n, int k)
{
    cudaStream_t st = colo_cuda_stream(s);
    int xs = x_stride ? x_stride : k, ys = y_stride ? y_stride : n;
    size_t rb = colo_dtype_row_bytes(t, k);
    if (m <= LINEAR_MAX_M) {
        const int warps = 4;
        dim3 grid(colo_div_up(n, warps)), block(32 * warps);
        linear_rows_kernel<LINEAR_MAX_M><<<grid, block, 0, st>>>((const uint8_t *)w, t, rb, bias, x, xs, y, ys, m, n, k);
        return COLO_LAUNCH_CHECK();
    }
    const float *wf = (const float *)w;
    if (t != COLO_F32) {
        colo_status e;
        float *tmp = (float *)colo_cuda_scratch(s, (size_t)n * k * sizeof(float), &e);
        if (!tmp)
            return e;
        int64_t cnt = (int64_t)n * k;
        dequant_kernel<<<colo_div_up(cnt, 256), 256, 0, st>>>((const uint8_t *)w, t, tmp, NULL, cnt);
        if ((e = COLO_LAUNCH_CHECK()) != COLO_OK)
            return e;
        wf = tmp;
    }
    // Row-major y (m, n) = x (m, k) W^T  <=>  column-major y^T (n, m) = W (n, k) x^T.
    const float one = 1.0f, zero = 0.0f;
    colo_status e = COLO_CUBLAS_CHECK(cublasSgemm(colo_cuda_cublas(s), CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, wf,
                                                  k, x, xs, &zero, y, ys));
    if (e != COLO_OK || !bias)
        return e;
    add_bias_kernel<<<colo_div_up((int64_t)m * n, 256), 256, 0, st>>>(y, ys, bias, m, n);
    return COLO_LAUNCH_CHECK();
}

static colo_status cuda_gemm(colo_stream *s, bool ta, bool tb, int m, int n, int k, float alpha, const void *a,
                             int lda, int64_t sa, const void *b, int ldb, int64_t sb, colo_dtype t, float beta,
                             float *c, int ldc, int64_t sc, int batch)
{
    // Row-major C = op(A) op(B)  <=>  column-major C^T = op(B)^T op(A)^T.
    cudaDataType_t dt = t == COLO_F16 ? CUDA_R_16F : CUDA_R_32F;
    return COLO_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        colo_cuda_cublas(s), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, dt,
        ldb, sb, a, dt, lda, sa, &beta, c, CUDA_R_32F, ldc, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

static colo_status cuda_dequantize(colo_stream *s, const void *src, colo_dtype t, void *dst, colo_dtype dt,
                                   int64_t n)
{
    dequant_kernel<<<colo_div_up(n, 256), 256, 0, colo_cuda_stream(s)>>>(
        (const uint8_t *)src, t, dt == COLO_F32 ? (float *)dst : NULL, dt == COLO_F16 ? (uint16_t *)dst : NULL, n);
    return COLO_LAUNCH_CHECK();
}

__global__ void get_rows_kernel(const uint8_t *table, colo_dtype t, size_t rb, int64_t n_rows, int row_len,
                                const int32_t *ids, float *out, int *flag)
{
    int r = blockIdx.x;
    int32_t id = ids[r];
    bool ok = id >= 0 && id < n_rows;
    if (!ok && threadIdx.x == 0)
        colo_dev_fail(flag, COLO_EINVAL);
    for (int j = threadIdx.x; j < row_len; j += blockDim.x)
        out[(size_t)r * row_len + j] = ok ? colo_load_elem(t, table + (size_t)id * rb, j) : 0.0f;
}

static colo_status cuda_get_rows(colo_stream *s, const void *table, colo_dtype t, int64_t n_rows, int row_len,
                                 const int32_t *ids, int n_ids, float *out)
{
    get_rows_kernel<<<n_ids, 256, 0, colo_cuda_stream(s)>>>((const uint8_t *)table, t, colo_dtype_row_bytes(t, row_len),
                                                           n_rows, row_len, ids, out, colo_cuda_error_flag(s));
    return COLO_LAUNCH_CHECK();
}

// ---- row ops -------------------------------------------------------------------------

enum { K_RMS, K_LAYER, K_SOFTMAX, K_L2 };

__global__ void row_kernel(int kind, const float *x, const float *w, const float *b, float *y, int n, float p)
{
    const float *xr = x + (size_t)blockIdx.x * n;
    float *yr = y + (size_t)blockIdx.x * n;
    if (kind == K_SOFTMAX) {
        float mx = -INFINITY;
        for (int j = threadIdx.x; j < n; j += blockDim.x)
            mx = fmaxf(mx, p * xr[j]);
        mx = colo_block_max(mx);
        float sum = 0;
        for (int j = threadIdx.x; j < n; j += blockDim.x)
            sum += expf(p * xr[j] - mx);
        sum = colo_block_sum(sum);
        for (int j = threadIdx.x; j < n; j += blockDim.x)
            yr[j] = expf(p * xr[j] - mx) / sum;
        return;
    }
    float s1 = 0, s2 = 0;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        s1 += xr[j];
        s2 += xr[j] * xr[j];
    }
    s2 = colo_block_sum(s2);
    if (kind == K_RMS) {
        float sc = rsqrtf(s2 / n + p);
        for (int j = threadIdx.x; j < n; j += blockDim.x)
            yr[j] = xr[j] * sc * w[j];
    } else if (kind == K_L2) {
        float sc = 1.0f / fmaxf(sqrtf(s2), 1e-12f);
        for (int j = threadIdx.x; j < n; j += blockDim.x)
            yr[j] = xr[j] * sc;
    } else {
        float mean = colo_block_sum(s1) / n;
        float var = 0;
        for (int j = threadIdx.x; j < n; j += blockDim.x)
            var += (xr[j] - mean) * (xr[j] - mean);
        var = colo_block_sum(var) / n;
        float inv = rsqrtf(var + p);
        for (int j = threadIdx.x; j < n; j += blockDim.x)
            yr[j] = (xr[j] - mean) * inv * w[j] + b[j];
    }
}

static colo_status rows(colo_stream *s, int kind, const float *x, const float *w, const float *b, float *y, int r,
                        int n, float p)
{
    row_kernel<<<r, 256, 0, colo_cuda_stream(s)>>>(kind, x, w, b, y, n, p);
    return COLO_LAUNCH_CHECK();
}

static colo_status cuda_rmsnorm(colo_stream *s, const float *x, const float *w, float *y, int r, int n, float eps)
{
    return rows(s, K_RMS, x, w, NULL, y, r, n, eps);
}
static colo_status cuda_layernorm(colo_stream *s, const float *x, const float *g, const float *b, float *y, int r,
                                  int n, float eps)
{
    return rows(s, K_LAYER, x, g, b, y, r, n, eps);
}
static colo_status cuda_softmax(colo_stream *s, float *x, int r, int n, float scale)
{
    return rows(s, K_SOFTMAX, x, NULL, NULL, x, r, n, scale);
}
static colo_status cuda_l2norm(colo_stream *s, float *x, int r, int n) { return rows(s, K_L2, x, NULL, NULL, x, r, n, 0); }

__global__ void rope_kernel(float *x, int stride, const int32_t *pos, int n_heads, int head_dim, int n_rot, float base)
{
    int row = blockIdx.x;
    int pairs = n_heads * (n_rot / 2);
    for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
        int h = i / (n_rot / 2), d = 2 * (i % (n_rot / 2));
        float theta = (float)pos[row] * powf(base, -(float)d / n_rot);
        float c, sn;
        sincosf(theta, &sn, &c);
        float *v = x + (size_t)row * stride + (size_t)h * head_dim + d;
        float a = v[0], b = v[1];
        v[0] = a * c - b * sn;
        v[1] = a * sn + b * c;
    }
}

static colo_status cuda_rope(colo_stream *s, float *x, int x_stride, const int32_t *pos, int r, int n_heads,
                             int head_dim, int n_rot, float base)
{
    rope_kernel<<<r, 128, 0, colo_cuda_stream(s)>>>(x, x_stride ? x_stride : n_heads * head_dim, pos, n_heads,
                                                   head_dim, n_rot, base);
    return COLO_LAUNCH_CHECK();
}

// ---- element-wise ----------------------------------------------------------------------

enum { E_SWIGLU, E_SILU, E_GELU, E_ADD };

__global__ void ew_kernel(int kind, const float *a, const float *b, float *out, int64_t n)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float x = a[i];
    switch (kind) {
    case E_SWIGLU: out[i] = x / (1.0f + expf(-x)) * b[i]; break;
    case E_SILU: out[i] = x / (1.0f + expf(-x)); break;
    case E_GELU: out[i] = 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); break;
    default: out[i] = x + b[i]; break;
    }
}

static colo_status ew(colo_stream *s, int kind, const float *a, const float *b, float *out, int64_t n)
{
    ew_kernel<<<colo_div_up(n, 256), 256, 0, colo_cuda_stream(s)>>>(kind, a, b, out, n);
    return COLO_LAUNCH_CHECK();
}
static colo_status cuda_swiglu(colo_stream *s, const float *g, const float *u, float *o, int64_t n) { return ew(s, E_SWIGLU, g, u, o, n); }
static colo_status cuda_silu(colo_stream *s, const float *x, float *y, int64_t n) { return ew(s, E_SILU, x, x, y, n); }
static colo_status cuda_gelu(colo_stream *s, const float *x, float *y, int64_t n) { return ew(s, E_GELU, x, x, y, n); }
static colo_status cuda_add(colo_stream *s, const float *a, const float *b, float *o, int64_t n) { return ew(s, E_ADD, a, b, o, n); }

// ---- KV cache and attention --------------------------------------------------------------

__global__ void kv_store_kernel(const float *k, int ks, const float *v, int vs, void *kc, void *vc, int f16,
                                const int32_t *slot, int kv_dim, int *flag)
{
    int t = blockIdx.x;
    int64_t sl = slot[t];
    if (sl < 0) {
        if (threadIdx.x == 0)
            colo_dev_fail(flag, COLO_EINVAL);
        return;
    }
    for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
        float kv = k[(size_t)t * ks + i], vv = v[(size_t)t * vs + i];
        if (f16) {
            ((__half *)kc)[sl * kv_dim + i] = __float2half_rn(kv);
            ((__half *)vc)[sl * kv_dim + i] = __float2half_rn(vv);
        } else {
            ((float *)kc)[sl * kv_dim + i] = kv;
            ((float *)vc)[sl * kv_dim + i] = vv;
        }
    }
}

static colo_status cuda_kv_store(colo_stream *s, const float *k, int k_stride, const float *v, int v_stride,
                                 void *kc, void *vc, colo_dtype t, const int32_t *slot, int n_tokens, int kv_dim)
{
    kv_store_kernel<<<n_tokens, 128, 0, colo_cuda_stream(s)>>>(k, k_stride ? k_stride : kv_dim, v,
                                                              v_stride ? v_stride : kv_dim, kc, vc, t == COLO_F16,
                                                              slot, kv_dim, colo_cuda_error_flag(s));
    return COLO_LAUNCH_CHECK();
}

__device__ __forceinline__ float kv_at(const void *c, int f16, int64_t i)
{
    return f16 ? __half2float(((const __half *)c)[i]) : ((const float *)c)[i];
}

// One block per (token, head): scores for every key into shared memory,
// softmax, then each thread accumulates output dims.
__global__ void attention_kernel(colo_attn_desc d, const float *q, const void *kc, const void *vc, float *out, int *flag)
{
    extern __shared__ float sc[];
    int t = blockIdx.x / d.n_head, h = blockIdx.x % d.n_head;
    int hd = d.head_dim, kv_dim = d.n_kv_head * hd, kvh = h / (d.n_head / d.n_kv_head);
    int qs = d.q_stride ? d.q_stride : d.n_head * hd;
    int f16 = d.kv_type == COLO_F16;
    int pos = d.tok_pos[t];
    float *o = out + ((size_t)t * d.n_head + h) * hd;
    if (pos < 0 || pos > d.max_pos) {
        if (threadIdx.x == 0)
            colo_dev_fail(flag, COLO_EINVAL);
        for (int e = threadIdx.x; e < hd; e += blockDim.x)
            o[e] = 0.0f;
        return;
    }
    const int32_t *table = d.block_table + (size_t)d.tok_seq[t] * d.max_blocks;
    const float *qr = q + (size_t)t * qs + (size_t)h * hd;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j <= pos; j += blockDim.x) {
        int64_t slot = (int64_t)table[j / d.block_size] * d.block_size + j % d.block_size;
        float dot = 0;
        for (int e = 0; e < hd; e++)
            dot += qr[e] * kv_at(kc, f16, slot * kv_dim + kvh * hd + e);
        sc[j] = dot * d.scale;
        mx = fmaxf(mx, sc[j]);
    }
    mx = colo_block_max(mx);
    float sum = 0;
    for (int j = threadIdx.x; j <= pos; j += blockDim.x) {
        sc[j] = expf(sc[j] - mx);
        sum += sc[j];
    }
    sum = colo_block_sum(sum);
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
        float acc = 0;
        for (int j = 0; j <= pos; j++) {
            int64_t slot = (int64_t)table[j / d.block_size] * d.block_size + j % d.block_size;
            acc += sc[j] * kv_at(vc, f16, slot * kv_dim + kvh * hd + e);
        }
        o[e] = acc / sum;
    }
}

static colo_status cuda_attention(colo_stream *s, const colo_attn_desc *d, const float *q, const void *kc,
                                  const void *vc, float *out)
{
    size_t shmem = (size_t)(d->max_pos + 1) * sizeof(float);
    if (shmem > 48 * 1024) {
        colo_status e = COLO_CUDA_CHECK(
            cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shmem));
        if (e != COLO_OK)
            return e;
    }
    attention_kernel<<<d->n_tokens * d->n_head, 128, shmem, colo_cuda_stream(s)>>>(*d, q, kc, vc, out,
                                                                                 colo_cuda_error_flag(s));
    return COLO_LAUNCH_CHECK();
}

__global__ void attention_bidir_kernel(const float *q, int qs, const float *k, int ks, const float *v, int vs,
                                       float *out, const int32_t *len, int seq, int n_head, int hd, float scale,
                                       int *flag)
{
    extern __shared__ float sc[];
    int h = blockIdx.x % n_head;
    int64_t row = blockIdx.x / n_head;
    int b = (int)(row / seq), i = (int)(row % seq);
    int L = len[b];
    float *o = out + (size_t)row * n_head * hd + (size_t)h * hd;
    if (L < 0 || L > seq) {
        if (threadIdx.x == 0)
            colo_dev_fail(flag, COLO_EINVAL);
        L = 0;
    }
    if (i >= L) {
        for (int e = threadIdx.x; e < hd; e += blockDim.x)
            o[e] = 0.0f;
        return;
    }
    const float *qr = q + (size_t)row * qs + (size_t)h * hd;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < L; j += blockDim.x) {
        const float *kr = k + ((size_t)b * seq + j) * ks + (size_t)h * hd;
        float dot = 0;
        for (int e = 0; e < hd; e++)
            dot += qr[e] * kr[e];
        sc[j] = dot * scale;
        mx = fmaxf(mx, sc[j]);
    }
    mx = colo_block_max(mx);
    float sum = 0;
    for (int j = threadIdx.x; j < L; j += blockDim.x) {
        sc[j] = expf(sc[j] - mx);
        sum += sc[j];
    }
    sum = colo_block_sum(sum);
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
        float acc = 0;
        for (int j = 0; j < L; j++)
            acc += sc[j] * v[((size_t)b * seq + j) * vs + (size_t)h * hd + e];
        o[e] = acc / sum;
    }
}

static colo_status cuda_attention_bidir(colo_stream *s, const float *q, int q_stride, const float *k, int k_stride,
                                        const float *v, int v_stride, float *out, const int32_t *len, int batch,
                                        int seq, int n_head, int head_dim, float scale)
{
    int hd = n_head * head_dim;
    attention_bidir_kernel<<<batch * seq * n_head, 128, (size_t)seq * sizeof(float), colo_cuda_stream(s)>>>(
        q, q_stride ? q_stride : hd, k, k_stride ? k_stride : hd, v, v_stride ? v_stride : hd, out, len, seq, n_head,
        head_dim, scale, colo_cuda_error_flag(s));
    return COLO_LAUNCH_CHECK();
}

__global__ void mean_pool_kernel(const float *x, const int32_t *len, float *out, int seq, int d, int *flag)
{
    int b = blockIdx.x;
    int L = len[b];
    if (L < 0 || L > seq) {
        if (threadIdx.x == 0)
            colo_dev_fail(flag, COLO_EINVAL);
        L = 0;
    }
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float acc = 0;
        for (int i = 0; i < L; i++)
            acc += x[((size_t)b * seq + i) * d + j];
        out[(size_t)b * d + j] = L ? acc / L : 0.0f;
    }
}

static colo_status cuda_mean_pool(colo_stream *s, const float *x, const int32_t *len, float *out, int batch, int seq,
                                  int d)
{
    mean_pool_kernel<<<batch, 128, 0, colo_cuda_stream(s)>>>(x, len, out, seq, d, colo_cuda_error_flag(s));
    return COLO_LAUNCH_CHECK();
}

extern "C" const colo_ops colo_cuda_ops = {
    /* linear */ cuda_linear,
    /* gemm */ cuda_gemm,
    /* dequantize */ cuda_dequantize,
    /* get_rows */ cuda_get_rows,
    /* rmsnorm */ cuda_rmsnorm,
    /* layernorm */ cuda_layernorm,
    /* rope */ cuda_rope,
    /* softmax */ cuda_softmax,
    /* swiglu */ cuda_swiglu,
    /* silu */ cuda_silu,
    /* gelu */ cuda_gelu,
    /* add */ cuda_add,
    /* kv_store */ cuda_kv_store,
    /* attention */ cuda_attention,
    /* attention_bidir */ cuda_attention_bidir,
    /* mean_pool */ cuda_mean_pool,
    /* l2norm */ cuda_l2norm,
};
