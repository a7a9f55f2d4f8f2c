/* One HTTP connection: llhttp fills the request, an explicit state machine
 * (http_conn_state) moves it from reading to handling to writing, each state
 * with its own timeout. A connection is never freed inside its own callbacks:
 * http_conn_close_later marks it CLOSING and frees it on the next loop turn. */
#include "server/http/http_impl.h"

#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "runtime/log.h"

#define HTTP_HEADER_LINE_OVERHEAD 4 /* ": " and CRLF */

static void conn_process_input(http_conn *c);

static void arm_timer(http_conn *c, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(c->timer, &tv);
}

/* ---- the idle list: connections waiting for a request, oldest first ------------- */

static void idle_push(colo_http_server *s, http_conn *c)
{
    if (c->in_idle_list)
        return;
    c->idle_next = NULL;
    c->idle_prev = s->idle_tail;
    if (s->idle_tail)
        s->idle_tail->idle_next = c;
    else
        s->idle_head = c;
    s->idle_tail = c;
    c->in_idle_list = true;
}

void http_idle_remove(colo_http_server *s, http_conn *c)
{
    if (!c->in_idle_list)
        return;
    if (c->idle_prev)
        c->idle_prev->idle_next = c->idle_next;
    else
        s->idle_head = c->idle_next;
    if (c->idle_next)
        c->idle_next->idle_prev = c->idle_prev;
    else
        s->idle_tail = c->idle_prev;
    c->idle_prev = c->idle_next = NULL;
    c->in_idle_list = false;
}

static void enter_idle(http_conn *c)
{
    c->state = CONN_IDLE;
    c->bytes_in = c->header_bytes = 0;
    idle_push(c->srv, c);
    arm_timer(c, c->srv->cfg.idle_timeout_ms);
}

/* ---- closing ------------------------------------------------------------------------ */

/* Every change of a connection's output: the server's total of unsent bytes. */
static void on_output_change(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    (void)buf;
    colo_http_server *s = arg;
    if (info->n_added >= info->n_deleted) {
        size_t now = atomic_fetch_add(&s->out_pending, info->n_added - info->n_deleted) + info->n_added -
                     info->n_deleted;
        size_t peak = atomic_load(&s->out_pending_peak);
        while (now > peak && !atomic_compare_exchange_weak(&s->out_pending_peak, &peak, now))
            ;
    } else {
        atomic_fetch_sub(&s->out_pending, info->n_deleted - info->n_added);
    }
}

void http_conn_free_now(http_conn *c)
{
    colo_http_server *s = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    http_idle_remove(s, c);
    colo_http_req *r = c->req;
    c->req = NULL;
    if (r) {
        if (r->handed && !r->finished)
            http_req_abort(r); /* the handler finishes it later */
        else
            http_req_free(r);
    }
    struct evbuffer *out = bufferevent_get_output(c->bev);
    size_t dropped = evbuffer_get_length(out);
    if (evbuffer_remove_cb(out, on_output_change, s) == 0)
        atomic_fetch_sub(&s->out_pending, dropped);
    bufferevent_free(c->bev);
#ifdef __GLIBC__
    /* A client that did not read left megabytes of output behind: give the
     * freed heap back to the system, not only to malloc's free lists. */
    if (dropped >= (1u << 20))
        malloc_trim(0);
#endif
    event_free(c->timer);
    free(c);
    s->n_conns--;
    atomic_fetch_sub(&s->st_open, 1);
    http_server_conn_gone(s);
}

void http_conn_close_later(http_conn *c)
{
    if (c->state == CONN_CLOSING)
        return;
    c->state = CONN_CLOSING;
    http_idle_remove(c->srv, c);
    bufferevent_disable(c->bev, EV_READ | EV_WRITE);
    if (c->req && c->req->handed && !c->req->finished) {
        colo_http_req *r = c->req;
        c->req = NULL;
        http_req_abort(r);
    }
    event_del(c->timer);
    event_active(c->timer, EV_TIMEOUT, 1);
}

/* Error responses close lingeringly; others as soon as they are written. */
static void conn_after_write(http_conn *c)
{
    if (!c->close_after && !c->srv->shutting_down) {
        llhttp_resume(&c->parser);
        enter_idle(c);
        conn_process_input(c);
        return;
    }
    if (!c->linger_after || c->eof) {
        http_conn_close_later(c);
        return;
    }
    c->state = CONN_LINGERING;
    shutdown(bufferevent_getfd(c->bev), SHUT_WR);
    evbuffer_drain(bufferevent_get_input(c->bev), evbuffer_get_length(bufferevent_get_input(c->bev)));
    bufferevent_setwatermark(c->bev, EV_READ, 0, 0);
    bufferevent_enable(c->bev, EV_READ);
    arm_timer(c, c->srv->cfg.linger_ms);
}

