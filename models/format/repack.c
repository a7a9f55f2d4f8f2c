/* Repacked weights in a cache file, mapped read-only. */
#include "models/format/repack.h"
#include "runtime/file.h"
#include "runtime/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__x86_64__)
#define REPACK_ISA "x86_64"
#elif defined(__aarch64__)
#define REPACK_ISA "aarch64"
#else
#define REPACK_ISA "other"
#endif
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define REPACK_ISA_FULL REPACK_ISA "-le"
#else
#define REPACK_ISA_FULL REPACK_ISA "-be"
#endif

static const char MAGIC[8] = {'C', 'O', 'L', 'O', 'R', 'P', 'K', '1'};

/* The file's first bytes (the rest of the 4096 are zero). */
typedef struct {
    char magic[8];
    uint32_t version, header_bytes;
    char isa[16], kind[16];
    uint64_t layout;
    uint64_t src_dev, src_ino, src_size, src_mtime_ns;
    uint64_t payload_bytes, payload_sum;
    uint64_t header_sum; /* of every field above */
} header;

typedef struct {
    uint64_t dev, ino, size, mtime_ns;
} file_id;

struct colo_repack {
    char path[1200];
    const uint8_t *map;
    size_t map_bytes;
};

/* Cache files this process checked whole (by identity): a wake maps them
 * without reading every byte again. */
#define VERIFIED_MAX 64
static pthread_mutex_t verified_mu = PTHREAD_MUTEX_INITIALIZER;
static file_id verified[VERIFIED_MAX];
static int n_verified;

static file_id id_of(const struct stat *sb)
{
    return (file_id){(uint64_t)sb->st_dev, (uint64_t)sb->st_ino, (uint64_t)sb->st_size,
                     (uint64_t)sb->st_mtim.tv_sec * 1000000000u + (uint64_t)sb->st_mtim.tv_nsec};
}

static bool id_eq(file_id a, file_id b)
{
    return a.dev == b.dev && a.ino == b.ino && a.size == b.size && a.mtime_ns == b.mtime_ns;
}

static bool was_verified(file_id id)
{
    pthread_mutex_lock(&verified_mu);
    bool yes = false;
    for (int i = 0; i < n_verified && !yes; i++)
        yes = id_eq(verified[i], id);
    pthread_mutex_unlock(&verified_mu);
    return yes;
}

static void mark_verified(file_id id)
{
    pthread_mutex_lock(&verified_mu);
    bool have = false;
    for (int i = 0; i < n_verified && !have; i++)
        have = id_eq(verified[i], id);
    if (!have) {
        if (n_verified == VERIFIED_MAX) /* the oldest goes: it is checked again when next mapped */
            memmove(verified, verified + 1, (VERIFIED_MAX - 1) * sizeof *verified), n_verified--;
        verified[n_verified++] = id;
    }
    pthread_mutex_unlock(&verified_mu);
}

uint64_t colo_repack_hash(uint64_t h, const void *p, size_t bytes)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < bytes; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* The payload's checksum: eight independent lanes of 64-bit words (so the
 * multiplies overlap: several GB/s), then the tail bytes, then the lanes
 * folded. Reads every page once, which is also what makes them resident. */
static uint64_t payload_sum(const uint8_t *p, size_t bytes)
{
    uint64_t lane[8];
    for (int j = 0; j < 8; j++)
        lane[j] = COLO_REPACK_HASH_SEED + (uint64_t)j * 0x9e3779b97f4a7c15ull;
    size_t n = bytes / 64;
    for (size_t i = 0; i < n; i++) {
        uint64_t w[8];
        memcpy(w, p + i * 64, 64);
        for (int j = 0; j < 8; j++)
            lane[j] = (lane[j] ^ w[j]) * 0x100000001b3ull;
    }
    uint64_t h = colo_repack_hash(COLO_REPACK_HASH_SEED, p + n * 64, bytes - n * 64);
    for (int j = 0; j < 8; j++)
        h = colo_repack_hash(h, &lane[j], sizeof lane[j]);
    return colo_repack_hash(h, &bytes, sizeof bytes);
}

colo_status colo_repack_dir(char *buf, size_t len)
{
    const char *dir = getenv("COLO_REPACK_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (dir && *dir)
        n = snprintf(buf, len, "%s", dir);
    else if (xdg && *xdg)
        n = snprintf(buf, len, "%s/colo/repack", xdg);
    else if (home && *home)
        n = snprintf(buf, len, "%s/.cache/colo/repack", home);
    else
        return COLO_EINVAL;
    return n < 0 || (size_t)n >= len ? COLO_ENOMEM : COLO_OK;
}

/* mkdir -p of dir (its parents made as needed). */
static bool make_dirs(const char *dir)
{
    char p[1024];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
        return false;
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST)
                return false;
            *s = '/';
        }
    return mkdir(p, 0755) == 0 || errno == EEXIST;
}

