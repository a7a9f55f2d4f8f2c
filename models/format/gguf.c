/* GGUF reader (validating, mmap) and writer. */
#include "models/format/gguf.h"
#include "runtime/file.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAX_DEPTH 8
#define GGUF_NAME_MAX 127

struct colo_gguf {
    char path[512];
    colo_gguf_id id;
    const uint8_t *map;
    size_t size;
    uint32_t version;
    size_t alignment;
    colo_gguf_kv *kvs;
    int n_kv;
    colo_gguf_tensor *tensors;
    int n_tensors;
    size_t data_off;
    /* string-array element offsets, built on first use */
    pthread_mutex_t idx_mu;
    const colo_gguf_kv *idx_kv;
    const uint8_t **idx;
    int *by_name;     /* tensor indices sorted by name (find_tensor's binary search) */
    atomic_bool folded; /* colo_gguf_prefault checked the page cache's folios once */
    int refs;         /* holders of this reader (opens of one unchanged file share it); under open_mu */
    colo_gguf *next;  /* in the list of open readers */
};

/* Readers open now: a model that sleeps keeps its file's reader, so that
 * its wake (and whatever else opens the unchanged file meanwhile) neither
 * maps nor parses it again. */
static pthread_mutex_t open_mu = PTHREAD_MUTEX_INITIALIZER;
static colo_gguf *open_list;

typedef struct {
    const colo_gguf *g;
    size_t pos;
    char *err;
    size_t errlen;
} cursor;

#define FAIL(c, ...)                                                                                      \
    do {                                                                                                  \
        char m_[384];                                                                                     \
        snprintf(m_, sizeof m_, __VA_ARGS__);                                                             \
        colo_set_err((c)->err, (c)->errlen, "%s: %s", (c)->g->path, m_);                                  \
        return COLO_EFORMAT;                                                                              \
    } while (0)

