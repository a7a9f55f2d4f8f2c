/* models/gguf.h: a GGUF (v2, v3) reader and writer.
 *
 * The reader maps the file read-only and validates every count, length,
 * offset and size against the file before use: a truncated or corrupt file
 * gives COLO_EFORMAT and a message naming the key or tensor, never a crash
 * or a read outside the mapping. Values point into the mapping and live as
 * long as the colo_gguf.
 *
 * Thread safety: a colo_gguf is read-only after open; any thread may read. */
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

/* Opens and validates path. NULL with a message naming the file and what is
 * wrong. */
colo_gguf *colo_gguf_open(const char *path, char *err, size_t errlen);
void colo_gguf_close(colo_gguf *g); /* accepts NULL */

uint32_t colo_gguf_version(const colo_gguf *g);
size_t colo_gguf_alignment(const colo_gguf *g);
size_t colo_gguf_file_size(const colo_gguf *g);
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
const colo_gguf_tensor *colo_gguf_find_tensor(const colo_gguf *g, const char *name);
/* Drops the pages of t's data from memory (they are read again from the
 * file if touched): call once the tensor has been copied elsewhere, so a
 * model being loaded is not resident twice. */
void colo_gguf_release(const colo_gguf *g, const colo_gguf_tensor *t);

/* ---- writer ----------------------------------------------------------------------- */

typedef struct colo_gguf_writer colo_gguf_writer;

/* Writes are buffered for metadata and tensor infos; tensor data is
 * streamed at colo_gguf_writer_finish time by calling back. */
colo_gguf_writer *colo_gguf_writer_create(void);
void colo_gguf_writer_free(colo_gguf_writer *w);
colo_status colo_gguf_writer_add_u32(colo_gguf_writer *w, const char *key, uint32_t v);
colo_status colo_gguf_writer_add_i32(colo_gguf_writer *w, const char *key, int32_t v);
colo_status colo_gguf_writer_add_u64(colo_gguf_writer *w, const char *key, uint64_t v);
colo_status colo_gguf_writer_add_f32(colo_gguf_writer *w, const char *key, float v);
colo_status colo_gguf_writer_add_bool(colo_gguf_writer *w, const char *key, bool v);
colo_status colo_gguf_writer_add_str(colo_gguf_writer *w, const char *key, const char *v);
/* Scalars of the other types. */
colo_status colo_gguf_writer_add_u8(colo_gguf_writer *w, const char *key, uint8_t v);
colo_status colo_gguf_writer_add_i8(colo_gguf_writer *w, const char *key, int8_t v);
colo_status colo_gguf_writer_add_u16(colo_gguf_writer *w, const char *key, uint16_t v);
colo_status colo_gguf_writer_add_i16(colo_gguf_writer *w, const char *key, int16_t v);
colo_status colo_gguf_writer_add_i64(colo_gguf_writer *w, const char *key, int64_t v);
colo_status colo_gguf_writer_add_f64(colo_gguf_writer *w, const char *key, double v);
/* Arrays of strings, int32 or float32. */
colo_status colo_gguf_writer_add_str_arr(colo_gguf_writer *w, const char *key, const char *const *v, uint64_t n);
colo_status colo_gguf_writer_add_i32_arr(colo_gguf_writer *w, const char *key, const int32_t *v, uint64_t n);
colo_status colo_gguf_writer_add_f32_arr(colo_gguf_writer *w, const char *key, const float *v, uint64_t n);
/* An array of n scalars of type t (any type but STRING and ARRAY), packed
 * in v as the file stores them (little-endian, bool as one byte).
 * COLO_EINVAL for another t. */
colo_status colo_gguf_writer_add_arr(colo_gguf_writer *w, const char *key, colo_gguf_type t, const void *v,
                                     uint64_t n);
/* A value already encoded as GGUF bytes, written verbatim after the key and
 * type t: nested arrays (u32 element type, u64 count, elements) or, in
 * tests, deliberately malformed values. Nothing is checked. */
colo_status colo_gguf_writer_add_raw(colo_gguf_writer *w, const char *key, colo_gguf_type t, const void *bytes,
                                     size_t n);
/* Alignment of the data section and of every tensor's offset: a power of
 * two from 1 to 2^20 (default 32). Another value than 32 is also written
 * as general.alignment. Call at most once, before finish. */
colo_status colo_gguf_writer_set_alignment(colo_gguf_writer *w, uint32_t align);
/* A tensor: name, type, dims (ne[0] = row length). Its bytes come from fill
 * at finish time: fill(ctx, index, buffer, bytes) writes the tensor. */
colo_status colo_gguf_writer_add_tensor(colo_gguf_writer *w, const char *name, colo_dtype type, int n_dims,
                                        const int64_t *ne);
typedef colo_status (*colo_gguf_fill_fn)(void *ctx, int index, void *buf, size_t bytes);
colo_status colo_gguf_writer_finish(colo_gguf_writer *w, const char *path, colo_gguf_fill_fn fill, void *ctx,
                                    char *err, size_t errlen);

#endif
