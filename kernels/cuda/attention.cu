// KV cache and attention on CUDA: kv_store, paged causal GQA attention,
// bidirectional (encoder) attention.
//
// Attention is a warp per (query token, head) with an online softmax over
// the keys, 32 at a time: each lane scores one key (its K row dotted with the
// query, which the warp keeps in shared memory), then every lane accumulates
// its own head dimensions of V weighted by the 32 probabilities. Consecutive
// warps are consecutive heads of one token, so a KV head's rows are shared
// through L1 by its query group. When there are few (token, head) pairs for
// the stream's SMs (decode), the keys are split into ranges handled by
// different warps (grid.y) whose partial (max, sum, accumulator) go to the
// stream's scratch and are merged by a second kernel.
//
// A Q8_0 or Q4_0 cache holds each row as blocks of 32 elements: kv_store
// quantizes a block per warp (lane i holds element i), and attention reads
// element e of a row from block e / 32 through kv_at, so the key and value
// loops are the same for every type; a block's dot products with the
// query are summed before its scale multiplies them.
#include "kernels/cuda/common.cuh"

#define ATTN_WARPS 4
#define ATTN_MAX_SPLITS 64
#define ATTN_MIN_KEYS_PER_SPLIT 128

// ---- kv_store --------------------------------------------------------------------------------

template <typename KV>
__global__ void kv_store_kernel(const float *__restrict__ k, int ks, const float *__restrict__ v, int vs,
                                KV *__restrict__ kc, KV *__restrict__ vc, const int32_t *__restrict__ slot, int kv_dim,
                                int *flag)
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
        if constexpr (std::is_same<KV, __half>::value) {
            kc[sl * kv_dim + i] = __float2half_rn(kv);
            vc[sl * kv_dim + i] = __float2half_rn(vv);
        } else {
            kc[sl * kv_dim + i] = kv;
            vc[sl * kv_dim + i] = vv;
        }
    }
}

// The block formats of a quantized cache (GGML's layouts; 34 and 18 bytes,
// 2-byte aligned).
struct kv_q8_0 {
    uint16_t d;    // fp16 scale
    int8_t qs[32]; // x = q * d
};
struct kv_q4_0 {
    uint16_t d;     // fp16 scale
    uint8_t qs[16]; // element i < 16: low nibble of qs[i], else high nibble of qs[i - 16]; x = (q - 8) * d
};

static_assert(sizeof(kv_q8_0) == 34 && sizeof(kv_q4_0) == 18, "GGML's block sizes");

// The calling warp's 32 values (lane i: element i) quantized into block b,
// with the bits of the CPU's colo_quantize_row: each operation rounded on
// its own (--use_fast_math would make the divisions approximate and fuse
// x * id + 8.5f).
__device__ __forceinline__ void quantize_block(float x, kv_q8_0 *b)
{
    int lane = threadIdx.x & 31;
    float amax = colo_warp_max(fabsf(x));
    float d = __fdiv_rn(amax, 127.0f), id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    b->qs[lane] = (int8_t)roundf(__fmul_rn(x, id));
    if (lane == 0)
        b->d = __half_as_ushort(__float2half_rn(d));
}

__device__ __forceinline__ void quantize_block(float x, kv_q4_0 *b)
{
    int lane = threadIdx.x & 31;
    float amax = colo_warp_max(fabsf(x));
    // the signed value of largest magnitude (its first lane) sets the scale, so it maps to -8 exactly
    unsigned first = __ffs(__ballot_sync(0xffffffffu, fabsf(x) == amax)) - 1;
    float mx = __shfl_sync(0xffffffffu, x, first);
    if (amax == 0.0f) // the CPU's starting +0 stays, also where element 0 is -0
        mx = 0.0f;
    float d = __fdiv_rn(mx, -8.0f), id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    int q = min(15, max(0, (int)__fadd_rn(__fmul_rn(x, id), 8.5f)));
    int hi = __shfl_down_sync(0xffffffffu, q, 16);
    if (lane < 16)
        b->qs[lane] = (uint8_t)(q | hi << 4);
    if (lane == 0)
        b->d = __half_as_ushort(__float2half_rn(d));
}

