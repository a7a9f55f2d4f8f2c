/* The request object: its life cycle, its id, its accessors and the
 * per-request log line. Responses are written by http_response.c. */
#include "server/http/http_impl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <unistd.h>

#include "runtime/clock.h"
#include "runtime/log.h"

/* ---- request ids ----------------------------------------------------------------- */

static pthread_once_t id_once = PTHREAD_ONCE_INIT;
static uint64_t id_seed;
static atomic_uint_least64_t id_counter;

static void id_init(void)
{
    if (getrandom(&id_seed, sizeof id_seed, GRND_NONBLOCK) != (ssize_t)sizeof id_seed)
        id_seed = colo_now_ns() ^ ((uint64_t)getpid() << 32);
}

/* A bijection of the 64-bit counter (splitmix64's finalizer): distinct
 * counters give distinct ids; the seed makes them differ between runs. */
static uint64_t id_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static bool id_acceptable(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > COLO_HTTP_REQUEST_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch <= 0x20 || ch >= 0x7f || ch == '"' || ch == '\\')
            return false;
    }
    return true;
}

void http_make_id(char *out, size_t cap)
{
    pthread_once(&id_once, id_init);
    uint64_t n = atomic_fetch_add(&id_counter, 1) + 1;
    snprintf(out, cap, "%016llx", (unsigned long long)id_mix(id_seed + n * 0x9e3779b97f4a7c15ull));
}

void http_req_assign_id(colo_http_req *r)
{
    const char *given = colo_http_req_known(r, COLO_HDR_X_REQUEST_ID);
    if (given && id_acceptable(given)) {
        memcpy(r->id, given, strlen(given) + 1);
        return;
    }
    http_make_id(r->id, sizeof r->id);
}

/* ---- the request object -------------------------------------------------------------- */

colo_http_req *http_req_new(colo_http_server *s, http_conn *c)
{
    colo_http_req *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    if (!(r->pool = colo_pool_create())) {
        free(r);
        return NULL;
    }
    r->srv = s;
    r->conn = c;
    r->tokens = -1;
    r->queue_ms = -1;
    r->start_ns = colo_now_ns();
    r->http_minor = 1;
    return r;
}

void http_req_free(colo_http_req *r)
{
    if (!r)
        return;
    free(r->raw);
    free(r->body);
    colo_pool_destroy(r->pool);
    free(r);
}

static void log_request(const colo_http_req *r)
{
    char tokens[32] = "-", queue[32] = "-";
    if (r->tokens >= 0)
        snprintf(tokens, sizeof tokens, "%ld", r->tokens);
    if (r->queue_ms >= 0)
        snprintf(queue, sizeof queue, "%.1f", r->queue_ms);
    COLO_INFO("request id=%s method=%s path=%.200s model=%s status=%d tokens=%s queue_ms=%s total_ms=%.1f "
              "bytes_in=%zu bytes_out=%llu",
              r->id[0] ? r->id : "-", r->method[0] ? r->method : "-", r->path ? r->path : "-",
              r->model[0] ? r->model : "-", r->status, tokens, queue, (double)(colo_now_ns() - r->start_ns) / 1e6,
              r->body_len, (unsigned long long)r->bytes_out);
}

void http_req_retire(colo_http_req *r)
{
    colo_http_server *s = r->srv;
    if (r->log_status)
        r->status = r->log_status;
    if (!r->status)
        r->status = 499; /* the client went away before any response */
    if (s->done_fn && !r->local) /* the HTTP metrics count clients' requests */
        s->done_fn(r, s->done_ud);
    if (s->cfg.log_requests)
        log_request(r);
    atomic_fetch_add(&s->st_requests, 1);
    if (r->handed)
        atomic_fetch_sub(&s->st_in_flight, 1);
    http_req_free(r);
}

void http_req_abort(colo_http_req *r)
{
    r->conn = NULL;
    if (r->aborted)
        return;
    r->aborted = true;
    if (r->on_abort)
        r->on_abort(r, r->on_abort_ud);
}

/* ---- requests made inside the server ------------------------------------------------- */

colo_http_req *colo_http_local_new(colo_http_server *s, const char *method, const char *path, const char *body,
                                   size_t len, const colo_http_local *local)
{
    colo_http_req *r = http_req_new(s, NULL);
    if (!r)
        return NULL;
    const char *q = strchr(path, '?');
    size_t pl = q ? (size_t)(q - path) : strlen(path);
    r->path = colo_pool_strndup(r->pool, path, pl);
    r->query = colo_pool_strndup(r->pool, q ? q + 1 : "", q ? strlen(q + 1) : 0);
    r->local = colo_pool_alloc(r->pool, sizeof *r->local);
    r->body = malloc(len + 1);
    if (!r->path || !r->query || !r->local || !r->body) {
        http_req_free(r);
        return NULL;
    }
    *r->local = *local;
    memcpy(r->body, body, len);
    r->body[len] = 0;
    r->body_len = len;
    r->body_cap = len + 1;
    r->max_body_bytes = s->cfg.max_body_bytes;
    snprintf(r->method, sizeof r->method, "%s", method);
    http_make_id(r->id, sizeof r->id);
    return r;
}

void colo_http_local_run(colo_http_req *r) { r->srv->handler(r, r->srv->handler_ud); }

const colo_http_local *colo_http_req_local(const colo_http_req *r) { return r->local; }

/* ---- accessors ------------------------------------------------------------------------- */

