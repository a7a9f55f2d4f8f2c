/* OpenAI's Files API: uploads kept beside the usage ledger, each owned by
 * the tenant that sent it (server/batches.h). */
#include "server/batches_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/log.h"
#include "server/multipart.h"
#include "server/tenants/tenants.h"

#define MAX_PARTS 8

/* ---- shared with batches.c, batch_run.c and responses.c ----------------------------------- */

int64_t colo_batches_now_s(void) { return (int64_t)time(NULL); }

bool colo_batches_owner(colo_batches *b, colo_http_req *req, colo_batch_owner *o, int *key)
{
    const char *why = "unknown API key";
    int k = colo_tenants_authenticate(b->tenants, req, &why);
    if (k < 0) { /* the front door checked already */
        colo_http_add_header(req, "WWW-Authenticate", "Bearer");
        colo_http_error(req, 401, "invalid_api_key", "%s", why);
        return false;
    }
    colo_req_identity who = {0};
    colo_tenants_identify(b->tenants, k, &who);
    snprintf(o->organization, sizeof o->organization, "%s", who.organisation);
    snprintf(o->project, sizeof o->project, "%s", who.project);
    snprintf(o->key, sizeof o->key, "%s", who.key_id);
    *key = k;
    return true;
}

void colo_batches_new_id(const char *prefix, char *out, size_t cap)
{
    unsigned char r[12];
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        uint64_t t = (uint64_t)time(NULL) ^ (uint64_t)clock();
        for (size_t i = 0; i < sizeof r; i++)
            r[i] = (unsigned char)(t >> (8 * (i % 8))) ^ (unsigned char)(i * 37 + rand());
    }
    int n = snprintf(out, cap, "%s", prefix);
    for (size_t i = 0; i < sizeof r && n > 0 && (size_t)n + 2 < cap; i++)
        n += snprintf(out + n, cap - (size_t)n, "%02x", r[i]);
}

char *colo_batches_read_file(colo_batches *b, const char *id, size_t *len)
{
    char path[1200];
    colo_batch_store_file_path(b->store, id, path, sizeof path);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *data = NULL;
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && st.st_size >= 0 && (data = malloc((size_t)st.st_size + 1))) {
        size_t n = fread(data, 1, (size_t)st.st_size, f);
        if (n != (size_t)st.st_size) {
            free(data);
            data = NULL;
        } else {
            data[n] = 0;
            *len = n;
        }
    }
    fclose(f);
    return data;
}

/* Writes data to path durably (a temporary file, fsync, rename). */
static bool write_durably(const char *path, const char *data, size_t len)
{
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return false;
    bool ok = true;
    for (size_t o = 0; ok && o < len;) {
        ssize_t w = write(fd, data + o, len - o);
        if (w < 0 && errno == EINTR)
            continue;
        ok = w > 0;
        o += ok ? (size_t)w : 0;
    }
    ok = ok && fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    ok = ok && rename(tmp, path) == 0;
    if (!ok)
        unlink(tmp);
    return ok;
}

