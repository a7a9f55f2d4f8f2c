/* Every op on the CUDA backend against a float64 reference. Skipped when no
 * GPU is usable; ops the CUDA table lacks fail here, visibly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/cuda_skip.h"

#include "tests/kernels/parity_cases.h"

static ctx_t ctx;

static int setup(void **state)
{
    if (!colo_cuda_available())
        return 0;
    char err[256];
    colo_device_config cfg = {.want = "cuda"};
    rng_seed_from_env();
    ctx.dev = colo_device_open(&cfg, err, sizeof err);
    if (!ctx.dev)
        return -1;
    ctx.s = colo_stream_create(ctx.dev, NULL, err, sizeof err);
    *state = &ctx;
    return ctx.s ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    colo_stream_destroy(ctx.s);
    colo_device_close(ctx.dev);
    return 0;
}

int main(void)
{
    COLO_SKIP_WITHOUT_CUDA();
    const struct CMUnitTest tests[] = {PARITY_TESTS};
    return cmocka_run_group_tests(tests, setup, teardown);
}