void http_conn_request_finished(http_conn *c)
{
    colo_http_req *r = c->req;
    c->req = NULL;
    r->conn = NULL;
    http_req_retire(r);
    if (c->state == CONN_CLOSING)
        return;
    c->state = CONN_WRITING;
    event_del(c->timer);
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) {
        /* nothing to flush (cannot happen for a real response); go on next turn */
        event_active(c->timer, EV_TIMEOUT, 1);
    }
}

void http_conn_fail(http_conn *c, int status, const char *msg)
{
    c->close_after = c->linger_after = true;
    if (!c->req) {
        c->req = http_req_new(c->srv, c);
        if (!c->req) {
            http_conn_close_later(c);
            return;
        }
    }
    colo_http_req *r = c->req;
    if (!r->id[0])
        http_req_assign_id(r);
    r->keep_alive = false;
    colo_http_error(r, status, NULL, "%s", msg);
}

/* ---- parsing ----------------------------------------------------------------------- */

static http_conn *conn_of(llhttp_t *p) { return p->data; }

static int parse_error(llhttp_t *p, int status, const char *msg)
{
    http_conn *c = conn_of(p);
    c->error_status = status;
    c->error_msg = msg;
    return -1;
}

/* Appends at[0..len) to *buf (*used bytes of *cap; malloc'd, grown by
 * doubling from first_cap), which stays NUL-terminated; -1 out of memory. */
static int buf_append(char **buf, size_t *used, size_t *cap, size_t first_cap, const char *at, size_t len)
{
    if (*used + len + 1 > *cap) {
        size_t c = *cap ? *cap : first_cap;
        while (c < *used + len + 1)
            c *= 2;
        char *n = realloc(*buf, c);
        if (!n)
            return -1;
        *buf = n;
        *cap = c;
    }
    memcpy(*buf + *used, at, len);
    *used += len;
    (*buf)[*used] = 0;
    return 0;
}

static int raw_append(colo_http_req *r, const char *at, size_t len)
{
    return buf_append(&r->raw, &r->raw_len, &r->raw_cap, 512, at, len);
}

static int count_header_bytes(llhttp_t *p, size_t len)
{
    http_conn *c = conn_of(p);
    c->header_bytes += len;
    if (c->header_bytes > c->srv->cfg.max_header_bytes)
        return parse_error(p, 431, "the request line and headers are larger than the limit");
    return 0;
}

static int on_message_begin(llhttp_t *p)
{
    http_conn *c = conn_of(p);
    c->version_ok = false;
    if (!c->req && !(c->req = http_req_new(c->srv, c)))
        return parse_error(p, 503, "out of memory");
    return 0;
}

static int on_url(llhttp_t *p, const char *at, size_t len)
{
    http_conn *c = conn_of(p);
    if (c->req->url_len + len > c->srv->cfg.max_header_bytes)
        return parse_error(p, 414, "the request target is longer than the limit");
    if (count_header_bytes(p, len) || raw_append(c->req, at, len))
        return c->error_status ? -1 : parse_error(p, 503, "out of memory");
    c->req->url_len += len;
    return 0;
}

static int on_url_complete(llhttp_t *p)
{
    if (p->http_major == 0 && p->http_minor == 9)
        return parse_error(p, 400, "HTTP/0.9 requests are not supported");
    /* NUL after the URL: header strings start after it */
    return raw_append(conn_of(p)->req, "", 1) ? parse_error(p, 503, "out of memory") : 0;
}

static int on_version_complete(llhttp_t *p)
{
    if (p->http_major != 1 || p->http_minor > 1)
        return parse_error(p, 505, "only HTTP/1.0 and HTTP/1.1 are supported");
    conn_of(p)->version_ok = true;
    return 0;
}

/* Ends the last header's value (llhttp sends no value callbacks for an empty one). */
static int close_value(colo_http_req *r)
{
    if (!r->in_value)
        return 0;
    r->in_value = false;
    return raw_append(r, "", 1);
}

