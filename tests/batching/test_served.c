/* A served model without the HTTP server: submission tokenizes first and
 * refuses what can never run with the token counts, a default max_tokens is
 * shortened to what the context leaves, long inputs go through the
 * preparing thread, the outcome lands in the request record, and a stream
 * whose consumer stops reading is canceled. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batching/kind.h"
#include "batching/served.h"
#include "tools/mkmodel.h"

#define CTX 128

static char model_path[300];
static colo_device *dev;
static colo_served *m;

/* Waits for on_done. */
typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    int tokens_seen;
    int refuse_after; /* on_token returns false from this token on; 0 = never */
} waiter;

static void on_done(colo_request *r)
{
    waiter *w = r->cb.ud;
    pthread_mutex_lock(&w->mu);
    w->done++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static bool on_token(colo_request *r, int32_t token, const char *piece, size_t len)
{
    (void)token;
    (void)piece;
    (void)len;
    waiter *w = r->cb.ud;
    w->tokens_seen++;
    return !w->refuse_after || w->tokens_seen < w->refuse_after;
}

static void wait_done(waiter *w)
{
    pthread_mutex_lock(&w->mu);
    while (!w->done)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

static colo_request *gen_request(waiter *w, const char *prompt, int max_tokens)
{
    memset(w, 0, sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    colo_request *r = colo_request_create();
    assert_non_null(r);
    r->task = COLO_TASK_GENERATE;
    r->in.prompt = colo_pool_strndup(r->pool, prompt, strlen(prompt));
    r->in.prompt_len = strlen(prompt);
    r->params.max_tokens = max_tokens > 0 ? max_tokens : 64;
    r->params.max_tokens_set = max_tokens > 0;
    r->params.temperature = 0;
    r->cb = (colo_req_callbacks){on_token, on_done, w};
    return r;
}

static int setup(void **state)
{
    (void)state;
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(model_path, sizeof model_path, "%s/colo-test-served-%d.gguf", tmp, (int)getpid());
    colo_mkmodel_config c = {.n_layer = 2, .n_embd = 64, .n_head = 4, .n_kv_head = 2, .n_ff = 128,
                             .n_vocab = 320, .n_ctx = CTX, .type = COLO_F32, .seed = 5};
    char err[512];
    if (colo_mkmodel_write(model_path, &c, err, sizeof err) != COLO_OK)
        return -1;
    colo_device_config dc = {.want = "cpu", .cpu_threads = 2};
    if (!(dev = colo_device_open(&dc, err, sizeof err)))
        return -1;
    colo_model_cfg mc = {.name = "t", .kind = "llama", .memory_fraction = 1.0, .kv_block_size = 16,
                         .kv_dtype = COLO_F16,
                         .batching = {.max_batch_size = 4, .max_queue = 8, .queue_timeout_ms = 30000,
                                      .max_batch_prefill_tokens = 64}};
    snprintf(mc.path, sizeof mc.path, "%s", model_path);
    colo_served_env env = {.dev = dev, .budget_bytes = 64u << 20};
    if (!(m = colo_served_load(&mc, &env, err, sizeof err))) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    return colo_served_start(m, err, sizeof err) == COLO_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    colo_served_free(m);
    colo_device_close(dev);
    unlink(model_path);
    return 0;
}

/* The synthetic tokenizer is byte-level: one token per byte, at most. */
static void test_too_long_refused_with_counts(void **state)
{
    (void)state;
    waiter w;
    char prompt[CTX + 32];
    memset(prompt, 'q', sizeof prompt - 1);
    prompt[sizeof prompt - 1] = 0;
    colo_request *r = gen_request(&w, prompt, 4);
    char err[512] = "";
    assert_int_equal(colo_served_submit(m, r, err, sizeof err), COLO_ETOOLONG);
    assert_non_null(strstr(err, "tokens"));
    assert_non_null(strstr(err, "128"));
    assert_int_equal(w.done, 0); /* refused at once: no callback */
    colo_request_free(r);

    /* A short prompt whose explicit max_tokens overflows the context. */
    r = gen_request(&w, "hello there", CTX);
    assert_int_equal(colo_served_submit(m, r, err, sizeof err), COLO_ETOOLONG);
    assert_non_null(strstr(err, "max_tokens"));
    char want[64];
    snprintf(want, sizeof want, "max_tokens is %d", CTX);
    assert_non_null(strstr(err, want));
    colo_request_free(r);

    colo_served_info in;
    colo_served_get_info(m, &in);
    assert_int_equal(in.queue_depth, 0);
}

static void test_default_max_tokens_shortened(void **state)
{
    (void)state;
    waiter w;
    colo_request *r = gen_request(&w, "hello there", 0);
    r->params.max_tokens = 10 * CTX; /* a default, not the client's */
    char err[512];
    assert_int_equal(colo_served_submit(m, r, err, sizeof err), COLO_OK);
    wait_done(&w);
    assert_int_equal(r->out.status, COLO_OK);
    assert_true(r->tok.n > 0);
    assert_int_equal(r->out.n_input_tokens, r->tok.n);
    assert_true(r->params.max_tokens == CTX - r->tok.n);
    assert_true(r->out.n_tokens >= 1 && r->out.n_tokens <= CTX - r->tok.n);
    assert_non_null(r->out.text);
    assert_non_null(r->out.finish_reason);
    colo_request_free(r);
}

static void test_chat_messages_templated_by_kind(void **state)
{
    (void)state;
    waiter w;
    colo_request *r = gen_request(&w, "x", 3);
    r->in.prompt = NULL;
    r->in.prompt_len = 0;
    colo_chat_message *msgs = colo_pool_calloc(r->pool, 1, sizeof *msgs);
    msgs[0] = (colo_chat_message){.role = "user", .content = "hi"};
    r->in.messages = msgs;
    r->in.n_messages = 1;
    char err[512];
    assert_int_equal(colo_served_submit(m, r, err, sizeof err), COLO_OK);
    wait_done(&w);
    assert_int_equal(r->out.status, COLO_OK);
    /* ChatML: <|im_start|> user \n h i <|im_end|> \n <|im_start|> assistant \n — special tokens are single ids */
    assert_true(r->tok.n > 6 && r->tok.n < (int)strlen("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"));
    colo_request_free(r);
}

/* Past COLO_SERVED_INLINE_TOKENIZE_BYTES the preparing thread tokenizes:
 * its refusal arrives through on_done. */
static void test_long_input_prepared_off_thread(void **state)
{
    (void)state;
    waiter w;
    size_t n = COLO_SERVED_INLINE_TOKENIZE_BYTES + 100;
    char *prompt = malloc(n + 1);
    assert_non_null(prompt);
    memset(prompt, 'z', n);
    prompt[n] = 0;
    colo_request *r = gen_request(&w, prompt, 4);
    free(prompt);
    char err[512] = "";
    assert_int_equal(colo_served_submit(m, r, err, sizeof err), COLO_OK);
    wait_done(&w);
    assert_int_equal(r->out.status, COLO_ETOOLONG);
    assert_non_null(strstr(r->out.error, "tokens"));
    colo_request_free(r);
}

static void test_wrong_task_refused(void **state)
{
    (void)state;
    waiter w;
    colo_request *r = gen_request(&w, "x", 1);
    r->task = COLO_TASK_EMBED;
    char err[512];
    assert_int_equal(colo_served_submit(m, r, err, sizeof err), COLO_EINVAL);
    assert_non_null(strstr(err, "generation"));
    colo_request_free(r);
}

/* A consumer that stops reading ends its request. */
static void test_stream_backpressure_cancels(void **state)
{
    (void)state;
    waiter w;
    colo_request *r = gen_request(&w, "tell me", 40);
    r->params.stream = true;
    r->params.stop[0] = NULL;
    w.refuse_after = 3;
    char err[512];
    assert_int_equal(colo_served_submit(m, r, err, sizeof err), COLO_OK);
    wait_done(&w);
    assert_int_equal(r->out.status, COLO_ECANCELED);
    assert_non_null(strstr(r->out.error, "did not read"));
    assert_true(w.tokens_seen >= 3 && w.tokens_seen < 40);
    colo_request_free(r);
}

static void test_kind_registry(void **state)
{
    (void)state;
    assert_non_null(colo_kind_find("llama"));
    assert_non_null(colo_kind_find("bert"));
    assert_null(colo_kind_find("gpt"));
    char names[64];
    colo_kind_names(names, sizeof names);
    assert_string_equal(names, "llama, bert");
    colo_model_cfg mc = {.name = "x", .kind = "gpt", .memory_fraction = 0.5};
    char err[256];
    assert_int_equal(colo_served_check(&mc, 1u << 30, err, sizeof err), COLO_EINVAL);
    assert_non_null(strstr(err, "unknown kind 'gpt' (known: llama, bert)"));
}

/* The chat template is checked with the memory, before loading (and so at
 * --check-config, which names the model): an unknown override fails. */
static void test_chat_template_checked(void **state)
{
    (void)state;
    colo_model_cfg mc = {.name = "t2", .kind = "llama", .memory_fraction = 1.0, .kv_block_size = 16,
                         .kv_dtype = COLO_F16, .batching = {.max_batch_size = 4, .max_batch_prefill_tokens = 64}};
    snprintf(mc.path, sizeof mc.path, "%s", model_path);
    char err[512];
    assert_int_equal(colo_served_check(&mc, 64u << 20, err, sizeof err), COLO_OK);
    snprintf(mc.chat_template, sizeof mc.chat_template, "gemma");
    assert_int_equal(colo_served_check(&mc, 64u << 20, err, sizeof err), COLO_OK);
    snprintf(mc.chat_template, sizeof mc.chat_template, "vicuna");
    assert_int_equal(colo_served_check(&mc, 64u << 20, err, sizeof err), COLO_EINVAL);
    assert_non_null(strstr(err, "'vicuna'"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_too_long_refused_with_counts),
        cmocka_unit_test(test_default_max_tokens_shortened),
        cmocka_unit_test(test_chat_messages_templated_by_kind),
        cmocka_unit_test(test_long_input_prepared_off_thread),
        cmocka_unit_test(test_wrong_task_refused),
        cmocka_unit_test(test_stream_backpressure_cancels),
        cmocka_unit_test(test_kind_registry),
        cmocka_unit_test(test_chat_template_checked),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
