/* The llama family's forward pass: one for every architecture, each
 * architecture's differences read from its row (models/arch/llama_impl.h) and
 * the tensors it loaded (present or absent); with the paged KV cache and
 * the activation scratch the pass runs in. */
#include "models/arch/llama_impl.h"
#include "models/cache/kv_cache.h"
#include "runtime/log.h"

#include <stdlib.h>
#include <string.h>

size_t colo_llama_kv_block_bytes(const colo_llama_hparams *hp, int block_size, colo_dtype kv_type)
{
    return (size_t)block_size * colo_kv_cache_token_bytes(hp->n_layer, hp->n_kv_head * hp->head_dim, kv_type);
}

colo_status colo_llama_kv_init(colo_llama *m, int n_blocks, int block_size, colo_dtype kv_type, char *err,
                               size_t errlen)
{
    if (m->kv) {
        colo_set_err(err, errlen, "KV cache: already initialised");
        return COLO_EINVAL;
    }
    if (n_blocks <= 0 || block_size <= 0 || !colo_dtype_is_kv(kv_type)) {
        colo_set_err(err, errlen, "KV cache: invalid configuration (%d blocks of %d tokens)", n_blocks, block_size);
        return COLO_EINVAL;
    }
    if (m->hp.head_dim % colo_dtype_block_elems(kv_type)) {
        colo_set_err(err, errlen, "KV cache type %s needs a head size that is a multiple of %d; the model's is %d",
                     colo_dtype_name(kv_type), colo_dtype_block_elems(kv_type), m->hp.head_dim);
        return COLO_EUNSUPPORTED;
    }
    colo_kv_cache_config kc = {.n_layer = m->hp.n_layer, .kv_dim = m->hp.n_kv_head * m->hp.head_dim,
                               .block_size = block_size, .n_blocks = n_blocks, .dtype = kv_type};
    if (!(m->kv = colo_kv_cache_create(m->arena, &kc, err, errlen)))
        return COLO_ENOMEM;
    return COLO_OK;
}

void colo_llama_kv_fini(colo_llama *m)
{
    colo_kv_cache_destroy(m->kv);
    m->kv = NULL;
}

colo_kv_cache *colo_llama_kv_cache(const colo_llama *m) { return m->kv; }
int colo_llama_kv_n_blocks(const colo_llama *m) { return m->kv ? colo_kv_cache_n_blocks(m->kv) : 0; }
int colo_llama_kv_block_size(const colo_llama *m) { return m->kv ? colo_kv_cache_block_size(m->kv) : 0; }
int colo_llama_kv_n_free(const colo_llama *m) { return m->kv ? colo_kv_cache_n_free(m->kv) : 0; }

colo_status colo_llama_kv_alloc(colo_llama *m, int n, int32_t *ids)
{
    if (!m->kv)
        return COLO_EINVAL;
    return colo_kv_cache_alloc(m->kv, n, ids);
}

void colo_llama_kv_free(colo_llama *m, const int32_t *ids, int n)
{
    if (m->kv)
        colo_kv_cache_release(m->kv, ids, n);
}

size_t colo_llama_act_bytes(const colo_llama_hparams *hp, int n_tokens, int n_logits, int n_table)
{
    size_t T = n_tokens, L = n_logits, B = n_table;
    size_t E = hp->n_embd, Q = hp->q_dim, KV = (size_t)hp->n_kv_head * hp->head_dim, F = hp->n_ff, V = hp->n_vocab;
    size_t floats = T * (E * 3 + Q * 2 + KV * 2 + F * 2 + 2 * (size_t)hp->n_rot) + L * (E + V);
    size_t ints = T * 4 + L + B;
    return floats * 4 + ints * 4 + COLO_LLAMA_ACT_PIECES * 256; /* each piece 256-byte aligned */
}

/* Activation scratch for n_tokens tokens, n_logits logits, a block table of
 * n_seqs x max_blocks; re-allocated in the arena when a step needs more. */
