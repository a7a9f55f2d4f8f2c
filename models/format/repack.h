/* models/format/repack.h: weights whose in-memory layout differs from
 * their file's (a model kind that fuses, converts or reorders tensors at
 * load), made once and kept in a cache file that later loads and wakes map
 * read-only, as a GGUF file's weights are mapped.
 *
 * The cache file lies in ${COLO_REPACK_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/colo/repack}
 * and is named for a hash of its key: the maker (kind), the source file's
 * path and identity (device, inode, size, modification time), the maker's
 * layout (a hash of everything that decides the bytes: shapes, types),
 * the format version and the ISA (architecture and byte order) colo was
 * built for. Its header repeats all of them and carries checksums of
 * itself and of the payload. A file is trusted only once this process has
 * checked all of it (the payload's checksum included) and its own
 * identity has not changed since; anything else (another version, a
 * source changed since, a short or corrupt file, one changed under its
 * name) is made again from the source and replaces it (written beside it,
 * then renamed over it).
 *
 * Thread safety: any thread; one colo_repack is used by one thread at a
 * time. */
#ifndef COLO_MODELS_REPACK_H
#define COLO_MODELS_REPACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/status.h"

#define COLO_REPACK_VERSION 1u
#define COLO_REPACK_HEADER_BYTES 4096u /* the payload starts here (page-aligned) */

typedef struct colo_repack_key {
    const char *kind;     /* the maker: "bert" (at most 15 bytes) */
    const char *src_path; /* the file the payload is made from */
    uint64_t layout;      /* the maker's hash of what decides the payload's bytes */
} colo_repack_key;

/* Writes the payload (bytes) into dst; COLO_OK or a status with a message. */
typedef colo_status (*colo_repack_fill_fn)(void *ud, void *dst, size_t bytes, char *err, size_t errlen);

typedef struct colo_repack colo_repack;

/* The payload of key (bytes long), mapped read-only into *out: from its
 * cache file when that is valid, else made by fill(ud, ...) and written to
 * the cache first (*built true then; may be NULL). The pages are resident
 * on return (read from the page cache or the disk, in 2 MiB folios where
 * the file system allows). COLO_EIO with a message when the cache folder
 * cannot be made or written (the caller may then keep its own copy), the
 * status of fill when fill fails, COLO_ENOMEM. */
colo_status colo_repack_map(const colo_repack_key *key, size_t bytes, colo_repack_fill_fn fill, void *ud,
                            colo_repack **out, bool *built, char *err, size_t errlen);
const void *colo_repack_data(const colo_repack *r); /* bytes long, 4096-aligned */
const char *colo_repack_path(const colo_repack *r);
/* Unmaps (the pages stay in the page cache, out of the process). Accepts NULL. */
void colo_repack_close(colo_repack *r);

/* The cache folder into buf (NUL-terminated); COLO_EINVAL when no
 * variable names one, COLO_ENOMEM when buf is too small. */
colo_status colo_repack_dir(char *buf, size_t len);
/* 64-bit FNV-1a of bytes, continuing from h (start with COLO_REPACK_HASH_SEED). */
#define COLO_REPACK_HASH_SEED 0xcbf29ce484222325ull
uint64_t colo_repack_hash(uint64_t h, const void *p, size_t bytes);

#endif
