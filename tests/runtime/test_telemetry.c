/* runtime/telemetry.h on the CPU backend: the pool workers' utilisation
 * follows work queued on them, the process's resident memory follows what
 * it touches, unknown values stay unknown (NAN), and NVML that is not there
 * is an error, never a crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/backend.h"
#include "runtime/clock.h"
#include "runtime/telemetry.h"

static colo_device *open_cpu(int threads)
{
    char err[256];
    colo_device_config dc = {.want = "cpu", .cpu_threads = threads};
    colo_device *dev = colo_device_open(&dc, err, sizeof err);
    if (!dev)
        fail_msg("%s", err);
    return dev;
}

/* Waits until the sampler has taken a sample after seq. */
static void next_sample(colo_telemetry *t, uint64_t seq, colo_device_sample *s)
{
    for (int i = 0; i < 2000; i++) {
        colo_telemetry_latest(t, s);
        if (s->seq > seq)
            return;
        colo_sleep_ns(5000000);
    }
    fail_msg("no new sample after %llu", (unsigned long long)seq);
}

/* Busy workers read as busy; a sampler that only watches reads them idle. */
static void test_worker_utilization(void **state)
{
    (void)state;
    colo_device *dev = open_cpu(2);
    char err[256];
    colo_telemetry *t = colo_telemetry_start(dev, 50, err, sizeof err);
    assert_non_null(t);
    colo_device_sample s;
    colo_telemetry_latest(t, &s);
    assert_true(s.seq >= 1);
    assert_string_equal(s.device, "cpu");
    assert_string_equal(s.source, "procfs");
    assert_int_equal(s.n_workers, 2);
    assert_true(isnan(s.worker_utilization_ratio[0])); /* needs two readings */

    /* both workers fill a 64 MiB buffer over and over for a few samples */
    colo_buffer *buf = colo_buffer_alloc(dev, 64u << 20, err, sizeof err);
    colo_stream *st = colo_stream_create(dev, &(colo_stream_config){.priority = COLO_PRIO_NORMAL}, err, sizeof err);
    assert_non_null(buf);
    assert_non_null(st);
    uint64_t seq0 = s.seq;
    next_sample(t, seq0, &s); /* a sample boundary, then work across the next whole interval */
    uint64_t busy_from = s.seq;
    double max_busy = 0;
    do {
        for (int i = 0; i < 8; i++)
            assert_int_equal(colo_memset(st, colo_buffer_ptr(buf), i, 64u << 20), COLO_OK);
        assert_int_equal(colo_stream_sync(st), COLO_OK);
        colo_telemetry_latest(t, &s);
        if (s.seq >= busy_from + 2)
            for (int w = 0; w < s.n_workers; w++)
                if (s.worker_utilization_ratio[w] > max_busy)
                    max_busy = s.worker_utilization_ratio[w];
        /* (up to 12 samples while the machine's other load leaves the workers too little of a core) */
    } while (s.seq < busy_from + 3 || (max_busy <= 0.05 && s.seq < busy_from + 12));
    assert_true(max_busy > 0.05); /* a shared machine may give a busy thread little of a core */
    assert_true(s.utilization_ratio > 0 && s.utilization_ratio <= 1);
    for (int w = 0; w < s.n_workers; w++)
        assert_true(s.worker_utilization_ratio[w] >= 0 && s.worker_utilization_ratio[w] <= 1);

    /* idle: a whole interval without work */
    next_sample(t, s.seq, &s);
    next_sample(t, s.seq, &s);
    next_sample(t, s.seq, &s);
    assert_true(s.utilization_ratio < max_busy);

    /* the CPU has no power, clock or temperature readings: unknown, not zero */
    assert_true(isnan(s.power_watts));
    assert_true(isnan(s.sm_clock_hz));
    assert_true(isnan(s.temperature_celsius));
    assert_true(isnan(s.memory_bandwidth_utilization_ratio));

    colo_stream_destroy(st);
    colo_buffer_free(buf);
    colo_telemetry_stop(t);
    colo_device_close(dev);
}

/* Host memory and this process's resident bytes; touching 96 MiB shows. */
static void test_memory(void **state)
{
    (void)state;
    colo_device_sample a, b;
    memset(&a, 0, sizeof a);
    a.memory_total_bytes = a.memory_used_bytes = a.process_memory_bytes = NAN;
    b = a;
    colo_telemetry_read_procfs(&a);
    double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    assert_true(fabs(a.memory_total_bytes - phys) < 0.01 * phys);
    assert_true(a.memory_used_bytes > 0 && a.memory_used_bytes < a.memory_total_bytes);
    assert_true(a.process_memory_bytes > 0);
    size_t n = 96u << 20;
    char *p = malloc(n);
    assert_non_null(p);
    for (size_t i = 0; i < n; i += 4096)
        p[i] = (char)i;
    colo_telemetry_read_procfs(&b);
    assert_true(b.process_memory_bytes - a.process_memory_bytes > 64.0 * (1 << 20));
    free(p);
}

/* No NVML (a library that does not exist, or no driver at all): an error
 * with a message, and a CPU sampler never needs it. */
static void test_nvml_missing(void **state)
{
    (void)state;
    char err[256] = "";
    setenv("COLO_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
    assert_null(colo_nvml_open("00000000:00:00.0", err, sizeof err));
    assert_true(strstr(err, "nvml") != NULL);
    unsetenv("COLO_NVML_LIBRARY");
    colo_nvml_close(NULL);
    colo_nvml_read(NULL, NULL);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    char err[256] = "";
    assert_null(colo_telemetry_start(NULL, 100, err, sizeof err));
    colo_device *dev = open_cpu(1);
    assert_null(colo_telemetry_start(dev, 5, err, sizeof err));
    assert_true(strstr(err, "interval") != NULL);
    colo_telemetry_stop(NULL);
    assert_int_equal(colo_device_worker_cpu_ns(NULL, NULL, 0), 0);
    uint64_t ns[1];
    assert_int_equal(colo_device_worker_cpu_ns(dev, ns, 1), 1);
    colo_device_close(dev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_utilization),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_nvml_missing),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