// A warp per 32-element block of token blockIdx.x's K and V rows.
template <typename BLK>
__global__ void kv_store_blocks_kernel(const float *__restrict__ k, int ks, const float *__restrict__ v, int vs,
                                       BLK *__restrict__ kc, BLK *__restrict__ vc, const int32_t *__restrict__ slot,
                                       int kv_dim, int *flag)
{
    int t = blockIdx.x, lane = threadIdx.x & 31, nb = kv_dim / 32;
    int64_t sl = slot[t];
    if (sl < 0) {
        if (threadIdx.x == 0)
            colo_dev_fail(flag, COLO_EINVAL);
        return;
    }
    // b is the same for the whole warp, so the shuffles inside see every lane
    for (int b = threadIdx.x >> 5; b < 2 * nb; b += blockDim.x >> 5) {
        bool is_v = b >= nb;
        int bb = is_v ? b - nb : b;
        float x = is_v ? v[(size_t)t * vs + bb * 32 + lane] : k[(size_t)t * ks + bb * 32 + lane];
        quantize_block(x, (is_v ? vc : kc) + sl * nb + bb);
    }
}

colo_status colo_cuda_kv_store(colo_stream *s, const float *k, int k_stride, const float *v, int v_stride, void *kc,
                               void *vc, colo_dtype t, const int32_t *slot, int n_tokens, int kv_dim)
{
    int ks = k_stride ? k_stride : kv_dim, vs = v_stride ? v_stride : kv_dim;
    int threads = kv_dim >= 256 ? 256 : kv_dim >= 128 ? 128 : 64;
    cudaStream_t st = colo_cuda_stream(s);
    if ((t == COLO_Q8_0 || t == COLO_Q4_0) && kv_dim % 32)
        return COLO_EINVAL;
    if (t == COLO_Q8_0)
        kv_store_blocks_kernel<kv_q8_0><<<n_tokens, threads, 0, st>>>(k, ks, v, vs, (kv_q8_0 *)kc, (kv_q8_0 *)vc, slot,
                                                                       kv_dim, colo_cuda_error_flag(s));
    else if (t == COLO_Q4_0)
        kv_store_blocks_kernel<kv_q4_0><<<n_tokens, threads, 0, st>>>(k, ks, v, vs, (kv_q4_0 *)kc, (kv_q4_0 *)vc, slot,
                                                                       kv_dim, colo_cuda_error_flag(s));
    else if (t == COLO_F16)
        kv_store_kernel<__half><<<n_tokens, threads, 0, st>>>(k, ks, v, vs, (__half *)kc, (__half *)vc, slot, kv_dim,
                                                               colo_cuda_error_flag(s));
    else if (t == COLO_F32)
        kv_store_kernel<float><<<n_tokens, threads, 0, st>>>(k, ks, v, vs, (float *)kc, (float *)vc, slot, kv_dim,
                                                              colo_cuda_error_flag(s));
    else
        return COLO_EUNSUPPORTED;
    return COLO_LAUNCH_CHECK();
}

// ---- the shared warp routine -------------------------------------------------------------------

// Element e of the cache base (e counts elements, also in a block type).
__device__ __forceinline__ float kv_at(const float *base, int64_t e) { return base[e]; }
__device__ __forceinline__ float kv_at(const __half *base, int64_t e) { return __half2float(base[e]); }
__device__ __forceinline__ float kv_at(const kv_q8_0 *base, int64_t e)
{
    const kv_q8_0 *b = base + (e >> 5);
    return __half2float(__ushort_as_half(b->d)) * b->qs[e & 31];
}
__device__ __forceinline__ float kv_at(const kv_q4_0 *base, int64_t e)
{
    const kv_q4_0 *b = base + (e >> 5);
    int i = (int)(e & 31), q = i < 16 ? (b->qs[i] & 15) : (b->qs[i - 16] >> 4);
    return __half2float(__ushort_as_half(b->d)) * (float)(q - 8);
}

