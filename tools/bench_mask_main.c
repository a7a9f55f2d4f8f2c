/* colo-bench-mask: the cost of constrained decoding's vocabulary mask, apart
 * from the model's forward pass. Reads a GGUF's tokenizer, tokenizes a
 * document that is valid against the schema, and at every token of it
 * masks the whole vocabulary from the state the prefix left (as the engine
 * does before sampling), timing each mask in thread CPU time (so that other
 * work on the machine counts less). Prints the vocabulary, the tokens, the
 * mean, median and largest mask time per token, and how many tokens each
 * mask allowed on average.
 *
 *   colo-bench-mask --model FILE.gguf [--schema JSON | --json-object] --doc JSON [--repeat N]
 */
#include "models/format/gguf.h"
#include "models/sample/json_schema.h"
#include "models/tokenizer/tokenizer.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: colo-bench-mask --model FILE.gguf [--schema JSON | --json-object] --doc JSON [--repeat N]\n"
               "  --model FILE    a GGUF whose tokenizer is used\n"
               "  --schema JSON   the JSON Schema (default: --json-object, any object)\n"
               "  --doc JSON      a document valid against it, tokenized and replayed token by token\n"
               "  --repeat N      replays (default 5)\n");
}

int main(int argc, char **argv)
{
    const char *model = NULL, *schema = NULL, *doc = NULL;
    int repeat = 5;
    static const struct option opts[] = {{"model", 1, 0, 'm'},       {"schema", 1, 0, 's'},
                                         {"json-object", 0, 0, 'j'}, {"doc", 1, 0, 'd'},
                                         {"repeat", 1, 0, 'r'},      {"help", 0, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 's': schema = optarg; break;
        case 'j': schema = NULL; break;
        case 'd': doc = optarg; break;
        case 'r': repeat = atoi(optarg); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!model || !doc || repeat < 1) {
        usage(stderr);
        return 2;
    }
    char err[256];
    colo_gguf *gg = colo_gguf_open(model, err, sizeof err);
    colo_tokenizer *tok = gg ? colo_tokenizer_from_gguf(gg, err, sizeof err) : NULL;
    if (!tok) {
        fprintf(stderr, "colo-bench-mask: %s\n", err);
        colo_gguf_close(gg);
        return 1;
    }
    colo_schema *g = schema ? colo_schema_compile(schema, strlen(schema), err, sizeof err) : colo_schema_any_object();
    if (!g) {
        fprintf(stderr, "colo-bench-mask: schema: %s\n", schema ? err : "out of memory");
        return 1;
    }
    int V = colo_tokenizer_n_vocab(tok);
    char **bytes = calloc((size_t)V, sizeof *bytes);
    uint16_t *lens = calloc((size_t)V, sizeof *lens);
    bool *special = calloc((size_t)V, sizeof *special);
    uint8_t *allowed = malloc((size_t)V);
    if (!bytes || !lens || !special || !allowed)
        return 1;
    for (int i = 0; i < V; i++) {
        char buf[512];
        size_t n = 0;
        if (colo_tokenizer_decode(tok, i, buf, sizeof buf, &n) != COLO_OK)
            n = 0;
        special[i] = colo_tokenizer_is_special(tok, i);
        lens[i] = (uint16_t)n;
        bytes[i] = malloc(n ? n : 1);
        memcpy(bytes[i], buf, n);
    }
    uint64_t t0 = cpu_ns();
    colo_schema_vocab *v = colo_schema_vocab_create((const char *const *)bytes, lens, special, V);
    uint64_t vocab_ns = cpu_ns() - t0;
    int32_t *ids = NULL;
    int n_ids = 0;
    if (!v || colo_tokenizer_encode(tok, doc, strlen(doc), false, false, &ids, &n_ids) != COLO_OK || !n_ids) {
        fprintf(stderr, "colo-bench-mask: cannot tokenize the document\n");
        return 1;
    }
    uint64_t *t = malloc((size_t)n_ids * (size_t)repeat * sizeof *t);
    long allowed_sum = 0;
    int k = 0;
    for (int r = 0; r < repeat; r++) {
        colo_schema_state s;
        colo_schema_state_init(g, &s);
        for (int i = 0; i < n_ids; i++) {
            uint64_t a = cpu_ns();
            int na = colo_schema_mask(g, &s, v, allowed);
            t[k++] = cpu_ns() - a;
            allowed_sum += na;
            if (!allowed[ids[i]] || !colo_schema_feed(g, &s, bytes[ids[i]], lens[ids[i]])) {
                fprintf(stderr, "colo-bench-mask: the document's token %d (%.*s) is not allowed by the schema\n", i,
                        (int)lens[ids[i]], bytes[ids[i]]);
                return 1;
            }
        }
        if (!colo_schema_done(&s)) {
            fprintf(stderr, "colo-bench-mask: the document is not complete\n");
            return 1;
        }
    }
    uint64_t sum = 0;
    for (int i = 0; i < k; i++)
        sum += t[i];
    qsort(t, (size_t)k, sizeof *t, cmp_u64);
    printf("vocabulary %d tokens (table built in %.1f ms), document %d tokens x %d: mask per token mean %.3f ms, "
           "median %.3f ms, max %.3f ms; %.0f tokens allowed on average\n",
           V, vocab_ns / 1e6, n_ids, repeat, sum / 1e6 / k, t[k / 2] / 1e6, t[k - 1] / 1e6,
           (double)allowed_sum / k);
    for (int i = 0; i < V; i++)
        free(bytes[i]);
    free(bytes);
    free(lens);
    free(special);
    free(allowed);
    free(t);
    free(ids);
    colo_schema_vocab_free(v);
    colo_schema_free(g);
    colo_tokenizer_free(tok);
    colo_gguf_close(gg);
    return 0;
}
