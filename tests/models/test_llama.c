/* The llama model on small synthetic GGUF files (colo-mkmodel's writer):
 * - F32, F16, Q8_0 and Q4_1 models load and run;
 * - a sequence's logits do not depend on how its tokens are batched: all at
 *   once, token by token, in chunks, inside a shuffled batch with other
 *   sequences, or mixed with other sequences' prefill (exact activations,
 *   so the only differences are summation order: tolerance 1e-3 relative
 *   to the largest logit);
 * - an untied output.weight equal to the embedding gives the tied logits;
 * - a missing, misshaped or mistyped tensor or key fails the load with a
 *   message naming it and leaves nothing in the arena;
 * - positions at or past the context length are refused; a step whose
 *   activations do not fit returns ENOMEM and the model stays usable;
 * - colo_llama_memory_need agrees with what a load takes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "models/format/gguf.h"
#include "tools/gguf_write.h"
#include "models/arch/llama.h"
#include "tools/mkmodel.h"
#include "tests/page_cache.h"

#define E 64
#define NH 4
#define NKV 2
#define FF 128
#define NV 320
#define CTX 64
#define BS 4

static colo_device *dev;
static unsigned seed;
static char dir[256];

static int setup(void **state)
{
    (void)state;
    const char *e = getenv("COLO_TEST_SEED");
    seed = e ? (unsigned)strtoul(e, NULL, 10) : 4242u;
    printf("COLO_TEST_SEED=%u\n", seed);
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, sizeof dir, "%s/colo-test-llama-%d", tmp, (int)getpid());
    char err[256];
    colo_device_config dc = {.want = "cpu", .cpu_threads = 2, .exact_activations = true};
    dev = colo_device_open(&dc, err, sizeof err);
    return dev ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    colo_device_close(dev);
    return 0;
}

static void model_file(char *path, size_t len, const char *tag)
{
    snprintf(path, len, "%s-%s.gguf", dir, tag);
}

static void write_model(const char *path, colo_dtype type)
{
    colo_mkmodel_config c = {.n_layer = 2, .n_embd = E, .n_head = NH, .n_kv_head = NKV, .n_ff = FF,
                             .n_vocab = NV, .n_ctx = CTX, .type = type, .seed = seed};
    char err[256];
    if (colo_mkmodel_write(path, &c, err, sizeof err) != COLO_OK)
        fail_msg("mkmodel: %s", err);
}

typedef struct {
    colo_arena *arena;
    colo_stream *s;
    colo_llama *m;
    colo_kv_cache *kv;
} rig;

static void rig_open(rig *r, const char *path, int n_blocks)
{
    char err[512];
    r->arena = colo_arena_create_bytes(dev, "llama", 64 << 20, err, sizeof err);
    r->s = colo_stream_create(dev, NULL, err, sizeof err);
    assert_non_null(r->arena);
    assert_non_null(r->s);
    r->m = colo_llama_load(path, r->arena, r->s, err, sizeof err);
    if (!r->m)
        fail_msg("load: %s", err);
    if (colo_llama_kv_init(r->m, n_blocks, BS, COLO_F32, err, sizeof err) != COLO_OK)
        fail_msg("kv: %s", err);
    r->kv = colo_llama_kv_cache(r->m);
    assert_non_null(r->kv);
}

static void rig_close(rig *r)
{
    colo_llama_free(r->m);
    assert_int_equal(colo_arena_used(r->arena), 0);
    colo_stream_destroy(r->s);
    colo_arena_destroy(r->arena);
}

/* One step over rows (seq, pos, token) with one table per sequence;
 * logits (n_logits, NV) for the rows listed. */
typedef struct {
    int seq, pos, tok;
} row;

static colo_status step(rig *r, colo_kv_table *tables, int n_seqs, const row *rows, int n, const int32_t *lrows,
                        int n_logits, float *logits)
{
    int max_blocks = tables[0].max_blocks;
    int32_t *tok = malloc((size_t)n * 4), *pos = malloc((size_t)n * 4), *sq = malloc((size_t)n * 4);
    int32_t *table = malloc((size_t)n_seqs * max_blocks * 4);
    assert_non_null(tok);
    assert_non_null(pos);
    assert_non_null(sq);
    assert_non_null(table);
    for (int i = 0; i < n; i++) {
        tok[i] = rows[i].tok;
        pos[i] = rows[i].pos;
        sq[i] = rows[i].seq;
        assert_int_equal(colo_kv_table_ensure(r->kv, &tables[rows[i].seq], rows[i].pos + 1), COLO_OK);
    }
    for (int q = 0; q < n_seqs; q++)
        memcpy(table + (size_t)q * max_blocks, tables[q].ids, (size_t)max_blocks * 4);
    colo_llama_batch b = {.n_tokens = n, .tokens = tok, .pos = pos, .seq = sq, .n_seqs = n_seqs,
                          .max_blocks = max_blocks, .block_table = table, .n_logits = n_logits,
                          .logit_rows = lrows};
    colo_status st = colo_llama_forward(r->m, r->s, &b, logits, NULL);
    free(tok);
    free(pos);
    free(sq);
    free(table);
    return st;
}

