/* runtime/staging.h: large host-to-device copies (a model's weights from
 * its mapped file) through page-locked buffers.
 *
 * Where colo_host_alloc gives page-locked memory (CUDA), a copy from
 * pageable memory is staged by the driver and blocks the calling thread
 * for its whole length. Here the data goes through two page-locked
 * buffers in turn: the host fills one while the device reads the other, so
 * reading the file and the transfer overlap. Elsewhere (the CPU) a copy is
 * one colo_memcpy_h2d.
 *
 * The source may be released as soon as colo_staging_copy returns (it has
 * been read); the destination is complete after colo_staging_finish. One
 * thread uses a staging at a time. */
#ifndef COLO_RUNTIME_STAGING_H
#define COLO_RUNTIME_STAGING_H

#include <stddef.h>

#include "runtime/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct colo_staging colo_staging;

/* Copies on s through two buffers of chunk_bytes each; NULL when out of
 * memory (host or page-locked). */
colo_staging *colo_staging_create(colo_stream *s, size_t chunk_bytes);
colo_status colo_staging_copy(colo_staging *st, void *dst_dev, const void *src_host, size_t bytes);
/* Waits until every copy is on the device; the first error of any. */
colo_status colo_staging_finish(colo_staging *st);
void colo_staging_free(colo_staging *st); /* finishes first; accepts NULL */

#ifdef __cplusplus
}
#endif

#endif
