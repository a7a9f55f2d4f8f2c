// kernels/cuda/lora.cu: adapters' low-rank updates (LoRA), each row of a
// batch with its own adapter (the segmented form of Punica's BGMV, written
// for colo): y_i += scale * B (A x_i). Two kernels: the rank's dot products
// of a row into tmp (one warp each), then each output adds the rank's
// terms in order. A row's result depends on its own input and adapter only.
#include "kernels/cuda/common.cuh"

namespace {

constexpr int kDownWarps = 8;

// Whether slot L updates its rows: A and B in one type and a rank in
// (0, max_rank], as the CPU decides, so that a row never reads a rank's
// terms that no dot product wrote.
__device__ __forceinline__ bool lora_slot_ok(const colo_lora_slot &L, int max_rank)
{
    return ((L.a && L.b) || (L.a16 && L.b16)) && L.rank > 0 && L.rank <= max_rank;
}

__global__ void lora_down_kernel(const float *__restrict__ x, int x_stride, int k, const int32_t *__restrict__ row_slot,
                                 const colo_lora_slot *__restrict__ slots, int n_slots, float *__restrict__ tmp,
                                 int max_rank)
{
    int i = blockIdx.x, r = blockIdx.y * kDownWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
    int sl = row_slot[i];
    if (sl < 0 || sl >= n_slots)
        return;
    colo_lora_slot L = slots[sl];
    if (!lora_slot_ok(L, max_rank) || r >= L.rank)
        return;
    const float *xi = x + (size_t)i * x_stride;
    float acc = 0.0f;
    if (L.a16) {
        const __half *a = (const __half *)L.a16 + (size_t)r * k;
        for (int j = lane; j < k; j += 32)
            acc = fmaf(__half2float(a[j]), xi[j], acc);
    } else {
        const float *a = L.a + (size_t)r * k;
        for (int j = lane; j < k; j += 32)
            acc = fmaf(a[j], xi[j], acc);
    }
    acc = colo_warp_sum(acc);
    if (lane == 0)
        tmp[(size_t)i * max_rank + r] = acc * L.scale;
}

__global__ void lora_up_kernel(float *__restrict__ y, int y_stride, int n, const int32_t *__restrict__ row_slot,
                               const colo_lora_slot *__restrict__ slots, int n_slots, const float *__restrict__ tmp,
                               int max_rank)
{
    int i = blockIdx.x, o = blockIdx.y * blockDim.x + threadIdx.x;
    int sl = row_slot[i];
    if (o >= n || sl < 0 || sl >= n_slots)
        return;
    colo_lora_slot L = slots[sl];
    if (!lora_slot_ok(L, max_rank))
        return;
    const float *t = tmp + (size_t)i * max_rank;
    float acc = y[(size_t)i * y_stride + o];
    for (int r = 0; r < L.rank; r++) {
        size_t at = (size_t)r * L.b_stride + o;
        acc = fmaf(t[r], L.b16 ? __half2float(((const __half *)L.b16)[at]) : L.b[at], acc);
    }
    y[(size_t)i * y_stride + o] = acc;
}

} // namespace

colo_status colo_cuda_lora(colo_stream *s, const float *x, int x_stride, int m, int k, const colo_lora_out *out,
                           int n_out, const int32_t *row_slot, int n_slots, float *tmp, int max_rank)
{
    cudaStream_t cs = colo_cuda_stream(s);
    for (int q = 0; q < n_out; q++) { /* tmp is reused: the stream orders the products */
        const colo_lora_out *o = &out[q];
        dim3 down(m, colo_div_up(max_rank, kDownWarps));
        lora_down_kernel<<<down, kDownWarps * 32, 0, cs>>>(x, x_stride ? x_stride : k, k, row_slot, o->slots,
                                                           n_slots, tmp, max_rank);
        colo_status st = COLO_LAUNCH_CHECK();
        if (st != COLO_OK)
            return st;
        dim3 up(m, colo_div_up(o->n, 128));
        lora_up_kernel<<<up, 128, 0, cs>>>(o->y, o->y_stride ? o->y_stride : o->n, o->n, row_slot, o->slots, n_slots,
                                           tmp, max_rank);
        if ((st = COLO_LAUNCH_CHECK()) != COLO_OK)
            return st;
    }
    return COLO_OK;
}
