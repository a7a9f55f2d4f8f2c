/* server/http/http_impl.h: the structures behind server/http/http.h, shared by
 * http_server.c (listener, limits, cross-thread calls, shutdown),
 * http_conn.c (the per-connection state machine and parsing),
 * http_request.c (the request object) and http_response.c (responses and
 * streams). Loop thread only
 * unless a field says otherwise. */
#ifndef COLO_SERVER_HTTP_IMPL_H
#define COLO_SERVER_HTTP_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <llhttp.h>

#include "runtime/pool.h"
#include "server/http/http.h"

#define HTTP_MAX_HEADERS 100
#define HTTP_MAX_PARAMS 8
#define HTTP_MAX_RESP_HEADERS 16
#define HTTP_INPUT_HIGH_WATER (64 * 1024) /* stop reading while this much input waits */
/* A stream's socket send buffer (SO_SNDBUF; Linux doubles it): what the
 * kernel takes of a stream its client does not read, beyond what the
 * connection queues. Left to itself the kernel grows it to tcp_wmem's
 * maximum (4 MiB by default), all of it rendered for nobody. */
#define HTTP_STREAM_SNDBUF_BYTES (128 * 1024)

typedef struct http_conn http_conn;

/* The connection's state machine. */
typedef enum http_conn_state {
    CONN_IDLE,            /* no request byte yet: idle timeout, may be evicted */
    CONN_READING_HEADERS, /* a request has begun: read timeout */
    CONN_READING_BODY,    /* headers done, body arriving: read timeout */
    CONN_HANDLING,        /* the handler has the request; no response yet */
    CONN_STREAMING,       /* a streaming response is open */
    CONN_WRITING,         /* a response is complete; flushing it before the next request */
    CONN_LINGERING,       /* error response sent, write side shut: draining input */
    CONN_CLOSING,         /* closed on the next loop turn, outside any callback of its own */
} http_conn_state;

typedef struct http_header {
    size_t name, value; /* offsets into colo_http_req.raw (NUL-terminated strings) */
} http_header;

/* Notes that header i of r (its name complete) is one colo knows. */
void http_req_note_header(colo_http_req *r, int i);

struct colo_http_req {
    http_conn *conn;        /* NULL once the connection is gone */
    colo_http_server *srv;
    /* What the request holds that does not grow once made (path, query,
     * path parameters, response header lines) comes from its pool and goes
     * with it in http_req_free (as colo_request's fields do); raw and body
     * grow as they arrive, so they are buffers of their own. */
    colo_pool *pool;
    /* request line and headers, all in raw: "url\0name\0value\0..." */
    char *raw;
    size_t raw_len, raw_cap;
    size_t url_len;         /* bytes of the URL (raw[0..url_len)) */
    char method[24];
    char *path, *query;     /* separate copies of the URL's parts */
    http_header headers[HTTP_MAX_HEADERS];
    int n_headers;
    /* the known headers (colo_http_known): 1 + the index in headers of the
     * first of each (0: absent), and how many were sent */
    int known_first[COLO_HDR_N_KNOWN];
    int known_n[COLO_HDR_N_KNOWN];
    bool in_field, in_value; /* inside a header name / a header value */
    /* the value read now: a piece of it came (value_pieces), and the last
     * ended where its read did (value_cut: the next may go on with it) */
    bool value_pieces, value_cut;
    uint8_t http_minor;     /* 0 or 1 (major is 1) */
    bool keep_alive;        /* as the client asked and HTTP allows */
    char *body;
    size_t body_len, body_cap;
    char id[COLO_HTTP_REQUEST_ID_MAX + 1];
    uint64_t start_ns;
    /* path parameters */
    char *param_names[HTTP_MAX_PARAMS], *param_values[HTTP_MAX_PARAMS];
    int n_params;
    /* for the log line */
    char model[64];
    long tokens;
    double queue_ms;
    const char *route;
    /* response */
    char *resp_headers[HTTP_MAX_RESP_HEADERS]; /* "Name: value\r\n" */
    int n_resp_headers;
    int status;
    bool streaming, chunked;
    colo_http_error_style error_style;
    uint64_t bytes_out;
    /* lifetime: handed to the handler, finished by it, client gone */
    bool handed, finished, aborted;
    void (*on_abort)(colo_http_req *r, void *ud);
    void *on_abort_ud;
    void (*on_cut)(colo_http_req *r, void *ud); /* the shutdown deadline passed */
    void *on_cut_ud;
    void (*on_drain)(colo_http_req *r, void *ud); /* a stream's output all written (armed once) */
    void *on_drain_ud;
    int log_status;         /* colo_http_req_set_log_status; 0: the response's */
    size_t max_body_bytes;  /* this request's limit (an upload's is larger) */
    colo_http_local *local; /* a request made inside the server (in pool); NULL: a client's */
};

