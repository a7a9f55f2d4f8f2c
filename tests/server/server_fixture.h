/* tests/server/server_fixture.h: runs the real colo-server binary on an
 * ephemeral loopback port with a YAML config written by the test, and
 * talks to it over real sockets. Header-only; include it in one test file.
 *
 *   srv_fixture f;
 *   srv_tmpdir(&f);                                  a fresh folder
 *   srv_mkmodel(&f, "a.gguf", 2, 64, 512, 256);      a synthetic llama model there
 *   srv_start(&f, yaml);                             config "listen: 127.0.0.1:0" etc.; waits for /health/ready
 *   srv_http(&f, "POST", "/v1/...", body, &resp);    one request on its own connection
 *   int code = srv_stop(&f);                         SIGTERM, the exit status
 *   srv_cleanup(&f);
 */
#ifndef COLO_TESTS_SERVER_FIXTURE_H
#define COLO_TESTS_SERVER_FIXTURE_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "server/tenants/sha256.h"
#include "tools/mkmodel.h"

typedef struct srv_fixture {
    char dir[256];
    char log[300];
    pid_t pid;
    int port;
    int exit_code; /* when the server exited while starting; -1 if killed */
} srv_fixture;

typedef struct srv_resp {
    int status;
    char head[8192]; /* status line and headers */
    char *body;      /* malloc'd, NUL-terminated, de-chunked */
    size_t body_len;
} srv_resp;

/* hex = the SHA-256 of an API key, as a config's tenants name it. */
static inline void srv_key_sha256(const char *key, char hex[65])
{
    uint8_t d[32];
    colo_sha256(key, strlen(key), d);
    colo_sha256_hex(d, hex);
}

static inline uint64_t srv_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static inline void srv_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static inline bool srv_tmpdir(srv_fixture *f)
{
    memset(f, 0, sizeof *f);
    const char *t = getenv("TMPDIR");
    snprintf(f->dir, sizeof f->dir, "%s/colo-srv-XXXXXX", t && *t ? t : "/tmp");
    return mkdtemp(f->dir) != NULL;
}

static inline bool srv_mkmodel(srv_fixture *f, const char *file, int layers, int dim, int vocab, int ctx)
{
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/%s", f->dir, file);
    colo_mkmodel_config c = {.n_layer = layers, .n_embd = dim, .n_head = 4, .n_kv_head = 2, .n_ff = dim * 2,
                             .n_vocab = vocab, .n_ctx = ctx, .type = COLO_F16, .seed = 7};
    if (colo_mkmodel_write(path, &c, err, sizeof err) != COLO_OK) {
        fprintf(stderr, "mkmodel: %s\n", err);
        return false;
    }
    return true;
}

static inline bool srv_write(srv_fixture *f, const char *file, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", f->dir, file);
    FILE *fp = fopen(path, "w");
    if (!fp)
        return false;
    bool ok = fputs(text, fp) >= 0;
    return fclose(fp) == 0 && ok;
}

static inline int srv_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

static inline bool srv_send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Reads until EOF or timeout_ms of silence into a malloc'd buffer. */
static inline char *srv_read_all(int fd, int timeout_ms, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, timeout_ms) <= 0)
            break;
        if (n + 2048 > cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb)
                break;
            buf = nb;
        }
        ssize_t r = recv(fd, buf + n, cap - n - 1, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    if (buf)
        buf[n] = 0;
    *len = n;
    return buf;
}

/* Parses one response at p (n bytes): status, headers, body (Content-Length,
 * chunked, or to the end). Returns the bytes it used, 0 when incomplete. */
static inline size_t srv_parse(const char *p, size_t n, srv_resp *r)
{
    memset(r, 0, sizeof *r);
    const char *he = NULL;
    for (size_t i = 0; i + 3 < n; i++)
        if (!memcmp(p + i, "\r\n\r\n", 4)) {
            he = p + i + 4;
            break;
        }
    if (!he || sscanf(p, "HTTP/1.%*d %d", &r->status) != 1)
        return 0;
    size_t hl = (size_t)(he - p);
    memcpy(r->head, p, hl < sizeof r->head - 1 ? hl : sizeof r->head - 1);
    const char *end = p + n;
    const char *cl = strcasestr(r->head, "\r\ncontent-length:");
    r->body = malloc(n + 1);
    if (!r->body)
        return 0;
    if (cl) {
        size_t len = strtoul(cl + 17, NULL, 10);
        if ((size_t)(end - he) < len)
            return 0;
        memcpy(r->body, he, len);
        r->body_len = len;
        r->body[len] = 0;
        return hl + len;
    }
    if (strcasestr(r->head, "\r\ntransfer-encoding: chunked")) {
        const char *q = he;
        for (;;) {
            char *e;
            unsigned long sz = strtoul(q, &e, 16);
            const char *crlf = strstr(e, "\r\n");
            if (!crlf || crlf + 2 > end)
                return 0;
            q = crlf + 2;
            if (sz == 0) {
                if (q + 2 > end)
                    return 0;
                r->body[r->body_len] = 0;
                return (size_t)(q + 2 - p);
            }
            if ((size_t)(end - q) < sz + 2)
                return 0;
            memcpy(r->body + r->body_len, q, sz);
            r->body_len += sz;
            q += sz + 2;
        }
    }
    r->body_len = (size_t)(end - he);
    memcpy(r->body, he, r->body_len);
    r->body[r->body_len] = 0;
    return n;
}