static void tables_open(colo_kv_table *t, int n)
{
    for (int i = 0; i < n; i++)
        assert_int_equal(colo_kv_table_init(&t[i], CTX / BS), COLO_OK);
}

static void tables_close(rig *r, colo_kv_table *t, int n)
{
    for (int i = 0; i < n; i++) {
        colo_kv_table_release(r->kv, &t[i]);
        colo_kv_table_free(&t[i]);
    }
}

static void assert_close(const float *got, const float *want, int n, const char *what, int at)
{
    float mx = 1;
    for (int i = 0; i < n; i++)
        mx = fmaxf(mx, fabsf(want[i]));
    for (int i = 0; i < n; i++) {
        assert_false(isnan(got[i]));
        if (fabsf(got[i] - want[i]) > 1e-3f * mx)
            fail_msg("%s, token %d, logit %d: %g vs %g", what, at, i, got[i], want[i]);
    }
}

#define LA 13
#define LB 7
#define LC 10

static void check_invariance(colo_dtype type)
{
    char path[300];
    model_file(path, sizeof path, colo_dtype_name(type));
    write_model(path, type);
    rig r;
    rig_open(&r, path, 64);
    const colo_llama_hparams *hp = colo_llama_hparams_get(r.m);
    assert_int_equal(hp->n_vocab, NV);
    assert_int_equal(hp->n_ctx, CTX);
    assert_int_equal(hp->n_kv_head, NKV);

    srand(seed + (unsigned)type);
    int len[3] = {LA, LB, LC};
    int toks[3][LA];
    for (int q = 0; q < 3; q++)
        for (int i = 0; i < len[q]; i++)
            toks[q][i] = rand() % NV;
    static float ref[LA][NV], got[LA + LB + LC][NV];
    row rows[LA + LB + LC];
    int32_t lr[LA + LB + LC];
    colo_kv_table t[3];

    /* A alone, all at once: the reference. */
    tables_open(t, 1);
    for (int i = 0; i < LA; i++) {
        rows[i] = (row){0, i, toks[0][i]};
        lr[i] = i;
    }
    assert_int_equal(step(&r, t, 1, rows, LA, lr, LA, &ref[0][0]), COLO_OK);
    tables_close(&r, t, 1);
    float mx = 0;
    for (int i = 0; i < NV; i++)
        mx = fmaxf(mx, fabsf(ref[LA - 1][i]));
    assert_true(mx > 0.01f); /* the model says something */

    /* Token by token (decode). */
    tables_open(t, 1);
    for (int i = 0; i < LA; i++) {
        row one = {0, i, toks[0][i]};
        int32_t z = 0;
        assert_int_equal(step(&r, t, 1, &one, 1, &z, 1, got[0]), COLO_OK);
        assert_close(got[0], ref[i], NV, "token by token", i);
    }
    tables_close(&r, t, 1);

    /* Chunks of 5, 4, 4 (chunked prefill). */
    tables_open(t, 1);
    for (int c0 = 0; c0 < LA;) {
        int n = c0 == 0 ? 5 : 4;
        for (int i = 0; i < n; i++) {
            rows[i] = (row){0, c0 + i, toks[0][c0 + i]};
            lr[i] = i;
        }
        assert_int_equal(step(&r, t, 1, rows, n, lr, n, &got[0][0]), COLO_OK);
        for (int i = 0; i < n; i++)
            assert_close(got[i], ref[c0 + i], NV, "chunked", c0 + i);
        c0 += n;
    }
    tables_close(&r, t, 1);

    /* With B and C in one batch, rows shuffled; A is sequence 1. */
    tables_open(t, 3);
    int n = 0;
    int order[3] = {1, 0, 2}; /* toks[q] goes to sequence order[q] */
    for (int q = 0; q < 3; q++)
        for (int i = 0; i < len[q]; i++)
            rows[n++] = (row){order[q], i, toks[q][i]};
    for (int i = n - 1; i > 0; i--) {
        int j = rand() % (i + 1);
        row x = rows[i];
        rows[i] = rows[j];
        rows[j] = x;
    }
    for (int i = 0; i < n; i++)
        lr[i] = i;
    assert_int_equal(step(&r, t, 3, rows, n, lr, n, &got[0][0]), COLO_OK);
    for (int i = 0; i < n; i++)
        if (rows[i].seq == 1)
            assert_close(got[i], ref[rows[i].pos], NV, "shuffled batch", rows[i].pos);
    tables_close(&r, t, 3);

    /* A's first 8 alone; then A's last 5 with B's prompt and C's first token,
     * logits only for A's rows, listed in reverse. */
    tables_open(t, 3);
    for (int i = 0; i < 8; i++)
        rows[i] = (row){2, i, toks[0][i]};
    assert_int_equal(step(&r, t, 3, rows, 8, NULL, 0, NULL), COLO_OK);
    n = 0;
    for (int i = 0; i < LB; i++)
        rows[n++] = (row){0, i, toks[1][i]};
    for (int i = 8; i < LA; i++)
        rows[n++] = (row){2, i, toks[0][i]};
    rows[n++] = (row){1, 0, toks[2][0]};
    for (int i = 0; i < 5; i++)
        lr[i] = LB + 4 - i;
    assert_int_equal(step(&r, t, 3, rows, n, lr, 5, &got[0][0]), COLO_OK);
    for (int i = 0; i < 5; i++)
        assert_close(got[i], ref[12 - i], NV, "mixed prefill", 12 - i);
    tables_close(&r, t, 3);

    /* A decode step of three sequences gives each what a step of that
     * sequence alone gives (on the CPU up to 8 decode rows take the
     * single-row 8-bit path; float sums may group differently). */
    tables_open(t, 3);
    for (int q = 0; q < 3; q++) {
        for (int i = 0; i < len[q] - 1; i++)
            rows[i] = (row){q, i, toks[q][i]};
        assert_int_equal(step(&r, t, 3, rows, len[q] - 1, NULL, 0, NULL), COLO_OK);
    }
    static float alone[3][NV];
    for (int q = 0; q < 3; q++) {
        row one = {q, len[q] - 1, toks[q][len[q] - 1]};
        int32_t z = 0;
        assert_int_equal(step(&r, t, 3, &one, 1, &z, 1, alone[q]), COLO_OK);
    }
    for (int q = 0; q < 3; q++) { /* the same tokens again: the same cache slots, the same values */
        rows[q] = (row){2 - q, len[2 - q] - 1, toks[2 - q][len[2 - q] - 1]};
        lr[q] = q;
    }
    assert_int_equal(step(&r, t, 3, rows, 3, lr, 3, &got[0][0]), COLO_OK);
    for (int q = 0; q < 3; q++)
        assert_close(got[q], alone[2 - q], NV, "decode batch", q);
    tables_close(&r, t, 3);

    assert_int_equal(colo_llama_kv_n_free(r.m), 64);
    /* The cache can be given back and made again with another shape. */
    size_t with_kv = colo_arena_used(r.arena);
    colo_llama_kv_fini(r.m);
    assert_null(colo_llama_kv_cache(r.m));
    assert_int_equal(colo_arena_used(r.arena), with_kv - colo_llama_kv_block_bytes(hp, BS, COLO_F32) * 64);
    char err[256];
    assert_int_equal(colo_llama_kv_init(r.m, 8, 16, COLO_F16, err, sizeof err), COLO_OK);
    r.kv = colo_llama_kv_cache(r.m);
    assert_int_equal(colo_llama_kv_block_size(r.m), 16);
    rig_close(&r);
    unlink(path);
}