static colo_status ensure_act(colo_llama *m, int n_tokens, int n_logits, int n_seqs, int max_blocks)
{
    if (n_tokens <= m->cap_tokens && n_logits <= m->cap_logits && n_seqs * max_blocks <= m->cap_meta_blocks)
        return COLO_OK;
    int T = n_tokens > m->cap_tokens ? n_tokens : m->cap_tokens;
    int L = n_logits > m->cap_logits ? n_logits : m->cap_logits;
    int B = n_seqs * max_blocks > m->cap_meta_blocks ? n_seqs * max_blocks : m->cap_meta_blocks;
    const colo_llama_hparams *hp = &m->hp;
    size_t E = hp->n_embd, Q = hp->q_dim, KV = (size_t)hp->n_kv_head * hp->head_dim, F = hp->n_ff, V = hp->n_vocab;
    size_t bytes = colo_llama_act_bytes(hp, T, L, B);
    m->cap_tokens = m->cap_logits = m->cap_meta_blocks = 0;
    colo_status st = colo_alloc_set_replace(&m->allocs, m->arena, &m->act, bytes, &m->h_slot, (size_t)T);
    if (st != COLO_OK)
        return st;
    void *p = m->act;
    char *c = p;
    m->x = colo_carve(&c, T * E * sizeof(float));
    m->x2 = colo_carve(&c, T * E * sizeof(float));
    m->h = colo_carve(&c, T * E * sizeof(float));
    m->q = colo_carve(&c, T * Q * sizeof(float));
    m->att = colo_carve(&c, T * Q * sizeof(float));
    m->k = colo_carve(&c, T * KV * sizeof(float));
    m->v = colo_carve(&c, T * KV * sizeof(float));
    m->g = colo_carve(&c, T * F * sizeof(float));
    m->u = colo_carve(&c, T * F * sizeof(float));
    m->lx = colo_carve(&c, L * E * sizeof(float));
    m->rot = colo_carve(&c, 2 * T * (size_t)hp->n_rot * sizeof(float));
    m->logits = colo_carve(&c, L * V * sizeof(float));
    m->d_tokens = colo_carve(&c, (size_t)T * sizeof(int32_t));
    m->d_pos = colo_carve(&c, (size_t)T * sizeof(int32_t));
    m->d_seq = colo_carve(&c, (size_t)T * sizeof(int32_t));
    m->d_slot = colo_carve(&c, (size_t)T * sizeof(int32_t));
    m->d_rows = colo_carve(&c, (size_t)L * sizeof(int32_t));
    m->d_table = colo_carve(&c, (size_t)B * sizeof(int32_t));
    COLO_ASSERT((size_t)(c - (char *)p) <= bytes);
    m->cap_tokens = T;
    m->cap_logits = L;
    m->cap_meta_blocks = B;
    return COLO_OK;
}

/* On a failure after work was queued, the stream is drained first so the
 * caller may free its host arrays. */
colo_status colo_llama_reserve(colo_llama *m, int n_tokens, int n_logits, int n_seqs, int max_blocks)
{
    if (n_tokens <= 0 || n_logits < 0 || n_seqs <= 0 || max_blocks <= 0)
        return COLO_EINVAL;
    return ensure_act(m, n_tokens, n_logits, n_seqs, max_blocks);
}

#define TRY(call)                                                                                           \
    do {                                                                                                    \
        colo_status st_ = (call);                                                                           \
        if (st_ != COLO_OK) {                                                                               \
            colo_stream_sync(s);                                                                            \
            return st_;                                                                                     \
        }                                                                                                   \
    } while (0)

static colo_status forward(colo_llama *m, colo_stream *s, const colo_llama_batch *b, float *logits,
                           colo_cosched_member *throttle, bool decode);

colo_status colo_llama_forward(colo_llama *m, colo_stream *s, const colo_llama_batch *b, float *logits,
                               colo_cosched_member *throttle)
{
    /* Decode rows: the leading tokens that are each their sequence's only
     * one in the step and the leading logit rows (a sequence's next
     * token). All of them: a decode step; some: a mixed step, whose decode
     * rows get a decode step's products (colo_stream_set_decode_rows). */
    int d = 0;
    while (d < b->n_tokens && d < b->n_logits && b->logit_rows[d] == d &&
           (d == 0 || b->seq[d] != b->seq[d - 1]) && (d + 1 == b->n_tokens || b->seq[d + 1] != b->seq[d]))
        d++;
    bool decode = b->n_tokens > 0 && d == b->n_tokens;
    if (decode)
        colo_stream_set_decode(s, true);
    else
        colo_stream_set_decode_rows(s, d);
    colo_status st = forward(m, s, b, logits, throttle, decode);
    colo_stream_set_decode(s, false);
    return st;
}

