/* The seed of a test's random inputs. A run uses the test's fixed seed, so
 * that it is repeatable; COLO_TEST_SEED=N replays or explores another. The
 * seed in use is printed, so a failure can be replayed.
 *
 *   uint64_t seed = colo_test_seed("test_quant", 1234);
 */
#pragma once

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static inline uint64_t colo_test_seed(const char *who, uint64_t fixed)
{
    const char *e = getenv("COLO_TEST_SEED");
    uint64_t seed = e && *e ? strtoull(e, NULL, 0) : fixed;
    printf("%s: seed %" PRIu64 " (COLO_TEST_SEED=%" PRIu64 " replays it)\n", who, seed, seed);
    fflush(stdout);
    return seed;
}
