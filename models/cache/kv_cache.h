/* models/cache/kv_cache.h: a paged KV cache and its block allocator.
 *
 * Storage. For every layer l, K and V are two arrays of
 * (n_blocks * block_size, kv_dim) elements of dtype (F16, F32, or the block
 * types Q8_0 and Q4_0: a row is then kv_dim / 32 blocks of 34 or 18 bytes,
 * quantized once as the token is written), kv_dim = n_kv_head * head_dim,
 * in the model's arena: the layout colo_op_kv_store and colo_op_attention
 * read (kernels/ops.h). Every byte count here (a block's charge, the
 * pages it commits, a fork's copy) is of the stored type. Token position p of a
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
 * Sharing. A handed-out block has a reference count: colo_kv_cache_alloc
 * gives 1, colo_kv_cache_share adds one (sequences forked from one prompt
 * share its full blocks), colo_kv_cache_release drops one, and the block
 * goes back when the last reference does. A block is written only by the
 * one sequence that allocated it, before it is shared: only full blocks
 * whose K/V are computed are ever shared.
 *
 * Prefix cache (colo_kv_cache_prefix_enable; models/cache/prefix_cache.h). A
 * full computed block can be published under the key of its tokens and
 * the prefix before them; a new sequence takes references on the longest
 * run of published blocks that starts its tokens
 * (colo_kv_cache_prefix_match) and computes only the rest. A published
 * block whose last reference goes stays cached, charged and committed;
 * it counts as free (colo_kv_cache_n_free) and is evicted, least recently
 * used first, when an allocation needs it (it leaves the index before its
 * id is handed out again), when the pool has no memory to charge for a
 * free one, or on colo_kv_cache_prefix_evict (a borrower giving memory
 * back evicts cached blocks before it preempts anyone; another model that
 * would borrow from a full pool asks for them, colo_kv_cache_evict_wanted).
 *
 * Per-sequence tables. colo_kv_table is a sequence's block table on the
 * host: max_blocks = ceil(context_length / block_size) entries, grown block
 * by block as the sequence grows (colo_kv_table_ensure), released in one
 * call.
 *
 * Elastic memory. The storage is reserved address space in the model's
 * arena (colo_arena_reserve); a block is charged to the arena when it is
 * handed out and uncharged when it is released. In an elastic arena
 * (runtime/arena.h) the cache is created with n_blocks = what the ceiling
 * holds; blocks past the model's guarantee are borrowed from the device's
 * memory pool; a block's storage is committed when it is handed out and
 * decommitted when it is released (colo_arena_commit/decommit: pages, or
 * 2 MiB chunks on CUDA, are backed while a block uses them). Allocation then has two "not now" answers:
 * COLO_ENOMEM (every block id is taken, or nothing can be borrowed now)
 * and COLO_EAGAIN (within the guarantee: borrowers were asked to give the
 * memory back). When another model needs its guarantee
 * back, colo_kv_cache_reclaim_wanted says how many blocks this cache must
 * give back; the batcher preempts sequences (recomputed later) and
 * releases their blocks at its next step boundary. Slots keep their
 * meaning, so the ops do not change.
 *
 * Threads: a cache belongs to one executor thread (alloc/release/tables);
 * the storage pointers may be read by any thread. */
#ifndef COLO_MODELS_KV_CACHE_H
#define COLO_MODELS_KV_CACHE_H

#include <stdbool.h>
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
    colo_dtype dtype; /* colo_dtype_is_kv: F16, F32, Q8_0, Q4_0 (kv_dim % 32 == 0) */
} colo_kv_cache_config;

typedef struct colo_kv_cache colo_kv_cache;

/* Bytes of one block: K and V of block_size tokens in every layer
 * (0 for an invalid cfg). */
size_t colo_kv_cache_block_bytes(const colo_kv_cache_config *cfg);
/* Bytes of the KV of one token in every layer (K and V); 0 for a dtype
 * that cannot hold a row of kv_dim. */
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
/* Blocks free, counting cached blocks nobody references (evictable). */
int colo_kv_cache_n_free(const colo_kv_cache *c);
int colo_kv_cache_n_used(const colo_kv_cache *c);

/* Takes n block ids into ids, all or nothing: COLO_ENOMEM (nothing taken)
 * when fewer than n are free or the arena's pool has nothing to lend now,
 * COLO_EAGAIN when the pool is taking the guarantee back from borrowers;
 * COLO_EINVAL for n < 0. */
