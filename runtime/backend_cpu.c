/* The CPU backend: a worker pool running ops as chunks from priority streams.
 *
 * Each stream is an in-order list of tasks. A task is split into chunks;
 * every free worker takes the next chunk of the highest-priority stream whose
 * head task still has chunks to hand out and whose partition includes the
 * worker (equal priorities take turns). A stream's next task starts only when
 * every chunk of its head task finished. One mutex guards the pool: chunks
 * are coarse (a slice of an op), so it is taken a few times per chunk. */
#include "runtime/backend_impl.h"
#include "runtime/clock.h"
#include "runtime/cpu_task.h"
#include "runtime/log.h"

#include <cblas.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct cpu_task {
    struct cpu_task *next;
    colo_cpu_task_fn fn;
    int n_chunks;
    int next_chunk; /* next chunk to hand out */
    int done_chunks;
    _Alignas(16) unsigned char args[COLO_CPU_TASK_ARGS_MAX];
} cpu_task;

typedef struct cpu_stream {
    colo_stream *s;
    struct cpu_pool *pool;
    cpu_task *head, *tail; /* queued tasks, head running */
    cpu_task *free_tasks;  /* reused task nodes */
    int prio;
    int unit_first, unit_count;
    double share;       /* weight among streams of its priority (> 0) */
    double vtime;       /* worker nanoseconds used / share: the fair picker's clock (under mu) */
    bool active;        /* had work at the last pick (under mu) */
    uint64_t deadline_ns; /* colo_stream_set_deadline; 0 = none (under mu) */
    double dl_weight;     /* its weight, > 0 */
    void *scratch;      /* colo_cpu_stream_scratch */
    size_t scratch_bytes;
    uint64_t enqueued;  /* tasks queued since creation (written under mu, atomically: sync polls it) */
    uint64_t completed; /* tasks finished (likewise) */
    uint64_t chunks_run, busy_ns; /* colo_stream_get_stats (under mu) */
    uint64_t sync_wakeups;        /* likewise */
    colo_status err;    /* first error since the last sync */
} cpu_stream;

/* What idle workers wait for (colo_worker_stats). */
enum { IDLE_READY, IDLE_BARRIER, IDLE_STARVED };

typedef struct cpu_pool {
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* workers wait for chunks */
    pthread_cond_t done_cv;  /* event waiters: every op's end */
    pthread_cond_t drain_cv; /* stream sync waiters: a stream's last queued op's end */
    int done_waiters, drain_waiters; /* threads waiting on each (under mu): nobody, no wake-up */
    int n_threads;
    pthread_t *threads;
    bool stop;
    cpu_stream **streams;
    int n_streams, cap_streams;
    unsigned rr; /* rotates ties between equal priorities */
    unsigned work_gen; /* bumped on every launch and completion (atomic) */
    int sleepers;      /* workers blocked on work_cv */
    size_t budget_bytes;
    size_t held_bytes;
    bool exact;
    /* Best-effort floor (colo_device_set_best_effort_floor): each class's
     * worker time over its part; a best-effort chunk goes first while
     * be_clock < hi_clock. */
    double floor;    /* 0 = strict priority */
    double be_clock, hi_clock;
    /* Where the workers' time goes (colo_device_worker_stats): the
     * integrals advance under mu at every change of the pool's state. */
    uint64_t open_ns, acct_ns; /* when the pool opened; the last advance */
    int running;               /* chunks running now */
    int idle_state;            /* what an idle worker waits for now (IDLE_*) */
    uint64_t busy_ns, idle_ns[3];
    uint64_t ops, chunks, lock_waits, lock_wait_ns;
    char name[128];
} cpu_pool;

/* Pause iterations a worker or a waiter polls before it sleeps (~20-50 us):
 * ops of a forward pass come every few microseconds, and a condition-variable
 * wake-up costs about as much as a small op. Past that, an idle pool sleeps. */
#define SPIN_ITERS 2000

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Pause iterations a thread polls a held pool lock before it blocks on it
 * (a few microseconds at most): the lock is held for well under a
 * microsecond at a time, while blocking costs a futex sleep and wake-up,
 * on the waiter's side and on the holder's, each several microseconds. */
#define LOCK_SPINS 256

/* The pool's lock, counting the acquisitions that had to wait. */
static void pool_lock(cpu_pool *p)
{
    if (pthread_mutex_trylock(&p->mu) == 0)
        return;
    uint64_t t0 = colo_now_ns();
    int spin = 0;
    for (; spin < LOCK_SPINS; spin++) {
        cpu_relax();
        if ((spin & 7) == 7 && pthread_mutex_trylock(&p->mu) == 0)
            break;
    }
    if (spin == LOCK_SPINS)
        pthread_mutex_lock(&p->mu);
    p->lock_waits++;
    p->lock_wait_ns += colo_now_ns() - t0;
}

/* Advances the time integrals to now, under mu, before a change. */
static void account(cpu_pool *p)
{
    uint64_t now = colo_now_ns();
    if (now <= p->acct_ns)
        return;
    uint64_t dt = now - p->acct_ns;
    p->busy_ns += dt * (uint64_t)p->running;
    p->idle_ns[p->idle_state] += dt * (uint64_t)(p->n_threads - p->running);
    p->acct_ns = now;
}

