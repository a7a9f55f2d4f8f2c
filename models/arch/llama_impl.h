/* models/arch/llama_impl.h: what the files of the llama-family model share,
 * private to models/arch/ (models/arch/llama.h is the interface):
 *   llama_arch.c     the architectures' traits, one row each
 *   llama_hparams.c  hyperparameters from the GGUF's keys
 *   llama_load.c     the tensor list, loading, the memory a file needs
 *   llama.c          the KV cache, activations and the forward pass
 *
 * Adding an architecture: a value of colo_llama_arch (models/arch/llama.h), a
 * row of colo_llama_arch_traits in llama_arch.c, and code only for what no
 * field of the row expresses yet (docs/ARCHITECTURE.md walks through it). */
#ifndef COLO_MODELS_LLAMA_IMPL_H
#define COLO_MODELS_LLAMA_IMPL_H

#include <stdbool.h>

#include "models/arch/alloc_set.h"
#include "models/format/gguf.h"
#include "models/arch/llama.h"
#include "models/arch/lora.h"

/* Where the rope's per-frequency factors come from. */
typedef enum colo_llama_rope_factors {
    COLO_ROPE_FACTORS_NONE,
    COLO_ROPE_FACTORS_FREQS,      /* an optional rope_freqs tensor (n_rot/2): Llama 3.1's scaling */
    COLO_ROPE_FACTORS_LONG_SHORT, /* optional rope_factors_long/short (n_rot/2): long past
                                     rope.scaling.original_context_length (Phi-3) */
} colo_llama_rope_factors;

/* The feed-forward's gated activation: act(gate) * up. */
typedef enum colo_llama_act {
    COLO_LLAMA_ACT_SWIGLU, /* silu */
    COLO_LLAMA_ACT_GEGLU,  /* gelu (tanh approximation) */
} colo_llama_act;

/* What <arch>.attention.sliding_window means. */
typedef enum colo_llama_swa_rule {
    COLO_SWA_REFUSED, /* a window inside the context is refused by name (not applied) */
    COLO_SWA_IGNORED, /* read and ignored, as llama.cpp does (Phi-3's files carry one) */
    COLO_SWA_LAYERS,  /* applied on the sliding-window layers that
                         attention.sliding_window_pattern picks (default: 5 of
                         every 6), which rope with rope.freq_base_swa, unscaled */
} colo_llama_swa_rule;

/* One architecture: every rule in which it differs from the others. The
 * loader, the forward pass and colo-mkmodel read these and nothing else
 * about the architecture. */
typedef struct colo_llama_arch_traits {
    const char *name;            /* general.architecture; also the prefix of its keys */
    bool rope_neox;              /* GGML's neox pairing (i, i + n_rot/2), else adjacent pairs */
    bool rope_full;              /* rope.dimension_count must be the head size */
    colo_llama_rope_factors rope_factors;
    bool qk_norm;                /* attn_q_norm/attn_k_norm (head size), per head, required */
    bool post_norms;             /* post_attention_norm and post_ffw_norm (E), required */
    bool fused_up;               /* ffn_up is gate and up fused (E, 2F), no ffn_gate */
    colo_llama_act act;
    colo_llama_swa_rule swa;
    bool embd_scale_sqrt;        /* the token embedding is scaled by sqrt(E) */
    /* The length whose inverse square root scales the queries; NULL: the head size. */
    int (*attn_scale_len)(const colo_llama_hparams *hp);
    /* What the loader takes in either form for every architecture but the
     * architecture's own files use (colo-mkmodel writes them so): */
    bool fused_qkv;              /* attn_qkv (E, Q + 2 KV) in place of attn_q/k/v */
    bool qkv_bias;               /* attn_q/k/v biases */
    /* colo-mkmodel's defaults where the file names none. */
    float default_rope_base;
    float default_rms_eps;
} colo_llama_arch_traits;

/* The row of a; NULL for a value that is no architecture. */
const colo_llama_arch_traits *colo_llama_traits(colo_llama_arch a);
/* The architecture named by the len bytes at name; COLO_EINVAL for another. */
colo_status colo_llama_arch_parse_n(const char *name, size_t len, colo_llama_arch *out);

typedef struct {
    const void *attn_norm;          /* (E) f32 */
    const void *wq, *wk, *wv;       /* (Q, E), (KV, E), (KV, E); views into a fused attn_qkv when present */
    const float *bq, *bk, *bv;      /* (Q), (KV), (KV) biases or NULL */
    const void *q_norm, *k_norm;    /* (head_dim) f32 or NULL (traits' qk_norm) */
    const void *wo;                 /* (E, Q) */
    const float *bo;                /* (E) or NULL */
    const void *post_attn_norm;     /* (E) or NULL (traits' post_norms) */
    const void *ffn_norm;           /* (E) */
    const void *w_gate, *w_up;      /* (F, E); views into a fused ffn_up (traits' fused_up) */
    const float *b_gate, *b_up;     /* (F) or NULL */
    const void *w_down;             /* (E, F) */
    const float *b_down;            /* (E) or NULL */
    const void *post_ffn_norm;      /* (E) or NULL (traits' post_norms) */
    colo_dtype tq, tk, tv, to, tg, tu, td;
    bool swa;                       /* a sliding-window layer (traits' swa COLO_SWA_LAYERS) */
    bool fused_qkv;                 /* wq, wk, wv are views into one attn_qkv */
} colo_llama_layer;

/* A layer's products an adapter may add to, in the order of the slot table. */
enum { COLO_LORA_Q, COLO_LORA_K, COLO_LORA_V, COLO_LORA_O, COLO_LORA_GATE, COLO_LORA_UP, COLO_LORA_DOWN,
       COLO_LORA_PRODUCTS };

