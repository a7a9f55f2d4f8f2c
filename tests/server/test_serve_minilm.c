/* MiniLM next to SmolLM2 in one colo-server: embeddings (against the
 * sentence-transformers reference in tests/data/bert) and greedy completions
 * (against the reference continuations in tests/data/llama) requested at the
 * same time from two threads. Skipped when the real weights are not cached
 * (scripts/fetch-models.sh). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <pthread.h>

#include "models/format/model_cache.h"
#include "server_fixture.h"

#define ROUNDS 3

static srv_fixture fx;
static json_t *emb_ref, *gen_ref;

typedef struct worker {
    int ok, failed;
    char why[512];
} worker;

static double cosine(json_t *a, json_t *b)
{
    double ab = 0, aa = 0, bb = 0;
    size_t n = json_array_size(a);
    if (n == 0 || n != json_array_size(b))
        return -2;
    for (size_t i = 0; i < n; i++) {
        double x = json_number_value(json_array_get(a, i)), y = json_number_value(json_array_get(b, i));
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    return ab / sqrt(aa * bb);
}

static void fail_w(worker *w, const char *fmt, const char *a, double x)
{
    if (!w->failed++)
        snprintf(w->why, sizeof w->why, fmt, a, x);
}

/* Every reference sentence, in batches of 1 and of all, through both endpoints. */
static void *embed_worker(void *arg)
{
    worker *w = arg;
    json_t *cases = json_object_get(emb_ref, "cases");
    size_t n = json_array_size(cases);
    for (int round = 0; round < ROUNDS; round++) {
        bool whole = round % 2 == 1;
        for (size_t i = 0; i < (whole ? 1 : n); i++) {
            json_t *inputs = json_array();
            for (size_t k = whole ? 0 : i; k < (whole ? n : i + 1); k++)
                json_array_append(inputs, json_object_get(json_array_get(cases, k), "text"));
            /* (a reference text runs past the window: OpenAI's route cuts it when asked) */
            json_t *req = round == 2 ? json_pack("{s:o}", "inputs", inputs)
                                     : json_pack("{s:s,s:o,s:b}", "model", "minilm", "input", inputs, "truncate", 1);
            char *body = json_dumps(req, JSON_COMPACT);
            json_decref(req);
            srv_resp r;
            bool got = srv_http(&fx, "POST", round == 2 ? "/v1/models/minilm/infer" : "/v1/embeddings", body, &r);
            free(body);
            if (!got || r.status != 200) {
                fail_w(w, "embeddings: status %s%.0f", "", got ? r.status : -1);
                if (got)
                    srv_resp_free(&r);
                continue;
            }
            json_t *j = json_loads(r.body, 0, NULL);
            srv_resp_free(&r);
            json_t *data = round == 2 ? json_object_get(j, "embeddings") : json_object_get(j, "data");
            for (size_t k = 0; k < json_array_size(data); k++) {
                json_t *got_e = round == 2 ? json_array_get(data, k)
                                           : json_object_get(json_array_get(data, k), "embedding");
                json_t *c = json_array_get(cases, (whole ? 0 : i) + k);
                double cs = cosine(got_e, json_object_get(c, "embedding"));
                if (cs < 0.9999)
                    fail_w(w, "embedding of '%s': cosine %.6f", json_string_value(json_object_get(c, "text")), cs);
                else
                    w->ok++;
            }
            if (json_array_size(data) != (whole ? n : 1))
                fail_w(w, "embeddings: %s%.0f results", "", (double)json_array_size(data));
            json_decref(j);
        }
    }
    return NULL;
}

/* Greedy completions of the raw prompts: the first tokens (where the
 * reference's top-1 margin is wide) must equal the reference's. */
static void *gen_worker(void *arg)
{
    worker *w = arg;
    json_t *cases = json_object_get(gen_ref, "cases");
    for (int round = 0; round < ROUNDS; round++)
        for (size_t i = 0; i < json_array_size(cases); i++) {
            json_t *c = json_array_get(cases, i);
            const char *prompt = json_string_value(json_object_get(c, "prompt"));
            if (!prompt || strstr(prompt, "<|im_start|>"))
                continue;
            json_t *req = json_pack("{s:s,s:i,s:f,s:b}", "prompt", prompt, "max_tokens", 8, "temperature", 0.0,
                                    "stream", round == 1);
            char *body = json_dumps(req, JSON_COMPACT);
            json_decref(req);
            srv_resp r;
            bool got = srv_http(&fx, "POST", "/v1/models/smollm2/infer", body, &r);
            free(body);
            if (!got || r.status != 200) {
                fail_w(w, "generation: status %s%.0f", "", got ? r.status : -1);
                if (got)
                    srv_resp_free(&r);
                continue;
            }
            /* Streams end with "event: done" carrying the whole answer. */
            const char *js = r.body;
            const char *ev = strstr(r.body, "event: done\ndata: ");
            if (round == 1) {
                if (!ev) {
                    fail_w(w, "generation stream without a done event%s%.0f", "", 0);
                    srv_resp_free(&r);
                    continue;
                }
                js = ev + strlen("event: done\ndata: ");
            }
            json_t *j = json_loadb(js, strcspn(js, "\n"), 0, NULL);
            srv_resp_free(&r);
            json_t *toks = json_object_get(j, "tokens"), *ref = json_object_get(c, "greedy_ids"),
                   *margins = json_object_get(c, "top1_margins");
            for (size_t k = 0; k < json_array_size(toks) && k < json_array_size(ref); k++) {
                if (json_number_value(json_array_get(margins, k)) < 0.5)
                    break; /* a near-tie: later tokens may differ legitimately */
                if (json_integer_value(json_array_get(toks, k)) != json_integer_value(json_array_get(ref, k))) {
                    fail_w(w, "greedy continuation of '%s' differs at token %.0f", prompt, (double)k);
                    break;
                }
            }
            if (json_array_size(toks) == 0)
                fail_w(w, "no tokens for '%s'%.0f", prompt, 0);
            else
                w->ok++;
            json_decref(j);
        }
    return NULL;
}

