/* NVML through dlopen: colo links no NVIDIA library, so a binary starts on a
 * machine without a driver; the few entry points used are declared here
 * with the types of NVML's public header (nvml.h, stable ABI). */
#include "runtime/telemetry.h"

#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/status.h"

typedef int nvml_return;          /* nvmlReturn_t: 0 = NVML_SUCCESS */
typedef struct nvml_device_st *nvml_device;
typedef struct {
    unsigned int gpu, memory; /* percent of the last sample period */
} nvml_utilization;
typedef struct {
    unsigned long long total, free, used; /* bytes */
} nvml_memory;
typedef struct {                 /* nvmlProcessInfo_t (v2 layout, used by _v2 and _v3) */
    unsigned int pid;
    unsigned long long used_gpu_memory;
    unsigned int gpu_instance_id, compute_instance_id;
} nvml_process_info;

enum { NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2, NVML_TEMPERATURE_GPU = 0, NVML_ERROR_INSUFFICIENT_SIZE = 7 };
#define NVML_VALUE_NOT_AVAILABLE 0xFFFFFFFFFFFFFFFFull

struct colo_nvml {
    void *lib;
    nvml_device dev;
    nvml_return (*shutdown)(void);
    nvml_return (*utilization)(nvml_device, nvml_utilization *);
    nvml_return (*memory)(nvml_device, nvml_memory *);
    nvml_return (*power)(nvml_device, unsigned int *);                      /* milliwatts */
    nvml_return (*clock)(nvml_device, int, unsigned int *);                 /* MHz */
    nvml_return (*temperature)(nvml_device, int, unsigned int *);           /* degrees C */
    nvml_return (*processes)(nvml_device, unsigned int *, nvml_process_info *); /* optional */
};

colo_nvml *colo_nvml_open(const char *pci_bus_id, char *err, size_t errlen)
{
    colo_nvml *n = calloc(1, sizeof *n);
    if (!n) {
        colo_set_err(err, errlen, "nvml: out of memory");
        return NULL;
    }
    const char *lib = getenv("COLO_NVML_LIBRARY");
    n->lib = dlopen(lib && *lib ? lib : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        colo_set_err(err, errlen, "nvml: %s", dlerror());
        free(n);
        return NULL;
    }
    nvml_return (*init)(void) = (nvml_return(*)(void))dlsym(n->lib, "nvmlInit_v2");
    nvml_return (*by_pci)(const char *, nvml_device *) =
        (nvml_return(*)(const char *, nvml_device *))dlsym(n->lib, "nvmlDeviceGetHandleByPciBusId_v2");
    n->shutdown = (nvml_return(*)(void))dlsym(n->lib, "nvmlShutdown");
    *(void **)&n->utilization = dlsym(n->lib, "nvmlDeviceGetUtilizationRates");
    *(void **)&n->memory = dlsym(n->lib, "nvmlDeviceGetMemoryInfo");
    *(void **)&n->power = dlsym(n->lib, "nvmlDeviceGetPowerUsage");
    *(void **)&n->clock = dlsym(n->lib, "nvmlDeviceGetClockInfo");
    *(void **)&n->temperature = dlsym(n->lib, "nvmlDeviceGetTemperature");
    *(void **)&n->processes = dlsym(n->lib, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (!n->processes)
        *(void **)&n->processes = dlsym(n->lib, "nvmlDeviceGetComputeRunningProcesses_v2");
    if (!init || !by_pci || !n->shutdown || !n->utilization || !n->memory || !n->power || !n->clock ||
        !n->temperature) {
        colo_set_err(err, errlen, "nvml: the library lacks an entry point colo uses (driver too old?)");
        goto out_close;
    }
    nvml_return rc = init();
    if (rc) {
        colo_set_err(err, errlen, "nvml: nvmlInit failed (%d)", rc);
        goto out_close;
    }
    if ((rc = by_pci(pci_bus_id ? pci_bus_id : "", &n->dev))) {
        colo_set_err(err, errlen, "nvml: no device at PCI bus id '%s' (%d)", pci_bus_id ? pci_bus_id : "", rc);
        n->shutdown();
        goto out_close;
    }
    return n;

out_close:
    dlclose(n->lib);
    free(n);
    return NULL;
}

/* This process's memory on the device: NAN when the driver does not list it
 * (inside a PID namespace the driver reports host PIDs). */
static double own_memory(colo_nvml *n)
{
    if (!n->processes)
        return NAN;
    nvml_process_info procs[64];
    unsigned int count = 64;
    if (n->processes(n->dev, &count, procs) || count > 64)
        return NAN;
    unsigned int me = (unsigned int)getpid();
    for (unsigned int i = 0; i < count; i++)
        if (procs[i].pid == me && procs[i].used_gpu_memory != NVML_VALUE_NOT_AVAILABLE)
            return (double)procs[i].used_gpu_memory;
    return NAN;
}

void colo_nvml_read(colo_nvml *n, colo_device_sample *s)
{
    if (!n || !s)
        return;
    nvml_utilization u;
    nvml_memory m;
    unsigned int v;
    if (!n->utilization(n->dev, &u)) {
        s->utilization_ratio = u.gpu / 100.0;
        s->memory_bandwidth_utilization_ratio = u.memory / 100.0;
    }
    if (!n->memory(n->dev, &m)) {
        s->memory_used_bytes = (double)m.used;
        s->memory_total_bytes = (double)m.total;
    }
    if (!n->power(n->dev, &v))
        s->power_watts = v / 1e3;
    if (!n->clock(n->dev, NVML_CLOCK_SM, &v))
        s->sm_clock_hz = v * 1e6;
    if (!n->clock(n->dev, NVML_CLOCK_MEM, &v))
        s->memory_clock_hz = v * 1e6;
    if (!n->temperature(n->dev, NVML_TEMPERATURE_GPU, &v))
        s->temperature_celsius = v;
    s->process_memory_bytes = own_memory(n);
}

void colo_nvml_close(colo_nvml *n)
{
    if (!n)
        return;
    n->shutdown();
    dlclose(n->lib);
    free(n);
}
