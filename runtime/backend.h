/* runtime/backend.h: the device-independent runtime interface.
 *
 * A device is one compute device (the CPU with colo's worker pool, or one
 * CUDA GPU). Memory comes from buffers (one big device allocation each; an
 * arena, runtime/arena.h, sub-allocates one). Work runs on streams: in-order
 * queues with a priority. Events mark points in a stream.
 *
 * Model code never knows which backend it runs on: it calls these functions
 * and the ops of kernels/ops.h. Backends implement runtime/backend_impl.h.
 *
 * Threads: a device may be used from many threads. A stream is used by one
 * thread at a time (its owner, normally a model's executor). Pointers into
 * device memory are only dereferenced on the host for the CPU backend; use
 * colo_memcpy_* to move data. */
#ifndef COLO_RUNTIME_BACKEND_H
#define COLO_RUNTIME_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/status.h"

typedef struct colo_device colo_device;
typedef struct colo_buffer colo_buffer;
typedef struct colo_stream colo_stream;
typedef struct colo_event colo_event;

typedef enum colo_backend_kind { COLO_BACKEND_CPU = 0, COLO_BACKEND_CUDA = 1 } colo_backend_kind;

/* Config priorities. LOW is best-effort. */
typedef enum colo_priority { COLO_PRIO_LOW = 0, COLO_PRIO_NORMAL = 1, COLO_PRIO_HIGH = 2 } colo_priority;
/* Their names, indexed by colo_priority and ended by NULL: "low", "normal",
 * "high" (runtime/priority.c). */
extern const char *const colo_priority_names[];
colo_status colo_priority_parse(const char *s, colo_priority *out);
/* "normal" for a value that is no priority. */
const char *colo_priority_name(colo_priority p);

typedef struct colo_device_config {
    const char *want;        /* "auto" (CUDA when a GPU is present, else CPU), "cpu" or "cuda"; NULL = auto */
    int cpu_threads;         /* CPU worker pool size; 0 = number of online cores */
    size_t cpu_memory_bytes; /* CPU arena budget; 0 = physical memory */
    size_t gpu_memory_bytes; /* CUDA arena budget; 0 = the device's memory */
    int cuda_device;         /* CUDA device ordinal */
    bool exact_activations;  /* never round activations to 8 bits in matrix products, on any
                                stream (slower; for validation against exact references) */
    bool cuda_graphs;        /* CUDA: decode steps recorded and launched as graphs
                                (colo_stream_graph_begin); off by default */
} colo_device_config;

typedef struct colo_device_info {
    char name[128];
    colo_backend_kind kind;
    size_t total_bytes;    /* the memory budget: the configured one, or the device's (CPU: physical) memory */
    size_t free_bytes;     /* free now (CPU: budget minus what colo's buffers hold) */
    int prio_least;        /* native stream priority range; CUDA: least is numerically largest */
    int prio_greatest;
    int compute_units;     /* SMs (CUDA) or worker threads (CPU) */
    bool can_partition;    /* disjoint compute-unit sets per stream are supported */
    char pci_bus_id[32];   /* CUDA: "domain:bus:device.0" in hex, the form NVML looks devices up by; CPU: "" */
} colo_device_info;

/* ---- devices (runtime/registry.c) ---------------------------------------- */

/* Opens a device as cfg->want says. Returns NULL with a message in err when
 * the wanted backend is not built or no such device exists. The caller owns
 * the device and closes it after every stream, event and buffer made from it. */
colo_device *colo_device_open(const colo_device_config *cfg, char *err, size_t errlen);
void colo_device_close(colo_device *dev);

colo_status colo_device_get_info(colo_device *dev, colo_device_info *info);
colo_backend_kind colo_device_kind(const colo_device *dev);
/* True when a CUDA device is usable in this process (built with CUDA, driver present, >= 1 GPU). */
bool colo_cuda_available(void);
/* True once a device error poisoned dev's context (CUDA: an illegal address,
 * a device-side assert, an ECC error...). Nothing on dev can run again in
 * this process: every later call on it fails with COLO_EFATAL. Always false
 * on the CPU. Any thread. */
bool colo_device_poisoned(const colo_device *dev);

