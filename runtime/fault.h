/* runtime/fault.h: fault injection, to prove that a failure inside one
 * model stays inside it (tests, chaos runs). Off unless configured; when
 * off, each check is one relaxed atomic load.
 *
 * The configuration is a list of comma-separated entries
 *
 *     KIND@TARGET[:skip=N][:count=M]
 *
 * read from the environment variable COLO_FAULTS by colo_fault_init() (or
 * given to colo_fault_configure()). TARGET is a model name: the name of its
 * arena, and the label its executor gives its stream once the model is
 * loaded (colo_stream_set_label), so that stream faults never hit a load.
 * The first N matching calls pass (default 0), the next M fail (default 1;
 * count=0 means every call after the skipped ones). KIND is one of:
 *
 *   arena   colo_arena_alloc on the arena fails with COLO_ENOMEM (at load,
 *           the model fails to load);
 *   alloc   a per-request host allocation of the model fails (a sequence's
 *           admission, an encoder batch's buffers): that request gets
 *           COLO_ENOMEM;
 *   launch  an op queued on the model's stream fails with COLO_EDEVICE, as a
 *           kernel with an invalid launch configuration does;
 *   blas    a matrix op (linear, gemm) on the stream fails with COLO_EDEVICE,
 *           as a cuBLAS status error does;
 *   stall   colo_arena_alloc on the arena first sleeps COLO_FAULT_STALL_MS,
 *           as a read from a hung disk or network mount would (at load, the
 *           load hangs that long): for what must never wait on a load;
 *   poison  an op on the stream poisons its device, as an illegal address
 *           does on CUDA: the op fails with COLO_EFATAL and
 *           colo_device_poisoned() is true from then on, for every model on
 *           that device;
 *   kill    the process kills itself (SIGKILL) at the point named TARGET, as
 *           kill -9 would there: "batch_line", just after a batch line's
 *           result is committed (server/batches.c), for tests of a restart.
 *   gone    TARGET is an adapter's name: as a request to it is submitted,
 *           the adapter is removed and freed first (batching/served.c), as
 *           when a DELETE of it lands between the front end finding it and
 *           the model taking the request.
 *
 * Example: COLO_FAULTS="blas@smollm2:skip=3:count=2,arena@minilm". */
#ifndef COLO_RUNTIME_FAULT_H
#define COLO_RUNTIME_FAULT_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/status.h"

/* How long a stall fault sleeps. */
#define COLO_FAULT_STALL_MS 60000

typedef enum colo_fault_kind {
    COLO_FAULT_ARENA = 0,
    COLO_FAULT_ALLOC,
    COLO_FAULT_LAUNCH,
    COLO_FAULT_BLAS,
    COLO_FAULT_POISON,
    COLO_FAULT_STALL,
    COLO_FAULT_KILL,
    COLO_FAULT_GONE,
    COLO_FAULT_KINDS
} colo_fault_kind;

/* Reads COLO_FAULTS (unset or empty: no faults). COLO_EINVAL with a message
 * naming the bad entry. Call once at startup, before other threads run. */
colo_status colo_fault_init(char *err, size_t errlen);
/* Replaces the configuration with spec (NULL or "" turns faults off) and
 * resets the counters. Not safe against concurrent colo_fault_hit calls. */
colo_status colo_fault_configure(const char *spec, char *err, size_t errlen);
/* True when the call of kind on target must fail now (and counts it).
 * target may be NULL (never matches). Any thread. */
bool colo_fault_hit(colo_fault_kind kind, const char *target);
/* Faults of kind fired so far (all targets). */
long colo_fault_fired(colo_fault_kind kind);

#endif
