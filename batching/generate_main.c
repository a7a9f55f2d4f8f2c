/* colo-generate: one-off generation from a GGUF file, through the same
 * generation engine as colo-server.
 * stdout: the generated text, then one newline; stderr: load time and speeds. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "batching/engine.h"
#include "models/sample/chat.h"
#include "batching/queue.h"
#include "batching/served.h"
#include "batching/spec.h"
#include "models/arch/llama.h"
#include "runtime/log.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: colo-generate --model FILE (--prompt TEXT | --chat TEXT) [options]\n"
            "  --model FILE        llama-architecture GGUF file\n"
            "  --prompt TEXT       raw completion prompt\n"
            "  --chat TEXT         a user message, wrapped in the ChatML template\n"
            "  --system TEXT       a system message for --chat\n"
            "  --chat-template NAME  chatml, llama3, gemma, phi3, mistral or deepseek-r1 instead of\n"
            "                      the file's template\n"
            "  --max-tokens N      tokens to generate at most (default 128)\n"
            "  --temperature T     0 = greedy (default 0.8)\n"
            "  --top-p P           nucleus sampling (default 0.95)\n"
            "  --top-k K           0 = off (default 40)\n"
            "  --seed S            random seed (default: time)\n"
            "  --device D          auto | cpu | cuda (default auto)\n"
            "  --threads N         CPU worker threads (default: all cores)\n"
            "  --batch N           generate N copies at once (throughput; prints the first)\n"
            "  --memory-bytes N    memory arena size (default: 2 GiB, or what the model needs for this\n"
            "                      batch when that is more; at most the device's)\n"
            "  --kv-type T         KV cache element type: f16 | f32 | q8_0 | q4_0 (default f16, as colo-server)\n"
            "  --print-tokens      print the prompt and generated token ids to stderr\n"
            "  --cuda-graphs       CUDA: launch each decode step as one graph\n"
            "  --exact-activations exact F32 activations in matrix products (the model option\n"
            "                      exact_activations; slower)\n"
            "  --json              constrained decoding: the output is a JSON object\n"
            "  --json-schema TEXT  constrained decoding: the output is valid against this JSON Schema\n"
            "  --speculative K     speculative decoding by prompt lookup: each decoding sequence drafts up\n"
            "                      to K tokens (1..16) from its own text, verified in one step (the same\n"
            "                      output; the model option speculative); 0 = off (default)\n"
            "  --draft FILE        speculative decoding with a draft model of the same vocabulary (a\n"
            "                      quantized copy): it drafts K tokens (--speculative, default 4) per\n"
            "                      step in place of prompt lookup (the same output)\n"
            "stdout gets the generated text as it is produced, then one newline (always,\n"
            "so that the statistics on stderr start on a line of their own); stderr gets\n"
            "the load time and speeds.\n");
}

typedef struct {
    const char *model, *prompt, *chat, *system, *device, *chat_template;
    int max_tokens, top_k, threads, batch;
    float temperature, top_p;
    uint64_t seed;
    size_t memory_bytes; /* 0: default_arena_bytes */
    colo_dtype kv_type;
    bool print_tokens;
    bool cuda_graphs; /* --cuda-graphs */
    bool exact;       /* --exact-activations */
    bool json;
    const char *json_schema;
    int spec_tokens; /* --speculative */
    const char *draft; /* --draft */
} options;

/* Fills o from the command line. Returns -1 to go on, else the exit code
 * (0 after --help, 2 on bad usage, with the message printed). */