static colo_status compute(colo_llama *m, colo_stream *s, const colo_llama_batch *b, int bs, colo_dtype kv_type,
                           int max_pos, colo_cosched_member *throttle, bool lora);

/* Each token's adapter slot into the step's rows (m->lora): *any when some
 * token has one. COLO_EINVAL for a slot that holds no adapter. */
static colo_status lora_rows(colo_llama *m, colo_stream *s, const colo_llama_batch *b, bool *any)
{
    *any = false;
    if (!b->seq_adapter)
        return COLO_OK;
    for (int q = 0; q < b->n_seqs; q++) {
        int a = b->seq_adapter[q];
        if (a < -1 || a >= COLO_LORA_SLOTS || (a >= 0 && (!m->lora || !m->lora->by_slot[a])))
            return COLO_EINVAL;
        *any = *any || a >= 0;
    }
    if (!*any)
        return COLO_OK;
    colo_llama_loras *L = m->lora;
    int n = b->n_tokens, rank = L->max_rank;
    if (n > L->cap_rows || rank > L->cap_rank) {
        int rows = n > L->cap_rows ? n : L->cap_rows, cr = rank > L->cap_rank ? rank : L->cap_rank;
        colo_llama_untrack(m, L->step_mem);
        L->step_mem = NULL;
        L->cap_rows = L->cap_rank = 0;
        int32_t *h = realloc(L->h_row, (size_t)rows * sizeof *h);
        if (!h)
            return COLO_ENOMEM;
        L->h_row = h;
        void *p;
        colo_status st = colo_llama_track(m, colo_lora_step_bytes(rows, cr), &p);
        if (st != COLO_OK)
            return st;
        char *c = p;
        L->step_mem = p;
        L->d_row = colo_carve(&c, (size_t)rows * 4);
        L->tmp = colo_carve(&c, (size_t)rows * cr * sizeof(float));
        L->cap_rows = rows, L->cap_rank = cr;
    }
    for (int t = 0; t < n; t++)
        L->h_row[t] = b->seq_adapter[b->seq[t]];
    return colo_memcpy_h2d(s, L->d_row, L->h_row, (size_t)n * 4);
}

#define COLO_LLAMA_GRAPH_FAILURES 3

/* A graph key for a decode step of n sequences (colo_stream_graph_end):
 * steps whose kernels are the same functions share a graph, updated in
 * place. linear's kernels are specialised for 1, 2, up to 4 and up to 8 rows
 * (digits and exact mat-vec alike); past 8 digits take the tile kernel and
 * exact activations the mat-vec up to 64 rows, cuBLAS beyond. A key that
 * groups unlike steps costs a rebuild, not a wrong result; six keys fit in
 * COLO_STREAM_GRAPHS. */
static int graph_key(int n) { return n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : n <= 8 ? 8 : n <= 64 ? 64 : 65; }

