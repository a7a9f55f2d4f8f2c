/* colo-generate's arena without --memory-bytes (batching/generate_main.c):
 * 2 GiB as before for a model that fits in it, and otherwise enough for the
 * weights, a step's activations and the KV cache of the whole batch at once,
 * so that models past 2 GiB (Phi-3.5-mini, Llama-3.1-8B at Q4_K_M) run
 * without the flag. Checked on a synthetic model with a small floor: in an
 * arena of the computed size the model loads, the engine's KV cache holds
 * every sequence of the batch at full length, and the run succeeds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define main colo_generate_main
#include "batching/generate_main.c"
#undef main

#include "models/mkmodel.h"

static char path[512];
static colo_device *dev;

static int setup(void **state)
{
    (void)state;
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(path, sizeof path, "%s/colo-test-generate-main-%d.gguf", tmp, (int)getpid());
    int vocab = colo_mkmodel_min_vocab() > 512 ? colo_mkmodel_min_vocab() : 512;
    colo_mkmodel_config c = {.n_layer = 2, .n_embd = 256, .n_head = 4, .n_kv_head = 4, .n_ff = 512,
                             .n_vocab = vocab, .n_ctx = 1024, .type = COLO_F32, .seed = 7};
    char err[256];
    if (colo_mkmodel_write(path, &c, err, sizeof err) != COLO_OK) {
        fprintf(stderr, "mkmodel: %s\n", err);
        return -1;
    }
    colo_device_config dc = {.want = "cpu", .cpu_threads = 2};
    dev = colo_device_open(&dc, err, sizeof err);
    return dev ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    colo_device_close(dev);
    unlink(path);
    return 0;
}

static options opts(int batch, int max_tokens)
{
    return (options){.model = path, .prompt = "Once upon a time, in a small village by the sea", .device = "cpu",
                     .max_tokens = max_tokens, .batch = batch, .temperature = 0, .top_p = 1, .seed = 1,
                     .kv_type = COLO_F16};
}

/* A model under the floor keeps the floor (colo-generate's 2 GiB, as
 * before); the device's memory caps it. */
static void test_floor_and_cap(void **state)
{
    (void)state;
    options o = opts(8, 64);
    size_t need = default_arena_bytes(&o, 0, SIZE_MAX);
    colo_llama_memory mem;
    char err[256];
    assert_int_equal(colo_llama_memory_need(path, COLO_F16, &mem, err, sizeof err), COLO_OK);
    assert_true(need > mem.weight_bytes);
    assert_int_equal(default_arena_bytes(&o, DEFAULT_ARENA_BYTES, SIZE_MAX), DEFAULT_ARENA_BYTES);
    assert_int_equal(default_arena_bytes(&o, need / 2, SIZE_MAX), need);
    assert_int_equal(default_arena_bytes(&o, DEFAULT_ARENA_BYTES, 1u << 20), 1u << 20);
    /* more sequences, more tokens: more memory */
    options big = opts(32, 256);
    assert_true(default_arena_bytes(&big, 0, SIZE_MAX) > need);
}

/* In an arena of exactly the computed size the whole batch fits at once. */
static void test_batch_fits(void **state)
{
    (void)state;
    const int batches[] = {1, 8, 32};
    for (int i = 0; i < 3; i++) {
        options o = opts(batches[i], 100);
        size_t bytes = default_arena_bytes(&o, 0, SIZE_MAX);
        char err[512] = "";
        colo_arena *arena = colo_arena_create_bytes(dev, "generate", bytes, err, sizeof err);
        colo_stream *s = colo_stream_create(dev, NULL, err, sizeof err);
        assert_non_null(arena);
        assert_non_null(s);
        colo_llama *m = colo_llama_load(path, arena, s, err, sizeof err);
        if (!m)
            fail_msg("batch %d, %zu bytes: %s", o.batch, bytes, err);
        int32_t *ids = NULL;
        int n_ids = 0;
        assert_int_equal(colo_tokenizer_encode(colo_llama_tokenizer(m), o.prompt, strlen(o.prompt), true, false, &ids,
                                               &n_ids),
                         COLO_OK);
        colo_engine_config gc = {.max_running = o.batch, .max_step_tokens = 512 > o.batch ? 512 : o.batch,
                              .kv_type = o.kv_type};
        colo_engine *e = colo_engine_create(m, s, &gc, err, sizeof err);
        if (!e)
            fail_msg("batch %d, %zu bytes: %s", o.batch, bytes, err);
        int per_seq = (n_ids + o.max_tokens + 15) / 16;
        assert_true(colo_engine_kv_blocks(e) >= o.batch * per_seq);
        colo_engine_free(e);
        colo_llama_free(m);
        free(ids);
        /* and colo-generate's own run in it succeeds */
        assert_int_equal(generate(&o, arena, s, "cpu", err, sizeof err), 0);
        colo_stream_destroy(s);
        colo_arena_destroy(arena);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_floor_and_cap),
        cmocka_unit_test(test_batch_fits),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