/* The model's adapters (models/arch/lora.c), made on the first load. The slot
 * table holds, for layer l, product p and slot i, entry
 * (l * COLO_LORA_PRODUCTS + p) * COLO_LORA_SLOTS + i: views into the
 * adapter's memory, or zeros where it does not adapt p. */
typedef struct colo_llama_loras {
    struct colo_lora_adapter *by_slot[COLO_LORA_SLOTS];
    colo_lora_slot *h_table; /* host copy */
    colo_lora_slot *table;   /* on the device */
    int max_rank;            /* of the loaded adapters */
    /* a step's rows: each token's slot (-1: none), and the ranks' scratch */
    int32_t *h_row;          /* (cap_rows), malloc'd */
    void *step_mem;          /* arena: d_row then tmp */
    int32_t *d_row;          /* (cap_rows) */
    float *tmp;              /* (cap_rows, cap_rank) */
    int cap_rows, cap_rank;
} colo_llama_loras;

/* Bytes of a step's adapter scratch (step_mem) for rows tokens at rank. */
static inline size_t colo_lora_step_bytes(int rows, int rank)
{
    return (size_t)rows * 4 + 256 + (size_t)rows * rank * sizeof(float);
}

/* Shapes are in rows: (T, E) is T rows of E floats. T: tokens of a step,
 * L: its logits rows, B: its block table's entries (sequences x blocks). */
struct colo_llama {
    colo_llama_hparams hp;
    const colo_llama_arch_traits *traits;
    colo_arena *arena;
    colo_tokenizer *tok;
    const void *tok_embd; /* (V, E) */
    colo_dtype t_embd;
    const void *out_norm; /* (E) f32 */
    const void *output;   /* (V, E): output.weight or the tied token embedding */
    colo_dtype t_out;
    const float *rope_freqs;                     /* (n_rot/2) or NULL: Llama 3's scaling */
    const float *rope_long, *rope_short;         /* (n_rot/2) each or NULL: COLO_ROPE_FACTORS_LONG_SHORT */
    const float *rope_factors;                   /* the ones in use */
    colo_llama_layer *layers;                    /* (n_layer) */
    size_t weight_bytes;
    /* CPU: the weights are read in place from the file's mapping, which
     * stays open while the model lives (NULL: copied into the arena). The
     * arena holds as much address space for them, never touched, and the
     * memory pool is charged for them, so that what they make resident
     * counts against the budget as copies would. */
    colo_gguf *map;
    void *map_res;            /* arena: the address space standing for the mapped weights */
    size_t map_charged_bytes; /* charged to the arena's pool for them */
    colo_alloc_set allocs; /* every arena allocation, freed at the end */
    colo_kv_cache *kv;    /* NULL until colo_llama_kv_init */
    /* Activations for up to cap_tokens tokens and cap_logits logits, one
     * arena allocation (act) carved by ensure_act in llama.c. */
    int cap_tokens, cap_logits, cap_meta_seqs, cap_meta_blocks;
    void *act;
    float *x, *x2;   /* (T, E) the residual stream, in one or the other (compute) */
    float *h;        /* (T, E) a normed copy of x, then a sublayer's output */
    float *q;        /* (T, Q) queries */
    float *k, *v;    /* (T, KV) keys and values, stored into the cache */
    float *att;      /* (T, Q) attention's output */
    float *g, *u;    /* (T, F) gate and up products; g then holds act(g) * u */
    float *lx;       /* (L, E) the rows of x whose logits are wanted, normed */
    float *rot;      /* (2, T, n_rot) the tokens' rotations, of the full-attention layers' rope and of the
                      * sliding-window layers' (colo_qk_desc.rot): computed by the first layer of each */
    float *logits;   /* (L, V) */
    int32_t *d_tokens, *d_pos, *d_seq, *d_slot; /* (T) each, on the device: token, position, sequence, cache slot */
    int32_t *d_rows;                            /* (L) the tokens whose logits are wanted */
    int32_t *d_table;                           /* (B) block table, (sequences, max_blocks) */
    int32_t *h_slot;                            /* (T) host copy of d_slot, malloc'd */
    int graph_failures; /* decode steps whose recording as a graph failed; at 3, no more graphs */
    int n_layers_fused_qkv;  /* layers whose Q, K and V are one attn_qkv */
    colo_llama_loras *lora;  /* NULL until an adapter is loaded */
};

/* The pieces ensure_act carves the activation scratch into (each 256-byte
 * aligned): colo_llama_act_bytes counts their alignment. */
#define COLO_LLAMA_ACT_PIECES 18

/* An arena allocation of the model, freed with it (or by untrack). */
static inline colo_status colo_llama_track(colo_llama *m, size_t bytes, void **out)
{
    return colo_alloc_set_take(&m->allocs, m->arena, bytes, out);
}

static inline void colo_llama_untrack(colo_llama *m, void *p) { colo_alloc_set_give(&m->allocs, m->arena, p); }

/* lora.c: frees the adapters' host state (their memory goes with the model's). */
void colo_llama_lora_fini(colo_llama *m);

/* llama_hparams.c: every hyperparameter but the vocabulary (the
 * tokenizer's) from g; COLO_EFORMAT with a message naming the key. */
colo_status colo_llama_read_hparams(const colo_gguf *g, colo_llama_hparams *hp, char *msg, size_t msglen);
/* Which layers slide (swa[n_layer]), from the traits' COLO_SWA_LAYERS keys. */
colo_status colo_llama_swa_layers(const colo_gguf *g, const colo_llama_hparams *hp, bool *swa, char *msg,
                                  size_t msglen);

#endif
