/* tests/server/lora_fixture.h: what the server tests of LoRA adapters share
 * (test_serve_lora.c, test_serve_adapters.c): a base model and adapter
 * files for it, and a model's state as the API reports it. Include it
 * after cmocka.h and server_fixture.h. */
#ifndef COLO_TESTS_LORA_FIXTURE_H
#define COLO_TESTS_LORA_FIXTURE_H

#include <math.h>

/* The state of model (or adapter) name as GET /v1/models/{name} reports
 * it, "absent" when it answers 404; into buf, which it returns. */
static inline const char *srv_model_state(srv_fixture *f, const char *name, char *buf, size_t cap)
{
    char path[160];
    snprintf(path, sizeof path, "/v1/models/%s", name);
    int st;
    json_t *j = srv_get_json(f, path, &st);
    const char *s = st == 404 ? "absent" : json_string_value(json_object_get(j, "state"));
    snprintf(buf, cap, "%s", s ? s : "");
    json_decref(j);
    return buf;
}

/* Waits up to 10 s for name to be in state want; fails the test otherwise. */
static inline void srv_wait_state(srv_fixture *f, const char *name, const char *want)
{
    char s[32] = "";
    for (int i = 0; i < 500 && strcmp(srv_model_state(f, name, s, sizeof s), want); i++)
        srv_sleep_ms(20);
    if (strcmp(s, want))
        fail_msg("%s: %s, not %s", name, s, want);
}

/* A small llama base model (base.gguf) and LoRA files for it in f's
 * folder: a1..a<n>.gguf of ranks 4, 8, 16, 8 (seeds 1..n), odd.gguf (an
 * adapter of a wider model: it fits no base here) and, with inf, inf.gguf
 * (alpha infinite). base is the base's shape. */
static const colo_mkmodel_config srv_lora_base = {.n_layer = 2, .n_embd = 64, .n_head = 4, .n_kv_head = 2,
                                                  .n_ff = 128, .n_vocab = 512, .n_ctx = 512, .type = COLO_F16,
                                                  .seed = 7, .rope_base = 10000.0f};

static inline void srv_lora_files(srv_fixture *f, int n, bool inf)
{
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/base.gguf", f->dir);
    assert_int_equal(colo_mkmodel_write(path, &srv_lora_base, err, sizeof err), COLO_OK);
    for (int i = 1; i <= n; i++) {
        colo_mkmodel_lora l = {.rank = i == 3 ? 16 : 4 * (1 + (i == 2 || i == 4)), .type = COLO_F32,
                               .seed = (uint64_t)i};
        snprintf(path, sizeof path, "%s/a%d.gguf", f->dir, i);
        assert_int_equal(colo_mkmodel_write_lora(path, &srv_lora_base, &l, err, sizeof err), COLO_OK);
    }
    colo_mkmodel_config wide = srv_lora_base;
    wide.n_embd = 128, wide.n_ff = 256;
    colo_mkmodel_lora l = {.rank = 4, .type = COLO_F32, .seed = 9};
    snprintf(path, sizeof path, "%s/odd.gguf", f->dir);
    assert_int_equal(colo_mkmodel_write_lora(path, &wide, &l, err, sizeof err), COLO_OK);
    if (inf) {
        l.alpha = INFINITY;
        snprintf(path, sizeof path, "%s/inf.gguf", f->dir);
        assert_int_equal(colo_mkmodel_write_lora(path, &srv_lora_base, &l, err, sizeof err), COLO_OK);
    }
}

#endif
