/* Generic functions of runtime/backend.h for the optional slots of
 * colo_device_vtbl: each checks its arguments and falls back to the
 * documented default when a backend leaves the slot NULL. */
#include "runtime/backend_impl.h"

bool colo_device_poisoned(const colo_device *dev)
{
    if (!dev)
        return false;
    return __atomic_load_n(&dev->injected_poison, __ATOMIC_ACQUIRE) || (dev->vt->poisoned && dev->vt->poisoned(dev));
}

void colo_device_mark_poisoned(colo_device *dev)
{
    if (dev)
        __atomic_store_n(&dev->injected_poison, 1, __ATOMIC_RELEASE);
}

colo_status colo_stream_set_workspace(colo_stream *s, void *ptr, size_t bytes)
{
    if (!s || (!ptr && bytes) || (ptr && !bytes))
        return COLO_EINVAL;
    if (!s->dev->vt->stream_set_workspace)
        return COLO_OK;
    return s->dev->vt->stream_set_workspace(s, ptr, bytes);
}

int colo_device_worker_cpu_ns(colo_device *dev, uint64_t *ns, int max)
{
    if (!dev || !dev->vt->worker_cpu_ns || (max > 0 && !ns))
        return 0;
    return dev->vt->worker_cpu_ns(dev, ns, max < 0 ? 0 : max);
}