template <typename KV> struct kv_is_block : std::integral_constant<bool, false> {};
template <> struct kv_is_block<kv_q8_0> : std::integral_constant<bool, true> {};
template <> struct kv_is_block<kv_q4_0> : std::integral_constant<bool, true> {};

// q (shared memory) . the hd elements of a block-type row starting at
// element e0 (a multiple of 32): each block's sum, then its scale.
__device__ __forceinline__ float row_dot_blocks(const float *q, const kv_q8_0 *base, int64_t e0, int hd)
{
    float s = 0.0f;
    const kv_q8_0 *b = base + (e0 >> 5);
    for (int c = 0; c < hd / 32; c++, b++) {
        float t = 0.0f;
#pragma unroll 8
        for (int i = 0; i < 32; i++)
            t = fmaf(q[32 * c + i], (float)b->qs[i], t);
        s = fmaf(__half2float(__ushort_as_half(b->d)), t, s);
    }
    return s;
}

__device__ __forceinline__ float row_dot_blocks(const float *q, const kv_q4_0 *base, int64_t e0, int hd)
{
    float s = 0.0f;
    const kv_q4_0 *b = base + (e0 >> 5);
    for (int c = 0; c < hd / 32; c++, b++) {
        float t = 0.0f;
#pragma unroll 8
        for (int i = 0; i < 16; i++) {
            t = fmaf(q[32 * c + i], (float)((b->qs[i] & 15) - 8), t);
            t = fmaf(q[32 * c + i + 16], (float)((b->qs[i] >> 4) - 8), t);
        }
        s = fmaf(__half2float(__ushort_as_half(b->d)), t, s);
    }
    return s;
}

// q (shared memory, 16-byte aligned) . K row at element off of base, hd
// elements. VEC: the row is 16-byte aligned and hd a multiple of 4 (F32) or
// 8 (F16); block types ignore it.
template <typename KV, bool VEC>
__device__ __forceinline__ float row_dot(const float *q, const KV *base, int64_t off, int hd)
{
    float s = 0.0f;
    if constexpr (kv_is_block<KV>::value) {
        return row_dot_blocks(q, base, off, hd);
    } else if constexpr (VEC && std::is_same<KV, float>::value) {
        const KV *p = base + off;
        for (int e = 0; e < hd; e += 4) {
            float4 a = *(const float4 *)(q + e), b = *(const float4 *)(p + e);
            s = fmaf(a.x, b.x, s);
            s = fmaf(a.y, b.y, s);
            s = fmaf(a.z, b.z, s);
            s = fmaf(a.w, b.w, s);
        }
    } else if constexpr (VEC) {
        const KV *p = base + off;
        for (int e = 0; e < hd; e += 8) {
            uint4 raw = *(const uint4 *)(p + e);
            const __half2 *h2 = (const __half2 *)&raw;
#pragma unroll
            for (int u = 0; u < 4; u++) {
                float2 f = __half22float2(h2[u]);
                s = fmaf(q[e + 2 * u], f.x, s);
                s = fmaf(q[e + 2 * u + 1], f.y, s);
            }
        }
    } else {
        for (int e = 0; e < hd; e++)
            s = fmaf(q[e], kv_at(base, off + e), s);
    }
    return s;
}

// Key j's rows: where K and V of key j start (elements), or ok = false.
struct paged_keys {
    const int32_t *table; // this sequence's row of the block table
    int block_size;
    int64_t kv_dim, head_off;
    __device__ __forceinline__ void at(int j, int64_t &kb, int64_t &vb, bool &ok) const
    {
        int32_t blk = table[j / block_size];
        ok = blk >= 0;
        kb = vb = ((int64_t)blk * block_size + j % block_size) * kv_dim + head_off;
    }
};

