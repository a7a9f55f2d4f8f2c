/* runtime/cpu_task.h: how the CPU kernels (kernels/cpu) run work on the CPU
 * backend's worker pool. Private to the CPU backend: only runtime/
 * backend_cpu.c, which implements it, and kernels/cpu include it. Every
 * stream passed here must belong to a CPU device. */
#ifndef COLO_RUNTIME_CPU_TASK_H
#define COLO_RUNTIME_CPU_TASK_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/backend.h"

/* One chunk of a CPU op: chunk in [0, n_chunks). Chunks of one op may run on
 * different workers at once; they must write disjoint outputs. */
typedef void (*colo_cpu_task_fn)(const void *args, int chunk, int n_chunks);

#define COLO_CPU_TASK_ARGS_MAX 256

/* Queues fn on s as n_chunks chunks (n_chunks >= 1). args (args_size bytes,
 * at most COLO_CPU_TASK_ARGS_MAX) are copied. Ops on one stream run in order:
 * the next op starts after every chunk of this one finished. Workers take the
 * chunks of the highest-priority ready stream first. */
colo_status colo_cpu_launch(colo_stream *s, colo_cpu_task_fn fn, const void *args, size_t args_size, int n_chunks);

/* Workers this stream's ops may run on (its partition, or the whole pool):
 * a hint for how many chunks to split an op into. */
int colo_cpu_stream_threads(const colo_stream *s);

/* The stream was created with exact_activations, or its device opened with it. */
bool colo_cpu_exact(const colo_stream *s);

/* Index of the calling worker in [0, pool size), or -1 off the pool: lets a
 * chunk use per-worker scratch memory. */
int colo_cpu_worker_index(void);

/* Host side, between launches: a buffer of at least bytes owned by the
 * stream, for passing data between consecutive ops of the stream (a later
 * op reads what an earlier one wrote). Growing it first waits for the
 * stream's queued work. NULL when out of memory. */
void *colo_cpu_stream_scratch(colo_stream *s, size_t bytes);

/* Called from inside a chunk: records st as the stream's error (the first
 * one wins; colo_stream_sync returns it). */
void colo_cpu_task_fail(colo_status st);

#endif
