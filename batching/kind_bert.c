/* The bert kind: BERT encoders from a safetensors folder (all-MiniLM-L6-v2),
 * run by the dynamic batcher: mean-pooled, L2-normalised embeddings. */
#include "batching/kind.h"
#include "models/arch/bert.h"
#include "models/tokenizer/wordpiece.h"
#include "runtime/fault.h"

#include <stdlib.h>
#include <string.h>

typedef struct bert_kind {
    colo_bert *m;         /* NULL while asleep */
    colo_stream *s;
    colo_arena *arena;
    char name[64];
    int max_batch;
    size_t act_bytes;
    /* what tokenize and info read (any thread), kept through sleep and wake */
    colo_wordpiece *wp;
    colo_bert_hparams hp;
    int dim;
    size_t weight_bytes;
    char path[1024];
    int max_len_cfg;
} bert_kind;

static int max_batch_of(const colo_model_cfg *mc)
{
    return mc->batching.max_batch_size > 0 ? mc->batching.max_batch_size : 32;
}

static colo_status memory_need(const colo_model_cfg *mc, colo_kind_memory *out, char *err, size_t errlen)
{
    colo_bert_config bc = {.weight_type = COLO_F32, .max_len = mc->max_seq_len};
    colo_bert_memory mem;
    int mb = max_batch_of(mc);
    if (colo_bert_memory_need(mc->path, &bc, mb, 2, &mem, err, errlen) != COLO_OK)
        return COLO_EFORMAT;
    *out = (colo_kind_memory){.weight_bytes = mem.weight_bytes,
                              .act_bytes = colo_bert_act_bytes(&mem.hp, mb, mem.hp.max_len),
                              .overhead_bytes = (size_t)(mem.hp.n_layer * 16 + 8) * 256,
                              /* a WordPiece vocabulary of ~30k words and the executor: as a llama file's
                               * (models/arch/llama_load.c) */
                              .host_bytes = (size_t)8 << 20,
                              .step_tokens = mb * mem.hp.max_len,
                              .max_seq_len = mem.hp.max_len,
                              .max_batch = mb,
                              .what = "bert"};
    return COLO_OK;
}

/* Loads the weights and reserves the activations (load and wake). */
static colo_status bring_up(bert_kind *k, char *err, size_t errlen)
{
    colo_bert_config bc = {.weight_type = COLO_F32, .max_len = k->max_len_cfg, .tokenizer = k->wp};
    if (!(k->m = colo_bert_load(k->path, &bc, k->arena, k->s, err, errlen)))
        return COLO_ENOMEM;
    colo_arena_stats before, after;
    colo_arena_get_stats(k->arena, &before);
    const colo_bert_hparams *hp = colo_bert_hparams_get(k->m);
    if (colo_bert_reserve(k->m, k->max_batch, hp->max_len) != COLO_OK) {
        colo_set_err(err, errlen, "activations for batches of %d inputs of %d tokens do not fit in the memory arena",
                     k->max_batch, hp->max_len);
        colo_bert_free(k->m);
        k->m = NULL;
        return COLO_ENOMEM;
    }
    colo_arena_get_stats(k->arena, &after);
    k->act_bytes = after.used_bytes - before.used_bytes;
    return COLO_OK;
}

static void *load(const colo_model_cfg *mc, colo_arena *arena, colo_stream *s, const colo_kind_sink *sink, char *err,
                  size_t errlen)
{
    (void)sink;
    bert_kind *k = calloc(1, sizeof *k);
    if (!k) {
        colo_set_err(err, errlen, "out of memory");
        return NULL;
    }
    k->s = s;
    k->arena = arena;
    k->max_batch = max_batch_of(mc);
    k->max_len_cfg = mc->max_seq_len;
    snprintf(k->name, sizeof k->name, "%s", mc->name);
    snprintf(k->path, sizeof k->path, "%s", mc->path);
    colo_bert_config bc = {.weight_type = COLO_F32, .max_len = mc->max_seq_len};
    if (!(k->wp = colo_bert_tokenizer_load(mc->path, &bc, &k->hp, err, errlen)) ||
        bring_up(k, err, errlen) != COLO_OK)
        goto fail;
    k->dim = colo_bert_dim(k->m);
    k->weight_bytes = colo_bert_weight_bytes(k->m);
    return k;
fail:
    colo_bert_free(k->m);
    colo_wordpiece_free(k->wp);
    free(k);
    return NULL;
}

