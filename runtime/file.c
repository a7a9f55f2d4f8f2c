/* Opening model files without blocking on what is not a regular file
 * (runtime/file.h). */
#include "runtime/file.h"
#include "runtime/status.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

#define POPULATE_CHUNK ((size_t)16 << 20)
#define POPULATE_THREADS 4

typedef struct {
    uintptr_t lo, hi;
    atomic_size_t next; /* the next chunk to claim */
    atomic_int err;     /* the first failure's errno */
} populate_job;

/* Populates chunks until none is left; with once, one chunk at most. */
static void populate_chunks(populate_job *j, bool once)
{
    for (bool done = false; !done; done = once) {
        size_t i = atomic_fetch_add(&j->next, 1);
        uintptr_t a = j->lo + i * POPULATE_CHUNK;
        if (a >= j->hi || atomic_load(&j->err))
            return;
        uintptr_t b = j->hi - a > POPULATE_CHUNK ? a + POPULATE_CHUNK : j->hi;
        if (madvise((void *)a, b - a, MADV_POPULATE_READ) != 0) {
            int zero = 0, e = errno;
            atomic_compare_exchange_strong(&j->err, &zero, e);
        }
    }
}

static void *populate_some(void *arg)
{
    populate_job *j = arg;
    populate_chunks(j, false);
    return NULL;
}

bool colo_file_huge_mapped(const void *p, size_t *resident_bytes, size_t *huge_bytes)
{
    FILE *f = fopen("/proc/self/smaps", "re");
    if (!f)
        return false;
    char line[512];
    bool in = false, got_rss = false, got_huge = false;
    unsigned long lo, hi, kb;
    while (fgets(line, sizeof line, f) && !(got_rss && got_huge)) {
        /* an area's first line starts with its address (lowercase hex), its fields with a capital */
        bool area = (line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f');
        if (area && sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
            if (in) /* past the area: what it did not say is unknown */
                break;
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        } else if (in && sscanf(line, "Rss: %lu kB", &kb) == 1) {
            *resident_bytes = (size_t)kb << 10, got_rss = true;
        } else if (in && sscanf(line, "FilePmdMapped: %lu kB", &kb) == 1) {
            *huge_bytes = (size_t)kb << 10, got_huge = true;
        }
    }
    fclose(f);
    return got_rss && got_huge;
}

int colo_file_refold(const char *path, const void *p, size_t bytes)
{
    size_t res = 0, huge = 0;
    if (bytes < ((size_t)8 << 20) || !colo_file_huge_mapped(p, &res, &huge) || huge >= res / 10 * 9)
        return 0;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p & ~(page - 1), hi = ((uintptr_t)p + bytes + page - 1) & ~(page - 1);
    (void)madvise((void *)lo, hi - lo, MADV_DONTNEED); /* clean file pages: only the mapping goes */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd >= 0) {
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
    return colo_file_populate(p, bytes);
}

int colo_file_populate(const void *p, size_t bytes)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    populate_job j = {.lo = (uintptr_t)p & ~(page - 1), .hi = ((uintptr_t)p + bytes + page - 1) & ~(page - 1)};
    if (!bytes)
        return 0;
    atomic_init(&j.next, 0);
    atomic_init(&j.err, 0);
    (void)madvise((void *)j.lo, j.hi - j.lo, MADV_RANDOM); /* advice: failure is harmless */
    size_t chunks = (j.hi - j.lo + POPULATE_CHUNK - 1) / POPULATE_CHUNK;
    /* The first chunk alone: from the page cache it takes microseconds, and
     * the rest needs no helper threads (whose start, on a busy machine,
     * would cost more than the whole populate). */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    populate_chunks(&j, true);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    bool cached = (t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec) < 1000000L;
    pthread_t th[POPULATE_THREADS - 1];
    int n = 0;
    for (; !cached && n < POPULATE_THREADS - 1 && (size_t)n + 2 < chunks; n++)
        if (pthread_create(&th[n], NULL, populate_some, &j) != 0)
            break; /* fewer helpers: this thread does the rest */
    populate_some(&j);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    (void)madvise((void *)j.lo, j.hi - j.lo, MADV_NORMAL);
    return atomic_load(&j.err);
}

static const char *kind_of(mode_t m)
{
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISSOCK(m))
        return "a socket";
    return "not a plain file";
}

int colo_file_open_regular(const char *path, size_t *size_bytes, char *err, size_t errlen)
{
    /* O_NONBLOCK: open() of a FIFO without a writer returns at once;
     * O_NOCTTY: a terminal never becomes ours. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        colo_set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        colo_set_err(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        goto out_close;
    }
    if (!S_ISREG(sb.st_mode)) {
        colo_set_err(err, errlen, "%s: not a regular file (%s)", path, kind_of(sb.st_mode));
        goto out_close;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        colo_set_err(err, errlen, "%s: cannot set blocking: %s", path, strerror(errno));
        goto out_close;
    }
    if (size_bytes)
        *size_bytes = (size_t)sb.st_size;
    return fd;

out_close:
    close(fd);
    return -1;
}

FILE *colo_file_fopen_regular(const char *path, char *err, size_t errlen)
{
    int fd = colo_file_open_regular(path, NULL, err, errlen);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        colo_set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}
