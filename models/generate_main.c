/* colo-generate: one-off generation from a GGUF file.
 * stdout: the generated text only; stderr: load time and speeds. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "batching/engine.h"
#include "batching/queue.h"
#include "models/llama.h"
#include "runtime/log.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: colo-generate --model FILE (--prompt TEXT | --chat TEXT) [options]\n"
            "  --model FILE        llama-architecture GGUF file\n"
            "  --prompt TEXT       raw completion prompt\n"
            "  --chat TEXT         a user message, wrapped in the ChatML template\n"
            "  --system TEXT       a system message for --chat\n"
            "  --max-tokens N      tokens to generate at most (default 128)\n"
            "  --temperature T     0 = greedy (default 0.8)\n"
            "  --top-p P           nucleus sampling (default 0.95)\n"
            "  --top-k K           0 = off (default 40)\n"
            "  --seed S            random seed (default: time)\n"
            "  --device D          auto | cpu | cuda (default auto)\n"
            "  --threads N         CPU worker threads (default: all cores)\n"
            "  --batch N           generate N copies at once (throughput; prints the first)\n"
            "  --memory-bytes N    memory arena size (default: 2 GiB, at most the device's)\n"
            "  --print-tokens      print the prompt and generated token ids to stderr\n");
}

typedef struct {
    int idx;
    bool print;
    char *ids_out;
    int n_tokens;
    uint64_t first_ns, done_ns;
    const char *finish;
    int32_t *tokens;
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

static void on_done(void *ud, const colo_gen_outcome *o)
{
    seq_ctx *c = ud;
    c->n_tokens = o->n_tokens;
    c->first_ns = o->first_token_ns;
    c->done_ns = o->done_ns;
    c->finish = o->finish_reason ? o->finish_reason : "error";
    c->tokens = malloc((size_t)(o->n_tokens ? o->n_tokens : 1) * 4);
    if (c->tokens)
        memcpy(c->tokens, o->tokens, (size_t)o->n_tokens * 4);
    c->n_tok = o->n_tokens;
    if (o->status != COLO_OK)
        fprintf(stderr, "colo-generate: sequence %d failed: %s\n", c->idx, o->error ? o->error : "?");
}

int main(int argc, char **argv)
{
    const char *model = NULL, *prompt = NULL, *chat = NULL, *system = NULL, *device = "auto";
    int max_tokens = 128, top_k = 40, threads = 0, batch = 1;
    float temperature = 0.8f, top_p = 0.95f;
    uint64_t seed = (uint64_t)time(NULL);
    size_t mem = 2ull << 30;
    bool print_tokens = false;
    static const struct option opts[] = {
        {"model", 1, 0, 'm'},     {"prompt", 1, 0, 'p'},       {"chat", 1, 0, 'c'},   {"system", 1, 0, 'S'},
        {"max-tokens", 1, 0, 'n'}, {"temperature", 1, 0, 't'}, {"top-p", 1, 0, 'P'},  {"top-k", 1, 0, 'k'},
        {"seed", 1, 0, 's'},      {"device", 1, 0, 'd'},       {"threads", 1, 0, 'T'}, {"batch", 1, 0, 'b'},
        {"memory-bytes", 1, 0, 'M'}, {"print-tokens", 0, 0, 'i'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int o, oi = 0;
    char *end;
    while ((o = getopt_long(argc, argv, "", opts, &oi)) != -1) {
        errno = 0;
        switch (o) {
        case 'm': model = optarg; break;
        case 'p': prompt = optarg; break;
        case 'c': chat = optarg; break;
        case 'S': system = optarg; break;
        case 'n': max_tokens = (int)strtol(optarg, &end, 10); if (*end || max_tokens < 1) goto bad; break;
        case 't': temperature = strtof(optarg, &end); if (*end || temperature < 0) goto bad; break;
        case 'P': top_p = strtof(optarg, &end); if (*end || top_p <= 0 || top_p > 1) goto bad; break;
        case 'k': top_k = (int)strtol(optarg, &end, 10); if (*end || top_k < 0) goto bad; break;
        case 's': seed = strtoull(optarg, &end, 10); if (*end) goto bad; break;
        case 'd': device = optarg; break;
        case 'T': threads = (int)strtol(optarg, &end, 10); if (*end || threads < 0) goto bad; break;
        case 'b': batch = (int)strtol(optarg, &end, 10); if (*end || batch < 1 || batch > 256) goto bad; break;
        case 'M': mem = strtoull(optarg, &end, 10); if (*end || mem < (1u << 20)) goto bad; break;
        case 'i': print_tokens = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        continue;
    bad:
        fprintf(stderr, "colo-generate: invalid value for --%s: %s\n", opts[oi].name, optarg);
        return 2;
    }
    if (device && strcmp(device, "auto") && strcmp(device, "cpu") && strcmp(device, "cuda")) {
        fprintf(stderr, "colo-generate: --device must be auto, cpu or cuda\n");
        return 2;
    }
    if (!model || (!prompt == !chat) || optind < argc) {
        usage(stderr);
        return 2;
    }
    char err[512];
    colo_device_config dc = {.want = device, .cpu_threads = threads};
    colo_device *dev = colo_device_open(&dc, err, sizeof err);
    if (!dev) {
        fprintf(stderr, "colo-generate: %s\n", err);
        return 1;
    }
    int rc = 1;
    colo_device_info info;
    colo_device_get_info(dev, &info);
    if (mem > info.total_bytes)
        mem = info.total_bytes;
    colo_arena *arena = colo_arena_create_bytes(dev, "generate", mem, err, sizeof err);
    colo_stream *s = arena ? colo_stream_create(dev, NULL, err, sizeof err) : NULL;
    colo_llama *m = NULL;
    colo_gen_engine *e = NULL;
    int32_t *ids = NULL;
    seq_ctx *ctx = NULL;
    char *text = NULL;
    if (!s)
        goto out;
    uint64_t t0 = colo_now_ns();
    if (!(m = colo_llama_load(model, arena, s, err, sizeof err)))
        goto out;
    uint64_t t1 = colo_now_ns();
    fprintf(stderr, "colo-generate: loaded %s in %.2f s on %s (%.1f MiB of weights)\n", model, (t1 - t0) / 1e9,
            info.name, colo_llama_weight_bytes(m) / 1048576.0);
    const colo_bpe *bpe = colo_llama_tokenizer(m);
    if (chat) {
        colo_chat_msg msgs[2];
        int nm = 0;
        if (system)
            msgs[nm++] = (colo_chat_msg){"system", system};
        msgs[nm++] = (colo_chat_msg){"user", chat};
        text = colo_chatml_prompt(msgs, nm);
    } else {
        text = strdup(prompt);
    }
    int n_ids;
    if (!text || colo_bpe_encode(bpe, text, strlen(text), chat != NULL, &ids, &n_ids) != COLO_OK) {
        snprintf(err, sizeof err, "out of memory while tokenizing");
        goto out;
    }
    if (print_tokens) {
        fprintf(stderr, "prompt tokens (%d):", n_ids);
        for (int i = 0; i < n_ids; i++)
            fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    colo_gen_config gc = {.max_running = batch, .max_step_tokens = 512 > batch ? 512 : batch};
    if (!(e = colo_gen_engine_create(m, s, &gc, err, sizeof err)))
        goto out;
    ctx = calloc((size_t)batch, sizeof *ctx);
    colo_gen_params gp = {.max_tokens = max_tokens, .temperature = temperature, .top_p = top_p, .top_k = top_k,
                          .priority = COLO_PRIO_NORMAL};
    for (int i = 0; i < batch; i++) {
        ctx[i].idx = i;
        ctx[i].print = i == 0;
        gp.seed = seed + (uint64_t)i;
        colo_gen_callbacks cb = {on_token, on_done, &ctx[i]};
        if (!colo_gen_add(e, ids, n_ids, &gp, &cb, err, sizeof err))
            goto out;
    }
    uint64_t t2 = colo_now_ns(), t_prefill = 0;
    long decode_tokens = 0;
    int n;
    colo_status st;
    bool prefill_done = false;
    do {
        st = colo_gen_step(e, NULL, &n);
        if (!prefill_done && n) {
            t_prefill = colo_now_ns();
            prefill_done = true;
        } else if (n) {
            decode_tokens += n;
        }
    } while (st == COLO_OK && n > 0);
    uint64_t t3 = colo_now_ns();
    fputc('\n', stdout);
    if (st != COLO_OK) {
        snprintf(err, sizeof err, "generation failed: %s", colo_status_str(st));
        goto out;
    }
    if (print_tokens) {
        fprintf(stderr, "generated tokens (%d):", ctx[0].n_tok);
        for (int i = 0; i < ctx[0].n_tok; i++)
            fprintf(stderr, " %d", ctx[0].tokens[i]);
        fprintf(stderr, "\n");
    }
    /* Prefill ends when the last sequence has its first token; decode is
     * every later token, until the last sequence is done. */
    uint64_t first_all = 0, done_all = 0;
    decode_tokens = 0;
    for (int i = 0; i < batch; i++) {
        first_all = ctx[i].first_ns > first_all ? ctx[i].first_ns : first_all;
        done_all = ctx[i].done_ns > done_all ? ctx[i].done_ns : done_all;
        decode_tokens += ctx[i].n_tok > 1 ? ctx[i].n_tok - 1 : 0;
    }
    if (first_all)
        t_prefill = first_all;
    if (done_all)
        t3 = done_all;
    double pf = (t_prefill - t2) / 1e9, dc_s = (t3 - t_prefill) / 1e9;
    fprintf(stderr, "colo-generate: prefill %d tokens x %d in %.3f s (%.1f tokens/s); decode %ld tokens in %.3f s "
                    "(%.1f tokens/s); finish: %s\n",
            n_ids, batch, pf, (double)n_ids * batch / (pf > 0 ? pf : 1e-9), decode_tokens, dc_s,
            decode_tokens / (dc_s > 0 ? dc_s : 1e-9), ctx[0].finish ? ctx[0].finish : "?");
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "colo-generate: %s\n", err);
    colo_gen_engine_free(e);
    if (ctx)
        for (int i = 0; i < batch; i++)
            free(ctx[i].tokens);
    free(ctx);
    free(ids);
    free(text);
    colo_llama_free(m);
    colo_stream_destroy(s);
    colo_arena_destroy(arena);
    colo_device_close(dev);
    return rc;
}
