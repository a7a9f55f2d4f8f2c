/* The CUDA kernels of the products on two digits (kernels/cuda/q8_kernels.cuh),
 * their source run on the host (tests/kernels/cuda_emu.h): every output the
 * bits of colo_q8_dot, the host's reference, for every block format, rows of
 * x from 1 to 20 (the decode kernel for each of its widths, the tile kernel
 * past 8 with a partial tile of x), weight rows that fill no block of
 * threads, rows of blocks that fill no round, with and without a bias and
 * with a row stride of y past n. What runs on a GPU is checked against the
 * same reference by test_ops_cuda_shapes; this one runs everywhere. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

extern "C" { /* not every declaration of cmocka.h is inside its own */
#include <cmocka.h>
}

#include "tests/kernels/cuda_emu.h"

#include "kernels/quant.h"
#include "runtime/dtype.h"
#include "tests/test_seed.h"

#include "kernels/cuda/q8_kernels.cuh"

static colo_test_rng rng;

/* y (m, ys) = x . W^T [+ bias] by the kernel linear.cu launches for m rows. */
static void run_kernels(colo_dtype t, const uint8_t *w, size_t rb, const colo_q8_digits *xd, int nb,
                        const float *bias, float *y, int ys, int m, int n)
{
    unsigned row_blocks = (unsigned)((n + Q8_WARPS - 1) / Q8_WARPS);
    if (m == 1)
        emu_launch(row_blocks, 1, 32 * Q8_WARPS, [&] { q8_rows_kernel<1>(t, w, rb, xd, nb, bias, y, ys, m, n); });
    else if (m == 2)
        emu_launch(row_blocks, 1, 32 * Q8_WARPS, [&] { q8_rows_kernel<2>(t, w, rb, xd, nb, bias, y, ys, m, n); });
    else if (m <= 4)
        emu_launch(row_blocks, 1, 32 * Q8_WARPS, [&] { q8_rows_kernel<4>(t, w, rb, xd, nb, bias, y, ys, m, n); });
    else if (m <= Q8_ROWS_MAX)
        emu_launch(row_blocks, 1, 32 * Q8_WARPS, [&] { q8_rows_kernel<8>(t, w, rb, xd, nb, bias, y, ys, m, n); });
    else
        emu_launch((unsigned)((m + Q8_TI - 1) / Q8_TI), (unsigned)((n + Q8_TJ - 1) / Q8_TJ), Q8_TJ * Q8_TB,
                   [&] { q8_tile_kernel(t, w, rb, xd, nb, bias, y, ys, m, n); });
}

/* One shape of type t: n weight rows of k, m rows of x. */
static void check(colo_dtype t, int n, int k, int m, bool with_bias)
{
    int nb = k / 32, ys = n + 3;
    size_t rb = colo_dtype_row_bytes(t, k);
    std::vector<float> wf((size_t)n * k), x((size_t)m * k), bias(n), y((size_t)m * ys, NAN);
    for (auto &v : wf)
        v = (float)colo_test_rng_normal(&rng);
    for (auto &v : x)
        v = (float)colo_test_rng_normal(&rng);
    for (auto &v : bias)
        v = (float)colo_test_rng_normal(&rng);
    std::vector<uint8_t> w(rb * n);
    for (int r = 0; r < n; r++)
        assert_int_equal(colo_quantize_row(t, wf.data() + (size_t)r * k, w.data() + rb * r, k), COLO_OK);
    /* 16-byte aligned, as the stream's scratch is: the kernels read digits 16 bytes at a time */
    size_t xd_bytes = ((size_t)m * nb * sizeof(colo_q8_digits) + 255) / 256 * 256;
    colo_q8_digits *xd = (colo_q8_digits *)aligned_alloc(256, xd_bytes);
    assert_non_null(xd);
    for (int i = 0; i < m; i++)
        for (int b = 0; b < nb; b++)
            colo_q8_digits_of(x.data() + (size_t)i * k + 32 * b, xd + (size_t)i * nb + b);
    run_kernels(t, w.data(), rb, xd, nb, with_bias ? bias.data() : NULL, y.data(), ys, m, n);
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            float want = colo_q8_dot(t, w.data() + rb * j, k, xd + (size_t)i * nb, with_bias ? bias[j] : 0.0f);
            float got = y[(size_t)i * ys + j];
            if (memcmp(&want, &got, sizeof want))
                fail_msg("%s n=%d k=%d m=%d%s: y[%d][%d] = %.9g, the reference %.9g", colo_dtype_name(t), n, k, m,
                         with_bias ? " with bias" : "", i, j, got, want);
        }
        for (int j = n; j < ys; j++)
            if (!isnan(y[(size_t)i * ys + j]))
                fail_msg("%s m=%d: y[%d][%d] past n written", colo_dtype_name(t), m, i, j);
    }
    free(xd);
}

static void test_same_bits_as_reference(void **state)
{
    (void)state;
    const colo_dtype types[] = {COLO_Q4_0, COLO_Q4_1, COLO_Q5_0, COLO_Q5_1, COLO_Q8_0,
                                COLO_Q2_K, COLO_Q3_K, COLO_Q4_K, COLO_Q5_K, COLO_Q6_K};
    const int rows[] = {1, 2, 3, 4, 5, 8, 9, 20};
    for (colo_dtype t : types) {
        bool k_quant = colo_dtype_row_bytes(t, 32) == 0; /* blocks of 256 */
        /* 37 blocks of 32: a round of 32 and 5, four chunks of 8 and 5; K-quants 40 */
        int k = k_quant ? 1280 : 1184;
        for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++)
            check(t, 37, k, rows[ri], ri % 2 == 0);
    }
}

int main(void)
{
    rng = colo_test_rng_from(colo_test_seed("test_q8_kernels_emu", 11));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_bits_as_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