struct dense_keys {
    int64_t row0, ks, vs, head_off; // key j is row row0 + j of k (stride ks) and v (stride vs)
    __device__ __forceinline__ void at(int j, int64_t &kb, int64_t &vb, bool &ok) const
    {
        ok = true;
        kb = (row0 + j) * ks + head_off;
        vb = (row0 + j) * vs + head_off;
    }
};

// Online softmax of the calling warp's query (qs, already scaled) over keys
// [j0, j1): on return m is the largest score, l the sum of exp(score - m)
// and acc[c] the sum of exp(score - m) * V[e] for e = lane + 32 c < hd.
template <typename KV, int DPL, bool VEC, typename Keys>
__device__ __forceinline__ void attend(const float *qs, const KV *__restrict__ kc, const KV *__restrict__ vc,
                                       const Keys &keys, int j0, int j1, int hd, float &m, float &l, float acc[DPL],
                                       int *flag)
{
    int lane = threadIdx.x & 31;
    m = -INFINITY;
    l = 0.0f;
#pragma unroll
    for (int c = 0; c < DPL; c++)
        acc[c] = 0.0f;
    for (int jb = j0; jb < j1; jb += 32) {
        int j = jb + lane;
        float sc = -INFINITY;
        int64_t kb = 0, vb = 0;
        if (j < j1) {
            bool ok;
            keys.at(j, kb, vb, ok);
            if (ok)
                sc = row_dot<KV, VEC>(qs, kc, kb, hd);
            else
                colo_dev_fail(flag, COLO_EINVAL); // a hole in the block table: the key is skipped
        }
        float cm = colo_warp_max(sc);
        if (cm == -INFINITY) // warp-uniform
            continue;
        float mn = fmaxf(m, cm);
        float p = sc == -INFINITY ? 0.0f : expf(sc - mn);
        float corr = m == -INFINITY ? 0.0f : expf(m - mn);
        l = fmaf(l, corr, colo_warp_sum(p));
#pragma unroll
        for (int c = 0; c < DPL; c++)
            acc[c] *= corr;
        m = mn;
        int cnt = min(32, j1 - jb);
        for (int u = 0; u < cnt; u++) {
            float pu = __shfl_sync(0xffffffffu, p, u);
            long long vbu = __shfl_sync(0xffffffffu, (long long)vb, u);
            if (pu == 0.0f) // warp-uniform
                continue;
#pragma unroll
            for (int c = 0; c < DPL; c++) {
                int e = lane + 32 * c;
                if (e < hd)
                    acc[c] = fmaf(pu, kv_at(vc, vbu + e), acc[c]);
            }
        }
    }
}

// Copies this warp's query row, times scale, into its shared-memory slot.
__device__ __forceinline__ void load_query(float *qs, const float *qr, int hd, float scale)
{
    for (int e = threadIdx.x & 31; e < hd; e += 32)
        qs[e] = qr[e] * scale;
    __syncwarp();
}

// ---- paged causal attention -------------------------------------------------------------------