/* The header key and src describe; the payload's fields left zero. */
static header header_for(const colo_repack_key *key, file_id src, size_t bytes)
{
    header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, MAGIC, sizeof MAGIC);
    h.version = COLO_REPACK_VERSION;
    h.header_bytes = COLO_REPACK_HEADER_BYTES;
    snprintf(h.isa, sizeof h.isa, "%s", REPACK_ISA_FULL);
    snprintf(h.kind, sizeof h.kind, "%s", key->kind);
    h.layout = key->layout;
    h.src_dev = src.dev, h.src_ino = src.ino, h.src_size = src.size, h.src_mtime_ns = src.mtime_ns;
    h.payload_bytes = bytes;
    return h;
}

static uint64_t header_sum(const header *h)
{
    return colo_repack_hash(COLO_REPACK_HASH_SEED, h, offsetof(header, header_sum));
}

/* Why the mapped file m (of bytes_total) does not hold want's payload;
 * NULL when it does. The payload's checksum is read only when check_sum. */
static const char *mismatch(const uint8_t *m, size_t bytes_total, const header *want, bool check_sum)
{
    header h;
    if (bytes_total < COLO_REPACK_HEADER_BYTES)
        return "shorter than its header";
    memcpy(&h, m, sizeof h);
    if (memcmp(h.magic, MAGIC, sizeof MAGIC) || h.header_sum != header_sum(&h))
        return "its header is corrupt";
    if (h.version != want->version || h.header_bytes != want->header_bytes)
        return "another format version";
    if (memcmp(h.isa, want->isa, sizeof h.isa) || memcmp(h.kind, want->kind, sizeof h.kind) ||
        h.layout != want->layout)
        return "made for another ISA or layout";
    if (h.src_dev != want->src_dev || h.src_ino != want->src_ino || h.src_size != want->src_size ||
        h.src_mtime_ns != want->src_mtime_ns)
        return "stale: made from another version of the source file";
    if (h.payload_bytes != want->payload_bytes || bytes_total != COLO_REPACK_HEADER_BYTES + h.payload_bytes)
        return "of another size (truncated?)";
    if (check_sum && payload_sum(m + COLO_REPACK_HEADER_BYTES, (size_t)h.payload_bytes) != h.payload_sum)
        return "its payload is corrupt (checksum)";
    return NULL;
}

/* Maps fd whole, read-only, asking for huge pages. */
static const uint8_t *map_file(int fd, size_t bytes)
{
    void *m = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED)
        return NULL;
    (void)madvise(m, bytes, MADV_HUGEPAGE); /* advice (as colo_gguf_prefault): failure is harmless */
    return m;
}

/* Opens the cache file path and checks it against want (the payload's
 * checksum too unless this process checked this very file already). On
 * success r holds the mapping, resident; false with why otherwise. */
static bool try_open(colo_repack *r, const header *want, const char **why)
{
    int fd = open(r->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *why = errno == ENOENT ? "absent" : "cannot be opened";
        return false;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < (off_t)COLO_REPACK_HEADER_BYTES) {
        close(fd);
        *why = "not a regular file of a header's size";
        return false;
    }
    file_id id = id_of(&sb);
    bool known = was_verified(id);
    const uint8_t *m = map_file(fd, (size_t)sb.st_size);
    close(fd);
    if (!m) {
        *why = "cannot be mapped";
        return false;
    }
    /* read in 2 MiB folios before the checksum reads it at memory speed
     * (its faults alone would read it in the readahead's small ones); a
     * file checked before is made resident again, from the page cache */
    int e = colo_file_populate(m, (size_t)sb.st_size);
    if (e == 0 && !known)
        e = colo_file_refold(r->path, m, (size_t)sb.st_size);
    if (e != 0 && e != EINVAL && e != ENOSYS) { /* cut short under the mapping, say */
        munmap((void *)m, (size_t)sb.st_size);
        *why = "cannot be read";
        return false;
    }
    if ((*why = mismatch(m, (size_t)sb.st_size, want, !known)) != NULL) {
        munmap((void *)m, (size_t)sb.st_size);
        return false;
    }
    mark_verified(id);
    r->map = m;
    r->map_bytes = (size_t)sb.st_size;
    return true;
}

