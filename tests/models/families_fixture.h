/* tests/models/families_fixture.h: the llama.cpp references of
 * tests/data/families (README there) and one teacher-forced run of a case
 * on any device, shared by the CPU and CUDA family tests.
 *
 * A case is a colo-mkmodel configuration (seeded: the same file llama.cpp
 * ran), a prompt and llama.cpp's greedy steps: at each its logits over the
 * vocabulary, its token and the margin between its top two logits. A run
 * feeds the prompt as one prefill step, then llama.cpp's tokens one decode
 * step each, so that every device sees the same inputs at every step. */
#ifndef COLO_TESTS_FAMILIES_FIXTURE_H
#define COLO_TESTS_FAMILIES_FIXTURE_H

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/arch/llama.h"
#include "models/arch/lora.h"
#include "tools/mkmodel.h"
#include "runtime/backend.h"

/* cmocka group setup for the family tests: a CPU device of 2 threads into
 * *dev and a fresh folder named after test into tmpdir (cap bytes). */
static inline int family_setup(colo_device **dev, char *tmpdir, size_t cap, const char *test)
{
    char err[256];
    colo_device_config dc = {.want = "cpu", .cpu_threads = 2};
    *dev = colo_device_open(&dc, err, sizeof err);
    const char *t = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, cap, "%s/colo-test-%s-XXXXXX", t, test);
    return *dev && mkdtemp(tmpdir) ? 0 : -1;
}

/* The matching teardown: closes dev and removes tmpdir. */
static inline int family_teardown(colo_device *dev, const char *tmpdir)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    colo_device_close(dev);
    return system(cmd) == 0 ? 0 : -1;
}

typedef struct family_case {
    const char *file;     /* the reference's path */
    colo_mkmodel_config c;
    bool has_lora;        /* a LoRA adapter of the model ran too (tests/data/lora) */
    colo_mkmodel_lora lora;
    int n_prompt, n_steps, n_vocab;
    int32_t *prompt;      /* (n_prompt) */
    int32_t *ref_tok;     /* (n_steps) llama.cpp's greedy token at each step */
    double *ref_margin;   /* (n_steps) its top-2 logit margin */
    float *ref_logits;    /* (n_steps, n_vocab) */
} family_case;

/* The colo-mkmodel flags the reference was made with, as a config. */
static void family_parse_flags(json_t *flags, colo_mkmodel_config *c)
{
    *c = (colo_mkmodel_config){.n_ctx = 2048, .type = COLO_F16, .seed = 1};
    size_t n = json_array_size(flags);
    for (size_t i = 0; i < n; i++) {
        const char *f = json_string_value(json_array_get(flags, i));
        const char *v = i + 1 < n ? json_string_value(json_array_get(flags, i + 1)) : NULL;
        assert_non_null(f);
        int *ip = !strcmp(f, "--layers")     ? &c->n_layer
                  : !strcmp(f, "--dim")      ? &c->n_embd
                  : !strcmp(f, "--heads")    ? &c->n_head
                  : !strcmp(f, "--kv-heads") ? &c->n_kv_head
                  : !strcmp(f, "--ffn")      ? &c->n_ff
                  : !strcmp(f, "--vocab")    ? &c->n_vocab
                  : !strcmp(f, "--ctx")      ? &c->n_ctx
                  : !strcmp(f, "--head-dim") ? &c->head_dim
                  : !strcmp(f, "--swa")      ? &c->n_swa
                                             : NULL;
        if (ip) {
            *ip = atoi(v), i++;
        } else if (!strcmp(f, "--seed")) {
            c->seed = strtoull(v, NULL, 10), i++;
        } else if (!strcmp(f, "--untied")) {
            c->untied = true;
        } else if (!strcmp(f, "--llama3-rope")) {
            c->llama3_rope = true;
        } else if (!strcmp(f, "--arch")) {
            if (colo_llama_arch_parse(v, &c->arch) != COLO_OK)
                fail_msg("unknown --arch %s", v);
            i++;
        } else if (!strcmp(f, "--type")) {
            if (colo_mkmodel_type_parse(v, &c->type, &c->k_mix) != COLO_OK)
                fail_msg("unknown --type %s", v);
            i++;
        } else {
            fail_msg("unknown colo-mkmodel flag %s in the reference", f);
        }
    }
}

