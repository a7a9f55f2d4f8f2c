/* tests/batching/engine_fixture.h: the synthetic llama file and the CPU
 * device that the generation-engine tests share (one per test program). */
#ifndef COLO_TESTS_ENGINE_FIXTURE_H
#define COLO_TESTS_ENGINE_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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

#endif