static int on_header_field(llhttp_t *p, const char *at, size_t len)
{
    colo_http_req *r = conn_of(p)->req;
    if (!r->in_field) { /* a new header line */
        if (close_value(r))
            return parse_error(p, 503, "out of memory");
        if (r->n_headers == HTTP_MAX_HEADERS)
            return parse_error(p, 431, "too many header fields");
        r->headers[r->n_headers].name = r->raw_len;
        r->headers[r->n_headers].value = r->raw_len;
        r->n_headers++;
        r->in_field = true;
        if (count_header_bytes(p, HTTP_HEADER_LINE_OVERHEAD))
            return -1;
    }
    if (count_header_bytes(p, len))
        return -1;
    return raw_append(r, at, len) ? parse_error(p, 503, "out of memory") : 0;
}

static int on_header_field_complete(llhttp_t *p)
{
    colo_http_req *r = conn_of(p)->req;
    if (raw_append(r, "", 1))
        return parse_error(p, 503, "out of memory");
    r->in_field = false;
    r->in_value = true;
    r->value_pieces = false;
    r->headers[r->n_headers - 1].value = r->raw_len;
    http_req_note_header(r, r->n_headers - 1);
    return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t len)
{
    /* llhttp reads a continuation line (obs-fold) as a second piece of the
     * value; RFC 9112, 5.2 lets a server refuse it, and colo does. The one
     * other second piece is the rest of a value a read cut. */
    http_conn *c = conn_of(p);
    colo_http_req *r = c->req;
    if (r->value_pieces && !(r->value_cut && at == c->exec_begin))
        return parse_error(p, 400, "a header value continues on the next line (obs-fold, RFC 9112 5.2)");
    r->value_pieces = true;
    r->value_cut = at + len == c->exec_end;
    if (count_header_bytes(p, len))
        return -1;
    return raw_append(r, at, len) ? parse_error(p, 503, "out of memory") : 0;
}

static int on_header_value_complete(llhttp_t *p)
{
    return close_value(conn_of(p)->req) ? parse_error(p, 503, "out of memory") : 0;
}

/* Splits the URL into path and query. */
static int split_url(colo_http_req *r)
{
    const char *url = r->raw;
    size_t n = strcspn(url, "?#");
    r->path = colo_pool_strndup(r->pool, url, n);
    const char *q = url[n] == '?' ? url + n + 1 : "";
    r->query = colo_pool_strndup(r->pool, q, strcspn(q, "#"));
    return r->path && r->query ? 0 : -1;
}

/* Whether every Transfer-Encoding of r is "chunked" (the one transfer
 * coding colo decodes; llhttp has checked that chunked comes last and once).
 * Another coding (gzip, deflate, compress, identity...) is refused with 501
 * rather than read as if the body were plain (RFC 9112, 6.1). */
static bool transfer_codings_known(const colo_http_req *r)
{
    for (int i = r->known_first[COLO_HDR_TRANSFER_ENCODING] - 1; i >= 0 && i < r->n_headers; i++) {
        if (strcasecmp(r->raw + r->headers[i].name, "Transfer-Encoding"))
            continue;
        for (const char *v = r->raw + r->headers[i].value; *v;) {
            v += strspn(v, " \t,");
            size_t n = strcspn(v, " \t,");
            if (n && (n != 7 || strncasecmp(v, "chunked", 7)))
                return false;
            v += n;
        }
    }
    return true;
}

/* A header a request may carry once that it carries twice (Host: RFC
 * 9112, 3.2; Origin: RFC 6454, 7.3): which one to believe is the
 * question request smuggling and CORS confusion ask, so neither is
 * picked. The message, or NULL. */
static const char *repeated_singleton(const colo_http_req *r)
{
    if (colo_http_req_known_count(r, COLO_HDR_HOST) > 1)
        return "more than one Host header";
    if (colo_http_req_known_count(r, COLO_HDR_ORIGIN) > 1)
        return "more than one Origin header";
    return NULL;
}

/* What a 413 says: an upload's own message names its limit. */
static const char *body_limit_message(const colo_http_req *r)
{
    bool upload = r->srv->upload_path[0] && r->path && !strcmp(r->path, r->srv->upload_path);
    return upload && r->srv->upload_message[0] ? r->srv->upload_message : "the request body is larger than the limit";
}

