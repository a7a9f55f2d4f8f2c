/* loadtest/engine.c: the libevent load scheduler.
 *
 * Loads issue requests (closed loop: one per connection, each after the
 * last; open loop: arrivals on a timer, queued until a connection is free)
 * and record each outcome in their results. Each connection is a
 * bufferevent with its own response reader (loadtest/http_client.h); the
 * read and event callbacks decide what follows (finish the request, send
 * the next, close). Closed connections are put on a dead list and freed by
 * a deferred event, never inside their own callbacks. */
#include "loadtest/engine.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loadtest/http_client.h"

#define LT_CONNECT_RETRY_MS 10           /* closed loop: pause after a refused connect */
#define LT_TICK_MS 100

typedef lt_outcome outcome;
#define OUT_OK LT_OUT_OK
#define OUT_HTTP LT_OUT_HTTP
#define OUT_CONNECT LT_OUT_CONNECT
#define OUT_TIMEOUT LT_OUT_TIMEOUT
#define OUT_IO LT_OUT_IO

typedef struct pending {
    uint64_t intended_ns;
    bool measured;
} pending;

typedef struct engine engine;
typedef struct load_state load_state;

typedef struct conn {
    load_state *ls;
    struct bufferevent *bev;
    struct event *timer;             /* request timeout, or a deferred connect failure */
    lt_http_response resp;           /* the response being read */
    struct conn *prev, *next;        /* ls->conns, or engine's dead list */
    struct conn *idle_next;
    bool connected, busy, idle, dead, connect_failed;

    /* the request in flight */
    uint64_t intended_ns, sent_ns, first_byte_ns;
    bool measured;
    int8_t cold;                     /* lt_req_rec.cold */
} conn;

struct load_state {
    engine *e;
    const lt_load *load;
    lt_result *res;
    conn *conns;
    unsigned n_conns;
    conn *idle;
    pending *q;                      /* open loop: ring of requests waiting for a connection */
    size_t q_head, q_len, q_cap;
    struct event *arrival;
    uint64_t next_intended_ns;
    uint64_t n_arrivals;
    uint64_t rng;
    size_t next_req;
    uint64_t recorded;               /* recorded requests created */
    uint64_t last_done_ns;           /* last recorded completion */
    bool stopped;                    /* no new requests */
    bool done;
    unsigned inflight;
};

struct engine {
    struct event_base *base;
    const lt_target *t;
    const lt_run_opts *o;
    load_state *ls;
    size_t n;
    uint64_t t0_ns, warm_end_ns, end_ns; /* end_ns 0 in requests mode */
    uint64_t timeout_ns;
    struct event *tick, *stop_ev, *reaper;
    conn *dead;
    lt_status fatal;
    bool tty_line;
};

