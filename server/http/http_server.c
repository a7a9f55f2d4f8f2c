/* The listener, the connection limit, cross-thread calls and graceful
 * shutdown of colo's HTTP server. */
#include "server/http/http_impl.h"

#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/thread.h>

#include "runtime/log.h"

#define ACCEPT_PAUSE_MS 100 /* listener pause after EMFILE/ENFILE */

static pthread_once_t threads_once = PTHREAD_ONCE_INIT;
static int threads_rc;

static void threads_init(void)
{
    threads_rc = evthread_use_pthreads();
    signal(SIGPIPE, SIG_IGN);
}

/* Lets the process hold as many sockets as the hard limit allows. */
static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rlim_t was = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
            COLO_DEBUG("http: RLIMIT_NOFILE raised from %llu to %llu", (unsigned long long)was,
                       (unsigned long long)rl.rlim_max);
    }
}

void http_server_conn_gone(colo_http_server *s)
{
    if (s->shutting_down && s->n_conns == 0 && !s->stopped) {
        s->stopped = true;
        event_base_loopbreak(s->base);
    }
}

/* ---- accepting ------------------------------------------------------------------------ */

/* A 503 written straight to the socket of a connection over the limit. */
static void reject(colo_http_server *s, int fd)
{
    char id[32], body[160], resp[512];
    http_make_id(id, sizeof id); /* the request was never read: a fresh id */
    int bl = snprintf(body, sizeof body,
                      "{\"error\":{\"code\":\"unavailable\",\"message\":\"too many connections\",\"request_id\":\"%s\"}}\n",
                      id);
    int n = snprintf(resp, sizeof resp,
                     "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                     "Content-Length: %d\r\nConnection: close\r\nRetry-After: 1\r\nX-Request-Id: %s\r\n\r\n%s",
                     bl, id, body);
    ssize_t w = send(fd, resp, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w; /* best effort: the connection is closed either way */
    evutil_closesocket(fd);
    atomic_fetch_add(&s->st_rejected, 1);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *addr, int len, void *arg)
{
    (void)l;
    (void)addr;
    (void)len;
    colo_http_server *s = arg;
    if (s->shutting_down) {
        evutil_closesocket(fd);
        return;
    }
    if (s->n_conns >= s->cfg.max_connections) {
        http_conn *victim = s->idle_head;
        if (!victim) {
            reject(s, fd);
            return;
        }
        /* Not our callback: freeing the idle one here is safe. */
        atomic_fetch_add(&s->st_evicted, 1);
        http_conn_free_now(victim);
    }
    evutil_make_socket_nonblocking(fd);
    http_conn_accept(s, fd);
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    colo_http_server *s = arg;
    if (s->listener && !s->shutting_down)
        evconnlistener_enable(s->listener);
}

static void on_accept_error(struct evconnlistener *l, void *arg)
{
    colo_http_server *s = arg;
    int e = EVUTIL_SOCKET_ERROR();
    atomic_fetch_add(&s->st_rejected, 1);
    if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
        /* Out of descriptors: the pending connection stays in the backlog and
         * would wake us at once; pause instead of spinning, and make room. */
        COLO_WARN("http: accept: %s; pausing the listener for %d ms", strerror(e), ACCEPT_PAUSE_MS);
        evconnlistener_disable(l);
        if (s->idle_head) {
            atomic_fetch_add(&s->st_evicted, 1);
            http_conn_free_now(s->idle_head);
        }
        struct timeval tv = {0, ACCEPT_PAUSE_MS * 1000};
        evtimer_add(s->resume_ev, &tv);
        return;
    }
    COLO_WARN("http: accept: %s", strerror(e));
}

/* ---- cross-thread calls and shutdown ---------------------------------------------------- */

static void begin_shutdown(colo_http_server *s, int timeout_ms);

/* A posted call may be freed or posted again by its own fn: read it first. */
static void run_calls(http_call *list)
{
    while (list) {
        http_call *next = list->next;
        bool heap = list->heap;
        void (*fn)(void *) = list->fn;
        void *ud = list->ud;
        if (heap)
            free(list);
        fn(ud);
        list = next;
    }
}

static void on_calls(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    colo_http_server *s = arg;
    int t = atomic_exchange(&s->shutdown_timeout_ms, -1);
    if (t >= 0)
        begin_shutdown(s, t);
    pthread_mutex_lock(&s->call_mu);
    http_call *list = s->calls;
    s->calls = s->calls_tail = NULL;
    pthread_mutex_unlock(&s->call_mu);
    run_calls(list);
}

static void on_deferred(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    colo_http_server *s = arg;
    http_call *list = s->deferred;
    s->deferred = s->deferred_tail = NULL;
    run_calls(list); /* what they defer again waits for the next turn */
}

void colo_http_server_defer(colo_http_server *s, colo_http_call *c)
{
    c->next = NULL;
    c->heap = false;
    if (s->deferred_tail)
        s->deferred_tail->next = c;
    else
        s->deferred = c;
    s->deferred_tail = c;
    /* A timer, not event_active: an active event added while the loop runs
     * its callbacks would run in the same turn, before the network is polled. */
    static const struct timeval now = {0, 0};
    if (!s->stopped && !evtimer_pending(s->defer_ev, NULL))
        evtimer_add(s->defer_ev, &now);
}

