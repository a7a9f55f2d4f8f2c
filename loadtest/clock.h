/* loadtest/clock.h: colo-loadtest's clock. Every time it measures is
 * CLOCK_MONOTONIC in nanoseconds. */
#ifndef COLO_LOADTEST_CLOCK_H
#define COLO_LOADTEST_CLOCK_H

#include <stdint.h>

/* Nanoseconds on CLOCK_MONOTONIC. */
uint64_t lt_now_ns(void);

#endif
