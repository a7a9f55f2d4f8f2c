/* For test programs that need a CUDA device: without a usable one, main runs
 * a single test that reports itself skipped, so ctest shows the program as
 * not run rather than passed. Include after <cmocka.h>.
 *
 *   int main(void)
 *   {
 *       COLO_SKIP_WITHOUT_CUDA();
 *       ...
 *   }
 */
#pragma once

#include <stdio.h>

#include "runtime/backend.h"

static void test_cuda_present(void **state)
{
    (void)state;
    printf("no usable CUDA device: skipped\n");
    skip();
}

#define COLO_SKIP_WITHOUT_CUDA()                                                                                       \
    do {                                                                                                               \
        if (!colo_cuda_available()) {                                                                                  \
            const struct CMUnitTest skipped_[] = {cmocka_unit_test(test_cuda_present)};                                \
            return cmocka_run_group_tests(skipped_, NULL, NULL);                                                       \
        }                                                                                                              \
    } while (0)
