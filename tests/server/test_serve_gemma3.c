/* Gemma 3 270M next to SmolLM2 and MiniLM in one colo-server: its greedy
 * completions through /infer equal llama.cpp's on the same file
 * (tests/data/llama/gemma3_greedy.json) up to the first near-tie (12
 * tokens of each prompt), prompt
 * tokens included (SentencePiece, BOS); chat works with the config's
 * chat_template: gemma (the base model's file has no template) and renders
 * the same prompt tokens as the reference's turn-format prompts; the other
 * two models answer alongside. Skipped when the weights are not cached
 * (scripts/fetch-models.sh). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>

#include "models/format/model_cache.h"
#include "server_fixture.h"

#define NEAR_TIE 1.0

static json_t *post(srv_fixture *f, const char *path, json_t *body)
{
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    srv_resp r;
    assert_true(srv_http(f, "POST", path, s, &r));
    if (r.status != 200)
        fail_msg("POST %s %s -> %d %s", path, s, r.status, r.body);
    free(s);
    json_t *j = srv_json(&r);
    srv_resp_free(&r);
    assert_non_null(j);
    return j;
}

static void test_gemma3_next_to_smollm2_and_minilm(void **state)
{
    (void)state;
    char gemma[1024], smol[1024], st[1024];
    if (!colo_model_cache_path("gemma-3-270m-q4_k_m.gguf", gemma, sizeof gemma) ||
        !colo_model_cache_path("SmolLM2-135M-Instruct.Q4_1.gguf", smol, sizeof smol) ||
        !colo_model_cache_path("all-minilm-l6-v2/model.safetensors", st, sizeof st)) {
        fprintf(stderr, "model weights not cached (scripts/fetch-models.sh)\n");
        skip();
    }
    *strrchr(st, '/') = 0;
    json_t *ref = json_load_file(COLO_SOURCE_DIR "/tests/data/llama/gemma3_greedy.json", 0, NULL);
    assert_non_null(ref);
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2 }\n"
             "models:\n"
             "  - { name: gemma3, kind: llama, path: \"%s\", memory_fraction: 0.1, max_seq_len: 1024,\n"
             "      chat_template: gemma, batching: { max_batch_size: 4 } }\n"
             "  - { name: smollm2, kind: llama, path: \"%s\", memory_fraction: 0.05, max_seq_len: 512 }\n"
             "  - { name: minilm, kind: bert, path: \"%s\", memory_fraction: 0.05 }\n",
             gemma, smol, st);
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    if (!srv_start(&f, yaml)) {
        char *log = srv_log(&f);
        fail_msg("colo-server did not start:\n%s", log);
    }
    json_t *cases = json_object_get(ref, "cases"), *c;
    size_t ci;
    int compared = 0, turn_prompts = 0;
    json_array_foreach(cases, ci, c) {
        const char *prompt = json_string_value(json_object_get(c, "prompt"));
        json_t *pids = json_object_get(c, "prompt_ids"), *want = json_object_get(c, "greedy_ids"),
               *margins = json_object_get(c, "top1_margins");
        if (json_array_size(pids) > 512)
            continue; /* test_gemma3 runs the long one */
        bool turn = strncmp(prompt, "<start_of_turn>", 15) == 0;
        if (turn) {
            /* The same conversation as chat: the template renders the reference's prompt. */
            const char *u = prompt + strlen("<start_of_turn>user\n");
            char user[256];
            snprintf(user, sizeof user, "%.*s", (int)(strstr(u, "<end_of_turn>") - u), u);
            json_t *j = post(&f, "/v1/chat/completions",
                             json_pack("{s:s, s:[{s:s, s:s}], s:i, s:f}", "model", "gemma3", "messages", "role",
                                       "user", "content", user, "max_tokens", 8, "temperature", 0.0));
            assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens")),
                             json_array_size(pids));
            json_decref(j);
            turn_prompts++;
            continue;
        }
        /* 12 tokens a prompt: enough to compare, short enough for the sanitizer build */
        int n = (int)json_array_size(want) < 12 ? (int)json_array_size(want) : 12;
        json_t *j = post(&f, "/v1/models/gemma3/infer",
                         json_pack("{s:s, s:i, s:f}", "prompt", prompt, "max_tokens", n, "temperature", 0.0));
        json_t *got = json_object_get(j, "tokens");
        assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens")),
                         json_array_size(pids));
        for (int k = 0; k < n && k < (int)json_array_size(got); k++) {
            json_int_t g = json_integer_value(json_array_get(got, k)), w = json_integer_value(json_array_get(want, k));
            if (g != w) {
                if (json_real_value(json_array_get(margins, k)) < NEAR_TIE)
                    break;
                fail_msg("case %zu token %d: %lld, llama.cpp %lld", ci, k, (long long)g, (long long)w);
            }
            compared++;
        }
        json_decref(j);
    }
    printf("%d greedy tokens equal to llama.cpp's through colo-server; %d chat prompts rendered alike\n", compared,
           turn_prompts);
    assert_true(compared >= 60);
    assert_int_equal(turn_prompts, 2);

    /* The two others answer alongside. */
    json_t *j = post(&f, "/v1/chat/completions",
                     json_pack("{s:s, s:[{s:s, s:s}], s:i}", "model", "smollm2", "messages", "role", "user",
                               "content", "Hi", "max_tokens", 4));
    json_decref(j);
    j = post(&f, "/v1/embeddings", json_pack("{s:s, s:s}", "model", "minilm", "input", "hello world"));
    assert_int_equal(json_array_size(json_object_get(json_array_get(json_object_get(j, "data"), 0), "embedding")), 384);
    json_decref(j);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
    json_decref(ref);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_gemma3_next_to_smollm2_and_minilm)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
