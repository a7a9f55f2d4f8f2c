/* colo-bench-kv: what a KV cache type costs in quality, on a real model and
 * a reference file of llama.cpp's (tests/data/llama/smollm2_greedy.json, gemma3_greedy.json: prompts,
 * llama.cpp's greedy continuations and some of its logits). For every KV
 * type named, against the first (the baseline, f16 by default):
 *
 * - greedy: the prompt, then greedy decoding for as many tokens as the
 *   reference has; how many tokens equal the baseline's before the first
 *   difference (summed over the prompts), how many whole continuations are
 *   equal, and how many tokens equal llama.cpp's before the first
 *   difference;
 * - teacher-forced: the prompt, then llama.cpp's own greedy tokens fed one
 *   by one; the largest |logit - baseline logit| over the whole vocabulary
 *   and every step, and the largest |logit - llama.cpp's| over the logits
 *   the reference recorded (top-5 of the first step, or top-20 of the first
 *   steps).
 *
 *   colo-bench-kv --model FILE.gguf --ref FILE.json [--kv-types f16,q8_0,q4_0] [--threads N] [--exact]
 *
 * Prints one line per KV type; asserts nothing. */
#include "models/arch/llama.h"
#include "models/sample/sampler.h"

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TYPES 4
#define BLOCK 16

typedef struct {
    colo_dtype t;
    long greedy_equal_base, greedy_total, greedy_equal_llama;
    int whole_equal_base, n_cases;
    double tf_max_vs_base, tf_max_vs_llama;
} kv_result;

static void usage(FILE *f)
{
    fprintf(f, "usage: colo-bench-kv --model FILE.gguf --ref FILE.json [--kv-types f16,q8_0,q4_0] [--threads N] "
               "[--exact]\n"
               "  --model FILE     a llama-family GGUF\n"
               "  --ref FILE       a reference of llama.cpp's (tests/data/llama/*_greedy.json)\n"
               "  --kv-types LIST  KV cache types, the first the baseline (default f16,q8_0)\n"
               "  --threads N      CPU threads (default 2)\n"
               "  --exact          exact activations (no 8-bit rounding in decode products)\n");
}

static bool parse_type(const char *s, colo_dtype *t)
{
    static const struct {
        const char *name;
        colo_dtype t;
    } names[] = {{"f16", COLO_F16}, {"f32", COLO_F32}, {"q8_0", COLO_Q8_0}, {"q4_0", COLO_Q4_0}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i].name)) {
            *t = names[i].t;
            return true;
        }
    return false;
}

typedef struct {
    colo_llama *m;
    colo_stream *s;
    int32_t *table; /* (max_blocks) */
    int max_blocks, V;
    int32_t *tok, *pos, *seq; /* (max_blocks * BLOCK) */
} runner;

/* Runs the prompt, then n_steps tokens: next[i] (teacher-forced) or, with
 * next NULL, the greedy token (into out_tokens). The logits of each step go
 * to logits + step * V when logits is not NULL. */
static colo_status run(runner *r, const int32_t *prompt, int np, const int32_t *next, int n_steps, int32_t *out_tokens,
                       float *logits, float *scratch)
{
    for (int i = 0; i < np; i++)
        r->tok[i] = prompt[i], r->pos[i] = i, r->seq[i] = 0;
    int n = np, at = 0;
    for (int st = 0; st < n_steps; st++) {
        int32_t last = n - 1 - at;
        colo_llama_batch b = {.n_tokens = n - at, .tokens = r->tok + at, .pos = r->pos + at, .seq = r->seq + at,
                              .n_seqs = 1, .max_blocks = r->max_blocks, .block_table = r->table, .n_logits = 1,
                              .logit_rows = &last};
        float *lg = logits ? logits + (size_t)st * r->V : scratch;
        colo_status rc = colo_llama_forward(r->m, r->s, &b, lg, NULL);
        if (rc != COLO_OK)
            return rc;
        int32_t t = next ? next[st] : colo_argmax(lg, r->V);
        if (out_tokens)
            out_tokens[st] = colo_argmax(lg, r->V);
        at = n;
        r->tok[n] = t, r->pos[n] = n, r->seq[n] = 0, n++;
    }
    return COLO_OK;
}

/* Largest |logits[step][id] - recorded| over the logits the case recorded:
 * top5_ids/top5_logits (first step) or top20[step].ids/logits. */
