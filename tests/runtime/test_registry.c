/* The device registry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>
#include <unistd.h>

#include "runtime/backend.h"

static void test_cpu_and_auto(void **state)
{
    (void)state;
    char err[256];
    colo_device_config cfg = {.want = "cpu", .cpu_threads = 3, .cpu_memory_bytes = 1 << 30};
    colo_device *d = colo_device_open(&cfg, err, sizeof err);
    assert_non_null(d);
    assert_int_equal(colo_device_kind(d), COLO_BACKEND_CPU);
    colo_device_info info;
    assert_int_equal(colo_device_get_info(d, &info), COLO_OK);
    assert_int_equal(info.total_bytes, 1 << 30);
    assert_int_equal(info.free_bytes, 1 << 30);
    assert_int_equal(info.compute_units, 3);
    assert_true(info.prio_greatest > info.prio_least);
    assert_true(strlen(info.name) > 0);
    colo_buffer *b = colo_buffer_alloc(d, 1 << 20, err, sizeof err);
    colo_device_get_info(d, &info);
    assert_int_equal(info.free_bytes, (1 << 30) - (1 << 20));
    assert_null(colo_buffer_alloc(d, 1 << 30, err, sizeof err)); /* past the budget */
    colo_buffer_free(b);
    colo_device_close(d);

    colo_device_config autocfg = {.want = NULL};
    d = colo_device_open(&autocfg, err, sizeof err);
    assert_non_null(d);
    assert_int_equal(colo_device_kind(d) == COLO_BACKEND_CUDA, colo_cuda_available());
    colo_device_close(d);
    /* "auto", "" and no config at all mean the same. */
    const char *autos[] = {"auto", ""};
    for (int i = 0; i < 2; i++) {
        autocfg.want = autos[i];
        d = colo_device_open(&autocfg, err, sizeof err);
        assert_non_null(d);
        assert_int_equal(colo_device_kind(d) == COLO_BACKEND_CUDA, colo_cuda_available());
        colo_device_close(d);
    }
    d = colo_device_open(NULL, err, sizeof err);
    assert_non_null(d);
    if (colo_device_kind(d) == COLO_BACKEND_CPU) {
        /* Defaults: every online core, physical memory, nothing held. */
        assert_int_equal(colo_device_get_info(d, &info), COLO_OK);
        assert_int_equal(info.compute_units, (int)sysconf(_SC_NPROCESSORS_ONLN));
        assert_int_equal(info.total_bytes, (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE));
        assert_int_equal(info.free_bytes, info.total_bytes);
        assert_int_equal(info.prio_least, 0);
        assert_int_equal(info.prio_greatest, 2);
        assert_true(info.can_partition);
    }
    colo_device_close(d);
}

static void test_cuda_without_gpu_and_bad_names(void **state)
{
    (void)state;
    char err[256] = "";
    colo_device_config cfg = {.want = "cuda"};
    colo_device *d = colo_device_open(&cfg, err, sizeof err);
    if (colo_cuda_available()) {
        assert_non_null(d);
        colo_device_close(d);
    } else {
        assert_null(d);
        /* The message names the device and why: not built, or no GPU. */
        assert_non_null(strstr(err, "cuda"));
        assert_true(strstr(err, "no CUDA backend") || strstr(err, "no usable NVIDIA GPU"));
    }
    cfg.want = "tpu";
    assert_null(colo_device_open(&cfg, err, sizeof err));
    assert_non_null(strstr(err, "tpu"));
    colo_device_close(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_and_auto),
        cmocka_unit_test(test_cuda_without_gpu_and_bad_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