static colo_status forward(colo_llama *m, colo_stream *s, const colo_llama_batch *b, float *logits,
                           colo_cosched_member *throttle, bool decode)
{
    const colo_llama_hparams *hp = &m->hp;
    int n = b->n_tokens;
    if (n <= 0 || b->n_logits < 0 || !m->kv || b->n_seqs <= 0 || b->max_blocks <= 0)
        return COLO_EINVAL;
    int bs = colo_kv_cache_block_size(m->kv), n_blocks = colo_kv_cache_n_blocks(m->kv);
    colo_dtype kv_type = colo_kv_cache_config_get(m->kv)->dtype;
    int max_pos = 0;
    for (int t = 0; t < n; t++) {
        int p = b->pos[t], sq = b->seq[t];
        if (p < 0 || p >= hp->n_ctx || p >= b->max_blocks * bs || sq < 0 || sq >= b->n_seqs || b->tokens[t] < 0 ||
            b->tokens[t] >= hp->n_vocab)
            return COLO_EINVAL;
        int32_t blk = b->block_table[(size_t)sq * b->max_blocks + p / bs];
        if (blk < 0 || blk >= n_blocks)
            return COLO_EINVAL;
        max_pos = p > max_pos ? p : max_pos;
    }
    for (int i = 0; i < b->n_logits; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= n)
            return COLO_EINVAL;
    bool lora;
    TRY(lora_rows(m, s, b, &lora));
    TRY(ensure_act(m, n, b->n_logits, b->n_seqs, b->max_blocks));
    for (int t = 0; t < n; t++) {
        int p = b->pos[t];
        m->h_slot[t] = b->block_table[(size_t)b->seq[t] * b->max_blocks + p / bs] * bs + p % bs;
    }
    TRY(colo_memcpy_h2d(s, m->d_tokens, b->tokens, (size_t)n * 4));
    TRY(colo_memcpy_h2d(s, m->d_pos, b->pos, (size_t)n * 4));
    TRY(colo_memcpy_h2d(s, m->d_seq, b->seq, (size_t)n * 4));
    TRY(colo_memcpy_h2d(s, m->d_slot, m->h_slot, (size_t)n * 4));
    TRY(colo_memcpy_h2d(s, m->d_table, b->block_table, (size_t)b->n_seqs * b->max_blocks * 4));
    if (b->n_logits)
        TRY(colo_memcpy_h2d(s, m->d_rows, b->logit_rows, (size_t)b->n_logits * 4));

    /* Decode steps as one graph where the device records them
     * (colo_device_config.cuda_graphs). A recording that fails ran nothing,
     * and the step is queued as usual; it may fail once for a cause that
     * passes (a stream's scratch growing twice within one recording), so
     * graphs stop only after COLO_LLAMA_GRAPH_FAILURES.
     * Steps with adapters are not recorded (their rows change the launches). */
    bool graph = decode && !lora && !b->stop && m->graph_failures < COLO_LLAMA_GRAPH_FAILURES && colo_stream_graph_begin(s) == COLO_OK;
    colo_status st = compute(m, s, b, bs, kv_type, max_pos, throttle, lora);
    if (graph) {
        colo_status ge = colo_stream_graph_end(s, st == COLO_OK ? graph_key(n) : -1);
        if (ge != COLO_OK) {
            if (++m->graph_failures == COLO_LLAMA_GRAPH_FAILURES)
                COLO_WARN("llama: decode steps of this model run without graphs: recording one failed %d times "
                          "(last: %s)",
                          COLO_LLAMA_GRAPH_FAILURES, colo_status_str(st != COLO_OK ? st : ge));
            st = compute(m, s, b, bs, kv_type, max_pos, throttle, lora);
        }
    }
    if (st == COLO_OK && b->n_logits)
        st = colo_memcpy_d2h(s, logits, m->logits, (size_t)b->n_logits * hp->n_vocab * sizeof(float));
    colo_status ss = colo_stream_sync(s);
    return st != COLO_OK ? st : ss;
}

#undef TRY
/* Inside compute, which may be recording a graph: no synchronisation on
 * failure (forward ends the recording first). */
#define TRY(call)                                                                                           \
    do {                                                                                                    \
        colo_status st_ = (call);                                                                           \
        if (st_ != COLO_OK)                                                                                 \
            return st_;                                                                                     \
    } while (0)

/* The step's kernels: embeddings, the layers, the logits' rows on the
 * device (m->logits). Queues work only (no copy to the host, no wait). */
/* Adapters' updates of layer l's products p0..p0+n_out-1 of one input:
 * y[j] (n, out[j]) += B (A x (n, in)) for each token with an adapter that
 * adapts the product; one op for them all. */
static colo_status lora_add(colo_llama *m, colo_stream *s, int l, int p0, const float *x, int in, float *const *y,
                            const int *out, int n_out, int n)
{
    const colo_llama_loras *L = m->lora;
    colo_lora_out o[COLO_LORA_MULTI_MAX];
    for (int j = 0; j < n_out; j++)
        o[j] = (colo_lora_out){y[j], 0, out[j],
                               L->table + ((size_t)l * COLO_LORA_PRODUCTS + p0 + j) * COLO_LORA_SLOTS};
    return colo_op_lora_multi(s, x, 0, n, in, o, n_out, L->d_row, COLO_LORA_SLOTS, L->tmp, L->cap_rank);
}

