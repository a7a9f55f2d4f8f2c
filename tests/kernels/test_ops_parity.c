/* Every op on the CPU backend against a float64 reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/kernels/parity_cases.h"

static ctx_t ctx;
static colo_device *exact_dev;

static int setup(void **state)
{
    char err[256];
    colo_device_config cfg = {.want = "cpu", .cpu_threads = 2};
    rng_seed_from_env();
    ctx.dev = colo_device_open(&cfg, err, sizeof err);
    if (!ctx.dev)
        return -1;
    ctx.s = colo_stream_create(ctx.dev, NULL, err, sizeof err);
    /* The same ops without 8-bit activations (CPU memory is shared). */
    colo_device_config ecfg = {.want = "cpu", .cpu_threads = 2, .exact_activations = true};
    exact_dev = colo_device_open(&ecfg, err, sizeof err);
    ctx.exact_s = exact_dev ? colo_stream_create(exact_dev, NULL, err, sizeof err) : NULL;
    *state = &ctx;
    return ctx.s && ctx.exact_s ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    colo_stream_destroy(ctx.exact_s);
    colo_device_close(exact_dev);
    colo_stream_destroy(ctx.s);
    colo_device_close(ctx.dev);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {PARITY_TESTS};
    return cmocka_run_group_tests(tests, setup, teardown);
}