/* A mixed step: three decode rows first, then a fourth sequence's prompt.
 * The decode rows get the bits of the decode step of the three alone
 * (their products are that step's: 8-bit activations on the CPU, not the
 * prefill's exact ones), and the prompt's last row the bits of its
 * prefill alone. On a device with the default precision, where the two
 * paths differ. */
static void check_mixed_step(colo_dtype type)
{
    char err[256], path[300], tag[64];
    colo_device_config dc = {.want = "cpu", .cpu_threads = 2};
    colo_device *exact = dev;
    dev = colo_device_open(&dc, err, sizeof err);
    assert_non_null(dev);
    snprintf(tag, sizeof tag, "%s-mixed", colo_dtype_name(type));
    model_file(path, sizeof path, tag);
    write_model(path, type);
    rig r;
    rig_open(&r, path, 64);
    srand(seed + 7 * (unsigned)type);
    int len[3] = {LA, LB, LC};
    int toks[3][LA];
    for (int q = 0; q < 3; q++)
        for (int i = 0; i < len[q]; i++)
            toks[q][i] = rand() % NV;
    static float ref[LA][NV], dec[3][NV], mixed[4][NV];
    row rows[LA];
    int32_t lr[LA];
    colo_kv_table t4[4];
    tables_open(t4, 1);
    for (int i = 0; i < 5; i++)
        rows[i] = (row){0, i, toks[0][i]};
    lr[0] = 4; /* the prompt's logits, as the engine asks for them: its last row's */
    assert_int_equal(step(&r, t4, 1, rows, 5, lr, 1, &ref[0][0]), COLO_OK);
    tables_close(&r, t4, 1);
    tables_open(t4, 4);
    for (int q = 0; q < 3; q++) {
        for (int i = 0; i < len[q] - 1; i++)
            rows[i] = (row){q, i, toks[q][i]};
        assert_int_equal(step(&r, t4, 4, rows, len[q] - 1, NULL, 0, NULL), COLO_OK);
    }
    for (int q = 0; q < 3; q++) {
        rows[q] = (row){q, len[q] - 1, toks[q][len[q] - 1]};
        lr[q] = q;
    }
    assert_int_equal(step(&r, t4, 4, rows, 3, lr, 3, &dec[0][0]), COLO_OK);
    for (int i = 0; i < 5; i++)
        rows[3 + i] = (row){3, i, toks[0][i]};
    lr[3] = 7;
    assert_int_equal(step(&r, t4, 4, rows, 8, lr, 4, &mixed[0][0]), COLO_OK);
    for (int q = 0; q < 3; q++)
        if (memcmp(mixed[q], dec[q], sizeof dec[q]))
            fail_msg("%s: decode row %d of a mixed step differs from the decode step's", colo_dtype_name(type), q);
    if (memcmp(mixed[3], ref[0], sizeof ref[0]))
        fail_msg("%s: a prompt's row in a mixed step differs from its prefill alone", colo_dtype_name(type));
    tables_close(&r, t4, 4);
    rig_close(&r);
    unlink(path);
    colo_device_close(dev);
    dev = exact;
}