/* What an idle worker waits for after a change, under mu: a chunk handed
 * out, an op's last chunks (ops queued, none to hand out), or the host. */
static void classify(cpu_pool *p)
{
    int st = IDLE_STARVED;
    for (int k = 0; k < p->n_streams && st != IDLE_READY; k++) {
        const cpu_task *t = p->streams[k]->head;
        if (t)
            st = t->next_chunk < t->n_chunks ? IDLE_READY : IDLE_BARRIER;
    }
    p->idle_state = st;
}

static _Thread_local int tls_worker = -1;
static _Thread_local cpu_stream *tls_stream;

int colo_cpu_worker_index(void) { return tls_worker; }

static void colo_cpu_stream_record(cpu_stream *cs, colo_status st)
{
    pool_lock(cs->pool);
    if (cs->err == COLO_OK)
        cs->err = st;
    pthread_mutex_unlock(&cs->pool->mu);
}

void colo_cpu_task_fail(colo_status st)
{
    if (tls_stream && st != COLO_OK)
        colo_cpu_stream_record(tls_stream, st);
}

/* ---- the pool ---------------------------------------------------------------- */

static bool eligible(const cpu_stream *cs, int worker)
{
    return cs->unit_count == 0 || (worker >= cs->unit_first && worker < cs->unit_first + cs->unit_count);
}

/* Earliest deadline first: weighted slack, smaller is more urgent; a late
 * stream's lateness counts weight times. */
static double dl_key(const cpu_stream *cs, uint64_t now)
{
    double slack = (double)(int64_t)(cs->deadline_ns - now);
    return slack >= 0 ? slack / cs->dl_weight : slack * cs->dl_weight;
}

/* Whether a should get the next chunk rather than b (b may be NULL). */
static bool goes_before(const cpu_pool *p, const cpu_stream *a, const cpu_stream *b, bool owed, uint64_t *now)
{
    if (!b)
        return true;
    bool a_be = a->prio == COLO_PRIO_LOW, b_be = b->prio == COLO_PRIO_LOW;
    (void)p;
    if (owed && a_be != b_be)
        return a_be; /* the best-effort floor */
    if (a->prio != b->prio)
        return a->prio > b->prio;
    if (a->deadline_ns || b->deadline_ns) {
        if (!a->deadline_ns || !b->deadline_ns)
            return a->deadline_ns != 0;
        if (!*now)
            *now = colo_now_ns();
        return dl_key(a, *now) < dl_key(b, *now);
    }
    return a->vtime < b->vtime;
}

/* The calling thread's CPU time: the floor charges what a chunk used of a
 * core, not the time the OS gave the core to another process. */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts))
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Keeps each floor clock at most lag behind the other. */
static void floor_clamp(cpu_pool *p, bool be, double lag)
{
    if (be && p->be_clock < p->hi_clock - lag)
        p->be_clock = p->hi_clock - lag;
    if (!be && p->hi_clock < p->be_clock - lag)
        p->hi_clock = p->be_clock - lag;
}

/* Charges a chunk's worker time to its class for the best-effort floor. */
static void floor_charge(cpu_pool *p, const cpu_stream *cs, uint64_t used_ns)
{
    if (p->floor <= 0)
        return;
    if (cs->prio == COLO_PRIO_LOW)
        p->be_clock += (double)used_ns / p->floor;
    else
        p->hi_clock += (double)used_ns / (1.0 - p->floor);
}

static bool floor_owed(const cpu_pool *p) { return p->floor > 0 && p->be_clock < p->hi_clock; }

/* Highest-priority stream with a chunk to hand out to worker, except that
 * best-effort streams go first while below their floor; among equal
 * priorities the one with the least weighted slack when deadlines are set,
 * else the one that has used the least worker time for its share
 * (weighted fair sharing; equal shares and equal use rotate). A stream
 * that comes back from idle starts at the least clock of those with work,
 * so idle time is never banked as credit. */
static cpu_stream *pick_locked(cpu_pool *p, int worker)
{
    cpu_stream *best = NULL;
    bool owed = floor_owed(p);
    uint64_t now = 0;
    int n = p->n_streams;
    double min_v = -1;
    bool be_work = false, hi_work = false;
    for (int k = 0; k < n; k++) { /* the clock of the streams with work */
        cpu_stream *cs = p->streams[k];
        if (cs->active && cs->head && (min_v < 0 || cs->vtime < min_v))
            min_v = cs->vtime;
        if (cs->head)
            *(cs->prio == COLO_PRIO_LOW ? &be_work : &hi_work) = true;
    }
    if (p->floor > 0) {
        /* A class without work banks at most COLO_FLOOR_LAG_NS of credit
         * (a best-effort model between steps, a high one between requests);
         * one with work, at most 50 times that (the OS holding its chunks). */
        floor_clamp(p, true, be_work ? 50.0 * COLO_FLOOR_LAG_NS : (double)COLO_FLOOR_LAG_NS);
        floor_clamp(p, false, hi_work ? 50.0 * COLO_FLOOR_LAG_NS : (double)COLO_FLOOR_LAG_NS);
        owed = floor_owed(p);
    }
    for (int k = 0; k < n; k++) {
        cpu_stream *cs = p->streams[(p->rr + (unsigned)k) % (unsigned)n];
        cpu_task *t = cs->head;
        bool has_work = t && t->next_chunk < t->n_chunks;
        if (t && !cs->active && min_v >= 0 && cs->vtime < min_v)
            cs->vtime = min_v; /* back from idle */
        cs->active = t != NULL;
        if (!has_work || !eligible(cs, worker))
            continue;
        if (goes_before(p, cs, best, owed, &now))
            best = cs;
    }
    return best;
}