json_t *colo_batches_write_file(colo_batches *b, const colo_batch_owner *o, const char *purpose, const char *filename,
                                const char *data, size_t len)
{
    char id[64], path[1200];
    colo_batches_new_id("file-", id, sizeof id);
    colo_batch_store_file_path(b->store, id, path, sizeof path);
    if (!write_durably(path, data, len)) {
        COLO_ERROR("files: cannot write %s: %s", path, strerror(errno));
        return NULL;
    }
    json_t *obj = json_pack("{s:s,s:s,s:I,s:I,s:s%,s:s,s:s,s:n,s:n}", "id", id, "object", "file", "bytes",
                            (json_int_t)len, "created_at", (json_int_t)colo_batches_now_s(), "filename", filename,
                            strlen(filename), "purpose", purpose, "status", "processed", "status_details",
                            "expires_at");
    if (!obj || colo_batch_store_put_file(b->store, o, obj) != COLO_OK) {
        json_decref(obj);
        unlink(path);
        return NULL;
    }
    return obj;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

bool colo_batches_query(const char *query, const char *name, char *buf, size_t cap)
{
    size_t nl = strlen(name);
    for (const char *p = query; p && *p;) {
        size_t n = strcspn(p, "&");
        if (n > nl && !strncmp(p, name, nl) && p[nl] == '=') {
            size_t o = 0;
            for (const char *c = p + nl + 1; c < p + n; c++) {
                if (o + 1 >= cap)
                    return false;
                if (*c == '%' && c + 2 < p + n && hex_digit(c[1]) >= 0 && hex_digit(c[2]) >= 0) {
                    buf[o++] = (char)(hex_digit(c[1]) * 16 + hex_digit(c[2]));
                    c += 2;
                } else {
                    buf[o++] = *c == '+' ? ' ' : *c;
                }
            }
            buf[o] = 0;
            return memchr(buf, 0, o) == NULL;
        }
        p += n + (p[n] == '&');
    }
    return false;
}

bool colo_batches_query_limit(colo_http_req *req, int *limit)
{
    char limit_s[16];
    *limit = 20;
    if (!colo_batches_query(colo_http_req_query(req), "limit", limit_s, sizeof limit_s))
        return true;
    char *end;
    long l = strtol(limit_s, &end, 10);
    if (*end || l < 1 || l > 100) {
        colo_http_error(req, 400, "invalid_request", "limit: must be an integer from 1 to 100");
        return false;
    }
    *limit = (int)l;
    return true;
}

/* Calls the route's handler once the caller is known as an owner. */
static void owned(colo_http_req *req, void *ud)
{
    const colo_batches_bound *r = ud;
    colo_batches_caller c;
    if (colo_batches_owner(r->b, req, &c.owner, &c.key))
        r->route->fn(r->b, req, &c);
}

colo_status colo_batches_add_routes(colo_batches *b, const colo_batches_route *routes, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (b->n_bound == (int)(sizeof b->bound / sizeof *b->bound))
            return COLO_ENOMEM;
        colo_batches_bound *r = &b->bound[b->n_bound++];
        *r = (colo_batches_bound){.b = b, .route = &routes[i]};
        if (colo_server_route(b->srv, routes[i].method, routes[i].pattern, owned, r, 0) != COLO_OK)
            return COLO_ENOMEM;
    }
    return COLO_OK;
}

void colo_batches_respond_list(colo_http_req *req, json_t *data, bool more)
{
    size_t n = json_array_size(data);
    json_t *first = n ? json_object_get(json_array_get(data, 0), "id") : NULL;
    json_t *last = n ? json_object_get(json_array_get(data, n - 1), "id") : NULL;
    colo_http_respond_json(req, 200,
                           json_pack("{s:s,s:o,s:O?,s:O?,s:b}", "object", "list", "data", data, "first_id", first,
                                     "last_id", last, "has_more", more));
}

/* ---- the routes ----------------------------------------------------------------------------- */

/* A filename fit for the object: its last path segment, without control bytes. */
static void clean_name(const char *name, size_t len, char *out, size_t cap)
{
    for (size_t i = len; i > 0; i--)
        if (name[i - 1] == '/' || name[i - 1] == '\\') {
            len -= i;
            name += i;
            break;
        }
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < cap; i++)
        out[o++] = (unsigned char)name[i] < 0x20 ? '_' : name[i];
    out[o] = 0;
    if (!o)
        snprintf(out, cap, "upload");
}

