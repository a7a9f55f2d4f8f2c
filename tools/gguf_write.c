/* GGUF v3 writer: metadata and tensor infos are encoded in memory; tensor
 * data is streamed to the file one tensor at a time. */
#include "tools/gguf_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} bytes;

typedef struct {
    char name[128];
    colo_dtype type;
    int n_dims;
    int64_t ne[4];
    size_t size;
} wtensor;

struct colo_gguf_writer {
    bytes kv;
    uint64_t n_kv;
    wtensor *t;
    int n_t, cap_t;
    uint32_t align; /* 0 until set: 32 */
};

static void put(bytes *b, const void *p, size_t n)
{
    if (b->oom || n == 0)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void put_u32(bytes *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(bytes *b, uint64_t v) { put(b, &v, 8); }
static void put_str(bytes *b, const char *s)
{
    uint64_t n = strlen(s);
    put_u64(b, n);
    put(b, s, n);
}

colo_gguf_writer *colo_gguf_writer_create(void) { return calloc(1, sizeof(colo_gguf_writer)); }

void colo_gguf_writer_free(colo_gguf_writer *w)
{
    if (!w)
        return;
    free(w->kv.p);
    free(w->t);
    free(w);
}

static colo_status key(colo_gguf_writer *w, const char *k, colo_gguf_type t)
{
    put_str(&w->kv, k);
    put_u32(&w->kv, t);
    w->n_kv++;
    return w->kv.oom ? COLO_ENOMEM : COLO_OK;
}

#define SCALAR(fn, ctype, gtype)                                                                         \
    colo_status fn(colo_gguf_writer *w, const char *k, ctype v)                                          \
    {                                                                                                    \
        key(w, k, gtype);                                                                                \
        put(&w->kv, &v, sizeof v);                                                                       \
        return w->kv.oom ? COLO_ENOMEM : COLO_OK;                                                        \
    }
SCALAR(colo_gguf_writer_add_u32, uint32_t, COLO_GGUF_U32)
SCALAR(colo_gguf_writer_add_i32, int32_t, COLO_GGUF_I32)
SCALAR(colo_gguf_writer_add_u64, uint64_t, COLO_GGUF_U64)
SCALAR(colo_gguf_writer_add_f32, float, COLO_GGUF_F32)
SCALAR(colo_gguf_writer_add_u8, uint8_t, COLO_GGUF_U8)
SCALAR(colo_gguf_writer_add_i8, int8_t, COLO_GGUF_I8)
SCALAR(colo_gguf_writer_add_u16, uint16_t, COLO_GGUF_U16)
SCALAR(colo_gguf_writer_add_i16, int16_t, COLO_GGUF_I16)
SCALAR(colo_gguf_writer_add_i64, int64_t, COLO_GGUF_I64)
SCALAR(colo_gguf_writer_add_f64, double, COLO_GGUF_F64)

colo_status colo_gguf_writer_add_bool(colo_gguf_writer *w, const char *k, bool v)
{
    uint8_t b = v;
    key(w, k, COLO_GGUF_BOOL);
    put(&w->kv, &b, 1);
    return w->kv.oom ? COLO_ENOMEM : COLO_OK;
}

colo_status colo_gguf_writer_add_str(colo_gguf_writer *w, const char *k, const char *v)
{
    key(w, k, COLO_GGUF_STRING);
    put_str(&w->kv, v);
    return w->kv.oom ? COLO_ENOMEM : COLO_OK;
}

/* The key of an array of n elements of type t; its elements follow. */
static void array_head(colo_gguf_writer *w, const char *k, colo_gguf_type t, uint64_t n)
{
    key(w, k, COLO_GGUF_ARRAY);
    put_u32(&w->kv, t);
    put_u64(&w->kv, n);
}

colo_status colo_gguf_writer_add_str_arr(colo_gguf_writer *w, const char *k, const char *const *v, uint64_t n)
{
    array_head(w, k, COLO_GGUF_STRING, n);
    for (uint64_t i = 0; i < n; i++)
        put_str(&w->kv, v[i]);
    return w->kv.oom ? COLO_ENOMEM : COLO_OK;
}

colo_status colo_gguf_writer_add_i32_arr(colo_gguf_writer *w, const char *k, const int32_t *v, uint64_t n)
{
    return colo_gguf_writer_add_arr(w, k, COLO_GGUF_I32, v, n);
}

colo_status colo_gguf_writer_add_f32_arr(colo_gguf_writer *w, const char *k, const float *v, uint64_t n)
{
    return colo_gguf_writer_add_arr(w, k, COLO_GGUF_F32, v, n);
}

colo_status colo_gguf_writer_add_arr(colo_gguf_writer *w, const char *k, colo_gguf_type t, const void *v, uint64_t n)
{
    size_t es = colo_gguf_scalar_size(t);
    if (!es || n > SIZE_MAX / es)
        return COLO_EINVAL;
    array_head(w, k, t, n);
    put(&w->kv, v, (size_t)n * es);
    return w->kv.oom ? COLO_ENOMEM : COLO_OK;
}

colo_status colo_gguf_writer_add_raw(colo_gguf_writer *w, const char *k, colo_gguf_type t, const void *bytes,
                                     size_t n)
{
    key(w, k, t);
    put(&w->kv, bytes, n);
    return w->kv.oom ? COLO_ENOMEM : COLO_OK;
}

colo_status colo_gguf_writer_set_alignment(colo_gguf_writer *w, uint32_t align)
{
    if (w->align || !align || (align & (align - 1)) || align > (1u << 20))
        return COLO_EINVAL;
    w->align = align;
    return align == 32 ? COLO_OK : colo_gguf_writer_add_u32(w, "general.alignment", align);
}

colo_status colo_gguf_writer_add_tensor(colo_gguf_writer *w, const char *name, colo_dtype type, int n_dims,
                                        const int64_t *ne)
{
    if (!name || strlen(name) > 127 || n_dims < 1 || n_dims > 4)
        return COLO_EINVAL;
    int64_t rows = 1;
    for (int d = 1; d < n_dims; d++)
        rows *= ne[d];
    size_t rb = colo_dtype_row_bytes(type, ne[0]);
    if (!rb || rows <= 0)
        return COLO_EINVAL;
    if (w->n_t == w->cap_t) {
        int cap = w->cap_t ? w->cap_t * 2 : 64;
        wtensor *t = realloc(w->t, (size_t)cap * sizeof *t);
        if (!t)
            return COLO_ENOMEM;
        w->t = t;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type;
    t->n_dims = n_dims;
    for (int d = 0; d < 4; d++)
        t->ne[d] = d < n_dims ? ne[d] : 1;
    t->size = rb * (size_t)rows;
    return COLO_OK;
}

static bool write_pad(FILE *f, size_t at, size_t align)
{
    static const uint8_t zero[4096];
    size_t pad = (align - at % align) % align;
    while (pad > 0) {
        size_t k = pad < sizeof zero ? pad : sizeof zero;
        if (fwrite(zero, 1, k, f) != k)
            return false;
        pad -= k;
    }
    return true;
}

colo_status colo_gguf_writer_finish(colo_gguf_writer *w, const char *path, colo_gguf_fill_fn fill, void *ctx,
                                    char *err, size_t errlen)
{
    size_t align = w->align ? w->align : 32;
    bytes head = {0};
    put(&head, "GGUF", 4);
    put_u32(&head, 3);
    put_u64(&head, (uint64_t)w->n_t);
    put_u64(&head, w->n_kv);
    put(&head, w->kv.p, w->kv.n);
    uint64_t off = 0;
    for (int i = 0; i < w->n_t; i++) {
        wtensor *t = &w->t[i];
        put_str(&head, t->name);
        put_u32(&head, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++)
            put_u64(&head, (uint64_t)t->ne[d]);
        put_u32(&head, (uint32_t)t->type);
        put_u64(&head, off);
        off += (t->size + align - 1) / align * align;
    }
    if (head.oom || w->kv.oom) {
        free(head.p);
        colo_set_err(err, errlen, "%s: out of memory", path);
        return COLO_ENOMEM;
    }
    colo_status st = COLO_OK;
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(head.p);
        colo_set_err(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        return COLO_EIO;
    }
    if (fwrite(head.p, 1, head.n, f) != head.n || !write_pad(f, head.n, align))
        st = COLO_EIO;
    void *buf = NULL;
    size_t cap = 0;
    for (int i = 0; st == COLO_OK && i < w->n_t; i++) {
        wtensor *t = &w->t[i];
        if (t->size > cap) {
            free(buf);
            cap = t->size;
            buf = malloc(cap);
            if (!buf) {
                st = COLO_ENOMEM;
                break;
            }
        }
        memset(buf, 0, t->size);
        if (fill && (st = fill(ctx, i, buf, t->size)) != COLO_OK)
            break;
        if (fwrite(buf, 1, t->size, f) != t->size || !write_pad(f, t->size, align))
            st = COLO_EIO;
    }
    free(buf);
    free(head.p);
    if (fclose(f) && st == COLO_OK)
        st = COLO_EIO;
    if (st != COLO_OK) {
        colo_set_err(err, errlen, "%s: write failed (%s)", path, colo_status_str(st));
        remove(path);
    }
    return st;
}