static void test_mixed_step_q4_1(void **state) { (void)state; check_mixed_step(COLO_Q4_1); }
static void test_mixed_step_q8_0(void **state) { (void)state; check_mixed_step(COLO_Q8_0); }

static void test_invariance_f32(void **state) { (void)state; check_invariance(COLO_F32); }
static void test_invariance_f16(void **state) { (void)state; check_invariance(COLO_F16); }
static void test_invariance_q8_0(void **state) { (void)state; check_invariance(COLO_Q8_0); }
static void test_invariance_q4_1(void **state) { (void)state; check_invariance(COLO_Q4_1); }

/* ---- rewriting a GGUF with one thing changed -------------------------------------------- */

typedef struct {
    const char *drop_key;       /* metadata key to leave out */
    const char *drop_tensor;    /* tensor to leave out */
    const char *reshape;        /* tensor whose two dims are swapped */
    const char *retype_f16;     /* F32 tensor written as F16 (its bytes truncated) */
    bool add_output;            /* add output.weight = token_embd.weight */
} edit;

typedef struct {
    const colo_gguf *g;
    const colo_gguf_tensor *src[1100];
    size_t bytes[1100];
} fill_ctx;

static colo_status fill(void *ctx, int index, void *buf, size_t bytes)
{
    fill_ctx *f = ctx;
    size_t n = f->src[index]->bytes < bytes ? f->src[index]->bytes : bytes;
    memcpy(buf, f->src[index]->data, n);
    memset((char *)buf + n, 0, bytes - n);
    return COLO_OK;
}