/* Makes the payload with fill and writes it to path (beside it first,
 * then renamed over it). Its pages are written back and dropped from the
 * page cache, so that the mapping reads them again in large folios. */
static colo_status build(const char *path, header h, colo_repack_fill_fn fill, void *ud, char *err, size_t errlen)
{
    static _Atomic unsigned seq;
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", path, (long)getpid(), seq++);
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        colo_set_err(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
        return COLO_EIO;
    }
    colo_status st = COLO_EIO;
    size_t total = COLO_REPACK_HEADER_BYTES + (size_t)h.payload_bytes;
    uint8_t *m = MAP_FAILED;
    if (ftruncate(fd, (off_t)total) != 0 ||
        (m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        colo_set_err(err, errlen, "%s: cannot size or map: %s", tmp, strerror(errno));
        goto out_unlink;
    }
    if ((st = fill(ud, m + COLO_REPACK_HEADER_BYTES, (size_t)h.payload_bytes, err, errlen)) != COLO_OK)
        goto out_unmap;
    h.payload_sum = payload_sum(m + COLO_REPACK_HEADER_BYTES, (size_t)h.payload_bytes);
    h.header_sum = header_sum(&h);
    memcpy(m, &h, sizeof h);
    st = COLO_EIO;
    if (msync(m, total, MS_SYNC) != 0 || fdatasync(fd) != 0) {
        colo_set_err(err, errlen, "%s: cannot write: %s", tmp, strerror(errno));
        goto out_unmap;
    }
    munmap(m, total);
    m = MAP_FAILED;
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    if (rename(tmp, path) != 0) {
        colo_set_err(err, errlen, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
        goto out_unlink;
    }
    close(fd);
    return COLO_OK;
out_unmap:
    munmap(m, total);
out_unlink:
    unlink(tmp);
    close(fd);
    return st;
}

colo_status colo_repack_map(const colo_repack_key *key, size_t bytes, colo_repack_fill_fn fill, void *ud,
                            colo_repack **out, bool *built, char *err, size_t errlen)
{
    *out = NULL;
    if (built)
        *built = false;
    struct stat sb;
    if (stat(key->src_path, &sb) != 0) {
        colo_set_err(err, errlen, "%s: cannot open: %s", key->src_path, strerror(errno));
        return COLO_EIO;
    }
    header want = header_for(key, id_of(&sb), bytes);
    char dir[1024];
    if (colo_repack_dir(dir, sizeof dir) != COLO_OK) {
        colo_set_err(err, errlen, "no cache folder for repacked weights (set COLO_REPACK_DIR, XDG_CACHE_HOME or HOME)");
        return COLO_EIO;
    }
    colo_repack *r = calloc(1, sizeof *r);
    if (!r) {
        colo_set_err(err, errlen, "out of memory");
        return COLO_ENOMEM;
    }
    uint64_t name = colo_repack_hash(COLO_REPACK_HASH_SEED, &want, offsetof(header, payload_sum));
    name = colo_repack_hash(name, key->src_path, strlen(key->src_path));
    if (snprintf(r->path, sizeof r->path, "%s/%s-%016llx.bin", dir, want.kind, (unsigned long long)name) >=
        (int)sizeof r->path) {
        free(r);
        colo_set_err(err, errlen, "the cache folder's path is too long");
        return COLO_EIO;
    }
    const char *why = NULL;
    if (try_open(r, &want, &why)) {
        *out = r;
        return COLO_OK;
    }
    if (strcmp(why, "absent"))
        COLO_WARN("%s: %s; made again from %s", r->path, why, key->src_path);
    colo_status st;
    if (!make_dirs(dir)) {
        colo_set_err(err, errlen, "%s: cannot make the folder: %s", dir, strerror(errno));
        st = COLO_EIO;
    } else if ((st = build(r->path, want, fill, ud, err, errlen)) == COLO_OK && !try_open(r, &want, &why)) {
        colo_set_err(err, errlen, "%s: written, then %s", r->path, why);
        st = COLO_EIO;
    }
    if (st != COLO_OK) {
        free(r);
        return st;
    }
    if (built)
        *built = true;
    *out = r;
    return COLO_OK;
}

const void *colo_repack_data(const colo_repack *r) { return r->map + COLO_REPACK_HEADER_BYTES; }
const char *colo_repack_path(const colo_repack *r) { return r->path; }

void colo_repack_close(colo_repack *r)
{
    if (!r)
        return;
    if (r->map)
        munmap((void *)r->map, r->map_bytes);
    free(r);
}
