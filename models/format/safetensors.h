/* models/format/safetensors.h: a validating reader of the safetensors format.
 *
 * File layout: an 8-byte little-endian header length N, N bytes of JSON
 * ({"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]},
 * ..., "__metadata__": {...}}), then the data section; offsets are relative
 * to the data section. The reader maps the file read-only and checks,
 * before anything is used: N (at most COLO_SAFETENSORS_MAX_HEADER and within
 * the file), the JSON (exactly N bytes, an object, no duplicate keys), and
 * for every tensor its dtype (one of the format's names), shape (at most
 * COLO_SAFETENSORS_MAX_DIMS non-negative dims whose product does not
 * overflow), and data_offsets (begin <= end, end within the file,
 * end - begin == elements * element size, no two tensors overlapping). A bad
 * file gives COLO_EFORMAT and a message naming the file and the tensor,
 * never a crash or a read outside the mapping. __metadata__ is ignored.
 *
 * Every dtype the format defines is accepted at open (model files carry
 * integer tensors such as BERT's position_ids); colo computes with F32, F16
 * and BF16 (colo_safetensors_tensor.computable), and a model loader refuses
 * other dtypes for the tensors it uses, naming them.
 *
 * Thread safety: read-only after open; any thread may read. */
#ifndef COLO_MODELS_SAFETENSORS_H
#define COLO_MODELS_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/ops.h"
#include "runtime/status.h"

#define COLO_SAFETENSORS_MAX_HEADER (100u * 1024u * 1024u) /* bytes of JSON header */
#define COLO_SAFETENSORS_MAX_DIMS 8

typedef struct colo_safetensors_tensor {
    const char *name;       /* NUL-terminated; owned by the file */
    char dtype_name[8];     /* as written: "F32", "I64", "BF16"... */
    bool computable;        /* F32, F16 or BF16: type below is valid */
    colo_dtype type;        /* COLO_F32 / COLO_F16 / COLO_BF16 when computable */
    size_t elem_bytes;      /* bytes of one element */
    int n_dims;
    int64_t shape[COLO_SAFETENSORS_MAX_DIMS]; /* row-major: shape[n_dims - 1] is the row length */
    int64_t n_elements;     /* product of shape (1 for a scalar) */
    uint64_t offset;        /* begin, relative to the data section */
    size_t bytes;           /* end - begin */
    const void *data;       /* in the mapping (not necessarily aligned) */
} colo_safetensors_tensor;

typedef struct colo_safetensors colo_safetensors;

/* Opens and validates path into *out (the caller closes it). COLO_EIO when
 * the file cannot be opened or mapped, COLO_EFORMAT when it is malformed,
 * COLO_ENOMEM; each with a message naming the file (and the tensor). *out
 * is NULL on failure. */
colo_status colo_safetensors_open(const char *path, colo_safetensors **out, char *err, size_t errlen);
void colo_safetensors_close(colo_safetensors *f); /* accepts NULL */

const char *colo_safetensors_path(const colo_safetensors *f);
size_t colo_safetensors_file_size(const colo_safetensors *f);
/* Tensors in data order (by offset); i in [0, n). */
int colo_safetensors_n_tensors(const colo_safetensors *f);
const colo_safetensors_tensor *colo_safetensors_tensor_at(const colo_safetensors *f, int i);
/* NULL when there is no tensor of that name. O(log n). */
const colo_safetensors_tensor *colo_safetensors_find(const colo_safetensors *f, const char *name);
/* Drops the pages of t's data from memory (they are read again from the
 * file if touched): call once t has been copied elsewhere. */
void colo_safetensors_release(const colo_safetensors *f, const colo_safetensors_tensor *t);

#endif