static double vs_recorded(const json_t *c, const float *logits, int V, int n_steps)
{
    double worst = 0;
    const json_t *ids = json_object_get(c, "top5_ids"), *lg = json_object_get(c, "top5_logits");
    if (ids && lg)
        for (size_t k = 0; k < json_array_size(ids); k++)
            worst = fmax(worst, fabs(logits[json_integer_value(json_array_get(ids, k))] -
                                     json_number_value(json_array_get(lg, k))));
    const json_t *top = json_object_get(c, "top20");
    for (size_t st = 0; top && st < json_array_size(top) && (int)st < n_steps; st++) {
        const json_t *e = json_array_get(top, st);
        ids = json_object_get(e, "ids"), lg = json_object_get(e, "logits");
        for (size_t k = 0; k < json_array_size(ids); k++) {
            json_int_t id = json_integer_value(json_array_get(ids, k));
            if (id >= 0 && id < V)
                worst = fmax(worst, fabs(logits[(size_t)st * V + id] - json_number_value(json_array_get(lg, k))));
        }
    }
    return worst;
}

/* The working buffers of one prompt's runs. */
typedef struct bufs {
    float *base, *lg;           /* logits: the baseline KV type's, the one measured */
    int32_t *base_tok, *got;    /* greedy tokens: the same */
    int32_t *prompt, *forced;   /* the prompt, and llama.cpp's greedy tokens teacher-forced */
} bufs;

/* Runs case ci (np prompt tokens, ns steps) with every KV type into res;
 * false with a message on stderr. */