static void *worker_main(void *arg)
{
    cpu_pool *p = ((void **)arg)[0];
    tls_worker = (int)(intptr_t)((void **)arg)[1];
    free(arg);
    pool_lock(p);
    /* The best-effort floor charges CPU time: one clock read per chunk
     * while busy (from the end of the last chunk, so the pick between two
     * chunks counts too), one more after a wait (spinning is nobody's). */
    uint64_t cpu_mark = 0;
    for (;;) {
        cpu_stream *cs = NULL;
        bool waited = false;
        while (!p->stop && !(cs = pick_locked(p, tls_worker))) {
            waited = true;
            unsigned gen = __atomic_load_n(&p->work_gen, __ATOMIC_ACQUIRE);
            pthread_mutex_unlock(&p->mu);
            for (int spin = 0; spin < SPIN_ITERS && __atomic_load_n(&p->work_gen, __ATOMIC_ACQUIRE) == gen; spin++)
                cpu_relax();
            pool_lock(p);
            if (p->stop || (cs = pick_locked(p, tls_worker)))
                break;
            if (__atomic_load_n(&p->work_gen, __ATOMIC_ACQUIRE) != gen)
                continue;
            p->sleepers++;
            pthread_cond_wait(&p->work_cv, &p->mu);
            p->sleepers--;
        }
        if (p->stop)
            break;
        p->rr++;
        cpu_task *t = cs->head;
        account(p);
        int chunk = t->next_chunk++;
        p->running++;
        classify(p);
        pthread_mutex_unlock(&p->mu);

        tls_stream = cs;
        bool floor = p->floor > 0; /* set before any work runs */
        if (floor && (waited || !cpu_mark))
            cpu_mark = thread_cpu_ns();
        uint64_t t0 = colo_now_ns();
        t->fn(t->args, chunk, t->n_chunks);
        uint64_t used = colo_now_ns() - t0;
        uint64_t cpu_used = 0;
        if (floor) {
            uint64_t c = thread_cpu_ns();
            cpu_used = c - cpu_mark;
            cpu_mark = c;
        }
        tls_stream = NULL;

        pool_lock(p);
        account(p);
        p->running--;
        p->chunks++;
        cs->chunks_run++;
        cs->busy_ns += used;
        cs->vtime += (double)used / cs->share;
        floor_charge(p, cs, cpu_used);
        if (++t->done_chunks == t->n_chunks) {
            p->ops++;
            cs->head = t->next;
            if (!cs->head)
                cs->tail = NULL;
            t->next = cs->free_tasks;
            cs->free_tasks = t;
            __atomic_store_n(&cs->completed, cs->completed + 1, __ATOMIC_RELEASE);
            __atomic_add_fetch(&p->work_gen, 1, __ATOMIC_RELEASE);
            /* An executor waits for its stream once per step, not for every
             * op: waking it (and every other model's) at each op's end cost
             * context switches the workers needed the cores for. */
            if (!cs->head && p->drain_waiters)
                pthread_cond_broadcast(&p->drain_cv);
            if (p->done_waiters)
                pthread_cond_broadcast(&p->done_cv);
            if (cs->head && p->sleepers)
                pthread_cond_broadcast(&p->work_cv);
        }
        classify(p);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

colo_status colo_cpu_launch(colo_stream *s, colo_cpu_task_fn fn, const void *args, size_t args_size, int n_chunks)
{
    if (!s || !fn || n_chunks < 1 || args_size > COLO_CPU_TASK_ARGS_MAX || s->dev->kind != COLO_BACKEND_CPU)
        return COLO_EINVAL;
    cpu_stream *cs = s->ctx;
    cpu_pool *p = cs->pool;
    pool_lock(p);
    cpu_task *t = cs->free_tasks;
    if (t) {
        cs->free_tasks = t->next;
    } else {
        t = malloc(sizeof *t);
        if (!t) {
            pthread_mutex_unlock(&p->mu);
            return COLO_ENOMEM;
        }
    }
    t->next = NULL;
    t->fn = fn;
    t->n_chunks = n_chunks;
    t->next_chunk = 0;
    t->done_chunks = 0;
    if (args_size)
        memcpy(t->args, args, args_size);
    account(p);
    if (cs->tail)
        cs->tail->next = t;
    else
        cs->head = t;
    cs->tail = t;
    classify(p);
    __atomic_store_n(&cs->enqueued, cs->enqueued + 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&p->work_gen, 1, __ATOMIC_RELEASE);
    if (cs->head == t && p->sleepers)
        pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    return COLO_OK;
}

static colo_status cpu_stream_sync(colo_stream *s);

void *colo_cpu_stream_scratch(colo_stream *s, size_t bytes)
{
    cpu_stream *cs = s->ctx;
    if (bytes <= cs->scratch_bytes)
        return cs->scratch;
    colo_status st = cpu_stream_sync(s);
    if (st != COLO_OK) /* keep the error for the caller's next sync */
        colo_cpu_stream_record(cs, st);
    void *p = NULL;
    size_t want = bytes + bytes / 2 + 64;
    if (posix_memalign(&p, 64, want))
        return NULL;
    free(cs->scratch);
    cs->scratch = p;
    cs->scratch_bytes = want;
    return p;
}

bool colo_cpu_exact(const colo_stream *s) { return s->exact || ((const cpu_stream *)s->ctx)->pool->exact; }

int colo_cpu_stream_threads(const colo_stream *s)
{
    const cpu_stream *cs = s->ctx;
    return cs->unit_count ? cs->unit_count : cs->pool->n_threads;
}

/* ---- device ------------------------------------------------------------------ */

static void cpu_close(colo_device *dev)
{
    cpu_pool *p = dev->ctx;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    if (p->n_streams)
        COLO_WARN("cpu device closed with %d streams open", p->n_streams);
    free(p->threads);
    free(p->streams);
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->done_cv);
    pthread_cond_destroy(&p->drain_cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
    free(dev);
}

static colo_status cpu_get_info(colo_device *dev, colo_device_info *info)
{
    cpu_pool *p = dev->ctx;
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%s", p->name);
    info->kind = COLO_BACKEND_CPU;
    pthread_mutex_lock(&p->mu);
    info->total_bytes = p->budget_bytes;
    info->free_bytes = p->budget_bytes - p->held_bytes;
    pthread_mutex_unlock(&p->mu);
    info->prio_least = COLO_PRIO_LOW;
    info->prio_greatest = COLO_PRIO_HIGH;
    info->compute_units = p->n_threads;
    info->can_partition = true;
    return COLO_OK;
}

static colo_status cpu_buffer_alloc(colo_device *dev, size_t bytes, void **ptr, void **handle, char *err,
                                    size_t errlen)
{
    cpu_pool *p = dev->ctx;
    pthread_mutex_lock(&p->mu);
    if (bytes > p->budget_bytes - p->held_bytes) {
        size_t left = p->budget_bytes - p->held_bytes;
        pthread_mutex_unlock(&p->mu);
        colo_set_err(err, errlen, "cpu: %zu bytes asked, %zu left of the %zu-byte budget", bytes, left,
                     p->budget_bytes);
        return COLO_ENOMEM;
    }
    p->held_bytes += bytes;
    pthread_mutex_unlock(&p->mu);
    /* Reserved, not committed: pages are backed on first touch. */
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        int e = errno;
        pthread_mutex_lock(&p->mu);
        p->held_bytes -= bytes;
        pthread_mutex_unlock(&p->mu);
        colo_set_err(err, errlen, "cpu: mmap of %zu bytes failed: %s", bytes, strerror(e));
        return COLO_ENOMEM;
    }
    *ptr = m;
    *handle = NULL;
    return COLO_OK;
}

/* An elastic arena's ceiling: its pool, not held_bytes, keeps the budget.
 * handle marks it so that free leaves held_bytes alone. */
static char cpu_reserved_mark;

static colo_status cpu_buffer_reserve(colo_device *dev, size_t bytes, void **ptr, void **handle, char *err,
                                      size_t errlen)
{
    (void)dev;
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        colo_set_err(err, errlen, "cpu: mmap of %zu bytes failed: %s", bytes, strerror(errno));
        return COLO_ENOMEM;
    }
    *ptr = m;
    *handle = &cpu_reserved_mark;
    return COLO_OK;
}

