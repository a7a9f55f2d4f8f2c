/* runtime/clock.h: colo's one clock.
 *
 * Every duration and deadline in colo-server is measured on CLOCK_MONOTONIC
 * in nanoseconds (uint64_t), so times taken in different layers compare
 * directly. Any thread. */
#ifndef COLO_RUNTIME_CLOCK_H
#define COLO_RUNTIME_CLOCK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Nanoseconds on CLOCK_MONOTONIC (since an arbitrary start, never going back). */
uint64_t colo_now_ns(void);

/* Sleeps for at least ns nanoseconds (resumes after signals). */
void colo_sleep_ns(uint64_t ns);

#ifdef __cplusplus
}
#endif

#endif