static bool measure(runner *r, const json_t *cs, size_t ci, int np, int ns, kv_result *res, int n_types, bufs *b)
{
    char err[512];
    for (int k = 0; k < n_types; k++) {
        kv_result *e = &res[k];
        colo_status st = colo_llama_kv_init(r->m, r->max_blocks, BLOCK, e->t, err, sizeof err);
        if (st != COLO_OK) {
            fprintf(stderr, "colo-bench-kv: KV cache %s: %s\n", colo_dtype_name(e->t), err);
            return false;
        }
        if ((st = colo_llama_kv_alloc(r->m, r->max_blocks, r->table)) != COLO_OK ||
            (st = run(r, b->prompt, np, NULL, ns, k ? b->got : b->base_tok, NULL, b->lg)) != COLO_OK ||
            (st = run(r, b->prompt, np, b->forced, ns, NULL, k ? b->lg : b->base, NULL)) != COLO_OK) {
            fprintf(stderr, "colo-bench-kv: case %zu, KV %s: %s\n", ci, colo_dtype_name(e->t),
                    colo_status_str(st));
            return false;
        }
        colo_llama_kv_free(r->m, r->table, r->max_blocks);
        colo_llama_kv_fini(r->m);
        const int32_t *mine = k ? b->got : b->base_tok;
        int eq_base = 0, eq_llama = 0;
        while (eq_base < ns && mine[eq_base] == b->base_tok[eq_base])
            eq_base++;
        while (eq_llama < ns && mine[eq_llama] == b->forced[eq_llama])
            eq_llama++;
        e->greedy_equal_base += eq_base;
        e->greedy_equal_llama += eq_llama;
        e->greedy_total += ns;
        e->whole_equal_base += eq_base == ns;
        e->n_cases++;
        const float *mlg = k ? b->lg : b->base;
        for (size_t i = 0; k && i < (size_t)ns * r->V; i++)
            e->tf_max_vs_base = fmax(e->tf_max_vs_base, fabs((double)mlg[i] - b->base[i]));
        e->tf_max_vs_llama = fmax(e->tf_max_vs_llama, vs_recorded(cs, mlg, r->V, ns));
    }
    return true;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *ref = NULL, *types_arg = "f16,q8_0";
    int threads = 2;
    bool exact = false;
    static const struct option opts[] = {{"model", 1, 0, 'm'},  {"ref", 1, 0, 'r'},   {"kv-types", 1, 0, 'k'},
                                         {"threads", 1, 0, 't'}, {"exact", 0, 0, 'e'}, {"help", 0, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'r': ref = optarg; break;
        case 'k': types_arg = optarg; break;
        case 't': threads = atoi(optarg); break;
        case 'e': exact = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    kv_result res[MAX_TYPES];
    int n_types = 0;
    char types_buf[128];
    snprintf(types_buf, sizeof types_buf, "%s", types_arg);
    for (char *save = NULL, *p = strtok_r(types_buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        if (n_types == MAX_TYPES || !parse_type(p, &res[n_types].t)) {
            fprintf(stderr, "colo-bench-kv: --kv-types: '%s' is not one of f16, f32, q8_0, q4_0 (at most %d)\n", p,
                    MAX_TYPES);
            return 2;
        }
        n_types++;
    }
    if (!model || !ref || !n_types || threads < 1) {
        usage(stderr);
        return 2;
    }
    json_error_t je;
    json_t *j = json_load_file(ref, 0, &je);
    if (!j) {
        fprintf(stderr, "colo-bench-kv: %s:%d: %s\n", ref, je.line, je.text);
        return 1;
    }
    const json_t *cases = json_object_get(j, "cases");
    int longest = 0, max_steps = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *cs = json_array_get(cases, i);
        int np = (int)json_array_size(json_object_get(cs, "prompt_ids"));
        int ns = (int)json_array_size(json_object_get(cs, "greedy_ids"));
        longest = np + ns > longest ? np + ns : longest;
        max_steps = ns > max_steps ? ns : max_steps;
    }
    char err[512];
    int rc = 1;
    colo_device_config dc = {.want = "cpu", .cpu_threads = threads, .exact_activations = exact};
    colo_device *dev = colo_device_open(&dc, err, sizeof err);
    colo_arena *arena = dev ? colo_arena_create_bytes(dev, "bench-kv", (size_t)3 << 30, err, sizeof err) : NULL;
    colo_stream *s = arena ? colo_stream_create(dev, NULL, err, sizeof err) : NULL;
    runner r = {.s = s, .max_blocks = (longest + 1 + BLOCK - 1) / BLOCK};
    r.m = s ? colo_llama_load(model, arena, s, err, sizeof err) : NULL;
    if (!r.m) {
        fprintf(stderr, "colo-bench-kv: %s\n", err);
        goto out;
    }
    r.V = colo_llama_hparams_get(r.m)->n_vocab;
    size_t slots = (size_t)r.max_blocks * BLOCK;
    r.table = malloc((size_t)r.max_blocks * sizeof *r.table);
    r.tok = malloc(slots * sizeof *r.tok), r.pos = malloc(slots * sizeof *r.pos), r.seq = malloc(slots * sizeof *r.seq);
    bufs b = {.base = malloc((size_t)max_steps * r.V * sizeof(float)),
              .lg = malloc((size_t)max_steps * r.V * sizeof(float)),
              .base_tok = malloc((size_t)max_steps * sizeof(int32_t)),
              .got = malloc((size_t)max_steps * sizeof(int32_t)),
              .prompt = malloc(slots * sizeof(int32_t)),
              .forced = malloc(slots * sizeof(int32_t))};
    if (!r.table || !r.tok || !r.pos || !r.seq || !b.base || !b.lg || !b.base_tok || !b.got || !b.prompt || !b.forced) {
        fprintf(stderr, "colo-bench-kv: out of memory\n");
        goto out_free;
    }
    for (int k = 0; k < n_types; k++) {
        kv_result *e = &res[k];
        colo_dtype t = e->t;
        memset(e, 0, sizeof *e);
        e->t = t;
    }
    for (size_t ci = 0; ci < json_array_size(cases); ci++) {
        const json_t *cs = json_array_get(cases, ci);
        const json_t *pids = json_object_get(cs, "prompt_ids"), *gids = json_object_get(cs, "greedy_ids");
        int np = (int)json_array_size(pids), ns = (int)json_array_size(gids);
        for (int i = 0; i < np; i++)
            b.prompt[i] = (int32_t)json_integer_value(json_array_get(pids, (size_t)i));
        for (int i = 0; i < ns; i++)
            b.forced[i] = (int32_t)json_integer_value(json_array_get(gids, (size_t)i));
        if (!measure(&r, cs, ci, np, ns, res, n_types, &b))
            goto out_free;
    }
    printf("model %s; reference %s: %d prompts; baseline KV %s; %s activations\n", model, ref, res[0].n_cases,
           colo_dtype_name(res[0].t), exact ? "exact" : "default (8-bit in decode)");
    printf("%-6s %22s %16s %22s %24s %22s\n", "kv", "greedy = baseline", "whole prompts", "greedy = llama.cpp",
           "teacher-forced |d| base", "|d| llama.cpp logits");
    for (int k = 0; k < n_types; k++) {
        const kv_result *e = &res[k];
        printf("%-6s %12ld of %-7ld %9d of %-4d %12ld of %-7ld %24.4f %22.4f\n", colo_dtype_name(e->t),
               e->greedy_equal_base, e->greedy_total, e->whole_equal_base, e->n_cases, e->greedy_equal_llama,
               e->greedy_total, e->tf_max_vs_base, e->tf_max_vs_llama);
    }
    rc = 0;
out_free:
    free(r.table), free(r.tok), free(r.pos), free(r.seq), free(b.base), free(b.lg), free(b.base_tok), free(b.got);
    free(b.prompt), free(b.forced);
out:
    colo_llama_free(r.m);
    colo_stream_destroy(s);
    colo_arena_destroy(arena);
    colo_device_close(dev);
    json_decref(j);
    return rc;
}