/* Drops the weights and the activation scratch (the arena gets their
 * memory back); wake reads the folder's configuration again and maps the
 * weights' repack cache file (on the CPU; else it copies them again).
 * Executor thread, between batches. */
static colo_status kind_sleep(void *inst, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    bert_kind *k = inst;
    colo_bert_free(k->m);
    k->m = NULL;
    return COLO_OK;
}

static colo_status kind_wake(void *inst, char *err, size_t errlen)
{
    bert_kind *k = inst;
    if (k->m)
        return COLO_OK;
    colo_status st = bring_up(k, err, errlen);
    if (st == COLO_OK && (colo_bert_dim(k->m) != k->dim || colo_bert_hparams_get(k->m)->max_len != k->hp.max_len)) {
        colo_set_err(err, errlen, "the model woke with another shape than it was loaded with");
        kind_sleep(k, NULL, 0);
        return COLO_EINVAL;
    }
    return st;
}

static void kind_free(void *inst)
{
    bert_kind *k = inst;
    if (!k)
        return;
    colo_bert_free(k->m);
    colo_wordpiece_free(k->wp);
    free(k);
}

static colo_status tokenize(void *inst, colo_request *r, char *err, size_t errlen)
{
    bert_kind *k = inst;
    if (r->task != COLO_TASK_EMBED) {
        colo_set_err(err, errlen, "this model makes embeddings; it does not generate text");
        return COLO_EINVAL;
    }
    int L = k->hp.max_len, n = r->in.n_texts;
    int32_t *ids = colo_pool_alloc(r->pool, (size_t)n * L * sizeof *ids);
    int *lens = colo_pool_alloc(r->pool, (size_t)n * sizeof *lens);
    if (!ids || !lens) {
        colo_set_err(err, errlen, "out of memory while tokenizing the inputs");
        return COLO_ENOMEM;
    }
    int total = 0;
    for (int i = 0; i < n; i++) {
        int n_full;
        if (r->in.token_inputs) { /* [CLS] ids [SEP], cut as a text's would be */
            int given = r->in.token_lens[i], keep = given < L - 2 ? given : L - 2;
            ids[total] = colo_wordpiece_cls(k->wp);
            for (int t = 0; t < keep; t++) {
                int32_t id = r->in.token_inputs[i][t];
                if (id < 0 || id >= k->hp.n_vocab) {
                    colo_set_err(err, errlen, "input[%d]: token %d is not in the vocabulary (%d tokens)", i, id,
                                 k->hp.n_vocab);
                    return COLO_EINVAL;
                }
                ids[total + 1 + t] = id;
            }
            ids[total + 1 + keep] = colo_wordpiece_sep(k->wp);
            lens[i] = keep + 2;
            n_full = given + 2;
        } else { /* as colo_bert_tokenize does, with the kind's own tokenizer (also while asleep) */
            const char *t = r->in.texts[i];
            size_t tl = r->in.text_lens ? r->in.text_lens[i] : strlen(t);
            if (colo_wordpiece_encode(k->wp, t, tl, true, ids + total, L, &lens[i], &n_full) != COLO_OK) {
                colo_set_err(err, errlen, "inputs[%d]: could not be tokenized", i);
                return COLO_EINVAL;
            }
        }
        if (n_full > lens[i] && !r->params.truncate) {
            colo_set_err(err, errlen,
                         "input[%d]: %d tokens; the model's window holds %d (with its [CLS] and [SEP]); "
                         "\"truncate\": true cuts an input to it",
                         i, n_full, L);
            return COLO_ETOOLONG;
        }
        total += lens[i];
    }
    r->tok.ids = ids;
    r->tok.n = total;
    r->tok.text_lens = lens;
    return COLO_OK;
}