static void cpu_buffer_free(colo_device *dev, void *ptr, size_t bytes, void *handle)
{
    cpu_pool *p = dev->ctx;
    munmap(ptr, bytes);
    if (handle == &cpu_reserved_mark)
        return;
    pthread_mutex_lock(&p->mu);
    p->held_bytes -= bytes;
    pthread_mutex_unlock(&p->mu);
}

/* Whole pages (the arena's chunks); partial pages at the ends of a range
 * are left alone all the same. */
static void cpu_buffer_decommit(colo_device *dev, void *handle, void *ptr, size_t bytes)
{
    (void)dev;
    (void)handle;
    static size_t page;
    if (!page) {
        long ps = sysconf(_SC_PAGESIZE);
        page = ps > 0 ? (size_t)ps : 4096;
    }
    uintptr_t lo = ((uintptr_t)ptr + page - 1) & ~(uintptr_t)(page - 1);
    uintptr_t hi = ((uintptr_t)ptr + bytes) & ~(uintptr_t)(page - 1);
    if (hi > lo && madvise((void *)lo, hi - lo, MADV_DONTNEED) != 0)
        COLO_WARN("cpu: madvise(MADV_DONTNEED) of %zu bytes failed: %s", (size_t)(hi - lo), strerror(errno));
}

static size_t cpu_buffer_granularity(const colo_device *dev)
{
    (void)dev;
    long ps = sysconf(_SC_PAGESIZE);
    return ps > 0 ? (size_t)ps : 4096;
}

