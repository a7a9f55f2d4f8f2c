/* A BERT model folder's JSON files (config.json, sentence_bert_config.json,
 * 1_Pooling/config.json) as colo_bert_memory_need reads them: MiniLM's
 * settings give its hyperparameters and parameter count, and each bad file
 * is refused with a message naming the folder, the file and the field.
 * Needs no weights: the folder holds a model.safetensors with no tensors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/arch/bert.h"

static char dir[256];

static void put(const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!text) {
        unlink(path);
        return;
    }
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/colo-test-bert-config-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    char path[512];
    snprintf(path, sizeof path, "%s/1_Pooling", dir);
    if (mkdir(path, 0700) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    static const unsigned char empty[] = {2, 0, 0, 0, 0, 0, 0, 0, '{', '}'}; /* no tensors */
    return f && fwrite(empty, 1, sizeof empty, f) == sizeof empty && fclose(f) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* all-minilm-l6-v2's config.json, with FIELD's value replaced when given
 * (NULL value: the field left out). */
static const char *minilm(const char *field, const char *value)
{
    static const char *const keys[][2] = {
        {"model_type", "\"bert\""},          {"hidden_act", "\"gelu\""},
        {"hidden_size", "384"},              {"intermediate_size", "1536"},
        {"layer_norm_eps", "1e-12"},         {"max_position_embeddings", "512"},
        {"num_attention_heads", "12"},       {"num_hidden_layers", "6"},
        {"position_embedding_type", "\"absolute\""}, {"type_vocab_size", "2"},
        {"vocab_size", "30522"},
    };
    static char buf[1024];
    size_t n = (size_t)snprintf(buf, sizeof buf, "{\"architectures\": [\"BertModel\"]");
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        bool mine = field && strcmp(field, keys[i][0]) == 0;
        if (mine && !value)
            continue;
        n += (size_t)snprintf(buf + n, sizeof buf - n, ", \"%s\": %s", keys[i][0], mine ? value : keys[i][1]);
    }
    snprintf(buf + n, sizeof buf - n, "}");
    return buf;
}

static void reset_optional(void)
{
    put("sentence_bert_config.json", NULL);
    put("tokenizer_config.json", NULL);
    put("1_Pooling/config.json", NULL);
}

static void test_minilm_settings(void **state)
{
    (void)state;
    reset_optional();
    put("config.json", minilm(NULL, NULL));
    colo_bert_memory need;
    char err[512] = "";
    assert_int_equal(colo_bert_memory_need(dir, NULL, 8, 128, &need, err, sizeof err), COLO_OK);
    const colo_bert_hparams *hp = &need.hp;
    assert_int_equal(hp->n_embd, 384);
    assert_int_equal(hp->n_head, 12);
    assert_int_equal(hp->head_dim, 32);
    assert_int_equal(hp->n_layer, 6);
    assert_int_equal(hp->n_ff, 1536);
    assert_int_equal(hp->n_vocab, 30522);
    assert_int_equal(hp->n_pos, 512);
    assert_int_equal(hp->n_type, 2);
    assert_int_equal(hp->max_len, 512); /* no sentence_bert_config.json: the position table's length */
    /* BertModel without its pooler has 22,565,376 parameters (22,713,216
     * with it, as transformers counts them); F32 by default. */
    assert_int_equal(need.weight_bytes, (size_t)22565376 * 4);
    assert_true(need.act_bytes >= (size_t)8 * 128 * 384 * 4);

    /* sentence-transformers' max_seq_length, then the config's max_len. */
    put("sentence_bert_config.json", "{\"max_seq_length\": 256, \"do_lower_case\": false}");
    put("1_Pooling/config.json", "{\"pooling_mode_mean_tokens\": true, \"pooling_mode_cls_token\": false}");
    assert_int_equal(colo_bert_memory_need(dir, NULL, 8, 128, &need, err, sizeof err), COLO_OK);
    assert_int_equal(need.hp.max_len, 256);
    colo_bert_config cfg = {.max_len = 64};
    assert_int_equal(colo_bert_memory_need(dir, &cfg, 8, 64, &need, err, sizeof err), COLO_OK);
    assert_int_equal(need.hp.max_len, 64);
    cfg.weight_type = COLO_F16;
    assert_int_equal(colo_bert_memory_need(dir, &cfg, 8, 64, &need, err, sizeof err), COLO_OK);
    assert_true(need.weight_bytes < (size_t)22565376 * 4 && need.weight_bytes > (size_t)22565376 * 2);
}

