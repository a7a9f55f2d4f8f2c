/* runtime/telemetry.h: what the device is doing, sampled off the hot path.
 *
 * A sampler thread reads the device every interval_ms and keeps the latest
 * sample; readers copy it (colo_telemetry_latest). Nothing in an executor or
 * a worker changes: the sampler reads what the device and the kernel
 * already count.
 *  - CUDA devices: NVML, opened with dlopen("libnvidia-ml.so.1") so that
 *    binaries start on machines without a driver; the device is found by
 *    its PCI bus id (colo_device_info.pci_bus_id), so CUDA_VISIBLE_DEVICES
 *    renumbering does not matter. SM and memory-bandwidth utilisation,
 *    memory used/total, power, SM and memory clocks, temperature, and this
 *    process's memory on the device.
 *  - The CPU backend: each pool worker's utilisation (its thread's CPU time
 *    over wall time: colo_device_worker_cpu_ns, spinning for work
 *    included), the pool's (its workers' time running chunks over their
 *    wall time: colo_device_worker_stats), the
 *    host's memory (MemTotal, MemTotal - MemAvailable from /proc/meminfo)
 *    and this process's resident memory (/proc/self/statm). Memory
 *    bandwidth needs uncore counters that are rarely readable unprivileged:
 *    it is not sampled on the CPU.
 * A value the device cannot give is NAN (unknown), never 0: renderers omit
 * it. Ratios are in [0, 1], the first sample's utilisations are unknown
 * (they need two readings).
 *
 * Threads: start and stop on one controlling thread; latest from any. */
#ifndef COLO_RUNTIME_TELEMETRY_H
#define COLO_RUNTIME_TELEMETRY_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/backend.h"

#define COLO_TELEMETRY_MAX_WORKERS 256

typedef struct colo_device_sample {
    uint64_t seq;                        /* 0: nothing sampled yet; then 1, 2, ... */
    uint64_t t_ns;                       /* colo_now_ns() when taken */
    char device[16];                     /* the metrics' device label: "cpu" or "cuda" */
    char source[16];                     /* "nvml", "procfs" or "none" (CUDA without NVML) */
    double utilization_ratio;            /* SM busy (NVML) or the pool's time running chunks (CPU) */
    double memory_bandwidth_utilization_ratio; /* NVML: time the memory was read or written */
    double memory_used_bytes;            /* the whole device (CPU: the host) */
    double memory_total_bytes;
    double process_memory_bytes;         /* colo's own: on the device (NVML), resident (CPU) */
    double power_watts;
    double sm_clock_hz, memory_clock_hz;
    double temperature_celsius;
    int n_workers;                       /* CPU pool workers below (0 on CUDA) */
    double worker_utilization_ratio[COLO_TELEMETRY_MAX_WORKERS];
} colo_device_sample;

typedef struct colo_telemetry colo_telemetry;

/* Starts sampling dev (which must outlive the sampler) every interval_ms
 * (>= 10); takes the first sample before it returns. NULL with err on no
 * memory or no thread. A CUDA device without NVML still samples (source
 * "none", every value unknown). */
colo_telemetry *colo_telemetry_start(colo_device *dev, int interval_ms, char *err, size_t errlen);
/* Stops the sampler thread and frees t. Accepts NULL. */
void colo_telemetry_stop(colo_telemetry *t);
/* Copies the latest sample into out. */
void colo_telemetry_latest(colo_telemetry *t, colo_device_sample *out);

/* ---- the readers, also used alone (tests, tools) ---------------------------- */

/* Fills the CPU backend's host values (memory, resident bytes) into s. */
void colo_telemetry_read_procfs(colo_device_sample *s);

typedef struct colo_nvml colo_nvml;
/* Opens NVML and the device with pci_bus_id. NULL with err when the library,
 * a symbol or the device is missing. */
colo_nvml *colo_nvml_open(const char *pci_bus_id, char *err, size_t errlen);
/* Fills what NVML gives into s (others stay as they are). */
void colo_nvml_read(colo_nvml *n, colo_device_sample *s);
void colo_nvml_close(colo_nvml *n); /* accepts NULL */

#endif