static colo_status cpu_stream_init(colo_device *dev, colo_stream *s, const colo_stream_config *cfg, char *err,
                                   size_t errlen)
{
    cpu_pool *p = dev->ctx;
    if (cfg->unit_count && cfg->unit_first + cfg->unit_count > p->n_threads) {
        colo_set_err(err, errlen, "cpu: partition [%d, %d) outside the %d workers", cfg->unit_first,
                     cfg->unit_first + cfg->unit_count, p->n_threads);
        return COLO_EINVAL;
    }
    cpu_stream *cs = calloc(1, sizeof *cs);
    if (!cs) {
        colo_set_err(err, errlen, "cpu: out of host memory");
        return COLO_ENOMEM;
    }
    cs->s = s;
    cs->pool = p;
    cs->prio = (int)cfg->priority;
    cs->share = cfg->share > 0 ? cfg->share : 1.0;
    cs->dl_weight = 1.0;
    cs->unit_first = cfg->unit_first;
    cs->unit_count = cfg->unit_count;
    pthread_mutex_lock(&p->mu);
    if (p->n_streams == p->cap_streams) {
        int cap = p->cap_streams ? p->cap_streams * 2 : 8;
        cpu_stream **ns = realloc(p->streams, (size_t)cap * sizeof *ns);
        if (!ns) {
            pthread_mutex_unlock(&p->mu);
            free(cs);
            colo_set_err(err, errlen, "cpu: out of host memory");
            return COLO_ENOMEM;
        }
        p->streams = ns;
        p->cap_streams = cap;
    }
    p->streams[p->n_streams++] = cs;
    pthread_mutex_unlock(&p->mu);
    s->ctx = cs;
    return COLO_OK;
}

static colo_status cpu_stream_sync(colo_stream *s)
{
    cpu_stream *cs = s->ctx;
    cpu_pool *p = cs->pool;
    for (int spin = 0; spin < SPIN_ITERS; spin++) {
        if (__atomic_load_n(&cs->completed, __ATOMIC_ACQUIRE) == __atomic_load_n(&cs->enqueued, __ATOMIC_ACQUIRE))
            break;
        cpu_relax();
    }
    pool_lock(p);
    while (cs->completed < cs->enqueued) {
        p->drain_waiters++;
        pthread_cond_wait(&p->drain_cv, &p->mu);
        p->drain_waiters--;
        cs->sync_wakeups++;
    }
    colo_status st = cs->err;
    cs->err = COLO_OK;
    pthread_mutex_unlock(&p->mu);
    return st;
}

static colo_status cpu_stream_query(colo_stream *s)
{
    cpu_stream *cs = s->ctx;
    pthread_mutex_lock(&cs->pool->mu);
    bool done = cs->completed == cs->enqueued;
    pthread_mutex_unlock(&cs->pool->mu);
    return done ? COLO_OK : COLO_EAGAIN;
}

static void cpu_stream_fini(colo_stream *s)
{
    cpu_stream *cs = s->ctx;
    cpu_pool *p = cs->pool;
    cpu_stream_sync(s);
    pthread_mutex_lock(&p->mu);
    account(p);
    for (int i = 0; i < p->n_streams; i++) {
        if (p->streams[i] == cs) {
            p->streams[i] = p->streams[--p->n_streams];
            break;
        }
    }
    classify(p);
    pthread_mutex_unlock(&p->mu);
    for (cpu_task *t = cs->free_tasks, *nx; t; t = nx) {
        nx = t->next;
        free(t);
    }
    free(cs->scratch);
    free(cs);
}

/* Copies and fills run as chunked tasks, in stream order. */
typedef struct {
    unsigned char *dst;
    const unsigned char *src;
    size_t bytes;
    int byte;
    bool huge;   /* an upload large enough for huge pages (copy_task) */
    bool upload; /* host to device */
} copy_args;

static void chunk_range(size_t n, int chunk, int n_chunks, size_t *lo, size_t *hi)
{
    *lo = n * (size_t)chunk / (size_t)n_chunks;
    *hi = n * (size_t)(chunk + 1) / (size_t)n_chunks;
}

#define HUGE_PAGE_BYTES ((uintptr_t)2 << 20)

/* An upload fills fresh memory (a model's weights, as it loads or wakes),
 * where a fault per 4 KiB page, not the copy, was most of the time. The
 * whole 2 MiB pages inside [p, p + bytes) are asked for transparent huge
 * pages for the copy (one fault per 2 MiB), then the advice is taken back
 * (MADV_NOHUGEPAGE: pages faulted later, as the KV cache's, stay small,
 * so that only what is written is ever backed). Only whole huge pages the
 * copy writes entirely, so nothing is backed that is not written. Best
 * effort: without THP the copy faults small pages as before. */
static void advise_huge(unsigned char *p, size_t bytes, bool on)
{
    uintptr_t lo = ((uintptr_t)p + HUGE_PAGE_BYTES - 1) & ~(HUGE_PAGE_BYTES - 1);
    uintptr_t hi = ((uintptr_t)p + bytes) & ~(HUGE_PAGE_BYTES - 1);
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, on ? MADV_HUGEPAGE : MADV_NOHUGEPAGE); /* advice: failure is harmless */
}

/* An upload's chunks split its whole huge pages between them, so that no
 * huge page is split between two chunks (neither could ask for it whole). */
