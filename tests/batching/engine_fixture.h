/* tests/batching/engine_fixture.h: the synthetic llama file and the CPU
 * device that the generation-engine tests share (one per test program),
 * and the rig of arena, stream, model and engine they run on. */
#ifndef COLO_TESTS_ENGINE_FIXTURE_H
#define COLO_TESTS_ENGINE_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <string.h>

#include "batching/engine.h"
#include "models/arch/llama.h"
#include "tools/mkmodel.h"
#include "runtime/backend.h"

static char model_path[300];
static colo_device *dev;

/* Writes a small llama file (2 layers, 64 wide, 4 heads on 2 KV heads, FFN
 * 128, vocabulary 320, context 256, F32 weights from seed) named after the
 * test under $TMPDIR, and opens a CPU device of 2 threads. 0, or -1 as
 * cmocka's group setup expects. */
static int engine_fixture_open_width(const char *test, uint64_t seed, int n_embd);
static inline int engine_fixture_open(const char *test, uint64_t seed)
{
    return engine_fixture_open_width(test, seed, 64);
}

/* As engine_fixture_open, n_embd wide (head size n_embd / 4). */
static int engine_fixture_open_width(const char *test, uint64_t seed, int n_embd)
{
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(model_path, sizeof model_path, "%s/colo-test-%s-%d.gguf", tmp, test, (int)getpid());
    colo_mkmodel_config c = {.n_layer = 2, .n_embd = n_embd, .n_head = 4, .n_kv_head = 2, .n_ff = 128,
                             .n_vocab = 320, .n_ctx = 256, .type = COLO_F32, .seed = seed};
    char err[256];
    if (colo_mkmodel_write(model_path, &c, err, sizeof err) != COLO_OK) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    colo_device_config dc = {.want = "cpu", .cpu_threads = 2};
    dev = colo_device_open(&dc, err, sizeof err);
    if (!dev)
        fprintf(stderr, "%s\n", err);
    return dev ? 0 : -1;
}

/* cmocka's group teardown: closes the device and removes the file. */
static int engine_fixture_close(void **state)
{
    (void)state;
    colo_device_close(dev);
    unlink(model_path);
    return 0;
}

/* One sequence's outcome, as engine_on_done records it. */
typedef struct engine_result {
    int32_t toks[256];
    float lps[256]; /* each token's log-probability, when asked for */
    int n;
    const char *finish;
    colo_status status;
    int n_preempted;
    int done;
} engine_result;

/* colo_engine_callbacks.on_done with an engine_result as ud. */
static inline void engine_on_done(void *ud, const colo_engine_outcome *o)
{
    engine_result *r = ud;
    r->n = o->n_tokens < 256 ? o->n_tokens : 256;
    memcpy(r->toks, o->tokens, (size_t)r->n * 4);
    if (o->logprobs)
        memcpy(r->lps, o->logprobs, (size_t)r->n * 4);
    r->finish = o->finish_reason;
    r->status = o->status;
    r->n_preempted = o->n_preempted;
    r->done++;
}

/* Clears out[0..n) and points cbs[i] at engine_on_done with out[i]. */
static inline void engine_results_reset(engine_result *out, colo_engine_callbacks *cbs, int n)
{
    for (int i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        cbs[i] = (colo_engine_callbacks){NULL, engine_on_done, &out[i]};
    }
}

/* A model and its engine, on an arena and a stream of their own. */
typedef struct engine_rig {
    colo_arena *arena;
    colo_stream *s;
    colo_llama *m;
    colo_engine *e;
} engine_rig;

/* With r->arena made by the caller: a stream on d, the model at path in
 * the arena and an engine of gc on them; fails the test otherwise. */
static inline void engine_rig_start_on(engine_rig *r, colo_device *d, const char *path,
                                       const colo_engine_config *gc)
{
    char err[256];
    if (!r->arena)
        fail_msg("arena: none");
    r->s = colo_stream_create(d, NULL, err, sizeof err);
    if (!r->s)
        fail_msg("stream: %s", err);
    r->m = colo_llama_load(path, r->arena, r->s, err, sizeof err);
    if (!r->m)
        fail_msg("load: %s", err);
    r->e = colo_engine_create(r->m, r->s, gc, err, sizeof err);
    if (!r->e)
        fail_msg("engine: %s", err);
}

/* The same on the fixture's device and file. */
static inline void engine_rig_start(engine_rig *r, const colo_engine_config *gc)
{
    engine_rig_start_on(r, dev, model_path, gc);
}

/* A fixed arena of bytes on d for the rig. */
static inline void engine_rig_arena(engine_rig *r, colo_device *d, const char *name, size_t bytes)
{
    char err[256];
    r->arena = colo_arena_create_bytes(d, name, bytes, err, sizeof err);
    if (!r->arena)
        fail_msg("arena: %s", err);
}

/* Frees the engine and the model (everything must have gone back to the
 * arena), the stream and the arena. */
static inline void engine_rig_close(engine_rig *r)
{
    colo_engine_free(r->e);
    colo_llama_free(r->m);
    assert_int_equal(colo_arena_used(r->arena), 0);
    colo_stream_destroy(r->s);
    colo_arena_destroy(r->arena);
}

/* Steps e until nothing runs or waits (fails after 20000 steps). */
static inline void engine_run_all(colo_engine *e)
{
    int n;
    for (int guard = 0; guard < 20000; guard++) {
        assert_int_equal(colo_engine_step(e, NULL, &n), COLO_OK);
        if (!n && !colo_engine_n_running(e) && !colo_engine_n_waiting(e))
            return;
    }
    fail_msg("engine did not finish");
}

/* Both finished once, OK, with the same tokens. */
static inline void engine_assert_same(const engine_result *a, const engine_result *b)
{
    assert_int_equal(a->done, 1);
    assert_int_equal(b->done, 1);
    assert_int_equal(a->status, COLO_OK);
    assert_int_equal(b->status, COLO_OK);
    assert_int_equal(a->n, b->n);
    assert_memory_equal(a->toks, b->toks, (size_t)a->n * 4);
}

#endif