/* The colo-mkmodel flags of the reference's adapter (--lora-*). */
static void family_parse_lora(json_t *flags, colo_mkmodel_lora *a)
{
    *a = (colo_mkmodel_lora){.type = COLO_F32, .seed = 1};
    size_t n = json_array_size(flags);
    for (size_t i = 0; i + 1 < n; i += 2) {
        const char *f = json_string_value(json_array_get(flags, i)), *v = json_string_value(json_array_get(flags, i + 1));
        assert_true(f && v);
        if (!strcmp(f, "--lora-rank"))
            a->rank = atoi(v);
        else if (!strcmp(f, "--lora-seed"))
            a->seed = strtoull(v, NULL, 10);
        else if (!strcmp(f, "--lora-alpha"))
            a->alpha = strtof(v, NULL);
        else if (!strcmp(f, "--lora-type"))
            a->type = !strcmp(v, "f16") ? COLO_F16 : COLO_F32;
        else
            fail_msg("unknown colo-mkmodel flag %s in the reference", f);
    }
    assert_true(n % 2 == 0 && a->rank > 0);
}

/* Reads the reference file into fc (free with family_case_free). */
static void family_case_load(const char *file, family_case *fc)
{
    memset(fc, 0, sizeof *fc);
    json_error_t je;
    json_t *j = json_load_file(file, 0, &je);
    if (!j)
        fail_msg("%s:%d: %s", file, je.line, je.text);
    fc->file = file;
    family_parse_flags(json_object_get(j, "mkmodel"), &fc->c);
    if ((fc->has_lora = json_object_get(j, "lora") != NULL))
        family_parse_lora(json_object_get(j, "lora"), &fc->lora);
    json_t *prompt = json_object_get(j, "prompt"), *steps = json_object_get(j, "steps");
    fc->n_prompt = (int)json_array_size(prompt);
    fc->n_steps = (int)json_array_size(steps);
    fc->n_vocab = fc->c.n_vocab;
    assert_true(fc->n_prompt > 0 && fc->n_steps > 0);
    fc->prompt = malloc((size_t)fc->n_prompt * sizeof *fc->prompt);
    fc->ref_tok = malloc((size_t)fc->n_steps * sizeof *fc->ref_tok);
    fc->ref_margin = malloc((size_t)fc->n_steps * sizeof *fc->ref_margin);
    fc->ref_logits = malloc((size_t)fc->n_steps * fc->n_vocab * sizeof *fc->ref_logits);
    assert_true(fc->prompt && fc->ref_tok && fc->ref_margin && fc->ref_logits);
    for (int i = 0; i < fc->n_prompt; i++)
        fc->prompt[i] = (int32_t)json_integer_value(json_array_get(prompt, i));
    for (int st = 0; st < fc->n_steps; st++) {
        json_t *ref = json_array_get(steps, st), *rl = json_object_get(ref, "logits");
        assert_int_equal(json_array_size(rl), fc->n_vocab);
        fc->ref_tok[st] = (int32_t)json_integer_value(json_object_get(ref, "token"));
        fc->ref_margin[st] = json_real_value(json_object_get(ref, "margin"));
        for (int v = 0; v < fc->n_vocab; v++)
            fc->ref_logits[(size_t)st * fc->n_vocab + v] = (float)json_real_value(json_array_get(rl, v));
    }
    json_decref(j);
}

static void family_case_free(family_case *fc)
{
    free(fc->prompt);
    free(fc->ref_tok);
    free(fc->ref_margin);
    free(fc->ref_logits);
}

/* Runs the model in model_path (fc's, or another file of fc's shape) on
 * dev with a KV cache of kv (llama.cpp's references used F16), with fc's
 * adapter when it has one (written to adapter_path), and puts colo's
 * logits of every step into out (n_steps, n_vocab). */
