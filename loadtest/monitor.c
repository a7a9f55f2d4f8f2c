/* loadtest/monitor.c: polls the server's model list and memory during a phase. */
#include "loadtest/monitor.h"

#include <event2/buffer.h>
#include <dirent.h>
#include <event2/bufferevent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadtest/clock.h"
#include "loadtest/http_client.h"

lt_monitor *lt_monitor_new(const lt_target *t, const char *api_key, const char *const *models, size_t n,
                           double interval_s, int pid, char *err, size_t errlen)
{
    if (n == 0 || n > LT_MONITOR_MAX_MODELS || !(interval_s > 0)) {
        lt_set_err(err, errlen, "monitor: 1 to %d models and a positive interval", LT_MONITOR_MAX_MODELS);
        return NULL;
    }
    lt_monitor *m = calloc(1, sizeof *m);
    if (!m)
        goto out_nomem;
    m->target = *t;
    m->interval_s = interval_s;
    m->pid = pid;
    m->n_models = n;
    snprintf(m->api_key, sizeof m->api_key, "%s", api_key ? api_key : "");
    for (size_t i = 0; i < n; i++) {
        snprintf(m->models[i].name, sizeof m->models[i].name, "%s", models[i]);
        m->models[i].resident = -1;
    }
    lt_requests rq;
    if (lt_requests_build(t, "GET", "/v1/models", NULL, api_key, &rq, err, errlen) != LT_OK) {
        lt_monitor_free(m);
        return NULL;
    }
    m->request = rq.v[0]; /* take the one request out of rq */
    m->request_len = rq.len[0];
    rq.v[0] = NULL;
    lt_requests_free(&rq);
    return m;
out_nomem:
    lt_set_err(err, errlen, "out of memory");
    return NULL;
}

const lt_monitor_model *lt_monitor_find(const lt_monitor *m, const char *model)
{
    for (size_t i = 0; m && i < m->n_models; i++)
        if (strcmp(m->models[i].name, model) == 0)
            return &m->models[i];
    return NULL;
}

int lt_monitor_resident(const lt_monitor *m, const char *model)
{
    const lt_monitor_model *mm = lt_monitor_find(m, model);
    return mm ? mm->resident : -1;
}

/* 1 resident, 0 not, -1 unknown, from a model entry's state. */
static int entry_resident(json_t *entry)
{
    json_t *st = json_object_get(entry, "state");
    if (!st)
        st = json_object_get(entry, "status");
    if (json_is_object(st))
        st = json_object_get(st, "value");
    const char *s = json_string_value(st);
    if (!s)
        return -1;
    return strcmp(s, "ready") == 0 || strcmp(s, "loaded") == 0 ? 1 : 0;
}

static lt_status add_change(lt_monitor_model *mm, double at_s, bool resident)
{
    if (mm->n_changes == mm->cap_changes) {
        size_t cap = mm->cap_changes ? mm->cap_changes * 2 : 16;
        lt_residency *v = realloc(mm->changes, cap * sizeof *v);
        if (!v)
            return LT_ENOMEM;
        mm->changes = v;
        mm->cap_changes = cap;
    }
    mm->changes[mm->n_changes++] = (lt_residency){at_s, resident};
    return LT_OK;
}