/* The CPU time (ns, CLOCK_THREAD_CPUTIME) each worker of dev's pool has
 * used since it started, into ns[0 .. min(n, max)). Returns n, the number
 * of workers (0 on backends without a host worker pool: CUDA). Reads the
 * threads' clocks only; costs the workers nothing. Any thread. */
int colo_device_worker_cpu_ns(colo_device *dev, uint64_t *ns, int max);

/* Where a host worker pool's time went since the device opened (the CPU
 * backend; docs/SCHEDULING.md, "Where the time goes"). Every worker's wall
 * time is busy or idle in one of three states, so
 * busy + ready + barrier + starved = n_workers x wall_ns (worker
 * nanoseconds, integrated at every change of the pool's state):
 *  - busy: running a chunk of an op;
 *  - ready: idle while a chunk it could take was waiting (the time to wake
 *    a sleeping worker and hand the chunk out);
 *  - barrier: idle while ops were queued but every chunk of each stream's
 *    current op was handed out: waiting for an op's last chunks, since a
 *    stream's next op starts only when its current one has finished;
 *  - starved: idle with no op queued on any stream: the hosts' own work
 *    between steps (sampling, batching, the HTTP side), or no work at all. */
typedef struct colo_worker_stats {
    int n_workers;
    uint64_t wall_ns;
    uint64_t busy_ns, ready_ns, barrier_ns, starved_ns;
    uint64_t ops;         /* ops (tasks) finished */
    uint64_t chunks;      /* chunks run */
    uint64_t lock_waits;  /* acquisitions of the pool's lock that had to wait */
    uint64_t lock_wait_ns; /* the time they waited */
} colo_worker_stats;
/* COLO_OK and out filled, or COLO_EUNSUPPORTED where the device has no
 * host worker pool (CUDA). Any thread. */
colo_status colo_device_worker_stats(colo_device *dev, colo_worker_stats *out);

/* Best-effort floor (policy priority, scheduler.best_effort_min_share): while
 * best-effort streams (priority LOW) have work, dev gives them at least
 * min_share of its time, in [0, 1); 0 (the default) = strict priority. The
 * CPU pool accounts worker time per chunk (the workers' CPU time, so that
 * other processes taking the cores do not count), as policy fair does: a clock per
 * class (best-effort: time / min_share, the rest: time / (1 - min_share)),
 * a class without work at most COLO_FLOOR_LAG_NS behind the other (no
 * credit banked while idle), and a best-effort chunk goes first while its
 * clock is behind. COLO_EUNSUPPORTED where the device
 * keeps no such account (CUDA: the co-scheduler accounts step time). Set
 * before streams run work. */
colo_status colo_device_set_best_effort_floor(colo_device *dev, double min_share);
/* 1 while best-effort streams are below their floor on dev (they may run
 * beside higher work), 0 when not, -1 when dev keeps no account (no floor
 * set, or a backend without one). Any thread. */
int colo_device_best_effort_owed(colo_device *dev);
#define COLO_FLOOR_LAG_NS 20000000ull

/* ---- buffers ---------------------------------------------------------------- */

/* Allocates bytes of device memory in one piece (CUDA: one cudaMalloc; CPU:
 * reserved address space committed lazily on first touch). Returns NULL with
 * err set on failure. */
colo_buffer *colo_buffer_alloc(colo_device *dev, size_t bytes, char *err, size_t errlen);
void colo_buffer_free(colo_buffer *buf); /* accepts NULL */
/* Host memory that copies to and from dev run from at full speed, without
 * staging (CUDA: page-locked; elsewhere plain malloc). For buffers a stream
 * copies into every step (logits). NULL when out of memory; free with
 * colo_host_free on the same device (accepts NULL). */
void *colo_host_alloc(colo_device *dev, size_t bytes);
void colo_host_free(colo_device *dev, void *p);
/* Address space for memory committed as it is used, not counted against
 * the device's budget (an elastic arena's ceiling; its pool keeps the
 * budget). Backends without such a reservation allocate as
 * colo_buffer_alloc does. */
colo_buffer *colo_buffer_reserve(colo_device *dev, size_t bytes, char *err, size_t errlen);
/* Whether colo_buffer_reserve takes address space only on dev (CPU; CUDA
 * with the driver's virtual memory management). */
