// The CUDA op table (every op of kernels/ops.h) and the small ops: row
// reductions (rmsnorm, layernorm, softmax, l2norm), rope, element-wise ops
// and mean pooling. Matrix ops live in linear.cu, attention in attention.cu.
//
// Every launch is followed by a cudaGetLastError check whose status the op
// returns; bad data met while running (an id out of range) is reported
// through the stream's error flag at the next colo_stream_sync.
#include "kernels/cuda/common.cuh"

// ---- row ops: a block per row ----------------------------------------------------------------

enum { K_RMS, K_LAYER, K_SOFTMAX, K_L2 };

template <int KIND>
__global__ void row_kernel(const float *x, const float *__restrict__ w, const float *__restrict__ b, float *y, int n,
                           float p)
{
    const float *xr = x + (size_t)blockIdx.x * n;
    float *yr = y + (size_t)blockIdx.x * n;
    if constexpr (KIND == K_SOFTMAX) {
        float mx = -INFINITY;
        for (int j = threadIdx.x; j < n; j += blockDim.x)
            mx = fmaxf(mx, p * xr[j]);
        mx = colo_block_max(mx);
        float sum = 0.0f;
        for (int j = threadIdx.x; j < n; j += blockDim.x)
            sum += expf(p * xr[j] - mx);
        float inv = 1.0f / colo_block_sum(sum);
        for (int j = threadIdx.x; j < n; j += blockDim.x)
            yr[j] = expf(p * xr[j] - mx) * inv;
    } else if constexpr (KIND == K_LAYER) {
        float s1 = 0.0f;
        for (int j = threadIdx.x; j < n; j += blockDim.x)
            s1 += xr[j];
        float mean = colo_block_sum(s1) / n;
        float var = 0.0f;
        for (int j = threadIdx.x; j < n; j += blockDim.x) {
            float dlt = xr[j] - mean;
            var = fmaf(dlt, dlt, var);
        }
        float inv = rsqrtf(colo_block_sum(var) / n + p);
        for (int j = threadIdx.x; j < n; j += blockDim.x)
            yr[j] = (xr[j] - mean) * inv * w[j] + b[j];
    } else {
        float s2 = 0.0f;
        for (int j = threadIdx.x; j < n; j += blockDim.x)
            s2 = fmaf(xr[j], xr[j], s2);
        s2 = colo_block_sum(s2);
        float sc = KIND == K_RMS ? rsqrtf(s2 / n + p) : 1.0f / fmaxf(sqrtf(s2), 1e-12f);
        for (int j = threadIdx.x; j < n; j += blockDim.x)
            yr[j] = KIND == K_RMS ? xr[j] * sc * w[j] : xr[j] * sc;
    }
}

template <int KIND>
static colo_status rows(colo_stream *s, const float *x, const float *w, const float *b, float *y, int r, int n, float p)
{
    int threads = n >= 1024 ? 512 : n >= 256 ? 256 : n >= 64 ? 64 : 32;
    row_kernel<KIND><<<r, threads, 0, colo_cuda_stream(s)>>>(x, w, b, y, n, p);
    return COLO_LAUNCH_CHECK();
}

static colo_status cuda_rmsnorm(colo_stream *s, const float *x, const float *w, float *y, int r, int n, float eps)
{
    return rows<K_RMS>(s, x, w, NULL, y, r, n, eps);
}
static colo_status cuda_layernorm(colo_stream *s, const float *x, const float *g, const float *b, float *y, int r,
                                  int n, float eps)
{
    return rows<K_LAYER>(s, x, g, b, y, r, n, eps);
}
static colo_status cuda_softmax(colo_stream *s, float *x, int r, int n, float scale)
{
    return rows<K_SOFTMAX>(s, x, NULL, NULL, x, r, n, scale);
}
static colo_status cuda_l2norm(colo_stream *s, float *x, int r, int n)
{
    return rows<K_L2>(s, x, NULL, NULL, x, r, n, 0.0f);
}

// ---- rope ---------------------------------------------------------------------------------------

// Block per row; the angle in double, as the CPU computes it: a float angle
// at position 8191 would be off by up to 5e-4 rad. Each block first puts the
// n_rot / 2 frequencies in shared memory.
__global__ void rope_kernel(float *x, int stride, const int32_t *pos, colo_rope_desc d)
{
    extern __shared__ double freq[];
    int row = blockIdx.x, half = d.n_rot / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        double f = d.freq_scale * pow((double)d.freq_base, -(double)(2 * i) / d.n_rot);
        freq[i] = d.freq_factors ? f / d.freq_factors[i] : f;
    }
    __syncthreads();
    double p = pos[row];
    for (int i = threadIdx.x; i < d.n_heads * half; i += blockDim.x) {
        int h = i / half, j = i % half;
        double sn, c;
        sincos(p * freq[j], &sn, &c);
        float *v = x + (size_t)row * stride + (size_t)h * d.head_dim;
        int i0 = d.neox ? j : 2 * j, i1 = d.neox ? j + half : 2 * j + 1;
        float a = v[i0], b = v[i1], fc = (float)c * d.attn_factor, fs = (float)sn * d.attn_factor;
        v[i0] = a * fc - b * fs;
        v[i1] = a * fs + b * fc;
    }
}

