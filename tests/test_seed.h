/* The seed of a test's random inputs. A run uses the test's fixed seed, so
 * that it is repeatable; COLO_TEST_SEED=N replays or explores another. The
 * seed in use is printed, so a failure can be replayed.
 *
 *   uint64_t seed = colo_test_seed("test_quant", 1234);
 *
 * colo_test_rng: a small xorshift generator for the inputs themselves,
 * seeded from that seed (any value; 0 is mapped away from the fixed point).
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

typedef struct colo_test_rng {
    uint64_t s;
} colo_test_rng;

static inline colo_test_rng colo_test_rng_from(uint64_t seed)
{
    return (colo_test_rng){seed * 2654435761u + 1};
}

static inline uint64_t colo_test_rng_u64(colo_test_rng *r)
{
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}

/* Roughly normal (mean 0, variance 1): a scaled sum of four uniforms. */
static inline float colo_test_rng_normal(colo_test_rng *r)
{
    double s = 0;
    for (int i = 0; i < 4; i++)
        s += (colo_test_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0) - 0.5;
    return (float)(s * 1.7320508);
}