static int parse_args(int argc, char **argv, options *o)
{
    *o = (options){.device = "auto", .max_tokens = 128, .top_k = 40, .batch = 1, .temperature = 0.8f,
                   .top_p = 0.95f, .seed = (uint64_t)time(NULL), .memory_bytes = 0, .kv_type = COLO_F16};
    static const struct option opts[] = {
        {"model", 1, 0, 'm'},        {"prompt", 1, 0, 'p'},       {"chat", 1, 0, 'c'},    {"system", 1, 0, 'S'},
        {"max-tokens", 1, 0, 'n'},   {"temperature", 1, 0, 't'},  {"top-p", 1, 0, 'P'},   {"top-k", 1, 0, 'k'},
        {"seed", 1, 0, 's'},         {"device", 1, 0, 'd'},       {"threads", 1, 0, 'T'}, {"batch", 1, 0, 'b'},
        {"memory-bytes", 1, 0, 'M'}, {"print-tokens", 0, 0, 'i'}, {"kv-type", 1, 0, 'K'}, {"help", 0, 0, 'h'},
        {"chat-template", 1, 0, 'C'}, {"json", 0, 0, 'j'},
        {"json-schema", 1, 0, 'J'}, {"cuda-graphs", 0, 0, 'g'},
        {"exact-activations", 0, 0, 'x'}, {"speculative", 1, 0, 'L'}, {"draft", 1, 0, 'D'}, {0, 0, 0, 0}};
    int c, oi = 0;
    char *end;
    while ((c = getopt_long(argc, argv, "", opts, &oi)) != -1) {
        errno = 0;
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'p': o->prompt = optarg; break;
        case 'c': o->chat = optarg; break;
        case 'S': o->system = optarg; break;
        case 'C': o->chat_template = optarg; break;
        case 'n': o->max_tokens = (int)strtol(optarg, &end, 10); if (*end || o->max_tokens < 1) goto bad; break;
        case 't': o->temperature = strtof(optarg, &end); if (*end || o->temperature < 0) goto bad; break;
        case 'P': o->top_p = strtof(optarg, &end); if (*end || o->top_p <= 0 || o->top_p > 1) goto bad; break;
        case 'k': o->top_k = (int)strtol(optarg, &end, 10); if (*end || o->top_k < 0) goto bad; break;
        case 's': o->seed = strtoull(optarg, &end, 10); if (*end) goto bad; break;
        case 'd': o->device = optarg; break;
        case 'T': o->threads = (int)strtol(optarg, &end, 10); if (*end || o->threads < 0) goto bad; break;
        case 'b': o->batch = (int)strtol(optarg, &end, 10); if (*end || o->batch < 1 || o->batch > 256) goto bad; break;
        case 'M': o->memory_bytes = strtoull(optarg, &end, 10); if (*end || o->memory_bytes < (1u << 20)) goto bad; break;
        case 'i': o->print_tokens = true; break;
        case 'g': o->cuda_graphs = true; break;
        case 'x': o->exact = true; break;
        case 'j': o->json = true; break;
        case 'J': o->json_schema = optarg; break;
        case 'D': o->draft = optarg; break;
        case 'L':
            o->spec_tokens = (int)strtol(optarg, &end, 10);
            if (*end || o->spec_tokens < 0 || o->spec_tokens > COLO_SPEC_MAX_TOKENS)
                goto bad;
            break;
        case 'K':
            if (!strcmp(optarg, "f16"))
                o->kv_type = COLO_F16;
            else if (!strcmp(optarg, "f32"))
                o->kv_type = COLO_F32;
            else if (!strcmp(optarg, "q8_0"))
                o->kv_type = COLO_Q8_0;
            else if (!strcmp(optarg, "q4_0"))
                o->kv_type = COLO_Q4_0;
            else
                goto bad;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        continue;
    bad:
        fprintf(stderr, "colo-generate: invalid value for --%s: %s\n", opts[oi].name, optarg);
        return 2;
    }
    if (strcmp(o->device, "auto") && strcmp(o->device, "cpu") && strcmp(o->device, "cuda")) {
        fprintf(stderr, "colo-generate: --device must be auto, cpu or cuda\n");
        return 2;
    }
    if (!o->model || (!o->prompt == !o->chat) || optind < argc) {
        usage(stderr);
        return 2;
    }
    if (o->draft && !o->spec_tokens)
        o->spec_tokens = 4;
    return -1;
}

/* What one generated sequence reports back. */
typedef struct {
    int idx;
    bool print;         /* stream its text to stdout */
    uint64_t first_ns, done_ns;
    const char *finish;
    int32_t *tokens;    /* (n_tok) generated ids, owned */
    int n_tok;
} seq_ctx;

static void on_token(void *ud, int32_t tok, const char *piece, size_t len)
{
    seq_ctx *c = ud;
    (void)tok;
    if (c->print && len) {
        fwrite(piece, 1, len, stdout);
        fflush(stdout);
    }
}