static colo_status cuda_rope(colo_stream *s, float *x, int x_stride, const int32_t *pos, int r,
                             const colo_rope_desc *d)
{
    if (d->n_rot < 2)
        return COLO_OK; // nothing rotates
    rope_kernel<<<r, 128, (size_t)(d->n_rot / 2) * sizeof(double), colo_cuda_stream(s)>>>(
        x, x_stride ? x_stride : d->n_heads * d->head_dim, pos, *d);
    return COLO_LAUNCH_CHECK();
}

// ---- element-wise ---------------------------------------------------------------------------------

// The build compiles with --use_fast_math, which turns tanhf into tanh.approx
// (relative error 2^-11, 5% on GELU's left tail) and expf into ex2.approx
// (a few ulp): GeGLU is written with expf for that reason.

enum { E_SWIGLU, E_SILU, E_GELU, E_ADD, E_GEGLU };

template <int KIND> __global__ void ew_kernel(const float *a, const float *b, float *out, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float x = a[i];
        if constexpr (KIND == E_SWIGLU)
            out[i] = x / (1.0f + expf(-x)) * b[i];
        else if constexpr (KIND == E_SILU)
            out[i] = x / (1.0f + expf(-x));
        else if constexpr (KIND == E_GELU)
            out[i] = 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
        else if constexpr (KIND == E_GEGLU) // 0.5 x (1 + tanh(u)) = x sigmoid(2u)
            out[i] = x / (1.0f + expf(-2.0f * (0.7978845608028654f * x * (1.0f + 0.044715f * x * x)))) * b[i];
        else
            out[i] = x + b[i];
    }
}

template <int KIND> static colo_status ew(colo_stream *s, const float *a, const float *b, float *out, int64_t n)
{
    unsigned blocks = colo_div_up(n, 256);
    if (blocks > 65535u * 8)
        blocks = 65535u * 8; // grid-stride beyond
    ew_kernel<KIND><<<blocks, 256, 0, colo_cuda_stream(s)>>>(a, b, out, n);
    return COLO_LAUNCH_CHECK();
}
static colo_status cuda_swiglu(colo_stream *s, const float *g, const float *u, float *o, int64_t n)
{
    return ew<E_SWIGLU>(s, g, u, o, n);
}
static colo_status cuda_silu(colo_stream *s, const float *x, float *y, int64_t n) { return ew<E_SILU>(s, x, x, y, n); }
static colo_status cuda_gelu(colo_stream *s, const float *x, float *y, int64_t n) { return ew<E_GELU>(s, x, x, y, n); }
static colo_status cuda_add(colo_stream *s, const float *a, const float *b, float *o, int64_t n)
{
    return ew<E_ADD>(s, a, b, o, n);
}
static colo_status cuda_geglu(colo_stream *s, const float *g, const float *u, float *o, int64_t n)
{
    return ew<E_GEGLU>(s, g, u, o, n);
}

__global__ void scale_kernel(float *x, float alpha, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= alpha;
}
static colo_status cuda_scale(colo_stream *s, float *x, float alpha, int64_t n)
{
    unsigned blocks = colo_div_up(n, 256);
    if (blocks > 65535u * 8)
        blocks = 65535u * 8;
    scale_kernel<<<blocks, 256, 0, colo_cuda_stream(s)>>>(x, alpha, n);
    return COLO_LAUNCH_CHECK();
}

// ---- mean pooling -----------------------------------------------------------------------------------

// grid (batch, ceil(d / 128)): thread per output element.
__global__ void mean_pool_kernel(const float *__restrict__ x, const int32_t *__restrict__ len, float *__restrict__ out,
                                 int seq, int d, int *flag)
{
    int b = blockIdx.x, j = blockIdx.y * blockDim.x + threadIdx.x;
    int L = len[b];
    if (L < 0 || L > seq) {
        if (j == 0)
            colo_dev_fail(flag, COLO_EINVAL);
        L = 0;
    }
    if (j >= d)
        return;
    float acc = 0.0f;
    for (int i = 0; i < L; i++)
        acc += x[((size_t)b * seq + i) * d + j];
    out[(size_t)b * d + j] = L ? acc / L : 0.0f;
}

static colo_status cuda_mean_pool(colo_stream *s, const float *x, const int32_t *len, float *out, int batch, int seq,
                                  int d)
{
    dim3 grid(batch, colo_div_up(d, 128));
    mean_pool_kernel<<<grid, 128, 0, colo_cuda_stream(s)>>>(x, len, out, seq, d, colo_cuda_error_flag(s));
    return COLO_LAUNCH_CHECK();
}

// ---- the table ------------------------------------------------------------------------------------------

extern "C" const colo_ops colo_cuda_ops = {
    /* linear */ colo_cuda_linear,
    /* gemm */ colo_cuda_gemm,
    /* dequantize */ colo_cuda_dequantize,
    /* get_rows */ colo_cuda_get_rows,
    /* rmsnorm */ cuda_rmsnorm,
    /* layernorm */ cuda_layernorm,
    /* rope */ cuda_rope,
    /* softmax */ cuda_softmax,
    /* swiglu */ cuda_swiglu,
    /* silu */ cuda_silu,
    /* gelu */ cuda_gelu,
    /* geglu */ cuda_geglu,
    /* scale */ cuda_scale,
    /* add */ cuda_add,
    /* kv_store */ colo_cuda_kv_store,
    /* attention */ colo_cuda_attention,
    /* attention_bidir */ colo_cuda_attention_bidir,
    /* mean_pool */ cuda_mean_pool,
    /* l2norm */ cuda_l2norm,
    /* linear_multi */ colo_cuda_linear_multi,
    /* lora */ colo_cuda_lora,
};
