/* The device registry: the only place that knows which backends were built
 * (the only file with #ifdef COLO_CUDA). Op tables are not its business:
 * kernels/ops.c picks one by the device's backend kind. */
#include "runtime/backend_impl.h"

#include <string.h>

bool colo_cuda_available(void)
{
#ifdef COLO_CUDA
    return colo_cuda_device_present();
#else
    return false;
#endif
}

colo_device *colo_device_open(const colo_device_config *cfg, char *err, size_t errlen)
{
    colo_device_config def = {0};
    if (!cfg)
        cfg = &def;
    const char *want = cfg->want && *cfg->want ? cfg->want : "auto";
    if (!strcmp(want, "cpu"))
        return colo_cpu_device_open(cfg, err, errlen);
    if (!strcmp(want, "cuda")) {
#ifdef COLO_CUDA
        if (!colo_cuda_device_present()) {
            colo_set_err(err, errlen, "device cuda: no usable NVIDIA GPU (no driver or no device)");
            return NULL;
        }
        return colo_cuda_device_open(cfg, err, errlen);
#else
        colo_set_err(err, errlen, "device cuda: this build has no CUDA backend (rebuild with -DCOLO_CUDA=ON)");
        return NULL;
#endif
    }
    if (!strcmp(want, "auto")) {
#ifdef COLO_CUDA
        if (colo_cuda_device_present())
            return colo_cuda_device_open(cfg, err, errlen);
#endif
        return colo_cpu_device_open(cfg, err, errlen);
    }
    colo_set_err(err, errlen, "device '%s': expected auto, cpu or cuda", want);
    return NULL;
}

void colo_device_close(colo_device *dev)
{
    if (dev)
        dev->vt->close(dev);
}