bool colo_device_can_reserve(const colo_device *dev);
void *colo_buffer_ptr(const colo_buffer *buf);
size_t colo_buffer_size(const colo_buffer *buf);
/* On-demand memory of a buffer from colo_buffer_reserve, in whole chunks of
 * colo_buffer_granularity bytes (CPU: a page; CUDA: the allocation
 * granularity, 2 MiB): offset and bytes are multiples of it (the arena
 * counts users per chunk and calls these on the first and last).
 * commit backs [offset, offset + bytes) with physical memory (CPU: nothing
 * to do, a page is backed on first touch; CUDA: cuMemCreate + cuMemMap);
 * COLO_ENOMEM when the device has none. decommit gives it back; its
 * contents are lost (CPU: madvise(MADV_DONTNEED), the pages read as zero
 * again; CUDA: cuMemUnmap + cuMemRelease). Backends without on-demand
 * memory do nothing. */
size_t colo_buffer_granularity(const colo_buffer *buf);
colo_status colo_buffer_commit(colo_buffer *buf, size_t offset, size_t bytes);
void colo_buffer_decommit(colo_buffer *buf, size_t offset, size_t bytes);

/* ---- streams ------------------------------------------------------------------ */

typedef struct colo_stream_config {
    colo_priority priority;
    /* Compute-unit partition (policy "partition"): run only on units
     * [unit_first, unit_first + unit_count). unit_count 0 = all units. */
    int unit_first;
    int unit_count;
    /* Weighted fair sharing (policy "fair"): among streams of the same
     * priority that have work, the CPU pool hands out chunks so that each
     * stream's worker time is in proportion to its share (0 = 1); a stream
     * without work leaves its part to the others. CUDA streams ignore it. */
    double share;
    /* Never round this stream's activations to 8 bits in matrix products:
     * exact F32 products, as a device opened with exact_activations gives
     * every stream (a model's option; slower prefill and decode). */
    bool exact_activations;
} colo_stream_config;

colo_stream *colo_stream_create(colo_device *dev, const colo_stream_config *cfg, char *err, size_t errlen);
void colo_stream_destroy(colo_stream *s); /* waits for queued work; accepts NULL */
colo_device *colo_stream_device(const colo_stream *s);
colo_priority colo_stream_priority(const colo_stream *s);
/* Marks the ops queued next on s (until changed) as a decode step: every
 * row of an activation is a different sequence's one new token. The CPU
 * backend then gives up to 8 such rows the 8-bit activations it gives a
 * single row, so each sequence gets the numerics it would get alone (and
 * batched decode avoids expanding every weight to F32). The owner's thread. */
/* Earliest deadline first (policy deadline): the deadline (monotonic ns) of
 * the most urgent request in the work queued next on s, and its weight (the
 * model's priority: 1 low, 2 normal, 4 high); deadline_ns 0 = none. The CPU
 * pool hands chunks, among streams of equal priority, to the one with the
 * least weighted slack ((deadline - now) / weight, or times weight once
 * late); streams with no deadline come after, among themselves by share.
 * CUDA streams ignore it. The owner's thread. */
void colo_stream_set_deadline(colo_stream *s, uint64_t deadline_ns, double weight);
void colo_stream_set_decode(colo_stream *s, bool decode);
bool colo_stream_decode(const colo_stream *s);
/* A mixed step (a prompt's chunk beside running decodes): the first n rows
 * of every activation in the ops queued next on s are decode rows, each a
 * different sequence's one new token, and the rest a prefill's. The CPU
 * backend computes the decode rows' products as in a decode step of n
 * rows, and the others as a prefill's, so a sequence's decode numerics do
 * not depend on whether a prompt shares its step. 0: none (a prefill);
 * colo_stream_set_decode(s, true) marks every row. colo_stream_decode is
 * true only when every row is a decode row. The owner's thread. */
void colo_stream_set_decode_rows(colo_stream *s, int n);
int colo_stream_decode_rows(const colo_stream *s);
/* Names the stream's owner (a model), for logs and fault injection
 * (runtime/fault.h); NULL or "" clears it. colo_stream_label is NULL when
 * unset. The owner's thread. */
