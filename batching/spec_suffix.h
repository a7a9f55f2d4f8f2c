/* batching/spec_suffix.h: a model's suffix cache, drafting tokens for
 * speculative decoding from the model's recent outputs.
 *
 * Text a model writes again and again (the same JSON keys, a reply's
 * boilerplate, a document quoted by one request after another) is in no
 * single request's prompt, so prompt lookup (batching/spec.h) cannot draft
 * it. The suffix cache keeps the latest outputs of the model's finished
 * sequences, each under its tenant, and drafts for a sequence what followed
 * the longest match of its last tokens in an earlier output of the same
 * tenant. A tenant never sees another's outputs: every stored token carries
 * its tenant's tag, a lookup follows only its own tenant's, and the text of
 * a tenant is compared byte for byte when it is tagged, never trusted to a
 * hash.
 *
 * Memory is fixed when the cache is made: a ring of tokens, the oldest
 * overwritten by the newest (bytes: colo_spec_suffix_bytes). An index of
 * every COLO_SPEC_SUFFIX_NGRAM tokens (hashed with the tenant's tag,
 * chained from the latest) finds candidates in O(1); a lookup weighs at
 * most COLO_SPEC_SUFFIX_WALK of them.
 *
 * Not thread-safe: one engine (its thread) owns a cache. */
#ifndef COLO_BATCHING_SPEC_SUFFIX_H
#define COLO_BATCHING_SPEC_SUFFIX_H

#include <stddef.h>
#include <stdint.h>

/* The indexed match: a draft follows at least this many tokens matched. */
#define COLO_SPEC_SUFFIX_NGRAM 3
/* A match is measured back at most this far (its length decides between candidates). */
#define COLO_SPEC_SUFFIX_MAX_MATCH 32
/* Candidates a lookup weighs at most. */
#define COLO_SPEC_SUFFIX_WALK 32
/* Tenants known at once; the least recently stored one is forgotten for a new one. */
#define COLO_SPEC_SUFFIX_TENANTS 256
/* A tenant's name (organization/project), bytes with the NUL. */
#define COLO_SPEC_SUFFIX_TENANT_LEN 136
/* The smallest ring (tokens). */
#define COLO_SPEC_SUFFIX_MIN_TOKENS 256
/* A model's cache's memory (config speculative.suffix_memory_bytes): the
 * default (131072 tokens), and the least and most it may be given. */
#define COLO_SPEC_SUFFIX_DEFAULT_BYTES (4ull << 20)
#define COLO_SPEC_SUFFIX_MIN_BYTES (64ull << 10)
#define COLO_SPEC_SUFFIX_MAX_BYTES (1ull << 30)

typedef struct colo_spec_suffix colo_spec_suffix;

/* A cache in at most max_bytes of memory (the ring is the largest power of
 * two of tokens that fits with its index and tenant table, at least
 * COLO_SPEC_SUFFIX_MIN_TOKENS); NULL when out of memory. */
colo_spec_suffix *colo_spec_suffix_create(size_t max_bytes);
/* Accepts NULL. */
void colo_spec_suffix_free(colo_spec_suffix *c);
/* The bytes c holds (all allocated at create). */
size_t colo_spec_suffix_bytes(const colo_spec_suffix *c);
/* The tokens its ring holds at most (outputs and one separator after each). */
int colo_spec_suffix_capacity(const colo_spec_suffix *c);

/* The tag of a tenant (NULL or "": the tenant of requests without one),
 * for colo_spec_suffix_lookup; 0 when the name is longer than
 * COLO_SPEC_SUFFIX_TENANT_LEN - 1 bytes (such a tenant neither stores nor
 * drafts). Tags are never reused: a tenant forgotten (more than
 * COLO_SPEC_SUFFIX_TENANTS since) gets a new one, and its old outputs are
 * found no more. */
uint32_t colo_spec_suffix_tenant(colo_spec_suffix *c, const char *tenant);

/* Stores an output of n tokens (ids >= 0) under tenant: the oldest tokens
 * make room; an output longer than the ring keeps its last tokens. */
void colo_spec_suffix_add(colo_spec_suffix *c, const char *tenant, const int32_t *tokens, int n);

/* Up to k tokens into out that followed, in an output of the tenant tagged
 * tag, the longest match (COLO_SPEC_SUFFIX_NGRAM tokens or more, the
 * latest first among equals) of the end of tokens[0..n_tokens); *match gets
 * its length. Returns how many (0: none). */
int colo_spec_suffix_lookup(const colo_spec_suffix *c, uint32_t tag, const int32_t *tokens, int n_tokens, int k,
                            int32_t *out, int *match);

#endif