struct http_conn {
    colo_http_server *srv;
    struct bufferevent *bev;
    struct event *timer;    /* the state's timeout; also the deferred close */
    http_conn_state state;
    llhttp_t parser;
    const char *exec_begin, *exec_end; /* the bytes llhttp_execute reads now */
    colo_http_req *req;     /* the request being read or answered */
    int error_status;       /* status chosen by a parser callback (413, 431, 505...) */
    const char *error_msg;
    bool close_after;       /* close once the current response is written */
    bool linger_after;      /* ... lingeringly (error responses) */
    bool eof;               /* the client shut its write side */
    bool version_ok;        /* the request line's version was read and accepted */
    uint64_t bytes_in;      /* of the current request */
    uint64_t header_bytes;  /* of the current request's line and headers */
    http_conn *prev, *next; /* all connections */
    http_conn *idle_prev, *idle_next; /* idle ones, oldest first */
    bool in_idle_list;
};

typedef colo_http_call http_call;

struct colo_http_server {
    colo_http_config cfg;
    char host[256];
    colo_http_handler_fn handler;
    void *handler_ud;
    colo_http_done_fn done_fn;
    void *done_ud;
    struct event_base *base;
    struct evconnlistener *listener;
    struct event *resume_ev;   /* re-enables the listener after EMFILE */
    struct event *call_ev;     /* runs queued calls */
    struct event *deadline_ev; /* shutdown deadline */
    struct event *defer_ev;    /* runs deferred calls on the next turn (a zero timeout) */
    llhttp_settings_t settings;
    int port;
    /* cross-thread calls */
    pthread_mutex_t call_mu;
    http_call *calls, *calls_tail;
    /* deferred calls (loop thread): run on a later turn */
    http_call *deferred, *deferred_tail;
    /* connections */
    http_conn *conns;
    http_conn *idle_head, *idle_tail;
    int n_conns;
    bool shutting_down;
    bool cut;                  /* the shutdown deadline passed and on_cut hooks ran */
    bool stopped;              /* run should return */
    atomic_int shutdown_timeout_ms; /* requested by shutdown(); -1 none */
    /* statistics (read from any thread) */
    atomic_uint_least64_t st_open, st_accepted, st_rejected, st_evicted, st_requests, st_in_flight;
    /* bytes queued on every connection's output and not yet written (kept
     * by an evbuffer callback on each output), and the most there were */
    atomic_size_t out_pending, out_pending_peak;
    /* colo_http_server_set_upload: the path whose bodies may be larger */
    char upload_path[64];
    size_t upload_max_bytes;
    char upload_message[160];
};

/* http_conn.c */
void http_conn_accept(colo_http_server *s, int fd);
void http_conn_close_later(http_conn *c);
void http_conn_free_now(http_conn *c); /* shutdown/free paths only */
void http_idle_remove(colo_http_server *s, http_conn *c);
/* The handler finished r (response complete or stream ended). */
void http_conn_request_finished(http_conn *c);
/* Queue an error response for the current request and close after it. */
void http_conn_fail(http_conn *c, int status, const char *msg);
void http_settings_init(llhttp_settings_t *st);
void http_server_conn_gone(colo_http_server *s);

/* http_request.c */
colo_http_req *http_req_new(colo_http_server *s, http_conn *c);
void http_req_free(colo_http_req *r);
/* Ends r's life once finished and no longer attached: done hook, log, free. */
void http_req_retire(colo_http_req *r);
void http_req_assign_id(colo_http_req *r);
/* A fresh request id (16 hex digits, unique in this process) into out. */
void http_make_id(char *out, size_t cap);
void http_req_abort(colo_http_req *r);

#endif
