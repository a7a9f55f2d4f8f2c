/* Generic functions of runtime/backend.h for the optional slots of
 * colo_device_vtbl: each checks its arguments and falls back to the
 * documented default when a backend leaves the slot NULL. */
#include "runtime/backend_impl.h"

#include <stdlib.h>
#include <string.h>

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

size_t colo_buffer_granularity(const colo_buffer *b)
{
    if (!b || !b->dev->vt->buffer_granularity)
        return 4096;
    return b->dev->vt->buffer_granularity(b->dev);
}

colo_status colo_buffer_commit(colo_buffer *b, size_t offset, size_t bytes)
{
    if (!b || offset > b->size || bytes > b->size - offset)
        return COLO_EINVAL;
    if (!b->dev->vt->buffer_commit || !bytes)
        return COLO_OK;
    return b->dev->vt->buffer_commit(b->dev, b->handle, (char *)b->ptr + offset, bytes);
}

void colo_buffer_decommit(colo_buffer *b, size_t offset, size_t bytes)
{
    if (!b || offset >= b->size || !b->dev->vt->buffer_decommit)
        return;
    if (bytes > b->size - offset)
        bytes = b->size - offset;
    b->dev->vt->buffer_decommit(b->dev, b->handle, (char *)b->ptr + offset, bytes);
}

colo_buffer *colo_buffer_reserve(colo_device *dev, size_t bytes, char *err, size_t errlen)
{
    if (!dev || bytes == 0) {
        colo_set_err(err, errlen, "buffer: need a device and a non-zero size");
        return NULL;
    }
    if (!dev->vt->buffer_reserve)
        return colo_buffer_alloc(dev, bytes, err, errlen);
    colo_buffer *b = calloc(1, sizeof *b);
    if (!b) {
        colo_set_err(err, errlen, "buffer: out of host memory");
        return NULL;
    }
    if (dev->vt->buffer_reserve(dev, bytes, &b->ptr, &b->handle, err, errlen) != COLO_OK) {
        free(b);
        return NULL;
    }
    b->dev = dev;
    b->size = bytes;
    return b;
}

bool colo_device_can_reserve(const colo_device *dev)
{
    return dev && dev->vt->buffer_reserve && (!dev->vt->reserve_supported || dev->vt->reserve_supported(dev));
}

int colo_device_worker_cpu_ns(colo_device *dev, uint64_t *ns, int max)
{
    if (!dev || !dev->vt->worker_cpu_ns || (max > 0 && !ns))
        return 0;
    return dev->vt->worker_cpu_ns(dev, ns, max < 0 ? 0 : max);
}

colo_status colo_device_set_best_effort_floor(colo_device *dev, double min_share)
{
    if (!dev || !(min_share >= 0 && min_share < 1))
        return COLO_EINVAL;
    if (!dev->vt->set_best_effort_floor)
        return COLO_EUNSUPPORTED;
    return dev->vt->set_best_effort_floor(dev, min_share);
}

int colo_device_best_effort_owed(colo_device *dev)
{
    if (!dev || !dev->vt->best_effort_owed)
        return -1;
    return dev->vt->best_effort_owed(dev);
}

colo_status colo_device_worker_stats(colo_device *dev, colo_worker_stats *out)
{
    if (!dev || !out)
        return COLO_EINVAL;
    memset(out, 0, sizeof *out);
    if (!dev->vt->worker_stats)
        return COLO_EUNSUPPORTED;
    return dev->vt->worker_stats(dev, out);
}

void colo_stream_get_stats(colo_stream *s, colo_stream_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!s)
        return;
    if (s->dev->vt->stream_stats)
        s->dev->vt->stream_stats(s, out);
    out->syncs = __atomic_load_n(&s->syncs, __ATOMIC_RELAXED);
    out->sync_wait_ns = __atomic_load_n(&s->sync_wait_ns, __ATOMIC_RELAXED);
}

void colo_stream_set_deadline(colo_stream *s, uint64_t deadline_ns, double weight)
{
    if (s && s->dev->vt->stream_set_deadline)
        s->dev->vt->stream_set_deadline(s, deadline_ns, weight > 0 ? weight : 1.0);
}

void *colo_host_alloc(colo_device *dev, size_t bytes)
{
    if (!dev || !bytes)
        return NULL;
    return dev->vt->host_alloc ? dev->vt->host_alloc(dev, bytes) : malloc(bytes);
}

void colo_host_free(colo_device *dev, void *p)
{
    if (!dev || !p)
        return;
    if (dev->vt->host_free)
        dev->vt->host_free(dev, p);
    else
        free(p);
}

colo_status colo_stream_graph_begin(colo_stream *s)
{
    if (!s)
        return COLO_EINVAL;
    return s->dev->vt->graph_begin ? s->dev->vt->graph_begin(s) : COLO_EUNSUPPORTED;
}

colo_status colo_stream_graph_end(colo_stream *s, int key)
{
    if (!s)
        return COLO_EINVAL;
    return s->dev->vt->graph_end ? s->dev->vt->graph_end(s, key) : COLO_EUNSUPPORTED;
}

uint64_t colo_stream_graphs_launched(const colo_stream *s)
{
    return s && s->dev->vt->graphs_launched ? s->dev->vt->graphs_launched(s) : 0;
}