uint64_t lt_rand_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double lt_rand_unit(uint64_t *state)
{
    return ((double)(lt_rand_next(state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

double lt_rand_gamma(uint64_t *rng, double shape)
{
    if (shape < 1.0) /* boost: Gamma(a) = Gamma(a + 1) * U^(1/a) */
        return lt_rand_gamma(rng, shape + 1.0) * pow(lt_rand_unit(rng), 1.0 / shape);
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        /* a standard normal by Box-Muller */
        double x = sqrt(-2.0 * log(lt_rand_unit(rng))) * cos(2.0 * M_PI * lt_rand_unit(rng));
        double v = 1.0 + c * x;
        if (v <= 0.0)
            continue;
        v = v * v * v;
        double u = lt_rand_unit(rng);
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v))
            return d * v;
    }
}

double lt_arrival_gap_s(uint64_t *rng, double rate_per_s, double burstiness)
{
    if (burstiness <= 0.0)
        return 1.0 / rate_per_s;
    if (burstiness == 1.0)
        return -log(lt_rand_unit(rng)) / rate_per_s;
    return lt_rand_gamma(rng, burstiness) / (rate_per_s * burstiness);
}

static double ns_to_ms(uint64_t ns) { return (double)ns / 1e6; }
static double rel_s(const engine *e, uint64_t ns) { return ns >= e->t0_ns ? (double)(ns - e->t0_ns) / 1e9 : 0.0; }

static void tv_from_ns(struct timeval *tv, uint64_t ns)
{
    tv->tv_sec = (time_t)(ns / 1000000000ull);
    tv->tv_usec = (suseconds_t)((ns % 1000000000ull) / 1000ull);
}

/* ---- connections ---------------------------------------------------------------- */

static void on_read(struct bufferevent *bev, void *arg);
static void on_event(struct bufferevent *bev, short what, void *arg);
static void on_timer(evutil_socket_t fd, short what, void *arg);
static void dispatch(load_state *ls);
static void maybe_done(load_state *ls);
static void closed_loop_next(load_state *ls, conn *c, bool after_connect_error);

static void conn_free(conn *c)
{
    if (!c)
        return;
    if (c->bev)
        bufferevent_free(c->bev);
    if (c->timer)
        event_free(c->timer);
    lt_http_response_fini(&c->resp);
    free(c);
}

static void reap(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    engine *e = arg;
    while (e->dead) {
        conn *c = e->dead;
        e->dead = c->next;
        conn_free(c);
    }
}

static void list_remove(conn **head, conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        *head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

static void idle_remove(load_state *ls, conn *c)
{
    for (conn **pp = &ls->idle; *pp; pp = &(*pp)->idle_next) {
        if (*pp == c) {
            *pp = c->idle_next;
            break;
        }
    }
    c->idle_next = NULL;
    c->idle = false;
}

/* Detaches c and hands it to the reaper. */
static void conn_close(conn *c)
{
    load_state *ls = c->ls;
    if (c->dead)
        return;
    c->dead = true;
    if (c->idle)
        idle_remove(ls, c);
    if (c->busy) {
        c->busy = false;
        ls->inflight--;
    }
    bufferevent_setcb(c->bev, NULL, NULL, NULL, NULL);
    bufferevent_disable(c->bev, EV_READ | EV_WRITE);
    event_del(c->timer);
    list_remove(&ls->conns, c);
    ls->n_conns--;
    c->next = ls->e->dead;
    ls->e->dead = c;
    event_active(ls->e->reaper, EV_TIMEOUT, 0);
}

static conn *conn_open(load_state *ls)
{
    engine *e = ls->e;
    conn *c = calloc(1, sizeof *c);
    if (!c)
        goto out_nomem;
    c->ls = ls;
    c->bev = bufferevent_socket_new(e->base, -1, BEV_OPT_CLOSE_ON_FREE);
    c->timer = evtimer_new(e->base, on_timer, c);
    if (!c->bev || !c->timer)
        goto out_free;
    lt_http_response_init(&c->resp);
    bufferevent_setcb(c->bev, on_read, NULL, on_event, c);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    c->next = ls->conns;
    if (ls->conns)
        ls->conns->prev = c;
    ls->conns = c;
    ls->n_conns++;
    if (lt_http_connect(c->bev, ls->load->target ? ls->load->target : e->t) != LT_OK) {
        /* reported from the timer, not from inside the caller */
        c->connect_failed = true;
        struct timeval zero = {0, 0};
        event_add(c->timer, &zero);
    }
    return c;
out_free:
    conn_free(c);
out_nomem:
    e->fatal = LT_ENOMEM;
    return NULL;
}

static void conn_send(conn *c, uint64_t intended_ns, bool measured)
{
    load_state *ls = c->ls;
    engine *e = ls->e;
    const lt_requests *rq = ls->load->requests;
    size_t i = ls->next_req++ % rq->n;
    uint64_t now = lt_now_ns();
    c->busy = true;
    ls->inflight++;
    c->intended_ns = intended_ns;
    c->sent_ns = now;
    c->first_byte_ns = 0;
    c->measured = measured;
    c->cold = -1;
    if (e->o->monitor) {
        int resident = lt_monitor_resident(e->o->monitor, ls->load->model);
        c->cold = resident < 0 ? -1 : resident ? 0 : 1;
    }
    lt_http_response_reset(&c->resp, intended_ns);
    if (!c->connect_failed) {
        uint64_t elapsed = now - intended_ns;
        uint64_t left = e->timeout_ns > elapsed ? e->timeout_ns - elapsed : 1000000;
        struct timeval tv;
        tv_from_ns(&tv, left);
        event_add(c->timer, &tv);
    }
    if (bufferevent_write(c->bev, rq->v[i], rq->len[i]) != 0)
        e->fatal = LT_ENOMEM;
}

/* Records the outcome of c's request; c stays open. */
static void request_end(conn *c, outcome out)
{
    load_state *ls = c->ls;
    engine *e = ls->e;
    lt_result *r = ls->res;
    const lt_http_response *resp = &c->resp;
    uint64_t now = lt_now_ns();
    event_del(c->timer);
    if (c->busy) {
        c->busy = false;
        ls->inflight--;
    }
    if (resp->out_of_memory)
        e->fatal = LT_ENOMEM;
    uint64_t tokens = 0;
    bool has_tokens = out == OUT_OK && lt_http_response_tokens(resp, &tokens);
    if (out == OUT_OK && e->end_ns && now >= e->warm_end_ns && now < e->end_ns) {
        r->window_ok++;
        if (has_tokens)
            r->window_tokens += tokens;
    } else if (out == OUT_OK && e->end_ns && now >= e->end_ns) {
        r->late_ok++;
    }
    if (!c->measured)
        return;
    ls->last_done_ns = now;
    uint64_t prompt = 0;
    bool has_prompt = out == OUT_OK && lt_http_response_prompt_tokens(resp, &prompt);
    lt_req_rec rec = {
        .intended_s = rel_s(e, c->intended_ns),
        .sent_s = rel_s(e, c->sent_ns),
        .done_s = rel_s(e, now),
        .e2e_ms = NAN,
        .ttft_ms = NAN,
        .tpot_ms = NAN,
        .itl_mean_ms = NAN,
        .prompt_tokens = has_prompt ? (int64_t)prompt : -1,
        .output_tokens = has_tokens ? (int64_t)tokens : -1,
        .status = resp->status,
        .outcome = out,
        .in_window = out == OUT_OK && (e->end_ns ? now >= e->warm_end_ns && now < e->end_ns : true),
        .cold = c->cold,
    };
    if (out == OUT_OK) {
        rec.e2e_ms = ns_to_ms(now - c->intended_ns);
        if (resp->has_ttft) {
            rec.ttft_ms = resp->ttft_ms;
            if (has_tokens && tokens >= 2)
                rec.tpot_ms = (rec.e2e_ms - rec.ttft_ms) / (double)(tokens - 1);
        }
        if (resp->itl_ms.n) {
            double sum = 0;
            for (size_t i = 0; i < resp->itl_ms.n; i++)
                sum += resp->itl_ms.v[i];
            rec.itl_mean_ms = sum / (double)resp->itl_ms.n;
        }
    }
    if (lt_result_add_req(r, &rec) != LT_OK)
        e->fatal = LT_ENOMEM;
    switch (out) {
    case OUT_OK:
        r->ok++;
        if (has_tokens) {
            r->tokens += tokens;
            r->has_tokens = true;
        }
        if (has_prompt) {
            r->prompt_tokens += prompt;
            r->has_prompt_tokens = true;
            if (rec.in_window)
                r->window_prompt_tokens += prompt;
        }
        if (!isnan(rec.tpot_ms) && lt_samples_push(&r->tpot_ms, rec.tpot_ms) != LT_OK)
            e->fatal = LT_ENOMEM;
        if (!e->end_ns) {
            r->window_ok++;
            if (has_tokens)
                r->window_tokens += tokens;
        }
        uint64_t first = c->first_byte_ns ? c->first_byte_ns : now;
        r->client_queue_ms_sum += ns_to_ms(c->sent_ns - c->intended_ns);
        r->first_byte_ms_sum += ns_to_ms(first - c->sent_ns);
        r->recv_ms_sum += ns_to_ms(now - first);
        if (lt_samples_push(&r->latency_ms, ns_to_ms(now - c->intended_ns)) != LT_OK)
            e->fatal = LT_ENOMEM;
        if (resp->has_ttft && lt_samples_push(&r->ttft_ms, resp->ttft_ms) != LT_OK)
            e->fatal = LT_ENOMEM;
        for (size_t i = 0; i < resp->itl_ms.n; i++)
            if (lt_samples_push(&r->itl_ms, resp->itl_ms.v[i]) != LT_OK)
                e->fatal = LT_ENOMEM;
        break;
    case OUT_HTTP: lt_result_count_status(r, resp->status); break;
    case OUT_CONNECT: r->connect_errors++; break;
    case OUT_TIMEOUT: r->timeouts++; break;
    case OUT_IO: r->io_errors++; break;
    }
}

/* What a load does with a connection whose request just ended. */
static void after_request(conn *c, bool reusable, bool after_connect_error)
{
    load_state *ls = c->ls;
    if (!reusable)
        conn_close(c);
    if (ls->load->concurrency > 0) {
        closed_loop_next(ls, reusable ? c : NULL, after_connect_error);
    } else {
        if (reusable) {
            c->idle = true;
            c->idle_next = ls->idle;
            ls->idle = c;
        }
        dispatch(ls);
    }
    maybe_done(ls);
}

static outcome status_outcome(int status) { return status >= 200 && status <= 299 ? OUT_OK : OUT_HTTP; }

static void on_read(struct bufferevent *bev, void *arg)
{
    conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t len;
    while ((len = evbuffer_get_length(in)) > 0) {
        if (!c->busy) { /* bytes nobody asked for */
            evbuffer_drain(in, len);
            conn_close(c);
            return;
        }
        if (!c->first_byte_ns)
            c->first_byte_ns = lt_now_ns();
        struct evbuffer_iovec v;
        if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
            break;
        lt_status pst = lt_http_response_feed(&c->resp, v.iov_base, v.iov_len);
        evbuffer_drain(in, v.iov_len);
        if (pst != LT_OK) {
            request_end(c, OUT_IO);
            after_request(c, false, false);
            return;
        }
        if (c->resp.complete) {
            request_end(c, status_outcome(c->resp.status));
            after_request(c, c->resp.keep_alive, false);
            return;
        }
    }
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    conn *c = arg;
    if (what & BEV_EVENT_CONNECTED) {
        c->connected = true;
        return;
    }
    if (!c->busy) { /* an idle keep-alive connection went away */
        load_state *ls = c->ls;
        conn_close(c);
        if (!ls->load->concurrency)
            dispatch(ls);
        maybe_done(ls);
        return;
    }
    if ((what & BEV_EVENT_EOF) && c->connected) {
        /* a response delimited by the end of the connection */
        if (lt_http_response_finish(&c->resp) == LT_OK)
            request_end(c, status_outcome(c->resp.status));
        else
            request_end(c, OUT_IO);
        after_request(c, false, false);
        return;
    }
    bool refused = !c->connected;
    request_end(c, refused ? OUT_CONNECT : OUT_IO);
    after_request(c, false, refused);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    conn *c = arg;
    if (c->connect_failed) {
        request_end(c, OUT_CONNECT);
        after_request(c, false, true);
        return;
    }
    request_end(c, OUT_TIMEOUT);
    after_request(c, false, false);
}

/* ---- loads ---------------------------------------------------------------- */

static bool want_more(load_state *ls)
{
    return !ls->stopped && !ls->e->fatal;
}

/* Counts a new request; stops the load once enough are recorded. */
static bool new_request(load_state *ls, uint64_t intended_ns)
{
    bool measured = intended_ns >= ls->e->warm_end_ns;
    if (measured) {
        ls->recorded++;
        if (ls->e->o->requests && ls->recorded >= ls->e->o->requests)
            ls->stopped = true;
    }
    return measured;
}

static void retry_slot(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    load_state *ls = arg;
    ls->inflight--;
    closed_loop_next(ls, NULL, false);
    maybe_done(ls);
}

static void closed_loop_next(load_state *ls, conn *c, bool after_connect_error)
{
    if (!want_more(ls))
        return;
    if (after_connect_error) {
        struct timeval tv = {0, LT_CONNECT_RETRY_MS * 1000};
        if (event_base_once(ls->e->base, -1, EV_TIMEOUT, retry_slot, ls, &tv) != 0)
            ls->e->fatal = LT_ERR;
        ls->inflight++; /* the slot is owed a request; keeps the load from finishing */
        return;
    }
    if (!c && !(c = conn_open(ls)))
        return;
    uint64_t now = lt_now_ns();
    conn_send(c, now, new_request(ls, now));
}

static pending *queue_head(load_state *ls) { return ls->q_len ? &ls->q[ls->q_head] : NULL; }

static void queue_pop(load_state *ls)
{
    ls->q_head = (ls->q_head + 1) % ls->q_cap;
    ls->q_len--;
}

static bool queue_push(load_state *ls, pending p)
{
    if (ls->q_len == ls->q_cap) {
        size_t cap = ls->q_cap ? ls->q_cap * 2 : 256;
        pending *q = malloc(cap * sizeof *q);
        if (!q)
            return false;
        for (size_t i = 0; i < ls->q_len; i++)
            q[i] = ls->q[(ls->q_head + i) % ls->q_cap];
        free(ls->q);
        ls->q = q;
        ls->q_cap = cap;
        ls->q_head = 0;
    }
    ls->q[(ls->q_head + ls->q_len) % ls->q_cap] = p;
    ls->q_len++;
    return true;
}

/* Queued requests older than the timeout are timeouts. */
static void queue_expire(load_state *ls, uint64_t now)
{
    pending *p;
    while ((p = queue_head(ls)) && now - p->intended_ns >= ls->e->timeout_ns) {
        if (p->measured) {
            ls->res->timeouts++;
            ls->last_done_ns = now;
            lt_req_rec rec = {.intended_s = rel_s(ls->e, p->intended_ns), .sent_s = NAN, .done_s = rel_s(ls->e, now),
                              .e2e_ms = NAN, .ttft_ms = NAN, .tpot_ms = NAN, .itl_mean_ms = NAN,
                              .prompt_tokens = -1, .output_tokens = -1, .outcome = LT_OUT_TIMEOUT,
                              .cold = -1};
            if (lt_result_add_req(ls->res, &rec) != LT_OK)
                ls->e->fatal = LT_ENOMEM;
        }
        queue_pop(ls);
    }
}

static void dispatch(load_state *ls)
{
    engine *e = ls->e;
    queue_expire(ls, lt_now_ns());
    pending *p;
    while (!e->fatal && (p = queue_head(ls))) {
        conn *c = ls->idle;
        if (c) {
            ls->idle = c->idle_next;
            c->idle_next = NULL;
            c->idle = false;
        } else if (ls->n_conns < e->o->max_connections) {
            if (!(c = conn_open(ls)))
                return;
        } else {
            return;
        }
        pending req = *p;
        queue_pop(ls);
        conn_send(c, req.intended_ns, req.measured);
    }
}

static double load_burstiness(const lt_load *l)
{
    return l->burstiness > 0 ? l->burstiness : l->poisson ? 1.0 : 0.0;
}

static uint64_t arrival_gap_ns(load_state *ls)
{
    return (uint64_t)(lt_arrival_gap_s(&ls->rng, ls->load->rate_per_s, load_burstiness(ls->load)) * 1e9);
}

static void on_arrival(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    load_state *ls = arg;
    engine *e = ls->e;
    uint64_t now = lt_now_ns();
    while (want_more(ls) && ls->next_intended_ns <= now) {
        if (e->end_ns && ls->next_intended_ns >= e->end_ns) {
            ls->stopped = true;
            break;
        }
        pending p = {ls->next_intended_ns, false};
        p.measured = new_request(ls, p.intended_ns);
        if (!queue_push(ls, p)) {
            e->fatal = LT_ENOMEM;
            break;
        }
        ls->n_arrivals++;
        if (ls->load->n_schedule) {
            if (ls->n_arrivals >= ls->load->n_schedule) {
                ls->stopped = true;
                break;
            }
            ls->next_intended_ns = e->t0_ns + (uint64_t)(ls->load->schedule_s[ls->n_arrivals] * 1e9);
        } else if (load_burstiness(ls->load) > 0)
            ls->next_intended_ns += arrival_gap_ns(ls);
        else /* from the start, so timer lateness never accumulates */
            ls->next_intended_ns = e->t0_ns + (uint64_t)((double)ls->n_arrivals * 1e9 / ls->load->rate_per_s);
    }
    dispatch(ls);
    if (want_more(ls)) {
        struct timeval tv;
        tv_from_ns(&tv, ls->next_intended_ns > now ? ls->next_intended_ns - now : 0);
        event_add(ls->arrival, &tv);
    }
    maybe_done(ls);
}

static void maybe_done(load_state *ls)
{
    engine *e = ls->e;
    if (!ls->done && (e->fatal || (ls->stopped && ls->inflight == 0 && ls->q_len == 0))) {
        ls->done = true;
        if (!ls->last_done_ns)
            ls->last_done_ns = lt_now_ns();
    }
    for (size_t i = 0; i < e->n; i++)
        if (!e->ls[i].done)
            return;
    event_base_loopbreak(e->base);
}

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    engine *e = arg;
    for (size_t i = 0; i < e->n; i++) {
        e->ls[i].stopped = true;
        if (e->ls[i].arrival)
            event_del(e->ls[i].arrival);
    }
    for (size_t i = 0; i < e->n; i++)
        maybe_done(&e->ls[i]);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    engine *e = arg;
    uint64_t now = lt_now_ns();
    for (size_t i = 0; i < e->n; i++) {
        load_state *ls = &e->ls[i];
        queue_expire(ls, now);
        if (!ls->load->concurrency)
            dispatch(ls);
        maybe_done(ls);
    }
    if (e->o->progress) {
        uint64_t ok = 0, err = 0, inflight = 0;
        for (size_t i = 0; i < e->n; i++) {
            ok += e->ls[i].res->ok;
            err += lt_result_errors(e->ls[i].res);
            inflight += e->ls[i].inflight + e->ls[i].q_len;
        }
        double t = ns_to_ms(now - e->t0_ns) / 1000.0;
        char total[48];
        if (e->end_ns)
            snprintf(total, sizeof total, "%.1f/%.1fs", t, (double)(e->end_ns - e->t0_ns) / 1e9);
        else if (e->o->total_requests)
            snprintf(total, sizeof total, "%.1fs, %llu/%llu requests", t, (unsigned long long)(ok + err),
                     (unsigned long long)e->o->total_requests);
        else
            snprintf(total, sizeof total, "%.1fs", t);
        fprintf(stderr, "\r\033[K%s %s%s  ok %llu  errors %llu  in flight %llu", e->o->phase ? e->o->phase : "run",
                total, now < e->warm_end_ns ? " (warm-up)" : e->end_ns && now >= e->end_ns ? " (draining)" : "",
                (unsigned long long)ok, (unsigned long long)err, (unsigned long long)inflight);
        fflush(stderr);
        e->tty_line = true;
    }
}

/* Loads and options a run can be made of. */
static lt_status check_run(const lt_load *loads, size_t n_loads, const lt_run_opts *o, char *err, size_t errlen)
{
    for (size_t i = 0; i < n_loads; i++) {
        if (!loads[i].requests || loads[i].requests->n == 0 ||
            (loads[i].concurrency == 0 && !(loads[i].rate_per_s > 0) && !loads[i].n_schedule) ||
            (loads[i].n_schedule && (loads[i].requests->n < loads[i].n_schedule || loads[i].concurrency))) {
            lt_set_err(err, errlen, "load %zu: no requests, neither concurrency nor rate, or a schedule with "
                                    "concurrency or fewer requests than it", i);
            return LT_EINVAL;
        }
    }
    if (n_loads == 0 || o->max_connections == 0 || !(o->timeout_s > 0) ||
        (o->requests == 0 && !(o->duration_s > 0))) {
        lt_set_err(err, errlen, "bad run options");
        return LT_EINVAL;
    }
    return LT_OK;
}

/* A load's first requests: its connections (closed loop), or its first
 * arrival (open loop, or its schedule's first time). */
static void start_load(load_state *ls)
{
    engine *e = ls->e;
    const lt_load *l = ls->load;
    if (l->concurrency) {
        for (unsigned k = 0; k < l->concurrency && want_more(ls); k++)
            closed_loop_next(ls, NULL, false);
        return;
    }
    if (!(ls->arrival = evtimer_new(e->base, on_arrival, ls))) {
        e->fatal = LT_ENOMEM;
        return;
    }
    ls->next_intended_ns = e->t0_ns;
    if (l->n_schedule)
        ls->next_intended_ns += (uint64_t)(l->schedule_s[0] * 1e9);
    struct timeval tv;
    tv_from_ns(&tv, ls->next_intended_ns - e->t0_ns);
    event_add(ls->arrival, &tv);
}

/* Everything a run made: connections, events, the loop. */
static void engine_free(engine *e)
{
    for (size_t i = 0; e->ls && i < e->n; i++) {
        while (e->ls[i].conns) {
            conn *c = e->ls[i].conns;
            e->ls[i].conns = c->next;
            conn_free(c);
        }
        if (e->ls[i].arrival)
            event_free(e->ls[i].arrival);
        free(e->ls[i].q);
    }
    reap(-1, 0, e);
    if (e->tick)
        event_free(e->tick);
    if (e->stop_ev)
        event_free(e->stop_ev);
    if (e->reaper)
        event_free(e->reaper);
    free(e->ls);
    if (e->base)
        event_base_free(e->base);
}

lt_status lt_engine_run(const lt_target *t, const lt_load *loads, size_t n_loads,
                        const lt_run_opts *o, lt_result *results, char *err, size_t errlen)
{
    lt_status st = LT_OK;
    engine e;
    memset(&e, 0, sizeof e);
    e.t = t;
    e.o = o;
    e.n = n_loads;
    e.timeout_ns = (uint64_t)(o->timeout_s * 1e9);
    if ((st = check_run(loads, n_loads, o, err, errlen)) != LT_OK)
        return st;
    /* precise timers: the default coarse clock would send open-loop requests
     * up to a few ms late, and that lateness would count as latency */
    struct event_config *cfg = event_config_new();
    if (cfg) {
        event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
        e.base = event_base_new_with_config(cfg);
        event_config_free(cfg);
    }
    e.ls = calloc(n_loads, sizeof *e.ls);
    if (!e.base || !e.ls) {
        lt_set_err(err, errlen, "cannot create the event loop");
        st = LT_ENOMEM;
        goto out_free;
    }
    e.tick = event_new(e.base, -1, EV_PERSIST, on_tick, &e);
    e.stop_ev = evtimer_new(e.base, on_stop, &e);
    e.reaper = event_new(e.base, -1, 0, reap, &e);
    if (!e.tick || !e.stop_ev || !e.reaper) {
        lt_set_err(err, errlen, "cannot create events");
        st = LT_ENOMEM;
        goto out_free;
    }
    e.t0_ns = lt_now_ns();
    e.warm_end_ns = e.t0_ns + (uint64_t)(o->warmup_s * 1e9);
    e.end_ns = o->requests ? 0 : e.warm_end_ns + (uint64_t)(o->duration_s * 1e9);
    struct timeval tv;
    tv_from_ns(&tv, LT_TICK_MS * 1000000ull);
    event_add(e.tick, &tv);
    if (e.end_ns) {
        tv_from_ns(&tv, e.end_ns - e.t0_ns);
        event_add(e.stop_ev, &tv);
    }
    for (size_t i = 0; i < n_loads; i++) {
        load_state *ls = &e.ls[i];
        ls->e = &e;
        ls->load = &loads[i];
        ls->res = &results[i];
        ls->rng = loads[i].seed ^ (0x51ed2701ull * (i + 1));
        ls->next_req = loads[i].n_schedule ? 0 : (size_t)(lt_rand_next(&ls->rng) % loads[i].requests->n);
        results[i].concurrency = loads[i].concurrency;
        results[i].rate_per_s = loads[i].concurrency ? 0.0 : loads[i].rate_per_s;
    }
    for (size_t i = 0; i < n_loads && !e.fatal; i++)
        start_load(&e.ls[i]);
    if (!e.fatal && o->monitor && lt_monitor_attach(o->monitor, e.base, e.t0_ns) != LT_OK)
        e.fatal = LT_ENOMEM;
    if (!e.fatal)
        event_base_dispatch(e.base);
    if (o->monitor)
        lt_monitor_detach(o->monitor);
    if (e.tty_line)
        fprintf(stderr, "\r\033[K");
    uint64_t now = lt_now_ns();
    for (size_t i = 0; i < n_loads; i++) {
        load_state *ls = &e.ls[i];
        uint64_t end = ls->last_done_ns ? ls->last_done_ns : now;
        if (e.end_ns)
            results[i].window_s = (double)(e.end_ns - e.warm_end_ns) / 1e9;
        else
            results[i].window_s = end > e.warm_end_ns ? (double)(end - e.warm_end_ns) / 1e9 : 0.0;
    }
    if (e.fatal) {
        lt_set_err(err, errlen, "load generator failed: %s", e.fatal == LT_ENOMEM ? "out of memory" : "event error");
        st = e.fatal;
    }
out_free:
    engine_free(&e);
    return st;
}