/* *x += h (rmsnorm'd by w_pre where given) into the other residual buffer,
 * which *x then points to; h = rmsnorm(*x) * w; the n_out products of h:
 * one op where the backend can, or, for adapters, which read the normed h,
 * the two ops. */
static colo_status add_norm_products(colo_stream *s, float **x, colo_llama *m, const float *w_pre, const float *w,
                                     int n, const colo_linear_out *out, int n_out, bool lora)
{
    int E = m->hp.n_embd;
    float *xn = *x == m->x ? m->x2 : m->x;
    colo_status st = lora ? colo_op_add_rmsnorm(s, *x, m->h, w_pre, w, xn, m->h, n, E, m->hp.rms_eps)
                          : colo_op_add_rmsnorm_multi(s, *x, m->h, w_pre, w, xn, m->h, n, E, m->hp.rms_eps, out, n_out);
    if (st == COLO_OK && lora)
        st = colo_op_linear_multi(s, m->h, 0, n, E, out, n_out);
    *x = xn;
    return st;
}

static colo_status compute(colo_llama *m, colo_stream *s, const colo_llama_batch *b, int bs, colo_dtype kv_type,
                           int max_pos, colo_cosched_member *throttle, bool lora)
{
    const colo_llama_hparams *hp = &m->hp;
    int n = b->n_tokens;
    int E = hp->n_embd, Q = hp->q_dim, KV = hp->n_kv_head * hp->head_dim, F = hp->n_ff, V = hp->n_vocab;
    TRY(colo_op_get_rows(s, m->tok_embd, m->t_embd, V, E, m->d_tokens, n, m->x));
    if (hp->embd_scale != 1.0f)
        TRY(colo_op_scale(s, m->x, hp->embd_scale, (int64_t)n * E));
    colo_attn_desc ad = {.n_tokens = n, .n_head = hp->n_head, .n_kv_head = hp->n_kv_head, .head_dim = hp->head_dim,
                         .block_size = bs, .max_blocks = b->max_blocks, .max_pos = max_pos,
                         .scale = hp->attn_scale, .kv_type = kv_type, .tok_seq = m->d_seq,
                         .tok_pos = m->d_pos, .block_table = m->d_table};
    colo_rope_desc rq = {.n_heads = hp->n_head, .head_dim = hp->head_dim, .n_rot = hp->n_rot, .neox = hp->rope_neox,
                         .freq_base = hp->rope_base, .freq_scale = hp->rope_scale,
                         .attn_factor = hp->rope_attn_factor, .freq_factors = m->rope_factors};
    bool rot_done[2] = {false, false}; /* each rope's angles computed, by its first layer */
    /* The residual stream: x, and a sublayer's sum goes to the other of
     * m->x and m->x2, so that an op forming the norm of the sum in each of
     * its chunks (add_rmsnorm_multi) reads one while it writes the other. */
    float *x = m->x;
    for (int l = 0; l < hp->n_layer; l++) {
        const colo_llama_layer *L = &m->layers[l];
        if (l > 0 && b->stop && colo_stream_sync(s) == COLO_OK && b->stop(b->stop_ud))
            return COLO_EAGAIN;
        if (throttle)
            colo_cosched_throttle(throttle, 14);
        /* One product op per shared input: h is prepared (quantized) once;
         * the layer before's residual add and this one's norm come with it
         * (adapters read the normed h, which the fused op leaves as scratch). */
        colo_linear_out qkv[3] = {{L->wq, L->tq, L->bq, m->q, 0, Q}, {L->wk, L->tk, L->bk, m->k, 0, KV},
                                  {L->wv, L->tv, L->bv, m->v, 0, KV}};
        if (l == 0) {
            TRY(colo_op_rmsnorm(s, x, L->attn_norm, m->h, n, E, hp->rms_eps));
            TRY(colo_op_linear_multi(s, m->h, 0, n, E, qkv, 3));
        } else {
            TRY(add_norm_products(s, &x, m, m->layers[l - 1].post_ffn_norm, L->attn_norm, n, qkv, 3, lora));
        }
        if (lora)
            TRY(lora_add(m, s, l, COLO_LORA_Q, m->h, E, (float *[]){m->q, m->k, m->v}, (int[]){Q, KV, KV}, 3, n));
        /* per-head norms where the model has them, rope, and K and V into the cache */
        colo_qk_desc qd = {.rope = rq, .n_kv_heads = hp->n_kv_head, .q_norm = L->q_norm, .k_norm = L->k_norm,
                           .eps = hp->rms_eps, .kv_type = kv_type};
        if (L->swa) /* sliding-window layers: their own base, no scaling */
            qd.rope.freq_base = hp->rope_base_swa, qd.rope.freq_scale = 1.0f;
        qd.rot = m->rot + (L->swa ? (size_t)m->cap_tokens * hp->n_rot : 0);
        qd.rot_fill = !rot_done[L->swa ? 1 : 0];
        rot_done[L->swa ? 1 : 0] = true;
        void *kc = colo_kv_cache_k(m->kv, l), *vc = colo_kv_cache_v(m->kv, l);
        TRY(colo_op_qk_store(s, &qd, m->q, m->k, m->v, m->d_pos, m->d_slot, n, kc, vc));
        ad.window = L->swa ? hp->n_swa : 0;
        TRY(colo_op_attention(s, &ad, m->q, kc, vc, m->att));
        TRY(colo_op_linear(s, L->wo, L->to, L->bo, m->att, 0, m->h, 0, n, E, Q));
        if (lora)
            TRY(lora_add(m, s, l, COLO_LORA_O, m->att, Q, (float *[]){m->h}, (int[]){E}, 1, n));
        /* x += h (post_attn_norm'd where the model has it); h = ffn_norm(x); its products */
        colo_linear_out gate_up[2] = {{L->w_gate, L->tg, L->b_gate, m->g, 0, F}, {L->w_up, L->tu, L->b_up, m->u, 0, F}};
        TRY(add_norm_products(s, &x, m, L->post_attn_norm, L->ffn_norm, n, gate_up, 2, lora));
        if (lora)
            TRY(lora_add(m, s, l, COLO_LORA_GATE, m->h, E, (float *[]){m->g, m->u}, (int[]){F, F}, 2, n));
        bool geglu = m->traits->act == COLO_LLAMA_ACT_GEGLU;
        if (!lora) { /* the gate and the down projection in one op where the backend can */
            TRY(colo_op_linear_glu(s, L->w_down, L->td, L->b_down, m->g, m->u, geglu, m->h, n, E, F));
        } else { /* the adapters' update of the down projection reads the gated x */
            int64_t nf = (int64_t)n * F;
            TRY(geglu ? colo_op_geglu(s, m->g, m->u, m->g, nf) : colo_op_swiglu(s, m->g, m->u, m->g, nf));
            TRY(colo_op_linear(s, L->w_down, L->td, L->b_down, m->g, 0, m->h, 0, n, E, F));
            TRY(lora_add(m, s, l, COLO_LORA_DOWN, m->g, F, (float *[]){m->h}, (int[]){E}, 1, n));
        }
        if (l + 1 < hp->n_layer) /* (the next layer's first op adds h to x) */
            continue;
        if (L->post_ffn_norm)
            TRY(colo_op_rmsnorm(s, m->h, L->post_ffn_norm, m->h, n, E, hp->rms_eps));
        TRY(colo_op_add(s, x, m->h, x, (int64_t)n * E));
    }
    if (b->n_logits) {
        if (throttle)
            colo_cosched_throttle(throttle, 4);
        TRY(colo_op_get_rows(s, x, COLO_F32, n, E, m->d_rows, b->n_logits, m->lx));
        TRY(colo_op_rmsnorm(s, m->lx, m->out_norm, m->lx, b->n_logits, E, hp->rms_eps));
        TRY(colo_op_linear(s, m->output, m->t_out, NULL, m->lx, 0, m->logits, 0, b->n_logits, V, E));
    }
    return COLO_OK;
}