static int on_headers_complete(llhttp_t *p)
{
    http_conn *c = conn_of(p);
    colo_http_req *r = c->req;
    if (close_value(r) || split_url(r))
        return parse_error(p, 503, "out of memory");
    snprintf(r->method, sizeof r->method, "%s", llhttp_method_name((llhttp_method_t)p->method));
    r->http_minor = p->http_minor;
    http_req_assign_id(r);
    if (p->upgrade)
        c->close_after = true; /* no protocol switch: answer, then close */
    bool has_length = p->flags & F_CONTENT_LENGTH, chunked = p->flags & F_CHUNKED;
    if (!transfer_codings_known(r))
        return parse_error(p, 501, "the only transfer coding colo-server reads is chunked");
    const char *twice = repeated_singleton(r);
    if (twice)
        return parse_error(p, 400, twice);
    r->max_body_bytes = c->srv->cfg.max_body_bytes;
    if (c->srv->upload_path[0] && !strcmp(r->path, c->srv->upload_path))
        r->max_body_bytes = c->srv->upload_max_bytes;
    if (has_length && p->content_length > r->max_body_bytes)
        return parse_error(p, 413, body_limit_message(r));
    const char *expect = colo_http_req_known(r, COLO_HDR_EXPECT);
    if (expect && !strcasecmp(expect, "100-continue") && p->http_minor == 1 &&
        (chunked || (has_length && p->content_length > 0))) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        bufferevent_write(c->bev, cont, sizeof cont - 1);
    }
    c->state = CONN_READING_BODY;
    return 0;
}

/* A chunk's size is known before its data: past the limit it is refused at
 * once, not after the client has sent it (or after the read timeout). */
static int on_chunk_header(llhttp_t *p)
{
    http_conn *c = conn_of(p);
    if (p->content_length > c->req->max_body_bytes - c->req->body_len)
        return parse_error(p, 413, body_limit_message(c->req));
    return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len)
{
    http_conn *c = conn_of(p);
    colo_http_req *r = c->req;
    if (r->body_len + len > r->max_body_bytes)
        return parse_error(p, 413, body_limit_message(r));
    if (buf_append(&r->body, &r->body_len, &r->body_cap, 1024, at, len))
        return parse_error(p, 503, "out of memory");
    return 0;
}

/* Pause: the request is handed over once llhttp_execute has returned. */
static int on_message_complete(llhttp_t *p)
{
    (void)p;
    return HPE_PAUSED;
}

void http_settings_init(llhttp_settings_t *st)
{
    llhttp_settings_init(st);
    st->on_message_begin = on_message_begin;
    st->on_url = on_url;
    st->on_url_complete = on_url_complete;
    st->on_version_complete = on_version_complete;
    st->on_header_field = on_header_field;
    st->on_header_field_complete = on_header_field_complete;
    st->on_header_value = on_header_value;
    st->on_header_value_complete = on_header_value_complete;
    st->on_headers_complete = on_headers_complete;
    st->on_chunk_header = on_chunk_header;
    st->on_body = on_body;
    st->on_message_complete = on_message_complete;
}

static int status_for(const http_conn *c, llhttp_errno_t e)
{
    /* llhttp also says INVALID_VERSION for junk after a good version */
    return e == HPE_INVALID_VERSION && !c->version_ok ? 505 : 400;
}

/* ---- the state machine --------------------------------------------------------------- */

static void conn_dispatch(http_conn *c)
{
    colo_http_server *s = c->srv;
    colo_http_req *r = c->req;
    event_del(c->timer);
    c->state = CONN_HANDLING;
    r->keep_alive = llhttp_should_keep_alive(&c->parser);
    r->handed = true;
    atomic_fetch_add(&s->st_in_flight, 1);
    s->handler(r, s->handler_ud);
}

static void conn_process_input(http_conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);
    while (c->state == CONN_IDLE || c->state == CONN_READING_HEADERS || c->state == CONN_READING_BODY) {
        if (evbuffer_get_length(in) == 0)
            break;
        if (c->state == CONN_IDLE) {
            http_idle_remove(c->srv, c);
            c->state = CONN_READING_HEADERS;
            c->error_status = 0;
            if (!c->req && !(c->req = http_req_new(c->srv, c))) {
                http_conn_close_later(c);
                return;
            }
            if (c->srv->shutting_down) {
                http_conn_close_later(c);
                return;
            }
            arm_timer(c, c->srv->cfg.read_timeout_ms);
        }
        struct evbuffer_iovec v;
        if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
            break;
        c->exec_begin = v.iov_base;
        c->exec_end = (const char *)v.iov_base + v.iov_len;
        llhttp_errno_t e = llhttp_execute(&c->parser, v.iov_base, v.iov_len);
        size_t used = v.iov_len;
        if (e != HPE_OK) {
            const char *pos = llhttp_get_error_pos(&c->parser);
            used = pos ? (size_t)(pos - (const char *)v.iov_base) : v.iov_len;
        }
        evbuffer_drain(in, used);
        c->bytes_in += used;
        if (e == HPE_OK)
            continue;
        if (e == HPE_PAUSED) {
            conn_dispatch(c);
            return;
        }
        int status = c->error_status ? c->error_status : status_for(c, e);
        const char *msg = c->error_msg ? c->error_msg : llhttp_get_error_reason(&c->parser);
        http_conn_fail(c, status, msg ? msg : "malformed request");
        return;
    }
    if (c->eof && (c->state == CONN_IDLE || c->state == CONN_READING_HEADERS || c->state == CONN_READING_BODY))
        http_conn_close_later(c); /* the client left mid-request or between requests */
}