static inline void srv_resp_free(srv_resp *r)
{
    free(r->body);
    r->body = NULL;
}

/* Sends raw bytes on a new connection, shuts the write side when close_write,
 * and parses the first response. False when nothing parseable came back. */
static inline bool srv_raw(int port, const char *raw, size_t len, srv_resp *r)
{
    int fd = srv_connect(port);
    if (fd < 0)
        return false;
    srv_send_all(fd, raw, len);
    size_t n;
    char *buf = srv_read_all(fd, 10000, &n);
    close(fd);
    bool ok = buf && srv_parse(buf, n, r) > 0;
    free(buf);
    return ok;
}

/* One request with Connection: close; extra_headers may be NULL or end in "\r\n". */
static inline bool srv_http_h(srv_fixture *f, const char *method, const char *path, const char *extra_headers,
                              const char *body, srv_resp *r)
{
    size_t bl = body ? strlen(body) : 0;
    size_t cap = bl + strlen(path) + (extra_headers ? strlen(extra_headers) : 0) + 256;
    char *req = malloc(cap);
    if (!req)
        return false;
    int n = snprintf(req, cap, "%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n%sContent-Length: %zu\r\n\r\n%s",
                     method, path, extra_headers ? extra_headers : "", bl, body ? body : "");
    bool ok = srv_raw(f->port, req, (size_t)n, r);
    free(req);
    return ok;
}

static inline bool srv_http(srv_fixture *f, const char *method, const char *path, const char *body, srv_resp *r)
{
    return srv_http_h(f, method, path, NULL, body, r);
}

/* Starts colo-server with yaml (written to DIR/config.yaml; relative model
 * paths are taken from DIR) and waits up to 60 s for it to be ready.
 * env_kv: "NAME=value" set in the child, or NULL. */