// grid (ceil(n_tokens * n_head / ATTN_WARPS), n_split). With n_split == 1
// the result goes to out; else (m, l, acc[hd]) of each split to part.
template <typename KV, int DPL, bool VEC>
__global__ void __launch_bounds__(32 * ATTN_WARPS)
    paged_attention_kernel(colo_attn_desc d, int hd_pad, const float *__restrict__ q, const KV *__restrict__ kc,
                           const KV *__restrict__ vc, float *__restrict__ out, float *__restrict__ part, int kps,
                           int *flag)
{
    extern __shared__ float4 smem4[];
    float *smem = (float *)smem4;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, split = blockIdx.y, n_split = gridDim.y;
    int64_t pair = (int64_t)blockIdx.x * ATTN_WARPS + warp;
    if (pair >= (int64_t)d.n_tokens * d.n_head)
        return;
    int t = (int)(pair / d.n_head), h = (int)(pair % d.n_head), hd = d.head_dim;
    int kvh = h / (d.n_head / d.n_kv_head);
    int pos = d.tok_pos[t], seq = d.tok_seq[t];
    float m = -INFINITY, l = 0.0f, acc[DPL];
#pragma unroll
    for (int c = 0; c < DPL; c++)
        acc[c] = 0.0f;
    if (pos < 0 || pos > d.max_pos || seq < 0) {
        if (lane == 0 && split == 0)
            colo_dev_fail(flag, COLO_EINVAL);
    } else {
        float *qs = smem + warp * hd_pad;
        int qstride = d.q_stride ? d.q_stride : d.n_head * hd;
        load_query(qs, q + (size_t)t * qstride + (size_t)h * hd, hd, d.scale);
        paged_keys keys = {d.block_table + (size_t)seq * d.max_blocks, d.block_size,
                           (int64_t)d.n_kv_head * hd, (int64_t)kvh * hd};
        int j0 = split * kps, j1 = min(pos + 1, j0 + kps);
        if (d.window && j0 < pos - d.window + 1)
            j0 = pos - d.window + 1;
        attend<KV, DPL, VEC>(qs, kc, vc, keys, j0, j1, hd, m, l, acc, flag);
    }
    if (n_split == 1) {
        float inv = l > 0.0f ? 1.0f / l : 0.0f;
        float *o = out + (size_t)pair * hd;
#pragma unroll
        for (int c = 0; c < DPL; c++)
            if (lane + 32 * c < hd)
                o[lane + 32 * c] = acc[c] * inv;
    } else {
        float *p = part + ((size_t)pair * n_split + split) * (hd + 2);
        if (lane == 0)
            p[0] = m, p[1] = l;
#pragma unroll
        for (int c = 0; c < DPL; c++)
            if (lane + 32 * c < hd)
                p[2 + lane + 32 * c] = acc[c];
    }
}

// Warp per (token, head): merges the n_split partials.
__global__ void attention_merge_kernel(const float *__restrict__ part, float *__restrict__ out, int64_t pairs,
                                       int n_split, int hd)
{
    int64_t pair = (int64_t)blockIdx.x * ATTN_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (pair >= pairs)
        return;
    const float *p = part + (size_t)pair * n_split * (hd + 2);
    float mx = -INFINITY;
    for (int s = 0; s < n_split; s++)
        if (p[(size_t)s * (hd + 2) + 1] > 0.0f)
            mx = fmaxf(mx, p[(size_t)s * (hd + 2)]);
    float l = 0.0f;
    for (int s = 0; s < n_split; s++) {
        const float *ps = p + (size_t)s * (hd + 2);
        if (ps[1] > 0.0f)
            l += ps[1] * expf(ps[0] - mx);
    }
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int e = lane; e < hd; e += 32) {
        float a = 0.0f;
        for (int s = 0; s < n_split; s++) {
            const float *ps = p + (size_t)s * (hd + 2);
            if (ps[1] > 0.0f)
                a = fmaf(ps[2 + e], expf(ps[0] - mx), a);
        }
        out[(size_t)pair * hd + e] = a * inv;
    }
}

// Calls f(std::integral_constant<int, DPL>()) with DPL = head dims per lane.
template <typename F> static colo_status with_dpl(int hd, F &&f)
{
    if (hd <= 32)
        return f(std::integral_constant<int, 1>());
    if (hd <= 64)
        return f(std::integral_constant<int, 2>());
    if (hd <= 128)
        return f(std::integral_constant<int, 4>());
    if (hd <= 256)
        return f(std::integral_constant<int, 8>());
    COLO_ERROR("cuda: attention: head_dim %d > 256 is not supported", hd);
    return COLO_EUNSUPPORTED;
}