void colo_stream_set_label(colo_stream *s, const char *label);
const char *colo_stream_label(const colo_stream *s);
/* What a stream's work cost since it was created. ops, chunks and busy_ns
 * come from the CPU pool (0 elsewhere); sync_wait_ns is the host's time in
 * colo_stream_sync on any device, so a step's time less the sync wait in it
 * is the host's own work in the step. Any thread (the figures are read
 * without a lock, each one whole). */
typedef struct colo_stream_stats {
    uint64_t ops;          /* ops finished */
    uint64_t chunks;       /* chunks run */
    uint64_t busy_ns;      /* worker time on its chunks */
    uint64_t syncs;        /* colo_stream_sync calls */
    uint64_t sync_wait_ns; /* time the host spent in them */
    uint64_t sync_wakeups; /* CPU: times a sync asleep on the stream was woken (once per drain) */
} colo_stream_stats;
void colo_stream_get_stats(colo_stream *s, colo_stream_stats *out);
/* Waits until all work queued on s has finished. Returns the first error any
 * of it hit since the last synchronize (and clears it), else COLO_OK. */
colo_status colo_stream_sync(colo_stream *s);
/* COLO_OK when all queued work finished, COLO_EAGAIN while some is pending. */
colo_status colo_stream_query(colo_stream *s);
/* Gives the stream's math library caller-owned device memory as its
 * workspace (CUDA: cuBLAS, through cublasSetWorkspace), so that an arena can
 * account for it. ptr (aligned to 256 bytes) must stay valid until the
 * stream is destroyed or given another workspace; ptr NULL with bytes 0
 * takes the workspace away (the library then picks algorithms that need
 * none). A no-op returning COLO_OK on backends without one (CPU). Called by
 * the stream's owner between ops. */
colo_status colo_stream_set_workspace(colo_stream *s, void *ptr, size_t bytes);

/* Steps as graphs (CUDA, with colo_device_config.cuda_graphs): the work
 * queued on s between colo_stream_graph_begin and colo_stream_graph_end is
 * recorded, not run, and end launches it as one graph, so a step costs one
 * launch instead of one per kernel. s keeps the graphs of its last
 * COLO_STREAM_GRAPHS keys; a recording under a kept key updates that graph
 * in place (the same kernels with other arguments), else a new one is
 * built. begin: COLO_EUNSUPPORTED where graphs are off or the device has
 * none (queue the work as usual). end(s, key): launches; key < 0 throws the
 * recording away (an op failed while it was recorded). When end fails,
 * nothing of the recording ran: queue the work again without a graph. Only
 * the thread that called begin may queue work on s until end. */
#define COLO_STREAM_GRAPHS 8
colo_status colo_stream_graph_begin(colo_stream *s);
colo_status colo_stream_graph_end(colo_stream *s, int key);
/* Graphs launched on s so far (0 where there are none). */
uint64_t colo_stream_graphs_launched(const colo_stream *s);

/* Asynchronous copies and fills, ordered on s. Host memory must stay valid
 * until the stream is synchronized. */
colo_status colo_memcpy_h2d(colo_stream *s, void *dst_dev, const void *src_host, size_t bytes);
colo_status colo_memcpy_d2h(colo_stream *s, void *dst_host, const void *src_dev, size_t bytes);
colo_status colo_memcpy_d2d(colo_stream *s, void *dst_dev, const void *src_dev, size_t bytes);
colo_status colo_memset(colo_stream *s, void *dst_dev, int byte, size_t bytes);

/* ---- events ------------------------------------------------------------------- */

colo_event *colo_event_create(colo_device *dev, char *err, size_t errlen);
void colo_event_destroy(colo_event *ev); /* accepts NULL */
/* Marks the point in s after all work queued so far. */
colo_status colo_event_record(colo_event *ev, colo_stream *s);
/* COLO_OK once the marked work finished, COLO_EAGAIN before. */
colo_status colo_event_query(colo_event *ev);
colo_status colo_event_sync(colo_event *ev);
/* Milliseconds between two recorded, finished events. */
colo_status colo_event_elapsed_ms(colo_event *start, colo_event *end, float *ms);

#endif