lt_status lt_monitor_apply(lt_monitor *m, const char *body, double at_s)
{
    json_t *root = body ? json_loads(body, 0, NULL) : NULL;
    json_t *list = json_is_array(root) ? root : json_object_get(root, "data");
    if (!json_is_array(list))
        list = json_object_get(root, "models");
    lt_status st = json_is_array(list) ? LT_OK : LT_EFORMAT;
    size_t i;
    json_t *entry;
    json_array_foreach(st == LT_OK ? list : NULL, i, entry) {
        const char *id = json_string_value(json_object_get(entry, "id"));
        if (!id)
            id = json_string_value(json_object_get(entry, "name"));
        lt_monitor_model *mm = id ? (lt_monitor_model *)lt_monitor_find(m, id) : NULL;
        if (!mm)
            continue;
        int r = entry_resident(entry);
        if (r >= 0 && r != mm->resident) {
            if (mm->resident == 0)
                mm->loads_seen++;
            else if (mm->resident == 1)
                mm->unloads_seen++;
            if (add_change(mm, at_s < 0 ? 0 : at_s, r == 1) != LT_OK)
                st = LT_ENOMEM;
            mm->resident = r;
        }
        json_t *life = json_object_get(entry, "lifecycle");
        json_t *w = json_object_get(life, "wakes"), *ev = json_object_get(life, "evictions");
        if (json_is_integer(w) && json_is_integer(ev)) {
            mm->wakes_last = (uint64_t)json_integer_value(w);
            mm->evictions_last = (uint64_t)json_integer_value(ev);
            if (!mm->has_counters) {
                mm->wakes_first = mm->wakes_last;
                mm->evictions_first = mm->evictions_last;
                mm->has_counters = true;
            }
        }
    }
    json_decref(root);
    if (st == LT_OK)
        m->polls++;
    else
        m->poll_errors++;
    return st;
}

/* VmRSS of one process in bytes; 0 when it is gone. *hwm (may be NULL): its VmHWM. */
static uint64_t proc_rss_bytes(int pid, uint64_t *hwm, bool *found)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    unsigned long long kb;
    uint64_t rss = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmRSS: %llu kB", &kb) == 1) {
            rss = kb * 1024;
            if (found)
                *found = true;
        } else if (hwm && sscanf(line, "VmHWM: %llu kB", &kb) == 1) {
            *hwm = kb * 1024;
        }
    }
    fclose(f);
    return rss;
}

/* The parent of pid from /proc/pid/stat ("pid (comm) state ppid ..."; comm
 * may hold spaces and parentheses, so read from the last ')'); -1 when gone. */
static int proc_parent(int pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    int ppid;
    return p && sscanf(p + 1, " %*c %d", &ppid) == 1 ? ppid : -1;
}

uint64_t lt_proc_tree_rss_bytes(int pid)
{
    enum { MAX_PROCS = 4096 };
    if (pid <= 0)
        return 0;
    int *pids = malloc(MAX_PROCS * sizeof *pids), *parents = malloc(MAX_PROCS * sizeof *parents);
    size_t n = 0;
    DIR *d = pids && parents ? opendir("/proc") : NULL;
    struct dirent *e;
    while (d && n < MAX_PROCS && (e = readdir(d))) {
        char *end;
        long v = strtol(e->d_name, &end, 10);
        if (*end || v <= 0)
            continue;
        pids[n] = (int)v;
        parents[n++] = proc_parent((int)v);
    }
    if (d)
        closedir(d);
    uint64_t sum = proc_rss_bytes(pid, NULL, NULL);
    /* the tree: pids[0..in) are in it; each pass takes the children of those found */
    int tree[256];
    size_t in = 0;
    tree[in++] = pid;
    for (size_t t = 0; t < in; t++)
        for (size_t i = 0; i < n && in < sizeof tree / sizeof *tree; i++)
            if (parents[i] == tree[t] && pids[i] != pid) {
                tree[in++] = pids[i];
                sum += proc_rss_bytes(pids[i], NULL, NULL);
            }
    free(pids);
    free(parents);
    return sum;
}

lt_status lt_monitor_sample_memory(lt_monitor *m)
{
    if (m->pid <= 0)
        return LT_OK;
    bool found = false;
    uint64_t rss = lt_proc_tree_rss_bytes(m->pid);
    proc_rss_bytes(m->pid, &m->hwm_bytes, &found); /* after: the high-water mark covers what was read */
    if (!found)
        return LT_EIO;
    if (rss > m->rss_max_bytes)
        m->rss_max_bytes = rss;
    m->has_rss = true;
    return LT_OK;
}