/* GGML's names of the types colo does not read, for messages. */
static const char *ggml_type_name(uint32_t t)
{
    static const struct {
        uint32_t id;
        const char *name;
    } names[] = {{4, "Q4_2 (removed from GGML)"}, {5, "Q4_3 (removed from GGML)"}, {9, "Q8_1"}, {15, "Q8_K"},
                 {16, "IQ2_XXS"}, {17, "IQ2_XS"}, {18, "IQ3_XXS"}, {19, "IQ1_S"}, {20, "IQ4_NL"}, {21, "IQ3_S"},
                 {22, "IQ2_S"}, {23, "IQ4_XS"}, {24, "I8"}, {25, "I16"}, {27, "I64"}, {28, "F64"}, {29, "IQ1_M"},
                 {34, "TQ1_0"}, {35, "TQ2_0"}, {39, "MXFP4"}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (names[i].id == t)
            return names[i].name;
    return "unknown";
}

static colo_status need(cursor *c, uint64_t n, const char *what)
{
    if (n > c->g->size - c->pos)
        FAIL(c, "truncated: %s needs %llu bytes at offset %zu, file has %zu", what, (unsigned long long)n, c->pos,
             c->g->size);
    return COLO_OK;
}

static colo_status rd(cursor *c, void *out, size_t n, const char *what)
{
    colo_status st = need(c, n, what);
    if (st)
        return st;
    memcpy(out, c->g->map + c->pos, n);
    c->pos += n;
    return COLO_OK;
}

size_t colo_gguf_scalar_size(colo_gguf_type t)
{
    switch (t) {
    case COLO_GGUF_U8: case COLO_GGUF_I8: case COLO_GGUF_BOOL: return 1;
    case COLO_GGUF_U16: case COLO_GGUF_I16: return 2;
    case COLO_GGUF_U32: case COLO_GGUF_I32: case COLO_GGUF_F32: return 4;
    case COLO_GGUF_U64: case COLO_GGUF_I64: case COLO_GGUF_F64: return 8;
    default: return 0;
    }
}

static colo_status rd_str(cursor *c, colo_gguf_str *s, const char *what)
{
    uint64_t len;
    colo_status st = rd(c, &len, 8, what);
    if (st)
        return st;
    if ((st = need(c, len, what)))
        return st;
    s->ptr = (const char *)c->g->map + c->pos;
    s->len = len;
    c->pos += len;
    return COLO_OK;
}

/* Skips one value of type t, checking it lies in the file. */
static colo_status skip_value(cursor *c, colo_gguf_type t, int depth, const char *key)
{
    size_t sz = colo_gguf_scalar_size(t);
    if (sz)
        return need(c, sz, key) ? COLO_EFORMAT : (c->pos += sz, COLO_OK);
    if (t == COLO_GGUF_STRING) {
        colo_gguf_str s;
        return rd_str(c, &s, key);
    }
    if (t != COLO_GGUF_ARRAY)
        FAIL(c, "key %s: unknown value type %u", key, (unsigned)t);
    if (depth >= GGUF_MAX_DEPTH)
        FAIL(c, "key %s: arrays nested deeper than %d", key, GGUF_MAX_DEPTH);
    uint32_t et;
    uint64_t n;
    colo_status st;
    if ((st = rd(c, &et, 4, key)) || (st = rd(c, &n, 8, key)))
        return st;
    size_t esz = colo_gguf_scalar_size((colo_gguf_type)et);
    if (esz) {
        if (n > (c->g->size - c->pos) / esz)
            FAIL(c, "key %s: array of %llu elements runs past the end of the file", key, (unsigned long long)n);
        c->pos += n * esz;
        return COLO_OK;
    }
    if (et != COLO_GGUF_STRING && et != COLO_GGUF_ARRAY)
        FAIL(c, "key %s: unknown array element type %u", key, et);
    /* Each string or array element takes at least 8 bytes. */
    if (n > (c->g->size - c->pos) / 8)
        FAIL(c, "key %s: array of %llu elements runs past the end of the file", key, (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++)
        if ((st = skip_value(c, (colo_gguf_type)et, depth + 1, key)))
            return st;
    return COLO_OK;
}

static bool str_eq(colo_gguf_str s, const char *z)
{
    size_t n = strlen(z);
    return s.len == n && !memcmp(s.ptr, z, n);
}

static int cmp_offset(const void *a, const void *b)
{
    const colo_gguf_tensor *x = *(colo_gguf_tensor *const *)a, *y = *(colo_gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static bool known_type(uint32_t t)
{
    return colo_dtype_is_weight((colo_dtype)t) || t == COLO_I32;
}

/* Magic, version and the two counts, each count checked against what the
 * file could hold. */
static colo_status parse_header(colo_gguf *g, cursor *c, uint64_t *n_tensors, uint64_t *n_kv)
{
    char magic[4];
    colo_status st;
    if ((st = rd(c, magic, 4, "magic")))
        return st;
    if (memcmp(magic, "GGUF", 4))
        FAIL(c, "not a GGUF file (bad magic)");
    if ((st = rd(c, &g->version, 4, "version")))
        return st;
    if (g->version != 2 && g->version != 3)
        FAIL(c, "GGUF version %u is not supported (2 or 3)", g->version);
    if ((st = rd(c, n_tensors, 8, "tensor count")) || (st = rd(c, n_kv, 8, "metadata count")))
        return st;
    /* A key/value takes at least 12 bytes, a tensor info at least 28. */
    if (*n_kv > g->size / 12 || *n_tensors > g->size / 28)
        FAIL(c, "counts (%llu keys, %llu tensors) cannot fit in a %zu-byte file", (unsigned long long)*n_kv,
             (unsigned long long)*n_tensors, g->size);
    return COLO_OK;
}

/* Key/value i (the i before it already read): key, type, value skipped
 * over; general.alignment taken as it passes. */
static colo_status parse_kv(colo_gguf *g, cursor *c, uint64_t i)
{
    colo_gguf_kv *kv = &g->kvs[i];
    char what[64];
    snprintf(what, sizeof what, "key %llu", (unsigned long long)i);
    uint32_t t;
    colo_status st;
    if ((st = rd_str(c, &kv->key, what)) || (st = rd(c, &t, 4, what)))
        return st;
    char key[128];
    snprintf(key, sizeof key, "%.*s", (int)(kv->key.len < 120 ? kv->key.len : 120), kv->key.ptr);
    kv->type = (colo_gguf_type)t;
    kv->value = g->map + c->pos;
    if (t == COLO_GGUF_ARRAY) {
        uint32_t et;
        if ((st = rd(c, &et, 4, key)) || (st = rd(c, &kv->arr_len, 8, key)))
            return st;
        kv->arr_type = (colo_gguf_type)et;
        kv->arr_data = g->map + c->pos;
        c->pos = (size_t)(kv->value - g->map);
    }
    if ((st = skip_value(c, kv->type, 0, key)))
        return st;
    for (uint64_t j = 0; j < i; j++)
        if (g->kvs[j].key.len == kv->key.len && !memcmp(g->kvs[j].key.ptr, kv->key.ptr, kv->key.len))
            FAIL(c, "key %s appears twice", key);
    g->n_kv++;
    if (str_eq(kv->key, "general.alignment")) {
        uint32_t a;
        if (kv->type != COLO_GGUF_U32)
            FAIL(c, "general.alignment is not a uint32");
        memcpy(&a, kv->value, 4);
        if (!a || (a & (a - 1)) || a > (1u << 20))
            FAIL(c, "general.alignment %u is not a power of two", a);
        g->alignment = a;
    }
    return COLO_OK;
}

/* The dimensions of tensor t (nd of them); *nel gets their product. */
static colo_status parse_dims(cursor *c, colo_gguf_tensor *t, uint32_t nd, uint64_t *nel)
{
    colo_status st;
    *nel = 1;
    for (int d = 0; d < 4; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < nd; d++) {
        uint64_t ne;
        if ((st = rd(c, &ne, 8, t->name)))
            return st;
        if (ne == 0 || ne > (1ull << 40) || *nel > (1ull << 50) / ne)
            FAIL(c, "tensor %s: dimension %u of %llu elements is invalid", t->name, d, (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
        *nel *= ne;
    }
    return COLO_OK;
}

/* Tensor info i (the i before it already read): name, shape, type and
 * offset, its size in bytes computed; where the data lies is checked once
 * the data section is known (place_tensors). */
static colo_status parse_tensor_info(colo_gguf *g, cursor *c, uint64_t i)
{
    colo_gguf_tensor *t = &g->tensors[i];
    char what[64];
    snprintf(what, sizeof what, "tensor %llu", (unsigned long long)i);
    colo_gguf_str name;
    colo_status st;
    if ((st = rd_str(c, &name, what)))
        return st;
    if (name.len == 0 || name.len > GGUF_NAME_MAX)
        FAIL(c, "tensor %llu: name of %llu bytes", (unsigned long long)i, (unsigned long long)name.len);
    memcpy(t->name, name.ptr, name.len);
    t->name[name.len] = 0;
    if (memchr(t->name, 0, name.len))
        FAIL(c, "tensor %llu: name contains a NUL byte", (unsigned long long)i);
    uint32_t nd, type;
    if ((st = rd(c, &nd, 4, t->name)))
        return st;
    if (nd < 1 || nd > 4)
        FAIL(c, "tensor %s: %u dimensions (1 to 4 supported)", t->name, nd);
    t->n_dims = (int)nd;
    uint64_t nel;
    if ((st = parse_dims(c, t, nd, &nel)))
        return st;
    if ((st = rd(c, &type, 4, t->name)) || (st = rd(c, &t->offset, 8, t->name)))
        return st;
    if (!known_type(type))
        FAIL(c, "tensor %s: type %u (%s) is not supported", t->name, type, ggml_type_name(type));
    t->type = (colo_dtype)type;
    size_t rb = colo_dtype_row_bytes(t->type, t->ne[0]);
    if (!rb)
        FAIL(c, "tensor %s: row of %lld elements is not a whole number of %s blocks", t->name, (long long)t->ne[0],
             colo_dtype_name(t->type));
    t->bytes = rb * (size_t)(nel / (uint64_t)t->ne[0]);
    if (t->offset % g->alignment)
        FAIL(c, "tensor %s: offset %llu is not aligned to %zu", t->name, (unsigned long long)t->offset,
             g->alignment);
    g->n_tensors++;
    return COLO_OK;
}

/* The data section starts at the first aligned offset after the tensor
 * infos: every tensor must lie inside the file, and no two may overlap. */
static colo_status place_tensors(colo_gguf *g, cursor *c)
{
    g->data_off = (c->pos + g->alignment - 1) / g->alignment * g->alignment;
    if (g->data_off > g->size && g->n_tensors)
        FAIL(c, "truncated: the data section starts past the end of the file");
    colo_gguf_tensor **by_off = malloc((g->n_tensors ? (size_t)g->n_tensors : 1) * sizeof *by_off);
    if (!by_off) {
        colo_set_err(c->err, c->errlen, "%s: out of memory", g->path);
        return COLO_ENOMEM;
    }
    for (int i = 0; i < g->n_tensors; i++) {
        colo_gguf_tensor *t = &g->tensors[i];
        if (t->offset > g->size - g->data_off || t->bytes > g->size - g->data_off - t->offset) {
            free(by_off);
            FAIL(c, "tensor %s: %zu bytes at data offset %llu run past the end of the file (truncated?)", t->name,
                 t->bytes, (unsigned long long)t->offset);
        }
        t->data = g->map + g->data_off + t->offset;
        by_off[i] = t;
    }
    qsort(by_off, (size_t)g->n_tensors, sizeof *by_off, cmp_offset);
    for (int i = 1; i < g->n_tensors; i++) {
        if (by_off[i - 1]->offset + by_off[i - 1]->bytes > by_off[i]->offset) {
            char a[128], b[128];
            snprintf(a, sizeof a, "%s", by_off[i - 1]->name);
            snprintf(b, sizeof b, "%s", by_off[i]->name);
            free(by_off);
            FAIL(c, "tensors %s and %s overlap", a, b);
        }
    }
    free(by_off);
    return COLO_OK;
}

static const colo_gguf *sort_g; /* qsort has no context argument; under sort_mu */
static pthread_mutex_t sort_mu = PTHREAD_MUTEX_INITIALIZER;

static int cmp_name(const void *a, const void *b)
{
    return strcmp(sort_g->tensors[*(const int *)a].name, sort_g->tensors[*(const int *)b].name);
}

/* The tensors by name, for lookups in O(log n): a model's loader looks up
 * every tensor several times, and a linear search of a few hundred names
 * was much of a wake. Two tensors of one name are refused. */
static colo_status index_names(colo_gguf *g, cursor *c)
{
    g->by_name = malloc((g->n_tensors ? (size_t)g->n_tensors : 1) * sizeof *g->by_name);
    if (!g->by_name) {
        colo_set_err(c->err, c->errlen, "%s: out of memory", g->path);
        return COLO_ENOMEM;
    }
    for (int i = 0; i < g->n_tensors; i++)
        g->by_name[i] = i;
    pthread_mutex_lock(&sort_mu);
    sort_g = g;
    qsort(g->by_name, (size_t)g->n_tensors, sizeof *g->by_name, cmp_name);
    pthread_mutex_unlock(&sort_mu);
    for (int i = 1; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[g->by_name[i - 1]].name, g->tensors[g->by_name[i]].name))
            FAIL(c, "tensor %s appears twice", g->tensors[g->by_name[i]].name);
    return COLO_OK;
}

static colo_status parse(colo_gguf *g, char *err, size_t errlen)
{
    cursor c = {g, 0, err, errlen};
    uint64_t n_tensors, n_kv;
    colo_status st;
    if ((st = parse_header(g, &c, &n_tensors, &n_kv)))
        return st;
    g->kvs = calloc(n_kv ? n_kv : 1, sizeof *g->kvs);
    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    if (!g->kvs || !g->tensors) {
        colo_set_err(err, errlen, "%s: out of memory", g->path);
        return COLO_ENOMEM;
    }
    g->alignment = 32;
    for (uint64_t i = 0; i < n_kv; i++)
        if ((st = parse_kv(g, &c, i)))
            return st;
    for (uint64_t i = 0; i < n_tensors; i++)
        if ((st = parse_tensor_info(g, &c, i)))
            return st;
    if ((st = index_names(g, &c)))
        return st;
    return place_tensors(g, &c);
}

/* The reader of path open now with identity id, one more holder counted;
 * NULL when there is none (a file changed since is opened anew). */
static colo_gguf *share_find(const char *path, colo_gguf_id id)
{
    colo_gguf *g;
    pthread_mutex_lock(&open_mu);
    for (g = open_list; g; g = g->next)
        if (id.ino && g->id.dev == id.dev && g->id.ino == id.ino && g->id.size == id.size &&
            g->id.mtime_ns == id.mtime_ns && !strcmp(g->path, path)) {
            g->refs++;
            break;
        }
    pthread_mutex_unlock(&open_mu);
    return g;
}

colo_gguf *colo_gguf_open(const char *path, char *err, size_t errlen)
{
    colo_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        colo_set_err(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    snprintf(g->path, sizeof g->path, "%s", path);
    pthread_mutex_init(&g->idx_mu, NULL);
    int fd = colo_file_open_regular(path, &g->size, err, errlen);
    if (fd < 0)
        goto out_free;
    if (g->size < 24) {
        colo_set_err(err, errlen, "%s: truncated: %zu bytes is too small for a GGUF header", path, g->size);
        close(fd);
        goto out_free;
    }
    struct stat sb;
    if (fstat(fd, &sb) == 0)
        g->id = (colo_gguf_id){(uint64_t)sb.st_dev, (uint64_t)sb.st_ino, (uint64_t)sb.st_size,
                               (uint64_t)sb.st_mtim.tv_sec * 1000000000u + (uint64_t)sb.st_mtim.tv_nsec};
    colo_gguf *held = share_find(path, g->id);
    if (held) {
        close(fd);
        pthread_mutex_destroy(&g->idx_mu);
        free(g);
        return held;
    }
    void *m = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        colo_set_err(err, errlen, "%s: cannot map: %s", path, strerror(errno));
        goto out_free;
    }
    g->map = m;
    g->refs = 1;
    /* before the header is read: what comes into the page cache from now
     * on comes in 2 MiB folios (colo_gguf_prefault), the header's pages
     * and the readahead past them included (advice: failure is harmless) */
    (void)madvise(m, g->size, MADV_HUGEPAGE);
    if (parse(g, err, errlen) != COLO_OK)
        goto out_close;
    pthread_mutex_lock(&open_mu);
    g->next = open_list;
    open_list = g;
    pthread_mutex_unlock(&open_mu);
    return g;

out_close:
    colo_gguf_close(g);
    return NULL;
out_free:
    pthread_mutex_destroy(&g->idx_mu);
    free(g);
    return NULL;
}

void colo_gguf_close(colo_gguf *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&open_mu);
    bool last = --g->refs <= 0;
    if (last)
        for (colo_gguf **p = &open_list; *p; p = &(*p)->next)
            if (*p == g) {
                *p = g->next;
                break;
            }
    pthread_mutex_unlock(&open_mu);
    if (!last)
        return;
    if (g->map)
        munmap((void *)g->map, g->size);
    free(g->kvs);
    free(g->tensors);
    free(g->idx);
    free(g->by_name);
    pthread_mutex_destroy(&g->idx_mu);
    free(g);
}

uint32_t colo_gguf_version(const colo_gguf *g) { return g->version; }
size_t colo_gguf_alignment(const colo_gguf *g) { return g->alignment; }
size_t colo_gguf_file_size(const colo_gguf *g) { return g->size; }
colo_gguf_id colo_gguf_identity(const colo_gguf *g) { return g->id; }
size_t colo_gguf_data_offset(const colo_gguf *g) { return g->data_off; }

const char *colo_gguf_type_name(colo_gguf_type t)
{
    static const char *const names[] = {"u8",  "i8",     "u16",   "i16", "u32", "i32", "f32",
                                        "bool", "string", "array", "u64", "i64", "f64"};
    return (unsigned)t < sizeof names / sizeof *names ? names[t] : "?";
}
int colo_gguf_n_kv(const colo_gguf *g) { return g->n_kv; }
const colo_gguf_kv *colo_gguf_kv_at(const colo_gguf *g, int i) { return i >= 0 && i < g->n_kv ? &g->kvs[i] : NULL; }
int colo_gguf_n_tensors(const colo_gguf *g) { return g->n_tensors; }
const colo_gguf_tensor *colo_gguf_tensor_at(const colo_gguf *g, int i)
{
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const colo_gguf_kv *colo_gguf_find(const colo_gguf *g, const char *key)
{
    for (int i = 0; i < g->n_kv; i++)
        if (str_eq(g->kvs[i].key, key))
            return &g->kvs[i];
    return NULL;
}

const colo_gguf_tensor *colo_gguf_find_tensor(const colo_gguf *g, const char *name)
{
    int lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(g->tensors[g->by_name[mid]].name, name);
        if (!c)
            return &g->tensors[g->by_name[mid]];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

void colo_gguf_release(const colo_gguf *g, const colo_gguf_tensor *t)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)t->data + page - 1) & ~(page - 1);
    uintptr_t hi = ((uintptr_t)t->data + t->bytes) & ~(page - 1);
    (void)g;
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

void colo_gguf_release_range(const colo_gguf *g, const void *p, size_t bytes)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p & ~(page - 1); /* clean file pages: dropping a shared edge page costs a refault */
    uintptr_t hi = ((uintptr_t)p + bytes + page - 1) & ~(page - 1);
    (void)g;
    if (bytes && hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

colo_status colo_gguf_prefault(const colo_gguf *g, const void *p, size_t bytes, char *err, size_t errlen)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), huge = (uintptr_t)2 << 20;
    uintptr_t base = (uintptr_t)g->map, end = base + g->size;
    if (!bytes || (uintptr_t)p < base || (uintptr_t)p + bytes > end)
        return COLO_OK;
    /* Whole 2 MiB folios: from the huge page boundary below p (inside the
     * mapping) to the one above p + bytes (or the mapping's end). */
    uintptr_t lo = (uintptr_t)p & ~(huge - 1), hi = ((uintptr_t)p + bytes + huge - 1) & ~(huge - 1);
    lo = lo < base ? base : lo;
    hi = hi > end ? (end + page - 1) & ~(page - 1) : hi; /* the last page may be partial */
    /* Huge pages where the file system gives the page cache large folios
     * (ext4, xfs): what is read in from now on comes in 2 MiB folios,
     * mapped whole (decode reads every weight every step: 4 KiB pages cost
     * it about a tenth in TLB misses, and a wake maps 512 times fewer
     * entries). Asked for the whole mapping, so that it stays one area.
     * Neither MADV_WILLNEED nor the kernel's asynchronous readahead: they
     * fill the page cache in folios as small as their window, ahead of the
     * faults, where each fault of a populate under MADV_RANDOM reads one
     * whole 2 MiB folio (colo_file_populate; a warm wake then maps a third
     * as many entries). Advice: failure is harmless. */
    (void)madvise((void *)base, (end - base + page - 1) & ~(page - 1), MADV_HUGEPAGE);
    int e = colo_file_populate((const void *)lo, hi - lo); /* several reads in flight */
    /* once per reader (a load; its wakes share it): a file another
     * program read into the page cache in small folios is read again */
    if (e == 0 && !atomic_exchange(&((colo_gguf *)g)->folded, true))
        e = colo_file_refold(g->path, (const void *)lo, hi - lo);
    if (e == 0 || e == EINVAL || e == ENOSYS)
        return COLO_OK; /* EINVAL: an older kernel; the pages come on first touch */
    errno = e;
    colo_set_err(err, errlen, "%s: cannot read the weights: %s", g->path, strerror(errno));
    return COLO_EIO;
}

const void *colo_gguf_map_base(const colo_gguf *g) { return g->map; }

static colo_status get_int(const colo_gguf_kv *kv, int64_t *out, bool *is_unsigned_big)
{
    *is_unsigned_big = false;
    const uint8_t *v = kv->value;
    switch (kv->type) {
    case COLO_GGUF_U8: *out = *v; return COLO_OK;
    case COLO_GGUF_I8: *out = (int8_t)*v; return COLO_OK;
    case COLO_GGUF_U16: { uint16_t x; memcpy(&x, v, 2); *out = x; return COLO_OK; }
    case COLO_GGUF_I16: { int16_t x; memcpy(&x, v, 2); *out = x; return COLO_OK; }
    case COLO_GGUF_U32: { uint32_t x; memcpy(&x, v, 4); *out = x; return COLO_OK; }
    case COLO_GGUF_I32: { int32_t x; memcpy(&x, v, 4); *out = x; return COLO_OK; }
    case COLO_GGUF_U64: { uint64_t x; memcpy(&x, v, 8); *is_unsigned_big = x > INT64_MAX; *out = (int64_t)x; return COLO_OK; }
    case COLO_GGUF_I64: { int64_t x; memcpy(&x, v, 8); *out = x; return COLO_OK; }
    default: return COLO_EFORMAT;
    }
}

colo_status colo_gguf_get_i64(const colo_gguf *g, const char *key, int64_t *out)
{
    const colo_gguf_kv *kv = colo_gguf_find(g, key);
    if (!kv)
        return COLO_EINVAL;
    bool big;
    if (get_int(kv, out, &big) != COLO_OK || big)
        return COLO_EFORMAT;
    return COLO_OK;
}

colo_status colo_gguf_get_u32(const colo_gguf *g, const char *key, uint32_t *out)
{
    int64_t v;
    colo_status st = colo_gguf_get_i64(g, key, &v);
    if (st)
        return st;
    if (v < 0 || v > UINT32_MAX)
        return COLO_EFORMAT;
    *out = (uint32_t)v;
    return COLO_OK;
}

colo_status colo_gguf_get_f32(const colo_gguf *g, const char *key, float *out)
{
    const colo_gguf_kv *kv = colo_gguf_find(g, key);
    if (!kv)
        return COLO_EINVAL;
    if (kv->type == COLO_GGUF_F32) {
        memcpy(out, kv->value, 4);
        return COLO_OK;
    }
    if (kv->type == COLO_GGUF_F64) {
        double d;
        memcpy(&d, kv->value, 8);
        *out = (float)d;
        return COLO_OK;
    }
    return COLO_EFORMAT;
}

colo_status colo_gguf_get_bool(const colo_gguf *g, const char *key, bool *out)
{
    const colo_gguf_kv *kv = colo_gguf_find(g, key);
    if (!kv)
        return COLO_EINVAL;
    if (kv->type != COLO_GGUF_BOOL)
        return COLO_EFORMAT;
    *out = *kv->value != 0;
    return COLO_OK;
}

colo_status colo_gguf_get_str(const colo_gguf *g, const char *key, colo_gguf_str *out)
{
    const colo_gguf_kv *kv = colo_gguf_find(g, key);
    if (!kv)
        return COLO_EINVAL;
    if (kv->type != COLO_GGUF_STRING)
        return COLO_EFORMAT;
    memcpy(&out->len, kv->value, 8);
    out->ptr = (const char *)kv->value + 8;
    return COLO_OK;
}

colo_status colo_gguf_get_arr(const colo_gguf *g, const char *key, colo_gguf_type *type, uint64_t *len,
                              const uint8_t **data)
{
    const colo_gguf_kv *kv = colo_gguf_find(g, key);
    if (!kv)
        return COLO_EINVAL;
    if (kv->type != COLO_GGUF_ARRAY)
        return COLO_EFORMAT;
    *type = kv->arr_type;
    *len = kv->arr_len;
    *data = kv->arr_data;
    return COLO_OK;
}

colo_status colo_gguf_arr_str(const colo_gguf *g, const char *key, uint64_t i, colo_gguf_str *out)
{
    const colo_gguf_kv *kv = colo_gguf_find(g, key);
    if (!kv)
        return COLO_EINVAL;
    if (kv->type != COLO_GGUF_ARRAY || kv->arr_type != COLO_GGUF_STRING)
        return COLO_EFORMAT;
    if (i >= kv->arr_len)
        return COLO_EINVAL;
    colo_gguf *mg = (colo_gguf *)g;
    pthread_mutex_lock(&mg->idx_mu);
    if (mg->idx_kv != kv) {
        const uint8_t **idx = malloc((kv->arr_len ? kv->arr_len : 1) * sizeof *idx);
        if (!idx) {
            pthread_mutex_unlock(&mg->idx_mu);
            return COLO_ENOMEM;
        }
        const uint8_t *p = kv->arr_data; /* validated at open */
        for (uint64_t j = 0; j < kv->arr_len; j++) {
            uint64_t len;
            idx[j] = p;
            memcpy(&len, p, 8);
            p += 8 + len;
        }
        free(mg->idx);
        mg->idx = idx;
        mg->idx_kv = kv;
    }
    const uint8_t *p = mg->idx[i];
    pthread_mutex_unlock(&mg->idx_mu);
    memcpy(&out->len, p, 8);
    out->ptr = (const char *)p + 8;
    return COLO_OK;
}