colo_status colo_http_server_call(colo_http_server *s, void (*fn)(void *ud), void *ud)
{
    http_call *call = malloc(sizeof *call);
    if (!call)
        return COLO_ENOMEM;
    call->fn = fn;
    call->ud = ud;
    call->heap = true;
    colo_http_server_post(s, call);
    return COLO_OK;
}

void colo_http_server_post(colo_http_server *s, colo_http_call *call)
{
    call->next = NULL;
    pthread_mutex_lock(&s->call_mu);
    if (s->calls_tail)
        s->calls_tail->next = call;
    else
        s->calls = call;
    s->calls_tail = call;
    pthread_mutex_unlock(&s->call_mu);
    event_active(s->call_ev, EV_READ, 1);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    colo_http_server *s = arg;
    if (!s->cut) {
        /* Requests that can end themselves (a stream's last event) are told
         * to, and get a short grace before their connections are dropped. */
        s->cut = true;
        int n = 0;
        for (http_conn *c = s->conns, *next; c; c = next) {
            next = c->next;
            colo_http_req *r = c->req;
            if (r && r->handed && !r->finished && r->on_cut) {
                void (*fn)(colo_http_req *, void *) = r->on_cut;
                r->on_cut = NULL;
                fn(r, r->on_cut_ud);
                n++;
            }
        }
        struct timeval tv = {COLO_HTTP_CUT_GRACE_MS / 1000, (COLO_HTTP_CUT_GRACE_MS % 1000) * 1000};
        if (n && evtimer_add(s->deadline_ev, &tv) == 0) {
            COLO_WARN("http: shutdown deadline: ending %d request(s) in flight", n);
            return;
        }
    }
    if (s->n_conns)
        COLO_WARN("http: shutdown deadline: dropping %d connection(s)", s->n_conns);
    for (http_conn *c = s->conns; c; c = c->next)
        http_conn_close_later(c);
    http_server_conn_gone(s);
}

static void begin_shutdown(colo_http_server *s, int timeout_ms)
{
    if (s->shutting_down)
        return;
    s->shutting_down = true;
    if (s->listener) {
        evconnlistener_free(s->listener);
        s->listener = NULL;
    }
    event_del(s->resume_ev);
    for (http_conn *c = s->conns; c; c = c->next) {
        switch (c->state) {
        case CONN_IDLE:
        case CONN_READING_HEADERS:
        case CONN_READING_BODY:
            http_conn_close_later(c);
            break;
        case CONN_WRITING:
            c->close_after = true;
            break;
        default:
            break; /* requests in flight finish, then their connections close */
        }
    }
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    evtimer_add(s->deadline_ev, &tv);
    http_server_conn_gone(s);
}

void colo_http_server_shutdown(colo_http_server *s, int timeout_ms)
{
    atomic_store(&s->shutdown_timeout_ms, timeout_ms < 0 ? 0 : timeout_ms);
    event_active(s->call_ev, EV_READ, 1);
}

/* ---- life ------------------------------------------------------------------------------------ */

static colo_status listen_on(colo_http_server *s, char *err, size_t errlen)
{
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[16];
    snprintf(port, sizeof port, "%d", s->cfg.port);
    int rc = getaddrinfo(s->host[0] ? s->host : NULL, port, &hints, &res);
    if (rc) {
        colo_set_err(err, errlen, "cannot resolve %s: %s", s->host, gai_strerror(rc));
        return COLO_EINVAL;
    }
    int e = 0;
    for (struct addrinfo *a = res; a && !s->listener; a = a->ai_next) {
        s->listener = evconnlistener_new_bind(s->base, on_accept, s,
                                              LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC, 1024,
                                              a->ai_addr, (int)a->ai_addrlen);
        if (!s->listener)
            e = errno;
    }
    freeaddrinfo(res);
    if (!s->listener) {
        colo_set_err(err, errlen, "cannot listen on %s:%d: %s", s->host, s->cfg.port, strerror(e ? e : EINVAL));
        return COLO_EIO;
    }
    evconnlistener_set_error_cb(s->listener, on_accept_error);
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(evconnlistener_get_fd(s->listener), (struct sockaddr *)&ss, &len)) {
        colo_set_err(err, errlen, "getsockname: %s", strerror(errno));
        return COLO_EIO;
    }
    s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    return COLO_OK;
}