static void rewrite(const char *from, const char *to, const edit *ed)
{
    char err[256];
    colo_gguf *g = colo_gguf_open(from, err, sizeof err);
    assert_non_null(g);
    colo_gguf_writer *w = colo_gguf_writer_create();
    assert_non_null(w);
    for (int i = 0; i < colo_gguf_n_kv(g); i++) {
        const colo_gguf_kv *kv = colo_gguf_kv_at(g, i);
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
        if (ed->drop_key && !strcmp(key, ed->drop_key))
            continue;
        colo_status st = COLO_OK;
        uint32_t u32;
        int64_t i64;
        float f;
        bool b;
        colo_gguf_str str;
        switch (kv->type) {
        case COLO_GGUF_U32:
            st = colo_gguf_get_u32(g, key, &u32) || colo_gguf_writer_add_u32(w, key, u32);
            break;
        case COLO_GGUF_I32:
            st = colo_gguf_get_i64(g, key, &i64) || colo_gguf_writer_add_i32(w, key, (int32_t)i64);
            break;
        case COLO_GGUF_U64:
            st = colo_gguf_get_i64(g, key, &i64) || colo_gguf_writer_add_u64(w, key, (uint64_t)i64);
            break;
        case COLO_GGUF_F32:
            st = colo_gguf_get_f32(g, key, &f) || colo_gguf_writer_add_f32(w, key, f);
            break;
        case COLO_GGUF_BOOL:
            st = colo_gguf_get_bool(g, key, &b) || colo_gguf_writer_add_bool(w, key, b);
            break;
        case COLO_GGUF_STRING: {
            st = colo_gguf_get_str(g, key, &str);
            char *c = strndup(str.ptr, str.len);
            assert_non_null(c);
            st = st || colo_gguf_writer_add_str(w, key, c);
            free(c);
            break;
        }
        case COLO_GGUF_ARRAY: {
            uint64_t n = kv->arr_len;
            if (kv->arr_type == COLO_GGUF_STRING) {
                char **v = calloc(n, sizeof *v);
                assert_non_null(v);
                for (uint64_t j = 0; j < n; j++) {
                    assert_int_equal(colo_gguf_arr_str(g, key, j, &str), COLO_OK);
                    v[j] = strndup(str.ptr, str.len);
                    assert_non_null(v[j]);
                }
                st = colo_gguf_writer_add_str_arr(w, key, (const char *const *)v, n);
                for (uint64_t j = 0; j < n; j++)
                    free(v[j]);
                free(v);
            } else if (kv->arr_type == COLO_GGUF_I32 || kv->arr_type == COLO_GGUF_F32) {
                void *v = malloc(n * 4 + 4);
                assert_non_null(v);
                memcpy(v, kv->arr_data, n * 4);
                st = kv->arr_type == COLO_GGUF_I32 ? colo_gguf_writer_add_i32_arr(w, key, v, n)
                                                   : colo_gguf_writer_add_f32_arr(w, key, v, n);
                free(v);
            } else {
                fail_msg("key %s: array type %d not copied", key, (int)kv->arr_type);
            }
            break;
        }
        default:
            fail_msg("key %s: type %d not copied", key, (int)kv->type);
        }
        assert_int_equal(st, COLO_OK);
    }
    static fill_ctx fc;
    fc.g = g;
    int nt = 0;
    for (int i = 0; i < colo_gguf_n_tensors(g); i++) {
        const colo_gguf_tensor *t = colo_gguf_tensor_at(g, i);
        if (ed->drop_tensor && !strcmp(t->name, ed->drop_tensor))
            continue;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        colo_dtype type = t->type;
        if (ed->reshape && !strcmp(t->name, ed->reshape)) {
            ne[0] = t->ne[1];
            ne[1] = t->ne[0];
        }
        if (ed->retype_f16 && !strcmp(t->name, ed->retype_f16))
            type = COLO_F16;
        assert_int_equal(colo_gguf_writer_add_tensor(w, t->name, type, t->n_dims, ne), COLO_OK);
        fc.src[nt++] = t;
        if (ed->add_output && !strcmp(t->name, "token_embd.weight")) {
            assert_int_equal(colo_gguf_writer_add_tensor(w, "output.weight", type, t->n_dims, ne), COLO_OK);
            fc.src[nt++] = t;
        }
    }
    if (colo_gguf_writer_finish(w, to, fill, &fc, err, sizeof err) != COLO_OK)
        fail_msg("write %s: %s", to, err);
    colo_gguf_writer_free(w);
    colo_gguf_close(g);
}

static void expect_load_error(const char *base, const edit *ed, const char *needle)
{
    char path[300], err[512] = "";
    model_file(path, sizeof path, "edited");
    rewrite(base, path, ed);
    colo_arena *a = colo_arena_create_bytes(dev, "bad", 64 << 20, err, sizeof err);
    colo_stream *s = colo_stream_create(dev, NULL, err, sizeof err);
    colo_llama *m = colo_llama_load(path, a, s, err, sizeof err);
    if (m)
        fail_msg("loaded despite the edit (expected an error naming %s)", needle);
    if (!strstr(err, needle))
        fail_msg("error \"%s\" does not name %s", err, needle);
    assert_int_equal(colo_arena_used(a), 0);
    colo_stream_destroy(s);
    colo_arena_destroy(a);
    unlink(path);
}

