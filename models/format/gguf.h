/* models/format/gguf.h: a GGUF (v2, v3) reader (the writer is tools/gguf_write.h).
 *
 * The reader maps the file read-only and validates every count, length,
 * offset and size against the file before use: a truncated or corrupt file
 * gives COLO_EFORMAT and a message naming the key or tensor, never a crash
 * or a read outside the mapping. Values point into the mapping and live as
 * long as the colo_gguf.
 *
 * Opens of one unchanged file (the same path, device, inode, size and
 * modification time) share one reader, counted: the second open neither
 * maps nor parses the file, and the mapping goes with the last close. A
 * model that sleeps keeps its file open so, with its pages dropped from
 * the process (colo_gguf_release_range), and wakes without parsing it.
 *
 * Thread safety: a colo_gguf is read-only after open; any thread may read,
 * open and close. */
#ifndef COLO_MODELS_GGUF_H
#define COLO_MODELS_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/ops.h"

typedef enum colo_gguf_type {
    COLO_GGUF_U8 = 0,
    COLO_GGUF_I8 = 1,
    COLO_GGUF_U16 = 2,
    COLO_GGUF_I16 = 3,
    COLO_GGUF_U32 = 4,
    COLO_GGUF_I32 = 5,
    COLO_GGUF_F32 = 6,
    COLO_GGUF_BOOL = 7,
    COLO_GGUF_STRING = 8,
    COLO_GGUF_ARRAY = 9,
    COLO_GGUF_U64 = 10,
    COLO_GGUF_I64 = 11,
    COLO_GGUF_F64 = 12,
} colo_gguf_type;
/* Bytes of one value of scalar type t; 0 for a string, an array or no type. */
size_t colo_gguf_scalar_size(colo_gguf_type t);

typedef struct colo_gguf_str {
    const char *ptr; /* not NUL-terminated */
    uint64_t len;
} colo_gguf_str;

typedef struct colo_gguf_kv {
    colo_gguf_str key;
    colo_gguf_type type;
    const uint8_t *value;  /* the encoded value in the mapping */
    /* arrays */
    colo_gguf_type arr_type;
    uint64_t arr_len;
    const uint8_t *arr_data; /* first element */
} colo_gguf_kv;

typedef struct colo_gguf_tensor {
    char name[128];
    int n_dims;
    int64_t ne[4];          /* ne[0] is the row length (GGML order) */
    colo_dtype type;
    uint64_t offset;        /* relative to the data section */
    size_t bytes;
    const void *data;       /* in the mapping */
} colo_gguf_tensor;

typedef struct colo_gguf colo_gguf;

/* Opens and validates path (or shares the reader of it open now, when the
 * file has not changed since). NULL with a message naming the file and
 * what is wrong. Every open is paired with one colo_gguf_close. */
colo_gguf *colo_gguf_open(const char *path, char *err, size_t errlen);
void colo_gguf_close(colo_gguf *g); /* accepts NULL */

uint32_t colo_gguf_version(const colo_gguf *g);
size_t colo_gguf_alignment(const colo_gguf *g);
size_t colo_gguf_file_size(const colo_gguf *g);
/* The file's identity as it was opened (device, inode, size, modification
 * time): two opens of one unchanged file have equal ones. */
typedef struct colo_gguf_id {
    uint64_t dev, ino, size, mtime_ns;
} colo_gguf_id;
colo_gguf_id colo_gguf_identity(const colo_gguf *g);
/* Bytes from the start of the file to the data section (tensor offsets are
 * relative to it). */
size_t colo_gguf_data_offset(const colo_gguf *g);
/* "u8", "string", "array"...; "?" for an unknown value. */
const char *colo_gguf_type_name(colo_gguf_type t);

int colo_gguf_n_kv(const colo_gguf *g);
const colo_gguf_kv *colo_gguf_kv_at(const colo_gguf *g, int i);
/* NULL when absent. */
const colo_gguf_kv *colo_gguf_find(const colo_gguf *g, const char *key);

/* Typed getters: COLO_EINVAL when the key is absent, COLO_EFORMAT when it
 * has another type (integers of any width convert when the value fits). */
colo_status colo_gguf_get_u32(const colo_gguf *g, const char *key, uint32_t *out);
colo_status colo_gguf_get_i64(const colo_gguf *g, const char *key, int64_t *out);
colo_status colo_gguf_get_f32(const colo_gguf *g, const char *key, float *out);
colo_status colo_gguf_get_bool(const colo_gguf *g, const char *key, bool *out);
colo_status colo_gguf_get_str(const colo_gguf *g, const char *key, colo_gguf_str *out);
/* An array: its element type, length and first element. */
colo_status colo_gguf_get_arr(const colo_gguf *g, const char *key, colo_gguf_type *type, uint64_t *len,
                              const uint8_t **data);
/* Element i of a string array (walks the array; O(i) the first time,
 * then O(1) through an index built on first use). */
colo_status colo_gguf_arr_str(const colo_gguf *g, const char *key, uint64_t i, colo_gguf_str *out);

int colo_gguf_n_tensors(const colo_gguf *g);
const colo_gguf_tensor *colo_gguf_tensor_at(const colo_gguf *g, int i);
/* O(log n) in the tensors. */
const colo_gguf_tensor *colo_gguf_find_tensor(const colo_gguf *g, const char *name);
/* Drops the pages of t's data from memory (they are read again from the
 * file if touched): call once the tensor has been copied elsewhere, so a
 * model being loaded is not resident twice. */
void colo_gguf_release(const colo_gguf *g, const colo_gguf_tensor *t);
/* The same for bytes [p, p + bytes) of the mapping (the header and the
 * tokenizer's arrays once read, say). */
void colo_gguf_release_range(const colo_gguf *g, const void *p, size_t bytes);
/* Makes bytes [p, p + bytes) of the mapping resident now, in whole 2 MiB
 * folios (the range widened to their bounds inside the mapping): from the
 * page cache when the file is there, else read from the disk
 * (MADV_POPULATE_READ), in huge pages where the file system gives the page
 * cache large folios (MADV_HUGEPAGE on the whole mapping), so that a model
 * read in place does not fault its weights in one page at a time on its
 * first step and a wake maps a few hundred entries per GB. COLO_OK, or
 * COLO_EIO naming the file when the read failed (a file cut short under
 * the mapping); a kernel without MADV_POPULATE_READ leaves the pages to be
 * faulted on first touch and answers COLO_OK. */
colo_status colo_gguf_prefault(const colo_gguf *g, const void *p, size_t bytes, char *err, size_t errlen);
/* Start of the mapping (the file's byte 0). */
const void *colo_gguf_map_base(const colo_gguf *g);

#endif