const char *colo_http_req_method(const colo_http_req *r) { return r->method; }
const char *colo_http_req_path(const colo_http_req *r) { return r->path ? r->path : ""; }
const char *colo_http_req_query(const colo_http_req *r) { return r->query ? r->query : ""; }
const char *colo_http_req_id(const colo_http_req *r) { return r->id; }
uint64_t colo_http_req_start_ns(const colo_http_req *r) { return r->start_ns; }
int colo_http_req_status(const colo_http_req *r) { return r->status; }
bool colo_http_req_aborted(const colo_http_req *r) { return r->aborted; }
const char *colo_http_req_model(const colo_http_req *r) { return r->model; }
long colo_http_req_tokens(const colo_http_req *r) { return r->tokens; }
const char *colo_http_req_route(const colo_http_req *r) { return r->route; }
int colo_http_req_header_count(const colo_http_req *r) { return r->n_headers; }

/* The names of colo_http_known, in its order. */
static const char *const known_names[COLO_HDR_N_KNOWN] = {
    [COLO_HDR_AUTHORIZATION] = "Authorization",
    [COLO_HDR_X_API_KEY] = "x-api-key",
    [COLO_HDR_X_REQUEST_ID] = "X-Request-Id",
    [COLO_HDR_EXPECT] = "Expect",
    [COLO_HDR_TRANSFER_ENCODING] = "Transfer-Encoding",
    [COLO_HDR_ORIGIN] = "Origin",
    [COLO_HDR_AC_REQUEST_METHOD] = "Access-Control-Request-Method",
    [COLO_HDR_AC_REQUEST_HEADERS] = "Access-Control-Request-Headers",
    [COLO_HDR_HOST] = "Host",
};

static int known_index(const char *name)
{
    for (int k = 0; k < COLO_HDR_N_KNOWN; k++)
        if (!strcasecmp(name, known_names[k]))
            return k;
    return -1;
}

void http_req_note_header(colo_http_req *r, int i)
{
    int k = known_index(r->raw + r->headers[i].name);
    if (k < 0)
        return;
    if (!r->known_first[k])
        r->known_first[k] = i + 1;
    r->known_n[k]++;
}

const char *colo_http_req_known(const colo_http_req *r, colo_http_known h)
{
    if ((unsigned)h >= COLO_HDR_N_KNOWN || !r->known_first[h])
        return NULL;
    return r->raw + r->headers[r->known_first[h] - 1].value;
}

int colo_http_req_known_count(const colo_http_req *r, colo_http_known h)
{
    return (unsigned)h < COLO_HDR_N_KNOWN ? r->known_n[h] : 0;
}

const char *colo_http_req_header(const colo_http_req *r, const char *name)
{
    int k = known_index(name);
    if (k >= 0)
        return colo_http_req_known(r, (colo_http_known)k);
    for (int i = 0; i < r->n_headers; i++)
        if (!strcasecmp(r->raw + r->headers[i].name, name))
            return r->raw + r->headers[i].value;
    return NULL;
}

void colo_http_req_header_at(const colo_http_req *r, int i, const char **name, const char **value)
{
    *name = i >= 0 && i < r->n_headers ? r->raw + r->headers[i].name : NULL;
    *value = i >= 0 && i < r->n_headers ? r->raw + r->headers[i].value : NULL;
}

const char *colo_http_req_body(const colo_http_req *r, size_t *len)
{
    if (len)
        *len = r->body_len;
    return r->body ? r->body : "";
}

const char *colo_http_req_param(const colo_http_req *r, const char *name)
{
    for (int i = 0; i < r->n_params; i++)
        if (!strcmp(r->param_names[i], name))
            return r->param_values[i];
    return NULL;
}

colo_status colo_http_req_set_param(colo_http_req *r, const char *name, const char *value)
{
    if (r->n_params == HTTP_MAX_PARAMS)
        return COLO_EINVAL;
    char *n = colo_pool_strndup(r->pool, name, strlen(name)), *v = colo_pool_strndup(r->pool, value, strlen(value));
    if (!n || !v)
        return COLO_ENOMEM;
    r->param_names[r->n_params] = n;
    r->param_values[r->n_params++] = v;
    return COLO_OK;
}

void colo_http_req_set_model(colo_http_req *r, const char *model)
{
    snprintf(r->model, sizeof r->model, "%s", model ? model : "");
}
void colo_http_req_set_tokens(colo_http_req *r, long tokens) { r->tokens = tokens; }
void colo_http_req_set_log_status(colo_http_req *r, int status) { r->log_status = status; }
void colo_http_req_set_queue_ms(colo_http_req *r, double queue_ms) { r->queue_ms = queue_ms; }
void colo_http_req_set_route(colo_http_req *r, const char *pattern) { r->route = pattern; }

void colo_http_req_on_abort(colo_http_req *r, void (*fn)(colo_http_req *r, void *ud), void *ud)
{
    r->on_abort = fn;
    r->on_abort_ud = ud;
}

void colo_http_req_on_drain(colo_http_req *r, void (*fn)(colo_http_req *r, void *ud), void *ud)
{
    r->on_drain = fn;
    r->on_drain_ud = ud;
}

void colo_http_req_on_cut(colo_http_req *r, void (*fn)(colo_http_req *r, void *ud), void *ud)
{
    r->on_cut = fn;
    r->on_cut_ud = ud;
}

size_t colo_http_req_pending_bytes(const colo_http_req *r)
{
    return r->conn ? evbuffer_get_length(bufferevent_get_output(r->conn->bev)) : 0;
}
