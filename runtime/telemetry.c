/* The device sampler: one thread, one reading per interval, the latest
 * kept under a mutex (runtime/telemetry.h). */
#include "runtime/telemetry.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/clock.h"
#include "runtime/log.h"

struct colo_telemetry {
    colo_device *dev;
    colo_backend_kind kind;
    int interval_ms;
    colo_nvml *nvml; /* CUDA devices with a driver */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* stop */
    bool stop;
    colo_device_sample latest;            /* under mu */
    uint64_t prev_cpu_ns[COLO_TELEMETRY_MAX_WORKERS]; /* sampler thread only */
    uint64_t prev_t_ns;
    uint64_t prev_pool_busy_ns, prev_pool_all_ns; /* colo_device_worker_stats at the last reading */
};

static void unknown(colo_device_sample *s)
{
    s->utilization_ratio = s->memory_bandwidth_utilization_ratio = NAN;
    s->memory_used_bytes = s->memory_total_bytes = s->process_memory_bytes = NAN;
    s->power_watts = s->sm_clock_hz = s->memory_clock_hz = s->temperature_celsius = NAN;
    s->n_workers = 0;
}

void colo_telemetry_read_procfs(colo_device_sample *s)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        double total_kb = NAN, avail_kb = NAN, v;
        while (fgets(line, sizeof line, f)) {
            if (sscanf(line, "MemTotal: %lf kB", &v) == 1)
                total_kb = v;
            else if (sscanf(line, "MemAvailable: %lf kB", &v) == 1)
                avail_kb = v;
        }
        fclose(f);
        s->memory_total_bytes = total_kb * 1024;
        s->memory_used_bytes = (total_kb - avail_kb) * 1024; /* NAN when either is missing */
    }
    f = fopen("/proc/self/statm", "r");
    if (f) {
        unsigned long size_pages, resident_pages;
        if (fscanf(f, "%lu %lu", &size_pages, &resident_pages) == 2)
            s->process_memory_bytes = (double)resident_pages * (double)sysconf(_SC_PAGESIZE);
        fclose(f);
    }
}

/* Per-worker utilisation: CPU time gained over wall time since the last
 * reading (unknown on the first). */
static void read_workers(colo_telemetry *t, colo_device_sample *s)
{
    uint64_t ns[COLO_TELEMETRY_MAX_WORKERS];
    int n = colo_device_worker_cpu_ns(t->dev, ns, COLO_TELEMETRY_MAX_WORKERS);
    if (n > COLO_TELEMETRY_MAX_WORKERS)
        n = COLO_TELEMETRY_MAX_WORKERS;
    s->n_workers = n;
    double wall = (double)(s->t_ns - t->prev_t_ns), sum = 0;
    for (int i = 0; i < n; i++) {
        double r = NAN;
        if (t->prev_t_ns && wall > 0 && ns[i] >= t->prev_cpu_ns[i]) {
            r = (double)(ns[i] - t->prev_cpu_ns[i]) / wall;
            r = r > 1 ? 1 : r;
        }
        s->worker_utilization_ratio[i] = r;
        sum += r;
        t->prev_cpu_ns[i] = ns[i];
    }
    s->utilization_ratio = n > 0 ? sum / n : NAN;
    /* The pool's own account, where it keeps one: time running chunks, not
     * the CPU time a worker spends spinning for the next one. */
    colo_worker_stats ws;
    if (colo_device_worker_stats(t->dev, &ws) == COLO_OK && ws.n_workers > 0) {
        uint64_t all = ws.busy_ns + ws.ready_ns + ws.barrier_ns + ws.starved_ns;
        if (t->prev_pool_all_ns && all > t->prev_pool_all_ns && ws.busy_ns >= t->prev_pool_busy_ns)
            s->utilization_ratio = (double)(ws.busy_ns - t->prev_pool_busy_ns) / (double)(all - t->prev_pool_all_ns);
        else
            s->utilization_ratio = NAN;
        t->prev_pool_busy_ns = ws.busy_ns;
        t->prev_pool_all_ns = all;
    }
    t->prev_t_ns = s->t_ns;
}

static void sample(colo_telemetry *t)
{
    colo_device_sample s;
    memset(&s, 0, sizeof s);
    unknown(&s);
    s.t_ns = colo_now_ns();
    if (t->kind == COLO_BACKEND_CPU) {
        snprintf(s.device, sizeof s.device, "cpu");
        snprintf(s.source, sizeof s.source, "procfs");
        colo_telemetry_read_procfs(&s);
        read_workers(t, &s);
    } else {
        snprintf(s.device, sizeof s.device, "cuda");
        snprintf(s.source, sizeof s.source, t->nvml ? "nvml" : "none");
        colo_nvml_read(t->nvml, &s);
    }
    pthread_mutex_lock(&t->mu);
    s.seq = t->latest.seq + 1;
    t->latest = s;
    pthread_mutex_unlock(&t->mu);
}

static void *sampler_main(void *arg)
{
    colo_telemetry *t = arg;
    pthread_mutex_lock(&t->mu);
    while (!t->stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += t->interval_ms / 1000;
        until.tv_nsec += (long)(t->interval_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        int rc = 0;
        while (!t->stop && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&t->cv, &t->mu, &until);
        if (t->stop)
            break;
        pthread_mutex_unlock(&t->mu);
        sample(t);
        pthread_mutex_lock(&t->mu);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

colo_telemetry *colo_telemetry_start(colo_device *dev, int interval_ms, char *err, size_t errlen)
{
    colo_device_info info;
    if (!dev || interval_ms < 10 || colo_device_get_info(dev, &info) != COLO_OK) {
        colo_set_err(err, errlen, "telemetry: a device and an interval of at least 10 ms are needed");
        return NULL;
    }
    colo_telemetry *t = calloc(1, sizeof *t);
    if (!t) {
        colo_set_err(err, errlen, "telemetry: out of memory");
        return NULL;
    }
    t->dev = dev;
    t->kind = info.kind;
    t->interval_ms = interval_ms;
    if (t->kind == COLO_BACKEND_CUDA) {
        char why[256];
        if (!(t->nvml = colo_nvml_open(info.pci_bus_id, why, sizeof why)))
            COLO_WARN("telemetry: no device readings for %s: %s", info.name, why);
    }
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) ||
        pthread_cond_init(&t->cv, &ca)) {
        colo_set_err(err, errlen, "telemetry: cannot make a condition variable");
        goto out_free;
    }
    pthread_condattr_destroy(&ca);
    if (pthread_mutex_init(&t->mu, NULL)) {
        colo_set_err(err, errlen, "telemetry: cannot make a mutex");
        goto out_cond;
    }
    sample(t);
    int rc = pthread_create(&t->thread, NULL, sampler_main, t);
    if (rc) {
        colo_set_err(err, errlen, "telemetry: cannot start the sampler: %s", strerror(rc));
        goto out_mutex;
    }
    return t;

out_mutex:
    pthread_mutex_destroy(&t->mu);
out_cond:
    pthread_cond_destroy(&t->cv);
out_free:
    colo_nvml_close(t->nvml);
    free(t);
    return NULL;
}

void colo_telemetry_stop(colo_telemetry *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    colo_nvml_close(t->nvml);
    free(t);
}

void colo_telemetry_latest(colo_telemetry *t, colo_device_sample *out)
{
    pthread_mutex_lock(&t->mu);
    *out = t->latest;
    pthread_mutex_unlock(&t->mu);
}
