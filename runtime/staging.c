/* Host-to-device copies through two page-locked buffers (runtime/staging.h). */
#include "runtime/staging.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/backend_impl.h"

struct colo_staging {
    colo_stream *s;
    size_t chunk;
    unsigned char *buf[2]; /* NULL: direct copies (the device has no page-locked memory) */
    colo_event *ev[2];     /* recorded after the device's read of buf[i] was queued */
    bool pending[2];
    int next;
    colo_status err; /* the first failure */
};

colo_staging *colo_staging_create(colo_stream *s, size_t chunk_bytes)
{
    if (!s || !chunk_bytes)
        return NULL;
    colo_staging *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->s = s;
    st->chunk = chunk_bytes;
    colo_device *dev = colo_stream_device(s);
    if (!dev->vt->host_alloc) /* pageable memory is all there is: copy directly */
        return st;
    char err[128];
    for (int i = 0; i < 2; i++)
        if (!(st->buf[i] = colo_host_alloc(dev, chunk_bytes)) || !(st->ev[i] = colo_event_create(dev, err, sizeof err))) {
            colo_staging_free(st);
            return NULL;
        }
    return st;
}

colo_status colo_staging_copy(colo_staging *st, void *dst_dev, const void *src_host, size_t bytes)
{
    if (!st || (bytes && (!dst_dev || !src_host)))
        return COLO_EINVAL;
    if (st->err != COLO_OK)
        return st->err;
    if (!st->buf[0]) {
        colo_status e = colo_memcpy_h2d(st->s, dst_dev, src_host, bytes);
        if (e == COLO_OK) /* the source is released after this returns */
            e = colo_stream_sync(st->s);
        return st->err = e;
    }
    const unsigned char *src = src_host;
    unsigned char *dst = dst_dev;
    for (size_t off = 0; off < bytes; off += st->chunk) {
        size_t n = bytes - off < st->chunk ? bytes - off : st->chunk;
        int i = st->next;
        st->next ^= 1;
        colo_status e = COLO_OK;
        if (st->pending[i]) /* the device is done reading buf[i] */
            e = colo_event_sync(st->ev[i]);
        if (e != COLO_OK)
            return st->err = e; /* buf[i] stays pending: free waits for the stream */
        st->pending[i] = false;
        memcpy(st->buf[i], src + off, n);
        if ((e = colo_memcpy_h2d(st->s, dst + off, st->buf[i], n)) != COLO_OK)
            return st->err = e;
        /* Queued: the device may read buf[i] from now on, recorded or not. */
        st->pending[i] = true;
        if ((e = colo_event_record(st->ev[i], st->s)) != COLO_OK)
            return st->err = e;
    }
    return COLO_OK;
}

colo_status colo_staging_finish(colo_staging *st)
{
    if (!st)
        return COLO_EINVAL;
    colo_status e = colo_stream_sync(st->s);
    if (e == COLO_OK)
        st->pending[0] = st->pending[1] = false;
    if (st->err == COLO_OK)
        st->err = e;
    return st->err;
}

void colo_staging_free(colo_staging *st)
{
    if (!st)
        return;
    if (st->pending[0] || st->pending[1])
        colo_stream_sync(st->s); /* the device may still read the buffers */
    colo_device *dev = colo_stream_device(st->s);
    for (int i = 0; i < 2; i++) {
        colo_host_free(dev, st->buf[i]);
        colo_event_destroy(st->ev[i]);
    }
    free(st);
}