static void on_done(void *ud, const colo_engine_outcome *o)
{
    seq_ctx *c = ud;
    c->first_ns = o->first_token_ns;
    c->done_ns = o->done_ns;
    c->finish = o->finish_reason ? o->finish_reason : "error";
    c->tokens = malloc((size_t)(o->n_tokens ? o->n_tokens : 1) * 4);
    if (c->tokens)
        memcpy(c->tokens, o->tokens, (size_t)o->n_tokens * 4);
    c->n_tok = c->tokens ? o->n_tokens : 0;
    if (o->status != COLO_OK)
        fprintf(stderr, "colo-generate: sequence %d failed: %s\n", c->idx, o->error ? o->error : "?");
}

static void print_ids(const char *what, const int32_t *ids, int n)
{
    fprintf(stderr, "%s (%d):", what, n);
    for (int i = 0; i < n; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

/* The prompt's token ids (*ids owned by the caller): --chat in the model's
 * chat template with its special tokens, --prompt as plain text (both with
 * the BOS the file asks for). */
static colo_status tokenize_prompt(const colo_llama *m, const colo_chat_template *chat, const options *o,
                                   int32_t **ids, int *n_ids)
{
    char *text;
    if (o->chat) {
        colo_chat_msg msgs[2];
        int nm = 0;
        if (o->system)
            msgs[nm++] = (colo_chat_msg){"system", o->system};
        msgs[nm++] = (colo_chat_msg){"user", o->chat};
        text = colo_chat_prompt(chat, msgs, nm);
        if (!text && chat->format == COLO_CHAT_NONE)
            return COLO_EINVAL;
    } else {
        text = strdup(o->prompt);
    }
    colo_status st = text ? colo_tokenizer_encode(colo_llama_tokenizer(m), text, strlen(text), true, o->chat != NULL, ids,
                                                  n_ids)
                          : COLO_ENOMEM;
    free(text);
    return st;
}

/* Adds o->batch copies of the prompt (seeds seed, seed + 1, ...); only the
 * first prints its text. */
static bool add_sequences(colo_engine *e, const options *o, const int32_t *ids, int n_ids, seq_ctx *ctx,
                          char *err, size_t errlen)
{
    colo_engine_params gp = {.max_tokens = o->max_tokens, .temperature = o->temperature, .top_p = o->top_p,
                          .top_k = o->top_k, .json_object = o->json, .json_schema = o->json_schema,
                          .priority = COLO_PRIO_NORMAL};
    for (int i = 0; i < o->batch; i++) {
        ctx[i].idx = i;
        ctx[i].print = i == 0;
        gp.seed = o->seed + (uint64_t)i;
        colo_engine_callbacks cb = {on_token, on_done, &ctx[i]};
        if (!colo_engine_add(e, ids, n_ids, &gp, &cb, err, errlen))
            return false;
    }
    return true;
}

/* Steps the engine until every sequence is done. */
static colo_status run_to_end(colo_engine *e)
{
    colo_status st;
    int n;
    do {
        st = colo_engine_step(e, NULL, &n);
    } while (st == COLO_OK && n > 0);
    return st;
}

/* Prefill ends when the last sequence has its first token; decode is every
 * later token, until the last sequence is done. t_start: when the
 * sequences were added. */
static void report_speed(const options *o, const seq_ctx *ctx, int n_ids, uint64_t t_start)
{
    uint64_t first_all = t_start, done_all = t_start;
    long decode_tokens = 0;
    for (int i = 0; i < o->batch; i++) {
        first_all = ctx[i].first_ns > first_all ? ctx[i].first_ns : first_all;
        done_all = ctx[i].done_ns > done_all ? ctx[i].done_ns : done_all;
        decode_tokens += ctx[i].n_tok > 1 ? ctx[i].n_tok - 1 : 0;
    }
    double pf = (first_all - t_start) / 1e9, dc = (done_all - first_all) / 1e9;
    fprintf(stderr, "colo-generate: prefill %d tokens x %d in %.3f s (%.1f tokens/s); decode %ld tokens in %.3f s "
                    "(%.1f tokens/s); finish: %s\n",
            n_ids, o->batch, pf, (double)n_ids * o->batch / (pf > 0 ? pf : 1e-9), decode_tokens, dc,
            decode_tokens / (dc > 0 ? dc : 1e-9), ctx[0].finish ? ctx[0].finish : "?");
}

/* Where the time went since w0 and s0 (docs/SCHEDULING.md, "Where the time
 * goes"): the pool's workers (w0 NULL: no pool) and the steps' phases. */
static void report_time(const colo_engine *e, colo_stream *s, const colo_worker_stats *w0,
                        const colo_stream_stats *s0)
{
    colo_worker_stats w1;
    colo_stream_stats s1;
    colo_stream_get_stats(s, &s1);
    if (w0 && colo_device_worker_stats(colo_stream_device(s), &w1) == COLO_OK) {
        double all = (double)(w1.busy_ns - w0->busy_ns + w1.ready_ns - w0->ready_ns + w1.barrier_ns - w0->barrier_ns +
                              w1.starved_ns - w0->starved_ns);
        all = all > 0 ? all / 100 : 1;
        fprintf(stderr, "colo-generate: workers (%d): busy %.1f%%, ready %.1f%%, barrier %.1f%%, starved %.1f%%; "
                        "%llu ops, %llu chunks, %llu lock waits (%.2f ms)\n",
                w1.n_workers, (w1.busy_ns - w0->busy_ns) / all, (w1.ready_ns - w0->ready_ns) / all,
                (w1.barrier_ns - w0->barrier_ns) / all, (w1.starved_ns - w0->starved_ns) / all,
                (unsigned long long)(w1.ops - w0->ops), (unsigned long long)(w1.chunks - w0->chunks),
                (unsigned long long)(w1.lock_waits - w0->lock_waits), (w1.lock_wait_ns - w0->lock_wait_ns) / 1e6);
    }
    colo_engine_step_stats g;
    colo_engine_get_step_stats(e, &g);
    uint64_t wait = s1.sync_wait_ns - s0->sync_wait_ns;
    wait = wait < g.forward_ns ? wait : g.forward_ns;
    fprintf(stderr, "colo-generate: steps: %llu decode, %llu prefill, %llu mixed; plan %.1f ms, queue %.1f ms, "
                    "device %.1f ms, sample %.1f ms\n",
            (unsigned long long)g.steps[COLO_ENGINE_STEP_DECODE], (unsigned long long)g.steps[COLO_ENGINE_STEP_PREFILL],
            (unsigned long long)g.steps[COLO_ENGINE_STEP_MIXED], g.plan_ns / 1e6, (g.forward_ns - wait) / 1e6,
            wait / 1e6, g.sample_ns / 1e6);
    if (g.spec_steps)
        fprintf(stderr, "colo-generate: speculative: %llu tokens drafted in %llu steps, %llu accepted (%.1f%%)\n",
                (unsigned long long)g.spec_drafted, (unsigned long long)g.spec_steps,
                (unsigned long long)g.spec_accepted, 100.0 * (double)g.spec_accepted / (double)g.spec_drafted);
    if (g.spec_model_passes)
        fprintf(stderr, "colo-generate: draft model: %llu passes in %.1f ms (of plan), %llu tokens drafted, %llu "
                        "accepted\n",
                (unsigned long long)g.spec_model_passes, g.spec_model_ns / 1e6,
                (unsigned long long)g.spec_model_drafted, (unsigned long long)g.spec_model_accepted);
}

/* --draft: the draft model in an arena of its own, with an engine that
 * made its KV cache; lent to the target's engine whenever it asks. */
typedef struct draft_model {
    colo_arena *arena;
    colo_llama *m;
    colo_engine *e;
} draft_model;

static colo_llama *draft_get(void *ud, bool wait, uint64_t *epoch)
{
    (void)wait;
    *epoch = 1;
    return ((draft_model *)ud)->m;
}

static void draft_put(void *ud) { (void)ud; }

static size_t default_arena_bytes(const options *o, size_t floor_bytes, size_t total_bytes);

/* Loads o->draft beside the target (checked to share its vocabulary).
 * false with a message. */
static bool draft_open(const options *o, colo_stream *s, draft_model *d, char *err, size_t errlen)
{
    colo_model_cfg t = {.name = "target", .kind = "llama", .kv_dtype = o->kv_type};
    colo_model_cfg dc = {.name = "draft", .kind = "llama", .kv_dtype = o->kv_type};
    snprintf(t.path, sizeof t.path, "%s", o->model);
    snprintf(dc.path, sizeof dc.path, "%s", o->draft);
    if (colo_served_draft_check(&t, &dc, err, errlen) != COLO_OK)
        return false;
    colo_device *dev = colo_stream_device(s);
    colo_device_info info;
    colo_device_get_info(dev, &info);
    options od = *o;
    od.model = o->draft;
    if (!(d->arena = colo_arena_create_bytes(dev, "draft", default_arena_bytes(&od, 1ull << 30, info.total_bytes), err,
                                             errlen)) ||
        !(d->m = colo_llama_load(o->draft, d->arena, s, err, errlen)))
        return false;
    colo_engine_config gc = {.max_running = o->batch, .max_step_tokens = 512 > o->batch ? 512 : o->batch,
                             .kv_type = o->kv_type};
    return (d->e = colo_engine_create(d->m, s, &gc, err, errlen)) != NULL;
}

static void draft_close(draft_model *d)
{
    colo_engine_free(d->e);
    colo_llama_free(d->m);
    colo_arena_destroy(d->arena);
}

/* Loads the model into arena, generates, reports. Returns the exit code;
 * err gets the message of a failure. */
static int generate(const options *o, colo_arena *arena, colo_stream *s, const char *device_name, char *err,
                    size_t errlen)
{
    draft_model dm = {0};
    colo_spec_draft_src src = {draft_get, draft_put, &dm};
    int rc = 1;
    colo_engine *e = NULL;
    int32_t *ids = NULL;
    int n_ids = 0;
    seq_ctx *ctx = NULL;
    uint64_t t0 = colo_now_ns();
    colo_llama *m = colo_llama_load(o->model, arena, s, err, errlen);
    if (!m)
        return 1;
    fprintf(stderr, "colo-generate: loaded %s in %.2f s on %s (%.1f MiB of weights)\n", o->model,
            (colo_now_ns() - t0) / 1e9, device_name, colo_llama_weight_bytes(m) / 1048576.0);
    colo_chat_template chat;
    char msg[512];
    if (colo_chat_template_init(&chat, colo_llama_tokenizer(m), o->chat_template, msg, sizeof msg) != COLO_OK) {
        colo_set_err(err, errlen, "%s: %s", o->model, msg);
        goto out;
    }
    colo_status tst = tokenize_prompt(m, &chat, o, &ids, &n_ids);
    if (tst != COLO_OK) {
        if (tst == COLO_EINVAL)
            colo_set_err(err, errlen, "%s has no chat template; use --chat-template NAME or --prompt", o->model);
        else
            colo_set_err(err, errlen, "out of memory while tokenizing");
        goto out;
    }
    if (o->print_tokens)
        print_ids("prompt tokens", ids, n_ids);
    colo_engine_config gc = {.max_running = o->batch, .max_step_tokens = 512 > o->batch ? 512 : o->batch,
                          .kv_type = o->kv_type, .n_stop_ids = chat.n_stop_ids, .spec_tokens = o->spec_tokens};
    memcpy(gc.stop_ids, chat.stop_ids, sizeof gc.stop_ids);
    if (o->draft) {
        if (!draft_open(o, s, &dm, err, errlen))
            goto out;
        gc.draft = &src;
        gc.spec_no_lookup = true;
    }
    if (!(e = colo_engine_create(m, s, &gc, err, errlen)))
        goto out;
    if (!(ctx = calloc((size_t)o->batch, sizeof *ctx))) {
        colo_set_err(err, errlen, "out of memory");
        goto out;
    }
    colo_worker_stats w0;
    colo_stream_stats s0;
    bool have_pool = colo_device_worker_stats(colo_stream_device(s), &w0) == COLO_OK;
    colo_stream_get_stats(s, &s0);
    uint64_t t_start = colo_now_ns();
    if (!add_sequences(e, o, ids, n_ids, ctx, err, errlen))
        goto out;
    colo_status st = run_to_end(e);
    /* The newline ends the text before anything else goes to the terminal. */
    fputc('\n', stdout);
    fflush(stdout);
    if (st != COLO_OK) {
        colo_set_err(err, errlen, "generation failed: %s", colo_status_str(st));
        goto out;
    }
    if (o->print_tokens)
        print_ids("generated tokens", ctx[0].tokens, ctx[0].n_tok);
    report_speed(o, ctx, n_ids, t_start);
    report_time(e, s, have_pool ? &w0 : NULL, &s0);
    if (colo_engine_mask_count(e))
        fprintf(stderr, "colo-generate: constrained decoding: %.3f ms per token masking the vocabulary (%llu masks)\n",
                colo_engine_mask_ns(e) / 1e6 / (double)colo_engine_mask_count(e),
                (unsigned long long)colo_engine_mask_count(e));
    rc = 0;
out:
    colo_engine_free(e);
    draft_close(&dm);
    if (ctx)
        for (int i = 0; i < o->batch; i++)
            free(ctx[i].tokens);
    free(ctx);
    free(ids);
    colo_llama_free(m);
    return rc;
}

#define DEFAULT_ARENA_BYTES (2ull << 30)

/* The arena without --memory-bytes: floor_bytes, or more when the model
 * needs more for this run: its weights, the activations of a step, and the
 * KV cache of o->batch sequences at their longest (the prompt, at most one
 * token per byte of its text and template, plus max_tokens). At most
 * total_bytes. A file that cannot be read gives floor_bytes (loading then
 * says why). */
static size_t default_arena_bytes(const options *o, size_t floor_bytes, size_t total_bytes)
{
    colo_llama_memory mem;
    char err[256];
    size_t need = 0;
    if (colo_llama_memory_need(o->model, o->kv_type, &mem, err, sizeof err) == COLO_OK) {
        const colo_llama_hparams *hp = &mem.hp;
        const int bs = 16; /* the engine's default block size */
        size_t text = o->prompt ? strlen(o->prompt)
                                : strlen(o->chat) + (o->system ? strlen(o->system) : 0) + 1024; /* template */
        size_t tokens = text + 16 + (size_t)o->max_tokens; /* BOS and specials */
        if (tokens > (size_t)hp->n_ctx)
            tokens = (size_t)hp->n_ctx;
        int R = o->batch, T = 512 > R ? 512 : R, max_blocks = (hp->n_ctx + bs - 1) / bs;
        size_t blocks = (tokens + bs - 1) / bs + 1;
        need = mem.weight_bytes + (size_t)mem.n_tensors * 256 + colo_llama_act_bytes(hp, T, R, R * max_blocks) +
               (size_t)R * blocks * bs * mem.kv_bytes_per_token + (size_t)hp->n_layer * 2 * 512 + (1u << 20);
    }
    size_t bytes = need > floor_bytes ? need : floor_bytes;
    return bytes < total_bytes ? bytes : total_bytes;
}

int main(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0)
        return rc;
    char err[512] = "";
    colo_device_config dc = {.want = o.device, .cpu_threads = o.threads, .cuda_graphs = o.cuda_graphs};
    colo_device *dev = colo_device_open(&dc, err, sizeof err);
    if (!dev) {
        fprintf(stderr, "colo-generate: %s\n", err);
        return 1;
    }
    rc = 1;
    colo_device_info info;
    colo_device_get_info(dev, &info);
    size_t mem = !o.memory_bytes                     ? default_arena_bytes(&o, DEFAULT_ARENA_BYTES, info.total_bytes)
                 : o.memory_bytes < info.total_bytes ? o.memory_bytes
                                                     : info.total_bytes;
    colo_arena *arena = colo_arena_create_bytes(dev, "generate", mem, err, sizeof err);
    colo_stream_config sc = {.priority = COLO_PRIO_NORMAL, .exact_activations = o.exact};
    colo_stream *s = arena ? colo_stream_create(dev, &sc, err, sizeof err) : NULL;
    if (s)
        rc = generate(&o, arena, s, info.name, err, sizeof err);
    if (rc)
        fprintf(stderr, "colo-generate: %s\n", err);
    colo_stream_destroy(s);
    colo_arena_destroy(arena);
    colo_device_close(dev);
    return rc;
}
