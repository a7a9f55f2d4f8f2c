/* One colo-server with a model of every architecture (synthetic files from
 * colo-mkmodel): each loads, completes, chats (its chat template applied)
 * and streams, side by side in one process, under the fair policy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "server_fixture.h"

static const char *const archs[] = {"llama", "qwen2", "qwen3", "phi3", "gemma3"};
#define N_ARCH 5

static void test_every_family_serves(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    /* (under the fair policy, each with its own share) */
    char yaml[4096] = "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, cpu_memory_bytes: 512MiB }\n"
                      "scheduler: { policy: fair }\nmodels:\n";
    for (int a = 0; a < N_ARCH; a++) {
        char path[512], err[256];
        snprintf(path, sizeof path, "%s/%s.gguf", f.dir, archs[a]);
        colo_mkmodel_config c = {.arch = (colo_llama_arch)a, .n_layer = 2, .n_embd = 64, .n_head = 4,
                                 .n_kv_head = 2, .n_ff = 128, .n_vocab = 512, .n_ctx = 256, .type = COLO_F16,
                                 .seed = 11, .head_dim = a == COLO_ARCH_QWEN3 || a == COLO_ARCH_GEMMA3 ? 32 : 0,
                                 .n_swa = 8, .untied = a == COLO_ARCH_PHI3};
        if (colo_mkmodel_write(path, &c, err, sizeof err) != COLO_OK)
            fail_msg("mkmodel %s: %s", archs[a], err);
        size_t len = strlen(yaml);
        snprintf(yaml + len, sizeof yaml - len,
                 "  - { name: %s, kind: llama, path: %s.gguf, memory_fraction: 0.1, share: %d }\n", archs[a], archs[a],
                 a + 1);
    }
    if (!srv_start(&f, yaml)) {
        char *log = srv_log(&f);
        fail_msg("colo-server did not start:\n%s", log);
    }
    for (int a = 0; a < N_ARCH; a++) {
        char body[512];
        srv_resp r;
        snprintf(body, sizeof body,
                 "{\"model\":\"%s\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                 "{\"role\":\"user\",\"content\":\"Hello there\"}],\"max_tokens\":6,\"temperature\":0}",
                 archs[a]);
        assert_true(srv_http(&f, "POST", "/v1/chat/completions", body, &r));
        if (r.status != 200)
            fail_msg("%s chat: %d %s", archs[a], r.status, r.body);
        json_t *j = srv_json(&r);
        assert_non_null(j);
        json_t *usage = json_object_get(j, "usage");
        assert_int_equal(json_integer_value(json_object_get(usage, "completion_tokens")), 6);
        assert_true(json_integer_value(json_object_get(usage, "prompt_tokens")) > 10);
        assert_true(json_is_string(json_object_get(
            json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message"), "content")));
        json_decref(j);
        srv_resp_free(&r);

        /* Completions, greedy twice: the same text both times. */
        char *texts[2];
        for (int k = 0; k < 2; k++) {
            snprintf(body, sizeof body, "{\"model\":\"%s\",\"prompt\":\"the cat\",\"max_tokens\":5,\"temperature\":0}",
                     archs[a]);
            assert_true(srv_http(&f, "POST", "/v1/completions", body, &r));
            if (r.status != 200)
                fail_msg("%s completion: %d %s", archs[a], r.status, r.body);
            j = srv_json(&r);
            assert_non_null(j);
            texts[k] = strdup(json_string_value(
                json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text")));
            json_decref(j);
            srv_resp_free(&r);
        }
        assert_string_equal(texts[0], texts[1]);
        free(texts[0]), free(texts[1]);

        /* Streaming ends with [DONE]. */
        snprintf(body, sizeof body, "{\"model\":\"%s\",\"prompt\":\"the\",\"max_tokens\":4,\"stream\":true}", archs[a]);
        assert_true(srv_http(&f, "POST", "/v1/completions", body, &r));
        assert_int_equal(r.status, 200);
        assert_non_null(strstr(r.body, "data: [DONE]"));
        srv_resp_free(&r);
    }
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_every_family_serves)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