static void family_run_file(colo_device *dev, const char *model_path, const char *adapter_path,
                            const family_case *fc, colo_dtype kv, float *out)
{
    char err[512];
    colo_arena *arena = colo_arena_create_bytes(dev, "family", 256 << 20, err, sizeof err);
    if (!arena)
        fail_msg("%s: arena: %s", fc->file, err);
    colo_stream *s = colo_stream_create(dev, NULL, err, sizeof err);
    if (!s)
        fail_msg("%s: stream: %s", fc->file, err);
    colo_llama *m = colo_llama_load(model_path, arena, s, err, sizeof err);
    if (!m)
        fail_msg("%s: load: %s", fc->file, err);
    int32_t adapter = -1;
    if (fc->has_lora) {
        if (colo_mkmodel_write_lora(adapter_path, &fc->c, &fc->lora, err, sizeof err) != COLO_OK)
            fail_msg("%s: mkmodel: %s", fc->file, err);
        int slot;
        if (colo_llama_lora_load(m, s, adapter_path, 1.0f, &slot, err, sizeof err) != COLO_OK)
            fail_msg("%s: adapter: %s", fc->file, err);
        adapter = slot;
    }
    enum { BS = 16 };
    int ctx = fc->c.n_ctx, max_blocks = ctx / BS;
    if (colo_llama_kv_init(m, max_blocks, BS, kv, err, sizeof err) != COLO_OK)
        fail_msg("kv: %s", err);
    colo_llama_set_seq_len(m, ctx); /* as llama.cpp with n_ctx = ctx */
    int32_t table[256];
    assert_true(max_blocks <= 256);
    assert_int_equal(colo_llama_kv_alloc(m, max_blocks, table), COLO_OK);
    int np = fc->n_prompt, ns = fc->n_steps, V = fc->n_vocab;
    int32_t tok[512], pos[512], seq[512] = {0};
    assert_true(np + ns < 512 && np + ns <= ctx);
    for (int i = 0; i < np; i++)
        tok[i] = fc->prompt[i], pos[i] = i;
    int n = np, at = 0; /* the first step: the whole prompt */
    for (int st = 0; st < ns; st++) {
        int32_t last = n - 1 - at;
        colo_llama_batch b = {.n_tokens = n - at, .tokens = tok + at, .pos = pos + at, .seq = seq + at, .n_seqs = 1,
                              .max_blocks = max_blocks, .block_table = table, .n_logits = 1, .logit_rows = &last, .seq_adapter = &adapter};
        colo_status rc = colo_llama_forward(m, s, &b, out + (size_t)st * V, NULL);
        if (rc != COLO_OK)
            fail_msg("%s: step %d: forward: %s", fc->file, st, colo_status_str(rc));
        at = n;
        tok[n] = fc->ref_tok[st], pos[n] = n, n++; /* teacher-forced: llama.cpp's token */
    }
    colo_llama_free(m);
    assert_int_equal(colo_arena_used(arena), 0);
    colo_stream_destroy(s);
    colo_arena_destroy(arena);
}

/* Writes fc's model to model_path (and its adapter beside it) and runs it
 * (family_run_file). */
static void family_run(colo_device *dev, const char *model_path, const family_case *fc, colo_dtype kv, float *out)
{
    char err[512], adapter[600];
    if (colo_mkmodel_write(model_path, &fc->c, err, sizeof err) != COLO_OK)
        fail_msg("%s: mkmodel: %s", fc->file, err);
    snprintf(adapter, sizeof adapter, "%s.lora.gguf", model_path);
    family_run_file(dev, model_path, adapter, fc, kv, out);
}

/* Largest |a - b| over n floats; a non-finite value counts as infinite. */
static double family_max_diff(const float *a, const float *b, int n)
{
    double d = 0;
    for (int i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (!isfinite(a[i]) || !isfinite(b[i]) || e != e)
            return INFINITY;
        d = e > d ? e : d;
    }
    return d;
}

static int family_argmax(const float *x, int n)
{
    int best = 0;
    for (int v = 1; v < n; v++)
        best = x[v] > x[best] ? v : best;
    return best;
}

/* What a Q8_0 KV cache may add to a logit's difference from llama.cpp's
 * (whose references used an F16 cache). Measured on the CPU: up to 0.060
 * from llama.cpp with F32, F16 and BF16 weights (0.059 from colo's own
 * logits with an F16 cache), 0.19 with quantized weights (0.17: a changed
 * K or V moves the 8-bit rounding of decode activations too). */
#define KV_Q8_0_ALLOWANCE 0.1

/* The weight type's tolerance against llama.cpp (the CPU test's header
 * says where each comes from). */
static double family_tolerance(colo_dtype t)
{
    return t == COLO_F32 ? 0.01 : t == COLO_F16 || t == COLO_BF16 ? 0.05 : 0.25;
}

/* Calls run(file, name) for every reference in tests/data/<sub>
 * (families, or lora: the same with an adapter) (file: its path, name: its
 * file name); fails unless every architecture has one. */
static void family_each_in(const char *sub, void (*run)(const char *file, const char *name))
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tests/data/%s", COLO_SOURCE_DIR, sub);
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    bool seen[COLO_ARCH_GEMMA3 + 1] = {false};
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json"))
            continue;
        char file[800];
        snprintf(file, sizeof file, "%s/%s", dir, e->d_name);
        run(file, e->d_name);
        for (int a = COLO_ARCH_LLAMA; a <= COLO_ARCH_GEMMA3; a++) {
            const char *an = colo_llama_arch_name((colo_llama_arch)a);
            if (!strncmp(e->d_name, an, strlen(an)) && e->d_name[strlen(an)] == '_')
                seen[a] = true;
        }
        n++;
    }
    closedir(d);
    for (int a = COLO_ARCH_LLAMA; a <= COLO_ARCH_GEMMA3; a++)
        if (!seen[a])
            fail_msg("no reference for %s", colo_llama_arch_name((colo_llama_arch)a));
    assert_true(n >= 5);
}

static inline void family_each(void (*run)(const char *file, const char *name)) { family_each_in("families", run); }

#endif