typedef struct {
    const char *what;
    const char *field, *value; /* config.json: MiniLM's with this field changed (value NULL: left out) */
    const char *file, *text;   /* or this file's text (NULL: the file removed) */
    int max_len;               /* colo_bert_config.max_len, 0 for none */
    colo_status want;
    const char *message; /* must appear in the error */
} bad_case;

static void test_bad_files(void **state)
{
    (void)state;
    const bad_case cases[] = {
        {"missing config", NULL, NULL, "config.json", NULL, 0, COLO_EIO, "config.json is missing"},
        {"not JSON", NULL, NULL, "config.json", "{\"hidden_size\": 384,", 0, COLO_EFORMAT, "config.json: "},
        {"not an object", NULL, NULL, "config.json", "[384]", 0, COLO_EFORMAT, "config.json: not a JSON object"},
        {"duplicate key", NULL, NULL, "config.json", "{\"model_type\": \"bert\", \"model_type\": \"bert\"}", 0,
         COLO_EFORMAT, "duplicate object key"},
        {"other model", "model_type", "\"roberta\"", NULL, NULL, 0, COLO_EFORMAT, "model_type is not \"bert\""},
        {"other activation", "hidden_act", "\"relu\"", NULL, NULL, 0, COLO_EUNSUPPORTED, "only hidden_act \"gelu\""},
        {"missing field", "hidden_size", NULL, NULL, NULL, 0, COLO_EFORMAT, "hidden_size is missing"},
        {"negative", "vocab_size", "-5", NULL, NULL, 0, COLO_EFORMAT, "vocab_size is not a positive integer"},
        {"string number", "intermediate_size", "\"1536\"", NULL, NULL, 0, COLO_EFORMAT,
         "intermediate_size is not a positive integer"},
        {"heads", "num_attention_heads", "7", NULL, NULL, 0, COLO_EFORMAT, "7 heads do not divide hidden_size 384"},
        {"eps", "layer_norm_eps", "0", NULL, NULL, 0, COLO_EFORMAT, "layer_norm_eps is not a positive"},
        {"too large", "num_hidden_layers", "16777216", NULL, NULL, 0, COLO_EUNSUPPORTED,
         "parameters is more than colo supports"},
        {"seq length", NULL, NULL, "sentence_bert_config.json", "{\"max_seq_length\": 1000}", 0, COLO_EFORMAT,
         "sentence_bert_config.json: max_seq_length is not in [2, 512]"},
        {"pooling", NULL, NULL, "1_Pooling/config.json", "{\"pooling_mode_cls_token\": true}", 0, COLO_EUNSUPPORTED,
         "1_Pooling/config.json: only mean pooling"},
        {"config max_len", NULL, NULL, NULL, NULL, 600, COLO_EINVAL, "max_len 600 is not in [2, 512]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bad_case *c = &cases[i];
        reset_optional();
        put("config.json", minilm(c->field, c->value));
        if (c->file)
            put(c->file, c->text);
        colo_bert_config cfg = {.max_len = c->max_len};
        colo_bert_memory need;
        char err[512] = "";
        colo_status st = colo_bert_memory_need(dir, &cfg, 4, 32, &need, err, sizeof err);
        if (st != c->want || !strstr(err, c->message) || strncmp(err, dir, strlen(dir)) != 0)
            fail_msg("%s: status %d (want %d), message \"%s\" (want the folder and \"%s\")", c->what, (int)st,
                     (int)c->want, err, c->message);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_minilm_settings),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
