/* models/kv_cache.h: a paged KV cache and its block allocator.
 *
 * Storage. For every layer l, K and V are two arrays of
 * (n_blocks * block_size, kv_dim) elements of dtype (F16 or F32), kv_dim =
 * n_kv_head * head_dim, in the model's arena: the layout colo_op_kv_store
 * and colo_op_attention read (kernels/ops.h). Token position p of a
 * sequence whose block table is table[] lives in slot
 * table[p / block_size] * block_size + p % block_size.
 *
 * Allocation. Blocks are named by ids 0..n_blocks-1. colo_kv_cache_alloc
 * hands out n ids all or nothing (COLO_ENOMEM and nothing taken when fewer
 * are free), colo_kv_cache_release takes them back; a continuous batcher
 * reserves a sequence's blocks at admission, grows them as it decodes, and
 * releases them at finish, cancellation or preemption. Exhaustion is an
 * ordinary status ("not now"), never a crash. Releasing an id that is not
 * held is a bug in the caller and aborts (COLO_ASSERT).
 *
 * Per-sequence tables. colo_kv_table is a sequence's block table on the
 * host: max_blocks = ceil(context_length / block_size) entries, grown block
 * by block as the sequence grows (colo_kv_table_ensure), released in one
 * call.
 *
 * Shared pool (designed, not implemented). The elastic-memory step lets a
 * model's cache borrow blocks beyond its guaranteed memory_fraction, up to
 * memory_max_fraction, from memory other models are not using, and give them
 * back when the owner needs them. The plan keeps this API:
 *   - A cache is created with n_blocks = the borrowable maximum, but only
 *     ids [0, n_own) are backed at first; on CUDA each layer's K/V arrays
 *     are reserved as virtual address space (cuMemAddressReserve) and
 *     physical memory for ids [n_own, n_blocks) is mapped in chunks of
 *     blocks lent by a device-wide pool (cuMemMap); the CPU arena already
 *     commits lazily. Slots keep their meaning, so the ops do not change.
 *   - The allocator hands out owned ids before borrowed ones, so borrowed
 *     chunks empty first when load falls.
 *   - Reclaim: the pool asks a borrower for a chunk back; the cache marks the
 *     chunk's ids unallocatable and reports which are held; the borrower's
 *     batcher preempts the sequences holding them (they are recomputed
 *     later, as for any preemption) at its next step boundary, releases the
 *     ids, and the chunk is unmapped and returned. So callers must already
 *     treat COLO_ENOMEM as transient and hold blocks only through a table
 *     they can release at a step boundary, which the batcher does today.
 *   - The pool is shared between executor threads and will take a lock;
 *     the per-cache free list stays single-threaded.
 *
 * Threads: a cache belongs to one executor thread (alloc/release/tables);
 * the storage pointers may be read by any thread. */
#ifndef COLO_MODELS_KV_CACHE_H
#define COLO_MODELS_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/ops.h"
#include "runtime/arena.h"

#define COLO_KV_DEFAULT_BLOCK_SIZE 16

typedef struct colo_kv_cache_config {
    int n_layer;
    int kv_dim;       /* n_kv_head * head_dim: one token's K (or V) row in one layer */
    int block_size;   /* tokens per block; 0 = COLO_KV_DEFAULT_BLOCK_SIZE */
    int n_blocks;     /* blocks in all */
    colo_dtype dtype; /* COLO_F16 or COLO_F32 */
} colo_kv_cache_config;

typedef struct colo_kv_cache colo_kv_cache;

/* Bytes of one block: K and V of block_size tokens in every layer
 * (0 for an invalid cfg). */
size_t colo_kv_cache_block_bytes(const colo_kv_cache_config *cfg);
/* Bytes of the KV of one token in every layer (K and V). */
size_t colo_kv_cache_token_bytes(int n_layer, int kv_dim, colo_dtype dtype);
/* Blocks needed to hold n_tokens positions. */
int colo_kv_blocks_for(int n_tokens, int block_size);

/* Allocates the storage from arena (one allocation per layer and K/V).
 * NULL with a message: COLO_EINVAL-like for a bad cfg, or naming the bytes
 * needed and free when the arena cannot hold them (nothing stays
 * allocated). */
colo_kv_cache *colo_kv_cache_create(colo_arena *arena, const colo_kv_cache_config *cfg, char *err, size_t errlen);
/* Returns the storage to the arena. Accepts NULL. */
void colo_kv_cache_destroy(colo_kv_cache *c);

const colo_kv_cache_config *colo_kv_cache_config_get(const colo_kv_cache *c);
/* Layer l's K or V array, (n_blocks * block_size, kv_dim) of dtype, a
 * device pointer owned by the cache. */
void *colo_kv_cache_k(const colo_kv_cache *c, int layer);
void *colo_kv_cache_v(const colo_kv_cache *c, int layer);
/* Storage bytes held in the arena. */
size_t colo_kv_cache_bytes(const colo_kv_cache *c);

int colo_kv_cache_n_blocks(const colo_kv_cache *c);
int colo_kv_cache_block_size(const colo_kv_cache *c);
int colo_kv_cache_n_free(const colo_kv_cache *c);
int colo_kv_cache_n_used(const colo_kv_cache *c);

/* Takes n block ids into ids, all or nothing: COLO_ENOMEM (nothing taken)
 * when fewer than n are free; COLO_EINVAL for n < 0. */
colo_status colo_kv_cache_alloc(colo_kv_cache *c, int n, int32_t *ids);
/* Gives back n ids from colo_kv_cache_alloc. */
void colo_kv_cache_release(colo_kv_cache *c, const int32_t *ids, int n);

/* A sequence's block table (host memory, owned by the table). */
typedef struct colo_kv_table {
    int32_t *ids;   /* (max_blocks) block ids; the first n_blocks are held */
    int n_blocks;
    int max_blocks; /* ceil(context length / block_size) */
} colo_kv_table;

/* COLO_EINVAL for max_blocks <= 0, COLO_ENOMEM without host memory. */
colo_status colo_kv_table_init(colo_kv_table *t, int max_blocks);
/* Frees the host array; the blocks must have been released. Accepts NULL. */
void colo_kv_table_free(colo_kv_table *t);
/* Grows t to cover positions [0, n_tokens): all or nothing. COLO_EINVAL when
 * n_tokens exceeds max_blocks * block_size (the context limit), COLO_ENOMEM
 * when the cache has too few free blocks; t is unchanged on either. */
colo_status colo_kv_table_ensure(colo_kv_cache *c, colo_kv_table *t, int n_tokens);
/* Releases every block of t (finish, cancellation, preemption). */
void colo_kv_table_release(colo_kv_cache *c, colo_kv_table *t);
/* The slot of position pos (pos < n_blocks * block_size). */
int32_t colo_kv_table_slot(const colo_kv_table *t, int block_size, int pos);

#endif