static void huge_chunk_range(const copy_args *c, int chunk, int n_chunks, size_t *lo, size_t *hi)
{
    uintptr_t d = (uintptr_t)c->dst;
    uintptr_t a = ((d + HUGE_PAGE_BYTES - 1) & ~(HUGE_PAGE_BYTES - 1)) - d;
    uintptr_t b = ((d + c->bytes) & ~(HUGE_PAGE_BYTES - 1)) - d;
    size_t pages = b > a ? (b - a) / HUGE_PAGE_BYTES : 0;
    *lo = chunk == 0 ? 0 : a + pages * (size_t)chunk / (size_t)n_chunks * HUGE_PAGE_BYTES;
    *hi = chunk == n_chunks - 1 ? c->bytes : a + pages * (size_t)(chunk + 1) / (size_t)n_chunks * HUGE_PAGE_BYTES;
}

/* A smaller upload's pages are backed in one call (MADV_POPULATE_WRITE)
 * before the copy rather than one fault each: the same pages the copy
 * would touch, without a trap per page. Best effort (Linux >= 5.14). */
static void populate(unsigned char *p, size_t bytes)
{
    uintptr_t page = 4096, lo = (uintptr_t)p & ~(page - 1);
    uintptr_t hi = ((uintptr_t)p + bytes + page - 1) & ~(page - 1);
    (void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
}

static void copy_task(const void *a, int chunk, int n_chunks)
{
    const copy_args *c = a;
    size_t lo, hi;
    if (c->huge)
        huge_chunk_range(c, chunk, n_chunks, &lo, &hi);
    else
        chunk_range(c->bytes, chunk, n_chunks, &lo, &hi);
    if (c->huge)
        advise_huge(c->dst + lo, hi - lo, true);
    else if (c->upload && hi > lo)
        populate(c->dst + lo, hi - lo);
    memmove(c->dst + lo, c->src + lo, hi - lo);
    if (c->huge)
        advise_huge(c->dst + lo, hi - lo, false);
}

static void set_task(const void *a, int chunk, int n_chunks)
{
    const copy_args *c = a;
    size_t lo, hi;
    chunk_range(c->bytes, chunk, n_chunks, &lo, &hi);
    memset(c->dst + lo, c->byte, hi - lo);
}

static int copy_chunks(colo_stream *s, size_t bytes)
{
    size_t n = bytes / (1u << 20); /* one chunk per MiB, at most one per worker */
    int t = colo_cpu_stream_threads(s);
    return n < 1 ? 1 : n > (size_t)t ? t : (int)n;
}

/* Copies of at most this many bytes into an idle stream are made at once
 * by the caller (a step's tokens, positions and block table): queued, each
 * would be an op for the workers to hand over, for a few bytes. */
#define INLINE_COPY_BYTES ((size_t)64 << 10)

static colo_status cpu_memcpy_async(colo_stream *s, void *dst, const void *src, size_t bytes, colo_copy_kind kind)
{
    cpu_stream *cs = s->ctx;
    if (bytes <= INLINE_COPY_BYTES &&
        __atomic_load_n(&cs->completed, __ATOMIC_ACQUIRE) == __atomic_load_n(&cs->enqueued, __ATOMIC_ACQUIRE)) {
        memmove(dst, src, bytes); /* nothing queued reads or writes them: the stream is idle */
        return COLO_OK;
    }
    /* Overlapping ranges would race between chunks: copy them in one. */
    bool overlap = (const unsigned char *)dst < (const unsigned char *)src + bytes &&
                   (const unsigned char *)src < (const unsigned char *)dst + bytes;
    copy_args a = {dst, src, bytes, 0, kind == COLO_COPY_H2D && !overlap && bytes >= HUGE_PAGE_BYTES, kind == COLO_COPY_H2D};
    return colo_cpu_launch(s, copy_task, &a, sizeof a, overlap ? 1 : copy_chunks(s, bytes));
}

static colo_status cpu_memset_async(colo_stream *s, void *dst, int byte, size_t bytes)
{
    copy_args a = {dst, NULL, bytes, byte, false, false};
    return colo_cpu_launch(s, set_task, &a, sizeof a, copy_chunks(s, bytes));
}

/* Events: a marker task stamps the time it ran and marks the event done.
 * The event keeps no pointer to the stream, so it may outlive it. Each
 * record gets a new generation; a marker of an older record (still queued
 * when the event was recorded again) leaves the event alone. */
typedef struct {
    cpu_pool *pool;
    uint64_t gen;      /* generation of the latest record; 0 = never recorded */
    uint64_t done_gen; /* generation whose marker ran (atomic) */
    uint64_t t_ns;     /* colo_now_ns() when that marker ran (atomic) */
    int pending;       /* markers queued and not yet run, of any generation (atomic) */
} cpu_event;

typedef struct {
    cpu_event *ev;
    uint64_t gen;
} marker_args;

static void marker_task(const void *a, int chunk, int n_chunks)
{
    (void)chunk;
    (void)n_chunks;
    const marker_args *m = a;
    cpu_event *ce = m->ev;
    if (__atomic_load_n(&ce->gen, __ATOMIC_ACQUIRE) == m->gen) {
        __atomic_store_n(&ce->t_ns, colo_now_ns(), __ATOMIC_RELAXED);
        __atomic_store_n(&ce->done_gen, m->gen, __ATOMIC_RELEASE);
    }
    /* The last touch of the event: once pending is 0 it may be freed.
     * Waiters are woken by the task's completion, which follows under the
     * pool mutex. */
    __atomic_sub_fetch(&ce->pending, 1, __ATOMIC_RELEASE);
}

static colo_status cpu_event_init(colo_device *dev, colo_event *ev, char *err, size_t errlen)
{
    cpu_event *ce = calloc(1, sizeof *ce);
    if (!ce) {
        colo_set_err(err, errlen, "cpu: out of host memory");
        return COLO_ENOMEM;
    }
    ce->pool = dev->ctx;
    ev->ctx = ce;
    return COLO_OK;
}

static bool event_done(const cpu_event *ce)
{
    return __atomic_load_n(&ce->done_gen, __ATOMIC_ACQUIRE) == __atomic_load_n(&ce->gen, __ATOMIC_ACQUIRE);
}

static colo_status cpu_event_sync(colo_event *ev)
{
    cpu_event *ce = ev->ctx;
    if (event_done(ce))
        return COLO_OK;
    pthread_mutex_lock(&ce->pool->mu);
    while (!event_done(ce)) {
        ce->pool->done_waiters++;
        pthread_cond_wait(&ce->pool->done_cv, &ce->pool->mu);
        ce->pool->done_waiters--;
    }
    pthread_mutex_unlock(&ce->pool->mu);
    return COLO_OK;
}

/* Queued markers point at the event (even superseded ones): wait for them
 * before freeing. */
static void cpu_event_fini(colo_event *ev)
{
    cpu_event *ce = ev->ctx;
    if (__atomic_load_n(&ce->pending, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&ce->pool->mu);
        while (__atomic_load_n(&ce->pending, __ATOMIC_ACQUIRE)) {
            ce->pool->done_waiters++;
            pthread_cond_wait(&ce->pool->done_cv, &ce->pool->mu);
            ce->pool->done_waiters--;
        }
        pthread_mutex_unlock(&ce->pool->mu);
    }
    free(ce);
}

static colo_status cpu_event_record(colo_event *ev, colo_stream *s)
{
    cpu_event *ce = ev->ctx;
    uint64_t prev = __atomic_load_n(&ce->gen, __ATOMIC_RELAXED);
    marker_args m = {ce, prev + 1};
    __atomic_store_n(&ce->gen, prev + 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&ce->pending, 1, __ATOMIC_RELAXED);
    colo_status st = colo_cpu_launch(s, marker_task, &m, sizeof m, 1);
    if (st != COLO_OK) { /* not recorded: the event stays as it was */
        __atomic_sub_fetch(&ce->pending, 1, __ATOMIC_RELAXED);
        __atomic_store_n(&ce->gen, prev, __ATOMIC_RELEASE);
    }
    return st;
}

static colo_status cpu_event_query(colo_event *ev)
{
    return event_done(ev->ctx) ? COLO_OK : COLO_EAGAIN;
}

static colo_status cpu_event_elapsed_ms(colo_event *start, colo_event *end, float *ms)
{
    cpu_event *a = start->ctx, *b = end->ctx;
    if (!a->gen || !b->gen)
        return COLO_EINVAL; /* never recorded */
    if (!event_done(a) || !event_done(b))
        return COLO_EAGAIN;
    uint64_t ta = __atomic_load_n(&a->t_ns, __ATOMIC_RELAXED), tb = __atomic_load_n(&b->t_ns, __ATOMIC_RELAXED);
    *ms = (float)((double)(int64_t)(tb - ta) / 1e6);
    return COLO_OK;
}

static int cpu_worker_cpu_ns(colo_device *dev, uint64_t *ns, int max)
{
    cpu_pool *p = dev->ctx;
    for (int i = 0; i < p->n_threads && i < max; i++) {
        clockid_t cid;
        struct timespec ts;
        ns[i] = 0;
        if (!pthread_getcpuclockid(p->threads[i], &cid) && !clock_gettime(cid, &ts))
            ns[i] = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    }
    return p->n_threads;
}

static colo_status cpu_worker_stats(colo_device *dev, colo_worker_stats *out)
{
    cpu_pool *p = dev->ctx;
    pthread_mutex_lock(&p->mu);
    account(p);
    out->n_workers = p->n_threads;
    out->wall_ns = p->acct_ns - p->open_ns;
    out->busy_ns = p->busy_ns;
    out->ready_ns = p->idle_ns[IDLE_READY];
    out->barrier_ns = p->idle_ns[IDLE_BARRIER];
    out->starved_ns = p->idle_ns[IDLE_STARVED];
    out->ops = p->ops;
    out->chunks = p->chunks;
    out->lock_waits = p->lock_waits;
    out->lock_wait_ns = p->lock_wait_ns;
    pthread_mutex_unlock(&p->mu);
    return COLO_OK;
}

static void cpu_stream_stats(colo_stream *s, colo_stream_stats *out)
{
    cpu_stream *cs = s->ctx;
    pthread_mutex_lock(&cs->pool->mu);
    out->ops = cs->completed;
    out->chunks = cs->chunks_run;
    out->busy_ns = cs->busy_ns;
    out->sync_wakeups = cs->sync_wakeups;
    pthread_mutex_unlock(&cs->pool->mu);
}

static colo_status cpu_set_best_effort_floor(colo_device *dev, double min_share)
{
    cpu_pool *p = dev->ctx;
    pthread_mutex_lock(&p->mu);
    p->floor = min_share;
    p->be_clock = p->hi_clock = 0;
    pthread_mutex_unlock(&p->mu);
    return COLO_OK;
}

static int cpu_best_effort_owed(colo_device *dev)
{
    cpu_pool *p = dev->ctx;
    pthread_mutex_lock(&p->mu);
    int r = p->floor > 0 ? floor_owed(p) : -1;
    pthread_mutex_unlock(&p->mu);
    return r;
}

static void cpu_stream_set_deadline(colo_stream *s, uint64_t deadline_ns, double weight)
{
    cpu_stream *cs = s->ctx;
    pthread_mutex_lock(&cs->pool->mu);
    cs->deadline_ns = deadline_ns;
    cs->dl_weight = weight;
    pthread_mutex_unlock(&cs->pool->mu);
}

static const colo_device_vtbl cpu_vtbl = {
    .name = "cpu",
    .close = cpu_close,
    .get_info = cpu_get_info,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_decommit = cpu_buffer_decommit,
    .buffer_reserve = cpu_buffer_reserve,
    .buffer_granularity = cpu_buffer_granularity,
    .buffer_free = cpu_buffer_free,
    .stream_init = cpu_stream_init,
    .stream_fini = cpu_stream_fini,
    .stream_sync = cpu_stream_sync,
    .stream_query = cpu_stream_query,
    .memcpy_async = cpu_memcpy_async,
    .memset_async = cpu_memset_async,
    .event_init = cpu_event_init,
    .event_fini = cpu_event_fini,
    .event_record = cpu_event_record,
    .event_query = cpu_event_query,
    .event_sync = cpu_event_sync,
    .event_elapsed_ms = cpu_event_elapsed_ms,
    .worker_cpu_ns = cpu_worker_cpu_ns,
    .set_best_effort_floor = cpu_set_best_effort_floor,
    .best_effort_owed = cpu_best_effort_owed,
    .stream_set_deadline = cpu_stream_set_deadline,
    .worker_stats = cpu_worker_stats,
    .stream_stats = cpu_stream_stats,
};

static void cpu_model_name(char *out, size_t len)
{
    snprintf(out, len, "cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (!strncmp(line, "model name", 10) && c) {
            c++;
            while (*c == ' ')
                c++;
            c[strcspn(c, "\n")] = 0;
            snprintf(out, len, "%s", c);
            break;
        }
    }
    fclose(f);
}

