/* Generic functions of runtime/backend.h: check arguments, call the backend. */
#include "runtime/backend_impl.h"
#include "runtime/clock.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

colo_backend_kind colo_device_kind(const colo_device *dev) { return dev->kind; }

colo_status colo_device_get_info(colo_device *dev, colo_device_info *info)
{
    if (!dev || !info)
        return COLO_EINVAL;
    return dev->vt->get_info(dev, info);
}

colo_buffer *colo_buffer_alloc(colo_device *dev, size_t bytes, char *err, size_t errlen)
{
    if (!dev || bytes == 0) {
        colo_set_err(err, errlen, "buffer: need a device and a non-zero size");
        return NULL;
    }
    colo_buffer *b = calloc(1, sizeof *b);
    if (!b) {
        colo_set_err(err, errlen, "buffer: out of host memory");
        return NULL;
    }
    if (dev->vt->buffer_alloc(dev, bytes, &b->ptr, &b->handle, err, errlen) != COLO_OK) {
        free(b);
        return NULL;
    }
    b->dev = dev;
    b->size = bytes;
    return b;
}

void colo_buffer_free(colo_buffer *b)
{
    if (!b)
        return;
    b->dev->vt->buffer_free(b->dev, b->ptr, b->size, b->handle);
    free(b);
}

void *colo_buffer_ptr(const colo_buffer *b) { return b->ptr; }
size_t colo_buffer_size(const colo_buffer *b) { return b->size; }

colo_stream *colo_stream_create(colo_device *dev, const colo_stream_config *cfg, char *err, size_t errlen)
{
    colo_stream_config def = {.priority = COLO_PRIO_NORMAL};
    if (!dev) {
        colo_set_err(err, errlen, "stream: no device");
        return NULL;
    }
    if (!cfg)
        cfg = &def;
    if ((unsigned)cfg->priority > COLO_PRIO_HIGH || cfg->unit_first < 0 || cfg->unit_count < 0) {
        colo_set_err(err, errlen, "stream: invalid priority or partition");
        return NULL;
    }
    colo_stream *s = calloc(1, sizeof *s);
    if (!s) {
        colo_set_err(err, errlen, "stream: out of host memory");
        return NULL;
    }
    s->dev = dev;
    s->priority = cfg->priority;
    s->exact = cfg->exact_activations;
    if (dev->vt->stream_init(dev, s, cfg, err, errlen) != COLO_OK) {
        free(s);
        return NULL;
    }
    return s;
}

void colo_stream_destroy(colo_stream *s)
{
    if (!s)
        return;
    s->dev->vt->stream_fini(s);
    free(s);
}

colo_device *colo_stream_device(const colo_stream *s) { return s->dev; }
colo_priority colo_stream_priority(const colo_stream *s) { return s->priority; }
void colo_stream_set_decode(colo_stream *s, bool decode) { s->decode_rows = decode ? INT_MAX : 0; }
bool colo_stream_decode(const colo_stream *s) { return s->decode_rows == INT_MAX; }
void colo_stream_set_decode_rows(colo_stream *s, int n) { s->decode_rows = n < 0 ? 0 : n; }
int colo_stream_decode_rows(const colo_stream *s) { return s->decode_rows; }

void colo_stream_set_label(colo_stream *s, const char *label)
{
    if (s)
        snprintf(s->label, sizeof s->label, "%s", label ? label : "");
}

const char *colo_stream_label(const colo_stream *s) { return s && s->label[0] ? s->label : NULL; }
colo_status colo_stream_sync(colo_stream *s)
{
    if (!s)
        return COLO_EINVAL;
    uint64_t t0 = colo_now_ns();
    colo_status st = s->dev->vt->stream_sync(s);
    __atomic_add_fetch(&s->sync_wait_ns, colo_now_ns() - t0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->syncs, 1, __ATOMIC_RELAXED);
    return st;
}
colo_status colo_stream_query(colo_stream *s) { return s ? s->dev->vt->stream_query(s) : COLO_EINVAL; }

static colo_status copy(colo_stream *s, void *dst, const void *src, size_t bytes, colo_copy_kind kind)
{
    if (!s || ((!dst || !src) && bytes))
        return COLO_EINVAL;
    if (bytes == 0)
        return COLO_OK;
    return s->dev->vt->memcpy_async(s, dst, src, bytes, kind);
}

colo_status colo_memcpy_h2d(colo_stream *s, void *dst, const void *src, size_t bytes)
{
    return copy(s, dst, src, bytes, COLO_COPY_H2D);
}
colo_status colo_memcpy_d2h(colo_stream *s, void *dst, const void *src, size_t bytes)
{
    return copy(s, dst, src, bytes, COLO_COPY_D2H);
}
colo_status colo_memcpy_d2d(colo_stream *s, void *dst, const void *src, size_t bytes)
{
    return copy(s, dst, src, bytes, COLO_COPY_D2D);
}

colo_status colo_memset(colo_stream *s, void *dst, int byte, size_t bytes)
{
    if (!s || (!dst && bytes))
        return COLO_EINVAL;
    if (bytes == 0)
        return COLO_OK;
    return s->dev->vt->memset_async(s, dst, byte, bytes);
}

colo_event *colo_event_create(colo_device *dev, char *err, size_t errlen)
{
    if (!dev) {
        colo_set_err(err, errlen, "event: no device");
        return NULL;
    }
    colo_event *ev = calloc(1, sizeof *ev);
    if (!ev) {
        colo_set_err(err, errlen, "event: out of host memory");
        return NULL;
    }
    ev->dev = dev;
    if (dev->vt->event_init(dev, ev, err, errlen) != COLO_OK) {
        free(ev);
        return NULL;
    }
    return ev;
}

void colo_event_destroy(colo_event *ev)
{
    if (!ev)
        return;
    ev->dev->vt->event_fini(ev);
    free(ev);
}

colo_status colo_event_record(colo_event *ev, colo_stream *s)
{
    if (!ev || !s || ev->dev != s->dev)
        return COLO_EINVAL;
    return ev->dev->vt->event_record(ev, s);
}
colo_status colo_event_query(colo_event *ev) { return ev ? ev->dev->vt->event_query(ev) : COLO_EINVAL; }
colo_status colo_event_sync(colo_event *ev) { return ev ? ev->dev->vt->event_sync(ev) : COLO_EINVAL; }

colo_status colo_event_elapsed_ms(colo_event *start, colo_event *end, float *ms)
{
    if (!start || !end || !ms || start->dev != end->dev)
        return COLO_EINVAL;
    return start->dev->vt->event_elapsed_ms(start, end, ms);
}
