/* batching/queue.h: a model's request queue.
 *
 * Requests wait here between the HTTP loop (producer) and the model's
 * executor (consumer). Three priority levels and, below them, the batch
 * class (colo_queue_item.batch); within a level, weighted fair
 * queueing between share classes (tenants): the next item is the oldest of
 * the class whose recent use (tokens of the items taken, decayed with a
 * half-life of COLO_QUEUE_SHARE_HALFLIFE_NS) divided by its weight is the
 * lowest, so a class that floods the queue cannot starve another; FIFO
 * within a class, and so FIFO when every item is of one class. A bounded
 * length (the caller answers 429 past it); a deadline per request; removal
 * of a queued request when its client goes away.
 *
 * Items are intrusive: the request embeds a colo_queue_item and keeps
 * ownership of it. Thread safety: every function may be called from any
 * thread. */
#ifndef COLO_BATCHING_QUEUE_H
#define COLO_BATCHING_QUEUE_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/backend.h"
#include "runtime/clock.h" /* colo_now_ns: the queue's time base */

#define COLO_QUEUE_MAX_CLASSES 256
#define COLO_QUEUE_SHARE_HALFLIFE_NS (30ull * 1000 * 1000 * 1000)

typedef struct colo_queue_item {
    struct colo_queue_item *prev, *next; /* owned by the queue while queued */
    colo_priority priority;
    uint64_t enqueue_ns;  /* monotonic time of push (set by push) */
    uint64_t deadline_ns; /* monotonic deadline; 0 = none */
    int length;           /* work size used to group batches (tokens); >= 0 */
    bool queued;
    void *owner;          /* the request this item belongs to */
    /* Fair share between tenants (set by the caller; zeroes: one class,
     * weight 1): items of one priority are served in the order of their
     * class's recent use divided by its weight (see colo_queue_pop). */
    int share_class;      /* [0, COLO_QUEUE_MAX_CLASSES); others share the last */
    double share_weight;  /* > 0; <= 0 counts as 1 */
    int share_extra;      /* cost beyond length (a generation's max_tokens), in tokens */
    /* The batch class (a line of a batch, POST /v1/batches): below every
     * priority, taken only when no other item waits. */
    bool batch;
} colo_queue_item;

typedef struct colo_queue colo_queue;

/* max_len: items queued at most (> 0). NULL when out of memory. */
colo_queue *colo_queue_create(int max_len);
/* The queue must be empty. Accepts NULL. */
void colo_queue_destroy(colo_queue *q);

/* Queues it (priority, deadline_ns, length, owner set by the caller).
 * COLO_EAGAIN when the queue is full or closed; it is then untouched.
 * Items of the batch class count against the bounds (max_len, max tokens)
 * for batch items only: an interactive item is refused for the interactive
 * items queued, never for the batch's. */
colo_status colo_queue_push(colo_queue *q, colo_queue_item *it);
/* Removes and returns the next item of the highest priority (the fair
 * share's choice, see above), or NULL. Its class is charged its length +
 * share_extra. */
colo_queue_item *colo_queue_pop(colo_queue *q);
/* As colo_queue_pop, but never an item of the batch class: what an
 * executor whose places the batch class has filled may still take. */
colo_queue_item *colo_queue_pop_interactive(colo_queue *q);
/* The decayed use of share_class (tokens) at now_ns; for tests. */
double colo_queue_share_use(colo_queue *q, int share_class, uint64_t now_ns);
/* Removes it if it is still queued; true when it was. */
bool colo_queue_remove(colo_queue *q, colo_queue_item *it);
/* Removes up to max items whose deadline passed by now_ns into out; returns how many. */
int colo_queue_take_expired(colo_queue *q, uint64_t now_ns, colo_queue_item **out, int max);

/* Batch formation for encoders (the dynamic batcher): see colo_queue_form_batch. */
typedef struct colo_batch_policy {
    int max_batch_size;          /* >= 1 */
    const int *preferred_sizes;  /* ascending; may be NULL */
    int n_preferred;
    uint64_t max_queue_delay_ns; /* longest the oldest item waits for a fuller batch */
} colo_batch_policy;

/* Forms a batch at time now_ns:
 *  - when max_batch_size items are queued, or the largest preferred size
 *    that is reached, or the oldest item has waited max_queue_delay_ns,
 *    removes up to max_batch_size items into out and returns their count;
 *    the highest-priority oldest item anchors the batch and the rest are the
 *    items whose length is closest to it (less padding), by priority first;
 *  - otherwise returns 0 and sets *wait_ns to the time until the oldest
 *    item's delay runs out (UINT64_MAX when the queue is empty). */
int colo_queue_form_batch(colo_queue *q, const colo_batch_policy *p, uint64_t now_ns, colo_queue_item **out,
                          uint64_t *wait_ns);

int colo_queue_len(colo_queue *q);
int colo_queue_len_prio(colo_queue *q, colo_priority prio);
/* Items queued that are not of the batch class. */
int colo_queue_len_interactive(colo_queue *q);
int colo_queue_max_len(const colo_queue *q);
/* Calls fn(it, ud) on every queued item, under the queue's lock: fn must
 * not call the queue (an item's owner stays alive while it is queued, since
 * it leaves the queue before it is freed). */
void colo_queue_visit(colo_queue *q, void (*fn)(const colo_queue_item *it, void *ud), void *ud);
/* Bounds the sum of the queued items' lengths (tokens): a push past it is
 * COLO_EAGAIN, except into an empty queue. 0 = no bound (the default). */
void colo_queue_set_max_tokens(colo_queue *q, int64_t max_tokens);
/* The sum of the queued items' lengths. */
int64_t colo_queue_tokens(colo_queue *q);

/* Waits until the queue is non-empty, colo_queue_wake is called, or
 * timeout_ns passes (UINT64_MAX = no timeout). True when non-empty. */
bool colo_queue_wait(colo_queue *q, uint64_t timeout_ns);
/* Wakes a thread blocked in colo_queue_wait (e.g. for shutdown or new work elsewhere). */
void colo_queue_wake(colo_queue *q);
/* Refuses further pushes (COLO_EAGAIN) and wakes waiters. */
void colo_queue_close(colo_queue *q);
bool colo_queue_closed(colo_queue *q);

#endif