static void test_bad_files_name_the_culprit(void **state)
{
    (void)state;
    char base[300];
    model_file(base, sizeof base, "base");
    write_model(base, COLO_F32);
    expect_load_error(base, &(edit){.drop_tensor = "blk.1.ffn_up.weight"}, "blk.1.ffn_up.weight");
    expect_load_error(base, &(edit){.drop_tensor = "output_norm.weight"}, "output_norm.weight");
    expect_load_error(base, &(edit){.drop_tensor = "token_embd.weight"}, "token_embd.weight");
    expect_load_error(base, &(edit){.reshape = "blk.0.attn_k.weight"}, "blk.0.attn_k.weight");
    expect_load_error(base, &(edit){.reshape = "blk.1.ffn_down.weight"}, "blk.1.ffn_down.weight");
    expect_load_error(base, &(edit){.retype_f16 = "blk.0.ffn_norm.weight"}, "blk.0.ffn_norm.weight");
    expect_load_error(base, &(edit){.drop_key = "llama.block_count"}, "llama.block_count");
    expect_load_error(base, &(edit){.drop_key = "llama.attention.layer_norm_rms_epsilon"},
                      "llama.attention.layer_norm_rms_epsilon");
    /* The memory estimate names a missing tensor too. */
    char path[300], err[512] = "";
    model_file(path, sizeof path, "edited2");
    rewrite(base, path, &(edit){.drop_tensor = "blk.0.attn_v.weight"});
    colo_llama_memory mem;
    assert_int_not_equal(colo_llama_memory_need(path, COLO_F16, &mem, err, sizeof err), COLO_OK);
    assert_non_null(strstr(err, "blk.0.attn_v.weight"));
    unlink(path);
    unlink(base);
}

/* output.weight present and equal to the embedding: the logits of the tied model. */
static void test_untied_output(void **state)
{
    (void)state;
    char base[300], untied[300];
    model_file(base, sizeof base, "tied");
    model_file(untied, sizeof untied, "untied");
    write_model(base, COLO_Q8_0);
    rewrite(base, untied, &(edit){.add_output = true});
    static float a[4][NV], b[4][NV];
    row rows[4];
    int32_t lr[4] = {0, 1, 2, 3};
    for (int i = 0; i < 4; i++)
        rows[i] = (row){0, i, 7 + 31 * i};
    rig r;
    colo_kv_table t;
    rig_open(&r, base, 8);
    size_t tied_bytes = colo_llama_weight_bytes(r.m);
    tables_open(&t, 1);
    assert_int_equal(step(&r, &t, 1, rows, 4, lr, 4, &a[0][0]), COLO_OK);
    tables_close(&r, &t, 1);
    rig_close(&r);
    rig_open(&r, untied, 8);
    assert_true(colo_llama_weight_bytes(r.m) > tied_bytes); /* a second matrix was loaded */
    tables_open(&t, 1);
    assert_int_equal(step(&r, &t, 1, rows, 4, lr, 4, &b[0][0]), COLO_OK);
    tables_close(&r, &t, 1);
    rig_close(&r);
    assert_memory_equal(a, b, sizeof a);
    unlink(base);
    unlink(untied);
}

/* Logits of 4 rows of model path, its weight bytes and the arena's use
 * once loaded, with COLO_WEIGHTS=mode. */
static void logits_with(const char *path, const char *mode, float *logits, size_t *weights, size_t *arena_used)
{
    setenv("COLO_WEIGHTS", mode, 1);
    row rows[4];
    int32_t lr[4] = {0, 1, 2, 3};
    for (int i = 0; i < 4; i++)
        rows[i] = (row){0, i, 11 + 29 * i};
    rig r;
    colo_kv_table t;
    char err[512];
    r.arena = colo_arena_create_bytes(dev, "llama", 64 << 20, err, sizeof err);
    r.s = colo_stream_create(dev, NULL, err, sizeof err);
    assert_non_null(r.arena);
    assert_non_null(r.s);
    r.m = colo_llama_load(path, r.arena, r.s, err, sizeof err);
    if (!r.m)
        fail_msg("load: %s", err);
    *weights = colo_llama_weight_bytes(r.m);
    *arena_used = colo_arena_used(r.arena);
    assert_int_equal(colo_llama_kv_init(r.m, 8, BS, COLO_F32, err, sizeof err), COLO_OK);
    r.kv = colo_llama_kv_cache(r.m);
    tables_open(&t, 1);
    assert_int_equal(step(&r, &t, 1, rows, 4, lr, 4, logits), COLO_OK);
    tables_close(&r, &t, 1);
    rig_close(&r); /* the arena is empty again: the mapped weights' room went back too */
    unsetenv("COLO_WEIGHTS");
}

