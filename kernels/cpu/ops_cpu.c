/* The CPU op table, and what the CPU kernels share: per-thread scratch
 * memory and the choice of chunk counts. The ops live in linear.c, gemm.c,
 * attention.c, norm.c, elementwise.c and gather.c. */
#include "kernels/cpu/cpu_kernels.h"

#include <pthread.h>
#include <stdlib.h>


#define N_SLOTS 4

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

typedef struct {
    void *p[N_SLOTS];
    size_t n[N_SLOTS];
} scratch_set;

static void scratch_free(void *v)
{
    scratch_set *s = v;
    for (int i = 0; i < N_SLOTS; i++)
        free(s->p[i]);
    free(s);
}

static void scratch_init(void) { pthread_key_create(&scratch_key, scratch_free); }

void *colo_cpu_scratch(int slot, size_t bytes)
{
    pthread_once(&scratch_once, scratch_init);
    scratch_set *s = pthread_getspecific(scratch_key);
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s || pthread_setspecific(scratch_key, s)) {
            free(s);
            return NULL;
        }
    }
    if (s->n[slot] < bytes) {
        size_t want = bytes + bytes / 2 + 64;
        void *p = NULL;
        if (posix_memalign(&p, 64, want))
            return NULL;
        free(s->p[slot]);
        s->p[slot] = p;
        s->n[slot] = want;
    }
    return s->p[slot];
}

int colo_cpu_chunks(colo_stream *s, int64_t n, double cost_per_item)
{
    /* ~50k flops per chunk at least, up to 4 chunks per worker for balance. */
    int threads = colo_cpu_stream_threads(s);
    double total = (double)n * cost_per_item;
    int64_t by_cost = (int64_t)(total / 5e4);
    int64_t nc = threads * 4;
    if (nc > by_cost)
        nc = by_cost;
    if (nc > n)
        nc = n;
    return nc < 1 ? 1 : (int)nc;
}

const colo_ops colo_cpu_ops = {
    .linear = colo_cpu_linear,
    .gemm = colo_cpu_gemm,
    .dequantize = colo_cpu_dequantize,
    .get_rows = colo_cpu_get_rows,
    .rmsnorm = colo_cpu_rmsnorm,
    .layernorm = colo_cpu_layernorm,
    .rope = colo_cpu_rope,
    .softmax = colo_cpu_softmax,
    .swiglu = colo_cpu_swiglu,
    .silu = colo_cpu_silu,
    .gelu = colo_cpu_gelu,
    .geglu = colo_cpu_geglu,
    .scale = colo_cpu_scale,
    .add = colo_cpu_add,
    .kv_store = colo_cpu_kv_store,
    .attention = colo_cpu_attention,
    .attention_bidir = colo_cpu_attention_bidir,
    .mean_pool = colo_cpu_mean_pool,
    .l2norm = colo_cpu_l2norm,
    .linear_multi = colo_cpu_linear_multi,
    .lora = colo_cpu_lora,
    .add_rmsnorm = colo_cpu_add_rmsnorm,
    .add_rmsnorm_multi = colo_cpu_add_rmsnorm_multi,
    .qk_store = colo_cpu_qk_store,
    .linear_glu = colo_cpu_linear_glu,
};