template <typename KV>
static colo_status launch_paged(colo_stream *s, const colo_attn_desc *d, const float *q, const KV *kc, const KV *vc,
                                float *out)
{
    int hd = d->head_dim, hd_pad = (hd + 3) & ~3;
    int64_t pairs = (int64_t)d->n_tokens * d->n_head;
    int keys = d->max_pos + 1;
    // Split the keys when the pairs alone would leave SMs idle (about 8 blocks of ATTN_WARPS warps each).
    int n_split = 1;
    int64_t want_warps = (int64_t)colo_cuda_stream_sms(s) * 8 * ATTN_WARPS;
    if (pairs < want_warps) {
        int64_t by_sms = (want_warps + pairs - 1) / pairs;
        int64_t by_keys = (keys + ATTN_MIN_KEYS_PER_SPLIT - 1) / ATTN_MIN_KEYS_PER_SPLIT;
        n_split = (int)(by_sms < by_keys ? by_sms : by_keys);
        if (n_split > ATTN_MAX_SPLITS)
            n_split = ATTN_MAX_SPLITS;
        if (n_split < 1)
            n_split = 1;
    }
    int kps = (((keys + n_split - 1) / n_split) + 31) & ~31;
    n_split = (keys + kps - 1) / kps;
    float *part = NULL;
    colo_status e = COLO_OK;
    if (n_split > 1) {
        part = (float *)colo_cuda_scratch(s, (size_t)pairs * n_split * (hd + 2) * sizeof(float), &e);
        if (!part)
            return e;
    }
    size_t vec_align = std::is_same<KV, float>::value ? 4 : 8;
    bool vec = !kv_is_block<KV>::value && ((uintptr_t)kc % 16) == 0 && hd % vec_align == 0 &&
               ((int64_t)d->n_kv_head * hd) % vec_align == 0;
    dim3 grid(colo_div_up(pairs, ATTN_WARPS), n_split), block(32 * ATTN_WARPS);
    size_t shmem = (size_t)ATTN_WARPS * hd_pad * sizeof(float);
    cudaStream_t st = colo_cuda_stream(s);
    e = with_dpl(hd, [&](auto dpl) {
        constexpr int DPL = decltype(dpl)::value;
        if (vec)
            paged_attention_kernel<KV, DPL, true><<<grid, block, shmem, st>>>(*d, hd_pad, q, kc, vc, out, part, kps,
                                                                             colo_cuda_error_flag(s));
        else
            paged_attention_kernel<KV, DPL, false><<<grid, block, shmem, st>>>(*d, hd_pad, q, kc, vc, out, part, kps,
                                                                              colo_cuda_error_flag(s));
        return COLO_LAUNCH_CHECK();
    });
    if (e != COLO_OK || n_split == 1)
        return e;
    attention_merge_kernel<<<colo_div_up(pairs, ATTN_WARPS), 32 * ATTN_WARPS, 0, st>>>(part, out, pairs, n_split, hd);
    return COLO_LAUNCH_CHECK();
}

colo_status colo_cuda_attention(colo_stream *s, const colo_attn_desc *d, const float *q, const void *kc,
                                const void *vc, float *out)
{
    if (d->kv_type == COLO_F16)
        return launch_paged<__half>(s, d, q, (const __half *)kc, (const __half *)vc, out);
    if (d->kv_type == COLO_F32)
        return launch_paged<float>(s, d, q, (const float *)kc, (const float *)vc, out);
    if ((d->kv_type == COLO_Q8_0 || d->kv_type == COLO_Q4_0) && d->head_dim % 32)
        return COLO_EINVAL;
    if (d->kv_type == COLO_Q8_0)
        return launch_paged<kv_q8_0>(s, d, q, (const kv_q8_0 *)kc, (const kv_q8_0 *)vc, out);
    if (d->kv_type == COLO_Q4_0)
        return launch_paged<kv_q4_0>(s, d, q, (const kv_q4_0 *)kc, (const kv_q4_0 *)vc, out);
    return COLO_EUNSUPPORTED;
}

