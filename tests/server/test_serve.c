/* colo-server end to end: the real binary with two synthetic models. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>

#include "server_fixture.h"

static const char *two_models =
    "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, cpu_memory_bytes: 512MiB }\n"
    "scheduler: { policy: priority }\n"
    "models:\n"
    "  - { name: a, kind: llama, path: m.gguf, memory_fraction: 0.2, priority: high }\n"
    "  - { name: b, kind: llama, path: m.gguf, memory_fraction: 0.2, priority: low }\n";

static int setup(void **state)
{
    static srv_fixture f;
    if (!srv_tmpdir(&f) || !srv_mkmodel(&f, "m.gguf", 2, 64, 512, 256))
        return -1;
    if (!srv_start(&f, two_models)) {
        char *log = srv_log(&f);
        fprintf(stderr, "colo-server did not start:\n%s\n", log);
        free(log);
        return -1;
    }
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    srv_fixture *f = *state;
    int code = srv_stop(f);
    srv_cleanup(f);
    return code == 0 ? 0 : -1;
}

/* Both models answer, and the same seed gives the same tokens on each. */
static void test_two_models_generate(void **state)
{
    srv_fixture *f = *state;
    json_t *tok[2];
    const char *paths[2] = {"/v1/models/a/infer", "/v1/models/b/infer"};
    for (int i = 0; i < 2; i++) {
        srv_resp r;
        assert_true(srv_http(f, "POST", paths[i], "{\"prompt\":\"hello\",\"max_tokens\":6,\"seed\":3}", &r));
        assert_int_equal(r.status, 200);
        json_t *j = json_loads(r.body, 0, NULL);
        assert_non_null(j);
        assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 6);
        tok[i] = json_incref(json_object_get(j, "tokens"));
        json_decref(j);
        srv_resp_free(&r);
    }
    assert_true(json_equal(tok[0], tok[1]));
    json_decref(tok[0]);
    json_decref(tok[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_models_generate),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