static void test_minilm_next_to_smollm2(void **state)
{
    (void)state;
    char gguf[1024], st[1024], dir[1024];
    if (!colo_model_cache_path("SmolLM2-135M-Instruct.Q4_1.gguf", gguf, sizeof gguf) ||
        !colo_model_cache_path("all-minilm-l6-v2/model.safetensors", st, sizeof st)) {
        fprintf(stderr, "model weights not cached (scripts/fetch-models.sh)\n");
        skip();
    }
    snprintf(dir, sizeof dir, "%s", st);
    *strrchr(dir, '/') = 0;
    assert_non_null(emb_ref = json_load_file(COLO_SOURCE_DIR "/tests/data/bert/minilm_embeddings.json", 0, NULL));
    assert_non_null(gen_ref = json_load_file(COLO_SOURCE_DIR "/tests/data/llama/smollm2_greedy.json", 0, NULL));
    assert_true(json_array_size(json_object_get(emb_ref, "cases")) >= 20);
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "server: { listen: \"127.0.0.1:0\", device: cpu }\n"
             "scheduler: { policy: spatial }\n"
             "models:\n"
             "  - name: smollm2\n    kind: llama\n    path: \"%s\"\n    memory_fraction: 0.05\n"
             "    max_seq_len: 512\n    batching: { max_batch_size: 8 }\n"
             "  - name: minilm\n    kind: bert\n    path: \"%s\"\n    memory_fraction: 0.05\n"
             "    batching: { max_batch_size: 32, max_queue_delay_us: 1000 }\n",
             gguf, dir);
    assert_true(srv_tmpdir(&fx));
    if (!srv_start(&fx, yaml)) {
        char *log = srv_log(&fx);
        fprintf(stderr, "colo-server did not start:\n%s\n", log);
        free(log);
        fail();
    }
    worker we = {0}, wg = {0};
    pthread_t te, tg;
    assert_int_equal(pthread_create(&te, NULL, embed_worker, &we), 0);
    assert_int_equal(pthread_create(&tg, NULL, gen_worker, &wg), 0);
    pthread_join(te, NULL);
    pthread_join(tg, NULL);

    srv_resp r;
    /* OpenAI's route refuses an input past the window unless asked to cut
     * it; token ids are an input too */
    char *long_body = malloc(8192);
    assert_non_null(long_body);
    int o = sprintf(long_body, "{\"model\":\"minilm\",\"input\":\"");
    for (int i = 0; i < 600; i++)
        o += sprintf(long_body + o, "word ");
    sprintf(long_body + o, "\"}");
    assert_true(srv_http(&fx, "POST", "/v1/embeddings", long_body, &r));
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "\"code\":\"context_length_exceeded\""));
    assert_non_null(strstr(r.body, "\"param\":\"input[0]\""));
    srv_resp_free(&r);
    free(long_body);
    assert_true(srv_http(&fx, "POST", "/v1/embeddings", "{\"model\":\"minilm\",\"input\":[[7592,2088],[7592]]}", &r));
    assert_int_equal(r.status, 200);
    json_t *tj = json_loads(r.body, 0, NULL);
    assert_int_equal(json_array_size(json_object_get(tj, "data")), 2);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(tj, "usage"), "prompt_tokens")), 4 + 3);
    json_decref(tj);
    srv_resp_free(&r);
    assert_true(srv_http(&fx, "GET", "/v1/models/minilm", NULL, &r));
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"kind\":\"bert\""));
    assert_non_null(strstr(r.body, "\"dim\":384"));
    srv_resp_free(&r);
    int code = srv_stop(&fx);
    srv_cleanup(&fx);
    json_decref(emb_ref);
    json_decref(gen_ref);
    if (we.failed)
        fprintf(stderr, "embeddings: %d failures, first: %s\n", we.failed, we.why);
    if (wg.failed)
        fprintf(stderr, "generation: %d failures, first: %s\n", wg.failed, wg.why);
    assert_int_equal(we.failed, 0);
    assert_int_equal(wg.failed, 0);
    assert_true(we.ok >= 20 * ROUNDS);
    assert_true(wg.ok >= 5);
    assert_int_equal(code, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_minilm_next_to_smollm2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