// ---- bidirectional attention with padding -------------------------------------------------------

// Warp per (row of the batch, head); rows at or past their sequence's length get zeros.
template <int DPL, bool VEC>
__global__ void __launch_bounds__(32 * ATTN_WARPS)
    bidir_attention_kernel(const float *__restrict__ q, int qs_, const float *__restrict__ k, int ks,
                           const float *__restrict__ v, int vs, float *__restrict__ out, const int32_t *__restrict__ len,
                           int batch, int seq, int n_head, int hd, int hd_pad, float scale, int *flag)
{
    extern __shared__ float4 smem4[];
    float *smem = (float *)smem4;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t pair = (int64_t)blockIdx.x * ATTN_WARPS + warp;
    if (pair >= (int64_t)batch * seq * n_head)
        return;
    int h = (int)(pair % n_head);
    int64_t row = pair / n_head;
    int b = (int)(row / seq), i = (int)(row % seq);
    int L = len[b];
    if (L < 0 || L > seq) {
        if (lane == 0 && i == 0 && h == 0)
            colo_dev_fail(flag, COLO_EINVAL);
        L = 0;
    }
    float m = -INFINITY, l = 0.0f, acc[DPL];
#pragma unroll
    for (int c = 0; c < DPL; c++)
        acc[c] = 0.0f;
    if (i < L) {
        float *qsh = smem + warp * hd_pad;
        load_query(qsh, q + (size_t)row * qs_ + (size_t)h * hd, hd, scale);
        dense_keys keys = {(int64_t)b * seq, ks, vs, (int64_t)h * hd};
        attend<float, DPL, VEC>(qsh, k, v, keys, 0, L, hd, m, l, acc, flag);
    }
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float *o = out + (size_t)row * n_head * hd + (size_t)h * hd;
#pragma unroll
    for (int c = 0; c < DPL; c++)
        if (lane + 32 * c < hd)
            o[lane + 32 * c] = acc[c] * inv;
}

colo_status colo_cuda_attention_bidir(colo_stream *s, const float *q, int q_stride, const float *k, int k_stride,
                                      const float *v, int v_stride, float *out, const int32_t *len, int batch, int seq,
                                      int n_head, int head_dim, float scale)
{
    int dm = n_head * head_dim, hd_pad = (head_dim + 3) & ~3;
    int qs = q_stride ? q_stride : dm, ks = k_stride ? k_stride : dm, vs = v_stride ? v_stride : dm;
    int64_t pairs = (int64_t)batch * seq * n_head;
    bool vec = ((uintptr_t)k % 16) == 0 && head_dim % 4 == 0 && ks % 4 == 0;
    dim3 grid(colo_div_up(pairs, ATTN_WARPS)), block(32 * ATTN_WARPS);
    size_t shmem = (size_t)ATTN_WARPS * hd_pad * sizeof(float);
    cudaStream_t st = colo_cuda_stream(s);
    return with_dpl(head_dim, [&](auto dpl) {
        constexpr int DPL = decltype(dpl)::value;
        if (vec)
            bidir_attention_kernel<DPL, true><<<grid, block, shmem, st>>>(q, qs, k, ks, v, vs, out, len, batch, seq,
                                                                         n_head, head_dim, hd_pad, scale,
                                                                         colo_cuda_error_flag(s));
        else
            bidir_attention_kernel<DPL, false><<<grid, block, shmem, st>>>(q, qs, k, ks, v, vs, out, len, batch, seq,
                                                                          n_head, head_dim, hd_pad, scale,
                                                                          colo_cuda_error_flag(s));
        return COLO_LAUNCH_CHECK();
    });
}