static inline bool srv_start_env(srv_fixture *f, const char *yaml, const char *env_kv)
{
    char cfg[300], portf[300];
    snprintf(cfg, sizeof cfg, "%s/config.yaml", f->dir);
    snprintf(portf, sizeof portf, "%s/port", f->dir);
    snprintf(f->log, sizeof f->log, "%s/server.log", f->dir);
    unlink(portf);
    if (!srv_write(f, "config.yaml", yaml))
        return false;
    f->pid = fork();
    if (f->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed test never leaves a server behind */
        int fd = open(f->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        setenv("XDG_STATE_HOME", f->dir, 1); /* the ledger's default folder: each server its own */
        if (env_kv)
            putenv((char *)env_kv);
        execl(COLO_BINARY_DIR "/colo-server", "colo-server", "--config", cfg, "--port-file", portf, (char *)NULL);
        _exit(127);
    }
    if (f->pid < 0)
        return false;
    uint64_t t0 = srv_now_ms();
    while (srv_now_ms() - t0 < 60000) {
        int st;
        if (waitpid(f->pid, &st, WNOHANG) == f->pid) {
            f->pid = 0;
            f->exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
            return false;
        }
        FILE *fp = fopen(portf, "r");
        if (fp) {
            int ok = fscanf(fp, "%d", &f->port);
            fclose(fp);
            srv_resp r;
            if (ok == 1 && f->port > 0 && srv_http(f, "GET", "/health/ready", NULL, &r)) {
                int s = r.status;
                srv_resp_free(&r);
                if (s == 200)
                    return true;
            }
        }
        srv_sleep_ms(20);
    }
    return false;
}

static inline bool srv_start(srv_fixture *f, const char *yaml) { return srv_start_env(f, yaml, NULL); }
static inline int srv_stop(srv_fixture *f);

/* Runs colo-server on yaml and returns its exit status (for configs meant
 * to fail at startup); the log is in f->log. */
static inline int srv_run_to_exit(srv_fixture *f, const char *yaml)
{
    f->exit_code = -1;
    if (srv_start(f, yaml)) {
        srv_stop(f);
        return -2; /* it started */
    }
    if (f->pid > 0) { /* never became ready */
        kill(f->pid, SIGKILL);
        waitpid(f->pid, NULL, 0);
        f->pid = 0;
        return -1;
    }
    return f->exit_code;
}

/* SIGTERM, then waits up to 30 s; the exit code, or -1 (killed). */
static inline int srv_stop(srv_fixture *f)
{
    if (f->pid <= 0)
        return -1;
    kill(f->pid, SIGTERM);
    uint64_t t0 = srv_now_ms();
    int st = 0;
    while (waitpid(f->pid, &st, WNOHANG) == 0) {
        if (srv_now_ms() - t0 > 30000) {
            kill(f->pid, SIGKILL);
            waitpid(f->pid, &st, 0);
            f->pid = 0;
            return -1;
        }
        srv_sleep_ms(10);
    }
    f->pid = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The server's log, malloc'd (for messages in assertions). */
static inline char *srv_log(srv_fixture *f)
{
    FILE *fp = fopen(f->log, "r");
    if (!fp)
        return strdup("");
    char *buf = malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, (1 << 20) - 1, fp) : 0;
    fclose(fp);
    if (buf)
        buf[n] = 0;
    return buf;
}

/* The body of r as JSON (NULL when it is not). */
/* (generated text may hold U+0000, which JSON writes as \u0000) */
/* Whether the server's log comes to hold what within about 5 s (it says
 * what it lacked otherwise). */
static inline bool srv_log_has(srv_fixture *f, const char *what)
{
    for (int i = 0; i < 500; i++) {
        char *log = srv_log(f);
        bool ok = log && strstr(log, what);
        free(log);
        if (ok)
            return true;
        srv_sleep_ms(10);
    }
    char *log = srv_log(f);
    fprintf(stderr, "not in the log: %s\n%s\n", what, log ? log : "");
    free(log);
    return false;
}

static inline json_t *srv_json(const srv_resp *r) { return r->body ? json_loads(r->body, JSON_ALLOW_NUL, NULL) : NULL; }

/* GET path; the answer's JSON (NULL when it is not JSON), its status in *status. */
static inline json_t *srv_get_json(srv_fixture *f, const char *path, int *status)
{
    srv_resp r;
    *status = 0;
    if (!srv_http(f, "GET", path, NULL, &r))
        return NULL;
    *status = r.status;
    json_t *j = srv_json(&r);
    srv_resp_free(&r);
    return j;
}

/* /v1/stats at a point taken after the requests made so far: its seq
 * moved on twice past the first answer. */
static inline json_t *srv_fresh_stats(srv_fixture *f)
{
    int status;
    json_t *s0 = srv_get_json(f, "/v1/stats", &status);
    assert_int_equal(status, 200);
    json_int_t seq0 = json_integer_value(json_object_get(s0, "seq"));
    json_decref(s0);
    for (int i = 0; i < 500; i++) {
        srv_sleep_ms(20);
        json_t *s = srv_get_json(f, "/v1/stats", &status);
        assert_int_equal(status, 200);
        if (json_integer_value(json_object_get(s, "seq")) >= seq0 + 2)
            return s;
        json_decref(s);
    }
    fail_msg("/v1/stats took no new point");
    return NULL;
}

/* A header's value in r (copied into out), or NULL. */
static inline const char *srv_header(const srv_resp *r, const char *name, char *out, size_t cap)
{
    char key[128];
    snprintf(key, sizeof key, "\r\n%s:", name);
    const char *h = strcasestr(r->head, key);
    if (!h)
        return NULL;
    h += strlen(key);
    while (*h == ' ')
        h++;
    size_t n = strcspn(h, "\r\n");
    if (n >= cap)
        n = cap - 1;
    memcpy(out, h, n);
    out[n] = 0;
    return out;
}

/* Splits an SSE body into events: names[i] ("" for unnamed) and data[i],
 * both malloc'd. Returns the count (at most max). */
static inline int srv_sse(const char *body, char **names, char **data, int max)
{
    int n = 0;
    const char *p = body;
    while (p && *p && n < max) {
        const char *end = strstr(p, "\n\n");
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char *ev = strndup(p, len);
        char *name = strdup(""), *d = strdup("");
        for (char *line = strtok(ev, "\n"); line; line = strtok(NULL, "\n")) {
            if (!strncmp(line, "event: ", 7)) {
                free(name);
                name = strdup(line + 7);
            } else if (!strncmp(line, "data: ", 6)) {
                free(d);
                d = strdup(line + 6);
            }
        }
        free(ev);
        names[n] = name;
        data[n] = d;
        n++;
        p = end ? end + 2 : NULL;
    }
    return n;
}

/* Sends n requests (each complete raw bytes) on n connections at once and
 * parses each response into r[i] (status 0 when none came). */
static inline void srv_concurrent(int port, const char **raw, int n, srv_resp *r)
{
    int fd[64];
    for (int i = 0; i < n && i < 64; i++) {
        fd[i] = srv_connect(port);
        if (fd[i] >= 0)
            srv_send_all(fd[i], raw[i], strlen(raw[i]));
    }
    for (int i = 0; i < n && i < 64; i++) {
        memset(&r[i], 0, sizeof r[i]);
        if (fd[i] < 0)
            continue;
        size_t len;
        char *buf = srv_read_all(fd[i], 20000, &len);
        if (buf && srv_parse(buf, len, &r[i]) == 0)
            r[i].status = 0;
        free(buf);
        close(fd[i]);
    }
}

/* A POST with Connection: close as raw bytes (malloc'd). */
static inline char *srv_post_raw(const char *path, const char *extra_headers, const char *body)
{
    size_t cap = strlen(body) + strlen(path) + (extra_headers ? strlen(extra_headers) : 0) + 200;
    char *req = malloc(cap);
    if (req)
        snprintf(req, cap, "POST %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n%sContent-Length: %zu\r\n\r\n%s", path,
                 extra_headers ? extra_headers : "", strlen(body), body);
    return req;
}

static inline void srv_cleanup(srv_fixture *f)
{
    if (f->pid > 0)
        srv_stop(f);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", f->dir);
}

/* srv_start, with colo-server's log on stderr when it did not start. */
static inline bool srv_start_logged(srv_fixture *f, const char *yaml)
{
    if (srv_start(f, yaml))
        return true;
    char *log = srv_log(f);
    fprintf(stderr, "colo-server did not start:\n%s\n", log ? log : "");
    free(log);
    return false;
}

/* Runs colo-server --check-config on yaml (written as check.yaml in f's
 * folder) for a model whose fraction is far too small, and reads what it
 * needs: "needs N bytes (... KV cache for one T-token sequence K)" into
 * *need_bytes and *kv_bytes. False, with the output on stderr, otherwise. */
static inline bool srv_check_config_need(srv_fixture *f, const char *yaml, double *need_bytes, double *kv_bytes)
{
    char cfg[400], cmd[1200];
    if (!srv_write(f, "check.yaml", yaml))
        return false;
    snprintf(cfg, sizeof cfg, "%s/check.yaml", f->dir);
    snprintf(cmd, sizeof cmd, "'%s/colo-server' --config '%s' --check-config 2>&1", COLO_BINARY_DIR, cfg);
    FILE *p = popen(cmd, "r");
    if (!p)
        return false;
    char out[2048] = "";
    size_t len = fread(out, 1, sizeof out - 1, p);
    out[len] = 0;
    pclose(p);
    const char *a = strstr(out, "needs "), *b = strstr(out, "-token sequence ");
    if (!a || !b) {
        fprintf(stderr, "unexpected --check-config output: %s\n", out);
        return false;
    }
    *need_bytes = strtod(a + 6, NULL);
    *kv_bytes = strtod(b + 16, NULL);
    return *need_bytes > 0 && *kv_bytes > 0;
}

/* A group teardown: stops the server (0 when it exited cleanly) and removes its folder. */
static inline int srv_group_teardown(srv_fixture *f)
{
    int code = srv_stop(f);
    srv_cleanup(f);
    return code == 0 ? 0 : -1;
}

/* POSTs body to path and returns the answer as JSON when it is 200; NULL,
 * with the status and body on stderr, otherwise. */
static inline json_t *srv_post_json(srv_fixture *f, const char *path, const char *body)
{
    srv_resp r;
    if (!srv_http(f, "POST", path, body, &r)) {
        fprintf(stderr, "POST %s %s: no answer\n", path, body);
        return NULL;
    }
    json_t *j = r.status == 200 ? srv_json(&r) : NULL;
    if (!j)
        fprintf(stderr, "POST %s %s -> %d %s\n", path, body, r.status, r.body ? r.body : "");
    srv_resp_free(&r);
    return j;
}

#endif