lt_status lt_monitor_poll_now(lt_monitor *m, double at_s, double timeout_s, char *err, size_t errlen)
{
    int status;
    char *body = NULL;
    lt_monitor_sample_memory(m); /* a server that is gone is told by the GET */
    lt_status st = lt_http_get(&m->target, "/v1/models", m->api_key, timeout_s, &status, &body, err, errlen);
    if (st == LT_OK && (status < 200 || status > 299)) {
        lt_set_err(err, errlen, "GET /v1/models: HTTP %d", status);
        st = LT_EIO;
    }
    if (st == LT_OK && (st = lt_monitor_apply(m, body, at_s)) != LT_OK)
        lt_set_err(err, errlen, "GET /v1/models: not a model list");
    free(body);
    return st;
}

/* ---- on the event loop ---------------------------------------------------------- */

static void poll_close(lt_monitor *m)
{
    if (m->bev)
        bufferevent_free(m->bev);
    m->bev = NULL;
    m->busy = m->connected = false;
}

static double now_s(const lt_monitor *m)
{
    uint64_t now = lt_now_ns();
    return now > m->t0_ns ? (double)(now - m->t0_ns) / 1e9 : 0.0;
}

static void on_poll_read(struct bufferevent *bev, void *arg)
{
    lt_monitor *m = arg;
    lt_http_response *r = m->resp;
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t len;
    while ((len = evbuffer_get_length(in)) > 0) {
        struct evbuffer_iovec v;
        if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
            break;
        lt_status st = lt_http_response_feed(r, v.iov_base, v.iov_len);
        evbuffer_drain(in, v.iov_len);
        if (st != LT_OK || !m->busy) {
            m->poll_errors++;
            poll_close(m);
            return;
        }
        if (r->complete) {
            m->busy = false;
            if (r->status >= 200 && r->status <= 299 && r->body_len)
                lt_monitor_apply(m, r->body, now_s(m));
            else
                m->poll_errors++;
            if (!r->keep_alive)
                poll_close(m);
            return;
        }
    }
}

static void on_poll_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    lt_monitor *m = arg;
    if (what & BEV_EVENT_CONNECTED) {
        m->connected = true;
        return;
    }
    if (m->busy)
        m->poll_errors++;
    poll_close(m);
}

static void on_poll_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lt_monitor *m = arg;
    lt_monitor_sample_memory(m);
    if (m->busy) /* the last poll has not come back: skip this one */
        return;
    if (!m->bev) {
        m->bev = bufferevent_socket_new(m->base, -1, BEV_OPT_CLOSE_ON_FREE);
        if (!m->bev)
            return;
        bufferevent_setcb(m->bev, on_poll_read, NULL, on_poll_event, m);
        bufferevent_enable(m->bev, EV_READ | EV_WRITE);
        if (lt_http_connect(m->bev, &m->target) != LT_OK) {
            m->poll_errors++;
            poll_close(m);
            return;
        }
    }
    lt_http_response_reset(m->resp, lt_now_ns());
    m->busy = true;
    if (bufferevent_write(m->bev, m->request, m->request_len) != 0)
        poll_close(m);
}

lt_status lt_monitor_attach(lt_monitor *m, struct event_base *base, uint64_t t0_ns)
{
    m->base = base;
    m->t0_ns = t0_ns;
    m->resp = calloc(1, sizeof(lt_http_response));
    m->timer = event_new(base, -1, EV_PERSIST, on_poll_timer, m);
    if (!m->resp || !m->timer) {
        lt_monitor_detach(m);
        return LT_ENOMEM;
    }
    lt_http_response_init(m->resp);
    struct timeval tv = {(time_t)m->interval_s, (suseconds_t)((m->interval_s - (double)(time_t)m->interval_s) * 1e6)};
    if (event_add(m->timer, &tv) != 0) {
        lt_monitor_detach(m);
        return LT_ERR;
    }
    return LT_OK;
}

void lt_monitor_detach(lt_monitor *m)
{
    poll_close(m);
    if (m->timer)
        event_free(m->timer);
    m->timer = NULL;
    if (m->resp)
        lt_http_response_fini(m->resp);
    free(m->resp);
    m->resp = NULL;
    m->base = NULL;
}

void lt_monitor_free(lt_monitor *m)
{
    if (!m)
        return;
    lt_monitor_detach(m);
    for (size_t i = 0; i < m->n_models; i++)
        free(m->models[i].changes);
    free(m->request);
    free(m);
}
