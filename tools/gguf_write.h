/* tools/gguf_write.h: a GGUF v3 writer, for colo-mkmodel and the tests
 * (colo-server reads GGUF files, never writes them: models/format/gguf.h). */
#ifndef COLO_TOOLS_GGUF_WRITE_H
#define COLO_TOOLS_GGUF_WRITE_H

#include "models/format/gguf.h"

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
