/* Fuzz target: a BERT model folder's JSON files (config.json,
 * sentence_bert_config.json, tokenizer_config.json, 1_Pooling/config.json)
 * as colo_bert_memory_need reads them. The input is up to four parts
 * separated by a line "====", one file each in that order; a missing part
 * leaves its file out (config.json is required). The folder also holds a
 * model.safetensors with no tensors, so an accepted config reaches the
 * memory arithmetic, whose results are checked against the hyperparameters. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/arch/bert.h"
#include "fuzz_common.h"

static const char *const files[] = {"config.json", "sentence_bert_config.json", "tokenizer_config.json",
                                    "1_Pooling/config.json"};
enum { N_FILES = sizeof files / sizeof files[0] };

static char dir[64];

static void remove_dir(void)
{
    char path[128];
    for (int i = 0; i < N_FILES; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/1_Pooling", dir);
    rmdir(path);
    rmdir(dir);
}

static int write_file(const char *name, const void *data, size_t size)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = size ? fwrite(data, 1, size, f) : 0;
    return fclose(f) == 0 && w == size ? 0 : -1;
}

static void make_dir(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/colo-fuzz-XXXXXX", tmp && *tmp && strlen(tmp) < 40 ? tmp : "/tmp");
    char path[128];
    snprintf(path, sizeof path, "%s/1_Pooling", mkdtemp(dir) ? dir : "");
    static const uint8_t empty_safetensors[] = {2, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    if (!dir[0] || mkdir(path, 0700) != 0 ||
        write_file("model.safetensors", empty_safetensors, sizeof empty_safetensors) != 0) {
        fprintf(stderr, "fuzz_bert_config: cannot make a model folder in %s\n", dir);
        abort();
    }
    atexit(remove_dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init_once(make_dir);
    static const char sep[] = "\n====\n";
    const uint8_t *p = data, *end = data + size;
    for (int i = 0; i < N_FILES; i++) {
        if (!p) { /* no part for this file: leave it out */
            char path[128];
            snprintf(path, sizeof path, "%s/%s", dir, files[i]);
            unlink(path);
            continue;
        }
        const uint8_t *cut = memmem(p, (size_t)(end - p), sep, sizeof sep - 1);
        size_t n = cut ? (size_t)(cut - p) : (size_t)(end - p);
        if (write_file(files[i], p, n) != 0)
            abort();
        p = cut ? cut + sizeof sep - 1 : NULL;
    }

    /* The model's own max length, then one from the model's config entry. */
    colo_bert_config cfg = {0};
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            cfg.max_len = size ? data[size - 1] : 0;
        colo_bert_memory need;
        char err[512] = "";
        int batch = 4, len = pass == 0 ? 2 : (cfg.max_len >= 2 ? cfg.max_len : 2);
        if (colo_bert_memory_need(dir, &cfg, batch, len, &need, err, sizeof err) != COLO_OK) {
            if (!err[0])
                abort(); /* every refusal says why */
            continue;
        }
        const colo_bert_hparams *hp = &need.hp;
        if (hp->n_embd <= 0 || hp->n_head <= 0 || hp->n_layer <= 0 || hp->n_ff <= 0 || hp->n_vocab <= 0 ||
            hp->n_pos <= 0 || hp->n_type <= 0 || hp->head_dim * hp->n_head != hp->n_embd)
            abort(); /* accepted hyperparameters are consistent */
        if (hp->max_len < 2 || hp->max_len > hp->n_pos || !(hp->ln_eps > 0))
            abort();
        if (need.weight_bytes < (size_t)hp->n_vocab * hp->n_embd * 2 ||
            need.act_bytes < (size_t)batch * len * hp->n_embd * 4)
            abort(); /* byte counts did not wrap */
    }
    return 0;
}