/* On the CPU the weights are read in place from the file's mapping: the
 * same logits, bit for bit, as copies in the arena; the arena counts as
 * many bytes for them; an elastic arena's pool is charged for them and
 * gets them back when the model is freed. */
static void test_weights_in_place(void **state)
{
    (void)state;
    char path[300], err[512];
    model_file(path, sizeof path, "inplace");
    write_model(path, COLO_Q4_1);
    static float mapped[4][NV], copied[4][NV];
    size_t w_map, w_copy, used_map, used_copy;
    logits_with(path, "map", &mapped[0][0], &w_map, &used_map);
    logits_with(path, "copy", &copied[0][0], &w_copy, &used_copy);
    assert_memory_equal(mapped, copied, sizeof mapped);
    assert_int_equal(w_map, w_copy);
    assert_true(used_map >= w_map);
    /* the copies round each tensor up to the arena's grain, the mapping takes one range */
    assert_true(used_map <= used_copy);

    colo_mem_pool *pool = colo_mem_pool_create(64 << 20);
    assert_non_null(pool);
    colo_arena *a = colo_arena_create_elastic(dev, "elastic", pool, 32 << 20, 32 << 20, err, sizeof err);
    colo_stream *s = colo_stream_create(dev, NULL, err, sizeof err);
    assert_non_null(a);
    assert_non_null(s);
    colo_llama *m = colo_llama_load(path, a, s, err, sizeof err);
    if (!m)
        fail_msg("load: %s", err);
    assert_true(colo_mem_pool_used(pool) >= w_map);
    colo_llama_free(m);
    assert_int_equal(colo_mem_pool_used(pool), 0);
    colo_stream_destroy(s);
    colo_arena_destroy(a);
    colo_mem_pool_destroy(pool);
    unlink(path);
}

/* A model's wake as the llama kind does it: the file's reader held while
 * asleep (shared by the next open of the unchanged file, so nothing is
 * parsed again), the weights' pages out of the process, then mapped
 * again: the same logits, bit for bit, also when the file's pages were
 * dropped from the page cache meanwhile (read from the disk). A file
 * changed since gets a reader of its own. */
static void test_wake_from_mapping(void **state)
{
    (void)state;
    char path[300], err[512];
    model_file(path, sizeof path, "wake");
    write_model(path, COLO_Q4_1);
    colo_gguf *held = colo_gguf_open(path, err, sizeof err);
    assert_non_null(held);
    static float first[4][NV], again[4][NV], copied[4][NV];
    size_t w, used;
    logits_with(path, "map", &first[0][0], &w, &used);
    colo_gguf *g = colo_gguf_open(path, err, sizeof err);
    assert_ptr_equal(g, held); /* shared: not parsed again */
    colo_gguf_close(g);

    logits_with(path, "map", &again[0][0], &w, &used);
    assert_memory_equal(first, again, sizeof first);

    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(fdatasync(fd), 0);
    assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    close(fd);
    assert_true(resident_pages(path) < 8); /* nothing held them: the freed model dropped its pages */
    memset(again, 0, sizeof again);
    logits_with(path, "map", &again[0][0], &w, &used);
    assert_memory_equal(first, again, sizeof first);
    logits_with(path, "copy", &copied[0][0], &w, &used);
    assert_memory_equal(first, copied, sizeof first);

    struct timespec ts[2] = {{0, UTIME_OMIT}, {time(NULL) + 1000, 0}};
    assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
    g = colo_gguf_open(path, err, sizeof err);
    assert_non_null(g);
    assert_true(g != held); /* changed since: opened anew */
    assert_int_not_equal(colo_gguf_identity(g).mtime_ns, colo_gguf_identity(held).mtime_ns);
    colo_gguf_close(g);
    colo_gguf_close(held);
    unlink(path);
}