static void info(void *inst, colo_kind_info *out)
{
    bert_kind *k = inst;
    memset(out, 0, sizeof *out);
    out->max_seq_len = k->hp.max_len;
    out->dim = k->dim;
    out->n_vocab = k->hp.n_vocab;
    if (k->m) { /* asleep: nothing in memory */
        out->weight_bytes = k->weight_bytes;
        out->act_bytes = k->act_bytes;
    }
}

static colo_status run_batch(void *inst, colo_request *const *rs, int n, colo_cosched_member *member, int *n_steps)
{
    bert_kind *k = inst;
    int dim = k->dim;
    int total = 0;
    for (int i = 0; i < n; i++)
        total += rs[i]->in.n_texts;
    const int32_t **rows = malloc((size_t)total * sizeof *rows);
    int *lens = malloc((size_t)total * sizeof *lens);
    float **outs = malloc((size_t)n * sizeof *outs);
    float *out = malloc((size_t)total * dim * sizeof *out);
    colo_status st = COLO_OK;
    const char *why = "the batch's activations did not fit in the model's memory";
    *n_steps = 0;
    if (!rows || !lens || !outs || !out || colo_fault_hit(COLO_FAULT_ALLOC, k->name)) {
        st = COLO_ENOMEM;
        why = "out of memory";
        goto out;
    }
    for (int i = 0, t = 0; i < n; i++) {
        const int32_t *ids = rs[i]->tok.ids;
        for (int j = 0; j < rs[i]->in.n_texts; j++, t++) {
            rows[t] = ids;
            lens[t] = rs[i]->tok.text_lens[j];
            ids += lens[t];
        }
        if (!(outs[i] = colo_pool_alloc(rs[i]->pool, (size_t)rs[i]->in.n_texts * dim * sizeof(float)))) {
            st = COLO_ENOMEM;
            why = "out of memory";
        }
    }
    /* Forward passes of up to max_batch inputs; of the batch class when
     * they carry only lines of batches (runtime/cosched.h). */
    bool only_batch = true;
    for (int i = 0; i < n && only_batch; i++)
        only_batch = rs[i]->qi.batch;
    for (int s = 0; s < total && st == COLO_OK; s += k->max_batch) {
        int c = total - s < k->max_batch ? total - s : k->max_batch;
        if (member)
            colo_cosched_step_begin_as(member, only_batch ? COLO_STEP_BATCH : COLO_STEP_INTERACTIVE);
        st = colo_bert_forward(k->m, k->s, c, rows + s, lens + s, out + (size_t)s * dim, member);
        if (member)
            colo_cosched_step_end(member);
        ++*n_steps;
    }
out:
    for (int i = 0, t = 0; i < n; i++) {
        colo_req_outcome *o = &rs[i]->out;
        o->status = st;
        o->dim = dim;
        o->n_input_tokens = rs[i]->tok.n;
        if (st == COLO_OK) {
            memcpy(outs[i], out + (size_t)t * dim, (size_t)rs[i]->in.n_texts * dim * sizeof(float));
            o->embeddings = outs[i];
        } else {
            o->error = st == COLO_ENOMEM ? why : "the forward pass failed on the device";
        }
        t += rs[i]->in.n_texts;
    }
    free(rows);
    free(lens);
    free(outs);
    free(out);
    return st;
}

const colo_model_kind colo_kind_bert = {
    .name = "bert",
    .task = COLO_TASK_EMBED,
    .memory_need = memory_need,
    .load = load,
    .free = kind_free,
    .tokenize = tokenize,
    .info = info,
    .admit = NULL,
    .step = NULL,
    .cancel = NULL,
    .started = NULL,
    .run_batch = run_batch,
    .sleep = kind_sleep,
    .wake = kind_wake,
};