colo_device *colo_cpu_device_open(const colo_device_config *cfg, char *err, size_t errlen)
{
    colo_device *dev = calloc(1, sizeof *dev);
    cpu_pool *p = calloc(1, sizeof *p);
    if (!dev || !p) {
        colo_set_err(err, errlen, "cpu: out of host memory");
        goto out_free;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    p->n_threads = cfg && cfg->cpu_threads > 0 ? cfg->cpu_threads : (cores > 0 ? (int)cores : 1);
    size_t phys = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
    p->budget_bytes = cfg && cfg->cpu_memory_bytes ? cfg->cpu_memory_bytes : phys;
    p->exact = cfg && cfg->exact_activations;
    char model[96];
    cpu_model_name(model, sizeof model);
    snprintf(p->name, sizeof p->name, "%s (%d threads)", model, p->n_threads);
    p->open_ns = p->acct_ns = colo_now_ns();
    p->idle_state = IDLE_STARVED;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    pthread_cond_init(&p->drain_cv, NULL);
    /* The pool decides which model's work runs on which core; OpenBLAS must not
     * start threads of its own inside a chunk. */
    openblas_set_num_threads(1);
    p->threads = calloc((size_t)p->n_threads, sizeof *p->threads);
    if (!p->threads) {
        colo_set_err(err, errlen, "cpu: out of host memory");
        goto out_destroy;
    }
    for (int i = 0; i < p->n_threads; i++) {
        void **arg = malloc(2 * sizeof *arg);
        if (!arg) {
            colo_set_err(err, errlen, "cpu: out of host memory");
            goto out_stop;
        }
        arg[0] = p;
        arg[1] = (void *)(intptr_t)i;
        int rc = pthread_create(&p->threads[i], NULL, worker_main, arg);
        if (rc) {
            free(arg);
            colo_set_err(err, errlen, "cpu: cannot start worker %d: %s", i, strerror(rc));
            p->n_threads = i;
            goto out_stop;
        }
    }
    dev->vt = &cpu_vtbl;
    dev->kind = COLO_BACKEND_CPU;
    dev->ctx = p;
    return dev;

out_stop:
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads; i++)
        if (p->threads[i])
            pthread_join(p->threads[i], NULL);
    free(p->threads);
out_destroy:
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->done_cv);
    pthread_cond_destroy(&p->drain_cv);
    pthread_mutex_destroy(&p->mu);
out_free:
    free(p);
    free(dev);
    return NULL;
}