static void on_read(struct bufferevent *bev, void *arg)
{
    http_conn *c = arg;
    switch (c->state) {
    case CONN_IDLE:
    case CONN_READING_HEADERS:
    case CONN_READING_BODY:
        conn_process_input(c);
        break;
    case CONN_LINGERING:
        evbuffer_drain(bufferevent_get_input(bev), evbuffer_get_length(bufferevent_get_input(bev)));
        break;
    default:
        break; /* kept for the next request; the read high-water mark bounds it */
    }
}

/* Called when the output has been written down to its low-water mark (0). */
static void on_write(struct bufferevent *bev, void *arg)
{
    (void)bev;
    http_conn *c = arg;
    if (c->state == CONN_WRITING) {
        conn_after_write(c);
    } else if (c->state == CONN_STREAMING && c->req && c->req->on_drain) {
        colo_http_req *r = c->req;
        void (*fn)(colo_http_req *, void *) = r->on_drain;
        r->on_drain = NULL;
        fn(r, r->on_drain_ud);
    }
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    http_conn *c = arg;
    if (what & BEV_EVENT_EOF) {
        c->eof = true;
        switch (c->state) {
        case CONN_WRITING:
            /* A half-close: finish writing, answer the requests already
             * received (pipelined), then close (conn_process_input). */
            return;
        case CONN_IDLE:
        case CONN_READING_HEADERS:
        case CONN_READING_BODY:
            conn_process_input(c); /* the last bytes may complete a request */
            return;
        default:
            break; /* a handler's request: the client is gone */
        }
    }
    http_conn_close_later(c);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    http_conn *c = arg;
    switch (c->state) {
    case CONN_CLOSING:
        http_conn_free_now(c);
        return;
    case CONN_READING_HEADERS:
    case CONN_READING_BODY:
        http_conn_fail(c, 408, "the request was not received in time");
        return;
    case CONN_WRITING:
        conn_after_write(c); /* a response with nothing to flush */
        return;
    default:
        http_conn_close_later(c); /* idle, lingering */
        return;
    }
}

void http_conn_accept(colo_http_server *s, int fd)
{
    http_conn *c = calloc(1, sizeof *c);
    if (!c)
        goto out_close_fd;
    c->srv = s;
    c->bev = bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!c->bev)
        goto out_free_conn;
    c->timer = evtimer_new(s->base, on_timer, c);
    if (!c->timer)
        goto out_free_bev;
    if (!evbuffer_add_cb(bufferevent_get_output(c->bev), on_output_change, s))
        goto out_free_timer;
    llhttp_init(&c->parser, HTTP_REQUEST, &s->settings);
    c->parser.data = c;
    bufferevent_setcb(c->bev, on_read, on_write, on_event, c);
    bufferevent_setwatermark(c->bev, EV_READ, 0, HTTP_INPUT_HIGH_WATER);
    struct timeval wt = {s->cfg.write_timeout_ms / 1000, (s->cfg.write_timeout_ms % 1000) * 1000};
    bufferevent_set_timeouts(c->bev, NULL, &wt);
    if (bufferevent_enable(c->bev, EV_READ | EV_WRITE))
        goto out_free_timer;
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    atomic_fetch_add(&s->st_open, 1);
    atomic_fetch_add(&s->st_accepted, 1);
    enter_idle(c);
    return;

out_free_timer:
    event_free(c->timer);
out_free_bev:
    bufferevent_free(c->bev); /* closes fd */
    free(c);
    return;
out_free_conn:
    free(c);
out_close_fd:
    evutil_closesocket(fd);
    atomic_fetch_add(&s->st_rejected, 1);
}