colo_status colo_kv_cache_alloc(colo_kv_cache *c, int n, int32_t *ids);
/* Drops one reference of each of n ids (from colo_kv_cache_alloc, _share
 * or _prefix_match); a block whose last reference goes is free again, or
 * stays cached when it is published. */
void colo_kv_cache_release(colo_kv_cache *c, const int32_t *ids, int n);
/* Takes one more reference on each of n held ids. */
void colo_kv_cache_share(colo_kv_cache *c, const int32_t *ids, int n);
/* References of block id now (0: free or cached only). */
int colo_kv_cache_refs(const colo_kv_cache *c, int32_t id);
/* Copies the K/V of the first n_tokens slots of block src into block dst
 * in every layer, on stream s (a forked sequence's private copy of a
 * partly filled block). COLO_EINVAL for bad ids. */
colo_status colo_kv_cache_copy(colo_kv_cache *c, colo_stream *s, int32_t dst, int32_t src, int n_tokens);

/* Turns the prefix cache on (its index in host memory; COLO_ENOMEM). */
colo_status colo_kv_cache_prefix_enable(colo_kv_cache *c);
bool colo_kv_cache_prefix_enabled(const colo_kv_cache *c);
/* The longest run of published blocks that starts tokens[0..n_tokens), at
 * most max_blocks: a reference on each goes into ids; returns how many.
 * *last_key (may be NULL) gets the key of the last one (COLO_PREFIX_ROOT
 * for none). 0 when the prefix cache is off. */
int colo_kv_cache_prefix_match(colo_kv_cache *c, const int32_t *tokens, int n_tokens, int max_blocks, int32_t *ids,
                               uint64_t *last_key);
/* The same for a chain whose root key is root (COLO_PREFIX_ROOT: the one
 * above): blocks computed under another root (another LoRA adapter's
 * sequences) are never found. */
int colo_kv_cache_prefix_match_from(colo_kv_cache *c, uint64_t root, const int32_t *tokens, int n_tokens,
                                    int max_blocks, int32_t *ids, uint64_t *last_key);
/* Publishes held block id as the block_size tokens after the prefix whose
 * key is parent; returns the block's key (also when the prefix cache is
 * off, or another block holds the key already: id then stays private). */
uint64_t colo_kv_cache_prefix_publish(colo_kv_cache *c, int32_t id, uint64_t parent, const int32_t *tokens);
/* Evicts up to n cached blocks nobody references (least recently used
 * first): they become free (uncharged, decommitted). Returns how many. */
int colo_kv_cache_prefix_evict(colo_kv_cache *c, int n);
/* Cached blocks the arena's pool asks this cache to drop (another model
 * would borrow them): evict them with colo_kv_cache_prefix_evict. An
 * elastic arena hears of the cache's evictable blocks as they change
 * (colo_arena_set_evictable). */
int colo_kv_cache_evict_wanted(const colo_kv_cache *c);
/* Evicts cached blocks nobody references while the arena is charged past
 * its guarantee (an idle model keeps no borrowed memory for its cache,
 * since it takes no step that would give it back). Returns how many. */
int colo_kv_cache_prefix_trim(colo_kv_cache *c);
/* Published blocks (referenced or not), of which nobody references, and
 * evictions so far. */
int colo_kv_cache_n_cached(const colo_kv_cache *c);
int colo_kv_cache_n_evictable(const colo_kv_cache *c);
uint64_t colo_kv_cache_n_evicted(const colo_kv_cache *c);

/* Blocks the arena's pool asks this cache to give back now (0: none). */
int colo_kv_cache_reclaim_wanted(const colo_kv_cache *c);
/* Counts n blocks given back on the pool's request (for metrics). */
void colo_kv_cache_count_reclaimed(colo_kv_cache *c, int n_blocks);
uint64_t colo_kv_cache_reclaimed(const colo_kv_cache *c);

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
/* Drops t's reference on each of its blocks (finish, cancellation, preemption). */
void colo_kv_table_release(colo_kv_cache *c, colo_kv_table *t);
/* The slot of position pos (pos < n_blocks * block_size). */
int32_t colo_kv_table_slot(const colo_kv_table *t, int block_size, int pos);

#endif