static void h_upload(colo_batches *b, colo_http_req *req, const colo_batches_caller *c)
{
    size_t len;
    const char *body = colo_http_req_body(req, &len);
    colo_multipart_part parts[MAX_PARTS];
    char err[256];
    int n = colo_multipart_parse(colo_http_req_header(req, "Content-Type"), body, len, parts, MAX_PARTS, err,
                                 sizeof err);
    if (n < 0) {
        colo_http_error(req, 400, "invalid_request", "%s", err);
        return;
    }
    const colo_multipart_part *purpose = colo_multipart_find(parts, n, "purpose");
    const colo_multipart_part *file = colo_multipart_find(parts, n, "file");
    if (!purpose || purpose->len != 5 || memcmp(purpose->data, "batch", 5)) {
        colo_http_error(req, 400, "invalid_request", "purpose: must be 'batch' (the only purpose colo keeps files for)");
        return;
    }
    if (!file) {
        colo_http_error(req, 400, "invalid_request", "file: missing (a part named 'file' with the JSONL input)");
        return;
    }
    if (file->len > b->cfg.max_file_bytes) {
        colo_http_error(req, 413, "file_too_large", "file: %zu bytes, over batches.max_file_bytes (%llu bytes)",
                        file->len, (unsigned long long)b->cfg.max_file_bytes);
        return;
    }
    char name[256];
    clean_name(file->filename ? file->filename : "upload.jsonl", file->filename ? file->filename_len : 12, name,
               sizeof name);
    json_t *obj = colo_batches_write_file(b, &c->owner, "batch", name, file->data, file->len);
    if (!obj) {
        colo_http_error(req, 500, "internal_error", "the file could not be stored");
        return;
    }
    colo_http_respond_json(req, 200, obj);
}

static void h_list(colo_batches *b, colo_http_req *req, const colo_batches_caller *c)
{
    char purpose[32];
    bool filtered = colo_batches_query(colo_http_req_query(req), "purpose", purpose, sizeof purpose);
    json_t *data = colo_batch_store_list_files(b->store, &c->owner, filtered ? purpose : NULL);
    if (!data) {
        colo_http_error(req, 500, "internal_error", "the files could not be listed");
        return;
    }
    colo_http_respond_json(req, 200, json_pack("{s:s,s:o,s:b}", "object", "list", "data", data, "has_more", 0));
}

/* The caller's file of the path's id, or NULL after answering 404. */
static json_t *caller_file(colo_batches *b, colo_http_req *req, const colo_batch_owner *o)
{
    const char *id = colo_http_req_param(req, "id");
    json_t *f = id ? colo_batch_store_get_file(b->store, o, id) : NULL;
    if (!f)
        colo_http_error(req, 404, "not_found", "No such File object: %.64s", id ? id : "");
    return f;
}

static void h_get(colo_batches *b, colo_http_req *req, const colo_batches_caller *c)
{
    json_t *f = caller_file(b, req, &c->owner);
    if (f)
        colo_http_respond_json(req, 200, f);
}

static void h_content(colo_batches *b, colo_http_req *req, const colo_batches_caller *c)
{
    json_t *f = caller_file(b, req, &c->owner);
    if (!f)
        return;
    size_t len = 0;
    char *data = colo_batches_read_file(b, json_string_value(json_object_get(f, "id")), &len);
    json_decref(f);
    if (!data) {
        colo_http_error(req, 500, "internal_error", "the file's content could not be read");
        return;
    }
    colo_http_respond(req, 200, "application/octet-stream", data, len);
    free(data);
}

static void h_delete(colo_batches *b, colo_http_req *req, const colo_batches_caller *c)
{
    json_t *f = caller_file(b, req, &c->owner);
    if (!f)
        return;
    const char *id = json_string_value(json_object_get(f, "id"));
    colo_status st = colo_batch_store_delete_file(b->store, &c->owner, id);
    if (st != COLO_OK) {
        json_decref(f);
        colo_http_error(req, 500, "internal_error", "the file could not be deleted");
        return;
    }
    colo_http_respond_json(req, 200, json_pack("{s:s,s:s,s:b}", "id", id, "object", "file", "deleted", 1));
    json_decref(f);
}

colo_status colo_files_routes(colo_batches *b)
{
    static char message[160];
    snprintf(message, sizeof message, "the file is larger than batches.max_file_bytes (%llu bytes)",
             (unsigned long long)b->cfg.max_file_bytes);
    /* the form around the file: its boundaries and the purpose */
    colo_http_server_set_upload(b->http, "/v1/files", (size_t)b->cfg.max_file_bytes + 64 * 1024, message);
    static const colo_batches_route routes[] = {
        {"POST", "/v1/files", h_upload},
        {"GET", "/v1/files", h_list},
        {"GET", "/v1/files/{id}", h_get},
        {"GET", "/v1/files/{id}/content", h_content},
        {"DELETE", "/v1/files/{id}", h_delete},
    };
    return colo_batches_add_routes(b, routes, sizeof routes / sizeof *routes);
}
