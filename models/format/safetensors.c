/* safetensors reader: mmap, bounded JSON header, every offset checked. */
#include "models/format/safetensors.h"
#include "runtime/file.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct colo_safetensors {
    char *path;
    const uint8_t *map;
    size_t size;
    const uint8_t *data;  /* the data section */
    size_t data_size;
    int n;
    colo_safetensors_tensor *t; /* by offset */
    int *by_name;              /* indices into t, sorted by name */
    char *names;               /* every name, NUL-terminated, back to back */
};

static const struct {
    const char *name;
    size_t bytes;
    int type; /* colo_dtype, or -1 when colo does not compute with it */
} dtypes[] = {
    {"F32", 4, COLO_F32},  {"F16", 2, COLO_F16}, {"BF16", 2, COLO_BF16}, {"F64", 8, -1},
    {"I64", 8, -1},        {"U64", 8, -1},       {"I32", 4, -1},         {"U32", 4, -1},
    {"I16", 2, -1},        {"U16", 2, -1},       {"I8", 1, -1},          {"U8", 1, -1},
    {"BOOL", 1, -1},       {"F8_E4M3", 1, -1},   {"F8_E5M2", 1, -1},
};

static int cmp_offset(const void *a, const void *b)
{
    const colo_safetensors_tensor *x = a, *y = b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x->bytes < y->bytes ? -1 : x->bytes > y->bytes;
}

static int cmp_name(const void *a, const void *b, void *base)
{
    const colo_safetensors_tensor *t = base;
    return strcmp(t[*(const int *)a].name, t[*(const int *)b].name);
}

/* A non-negative JSON integer into *out. */
static bool get_count(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

/* Fills t from the JSON entry (name already set). A message into msg on failure. */
static colo_status parse_tensor(colo_safetensors *f, const json_t *e, colo_safetensors_tensor *t, char *msg,
                                size_t msglen)
{
    if (!json_is_object(e)) {
        snprintf(msg, msglen, "tensor %s: entry is not an object", t->name);
        return COLO_EFORMAT;
    }
    const json_t *jd = json_object_get(e, "dtype"), *js = json_object_get(e, "shape"),
                 *jo = json_object_get(e, "data_offsets");
    if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo)) {
        snprintf(msg, msglen, "tensor %s: dtype, shape or data_offsets is missing or of the wrong type", t->name);
        return COLO_EFORMAT;
    }
    const char *dn = json_string_value(jd);
    size_t k = 0, nk = sizeof dtypes / sizeof dtypes[0];
    while (k < nk && strcmp(dn, dtypes[k].name))
        k++;
    if (k == nk) {
        snprintf(msg, msglen, "tensor %s: unknown dtype \"%.16s\"", t->name, dn);
        return COLO_EFORMAT;
    }
    snprintf(t->dtype_name, sizeof t->dtype_name, "%s", dtypes[k].name);
    t->elem_bytes = dtypes[k].bytes;
    t->computable = dtypes[k].type >= 0;
    t->type = t->computable ? (colo_dtype)dtypes[k].type : COLO_F32;

    size_t nd = json_array_size(js);
    if (nd > COLO_SAFETENSORS_MAX_DIMS) {
        snprintf(msg, msglen, "tensor %s: %zu dimensions (at most %d)", t->name, nd, COLO_SAFETENSORS_MAX_DIMS);
        return COLO_EFORMAT;
    }
    t->n_dims = (int)nd;
    uint64_t n_el = 1;
    for (size_t i = 0; i < nd; i++) {
        uint64_t d;
        if (!get_count(json_array_get(js, i), &d)) {
            snprintf(msg, msglen, "tensor %s: shape[%zu] is not a non-negative integer", t->name, i);
            return COLO_EFORMAT;
        }
        if (d && n_el > (uint64_t)INT64_MAX / d) {
            snprintf(msg, msglen, "tensor %s: element count overflows", t->name);
            return COLO_EFORMAT;
        }
        n_el *= d;
        t->shape[i] = (int64_t)d;
    }
    t->n_elements = (int64_t)n_el;

    uint64_t begin, end;
    if (json_array_size(jo) != 2 || !get_count(json_array_get(jo, 0), &begin) ||
        !get_count(json_array_get(jo, 1), &end)) {
        snprintf(msg, msglen, "tensor %s: data_offsets is not two non-negative integers", t->name);
        return COLO_EFORMAT;
    }
    if (begin > end || end > f->data_size) {
        snprintf(msg, msglen, "tensor %s: data_offsets [%llu, %llu] outside the data section (%zu bytes)", t->name,
                 (unsigned long long)begin, (unsigned long long)end, f->data_size);
        return COLO_EFORMAT;
    }
    if (n_el > SIZE_MAX / t->elem_bytes || end - begin != n_el * t->elem_bytes) {
        snprintf(msg, msglen, "tensor %s: %llu bytes of data for %llu elements of %s", t->name,
                 (unsigned long long)(end - begin), (unsigned long long)n_el, t->dtype_name);
        return COLO_EFORMAT;
    }
    t->offset = begin;
    t->bytes = (size_t)(end - begin);
    t->data = f->data + begin;
    return COLO_OK;
}

