/* runtime/backend_impl.h: what a backend implements. Only backends (runtime/
 * backend_*.c) and the kernels that run on them (kernels/) include this
 * file; everyone else uses runtime/backend.h. The runtime knows nothing of
 * the kernels: kernels/ops.c finds a device's op table by its backend kind.
 *
 * A backend fills one static const colo_device_vtbl naming every slot. The
 * generic functions of backend.h (runtime/backend.c) check arguments, then
 * call the slot. */
#ifndef COLO_RUNTIME_BACKEND_IMPL_H
#define COLO_RUNTIME_BACKEND_IMPL_H

#include "runtime/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum colo_copy_kind { COLO_COPY_H2D, COLO_COPY_D2H, COLO_COPY_D2D } colo_copy_kind;

typedef struct colo_device_vtbl {
    const char *name; /* "cpu", "cuda" */

    /* Frees the backend's state (dev->ctx) and dev itself. Required. */
    void (*close)(colo_device *dev);
    /* Fills info (free_bytes as of now). Required. */
    colo_status (*get_info)(colo_device *dev, colo_device_info *info);

    /* One device allocation of bytes; *ptr is the device address, *handle
     * whatever free needs (may be NULL). Required. */
    colo_status (*buffer_alloc)(colo_device *dev, size_t bytes, void **ptr, void **handle, char *err,
                                size_t errlen);
    void (*buffer_free)(colo_device *dev, void *ptr, size_t bytes, void *handle);

    /* Stream life cycle: init fills s->ctx; fini waits for queued work and
     * frees s->ctx (not s). Required. */
    colo_status (*stream_init)(colo_device *dev, colo_stream *s, const colo_stream_config *cfg, char *err,
                               size_t errlen);
    void (*stream_fini)(colo_stream *s);
    colo_status (*stream_sync)(colo_stream *s);
    colo_status (*stream_query)(colo_stream *s);
    colo_status (*memcpy_async)(colo_stream *s, void *dst, const void *src, size_t bytes, colo_copy_kind kind);
    colo_status (*memset_async)(colo_stream *s, void *dst, int byte, size_t bytes);

    /* Events: init fills ev->ctx; fini frees it. Required. */
    colo_status (*event_init)(colo_device *dev, colo_event *ev, char *err, size_t errlen);
    void (*event_fini)(colo_event *ev);
    colo_status (*event_record)(colo_event *ev, colo_stream *s);
    colo_status (*event_query)(colo_event *ev);
    colo_status (*event_sync)(colo_event *ev);
    colo_status (*event_elapsed_ms)(colo_event *start, colo_event *end, float *ms);

    /* Optional slots (runtime/backend_optional.c supplies the default when NULL). */
    /* Whether an error poisoned the device's context. NULL: never. */
    bool (*poisoned)(const colo_device *dev);
    /* Library workspace of a stream (colo_stream_set_workspace). NULL: a no-op. */
    colo_status (*stream_set_workspace)(colo_stream *s, void *ptr, size_t bytes);
    /* Address space for on-demand memory, outside the device's budget,
     * freed by buffer_free (which releases what is still committed). NULL:
     * buffer_alloc. */
    colo_status (*buffer_reserve)(colo_device *dev, size_t bytes, void **ptr, void **handle, char *err,
                                  size_t errlen);
    /* Whether buffer_reserve works on this device. NULL: when the slot is filled. */
    bool (*reserve_supported)(const colo_device *dev);
    /* Chunk size of commit/decommit on a reserved buffer (bytes, a power of
     * two). NULL: 4096. */
    size_t (*buffer_granularity)(const colo_device *dev);
    /* Backs whole chunks [ptr, ptr + bytes) of a reserved buffer (handle
     * from buffer_reserve). NULL: memory is backed on touch. */
    colo_status (*buffer_commit)(colo_device *dev, void *handle, void *ptr, size_t bytes);
    /* Gives whole chunks back. NULL: a no-op. */
    void (*buffer_decommit)(colo_device *dev, void *handle, void *ptr, size_t bytes);
    /* CPU time of each host worker (colo_device_worker_cpu_ns). NULL: no workers, 0. */
    int (*worker_cpu_ns)(colo_device *dev, uint64_t *ns, int max);
    /* Best-effort floor (colo_device_set_best_effort_floor). NULL:
     * COLO_EUNSUPPORTED. */
    colo_status (*set_best_effort_floor)(colo_device *dev, double min_share);
    /* 1 owed, 0 not, -1 no account (colo_device_best_effort_owed). NULL: -1. */
    int (*best_effort_owed)(colo_device *dev);
    /* A stream's deadline for the pool (colo_stream_set_deadline). NULL: ignored. */
    void (*stream_set_deadline)(colo_stream *s, uint64_t deadline_ns, double weight);
    /* Recording work as a graph (colo_stream_graph_begin / end). NULL: COLO_EUNSUPPORTED. */
    colo_status (*graph_begin)(colo_stream *s);
    colo_status (*graph_end)(colo_stream *s, int key);
    uint64_t (*graphs_launched)(const colo_stream *s); /* NULL: 0 */
    /* The host worker pool's time (colo_device_worker_stats). NULL: COLO_EUNSUPPORTED. */
    colo_status (*worker_stats)(colo_device *dev, colo_worker_stats *out);
    /* A stream's ops, chunks and busy_ns (colo_stream_get_stats). NULL: 0. */
    void (*stream_stats)(colo_stream *s, colo_stream_stats *out);
    /* Host memory for copies (colo_host_alloc / colo_host_free). NULL: malloc / free. */
    void *(*host_alloc)(colo_device *dev, size_t bytes);
    void (*host_free)(colo_device *dev, void *p);
} colo_device_vtbl;

struct colo_device {
    const colo_device_vtbl *vt;
    colo_backend_kind kind;
    void *ctx;           /* backend state */
    int injected_poison; /* colo_device_mark_poisoned was called (__atomic access) */
};

struct colo_buffer {
    colo_device *dev;
    void *ptr;
    size_t size;
    void *handle;
};

struct colo_stream {
    colo_device *dev;
    colo_priority priority;
    int decode_rows; /* colo_stream_set_decode_rows; INT_MAX: every row */
    bool exact;      /* colo_stream_config.exact_activations */
    void *ctx;   /* backend state */
    char label[64]; /* colo_stream_set_label: the owning model, for fault injection */
    uint64_t syncs, sync_wait_ns; /* colo_stream_get_stats (written by the owner, __atomic) */
};

struct colo_event {
    colo_device *dev;
    void *ctx;
};

/* ---- backend constructors, called by the registry (runtime/registry.c) ---- */

colo_device *colo_cpu_device_open(const colo_device_config *cfg, char *err, size_t errlen);
/* Defined only in builds with CUDA (runtime/backend_cuda.c); only the
 * registry calls them, and only in such builds. */
colo_device *colo_cuda_device_open(const colo_device_config *cfg, char *err, size_t errlen);
bool colo_cuda_device_present(void);

/* Marks dev's context poisoned from outside the backend (an injected
 * "poison" fault, runtime/fault.h): colo_device_poisoned(dev) is true from
 * now on. Any thread. */
void colo_device_mark_poisoned(colo_device *dev);


#ifdef __cplusplus
}
#endif

#endif
