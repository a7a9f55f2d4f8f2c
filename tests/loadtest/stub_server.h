/* tests/loadtest/stub_server.h: a small HTTP/1.1 server for the load tester's
 * tests, with known injected behaviour per request: a fixed service delay,
 * every Nth request slow (a bimodal distribution), a 500, a closed
 * connection, no answer at all, chunked bodies, or an SSE stream with known
 * gaps. It runs its own libevent loop on a thread; the request counter is
 * the nth request the server has received (1-based), over all connections.
 * Header-only: include it from one test file. */
#ifndef COLO_TESTS_LOADTEST_STUB_SERVER_H
#define COLO_TESTS_LOADTEST_STUB_SERVER_H

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct stub_cfg {
    int delay_ms;         /* service time of every request */
    int slow_every;       /* > 0: request n with n % slow_every == 0 takes slow_ms instead */
    int slow_ms;
    int error_every;      /* > 0: every Nth request answers 500 */
    int close_every;      /* > 0: every Nth request closes the connection unanswered */
    int hang_every;       /* > 0: every Nth request is never answered */
    bool chunked;         /* 200 bodies in two chunks */
    bool sse;             /* 200 answers are SSE streams */
    int sse_first_ms;     /* delay before the first data event (slow_ms for the slow_every-th request) */
    int sse_gap_ms;       /* between data events */
    int sse_events;       /* data events before [DONE] */
    int tokens;           /* usage.completion_tokens in 200 bodies (0: no usage) */
    int prompt_tokens;    /* > 0: usage.prompt_tokens beside it (bodies and the last SSE event) */
    const char *model_task; /* GET /v1/models/NAME answers {"task": model_task}; NAME "missing" 404s */
    const char *models_list; /* GET /v1/models answers this body (NULL: 404); not counted as a request */
} stub_cfg;

typedef struct stub_server {
    stub_cfg cfg;
    struct event_base *base;
    struct evconnlistener *listener;
    struct event *stop_ev;  /* activated from the test thread; works before the loop runs */
    pthread_t thread;
    int port;
    long requests;        /* received so far (read after stub_stop) */
    long accepted;        /* connections accepted so far */
    struct stub_conn *conns; /* open connections, freed by stub_stop */
} stub_server;

typedef struct stub_conn {
    stub_server *s;
    struct bufferevent *bev;
    struct event *timer;
    bool waiting;         /* a request is being served */
    int sse_left;
    long n;
    struct stub_conn *prev, *next;
} stub_conn;

static void stub_conn_free(stub_conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        c->s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->timer)
        event_free(c->timer);
    bufferevent_free(c->bev);
    free(c);
}

static void stub_write_response(stub_conn *c, int status, const char *body)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);
    const char *reason = status == 200 ? "OK" : status == 404 ? "Not Found" : "Internal Server Error";
    if (status == 200 && c->s->cfg.chunked) {
        size_t half = strlen(body) / 2;
        evbuffer_add_printf(out, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 "Transfer-Encoding: chunked\r\n\r\n%zx\r\n%.*s\r\n%zx\r\n%s\r\n0\r\n\r\n",
                            half, (int)half, body, strlen(body) - half, body + half);
        return;
    }
    evbuffer_add_printf(out, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                        status, reason, strlen(body), body);
}

static void stub_sse_step(stub_conn *c)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);
    char ev[160];
    if (c->sse_left > 0) {
        int k = c->s->cfg.sse_events - c->sse_left;
        int len = c->sse_left == 1
                      ? snprintf(ev, sizeof ev,
                                 "data: {\"text\":\"t%d\",\"usage\":{\"completion_tokens\":%d,\"prompt_tokens\":%d}}\n\n",
                                 k, c->s->cfg.sse_events, c->s->cfg.prompt_tokens)
                      : snprintf(ev, sizeof ev, "data: {\"text\":\"t%d\"}\n\n", k);
        evbuffer_add_printf(out, "%x\r\n%s\r\n", len, ev);
        c->sse_left--;
        struct timeval tv = {0, c->s->cfg.sse_gap_ms * 1000};
        event_add(c->timer, &tv);
        return;
    }
    const char *done = "data: [DONE]\n\n";
    evbuffer_add_printf(out, "%zx\r\n%s\r\n0\r\n\r\n", strlen(done), done);
    c->waiting = false;
}

static void stub_read(struct bufferevent *bev, void *arg);

static void stub_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    stub_conn *c = arg;
    const stub_cfg *cfg = &c->s->cfg;
    if (c->sse_left >= 0 && cfg->sse) {
        stub_sse_step(c);
    } else {
        char body[128];
        if (cfg->tokens && cfg->prompt_tokens)
            snprintf(body, sizeof body, "{\"text\":\"ok\",\"usage\":{\"completion_tokens\":%d,\"prompt_tokens\":%d}}",
                     cfg->tokens, cfg->prompt_tokens);
        else if (cfg->tokens)
            snprintf(body, sizeof body, "{\"text\":\"ok\",\"usage\":{\"completion_tokens\":%d}}", cfg->tokens);
        else
            snprintf(body, sizeof body, "{\"text\":\"ok\"}");
        stub_write_response(c, 200, body);
        c->waiting = false;
    }
    if (!c->waiting)
        stub_read(c->bev, c);
}

