/* models/cache/prefix_cache.h: the index of the KV cache's reusable blocks.
 *
 * A full block of a sequence (block_size tokens whose K/V are computed) is
 * named by a key that covers its whole prefix: key(block b) =
 * hash(key(block b - 1), tokens of block b), key(block -1) = a seed. A new
 * sequence walks its tokens block by block and reuses every block whose
 * key, parent key and tokens are all found in the index (the tokens and
 * the parent key are stored and compared, so a hash collision costs a
 * miss, never a wrong block).
 *
 * The index only maps keys to block ids; the KV cache (models/cache/kv_cache.h)
 * owns the blocks, their reference counts and the least-recently-used
 * order of the unreferenced ones, and removes a block from the index
 * before it hands its id out again.
 *
 * Host memory only: per block its key, parent key and tokens; one thread
 * (the cache's). */
#ifndef COLO_MODELS_PREFIX_CACHE_H
#define COLO_MODELS_PREFIX_CACHE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct colo_prefix_index colo_prefix_index;

/* The key of the empty prefix (the parent of a sequence's first block). */
#define COLO_PREFIX_ROOT 0x9e3779b97f4a7c15ull

/* The key of a block of n tokens whose prefix before it has key parent. */
uint64_t colo_prefix_key(uint64_t parent, const int32_t *tokens, int n);

/* An index for block ids 0..n_blocks-1 of block_size tokens. NULL when out
 * of host memory or for n_blocks, block_size <= 0. */
colo_prefix_index *colo_prefix_index_create(int n_blocks, int block_size);
void colo_prefix_index_free(colo_prefix_index *p); /* accepts NULL */

/* The block holding key (whose parent key is parent and whose tokens are
 * tokens[0..block_size)), or -1. */
int32_t colo_prefix_index_find(const colo_prefix_index *p, uint64_t key, uint64_t parent, const int32_t *tokens);
/* Names block id by key. False (nothing changes) when another block
 * already holds key or id is indexed already. */
bool colo_prefix_index_insert(colo_prefix_index *p, int32_t id, uint64_t key, uint64_t parent, const int32_t *tokens);
/* Forgets block id (nothing when it is not indexed). */
void colo_prefix_index_remove(colo_prefix_index *p, int32_t id);
bool colo_prefix_index_has(const colo_prefix_index *p, int32_t id);
/* Blocks indexed. */
int colo_prefix_index_count(const colo_prefix_index *p);

#endif