static void test_context_limit_and_scratch(void **state)
{
    (void)state;
    char path[300];
    model_file(path, sizeof path, "ctx");
    write_model(path, COLO_F16);
    rig r;
    rig_open(&r, path, CTX / BS + 4);
    colo_kv_table t;
    assert_int_equal(colo_kv_table_init(&t, CTX / BS + 2), COLO_OK); /* a table longer than the context */
    static row rows[CTX];
    static float lg[NV];
    for (int i = 0; i < CTX; i++)
        rows[i] = (row){0, i, (i * 37) % NV};
    int32_t last = CTX - 1;
    assert_int_equal(step(&r, &t, 1, rows, CTX, &last, 1, lg), COLO_OK); /* the whole context */
    row past = {0, CTX, 5};
    int32_t z = 0;
    assert_int_equal(step(&r, &t, 1, &past, 1, &z, 1, lg), COLO_EINVAL);
    /* Other malformed steps are refused too. */
    row bad_tok = {0, 3, NV};
    assert_int_equal(step(&r, &t, 1, &bad_tok, 1, &z, 1, lg), COLO_EINVAL);
    int32_t bad_row = 1;
    row ok = {0, 3, 1};
    assert_int_equal(step(&r, &t, 1, &ok, 1, &bad_row, 1, lg), COLO_EINVAL);
    /* Activations for a million tokens do not fit in 64 MiB: ENOMEM, and the model still runs. */
    assert_int_equal(colo_llama_reserve(r.m, 1 << 20, 1, 1, 1), COLO_ENOMEM);
    assert_int_equal(step(&r, &t, 1, &ok, 1, &z, 1, lg), COLO_OK);
    assert_false(isnan(lg[0]));
    colo_kv_table_release(r.kv, &t);
    colo_kv_table_free(&t);
    rig_close(&r);
    unlink(path);
}

static void test_memory_need(void **state)
{
    (void)state;
    const colo_dtype types[] = {COLO_F32, COLO_Q4_1};
    for (int k = 0; k < 2; k++) {
        char path[300], err[512];
        model_file(path, sizeof path, "mem");
        write_model(path, types[k]);
        colo_llama_memory mem;
        assert_int_equal(colo_llama_memory_need(path, COLO_F16, &mem, err, sizeof err), COLO_OK);
        assert_int_equal(colo_llama_memory_need(path, COLO_Q4_1, &mem, err, sizeof err), COLO_EINVAL);
        /* heads of E / NH = 16: not whole blocks of 32 */
        assert_int_equal(colo_llama_memory_need(path, COLO_Q8_0, &mem, err, sizeof err), COLO_EUNSUPPORTED);
        assert_int_equal(colo_llama_memory_need(path, COLO_F16, &mem, err, sizeof err), COLO_OK);
        assert_int_equal(mem.kv_bytes_per_token, 2 * 2 * (NKV * E / NH) * 2);
        rig r;
        rig_open(&r, path, 4);
        const colo_llama_hparams *hp = colo_llama_hparams_get(r.m);
        assert_memory_equal(&mem.hp, hp, sizeof *hp);
        assert_int_equal(mem.weight_bytes, colo_llama_weight_bytes(r.m));
        assert_int_equal(mem.act_bytes_per_token * 10 + mem.act_bytes_per_logit * 3 + 18 * 256, /* 18 pieces, each aligned */
                         colo_llama_act_bytes(hp, 10, 3, 0));
        /* The load itself: weights plus at most 256 bytes of alignment per tensor, plus the KV cache. */
        size_t kv = colo_kv_cache_bytes(r.kv);
        size_t used = colo_arena_used(r.arena);
        assert_true(used >= mem.weight_bytes + kv);
        assert_true(used <= mem.weight_bytes + kv + 256 * (2 + 9 * 2 + 2 * 2 + 8));
        rig_close(&r);
        unlink(path);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invariance_f32),
        cmocka_unit_test(test_invariance_f16),
        cmocka_unit_test(test_invariance_q8_0),
        cmocka_unit_test(test_invariance_q4_1),
        cmocka_unit_test(test_mixed_step_q4_1),
        cmocka_unit_test(test_mixed_step_q8_0),
        cmocka_unit_test(test_untied_output),
        cmocka_unit_test(test_weights_in_place),
        cmocka_unit_test(test_wake_from_mapping),
        cmocka_unit_test(test_bad_files_name_the_culprit),
        cmocka_unit_test(test_context_limit_and_scratch),
        cmocka_unit_test(test_memory_need),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