colo_http_server *colo_http_server_create(const colo_http_config *cfg, colo_http_handler_fn handler, void *ud,
                                          char *err, size_t errlen)
{
    pthread_once(&threads_once, threads_init);
    if (threads_rc) {
        colo_set_err(err, errlen, "libevent has no pthreads support");
        return NULL;
    }
    if (!cfg || !handler) {
        colo_set_err(err, errlen, "no configuration or no handler");
        return NULL;
    }
    raise_nofile();
    colo_http_server *s = calloc(1, sizeof *s);
    if (!s) {
        colo_set_err(err, errlen, "out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    snprintf(s->host, sizeof s->host, "%s", cfg->host ? cfg->host : "127.0.0.1");
    s->cfg.host = s->host;
    if (!s->cfg.max_body_bytes)
        s->cfg.max_body_bytes = 1u << 20;
    if (!s->cfg.max_header_bytes)
        s->cfg.max_header_bytes = 16u << 10;
    if (s->cfg.max_connections <= 0)
        s->cfg.max_connections = 4096;
    if (s->cfg.read_timeout_ms <= 0)
        s->cfg.read_timeout_ms = 30000;
    if (s->cfg.write_timeout_ms <= 0)
        s->cfg.write_timeout_ms = 30000;
    if (s->cfg.idle_timeout_ms <= 0)
        s->cfg.idle_timeout_ms = 60000;
    if (s->cfg.linger_ms <= 0)
        s->cfg.linger_ms = 1000;
    s->handler = handler;
    s->handler_ud = ud;
    atomic_init(&s->shutdown_timeout_ms, -1);
    atomic_init(&s->out_pending, 0);
    atomic_init(&s->out_pending_peak, 0);
    http_settings_init(&s->settings);
    if (pthread_mutex_init(&s->call_mu, NULL)) {
        free(s);
        colo_set_err(err, errlen, "pthread_mutex_init failed");
        return NULL;
    }
    s->base = event_base_new();
    if (!s->base || !(s->call_ev = event_new(s->base, -1, 0, on_calls, s)) ||
        !(s->resume_ev = evtimer_new(s->base, on_resume, s)) ||
        !(s->deadline_ev = evtimer_new(s->base, on_deadline, s)) ||
        !(s->defer_ev = evtimer_new(s->base, on_deferred, s))) {
        colo_set_err(err, errlen, "cannot create the event loop");
        goto out_free;
    }
    if (listen_on(s, err, errlen) != COLO_OK)
        goto out_free;
    return s;

out_free:
    colo_http_server_free(s);
    return NULL;
}

int colo_http_server_port(const colo_http_server *s) { return s->port; }
void colo_http_server_set_upload(colo_http_server *s, const char *path, size_t max_body_bytes, const char *message)
{
    snprintf(s->upload_path, sizeof s->upload_path, "%s", path);
    s->upload_max_bytes = max_body_bytes;
    snprintf(s->upload_message, sizeof s->upload_message, "%s", message ? message : "");
}

struct event_base *colo_http_server_base(colo_http_server *s) { return s->base; }

void colo_http_server_on_done(colo_http_server *s, colo_http_done_fn fn, void *ud)
{
    s->done_fn = fn;
    s->done_ud = ud;
}

colo_status colo_http_server_run(colo_http_server *s)
{
    while (!s->stopped) {
        int rc = event_base_loop(s->base, 0);
        if (rc < 0)
            return COLO_ERR;
        if (rc == 1 || event_base_got_break(s->base))
            break; /* nothing left to wait for, or stopped */
    }
    /* Freed bufferevents close their sockets from deferred callbacks: run
     * them now, so clients see their connections closed when run returns. */
    for (int i = 0; i < 4; i++)
        event_base_loop(s->base, EVLOOP_NONBLOCK);
    return COLO_OK;
}

size_t colo_http_server_pending_bytes(const colo_http_server *s)
{
    return atomic_load(&((colo_http_server *)s)->out_pending); /* an atomic only */
}

void colo_http_server_stats(const colo_http_server *s, colo_http_stats *out)
{
    colo_http_server *m = (colo_http_server *)s; /* atomics only */
    out->output_pending_bytes = atomic_load(&m->out_pending);
    out->output_pending_peak_bytes = atomic_load(&m->out_pending_peak);
    out->connections_open = atomic_load(&m->st_open);
    out->connections_accepted = atomic_load(&m->st_accepted);
    out->connections_rejected = atomic_load(&m->st_rejected);
    out->connections_evicted = atomic_load(&m->st_evicted);
    out->requests = atomic_load(&m->st_requests);
    out->requests_in_flight = atomic_load(&m->st_in_flight);
}

void colo_http_server_free(colo_http_server *s)
{
    if (!s)
        return;
    s->shutting_down = true;
    s->stopped = true;
    if (s->listener)
        evconnlistener_free(s->listener);
    while (s->conns)
        http_conn_free_now(s->conns);
    /* Calls queued or deferred after the loop stopped: their requests are
     * aborted now, so finishing them only frees them. */
    for (;;) {
        pthread_mutex_lock(&s->call_mu);
        http_call *list = s->calls;
        s->calls = s->calls_tail = NULL;
        pthread_mutex_unlock(&s->call_mu);
        if (!list) {
            list = s->deferred;
            s->deferred = s->deferred_tail = NULL;
        }
        if (!list)
            break;
        run_calls(list);
    }
    if (s->call_ev)
        event_free(s->call_ev);
    if (s->resume_ev)
        event_free(s->resume_ev);
    if (s->deadline_ev)
        event_free(s->deadline_ev);
    if (s->defer_ev)
        event_free(s->defer_ev);
    if (s->base)
        event_base_free(s->base);
    pthread_mutex_destroy(&s->call_mu);
    free(s);
}
