/* colo-bench-embed: sentence embeddings per second of a BERT model folder
 * (all-MiniLM-L6-v2 by default) at several batch sizes, tokenization
 * included. A benchmark, not a test: it prints, and asserts nothing.
 *
 *   colo-bench-embed [--model DIR] [--device cpu|cuda] [--threads N]
 *                    [--seconds S] [--batches 1,8,32] [--words N] [--f16] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/arch/bert.h"
#include "runtime/clock.h"

static double now_s(void) { return (double)colo_now_ns() * 1e-9; }

static const char *const sentences[] = {
    "A man is eating food.",
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Sentence embeddings map text to vectors so that similar meanings lie close together.",
    "What is the capital of France?",
    "Two men pushed carts through the woods while it was raining.",
    "A woman is playing violin on a crowded street corner in the evening.",
    "Search engines rank documents by how well they answer a question.",
    "The girl is carrying a baby.",
};
#define N_SENT ((int)(sizeof sentences / sizeof sentences[0]))

static int usage(void)
{
    fprintf(stderr, "usage: colo-bench-embed [--model DIR] [--device cpu|cuda] [--threads N] [--seconds S] "
                    "[--batches 1,8,32] [--words N] [--f16]\n");
    return 2;
}

int main(int argc, char **argv)
{
    char dir[1024] = "", err[512];
    const char *device = "cpu", *batches = "1,8,32";
    int threads = 0, words = 0;
    double seconds = 3.0;
    colo_bert_config bc = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--f16")) {
            bc.weight_type = COLO_F16;
            continue;
        }
        if (!v)
            return usage();
        if (!strcmp(a, "--model"))
            snprintf(dir, sizeof dir, "%s", v);
        else if (!strcmp(a, "--device"))
            device = v;
        else if (!strcmp(a, "--threads"))
            threads = atoi(v);
        else if (!strcmp(a, "--seconds"))
            seconds = atof(v);
        else if (!strcmp(a, "--batches"))
            batches = v;
        else if (!strcmp(a, "--words"))
            words = atoi(v);
        else
            return usage();
        i++;
    }
    if (!*dir) {
        const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        if (xdg && *xdg)
            snprintf(dir, sizeof dir, "%s/colo/models/all-minilm-l6-v2", xdg);
        else
            snprintf(dir, sizeof dir, "%s/.cache/colo/models/all-minilm-l6-v2", home ? home : ".");
    }
    colo_device_config dc = {.want = device, .cpu_threads = threads};
    colo_device *dev = colo_device_open(&dc, err, sizeof err);
    colo_arena *arena = dev ? colo_arena_create_bytes(dev, "bench", 2ull << 30, err, sizeof err) : NULL;
    colo_stream *s = arena ? colo_stream_create(dev, NULL, err, sizeof err) : NULL;
    colo_bert *m = s ? colo_bert_load(dir, &bc, arena, s, err, sizeof err) : NULL;
    if (!m) {
        fprintf(stderr, "colo-bench-embed: %s\n", err);
        return 1;
    }
    /* --words N: every text is N words long instead of the sentences above */
    char *long_text = NULL;
    if (words > 0) {
        long_text = malloc((size_t)words * 8 + 1);
        if (!long_text)
            return 1;
        long_text[0] = '\0';
        for (int w = 0; w < words; w++)
            strcat(long_text, w % 3 ? "vector " : "search ");
    }
    colo_device_info info;
    colo_device_get_info(dev, &info);
    printf("model %s (%s weights), device %s, %d compute units\n", dir, bc.weight_type == COLO_F16 ? "f16" : "f32",
           info.name, info.compute_units);
    const int E = colo_bert_dim(m);
    for (const char *p = batches; *p;) {
        int b = atoi(p);
        if (b <= 0)
            return usage();
        const char **texts = malloc((size_t)b * sizeof *texts);
        float *out = malloc((size_t)b * E * sizeof *out);
        if (!texts || !out)
            return 1;
        int n_tokens = 0;
        for (int i = 0; i < b; i++) {
            texts[i] = long_text ? long_text : sentences[i % N_SENT];
            int32_t ids[512];
            int n;
            colo_bert_tokenize(m, texts[i], strlen(texts[i]), ids, 512, &n, NULL);
            n_tokens += n;
        }
        if (colo_bert_encode(m, s, texts, NULL, b, b, out) != COLO_OK) { /* warm-up, scratch sized */
            fprintf(stderr, "colo-bench-embed: encode failed\n");
            return 1;
        }
        int calls = 0;
        double t0 = now_s(), t;
        do {
            colo_bert_encode(m, s, texts, NULL, b, b, out);
            calls++;
            t = now_s() - t0;
        } while (t < seconds);
        printf("batch %3d: %8.1f embeddings/s, %7.2f ms per batch, %9.0f tokens/s (%.1f tokens per text)\n", b,
               calls * (double)b / t, t / calls * 1e3, calls * (double)n_tokens / t, (double)n_tokens / b);
        free(texts);
        free(out);
        p = strchr(p, ',');
        if (!p)
            break;
        p++;
    }
    free(long_text);
    colo_bert_free(m);
    colo_stream_destroy(s);
    colo_arena_destroy(arena);
    colo_device_close(dev);
    return 0;
}