/* Serves the request at the head of the input, if complete. */
static void stub_read(struct bufferevent *bev, void *arg)
{
    stub_conn *c = arg;
    stub_server *s = c->s;
    const stub_cfg *cfg = &s->cfg;
    struct evbuffer *in = bufferevent_get_input(bev);
    if (c->waiting)
        return;
    struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
    if (end.pos < 0)
        return;
    size_t head_len = (size_t)end.pos + 4;
    char *head = malloc(head_len + 1);
    if (!head)
        return;
    evbuffer_copyout(in, head, head_len);
    head[head_len] = '\0';
    size_t body_len = 0;
    for (char *p = head; (p = strchr(p, '\n')) != NULL;) {
        p++;
        if (strncasecmp(p, "content-length:", 15) == 0)
            body_len = strtoul(p + 15, NULL, 10);
    }
    if (evbuffer_get_length(in) < head_len + body_len) {
        free(head);
        return;
    }
    evbuffer_drain(in, head_len + body_len);
    char method[8] = "", path[256] = "";
    sscanf(head, "%7s %255s", method, path);
    free(head);
    if (strcmp(method, "GET") == 0 && strcmp(path, "/v1/models") == 0) {
        if (cfg->models_list)
            stub_write_response(c, 200, cfg->models_list);
        else
            stub_write_response(c, 404, "{\"error\":{\"code\":\"not_found\",\"message\":\"no list\"}}");
        return;
    }
    if (strcmp(method, "GET") == 0 && strncmp(path, "/v1/models/", 11) == 0) {
        char body[384];
        if (strcmp(path + 11, "missing") == 0) {
            stub_write_response(c, 404, "{\"error\":{\"code\":\"not_found\",\"message\":\"no such model\"}}");
        } else {
            snprintf(body, sizeof body, "{\"id\":\"%s\",\"task\":\"%s\",\"state\":\"ready\"}", path + 11,
                     cfg->model_task ? cfg->model_task : "generation");
            stub_write_response(c, 200, body);
        }
        return;
    }
    long n = ++s->requests;
    c->n = n;
    if (cfg->close_every && n % cfg->close_every == 0) {
        stub_conn_free(c);
        return;
    }
    c->waiting = true;
    if (cfg->hang_every && n % cfg->hang_every == 0)
        return;
    if (cfg->error_every && n % cfg->error_every == 0) {
        stub_write_response(c, 500, "{\"error\":{\"code\":\"internal\",\"message\":\"injected\"}}");
        c->waiting = false;
        return;
    }
    int delay_ms = cfg->slow_every && n % cfg->slow_every == 0 ? cfg->slow_ms : cfg->delay_ms;
    if (cfg->sse) {
        evbuffer_add_printf(bufferevent_get_output(bev), "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                                         "Transfer-Encoding: chunked\r\n\r\n");
        c->sse_left = cfg->sse_events;
        delay_ms = cfg->slow_every && n % cfg->slow_every == 0 ? cfg->slow_ms : cfg->sse_first_ms;
    } else {
        c->sse_left = -1;
    }
    struct timeval tv = {delay_ms / 1000, (delay_ms % 1000) * 1000};
    event_add(c->timer, &tv);
}

static void stub_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        stub_conn_free(arg);
}

static void stub_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    (void)l;
    (void)sa;
    (void)salen;
    stub_server *s = arg;
    stub_conn *c = calloc(1, sizeof *c);
    if (!c) {
        evutil_closesocket(fd);
        return;
    }
    c->s = s;
    s->accepted++;
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    c->bev = bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE);
    c->timer = evtimer_new(s->base, stub_timer, c);
    bufferevent_setcb(c->bev, stub_read, NULL, stub_event, c);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

static void stub_on_stop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(((stub_server *)arg)->base);
}

static void *stub_thread(void *arg)
{
    stub_server *s = arg;
    event_base_dispatch(s->base);
    return NULL;
}

/* Starts a server on 127.0.0.1 on a free port; NULL on failure. */
static stub_server *stub_start(const stub_cfg *cfg)
{
    static bool threads_on;
    if (!threads_on) {
        evthread_use_pthreads();
        threads_on = true;
    }
    stub_server *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->cfg = *cfg;
    struct event_config *ec = event_config_new();
    if (ec) {
        event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER);
        s->base = event_base_new_with_config(ec);
        event_config_free(ec);
    }
    if (!s->base) {
        free(s);
        return NULL;
    }
    struct sockaddr_in sin = {0};
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    s->listener = evconnlistener_new_bind(s->base, stub_accept, s, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE,
                                          512, (struct sockaddr *)&sin, sizeof sin);
    s->stop_ev = event_new(s->base, -1, 0, stub_on_stop, s);
    if (!s->listener || !s->stop_ev) {
        if (s->listener)
            evconnlistener_free(s->listener);
        if (s->stop_ev)
            event_free(s->stop_ev);
        event_base_free(s->base);
        free(s);
        return NULL;
    }
    struct sockaddr_in bound;
    socklen_t len = sizeof bound;
    getsockname(evconnlistener_get_fd(s->listener), (struct sockaddr *)&bound, &len);
    s->port = ntohs(bound.sin_port);
    if (pthread_create(&s->thread, NULL, stub_thread, s) != 0) {
        event_free(s->stop_ev);
        evconnlistener_free(s->listener);
        event_base_free(s->base);
        free(s);
        return NULL;
    }
    return s;
}

/* Stops the loop and frees everything. */
static void stub_stop(stub_server *s)
{
    if (!s)
        return;
    event_active(s->stop_ev, EV_READ, 0);
    pthread_join(s->thread, NULL);
    while (s->conns)
        stub_conn_free(s->conns);
    event_free(s->stop_ev);
    evconnlistener_free(s->listener);
    event_base_free(s->base);
    free(s);
}

static void stub_url(const stub_server *s, char *buf, size_t len)
{
    snprintf(buf, len, "http://127.0.0.1:%d", s->port);
}

#endif