/* Validates the mapped file into f. */
static colo_status parse(colo_safetensors *f, char *msg, size_t msglen)
{
    if (f->size < 8) {
        snprintf(msg, msglen, "file of %zu bytes has no header length", f->size);
        return COLO_EFORMAT;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | f->map[i];
    if (hlen > COLO_SAFETENSORS_MAX_HEADER || hlen > f->size - 8) {
        snprintf(msg, msglen, "header length %llu is past the end of the file (%zu bytes) or over %u bytes",
                 (unsigned long long)hlen, f->size, COLO_SAFETENSORS_MAX_HEADER);
        return COLO_EFORMAT;
    }
    f->data = f->map + 8 + hlen;
    f->data_size = f->size - 8 - (size_t)hlen;

    json_error_t je;
    json_t *root = json_loadb((const char *)f->map + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    colo_status st = COLO_EFORMAT;
    if (!root) {
        snprintf(msg, msglen, "header is not valid JSON: %s (byte %d)", je.text, je.position);
        return COLO_EFORMAT;
    }
    if (!json_is_object(root)) {
        snprintf(msg, msglen, "header is not a JSON object");
        goto out_root;
    }
    size_t n = json_object_size(root), names_len = 0;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        if (strcmp(key, "__metadata__"))
            names_len += strlen(key) + 1;
    }
    if (json_object_get(root, "__metadata__"))
        n--;
    f->t = calloc(n ? n : 1, sizeof *f->t);
    f->by_name = calloc(n ? n : 1, sizeof *f->by_name);
    f->names = malloc(names_len ? names_len : 1);
    if (!f->t || !f->by_name || !f->names) {
        snprintf(msg, msglen, "out of memory");
        st = COLO_ENOMEM;
        goto out_root;
    }
    char *np = f->names;
    json_object_foreach(root, key, val)
    {
        if (!strcmp(key, "__metadata__"))
            continue;
        colo_safetensors_tensor *t = &f->t[f->n];
        size_t kl = strlen(key) + 1;
        memcpy(np, key, kl);
        t->name = np;
        np += kl;
        if ((st = parse_tensor(f, val, t, msg, msglen)) != COLO_OK)
            goto out_root;
        f->n++;
    }
    qsort(f->t, (size_t)f->n, sizeof *f->t, cmp_offset);
    for (int i = 1; i < f->n; i++) {
        const colo_safetensors_tensor *a = &f->t[i - 1], *b = &f->t[i];
        if (b->offset < a->offset + a->bytes) {
            snprintf(msg, msglen, "tensor %s overlaps tensor %s", b->name, a->name);
            st = COLO_EFORMAT;
            goto out_root;
        }
    }
    for (int i = 0; i < f->n; i++)
        f->by_name[i] = i;
    qsort_r(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_name, f->t);
    st = COLO_OK;
out_root:
    json_decref(root);
    return st;
}

colo_status colo_safetensors_open(const char *path, colo_safetensors **out, char *err, size_t errlen)
{
    char msg[512] = "";
    colo_status st = COLO_EIO;
    *out = NULL;
    colo_safetensors *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        colo_set_err(err, errlen, "%s: out of memory", path);
        free(f);
        return COLO_ENOMEM;
    }
    int fd = colo_file_open_regular(path, &f->size, err, errlen);
    if (fd < 0)
        goto out_free;
    if (f->size) {
        void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            colo_set_err(err, errlen, "%s: cannot map: %s", path, strerror(errno));
            goto out_close;
        }
        f->map = m;
    }
    close(fd);
    fd = -1;
    if ((st = parse(f, msg, sizeof msg)) != COLO_OK) {
        colo_set_err(err, errlen, "%s: %s", path, msg);
        goto out_free;
    }
    *out = f;
    return COLO_OK;

out_close:
    close(fd);
out_free:
    colo_safetensors_close(f);
    return st;
}

void colo_safetensors_close(colo_safetensors *f)
{
    if (!f)
        return;
    if (f->map)
        munmap((void *)f->map, f->size);
    free(f->t);
    free(f->by_name);
    free(f->names);
    free(f->path);
    free(f);
}

const char *colo_safetensors_path(const colo_safetensors *f) { return f->path; }
size_t colo_safetensors_file_size(const colo_safetensors *f) { return f->size; }
int colo_safetensors_n_tensors(const colo_safetensors *f) { return f->n; }

const colo_safetensors_tensor *colo_safetensors_tensor_at(const colo_safetensors *f, int i)
{
    return i >= 0 && i < f->n ? &f->t[i] : NULL;
}

const colo_safetensors_tensor *colo_safetensors_find(const colo_safetensors *f, const char *name)
{
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const colo_safetensors_tensor *t = &f->t[f->by_name[mid]];
        int c = strcmp(name, t->name);
        if (!c)
            return t;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return NULL;
}

void colo_safetensors_release(const colo_safetensors *f, const colo_safetensors_tensor *t)
{
    long page = sysconf(_SC_PAGESIZE);
    if (!t || !t->bytes || page <= 0)
        return;
    uintptr_t lo = ((uintptr_t)t->data + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    uintptr_t hi = ((uintptr_t)t->data + t->bytes) & ~((uintptr_t)page - 1);
    uintptr_t map_end = (uintptr_t)f->map + f->size;
    if (hi > map_end)
        hi = map_end;
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}
